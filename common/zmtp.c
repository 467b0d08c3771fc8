/*  zmtp: see zmtp.h. The wire, briefly (RFC 23/37):
      greeting  64 octets each way: %xFF 8 octets %x7F, version 3.x, the
                mechanism's name in 20 octets, as-server, 31 octets of filler
      frame     flags (1: MORE, 2: LONG, 4: COMMAND), size (1 octet, or 8 in
                network order when LONG), body
      command   a frame with COMMAND set: name length, name, data
    NULL: each side sends READY with its metadata (Socket-Type, Identity).
    CURVE (RFC 25/26): client HELLO, server WELCOME, client INITIATE, server
    READY (or ERROR), each in a command frame; after them every frame goes
    as a MESSAGE command box, whose first plaintext octet carries the MORE
    (1) and COMMAND (2) flags, sent as a data frame as libzmq does. */
#include "zmtp.h"

#include "zl_alloc.h"

#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zmq.h>

#define GREETING 64
#define CHUNK (64u * 1024)
#define F_MORE 0x01
#define F_LONG 0x02
#define F_COMMAND 0x04
#define HELLO_SIZE 200
#define WELCOME_SIZE 168
#define INITIATE_MIN 257
#define READY_MIN 30
#define MESSAGE_HEADER 16 // "\x07MESSAGE" and the short nonce
#define MESSAGE_MIN (MESSAGE_HEADER + crypto_box_MACBYTES + 1)
#define COOKIE 96 // long nonce (16) and the box of C' and s' (80)

typedef enum { ST_GREETING, ST_HANDSHAKE, ST_READY, ST_FAILED } state_t;
typedef enum {
    HS_NULL,       // NULL: waiting for the peer's READY
    HS_HELLO,      // CURVE server: waiting for HELLO
    HS_INITIATE,   // CURVE server: waiting for INITIATE
    HS_WELCOME,    // CURVE client: waiting for WELCOME
    HS_CURVE_READY // CURVE client: waiting for READY
} handshake_t;

typedef struct {
    uint8_t *data;
    size_t head, tail, cap;
} s_buf_t;

struct _zl_zmtp_t {
    zl_zmtp_opts_t opts;
    state_t state;
    handshake_t hs;
    s_buf_t in, out;
    s_buf_t plain;   // CURVE: this parse's opened boxes (frames point into it)
    s_buf_t scratch; // CURVE: a frame's plaintext before it is boxed
    size_t in_need;  // bytes the frame under way needs in `in`, 0 if none
    uint8_t peer_minor;
    bool greeted; // the rest of our greeting went out (after the peer's first 11 octets)
    uint8_t identity[ZL_ZMTP_IDENTITY_MAX];
    size_t identity_len;
    uint32_t peer_ttl_ms;
    zl_zmtp_failure_t failure;
    char error[192];
    // CURVE
    uint8_t cn_public[ZL_ZMTP_KEY], cn_secret[ZL_ZMTP_KEY]; // this side's transient pair
    uint8_t cn_peer[ZL_ZMTP_KEY];                           // the peer's transient key
    uint8_t precom[crypto_box_BEFORENMBYTES];
    uint8_t cookie_key[crypto_secretbox_KEYBYTES];
    uint8_t peer_key[ZL_ZMTP_KEY]; // server: the client's permanent key
    bool has_peer_key;
    uint64_t cn_nonce, cn_peer_nonce;
};

// ---------------------------------------------------------------- buffers
static void
s_buf_reserve (s_buf_t *b, size_t room)
{
    if (b->data && b->cap - b->tail >= room) // a buffer even for 0 (NULL + 0 is undefined)
        return;
    if (b->head > 0) { // slide what is left to the front
        memmove (b->data, b->data + b->head, b->tail - b->head);
        b->tail -= b->head;
        b->head = 0;
        if (b->cap - b->tail >= room)
            return;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->tail < room)
        cap *= 2;
    b->data = zl_realloc (b->data, cap);
    b->cap = cap;
}

static uint8_t *
s_buf_append (s_buf_t *b, size_t n)
{
    s_buf_reserve (b, n);
    uint8_t *at = b->data + b->tail;
    b->tail += n;
    return at;
}

static void
s_buf_put (s_buf_t *b, const void *data, size_t n)
{
    if (n)
        memcpy (s_buf_append (b, n), data, n);
}

static void
s_buf_free (s_buf_t *b)
{
    if (b->data)
        sodium_memzero (b->data, b->cap); // handshakes and plaintexts pass through
    free (b->data);
    memset (b, 0, sizeof *b);
}

static void
s_put_be64 (uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

static uint64_t
s_be64 (const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static uint32_t
s_be32 (const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

// ---------------------------------------------------------------- failures
static zl_zmtp_rc_t
s_fail (zl_zmtp_t *self, zl_zmtp_failure_t why, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (self->error, sizeof self->error, fmt, ap);
    va_end (ap);
    self->failure = why;
    self->state = ST_FAILED;
    return ZL_ZMTP_ERROR;
}

// ---------------------------------------------------------------- frames out
static void
s_frame_header (zl_zmtp_t *self, uint8_t flags, size_t size)
{
    if (size > 255) {
        uint8_t *h = s_buf_append (&self->out, 9);
        h[0] = flags | F_LONG;
        s_put_be64 (h + 1, size);
    } else {
        uint8_t *h = s_buf_append (&self->out, 2);
        h[0] = flags;
        h[1] = (uint8_t)size;
    }
}

static void
s_nonce (uint8_t nonce[crypto_box_NONCEBYTES], const char *prefix, const uint8_t *tail,
         size_t tail_len)
{
    size_t n = crypto_box_NONCEBYTES - tail_len;
    memcpy (nonce, prefix, n);
    memcpy (nonce + n, tail, tail_len);
}

//  A frame after the handshake: as it is (NULL), or boxed in a MESSAGE
//  (CURVE). `command`: a command (PING, PONG) rather than data.
static void
s_send_frame (zl_zmtp_t *self, const void *data, size_t size, bool more, bool command)
{
    if (!self->opts.curve) {
        s_frame_header (self, (uint8_t)((more ? F_MORE : 0) | (command ? F_COMMAND : 0)), size);
        s_buf_put (&self->out, data, size);
        return;
    }
    self->scratch.head = self->scratch.tail = 0;
    uint8_t *plain = s_buf_append (&self->scratch, 1 + size);
    plain[0] = (uint8_t)((more ? 1 : 0) | (command ? 2 : 0));
    if (size)
        memcpy (plain + 1, data, size);
    size_t body = MESSAGE_HEADER + crypto_box_MACBYTES + 1 + size;
    s_frame_header (self, 0, body); // a data frame, as libzmq sends it
    uint8_t *m = s_buf_append (&self->out, body);
    memcpy (m, "\x07MESSAGE", 8);
    s_put_be64 (m + 8, self->cn_nonce++);
    uint8_t nonce[crypto_box_NONCEBYTES];
    s_nonce (nonce, self->opts.server ? "CurveZMQMESSAGES" : "CurveZMQMESSAGEC", m + 8, 8);
    crypto_box_easy_afternm (m + MESSAGE_HEADER, plain, 1 + size, nonce, self->precom);
}

//  A handshake command, always in the clear: name, then `data`.
static void
s_send_command (zl_zmtp_t *self, const char *name, const void *data, size_t size)
{
    size_t n = strlen (name);
    s_frame_header (self, F_COMMAND, 1 + n + size);
    uint8_t len = (uint8_t)n;
    s_buf_put (&self->out, &len, 1);
    s_buf_put (&self->out, name, n);
    s_buf_put (&self->out, data, size);
}

// Metadata: Socket-Type only (the broker names its peers itself).
static size_t
s_metadata (const zl_zmtp_t *self, uint8_t *out, size_t cap)
{
    static const char name[] = "Socket-Type";
    size_t type = strlen (self->opts.socket_type), n = 1 + sizeof name - 1 + 4 + type;
    if (n > cap)
        return 0;
    out[0] = sizeof name - 1;
    memcpy (out + 1, name, sizeof name - 1);
    uint8_t *v = out + 1 + sizeof name - 1;
    v[0] = v[1] = v[2] = 0;
    v[3] = (uint8_t)type;
    memcpy (v + 4, self->opts.socket_type, type);
    return n;
}

// ---------------------------------------------------------------- metadata in
static bool
s_type_fits (const char *ours, const char *theirs, size_t len)
{
    static const char *pairs[][2] = {{"ROUTER", "DEALER"}, {"ROUTER", "REQ"}, {"ROUTER", "ROUTER"},
                                     {"DEALER", "ROUTER"}, {"DEALER", "REP"}, {"DEALER", "DEALER"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (!strcmp (ours, pairs[i][0]) && strlen (pairs[i][1]) == len &&
            !memcmp (theirs, pairs[i][1], len))
            return true;
    return false;
}

//  The peer's metadata: its Socket-Type must fit ours; its Identity is kept.
static zl_zmtp_rc_t
s_parse_metadata (zl_zmtp_t *self, const uint8_t *p, size_t size)
{
    bool typed = false;
    while (size > 0) {
        size_t name_len = p[0];
        if (name_len == 0 || 1 + name_len + 4 > size)
            return s_fail (self, ZL_ZMTP_FAIL_PROTOCOL, "malformed metadata in the handshake");
        const char *name = (const char *)p + 1;
        uint32_t value_len = s_be32 (p + 1 + name_len);
        const uint8_t *value = p + 1 + name_len + 4;
        if (value_len > size - 1 - name_len - 4)
            return s_fail (self, ZL_ZMTP_FAIL_PROTOCOL, "malformed metadata in the handshake");
        if (name_len == 11 && !strncasecmp (name, "Socket-Type", 11)) {
            if (!s_type_fits (self->opts.socket_type, (const char *)value, value_len))
                return s_fail (self, ZL_ZMTP_FAIL_PROTOCOL,
                               "a %.*s socket cannot talk to a %s socket",
                               (int)(value_len > 16 ? 16 : value_len), (const char *)value,
                               self->opts.socket_type);
            typed = true;
        } else if (name_len == 8 && !strncasecmp (name, "Identity", 8)) {
            self->identity_len = value_len > ZL_ZMTP_IDENTITY_MAX ? 0 : value_len;
            memcpy (self->identity, value, self->identity_len);
        }
        size_t step = 1 + name_len + 4 + value_len;
        p += step;
        size -= step;
    }
    if (!typed)
        return s_fail (self, ZL_ZMTP_FAIL_PROTOCOL, "the peer's handshake names no Socket-Type");
    return ZL_ZMTP_AGAIN;
}

// ---------------------------------------------------------------- handshakes
static zl_zmtp_rc_t
s_ready (zl_zmtp_t *self)
{
    self->state = ST_READY;
    return ZL_ZMTP_READY;
}

static void
s_send_null_ready (zl_zmtp_t *self)
{
    uint8_t meta[64];
    s_send_command (self, "READY", meta, s_metadata (self, meta, sizeof meta));
}

static zl_zmtp_rc_t
s_send_hello (zl_zmtp_t *self)
{
    uint8_t hello[HELLO_SIZE] = {5, 'H', 'E', 'L', 'L', 'O', 1, 0};
    crypto_box_keypair (self->cn_public, self->cn_secret);
    memcpy (hello + 80, self->cn_public, ZL_ZMTP_KEY);
    s_put_be64 (hello + 112, self->cn_nonce++);
    uint8_t nonce[crypto_box_NONCEBYTES], zeros[64] = {0};
    s_nonce (nonce, "CurveZMQHELLO---", hello + 112, 8);
    if (crypto_box_easy (hello + 120, zeros, sizeof zeros, nonce, self->opts.server_key,
                         self->cn_secret) != 0)
        return s_fail (self, ZL_ZMTP_FAIL_CRYPTO, "the server key is not a usable CURVE key");
    // a command frame of its own, the name inside the 200 octets
    s_frame_header (self, F_COMMAND, sizeof hello);
    s_buf_put (&self->out, hello, sizeof hello);
    return ZL_ZMTP_AGAIN;
}

static zl_zmtp_rc_t
s_on_hello (zl_zmtp_t *self, const uint8_t *c, size_t size)
{
    if (size != HELLO_SIZE || memcmp (c, "\x05HELLO", 6) != 0)
        return s_fail (self, ZL_ZMTP_FAIL_PROTOCOL, "expected a CURVE HELLO");
    if (c[6] != 1 || c[7] != 0)
        return s_fail (self, ZL_ZMTP_FAIL_PROTOCOL, "CurveZMQ version %u.%u: only 1.0", c[6], c[7]);
    memcpy (self->cn_peer, c + 80, ZL_ZMTP_KEY);
    uint8_t nonce[crypto_box_NONCEBYTES], zeros[64];
    s_nonce (nonce, "CurveZMQHELLO---", c + 112, 8);
    if (crypto_box_open_easy (zeros, c + 120, 80, nonce, self->cn_peer, self->opts.secret_key) != 0)
        return s_fail (self, ZL_ZMTP_FAIL_CRYPTO,
                       "the CURVE HELLO does not open: the client has another server key");
    self->cn_peer_nonce = s_be64 (c + 112);

    // WELCOME: our transient key and the cookie that holds its secret half
    crypto_box_keypair (self->cn_public, self->cn_secret);
    randombytes_buf (self->cookie_key, sizeof self->cookie_key);
    uint8_t plain[ZL_ZMTP_KEY + COOKIE], cookie_plain[2 * ZL_ZMTP_KEY];
    memcpy (plain, self->cn_public, ZL_ZMTP_KEY);
    uint8_t *cookie = plain + ZL_ZMTP_KEY;
    randombytes_buf (cookie, 16);
    memcpy (cookie_plain, self->cn_peer, ZL_ZMTP_KEY);
    memcpy (cookie_plain + ZL_ZMTP_KEY, self->cn_secret, ZL_ZMTP_KEY);
    s_nonce (nonce, "COOKIE--", cookie, 16);
    crypto_secretbox_easy (cookie + 16, cookie_plain, sizeof cookie_plain, nonce, self->cookie_key);
    sodium_memzero (cookie_plain, sizeof cookie_plain);
    sodium_memzero (self->cn_secret, sizeof self->cn_secret); // the cookie keeps it

    uint8_t welcome[WELCOME_SIZE] = {7, 'W', 'E', 'L', 'C', 'O', 'M', 'E'};
    randombytes_buf (welcome + 8, 16);
    s_nonce (nonce, "WELCOME-", welcome + 8, 16);
    int rc = crypto_box_easy (welcome + 24, plain, sizeof plain, nonce, self->cn_peer,
                              self->opts.secret_key);
    sodium_memzero (plain, sizeof plain);
    if (rc != 0) // a low-order transient key: no shared secret
        return s_fail (self, ZL_ZMTP_FAIL_CRYPTO, "the CURVE HELLO's key is not usable");
    s_frame_header (self, F_COMMAND, sizeof welcome);
    s_buf_put (&self->out, welcome, sizeof welcome);
    self->hs = HS_INITIATE;
    return ZL_ZMTP_AGAIN;
}

static zl_zmtp_rc_t
s_on_initiate (zl_zmtp_t *self, const uint8_t *c, size_t size)
{
    if (size < INITIATE_MIN || memcmp (c, "\x08INITIATE", 9) != 0)
        return s_fail (self, ZL_ZMTP_FAIL_PROTOCOL, "expected a CURVE INITIATE");
    const uint8_t *cookie = c + 9;
    uint8_t nonce[crypto_box_NONCEBYTES], cookie_plain[2 * ZL_ZMTP_KEY];
    s_nonce (nonce, "COOKIE--", cookie, 16);
    if (crypto_secretbox_open_easy (cookie_plain, cookie + 16, 80, nonce, self->cookie_key) != 0 ||
        sodium_memcmp (cookie_plain, self->cn_peer, ZL_ZMTP_KEY) != 0) {
        sodium_memzero (cookie_plain, sizeof cookie_plain);
        return s_fail (self, ZL_ZMTP_FAIL_CRYPTO, "the CURVE INITIATE carries a bad cookie");
    }
    memcpy (self->cn_secret, cookie_plain + ZL_ZMTP_KEY, ZL_ZMTP_KEY);
    sodium_memzero (cookie_plain, sizeof cookie_plain);
    sodium_memzero (self->cookie_key, sizeof self->cookie_key);

    size_t box = size - 9 - COOKIE - 8, plain_len = box - crypto_box_MACBYTES;
    self->plain.head = self->plain.tail = 0;
    uint8_t *plain = s_buf_append (&self->plain, plain_len);
    s_nonce (nonce, "CurveZMQINITIATE", c + 9 + COOKIE, 8);
    if (crypto_box_open_easy (plain, c + 9 + COOKIE + 8, box, nonce, self->cn_peer,
                              self->cn_secret) != 0)
        return s_fail (self, ZL_ZMTP_FAIL_CRYPTO, "the CURVE INITIATE does not open");
    // the client's permanent key, vouched for by it
    const uint8_t *client = plain, *vouch = plain + ZL_ZMTP_KEY;
    uint8_t vouched[2 * ZL_ZMTP_KEY];
    s_nonce (nonce, "VOUCH---", vouch, 16);
    if (crypto_box_open_easy (vouched, vouch + 16, 80, nonce, client, self->cn_secret) != 0 ||
        sodium_memcmp (vouched, self->cn_peer, ZL_ZMTP_KEY) != 0 ||
        sodium_memcmp (vouched + ZL_ZMTP_KEY, self->opts.public_key, ZL_ZMTP_KEY) != 0)
        return s_fail (self, ZL_ZMTP_FAIL_CRYPTO, "the CURVE INITIATE's vouch does not hold");
    self->cn_peer_nonce = s_be64 (c + 9 + COOKIE);
    zl_zmtp_rc_t rc = s_parse_metadata (self, plain + ZL_ZMTP_KEY + 96, plain_len - 128);
    if (rc == ZL_ZMTP_ERROR)
        return rc;
    memcpy (self->peer_key, client, ZL_ZMTP_KEY);
    self->has_peer_key = true;
    if (self->opts.auth && !self->opts.auth (self->opts.auth_arg, client)) {
        // as libzmq's ZAP refusal: ERROR "400", which its clients report as
        // an authentication failure and do not retry with the same key
        s_send_command (self, "ERROR",
                        "\x03"
                        "400",
                        4);
        return s_fail (self, ZL_ZMTP_FAIL_AUTH, "the client's key is not let in");
    }
    rc = crypto_box_beforenm (self->precom, self->cn_peer, self->cn_secret) == 0
             ? ZL_ZMTP_AGAIN
             : s_fail (self, ZL_ZMTP_FAIL_CRYPTO, "the client's transient key is not usable");
    sodium_memzero (self->cn_secret, sizeof self->cn_secret);
    if (rc == ZL_ZMTP_ERROR)
        return rc;

    uint8_t meta[64];
    size_t meta_len = s_metadata (self, meta, sizeof meta);
    size_t body = 6 + 8 + crypto_box_MACBYTES + meta_len;
    s_frame_header (self, F_COMMAND, body);
    uint8_t *r = s_buf_append (&self->out, body);
    memcpy (r, "\x05READY", 6);
    s_put_be64 (r + 6, self->cn_nonce++);
    s_nonce (nonce, "CurveZMQREADY---", r + 6, 8);
    crypto_box_easy_afternm (r + 14, meta, meta_len, nonce, self->precom);
    return s_ready (self);
}

static zl_zmtp_rc_t
s_on_welcome (zl_zmtp_t *self, const uint8_t *c, size_t size)
{
    if (size != WELCOME_SIZE || memcmp (c, "\x07WELCOME", 8) != 0)
        return s_fail (self, ZL_ZMTP_FAIL_PROTOCOL, "expected a CURVE WELCOME");
    uint8_t nonce[crypto_box_NONCEBYTES], plain[ZL_ZMTP_KEY + COOKIE];
    s_nonce (nonce, "WELCOME-", c + 8, 16);
    if (crypto_box_open_easy (plain, c + 24, WELCOME_SIZE - 24, nonce, self->opts.server_key,
                              self->cn_secret) != 0)
        return s_fail (self, ZL_ZMTP_FAIL_CRYPTO,
                       "the CURVE WELCOME does not open: is the server key the broker's?");
    memcpy (self->cn_peer, plain, ZL_ZMTP_KEY);
    if (crypto_box_beforenm (self->precom, self->cn_peer, self->cn_secret) != 0)
        return s_fail (self, ZL_ZMTP_FAIL_CRYPTO, "the server's transient key is not usable");

    // INITIATE: the cookie back, our permanent key and its vouch, metadata
    uint8_t meta[64];
    size_t meta_len = s_metadata (self, meta, sizeof meta);
    uint8_t inner[ZL_ZMTP_KEY + 96 + sizeof meta];
    memcpy (inner, self->opts.public_key, ZL_ZMTP_KEY);
    uint8_t *vouch = inner + ZL_ZMTP_KEY, vouched[2 * ZL_ZMTP_KEY];
    randombytes_buf (vouch, 16);
    memcpy (vouched, self->cn_public, ZL_ZMTP_KEY);
    memcpy (vouched + ZL_ZMTP_KEY, self->opts.server_key, ZL_ZMTP_KEY);
    s_nonce (nonce, "VOUCH---", vouch, 16);
    if (crypto_box_easy (vouch + 16, vouched, sizeof vouched, nonce, self->cn_peer,
                         self->opts.secret_key) != 0)
        return s_fail (self, ZL_ZMTP_FAIL_CRYPTO, "the server's transient key is not usable");
    memcpy (inner + ZL_ZMTP_KEY + 96, meta, meta_len);
    size_t inner_len = ZL_ZMTP_KEY + 96 + meta_len;
    size_t body = 9 + COOKIE + 8 + crypto_box_MACBYTES + inner_len;
    s_frame_header (self, F_COMMAND, body);
    uint8_t *m = s_buf_append (&self->out, body);
    memcpy (m, "\x08INITIATE", 9);
    memcpy (m + 9, plain + ZL_ZMTP_KEY, COOKIE);
    s_put_be64 (m + 9 + COOKIE, self->cn_nonce++);
    s_nonce (nonce, "CurveZMQINITIATE", m + 9 + COOKIE, 8);
    int rc = crypto_box_easy (m + 9 + COOKIE + 8, inner, inner_len, nonce, self->cn_peer,
                              self->cn_secret);
    sodium_memzero (self->cn_secret, sizeof self->cn_secret);
    if (rc != 0)
        return s_fail (self, ZL_ZMTP_FAIL_CRYPTO, "the server's transient key is not usable");
    self->hs = HS_CURVE_READY;
    return ZL_ZMTP_AGAIN;
}

static zl_zmtp_rc_t
s_on_curve_ready (zl_zmtp_t *self, const uint8_t *c, size_t size)
{
    if (size < READY_MIN || memcmp (c, "\x05READY", 6) != 0)
        return s_fail (self, ZL_ZMTP_FAIL_PROTOCOL, "expected a CURVE READY");
    uint8_t nonce[crypto_box_NONCEBYTES];
    size_t box = size - 14;
    self->plain.head = self->plain.tail = 0;
    uint8_t *meta = s_buf_append (&self->plain, box - crypto_box_MACBYTES);
    s_nonce (nonce, "CurveZMQREADY---", c + 6, 8);
    if (crypto_box_open_easy_afternm (meta, c + 14, box, nonce, self->precom) != 0)
        return s_fail (self, ZL_ZMTP_FAIL_CRYPTO, "the CURVE READY does not open");
    self->cn_peer_nonce = s_be64 (c + 6);
    if (s_parse_metadata (self, meta, box - crypto_box_MACBYTES) == ZL_ZMTP_ERROR)
        return ZL_ZMTP_ERROR;
    return s_ready (self);
}

//  An ERROR command: a refusal. A three-digit reason is a ZAP status
//  (libzmq's servers send "400" for a key they do not let in).
static zl_zmtp_rc_t
s_on_error_command (zl_zmtp_t *self, const uint8_t *c, size_t size)
{
    size_t len = size >= 7 ? c[6] : 0;
    if (size >= 7 && len > size - 7)
        len = size - 7;
    const char *reason = (const char *)c + 7;
    bool status = len == 3 && reason[0] >= '0' && reason[0] <= '9';
    char text[64] = "";
    for (size_t i = 0; i < len && i < sizeof text - 1; i++)
        text[i] = reason[i] >= 0x20 && reason[i] < 0x7f ? reason[i] : '?';
    return s_fail (self, status ? ZL_ZMTP_FAIL_AUTH : ZL_ZMTP_FAIL_PROTOCOL,
                   "the peer refused the connection (ERROR \"%s\")", text);
}

static bool
s_is_command (const uint8_t *c, size_t size, const char *name)
{
    size_t n = strlen (name);
    return size >= 1 + n && c[0] == n && !memcmp (c + 1, name, n);
}

static zl_zmtp_rc_t
s_on_handshake (zl_zmtp_t *self, uint8_t flags, const uint8_t *c, size_t size)
{
    if (!(flags & F_COMMAND))
        return s_fail (self, ZL_ZMTP_FAIL_PROTOCOL, "a data frame before the handshake ended");
    if (s_is_command (c, size, "ERROR"))
        return s_on_error_command (self, c, size);
    switch (self->hs) {
    case HS_NULL:
        if (!s_is_command (c, size, "READY"))
            return s_fail (self, ZL_ZMTP_FAIL_PROTOCOL, "expected READY");
        if (s_parse_metadata (self, c + 6, size - 6) == ZL_ZMTP_ERROR)
            return ZL_ZMTP_ERROR;
        return s_ready (self);
    case HS_HELLO: return s_on_hello (self, c, size);
    case HS_INITIATE: return s_on_initiate (self, c, size);
    case HS_WELCOME: return s_on_welcome (self, c, size);
    case HS_CURVE_READY: return s_on_curve_ready (self, c, size);
    }
    return s_fail (self, ZL_ZMTP_FAIL_PROTOCOL, "bad handshake state");
}

//  The rest of our greeting: the minor version, the mechanism, as-server
//  and the filler.
static void
s_greet_rest (zl_zmtp_t *self)
{
    uint8_t *g = s_buf_append (&self->out, GREETING - 11);
    memset (g, 0, GREETING - 11);
    g[0] = 1;
    memcpy (g + 1, self->opts.curve ? "CURVE" : "NULL", self->opts.curve ? 5 : 4);
    g[21] = self->opts.curve && self->opts.server ? 1 : 0;
    self->greeted = true;
}

static zl_zmtp_rc_t
s_on_greeting (zl_zmtp_t *self, const uint8_t *g)
{
    const char *ours = self->opts.curve ? "CURVE" : "NULL";
    char theirs[21];
    memcpy (theirs, g + 12, 20);
    theirs[20] = '\0';
    for (int i = 0; i < 20 && theirs[i]; i++)
        if (theirs[i] < 0x20 || theirs[i] > 0x7e)
            theirs[i] = '?';
    if (strcmp (theirs, ours) != 0)
        return s_fail (self, ZL_ZMTP_FAIL_MECHANISM,
                       "the peer speaks %s and this side %s: CURVE must be on at both ends or "
                       "at neither",
                       theirs[0] ? theirs : "no mechanism", ours);
    self->peer_minor = g[10] > 3 ? 1 : g[11];
    self->state = ST_HANDSHAKE;
    if (!self->opts.curve) {
        self->hs = HS_NULL;
        s_send_null_ready (self);
    } else if (self->opts.server) {
        self->hs = HS_HELLO;
    } else {
        self->hs = HS_WELCOME;
        return s_send_hello (self);
    }
    return ZL_ZMTP_AGAIN;
}

// ---------------------------------------------------------------- commands after the handshake
static zl_zmtp_rc_t
s_on_command (zl_zmtp_t *self, const uint8_t *c, size_t size)
{
    if (s_is_command (c, size, "PING")) {
        if (size < 7)
            return s_fail (self, ZL_ZMTP_FAIL_PROTOCOL, "a PING without its TTL");
        self->peer_ttl_ms = (uint32_t)((c[5] << 8 | c[6]) * 100);
        size_t context = size - 7 > 16 ? 16 : size - 7;
        uint8_t pong[5 + 16] = {4, 'P', 'O', 'N', 'G'};
        memcpy (pong + 5, c + 7, context);
        s_send_frame (self, pong, 5 + context, false, true);
        return ZL_ZMTP_AGAIN;
    }
    if (s_is_command (c, size, "ERROR"))
        return s_on_error_command (self, c, size);
    // PONG is the peer's sign of life (the caller saw bytes arrive); the
    // rest (SUBSCRIBE, CANCEL, names to come) mean nothing on these sockets
    return ZL_ZMTP_AGAIN;
}

//  A CURVE frame after the handshake: a MESSAGE box. Its opened content
//  goes into `plain` (valid until the next zl_zmtp_in_space).
static zl_zmtp_rc_t
s_open_message (zl_zmtp_t *self, const uint8_t *c, size_t size, zl_zmtp_frame_t *frame,
                bool *command)
{
    if (size < MESSAGE_MIN || memcmp (c, "\x07MESSAGE", 8) != 0)
        return s_fail (self, ZL_ZMTP_FAIL_PROTOCOL, "expected a CURVE MESSAGE");
    uint64_t n = s_be64 (c + 8);
    if (n <= self->cn_peer_nonce)
        return s_fail (self, ZL_ZMTP_FAIL_CRYPTO, "a CURVE MESSAGE's nonce was used before");
    uint8_t nonce[crypto_box_NONCEBYTES];
    s_nonce (nonce, self->opts.server ? "CurveZMQMESSAGEC" : "CurveZMQMESSAGES", c + 8, 8);
    size_t box = size - MESSAGE_HEADER, plain_len = box - crypto_box_MACBYTES;
    self->plain.head = self->plain.tail = 0;
    uint8_t *plain = s_buf_append (&self->plain, plain_len);
    if (crypto_box_open_easy_afternm (plain, c + MESSAGE_HEADER, box, nonce, self->precom) != 0)
        return s_fail (self, ZL_ZMTP_FAIL_CRYPTO, "a CURVE MESSAGE does not open");
    self->cn_peer_nonce = n;
    if (plain[0] & ~3)
        return s_fail (self, ZL_ZMTP_FAIL_PROTOCOL, "a CURVE MESSAGE with reserved flags");
    frame->data = plain + 1;
    frame->size = plain_len - 1;
    frame->more = plain[0] & 1;
    *command = plain[0] & 2;
    return ZL_ZMTP_FRAME;
}

// ---------------------------------------------------------------- the parser
zl_zmtp_rc_t
zl_zmtp_next (zl_zmtp_t *self, zl_zmtp_frame_t *frame)
{
    for (;;) {
        if (self->state == ST_FAILED)
            return ZL_ZMTP_ERROR;
        // no buffer before the first zl_zmtp_in_space (NULL + 0 is undefined)
        const uint8_t *p = self->in.data ? self->in.data + self->in.head : NULL;
        size_t avail = self->in.tail - self->in.head;
        self->in_need = 0;
        if (self->state == ST_GREETING) {
            // refuse what is not ZMTP 3 as soon as it shows
            if (avail >= 1 && p[0] != 0xff)
                return s_fail (self, ZL_ZMTP_FAIL_PROTOCOL, "the peer does not speak ZMTP");
            if (avail >= 10 && !(p[9] & 1))
                return s_fail (self, ZL_ZMTP_FAIL_PROTOCOL, "the peer speaks ZMTP 1.0");
            if (avail >= 11 && p[10] < 3)
                return s_fail (self, ZL_ZMTP_FAIL_PROTOCOL,
                               "the peer speaks ZMTP %u.x: only 3.0 and later", p[10]);
            if (avail >= 11 && !self->greeted)
                s_greet_rest (self);
            if (avail < GREETING) {
                self->in_need = GREETING;
                return ZL_ZMTP_AGAIN;
            }
            self->in.head += GREETING;
            if (s_on_greeting (self, p) == ZL_ZMTP_ERROR)
                return ZL_ZMTP_ERROR;
            continue;
        }
        if (avail < 2) {
            self->in_need = 9;
            return ZL_ZMTP_AGAIN;
        }
        uint8_t flags = p[0];
        if (flags & ~(F_MORE | F_LONG | F_COMMAND))
            return s_fail (self, ZL_ZMTP_FAIL_PROTOCOL, "a frame with reserved flags (0x%02x)",
                           flags);
        size_t header = flags & F_LONG ? 9 : 2;
        if (avail < header) {
            self->in_need = header;
            return ZL_ZMTP_AGAIN;
        }
        uint64_t size = flags & F_LONG ? s_be64 (p + 1) : p[1];
        uint64_t limit = self->opts.max_frame + (self->opts.curve ? MESSAGE_MIN : 0);
        if (size > limit)
            return s_fail (self, ZL_ZMTP_FAIL_TOO_LARGE,
                           "a frame of %llu bytes, over the limit of %llu",
                           (unsigned long long)size, (unsigned long long)self->opts.max_frame);
        if (avail - header < size) {
            self->in_need = header + (size_t)size;
            return ZL_ZMTP_AGAIN;
        }
        const uint8_t *body = p + header;
        self->in.head += header + (size_t)size;
        if (self->state == ST_HANDSHAKE) {
            zl_zmtp_rc_t rc = s_on_handshake (self, flags, body, (size_t)size);
            if (rc != ZL_ZMTP_AGAIN)
                return rc;
            continue;
        }
        bool command = flags & F_COMMAND;
        if (self->opts.curve) {
            zl_zmtp_rc_t rc = s_open_message (self, body, (size_t)size, frame, &command);
            if (rc == ZL_ZMTP_ERROR)
                return rc;
        } else {
            frame->data = body;
            frame->size = (size_t)size;
            frame->more = flags & F_MORE;
        }
        if (command) {
            if (s_on_command (self, frame->data, frame->size) == ZL_ZMTP_ERROR)
                return ZL_ZMTP_ERROR;
            continue;
        }
        return ZL_ZMTP_FRAME;
    }
}

// ---------------------------------------------------------------- the API
zl_zmtp_t *
zl_zmtp_new (const zl_zmtp_opts_t *opts)
{
    if (opts->curve && sodium_init () < 0)
        return NULL;
    zl_zmtp_t *self = ZL_NEW (zl_zmtp_t);
    self->opts = *opts;
    if (!self->opts.max_frame || self->opts.max_frame > (1ull << 62))
        self->opts.max_frame = ZL_ZMTP_MAX_FRAME_DEFAULT;
    self->cn_nonce = 1;
    // the signature and the major version; the rest once the peer's came
    // (s_greet_rest), as libzmq does: a libzmq peer that learns our
    // mechanism before it sent its own closes without sending it, and this
    // side would not know why
    uint8_t *g = s_buf_append (&self->out, 11);
    memset (g, 0, 11);
    g[0] = 0xff;
    g[8] = 1; // the signature's padding, as libzmq writes it
    g[9] = 0x7f;
    g[10] = 3;
    return self;
}

void
zl_zmtp_destroy (zl_zmtp_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_zmtp_t *self = *self_p;
    s_buf_free (&self->in);
    s_buf_free (&self->out);
    s_buf_free (&self->plain);
    s_buf_free (&self->scratch);
    sodium_memzero (self, sizeof *self);
    free (self);
    *self_p = NULL;
}

uint8_t *
zl_zmtp_in_space (zl_zmtp_t *self, size_t want, size_t *room)
{
    size_t avail = self->in.tail - self->in.head;
    if (avail == 0)
        self->in.head = self->in.tail = 0;
    if (want == 0)
        want = CHUNK;
    if (self->in_need > avail && self->in_need - avail > want)
        want = self->in_need - avail;
    // a buffer grown for one long frame goes back to its usual size when empty
    if (avail == 0 && self->in.cap > 4 * CHUNK && want <= CHUNK) {
        free (self->in.data);
        self->in.data = NULL;
        self->in.cap = 0;
    }
    // slide the frame under way to the front before it would need a larger buffer
    if (self->in.cap - self->in.tail < want && self->in.head > 0) {
        memmove (self->in.data, self->in.data + self->in.head, avail);
        self->in.tail = avail;
        self->in.head = 0;
    }
    s_buf_reserve (&self->in, want);
    *room = self->in.cap - self->in.tail;
    return self->in.data + self->in.tail;
}

void
zl_zmtp_in_commit (zl_zmtp_t *self, size_t n)
{
    self->in.tail += n;
}

bool
zl_zmtp_buffered (const zl_zmtp_t *self)
{
    return self->in.tail > self->in.head;
}

bool
zl_zmtp_whole_frame (const zl_zmtp_t *self)
{
    size_t avail = self->in.tail - self->in.head;
    if (self->state == ST_FAILED || avail == 0)
        return false;
    const uint8_t *p = self->in.data + self->in.head;
    if (self->state == ST_GREETING)
        return avail >= GREETING || (avail >= 11 && !self->greeted);
    if (avail < 2)
        return false;
    size_t header = p[0] & F_LONG ? 9 : 2;
    if (avail < header)
        return false;
    uint64_t size = p[0] & F_LONG ? s_be64 (p + 1) : p[1];
    return avail - header >= size;
}

int
zl_zmtp_send (zl_zmtp_t *self, const void *data, size_t size, bool more)
{
    if (self->state != ST_READY)
        return -1;
    s_send_frame (self, data, size, more, false);
    return 0;
}

void
zl_zmtp_ping (zl_zmtp_t *self, uint32_t ttl_ms)
{
    if (self->state != ST_READY || self->peer_minor < 1)
        return;
    uint32_t ds = ttl_ms / 100 > 0xffff ? 0xffff : ttl_ms / 100;
    uint8_t ping[7] = {4, 'P', 'I', 'N', 'G', (uint8_t)(ds >> 8), (uint8_t)ds};
    s_send_frame (self, ping, sizeof ping, false, true);
}

size_t
zl_zmtp_out (const zl_zmtp_t *self, const uint8_t **data)
{
    // no buffer once a burst's was let go (NULL + 0 is undefined)
    *data = self->out.data ? self->out.data + self->out.head : NULL;
    return self->out.tail - self->out.head;
}

void
zl_zmtp_sent (zl_zmtp_t *self, size_t n)
{
    self->out.head += n;
    if (self->out.head == self->out.tail) {
        self->out.head = self->out.tail = 0;
        if (self->out.cap > 4 * CHUNK) { // one burst's buffer is not kept
            free (self->out.data);
            self->out.data = NULL;
            self->out.cap = 0;
        }
    }
}

bool
zl_zmtp_ready (const zl_zmtp_t *self)
{
    return self->state == ST_READY;
}

const char *
zl_zmtp_error (const zl_zmtp_t *self)
{
    return self->error;
}

zl_zmtp_failure_t
zl_zmtp_failure (const zl_zmtp_t *self)
{
    return self->failure;
}

const uint8_t *
zl_zmtp_peer_identity (const zl_zmtp_t *self, size_t *len)
{
    *len = self->identity_len;
    return self->identity;
}

const uint8_t *
zl_zmtp_peer_key (const zl_zmtp_t *self)
{
    return self->has_peer_key && self->state == ST_READY ? self->peer_key : NULL;
}

uint32_t
zl_zmtp_peer_ttl_ms (const zl_zmtp_t *self)
{
    return self->peer_ttl_ms;
}

int
zl_zmtp_z85_key (const char *text, uint8_t key[ZL_ZMTP_KEY])
{
    if (!text || strlen (text) != 40)
        return -1;
    return zmq_z85_decode (key, text) ? 0 : -1;
}
