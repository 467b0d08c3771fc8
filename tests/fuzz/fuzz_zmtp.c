/*  fuzz_zmtp: libFuzzer target for zlane's ZMTP engine (common/zmtp.c).
    An input is a mode byte and the peer's bytes:

        mode:u8  peer-bytes

    mode (fuzz_zmtp.h): the engine's role (server or client), its mechanism
    (NULL or CURVE, with fixed keys: the server lets in one client key), how
    the peer's bytes are cut into reads (FZ_CHUNKING: all at once, 1, 2, 7,
    63 bytes, 64 and 65 in turn, a mix, a pseudo-random walk), whether the
    harness sends frames and a PING once the handshake ended, and whether it
    writes out half of the output at a time. A fresh engine (max_frame 4096)
    takes the reads; after each (and once before the first),
    zl_zmtp_next runs until AGAIN or ERROR, every frame's bytes are read,
    and the output is written out.

    It aborts when an invariant breaks: READY once, and frames only after
    it; a frame no longer than max_frame; a CURVE server ready only with
    the one key its auth lets in; after ERROR, not ready, a failure class
    and a reason, ERROR again, zl_zmtp_send -1; zl_zmtp_send -1 exactly
    when not ready; in_space's room at least what was asked. The output as
    a whole must be ZMTP: a greeting for this side, then frames whose
    flags, lengths and command names fit the mechanism and role. With NULL
    a mirror engine (the other role) parses the output: it must reach READY
    whenever the engine did and never fail, and receive exactly the frames
    the harness sent. libsodium's random bytes are deterministic (reset at
    every input), so a run is reproducible. ZLANE_FUZZ_VERBOSE=1 prints
    each input's outcome. */
#include "fuzz_zmtp.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SENDS 8

static fz_rng_t s_rng;
static fz_keys_t s_keys;
static volatile uint8_t s_sink; // frame bytes are read into it

static void
s_fail (const char *what)
{
    fprintf (stderr, "fuzz_zmtp: invariant broken: %s\n", what);
    abort ();
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            s_fail (#cond);                                                                        \
    } while (0)

typedef struct {
    uint8_t *data;
    size_t len, cap;
} acc_t;

static void
s_acc (acc_t *a, const uint8_t *data, size_t n)
{
    if (a->len + n > a->cap) {
        a->cap = (a->len + n) * 2;
        a->data = realloc (a->data, a->cap);
        if (!a->data)
            abort ();
    }
    if (n)
        memcpy (a->data + a->len, data, n);
    a->len += n;
}

typedef struct {
    uint8_t mode;
    zl_zmtp_t *z;
    bool ready, failed, pinged;
    int frames; // data frames that came in
    acc_t out;  // everything the engine wrote
    int sends;  // frames the harness sent
} run_t;

// the frames the harness sends, in turn: short, empty, around the LONG
// header, over max_frame (the limit is the peer's), one burst of 300 kB
static const size_t s_send_sizes[MAX_SENDS] = {5, 0, 255, 256, 1, 4096, 4097, 300000};

static uint8_t
s_send_byte (int i, size_t j)
{
    return (uint8_t)(j * 7 + (size_t)i);
}

static size_t
s_chunk (unsigned pattern, size_t k)
{
    static const size_t mixed[] = {1, 9, 64, 200, 3, 65, 2, 257};
    switch (pattern) {
    case 0: return SIZE_MAX; // all at once
    case 1: return 1;
    case 2: return 2;
    case 3: return 7;
    case 4: return 63;
    case 5: return k % 2 ? 65 : 64; // across the greeting's end
    case 6: return mixed[k % 8];
    default: return 1 + (k * 37 + 11) % 97;
    }
}

//  Write out what the engine queued (half of it at a time when FZ_SLOW,
//  unless `all`), reading every byte.
static void
s_drain (run_t *r, bool all)
{
    const uint8_t *data;
    size_t n;
    while ((n = zl_zmtp_out (r->z, &data)) > 0) {
        size_t take = all || !(r->mode & FZ_SLOW) ? n : (n + 1) / 2;
        s_acc (&r->out, data, take);
        zl_zmtp_sent (r->z, take);
        if (!all)
            break;
    }
}

static void
s_check_failed (run_t *r)
{
    CHECK (!zl_zmtp_ready (r->z));
    zl_zmtp_failure_t why = zl_zmtp_failure (r->z);
    CHECK (why > ZL_ZMTP_FAIL_NONE && why <= ZL_ZMTP_FAIL_TOO_LARGE);
    CHECK (zl_zmtp_error (r->z)[0] != '\0');
    CHECK (zl_zmtp_peer_key (r->z) == NULL);
    const uint8_t *out;
    size_t before = zl_zmtp_out (r->z, &out);
    CHECK (zl_zmtp_send (r->z, "x", 1, false) == -1);
    zl_zmtp_ping (r->z, 1000);
    CHECK (zl_zmtp_out (r->z, &out) == before); // nothing queued after an error
    zl_zmtp_frame_t f;
    CHECK (zl_zmtp_next (r->z, &f) == ZL_ZMTP_ERROR); // it stays failed
}

static void
s_on_ready (run_t *r)
{
    CHECK (!r->ready);
    CHECK (zl_zmtp_ready (r->z));
    r->ready = true;
    const uint8_t *key = zl_zmtp_peer_key (r->z);
    if ((r->mode & FZ_CURVE) && !(r->mode & FZ_CLIENT)) {
        CHECK (key != NULL);
        CHECK (memcmp (key, s_keys.client_public, ZL_ZMTP_KEY) == 0); // auth lets in no other
    } else {
        CHECK (key == NULL);
    }
}

//  Parse until AGAIN or ERROR, checking every step.
static void
s_parse (run_t *r)
{
    for (;;) {
        zl_zmtp_frame_t f = {0};
        zl_zmtp_rc_t rc = zl_zmtp_next (r->z, &f);
        if (rc == ZL_ZMTP_AGAIN) {
            CHECK (zl_zmtp_ready (r->z) == r->ready);
            CHECK (zl_zmtp_failure (r->z) == ZL_ZMTP_FAIL_NONE);
            return;
        }
        if (rc == ZL_ZMTP_ERROR) {
            r->failed = true;
            s_check_failed (r);
            return;
        }
        if (rc == ZL_ZMTP_READY) {
            s_on_ready (r);
            continue;
        }
        CHECK (rc == ZL_ZMTP_FRAME);
        CHECK (r->ready && zl_zmtp_ready (r->z));
        CHECK (f.size <= FZ_MAX_FRAME);
        CHECK (f.size == 0 || f.data != NULL);
        r->frames++;
        uint8_t sum = 0;
        for (size_t i = 0; i < f.size; i++)
            sum ^= f.data[i];
        s_sink = sum;
    }
}

static void
s_check_peer_info (run_t *r)
{
    size_t len;
    const uint8_t *id = zl_zmtp_peer_identity (r->z, &len);
    CHECK (len <= ZL_ZMTP_IDENTITY_MAX);
    uint8_t sum = 0;
    for (size_t i = 0; i < len; i++)
        sum ^= id[i];
    s_sink = sum;
    CHECK (zl_zmtp_peer_ttl_ms (r->z) <= 0xffffu * 100);
}

//  Once ready: a frame (FZ_SEND), a PING (FZ_PING, once). Before: sending
//  is refused and queues nothing.
static void
s_act (run_t *r)
{
    if (!(r->mode & (FZ_SEND | FZ_PING)) || r->failed)
        return;
    const uint8_t *out;
    size_t before = zl_zmtp_out (r->z, &out);
    if (!r->ready) {
        CHECK (zl_zmtp_send (r->z, "early", 5, false) == -1);
        zl_zmtp_ping (r->z, 1000);
        CHECK (zl_zmtp_out (r->z, &out) == before);
        return;
    }
    if ((r->mode & FZ_SEND) && r->sends < MAX_SENDS) {
        size_t n = s_send_sizes[r->sends];
        uint8_t *frame = malloc (n ? n : 1);
        if (!frame)
            abort ();
        for (size_t j = 0; j < n; j++)
            frame[j] = s_send_byte (r->sends, j);
        CHECK (zl_zmtp_send (r->z, frame, n, r->sends % 3 == 0) == 0);
        free (frame);
        r->sends++;
        CHECK (zl_zmtp_out (r->z, &out) > before);
    }
    if ((r->mode & FZ_PING) && !r->pinged) {
        zl_zmtp_ping (r->z, 3000);
        r->pinged = true;
    }
}

static bool
s_name_is (const uint8_t *body, size_t size, const char *name)
{
    size_t n = strlen (name);
    return size >= 1 + n && body[0] == n && memcmp (body + 1, name, n) == 0;
}

//  The engine's whole output is ZMTP from this side: a greeting (its first
//  11 octets at once, the rest only after the peer's first 11), then whole
//  frames with the flags, lengths and commands it may send.
static void
s_check_output (const run_t *r)
{
    const uint8_t *p = r->out.data;
    size_t n = r->out.len;
    bool curve = r->mode & FZ_CURVE, server = !(r->mode & FZ_CLIENT);
    CHECK (n >= 11);
    CHECK (p[0] == 0xff && p[9] == 0x7f && p[10] == 3);
    if (n == 11)
        return; // the peer's first 11 octets never came
    CHECK (n >= 64 && p[11] == 1);
    const char *mech = curve ? "CURVE" : "NULL";
    CHECK (memcmp (p + 12, mech, strlen (mech)) == 0);
    CHECK (p[32] == (curve && server ? 1 : 0));
    size_t at = 64;
    while (at < n) {
        CHECK (n - at >= 2);
        uint8_t flags = p[at];
        CHECK ((flags & ~7) == 0);
        size_t header = flags & 2 ? 9 : 2;
        CHECK (n - at >= header);
        uint64_t size = 0;
        if (flags & 2)
            for (int i = 0; i < 8; i++)
                size = size << 8 | p[at + 1 + i];
        else
            size = p[at + 1];
        CHECK (!(flags & 2) || size > 255); // the short form whenever it fits
        CHECK (size <= n - at - header);    // frames go out whole
        const uint8_t *body = p + at + header;
        if (flags & 4) { // a command
            CHECK (!(flags & 1));
            bool known;
            if (!curve)
                known = s_name_is (body, size, "READY") || s_name_is (body, size, "PING") ||
                        s_name_is (body, size, "PONG");
            else if (server)
                known = s_name_is (body, size, "WELCOME") || s_name_is (body, size, "READY") ||
                        s_name_is (body, size, "ERROR");
            else
                known = s_name_is (body, size, "HELLO") || s_name_is (body, size, "INITIATE");
            CHECK (known);
        } else if (curve) { // boxes, sent as data frames
            CHECK (!(flags & 1) && s_name_is (body, size, "MESSAGE"));
        }
        at += header + (size_t)size;
    }
}

//  NULL: a peer of the other role takes the output and never fails;
//  when the engine was ready, so is the mirror, with the harness's frames.
static void
s_check_mirror (const run_t *r)
{
    zl_zmtp_opts_t o = {.server = (r->mode & FZ_CLIENT) != 0,
                        .socket_type = r->mode & FZ_CLIENT ? "ROUTER" : "DEALER"};
    zl_zmtp_t *m = zl_zmtp_new (&o);
    size_t room;
    uint8_t *space = zl_zmtp_in_space (m, r->out.len, &room);
    CHECK (room >= r->out.len);
    memcpy (space, r->out.data, r->out.len);
    zl_zmtp_in_commit (m, r->out.len);
    bool ready = false;
    int frames = 0;
    for (;;) {
        zl_zmtp_frame_t f;
        zl_zmtp_rc_t rc = zl_zmtp_next (m, &f);
        if (rc == ZL_ZMTP_AGAIN)
            break;
        if (rc == ZL_ZMTP_ERROR) {
            fprintf (stderr, "fuzz_zmtp: the mirror: %s\n", zl_zmtp_error (m));
            s_fail ("the engine's output is refused by a peer");
        }
        if (rc == ZL_ZMTP_READY) {
            ready = true;
            continue;
        }
        CHECK (frames < r->sends);
        size_t want = s_send_sizes[frames];
        CHECK (f.size == want);
        CHECK (f.more == (frames % 3 == 0));
        for (size_t j = 0; j < want; j++)
            CHECK (f.data[j] == s_send_byte (frames, j));
        frames++;
    }
    CHECK (!zl_zmtp_buffered (m) || r->out.len == 11); // nothing cut short but the greeting
    CHECK (!r->ready || ready);
    CHECK (frames == r->sends);
    zl_zmtp_destroy (&m);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    static bool set_up;
    if (!set_up) {
        fz_setup (&s_rng, &s_keys);
        set_up = true;
    }
    if (size < 1)
        return 0;
    s_rng.state = FZ_SEED_RNG;
    fz_rng_current = &s_rng;
    run_t r = {.mode = data[0]};
    zl_zmtp_opts_t opts = fz_opts (r.mode, &s_keys, fz_auth);
    r.z = zl_zmtp_new (&opts);
    CHECK (r.z != NULL);
    CHECK (!zl_zmtp_ready (r.z));
    s_parse (&r); // nothing read yet: AGAIN
    CHECK (!r.failed && !zl_zmtp_buffered (r.z));
    s_drain (&r, false); // the greeting

    unsigned pattern = FZ_CHUNKING (r.mode);
    size_t at = 1;
    for (size_t k = 0; at < size && !r.failed; k++) {
        size_t chunk = s_chunk (pattern, k);
        if (chunk > size - at)
            chunk = size - at;
        size_t want = r.mode & FZ_SLOW ? 0 : chunk, room;
        uint8_t *space = zl_zmtp_in_space (r.z, want, &room);
        CHECK (room >= (want ? want : 64u * 1024));
        size_t take = chunk < room ? chunk : room;
        memcpy (space, data + at, take);
        zl_zmtp_in_commit (r.z, take);
        at += take;
        s_parse (&r);
        s_check_peer_info (&r);
        s_act (&r);
        s_drain (&r, false);
    }
    if (!r.failed) { // all that was read is parsed
        zl_zmtp_frame_t f;
        CHECK (zl_zmtp_next (r.z, &f) == ZL_ZMTP_AGAIN);
    }
    s_drain (&r, true);
    s_check_output (&r);
    if (!(r.mode & FZ_CURVE))
        s_check_mirror (&r);
    if (getenv ("ZLANE_FUZZ_VERBOSE"))
        fprintf (stderr, "fuzz_zmtp: mode 0x%02x: %s, %d frame(s) in, %d sent, %zu bytes out%s%s\n",
                 r.mode, r.ready ? "handshake done" : "no handshake", r.frames, r.sends, r.out.len,
                 r.failed ? ": " : "", r.failed ? zl_zmtp_error (r.z) : "");
    zl_zmtp_destroy (&r.z);
    free (r.out.data);
    return 0;
}
