#include "admission.h"

#include "log.h"
#include "text.h"
#include "zl_alloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUEUE_FULL_RETRY_MS 200

struct _zl_admission_t {
    zl_admission_env_t env;
    uint64_t first_id; // the first id a Submit with dependencies may give (staged parents)
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
    if (spec->has_priority && spec->priority > ZL_PRIORITY_MAX)
        return zl_arena_printf (a, "field 'priority' is %u: it must be 0 to %d", spec->priority,
                                ZL_PRIORITY_MAX);
    if (spec->deadline_ms && spec->open_batch)
        return "a batch's callback (open_batch) has no deadline: it waits for the batch";
    if (spec->batch && spec->batch[0] && strlen (spec->batch) > ZL_BATCH_ID_MAX)
        return zl_arena_printf (a, "field 'batch' is longer than %d bytes", ZL_BATCH_ID_MAX);
    if (spec->ordering_key && spec->ordering_key[0]) {
        if (strlen (spec->ordering_key) > ZL_ORDERING_KEY_MAX)
            return zl_arena_printf (a, "field 'ordering_key' is longer than %d bytes",
                                    ZL_ORDERING_KEY_MAX);
        if (spec->n_depends_on || spec->n_depends_on_seq || spec->open_batch)
            return "a job with an ordering_key may not have parents (depends_on) or open a "
                   "batch (open_batch): its key's order is what it waits for";
    }
    if (spec->open_batch) {
        if ((spec->batch && spec->batch[0]) || spec->n_depends_on || spec->n_depends_on_seq)
            return "a spec that opens a batch (open_batch) may not join one (batch) or have "
                   "parents (depends_on)";
        const char *id = spec->open_batch_id;
        if (id && id[0] && !zl_batches_id_valid (id))
            return zl_arena_printf (a,
                                    "field 'open_batch.batch_id' must be 1 to %d bytes of "
                                    "[A-Za-z0-9._:-], not all digits (those name the batches "
                                    "the broker names)",
                                    ZL_BATCH_ID_MAX);
    }
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
                         zl_store_room_retry_ms (self->env.store));
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
    // (after the key: a resend of an accepted job is its duplicate, even
    // once its deadline passed)
    if (spec->deadline_ms && (int64_t)spec->deadline_ms <= now.wall_ms + spec->delay_ms)
        return s_refuse (
            ZL_CTR_INVALID, ZL_REJECT_INVALID,
            zl_arena_printf (
                turn, "field 'deadline_ms' (%" PRIu64 ") has passed%s: the job could never run",
                spec->deadline_ms, spec->delay_ms ? " when its delay ends" : ""),
            0);
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

// ---------------------------------------------------------------- dependencies
/*  A Submit whose specs name parents by seq is taken in an order where
    every parent comes before its children (Kahn's algorithm), so a parent
    is decided, and gets its id, first; a spec on a cycle, or below one, is
    never reached and is refused CYCLE. */
typedef struct {
    uint64_t seq;
    size_t index;
} seq_index_t;

static int
s_cmp_seq (const void *a, const void *b)
{
    const seq_index_t *x = a, *y = b;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static int
s_cmp_u64 (const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

// The index of the spec with `seq`, SIZE_MAX if none, SIZE_MAX - 1 if several.
static size_t
s_seq_find (const seq_index_t *sorted, size_t n, uint64_t seq)
{
    seq_index_t key = {seq, 0};
    size_t lo = 0, hi = n;
    while (lo < hi) { // first >= key
        size_t mid = (lo + hi) / 2;
        if (s_cmp_seq (&sorted[mid], &key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == n || sorted[lo].seq != seq)
        return SIZE_MAX;
    if (lo + 1 < n && sorted[lo + 1].seq == seq)
        return SIZE_MAX - 1;
    return sorted[lo].index;
}

typedef struct {
    size_t *order;        // specs in the order to decide them
    size_t n_order;       // how many are reachable (the rest are on or below a cycle)
    size_t **parents;     // per spec: indexes of its parents in the Submit
    const char **problem; // per spec: why its depends_on_seq is bad, or NULL
} plan_t;

static void
s_plan (zl_admission_t *self, const zl_submit_t *sub, plan_t *plan)
{
    zl_arena_t *a = self->env.turn;
    size_t n = sub->n;
    seq_index_t *sorted = zl_arena_alloc (a, n * sizeof *sorted);
    for (size_t i = 0; i < n; i++)
        sorted[i] = (seq_index_t){sub->jobs[i].seq, i};
    qsort (sorted, n, sizeof *sorted, s_cmp_seq);
    plan->parents = zl_arena_calloc (a, n, sizeof (size_t *));
    plan->problem = zl_arena_calloc (a, n, sizeof (const char *));
    uint32_t *indeg = zl_arena_calloc (a, n, sizeof (uint32_t));
    size_t *n_kids = zl_arena_calloc (a, n, sizeof (size_t));
    for (size_t i = 0; i < n; i++) {
        const zl_job_spec_t *sp = &sub->jobs[i];
        if (!sp->n_depends_on_seq)
            continue;
        plan->parents[i] = zl_arena_alloc (a, sp->n_depends_on_seq * sizeof (size_t));
        for (size_t k = 0; k < sp->n_depends_on_seq && !plan->problem[i]; k++) {
            size_t p = s_seq_find (sorted, n, sp->depends_on_seq[k]);
            if (p == SIZE_MAX)
                plan->problem[i] = zl_arena_printf (
                    a, "depends_on_seq %" PRIu64 ": no spec of this Submit has that seq",
                    sp->depends_on_seq[k]);
            else if (p == SIZE_MAX - 1)
                plan->problem[i] = zl_arena_printf (
                    a, "depends_on_seq %" PRIu64 ": several specs of this Submit have that seq",
                    sp->depends_on_seq[k]);
            plan->parents[i][k] = p;
        }
        if (plan->problem[i])
            continue; // decided (refused) without waiting for its parents
        indeg[i] = (uint32_t)sp->n_depends_on_seq;
        for (size_t k = 0; k < sp->n_depends_on_seq; k++)
            n_kids[plan->parents[i][k]]++;
    }
    // children lists, then Kahn
    size_t **kids = zl_arena_calloc (a, n, sizeof (size_t *));
    size_t *fill = zl_arena_calloc (a, n, sizeof (size_t));
    for (size_t i = 0; i < n; i++)
        if (n_kids[i])
            kids[i] = zl_arena_alloc (a, n_kids[i] * sizeof (size_t));
    for (size_t i = 0; i < n; i++)
        if (plan->parents[i] && !plan->problem[i])
            for (size_t k = 0; k < sub->jobs[i].n_depends_on_seq; k++) {
                size_t p = plan->parents[i][k];
                kids[p][fill[p]++] = i;
            }
    plan->order = zl_arena_alloc (a, n * sizeof (size_t));
    size_t head = 0, tail = 0;
    for (size_t i = 0; i < n; i++)
        if (!indeg[i])
            plan->order[tail++] = i;
    while (head < tail) {
        size_t i = plan->order[head++];
        for (size_t k = 0; k < fill[i]; k++)
            if (--indeg[kids[i][k]] == 0)
                plan->order[tail++] = kids[i][k];
    }
    plan->n_order = tail;
    // the unreached, in Submit order, go last (refused CYCLE)
    for (size_t i = 0; i < n; i++)
        if (indeg[i])
            plan->order[tail++] = i;
}

/*  The parents of spec `i` as job ids (by id, then by seq via `ids`, the
    ids the Submit's specs got, 0 for one refused), checked: every id a job
    the broker holds (any state, a kept outcome included), no id twice, at
    most max_fan_in, no delay. Returns NULL and sets `*v` to the refusal, or
    the ids (turn arena) and their count in `*n_out`. */
static const uint64_t *
s_resolve_parents (zl_admission_t *self, const zl_submit_t *sub, const plan_t *plan, size_t i,
                   const uint64_t *ids, size_t *n_out, zl_verdict_t *v)
{
    zl_arena_t *a = self->env.turn;
    const zl_job_spec_t *sp = &sub->jobs[i];
    size_t n = sp->n_depends_on + sp->n_depends_on_seq;
    *n_out = n;
    if (n > self->env.cfg->max_fan_in) {
        *v = s_refuse (ZL_CTR_FAN_IN, ZL_REJECT_FAN_IN,
                       zl_arena_printf (a, "%zu parents: more than max_fan_in (%" PRIu64 ")", n,
                                        self->env.cfg->max_fan_in),
                       0);
        return NULL;
    }
    if (sp->delay_ms) {
        *v = s_refuse (ZL_CTR_INVALID, ZL_REJECT_INVALID,
                       "delay_ms cannot be combined with depends_on: a job with parents runs "
                       "when they are done",
                       0);
        return NULL;
    }
    uint64_t *out = zl_arena_alloc (a, n * sizeof *out);
    for (size_t k = 0; k < sp->n_depends_on; k++) {
        out[k] = sp->depends_on[k];
        zl_job_t *parent = out[k] ? zl_jobs_find (self->env.jobs, out[k]) : NULL;
        if (parent && strcmp (parent->flow->tenant->name, sp->tenant) != 0) {
            // a job gets its parents' results: never another tenant's
            *v = s_refuse (
                ZL_CTR_UNKNOWN_PARENT, ZL_REJECT_UNKNOWN_PARENT,
                zl_arena_printf (a, "parent job %" PRIu64 " belongs to another tenant", out[k]), 0);
            return NULL;
        }
        if (!parent) {
            *v = s_refuse (ZL_CTR_UNKNOWN_PARENT, ZL_REJECT_UNKNOWN_PARENT,
                           zl_arena_printf (a,
                                            "parent job %" PRIu64
                                            " is unknown: never issued, or finished without its "
                                            "outcome kept (or past result_retention)",
                                            out[k]),
                           0);
            return NULL;
        }
    }
    for (size_t k = 0; k < sp->n_depends_on_seq; k++) {
        size_t pi = plan->parents[i][k];
        uint64_t id = ids[pi];
        bool staged = id >= self->first_id; // taken by this Submit: accepted with it
        if (strcmp (sub->jobs[pi].tenant, sp->tenant) != 0) {
            *v = s_refuse (ZL_CTR_UNKNOWN_PARENT, ZL_REJECT_UNKNOWN_PARENT,
                           zl_arena_printf (a, "parent seq %" PRIu64 " is another tenant's job",
                                            sp->depends_on_seq[k]),
                           0);
            return NULL;
        }
        if (!id || (!staged && !zl_jobs_find (self->env.jobs, id))) {
            const char *why =
                id ? zl_arena_printf (a,
                                      "parent seq %" PRIu64 " is a duplicate of job %" PRIu64
                                      ", whose outcome is not kept",
                                      sp->depends_on_seq[k], id)
                   : zl_arena_printf (a, "parent seq %" PRIu64 " was rejected",
                                      sp->depends_on_seq[k]);
            *v = s_refuse (ZL_CTR_UNKNOWN_PARENT, ZL_REJECT_UNKNOWN_PARENT, why, 0);
            return NULL;
        }
        out[sp->n_depends_on + k] = id;
    }
    uint64_t *sorted = zl_arena_alloc (a, n * sizeof *sorted);
    memcpy (sorted, out, n * sizeof *sorted);
    qsort (sorted, n, sizeof *sorted, s_cmp_u64);
    for (size_t k = 1; k < n; k++)
        if (sorted[k] == sorted[k - 1]) {
            *v = s_refuse (ZL_CTR_INVALID, ZL_REJECT_INVALID,
                           zl_arena_printf (a, "parent job %" PRIu64 " is named twice", sorted[k]),
                           0);
            return NULL;
        }
    return out;
}

/*  The batches a Submit opens, as its specs are decided (their ids, copied
    to the turn arena, and tenants), so that later specs of it may join. */
typedef struct {
    const char **ids, **tenants;
    size_t n;
} opened_t;

static bool
s_opened (const opened_t *o, const char *id, const char **tenant)
{
    for (size_t i = 0; i < o->n; i++)
        if (!strcmp (o->ids[i], id)) {
            *tenant = o->tenants[i];
            return true;
        }
    return false;
}

/*  A spec that passed every other check, against the batches: one that
    opens a batch needs a new id; one that joins needs an open batch of its
    tenant. Returns the verdict (`v` unchanged when it passes). */
static zl_verdict_t
s_batch_verdict (zl_admission_t *self, const zl_job_spec_t *spec, const opened_t *opened,
                 zl_verdict_t v)
{
    zl_batches_t *batches = zl_jobs_batches (self->env.jobs);
    zl_arena_t *a = self->env.turn;
    const char *tenant;
    if (spec->open_batch) {
        const char *id = spec->open_batch_id;
        if (id && id[0] && (zl_batches_find (batches, id) || s_opened (opened, id, &tenant)))
            return s_refuse (ZL_CTR_BATCH_EXISTS, ZL_REJECT_BATCH_EXISTS,
                             zl_arena_printf (a, "a batch '%s' exists already", id), 0);
        return v;
    }
    if (!spec->batch || !spec->batch[0])
        return v;
    zl_batch_t *b = zl_batches_find (batches, spec->batch);
    if (!b) {
        if (s_opened (opened, spec->batch, &tenant) && !strcmp (tenant, spec->tenant))
            return v;
        return s_refuse (ZL_CTR_UNKNOWN_BATCH, ZL_REJECT_UNKNOWN_BATCH,
                         zl_arena_printf (a, "no batch '%s' is open here", spec->batch), 0);
    }
    if (strcmp (zl_batch_tenant (b), spec->tenant) != 0)
        return s_refuse (
            ZL_CTR_UNKNOWN_BATCH, ZL_REJECT_UNKNOWN_BATCH,
            zl_arena_printf (a, "batch '%s' is not tenant '%s''s", spec->batch, spec->tenant), 0);
    if (zl_batch_settled (b))
        return s_refuse (ZL_CTR_UNKNOWN_BATCH, ZL_REJECT_UNKNOWN_BATCH,
                         zl_arena_printf (a, "batch '%s' has settled", spec->batch), 0);
    if (zl_batch_cancelled (b) || zl_batch_closed (b))
        return s_refuse (ZL_CTR_BATCH_CLOSED, ZL_REJECT_BATCH_CLOSED,
                         zl_arena_printf (a, "batch '%s' is %s: no job joins it now", spec->batch,
                                          zl_batch_cancelled (b) ? "cancelled" : "closed"),
                         0);
    return v;
}

/*  Close batch `id` for `p` after its Submit's jobs joined (answered in its
    Accepted unless `quiet`). */
static void
s_close_batch (zl_admission_t *self, zl_producer_conn_t *p, const char *id,
               zl_admission_may_fn *may, void *may_arg, bool quiet, zl_now_t now)
{
    zl_arena_t *a = self->env.turn;
    zl_batch_t *b = zl_batches_find (zl_jobs_batches (self->env.jobs), id);
    const char *error = NULL;
    zl_counter_id_t counter = ZL_CTR_UNKNOWN_BATCH; // a refusal's
    if (!b)
        error = "no such batch here";
    else if (may && !may (may_arg, zl_batch_tenant (b))) {
        error =
            zl_arena_printf (a, "this key may not submit for tenant '%.128s'", zl_batch_tenant (b));
        counter = ZL_CTR_UNAUTHORIZED;
    } else if (zl_batch_cancelled (b)) {
        error = "the batch was cancelled";
        counter = ZL_CTR_BATCH_CLOSED;
    } else if (!zl_batch_closed (b) && !zl_batch_settled (b)) {
        zl_batches_close (zl_jobs_batches (self->env.jobs), b, now.wall_ms);
        self->env.counters[ZL_CTR_BATCHES_CLOSED]++;
    }
    if (error)
        self->env.counters[counter]++;
    if (!quiet)
        zl_replies_batch_closed (self->env.replies, p, zl_arena_strndup (a, id, strlen (id)),
                                 error);
}

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
    const zl_verdict_t store_full =
        s_refuse (ZL_CTR_STORE_FULL, ZL_REJECT_STORE_FULL, "the broker's store is full",
                  zl_store_room_retry_ms (store));
    // a workflow: parents before children (s_plan), their ids kept for them
    bool deps = false;
    for (size_t i = 0; i < sub->n && !deps; i++)
        deps = sub->jobs[i].n_depends_on || sub->jobs[i].n_depends_on_seq;
    plan_t plan = {0};
    opened_t opened = {zl_arena_alloc (self->env.turn, (sub->n + 1) * sizeof (char *)),
                       zl_arena_alloc (self->env.turn, (sub->n + 1) * sizeof (char *)), 0};
    uint64_t *ids = NULL;
    if (deps) {
        s_plan (self, sub, &plan);
        ids = zl_arena_calloc (self->env.turn, sub->n, sizeof *ids);
        self->first_id = zl_jobs_next_id (self->env.jobs);
    }
    for (size_t k = 0; k < sub->n; k++) {
        size_t i = deps ? plan.order[k] : k;
        const zl_job_spec_t *spec = &sub->jobs[i];
        zl_verdict_t v = zl_admission_decide (self, p, spec, &batch, now);
        if (v.admit == ZL_ADMIT_ACCEPT && (spec->open_batch || (spec->batch && spec->batch[0])))
            v = s_batch_verdict (self, spec, &opened, v);
        if (v.admit == ZL_ADMIT_ACCEPT && deps && (spec->n_depends_on || spec->n_depends_on_seq)) {
            size_t n_parents;
            const uint64_t *parents = NULL;
            if (k >= plan.n_order)
                v = s_refuse (ZL_CTR_CYCLE, ZL_REJECT_CYCLE,
                              "depends_on_seq makes a cycle (this spec is on it, or depends on "
                              "one that is)",
                              0);
            else if (plan.problem[i])
                v = s_refuse (ZL_CTR_UNKNOWN_PARENT, ZL_REJECT_UNKNOWN_PARENT, plan.problem[i], 0);
            else
                parents = s_resolve_parents (self, sub, &plan, i, ids, &n_parents, &v);
            if (parents) { // the spec with its parents resolved to ids
                zl_job_spec_t *copy = zl_arena_alloc (self->env.turn, sizeof *copy);
                *copy = *spec;
                copy->depends_on = parents;
                copy->n_depends_on = n_parents;
                copy->depends_on_seq = NULL;
                copy->n_depends_on_seq = 0;
                spec = copy;
            }
        }
        if (v.admit == ZL_ADMIT_REFUSE) {
            s_reject (self, p, spec, &v);
            continue;
        }
        if (v.admit == ZL_ADMIT_DUPLICATE) {
            zl_batch_t *ob =
                spec->open_batch
                    ? zl_batches_of_record (zl_jobs_batches (self->env.jobs), v.original)
                    : NULL;
            if (ob) // the batch it opened the first time
                zl_replies_accept_batch (
                    self->env.replies, p, spec->seq, v.original, true,
                    zl_arena_strndup (self->env.turn, zl_batch_id (ob), strlen (zl_batch_id (ob))));
            else
                zl_replies_accept (self->env.replies, p, spec->seq, v.original, true);
            if (ids)
                ids[i] = v.original;
            continue;
        }
        uint64_t id = zl_jobs_take_id (self->env.jobs);
        if (ids)
            ids[i] = id;
        if (zl_jobs_stage (self->env.jobs, id, spec, &v.lane->cfg, now) != ZL_STORE_OK) {
            batch.failed = true; // this one and the staged ones are refused below
            s_reject (self, p, spec, &store_full);
            continue;
        }
        zl_lanes_count_depth (v.lane, v.tenant, 1); // reserved while staging
        batch.depth++;
        if (spec->open_batch) {
            const char *name = zl_jobs_batch_name (self->env.jobs, id, spec);
            opened.ids[opened.n] = zl_arena_strndup (self->env.turn, name, strlen (name));
            opened.tenants[opened.n++] = spec->tenant;
        }
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
        if (spec->open_batch) {
            const char *name = zl_jobs_batch_name (self->env.jobs, staged[i].id, spec);
            self->env.counters[ZL_CTR_BATCHES_OPENED]++;
            zl_replies_accept_batch (self->env.replies, p, spec->seq, staged[i].id, false,
                                     zl_arena_strndup (self->env.turn, name, strlen (name)));
        } else
            zl_replies_accept (self->env.replies, p, spec->seq, staged[i].id, false);
    }
    // then the closes: the Submit's own opens that asked for it, and its
    // close_batches (each answered)
    for (size_t i = 0; i < n_staged && !failed; i++)
        if (staged[i].spec->open_batch && staged[i].spec->batch_close)
            s_close_batch (self, p,
                           zl_jobs_batch_name (self->env.jobs, staged[i].id, staged[i].spec), may,
                           may_arg, true, now);
    for (size_t i = 0; i < sub->n_close; i++)
        s_close_batch (self, p, sub->close_batches[i], may, may_arg, false, now);
    return 0;
}
