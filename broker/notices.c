#include "notices.h"

#include "breaker.h"
#include "log.h"

#include <inttypes.h>

#include "counters.h"
#include "watches.h"
#include "zl_alloc.h"

#include <stdlib.h>

#define MAX_WATCHERS_TOLD 1024 // producers told of one job's outcome

struct _zl_notices_t {
    zl_notices_env_t env;
    zl_watches_t *watches; // who waits for which job's outcome
};

zl_notices_t *
zl_notices_new (const zl_notices_env_t *env)
{
    zl_notices_t *self = ZL_NEW (zl_notices_t);
    self->env = *env;
    self->watches = zl_watches_new (ZL_NOTICES_MAX_WATCHES);
    return self;
}

void
zl_notices_destroy (zl_notices_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_watches_destroy (&(*self_p)->watches);
    free (*self_p);
    *self_p = NULL;
}

void
zl_notices_job_event (void *arg, zl_jobs_event_t ev, zl_job_t *job)
{
    zl_notices_t *self = arg;
    const zl_notices_env_t *e = &self->env;
    if (ev == ZL_JOBS_EV_CANCELLED || ev == ZL_JOBS_EV_EXPIRING) {
        // told while it still holds its lease: its worker is sent Cancel
        if (ev == ZL_JOBS_EV_CANCELLED)
            e->counters[ZL_CTR_CANCELLED]++;
        if (job->state == ZL_JOB_LEASED && job->lease->worker)
            zl_replies_cancel (e->replies, job->lease->worker, job->id, job->lease->token);
        return;
    }
    if (ev == ZL_JOBS_EV_DEAD) {
        e->counters[ZL_CTR_DEAD_LETTERED]++;
        zl_replies_dead (e->replies, job->id);
    }
    // (not while recovering: nobody watches yet, and the turn's arena that
    // would hold the outcome may be reset before the replies go)
    bool publish = job->flow->lane->cfg.publish_done;
    if (!*e->live || (!publish && !zl_watches_any (self->watches, job->id)))
        return;
    zl_job_outcome_t o;
    if (zl_jobs_outcome (e->jobs, job->id, e->turn, &o) != 0)
        return;
    zl_peer_t *peers = zl_arena_alloc (e->turn, MAX_WATCHERS_TOLD * sizeof *peers);
    size_t n = zl_watches_take (self->watches, job->id, peers, MAX_WATCHERS_TOLD);
    for (size_t i = 0; i < n; i++)
        zl_replies_outcome (e->replies, &peers[i], NULL, &o);
    if (publish)
        zl_replies_outcome (
            e->replies, NULL,
            zl_arena_printf (e->turn, "done.%s.%s", job->flow->lane->name, job->flow->tenant->name),
            &o);
}

size_t
zl_notices_watch (zl_notices_t *self, const zl_peer_t *peer, const uint64_t *ids, size_t n,
                  zl_notices_may_fn *may, void *may_arg)
{
    const zl_notices_env_t *e = &self->env;
    size_t refused = 0;
    for (size_t i = 0; i < n; i++) {
        zl_job_t *job = ids[i] ? zl_jobs_find (e->jobs, ids[i]) : NULL;
        if (job && may && !may (may_arg, job->flow->tenant->name))
            job = NULL;
        if (job && job->state != ZL_JOB_DONE && job->state != ZL_JOB_DEAD) {
            if (zl_watches_add (self->watches, job->id, peer) != 0) {
                refused++;
                continue;
            }
            zl_jobs_keep (e->jobs, job);
            e->counters[ZL_CTR_WATCHES]++;
            continue;
        }
        zl_job_outcome_t o;
        if (zl_jobs_outcome (e->jobs, job ? job->id : 0, e->turn, &o) != 0)
            o = (zl_job_outcome_t){
                .found = false, .state = "", .error = "", .tenant = "", .lane = ""};
        o.job_id = ids[i];
        zl_replies_outcome (e->replies, peer, NULL, &o);
    }
    return refused;
}

size_t
zl_notices_settle_batches (zl_notices_t *self, zl_now_t now)
{
    const zl_notices_env_t *e = &self->env;
    zl_batch_info_t *settled;
    size_t n = zl_jobs_settle_batches (e->jobs, now, e->turn, &settled);
    e->counters[ZL_CTR_BATCHES_SETTLED] += n;
    for (size_t i = 0; i < n; i++)
        zl_replies_batch_done (e->replies, &settled[i]);
    return n;
}

void
zl_notices_breakers (zl_notices_t *self, zl_lanes_t *lanes, zl_now_t now)
{
    for (uint32_t i = 0, n = zl_lanes_count (lanes); i < n; i++) {
        zl_lane_t *lane = zl_lanes_at (lanes, i);
        if (!lane->breaker)
            continue;
        zl_breaker_tick (lane->breaker, now.mono_ms);
        if (!zl_breaker_take_change (lane->breaker))
            continue;
        zl_msg_t m = {.kind = ZL_MSG_BREAKER};
        zl_breaker_info (lane->breaker, lane->name, now, &m.u.breaker);
        zl_info ("notices", "lane %s: circuit breaker %s (%" PRIu64 " opened so far)", lane->name,
                 zl_breaker_state_name ((zl_breaker_state_t)m.u.breaker.state), m.u.breaker.opened);
        zl_replies_publish (self->env.replies,
                            zl_arena_printf (self->env.turn, "breaker.%s", lane->name), &m);
    }
}
