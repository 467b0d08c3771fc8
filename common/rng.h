/*  rng: a small fast PRNG (xoshiro256**) for jitter and ids.
    Not for cryptography. Each user holds its own state; no locking. */
#ifndef ZL_RNG_H
#define ZL_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} zl_rng_t;

/*  Seed from `seed`; seed 0 takes entropy from the OS. */
void zl_rng_seed (zl_rng_t *rng, uint64_t seed);
/*  Return 64 random bits. */
uint64_t zl_rng_next (zl_rng_t *rng);
/*  Return a uniform integer in [0, bound] (inclusive); bound 0 gives 0. */
uint64_t zl_rng_range (zl_rng_t *rng, uint64_t bound);
/*  Fill `out` with `len` random lowercase hex characters and a NUL. */
void zl_rng_hex (zl_rng_t *rng, char *out, int len);

#endif
