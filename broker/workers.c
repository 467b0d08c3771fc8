#include "workers.h"

#include "zl_alloc.h"

#include <czmq.h>
#include <stdlib.h>
#include <string.h>

struct _zl_workers_t {
    zhashx_t *by_key; // hex routing id -> worker (borrowed)
    zl_worker_conn_t **all;
    size_t n, cap;
};

static void
s_hex (const zl_peer_t *peer, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < peer->len; i++) {
        out[2 * i] = digits[peer->data[i] >> 4];
        out[2 * i + 1] = digits[peer->data[i] & 15];
    }
    out[2 * peer->len] = '\0';
}

zl_workers_t *
zl_workers_new (void)
{
    zl_workers_t *self = ZL_NEW (zl_workers_t);
    self->by_key = zhashx_new ();
    return self;
}

static void
s_free_worker (zl_worker_conn_t *w)
{
    free (w->name);
    free (w->curve_key);
    free (w->lanes);
    free (w->out_jobs);
    free (w->out_settled);
    free (w);
}

void
zl_workers_destroy (zl_workers_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_workers_t *self = *self_p;
    for (size_t i = 0; i < self->n; i++)
        s_free_worker (self->all[i]);
    free (self->all);
    zhashx_destroy (&self->by_key);
    free (self);
    *self_p = NULL;
}

zl_worker_conn_t *
zl_workers_lookup (zl_workers_t *self, const zl_peer_t *peer)
{
    char key[2 * ZL_PEER_ID_MAX + 1];
    s_hex (peer, key);
    return zhashx_lookup (self->by_key, key);
}

zl_worker_conn_t *
zl_workers_add (zl_workers_t *self, const zl_peer_t *peer, const char *name, uint64_t instance,
                const char *curve_key, zl_lane_t **lanes, uint32_t n_lanes, uint32_t capacity,
                int64_t now_ms)
{
    zl_worker_conn_t *w = zl_workers_lookup (self, peer);
    if (!w) {
        w = ZL_NEW (zl_worker_conn_t);
        w->peer = *peer;
        s_hex (peer, w->key);
        zhashx_insert (self->by_key, w->key, w);
        if (self->n == self->cap) {
            self->cap = self->cap ? self->cap * 2 : 16;
            self->all = zl_realloc (self->all, self->cap * sizeof (zl_worker_conn_t *));
        }
        self->all[self->n++] = w;
    }
    free (w->name);
    w->name = zl_strdup (name && *name ? name : w->key);
    w->instance = instance;
    free (w->curve_key);
    w->curve_key = curve_key ? zl_strdup (curve_key) : NULL;
    free (w->lanes);
    w->lanes = zl_malloc ((n_lanes ? n_lanes : 1) * sizeof (zl_lane_t *));
    memcpy (w->lanes, lanes, n_lanes * sizeof (zl_lane_t *));
    w->n_lanes = n_lanes;
    w->capacity = capacity;
    w->last_seen_ms = now_ms;
    return w;
}

void
zl_workers_remove (zl_workers_t *self, zl_worker_conn_t *worker)
{
    zhashx_delete (self->by_key, worker->key);
    for (size_t i = 0; i < self->n; i++)
        if (self->all[i] == worker) {
            self->all[i] = self->all[--self->n];
            break;
        }
    s_free_worker (worker);
}

zl_worker_conn_t *
zl_workers_find_instance (zl_workers_t *self, uint64_t instance, const char *curve_key,
                          const zl_worker_conn_t *except)
{
    if (!instance)
        return NULL;
    for (size_t i = 0; i < self->n; i++) {
        zl_worker_conn_t *w = self->all[i];
        if (w != except && w->instance == instance &&
            (curve_key ? w->curve_key && !strcmp (w->curve_key, curve_key) : !w->curve_key))
            return w;
    }
    return NULL;
}

void
zl_worker_conn_adopt (zl_worker_conn_t *to, zl_worker_conn_t *from)
{
    while (from->jobs) {
        zl_job_t *job = from->jobs;
        zl_worker_conn_release (from, job);
        zl_worker_conn_hold (to, job);
    }
    for (uint32_t i = 0; i < from->n_settled; i++)
        zl_worker_conn_queue_settled (to, from->out_settled[i].job_id, from->out_settled[i].lease);
    from->n_settled = 0;
}

void
zl_worker_conn_hold (zl_worker_conn_t *worker, zl_job_t *job)
{
    job->lease->worker = worker;
    job->lease->prev = NULL;
    job->lease->next = worker->jobs;
    if (worker->jobs)
        worker->jobs->lease->prev = job;
    worker->jobs = job;
    worker->in_flight++;
}

void
zl_worker_conn_release (zl_worker_conn_t *worker, zl_job_t *job)
{
    zl_lease_t *l = job->lease;
    if (l->prev)
        l->prev->lease->next = l->next;
    else
        worker->jobs = l->next;
    if (l->next)
        l->next->lease->prev = l->prev;
    l->prev = l->next = NULL;
    job->lease->worker = NULL;
    worker->in_flight--;
}

void
zl_worker_conn_queue_job (zl_worker_conn_t *worker, zl_job_t *job)
{
    if (worker->n_out == worker->cap_out) {
        worker->cap_out = worker->cap_out ? worker->cap_out * 2 : 16;
        worker->out_jobs = zl_realloc (worker->out_jobs, worker->cap_out * sizeof (zl_job_t *));
    }
    worker->out_jobs[worker->n_out++] = job;
}

void
zl_worker_conn_queue_settled (zl_worker_conn_t *worker, uint64_t job_id, uint64_t lease)
{
    if (worker->n_settled == worker->cap_settled) {
        worker->cap_settled = worker->cap_settled ? worker->cap_settled * 2 : 16;
        worker->out_settled =
            zl_realloc (worker->out_settled, worker->cap_settled * sizeof (zl_lease_ref_t));
    }
    worker->out_settled[worker->n_settled++] = (zl_lease_ref_t){job_id, lease};
}

zl_worker_conn_t **
zl_workers_all (zl_workers_t *self, size_t *count)
{
    *count = self->n;
    return self->all;
}

zl_worker_conn_t *
zl_workers_take_dirty (zl_workers_t *self)
{
    zl_worker_conn_t *list = NULL;
    for (size_t i = 0; i < self->n; i++) {
        zl_worker_conn_t *w = self->all[i];
        if (w->n_out || w->n_settled) {
            w->next_dirty = list;
            list = w;
        }
    }
    return list;
}

size_t
zl_workers_count (zl_workers_t *self)
{
    return self->n;
}
