#include "replies.h"

#include "jobs.h"
#include "log.h"
#include "producers.h"
#include "router.h"
#include "text.h"
#include "workers.h"
#include "zl_alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include <zmq.h>

#define DISPATCH_FRAME_JOBS 256 // jobs per Dispatch frame
#define DISPATCH_FRAME_BYTES (4u << 20)

static const char *s_sock_names[ZL_SOCK_COUNT] = {"frontend", "backend", "admin"};

// An admin reply held until the turn's commit (its strings are in the turn
// arena, which lives until the next turn).
typedef struct {
    zl_peer_t peer;
    zl_msg_t msg;
} admin_later_t;

// A job's outcome held until the turn's commit: for a watcher (`topic`
// NULL), or for the events socket under `topic`. Its data is in the turn
// arena.
typedef struct {
    zl_peer_t peer;
    const char *topic;
    zl_job_outcome_t outcome;
} outcome_later_t;

// A frame made after a commit that is still under way: sent when it ends.
typedef struct {
    int sock;        // ZL_SOCK_*, or -1: the events socket (`peer` holds the topic)
    zl_peer_t peer;  // the ROUTER peer, or the topic
    size_t at, size; // the frame: held_buf[at, at + size)
} held_t;

struct _zl_replies_t {
    zl_replies_env_t env;
    bool queued; // something was queued for after the commit since the last flush
    // ... and of it: a reply other than Settled (promises, for
    // zl_replies_settles_only), or jobs to send (jobs_queued; those that
    // may go before the commit leave in zl_replies_flush_early)
    bool promises, jobs_queued;
    bool holding; // zl_replies_flush with `hold`: frames go to `held`
    held_t *held;
    size_t n_held, cap_held;
    size_t n_cut; // held[0, n_cut) wait for the commit under way, the rest for the next
    uint8_t *held_buf;
    size_t held_len, held_cap;
    zl_arena_t *frame;  // records loaded for one Dispatch frame or event
    uint64_t *dead_ids; // dead-lettered this turn
    size_t n_dead, cap_dead;
    admin_later_t *later; // admin replies that report a change
    size_t n_later, cap_later;
    outcome_later_t *outcomes; // Watch answers and done events
    size_t n_outcomes, cap_outcomes;
    zl_batch_info_t *batches; // batch.<id> events
    size_t n_batches, cap_batches;
    int dump; // wire_dump's file, or -1
};

const char *
zl_sock_name (zl_sock_t sock)
{
    return (unsigned)sock < ZL_SOCK_COUNT ? s_sock_names[sock] : "?";
}

zl_replies_t *
zl_replies_new (const zl_replies_env_t *env)
{
    zl_replies_t *self = ZL_NEW (zl_replies_t);
    self->env = *env;
    self->frame = zl_arena_new (256 * 1024);
    self->dump = -1;
    return self;
}

void
zl_replies_rebind (zl_replies_t *self, zl_jobs_t *jobs)
{
    zl_replies_drop_held (self);
    self->env.jobs = jobs;
    self->n_dead = 0;
    self->n_later = 0;
    self->n_outcomes = 0;
    self->n_batches = 0;
}

static void
s_dump_frame (void *arg, const void *frame, size_t size)
{
    uint8_t len[4] = {(uint8_t)size, (uint8_t)(size >> 8), (uint8_t)(size >> 16),
                      (uint8_t)(size >> 24)};
    struct iovec iov[2] = {{len, sizeof len}, {(void *)frame, size}};
    if (writev (*(int *)arg, iov, 2) < 0)
        zl_debug ("broker", "wire_dump: %s", strerror (errno));
}

int
zl_replies_dump_to (zl_replies_t *self, const char *path, char *err, size_t errlen)
{
    self->dump = open (path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (self->dump < 0) {
        snprintf (err, errlen, "cannot open wire_dump %s: %s", path, strerror (errno));
        return -1;
    }
    zl_codec_set_tap (self->env.codec, s_dump_frame, &self->dump);
    zl_warn ("broker", "wire_dump: every frame sent is appended to %s", path);
    return 0;
}

void
zl_replies_destroy (zl_replies_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_replies_t *self = *self_p;
    if (self->dump >= 0) {
        zl_codec_set_tap (self->env.codec, NULL, NULL);
        close (self->dump);
    }
    zl_arena_destroy (&self->frame);
    free (self->held);
    free (self->held_buf);
    free (self->dead_ids);
    free (self->later);
    free (self->outcomes);
    free (self->batches);
    free (self);
    *self_p = NULL;
}

// ---------------------------------------------------------------- at once
int
zl_replies_send (zl_replies_t *self, zl_sock_t sock, const zl_peer_t *peer, const zl_msg_t *msg)
{
    if (zl_router_send_msg (self->env.routers[sock], peer, self->env.codec, msg) == 0)
        return 0;
    self->env.counters[ZL_CTR_UNREACHABLE]++;
    zl_debug ("broker", "%s: %s not delivered: %s", s_sock_names[sock],
              zl_msg_kind_name (msg->kind), zmq_strerror (errno));
    return -1;
}

void
zl_replies_error (zl_replies_t *self, zl_sock_t sock, const zl_peer_t *peer,
                  zl_counter_id_t counter, zl_error_code_t code, uint64_t job_id, uint64_t lease,
                  const char *fmt, ...)
{
    char text[516];
    va_list ap;
    va_start (ap, fmt);
    int n = vsnprintf (text, sizeof text, fmt, ap);
    va_end (ap);
    // an echoed name must not be cut inside a character: replies are text
    size_t len = n < 0 ? 0 : (size_t)n < sizeof text - 1 ? (size_t)n : sizeof text - 1;
    text[zl_text_cut (text, len, 511)] = '\0';
    self->env.counters[counter]++;
    zl_warn ("broker", "%s: %s: %s", s_sock_names[sock], zl_error_code_name (code), text);
    zl_msg_t reply = {.kind = ZL_MSG_ERROR};
    reply.u.error = (zl_error_t){code, text, job_id, lease};
    zl_replies_send (self, sock, peer, &reply);
}

void
zl_replies_not_leader (zl_replies_t *self, zl_sock_t sock, const zl_peer_t *peer,
                       const char *leader, const char *leader_name)
{
    self->env.counters[ZL_CTR_NOT_LEADER]++;
    const char *text =
        leader_name[0] || leader[0]
            ? zl_arena_printf (self->env.turn,
                               "this broker is a standby: nothing was done; the leader is %s%s%s",
                               leader_name[0] ? leader_name : "a broker", leader[0] ? " at " : "",
                               leader)
            : "this broker is a standby: nothing was done; no leader is known yet (try the next "
              "broker)";
    zl_debug ("broker", "%s: not_leader: %s", s_sock_names[sock], text);
    zl_msg_t reply = {.kind = ZL_MSG_ERROR};
    reply.u.error = (zl_error_t){.code = ZL_ERR_NOT_LEADER,
                                 .message = text,
                                 .n_leader_endpoints = leader[0] ? 1 : 0,
                                 .leader_endpoints = &leader};
    zl_replies_send (self, sock, peer, &reply);
}

void
zl_replies_unavailable (zl_replies_t *self, zl_sock_t sock, const zl_peer_t *peer,
                        const zl_msg_t *msg, uint32_t retry_after_ms)
{
    static const char why[] = "the broker's store does not answer (no writable database): "
                              "nothing was done; retry later";
    self->env.counters[ZL_CTR_UNAVAILABLE]++;
    zl_debug ("broker", "%s: unavailable: %s %s", s_sock_names[sock], zl_msg_kind_name (msg->kind),
              why);
    zl_msg_t reply;
    if (msg->kind == ZL_MSG_SUBMIT && msg->u.submit.n) {
        const zl_submit_t *sub = &msg->u.submit;
        zl_rejection_t *rej = zl_arena_alloc (self->env.turn, sub->n * sizeof *rej);
        for (size_t i = 0; i < sub->n; i++)
            rej[i] = (zl_rejection_t){sub->jobs[i].seq, ZL_REJECT_UNAVAILABLE, why, retry_after_ms};
        reply = (zl_msg_t){.kind = ZL_MSG_REJECTED, .u.rejected = {sub->n, rej}};
    } else
        reply = (zl_msg_t){.kind = ZL_MSG_ERROR,
                           .u.error = {.code = ZL_ERR_UNAVAILABLE, .message = why}};
    zl_replies_send (self, sock, peer, &reply);
}

void
zl_replies_forgotten (zl_replies_t *self, zl_producers_t *producers, zl_workers_t *workers,
                      zl_error_code_t code, const char *const leader[ZL_SOCK_COUNT],
                      const char *why)
{
    const char *fe = leader[ZL_SOCK_FRONTEND], *be = leader[ZL_SOCK_BACKEND];
    zl_msg_t m = {.kind = ZL_MSG_ERROR};
    m.u.error = (zl_error_t){.code = code, .message = why};
    size_t n;
    zl_producer_conn_t **ps = zl_producers_all (producers, &n);
    m.u.error.n_leader_endpoints = code == ZL_ERR_NOT_LEADER && fe[0] ? 1 : 0;
    m.u.error.leader_endpoints = &fe;
    for (size_t i = 0; i < n; i++)
        zl_replies_send (self, ZL_SOCK_FRONTEND, &ps[i]->peer, &m);
    zl_worker_conn_t **ws = zl_workers_all (workers, &n);
    m.u.error.n_leader_endpoints = code == ZL_ERR_NOT_LEADER && be[0] ? 1 : 0;
    m.u.error.leader_endpoints = &be;
    for (size_t i = 0; i < n; i++)
        zl_replies_send (self, ZL_SOCK_BACKEND, &ws[i]->peer, &m);
}

void
zl_replies_publish (zl_replies_t *self, const char *topic, const zl_msg_t *msg)
{
    if (zl_wire_publish (self->env.events, topic, self->env.codec, msg) == 0)
        self->env.counters[ZL_CTR_EVENTS_PUBLISHED]++;
}

void
zl_replies_dlq_alert (zl_replies_t *self, zl_now_t now)
{
    zl_dlq_t *dlq = zl_jobs_dlq (self->env.jobs);
    zl_job_t *oldest = zl_dlq_first (dlq);
    if (!oldest)
        return;
    zl_msg_t ev = {.kind = ZL_MSG_DLQ_ALERT};
    ev.u.dlq_alert.depth = zl_dlq_depth (dlq);
    ev.u.dlq_alert.oldest_age_ms = (uint64_t)(now.wall_ms - oldest->dead_at_ms);
    zl_replies_publish (self, "alert.dlq", &ev);
}

// ---------------------------------------------------------------- refusals
void
zl_refusals_init (zl_refusals_t *r, zl_replies_t *replies, zl_sock_t sock, const zl_peer_t *peer,
                  const char *what, size_t total, bool job_items)
{
    memset (r, 0, sizeof *r);
    r->replies = replies;
    r->sock = sock;
    r->peer = peer;
    r->what = what;
    r->total = total;
    r->job_items = job_items;
}

void
zl_refusals_add (zl_refusals_t *r, zl_counter_id_t counter, zl_error_code_t code, uint64_t job_id,
                 uint64_t lease, const char *fmt, ...)
{
    r->replies->env.counters[counter]++;
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
            r->items = zl_arena_alloc (r->replies->env.turn, r->total * sizeof *r->items);
    }
    if (r->job_items)
        r->items[r->n] = (zl_item_error_t){job_id, lease, code};
    r->n++;
}

void
zl_refusals_send (zl_refusals_t *r, const char *tail)
{
    if (!r->n)
        return;
    zl_arena_t *turn = r->replies->env.turn;
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
        text = zl_arena_printf (turn, "%zu of %zu %s items refused (%s); the first: %s", r->n,
                                r->total, r->what, counts, r->first);
    }
    if (tail)
        text = zl_arena_printf (turn, "%s %s", text, tail);
    zl_warn ("broker", "%s: %s: %s", s_sock_names[r->sock], zl_error_code_name (r->code), text);
    zl_msg_t reply = {.kind = ZL_MSG_ERROR};
    reply.u.error = (zl_error_t){r->code,
                                 text,
                                 r->job_id,
                                 r->lease,
                                 r->job_items ? r->n : 0,
                                 r->job_items ? r->items : NULL};
    zl_replies_send (r->replies, r->sock, r->peer, &reply);
}

// ---------------------------------------------------------------- queued
#define S_PUSH(arr, n, cap, first)                                                                 \
    do {                                                                                           \
        if ((n) == (cap)) {                                                                        \
            (cap) = (cap) ? (cap)*2 : (first);                                                     \
            (arr) = zl_realloc ((arr), (size_t)(cap) * sizeof *(arr));                             \
        }                                                                                          \
    } while (0)

void
zl_replies_accept (zl_replies_t *self, zl_producer_conn_t *p, uint64_t seq, uint64_t job_id,
                   bool duplicate)
{
    self->queued = self->promises = true;
    zl_producer_outbox_t *o = &p->out;
    S_PUSH (o->acc, o->n_acc, o->cap_acc, 64);
    o->acc[o->n_acc++] = (zl_acceptance_t){seq, job_id, duplicate};
}

void
zl_replies_accept_batch (zl_replies_t *self, zl_producer_conn_t *p, uint64_t seq, uint64_t job_id,
                         bool duplicate, const char *batch_id)
{
    zl_replies_accept (self, p, seq, job_id, duplicate);
    p->out.acc[p->out.n_acc - 1].batch_id = batch_id;
}

void
zl_replies_batch_closed (zl_replies_t *self, zl_producer_conn_t *p, const char *batch_id,
                         const char *error)
{
    self->queued = self->promises = true;
    zl_producer_outbox_t *o = &p->out;
    S_PUSH (o->closed, o->n_closed, o->cap_closed, 8);
    o->closed[o->n_closed++] = (zl_batch_closed_t){batch_id, error == NULL, error ? error : ""};
}

void
zl_replies_batch_done (zl_replies_t *self, const zl_batch_info_t *info)
{
    self->queued = self->promises = true;
    S_PUSH (self->batches, self->n_batches, self->cap_batches, 8);
    self->batches[self->n_batches++] = *info;
}

void
zl_replies_reject (zl_replies_t *self, zl_producer_conn_t *p, uint64_t seq, zl_reject_code_t code,
                   const char *reason, uint32_t retry_after_ms)
{
    self->queued = self->promises = true;
    zl_producer_outbox_t *o = &p->out;
    S_PUSH (o->rej, o->n_rej, o->cap_rej, 16);
    o->rej[o->n_rej++] = (zl_rejection_t){seq, code, reason, retry_after_ms};
}

void
zl_replies_credit_due (zl_replies_t *self, zl_producer_conn_t *p)
{
    self->queued = self->promises = true;
    p->out.sent_limit = UINT64_MAX;
}

bool
zl_replies_producer_pending (const zl_producer_conn_t *p)
{
    return p->out.n_acc || p->out.n_rej || p->out.n_closed;
}

void
zl_replies_dispatch (zl_replies_t *self, zl_worker_conn_t *w, zl_job_t *job)
{
    self->queued = self->jobs_queued = true;
    zl_worker_outbox_t *o = &w->out;
    S_PUSH (o->jobs, o->n_jobs, o->cap_jobs, 16);
    o->jobs[o->n_jobs++] = job;
}

void
zl_replies_settled (zl_replies_t *self, zl_worker_conn_t *w, uint64_t job_id, uint64_t lease)
{
    self->queued = true;
    zl_worker_outbox_t *o = &w->out;
    S_PUSH (o->settled, o->n_settled, o->cap_settled, 16);
    o->settled[o->n_settled++] = (zl_lease_ref_t){job_id, lease};
}

void
zl_replies_cancel (zl_replies_t *self, zl_worker_conn_t *w, uint64_t job_id, uint64_t lease)
{
    self->queued = self->promises = true;
    zl_worker_outbox_t *o = &w->out;
    S_PUSH (o->cancels, o->n_cancels, o->cap_cancels, 16);
    o->cancels[o->n_cancels++] = (zl_lease_ref_t){job_id, lease};
}

void
zl_replies_move_settled (zl_replies_t *self, zl_worker_conn_t *to, zl_worker_conn_t *from)
{
    for (uint32_t i = 0; i < from->out.n_settled; i++)
        zl_replies_settled (self, to, from->out.settled[i].job_id, from->out.settled[i].lease);
    from->out.n_settled = 0;
    for (uint32_t i = 0; i < from->out.n_cancels; i++)
        zl_replies_cancel (self, to, from->out.cancels[i].job_id, from->out.cancels[i].lease);
    from->out.n_cancels = 0;
}

void
zl_replies_dead (zl_replies_t *self, uint64_t job_id)
{
    self->queued = self->promises = true;
    S_PUSH (self->dead_ids, self->n_dead, self->cap_dead, 16);
    self->dead_ids[self->n_dead++] = job_id;
}

void
zl_replies_outcome (zl_replies_t *self, const zl_peer_t *peer, const char *topic,
                    const zl_job_outcome_t *outcome)
{
    self->queued = self->promises = true;
    S_PUSH (self->outcomes, self->n_outcomes, self->cap_outcomes, 16);
    outcome_later_t *o = &self->outcomes[self->n_outcomes++];
    o->topic = topic;
    if (peer)
        o->peer = *peer;
    o->outcome = *outcome;
}

void
zl_replies_admin (zl_replies_t *self, const zl_peer_t *peer, const zl_msg_t *reply)
{
    self->queued = self->promises = true;
    S_PUSH (self->later, self->n_later, self->cap_later, 8);
    self->later[self->n_later++] = (admin_later_t){*peer, *reply};
}

void
zl_producer_outbox_free (zl_producer_outbox_t *out)
{
    free (out->acc);
    free (out->rej);
    free (out->closed);
    out->acc = NULL;
    out->rej = NULL;
    out->closed = NULL;
    out->n_closed = out->cap_closed = 0;
    out->n_acc = out->cap_acc = out->n_rej = out->cap_rej = 0;
}

void
zl_worker_outbox_free (zl_worker_outbox_t *out)
{
    free (out->jobs);
    free (out->settled);
    free (out->cancels);
    out->jobs = NULL;
    out->settled = NULL;
    out->cancels = NULL;
    out->n_jobs = out->cap_jobs = out->n_settled = out->cap_settled = 0;
    out->n_cancels = out->cap_cancels = 0;
}

// ---------------------------------------------------------------- after the commit
// Keep the frame of `msg` for `peer` on `sock` (-1: the events socket,
// `topic`) until zl_replies_release.
static int
s_hold (zl_replies_t *self, int sock, const zl_peer_t *peer, const char *topic, const zl_msg_t *msg)
{
    size_t size;
    if (self->dump >= 0) // wire_dump records what is sent: at the release
        zl_codec_set_tap (self->env.codec, NULL, NULL);
    const void *data = zl_codec_encode (self->env.codec, msg, &size);
    if (self->dump >= 0)
        zl_codec_set_tap (self->env.codec, s_dump_frame, &self->dump);
    if (!data)
        return -1;
    if (self->n_held == self->cap_held) {
        self->cap_held = self->cap_held ? self->cap_held * 2 : 64;
        self->held = zl_realloc (self->held, self->cap_held * sizeof *self->held);
    }
    if (self->held_len + size > self->held_cap) {
        while (self->held_len + size > self->held_cap)
            self->held_cap = self->held_cap ? self->held_cap * 2 : 64 * 1024;
        self->held_buf = zl_realloc (self->held_buf, self->held_cap);
    }
    held_t *h = &self->held[self->n_held++];
    h->sock = sock;
    if (peer) {
        h->peer = *peer;
    } else {
        size_t n = strlen (topic);
        h->peer.len = (uint8_t)(n < ZL_PEER_ID_MAX ? n : ZL_PEER_ID_MAX);
        memcpy (h->peer.data, topic, h->peer.len);
    }
    h->at = self->held_len;
    h->size = size;
    memcpy (self->held_buf + self->held_len, data, size);
    self->held_len += size;
    return 0;
}

// Send `msg` to `peer` on `sock` after the commit: now, or when it ends.
static int
s_later (zl_replies_t *self, zl_sock_t sock, const zl_peer_t *peer, const zl_msg_t *msg)
{
    if (self->holding)
        return s_hold (self, (int)sock, peer, NULL, msg);
    return zl_replies_send (self, sock, peer, msg);
}

static void
s_publish_later (zl_replies_t *self, const char *topic, const zl_msg_t *msg)
{
    if (self->holding)
        (void)s_hold (self, -1, NULL, topic, msg);
    else
        zl_replies_publish (self, topic, msg);
}

static void
s_flush_producers (zl_replies_t *self, zl_producers_t *producers)
{
    size_t n;
    zl_producer_conn_t **all = zl_producers_all (producers, &n);
    for (size_t i = 0; i < n; i++) {
        zl_producer_conn_t *p = all[i];
        zl_producer_outbox_t *o = &p->out;
        if (o->n_acc || o->n_closed) {
            zl_msg_t m = {.kind = ZL_MSG_ACCEPTED};
            m.u.accepted = (zl_accepted_t){o->n_acc, o->acc, o->n_closed, o->closed};
            s_later (self, ZL_SOCK_FRONTEND, &p->peer, &m);
            o->n_acc = o->n_closed = 0;
        }
        if (o->n_rej) {
            zl_msg_t m = {.kind = ZL_MSG_REJECTED};
            m.u.rejected = (zl_rejected_t){o->n_rej, o->rej};
            s_later (self, ZL_SOCK_FRONTEND, &p->peer, &m);
            o->n_rej = 0;
        }
        uint64_t limit = zl_producer_conn_limit (p);
        if (limit != o->sent_limit) {
            zl_msg_t m = {.kind = ZL_MSG_CREDIT};
            m.u.credit.limit = limit;
            s_later (self, ZL_SOCK_FRONTEND, &p->peer, &m);
            o->sent_limit = limit;
        }
    }
}

static void
s_flush_admin (zl_replies_t *self)
{
    for (size_t i = 0; i < self->n_later; i++)
        s_later (self, ZL_SOCK_ADMIN, &self->later[i].peer, &self->later[i].msg);
    self->n_later = 0;
}

static void
s_publish_dead (zl_replies_t *self)
{
    for (size_t i = 0; i < self->n_dead; i++) {
        zl_job_t *job = zl_jobs_find (self->env.jobs, self->dead_ids[i]);
        zl_msg_t ev = {.kind = ZL_MSG_DEAD_LETTER};
        zl_arena_reset (self->frame);
        if (!job || job->state != ZL_JOB_DEAD ||
            zl_jobs_dead_letter (self->env.jobs, job, true, self->frame, &ev.u.dead_letter) != 0)
            continue;
        const char *topic = zl_arena_printf (self->env.turn, "dlq.%s.%s", job->flow->lane->name,
                                             job->flow->tenant->name);
        s_publish_later (self, topic, &ev);
    }
    self->n_dead = 0;
}

static void
s_flush_outcomes (zl_replies_t *self)
{
    for (size_t i = 0; i < self->n_outcomes; i++) {
        outcome_later_t *o = &self->outcomes[i];
        zl_msg_t m = {.kind = o->topic ? ZL_MSG_JOB_DONE : ZL_MSG_OUTCOME};
        m.u.outcome = o->outcome;
        if (o->topic)
            s_publish_later (self, o->topic, &m);
        else
            s_later (self, ZL_SOCK_FRONTEND, &o->peer, &m);
        self->env.counters[ZL_CTR_OUTCOMES_SENT]++;
    }
    self->n_outcomes = 0;
    for (size_t i = 0; i < self->n_batches; i++) {
        zl_msg_t m = {.kind = ZL_MSG_BATCH_DONE};
        m.u.batch_done = self->batches[i];
        s_publish_later (self,
                         zl_arena_printf (self->env.turn, "batch.%s", m.u.batch_done.batch_id), &m);
    }
    self->n_batches = 0;
}

// The Job message for a leased job, its payload read from the store into
// the frame arena (and, in a workflow, its parents' results).
static int
s_job_msg (zl_replies_t *self, zl_job_t *job, zl_job_msg_t *out)
{
    zl_job_rec_t rec;
    zl_state_rec_t st = {0};
    bool ckpt = job->flags & ZL_JOBF_CHECKPOINT; // (read only then: the state costs a lookup)
    if (zl_jobs_load (self->env.jobs, job, self->frame, &rec, ckpt ? &st : NULL) != ZL_STORE_OK)
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
                          .enqueued_at_ms = (uint64_t)rec.enqueued_at_ms,
                          .ordering_key = rec.ordering_key,
                          .checkpoint = st.checkpoint};
    if (rec.n_depends_on)
        zl_jobs_parent_results (self->env.jobs, &rec, self->frame, &out->n_parent_results,
                                &out->parent_results);
    if (rec.batch_summary) { // a batch's callback: the batch as it settled
        zl_batch_info_t *b = zl_arena_alloc (self->frame, sizeof *b);
        zl_batches_info_settled (rec.batch_self, out->tenant, out->lane, job->id,
                                 !rec.batch_no_callback, rec.batch_summary, b);
        out->batch = b;
    }
    return 0;
}

static int
s_worker_send (zl_replies_t *self, zl_router_t *router, zl_worker_conn_t *w, const zl_msg_t *m)
{
    if (self->holding)
        return s_hold (self, ZL_SOCK_BACKEND, &w->peer, NULL, m);
    return zl_router_send_msg (router, &w->peer, self->env.codec, m);
}

// The jobs of `jobs` still leased, in Dispatch frames of at most
// DISPATCH_FRAME_JOBS jobs or DISPATCH_FRAME_BYTES of payload (the frame
// arena is reset). Returns 0, or -1 once a send failed.
static int
s_send_jobs (zl_replies_t *self, zl_router_t *sock, zl_worker_conn_t *w, zl_job_t **jobs,
             uint32_t n_jobs, zl_job_msg_t *msgs)
{
    size_t k = 0, bytes = 0;
    zl_arena_reset (self->frame);
    for (uint32_t i = 0; i < n_jobs; i++) {
        zl_job_t *job = jobs[i];
        if (job->state == ZL_JOB_LEASED && s_job_msg (self, job, &msgs[k]) == 0) {
            bytes += msgs[k].payload.len;
            for (size_t r = 0; r < msgs[k].n_parent_results; r++)
                bytes += msgs[k].parent_results[r].result.len;
            k++;
        }
        if (k && (k == DISPATCH_FRAME_JOBS || bytes >= DISPATCH_FRAME_BYTES || i + 1 == n_jobs)) {
            zl_msg_t m = {.kind = ZL_MSG_DISPATCH};
            m.u.dispatch = (zl_dispatch_t){k, msgs};
            if (s_worker_send (self, sock, w, &m) != 0)
                return -1;
            k = 0;
            bytes = 0;
            zl_arena_reset (self->frame);
        }
    }
    return 0;
}

// Settled, Cancel, then the leased jobs in Dispatch frames of at most
// DISPATCH_FRAME_JOBS jobs or DISPATCH_FRAME_BYTES of payload. Returns 0,
// or -1 once a send failed (ROUTER_MANDATORY: the connection is gone).
static int
s_flush_worker (zl_replies_t *self, zl_worker_conn_t *w, zl_job_msg_t *msgs)
{
    zl_router_t *sock = self->env.routers[ZL_SOCK_BACKEND];
    zl_worker_outbox_t *o = &w->out;
    bool ok = true;
    if (o->n_settled) {
        zl_msg_t m = {.kind = ZL_MSG_SETTLED};
        m.u.settled = (zl_settled_t){o->n_settled, o->settled};
        ok = s_worker_send (self, sock, w, &m) == 0;
        o->n_settled = 0;
    }
    if (o->n_cancels && ok) {
        zl_msg_t m = {.kind = ZL_MSG_CANCEL};
        m.u.cancel = (zl_cancel_t){o->n_cancels, o->cancels};
        ok = s_worker_send (self, sock, w, &m) == 0;
        if (ok)
            self->env.counters[ZL_CTR_CANCELS_SENT] += o->n_cancels;
    }
    o->n_cancels = 0;
    if (ok)
        ok = s_send_jobs (self, sock, w, o->jobs, o->n_jobs, msgs) == 0;
    o->n_jobs = 0;
    if (ok)
        return 0;
    self->env.counters[ZL_CTR_UNREACHABLE]++;
    return -1;
}

// A job that may leave before the commit of its lease (zl_replies_flush_early):
// one that a crash before that commit can at worst make run twice, never out
// of its order or on inputs the store then forgets. It waits for no other
// job and none waits for it (no parents or children, no ordering key, not a
// batch's callback), it resumes no checkpoint, and its id is below
// `below_id` (ids a committed counter reserved: never another job's after a
// restart, so the idempotency key "job-<id>" stays this job's). Nor is a job
// the broker itself would make again if a crash undid its commit (marked
// after_commit: a schedule's tick), which would then run twice.
static bool
s_early (const zl_job_t *job, uint64_t below_id)
{
    return job->state == ZL_JOB_LEASED && job->id < below_id && !job->after_commit &&
           !(job->flags & (ZL_JOBF_DEPS | ZL_JOBF_BATCH_REC | ZL_JOBF_ORDER | ZL_JOBF_CHECKPOINT));
}

zl_worker_conn_t **
zl_replies_flush_early (zl_replies_t *self, zl_workers_t *workers, uint64_t below_id,
                        size_t *n_gone)
{
    size_t n;
    zl_worker_conn_t **all = zl_workers_all (workers, &n);
    zl_worker_conn_t **gone = zl_arena_alloc (self->env.turn, (n ? n : 1) * sizeof *gone);
    zl_router_t *sock = self->env.routers[ZL_SOCK_BACKEND];
    zl_job_msg_t *msgs = NULL;
    zl_job_t **early = NULL;
    uint32_t cap_early = 0;
    bool sent = false, still = false;
    *n_gone = 0;
    self->holding = false;
    for (size_t i = 0; i < n; i++) {
        zl_worker_outbox_t *o = &all[i]->out;
        uint32_t n_early = 0, kept = 0;
        for (uint32_t j = 0; j < o->n_jobs; j++) {
            zl_job_t *job = o->jobs[j];
            if (!s_early (job, below_id)) {
                o->jobs[kept++] = job;
                continue;
            }
            if (n_early == cap_early) {
                uint32_t cap = o->n_jobs > 2 * cap_early ? o->n_jobs : 2 * cap_early;
                zl_job_t **grown = zl_arena_alloc (self->env.turn, cap * sizeof *grown);
                if (n_early)
                    memcpy (grown, early, n_early * sizeof *grown);
                early = grown;
                cap_early = cap;
            }
            early[n_early++] = job;
        }
        if (kept)
            still = true;
        if (!n_early)
            continue;
        o->n_jobs = kept;
        if (!msgs)
            msgs = zl_arena_alloc (self->env.turn, DISPATCH_FRAME_JOBS * sizeof *msgs);
        sent = true;
        self->env.counters[ZL_CTR_DISPATCHED_EARLY] += n_early;
        if (s_send_jobs (self, sock, all[i], early, n_early, msgs) != 0) {
            self->env.counters[ZL_CTR_UNREACHABLE]++;
            o->n_jobs = 0; // the rest go back with the worker, next turn
            gone[(*n_gone)++] = all[i];
        }
    }
    self->jobs_queued = still; // what is left waits for the commit
    if (sent)
        zl_router_flush (sock);
    return gone;
}

zl_worker_conn_t **
zl_replies_flush (zl_replies_t *self, zl_producers_t *producers, zl_workers_t *workers, bool hold,
                  size_t *n_gone)
{
    self->holding = hold;
    self->queued = self->promises = self->jobs_queued = false;
    // The workers' frames go first, and are written before the rest is even
    // made: a job that arrives alone starts on its worker before the
    // producer's Accepted and the events are sent (bench/RESULTS.md,
    // "Latency"). A worker found gone here dead-letters nothing now: its jobs
    // go back in the next turn's batch, and their events with its commit.
    size_t n;
    zl_worker_conn_t **all = zl_workers_all (workers, &n);
    zl_worker_conn_t **gone = zl_arena_alloc (self->env.turn, (n ? n : 1) * sizeof *gone);
    zl_job_msg_t *msgs = NULL;
    *n_gone = 0;
    for (size_t i = 0; i < n; i++) {
        zl_worker_conn_t *w = all[i];
        if (!w->out.n_jobs && !w->out.n_settled && !w->out.n_cancels)
            continue;
        if (!msgs)
            msgs = zl_arena_alloc (self->env.turn, DISPATCH_FRAME_JOBS * sizeof *msgs);
        if (s_flush_worker (self, w, msgs) != 0)
            gone[(*n_gone)++] = w;
    }
    if (!hold)
        zl_router_flush (self->env.routers[ZL_SOCK_BACKEND]);
    s_flush_producers (self, producers);
    s_flush_admin (self);
    s_publish_dead (self);
    s_flush_outcomes (self);
    self->holding = false;
    return gone;
}

bool
zl_replies_queued (const zl_replies_t *self)
{
    return self->queued;
}

bool
zl_replies_settles_only (const zl_replies_t *self, zl_producers_t *producers)
{
    if (self->promises || self->jobs_queued)
        return false;
    size_t n;
    zl_producer_conn_t **all = zl_producers_all (producers, &n);
    for (size_t i = 0; i < n; i++) // a Credit is a promise too
        if (zl_producer_conn_limit (all[i]) != all[i]->out.sent_limit)
            return false;
    return true;
}

bool
zl_replies_held (const zl_replies_t *self)
{
    return self->n_held > 0;
}

void
zl_replies_cut (zl_replies_t *self)
{
    self->n_cut = self->n_held;
}

zl_peer_t *
zl_replies_release (zl_replies_t *self, size_t *n_gone)
{
    zl_peer_t *gone =
        zl_arena_alloc (self->env.turn, (self->n_cut ? self->n_cut : 1) * sizeof *gone);
    *n_gone = 0;
    const zl_peer_t *lost =
        NULL; // the worker whose last frame failed: the rest of its are not sent
    for (size_t i = 0; i < self->n_cut; i++) {
        held_t *h = &self->held[i];
        const uint8_t *data = self->held_buf + h->at;
        if (self->dump >= 0)
            s_dump_frame (&self->dump, data, h->size);
        if (h->sock < 0) {
            if (zmq_send (self->env.events, h->peer.data, h->peer.len,
                          ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0 &&
                zmq_send (self->env.events, data, h->size, ZMQ_DONTWAIT) >= 0)
                self->env.counters[ZL_CTR_EVENTS_PUBLISHED]++;
            continue;
        }
        bool backend = h->sock == ZL_SOCK_BACKEND;
        if (backend && lost && lost->len == h->peer.len &&
            !memcmp (lost->data, h->peer.data, lost->len))
            continue;
        if (zl_router_send (self->env.routers[h->sock], &h->peer, data, h->size) == 0)
            continue;
        self->env.counters[ZL_CTR_UNREACHABLE]++;
        zl_debug ("broker", "%s: a frame held for the commit not delivered: %s",
                  s_sock_names[h->sock], zmq_strerror (errno));
        if (backend) {
            gone[*n_gone] = h->peer;
            lost = &gone[(*n_gone)++];
        }
    }
    // what waits for the next commit moves to the front
    size_t rest = self->n_held - self->n_cut;
    size_t at = rest ? self->held[self->n_cut].at : self->held_len;
    if (rest) {
        memmove (self->held, self->held + self->n_cut, rest * sizeof *self->held);
        memmove (self->held_buf, self->held_buf + at, self->held_len - at);
        for (size_t i = 0; i < rest; i++)
            self->held[i].at -= at;
    }
    self->n_held = rest;
    self->held_len -= at;
    self->n_cut = 0;
    return gone;
}

void
zl_replies_drop_held (zl_replies_t *self)
{
    self->n_held = self->held_len = self->n_cut = 0;
}
