#include "dedup.h"

#include "zl_alloc.h"

#include <czmq.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    struct entry *next;  // insertion order == expiry order
    uint64_t job_id;
    int64_t seen_ms;
    char key[];          // see s_key
} entry_t;

struct _zl_dedup_t {
    uint64_t window_ms;
    zhashx_t *map;  // key -> entry (borrowed)
    entry_t *head, *tail;
};

zl_dedup_t *
zl_dedup_new (uint64_t window_ms)
{
    zl_dedup_t *self = ZL_NEW (zl_dedup_t);
    self->window_ms = window_ms;
    self->map = zhashx_new ();
    return self;
}

void
zl_dedup_destroy (zl_dedup_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_dedup_t *self = *self_p;
    entry_t *e = self->head;
    while (e) {
        entry_t *next = e->next;
        free (e);
        e = next;
    }
    zhashx_destroy (&self->map);
    free (self);
    *self_p = NULL;
}

// "<tenant length>:<tenant><key>": the length prefix keeps every (tenant,
// key) pair distinct whatever bytes either holds.
static char *
s_key (const char *tenant, const char *key, char *buf, size_t size)
{
    size_t tlen = strlen (tenant);
    size_t need = tlen + strlen (key) + 24;
    char *out = need <= size ? buf : zl_malloc (need);
    snprintf (out, need, "%zu:%s%s", tlen, tenant, key);
    return out;
}

uint64_t
zl_dedup_lookup (zl_dedup_t *self, const char *tenant, const char *key, int64_t now_ms)
{
    char buf[512];
    char *k = s_key (tenant, key, buf, sizeof buf);
    entry_t *e = zhashx_lookup (self->map, k);
    if (k != buf)
        free (k);
    if (!e || now_ms - e->seen_ms >= (int64_t) self->window_ms)
        return 0;
    return e->job_id;
}

void
zl_dedup_insert (zl_dedup_t *self, const char *tenant, const char *key, uint64_t job_id,
                 int64_t seen_ms)
{
    char buf[512];
    char *k = s_key (tenant, key, buf, sizeof buf);
    size_t len = strlen (k);
    // Always append a new entry so that the queue stays in expiry order. A
    // key seen before (expired, not yet pruned) points the map at the new
    // entry; prune frees the old one when it reaches it.
    entry_t *e = zl_malloc (sizeof (entry_t) + len + 1);
    memcpy (e->key, k, len + 1);
    e->next = NULL;
    e->job_id = job_id;
    e->seen_ms = seen_ms;
    if (self->tail)
        self->tail->next = e;
    else
        self->head = e;
    self->tail = e;
    zhashx_update (self->map, e->key, e);
    if (k != buf)
        free (k);
}

size_t
zl_dedup_prune (zl_dedup_t *self, int64_t now_ms)
{
    size_t n = 0;
    while (self->head && now_ms - self->head->seen_ms >= (int64_t) self->window_ms) {
        entry_t *e = self->head;
        self->head = e->next;
        if (!self->head)
            self->tail = NULL;
        // a key inserted again has a newer entry further on: the map keeps
        // pointing at that one
        entry_t *cur = zhashx_lookup (self->map, e->key);
        if (cur == e) {
            zhashx_delete (self->map, e->key);
            n++;
        }
        free (e);
    }
    return n;
}

size_t
zl_dedup_size (zl_dedup_t *self)
{
    return zhashx_size (self->map);
}
