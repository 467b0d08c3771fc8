#include "siphash.h"

// The message is read as little-endian 64-bit words; the key too.
static uint64_t
s_le64 (const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void
s_put_le64 (uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t
s_rotl (uint64_t x, int b)
{
    return x << b | x >> (64 - b);
}

// One SipRound: the ARX network of the paper's figure 2.1.
static void
s_round (zl_siphash_t *s)
{
    s->v0 += s->v1;
    s->v1 = s_rotl (s->v1, 13);
    s->v1 ^= s->v0;
    s->v0 = s_rotl (s->v0, 32);
    s->v2 += s->v3;
    s->v3 = s_rotl (s->v3, 16);
    s->v3 ^= s->v2;
    s->v0 += s->v3;
    s->v3 = s_rotl (s->v3, 21);
    s->v3 ^= s->v0;
    s->v2 += s->v1;
    s->v1 = s_rotl (s->v1, 17);
    s->v1 ^= s->v2;
    s->v2 = s_rotl (s->v2, 32);
}

// Compression: c = 2 rounds per message word.
static void
s_compress (zl_siphash_t *s, uint64_t m)
{
    s->v3 ^= m;
    s_round (s);
    s_round (s);
    s->v0 ^= m;
}

void
zl_siphash_init (zl_siphash_t *self, const uint8_t key[ZL_SIPHASH_KEY_LEN], size_t out_len)
{
    uint64_t k0 = s_le64 (key), k1 = s_le64 (key + 8);
    // the initial state: the key xored with "somepseudorandomlygeneratedbytes"
    self->v0 = k0 ^ 0x736f6d6570736575ull;
    self->v1 = k1 ^ 0x646f72616e646f6dull;
    self->v2 = k0 ^ 0x6c7967656e657261ull;
    self->v3 = k1 ^ 0x7465646279746573ull;
    self->out_len = out_len == 8 ? 8 : 16;
    if (self->out_len == 16)
        self->v1 ^= 0xee; // the 128-bit variant's domain separation
    self->tail = 0;
    self->len = 0;
}

void
zl_siphash_update (zl_siphash_t *self, const void *data, size_t len)
{
    const uint8_t *p = data;
    // finish the word left open by the last update
    while (len && (self->len & 7)) {
        self->tail |= (uint64_t)*p++ << (8 * (self->len & 7));
        self->len++;
        len--;
        if ((self->len & 7) == 0) {
            s_compress (self, self->tail);
            self->tail = 0;
        }
    }
    for (; len >= 8; p += 8, len -= 8, self->len += 8)
        s_compress (self, s_le64 (p));
    for (; len; len--, self->len++)
        self->tail |= (uint64_t)*p++ << (8 * (self->len & 7));
}

void
zl_siphash_final (zl_siphash_t *self, uint8_t *out)
{
    // the last word: what is left of the message, the length mod 256 on top
    s_compress (self, self->tail | (uint64_t)(self->len & 0xff) << 56);
    // finalization: d = 4 rounds per output word
    self->v2 ^= self->out_len == 16 ? 0xee : 0xff;
    for (int i = 0; i < 4; i++)
        s_round (self);
    s_put_le64 (out, self->v0 ^ self->v1 ^ self->v2 ^ self->v3);
    if (self->out_len == 16) {
        self->v1 ^= 0xdd;
        for (int i = 0; i < 4; i++)
            s_round (self);
        s_put_le64 (out + 8, self->v0 ^ self->v1 ^ self->v2 ^ self->v3);
    }
}

void
zl_siphash (const uint8_t key[ZL_SIPHASH_KEY_LEN], const void *data, size_t len, uint8_t *out,
            size_t out_len)
{
    zl_siphash_t s;
    zl_siphash_init (&s, key, out_len);
    zl_siphash_update (&s, data, len);
    zl_siphash_final (&s, out);
}
