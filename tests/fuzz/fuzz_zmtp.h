/*  fuzz_zmtp.h: what fuzz_zmtp.c and make_corpus.c agree on: the meaning
    of an input's first byte, the engine's options (the fixed CURVE keys,
    a small max_frame) and libsodium's random bytes made deterministic.

    The random bytes are drawn from a stream the caller points at, reset at
    the start of every input: a CURVE client's transient key (in its HELLO)
    and a server's WELCOME, cookie and transient key are then the same on
    every run, so a committed seed can carry the answers (an INITIATE, a
    READY, MESSAGE boxes) and the fuzzer gets past the handshake. */
#ifndef FUZZ_ZMTP_H
#define FUZZ_ZMTP_H

#include "zmtp.h"

#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// an input's first byte
#define FZ_CLIENT 0x01 // the engine is the client (a DEALER), else the server (a ROUTER)
#define FZ_CURVE 0x02  // CURVE, else NULL
#define FZ_CHUNKING(b) ((b) >> 2 & 7) // how the rest is cut into reads (fuzz_zmtp.c)
#define FZ_SEND 0x20                  // once ready, send a frame after every read
#define FZ_PING 0x40                  // once ready, send a PING (once)
#define FZ_SLOW 0x80                  // write out half of the output at a time; in_space (0)

#define FZ_MAX_FRAME 4096
#define FZ_SEED_RNG 0x7a6c616e65ull // the harness engine's stream at each input's start

// a deterministic stream for libsodium's randombytes (splitmix64)
typedef struct {
    uint64_t state;
} fz_rng_t;

static fz_rng_t *fz_rng_current; // where randombytes draws from

static inline void
fz_rng_buf (void *const buf, const size_t size)
{
    uint8_t *p = buf;
    for (size_t i = 0; i < size; i += 8) {
        uint64_t z = (fz_rng_current->state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        memcpy (p + i, &z, size - i < 8 ? size - i : 8);
    }
}

static inline uint32_t
fz_rng_random (void)
{
    uint32_t v;
    fz_rng_buf (&v, sizeof v);
    return v;
}

static inline const char *
fz_rng_name (void)
{
    return "fuzz_zmtp";
}

//  The fixed key pairs: the server's, the client's it lets in, and a
//  stranger's it refuses.
typedef struct {
    uint8_t server_public[ZL_ZMTP_KEY], server_secret[ZL_ZMTP_KEY];
    uint8_t client_public[ZL_ZMTP_KEY], client_secret[ZL_ZMTP_KEY];
    uint8_t stranger_public[ZL_ZMTP_KEY], stranger_secret[ZL_ZMTP_KEY];
} fz_keys_t;

//  Point libsodium at `rng` (before sodium_init, which draws too) and make
//  the keys. Call once per process.
static inline void
fz_setup (fz_rng_t *rng, fz_keys_t *keys)
{
    static randombytes_implementation impl = {fz_rng_name, fz_rng_random, NULL,
                                              NULL,        fz_rng_buf,    NULL};
    fz_rng_current = rng;
    if (randombytes_set_implementation (&impl) != 0 || sodium_init () < 0)
        abort ();
    uint8_t seed[crypto_box_SEEDBYTES];
    memset (seed, 's', sizeof seed);
    crypto_box_seed_keypair (keys->server_public, keys->server_secret, seed);
    memset (seed, 'c', sizeof seed);
    crypto_box_seed_keypair (keys->client_public, keys->client_secret, seed);
    memset (seed, 'x', sizeof seed);
    crypto_box_seed_keypair (keys->stranger_public, keys->stranger_secret, seed);
}

//  The options of the engine under test for an input's first byte `mode`.
//  `auth` lets in the client key only (CURVE server).
static inline zl_zmtp_opts_t
fz_opts (uint8_t mode, const fz_keys_t *keys, zl_zmtp_auth_fn *auth)
{
    zl_zmtp_opts_t o = {.server = !(mode & FZ_CLIENT),
                        .socket_type = mode & FZ_CLIENT ? "DEALER" : "ROUTER",
                        .curve = mode & FZ_CURVE,
                        .max_frame = FZ_MAX_FRAME};
    if (o.curve && o.server) {
        memcpy (o.public_key, keys->server_public, ZL_ZMTP_KEY);
        memcpy (o.secret_key, keys->server_secret, ZL_ZMTP_KEY);
        o.auth = auth;
        o.auth_arg = (void *)keys;
    } else if (o.curve) {
        memcpy (o.public_key, keys->client_public, ZL_ZMTP_KEY);
        memcpy (o.secret_key, keys->client_secret, ZL_ZMTP_KEY);
        memcpy (o.server_key, keys->server_public, ZL_ZMTP_KEY);
    }
    return o;
}

//  The CURVE server's verdict: only the fixed client key is let in.
static inline bool
fz_auth (void *arg, const uint8_t key[ZL_ZMTP_KEY])
{
    const fz_keys_t *keys = arg;
    return memcmp (key, keys->client_public, ZL_ZMTP_KEY) == 0;
}

#endif
