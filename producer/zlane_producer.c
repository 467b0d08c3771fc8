/*  zlane_producer: the producer side of the frontend protocol.

    A job moves QUEUED -> INFLIGHT -> DONE, or through RETRY after a retryable
    rejection, and goes back to QUEUED when the connection it was sent on is
    lost. Every pump does the same steps, in this order:
      1. run timers: retries that are due go back to the send queue, jobs past
         their deadline end as TIMEOUT;
      2. send: Hello if this connection owes one, then Submit frames of up to
         max_batch specs while the broker's credit allows;
      3. wait on the connection and the next timer;
      4. apply the connection's events (a new handshake means a new
         broker connection: Hello again, credit from zero, resend everything
         not yet accepted), then the broker's replies;
      5. if the broker is gone, said NOT_LEADER or has no database
         (UNAVAILABLE), leave it (below);
      6. steps 1 and 2 again, for what the replies made possible.

    Several brokers. The endpoint option may list several brokers (one
    leads, the others stand by). The producer talks to one at a time, on a
    socket of its own. It leaves it for another when it is silent (ZeroMQ's
    heartbeats dropped the connection, a dial was refused, no answer (the
    handshake, then Credit for our Hello) came within S_DIAL_TIMEOUT_MS of
    the dial, or the peer echoes our own Hello), for the next, round robin;
    and when it answers NOT_LEADER, for the leader it names (or the next).
    A broker whose database does not answer (Error UNAVAILABLE to a Hello,
    Rejected UNAVAILABLE to a Submit, whose jobs then wait for their
    retry-after as after QUEUE_FULL) is left for the next broker, or for
    itself again when it is the only one. It closes that socket and dials the new endpoint after a
   full-jitter backoff that doubles on every move until a broker serves (Credit, Accepted,
   Rejected). The new connection is a new session as above: whatever was not Accepted is resent
   under its key. With one endpoint ZeroMQ reconnects the same socket, as it always did. Results are
   collected on a list and handed to the callback only from zl_producer_poll and zl_producer_wait,
   never from inside a submit. */
#include "zlane_producer.h"

#include "clock.h"
#include "codec.h"
#include "eplist.h"
#include "link.h"
#include "log.h"
#include "pending.h"
#include "rng.h"
#include "wire.h"
#include "zl_alloc.h"

#include <czmq.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_COMPONENT "producer"
#define S_RETRY_MIN_MS 50           // floor for a retryable rejection's delay
#define S_BATCH_MAX_BYTES (1 << 20) // a Submit frame stops growing past this
#define S_SPEC_OVERHEAD 64          // rough wire bytes of a spec beyond its strings
#define S_RECV_BURST 1024           // replies handled per pump before timers run
#define S_HWM 1000                  // frames; credit bounds what we queue anyway
#define S_LINGER_MS 100
#define S_RECONNECT_IVL_MS 100
//  A standby naming as leader the broker we just left for not answering:
//  the leader is likely dead and this standby about to take over; ask it
//  again every ~S_RECONNECT_IVL_MS, at most S_STAY_MAX times within
//  S_STAY_MS of leaving the dead one, rather than go back there.
#define S_STAY_MS 10000
#define S_STAY_MAX 60
#define S_RECONNECT_IVL_MAX_MS                                                                     \
    1000 // a move waits random(0, this) at most: a takeover is not waited out long
#define S_HEARTBEAT_IVL_MS 1000
#define S_HEARTBEAT_TIMEOUT_MS 3000
#define S_REDIAL_MIN_MS 1000 // ZeroMQ gives up on a refused handshake: we dial again
#define S_REDIAL_MAX_MS 30000
#define S_DIAL_TIMEOUT_MS S_HEARTBEAT_TIMEOUT_MS // several brokers: no answer by then, next
typedef struct {
    int64_t at_ms;
    uint64_t seq;
} s_timer_t;

struct _zl_producer_t {
    // zl_producer_close_batch: the one close asked for, and its answer
    char *closing;
    bool close_sent, close_done;
    char close_error[256];
    // configuration
    zl_eplist_t *brokers; // every endpoint given, and the one in use
    char *endpoint;       // the endpoint the socket is for (a copy: the list moves first)
    char *client;
    uint32_t deadline_ms;
    uint32_t max_batch;
    bool nonblock;
    zl_producer_result_fn *on_result;
    void *on_result_arg;
    zl_curve_t curve;  // set on the DEALER before it connects
    char instance[17]; // random hex naming this instance in generated keys

    // the connection to the broker's frontend (link.h; NULL between leaving
    // one broker and dialling the next)
    zl_link_t *handle;
    zl_codec_t *codec;

    // connection and credit
    bool connected;        // a handshake holds
    bool hello_pending;    // this connection still owes the broker a Hello
    bool out_blocked;      // the last send would block: wait for POLLOUT
    char refused[256];     // why the broker refuses us (a failed handshake, an
                           // UNAUTHORIZED error); "" after a good handshake
    int64_t redial_at_ms;  // after a failed handshake: connect again then; 0 = not due
    uint32_t redial_ms;    // the backoff before the next redial
    int64_t down_since_ms; // when the link was lost (or the producer made)
    uint64_t credit_limit; // specs the broker allows since our Hello
    uint64_t sent_since_hello;

    // several brokers
    zl_rng_t rng;             // backoff jitter
    uint32_t backoff_ms;      // upper bound of the next move's delay
    bool leave;               // leave this broker at the end of the pump
    char leave_why[128];      // why, for the log
    bool leave_loud;          // log it as info: a held connection or a NOT_LEADER
    bool dial_due;            // no socket: dial self->endpoint at dial_at_ms
    int64_t dial_at_ms;       //
    int64_t dial_deadline_ms; // roaming: leave if the broker said nothing by then; 0 = none
    char *gone_ep;            // the broker last left for not answering (NULL: none)
    int64_t gone_at_ms;       //   and when
    unsigned stays;           // NOT_LEADERs naming it answered by asking again here
    bool leave_fast;          // this move: a short delay, the backoff left as it is

    // jobs
    zl_pending_t *pending;
    uint64_t next_seq;
    uint64_t live_cursor; // every job below this seq is DONE or gone
    size_t n_queued;      // jobs in state QUEUED
    uint64_t *queue;      // send queue: a ring of seqs (may hold stale ones)
    size_t q_head, q_len, q_cap;
    s_timer_t *retries; // min-heap of retry times
    size_t n_retries, retries_cap;
    zl_pending_job_t *done_head; // results not yet delivered, oldest first
    zl_pending_job_t *done_tail;
    bool delivering;
    zl_job_spec_t *batch; // scratch for one Submit frame, max_batch specs

    // watched jobs whose outcome has not come
    zl_producer_outcome_fn *on_outcome;
    void *on_outcome_arg;
    uint64_t *watched;
    size_t n_watched, cap_watched;
    bool watch_due; // (re)send the Watch on this connection

    zl_producer_stats_t stats;
    char last_error[512];
};

#define S_WATCH_MAX 10000 // job ids per Watch frame (the broker's limit)

//  Encode `msg` and queue it on the connection (it goes at the next
//  zl_link_flush). Returns 0, or -1 with errno (EAGAIN: no room, or no
//  connection up).
static int
s_send_msg (zl_producer_t *self, const zl_msg_t *msg)
{
    size_t size;
    const void *data = zl_codec_encode (self->codec, msg, &size);
    if (!data) {
        errno = EINVAL;
        return -1;
    }
    return zl_link_send (self->handle, data, size);
}

//  Send the Watch for every job whose outcome has not come, in frames of
//  S_WATCH_MAX ids.
static void
s_send_watch (zl_producer_t *self)
{
    if (!self->watch_due || !self->connected || !self->handle || self->out_blocked)
        return;
    for (size_t at = 0; at < self->n_watched; at += S_WATCH_MAX) {
        size_t n = self->n_watched - at < S_WATCH_MAX ? self->n_watched - at : S_WATCH_MAX;
        zl_msg_t msg = {.kind = ZL_MSG_WATCH, .u.watch = {n, self->watched + at}};
        if (s_send_msg (self, &msg) < 0) {
            self->out_blocked = errno == EAGAIN;
            return;
        }
    }
    self->watch_due = false;
    zl_link_flush (self->handle);
}

static void
s_on_outcome (zl_producer_t *self, const zl_job_outcome_t *o)
{
    for (size_t i = 0; i < self->n_watched; i++)
        if (self->watched[i] == o->job_id) {
            self->watched[i] = self->watched[--self->n_watched];
            if (self->on_outcome)
                self->on_outcome (o, self->on_outcome_arg);
            return;
        }
}

// ---------------------------------------------------------------- helpers

static void s_set_error (zl_producer_t *self, const char *fmt, ...)
    __attribute__ ((format (printf, 2, 3)));

static void
s_set_error (zl_producer_t *self, const char *fmt, ...)
{
    va_list args;
    va_start (args, fmt);
    vsnprintf (self->last_error, sizeof self->last_error, fmt, args);
    va_end (args);
}

//  Write a duration for people: "250 ms", "1.5 s", "30 s".
static const char *
s_duration (int64_t ms, char *buf, size_t size)
{
    if (ms < 0)
        ms = 0;
    if (ms < 1000)
        snprintf (buf, size, "%lld ms", (long long)ms);
    else if (ms >= 10000 || ms % 1000 < 50 || ms % 1000 >= 950)
        snprintf (buf, size, "%lld s", (long long)((ms + 500) / 1000));
    else
        snprintf (buf, size, "%.1f s", (double)ms / 1000.0);
    return buf;
}

//  Where the producer looks for a broker, for messages: the whole list when
//  there are several.
static const char *
s_where (zl_producer_t *self)
{
    return zl_eplist_size (self->brokers) > 1 ? zl_eplist_text (self->brokers) : self->endpoint;
}

static bool
s_retryable (zl_reject_code_t code)
{
    //  SHUTTING_DOWN is retried too: the broker is going away and, like a
    //  restart, will most likely be back before the job's deadline. So is
    //  UNAVAILABLE: the broker's database does not answer for now.
    return code == ZL_REJECT_QUEUE_FULL || code == ZL_REJECT_STORE_FULL ||
           code == ZL_REJECT_SHUTTING_DOWN || code == ZL_REJECT_UNAVAILABLE;
}

//  Specs this connection may still send.
static uint64_t
s_credit_room (zl_producer_t *self)
{
    if (!self->connected || self->credit_limit <= self->sent_since_hello)
        return 0;
    return self->credit_limit - self->sent_since_hello;
}

//  Every state change goes through here so that n_queued stays exact.
static void
s_set_state (zl_producer_t *self, zl_pending_job_t *job, zl_pending_state_t state)
{
    if (job->state == ZL_PENDING_QUEUED)
        self->n_queued--;
    if (state == ZL_PENDING_QUEUED)
        self->n_queued++;
    job->state = state;
}

// ---------------------------------------------------------------- send queue

static void
s_queue_push (zl_producer_t *self, uint64_t seq)
{
    if (self->q_len == self->q_cap) {
        size_t cap = self->q_cap ? self->q_cap * 2 : 1024;
        uint64_t *grown = zl_malloc (cap * sizeof *grown);
        for (size_t i = 0; i < self->q_len; i++)
            grown[i] = self->queue[(self->q_head + i) % self->q_cap];
        free (self->queue);
        self->queue = grown;
        self->q_cap = cap;
        self->q_head = 0;
    }
    self->queue[(self->q_head + self->q_len) % self->q_cap] = seq;
    self->q_len++;
}

static uint64_t
s_queue_at (zl_producer_t *self, size_t index)
{
    return self->queue[(self->q_head + index) % self->q_cap];
}

static void
s_queue_drop (zl_producer_t *self, size_t count)
{
    self->q_head = (self->q_head + count) % (self->q_cap ? self->q_cap : 1);
    self->q_len -= count;
}

// ---------------------------------------------------------------- retry heap

static void
s_retry_push (zl_producer_t *self, int64_t at_ms, uint64_t seq)
{
    if (self->n_retries == self->retries_cap) {
        self->retries_cap = self->retries_cap ? self->retries_cap * 2 : 64;
        self->retries = zl_realloc (self->retries, self->retries_cap * sizeof *self->retries);
    }
    size_t i = self->n_retries++;
    while (i > 0 && self->retries[(i - 1) / 2].at_ms > at_ms) {
        self->retries[i] = self->retries[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    self->retries[i] = (s_timer_t){at_ms, seq};
}

static s_timer_t
s_retry_pop (zl_producer_t *self)
{
    s_timer_t top = self->retries[0];
    s_timer_t last = self->retries[--self->n_retries];
    size_t i = 0;
    while (true) {
        size_t child = 2 * i + 1;
        if (child >= self->n_retries)
            break;
        if (child + 1 < self->n_retries &&
            self->retries[child + 1].at_ms < self->retries[child].at_ms)
            child++;
        if (self->retries[child].at_ms >= last.at_ms)
            break;
        self->retries[i] = self->retries[child];
        i = child;
    }
    if (self->n_retries > 0)
        self->retries[i] = last;
    return top;
}

// ---------------------------------------------------------------- results

//  Give `job` its final result and put it on the delivery list.
static void
s_finish (zl_producer_t *self, zl_pending_job_t *job, zl_producer_status_t status,
          zl_reject_code_t code, const char *reason)
{
    s_set_state (self, job, ZL_PENDING_DONE);
    job->status = status;
    job->code = code;
    if (reason != job->reason)
        zl_pending_job_set_reason (job, reason);
    job->next_done = NULL;
    if (self->done_tail)
        self->done_tail->next_done = job;
    else
        self->done_head = job;
    self->done_tail = job;
    if (status == ZL_PRODUCER_ACCEPTED)
        self->stats.accepted++;
    else if (status == ZL_PRODUCER_REJECTED)
        self->stats.rejected++;
    else
        self->stats.timed_out++;
}

//  Call the callback for every finished job, oldest first, and free them.
//  Returns the number delivered. Not re-entrant: a callback that polls gets 0.
static int
s_deliver (zl_producer_t *self)
{
    if (self->delivering)
        return 0;
    self->delivering = true;
    int count = 0;
    while (self->done_head) {
        zl_pending_job_t *job = self->done_head;
        self->done_head = job->next_done;
        if (!self->done_head)
            self->done_tail = NULL;
        zl_pending_remove (self->pending, job->spec.seq);
        if (self->on_result) {
            zl_producer_result_t result = {.seq = job->spec.seq,
                                           .status = job->status,
                                           .job_id = job->job_id,
                                           .duplicate = job->duplicate,
                                           .code = job->code,
                                           .reason = job->reason ? job->reason : "",
                                           .idempotency_key = job->spec.idempotency_key,
                                           .sends = job->sends,
                                           .batch_id = job->batch_id ? job->batch_id : ""};
            self->on_result (&result, self->on_result_arg);
        }
        zl_pending_job_destroy (&job);
        count++;
    }
    self->delivering = false;
    return count;
}

// ---------------------------------------------------------------- timers

//  Explain why `job` ran out of time, from what the producer sees now.
static void
s_timeout_reason (zl_producer_t *self, zl_pending_job_t *job, int64_t now, char *buf, size_t size)
{
    char took[32];
    if (!self->connected) {
        snprintf (buf, size, "broker unreachable at %s for %s%s%s%s", s_where (self),
                  s_duration (now - self->down_since_ms, took, sizeof took),
                  job->sends ? " (the job was sent; it may have been accepted)" : "",
                  self->refused[0] ? ": " : "", self->refused);
        return;
    }
    s_duration (now - job->submitted_ms, took, sizeof took);
    switch (job->state) {
    case ZL_PENDING_INFLIGHT:
        snprintf (buf, size,
                  "no reply from broker at %s within %s (the job may have been accepted)",
                  self->endpoint, took);
        break;
    case ZL_PENDING_RETRY:
        snprintf (buf, size, "still refused by broker at %s after %s: %s: %s", self->endpoint, took,
                  zl_reject_code_name (job->code), job->reason ? job->reason : "");
        break;
    default:
        if (self->refused[0])
            snprintf (buf, size, "no credit from broker at %s for %s: %s", self->endpoint, took,
                      self->refused);
        else
            snprintf (buf, size, "no credit from broker at %s for %s (queue full?)", self->endpoint,
                      took);
        break;
    }
}

static void s_dial (zl_producer_t *self, int64_t now);
static void s_leave_for_next (zl_producer_t *self, const char *why);
static void s_leave_silent (zl_producer_t *self, const char *why);

//  Dial the next broker when due, leave one that gave no answer in time,
//  requeue due retries, dial again after a refused handshake and time out
//  jobs past their deadline.
static void
s_run_timers (zl_producer_t *self, int64_t now)
{
    if (self->dial_due && now >= self->dial_at_ms)
        s_dial (self, now);
    if (self->dial_deadline_ms && now >= self->dial_deadline_ms && !self->leave) {
        self->dial_deadline_ms = 0;
        s_leave_silent (self, "no answer in time");
    }
    if (self->redial_at_ms && now >= self->redial_at_ms && self->handle && !self->leave) {
        //  A connection whose handshake was refused is not dialled again by
        //  the link, but the broker may admit us now (its clients directory
        //  is reloaded): a new one, or the next broker when there are several.
        self->redial_at_ms = 0;
        if (zl_eplist_roams (self->brokers))
            s_leave_for_next (self, "its handshake failed");
        else {
            zl_link_redial (self->handle);
            zl_link_pump (self->handle, now);
            zl_debug (S_COMPONENT, "dialling %s again after a refused handshake", self->endpoint);
        }
    }
    while (self->n_retries > 0 && self->retries[0].at_ms <= now) {
        s_timer_t timer = s_retry_pop (self);
        zl_pending_job_t *job = zl_pending_get (self->pending, timer.seq);
        if (job && job->state == ZL_PENDING_RETRY) {
            s_set_state (self, job, ZL_PENDING_QUEUED);
            job->cause = ZL_PENDING_RETRIED;
            s_queue_push (self, timer.seq);
        }
    }
    //  Deadlines never decrease with seq (one deadline_ms, taken from the
    //  submit call), so the lowest unfinished job is always the next to expire.
    while (self->live_cursor < self->next_seq) {
        zl_pending_job_t *job = zl_pending_get (self->pending, self->live_cursor);
        if (job && job->state != ZL_PENDING_DONE) {
            if (job->deadline_ms > now)
                break;
            char reason[512];
            s_timeout_reason (self, job, now, reason, sizeof reason);
            zl_debug (S_COMPONENT, "job %llu timed out: %s", (unsigned long long)job->spec.seq,
                      reason);
            s_finish (self, job, ZL_PRODUCER_TIMEOUT, job->code, reason);
        }
        self->live_cursor++;
    }
}

//  Return the monotonic time of the next timer, or -1 if none.
static int64_t
s_next_timer (zl_producer_t *self)
{
    if (self->leave)
        return zl_clock_mono_ms (); // at once
    int64_t next = self->redial_at_ms ? self->redial_at_ms : -1;
    if (self->dial_due && (next < 0 || self->dial_at_ms < next))
        next = self->dial_at_ms;
    if (self->dial_deadline_ms && (next < 0 || self->dial_deadline_ms < next))
        next = self->dial_deadline_ms;
    if (self->n_retries > 0 && (next < 0 || self->retries[0].at_ms < next))
        next = self->retries[0].at_ms;
    zl_pending_job_t *job = zl_pending_get (self->pending, self->live_cursor);
    if (job && job->state != ZL_PENDING_DONE && (next < 0 || job->deadline_ms < next))
        next = job->deadline_ms;
    return next;
}

// ---------------------------------------------------------------- sending

static int
s_send_hello (zl_producer_t *self)
{
    zl_msg_t msg = {.kind = ZL_MSG_HELLO, .u.hello = {.client = self->client}};
    if (s_send_msg (self, &msg) < 0) {
        self->out_blocked = errno == EAGAIN;
        return -1;
    }
    zl_trace (S_COMPONENT, "sent hello to %s", self->endpoint);
    self->hello_pending = false;
    return 0;
}

//  Send queued jobs in Submit frames while the connection has credit.
static void s_send_queued_frames (zl_producer_t *self);

static void
s_send_queued (zl_producer_t *self)
{
    if (!self->connected)
        return;
    s_send_queued_frames (self);
    zl_link_flush (self->handle); // from the calling thread, at once
}

static void
s_send_queued_frames (zl_producer_t *self)
{
    if (self->hello_pending && s_send_hello (self) < 0)
        return;
    while (self->q_len > 0) {
        uint64_t room = s_credit_room (self);
        if (room == 0)
            return;
        size_t limit = room < self->max_batch ? (size_t)room : self->max_batch;
        size_t n = 0, scanned = 0, bytes = 0, group_left = 0;
        while (scanned < self->q_len && n < limit) {
            zl_pending_job_t *job = zl_pending_get (self->pending, s_queue_at (self, scanned));
            if (!job || job->state != ZL_PENDING_QUEUED) {
                scanned++; // finished or already sent since it was queued
                continue;
            }
            if (job->group > 1 && !group_left) {
                // a workflow batch goes in one frame: after what came before,
                // and once the credit covers all of it
                if (n > 0 && n + job->group > limit)
                    break;
                if (job->group > limit)
                    return;
                group_left = job->group;
            }
            size_t size = job->spec.payload.len + S_SPEC_OVERHEAD;
            if (n > 0 && !group_left && bytes + size > S_BATCH_MAX_BYTES)
                break;
            if (group_left)
                group_left--;
            bytes += size;
            self->batch[n++] = job->spec;
            scanned++;
        }
        if (n > 0) {
            zl_msg_t msg = {.kind = ZL_MSG_SUBMIT, .u.submit = {.n = n, .jobs = self->batch}};
            if (s_send_msg (self, &msg) < 0) {
                self->out_blocked = errno == EAGAIN;
                if (errno != EAGAIN)
                    zl_warn (S_COMPONENT, "cannot send to %s: %s", self->endpoint,
                             strerror (errno));
                return; // the jobs stay queued
            }
            self->out_blocked = false;
            for (size_t i = 0; i < n; i++) {
                zl_pending_job_t *job = zl_pending_get (self->pending, self->batch[i].seq);
                if (job->cause == ZL_PENDING_RESEND)
                    self->stats.resent++;
                else if (job->cause == ZL_PENDING_RETRIED)
                    self->stats.retried++;
                job->sends++;
                s_set_state (self, job, ZL_PENDING_INFLIGHT);
            }
            self->sent_since_hello += n;
            self->stats.specs_sent += n;
            zl_trace (S_COMPONENT, "sent %zu specs to %s (%llu of %llu credit used)", n,
                      self->endpoint, (unsigned long long)self->sent_since_hello,
                      (unsigned long long)self->credit_limit);
        }
        s_queue_drop (self, scanned);
    }
}

// ---------------------------------------------------------------- receiving

static void
s_on_accepted (zl_producer_t *self, const zl_accepted_t *accepted)
{
    for (size_t i = 0; i < accepted->n; i++) {
        const zl_acceptance_t *a = &accepted->jobs[i];
        zl_pending_job_t *job = zl_pending_get (self->pending, a->seq);
        if (!job || job->state == ZL_PENDING_DONE) {
            zl_debug (S_COMPONENT, "accepted for unknown or finished seq %llu",
                      (unsigned long long)a->seq);
            continue;
        }
        job->job_id = a->job_id;
        if (a->batch_id && a->batch_id[0] && !job->batch_id)
            job->batch_id = zl_strdup (a->batch_id);
        //  A generated key is unique to this instance: the broker can only
        //  have seen it from our own earlier send of this very job.
        job->duplicate = a->duplicate && !job->auto_key;
        s_finish (self, job, ZL_PRODUCER_ACCEPTED, ZL_REJECT_UNSPECIFIED, NULL);
    }
    for (size_t i = 0; i < accepted->n_closed && self->closing; i++) {
        const zl_batch_closed_t *c = &accepted->closed[i];
        if (!c->batch_id || strcmp (c->batch_id, self->closing) != 0)
            continue;
        self->close_done = true;
        snprintf (self->close_error, sizeof self->close_error, "%s", c->ok ? "" : c->error);
    }
}

/*  A job of a workflow batch goes back for a retry alone: its parents
    that were accepted are named by their job ids from now on (the spec's
    depends_on and depends_on_seq share one array in its record: the ids
    first, then the seqs). A parent not accepted stays a seq: the broker
    then refuses the job UNKNOWN_PARENT. */
static void
s_parents_to_ids (zl_producer_t *self, zl_pending_job_t *job)
{
    size_t n_ids = job->spec.n_depends_on, n_seqs = job->spec.n_depends_on_seq;
    if (!n_seqs)
        return;
    uint64_t *all = job->spec.depends_on ? (uint64_t *)job->spec.depends_on
                                         : (uint64_t *)job->spec.depends_on_seq;
    uint64_t *out = zl_malloc ((n_ids + n_seqs) * sizeof *out);
    size_t k = 0;
    memcpy (out, all, n_ids * sizeof *out);
    k = n_ids;
    for (size_t i = 0; i < n_seqs; i++) { // accepted parents: their ids
        zl_pending_job_t *p = zl_pending_get (self->pending, all[n_ids + i]);
        if (p && p->state == ZL_PENDING_DONE && p->status == ZL_PRODUCER_ACCEPTED)
            out[k++] = p->job_id;
    }
    size_t ids = k;
    for (size_t i = 0; i < n_seqs; i++) { // the others stay seqs
        zl_pending_job_t *p = zl_pending_get (self->pending, all[n_ids + i]);
        if (!(p && p->state == ZL_PENDING_DONE && p->status == ZL_PRODUCER_ACCEPTED))
            out[k++] = all[n_ids + i];
    }
    memcpy (all, out, k * sizeof *out);
    free (out);
    job->spec.depends_on = ids ? all : NULL;
    job->spec.n_depends_on = ids;
    job->spec.depends_on_seq = k > ids ? all + ids : NULL;
    job->spec.n_depends_on_seq = k - ids;
    job->group = 0; // alone from now on
}

static void
s_on_rejected (zl_producer_t *self, const zl_rejected_t *rejected, int64_t now)
{
    //  A broker whose database does not answer: its jobs wait for their
    //  retry; with several brokers, the next may reach one (or lead).
    if (rejected->n && rejected->jobs[0].code == ZL_REJECT_UNAVAILABLE &&
        zl_eplist_roams (self->brokers))
        s_leave_for_next (self, "its database does not answer");
    for (size_t i = 0; i < rejected->n; i++) {
        const zl_rejection_t *r = &rejected->jobs[i];
        zl_pending_job_t *job = zl_pending_get (self->pending, r->seq);
        if (!job || job->state == ZL_PENDING_DONE) {
            zl_debug (S_COMPONENT, "rejected for unknown or finished seq %llu",
                      (unsigned long long)r->seq);
            continue;
        }
        zl_reject_code_t code =
            (unsigned)r->code < ZL_REJECT_CODE_COUNT ? r->code : ZL_REJECT_UNSPECIFIED;
        if (!s_retryable (code)) {
            s_finish (self, job, ZL_PRODUCER_REJECTED, code, r->reason);
            continue;
        }
        job->code = code;
        zl_pending_job_set_reason (job, r->reason);
        s_parents_to_ids (self, job);
        //  Only a job on the wire waits for a retry; a queued one (sent again
        //  after a reconnect) or a waiting one is already on its way back.
        if (job->state == ZL_PENDING_INFLIGHT) {
            uint32_t delay =
                r->retry_after_ms > S_RETRY_MIN_MS ? r->retry_after_ms : S_RETRY_MIN_MS;
            s_set_state (self, job, ZL_PENDING_RETRY);
            s_retry_push (self, now + delay, r->seq);
        }
    }
}

static size_t s_new_session (zl_producer_t *self);

//  True for what only a broker that serves sends (not one without its
//  database, whose Rejected all say UNAVAILABLE).
static bool
s_serves (const zl_msg_t *msg)
{
    if (msg->kind == ZL_MSG_REJECTED)
        return !msg->u.rejected.n || msg->u.rejected.jobs[0].code != ZL_REJECT_UNAVAILABLE;
    return msg->kind == ZL_MSG_ACCEPTED || msg->kind == ZL_MSG_CREDIT;
}

//  Leave this broker, which does not answer (dead, or cut off), for the
//  next; remembered for S_STAY_MS (s_names_the_gone).
static void
s_leave_silent (zl_producer_t *self, const char *why)
{
    if (self->leave)
        return;
    free (self->gone_ep);
    self->gone_ep = zl_strdup (self->endpoint);
    self->close_sent = false;
    self->gone_at_ms = zl_clock_mono_ms ();
    self->stays = 0;
    s_leave_for_next (self, why);
}

//  True when a NOT_LEADER names as leader the broker we left for not
//  answering, shortly before, and we have not asked here too often since.
static bool
s_names_the_gone (zl_producer_t *self, const zl_error_t *e)
{
    if (!self->gone_ep || zl_clock_mono_ms () - self->gone_at_ms > S_STAY_MS ||
        self->stays >= S_STAY_MAX)
        return false;
    for (size_t i = 0; i < e->n_leader_endpoints; i++)
        if (e->leader_endpoints[i] && !strcmp (e->leader_endpoints[i], self->gone_ep)) {
            self->stays++;
            return true;
        }
    return false;
}

static void
s_on_message (zl_producer_t *self, const zl_msg_t *msg)
{
    if (s_serves (msg)) {
        self->backoff_ms = S_RECONNECT_IVL_MS; // a broker that serves
        self->stays = 0;
    }
    self->dial_deadline_ms = 0; // a broker answers: it is there
    switch (msg->kind) {
    case ZL_MSG_HELLO:
    case ZL_MSG_SUBMIT:
        //  Our own words: the socket is connected to itself (a dial to a
        //  closed loopback port can meet its own source port), or to another
        //  client. No broker there: leave it, for the next (or a new dial).
        if (!self->leave) {
            zl_warn (S_COMPONENT, "the peer at %s is not a broker (it sent us %s)", self->endpoint,
                     zl_msg_kind_name (msg->kind));
            s_leave_for_next (self, "not a broker");
        }
        break;
    case ZL_MSG_ACCEPTED: s_on_accepted (self, &msg->u.accepted); break;
    case ZL_MSG_OUTCOME: s_on_outcome (self, &msg->u.outcome); break;
    case ZL_MSG_REJECTED: s_on_rejected (self, &msg->u.rejected, zl_clock_mono_ms ()); break;
    case ZL_MSG_CREDIT:
        //  Credit counts on the connection it came from; while we are between
        //  connections it can only be a late one from the old broker.
        if (self->connected && msg->u.credit.limit > self->credit_limit)
            self->credit_limit = msg->u.credit.limit;
        break;
    case ZL_MSG_ERROR:
        s_set_error (self, "broker at %s reported %s: %s", self->endpoint,
                     zl_error_code_name (msg->u.error.code),
                     msg->u.error.message ? msg->u.error.message : "");
        if (msg->u.error.code == ZL_ERR_NOT_LEADER) {
            //  A standby took nothing: leave it for the leader it names, or for
            //  the next broker; the new session resends every unanswered job.
            //  The rest of what it sent is dropped with its socket.
            if (self->leave)
                break;
            zl_info (S_COMPONENT, "%s", self->last_error);
            if (s_names_the_gone (self, &msg->u.error)) {
                //  It names the one that just stopped answering us: ask here
                //  again soon (it takes over once that one's lease lapses).
                self->leave = true;
                self->leave_fast = true;
                self->leave_loud = self->stays == 1;
                snprintf (self->leave_why, sizeof self->leave_why,
                          "it is not the leader yet, and the leader it names did not answer "
                          "us: asking here again");
                break;
            }
            bool named = zl_eplist_follow (self->brokers, msg->u.error.n_leader_endpoints,
                                           (const char *const *)msg->u.error.leader_endpoints);
            self->leave = true;
            self->leave_loud = true;
            snprintf (self->leave_why, sizeof self->leave_why, "it is not the leader%s",
                      named ? "; the leader is elsewhere" : "");
            break;
        }
        if (msg->u.error.code == ZL_ERR_UNAVAILABLE) {
            //  Its database does not answer: it did nothing (our Hello gave us
            //  no credit). Leave it and come back, or go to the next broker,
            //  after the backoff: a new session there resends everything.
            zl_info (S_COMPONENT, "%s", self->last_error);
            s_leave_for_next (self, "its database does not answer");
            self->leave_loud = true;
            break;
        }
        zl_warn (S_COMPONENT, "%s", self->last_error);
        //  The broker has no session for us (it forgot us after producer_idle,
        //  or never saw our Hello): the Submit it answered so was not taken.
        //  Say Hello again and resend what is unanswered, under the same keys.
        if (msg->u.error.code == ZL_ERR_NOT_READY && self->connected) {
            size_t resend = s_new_session (self);
            zl_info (S_COMPONENT,
                     "broker at %s has no session for us: Hello again, resending "
                     "%zu unanswered jobs",
                     self->endpoint, resend);
        }
        if (msg->u.error.code == ZL_ERR_UNAUTHORIZED) //  our key's role may not submit
            snprintf (self->refused, sizeof self->refused, "%s: %s",
                      zl_error_code_name (msg->u.error.code),
                      msg->u.error.message ? msg->u.error.message : "");
        break;
    default: zl_debug (S_COMPONENT, "ignoring %s from broker", zl_msg_kind_name (msg->kind)); break;
    }
}

//  Apply every reply waiting on the connection (up to a burst).
static void
s_drain_socket (zl_producer_t *self)
{
    bool skipping = false; // the rest of a multi-frame message
    for (int i = 0; i < S_RECV_BURST && self->handle && !self->leave; i++) {
        const void *data;
        size_t size;
        bool more;
        if (zl_link_recv (self->handle, &data, &size, &more) != 1)
            return;
        bool extra = skipping || more; // the protocol is one frame per message
        skipping = more;
        zl_msg_t msg;
        zl_decode_rc_t rc =
            extra ? ZL_DECODE_BAD_FRAME : zl_codec_decode (self->codec, data, size, &msg);
        if (rc != ZL_DECODE_OK) {
            zl_warn (S_COMPONENT, "ignoring an undecodable message from %s (%d)", self->endpoint,
                     (int)rc);
            continue;
        }
        s_on_message (self, &msg);
    }
}

// ---------------------------------------------------------------- connection

//  A new session with the broker: Hello, credit from zero, and every job that
//  is not finished and not waiting for a retry goes back in the send queue,
//  in seq order, to be resent under its idempotency key. Returns how many
//  were on the wire.
static size_t
s_new_session (zl_producer_t *self)
{
    self->hello_pending = true;
    self->out_blocked = false;
    self->credit_limit = 0;
    self->sent_since_hello = 0;
    self->q_head = 0;
    self->q_len = 0;
    self->watch_due = self->n_watched > 0;
    size_t resend = 0;
    for (uint64_t seq = self->live_cursor; seq < self->next_seq; seq++) {
        zl_pending_job_t *job = zl_pending_get (self->pending, seq);
        if (!job || (job->state != ZL_PENDING_QUEUED && job->state != ZL_PENDING_INFLIGHT))
            continue;
        if (job->state == ZL_PENDING_INFLIGHT) {
            s_set_state (self, job, ZL_PENDING_QUEUED);
            job->cause = ZL_PENDING_RESEND;
            resend++;
        }
        s_queue_push (self, seq);
    }
    return resend;
}

//  A handshake succeeded: this is a new connection, perhaps to a restarted
//  broker: a new session (what the old connection had not delivered went
//  with it; its jobs are resent under their keys).
static void
s_on_connected (zl_producer_t *self)
{
    self->connected = true;
    self->refused[0] = '\0';
    self->redial_at_ms = 0;
    self->redial_ms = S_REDIAL_MIN_MS;
    self->stats.connects++;
    self->close_sent = false; // an unanswered close goes again
    size_t resend = s_new_session (self);
    self->last_error[0] = '\0';
    if (self->stats.connects > 1)
        zl_info (S_COMPONENT, "reconnected to broker at %s; resending %zu unanswered jobs",
                 self->endpoint, resend);
    else
        zl_debug (S_COMPONENT, "connected to broker at %s", self->endpoint);
}

static void
s_on_disconnected (zl_producer_t *self)
{
    if (!self->connected)
        return; // a connect attempt that never got as far as a handshake
    //  Several brokers: this one is gone (dead, or silent past ZeroMQ's
    //  heartbeat timeout): try the next rather than wait for it.
    if (zl_eplist_roams (self->brokers) && !self->leave)
        s_leave_silent (self, "the connection was lost");
    self->connected = false;
    self->hello_pending = false;
    self->out_blocked = false;
    self->credit_limit = 0;
    self->sent_since_hello = 0;
    self->down_since_ms = zl_clock_mono_ms ();
    self->stats.disconnects++;
    s_set_error (self, "lost connection to broker at %s", self->endpoint);
    zl_info (S_COMPONENT, "lost connection to broker at %s; %zu jobs await a result",
             self->endpoint, zl_pending_size (self->pending));
}

//  A handshake failed: say why in words people can act on, once per cause.
//  After a refusal (a key not let in, a mechanism that does not fit) the
//  link dials no more, but the broker may admit the key later (it reloads
//  its clients directory): dial again after a backoff. A connection that
//  ended during its handshake the link dials again by itself.
static void
s_on_refused (zl_producer_t *self, const zl_link_event_t *ev)
{
    bool refusal = ev->kind == ZL_LINK_REFUSED;
    //  A broken connection says less than a refusal already known (a CURVE
    //  broker drops a plaintext client both ways): keep the refusal.
    if (!refusal && self->refused[0])
        return;
    char why[sizeof self->refused];
    bool curve = zl_curve_enabled (&self->curve);
    if (refusal && ev->auth)
        snprintf (why, sizeof why,
                  "the broker refused this client's CURVE key (%.60s): is its public "
                  "certificate in the broker's clients directory?",
                  ev->detail);
    else if (!refusal)
        snprintf (why, sizeof why, "the %s handshake failed (%.80s)%s",
                  curve ? "CURVE" : "plaintext", ev->detail,
                  curve ? ": is the server certificate the broker's?"
                        : ": the broker probably requires CURVE (a server and a client "
                          "certificate)");
    else if (ev->mechanism)
        snprintf (why, sizeof why, "%s",
                  curve ? "the broker does not use CURVE but this client does"
                        : "the broker requires CURVE (a server and a client certificate)");
    else
        snprintf (why, sizeof why, "the %s handshake failed (%.160s)",
                  curve ? "CURVE" : "plaintext", ev->detail);
    bool again = strcmp (why, self->refused) == 0;
    snprintf (self->refused, sizeof self->refused, "%s", why);
    if (refusal && !self->redial_at_ms) {
        self->redial_at_ms = zl_clock_mono_ms () + self->redial_ms;
        self->redial_ms =
            self->redial_ms >= S_REDIAL_MAX_MS / 2 ? S_REDIAL_MAX_MS : self->redial_ms * 2;
    }
    s_set_error (self, "handshake with %s failed: %s", self->endpoint, why);
    if (!again)
        zl_warn (S_COMPONENT, "%s", self->last_error);
}

//  Apply every connection event the link has queued.
static void
s_drain_monitor (zl_producer_t *self)
{
    zl_link_event_t ev;
    while (self->handle && zl_link_event (self->handle, &ev)) {
        switch (ev.kind) {
        case ZL_LINK_CONNECTED: s_on_connected (self); break;
        case ZL_LINK_DISCONNECTED: s_on_disconnected (self); break;
        case ZL_LINK_REFUSED: s_on_refused (self, &ev); break;
        case ZL_LINK_DIAL_FAILED:
            if (ev.handshake) { // it answered, then the connection ended
                s_on_refused (self, &ev);
                break;
            }
            //  the dial failed (nothing listens there): with several brokers
            //  this one is down, try the next; with one, the link dials again
            if (zl_eplist_roams (self->brokers) && !self->connected && !self->leave)
                s_leave_silent (self, "nothing answers there");
            break;
        }
    }
}

// ---------------------------------------------------------------- several brokers

//  Close the connection; what was queued on it is dropped.
static void
s_close_socket (zl_producer_t *self)
{
    zl_link_destroy (&self->handle);
}

//  Open a connection to self->endpoint and start dialling. Returns 0, or -1
//  with errno (the endpoint is not valid); then the caller closes it.
static int
s_open_socket (zl_producer_t *self)
{
    //  As the libzmq DEALER it replaces: nothing queued for a peer that is
    //  not there (what was unsent when a connection died is resent by us
    //  after our Hello, never sent ahead of it); heartbeats; the dial again
    //  every 100 ms doubling to 1 s. CURVE keys hold for every redial (and
    //  for every broker of the list: brokers of one deployment share a key).
    zl_link_opts_t lo = {.curve = &self->curve,
                         .immediate = true,
                         .hwm = S_HWM,
                         .reconnect_ivl_ms = S_RECONNECT_IVL_MS,
                         .reconnect_max_ms = S_RECONNECT_IVL_MAX_MS,
                         .heartbeat_ivl_ms = S_HEARTBEAT_IVL_MS,
                         .heartbeat_timeout_ms = S_HEARTBEAT_TIMEOUT_MS,
                         .heartbeat_ttl_ms = S_HEARTBEAT_TIMEOUT_MS};
    char err[256];
    self->handle = zl_link_new (self->endpoint, &lo, err, sizeof err);
    if (!self->handle) {
        zl_warn (S_COMPONENT, "%s", err);
        errno = EINVAL;
        return -1;
    }
    zl_link_pump (self->handle, zl_clock_mono_ms ()); // the first dial
    return 0;
}

//  Open the socket for the endpoint in use; with several brokers, give it
//  S_DIAL_TIMEOUT_MS to answer (the handshake, then Credit for our Hello).
static void
s_dial (zl_producer_t *self, int64_t now)
{
    self->dial_due = false;
    if (s_open_socket (self) != 0) {
        zl_warn (S_COMPONENT, "cannot dial broker at %s: %s", self->endpoint, strerror (errno));
        s_close_socket (self);
        s_leave_for_next (self, "its endpoint is not valid");
        return;
    }
    self->dial_deadline_ms = zl_eplist_roams (self->brokers) ? now + S_DIAL_TIMEOUT_MS : 0;
    zl_debug (S_COMPONENT, "dialling broker at %s", self->endpoint);
}

//  Mark this broker to be left, for the next of the list (round robin), at
//  the end of the pump.
static void
s_leave_for_next (zl_producer_t *self, const char *why)
{
    if (self->leave)
        return;
    zl_eplist_next (self->brokers);
    self->leave = true;
    self->leave_loud = self->connected;
    snprintf (self->leave_why, sizeof self->leave_why, "%s", why);
}

//  Leave the broker in use for the one the list now points at: close the
//  socket (a held connection ends as a disconnect: its unanswered jobs are
//  resent in the next session) and dial the new endpoint after a full-jitter
//  backoff, which doubles until a broker serves.
static void
s_leave (zl_producer_t *self, int64_t now)
{
    bool loud = self->leave_loud;
    if (self->connected)
        s_on_disconnected (self); // self->leave is still set: no second move
    s_close_socket (self);
    self->leave = false;
    self->redial_at_ms = 0;
    self->dial_deadline_ms = 0;
    uint64_t delay;
    if (self->leave_fast) { // asking the same standby again: soon, jittered
        delay = S_RECONNECT_IVL_MS / 2 + zl_rng_range (&self->rng, S_RECONNECT_IVL_MS);
        self->leave_fast = false;
    } else {
        delay = zl_rng_range (&self->rng, self->backoff_ms);
        self->backoff_ms = self->backoff_ms >= S_RECONNECT_IVL_MAX_MS / 2 ? S_RECONNECT_IVL_MAX_MS
                                                                          : self->backoff_ms * 2;
    }
    const char *next = zl_eplist_current (self->brokers);
    if (loud)
        zl_info (S_COMPONENT, "leaving broker at %s (%s); trying %s in %llu ms", self->endpoint,
                 self->leave_why, next, (unsigned long long)delay);
    else
        zl_debug (S_COMPONENT, "leaving broker at %s (%s); trying %s in %llu ms", self->endpoint,
                  self->leave_why, next, (unsigned long long)delay);
    free (self->endpoint);
    self->endpoint = zl_strdup (next);
    self->dial_due = true;
    self->dial_at_ms = now + (int64_t)delay;
    self->stats.moves++;
}

//  One turn of the loop described at the top of this file. `timeout_ms` -1
//  waits until something happens. Returns 0, or -1 with errno (EINTR).
static int
s_pump (zl_producer_t *self, int timeout_ms)
{
    s_run_timers (self, zl_clock_mono_ms ());
    s_send_queued (self);
    s_send_watch (self);

    long wait = timeout_ms;
    int64_t next = s_next_timer (self);
    if (next >= 0) {
        int64_t until = next - zl_clock_mono_ms ();
        if (until < 0)
            until = 0;
        if (wait < 0 || until < wait)
            wait = (long)until;
    }
    if (self->handle) {
        int64_t link = zl_link_timeout (self->handle, zl_clock_mono_ms ());
        if (link >= 0 && (wait < 0 || link < wait))
            wait = (long)link;
        struct pollfd item = {zl_link_fd (self->handle), zl_link_poll_events (self->handle), 0};
        if (poll (&item, item.fd >= 0 ? 1 : 0, wait < 0 ? -1 : (int)wait) < 0)
            return -1;
        if (item.fd >= 0) // no read when the poll saw nothing come
            zl_link_polled (self->handle, item.revents);
        zl_link_pump (self->handle, zl_clock_mono_ms ());
        if (!zl_link_blocked (self->handle))
            self->out_blocked = false;
    } else if (wait != 0 && poll (NULL, 0, wait < 0 ? S_RECONNECT_IVL_MAX_MS : (int)wait) < 0)
        return -1; // between brokers: only timers (the next dial is one)

    s_drain_monitor (self);
    s_drain_socket (self);
    if (self->leave)
        s_leave (self, zl_clock_mono_ms ());
    s_run_timers (self, zl_clock_mono_ms ());
    s_send_queued (self);
    s_send_watch (self);
    return 0;
}

// ---------------------------------------------------------------- public API

void
zl_producer_opts_defaults (zl_producer_opts_t *opts)
{
    *opts = (zl_producer_opts_t){.endpoint = "tcp://127.0.0.1:5570",
                                 .client = "zlane-producer",
                                 .deadline_ms = 30000,
                                 .nonblock = false,
                                 .max_batch = 256};
}

zl_producer_t *
zl_producer_new (const zl_producer_opts_t *opts)
{
    zl_producer_opts_t defaults;
    zl_producer_opts_defaults (&defaults);
    zl_eplist_t *brokers = zl_eplist_new (opts->endpoint ? opts->endpoint : defaults.endpoint);
    if (!brokers) {
        zl_error (S_COMPONENT, "bad broker endpoint list '%s'", opts->endpoint);
        errno = EINVAL;
        return NULL;
    }
    for (size_t i = 0; i < zl_eplist_size (brokers); i++) {
        char why[ZL_EPLIST_MAX_LEN + 128];
        if (zl_link_check_endpoint (zl_eplist_at (brokers, i), why, sizeof why) != 0) {
            zl_error (S_COMPONENT, "%s", why);
            zl_eplist_destroy (&brokers);
            errno = EINVAL;
            return NULL;
        }
    }
    zl_producer_t *self = ZL_NEW (zl_producer_t);
    self->brokers = brokers;
    self->endpoint = zl_strdup (zl_eplist_current (brokers));
    self->client = zl_strdup (opts->client ? opts->client : defaults.client);
    self->deadline_ms = opts->deadline_ms ? opts->deadline_ms : defaults.deadline_ms;
    self->max_batch = opts->max_batch ? opts->max_batch : defaults.max_batch;
    self->nonblock = opts->nonblock;
    self->on_result = opts->on_result;
    self->on_result_arg = opts->on_result_arg;
    self->on_outcome = opts->on_outcome;
    self->on_outcome_arg = opts->on_outcome_arg;
    self->curve = opts->curve;
    zl_rng_seed (&self->rng, 0);
    zl_rng_hex (&self->rng, self->instance, 16);

    self->codec = zl_codec_new ();
    self->pending = zl_pending_new ();
    self->batch = zl_calloc (self->max_batch, sizeof *self->batch);
    self->next_seq = 1;
    self->live_cursor = 1;
    self->down_since_ms = zl_clock_mono_ms ();
    self->redial_ms = S_REDIAL_MIN_MS;
    self->backoff_ms = S_RECONNECT_IVL_MS;

    if (s_open_socket (self) != 0) {
        int saved = errno;
        zl_producer_destroy (&self);
        errno = saved;
        return NULL;
    }
    if (zl_eplist_roams (self->brokers))
        self->dial_deadline_ms = zl_clock_mono_ms () + S_DIAL_TIMEOUT_MS;
    return self;
}

void
zl_producer_destroy (zl_producer_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_producer_t *self = *self_p;
    s_close_socket (self);
    zl_codec_destroy (&self->codec);
    zl_pending_destroy (&self->pending);
    free (self->queue);
    free (self->retries);
    free (self->batch);
    free (self->watched);
    zl_eplist_destroy (&self->brokers);
    free (self->endpoint);
    free (self->gone_ep);
    free (self->client);
    memset (&self->curve, 0, sizeof self->curve);
    free (self);
    *self_p = NULL;
}

static int
s_check_job (zl_producer_t *self, const zl_producer_job_t *job)
{
    const char *problem = NULL;
    if (!job)
        problem = "no job";
    else if (!job->tenant || !*job->tenant)
        problem = "a job needs a tenant";
    else if (!job->lane || !*job->lane)
        problem = "a job needs a lane";
    else if (!job->payload && job->payload_len)
        problem = "payload is NULL but payload_len is not 0";
    else if (!job->headers && job->n_headers)
        problem = "headers is NULL but n_headers is not 0";
    for (size_t i = 0; !problem && i < job->n_headers; i++)
        if (!job->headers[i].key || !*job->headers[i].key)
            problem = "a header needs a key";
    if (!problem)
        return 0;
    s_set_error (self, "%s", problem);
    errno = EINVAL;
    return -1;
}

//  Say why a submit found no credit; `start` is when it began waiting, or -1
//  for a nonblock submit, which did not wait.
static void
s_set_wait_error (zl_producer_t *self, int64_t start, int64_t now)
{
    char took[32];
    if (!self->connected)
        s_set_error (self, "broker unreachable at %s for %s%s%s", s_where (self),
                     s_duration (now - self->down_since_ms, took, sizeof took),
                     self->refused[0] ? ": " : "", self->refused);
    else if (self->refused[0])
        s_set_error (self, "no credit from broker at %s: %s", self->endpoint, self->refused);
    else if (start < 0)
        s_set_error (self, "no credit from broker at %s (queue full?)", self->endpoint);
    else
        s_set_error (self, "no credit from broker at %s for %s (queue full?)", self->endpoint,
                     s_duration (now - start, took, sizeof took));
}

//  A workflow batch: checked, then taken whole once the credit covers it.
static int
s_submit_workflow (zl_producer_t *self, const zl_producer_job_t *jobs, size_t n, uint64_t *seqs_out)
{
    for (size_t i = 0; i < n; i++) {
        if (s_check_job (self, &jobs[i]) < 0)
            return -1;
        const char *problem = NULL;
        if (jobs[i].n_parents_in_batch && !jobs[i].parents_in_batch)
            problem = "parents_in_batch is NULL but n_parents_in_batch is not 0";
        for (size_t k = 0; !problem && k < jobs[i].n_parents_in_batch; k++)
            if (jobs[i].parents_in_batch[k] >= i)
                problem = "parents_in_batch names a job that is not earlier in the batch";
        if (!problem && n > self->max_batch)
            problem = "a workflow batch goes in one Submit: at most max_batch jobs";
        if (problem) {
            s_set_error (self, "%s", problem);
            errno = EINVAL;
            return -1;
        }
    }
    int64_t start = zl_clock_mono_ms ();
    int64_t deadline = start + self->deadline_ms;
    while (zl_producer_credit_available (self) < n) {
        int64_t now = zl_clock_mono_ms ();
        if (self->nonblock || now >= deadline) {
            s_set_wait_error (self, self->nonblock ? -1 : start, now);
            errno = self->nonblock ? EAGAIN : ETIMEDOUT;
            if (self->nonblock)
                (void)s_pump (self, 0); // (credit may come in)
            if (zl_producer_credit_available (self) >= n)
                break;
            return -1;
        }
        if (s_pump (self, (int)(deadline - now)) < 0)
            return -1;
    }
    uint64_t first = self->next_seq;
    for (size_t i = 0; i < n; i++) {
        uint64_t seq = self->next_seq;
        char key[40];
        snprintf (key, sizeof key, "%s-%llu", self->instance, (unsigned long long)seq);
        zl_pending_job_t *job = zl_pending_job_new (&jobs[i], seq, key, first);
        job->submitted_ms = start;
        job->deadline_ms = deadline;
        job->group = i == 0 ? (uint32_t)n : 0;
        zl_pending_insert (self->pending, job);
        self->next_seq++;
        self->n_queued++;
        s_queue_push (self, seq);
        self->stats.submitted++;
        if (seqs_out)
            seqs_out[i] = seq;
    }
    s_send_queued (self);
    return (int)n;
}

int
zl_producer_submit_batch (zl_producer_t *self, const zl_producer_job_t *jobs, size_t n,
                          uint64_t *seqs_out)
{
    if (n > INT_MAX)
        n = INT_MAX;
    for (size_t i = 0; i < n; i++)
        if (jobs[i].n_parents_in_batch)
            return s_submit_workflow (self, jobs, n, seqs_out);
    int64_t start = zl_clock_mono_ms ();
    int64_t deadline = start + self->deadline_ms;
    size_t taken = 0;
    while (taken < n) {
        if (s_check_job (self, &jobs[taken]) < 0)
            break;
        if (zl_producer_credit_available (self) == 0) {
            //  Pump for credit: once without waiting in nonblock mode, else
            //  until credit comes or the deadline passes.
            int64_t now = zl_clock_mono_ms ();
            if (!self->nonblock && now >= deadline) {
                s_set_wait_error (self, start, now);
                errno = ETIMEDOUT;
                break;
            }
            if (s_pump (self, self->nonblock ? 0 : (int)(deadline - now)) < 0)
                break;
            if (zl_producer_credit_available (self) > 0)
                continue;
            if (self->nonblock) {
                s_set_wait_error (self, -1, zl_clock_mono_ms ());
                errno = EAGAIN;
                break;
            }
            continue;
        }
        uint64_t seq = self->next_seq;
        char key[40];
        snprintf (key, sizeof key, "%s-%llu", self->instance, (unsigned long long)seq);
        zl_pending_job_t *job = zl_pending_job_new (&jobs[taken], seq, key, seq);
        job->submitted_ms = start;
        job->deadline_ms = deadline;
        zl_pending_insert (self->pending, job);
        self->next_seq++;
        self->n_queued++; // new records start QUEUED
        s_queue_push (self, seq);
        self->stats.submitted++;
        if (seqs_out)
            seqs_out[taken] = seq;
        taken++;
        if (self->n_queued >= self->max_batch)
            s_send_queued (self);
    }
    if (taken == 0 && n > 0)
        return -1;
    return (int)taken;
}

int
zl_producer_submit (zl_producer_t *self, const zl_producer_job_t *job, uint64_t *seq_out)
{
    return zl_producer_submit_batch (self, job, 1, seq_out) == 1 ? 0 : -1;
}

int
zl_producer_flush (zl_producer_t *self)
{
    s_pump (self, 0);
    return 0;
}

int
zl_producer_poll (zl_producer_t *self, int timeout_ms)
{
    int delivered = s_deliver (self);
    if (s_pump (self, delivered > 0 ? 0 : timeout_ms) < 0 && delivered == 0)
        return -1;
    return delivered + s_deliver (self);
}

int
zl_producer_wait (zl_producer_t *self, int timeout_ms)
{
    int64_t end = timeout_ms < 0 ? -1 : zl_clock_mono_ms () + timeout_ms;
    while (true) {
        s_deliver (self);
        if (zl_pending_size (self->pending) == 0)
            return 0;
        int wait = -1;
        if (end >= 0) {
            int64_t now = zl_clock_mono_ms ();
            if (now >= end) {
                errno = ETIMEDOUT;
                return -1;
            }
            wait = (int)(end - now);
        }
        if (s_pump (self, wait) < 0)
            return -1;
    }
}

int
zl_producer_watch (zl_producer_t *self, const uint64_t *ids, size_t n)
{
    if (!n) {
        errno = EINVAL;
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (!ids[i]) {
            errno = EINVAL;
            return -1;
        }
    if (self->n_watched + n > self->cap_watched) {
        self->cap_watched = (self->n_watched + n) * 2;
        self->watched = zl_realloc (self->watched, self->cap_watched * sizeof *self->watched);
    }
    memcpy (self->watched + self->n_watched, ids, n * sizeof *ids);
    self->n_watched += n;
    self->watch_due = true; // (all of them again: the broker keeps one watch per job)
    s_send_watch (self);
    return 0;
}

void
zl_producer_set_outcome_fn (zl_producer_t *self, zl_producer_outcome_fn *fn, void *arg)
{
    self->on_outcome = fn;
    self->on_outcome_arg = arg;
}

size_t
zl_producer_watching (zl_producer_t *self)
{
    return self->n_watched;
}

int
zl_producer_wait_outcomes (zl_producer_t *self, int timeout_ms)
{
    int64_t end = timeout_ms < 0 ? -1 : zl_clock_mono_ms () + timeout_ms;
    while (self->n_watched) {
        s_deliver (self);
        int wait = -1;
        if (end >= 0) {
            int64_t now = zl_clock_mono_ms ();
            if (now >= end) {
                errno = ETIMEDOUT;
                return -1;
            }
            wait = (int)(end - now);
        }
        if (s_pump (self, wait) < 0)
            return -1;
    }
    return 0;
}

size_t
zl_producer_outstanding (zl_producer_t *self)
{
    return zl_pending_size (self->pending);
}

uint64_t
zl_producer_credit_available (zl_producer_t *self)
{
    uint64_t room = s_credit_room (self);
    return room > self->n_queued ? room - self->n_queued : 0;
}

bool
zl_producer_waiting_for_credit (zl_producer_t *self)
{
    return zl_producer_credit_available (self) == 0;
}

bool
zl_producer_connected (zl_producer_t *self)
{
    return self->connected;
}

const char *
zl_producer_last_error (zl_producer_t *self)
{
    return self->last_error;
}

const char *
zl_producer_refusal (zl_producer_t *self)
{
    return self->refused;
}

const char *
zl_producer_endpoint (zl_producer_t *self)
{
    return self->endpoint;
}

void
zl_producer_stats (zl_producer_t *self, zl_producer_stats_t *stats)
{
    *stats = self->stats;
}

int
zl_producer_close_batch (zl_producer_t *self, const char *batch_id, int timeout_ms)
{
    if (!batch_id || !batch_id[0] || strlen (batch_id) > ZL_BATCH_ID_MAX || self->closing) {
        errno = EINVAL;
        return -1;
    }
    int64_t end = zl_clock_mono_ms () + (timeout_ms < 0 ? 0 : timeout_ms);
    // every job submitted so far answered first: the close comes after them
    if (zl_producer_wait (self, timeout_ms) != 0)
        return -1;
    self->closing = zl_strdup (batch_id);
    self->close_sent = self->close_done = false;
    int rc = -1;
    errno = ETIMEDOUT;
    while (zl_clock_mono_ms () < end) {
        if (self->connected && !self->hello_pending && !self->close_sent) {
            const char *ids[1] = {self->closing};
            zl_msg_t msg = {.kind = ZL_MSG_SUBMIT,
                            .u.submit = {.n_close = 1, .close_batches = ids}};
            self->close_sent = s_send_msg (self, &msg) == 0;
            zl_link_flush (self->handle);
        }
        int64_t left = end - zl_clock_mono_ms ();
        if (s_pump (self, left < 50 ? (int)(left > 0 ? left : 0) : 50) < 0)
            break;
        if (self->close_done) {
            if (self->close_error[0]) {
                s_set_error (self, "batch '%s' not closed: %s", batch_id, self->close_error);
                errno = EPROTO;
            } else
                rc = 0;
            break;
        }
    }
    if (rc != 0 && errno == ETIMEDOUT)
        s_set_error (self, "batch '%s': no answer to the close within %d ms", batch_id, timeout_ms);
    free (self->closing);
    self->closing = NULL;
    return rc;
}
