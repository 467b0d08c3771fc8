#include "workers.h"

#include "lease.h"
#include "log.h"
#include "text.h"
#include "zl_alloc.h"

#include <czmq.h>
#include <stdlib.h>
#include <string.h>

struct _zl_workers_t {
    zhashx_t *by_key; // hex routing id -> worker (borrowed)
    zl_worker_conn_t **all;
    size_t n, cap;
    // the broker's pace: its heartbeat interval and liveness, and the
    // Heartbeat that states the interval (sent every interval, and to
    // answer a Ready served)
    uint64_t heartbeat_ms;
    uint32_t liveness;
    zl_msg_t heartbeat;
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
    zl_workers_set_pace (self, 1000, 3);
    return self;
}

void
zl_workers_set_pace (zl_workers_t *self, uint64_t heartbeat_ms, uint32_t liveness)
{
    self->heartbeat_ms = heartbeat_ms;
    self->liveness = liveness;
    self->heartbeat =
        (zl_msg_t){.kind = ZL_MSG_HEARTBEAT, .u.heartbeat.interval_ms = (uint32_t)heartbeat_ms};
}

static void
s_free_worker (zl_worker_conn_t *w)
{
    free (w->name);
    free (w->curve_key);
    free (w->host);
    free (w->lanes);
    zl_worker_outbox_free (&w->out);
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
}

static int
s_ref_cmp (const void *a, const void *b)
{
    const zl_lease_ref_t *x = a, *y = b;
    if (x->job_id != y->job_id)
        return x->job_id < y->job_id ? -1 : 1;
    return x->lease < y->lease ? -1 : x->lease > y->lease;
}

uint32_t
zl_worker_conn_adopt_held (zl_worker_conn_t *to, zl_worker_conn_t *from, zl_lease_ref_t *held,
                           size_t n)
{
    if (n > 1)
        qsort (held, n, sizeof *held, s_ref_cmp);
    uint32_t moved = 0;
    zl_job_t *next;
    for (zl_job_t *job = from->jobs; job; job = next) {
        next = job->lease->next;
        zl_lease_ref_t key = {job->id, job->lease->token};
        if (n && bsearch (&key, held, n, sizeof *held, s_ref_cmp)) {
            zl_worker_conn_release (from, job);
            zl_worker_conn_hold (to, job);
            moved++;
        }
    }
    return moved;
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
zl_worker_conn_seen (zl_worker_conn_t *worker, int64_t now_ms)
{
    worker->last_seen_ms = now_ms;
}

zl_worker_conn_t *
zl_workers_silent (zl_workers_t *self, int64_t now_ms, int64_t *limit_ms)
{
    for (size_t i = 0; i < self->n; i++) {
        zl_worker_conn_t *w = self->all[i];
        uint64_t pace = w->heartbeat_ms > self->heartbeat_ms ? w->heartbeat_ms : self->heartbeat_ms;
        *limit_ms = (int64_t)(pace * self->liveness);
        if (now_ms - w->last_seen_ms > *limit_ms)
            return w;
    }
    return NULL;
}

zl_worker_conn_t **
zl_workers_all (zl_workers_t *self, size_t *count)
{
    *count = self->n;
    return self->all;
}

size_t
zl_workers_count (zl_workers_t *self)
{
    return self->n;
}

zl_worker_conn_t *
zl_workers_ready (zl_workers_t *self, const zl_ready_env_t *env, const zl_ready_t *r,
                  int64_t now_ms)
{
    const char *bad = zl_text_name_problem (env->turn, r->name, ZL_MAX_NAME, true);
    if (bad) {
        zl_replies_error (env->replies, env->sock, env->peer, ZL_CTR_INVALID, ZL_ERR_INVALID, 0, 0,
                          "Ready: field 'name' %s", bad);
        return NULL;
    }
    if (r->n_lanes == 0) {
        zl_replies_error (env->replies, env->sock, env->peer, ZL_CTR_INVALID, ZL_ERR_INVALID, 0, 0,
                          "Ready needs at least one lane");
        return NULL;
    }
    zl_lane_t **lanes = zl_arena_alloc (env->turn, r->n_lanes * sizeof (zl_lane_t *));
    uint32_t n = 0;
    zl_refusals_t ref;
    zl_refusals_init (&ref, env->replies, env->sock, env->peer, "Ready lane", r->n_lanes, false);
    bool undeclared = false;
    for (size_t i = 0; i < r->n_lanes; i++) {
        if ((bad = zl_text_name_problem (env->turn, r->lanes[i], ZL_MAX_NAME, false))) {
            zl_refusals_add (&ref, ZL_CTR_INVALID, ZL_ERR_INVALID, 0, 0, "field 'lanes[%zu]' %s", i,
                             bad);
            continue;
        }
        if (env->may_take && !env->may_take (env->may_arg, r->lanes[i])) {
            zl_refusals_add (&ref, ZL_CTR_UNAUTHORIZED, ZL_ERR_UNAUTHORIZED, 0, 0,
                             "this key may not take jobs from lane '%s'", r->lanes[i]);
            continue;
        }
        zl_lane_t *lane = zl_lanes_lookup (env->lanes, r->lanes[i]);
        if (!lane) {
            undeclared = true;
            zl_refusals_add (&ref, ZL_CTR_UNKNOWN_LANE, ZL_ERR_UNKNOWN_LANE, 0, 0,
                             "lane '%s' is not declared", r->lanes[i]);
            continue;
        }
        bool seen = false;
        for (uint32_t j = 0; j < n; j++)
            seen |= lanes[j] == lane;
        if (!seen)
            lanes[n++] = lane;
    }
    zl_refusals_send (&ref, undeclared ? zl_arena_printf (env->turn, "(declared: %s)",
                                                          zl_lanes_names (env->lanes, env->turn,
                                                                          ZL_LANE_LIST_MAX))
                                       : NULL);
    if (n == 0)
        return NULL;
    zl_worker_conn_t *w = zl_workers_add (self, env->peer, r->name, r->instance, env->curve_key,
                                          lanes, n, r->capacity, now_ms);
    free (w->host);
    w->host = env->host && *env->host ? zl_strdup (env->host) : NULL;
    w->heartbeat_ms = zl_heartbeat_stated (r->heartbeat_ms);
    env->counters[ZL_CTR_WORKERS_READY]++;
    zl_info ("broker", "worker %s %s: %u lane(s), capacity %u", w->name,
             w->capacity ? "ready" : "draining", n, w->capacity);
    // the same worker process on a new connection: its leases follow it
    zl_worker_conn_t *old = zl_workers_find_instance (self, r->instance, env->curve_key, w);
    if (old) {
        uint32_t moved = old->in_flight;
        size_t unreached = 0;
        if (r->held_listed) {
            // what it does not list, a Dispatch lost with the old connection
            // never brought it: ready again now, not when the lease lapses
            zl_lease_ref_t *held =
                zl_arena_alloc (env->turn, (r->n_held ? r->n_held : 1) * sizeof *held);
            if (r->n_held)
                memcpy (held, r->held, r->n_held * sizeof *held);
            moved = zl_worker_conn_adopt_held (w, old, held, r->n_held);
            if (old->jobs)
                unreached = env->unreached (env->unreached_arg, old);
        } else
            zl_worker_conn_adopt (w, old);
        zl_replies_move_settled (env->replies, w, old);
        zl_workers_remove (self, old);
        env->counters[ZL_CTR_WORKERS_RECONNECTED]++;
        env->counters[ZL_CTR_LEASES_UNREACHED] += unreached;
        zl_info ("broker",
                 "worker %s reconnected: %u lease(s) move to the new connection, %zu it never "
                 "got are ready again",
                 w->name, moved, unreached);
    }
    // told the broker's pace at once: a worker with a shorter heartbeat
    // judges the broker's silence by it
    zl_replies_send (env->replies, env->sock, env->peer, &self->heartbeat);
    return w;
}

void
zl_workers_heartbeat (zl_workers_t *self, zl_replies_t *replies)
{
    for (size_t i = 0; i < self->n; i++)
        zl_replies_send (replies, ZL_SOCK_BACKEND, &self->all[i]->peer, &self->heartbeat);
}

zl_worker_info_t *
zl_workers_describe (zl_workers_t *self, zl_arena_t *arena, int64_t now_ms, size_t *count)
{
    size_t n = self->n;
    zl_worker_info_t *out = zl_arena_calloc (arena, n ? n : 1, sizeof *out);
    for (size_t i = 0; i < n; i++) {
        const zl_worker_conn_t *w = self->all[i];
        zl_worker_info_t *o = &out[i];
        o->name = w->name;
        o->host = w->host ? w->host : "";
        o->n_lanes = w->n_lanes;
        o->lanes = zl_arena_calloc (arena, w->n_lanes ? w->n_lanes : 1, sizeof (char *));
        for (uint32_t k = 0; k < w->n_lanes; k++)
            o->lanes[k] = w->lanes[k]->name;
        o->capacity = w->capacity;
        o->in_flight = w->in_flight;
        o->last_seen_age_ms = now_ms > w->last_seen_ms ? (uint64_t)(now_ms - w->last_seen_ms) : 0;
        o->instance = w->instance;
        o->heartbeat_ms = w->heartbeat_ms;
    }
    *count = n;
    return out;
}
