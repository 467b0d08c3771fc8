/*  overlay: see overlay.h. The ops are an array of fixed entries over one
    byte buffer (offsets, so that the buffer may move as it grows); the
    index is open addressing over the ops with a key, rebuilt when a
    nested batch is cut (rare: a Submit that failed). */
#include "overlay.h"

#include "zl_alloc.h"

#include <stdlib.h>
#include <string.h>

#define KEY_MAX 64
#define NO_OP UINT32_MAX

typedef struct {
    uint32_t kind, arg;
    uint64_t hash; // of the key; 0 and key_len 0 for none
    size_t at;     // key, then data, in buf
    uint32_t key_len;
    uint32_t len;
} op_t;

struct _zl_overlay_t {
    op_t *ops;
    size_t n_ops, cap_ops;
    uint8_t *buf;
    size_t len, cap;
    uint32_t *slots; // op index or NO_OP; a power of two, at most half full
    size_t n_slots, n_keyed;
};

static void s_reindex (zl_overlay_t *self, size_t n_slots);

zl_overlay_t *
zl_overlay_new (void)
{
    zl_overlay_t *self = ZL_NEW (zl_overlay_t);
    self->n_slots = 64;
    self->slots = zl_malloc (self->n_slots * sizeof *self->slots);
    memset (self->slots, 0xff, self->n_slots * sizeof *self->slots);
    return self;
}

void
zl_overlay_destroy (zl_overlay_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_overlay_t *self = *self_p;
    free (self->ops);
    free (self->buf);
    free (self->slots);
    free (self);
    *self_p = NULL;
}

#define KEEP_BYTES (4u << 20) // a cleared overlay keeps at most this much buffer
#define KEEP_SLOTS 65536      //   and index

void
zl_overlay_clear (zl_overlay_t *self)
{
    self->n_ops = self->len = self->n_keyed = 0;
    if (self->cap > KEEP_BYTES) { // one large batch does not keep its memory
        ZL_FREE (self->buf);
        self->cap = 0;
    }
    if (self->cap_ops * sizeof *self->ops > KEEP_BYTES) {
        ZL_FREE (self->ops);
        self->cap_ops = 0;
    }
    if (self->n_slots > KEEP_SLOTS) {
        s_reindex (self, KEEP_SLOTS);
        return;
    }
    memset (self->slots, 0xff, self->n_slots * sizeof *self->slots);
}

// FNV-1a, 64 bits: the keys are ids and digests, not chosen by a client
// to collide (an idempotency key's place is a digest under the store's
// secret).
static uint64_t
s_hash (const uint8_t *key, size_t len)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ key[i]) * 1099511628211ull;
    return h | 1; // never 0
}

static bool
s_same (const zl_overlay_t *self, const op_t *op, uint64_t hash, const void *key, size_t len)
{
    return op->hash == hash && op->key_len == len && memcmp (self->buf + op->at, key, len) == 0;
}

// Index op `i` (its key is in the buffer): it replaces an earlier op of the
// same key.
static void
s_index (zl_overlay_t *self, uint32_t i)
{
    op_t *op = &self->ops[i];
    size_t mask = self->n_slots - 1;
    for (size_t s = op->hash & mask;; s = (s + 1) & mask) {
        uint32_t at = self->slots[s];
        if (at == NO_OP) {
            self->slots[s] = i;
            self->n_keyed++;
            return;
        }
        if (s_same (self, &self->ops[at], op->hash, self->buf + op->at, op->key_len)) {
            self->slots[s] = i;
            return;
        }
    }
}

static void
s_reindex (zl_overlay_t *self, size_t n_slots)
{
    if (n_slots != self->n_slots) {
        free (self->slots);
        self->slots = zl_malloc (n_slots * sizeof *self->slots);
        self->n_slots = n_slots;
    }
    memset (self->slots, 0xff, self->n_slots * sizeof *self->slots);
    self->n_keyed = 0;
    for (size_t i = 0; i < self->n_ops; i++)
        if (self->ops[i].key_len)
            s_index (self, (uint32_t)i);
}

uint8_t *
zl_overlay_add (zl_overlay_t *self, unsigned kind, unsigned arg, const void *key, size_t key_len,
                const void *data, size_t len)
{
    if (key_len > KEY_MAX)
        abort (); // a programming error: keys are ids and digests
    if (self->n_ops == self->cap_ops) {
        self->cap_ops = self->cap_ops ? self->cap_ops * 2 : 256;
        self->ops = zl_realloc (self->ops, self->cap_ops * sizeof *self->ops);
    }
    size_t need = key_len + len;
    if (self->len + need > self->cap) {
        size_t cap = self->cap ? self->cap : 64 * 1024;
        while (self->len + need > cap)
            cap *= 2;
        self->buf = zl_realloc (self->buf, cap);
        self->cap = cap;
    }
    op_t *op = &self->ops[self->n_ops];
    *op = (op_t){.kind = kind,
                 .arg = arg,
                 .at = self->len,
                 .key_len = (uint32_t)key_len,
                 .len = (uint32_t)len};
    if (key_len)
        memcpy (self->buf + self->len, key, key_len);
    uint8_t *out = self->buf + self->len + key_len;
    if (len && data)
        memcpy (out, data, len);
    self->len += need;
    op->hash = key_len ? s_hash (self->buf + op->at, key_len) : 0;
    self->n_ops++;
    if (key_len) {
        if ((self->n_keyed + 1) * 2 > self->n_slots)
            s_reindex (self, self->n_slots * 2);
        s_index (self, (uint32_t)(self->n_ops - 1));
    }
    return out;
}

size_t
zl_overlay_count (const zl_overlay_t *self)
{
    return self->n_ops;
}

void
zl_overlay_cut (zl_overlay_t *self, size_t mark)
{
    if (mark >= self->n_ops)
        return;
    self->len = self->ops[mark].at;
    self->n_ops = mark;
    s_reindex (self, self->n_slots);
}

static zl_overlay_op_t
s_view (const zl_overlay_t *self, const op_t *op)
{
    const uint8_t *p = self->buf + op->at;
    return (zl_overlay_op_t){.kind = op->kind,
                             .arg = op->arg,
                             .key = op->key_len ? p : NULL,
                             .key_len = op->key_len,
                             .data = p + op->key_len,
                             .len = op->len};
}

zl_overlay_op_t
zl_overlay_at (const zl_overlay_t *self, size_t i)
{
    return s_view (self, &self->ops[i]);
}

bool
zl_overlay_find (const zl_overlay_t *self, const void *key, size_t key_len, zl_overlay_op_t *out)
{
    if (!self->n_keyed || !key_len)
        return false;
    uint64_t hash = s_hash (key, key_len);
    size_t mask = self->n_slots - 1;
    for (size_t s = hash & mask;; s = (s + 1) & mask) {
        uint32_t at = self->slots[s];
        if (at == NO_OP)
            return false;
        if (s_same (self, &self->ops[at], hash, key, key_len)) {
            *out = s_view (self, &self->ops[at]);
            return true;
        }
    }
}

size_t
zl_overlay_bytes (const zl_overlay_t *self)
{
    return self->len;
}
