/*  broker: sockets, the loop, and one handler per message kind.

    Per-turn order (zl_broker_turn waits, s_turn does the rest; zl_broker_feed
    runs the same s_turn on one frame), the one place it is written down:
      1. wait for input or the next timer
      2. drain a batch from each socket and apply it to memory
         (bad input is answered at once through s_reject: counted, logged)
      3. fire due timers: lapsed leases, ended delays, dead workers,
         heartbeats, DLQ alerts
      4. dispatch ready jobs to workers with free capacity
      5. commit the turn's state changes to the store in one transaction
      6. send what promises a state change: Accepted/Rejected/Credit,
         Dispatch, Settled, and the DLQ events */
#include "broker.h"

#include "admin.h"
#include "arena.h"
#include "clients.h"
#include "clock.h"
#include "codec.h"
#include "counters.h"
#include "hist.h"
#include "http.h"
#include "jobs.h"
#include "lane.h"
#include "log.h"
#include "metrics.h"
#include "producers.h"
#include "rng.h"
#include "scheduler.h"
#include "security.h"
#include "stats.h"
#include "store.h"
#include "text.h"
#include "timers.h"
#include "wire.h"
#include "workers.h"
#include "zl_alloc.h"

#include <czmq.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define DRAIN_BATCH 256         // messages per socket per turn
#define DISPATCH_FRAME_JOBS 256 // jobs per Dispatch frame
#define DISPATCH_FRAME_BYTES (4u << 20)
#define MAX_NAME 128          // tenant, lane, worker, client names, header keys
#define MAX_KEY 256           // idempotency keys
#define MAX_HEADERS 64        // headers per job
#define MAX_HEADER_VALUE 4096 // bytes per header value
#define LANE_LIST_MAX 16      // lanes named in an error's "declared:" list
#define QUEUE_FULL_RETRY_MS 200
#define STORE_FULL_RETRY_MS 1000

typedef enum { SOCK_FRONTEND = 0, SOCK_BACKEND, SOCK_ADMIN, SOCK_COUNT } sock_kind_t;
static const char *s_sock_names[SOCK_COUNT] = {"frontend", "backend", "admin"};

// An admin reply held until the turn's commit (its strings are in the turn
// arena, which lives until the next turn).
typedef struct {
    zl_peer_t peer;
    zl_msg_t msg;
} admin_later_t;

struct _zl_broker_t {
    zl_broker_config_t *cfg;
    zsock_t *zsocks[SOCK_COUNT];
    void *socks[SOCK_COUNT];
    zsock_t *zevents;
    void *events;
    char endpoints[4][256];
    zl_codec_t *codec;
    zl_arena_t *turn; // strings that live until the end of the turn
    zl_rng_t rng;
    zl_lanes_t *lanes;
    zl_sched_t *sched;
    zl_timers_t *timers;
    zl_jobs_t *jobs;
    zl_workers_t *workers;
    zl_producers_t *producers;
    zl_store_t *store;
    zl_arena_t *frame; // records loaded for one Dispatch frame or event
    uint64_t stored_next_id;
    bool failed;             // the store failed: stop the loop
    int wire_dump;           // wire_dump: every frame sent, length-prefixed; -1 = none
    zl_security_t *security; // CURVE (or the plaintext endpoint check)
    zl_http_t *http;         // the metrics page, or NULL
    uint64_t counters[ZL_CTR_COUNT];
    uint64_t *dead_ids; // dead-lettered this turn, published after commit
    size_t n_dead, cap_dead;
    admin_later_t *later; // admin replies that report a change: sent after commit
    size_t n_later, cap_later;
    size_t worker_rr;
    int64_t started_ms;
    int64_t next_heartbeat_ms;
    int64_t next_alert_ms;
    int64_t next_prune_ms;
};

typedef struct {
    zl_broker_t *self;
    sock_kind_t sock;
    const zl_peer_t *peer;
    zl_now_t now;
    zcert_t *cert; // with CURVE: the client's certificate (role, tenants, lanes)
} ctx_t;

typedef void (handler_fn) (ctx_t *ctx, const zl_msg_t *msg);

// ---------------------------------------------------------------- replies
static void
s_send (ctx_t *ctx, const zl_msg_t *msg)
{
    zl_broker_t *self = ctx->self;
    if (zl_wire_send_to (self->socks[ctx->sock], ctx->peer, self->codec, msg) != 0) {
        self->counters[ZL_CTR_UNREACHABLE]++;
        zl_debug ("broker", "%s: reply %s not delivered: %s", s_sock_names[ctx->sock],
                  zl_msg_kind_name (msg->kind), zmq_strerror (errno));
    }
}

/*  The one path for bad input: count it, log it, answer with an Error. */
static void s_reject (ctx_t *ctx, zl_counter_id_t counter, zl_error_code_t code, uint64_t job_id,
                      uint64_t lease, const char *fmt, ...) __attribute__ ((format (printf, 6, 7)));

static void
s_reject (ctx_t *ctx, zl_counter_id_t counter, zl_error_code_t code, uint64_t job_id,
          uint64_t lease, const char *fmt, ...)
{
    char text[516];
    va_list ap;
    va_start (ap, fmt);
    int n = vsnprintf (text, sizeof text, fmt, ap);
    va_end (ap);
    // an echoed name must not be cut inside a character: replies are text
    size_t len = n < 0 ? 0 : (size_t)n < sizeof text - 1 ? (size_t)n : sizeof text - 1;
    text[zl_text_cut (text, len, 511)] = '\0';
    ctx->self->counters[counter]++;
    zl_warn ("broker", "%s: %s: %s", s_sock_names[ctx->sock], zl_error_code_name (code), text);
    zl_msg_t reply = {.kind = ZL_MSG_ERROR};
    reply.u.error = (zl_error_t){code, text, job_id, lease};
    s_send (ctx, &reply);
}

/*  The refusals of one message's items -- the items of an Ack, Nack or
    Extend, the lanes of a Ready -- answered together by one Error, so that
    no message earns more than one reply or one log line. Each refused item
    is counted. With `job_items`, the Error lists every refused job item
    with its code; its code, job_id and lease are those of the first. */
typedef struct {
    ctx_t *ctx;
    const char *what; // "ack", "ready", ...
    size_t total;     // items in the message
    bool job_items;
    size_t n;
    zl_item_error_t *items; // turn arena, `total` slots
    zl_error_code_t code;   // of the first refusal
    uint64_t job_id, lease; // of the first refusal
    char first[256];        // the first refusal in words
    uint32_t by_code[ZL_ERR_CODE_COUNT];
} refusals_t;

static void
s_refusals_init (refusals_t *r, ctx_t *ctx, const char *what, size_t total, bool job_items)
{
    memset (r, 0, sizeof *r);
    r->ctx = ctx;
    r->what = what;
    r->total = total;
    r->job_items = job_items;
}

static void s_refuse_item (refusals_t *r, zl_counter_id_t counter, zl_error_code_t code,
                           uint64_t job_id, uint64_t lease, const char *fmt, ...)
    __attribute__ ((format (printf, 6, 7)));

static void
s_refuse_item (refusals_t *r, zl_counter_id_t counter, zl_error_code_t code, uint64_t job_id,
               uint64_t lease, const char *fmt, ...)
{
    r->ctx->self->counters[counter]++;
    if ((unsigned)code < ZL_ERR_CODE_COUNT)
        r->by_code[code]++;
    if (r->n == 0) {
        va_list ap;
        va_start (ap, fmt);
        int n = vsnprintf (r->first, sizeof r->first, fmt, ap);
        va_end (ap);
        size_t len = n < 0 ? 0 : (size_t)n < sizeof r->first ? (size_t)n : sizeof r->first - 1;
        r->first[zl_text_cut (r->first, len, sizeof r->first - 5)] = '\0';
        r->code = code;
        r->job_id = job_id;
        r->lease = lease;
        if (r->job_items)
            r->items = zl_arena_alloc (r->ctx->self->turn, r->total * sizeof *r->items);
    }
    if (r->job_items)
        r->items[r->n] = (zl_item_error_t){job_id, lease, code};
    r->n++;
}

// Send the one Error for the refused items, if any; `tail` (or NULL) is
// appended to the text ("(declared: a, b)").
static void
s_refusals_send (refusals_t *r, const char *tail)
{
    if (!r->n)
        return;
    zl_broker_t *self = r->ctx->self;
    const char *text = r->first;
    if (r->total > 1) {
        char counts[256];
        size_t k = 0;
        counts[0] = '\0';
        for (int c = 0; c < ZL_ERR_CODE_COUNT && k < sizeof counts; c++)
            if (r->by_code[c]) {
                int w = snprintf (counts + k, sizeof counts - k, "%s%u %s", k ? ", " : "",
                                  r->by_code[c], zl_error_code_name ((zl_error_code_t)c));
                k += w > 0 ? (size_t)w : 0;
            }
        text = zl_arena_printf (self->turn, "%zu of %zu %s items refused (%s); the first: %s", r->n,
                                r->total, r->what, counts, r->first);
    }
    if (tail)
        text = zl_arena_printf (self->turn, "%s %s", text, tail);
    zl_warn ("broker", "%s: %s: %s", s_sock_names[r->ctx->sock], zl_error_code_name (r->code),
             text);
    zl_msg_t reply = {.kind = ZL_MSG_ERROR};
    reply.u.error = (zl_error_t){r->code,
                                 text,
                                 r->job_id,
                                 r->lease,
                                 r->job_items ? r->n : 0,
                                 r->job_items ? r->items : NULL};
    s_send (r->ctx, &reply);
}

// ---------------------------------------------------------------- authorization
/*  With CURVE on, each client certificate in the clients directory carries
    its binding as metadata: role (producer, worker, admin, subscriber),
    tenants and lanes (comma lists, or "*"). Without CURVE everything is
    allowed (loopback only, unless --insecure). */

// True if the sender has one of the roles (comma list); otherwise refuses.
static bool
s_role (ctx_t *ctx, const char *roles, const char *what)
{
    if (!ctx->self->cfg->curve)
        return true;
    const char *role = ctx->cert ? zcert_meta (ctx->cert, "role") : NULL;
    if (role && zl_clients_listed (roles, role))
        return true;
    s_reject (ctx, ZL_CTR_UNAUTHORIZED, ZL_ERR_UNAUTHORIZED, 0, 0,
              "this key (%s, role %s) may not %s", ctx->cert ? zcert_public_txt (ctx->cert) : "?",
              role ? role : "none", what);
    return false;
}

// True if the sender's certificate binds it to `name` in its `what` list.
static bool
s_bound (ctx_t *ctx, const char *what, const char *name)
{
    if (!ctx->self->cfg->curve)
        return true;
    return ctx->cert && zl_clients_listed (zcert_meta (ctx->cert, what), name);
}

// ---------------------------------------------------------------- producers
static uint64_t
s_total_depth (zl_broker_t *self)
{
    uint64_t depth = 0;
    for (uint32_t i = 0; i < zl_lanes_count (self->lanes); i++)
        depth += zl_lanes_at (self->lanes, i)->depth;
    return depth;
}

// Credit for one producer: what it already received plus its share of the
// free room, at most the configured window. Credit never shrinks.
static void
s_regrant (zl_broker_t *self, zl_producer_conn_t *p, uint64_t free_room, size_t n_producers)
{
    uint64_t share = free_room / (n_producers ? n_producers : 1);
    if (share > self->cfg->producer_window)
        share = self->cfg->producer_window;
    uint64_t limit = p->received + share;
    if (limit > p->limit)
        p->limit = limit;
}

static void
s_on_hello (ctx_t *ctx, const zl_msg_t *msg)
{
    zl_broker_t *self = ctx->self;
    if (!s_role (ctx, "producer", "submit jobs"))
        return;
    const char *bad = zl_text_name_problem (self->turn, msg->u.hello.client, MAX_NAME, true);
    if (bad) {
        s_reject (ctx, ZL_CTR_INVALID, ZL_ERR_INVALID, 0, 0, "Hello: field 'client' %s", bad);
        return;
    }
    zl_producer_conn_t *p = zl_producers_get (self->producers, ctx->peer, true);
    free (p->name);
    p->name = msg->u.hello.client[0] ? zl_strdup (msg->u.hello.client) : NULL;
    p->received = 0;
    p->limit = 0;
    p->sent_limit = UINT64_MAX; // force a Credit this turn
    p->last_seen_ms = ctx->now.mono_ms;
    size_t n;
    zl_producers_all (self->producers, &n);
    uint64_t depth = s_total_depth (self);
    s_regrant (self, p, depth < self->cfg->max_depth ? self->cfg->max_depth - depth : 0, n);
    zl_debug ("broker", "producer %s hello, credit %" PRIu64, p->name ? p->name : p->key, p->limit);
}

// The declared lanes, for an error text: the first LANE_LIST_MAX of them.
static const char *
s_lane_list (zl_broker_t *self)
{
    uint32_t n = zl_lanes_count (self->lanes);
    uint32_t shown = n < LANE_LIST_MAX ? n : LANE_LIST_MAX;
    size_t size = 32;
    for (uint32_t i = 0; i < shown; i++)
        size += strlen (zl_lanes_at (self->lanes, i)->name) + 2;
    char *out = zl_arena_alloc (self->turn, size);
    out[0] = '\0';
    for (uint32_t i = 0; i < shown; i++) {
        if (i)
            strcat (out, ", ");
        strcat (out, zl_lanes_at (self->lanes, i)->name);
    }
    if (shown < n)
        snprintf (out + strlen (out), 32, " and %u more", n - shown);
    return out;
}

static void
s_refuse_job (zl_broker_t *self, zl_producer_conn_t *p, const zl_job_spec_t *spec,
              zl_counter_id_t counter, zl_reject_code_t code, const char *reason,
              uint32_t retry_after_ms)
{
    self->counters[counter]++;
    zl_producer_conn_reject (p, spec->seq, code, reason, retry_after_ms);
    zl_debug ("broker", "producer %s job seq %" PRIu64 " rejected: %s: %s",
              p->name ? p->name : p->key, spec->seq, zl_reject_code_name (code), reason);
}

// Why the spec's fields break the rules (text.h, the limits above), or NULL.
static const char *
s_spec_problem (zl_broker_t *self, const zl_job_spec_t *spec)
{
    if (spec->invalid) // the codec found a string that is not valid text
        return spec->invalid;
    zl_arena_t *a = self->turn;
    const char *bad;
    if ((bad = zl_text_name_problem (a, spec->tenant, MAX_NAME, false)))
        return zl_arena_printf (a, "field 'tenant' %s", bad);
    if ((bad = zl_text_name_problem (a, spec->lane, MAX_NAME, false)))
        return zl_arena_printf (a, "field 'lane' %s", bad);
    if ((bad = zl_text_name_problem (a, spec->idempotency_key, MAX_KEY, true)))
        return zl_arena_printf (a, "field 'idempotency_key' %s", bad);
    if (spec->n_headers > MAX_HEADERS)
        return zl_arena_printf (a, "%zu headers: at most %d", spec->n_headers, MAX_HEADERS);
    for (size_t i = 0; i < spec->n_headers; i++) {
        if ((bad = zl_text_name_problem (a, spec->headers[i].key, MAX_NAME, false)))
            return zl_arena_printf (a, "field 'headers[%zu].key' %s", i, bad);
        if (strlen (spec->headers[i].value) > MAX_HEADER_VALUE)
            return zl_arena_printf (a, "field 'headers[%zu].value' is longer than %d bytes", i,
                                    MAX_HEADER_VALUE);
    }
    if (spec->max_attempts > UINT16_MAX)
        return zl_arena_printf (a, "field 'max_attempts' is above %d", UINT16_MAX);
    return NULL;
}

// Validate one job spec; returns its lane, or NULL after rejecting it. The
// declared lanes are listed in the first UNKNOWN_LANE reason of a Submit
// only (`*listed`), so that the reply is not many times the request.
static zl_lane_t *
s_validate_spec (zl_broker_t *self, zl_producer_conn_t *p, const zl_job_spec_t *spec, bool *listed)
{
    const char *bad = s_spec_problem (self, spec);
    if (bad) {
        s_refuse_job (self, p, spec, ZL_CTR_INVALID, ZL_REJECT_INVALID, bad, 0);
        return NULL;
    }
    if (spec->payload.len > self->cfg->max_payload) {
        s_refuse_job (self, p, spec, ZL_CTR_PAYLOAD_TOO_LARGE, ZL_REJECT_PAYLOAD_TOO_LARGE,
                      zl_arena_printf (
                          self->turn, "payload of %zu bytes exceeds the limit of %" PRIu64 " bytes",
                          spec->payload.len, self->cfg->max_payload),
                      0);
        return NULL;
    }
    zl_lane_t *lane = zl_lanes_lookup (self->lanes, spec->lane);
    if (!lane && self->cfg->default_lane) {
        lane = zl_lanes_lookup (self->lanes, self->cfg->default_lane);
        self->counters[ZL_CTR_DEFAULT_LANE]++;
    }
    if (!lane) {
        const char *why =
            *listed ? zl_arena_printf (self->turn, "lane '%s' is not declared", spec->lane)
                    : zl_arena_printf (self->turn, "lane '%s' is not declared (declared: %s)",
                                       spec->lane, s_lane_list (self));
        *listed = true;
        s_refuse_job (self, p, spec, ZL_CTR_UNKNOWN_LANE, ZL_REJECT_UNKNOWN_LANE, why, 0);
        return NULL;
    }
    return lane;
}

typedef struct {
    const zl_job_spec_t *spec;
    uint64_t id;
    zl_flow_t *flow;
} staged_t;

// An earlier job with this idempotency key inside the window, or 0.
static uint64_t
s_duplicate_of (zl_broker_t *self, const zl_job_spec_t *spec, zl_now_t now)
{
    zl_idem_rec_t rec;
    if (!spec->idempotency_key[0] ||
        zl_store_get_idem (self->store, spec->tenant, spec->idempotency_key, &rec) != ZL_STORE_OK)
        return 0;
    // the window of the key's class: a client library's own key only has to
    // outlive that library's resends
    uint64_t window = rec.generated ? self->cfg->resend_window_ms : self->cfg->dedup_window_ms;
    if (now.wall_ms - rec.seen_at_ms >= (int64_t)window)
        return 0; // expired: the key may be used again
    return rec.job_id;
}

/*  A Submit is accepted in two phases. Phase 1 writes every new job into a
    nested store batch (validation, credit, dedup and depth checked first);
    if the store runs out of room the nested batch is dropped and those jobs
    are rejected STORE_FULL, with nothing changed in memory. Phase 2 makes
    the staged jobs live. Accepted replies wait for the turn's commit. */
static void
s_on_submit (ctx_t *ctx, const zl_msg_t *msg)
{
    zl_broker_t *self = ctx->self;
    const zl_submit_t *sub = &msg->u.submit;
    if (!s_role (ctx, "producer", "submit jobs"))
        return;
    zl_producer_conn_t *p = zl_producers_get (self->producers, ctx->peer, false);
    if (!p) { // never said Hello, or forgotten after producer_idle
        s_reject (ctx, ZL_CTR_NOT_READY, ZL_ERR_NOT_READY, 0, 0,
                  "Submit before Hello: send Hello first (a connection's credit comes with its "
                  "Hello); none of the %zu job spec(s) was accepted",
                  sub->n);
        return;
    }
    p->last_seen_ms = ctx->now.mono_ms;

    size_t bytes = 0;
    for (size_t i = 0; i < sub->n; i++)
        bytes += sub->jobs[i].payload.len + 256;
    bool room =
        zl_store_has_room (self->store, bytes) && zl_store_sub_begin (self->store) == ZL_STORE_OK;
    staged_t *staged = zl_arena_alloc (self->turn, (sub->n ? sub->n : 1) * sizeof (staged_t));
    size_t n_staged = 0;
    bool failed = false, lanes_listed = false;
    uint64_t depth = s_total_depth (self);
    for (size_t i = 0; i < sub->n; i++) {
        const zl_job_spec_t *spec = &sub->jobs[i];
        self->counters[ZL_CTR_SUBMITTED]++;
        p->received++;
        if (p->received > p->limit) {
            s_refuse_job (self, p, spec, ZL_CTR_NO_CREDIT, ZL_REJECT_QUEUE_FULL,
                          "sent without credit", QUEUE_FULL_RETRY_MS);
            continue;
        }
        zl_lane_t *lane = s_validate_spec (self, p, spec, &lanes_listed);
        if (!lane)
            continue;
        if (!s_bound (ctx, "tenants", spec->tenant)) {
            s_refuse_job (self, p, spec, ZL_CTR_UNAUTHORIZED, ZL_REJECT_UNAUTHORIZED,
                          zl_arena_printf (self->turn,
                                           "this key may not submit for tenant '%.128s'",
                                           spec->tenant),
                          0);
            continue;
        }
        if (!room || failed) {
            s_refuse_job (self, p, spec, ZL_CTR_STORE_FULL, ZL_REJECT_STORE_FULL,
                          "the broker's store is full", STORE_FULL_RETRY_MS);
            continue;
        }
        zl_tenant_t *tenant = zl_lanes_tenant_find (self->lanes, spec->tenant);
        if (!tenant && zl_lanes_tenant_count (self->lanes) >= self->cfg->max_tenants) {
            s_refuse_job (self, p, spec, ZL_CTR_QUEUE_FULL, ZL_REJECT_QUEUE_FULL,
                          zl_arena_printf (self->turn,
                                           "the broker keeps max_tenants (%" PRIu64 ") tenants "
                                           "already: a new tenant is refused",
                                           self->cfg->max_tenants),
                          QUEUE_FULL_RETRY_MS);
            continue;
        }
        if (!tenant)
            tenant = zl_lanes_tenant (self->lanes, spec->tenant);
        uint64_t orig = s_duplicate_of (self, spec, ctx->now);
        if (orig) {
            self->counters[ZL_CTR_DUPLICATES]++;
            zl_producer_conn_accept (p, spec->seq, orig, true);
            continue;
        }
        const char *full = NULL;
        if (depth >= self->cfg->max_depth)
            full = "the broker's queue is full";
        else if (lane->cfg.max_depth && lane->depth >= lane->cfg.max_depth)
            full = "the lane's queue is full";
        else if (tenant->cfg.max_depth && tenant->depth >= tenant->cfg.max_depth)
            full = "the tenant's queue is full";
        if (full) {
            s_refuse_job (self, p, spec, ZL_CTR_QUEUE_FULL, ZL_REJECT_QUEUE_FULL, full,
                          QUEUE_FULL_RETRY_MS);
            continue;
        }
        uint64_t id = zl_jobs_take_id (self->jobs);
        if (zl_jobs_stage (self->jobs, id, spec, &lane->cfg, ctx->now) != ZL_STORE_OK) {
            failed = true; // this one and the staged ones are refused below
            s_refuse_job (self, p, spec, ZL_CTR_STORE_FULL, ZL_REJECT_STORE_FULL,
                          "the broker's store is full", STORE_FULL_RETRY_MS);
            continue;
        }
        lane->depth++; // reserved while staging, so the bounds hold exactly
        tenant->depth++;
        depth++;
        staged[n_staged++] = (staged_t){spec, id, zl_sched_flow (self->sched, lane, tenant)};
    }
    for (size_t i = 0; i < n_staged; i++) {
        staged[i].flow->lane->depth--;
        staged[i].flow->tenant->depth--;
    }
    if (room && !failed && zl_store_sub_commit (self->store) != ZL_STORE_OK)
        failed = true;
    else if (room && failed)
        zl_store_sub_abort (self->store);
    for (size_t i = 0; i < n_staged; i++) {
        const zl_job_spec_t *spec = staged[i].spec;
        if (failed) {
            s_refuse_job (self, p, spec, ZL_CTR_STORE_FULL, ZL_REJECT_STORE_FULL,
                          "the broker's store is full", STORE_FULL_RETRY_MS);
            continue;
        }
        zl_jobs_accept (self->jobs, staged[i].id, spec, staged[i].flow, ctx->now);
        self->counters[ZL_CTR_ACCEPTED]++;
        zl_producer_conn_accept (p, spec->seq, staged[i].id, false);
    }
}

// ---------------------------------------------------------------- workers
static void s_worker_gone (zl_broker_t *self, zl_worker_conn_t *w, const char *why, zl_now_t now);

static zl_worker_conn_t *
s_worker (ctx_t *ctx)
{
    zl_worker_conn_t *w = zl_workers_lookup (ctx->self->workers, ctx->peer);
    // a key removed from the clients directory loses its rights at once: its
    // messages are refused and its jobs go to other workers
    if (!s_role (ctx, "worker", "take jobs")) {
        if (w)
            s_worker_gone (ctx->self, w, "lost its key's worker role", ctx->now);
        return NULL;
    }
    if (!w) {
        s_reject (ctx, ZL_CTR_NOT_READY, ZL_ERR_NOT_READY, 0, 0,
                  "worker has not sent Ready (or was declared dead): send Ready");
        return NULL;
    }
    w->last_seen_ms = ctx->now.mono_ms;
    return w;
}

static void
s_on_ready (ctx_t *ctx, const zl_msg_t *msg)
{
    zl_broker_t *self = ctx->self;
    const zl_ready_t *r = &msg->u.ready;
    if (!s_role (ctx, "worker", "take jobs"))
        return;
    const char *bad = zl_text_name_problem (self->turn, r->name, MAX_NAME, true);
    if (bad) {
        s_reject (ctx, ZL_CTR_INVALID, ZL_ERR_INVALID, 0, 0, "Ready: field 'name' %s", bad);
        return;
    }
    // capacity 0 is a worker draining before it stops: it keeps what it
    // holds and gets nothing new
    if (r->n_lanes == 0) {
        s_reject (ctx, ZL_CTR_INVALID, ZL_ERR_INVALID, 0, 0, "Ready needs at least one lane");
        return;
    }
    zl_lane_t **lanes = zl_arena_alloc (self->turn, r->n_lanes * sizeof (zl_lane_t *));
    uint32_t n = 0;
    refusals_t ref;
    s_refusals_init (&ref, ctx, "Ready lane", r->n_lanes, false);
    bool undeclared = false;
    for (size_t i = 0; i < r->n_lanes; i++) {
        if ((bad = zl_text_name_problem (self->turn, r->lanes[i], MAX_NAME, false))) {
            s_refuse_item (&ref, ZL_CTR_INVALID, ZL_ERR_INVALID, 0, 0, "field 'lanes[%zu]' %s", i,
                           bad);
            continue;
        }
        if (!s_bound (ctx, "lanes", r->lanes[i])) {
            s_refuse_item (&ref, ZL_CTR_UNAUTHORIZED, ZL_ERR_UNAUTHORIZED, 0, 0,
                           "this key may not take jobs from lane '%s'", r->lanes[i]);
            continue;
        }
        zl_lane_t *lane = zl_lanes_lookup (self->lanes, r->lanes[i]);
        if (!lane) {
            undeclared = true;
            s_refuse_item (&ref, ZL_CTR_UNKNOWN_LANE, ZL_ERR_UNKNOWN_LANE, 0, 0,
                           "lane '%s' is not declared", r->lanes[i]);
            continue;
        }
        bool seen = false;
        for (uint32_t j = 0; j < n; j++)
            seen |= lanes[j] == lane;
        if (!seen)
            lanes[n++] = lane;
    }
    s_refusals_send (&ref, undeclared
                               ? zl_arena_printf (self->turn, "(declared: %s)", s_lane_list (self))
                               : NULL);
    if (n == 0)
        return;
    const char *key = ctx->cert ? zcert_public_txt (ctx->cert) : NULL;
    zl_worker_conn_t *w = zl_workers_add (self->workers, ctx->peer, r->name, r->instance, key,
                                          lanes, n, r->capacity, ctx->now.mono_ms);
    self->counters[ZL_CTR_WORKERS_READY]++;
    zl_info ("broker", "worker %s %s: %u lane(s), capacity %u", w->name,
             w->capacity ? "ready" : "draining", n, w->capacity);
    // the same worker process on a new connection: its leases follow it
    zl_worker_conn_t *old = zl_workers_find_instance (self->workers, r->instance, key, w);
    if (old) {
        uint32_t moved = old->in_flight;
        zl_worker_conn_adopt (w, old);
        zl_workers_remove (self->workers, old);
        self->counters[ZL_CTR_WORKERS_RECONNECTED]++;
        zl_info ("broker", "worker %s reconnected: its %u lease(s) move to the new connection",
                 w->name, moved);
    }
}

static void
s_on_heartbeat (ctx_t *ctx, const zl_msg_t *msg)
{
    (void)msg;
    s_worker (ctx);
}

// Count and record one refused settlement or extension.
static void
s_settle_refused (refusals_t *r, zl_settle_rc_t rc, uint64_t job_id, uint64_t lease)
{
    switch (rc) {
    case ZL_SETTLE_UNKNOWN_JOB:
        s_refuse_item (r, ZL_CTR_UNKNOWN_JOB, ZL_ERR_UNKNOWN_JOB, job_id, lease,
                       "%s for unknown job %" PRIu64, r->what, job_id);
        break;
    case ZL_SETTLE_NOT_HOLDER:
        s_refuse_item (r, ZL_CTR_NOT_HOLDER, ZL_ERR_NOT_HOLDER, job_id, lease,
                       "%s for job %" PRIu64 ": its lease was granted to another worker", r->what,
                       job_id);
        break;
    case ZL_SETTLE_MAX_RUN:
        s_refuse_item (r, ZL_CTR_MAX_RUN, ZL_ERR_MAX_RUN, job_id, lease,
                       "%s for job %" PRIu64 ": the lease now ends at the job's max run time and "
                       "cannot be extended past it",
                       r->what, job_id);
        break;
    default:
        s_refuse_item (r, ZL_CTR_STALE_LEASE, ZL_ERR_STALE_LEASE, job_id, lease,
                       "%s for job %" PRIu64 " with stale lease %" PRIu64, r->what, job_id, lease);
        break;
    }
}

static void
s_on_ack (ctx_t *ctx, const zl_msg_t *msg)
{
    zl_worker_conn_t *w = s_worker (ctx);
    if (!w)
        return;
    refusals_t ref;
    s_refusals_init (&ref, ctx, "ack", msg->u.ack.n, true);
    for (size_t i = 0; i < msg->u.ack.n; i++) {
        const zl_ack_item_t *it = &msg->u.ack.items[i];
        zl_settle_rc_t rc = zl_jobs_ack (ctx->self->jobs, w, it, ctx->now);
        if (rc == ZL_SETTLE_OK) {
            ctx->self->counters[ZL_CTR_ACKED]++;
            zl_worker_conn_queue_settled (w, it->job_id, it->lease);
        } else
            s_settle_refused (&ref, rc, it->job_id, it->lease);
    }
    s_refusals_send (&ref, NULL);
}

static void
s_on_nack (ctx_t *ctx, const zl_msg_t *msg)
{
    zl_worker_conn_t *w = s_worker (ctx);
    if (!w)
        return;
    refusals_t ref;
    s_refusals_init (&ref, ctx, "nack", msg->u.nack.n, true);
    for (size_t i = 0; i < msg->u.nack.n; i++) {
        const zl_nack_item_t *it = &msg->u.nack.items[i];
        if ((unsigned)it->cls > ZL_FAIL_PERMANENT) {
            s_refuse_item (&ref, ZL_CTR_INVALID, ZL_ERR_INVALID, it->job_id, it->lease,
                           "nack for job %" PRIu64 ": unknown failure class %u (TRANSIENT 1, "
                           "THROTTLED 2, PERMANENT 3)",
                           it->job_id, (unsigned)it->cls);
            continue;
        }
        zl_settle_rc_t rc = zl_jobs_nack (ctx->self->jobs, w, it, ctx->now);
        if (rc == ZL_SETTLE_OK) {
            ctx->self->counters[ZL_CTR_NACKED]++;
            zl_worker_conn_queue_settled (w, it->job_id, it->lease);
        } else
            s_settle_refused (&ref, rc, it->job_id, it->lease);
    }
    s_refusals_send (&ref, NULL);
}

static void
s_on_extend (ctx_t *ctx, const zl_msg_t *msg)
{
    zl_worker_conn_t *w = s_worker (ctx);
    if (!w)
        return;
    refusals_t ref;
    s_refusals_init (&ref, ctx, "extend", msg->u.extend.n, true);
    for (size_t i = 0; i < msg->u.extend.n; i++) {
        const zl_extend_item_t *it = &msg->u.extend.items[i];
        if (it->lease_ms == 0) {
            s_refuse_item (&ref, ZL_CTR_INVALID, ZL_ERR_INVALID, it->job_id, it->lease,
                           "extend for job %" PRIu64 ": field 'lease_ms' must be above 0",
                           it->job_id);
            continue;
        }
        zl_settle_rc_t rc = zl_jobs_extend (ctx->self->jobs, w, it, ctx->now);
        if (rc == ZL_SETTLE_OK || rc == ZL_SETTLE_MAX_RUN)
            ctx->self->counters[ZL_CTR_EXTENDED]++;
        if (rc != ZL_SETTLE_OK)
            s_settle_refused (&ref, rc, it->job_id, it->lease);
    }
    s_refusals_send (&ref, NULL);
}

// ---------------------------------------------------------------- admin
static void s_on_admin (ctx_t *ctx, const zl_msg_t *msg);

// ---------------------------------------------------------------- dispatch table

static handler_fn *const s_handlers[SOCK_COUNT][ZL_MSG_KIND_COUNT] = {
    [SOCK_FRONTEND] = {[ZL_MSG_HELLO] = s_on_hello, [ZL_MSG_SUBMIT] = s_on_submit},
    [SOCK_BACKEND] = {[ZL_MSG_READY] = s_on_ready,
                      [ZL_MSG_HEARTBEAT] = s_on_heartbeat,
                      [ZL_MSG_ACK] = s_on_ack,
                      [ZL_MSG_NACK] = s_on_nack,
                      [ZL_MSG_EXTEND] = s_on_extend},
    [SOCK_ADMIN] = {[ZL_MSG_ADMIN_REQUEST] = s_on_admin},
};

static void
s_handle_frame (zl_broker_t *self, sock_kind_t sock, const zl_peer_t *peer, zcert_t *cert,
                const void *data, size_t size, bool extra_frames, zl_now_t now)
{
    ctx_t ctx = {self, sock, peer, now, cert};
    self->counters[ZL_CTR_FRAMES_IN]++;
    if (extra_frames) {
        s_reject (&ctx, ZL_CTR_BAD_FRAME, ZL_ERR_BAD_FRAME, 0, 0,
                  "a message must be exactly one frame holding one Envelope");
        return;
    }
    zl_msg_t msg;
    zl_decode_rc_t rc = zl_codec_decode (self->codec, data, size, &msg);
    if (rc == ZL_DECODE_BAD_FRAME) {
        s_reject (&ctx, ZL_CTR_BAD_FRAME, ZL_ERR_BAD_FRAME, 0, 0,
                  "frame of %zu bytes is not a valid zlane Envelope", size);
        return;
    }
    if (rc == ZL_DECODE_BAD_VERSION) {
        s_reject (&ctx, ZL_CTR_BAD_VERSION, ZL_ERR_BAD_VERSION, 0, 0,
                  "unsupported protocol version (this broker speaks version %d)",
                  ZL_PROTOCOL_VERSION);
        return;
    }
    bool decoded = rc == ZL_DECODE_OK || rc == ZL_DECODE_BAD_TEXT;
    handler_fn *fn = decoded ? s_handlers[sock][msg.kind] : NULL;
    if (!fn) {
        s_reject (&ctx, ZL_CTR_UNKNOWN_KIND, ZL_ERR_UNKNOWN_KIND, 0, 0,
                  "message kind '%s' is not valid on the %s socket",
                  decoded ? zl_msg_kind_name (msg.kind) : "unknown", s_sock_names[sock]);
        return;
    }
    if (rc == ZL_DECODE_BAD_TEXT) { // before anything is done or stored
        s_reject (&ctx, ZL_CTR_INVALID, ZL_ERR_INVALID, 0, 0, "%s: %s", zl_msg_kind_name (msg.kind),
                  zl_codec_error (self->codec));
        return;
    }
    zl_trace ("broker", "%s <- %s", s_sock_names[sock], zl_msg_kind_name (msg.kind));
    fn (&ctx, &msg);
}

// Drain up to DRAIN_BATCH messages from one ROUTER socket.
static int
s_drain (zl_broker_t *self, sock_kind_t sock, zl_now_t now)
{
    void *s = self->socks[sock];
    int n = 0;
    while (n < DRAIN_BATCH) {
        zmq_msg_t id, body;
        zmq_msg_init (&id);
        if (zmq_msg_recv (&id, s, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close (&id);
            break;
        }
        n++;
        zl_peer_t peer;
        size_t idlen = zmq_msg_size (&id);
        peer.len = (uint8_t)(idlen > ZL_PEER_ID_MAX ? ZL_PEER_ID_MAX : idlen);
        memcpy (peer.data, zmq_msg_data (&id), peer.len);
        bool more = zmq_msg_more (&id);
        zmq_msg_close (&id);
        if (!more)
            continue; // a ROUTER always delivers id + body; nothing to answer
        zmq_msg_init (&body);
        if (zmq_msg_recv (&body, s, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close (&body);
            continue;
        }
        bool extra = zmq_msg_more (&body);
        while (zmq_msg_more (&body)) { // discard the rest of a multi-frame message
            zmq_msg_t rest;
            zmq_msg_init (&rest);
            int rc = zmq_msg_recv (&rest, s, ZMQ_DONTWAIT);
            bool again = rc >= 0 && zmq_msg_more (&rest);
            zmq_msg_close (&rest);
            if (!again)
                break;
        }
        // with CURVE, ZAP put the client's public key on every frame it sends
        zcert_t *cert = NULL;
        if (zl_security_curve (self->security)) {
            const char *key = zmq_msg_gets (&body, "User-Id");
            cert = zl_security_client (self->security, key, now.mono_ms);
        }
        s_handle_frame (self, sock, &peer, cert, zmq_msg_data (&body), zmq_msg_size (&body), extra,
                        now);
        zmq_msg_close (&body);
    }
    return n;
}

// ---------------------------------------------------------------- timers
static void
s_worker_gone (zl_broker_t *self, zl_worker_conn_t *w, const char *why, zl_now_t now)
{
    size_t n = zl_jobs_release_worker (self->jobs, w, ZL_OUTCOME_WORKER_DEAD, why, now);
    zl_warn ("broker", "worker %s %s; %zu job(s) back to ready", w->name, why, n);
    self->counters[ZL_CTR_DEAD_WORKERS]++;
    zl_workers_remove (self->workers, w);
}

static void
s_liveness (zl_broker_t *self, zl_now_t now)
{
    int64_t limit = (int64_t)(self->cfg->heartbeat_ms * self->cfg->liveness);
    size_t n;
    zl_worker_conn_t **all = zl_workers_all (self->workers, &n);
    for (size_t i = 0; i < n;) {
        zl_worker_conn_t *w = all[i];
        if (now.mono_ms - w->last_seen_ms > limit) {
            char why[96];
            snprintf (why, sizeof why, "silent for %" PRId64 " ms (liveness %" PRId64 " ms)",
                      now.mono_ms - w->last_seen_ms, limit);
            s_worker_gone (self, w, why, now); // swaps the last worker into slot i
            all = zl_workers_all (self->workers, &n);
        } else
            i++;
    }
}

static void
s_heartbeat (zl_broker_t *self, zl_now_t now)
{
    zl_msg_t hb = {.kind = ZL_MSG_HEARTBEAT};
    size_t n;
    zl_worker_conn_t **all = zl_workers_all (self->workers, &n);
    for (size_t i = 0; i < n; i++)
        zl_wire_send_to (self->socks[SOCK_BACKEND], &all[i]->peer, self->codec, &hb);
}

static void
s_dlq_alert (zl_broker_t *self, zl_now_t now)
{
    zl_dlq_t *dlq = zl_jobs_dlq (self->jobs);
    zl_job_t *oldest = zl_dlq_first (dlq);
    if (!oldest)
        return;
    zl_msg_t ev = {.kind = ZL_MSG_DLQ_ALERT};
    ev.u.dlq_alert.depth = zl_dlq_depth (dlq);
    ev.u.dlq_alert.oldest_age_ms = (uint64_t)(now.wall_ms - oldest->dead_at_ms);
    if (zl_wire_publish (self->events, "alert.dlq", self->codec, &ev) == 0)
        self->counters[ZL_CTR_EVENTS_PUBLISHED]++;
}

static void
s_on_job_event (void *arg, zl_jobs_event_t ev, zl_job_t *job)
{
    zl_broker_t *self = arg;
    if (ev != ZL_JOBS_EV_DEAD)
        return;
    self->counters[ZL_CTR_DEAD_LETTERED]++;
    if (self->n_dead == self->cap_dead) {
        self->cap_dead = self->cap_dead ? self->cap_dead * 2 : 16;
        self->dead_ids = zl_realloc (self->dead_ids, self->cap_dead * sizeof (uint64_t));
    }
    self->dead_ids[self->n_dead++] = job->id;
}

// A producer that has sent nothing for `producer_idle` is forgotten: its
// credit goes back to the others. It is told so (Error NOT_READY): one that
// still lives, waiting for credit perhaps, sends Hello again and gets its
// share. A Submit from it before that gets NOT_READY too.
static void
s_forget_producers (zl_broker_t *self, zl_now_t now)
{
    size_t n;
    zl_producer_conn_t **all = zl_producers_all (self->producers, &n);
    for (size_t i = 0; i < n;) {
        if (now.mono_ms - all[i]->last_seen_ms > (int64_t)self->cfg->producer_idle_ms &&
            !all[i]->n_acc && !all[i]->n_rej) {
            ctx_t ctx = {self, SOCK_FRONTEND, &all[i]->peer, now, NULL};
            zl_msg_t m = {.kind = ZL_MSG_ERROR};
            m.u.error = (zl_error_t){ZL_ERR_NOT_READY,
                                     "forgotten after producer_idle without a message: send "
                                     "Hello again for credit",
                                     0,
                                     0,
                                     0,
                                     NULL};
            s_send (&ctx, &m);
            zl_debug ("broker", "producer %s forgotten after %" PRIu64 " ms idle",
                      all[i]->name ? all[i]->name : all[i]->key, self->cfg->producer_idle_ms);
            zl_producers_remove (self->producers, all[i]); // swaps the last into slot i
            all = zl_producers_all (self->producers, &n);
        } else
            i++;
    }
}

// Purge dead letters past dlq_retention, oldest first (the DLQ is in the
// order jobs died), at most MAX_EXPIRE a turn.
#define MAX_EXPIRE 10000
static void
s_expire_dead (zl_broker_t *self, zl_now_t now)
{
    int64_t keep = (int64_t)self->cfg->dlq_retention_ms;
    if (!keep)
        return;
    zl_dlq_t *dlq = zl_jobs_dlq (self->jobs);
    uint64_t n = 0;
    zl_job_t *j;
    while (n < MAX_EXPIRE && (j = zl_dlq_first (dlq)) && now.wall_ms - j->dead_at_ms >= keep) {
        zl_jobs_purge (self->jobs, j);
        n++;
    }
    if (n) {
        self->counters[ZL_CTR_DLQ_EXPIRED] += n;
        zl_info ("broker",
                 "purged %" PRIu64 " dead letter(s) older than dlq_retention (%" PRId64 " ms)", n,
                 keep);
    }
}

static void
s_fire_timers (zl_broker_t *self, zl_now_t now)
{
    zl_jobs_fire_timers (self->jobs, now);
    if (now.mono_ms >= self->next_heartbeat_ms) {
        s_liveness (self, now);
        s_heartbeat (self, now);
        self->next_heartbeat_ms = now.mono_ms + (int64_t)self->cfg->heartbeat_ms;
    }
    if (now.mono_ms >= self->next_alert_ms) {
        s_dlq_alert (self, now);
        self->next_alert_ms = now.mono_ms + (int64_t)self->cfg->dlq_alert_ms;
    }
    // expired idempotency keys, every turn (inside the turn's store batch):
    // bounded work that keeps up with the keys the turn added
    zl_idem_policy_t idem = {self->cfg->resend_window_ms, self->cfg->dedup_window_ms,
                             zl_broker_config_dedup_max_keys (self->cfg)};
    zl_store_prune_idem (self->store, now.wall_ms, &idem, 1024);
    if (now.mono_ms >= self->next_prune_ms) { // inside the turn's store batch
        s_forget_producers (self, now);
        s_expire_dead (self, now);
        self->next_prune_ms = now.mono_ms + 1000;
    }
}

// ---------------------------------------------------------------- dispatch

static void
s_dispatch (zl_broker_t *self, zl_now_t now)
{
    size_t n;
    zl_worker_conn_t **all = zl_workers_all (self->workers, &n);
    zl_sched_wake (self->sched, now.mono_ms);
    if (n == 0)
        return;
    // one job at a time round the workers, so load spreads evenly
    bool progress = true;
    size_t start = self->worker_rr++ % n;
    while (progress) {
        progress = false;
        for (size_t k = 0; k < n; k++) {
            zl_worker_conn_t *w = all[(start + k) % n];
            if (w->in_flight >= w->capacity)
                continue;
            zl_job_t *job = zl_sched_next (self->sched, w->lanes, w->n_lanes, now.mono_ms);
            if (!job)
                continue;
            // a random token: a worker cannot guess another's lease
            zl_jobs_lease (self->jobs, job, w, zl_rng_next (&self->rng) | 1, now);
            zl_worker_conn_queue_job (w, job);
            self->counters[ZL_CTR_DISPATCHED]++;
            progress = true;
        }
    }
}

// ---------------------------------------------------------------- commit
// Step 5 of the turn: one store transaction holds every change the turn made
// (group commit). Nothing below runs before it has returned: a reply that
// promises durability is only sent for what is on disk. A failed commit
// leaves memory ahead of the store, so the broker stops without replying;
// on restart it recovers exactly what was committed.
static int
s_commit (zl_broker_t *self)
{
    if (zl_jobs_store_failed (self->jobs)) {
        zl_error ("broker", "a store write failed this turn: stopping without replying; a "
                            "restart recovers the last committed state");
        return -1;
    }
    if (!zl_store_in_batch (self->store))
        return 0;
    uint64_t next_id = zl_jobs_next_id (self->jobs);
    if (next_id != self->stored_next_id) {
        zl_store_set_next_id (self->store, next_id);
        self->stored_next_id = next_id;
    }
    zl_store_rc_t rc = zl_store_commit (self->store);
    if (rc != ZL_STORE_OK) {
        zl_error ("broker",
                  "store commit failed (%s): stopping without replying; a restart "
                  "recovers the last committed state",
                  rc == ZL_STORE_FULL ? "store full" : "I/O error");
        return -1;
    }
    return 0;
}

// ---------------------------------------------------------------- replies
static void
s_flush_producers (zl_broker_t *self)
{
    size_t n;
    zl_producer_conn_t **all = zl_producers_all (self->producers, &n);
    uint64_t depth = s_total_depth (self);
    uint64_t room = depth < self->cfg->max_depth ? self->cfg->max_depth - depth : 0;
    for (size_t i = 0; i < n; i++) {
        zl_producer_conn_t *p = all[i];
        ctx_t ctx = {self, SOCK_FRONTEND, &p->peer, {0}};
        if (p->n_acc) {
            zl_msg_t m = {.kind = ZL_MSG_ACCEPTED};
            m.u.accepted = (zl_accepted_t){p->n_acc, p->acc};
            s_send (&ctx, &m);
            p->n_acc = 0;
        }
        if (p->n_rej) {
            zl_msg_t m = {.kind = ZL_MSG_REJECTED};
            m.u.rejected = (zl_rejected_t){p->n_rej, p->rej};
            s_send (&ctx, &m);
            p->n_rej = 0;
        }
        s_regrant (self, p, room, n);
        if (p->limit != p->sent_limit) {
            zl_msg_t m = {.kind = ZL_MSG_CREDIT};
            m.u.credit.limit = p->limit;
            s_send (&ctx, &m);
            p->sent_limit = p->limit;
        }
    }
}

static int
s_send_dispatch (zl_broker_t *self, zl_worker_conn_t *w, zl_job_msg_t *msgs, size_t n)
{
    zl_msg_t m = {.kind = ZL_MSG_DISPATCH};
    m.u.dispatch = (zl_dispatch_t){n, msgs};
    return zl_wire_send_to (self->socks[SOCK_BACKEND], &w->peer, self->codec, &m);
}

// The Job message for a leased job, its payload read from the store into
// the frame arena.
static int
s_job_msg (zl_broker_t *self, zl_job_t *job, zl_job_msg_t *out)
{
    zl_job_rec_t rec;
    if (zl_jobs_load (self->jobs, job, self->frame, &rec, NULL) != ZL_STORE_OK)
        return -1;
    const char *key = rec.idempotency_key;
    if (!key[0]) {
        char *k = zl_arena_alloc (self->frame, 32);
        snprintf (k, 32, "job-%" PRIu64, job->id);
        key = k;
    }
    *out = (zl_job_msg_t){.job_id = job->id,
                          .lease = job->lease->token,
                          .attempt = job->attempt,
                          .tenant = job->flow->tenant->name,
                          .lane = job->flow->lane->name,
                          .payload = rec.payload,
                          .n_headers = rec.n_headers,
                          .headers = rec.headers,
                          .idempotency_key = key,
                          .lease_ms = job->lease_ms,
                          .max_run_ms = job->max_run_ms,
                          .max_attempts = job->max_attempts,
                          .enqueued_at_ms = (uint64_t)rec.enqueued_at_ms};
    return 0;
}

static void
s_flush_workers (zl_broker_t *self, zl_now_t now)
{
    size_t n_gone = 0;
    size_t n;
    zl_workers_all (self->workers, &n);
    zl_worker_conn_t **gone =
        zl_arena_alloc (self->turn, (n ? n : 1) * sizeof (zl_worker_conn_t *));
    zl_job_msg_t *msgs = zl_arena_alloc (self->turn, DISPATCH_FRAME_JOBS * sizeof *msgs);
    for (zl_worker_conn_t *w = zl_workers_take_dirty (self->workers); w; w = w->next_dirty) {
        bool ok = true;
        if (w->n_settled) {
            zl_msg_t m = {.kind = ZL_MSG_SETTLED};
            m.u.settled = (zl_settled_t){w->n_settled, w->out_settled};
            ok = zl_wire_send_to (self->socks[SOCK_BACKEND], &w->peer, self->codec, &m) == 0;
            w->n_settled = 0;
        }
        size_t k = 0, bytes = 0;
        zl_arena_reset (self->frame);
        for (uint32_t i = 0; i < w->n_out && ok; i++) {
            zl_job_t *job = w->out_jobs[i];
            if (job->state == ZL_JOB_LEASED && s_job_msg (self, job, &msgs[k]) == 0) {
                bytes += msgs[k].payload.len;
                k++;
            }
            if (k &&
                (k == DISPATCH_FRAME_JOBS || bytes >= DISPATCH_FRAME_BYTES || i + 1 == w->n_out)) {
                ok = s_send_dispatch (self, w, msgs, k) == 0;
                k = 0;
                bytes = 0;
                zl_arena_reset (self->frame);
            }
        }
        w->n_out = 0;
        if (!ok) { // ROUTER_MANDATORY: the worker's connection is gone
            self->counters[ZL_CTR_UNREACHABLE]++;
            gone[n_gone++] = w;
        }
    }
    // jobs queued for an unreachable worker go back to ready with the rest.
    // This turn's batch is committed already: their state changes open the
    // next one, which the next turn commits before it replies.
    if (n_gone && zl_store_begin (self->store) != ZL_STORE_OK) {
        self->failed = true;
        return;
    }
    for (size_t i = 0; i < n_gone; i++)
        s_worker_gone (self, gone[i], "unreachable", now);
}

static void
s_publish_dead (zl_broker_t *self)
{
    for (size_t i = 0; i < self->n_dead; i++) {
        zl_job_t *job = zl_jobs_find (self->jobs, self->dead_ids[i]);
        zl_msg_t ev = {.kind = ZL_MSG_DEAD_LETTER};
        zl_arena_reset (self->frame);
        if (!job || job->state != ZL_JOB_DEAD ||
            zl_jobs_dead_letter (self->jobs, job, true, self->frame, &ev.u.dead_letter) != 0)
            continue;
        const char *topic = zl_arena_printf (self->turn, "dlq.%s.%s", job->flow->lane->name,
                                             job->flow->tenant->name);
        if (zl_wire_publish (self->events, topic, self->codec, &ev) == 0)
            self->counters[ZL_CTR_EVENTS_PUBLISHED]++;
    }
    self->n_dead = 0;
}

// ---------------------------------------------------------------- the turn
// One frame handed in by zl_broker_feed instead of read from a socket.
typedef struct {
    sock_kind_t sock;
    zl_peer_t peer;
    const void *data;
    size_t size;
} fed_t;

static void s_serve_metrics (zl_broker_t *self, zl_now_t now);
static void s_flush_admin (zl_broker_t *self);

/*  Steps 2-6 of a turn, in their order: drain and apply (the sockets that
    `items` marks readable, or the one `fed` frame), timers, dispatch,
    commit, replies. Returns 0, or -1 once the store failed. */
static int
s_turn (zl_broker_t *self, const zmq_pollitem_t *items, const fed_t *fed)
{
    self->counters[ZL_CTR_TURNS]++;
    zl_arena_reset (self->turn);

    // 2. drain and apply (every change goes into the turn's store batch)
    zl_now_t now = zl_now ();
    if (zl_store_begin (self->store) != ZL_STORE_OK) {
        self->failed = true;
        return -1;
    }
    if (fed)
        s_handle_frame (self, fed->sock, &fed->peer, NULL, fed->data, fed->size, false, now);
    for (int i = 0; items && i < SOCK_COUNT; i++)
        if (items[i].revents & ZMQ_POLLIN)
            s_drain (self, (sock_kind_t)i, now);
    if (self->http && items && (items[SOCK_COUNT].revents & ZMQ_POLLIN))
        s_serve_metrics (self, now);

    // 3. timers (and refused handshakes, counted)
    s_fire_timers (self, now);
    self->counters[ZL_CTR_AUTH_FAILED] += zl_security_refused (self->security);
    if (self->http)
        zl_http_sweep (self->http, now.mono_ms);

    // 4. dispatch
    s_dispatch (self, now);

    // 5. commit
    if (s_commit (self) != 0) {
        self->failed = true;
        return -1;
    }

    // 6. replies that promise a state change, then events. The events go
    // before the workers' flush: a worker found gone there can dead-letter a
    // job in a batch the next turn commits, and its event waits for that.
    s_flush_producers (self);
    s_flush_admin (self);
    s_publish_dead (self);
    s_flush_workers (self, now);
    return 0;
}

int
zl_broker_turn (zl_broker_t *self, int max_wait_ms)
{
    if (self->failed) // stopped: a later commit would send the failed turn's replies
        return -1;
    // 1. wait for input or the next timer
    zl_now_t now = zl_now ();
    int64_t wake = self->next_heartbeat_ms;
    if (self->next_alert_ms < wake)
        wake = self->next_alert_ms;
    int64_t t = zl_jobs_next_timer (self->jobs);
    if (t >= 0 && t < wake)
        wake = t;
    t = zl_sched_next_wake (self->sched);
    if (t >= 0 && t < wake)
        wake = t;
    long timeout = wake - now.mono_ms;
    if (timeout < 0)
        timeout = 0;
    if (timeout > max_wait_ms)
        timeout = max_wait_ms;
    zmq_pollitem_t items[SOCK_COUNT + 1];
    for (int i = 0; i < SOCK_COUNT; i++)
        items[i] = (zmq_pollitem_t){self->socks[i], 0, ZMQ_POLLIN, 0};
    int n_items = SOCK_COUNT;
    if (self->http)
        items[n_items++] = (zmq_pollitem_t){zl_http_socket (self->http), 0, ZMQ_POLLIN, 0};
    if (zmq_poll (items, n_items, timeout) < 0 && errno == EINTR)
        return -1;
    // 2-6.
    return s_turn (self, items, NULL);
}

int
zl_broker_feed (zl_broker_t *self, const char *which, const void *peer, size_t peer_len,
                const void *data, size_t size)
{
    fed_t fed = {.sock = SOCK_COUNT, .data = data, .size = size};
    for (int i = 0; i < SOCK_COUNT; i++)
        if (!strcmp (which, s_sock_names[i]))
            fed.sock = (sock_kind_t)i;
    if (fed.sock == SOCK_COUNT || self->failed)
        return -1;
    fed.peer.len = (uint8_t)(peer_len > ZL_PEER_ID_MAX ? ZL_PEER_ID_MAX : peer_len);
    memcpy (fed.peer.data, peer, fed.peer.len);
    return s_turn (self, NULL, &fed);
}

int
zl_broker_run (zl_broker_t *self, volatile int *stop)
{
    while (!*stop && !self->failed)
        zl_broker_turn (self, 1000);
    return self->failed ? -1 : 0;
}

// ---------------------------------------------------------------- admin
static void
s_stats_sources (zl_broker_t *self, zl_stats_sources_t *src)
{
    size_t np;
    zl_producers_all (self->producers, &np);
    *src = (zl_stats_sources_t){.lanes = self->lanes,
                                .sched = self->sched,
                                .jobs = self->jobs,
                                .store = self->store,
                                .counters = self->counters,
                                .started_ms = self->started_ms,
                                .workers = zl_workers_count (self->workers),
                                .producers = np};
}

static void
s_build_stats (zl_broker_t *self, zl_stats_t *st, zl_now_t now)
{
    zl_stats_sources_t src;
    s_stats_sources (self, &src);
    zl_stats_build (&src, self->turn, now, st);
}

// ---------------------------------------------------------------- metrics
// The HTTP endpoint's one page: the stats in the Prometheus text format;
// with the query "tenants=0", per lane only.
static int
s_metrics_page (void *arg, const char *path, const char *query, char **body, size_t *len,
                const char **content_type)
{
    zl_broker_t *self = arg;
    if (strcmp (path, "/metrics"))
        return 404;
    bool by_tenant = true;
    for (const char *p = query; *p;) {
        size_t n = strcspn (p, "&");
        if (n == 9 && !strncmp (p, "tenants=0", 9))
            by_tenant = false;
        p += n + (p[n] == '&');
    }
    zl_stats_t st;
    s_build_stats (self, &st, zl_now ());
    *body = zl_metrics_render (&st, by_tenant, len);
    *content_type = "text/plain; version=0.0.4; charset=utf-8";
    return 200;
}

static void
s_serve_metrics (zl_broker_t *self, zl_now_t now)
{
    zl_http_serve (self->http, now.mono_ms);
    zl_http_counts_t c = zl_http_counts (self->http);
    self->counters[ZL_CTR_METRICS_REQUESTS] = c.requests;
    self->counters[ZL_CTR_METRICS_REFUSED] = c.refused;
}

static void
s_on_admin (ctx_t *ctx, const zl_msg_t *msg)
{
    zl_broker_t *self = ctx->self;
    const zl_admin_request_t *req = &msg->u.admin_request;
    self->counters[ZL_CTR_ADMIN_REQUESTS]++;
    bool changes = zl_admin_changes (req);
    if (!s_role (ctx, changes ? "admin" : "admin,subscriber",
                 changes ? "change the broker (redrive, purge, pause, resume)"
                         : "read the broker's state"))
        return;
    zl_stats_sources_t src;
    s_stats_sources (self, &src);
    zl_admin_env_t env = {.jobs = self->jobs,
                          .lanes = self->lanes,
                          .counters = self->counters,
                          .arena = self->turn,
                          .stats = &src};
    zl_msg_t out = {.kind = ZL_MSG_ADMIN_REPLY};
    if (zl_admin_apply (&env, req, ctx->now, &out.u.admin_reply) != 0) {
        s_reject (ctx, ZL_CTR_INVALID, ZL_ERR_INVALID, 0, 0, "%s", out.u.admin_reply.error);
        return;
    }
    if (!changes) {
        s_send (ctx, &out); // it describes memory: see the README's design notes
        return;
    }
    // "redrove N", "paused": only once the change is on disk
    if (self->n_later == self->cap_later) {
        self->cap_later = self->cap_later ? self->cap_later * 2 : 8;
        self->later = zl_realloc (self->later, self->cap_later * sizeof *self->later);
    }
    self->later[self->n_later++] = (admin_later_t){*ctx->peer, out};
}

// Send the admin replies the commit made true.
static void
s_flush_admin (zl_broker_t *self)
{
    for (size_t i = 0; i < self->n_later; i++)
        if (zl_wire_send_to (self->socks[SOCK_ADMIN], &self->later[i].peer, self->codec,
                             &self->later[i].msg) != 0)
            self->counters[ZL_CTR_UNREACHABLE]++;
    self->n_later = 0;
}

// ---------------------------------------------------------------- lifecycle
static int
s_bind (zl_broker_t *self, zsock_t *zs, const char *endpoint, int slot, char *err, size_t errlen)
{
    void *s = zsock_resolve (zs);
    if (zmq_bind (s, endpoint) != 0) {
        snprintf (err, errlen, "cannot bind %s: %s", endpoint, zmq_strerror (errno));
        return -1;
    }
    size_t len = sizeof self->endpoints[slot];
    zmq_getsockopt (s, ZMQ_LAST_ENDPOINT, self->endpoints[slot], &len);
    return 0;
}

static zsock_t *
s_router (const zl_broker_config_t *cfg)
{
    zsock_t *zs = zsock_new (ZMQ_ROUTER);
    void *s = zsock_resolve (zs);
    int one = 1, hwm = 100000, linger = 0;
    // a frame larger than this drops the sender's connection: it bounds what
    // one peer can make the broker buffer and decode
    int64_t max_msg = (int64_t)cfg->max_payload * 2 + (16 << 20);
    zmq_setsockopt (s, ZMQ_MAXMSGSIZE, &max_msg, sizeof max_msg);
    zmq_setsockopt (s, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt (s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt (s, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt (s, ZMQ_LINGER, &linger, sizeof linger);
    return zs;
}

static int
s_write_ports (zl_broker_t *self, const char *path, char *err, size_t errlen)
{
    char tmp[4096];
    snprintf (tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen (tmp, "w");
    if (!f) {
        snprintf (err, errlen, "cannot write ports file %s: %s", tmp, strerror (errno));
        return -1;
    }
    fprintf (f, "frontend=%s\nbackend=%s\nevents=%s\nadmin=%s\n", self->endpoints[0],
             self->endpoints[1], self->endpoints[2], self->endpoints[3]);
    if (self->http)
        fprintf (f, "metrics=%s\n", zl_http_endpoint (self->http));
    fclose (f);
    if (rename (tmp, path) != 0) {
        snprintf (err, errlen, "cannot rename %s: %s", tmp, strerror (errno));
        return -1;
    }
    return 0;
}

// The metrics page, if configured. It is plain HTTP whatever CURVE says: a
// reachable address is the operator's choice, and gets a warning.
static int
s_start_metrics (zl_broker_t *self, char *err, size_t errlen)
{
    const char *ep = self->cfg->metrics;
    if (!ep || !*ep)
        return 0;
    self->http = zl_http_new (ep, s_metrics_page, self, err, errlen);
    if (!self->http)
        return -1;
    if (!zl_security_local_endpoint (ep))
        zl_warn ("broker",
                 "metrics on %s: plain HTTP without authentication, reachable from "
                 "other hosts (it names lanes and tenants)",
                 zl_http_endpoint (self->http));
    return 0;
}

// ---------------------------------------------------------------- recovery
typedef struct {
    zl_broker_t *self;
    zl_now_t now;
    uint64_t jobs;
} recover_ctx_t;

static void
s_recover_job (void *arg, uint64_t id, const zl_job_rec_t *rec, const zl_state_rec_t *state)
{
    recover_ctx_t *rc = arg;
    zl_broker_t *self = rc->self;
    zl_lane_t *lane = zl_lanes_lookup (self->lanes, rec->lane);
    if (!lane) {
        // a lane no longer declared still owns stored jobs: keep them
        zl_warn ("broker",
                 "job %" PRIu64 " is in lane '%s', which is no longer declared: "
                 "keeping the lane with default settings",
                 id, rec->lane);
        lane = zl_lanes_add (self->lanes, rec->lane);
    }
    zl_tenant_t *tenant = zl_lanes_tenant (self->lanes, rec->tenant);
    zl_flow_t *flow = zl_sched_flow (self->sched, lane, tenant);
    zl_jobs_restore (self->jobs, id, flow, rec, state, rc->now);
    rc->jobs++;
}

// Rebuild queues, timers, the DLQ and the id counter from the store; the
// attempts that were running when the broker stopped count as failed.
static int
s_recover (zl_broker_t *self, char *err, size_t errlen)
{
    int64_t t0 = zl_clock_mono_us ();
    recover_ctx_t rc = {self, zl_now (), 0};
    uint64_t next_id = 1;
    if (zl_store_begin (self->store) != ZL_STORE_OK ||
        zl_store_recover (self->store, s_recover_job, &rc, &next_id, err, errlen) != 0)
        return -1;
    zl_jobs_restore_done (self->jobs, next_id, rc.now);
    if (s_commit (self) != 0) {
        snprintf (err, errlen, "cannot write the recovered state to %s", self->cfg->data_dir);
        return -1;
    }
    uint64_t ready = 0, delayed = 0, dead = 0;
    size_t nf;
    zl_flow_t **flows = zl_sched_flows (self->sched, &nf);
    for (size_t i = 0; i < nf; i++) {
        ready += flows[i]->ready;
        delayed += flows[i]->delayed;
        dead += flows[i]->dlq;
    }
    zl_info ("broker",
             "recovered %" PRIu64 " job(s) from %s in %.3f s: %" PRIu64 " ready, %" PRIu64
             " delayed, %" PRIu64 " dead-lettered; next id %" PRIu64,
             rc.jobs, self->cfg->data_dir, (double)(zl_clock_mono_us () - t0) / 1e6, ready, delayed,
             dead, zl_jobs_next_id (self->jobs));
    return 0;
}

// wire_dump: each frame the broker sends, as a 4-byte little-endian length
// and the frame (an Envelope), appended to the file in one write: a broker
// killed at any moment leaves whole records behind it (or a last one cut).
static void
s_dump_frame (void *arg, const void *frame, size_t size)
{
    uint8_t len[4] = {(uint8_t)size, (uint8_t)(size >> 8), (uint8_t)(size >> 16),
                      (uint8_t)(size >> 24)};
    struct iovec iov[2] = {{len, sizeof len}, {(void *)frame, size}};
    if (writev (*(int *)arg, iov, 2) < 0)
        zl_debug ("broker", "wire_dump: %s", strerror (errno));
}

zl_broker_t *
zl_broker_new (zl_broker_config_t *cfg, char *err, size_t errlen)
{
    zl_broker_t *self = ZL_NEW (zl_broker_t);
    self->cfg = cfg;
    self->wire_dump = -1;
    zl_rng_seed (&self->rng, 0);
    self->codec = zl_codec_new ();
    zl_codec_set_strict (self->codec, true); // debug builds: all it sends is text
    if (cfg->wire_dump && *cfg->wire_dump) {
        self->wire_dump = open (cfg->wire_dump, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
        if (self->wire_dump < 0) {
            snprintf (err, errlen, "cannot open wire_dump %s: %s", cfg->wire_dump,
                      strerror (errno));
            zl_broker_destroy (&self);
            return NULL;
        }
        zl_codec_set_tap (self->codec, s_dump_frame, &self->wire_dump);
        zl_warn ("broker", "wire_dump: every frame sent is appended to %s", cfg->wire_dump);
    }
    self->turn = zl_arena_new (256 * 1024);
    self->lanes = zl_lanes_new (cfg);
    self->sched = zl_sched_new (cfg->scheduler);
    zl_sched_set_quantum (self->sched, cfg->wfq_quantum_us);
    self->timers = zl_timers_new ();
    self->frame = zl_arena_new (256 * 1024);
    self->store = zl_store_open (cfg->data_dir, cfg->durability, cfg->map_size, err, errlen);
    if (!self->store) {
        zl_broker_destroy (&self);
        return NULL;
    }
    self->jobs = zl_jobs_new (self->sched, self->timers, &self->rng, self->store);
    zl_jobs_set_listener (self->jobs, s_on_job_event, self);
    self->workers = zl_workers_new ();
    self->producers = zl_producers_new ();
    if (s_recover (self, err, errlen) != 0) {
        zl_broker_destroy (&self);
        return NULL;
    }
    for (int i = 0; i < SOCK_COUNT; i++) {
        self->zsocks[i] = s_router (cfg);
        self->socks[i] = zsock_resolve (self->zsocks[i]);
    }
    self->zevents = zsock_new (ZMQ_PUB);
    self->events = zsock_resolve (self->zevents);
    int linger = 0;
    zmq_setsockopt (self->events, ZMQ_LINGER, &linger, sizeof linger);
    zsock_t *socks[SOCK_COUNT + 1] = {self->zsocks[0], self->zsocks[1], self->zsocks[2],
                                      self->zevents};
    const char *names[SOCK_COUNT + 1] = {s_sock_names[0], s_sock_names[1], s_sock_names[2],
                                         "events"};
    self->security = zl_security_new (cfg, socks, names, SOCK_COUNT + 1, SOCK_COUNT, err, errlen);
    if (!self->security) {
        zl_broker_destroy (&self);
        return NULL;
    }
    if (s_bind (self, self->zsocks[SOCK_FRONTEND], cfg->frontend, 0, err, errlen) ||
        s_bind (self, self->zsocks[SOCK_BACKEND], cfg->backend, 1, err, errlen) ||
        s_bind (self, self->zevents, cfg->events, 2, err, errlen) ||
        s_bind (self, self->zsocks[SOCK_ADMIN], cfg->admin, 3, err, errlen) ||
        s_start_metrics (self, err, errlen) != 0 ||
        (cfg->ports_file && s_write_ports (self, cfg->ports_file, err, errlen))) {
        zl_broker_destroy (&self);
        return NULL;
    }
    zl_now_t now = zl_now ();
    self->started_ms = now.mono_ms;
    self->next_heartbeat_ms = now.mono_ms + (int64_t)cfg->heartbeat_ms;
    self->next_alert_ms = now.mono_ms + (int64_t)cfg->dlq_alert_ms;
    self->next_prune_ms = now.mono_ms + 1000;
    zl_info ("broker", "listening: frontend %s, backend %s, events %s, admin %s; %u lane(s)%s",
             self->endpoints[0], self->endpoints[1], self->endpoints[2], self->endpoints[3],
             zl_lanes_count (self->lanes), cfg->auto_lanes ? " (auto lanes on)" : "");
    return self;
}

void
zl_broker_destroy (zl_broker_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_broker_t *self = *self_p;
    for (int i = 0; i < SOCK_COUNT; i++)
        zsock_destroy (&self->zsocks[i]);
    zsock_destroy (&self->zevents);
    zl_jobs_destroy (&self->jobs);
    zl_timers_destroy (&self->timers);
    zl_sched_destroy (&self->sched);
    zl_workers_destroy (&self->workers);
    zl_producers_destroy (&self->producers);
    zl_store_close (&self->store);
    zl_arena_destroy (&self->frame);
    zl_http_destroy (&self->http);
    zl_security_destroy (&self->security);
    zl_lanes_destroy (&self->lanes);
    zl_codec_destroy (&self->codec);
    if (self->wire_dump >= 0)
        close (self->wire_dump);
    zl_arena_destroy (&self->turn);
    free (self->dead_ids);
    free (self->later);
    free (self);
    *self_p = NULL;
}

const char *
zl_broker_endpoint (zl_broker_t *self, const char *which)
{
    static const char *names[] = {"frontend", "backend", "events", "admin"};
    for (int i = 0; i < 4; i++)
        if (strcmp (which, names[i]) == 0)
            return self->endpoints[i];
    if (!strcmp (which, "metrics") && self->http)
        return zl_http_endpoint (self->http);
    return NULL;
}
