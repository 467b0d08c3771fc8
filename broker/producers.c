#include "producers.h"

#include "zl_alloc.h"

#include <czmq.h>
#include <stdlib.h>
#include <string.h>

struct _zl_producers_t {
    zhashx_t *by_key;
    zl_producer_conn_t **all;
    size_t n, cap;
};

zl_producers_t *
zl_producers_new (void)
{
    zl_producers_t *self = ZL_NEW (zl_producers_t);
    self->by_key = zhashx_new ();
    return self;
}

static void
s_free (zl_producer_conn_t *p)
{
    free (p->name);
    free (p->acc);
    free (p->rej);
    free (p);
}

void
zl_producers_destroy (zl_producers_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_producers_t *self = *self_p;
    for (size_t i = 0; i < self->n; i++)
        s_free (self->all[i]);
    free (self->all);
    zhashx_destroy (&self->by_key);
    free (self);
    *self_p = NULL;
}

zl_producer_conn_t *
zl_producers_get (zl_producers_t *self, const zl_peer_t *peer, bool create)
{
    char key[2 * ZL_PEER_ID_MAX + 1];
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < peer->len; i++) {
        key[2 * i] = digits[peer->data[i] >> 4];
        key[2 * i + 1] = digits[peer->data[i] & 15];
    }
    key[2 * peer->len] = '\0';
    zl_producer_conn_t *p = zhashx_lookup (self->by_key, key);
    if (p || !create)
        return p;
    p = ZL_NEW (zl_producer_conn_t);
    p->peer = *peer;
    memcpy (p->key, key, sizeof key);
    zhashx_insert (self->by_key, p->key, p);
    if (self->n == self->cap) {
        self->cap = self->cap ? self->cap * 2 : 16;
        self->all = zl_realloc (self->all, self->cap * sizeof (zl_producer_conn_t *));
    }
    self->all[self->n++] = p;
    return p;
}

void
zl_producers_remove (zl_producers_t *self, zl_producer_conn_t *producer)
{
    zhashx_delete (self->by_key, producer->key);
    for (size_t i = 0; i < self->n; i++)
        if (self->all[i] == producer) {
            self->all[i] = self->all[--self->n];
            break;
        }
    s_free (producer);
}

void
zl_producer_conn_accept (zl_producer_conn_t *p, uint64_t seq, uint64_t job_id, bool duplicate)
{
    if (p->n_acc == p->cap_acc) {
        p->cap_acc = p->cap_acc ? p->cap_acc * 2 : 64;
        p->acc = zl_realloc (p->acc, p->cap_acc * sizeof *p->acc);
    }
    p->acc[p->n_acc++] = (zl_acceptance_t){seq, job_id, duplicate};
}

void
zl_producer_conn_reject (zl_producer_conn_t *p, uint64_t seq, zl_reject_code_t code,
                         const char *reason, uint32_t retry_after_ms)
{
    if (p->n_rej == p->cap_rej) {
        p->cap_rej = p->cap_rej ? p->cap_rej * 2 : 16;
        p->rej = zl_realloc (p->rej, p->cap_rej * sizeof *p->rej);
    }
    p->rej[p->n_rej++] = (zl_rejection_t){seq, code, reason, retry_after_ms};
}

zl_producer_conn_t **
zl_producers_all (zl_producers_t *self, size_t *count)
{
    *count = self->n;
    return self->all;
}
