#include "watches.h"

#include "u64map.h"
#include "zl_alloc.h"

#include <stdlib.h>
#include <string.h>

typedef struct s_watcher {
    zl_peer_t peer;
    struct s_watcher *next;
} s_watcher_t;

struct _zl_watches_t {
    zl_u64map_t *by_id; // job id -> s_watcher_t list
    size_t n, max;
};

zl_watches_t *
zl_watches_new (size_t max)
{
    zl_watches_t *self = ZL_NEW (zl_watches_t);
    self->by_id = zl_u64map_new ();
    self->max = max;
    return self;
}

void
zl_watches_destroy (zl_watches_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_watches_t *self = *self_p;
    size_t cursor = 0;
    s_watcher_t *w;
    while ((w = zl_u64map_next (self->by_id, &cursor, NULL)))
        while (w) {
            s_watcher_t *next = w->next;
            free (w);
            w = next;
        }
    zl_u64map_destroy (&self->by_id);
    free (self);
    *self_p = NULL;
}

int
zl_watches_add (zl_watches_t *self, uint64_t id, const zl_peer_t *peer)
{
    s_watcher_t *first = zl_u64map_get (self->by_id, id);
    for (s_watcher_t *w = first; w; w = w->next)
        if (w->peer.len == peer->len && !memcmp (w->peer.data, peer->data, peer->len))
            return 0;
    if (self->n >= self->max)
        return -1;
    s_watcher_t *w = ZL_NEW (s_watcher_t);
    w->peer = *peer;
    w->next = first;
    zl_u64map_put (self->by_id, id, w);
    self->n++;
    return 0;
}

bool
zl_watches_any (zl_watches_t *self, uint64_t id)
{
    return self->n && zl_u64map_get (self->by_id, id);
}

size_t
zl_watches_take (zl_watches_t *self, uint64_t id, zl_peer_t *out, size_t cap)
{
    if (!self->n)
        return 0;
    s_watcher_t *w = zl_u64map_remove (self->by_id, id);
    size_t k = 0;
    while (w) {
        s_watcher_t *next = w->next;
        if (k < cap)
            out[k++] = w->peer;
        free (w);
        self->n--;
        w = next;
    }
    return k;
}

size_t
zl_watches_count (zl_watches_t *self)
{
    return self->n;
}
