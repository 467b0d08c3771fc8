#include "admin.h"

#include "schedules.h"

#include "counters.h"
#include "dlq.h"
#include "log.h"
#include "text.h"
#include "workers.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/*  True if a dead job matches the filter: every criterion that is set (lane,
    tenant, ids, the time it died, text in its final error). The error is
    read from the store, so it is looked at last, in `scratch` (reset here). */
static bool
s_filter_match (const zl_admin_env_t *env, const zl_dlq_filter_t *f, zl_job_t *job,
                zl_arena_t *scratch)
{
    if (f->lane[0] && strcmp (f->lane, job->flow->lane->name) != 0)
        return false;
    if (f->tenant[0] && strcmp (f->tenant, job->flow->tenant->name) != 0)
        return false;
    if (f->dead_from_ms && (uint64_t)job->dead_at_ms < f->dead_from_ms)
        return false;
    if (f->dead_to_ms && (uint64_t)job->dead_at_ms >= f->dead_to_ms)
        return false;
    if (f->n_ids) {
        bool named = false;
        for (size_t i = 0; i < f->n_ids && !named; i++)
            named = f->ids[i] == job->id;
        if (!named)
            return false;
    }
    if (f->error_contains && f->error_contains[0]) {
        zl_dead_letter_t d;
        zl_arena_reset (scratch);
        if (zl_jobs_dead_letter (env->jobs, job, false, scratch, &d) != 0 ||
            !zl_text_contains_nocase (d.error ? d.error : "", f->error_contains))
            return false;
    }
    return true;
}

// True if the filter names something (a purge of everything must say so).
static bool
s_filter_narrow (const zl_dlq_filter_t *f)
{
    return f->all || f->lane[0] || f->tenant[0] || f->n_ids ||
           (f->error_contains && f->error_contains[0]) || f->dead_from_ms || f->dead_to_ms;
}

#define MAX_NAME 128

// Why a request's names break the text rules (text.h), or NULL.
static const char *
s_names_problem (zl_arena_t *a, const zl_admin_request_t *req)
{
    const char *bad;
    if ((bad = zl_text_name_problem (a, req->filter.lane, MAX_NAME, true)))
        return zl_arena_printf (a, "field 'filter.lane' %s", bad);
    if ((bad = zl_text_name_problem (a, req->filter.tenant, MAX_NAME, true)))
        return zl_arena_printf (a, "field 'filter.tenant' %s", bad);
    if ((bad = zl_text_name_problem (a, req->lane, MAX_NAME, true)))
        return zl_arena_printf (a, "field 'lane' %s", bad);
    if (req->stats_groups.lane &&
        (bad = zl_text_name_problem (a, req->stats_groups.lane, MAX_NAME, true)))
        return zl_arena_printf (a, "field 'groups.lane' %s", bad);
    if (req->stats_groups.tenant_contains && strlen (req->stats_groups.tenant_contains) > MAX_NAME)
        return zl_arena_printf (a, "field 'groups.tenant_contains' is longer than %d bytes",
                                MAX_NAME);
    if (req->filter.error_contains && strlen (req->filter.error_contains) > ZL_DLQ_ERROR_FILTER_MAX)
        return zl_arena_printf (a, "field 'filter.error_contains' is longer than %d bytes",
                                ZL_DLQ_ERROR_FILTER_MAX);
    if (req->filter.dead_to_ms && req->filter.dead_to_ms <= req->filter.dead_from_ms)
        return "field 'filter.dead_to_ms' must be after 'filter.dead_from_ms'";
    return NULL;
}

/*  Why the filter cannot be applied, or NULL: it names a lane that is not
    declared, or an id that is not a dead letter. (A filter that matches no
    dead letter is fine: it does nothing, with count 0.) */
static const char *
s_filter_refused (const zl_admin_env_t *env, const zl_dlq_filter_t *f)
{
    if (f->lane[0] && !zl_lanes_find (env->lanes, f->lane))
        return zl_arena_printf (env->arena, "lane '%s' is not declared", f->lane);
    zl_dlq_t *dlq = zl_jobs_dlq (env->jobs);
    for (size_t i = 0; i < f->n_ids; i++)
        if (!zl_dlq_find (dlq, f->ids[i]))
            return zl_arena_printf (env->arena,
                                    "job %" PRIu64 " is not in the dead-letter queue (nothing "
                                    "was changed)",
                                    f->ids[i]);
    return NULL;
}

bool
zl_admin_changes (const zl_admin_request_t *req)
{
    return req->op == ZL_ADMIN_DLQ_REDRIVE || req->op == ZL_ADMIN_DLQ_PURGE ||
           req->op == ZL_ADMIN_PAUSE || req->op == ZL_ADMIN_RESUME || req->op == ZL_ADMIN_CANCEL ||
           req->op == ZL_ADMIN_SCHEDULE_ADD || req->op == ZL_ADMIN_SCHEDULE_REMOVE ||
           req->op == ZL_ADMIN_SCHEDULE_PAUSE || req->op == ZL_ADMIN_SCHEDULE_RESUME;
}

int
zl_admin_apply (const zl_admin_env_t *env, const zl_admin_request_t *req, zl_now_t now,
                zl_admin_reply_t *r)
{
    memset (r, 0, sizeof *r);
    r->request_id = req->request_id;
    r->ok = true;
    r->error = s_names_problem (env->arena, req);
    if (!r->error && req->op == ZL_ADMIN_CANCEL &&
        (req->n_ids == 0 || req->n_ids > ZL_CANCEL_MAX_IDS))
        r->error = zl_arena_printf (env->arena,
                                    "cancel: field 'ids' must hold 1 to %d job ids (it holds %zu)",
                                    ZL_CANCEL_MAX_IDS, req->n_ids);
    if (r->error || req->op == ZL_ADMIN_NONE || req->op >= ZL_ADMIN_OP_COUNT) {
        if (!r->error)
            r->error = "admin request without an operation";
        r->ok = false;
        return -1;
    }
    r->error = "";
    zl_dlq_t *dlq = zl_jobs_dlq (env->jobs);
    const char *refused = NULL;
    // where a filter on the error text reads each dead letter
    zl_arena_t *scratch = req->filter.error_contains && req->filter.error_contains[0]
                              ? zl_arena_new (16 * 1024)
                              : NULL;
    switch (req->op) {
    case ZL_ADMIN_STATS:
        r->result = ZL_ADMIN_RESULT_STATS;
        if (req->stats_groups.set) {
            if (zl_stats_query (env->stats, env->arena, now, &req->stats_groups, &r->stats,
                                &refused) != 0)
                break;
        } else
            zl_stats_build (env->stats, env->arena, now, req->stats_lanes_only, &r->stats);
        break;
    case ZL_ADMIN_DLQ_LIST: {
        uint32_t limit = req->limit ? req->limit : 100;
        if (limit > 1000)
            limit = 1000;
        zl_job_t *j = zl_dlq_first (dlq);
        if ((refused = s_filter_refused (env, &req->filter)))
            break;
        if (req->after_id) {
            zl_job_t *after = zl_dlq_find (dlq, req->after_id);
            if (!after) { // a page's cursor that left the DLQ: say so, not "the end"
                refused = zl_arena_printf (env->arena,
                                           "after_id %" PRIu64 " is not in the dead-letter queue "
                                           "(redriven or purged since): list from the start",
                                           req->after_id);
                break;
            }
            j = zl_dlq_next (dlq, after);
        }
        r->result = ZL_ADMIN_RESULT_DLQ_LIST;
        r->dead_letters = zl_arena_alloc (env->arena, limit * sizeof (zl_dead_letter_t));
        for (; j && r->n_dead_letters < limit; j = zl_dlq_next (dlq, j))
            if (s_filter_match (env, &req->filter, j, scratch) &&
                zl_jobs_dead_letter (env->jobs, j, false, env->arena,
                                     &r->dead_letters[r->n_dead_letters]) == 0)
                r->n_dead_letters++;
        break;
    }
    case ZL_ADMIN_DLQ_SHOW: {
        zl_job_t *j = zl_dlq_find (dlq, req->job_id);
        if (!j) {
            refused = zl_arena_printf (
                env->arena, "job %" PRIu64 " is not in the dead-letter queue", req->job_id);
            break;
        }
        if (zl_jobs_dead_letter (env->jobs, j, true, env->arena, &r->dead_letter) != 0) {
            refused = "the store could not read this job";
            break;
        }
        r->result = ZL_ADMIN_RESULT_DEAD_LETTER;
        break;
    }
    case ZL_ADMIN_JOB_SHOW:
        if (zl_jobs_outcome (env->jobs, req->job_id, env->arena, &r->job) != 0 ||
            zl_jobs_graph_of (env->jobs, req->job_id, env->arena, &r->job) != 0) {
            refused = "the store could not read this job";
            break;
        }
        r->result = ZL_ADMIN_RESULT_JOB;
        break;
    case ZL_ADMIN_BATCH_SHOW:
        if (!req->batch_id || !req->batch_id[0]) {
            refused = "batch show needs a batch id";
            break;
        }
        zl_jobs_batch_info (env->jobs, req->batch_id, env->arena, &r->batch);
        r->result = ZL_ADMIN_RESULT_BATCH;
        break;
    case ZL_ADMIN_DLQ_REDRIVE:
    case ZL_ADMIN_DLQ_PURGE: {
        if (!s_filter_narrow (&req->filter)) {
            refused = "say which dead letters: all, a lane, a tenant, ids, error text or a time";
            break;
        }
        if ((refused = s_filter_refused (env, &req->filter)))
            break;
        bool redrive = req->op == ZL_ADMIN_DLQ_REDRIVE;
        uint64_t count = 0;
        // the ids first: a redrive in a workflow brings other dead letters
        // back with it (its descendants), and a purge frees the job
        size_t n = zl_dlq_depth (dlq), k = 0;
        uint64_t *ids = zl_arena_alloc (env->arena, (n ? n : 1) * sizeof *ids);
        for (zl_job_t *j = zl_dlq_first (dlq); j && k < n; j = zl_dlq_next (dlq, j))
            if (s_filter_match (env, &req->filter, j, scratch))
                ids[k++] = j->id;
        for (size_t i = 0; i < k; i++) {
            zl_job_t *j = zl_jobs_find (env->jobs, ids[i]);
            if (!j || j->state != ZL_JOB_DEAD)
                continue; // came back with its parent
            if (redrive)
                zl_jobs_redrive (env->jobs, j, now);
            else
                zl_jobs_purge (env->jobs, j);
            count++;
        }
        env->counters[redrive ? ZL_CTR_REDRIVEN : ZL_CTR_PURGED] += count;
        zl_info ("broker", "admin: %s %" PRIu64 " dead letter(s)", redrive ? "redrove" : "purged",
                 count);
        r->result = ZL_ADMIN_RESULT_COUNT;
        r->count = count;
        break;
    }
    case ZL_ADMIN_CANCEL: {
        // each id answered on its own: one unknown id refuses nothing else
        r->result = ZL_ADMIN_RESULT_CANCEL;
        r->n_cancel_items = req->n_ids;
        r->cancel_items = zl_arena_alloc (env->arena, req->n_ids * sizeof (zl_cancel_item_t));
        uint64_t counts[ZL_CANCEL_OUTCOME_COUNT] = {0};
        for (size_t i = 0; i < req->n_ids; i++)
            counts[zl_jobs_cancel (env->jobs, req->ids[i], now, &r->cancel_items[i])]++;
        r->count = counts[ZL_CANCEL_CANCELLED];
        zl_info ("broker",
                 "admin: cancel of %zu id(s): %" PRIu64 " cancelled, %" PRIu64
                 " already cancelled, %" PRIu64 " finished, %" PRIu64 " unknown",
                 req->n_ids, counts[ZL_CANCEL_CANCELLED], counts[ZL_CANCEL_ALREADY_CANCELLED],
                 counts[ZL_CANCEL_FINISHED], counts[ZL_CANCEL_UNKNOWN]);
        break;
    }
    case ZL_ADMIN_SCHEDULE_ADD: {
        char err[256];
        if (zl_schedules_add (env->schedules, &req->schedule, now, err, sizeof err) != 0) {
            refused = zl_arena_printf (env->arena, "schedule add: %s", err);
            break;
        }
        zl_schedule_info_t *all;
        size_t n = zl_schedules_list (env->schedules, env->arena, now, &all);
        for (size_t i = 0; i < n; i++)
            if (!strcmp (all[i].name, req->schedule.name)) {
                r->result = ZL_ADMIN_RESULT_SCHEDULES;
                r->n_schedules = 1;
                r->schedules = &all[i];
            }
        break;
    }
    case ZL_ADMIN_SCHEDULE_LIST:
        r->result = ZL_ADMIN_RESULT_SCHEDULES;
        r->n_schedules = zl_schedules_list (env->schedules, env->arena, now, &r->schedules);
        break;
    case ZL_ADMIN_SCHEDULE_REMOVE:
    case ZL_ADMIN_SCHEDULE_PAUSE:
    case ZL_ADMIN_SCHEDULE_RESUME: {
        const char *name = req->schedule.name ? req->schedule.name : "";
        int rc = req->op == ZL_ADMIN_SCHEDULE_REMOVE
                     ? zl_schedules_remove (env->schedules, name)
                     : zl_schedules_pause (env->schedules, name, req->op == ZL_ADMIN_SCHEDULE_PAUSE,
                                           now);
        if (rc != 0)
            refused = zl_arena_printf (env->arena, "no schedule is named '%s'", name);
        break;
    }
    case ZL_ADMIN_PAUSE:
    case ZL_ADMIN_RESUME: {
        zl_lane_t *lane = zl_lanes_find (env->lanes, req->lane);
        if (!lane) {
            refused = zl_arena_printf (env->arena, "lane '%s' is not declared", req->lane);
            break;
        }
        zl_lane_set_paused (lane, req->op == ZL_ADMIN_PAUSE);
        zl_info ("broker", "admin: lane %s %s", lane->name, lane->paused ? "paused" : "resumed");
        break;
    }
    case ZL_ADMIN_WORKERS:
        r->result = ZL_ADMIN_RESULT_WORKERS;
        r->workers = zl_workers_describe (env->workers, env->arena, now.mono_ms, &r->n_workers);
        break;
    default: break;
    }
    if (scratch)
        zl_arena_destroy (&scratch);
    if (refused) {
        r->ok = false;
        r->error = refused;
        r->result = ZL_ADMIN_RESULT_NONE;
        env->counters[ZL_CTR_ADMIN_REFUSED]++;
    }
    return 0;
}
