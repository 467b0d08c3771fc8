#include "wire.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zmq.h>

int
zl_wire_send (void *sock, zl_codec_t *codec, const zl_msg_t *msg, int flags)
{
    size_t size;
    const void *data = zl_codec_encode (codec, msg, &size);
    if (!data) {
        errno = EINVAL;
        return -1;
    }
    return zmq_send (sock, data, size, flags) < 0 ? -1 : 0;
}

int
zl_wire_send_to (void *sock, const zl_peer_t *peer, zl_codec_t *codec, const zl_msg_t *msg)
{
    size_t size;
    const void *data = zl_codec_encode (codec, msg, &size);
    if (!data) {
        errno = EINVAL;
        return -1;
    }
    if (zmq_send (sock, peer->data, peer->len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return -1;
    return zmq_send (sock, data, size, ZMQ_DONTWAIT) < 0 ? -1 : 0;
}

int
zl_wire_publish (void *sock, const char *topic, zl_codec_t *codec, const zl_msg_t *msg)
{
    size_t size;
    const void *data = zl_codec_encode (codec, msg, &size);
    if (!data) {
        errno = EINVAL;
        return -1;
    }
    if (zmq_send (sock, topic, strlen (topic), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return -1;
    return zmq_send (sock, data, size, ZMQ_DONTWAIT) < 0 ? -1 : 0;
}

static int
s_parse_scaled (const char *text, uint64_t *out, const char *const *units, const uint64_t *scales,
                int n_units)
{
    if (!text || !*text)
        return -1;
    errno = 0;
    char *end;
    double v = strtod (text, &end);
    if (errno || end == text || !(v >= 0)) // also refuses "nan"
        return -1;
    while (*end == ' ')
        end++;
    uint64_t scale = 0;
    if (*end == '\0')
        scale = scales[0];
    for (int i = 0; i < n_units && !scale; i++)
        if (strcasecmp (end, units[i]) == 0)
            scale = scales[i];
    if (!scale)
        return -1;
    double r = v * (double)scale;
    if (r > 1.8e19)
        return -1;
    *out = (uint64_t)(r + 0.5);
    return 0;
}

int
zl_parse_duration_ms (const char *text, uint64_t *ms)
{
    static const char *const units[] = {"ms", "s", "m", "h", "d"};
    static const uint64_t scales[] = {1, 1000, 60000, 3600000, 86400000};
    return s_parse_scaled (text, ms, units, scales, 5);
}

int
zl_parse_size (const char *text, uint64_t *bytes)
{
    static const char *const units[] = {"b", "k", "kib", "kb", "m", "mib", "mb", "g", "gib", "gb"};
    static const uint64_t scales[] = {
        1,       1024,    1024,          1000,          1048576,
        1048576, 1000000, 1073741824ULL, 1073741824ULL, 1000000000ULL};
    return s_parse_scaled (text, bytes, units, scales, 10);
}

int
zl_parse_u64 (const char *text, uint64_t *value)
{
    if (!text || !isdigit ((unsigned char)*text)) // strtoull takes " -5" as 2^64-5
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull (text, &end, 10);
    if (errno || *end != '\0')
        return -1;
    *value = v;
    return 0;
}
