#include "admission.h"

#include "log.h"
#include "text.h"
#include "zl_alloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUEUE_FULL_RETRY_MS 200
#define STORE_FULL_RETRY_MS 1000

struct _zl_admission_t {
    zl_admission_env_t env;
};

zl_admission_t *
zl_admission_new (const zl_admission_env_t *env)
{
    zl_admission_t *self = ZL_NEW (zl_admission_t);
    self->env = *env;
    return self;
}

void
zl_admission_destroy (zl_admission_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free (*self_p);
    *self_p = NULL;
}

// ---------------------------------------------------------------- credit
// The free room split between the producers, at most the window.
static uint64_t
s_share (zl_admission_t *self, size_t n_producers)
{
    uint64_t depth = zl_lanes_total_depth (self->env.lanes);
    uint64_t max = self->env.cfg->max_depth;
    uint64_t share = (depth < max ? max - depth : 0) / (n_producers ? n_producers : 1);
    return share < self->env.cfg->producer_window ? share : self->env.cfg->producer_window;
}

zl_producer_conn_t *
zl_admission_hello (zl_admission_t *self, const zl_peer_t *peer, const char *name, zl_now_t now)
{
    zl_producer_conn_t *p = zl_producers_get (self->env.producers, peer, true);
    zl_producer_conn_restart (p, name, now.mono_ms);
    zl_replies_credit_due (self->env.replies, p);
    size_t n;
    zl_producers_all (self->env.producers, &n);
    zl_producer_conn_grant (p, s_share (self, n));
    zl_debug ("broker", "producer %s hello, credit %" PRIu64, zl_producer_conn_name (p),
              zl_producer_conn_limit (p));
    return p;
}

void
zl_admission_regrant (zl_admission_t *self)
{
    size_t n;
    zl_producer_conn_t **all = zl_producers_all (self->env.producers, &n);
    uint64_t share = s_share (self, n);
    for (size_t i = 0; i < n; i++)
        zl_producer_conn_grant (all[i], share);
}

// A producer that has sent nothing for `producer_idle` is forgotten: its
// credit goes back to the others. It is told so (Error NOT_READY): one that
// still lives, waiting for credit perhaps, sends Hello again and gets its
// share. A Submit from it before that gets NOT_READY too.
void
zl_admission_forget_idle (zl_admission_t *self, zl_now_t now)
{
    size_t n;
    zl_producer_conn_t **all = zl_producers_all (self->env.producers, &n);
    for (size_t i = 0; i < n;) {
        zl_producer_conn_t *p = all[i];
        if (now.mono_ms - p->last_seen_ms > (int64_t)self->env.cfg->producer_idle_ms &&
            !zl_replies_producer_pending (p)) {
            zl_msg_t m = {.kind = ZL_MSG_ERROR};
            m.u.error = (zl_error_t){ZL_ERR_NOT_READY,
                                     "forgotten after producer_idle without a message: send "
                                     "Hello again for credit",
                                     0,
                                     0,
                                     0,
                                     NULL};
            zl_replies_send (self->env.replies, ZL_SOCK_FRONTEND, &p->peer, &m);
            zl_debug ("broker", "producer %s forgotten after %" PRIu64 " ms idle",
                      zl_producer_conn_name (p), self->env.cfg->producer_idle_ms);
            zl_producers_remove (self->env.producers, p); // swaps the last into slot i
            all = zl_producers_all (self->env.producers, &n);
        } else
            i++;
    }
}

// ---------------------------------------------------------------- one spec
static zl_verdict_t
s_refuse (zl_counter_id_t counter, zl_reject_code_t code, const char *reason,
          uint32_t retry_after_ms)
{
    return (zl_verdict_t){.admit = ZL_ADMIT_REFUSE,
                          .counter = counter,
                          .code = code,
                          .reason = reason,
                          .retry_after_ms = retry_after_ms};
}

// Why the spec's fields break the rules (text.h, the limits in the header),
// or NULL.
static const char *
s_spec_problem (zl_admission_t *self, const zl_job_spec_t *spec)
{
    if (spec->invalid) // the codec found a string that is not valid text
        return spec->invalid;
    zl_arena_t *a = self->env.turn;
    const char *bad;
    if ((bad = zl_text_name_problem (a, spec->tenant, ZL_MAX_NAME, false)))
        return zl_arena_printf (a, "field 'tenant' %s", bad);
    if ((bad = zl_text_name_problem (a, spec->lane, ZL_MAX_NAME, false)))
        return zl_arena_printf (a, "field 'lane' %s", bad);
    if ((bad = zl_text_name_problem (a, spec->idempotency_key, ZL_MAX_KEY, true)))
        return zl_arena_printf (a, "field 'idempotency_key' %s", bad);
    if (spec->n_headers > ZL_MAX_HEADERS)
        return zl_arena_printf (a, "%zu headers: at most %d", spec->n_headers, ZL_MAX_HEADERS);
    for (size_t i = 0; i < spec->n_headers; i++) {
        if ((bad = zl_text_name_problem (a, spec->headers[i].key, ZL_MAX_NAME, false)))
            return zl_arena_printf (a, "field 'headers[%zu].key' %s", i, bad);
        if (strlen (spec->headers[i].value) > ZL_MAX_HEADER_VALUE)
            return zl_arena_printf (a, "field 'headers[%zu].value' is longer than %d bytes", i,
                                    ZL_MAX_HEADER_VALUE);
    }
    if (spec->max_attempts > UINT16_MAX)
        return zl_arena_printf (a, "field 'max_attempts' is above %d", UINT16_MAX);
    return NULL;
}

// An earlier job with this idempotency key inside the window, or 0.
static uint64_t
s_duplicate_of (zl_admission_t *self, const zl_job_spec_t *spec, zl_now_t now)
{
    zl_idem_rec_t rec;
    if (!spec->idempotency_key[0] || zl_store_get_idem (self->env.store, spec->tenant,
                                                        spec->idempotency_key, &rec) != ZL_STORE_OK)
        return 0;
    // the window of the key's class: a client library's own key only has to
    // outlive that library's resends
    uint64_t window =
        rec.generated ? self->env.cfg->resend_window_ms : self->env.cfg->dedup_window_ms;
    if (now.wall_ms - rec.seen_at_ms >= (int64_t)window)
        return 0; // expired: the key may be used again
    return rec.job_id;
}

zl_verdict_t
zl_admission_decide (zl_admission_t *self, zl_producer_conn_t *p, const zl_job_spec_t *spec,
                     zl_admission_batch_t *batch, zl_now_t now)
{
    const zl_broker_config_t *cfg = self->env.cfg;
    zl_arena_t *turn = self->env.turn;
    self->env.counters[ZL_CTR_SUBMITTED]++;
    if (!zl_producer_conn_take_credit (p))
        return s_refuse (ZL_CTR_NO_CREDIT, ZL_REJECT_QUEUE_FULL, "sent without credit",
                         QUEUE_FULL_RETRY_MS);
    const char *bad = s_spec_problem (self, spec);
    if (bad)
        return s_refuse (ZL_CTR_INVALID, ZL_REJECT_INVALID, bad, 0);
    if (spec->payload.len > cfg->max_payload)
        return s_refuse (
            ZL_CTR_PAYLOAD_TOO_LARGE, ZL_REJECT_PAYLOAD_TOO_LARGE,
            zl_arena_printf (turn, "payload of %zu bytes exceeds the limit of %" PRIu64 " bytes",
                             spec->payload.len, cfg->max_payload),
            0);
    zl_lane_t *lane = zl_lanes_lookup (self->env.lanes, spec->lane);
    if (!lane && cfg->default_lane) {
        lane = zl_lanes_lookup (self->env.lanes, cfg->default_lane);
        self->env.counters[ZL_CTR_DEFAULT_LANE]++;
    }
    if (!lane) {
        // the declared lanes are listed in the first UNKNOWN_LANE reason of
        // a Submit only, so that the reply is not many times the request
        const char *why =
            batch->listed
                ? zl_arena_printf (turn, "lane '%s' is not declared", spec->lane)
                : zl_arena_printf (turn, "lane '%s' is not declared (declared: %s)", spec->lane,
                                   zl_lanes_names (self->env.lanes, turn, ZL_LANE_LIST_MAX));
        batch->listed = true;
        return s_refuse (ZL_CTR_UNKNOWN_LANE, ZL_REJECT_UNKNOWN_LANE, why, 0);
    }
    if (batch->may && !batch->may (batch->may_arg, spec->tenant))
        return s_refuse (
            ZL_CTR_UNAUTHORIZED, ZL_REJECT_UNAUTHORIZED,
            zl_arena_printf (turn, "this key may not submit for tenant '%.128s'", spec->tenant), 0);
    if (!batch->room || batch->failed)
        return s_refuse (ZL_CTR_STORE_FULL, ZL_REJECT_STORE_FULL, "the broker's store is full",
                         STORE_FULL_RETRY_MS);
    zl_tenant_t *tenant = zl_lanes_tenant_find (self->env.lanes, spec->tenant);
    if (!tenant && zl_lanes_tenant_count (self->env.lanes) >= cfg->max_tenants)
        return s_refuse (ZL_CTR_QUEUE_FULL, ZL_REJECT_QUEUE_FULL,
                         zl_arena_printf (turn,
                                          "the broker keeps max_tenants (%" PRIu64 ") tenants "
                                          "already: a new tenant is refused",
                                          cfg->max_tenants),
                         QUEUE_FULL_RETRY_MS);
    if (!tenant)
        tenant = zl_lanes_tenant (self->env.lanes, spec->tenant);
    uint64_t orig = s_duplicate_of (self, spec, now);
    if (orig) {
        self->env.counters[ZL_CTR_DUPLICATES]++;
        return (zl_verdict_t){.admit = ZL_ADMIT_DUPLICATE, .original = orig};
    }
    const char *full = NULL;
    if (batch->depth >= cfg->max_depth)
        full = "the broker's queue is full";
    else if (lane->cfg.max_depth && lane->depth >= lane->cfg.max_depth)
        full = "the lane's queue is full";
    else if (tenant->cfg.max_depth && tenant->depth >= tenant->cfg.max_depth)
        full = "the tenant's queue is full";
    if (full)
        return s_refuse (ZL_CTR_QUEUE_FULL, ZL_REJECT_QUEUE_FULL, full, QUEUE_FULL_RETRY_MS);
    return (zl_verdict_t){.admit = ZL_ADMIT_ACCEPT, .lane = lane, .tenant = tenant};
}

// ---------------------------------------------------------------- a Submit
typedef struct {
    const zl_job_spec_t *spec;
    uint64_t id;
    zl_flow_t *flow;
} staged_t;

static void
s_reject (zl_admission_t *self, zl_producer_conn_t *p, const zl_job_spec_t *spec,
          const zl_verdict_t *v)
{
    self->env.counters[v->counter]++;
    zl_replies_reject (self->env.replies, p, spec->seq, v->code, v->reason, v->retry_after_ms);
    zl_debug ("broker", "producer %s job seq %" PRIu64 " rejected: %s: %s",
              zl_producer_conn_name (p), spec->seq, zl_reject_code_name (v->code), v->reason);
}

int
zl_admission_submit (zl_admission_t *self, const zl_peer_t *peer, const zl_submit_t *sub,
                     zl_admission_may_fn *may, void *may_arg, zl_now_t now)
{
    zl_producer_conn_t *p = zl_producers_get (self->env.producers, peer, false);
    if (!p) // never said Hello, or forgotten after producer_idle
        return -1;
    zl_producer_conn_seen (p, now.mono_ms);
    zl_store_t *store = self->env.store;
    size_t bytes = 0;
    for (size_t i = 0; i < sub->n; i++)
        bytes += sub->jobs[i].payload.len + 256;
    zl_admission_batch_t batch = {.may = may,
                                  .may_arg = may_arg,
                                  .room = zl_store_has_room (store, bytes) &&
                                          zl_store_sub_begin (store) == ZL_STORE_OK,
                                  .depth = zl_lanes_total_depth (self->env.lanes)};
    staged_t *staged = zl_arena_alloc (self->env.turn, (sub->n ? sub->n : 1) * sizeof (staged_t));
    size_t n_staged = 0;
    const zl_verdict_t store_full = s_refuse (ZL_CTR_STORE_FULL, ZL_REJECT_STORE_FULL,
                                              "the broker's store is full", STORE_FULL_RETRY_MS);
    for (size_t i = 0; i < sub->n; i++) {
        const zl_job_spec_t *spec = &sub->jobs[i];
        zl_verdict_t v = zl_admission_decide (self, p, spec, &batch, now);
        if (v.admit == ZL_ADMIT_REFUSE) {
            s_reject (self, p, spec, &v);
            continue;
        }
        if (v.admit == ZL_ADMIT_DUPLICATE) {
            zl_replies_accept (self->env.replies, p, spec->seq, v.original, true);
            continue;
        }
        uint64_t id = zl_jobs_take_id (self->env.jobs);
        if (zl_jobs_stage (self->env.jobs, id, spec, &v.lane->cfg, now) != ZL_STORE_OK) {
            batch.failed = true; // this one and the staged ones are refused below
            s_reject (self, p, spec, &store_full);
            continue;
        }
        zl_lanes_count_depth (v.lane, v.tenant, 1); // reserved while staging
        batch.depth++;
        staged[n_staged++] =
            (staged_t){spec, id, zl_sched_flow (self->env.sched, v.lane, v.tenant)};
    }
    for (size_t i = 0; i < n_staged; i++)
        zl_lanes_count_depth (staged[i].flow->lane, staged[i].flow->tenant, -1);
    bool failed = batch.failed;
    if (batch.room && !failed && zl_store_sub_commit (store) != ZL_STORE_OK)
        failed = true;
    else if (batch.room && failed)
        zl_store_sub_abort (store);
    for (size_t i = 0; i < n_staged; i++) {
        const zl_job_spec_t *spec = staged[i].spec;
        if (failed) {
            s_reject (self, p, spec, &store_full);
            continue;
        }
        zl_jobs_accept (self->env.jobs, staged[i].id, spec, staged[i].flow, now);
        self->env.counters[ZL_CTR_ACCEPTED]++;
        zl_replies_accept (self->env.replies, p, spec->seq, staged[i].id, false);
    }
    return 0;
}
