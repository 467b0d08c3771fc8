#include "arena.h"

#include "text.h"
#include "zl_alloc.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct chunk {
    struct chunk *next;
    size_t size;
    size_t used;
    _Alignas(16) unsigned char data[];
} chunk_t;

struct _zl_arena_t {
    chunk_t *head; // current chunk; the first chunk is last in the list
    size_t chunk_size;
    size_t total;
};

static chunk_t *
s_chunk_new (size_t size)
{
    chunk_t *c = zl_malloc (sizeof (chunk_t) + size);
    c->next = NULL;
    c->size = size;
    c->used = 0;
    return c;
}

zl_arena_t *
zl_arena_new (size_t chunk_size)
{
    zl_arena_t *self = ZL_NEW (zl_arena_t);
    self->chunk_size = chunk_size < 256 ? 256 : chunk_size;
    self->head = s_chunk_new (self->chunk_size);
    return self;
}

void
zl_arena_destroy (zl_arena_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_arena_t *self = *self_p;
    chunk_t *c = self->head;
    while (c) {
        chunk_t *next = c->next;
        free (c);
        c = next;
    }
    free (self);
    *self_p = NULL;
}

static void
s_too_large (size_t count, size_t size)
{
    fprintf (stderr, "zlane: arena allocation of %zu x %zu bytes is too large, aborting\n", count,
             size);
    abort ();
}

void *
zl_arena_alloc (zl_arena_t *self, size_t size)
{
    if (size > SIZE_MAX / 2) // would wrap when rounded up or added to a chunk header
        s_too_large (1, size);
    size = (size + 15) & ~(size_t)15;
    if (size == 0)
        size = 16;
    chunk_t *c = self->head;
    if (c->size - c->used < size) {
        size_t want = size > self->chunk_size ? size : self->chunk_size;
        chunk_t *n = s_chunk_new (want);
        n->next = c;
        self->head = n;
        c = n;
    }
    void *p = c->data + c->used;
    c->used += size;
    self->total += size;
    return p;
}

void *
zl_arena_calloc (zl_arena_t *self, size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        s_too_large (count, size);
    size_t bytes = count * size;
    void *p = zl_arena_alloc (self, bytes);
    memset (p, 0, bytes);
    return p;
}

char *
zl_arena_strndup (zl_arena_t *self, const char *s, size_t len)
{
    char *p = zl_arena_alloc (self, len + 1);
    memcpy (p, s, len);
    p[len] = '\0';
    return p;
}

void
zl_arena_reset (zl_arena_t *self)
{
    chunk_t *c = self->head;
    while (c->next) { // free all but the first (oldest) chunk
        chunk_t *next = c->next;
        free (c);
        c = next;
    }
    // grow the first chunk if a turn needed more than it holds
    if (self->total > c->size) {
        size_t want = c->size;
        while (want < self->total)
            want *= 2;
        free (c);
        c = s_chunk_new (want);
    }
    c->used = 0;
    self->head = c;
    self->total = 0;
}

size_t
zl_arena_used (zl_arena_t *self)
{
    return self->total;
}

char *
zl_arena_printf (zl_arena_t *self, const char *fmt, ...)
{
    char buf[ZL_ARENA_PRINTF_MAX + 5]; // room to see whether the cut splits a character
    va_list ap;
    va_start (ap, fmt);
    int n = vsnprintf (buf, sizeof buf, fmt, ap);
    va_end (ap);
    if (n < 0)
        n = 0;
    size_t len = (size_t)n < sizeof buf - 1 ? (size_t)n : sizeof buf - 1;
    return zl_arena_strndup (self, buf, zl_text_cut (buf, len, ZL_ARENA_PRINTF_MAX));
}
