/*  broker: the loop, the socket plumbing and the message dispatch table.

    Per-turn order (zl_broker_turn waits, s_turn does 2-7; zl_broker_feed
    runs the same s_turn on one frame), the one place it is written down:
      1. wait for input or the next timer (or election)
      2. leadership, outside any batch, when the store asks for it: renew,
         watch or take the lead (store.h). A broker that takes the lead
         recovers the store's state first; one that loses it forgets its
         own. A broker that does not lead drains its sockets and answers
         every message NOT_LEADER (standby) or UNAVAILABLE (no database),
         but Stats, and its turn ends there: it accepts, dispatches and
         settles nothing.
      3. drain a batch from each socket and apply it to memory
         (bad input is answered at once through s_reject: counted, logged)
      4. fire due timers: lapsed leases, ended delays, dead workers,
         heartbeats, DLQ alerts
      5. dispatch ready jobs to workers with free capacity
      6. commit the turn's state changes to the store in one transaction.
         A store that can (PostgreSQL) commits while the next turn runs: the
         last turn's commit, if still under way, is waited for first (and
         its held replies sent), then this turn's is started. A turn that
         wrote and queued nothing leaves a commit under way alone; one that
         ended is noticed at the start of a turn (the loop polls the
         store's socket). With the LMDB store's commit thread (fsync mode)
         no turn waits: while a commit is under way the turn's batch stays
         open and its replies are held for the next commit (zl_replies_cut
         marks which held replies wait for which commit). Where the loop
         commits (LMDB in none mode, --commit-on-loop), a turn whose only
         promising replies are Settled leaves its batch open, its replies
         held, for a later turn's commit, at most --commit-interval after
         the last one (s_leave_commit)
         On a store only this broker writes (LMDB), the Dispatch of a job
         that a crash before the commit can only give back (no ordering
         key, parents or children, checkpoint; an id below the committed
         counter) leaves before it (zl_replies_flush_early): a lone job
         starts while its commit runs, which in fsync mode is most of its
         wait. Such a crash runs it again (at least once), and a job
         submitted in the turn was never Accepted: its producer sends it
         again. --dispatch-after-commit holds every Dispatch for the commit.
         The look for expired idempotency keys comes after these Dispatches
         (it reads the key logs), in the same batch.
      7. send what promises a state change (replies.h): Accepted/Rejected/
         Credit, admin changes, the DLQ events, Settled and Dispatch; made
         now and held until the commit ends when it is still under way
      8. (zl_broker_turn) measure the store's room if a commit changed it,
         so that the next Submit finds it measured (zl_store_measure_room)
    A commit (or a write) refused because another broker leads (FENCED), or
    whose fate the silent database leaves unknown (UNAVAILABLE), sends none
    of the turn's replies: the broker forgets its state (memory is ahead of
    the store) and goes on without the lead. Any other store failure stops
    the broker.

    Each noun has its own module: admission and credit (admission.c over
    producers.c), the job state machine (jobs.c) with its leases (lease.c),
    lanes and tenants (lane.c), the scheduler (scheduler.c), the worker
    registry (workers.c), what is sent and when (replies.c), who is told
    when a job ends (notices.c: watchers, done and batch events, Cancel to
    the worker of a job cancelled or expired while it ran), the store
    (store.c), operator requests (admin.c) and stats (stats.c). */
#include "broker.h"

#include "breaker.h"
#include "schedules.h"

#include "admin.h"
#include "admission.h"
#include "arena.h"
#include "batch_hold.h"
#include "clients.h"
#include "clock.h"
#include "codec.h"
#include "commit_mark.h"
#include "counters.h"
#include "endpoints.h"
#include "http.h"
#include "id_counter.h"
#include "jobs.h"
#include "lane.h"
#include "log.h"
#include "metrics.h"
#include "producers.h"
#include "recovery.h"
#include "replies.h"
#include "rng.h"
#include "router.h"
#include "scheduler.h"
#include "security.h"
#include "settle.h"
#include "stats.h"
#include "store.h"
#include "text.h"
#include "timers.h"
#include "notices.h"
#include "pollitems.h"
#include "wire.h"
#include "workers.h"
#include "zl_alloc.h"

#include <czmq.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DRAIN_BATCH 256          // messages per socket per turn
#define MAX_EXPIRE 10000         // dead letters purged by dlq_retention per turn
#define MAX_EXPIRE_CANCELLED 256 // cancelled jobs deleted by result_retention per turn

struct _zl_broker_t {
    zl_broker_config_t *cfg;
    // for the broker's life: sockets, codec, store, replies, security, metrics
    zl_endpoints_t *endpoints; // the sockets
    zl_codec_t *codec;
    zl_arena_t *turn; // strings that live until the end of the turn
    zl_rng_t rng;
    zl_store_t *store;
    zl_replies_t *replies;
    bool failed;             // the store failed: stop the loop
    zl_security_t *security; // CURVE (or the plaintext endpoint check)
    zl_http_t *http;         // the metrics page, or NULL
    zl_metrics_source_t metrics_source;
    uint64_t counters[ZL_CTR_COUNT];
    int64_t started_ms;
    // leadership (store.h): who this broker is, and its role as of the last
    // election or commit
    char name[128];  // host:pid, for logs and the lease row
    char where[512]; // the store's location, its password hidden
    zl_lead_t *lead; // the role as last elected
    // the core: the jobs and everything that holds or schedules them, in
    // memory. Built by s_core_new, loaded from the store by s_lead, and
    // forgotten whole (s_forget) when the broker stops leading.
    zl_lanes_t *lanes;
    zl_sched_t *sched;
    zl_timers_t *timers;
    zl_jobs_t *jobs;
    zl_workers_t *workers;
    zl_producers_t *producers;
    zl_admission_t *admission;
    zl_notices_t *notices;  // who is told when a job ends (watchers, events, workers)
    bool loaded;            // the core holds the store's state (recovered): the broker may lead
    zl_id_counter_t *ids;   // the store's job-id counter (id_counter.h)
    bool early_dispatch;    // jobs may leave before the commit (zl_replies_flush_early)
    zl_commit_mark_t *mark; // how far the turns are committed (loop_turns_committed)
    bool defer_commits;     // the store commits on its thread: a turn need not wait for it
    zl_batch_hold_t *hold;  // the loop commits: when a turn may leave its batch open, else NULL
    size_t worker_rr;
    zl_peer_t *gone; // workers found unreachable at the last flush: released next turn
    size_t n_gone, cap_gone;
    int64_t next_heartbeat_ms;
    int64_t next_alert_ms;
    int64_t next_prune_ms;
    zl_schedules_t *schedules; // cron schedules (schedules.h)
    bool config_schedules;     // the config's schedules: still to upsert (first turn led)
};

typedef struct {
    zl_broker_t *self;
    zl_sock_t sock;
    const zl_peer_t *peer;
    zl_now_t now;
    zcert_t *cert;            // with CURVE: the client's certificate (role, tenants, lanes)
    const char *peer_address; // the client's IP address, NULL when fed or not known
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

/*  Watch: each job id answered by its outcome after the commit, at once
    when it is final (or unknown), else when it becomes final. With CURVE,
    a job of a tenant this key is not bound to is answered as unknown. */
// A job of a tenant the watcher's key is not bound to is answered unknown.
static bool
s_may_see_tenant (void *arg, const char *tenant)
{
    return s_bound ((ctx_t *)arg, "tenants", tenant);
}

static void
s_on_watch (ctx_t *ctx, const zl_msg_t *msg)
{
    zl_broker_t *self = ctx->self;
    const zl_watch_t *w = &msg->u.watch;
    if (w->n == 0 || w->n > ZL_NOTICES_MAX_WATCH_IDS) {
        s_reject (ctx, ZL_CTR_INVALID, ZL_ERR_INVALID, 0, 0, "Watch: %zu job ids (give 1 to %d)",
                  w->n, ZL_NOTICES_MAX_WATCH_IDS);
        return;
    }
    size_t refused =
        zl_notices_watch (self->notices, ctx->peer, w->job_ids, w->n, s_may_see_tenant, ctx);
    if (refused)
        s_reject (ctx, ZL_CTR_WATCH_REFUSED, ZL_ERR_INVALID, 0, 0,
                  "Watch: %zu of %zu job id(s) not watched: the broker watches %d jobs at most; "
                  "watch again later",
                  refused, w->n, ZL_NOTICES_MAX_WATCHES);
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

static size_t
s_unreached (void *arg, zl_worker_conn_t *old)
{
    ctx_t *ctx = arg;
    return zl_jobs_return_unreached (ctx->self->jobs, old, ctx->now);
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
                          .curve_key = ctx->cert ? zcert_public_txt (ctx->cert) : NULL,
                          .host = ctx->peer_address,
                          .unreached = s_unreached,
                          .unreached_arg = ctx};
    zl_workers_ready (self->workers, &env, &msg->u.ready, ctx->now.mono_ms);
}

static zl_settle_env_t
s_settle_env (ctx_t *ctx)
{
    return (zl_settle_env_t){
        ctx->self->jobs, ctx->self->replies,         ctx->self->counters,           ctx->sock,
        ctx->peer,       ctx->self->cfg->max_result, ctx->self->cfg->max_checkpoint};
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
                                .schedules = self->schedules,
                                .sched = self->sched,
                                .jobs = self->jobs,
                                .store = self->store,
                                .counters = self->counters,
                                .started_ms = self->started_ms,
                                .workers = zl_workers_count (self->workers),
                                .producers = np,
                                .lead = zl_lead_state (self->lead),
                                .name = self->name};
}

static void
s_on_admin (ctx_t *ctx, const zl_msg_t *msg)
{
    zl_broker_t *self = ctx->self;
    const zl_admin_request_t *req = &msg->u.admin_request;
    self->counters[ZL_CTR_ADMIN_REQUESTS]++;
    bool changes = zl_admin_changes (req);
    if (!s_role (ctx, changes ? "admin" : "admin,subscriber",
                 changes ? "change the broker (redrive, purge, pause, resume, cancel)"
                         : "read the broker's state"))
        return;
    zl_stats_sources_t src;
    s_stats_sources (self, &src);
    zl_admin_env_t env = {.jobs = self->jobs,
                          .lanes = self->lanes,
                          .counters = self->counters,
                          .arena = self->turn,
                          .stats = &src,
                          .schedules = self->schedules,
                          .workers = self->workers};
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
            [ZL_MSG_WATCH] = {s_on_watch, "producer", "watch jobs", false},
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

// ---------------------------------------------------------------- without the lead
// A broker that does not lead does nothing a message asks: a standby names
// the leader it knows, one without a database says when to try again.
static void
s_not_leading (ctx_t *ctx, const zl_msg_t *msg)
{
    zl_broker_t *self = ctx->self;
    if (zl_lead_role (self->lead) == ZL_ROLE_STANDBY)
        zl_replies_not_leader (self->replies, ctx->sock, ctx->peer,
                               zl_lead_leader_for (self->lead, ctx->sock),
                               zl_lead_state (self->lead)->leader_name);
    else
        zl_replies_unavailable (self->replies, ctx->sock, ctx->peer, msg,
                                zl_lead_retry_after_ms (self->lead, ctx->now.mono_ms));
}

// ---------------------------------------------------------------- frames
static void
s_handle_frame (zl_broker_t *self, zl_sock_t sock, const zl_peer_t *peer, zcert_t *cert,
                const char *peer_address, const void *data, size_t size, bool extra_frames,
                zl_now_t now)
{
    ctx_t ctx = {self, sock, peer, now, cert, peer_address};
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
    if (zl_lead_role (self->lead) != ZL_ROLE_LEADER && !zl_lead_answered_in_any_role (&msg)) {
        s_not_leading (&ctx, &msg);
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
// Drain up to DRAIN_BATCH messages from one ROUTER.
static int
s_drain (zl_broker_t *self, zl_sock_t sock, zl_now_t now)
{
    zl_router_t *router = zl_endpoints_router (self->endpoints, sock);
    int n = 0;
    zl_router_msg_t m;
    while (n < DRAIN_BATCH && zl_router_recv (router, &m) == 1) {
        n++;
        // with CURVE, the handshake gave each connection its client's key
        zcert_t *cert = NULL;
        if (zl_security_curve (self->security))
            cert = zl_security_client (self->security, m.user_id, now.mono_ms);
        s_handle_frame (self, sock, &m.peer, cert, m.peer_address, m.data, m.size, m.extra_frames,
                        now);
    }
    return n;
}

// ---------------------------------------------------------------- timers
static void
s_liveness (zl_broker_t *self, zl_now_t now)
{
    int64_t limit;
    zl_worker_conn_t *w;
    while ((w = zl_workers_silent (self->workers, now.mono_ms, &limit))) {
        char why[96];
        snprintf (why, sizeof why, "silent for %" PRId64 " ms (liveness %" PRId64 " ms)",
                  now.mono_ms - w->last_seen_ms, limit);
        s_worker_gone (self, w, why, now);
    }
}

static void
s_fire_timers (zl_broker_t *self, zl_now_t now)
{
    zl_jobs_fire_timers (self->jobs, now);
    // deadlines passed: dead-lettered (expired), bounded per turn
    self->counters[ZL_CTR_EXPIRED] += zl_jobs_expire_deadlines (self->jobs, now, MAX_EXPIRE);
    // cron ticks due: their jobs and the schedules' last ticks in this batch
    zl_schedules_fire (self->schedules, now);
    if (now.mono_ms >= self->next_heartbeat_ms) {
        s_liveness (self, now);
        zl_workers_heartbeat (self->workers, self->replies);
        self->next_heartbeat_ms = now.mono_ms + (int64_t)self->cfg->heartbeat_ms;
    }
    if (now.mono_ms >= self->next_alert_ms) {
        zl_replies_dlq_alert (self->replies, now);
        self->next_alert_ms = now.mono_ms + (int64_t)self->cfg->dlq_alert_ms;
    }
    // cancelled jobs past result_retention, every turn: bounded, and O(1)
    // while none is due (they are kept in the order they were cancelled)
    self->counters[ZL_CTR_CANCELLED_EXPIRED] += zl_jobs_expire_cancelled (
        self->jobs, now, self->cfg->result_retention_ms, MAX_EXPIRE_CANCELLED);
    if (now.mono_ms >= self->next_prune_ms) { // inside the turn's store batch
        zl_admission_forget_idle (self->admission, now);
        self->counters[ZL_CTR_DLQ_EXPIRED] +=
            zl_jobs_expire_dead (self->jobs, now, self->cfg->dlq_retention_ms, MAX_EXPIRE);
        self->counters[ZL_CTR_OUTCOMES_EXPIRED] +=
            zl_jobs_expire_done (self->jobs, now, self->cfg->result_retention_ms, MAX_EXPIRE);
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
// True for the store failures that mean this broker no longer leads:
// another one does (FENCED), or the database went silent (UNAVAILABLE).
static bool
s_lost_lead (zl_store_rc_t rc)
{
    return rc == ZL_STORE_FENCED || rc == ZL_STORE_UNAVAILABLE;
}

static const char *
s_rc_text (zl_store_rc_t rc)
{
    switch (rc) {
    case ZL_STORE_FULL: return "store full";
    case ZL_STORE_FENCED: return "fenced: another broker leads";
    case ZL_STORE_UNAVAILABLE: return "the database does not answer";
    default: return "I/O error";
    }
}

// This turn left nothing uncommitted (commit_mark.h).
static void
s_mark_done (zl_broker_t *self)
{
    zl_commit_mark_done (self->mark, self->counters[ZL_CTR_TURNS]);
    self->counters[ZL_CTR_TURNS_COMMITTED] = zl_commit_mark_turn (self->mark);
}

// Step 6 of the turn: one store transaction holds every change the turn made
// (group commit). Nothing below runs before it has returned: a reply that
// promises durability is only sent for what is on disk. Returns ZL_STORE_OK,
// or how the turn's writes or its commit failed. The batch is closed, but
// after a write that failed on its own (an I/O error): the broker then
// stops, and closing the store drops the batch.
static zl_store_rc_t
s_commit_as (zl_broker_t *self, bool start)
{
    zl_store_rc_t failed = zl_jobs_store_error (self->jobs);
    if (failed != ZL_STORE_OK && !s_lost_lead (failed))
        return failed;
    if (!zl_store_in_batch (self->store)) { // this turn wrote nothing
        if (failed == ZL_STORE_OK && !zl_store_commit_pending (self->store))
            s_mark_done (self);
        return failed;
    }
    uint64_t counter;
    if (failed == ZL_STORE_OK &&
        zl_id_counter_due (self->ids, zl_jobs_next_id (self->jobs), &counter))
        zl_store_set_next_id (self->store, counter);
    zl_store_rc_t rc = start ? zl_lead_commit_start (self->lead) : zl_lead_commit (self->lead);
    if (failed == ZL_STORE_OK && rc == ZL_STORE_OK) {
        zl_id_counter_committed (self->ids);
        if (!zl_store_commit_pending (self->store))
            s_mark_done (self);
    } else if (failed == ZL_STORE_OK && rc == ZL_STORE_PENDING) {
        zl_commit_mark_started (self->mark, self->counters[ZL_CTR_TURNS]);
    }
    return failed != ZL_STORE_OK ? failed : rc;
}

// The turn's commit, to its end.
static zl_store_rc_t
s_commit (zl_broker_t *self)
{
    return s_commit_as (self, false);
}

// A turn left its batch open (s_leave_commit): not committed yet.
static bool
s_batch_held (zl_broker_t *self)
{
    return self->hold && zl_batch_hold_due (self->hold) >= 0;
}

/*  Whether this turn leaves its batch open for a later turn to commit
    (batch_hold.h): on a store the loop commits, when the turn wrote,
    queued no reply but Settled (a job that may leave before its commit has
    gone already) and the hold allows it. Under a stream of jobs each Ack's
    turn then rides on the next Submit's commit, which sends its Settled. */
static bool
s_leave_commit (zl_broker_t *self, zl_now_t now)
{
    if (!self->hold || !zl_batch_hold_may (self->hold, now.mono_ms) ||
        !zl_store_batch_dirty (self->store) || zl_jobs_store_error (self->jobs) != ZL_STORE_OK ||
        !zl_replies_settles_only (self->replies, self->producers))
        return false;
    zl_batch_hold_leave (self->hold);
    return true;
}

// The workers whose frames could not be sent give their jobs back at the
// start of the next turn, in its batch (s_release_gone).
static void
s_keep_gone (zl_broker_t *self, const zl_peer_t *gone, size_t n)
{
    if (!n)
        return;
    if (self->n_gone + n > self->cap_gone) {
        self->cap_gone = self->n_gone + n;
        self->gone = zl_realloc (self->gone, self->cap_gone * sizeof *self->gone);
    }
    memcpy (self->gone + self->n_gone, gone, n * sizeof *gone);
    self->n_gone += n;
}

// Send the replies held for the commit that just ended (up to the cut).
static void
s_release_held (zl_broker_t *self)
{
    size_t n;
    zl_peer_t *gone = zl_replies_release (self->replies, &n);
    s_keep_gone (self, gone, n);
}

/*  The commit under way (zl_store_commit_start), if any, ended or (`wait`)
    waited for: committed, its held replies go; failed, they are dropped
    (the caller acts on the failure). Returns the store's answer:
    ZL_STORE_PENDING while it has not ended (without `wait`). */
static zl_store_rc_t
s_finish_commit (zl_broker_t *self, bool wait)
{
    if (!zl_store_commit_pending (self->store))
        return ZL_STORE_OK;
    zl_store_rc_t rc = zl_store_commit_finish (self->store, wait);
    if (rc == ZL_STORE_OK) {
        zl_id_counter_committed (self->ids);
        zl_commit_mark_ended (self->mark);
        self->counters[ZL_CTR_TURNS_COMMITTED] = zl_commit_mark_turn (self->mark);
        s_release_held (self);
    } else if (rc != ZL_STORE_PENDING) {
        zl_replies_drop_held (self->replies);
    }
    return rc;
}

/*  With the store's commit thread: the commit under way ends, then the
    batch the turns wrote meanwhile is committed too, and every reply held
    for them goes. Returns ZL_TURN_OK or the store's failure (s_store_failed). */
static int s_store_failed (zl_broker_t *self, zl_store_rc_t rc, const char *what);

static int
s_commit_all (zl_broker_t *self)
{
    zl_store_rc_t rc = s_finish_commit (self, true);
    if (rc == ZL_STORE_OK && zl_store_in_batch (self->store)) {
        rc = s_commit_as (self, true);
        zl_replies_cut (self->replies);
        if (rc == ZL_STORE_PENDING)
            rc = s_finish_commit (self, true);
        else if (rc == ZL_STORE_OK)
            s_release_held (self);
        if (rc == ZL_STORE_OK && self->hold)
            zl_batch_hold_committed (self->hold, zl_now ().mono_ms);
    }
    zl_endpoints_flush (self->endpoints);
    return rc == ZL_STORE_OK ? ZL_TURN_OK : s_store_failed (self, rc, "the turn's commit");
}

// ---------------------------------------------------------------- the core
static void
s_core_new (zl_broker_t *self, zl_now_t now)
{
    zl_broker_config_t *cfg = self->cfg;
    self->lanes = zl_lanes_new (cfg);
    self->sched = zl_sched_new (cfg->scheduler);
    zl_sched_set_quantum (self->sched, cfg->wfq_quantum_us);
    self->timers = zl_timers_new ();
    self->jobs = zl_jobs_new (self->sched, self->timers, &self->rng, self->store);
    zl_notices_env_t nenv = {.jobs = self->jobs,
                             .replies = self->replies,
                             .counters = self->counters,
                             .turn = self->turn,
                             .live = &self->loaded};
    self->notices = zl_notices_new (&nenv);
    zl_jobs_set_listener (self->jobs, zl_notices_job_event, self->notices);
    self->workers = zl_workers_new ();
    zl_workers_set_pace (self->workers, cfg->heartbeat_ms, cfg->liveness);
    self->producers = zl_producers_new ();
    zl_replies_rebind (self->replies, self->jobs);
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
    zl_schedules_env_t senv = {self->jobs, self->sched, self->lanes, self->store};
    self->schedules = zl_schedules_new (&senv);
    self->loaded = false;
    zl_id_counter_reset (self->ids);
    self->worker_rr = 0;
    self->n_gone = 0;
    self->next_heartbeat_ms = now.mono_ms + (int64_t)cfg->heartbeat_ms;
    self->next_alert_ms = now.mono_ms + (int64_t)cfg->dlq_alert_ms;
    self->next_prune_ms = now.mono_ms + 1000;
}

static void
s_core_destroy (zl_broker_t *self)
{
    zl_schedules_destroy (&self->schedules);
    zl_jobs_destroy (&self->jobs);
    zl_timers_destroy (&self->timers);
    zl_sched_destroy (&self->sched);
    zl_workers_destroy (&self->workers);
    zl_producers_destroy (&self->producers);
    zl_admission_destroy (&self->admission);
    zl_notices_destroy (&self->notices);
    zl_lanes_destroy (&self->lanes);
}

/*  Forget the core, `why` saying what ended the lead, and build it empty:
    every job, worker and producer, the timers, and every reply that waited
    for a commit go. The producers and workers are told (the role
    says how: NOT_LEADER, UNAVAILABLE, or NOT_READY when this broker leads
    again), so that they start again instead of waiting for those replies.
    The store keeps what was committed; s_lead loads it when this broker
    leads again. */
static void
s_forget (zl_broker_t *self, const char *why)
{
    if (self->loaded) {
        size_t np;
        zl_producers_all (self->producers, &np);
        zl_warn ("broker",
                 "%s: forgetting the %zu job(s), %zu worker(s) and %zu producer(s) held in "
                 "memory, and the replies that waited for a commit; the store keeps what was "
                 "committed",
                 why, zl_jobs_count (self->jobs), zl_workers_count (self->workers), np);
        self->counters[ZL_CTR_STEPDOWNS]++;
        static const zl_error_code_t codes[] = {[ZL_ROLE_LEADER] = ZL_ERR_NOT_READY,
                                                [ZL_ROLE_STANDBY] = ZL_ERR_NOT_LEADER,
                                                [ZL_ROLE_UNREACHABLE] = ZL_ERR_UNAVAILABLE};
        const char *leader[ZL_SOCK_COUNT];
        for (int i = 0; i < ZL_SOCK_COUNT; i++)
            leader[i] = zl_lead_leader_for (self->lead, (zl_sock_t)i);
        zl_store_role_t role = zl_lead_role (self->lead);
        const char *text = zl_arena_printf (
            self->turn,
            "this broker forgot your session (%s): what it has not answered may not have "
            "been done; start again (%s)",
            why,
            role == ZL_ROLE_LEADER    ? "Hello or Ready here"
            : role == ZL_ROLE_STANDBY ? "at the leader"
                                      : "later, or at another broker");
        zl_replies_forgotten (self->replies, self->producers, self->workers, codes[role], leader,
                              text);
    }
    if (zl_store_in_batch (self->store)) // a failed recovery's: closed
        (void)zl_lead_commit (self->lead);
    zl_replies_drop_held (self->replies); // (zl_replies_rebind too) their commit failed
    s_core_destroy (self);
    s_core_new (self, zl_now ());
}

/*  This broker no longer leads: it is `role` now, as `why` (a store call)
    showed. Its state is ahead of the store, or behind another leader's: it
    is forgotten. */
static void
s_step_down (zl_broker_t *self, zl_store_role_t role, const char *why)
{
    if (zl_lead_step_down (self->lead, role))
        s_forget (self, why);
}

// ---------------------------------------------------------------- leadership
typedef struct {
    zl_broker_t *self;
    zl_store_rc_t rc; // the recovery's commit
} lead_commit_t;

static int
s_lead_commit (void *arg)
{
    lead_commit_t *c = arg;
    c->rc = s_commit (c->self);
    return c->rc == ZL_STORE_OK ? 0 : -1;
}

/*  Load the store's state into the empty core: this broker leads now. The
    attempts that were running when the last leader stopped end as the
    store says (restart, leader_change). Returns 0, also when the lead was
    lost while loading (the broker goes on without it), or -1 with the
    reason in `err` when the store cannot be read (the broker stops). */
static int
s_lead (zl_broker_t *self, char *err, size_t errlen)
{
    lead_commit_t commit = {self, ZL_STORE_OK};
    zl_recovery_env_t rec = {self->store,   self->lanes, self->sched,
                             self->jobs,    self->where, zl_lead_recovery_cause (self->lead),
                             s_lead_commit, &commit,     self->schedules};
    if (zl_recover (&rec, err, errlen) == 0) {
        self->loaded = true;
        self->config_schedules = self->cfg->n_schedules > 0;
        return 0;
    }
    zl_store_role_t role = commit.rc == ZL_STORE_FENCED        ? ZL_ROLE_STANDBY
                           : commit.rc == ZL_STORE_UNAVAILABLE ? ZL_ROLE_UNREACHABLE
                                                               : zl_store_role (self->store);
    if (role == ZL_ROLE_LEADER)
        return -1;
    zl_warn ("broker", "%s: recovery did not finish (%s); going on without the lead", self->name,
             err);
    s_step_down (self, role, "recovery");
    return 0;
}

/*  Step 2 of the turn, outside any batch: renew, watch or take the lead.
    A broker that leads now and did not load the store's state (it starts,
    took over, or leads again after a spell without the lead) loads it; one
    that no longer leads forgets its own. Returns 0, or -1 with the reason
    in `err` when the broker must stop (it cannot read the store). */
static int
s_elect (zl_broker_t *self, zl_now_t now, char *err, size_t errlen)
{
    bool was_leading;
    zl_store_role_t role = zl_lead_elect (self->lead, now.mono_ms, &was_leading);
    if (role != ZL_ROLE_LEADER) {
        if (was_leading)
            s_forget (self, role == ZL_ROLE_STANDBY ? "another broker leads now"
                                                    : "the database does not answer");
        return 0;
    }
    if (zl_lead_state (self->lead)->took_over &&
        self->loaded) // it led before, others may have since
        s_forget (self, "took the lead again");
    return self->loaded ? 0 : s_lead (self, err, errlen);
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

// Handle the `fed` frame or what the sockets `items` marks readable hold,
// and serve the metrics page.
static void
s_drain_all (zl_broker_t *self, const zmq_pollitem_t *items, const fed_t *fed, zl_now_t now)
{
    if (fed)
        s_handle_frame (self, fed->sock, &fed->peer, NULL, NULL, fed->data, fed->size, false, now);
    for (int i = 0; items && i < ZL_SOCK_COUNT; i++)
        if ((items[i].revents & ZMQ_POLLIN) ||
            zl_router_pending (zl_endpoints_router (self->endpoints, (zl_sock_t)i)))
            s_drain (self, (zl_sock_t)i, now);
    if (self->http && items && (items[ZL_SOCK_COUNT].revents & ZMQ_POLLIN))
        s_serve_metrics (self, now);
}

// Refused handshakes counted, idle metrics connections closed, connections
// past their heartbeat TTL or handshake closed: in every role.
static void
s_housekeeping (zl_broker_t *self, zl_now_t now)
{
    self->counters[ZL_CTR_AUTH_FAILED] += zl_security_refused (self->security);
    for (int i = 0; i < ZL_SOCK_COUNT; i++)
        zl_router_sweep (zl_endpoints_router (self->endpoints, (zl_sock_t)i), now.mono_ms);
    if (self->http)
        zl_http_sweep (self->http, now.mono_ms);
}

/*  A store call of the turn failed with `rc` (`what` says which): another
    broker leads (FENCED) or the database is silent (UNAVAILABLE), and this
    broker goes on without the lead; or the store failed otherwise, and the
    broker stops. Nothing is replied either way. Returns the turn's result. */
static int
s_store_failed (zl_broker_t *self, zl_store_rc_t rc, const char *what)
{
    char why[160];
    snprintf (why, sizeof why, "%s failed (%s)", what, s_rc_text (rc));
    if (s_lost_lead (rc)) {
        s_step_down (self, rc == ZL_STORE_FENCED ? ZL_ROLE_STANDBY : ZL_ROLE_UNREACHABLE, why);
        return ZL_TURN_OK;
    }
    zl_error ("broker",
              "%s: stopping without replying; a restart recovers the last committed state", why);
    self->failed = true;
    return ZL_TURN_STORE_FAILED;
}

// Open the turn's batch. False when this broker does not lead, or no longer
// does (the store refused the batch), or stopped (self->failed).
static bool
s_begin (zl_broker_t *self)
{
    if (zl_lead_role (self->lead) != ZL_ROLE_LEADER)
        return false;
    zl_store_rc_t rc = zl_store_begin (self->store);
    if (rc != ZL_STORE_OK)
        s_store_failed (self, rc, "opening the turn's batch");
    return rc == ZL_STORE_OK;
}

// The workers the last flush found unreachable give their jobs back, in
// this turn's batch (their peers were kept: the registry may have been
// rebuilt since).
static void
s_release_gone (zl_broker_t *self, zl_now_t now)
{
    for (size_t i = 0; i < self->n_gone; i++) {
        zl_worker_conn_t *w = zl_workers_lookup (self->workers, &self->gone[i]);
        if (w)
            s_worker_gone (self, w, "unreachable", now);
    }
    self->n_gone = 0;
}

static void
s_keep_gone_workers (zl_broker_t *self, zl_worker_conn_t **gone, size_t n)
{
    for (size_t i = 0; i < n; i++)
        s_keep_gone (self, &gone[i]->peer, 1);
}

/*  The turn ends without a commit of its own: what it queued for after the
    commit is made now and held for the next one; the rest goes. */
static int
s_hold_replies (zl_broker_t *self)
{
    size_t n_gone;
    zl_worker_conn_t **gone =
        zl_replies_flush (self->replies, self->producers, self->workers, true, &n_gone);
    s_keep_gone_workers (self, gone, n_gone);
    zl_endpoints_flush (self->endpoints);
    return ZL_TURN_OK;
}

/*  Steps 2-7 of a turn, in their order: leadership, drain and apply (the
    sockets that `items` marks readable, or the one `fed` frame), timers,
    dispatch, commit, replies. Returns ZL_TURN_OK, or ZL_TURN_STORE_FAILED. */
static int
s_turn (zl_broker_t *self, const zmq_pollitem_t *items, const fed_t *fed)
{
    self->counters[ZL_CTR_TURNS]++;
    zl_arena_reset (self->turn);
    zl_now_t now = zl_now ();

    // the last turn's commit, if still under way: ended now, or waited for
    // when an election is due (none runs while a commit is under way)
    zl_store_rc_t done = s_finish_commit (self, now.mono_ms >= zl_lead_due (self->lead));
    if (done != ZL_STORE_OK && done != ZL_STORE_PENDING &&
        s_store_failed (self, done, "the last turn's commit") != ZL_TURN_OK)
        return ZL_TURN_STORE_FAILED;

    // 2. leadership, outside any batch
    char err[512];
    if (now.mono_ms >= zl_lead_due (self->lead) && s_elect (self, now, err, sizeof err) != 0) {
        zl_error ("broker", "%s: stopping", err);
        self->failed = true;
        return ZL_TURN_STORE_FAILED;
    }
    if (!s_begin (self)) { // no lead: every message answered, nothing done
        if (self->failed)
            return ZL_TURN_STORE_FAILED;
        s_drain_all (self, items, fed, now);
        s_housekeeping (self, now);
        zl_endpoints_flush (self->endpoints);
        return ZL_TURN_OK;
    }

    // 3. drain and apply (every change goes into the turn's store batch)
    if (self->config_schedules) {
        self->config_schedules = false;
        zl_schedules_add_config (self->schedules, self->cfg, now);
    }
    s_release_gone (self, now);
    s_drain_all (self, items, fed, now);

    // 4. timers (and refused handshakes, counted)
    s_fire_timers (self, now);
    s_housekeeping (self, now);

    // batches whose last job settled this turn: their callbacks are ready
    // (and dispatched below), their records and events go with this commit
    zl_notices_settle_batches (self->notices, now);

    // 5. dispatch; then what the lanes' circuit breakers did this turn
    s_dispatch (self, now);
    zl_notices_breakers (self->notices, self->lanes, now);
    // the jobs a crash before the commit can only give back go now: a lone
    // job starts while its commit runs (see the note at the top)
    if (self->early_dispatch) {
        size_t n_early_gone;
        zl_worker_conn_t **early_gone = zl_replies_flush_early (
            self->replies, self->workers, zl_id_counter_durable (self->ids), &n_early_gone);
        s_keep_gone_workers (self, early_gone, n_early_gone);
    }
    // expired idempotency keys, every turn (inside the turn's store batch):
    // bounded work that keeps up with the keys the turn added; after the
    // early Dispatches, since looking for what is due reads the key logs
    zl_idem_policy_t idem = {self->cfg->resend_window_ms, self->cfg->dedup_window_ms,
                             zl_broker_config_dedup_max_keys (self->cfg)};
    zl_store_prune_idem (self->store, now.wall_ms, &idem, 1024);

    // 6. commit. The last turn's, if still under way, ends first and its
    // replies go; then this turn's starts. A store that can (PostgreSQL)
    // commits while the next turn runs, and this turn's replies are made now
    // and held until it has committed. A turn that wrote and queued nothing
    // leaves the commit under way alone. With the store's commit thread
    // (LMDB in fsync mode) no turn waits: while a commit is under way the
    // batch stays open, and the turns' replies are held, for the next one.
    // the producers' credit first: a Credit it raises is a reply this turn owes
    zl_admission_regrant (self->admission);
    if (self->defer_commits && zl_store_commit_pending (self->store))
        return s_hold_replies (self);
    if (zl_store_commit_pending (self->store) && !zl_store_batch_dirty (self->store) &&
        !zl_replies_queued (self->replies)) {
        (void)s_commit_as (self, true); // closes the empty batch, waits for nothing
        zl_endpoints_flush (self->endpoints);
        return ZL_TURN_OK;
    }
    if (s_leave_commit (self, now)) // the batch stays open, its Settled held
        return s_hold_replies (self);
    zl_store_rc_t rc = s_finish_commit (self, true);
    if (rc != ZL_STORE_OK) // this turn's batch was dropped with it
        return s_store_failed (self, rc, "the last turn's commit");
    rc = s_commit_as (self, true);
    if (rc != ZL_STORE_OK && rc != ZL_STORE_PENDING)
        return s_store_failed (self, rc, "the turn's commit");
    if (rc == ZL_STORE_OK && self->hold)
        zl_batch_hold_committed (self->hold, now.mono_ms);
    if (rc == ZL_STORE_OK && zl_replies_held (self->replies)) {
        // held by turns while the last commit ran, for this one: it is done
        zl_replies_cut (self->replies);
        s_release_held (self);
    }

    // 7. what promises a state change: now that it is on disk, or held
    // until it is (the credit was granted above)
    size_t n_gone;
    zl_worker_conn_t **gone = zl_replies_flush (self->replies, self->producers, self->workers,
                                                rc == ZL_STORE_PENDING, &n_gone);
    if (rc == ZL_STORE_PENDING)
        zl_replies_cut (self->replies); // what is held so far waits for this commit
    // Jobs queued for an unreachable worker go back to ready at the start of
    // the next turn, in its batch, which commits before it replies.
    s_keep_gone_workers (self, gone, n_gone);
    zl_endpoints_flush (self->endpoints);
    return ZL_TURN_OK;
}

// When the loop must run next: the next election, and while leading the
// next timer (at once while unreachable workers wait to be released).
static int64_t
s_next_wake (zl_broker_t *self, int64_t now_ms)
{
    int64_t wake = zl_lead_due (self->lead);
    if (zl_lead_role (self->lead) != ZL_ROLE_LEADER)
        return wake;
    if (self->n_gone)
        return now_ms;
    int64_t deadline = zl_jobs_next_deadline (self->jobs); // wall clock
    int64_t tick = zl_schedules_next_ms (self->schedules); // wall clock
    if (tick >= 0 && (deadline < 0 || tick < deadline))
        deadline = tick;
    if (deadline >= 0) {
        int64_t in_ms = deadline - zl_clock_wall_ms ();
        deadline = now_ms + (in_ms > 0 ? in_ms : 0);
    }
    int64_t next[] = {self->next_heartbeat_ms,
                      self->next_alert_ms,
                      self->hold ? zl_batch_hold_due (self->hold) : -1,
                      zl_jobs_next_timer (self->jobs),
                      zl_sched_next_wake (self->sched),
                      deadline,
                      zl_lanes_breaker_wake (self->lanes)};
    for (size_t i = 0; i < sizeof next / sizeof next[0]; i++)
        if (next[i] >= 0 && next[i] < wake)
            wake = next[i];
    return wake;
}

int
zl_broker_turn (zl_broker_t *self, int max_wait_ms)
{
    if (self->failed) // stopped: a later commit would send the failed turn's replies
        return ZL_TURN_STORE_FAILED;
    // 1. wait for input or the next timer
    zl_now_t now = zl_now ();
    int64_t timeout = s_next_wake (self, now.mono_ms) - now.mono_ms;
    if (timeout < 0)
        timeout = 0;
    if (timeout > max_wait_ms)
        timeout = max_wait_ms;
    zmq_pollitem_t items[ZL_SOCK_COUNT + 2];
    for (int i = 0; i < ZL_SOCK_COUNT; i++) {
        zl_router_t *router = zl_endpoints_router (self->endpoints, (zl_sock_t)i);
        items[i] = (zmq_pollitem_t){.events = ZMQ_POLLIN};
        zl_router_poll_item (router, &items[i].socket, &items[i].fd);
        if (zl_router_pending (router)) // read already, not yet handled
            timeout = 0;
    }
    int n_items = ZL_SOCK_COUNT;
    if (self->http)
        items[n_items++] = (zmq_pollitem_t){zl_http_socket (self->http), 0, ZMQ_POLLIN, 0};
    int commit_fd = zl_store_commit_fd (self->store); // its results wake the loop
    if (commit_fd >= 0)
        items[n_items++] = (zmq_pollitem_t){NULL, commit_fd, ZMQ_POLLIN, 0};
    if (zl_poll_items (items, n_items, (long)timeout) < 0 && errno == EINTR)
        return ZL_TURN_INTERRUPTED;
    // 2-7.
    int rc = s_turn (self, items, NULL);
    // 8. the room a commit changed, measured now that the turn's replies
    // are out rather than by the next Submit before its job can leave
    if (rc == ZL_TURN_OK)
        zl_store_measure_room (self->store);
    return rc;
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
    int rc = s_turn (self, NULL, &fed);
    // a fed turn ends with its commit and its replies, as on a store
    // without a commit thread (its callers read the replies next)
    if (rc == ZL_TURN_OK && (self->defer_commits || s_batch_held (self)))
        rc = s_commit_all (self);
    return rc;
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
    zl_stats_build (&src, self->turn, zl_now (), false, st);
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

/*  Tell the store who this broker is, for the lease row and for standbys'
    NOT_LEADER: host:pid, and the endpoints clients reach its frontend,
    backend and admin sockets at (advertise, or the bound address, or the
    host name). Returns 0, or -1 with the reason in `err`. */
static int
s_stand (zl_broker_t *self, char *err, size_t errlen)
{
    char host[64] = "localhost";
    gethostname (host, sizeof host);
    host[sizeof host - 1] = '\0';
    snprintf (self->name, sizeof self->name, "%s:%d", host, (int)getpid ());
    static const char *const socks[ZL_ADVERTISE_COUNT] = {[ZL_ADVERTISE_FRONTEND] = "frontend",
                                                          [ZL_ADVERTISE_BACKEND] = "backend",
                                                          [ZL_ADVERTISE_ADMIN] = "admin"};
    char advertised[ZL_ADVERTISE_COUNT][ZL_ADVERTISE_MAX];
    zl_store_candidate_t who = {.name = self->name,
                                .lease_ms = (uint32_t)self->cfg->leader_lease_ms};
    for (int i = 0; i < ZL_ADVERTISE_COUNT; i++) {
        const char *bound = zl_endpoints_bound (self->endpoints, socks[i]);
        if (zl_endpoints_advertise (bound, self->cfg->advertise, advertised[i], ZL_ADVERTISE_MAX) !=
            0) {
            snprintf (err, errlen,
                      "cannot tell which endpoint clients reach the %s socket (%s) at: give "
                      "advertise HOST",
                      socks[i], bound);
            return -1;
        }
        who.advertise[i] = advertised[i];
    }
    zl_store_set_candidate (self->store, &who);
    self->lead = zl_lead_new (self->store, self->name);
    zl_debug ("broker", "%s advertises frontend %s, backend %s, admin %s", self->name,
              advertised[ZL_ADVERTISE_FRONTEND], advertised[ZL_ADVERTISE_BACKEND],
              advertised[ZL_ADVERTISE_ADMIN]);
    return 0;
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
    const char *where = zl_broker_config_store (cfg, err, errlen);
    self->store = where ? zl_store_open (where, cfg->durability, cfg->map_size, err, errlen) : NULL;
    if (!self->store) {
        zl_broker_destroy (&self);
        return NULL;
    }
    zl_store_location_safe (where, self->where, sizeof self->where);
    self->early_dispatch = !cfg->dispatch_after_commit && zl_store_exclusive (self->store);
    self->defer_commits =
        !cfg->commit_on_loop && zl_store_exclusive (self->store) &&
        zl_store_use_commit_thread (self->store, (int64_t)cfg->commit_interval_ms * 1000);
    if (!self->defer_commits && zl_store_exclusive (self->store) && cfg->commit_interval_ms > 0)
        self->hold = zl_batch_hold_new (cfg->commit_interval_ms);
    self->ids = zl_id_counter_new (self->early_dispatch);
    self->mark = zl_commit_mark_new ();
    zl_endpoints_t *ep = self->endpoints = zl_endpoints_new (cfg);
    if (!ep) {
        snprintf (err, errlen, "cannot make the sockets: %s", strerror (errno));
        zl_broker_destroy (&self);
        return NULL;
    }
    zl_router_t *routers[ZL_SOCK_COUNT] = {zl_endpoints_router (ep, ZL_SOCK_FRONTEND),
                                           zl_endpoints_router (ep, ZL_SOCK_BACKEND),
                                           zl_endpoints_router (ep, ZL_SOCK_ADMIN)};
    zl_replies_env_t renv = {.routers = {routers[0], routers[1], routers[2]},
                             .events = zl_endpoints_events (ep),
                             .codec = self->codec,
                             .counters = self->counters,
                             .turn = self->turn};
    self->replies = zl_replies_new (&renv);
    if (cfg->wire_dump && *cfg->wire_dump &&
        zl_replies_dump_to (self->replies, cfg->wire_dump, err, errlen) != 0) {
        zl_broker_destroy (&self);
        return NULL;
    }
    zl_now_t now = zl_now ();
    s_core_new (self, now);
    self->security =
        zl_security_new (cfg, routers, ZL_SOCK_COUNT, zl_endpoints_events_zsock (ep), err, errlen);
    if (!self->security) {
        zl_broker_destroy (&self);
        return NULL;
    }
    // bound before the first election: the store learns where clients reach
    // this broker; an LMDB broker leads at once and recovers its store
    if (zl_endpoints_bind (ep, err, errlen) != 0 || s_start_metrics (self, err, errlen) != 0 ||
        s_stand (self, err, errlen) != 0 || s_elect (self, now, err, errlen) != 0 ||
        (cfg->ports_file && zl_endpoints_write_ports (
                                ep, cfg->ports_file,
                                self->http ? zl_http_endpoint (self->http) : NULL, err, errlen))) {
        zl_broker_destroy (&self);
        return NULL;
    }
    self->started_ms = now.mono_ms;
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
    if (self->store && self->replies && (self->defer_commits || s_batch_held (self)) &&
        !self->failed)
        (void)s_commit_all (self); // what the turns wrote while a commit ran, or left open
    else if (self->store && self->replies)
        (void)s_finish_commit (self, true); // what it committed is answered
    if (self->endpoints)
        zl_endpoints_flush (self->endpoints);
    zl_endpoints_destroy (&self->endpoints);
    s_core_destroy (self);
    zl_replies_destroy (&self->replies);
    zl_lead_destroy (&self->lead);
    zl_store_close (&self->store);
    zl_id_counter_destroy (&self->ids);
    zl_commit_mark_destroy (&self->mark);
    zl_batch_hold_destroy (&self->hold);
    zl_http_destroy (&self->http);
    zl_security_destroy (&self->security);
    zl_codec_destroy (&self->codec);
    zl_arena_destroy (&self->turn);
    free (self->gone);
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
