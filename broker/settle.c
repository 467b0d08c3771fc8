#include "settle.h"

#include <inttypes.h>

// Count and record one refused settlement or extension.
static void
s_refused (zl_refusals_t *r, zl_settle_rc_t rc, uint64_t job_id, uint64_t lease)
{
    switch (rc) {
    case ZL_SETTLE_UNKNOWN_JOB:
        zl_refusals_add (r, ZL_CTR_UNKNOWN_JOB, ZL_ERR_UNKNOWN_JOB, job_id, lease,
                         "%s for unknown job %" PRIu64, r->what, job_id);
        break;
    case ZL_SETTLE_NOT_HOLDER:
        zl_refusals_add (r, ZL_CTR_NOT_HOLDER, ZL_ERR_NOT_HOLDER, job_id, lease,
                         "%s for job %" PRIu64 ": its lease was granted to another worker", r->what,
                         job_id);
        break;
    case ZL_SETTLE_CANCELLED:
        zl_refusals_add (r, ZL_CTR_LATE_CANCELLED, ZL_ERR_CANCELLED, job_id, lease,
                         "%s for job %" PRIu64 ": the job was cancelled; this changed nothing "
                         "(stop running it)",
                         r->what, job_id);
        break;
    case ZL_SETTLE_MAX_RUN:
        zl_refusals_add (r, ZL_CTR_MAX_RUN, ZL_ERR_MAX_RUN, job_id, lease,
                         "%s for job %" PRIu64 ": the lease now ends at the job's max run time "
                         "and cannot be extended past it",
                         r->what, job_id);
        break;
    default:
        zl_refusals_add (r, ZL_CTR_STALE_LEASE, ZL_ERR_STALE_LEASE, job_id, lease,
                         "%s for job %" PRIu64 " with stale lease %" PRIu64, r->what, job_id,
                         lease);
        break;
    }
}

// Refuse (and count) an item whose checkpoint is over max_checkpoint.
static bool
s_checkpoint_too_large (const zl_settle_env_t *env, zl_refusals_t *ref, uint64_t job_id,
                        uint64_t lease, zl_bytes_t checkpoint)
{
    if (checkpoint.len <= env->max_checkpoint)
        return false;
    zl_refusals_add (ref, ZL_CTR_CHECKPOINT_TOO_LARGE, ZL_ERR_CHECKPOINT_TOO_LARGE, job_id, lease,
                     "%s for job %" PRIu64 ": a checkpoint of %zu bytes is over max_checkpoint "
                     "(%" PRIu64 " bytes); nothing was changed",
                     ref->what, job_id, checkpoint.len, env->max_checkpoint);
    return true;
}

void
zl_settle_ack (const zl_settle_env_t *env, zl_worker_conn_t *w, const zl_ack_t *ack, zl_now_t now)
{
    zl_refusals_t ref;
    zl_refusals_init (&ref, env->replies, env->sock, env->peer, "ack", ack->n, true);
    for (size_t i = 0; i < ack->n; i++) {
        const zl_ack_item_t *it = &ack->items[i];
        if (it->result.len > env->max_result) {
            zl_refusals_add (&ref, ZL_CTR_RESULT_TOO_LARGE, ZL_ERR_RESULT_TOO_LARGE, it->job_id,
                             it->lease,
                             "ack for job %" PRIu64 ": a result of %zu bytes is over max_result "
                             "(%" PRIu64 " bytes); the job was not settled",
                             it->job_id, it->result.len, env->max_result);
            continue;
        }
        zl_settle_rc_t rc = zl_jobs_ack (env->jobs, w, it, now);
        if (rc == ZL_SETTLE_OK) {
            env->counters[ZL_CTR_ACKED]++;
            zl_replies_settled (env->replies, w, it->job_id, it->lease);
        } else
            s_refused (&ref, rc, it->job_id, it->lease);
    }
    zl_refusals_send (&ref, NULL);
}

void
zl_settle_nack (const zl_settle_env_t *env, zl_worker_conn_t *w, const zl_nack_t *nack,
                zl_now_t now)
{
    zl_refusals_t ref;
    zl_refusals_init (&ref, env->replies, env->sock, env->peer, "nack", nack->n, true);
    for (size_t i = 0; i < nack->n; i++) {
        const zl_nack_item_t *it = &nack->items[i];
        if (s_checkpoint_too_large (env, &ref, it->job_id, it->lease, it->checkpoint))
            continue;
        if ((unsigned)it->cls > ZL_FAIL_NOT_YET) {
            zl_refusals_add (&ref, ZL_CTR_INVALID, ZL_ERR_INVALID, it->job_id, it->lease,
                             "nack for job %" PRIu64 ": unknown failure class %u (TRANSIENT 1, "
                             "THROTTLED 2, PERMANENT 3, NOT_YET 4)",
                             it->job_id, (unsigned)it->cls);
            continue;
        }
        zl_settle_rc_t rc = zl_jobs_nack (env->jobs, w, it, now);
        if (rc == ZL_SETTLE_OK) {
            env->counters[ZL_CTR_NACKED]++;
            zl_replies_settled (env->replies, w, it->job_id, it->lease);
        } else
            s_refused (&ref, rc, it->job_id, it->lease);
    }
    zl_refusals_send (&ref, NULL);
}

void
zl_settle_extend (const zl_settle_env_t *env, zl_worker_conn_t *w, const zl_extend_t *ext,
                  zl_now_t now)
{
    zl_refusals_t ref;
    zl_refusals_init (&ref, env->replies, env->sock, env->peer, "extend", ext->n, true);
    for (size_t i = 0; i < ext->n; i++) {
        const zl_extend_item_t *it = &ext->items[i];
        if (it->lease_ms == 0) {
            zl_refusals_add (&ref, ZL_CTR_INVALID, ZL_ERR_INVALID, it->job_id, it->lease,
                             "extend for job %" PRIu64 ": field 'lease_ms' must be above 0",
                             it->job_id);
            continue;
        }
        if (s_checkpoint_too_large (env, &ref, it->job_id, it->lease, it->checkpoint))
            continue;
        zl_settle_rc_t rc = zl_jobs_extend (env->jobs, w, it, now);
        if (rc == ZL_SETTLE_OK || rc == ZL_SETTLE_MAX_RUN) {
            env->counters[ZL_CTR_EXTENDED]++;
            if (it->checkpoint.len)
                env->counters[ZL_CTR_CHECKPOINTS]++;
        }
        if (rc != ZL_SETTLE_OK)
            s_refused (&ref, rc, it->job_id, it->lease);
    }
    zl_refusals_send (&ref, NULL);
}
