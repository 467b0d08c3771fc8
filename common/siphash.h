/*  siphash: SipHash-2-4, the keyed pseudorandom function of Aumasson and
    Bernstein ("SipHash: a fast short-input PRF", 2012), with the 64-bit or
    the 128-bit output of the published algorithm. Written from the paper
    and checked against its test vectors (tests/common/test_common.c).

    The store keys its idempotency index with it: without the secret key
    nobody can make two (tenant, key) pairs share a digest, so a tenant
    cannot make another tenant's job be answered "duplicate".

    Incremental: init, update any number of times, final. No allocation. */
#ifndef ZL_SIPHASH_H
#define ZL_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

#define ZL_SIPHASH_KEY_LEN 16

typedef struct {
    uint64_t v0, v1, v2, v3;
    uint64_t tail;  // the bytes of an unfinished word, little-endian
    size_t len;     // bytes taken so far
    size_t out_len; // 8 or 16
} zl_siphash_t;

/*  Start a digest under `key` (16 bytes) with `out_len` bytes of output:
    8 (SipHash-2-4-64) or 16 (SipHash-2-4-128); any other value means 16. */
void zl_siphash_init (zl_siphash_t *self, const uint8_t key[ZL_SIPHASH_KEY_LEN], size_t out_len);
/*  Take `len` more bytes of the message. */
void zl_siphash_update (zl_siphash_t *self, const void *data, size_t len);
/*  Write the digest (out_len bytes, in the byte order of the reference
    test vectors) to `out`. The state is spent. */
void zl_siphash_final (zl_siphash_t *self, uint8_t *out);
/*  The whole message at once: init, update, final. */
void zl_siphash (const uint8_t key[ZL_SIPHASH_KEY_LEN], const void *data, size_t len, uint8_t *out,
                 size_t out_len);

#endif
