/*  broker: the loop, the socket plumbing and the message dispatch table.

    Per-turn order (zl_broker_turn waits, s_turn does the rest; zl_broker_feed
    runs the same s_turn on one frame), the one place it is written down:
      1. wait for input or the next timer
      2. drain a batch from each socket and apply it to memory
         (bad input is answered at once through s_reject: counted, logged)
      3. fire due timers: lapsed leases, ended delays, dead workers,
         heartbeats, DLQ alerts
      4. dispatch ready jobs to workers with free capacity
      5. commit the turn's state changes to the store in one transaction
      6. send what promises a state change (replies.h): Accepted/Rejected/
         Credit, admin changes, the DLQ events, Settled and Dispatch

    Each noun has its own module: admission and credit (admission.c over
    producers.c), the job state machine (jobs.c) with its leases (lease.c),
    lanes and tenants (lane.c), the scheduler (scheduler.c), the worker
    registry (workers.c), what is sent and when (replies.c), the store
    (store.c), operator requests (admin.c) and stats (stats.c). */
#include "broker.h"

#include "admin.h"
#include "admission.h"
#include "arena.h"
#include "clients.h"
#include "clock.h"
#include "codec.h"
#include "counters.h"
#include "endpoints.h"
#include "http.h"
#include "jobs.h"
#include "lane.h"
#include "log.h"
#include "metrics.h"
#include "producers.h"
#include "recovery.h"
#include "replies.h"
#include "rng.h"
#include "scheduler.h"
#include "security.h"
#include "settle.h"
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

#define DRAIN_BATCH 256  // messages per socket per turn
#define MAX_EXPIRE 10000 // dead letters purged by dlq_retention per turn

struct _zl_broker_t {
    zl_broker_config_t *cfg;
    zl_endpoints_t *endpoints; // the sockets
    zl_codec_t *codec;
    zl_arena_t *turn; // strings that live until the end of the turn
    zl_rng_t rng;
    zl_lanes_t *lanes;
    zl_sched_t *sched;
    zl_timers_t *timers;
    zl_jobs_t *jobs;
    zl_workers_t *workers;
    zl_producers_t *producers;
    zl_admission_t *admission;
    zl_replies_t *replies;
    zl_store_t *store;
    uint64_t stored_next_id;
    bool failed;             // the store failed: stop the loop
    zl_security_t *security; // CURVE (or the plaintext endpoint check)
    zl_http_t *http;         // the metrics page, or NULL
    zl_metrics_source_t metrics_source;
    uint64_t counters[ZL_CTR_COUNT];
    size_t worker_rr;
    int64_t started_ms;
    int64_t next_heartbeat_ms;
    int64_t next_alert_ms;
    int64_t next_prune_ms;
};

typedef struct {
    zl_broker_t *self;
    zl_sock_t sock;
    const zl_peer_t *peer;
    zl_now_t now;
    zcert_t *cert; // with CURVE: the client's certificate (role, tenants, lanes)
} ctx_t;

typedef void (handler_fn) (ctx_t *ctx, const zl_msg_t *msg);

// The one path for bad input: counted, logged, answered with an Error.
#define s_reject(ctx, counter, code, job_id, lease, ...)                                           \
    zl_replies_error ((ctx)->self->replies, (ctx)->sock, (ctx)->peer, counter, code, job_id,       \
                      lease, __VA_ARGS__)

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

static bool
s_may_submit_for (void *arg, const char *tenant)
{
    return s_bound (arg, "tenants", tenant);
}

// ---------------------------------------------------------------- producers
static void
s_on_hello (ctx_t *ctx, const zl_msg_t *msg)
{
    zl_broker_t *self = ctx->self;
    const char *bad = zl_text_name_problem (self->turn, msg->u.hello.client, ZL_MAX_NAME, true);
    if (bad) {
        s_reject (ctx, ZL_CTR_INVALID, ZL_ERR_INVALID, 0, 0, "Hello: field 'client' %s", bad);
        return;
    }
    zl_admission_hello (self->admission, ctx->peer, msg->u.hello.client, ctx->now);
}

static void
s_on_submit (ctx_t *ctx, const zl_msg_t *msg)
{
    const zl_submit_t *sub = &msg->u.submit;
    if (zl_admission_submit (ctx->self->admission, ctx->peer, sub, s_may_submit_for, ctx,
                             ctx->now) != 0)
        s_reject (ctx, ZL_CTR_NOT_READY, ZL_ERR_NOT_READY, 0, 0,
                  "Submit before Hello: send Hello first (a connection's credit comes with its "
                  "Hello); none of the %zu job spec(s) was accepted",
                  sub->n);
}

// ---------------------------------------------------------------- workers
static void
s_worker_gone (zl_broker_t *self, zl_worker_conn_t *w, const char *why, zl_now_t now)
{
    size_t n = zl_jobs_release_worker (self->jobs, w, ZL_OUTCOME_WORKER_DEAD, why, now);
    zl_warn ("broker", "worker %s %s; %zu job(s) back to ready", w->name, why, n);
    self->counters[ZL_CTR_DEAD_WORKERS]++;
    zl_workers_remove (self->workers, w);
}

// The registered worker that sent this, or NULL after refusing it.
static zl_worker_conn_t *
s_worker (ctx_t *ctx)
{
    zl_worker_conn_t *w = zl_workers_lookup (ctx->self->workers, ctx->peer);
    if (!w) {
        s_reject (ctx, ZL_CTR_NOT_READY, ZL_ERR_NOT_READY, 0, 0,
                  "worker has not sent Ready (or was declared dead): send Ready");
        return NULL;
    }
    zl_worker_conn_seen (w, ctx->now.mono_ms);
    return w;
}

static bool
s_may_take_from (void *arg, const char *lane)
{
    return s_bound (arg, "lanes", lane);
}

static void
s_on_ready (ctx_t *ctx, const zl_msg_t *msg)
{
    zl_broker_t *self = ctx->self;
    zl_ready_env_t env = {.lanes = self->lanes,
                          .replies = self->replies,
                          .counters = self->counters,
                          .turn = self->turn,
                          .sock = ctx->sock,
                          .peer = ctx->peer,
                          .may_take = s_may_take_from,
                          .may_arg = ctx,
                          .curve_key = ctx->cert ? zcert_public_txt (ctx->cert) : NULL};
    zl_workers_ready (self->workers, &env, &msg->u.ready, ctx->now.mono_ms);
}

static zl_settle_env_t
s_settle_env (ctx_t *ctx)
{
    return (zl_settle_env_t){ctx->self->jobs, ctx->self->replies, ctx->self->counters, ctx->sock,
                             ctx->peer};
}

static void
s_on_heartbeat (ctx_t *ctx, const zl_msg_t *msg)
{
    (void)msg;
    s_worker (ctx);
}

static void
s_on_ack (ctx_t *ctx, const zl_msg_t *msg)
{
    zl_worker_conn_t *w = s_worker (ctx);
    zl_settle_env_t env = s_settle_env (ctx);
    if (w)
        zl_settle_ack (&env, w, &msg->u.ack, ctx->now);
}

static void
s_on_nack (ctx_t *ctx, const zl_msg_t *msg)
{
    zl_worker_conn_t *w = s_worker (ctx);
    zl_settle_env_t env = s_settle_env (ctx);
    if (w)
        zl_settle_nack (&env, w, &msg->u.nack, ctx->now);
}

static void
s_on_extend (ctx_t *ctx, const zl_msg_t *msg)
{
    zl_worker_conn_t *w = s_worker (ctx);
    zl_settle_env_t env = s_settle_env (ctx);
    if (w)
        zl_settle_extend (&env, w, &msg->u.extend, ctx->now);
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
    if (changes) // "redrove N", "paused": only once the change is on disk
        zl_replies_admin (self->replies, ctx->peer, &out);
    else // it describes memory: see the README's design notes
        zl_replies_send (self->replies, ctx->sock, ctx->peer, &out);
}

// ---------------------------------------------------------------- dispatch table
// One row per message kind a socket takes: its handler, and the roles its
// sender's key must have with CURVE (NULL: the handler decides, by what the
// request asks). A worker whose key lost the worker role is dropped at its
// next message, and its jobs go to other workers.
typedef struct {
    handler_fn *fn;
    const char *roles;
    const char *what; // what the role allows, for the refusal
    bool drops_worker;
} route_t;

static const route_t s_routes[ZL_SOCK_COUNT][ZL_MSG_KIND_COUNT] = {
    [ZL_SOCK_FRONTEND] =
        {
            [ZL_MSG_HELLO] = {s_on_hello, "producer", "submit jobs", false},
            [ZL_MSG_SUBMIT] = {s_on_submit, "producer", "submit jobs", false},
        },
    [ZL_SOCK_BACKEND] =
        {
            [ZL_MSG_READY] = {s_on_ready, "worker", "take jobs", false},
            [ZL_MSG_HEARTBEAT] = {s_on_heartbeat, "worker", "take jobs", true},
            [ZL_MSG_ACK] = {s_on_ack, "worker", "take jobs", true},
            [ZL_MSG_NACK] = {s_on_nack, "worker", "take jobs", true},
            [ZL_MSG_EXTEND] = {s_on_extend, "worker", "take jobs", true},
        },
    [ZL_SOCK_ADMIN] =
        {
            [ZL_MSG_ADMIN_REQUEST] = {s_on_admin, NULL, NULL, false},
        },
};

static void
s_handle_frame (zl_broker_t *self, zl_sock_t sock, const zl_peer_t *peer, zcert_t *cert,
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
    const route_t *route = decoded ? &s_routes[sock][msg.kind] : NULL;
    if (!route || !route->fn) {
        s_reject (&ctx, ZL_CTR_UNKNOWN_KIND, ZL_ERR_UNKNOWN_KIND, 0, 0,
                  "message kind '%s' is not valid on the %s socket",
                  decoded ? zl_msg_kind_name (msg.kind) : "unknown", zl_sock_name (sock));
        return;
    }
    if (rc == ZL_DECODE_BAD_TEXT) { // before anything is done or stored
        s_reject (&ctx, ZL_CTR_INVALID, ZL_ERR_INVALID, 0, 0, "%s: %s", zl_msg_kind_name (msg.kind),
                  zl_codec_error (self->codec));
        return;
    }
    if (route->roles && !s_role (&ctx, route->roles, route->what)) {
        zl_worker_conn_t *w = route->drops_worker ? zl_workers_lookup (self->workers, peer) : NULL;
        if (w)
            s_worker_gone (self, w, "lost its key's worker role", now);
        return;
    }
    zl_trace ("broker", "%s <- %s", zl_sock_name (sock), zl_msg_kind_name (msg.kind));
    route->fn (&ctx, &msg);
}

// ---------------------------------------------------------------- sockets
// Drain up to DRAIN_BATCH messages from one ROUTER socket.
static int
s_drain (zl_broker_t *self, zl_sock_t sock, zl_now_t now)
{
    void *s = zl_endpoints_router (self->endpoints, sock);
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
s_liveness (zl_broker_t *self, zl_now_t now)
{
    int64_t limit = (int64_t)(self->cfg->heartbeat_ms * self->cfg->liveness);
    zl_worker_conn_t *w;
    while ((w = zl_workers_silent (self->workers, now.mono_ms, limit))) {
        char why[96];
        snprintf (why, sizeof why, "silent for %" PRId64 " ms (liveness %" PRId64 " ms)",
                  now.mono_ms - w->last_seen_ms, limit);
        s_worker_gone (self, w, why, now);
    }
}

static void
s_heartbeat (zl_broker_t *self)
{
    zl_msg_t hb = {.kind = ZL_MSG_HEARTBEAT};
    size_t n;
    zl_worker_conn_t **all = zl_workers_all (self->workers, &n);
    for (size_t i = 0; i < n; i++)
        zl_replies_send (self->replies, ZL_SOCK_BACKEND, &all[i]->peer, &hb);
}

// The job state machine's news: a dead letter's event goes after the commit.
static void
s_on_job_event (void *arg, zl_jobs_event_t ev, zl_job_t *job)
{
    zl_broker_t *self = arg;
    if (ev != ZL_JOBS_EV_DEAD)
        return;
    self->counters[ZL_CTR_DEAD_LETTERED]++;
    zl_replies_dead (self->replies, job->id);
}

static void
s_fire_timers (zl_broker_t *self, zl_now_t now)
{
    zl_jobs_fire_timers (self->jobs, now);
    if (now.mono_ms >= self->next_heartbeat_ms) {
        s_liveness (self, now);
        s_heartbeat (self);
        self->next_heartbeat_ms = now.mono_ms + (int64_t)self->cfg->heartbeat_ms;
    }
    if (now.mono_ms >= self->next_alert_ms) {
        zl_replies_dlq_alert (self->replies, now);
        self->next_alert_ms = now.mono_ms + (int64_t)self->cfg->dlq_alert_ms;
    }
    // expired idempotency keys, every turn (inside the turn's store batch):
    // bounded work that keeps up with the keys the turn added
    zl_idem_policy_t idem = {self->cfg->resend_window_ms, self->cfg->dedup_window_ms,
                             zl_broker_config_dedup_max_keys (self->cfg)};
    zl_store_prune_idem (self->store, now.wall_ms, &idem, 1024);
    if (now.mono_ms >= self->next_prune_ms) { // inside the turn's store batch
        zl_admission_forget_idle (self->admission, now);
        self->counters[ZL_CTR_DLQ_EXPIRED] +=
            zl_jobs_expire_dead (self->jobs, now, self->cfg->dlq_retention_ms, MAX_EXPIRE);
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
            // its token from the OS CSPRNG (lease.h): no worker can guess another's
            zl_jobs_lease (self->jobs, job, w, now);
            zl_replies_dispatch (self->replies, w, job);
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

// ---------------------------------------------------------------- the turn
// One frame handed in by zl_broker_feed instead of read from a socket.
typedef struct {
    zl_sock_t sock;
    zl_peer_t peer;
    const void *data;
    size_t size;
} fed_t;

static void
s_serve_metrics (zl_broker_t *self, zl_now_t now)
{
    zl_http_serve (self->http, now.mono_ms);
    zl_http_counts_t c = zl_http_counts (self->http);
    self->counters[ZL_CTR_METRICS_REQUESTS] = c.requests;
    self->counters[ZL_CTR_METRICS_REFUSED] = c.refused;
}

/*  Steps 2-6 of a turn, in their order: drain and apply (the sockets that
    `items` marks readable, or the one `fed` frame), timers, dispatch,
    commit, replies. Returns ZL_TURN_OK, or ZL_TURN_STORE_FAILED. */
static int
s_turn (zl_broker_t *self, const zmq_pollitem_t *items, const fed_t *fed)
{
    self->counters[ZL_CTR_TURNS]++;
    zl_arena_reset (self->turn);

    // 2. drain and apply (every change goes into the turn's store batch)
    zl_now_t now = zl_now ();
    if (zl_store_begin (self->store) != ZL_STORE_OK) {
        self->failed = true;
        return ZL_TURN_STORE_FAILED;
    }
    if (fed)
        s_handle_frame (self, fed->sock, &fed->peer, NULL, fed->data, fed->size, false, now);
    for (int i = 0; items && i < ZL_SOCK_COUNT; i++)
        if (items[i].revents & ZMQ_POLLIN)
            s_drain (self, (zl_sock_t)i, now);
    if (self->http && items && (items[ZL_SOCK_COUNT].revents & ZMQ_POLLIN))
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
        return ZL_TURN_STORE_FAILED;
    }

    // 6. what promises a state change, now that it is on disk
    zl_admission_regrant (self->admission);
    size_t n_gone;
    zl_worker_conn_t **gone =
        zl_replies_flush (self->replies, self->producers, self->workers, &n_gone);
    // Jobs queued for an unreachable worker go back to ready with the rest.
    // This turn's batch is committed already: their state changes open the
    // next one, which the next turn commits before it replies.
    if (n_gone && zl_store_begin (self->store) != ZL_STORE_OK) {
        self->failed = true;
        return ZL_TURN_STORE_FAILED;
    }
    for (size_t i = 0; i < n_gone; i++)
        s_worker_gone (self, gone[i], "unreachable", now);
    return ZL_TURN_OK;
}

int
zl_broker_turn (zl_broker_t *self, int max_wait_ms)
{
    if (self->failed) // stopped: a later commit would send the failed turn's replies
        return ZL_TURN_STORE_FAILED;
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
    zmq_pollitem_t items[ZL_SOCK_COUNT + 1];
    for (int i = 0; i < ZL_SOCK_COUNT; i++)
        items[i] = (zmq_pollitem_t){zl_endpoints_router (self->endpoints, i), 0, ZMQ_POLLIN, 0};
    int n_items = ZL_SOCK_COUNT;
    if (self->http)
        items[n_items++] = (zmq_pollitem_t){zl_http_socket (self->http), 0, ZMQ_POLLIN, 0};
    if (zmq_poll (items, n_items, timeout) < 0 && errno == EINTR)
        return ZL_TURN_INTERRUPTED;
    // 2-6.
    return s_turn (self, items, NULL);
}

int
zl_broker_feed (zl_broker_t *self, const char *which, const void *peer, size_t peer_len,
                const void *data, size_t size)
{
    fed_t fed = {.sock = ZL_SOCK_COUNT, .data = data, .size = size};
    for (int i = 0; i < ZL_SOCK_COUNT; i++)
        if (!strcmp (which, zl_sock_name ((zl_sock_t)i)))
            fed.sock = (zl_sock_t)i;
    if (fed.sock == ZL_SOCK_COUNT)
        return ZL_TURN_BAD_SOCKET;
    if (self->failed)
        return ZL_TURN_STORE_FAILED;
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

// ---------------------------------------------------------------- metrics
static void
s_fill_stats (void *arg, zl_stats_t *st)
{
    zl_broker_t *self = arg;
    zl_stats_sources_t src;
    s_stats_sources (self, &src);
    zl_stats_build (&src, self->turn, zl_now (), st);
}

// ---------------------------------------------------------------- start
// The metrics page, if configured. It is plain HTTP whatever CURVE says: a
// reachable address is the operator's choice, and gets a warning.
static int
s_start_metrics (zl_broker_t *self, char *err, size_t errlen)
{
    const char *ep = self->cfg->metrics;
    if (!ep || !*ep)
        return 0;
    self->metrics_source = (zl_metrics_source_t){s_fill_stats, self};
    self->http = zl_http_new (ep, zl_metrics_page, &self->metrics_source, err, errlen);
    if (!self->http)
        return -1;
    if (!zl_security_local_endpoint (ep))
        zl_warn ("broker",
                 "metrics on %s: plain HTTP without authentication, reachable from "
                 "other hosts (it names lanes and tenants)",
                 zl_http_endpoint (self->http));
    return 0;
}

static int
s_commit_arg (void *arg)
{
    return s_commit (arg);
}

zl_broker_t *
zl_broker_new (zl_broker_config_t *cfg, char *err, size_t errlen)
{
    zl_broker_t *self = ZL_NEW (zl_broker_t);
    self->cfg = cfg;
    zl_rng_seed (&self->rng, 0);
    self->codec = zl_codec_new ();
    zl_codec_set_strict (self->codec, true); // debug builds: all it sends is text
    self->turn = zl_arena_new (256 * 1024);
    self->lanes = zl_lanes_new (cfg);
    self->sched = zl_sched_new (cfg->scheduler);
    zl_sched_set_quantum (self->sched, cfg->wfq_quantum_us);
    self->timers = zl_timers_new ();
    const char *where = zl_broker_config_store (cfg, err, errlen);
    self->store = where ? zl_store_open (where, cfg->durability, cfg->map_size, err, errlen) : NULL;
    if (!self->store) {
        zl_broker_destroy (&self);
        return NULL;
    }
    self->jobs = zl_jobs_new (self->sched, self->timers, &self->rng, self->store);
    zl_jobs_set_listener (self->jobs, s_on_job_event, self);
    self->workers = zl_workers_new ();
    self->producers = zl_producers_new ();
    zl_endpoints_t *ep = self->endpoints = zl_endpoints_new (cfg);
    zl_replies_env_t renv = {.socks = {zl_endpoints_router (ep, ZL_SOCK_FRONTEND),
                                       zl_endpoints_router (ep, ZL_SOCK_BACKEND),
                                       zl_endpoints_router (ep, ZL_SOCK_ADMIN)},
                             .events = zl_endpoints_events (ep),
                             .codec = self->codec,
                             .jobs = self->jobs,
                             .counters = self->counters,
                             .turn = self->turn};
    self->replies = zl_replies_new (&renv);
    if (cfg->wire_dump && *cfg->wire_dump &&
        zl_replies_dump_to (self->replies, cfg->wire_dump, err, errlen) != 0) {
        zl_broker_destroy (&self);
        return NULL;
    }
    zl_admission_env_t aenv = {.cfg = cfg,
                               .lanes = self->lanes,
                               .sched = self->sched,
                               .jobs = self->jobs,
                               .store = self->store,
                               .producers = self->producers,
                               .replies = self->replies,
                               .counters = self->counters,
                               .turn = self->turn};
    self->admission = zl_admission_new (&aenv);
    char safe[512];
    zl_store_location_safe (where, safe, sizeof safe);
    zl_recovery_env_t rec = {self->store, self->lanes,  self->sched, self->jobs,
                             safe,        s_commit_arg, self};
    if (zl_recover (&rec, err, errlen) != 0) {
        zl_broker_destroy (&self);
        return NULL;
    }
    const char **names;
    zsock_t **socks = zl_endpoints_zsocks (ep, &names);
    self->security =
        zl_security_new (cfg, socks, names, ZL_SOCK_COUNT + 1, ZL_SOCK_COUNT, err, errlen);
    if (!self->security) {
        zl_broker_destroy (&self);
        return NULL;
    }
    if (zl_endpoints_bind (ep, err, errlen) != 0 || s_start_metrics (self, err, errlen) != 0 ||
        (cfg->ports_file && zl_endpoints_write_ports (
                                ep, cfg->ports_file,
                                self->http ? zl_http_endpoint (self->http) : NULL, err, errlen))) {
        zl_broker_destroy (&self);
        return NULL;
    }
    zl_now_t now = zl_now ();
    self->started_ms = now.mono_ms;
    self->next_heartbeat_ms = now.mono_ms + (int64_t)cfg->heartbeat_ms;
    self->next_alert_ms = now.mono_ms + (int64_t)cfg->dlq_alert_ms;
    self->next_prune_ms = now.mono_ms + 1000;
    zl_info ("broker", "listening: frontend %s, backend %s, events %s, admin %s; %u lane(s)%s",
             zl_endpoints_bound (ep, "frontend"), zl_endpoints_bound (ep, "backend"),
             zl_endpoints_bound (ep, "events"), zl_endpoints_bound (ep, "admin"),
             zl_lanes_count (self->lanes), cfg->auto_lanes ? " (auto lanes on)" : "");
    return self;
}

void
zl_broker_destroy (zl_broker_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_broker_t *self = *self_p;
    zl_endpoints_destroy (&self->endpoints);
    zl_jobs_destroy (&self->jobs);
    zl_timers_destroy (&self->timers);
    zl_sched_destroy (&self->sched);
    zl_workers_destroy (&self->workers);
    zl_producers_destroy (&self->producers);
    zl_admission_destroy (&self->admission);
    zl_replies_destroy (&self->replies);
    zl_store_close (&self->store);
    zl_http_destroy (&self->http);
    zl_security_destroy (&self->security);
    zl_lanes_destroy (&self->lanes);
    zl_codec_destroy (&self->codec);
    zl_arena_destroy (&self->turn);
    free (self);
    *self_p = NULL;
}

const char *
zl_broker_endpoint (zl_broker_t *self, const char *which)
{
    if (!strcmp (which, "metrics"))
        return self->http ? zl_http_endpoint (self->http) : NULL;
    return zl_endpoints_bound (self->endpoints, which);
}
