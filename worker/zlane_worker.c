/*  zlane_worker: the worker's loop and its thread pool.

    Threads. One thread at a time holds the loop (s_loop): it owns the
    broker connection and every piece of worker state (the held jobs, the
    pending settlements, the timers), and has signals unblocked (as have
    idle threads while they wait; a job runs with them blocked). The pool
    is the `concurrency` handler threads and the thread that called
    zl_worker_run, which starts with the loop. Other threads only see the
    jobs handed to them: once per turn the loop moves its backlog onto the
    shared work queue (mutex, and an eventfd semaphore that wakes idle
    threads), and each idle thread takes one job at a time, runs it and
    puts it on the done queue, back to back, without waiting for the loop.
    The loop is signalled (an eventfd) only when the done queue stops being
    empty, and takes every result at once. A job just received, when idle
    threads outnumber the jobs waiting for one, runs on the loop's own
    thread at once, the loop left free (s_start_here, s_free_loop): the
    thread takes it back when the job ends, unless the loop had something
    to do before then (the broker's connection, a result, a stop, a timer),
    in which case an idle thread woken by that took it over (s_watch, in
    s_pool). So the job's start waits for no other thread's wake-up, and a
    short job costs none at all. zl_worker_stop only bumps a counter and
    writes an eventfd, so it is safe from signal handlers.

    Job life. Dispatch -> held (BACKLOG) -> the work queue (HANDED) -> a
    handler thread runs it -> result -> a pending settlement (Ack or Nack)
    -> Settled from the broker (or a refusal) -> forgotten. Jobs start in
    receipt order. Held jobs, queued or running, are extended at half-life
    and cancelled when their lease is lost or the broker cancels them (a
    Cancel message: an operator cancelled the job); a job cancelled before a
    handler thread takes it never runs and is handed back (TRANSIENT Nack,
    which the broker refuses CANCELLED for a job it cancelled). Pending
    settlements are resent after every reconnect with the same lease token:
    the broker's fencing decides whether they still count.

    Cost. The loop does O(1) (timers: O(log n)) work per job and never scans
    what it holds on an ordinary turn: held jobs and pending settlements are
    indexed by job id, the backlog is a FIFO of its own, deadlines live in a
    min-heap (held_timers), and settlements wait in two lists, not yet sent
    and sent. Only rare events (a reconnect, a stop) walk everything.

    Several brokers. The endpoint option may list several (one leads, the
    others stand by). The worker holds one connection at a time; when the
    broker is silent for liveness x heartbeat it reconnects to the next of
    the list (round robin), and when it answers NOT_LEADER, to the leader it
    names (or the next), both after the same full-jitter backoff, which a
    NOT_LEADER does not reset. A broker whose database does not answer
    (Error UNAVAILABLE) is left the same way, for the next (itself again
    when it is the only one), without resetting the backoff. A new
    connection is a reconnect like any: Ready again, listing every lease
    the worker knows of (held jobs, pending settlements: the broker makes
    the old connection's others, Dispatches lost with it, ready again at
    once), and every pending settlement resent. */
#define _GNU_SOURCE // ppoll
#include "zlane_worker.h"

#include "clock.h"
#include "dlist.h"
#include "eplist.h"
#include "held_timers.h"
#include "link.h"
#include "log.h"
#include "rng.h"
#include "text.h"
#include "u64map.h"
#include "wire.h"
#include "worker_job.h"
#include "zl_alloc.h"

#include <assert.h>
#include <czmq.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <zmq.h>

#define S_COMPONENT "worker"
#define S_DEFAULT_ENDPOINT "tcp://127.0.0.1:5571"
#define S_RECV_BATCH 256        // broker messages handled per loop turn
#define S_READY_HELD_MAX 100000 // leases a Ready lists at most (22 bytes each)

static inline int64_t
s_min (int64_t a, int64_t b)
{
    return a < b ? a : b;
}

#define S_ACK_FRAME_BYTES (4u << 20) // results per Ack frame, at most (one result may be more)

/*  An Ack or Nack sent (or to be sent) and not yet confirmed by Settled. */
typedef struct _s_settle_t {
    zl_dlink_t link; // first: in the worker's `unsent` or `sent` list
    uint64_t job_id;
    uint64_t lease;
    uint32_t attempt; // for logs
    bool ack;
    zl_fail_class_t cls;
    char *error;     // owned; NULL for acks
    uint8_t *result; // acks: the result, owned (or NULL)
    size_t result_len;
    uint32_t retry_after_ms;
    uint64_t run_us;
    bool counted;                // counted in the stats (first send)
    struct _s_settle_t *id_next; // next pending settlement with the same job id
} s_settle_t;

/*  Job id -> the first of a chain of records with that id (held jobs, or
    pending settlements: one per lease). The map cannot hold key 0, so job
    id 0 (the broker never sends it, but network input is not trusted) has
    a slot of its own. */
typedef struct {
    zl_u64map_t *map;
    void *zero;
} s_index_t;

typedef struct {
    atomic_uint_fast64_t received, acked, nacked, settled, refused, extends_sent, lease_lost,
        reconnects, cancelled;
} s_counters_t;

#define S_COUNT(self, field, n)                                                                    \
    atomic_fetch_add_explicit (&(self)->counters.field, (n), memory_order_relaxed)

struct _zl_worker_t {
    // Options; the strings point at the copies below.
    zl_worker_opts_t opts;
    char *endpoint; // the list as given
    char *name;
    char **lanes;
    zl_eplist_t *brokers; // owned by the I/O thread: the endpoint in use

    // Shared with handler threads, guarded by `lock`.
    pthread_mutex_t lock;
    zl_held_job_t *work_head, *work_tail; // jobs no handler thread has taken yet
    uint32_t work_len;                    // how many
    zl_held_job_t *done_head, *done_tail; // jobs whose handler returned (or skipped)
    uint32_t n_waiting;                   // idle threads (waiting in pool_ep)
    bool loop_free; // no thread holds the loop: the one that freed it runs a job (s_pool)
    bool loop_done; // the loop ended, with loop_rc: zl_worker_run returns
    int loop_rc;
    bool quit;           // handler threads exit once the work queue is empty
    int done_fd;         // eventfd: "the done queue is no longer empty"
    bool done_signalled; // done_fd was written since the loop last took the queue (lock)
    int work_fd;         // eventfd (a semaphore): a job queued for an idle thread
    int end_fd;          // eventfd, readable for good once the loop is done (or the threads quit)
    pthread_cond_t end_cond; // handler threads wait on it for `quit` once the loop is done
    int pool_ep;       // epoll: what idle threads wait on (work_fd; loop_ep while the loop is free)
    int loop_ep;       // epoll: the loop's events (done_fd, wake_fd, the link, timer_fd)
    int timer_fd;      // timerfd: the loop's next deadline, while it is free
    int watch_link_fd; // the link's socket in loop_ep, or -1
    short watch_link_events;    // its events there (POLLIN, POLLOUT)
    uint64_t watch_link_serial; //   and zl_link_socket_serial's number for it
    int64_t timer_due_ms;       // timer_fd fires then (monotonic), 0 = not armed

    // Shared with anyone: stop requests and counters.
    atomic_uint stop_requests;
    int wake_fd;           // eventfd written by zl_worker_stop
    sigset_t loop_sigmask; // the signal mask of zl_worker_run's caller: the loop's
    s_counters_t counters;

    // Owned by the I/O thread.
    bool started;
    zl_link_t *dealer; // the broker connection; NULL while backing off before a reconnect
    zl_codec_t *codec;
    pthread_t *threads;
    uint32_t n_threads;
    uint32_t n_handed;                    // HANDED jobs: queued or running, not back yet
    zl_held_job_t *held_head, *held_tail; // every held job, in receipt order
    size_t n_held;
    uint64_t held_seq;                          // receipt counter
    s_index_t held_ids;                         // job id -> held jobs (one per lease)
    zl_held_job_t *backlog_head, *backlog_tail; // BACKLOG jobs in receipt order (qnext)
    size_t n_backlog;
    zl_held_timers_t *timers; // live held jobs with a deadline
    zl_dlink_t unsent;        // settlements to send on this connection
    zl_dlink_t sent;          // settlements sent, awaiting Settled
    s_index_t pending_ids;    // job id -> settlements (one per lease)
    size_t n_pending;
    zl_rng_t rng;
    uint64_t instance;            // random, nonzero, in every Ready: the same across reconnects
    bool need_ready;              // send Ready at the next flush
    int64_t last_heard_ms;        // last message from the broker
    uint32_t broker_heartbeat_ms; // the interval this connection's broker stated; 0 = none yet
    int64_t last_sent_ms;         // last message to the broker
    int64_t reconnect_at_ms;      // when to open a new connection (dealer == NULL)
    uint32_t backoff_ms;          // upper bound of the next reconnect delay
    // leave this broker at the next tick, and why: for the leader a standby
    // names (or the next), or for the next broker of the list
    enum { S_STAY = 0, S_NOT_LEADER, S_NOT_BROKER, S_UNAVAILABLE } leave;
    bool draining;        // zl_worker_stop was called
    bool drain_cancelled; // running jobs were cancelled for the shutdown
    int64_t drain_deadline_ms;
    int64_t linger_deadline_ms; // stop waiting for Settled after this; 0 = unset
    // Per-turn batches (reused buffers).
    zl_extend_item_t *extends;
    size_t n_extends, cap_extends;
    atomic_uint ckpt_flag;     // a handler saved a checkpoint (zl_worker_job_checkpoint)
    zl_held_ckpt_t **ckpt_out; // the checkpoints in `extends`, freed once sent
    size_t n_ckpt_out, cap_ckpt_out;
    zl_ack_item_t *acks;
    size_t cap_acks;
    zl_nack_item_t *nacks;
    size_t cap_nacks;
};

// ------------------------------------------------------------------ options

void
zl_worker_opts_defaults (zl_worker_opts_t *opts)
{
    *opts = (zl_worker_opts_t){.endpoint = S_DEFAULT_ENDPOINT,
                               .concurrency = 1,
                               .prefetch = 0,
                               .heartbeat_ms = 1000,
                               .liveness = 3,
                               .reconnect_min_ms = 100,
                               .reconnect_max_ms = 5000,
                               .drain_ms = 30000,
                               .extend = true,
                               .ack_early = false};
}

static int
s_check_opts (const zl_worker_opts_t *o)
{
    const char *why = NULL;
    if (!o->handler)
        why = "a handler is required";
    else if (o->n_lanes == 0 || !o->lanes)
        why = "at least one lane is required";
    else if (o->concurrency == 0)
        why = "concurrency must be at least 1";
    else if (o->heartbeat_ms == 0 || o->liveness == 0)
        why = "heartbeat and liveness must be positive";
    else if (o->reconnect_min_ms == 0 || o->reconnect_max_ms < o->reconnect_min_ms)
        why = "reconnect backoff must satisfy 0 < min <= max";
    for (size_t i = 0; !why && i < o->n_lanes; i++)
        if (!o->lanes[i] || !*o->lanes[i])
            why = "lane names must not be empty";
    zl_eplist_t *brokers =
        why ? NULL : zl_eplist_new (o->endpoint ? o->endpoint : S_DEFAULT_ENDPOINT);
    char text[ZL_EPLIST_MAX_LEN + 128];
    if (!why && !brokers)
        why = "the broker endpoint list has an empty or overlong entry";
    for (size_t i = 0; !why && i < zl_eplist_size (brokers); i++)
        if (zl_link_check_endpoint (zl_eplist_at (brokers, i), text, sizeof text) != 0)
            why = text;
    zl_eplist_destroy (&brokers);
    if (why) {
        zl_error (S_COMPONENT, "invalid options: %s", why);
        return -1;
    }
    return 0;
}

static char *
s_default_name (void)
{
    char host[256] = "worker";
    if (gethostname (host, sizeof host) == 0)
        host[sizeof host - 1] = '\0';
    char name[300];
    snprintf (name, sizeof name, "%s-%ld", host, (long)getpid ());
    return zl_strdup (name);
}

// ------------------------------------------------------------------ lifecycle

zl_worker_t *
zl_worker_new (const zl_worker_opts_t *opts)
{
    if (s_check_opts (opts) != 0)
        return NULL;
    int wake_fd = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd < 0) {
        zl_error (S_COMPONENT, "eventfd: %s", strerror (errno));
        return NULL;
    }
    zl_worker_t *self = ZL_NEW (zl_worker_t);
    self->opts = *opts;
    self->endpoint = zl_strdup (opts->endpoint ? opts->endpoint : S_DEFAULT_ENDPOINT);
    self->name = opts->name && *opts->name ? zl_strdup (opts->name) : s_default_name ();
    self->lanes = zl_calloc (opts->n_lanes, sizeof (char *));
    for (size_t i = 0; i < opts->n_lanes; i++)
        self->lanes[i] = zl_strdup (opts->lanes[i]);
    self->opts.endpoint = self->endpoint;
    self->brokers = zl_eplist_new (self->endpoint); // checked by s_check_opts
    self->opts.name = self->name;
    self->opts.lanes = (const char *const *)self->lanes;

    pthread_mutex_init (&self->lock, NULL);
    pthread_cond_init (&self->end_cond, NULL);
    atomic_init (&self->stop_requests, 0);
    atomic_init (&self->ckpt_flag, 0);
    self->wake_fd = wake_fd;
    zl_rng_seed (&self->rng, 0);
    // Chosen once per worker: a Ready with the same instance after a
    // reconnect lets the broker hand this worker's leases to the new
    // connection. From its own draw of OS entropy, not the jitter's stream.
    zl_rng_t instance_rng;
    zl_rng_seed (&instance_rng, 0);
    while (!self->instance)
        self->instance = zl_rng_next (&instance_rng);
    self->backoff_ms = opts->reconnect_min_ms;
    self->held_ids.map = zl_u64map_new ();
    self->pending_ids.map = zl_u64map_new ();
    self->timers = zl_held_timers_new ();
    zl_dlink_init (&self->unsent);
    zl_dlink_init (&self->sent);
    return self;
}

static void
s_settle_free (s_settle_t **p)
{
    free ((*p)->error);
    free ((*p)->result);
    ZL_FREE (*p);
}

static void
s_settle_free_all (zl_dlink_t *list)
{
    while (list->next != list) {
        s_settle_t *p = (s_settle_t *)list->next;
        list->next = p->link.next;
        s_settle_free (&p);
    }
    list->prev = list;
}

void
zl_worker_destroy (zl_worker_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_worker_t *self = *self_p;
    // zl_worker_run leaves no job behind, but a worker that never ran may
    // still be destroyed: nothing else to release then.
    while (self->held_head) {
        zl_held_job_t *h = self->held_head;
        self->held_head = h->next;
        zl_held_job_destroy (&h);
    }
    s_settle_free_all (&self->unsent);
    s_settle_free_all (&self->sent);
    zl_u64map_destroy (&self->held_ids.map);
    zl_u64map_destroy (&self->pending_ids.map);
    zl_held_timers_destroy (&self->timers);
    pthread_mutex_destroy (&self->lock);
    pthread_cond_destroy (&self->end_cond);
    close (self->wake_fd);
    for (size_t i = 0; i < self->opts.n_lanes; i++)
        free (self->lanes[i]);
    free (self->lanes);
    free (self->endpoint);
    zl_eplist_destroy (&self->brokers);
    free (self->name);
    free (self->extends);
    for (size_t i = 0; i < self->n_ckpt_out; i++)
        free (self->ckpt_out[i]);
    free (self->ckpt_out);
    free (self->acks);
    free (self->nacks);
    free (self);
    *self_p = NULL;
}

const char *
zl_worker_name (zl_worker_t *self)
{
    return self->name;
}

void
zl_worker_stop (zl_worker_t *self)
{
    // Only async-signal-safe calls here: an atomic add and a write(2).
    atomic_fetch_add (&self->stop_requests, 1);
    uint64_t one = 1;
    ssize_t rc = write (self->wake_fd, &one, sizeof one);
    (void)rc; // the counter is what matters; the write only wakes the loop
}

void
zl_worker_stats (zl_worker_t *self, zl_worker_stats_t *stats)
{
    s_counters_t *c = &self->counters;
    *stats = (zl_worker_stats_t){.received = atomic_load (&c->received),
                                 .acked = atomic_load (&c->acked),
                                 .nacked = atomic_load (&c->nacked),
                                 .settled = atomic_load (&c->settled),
                                 .refused = atomic_load (&c->refused),
                                 .extends_sent = atomic_load (&c->extends_sent),
                                 .lease_lost = atomic_load (&c->lease_lost),
                                 .cancelled = atomic_load (&c->cancelled),
                                 .reconnects = atomic_load (&c->reconnects)};
    pthread_mutex_lock (&self->lock);
    stats->threads_idle = self->n_waiting;
    pthread_mutex_unlock (&self->lock);
}

// ------------------------------------------------------------------ result

void
zl_worker_result_set (zl_worker_result_t *result, zl_worker_outcome_t outcome,
                      uint32_t retry_after_ms, const char *fmt, ...)
{
    result->outcome = outcome;
    result->retry_after_ms = retry_after_ms;
    va_list ap;
    va_start (ap, fmt);
    int n = vsnprintf (result->error, sizeof result->error, fmt, ap);
    va_end (ap);
    if (n < 0)
        result->error[0] = '\0';
}

void
zl_worker_result_data (zl_worker_result_t *result, const void *data, size_t len)
{
    free (result->data);
    result->data = NULL;
    result->data_len = 0;
    if (!len)
        return;
    result->data = zl_malloc (len);
    memcpy (result->data, data, len);
    result->data_len = len;
}

const char *
zl_worker_outcome_name (zl_worker_outcome_t outcome)
{
    switch (outcome) {
    case ZL_WORKER_ACK: return "ack";
    case ZL_WORKER_TRANSIENT: return "transient";
    case ZL_WORKER_THROTTLED: return "throttled";
    case ZL_WORKER_NOT_YET: return "not_yet";
    case ZL_WORKER_PERMANENT: return "permanent";
    }
    return "unknown";
}

// ------------------------------------------------------------------ held jobs and settlements

static void *
s_index_get (s_index_t *ix, uint64_t job_id)
{
    return job_id ? zl_u64map_get (ix->map, job_id) : ix->zero;
}

/*  Make `first` the head of job_id's chain (NULL: the chain is empty). */
static void
s_index_set (s_index_t *ix, uint64_t job_id, void *first)
{
    if (!job_id)
        ix->zero = first;
    else if (first)
        zl_u64map_put (ix->map, job_id, first);
    else
        zl_u64map_remove (ix->map, job_id);
}

/*  Hold `h`: append it to the held list, index it and arm its timers. */
static void
s_held_add (zl_worker_t *self, zl_held_job_t *h)
{
    h->seq = ++self->held_seq;
    h->prev = self->held_tail;
    h->next = NULL;
    if (self->held_tail)
        self->held_tail->next = h;
    else
        self->held_head = h;
    self->held_tail = h;
    self->n_held++;
    // Chain order does not matter: (job id, lease) is unique among held jobs.
    zl_held_job_t *first = s_index_get (&self->held_ids, h->pub.job_id);
    if (first) {
        h->id_next = first->id_next;
        first->id_next = h;
    } else {
        h->id_next = NULL;
        s_index_set (&self->held_ids, h->pub.job_id, h);
    }
    zl_held_timers_update (self->timers, h);
}

/*  Drop `h` from the held list, the index and the timers, and destroy it.
    It must not be in the backlog or a handler queue. */
static void
s_held_forget (zl_worker_t *self, zl_held_job_t *h)
{
    if (h->prev)
        h->prev->next = h->next;
    else
        self->held_head = h->next;
    if (h->next)
        h->next->prev = h->prev;
    else
        self->held_tail = h->prev;
    self->n_held--;
    zl_held_job_t *first = s_index_get (&self->held_ids, h->pub.job_id);
    if (first == h)
        s_index_set (&self->held_ids, h->pub.job_id, h->id_next);
    else {
        zl_held_job_t *q = first;
        while (q && q->id_next != h)
            q = q->id_next;
        assert (q); // every held job is indexed
        q->id_next = h->id_next;
    }
    zl_held_timers_remove (self->timers, h);
    zl_held_job_destroy (&h);
}

static zl_held_job_t *
s_held_find (zl_worker_t *self, uint64_t job_id, uint64_t lease)
{
    // The chain is one job long but for the rare job whose earlier attempt
    // (cancelled, still finishing) we hold too.
    zl_held_job_t *h = s_index_get (&self->held_ids, job_id);
    while (h && h->pub.lease != lease)
        h = h->id_next;
    return h;
}

static void
s_backlog_push (zl_worker_t *self, zl_held_job_t *h)
{
    h->qnext = NULL;
    if (self->backlog_tail)
        self->backlog_tail->qnext = h;
    else
        self->backlog_head = h;
    self->backlog_tail = h;
    self->n_backlog++;
}

static zl_held_job_t *
s_backlog_pop (zl_worker_t *self)
{
    zl_held_job_t *h = self->backlog_head;
    if (h) {
        self->backlog_head = h->qnext;
        if (!self->backlog_head)
            self->backlog_tail = NULL;
        h->qnext = NULL;
        self->n_backlog--;
    }
    return h;
}

static s_settle_t *
s_pending_find (zl_worker_t *self, uint64_t job_id, uint64_t lease)
{
    // Oldest first: should the same lease ever be settled twice, each
    // answer from the broker clears one, in order, as a list scan would.
    s_settle_t *p = s_index_get (&self->pending_ids, job_id);
    while (p && p->lease != lease)
        p = p->id_next;
    return p;
}

static void
s_pending_remove (zl_worker_t *self, s_settle_t *p)
{
    zl_dlink_unlink (&p->link);
    s_settle_t *first = s_index_get (&self->pending_ids, p->job_id);
    if (first == p)
        s_index_set (&self->pending_ids, p->job_id, p->id_next);
    else {
        s_settle_t *q = first;
        while (q && q->id_next != p)
            q = q->id_next;
        assert (q); // every pending settlement is indexed
        q->id_next = p->id_next;
    }
    self->n_pending--;
    s_settle_free (&p);
}

/*  Everything sent is to be sent again (a new connection, or a Ready that
    may have been preceded by refused messages). O(1): the sent list moves
    in front of the unsent one. Per kind, every sent entry is older than
    every unsent one (a flush sends all unsent of a kind in one frame), so
    each kind keeps its order. */
static void
s_pending_mark_unsent (zl_worker_t *self)
{
    zl_dlink_t *sent = &self->sent, *unsent = &self->unsent;
    if (sent->next == sent)
        return;
    zl_dlink_t *first = sent->next, *last = sent->prev;
    last->next = unsent->next;
    unsent->next->prev = last;
    unsent->next = first;
    first->prev = unsent;
    sent->prev = sent->next = sent;
}

/*  Queue an Ack (ack) or a Nack of class `cls` for the next flush; returns
    the pending settlement. */
static s_settle_t *
s_settle (zl_worker_t *self, const zl_held_job_t *h, bool ack, zl_fail_class_t cls,
          const char *error, uint32_t retry_after_ms, uint64_t run_us)
{
    s_settle_t *p = ZL_NEW (s_settle_t);
    *p = (s_settle_t){.job_id = h->pub.job_id,
                      .lease = h->pub.lease,
                      .attempt = h->pub.attempt,
                      .ack = ack,
                      .cls = cls,
                      .retry_after_ms = retry_after_ms,
                      .run_us = run_us};
    if (!ack) {
        // The broker refuses a Nack whose text is not valid UTF-8 or holds a
        // NUL, and handlers may print anything: repair it (U+FFFD), cut
        // between characters to ZL_WORKER_ERROR_MAX - 1 bytes.
        const char *text = error ? error : "";
        char clean[ZL_WORKER_ERROR_MAX];
        zl_text_sanitize (text, strlen (text), clean, sizeof clean);
        p->error = zl_strdup (clean);
    }
    zl_dlink_push (&self->unsent, &p->link);
    s_settle_t *first = s_index_get (&self->pending_ids, p->job_id);
    if (!first)
        s_index_set (&self->pending_ids, p->job_id, p);
    else {
        while (first->id_next)
            first = first->id_next;
        first->id_next = p;
    }
    self->n_pending++;
    return p;
}

/*  Hand back a job that never ran: Nack it and forget it. The caller has
    taken it out of the backlog (if it was there). */
static void
s_hand_back (zl_worker_t *self, zl_held_job_t *h, zl_fail_class_t cls, const char *why)
{
    zl_info (S_COMPONENT, "job %" PRIu64 " attempt %u: handed back unstarted (%s): %s",
             h->pub.job_id, h->pub.attempt, zl_fail_class_name (cls), why);
    s_settle (self, h, false, cls, why, 0, 0);
    s_held_forget (self, h);
}

/*  Cancel every held job for `why`; returns how many this call cancelled.
    Walks everything held: only for a lost connection or a shutdown. */
static size_t
s_cancel_all (zl_worker_t *self, zl_worker_cancel_t why)
{
    size_t n = 0;
    for (zl_held_job_t *h = self->held_head; h; h = h->next) {
        zl_held_timers_remove (self->timers, h); // cancelled jobs have no timers
        if (zl_held_job_cancel (h, why)) {
            zl_info (S_COMPONENT, "job %" PRIu64 " attempt %u: cancelled: %s", h->pub.job_id,
                     h->pub.attempt, zl_worker_cancel_text (why));
            n++;
        }
    }
    return n;
}

// ------------------------------------------------------------------ connection

/*  Encode and send `msg` without blocking. Returns 0 or -1 (logged). */
static int
s_send (zl_worker_t *self, const zl_msg_t *msg, int64_t now_ms)
{
    if (!self->dealer)
        return -1;
    size_t size;
    const void *data = zl_codec_encode (self->codec, msg, &size);
    if (!data || zl_link_send (self->dealer, data, size) != 0) {
        zl_warn (S_COMPONENT, "send %s failed: %s", zl_msg_kind_name (msg->kind),
                 data ? strerror (errno) : "cannot encode it");
        return -1;
    }
    zl_trace (S_COMPONENT, "-> %s", zl_msg_kind_name (msg->kind));
    self->last_sent_ms = now_ms;
    return 0;
}

/*  Open a new DEALER to the broker in use; Ready and every pending
    settlement go out at the next flush. Returns 0 or -1 (the endpoint was
    refused: one a standby named, say). */
static int
s_connect (zl_worker_t *self, int64_t now_ms)
{
    const char *endpoint = zl_eplist_current (self->brokers);
    // as a libzmq DEALER: what is sent before the connection is up waits for
    // it (Ready first), and a dropped connection is dialled again every
    // 100 ms; a silent broker is noticed by the heartbeats (liveness)
    zl_link_opts_t lo = {.curve = &self->opts.curve, .reconnect_ivl_ms = 100};
    char err[256];
    self->dealer = zl_link_new (endpoint, &lo, err, sizeof err);
    if (!self->dealer) {
        zl_error (S_COMPONENT, "cannot connect to %s: %s", endpoint, err);
        return -1;
    }
    zl_link_pump (self->dealer, now_ms); // the first dial
    zl_info (S_COMPONENT, "%s connecting to %s", self->name, endpoint);
    self->need_ready = true;
    self->last_heard_ms = now_ms; // the broker gets a full liveness period
    self->broker_heartbeat_ms = 0;
    self->last_sent_ms = now_ms;
    s_pending_mark_unsent (self);
    return 0;
}

/*  How long a silence of the broker lasts before the worker leaves it:
    liveness x the longer of its own heartbeat and the one the broker stated
    (a broker that heartbeats slower than this worker is not left for it). */
static int64_t
s_silence_ms (const zl_worker_t *self)
{
    uint32_t pace = self->opts.heartbeat_ms > self->broker_heartbeat_ms ? self->opts.heartbeat_ms
                                                                        : self->broker_heartbeat_ms;
    return (int64_t)self->opts.liveness * pace;
}

/*  Give up on the current connection: close it, presume every held lease
    lost, and schedule a reconnect after a full-jitter backoff: to where a
    NOT_LEADER pointed, else to the next broker of the list (it went silent,
    is no broker, or cannot reach its database: self->leave). */
static void
s_disconnect (zl_worker_t *self, int64_t now_ms)
{
    const char *left = zl_eplist_current (self->brokers);
    char was[ZL_EPLIST_MAX_LEN + 1];
    snprintf (was, sizeof was, "%s", left);
    bool not_leader = self->leave == S_NOT_LEADER;
    bool unavailable = self->leave == S_UNAVAILABLE;
    self->leave = S_STAY;
    if (!not_leader)
        zl_eplist_next (self->brokers); // one endpoint: the same again
    zl_link_destroy (&self->dealer);
    self->n_extends = 0;
    S_COUNT (self, reconnects, 1);
    s_cancel_all (self, ZL_WORKER_DISCONNECTED);
    uint64_t delay = zl_rng_range (&self->rng, self->backoff_ms);
    self->backoff_ms = self->backoff_ms >= self->opts.reconnect_max_ms / 2
                           ? self->opts.reconnect_max_ms
                           : self->backoff_ms * 2;
    self->reconnect_at_ms = now_ms + (int64_t)delay;
    const char *next = zl_eplist_current (self->brokers);
    if (not_leader)
        zl_info (S_COMPONENT, "broker %s is not the leader; connecting to %s in %" PRIu64 " ms",
                 was, next, delay);
    else if (unavailable)
        zl_warn (S_COMPONENT, "broker %s cannot reach its database; %s %s in %" PRIu64 " ms", was,
                 strcmp (was, next) ? "trying" : "reconnecting to", next, delay);
    else if (strcmp (was, next) != 0)
        zl_warn (S_COMPONENT, "broker %s silent for %" PRId64 " ms; trying %s in %" PRIu64 " ms",
                 was, s_silence_ms (self), next, delay);
    else
        zl_warn (S_COMPONENT, "broker %s silent for %" PRId64 " ms; reconnecting in %" PRIu64 " ms",
                 was, s_silence_ms (self), delay);
}

// ------------------------------------------------------------------ broker messages

static void
s_on_dispatch (zl_worker_t *self, const zl_dispatch_t *d, int64_t now_ms)
{
    for (size_t i = 0; i < d->n; i++) {
        const zl_job_msg_t *j = &d->jobs[i];
        S_COUNT (self, received, 1);
        if (s_held_find (self, j->job_id, j->lease)) {
            zl_warn (S_COMPONENT, "job %" PRIu64 " attempt %u: dispatched twice, ignored",
                     j->job_id, j->attempt);
            continue;
        }
        zl_worker_job_t fields = {.job_id = j->job_id,
                                  .lease = j->lease,
                                  .attempt = j->attempt,
                                  .tenant = j->tenant,
                                  .lane = j->lane,
                                  .payload = j->payload.data,
                                  .len = j->payload.len,
                                  .idempotency_key = j->idempotency_key,
                                  .n_headers = j->n_headers,
                                  .headers = j->headers,
                                  .lease_ms = j->lease_ms,
                                  .max_run_ms = j->max_run_ms,
                                  .max_attempts = j->max_attempts,
                                  .enqueued_at_ms = j->enqueued_at_ms,
                                  .n_parent_results = j->n_parent_results,
                                  .parent_results = j->parent_results,
                                  .batch = j->batch,
                                  .ordering_key = j->ordering_key,
                                  .checkpoint = j->checkpoint.len ? j->checkpoint.data : NULL,
                                  .checkpoint_len = j->checkpoint.len};
        zl_held_job_t *h = zl_held_job_new (&fields);
        h->ckpt_flag = &self->ckpt_flag;
        h->wake_fd = self->wake_fd;
        h->received_ms = now_ms;
        bool extend = self->opts.extend && !self->opts.ack_early && j->lease_ms >= 2;
        h->next_extend_ms = extend ? now_ms + j->lease_ms / 2 : 0;
        h->max_run_at_ms = j->max_run_ms ? now_ms + j->max_run_ms : 0;
        s_held_add (self, h);
        zl_debug (S_COMPONENT,
                  "job %" PRIu64
                  " attempt %u: received (tenant %s, lane %s, %zu bytes, lease %u ms)",
                  j->job_id, j->attempt, j->tenant, j->lane, j->payload.len, j->lease_ms);
        if (self->draining)
            s_hand_back (self, h, ZL_FAIL_THROTTLED, "worker shutting down");
        else
            s_backlog_push (self, h);
    }
}

static void
s_on_settled (zl_worker_t *self, const zl_settled_t *s)
{
    for (size_t i = 0; i < s->n; i++) {
        s_settle_t *p = s_pending_find (self, s->items[i].job_id, s->items[i].lease);
        if (!p)
            continue; // settled twice (resent after a reconnect): nothing left to do
        zl_trace (S_COMPONENT, "job %" PRIu64 " attempt %u: settled", p->job_id, p->attempt);
        S_COUNT (self, settled, 1);
        s_pending_remove (self, p);
    }
}

/*  The broker cancelled the held job `h` (a Cancel, or a CANCELLED
    refusal of its Extend): interrupt it, extend it no more. A job still in
    the backlog never runs (s_start_jobs hands it back); a running one's
    handler sees zl_worker_job_cancelled, and whatever it reports is sent
    and refused CANCELLED. */
static void
s_cancelled_by_broker (zl_worker_t *self, zl_held_job_t *h, const char *how)
{
    if (!zl_held_job_cancel (h, ZL_WORKER_CANCELLED))
        return; // cancelled before (lease lost, max run...): it is stopping already
    S_COUNT (self, cancelled, 1);
    h->next_extend_ms = 0;
    zl_held_timers_remove (self->timers, h); // cancelled jobs have no timers
    zl_warn (S_COMPONENT, "job %" PRIu64 " attempt %u: %s (%s)", h->pub.job_id, h->pub.attempt,
             zl_worker_cancel_text (ZL_WORKER_CANCELLED), how);
}

/*  Cancel from the broker: interrupt each (job_id, lease) we hold. One we
    do not hold has finished here: its settlement, if still pending, will be
    refused CANCELLED. */
static void
s_on_cancel (zl_worker_t *self, const zl_cancel_t *c)
{
    for (size_t i = 0; i < c->n; i++) {
        zl_held_job_t *h = s_held_find (self, c->items[i].job_id, c->items[i].lease);
        if (!h) {
            zl_debug (S_COMPONENT, "job %" PRIu64 ": Cancel for a lease we no longer hold",
                      c->items[i].job_id);
            continue;
        }
        s_cancelled_by_broker (self, h, "Cancel");
    }
}

/*  One refused item of an Ack, Nack or Extend: (job_id, lease) with `code`.
    STALE_LEASE, UNKNOWN_JOB, NOT_HOLDER (the lease is another
    connection's) and CANCELLED fence it: a pending settlement of that lease
    is dropped (refused), a held job with it is cancelled (lease lost, or
    cancelled by the broker). MAX_RUN answers
    an Extend only: the lease was extended, but only up to the job's max run
    deadline, so the job is not extended again (nor cancelled: its own
    max-run timer does that); a settlement of that lease still stands. */
static void
s_on_item_error (zl_worker_t *self, zl_error_code_t code, uint64_t job_id, uint64_t lease)
{
    const char *name = zl_error_code_name (code);
    if (code == ZL_ERR_RESULT_TOO_LARGE) {
        // the broker would never take this ack: dead-letter the job instead
        s_settle_t *p = s_pending_find (self, job_id, lease);
        if (!p || !p->ack)
            return;
        char why[160];
        snprintf (why, sizeof why,
                  "result too large: %zu bytes refused by the broker (over its max_result)",
                  p->result_len);
        zl_warn (S_COMPONENT, "job %" PRIu64 " attempt %u: %s; nacking it PERMANENT", job_id,
                 p->attempt, why);
        p->ack = false;
        p->cls = ZL_FAIL_PERMANENT;
        p->error = zl_strdup (why);
        free (p->result);
        p->result = NULL;
        p->result_len = 0;
        zl_dlink_unlink (&p->link);
        zl_dlink_push (&self->unsent, &p->link);
        return;
    }
    bool fenced = code == ZL_ERR_STALE_LEASE || code == ZL_ERR_UNKNOWN_JOB ||
                  code == ZL_ERR_NOT_HOLDER || code == ZL_ERR_CANCELLED;
    if (!fenced && code != ZL_ERR_MAX_RUN) {
        zl_warn (S_COMPONENT, "job %" PRIu64 ": broker error %s, ignored", job_id, name);
        return;
    }
    s_settle_t *p = fenced ? s_pending_find (self, job_id, lease) : NULL;
    if (p) {
        zl_warn (S_COMPONENT, "job %" PRIu64 " attempt %u: %s refused by broker (%s)", p->job_id,
                 p->attempt, p->ack ? "ack" : "nack", name);
        S_COUNT (self, refused, 1);
        s_pending_remove (self, p);
        return;
    }
    zl_held_job_t *h = s_held_find (self, job_id, lease);
    if (!h || zl_worker_job_cancelled (&h->pub)) {
        zl_debug (S_COMPONENT, "job %" PRIu64 ": %s for a job we no longer hold or run", job_id,
                  name);
        return;
    }
    if (code == ZL_ERR_MAX_RUN) {
        if (!h->next_extend_ms)
            return; // told before
        h->next_extend_ms = 0;
        // Our max-run timer cancels the job; a broker that sent us no max
        // run time gets one lease more, as far as it was extended.
        if (!h->max_run_at_ms)
            h->max_run_at_ms = zl_clock_mono_ms () + h->pub.lease_ms;
        zl_held_timers_update (self->timers, h);
        zl_info (S_COMPONENT,
                 "job %" PRIu64 " attempt %u: lease extended up to its max run time; "
                 "no more extensions",
                 h->pub.job_id, h->pub.attempt);
        return;
    }
    if (code == ZL_ERR_CANCELLED) {
        s_cancelled_by_broker (self, h, "extend refused CANCELLED");
        return;
    }
    zl_held_job_cancel (h, ZL_WORKER_LEASE_LOST);
    zl_warn (S_COMPONENT, "job %" PRIu64 " attempt %u: extend refused (%s): %s", h->pub.job_id,
             h->pub.attempt, name, zl_worker_cancel_text (ZL_WORKER_LEASE_LOST));
    S_COUNT (self, lease_lost, 1);
    h->next_extend_ms = 0;
    zl_held_timers_remove (self->timers, h); // cancelled jobs have no timers
}

/*  An Error: NOT_READY asks for Ready again; an Error listing items refuses
    each of them with its own code (its code, job_id and lease repeat the
    first item); one without items about a lease names that one item. */
static void
s_on_error (zl_worker_t *self, const zl_error_t *e)
{
    if (e->n_items) {
        for (size_t i = 0; i < e->n_items; i++)
            s_on_item_error (self, e->items[i].code, e->items[i].job_id, e->items[i].lease);
        return;
    }
    switch (e->code) {
    case ZL_ERR_NOT_LEADER:
        // A standby: it took nothing we sent. Leave it (at the next tick)
        // for the leader it names, or for the next broker of the list.
        if (self->leave)
            return;
        zl_info (S_COMPONENT, "broker %s: %s: %s", zl_eplist_current (self->brokers),
                 zl_error_code_name (e->code), e->message ? e->message : "");
        zl_eplist_follow (self->brokers, e->n_leader_endpoints,
                          (const char *const *)e->leader_endpoints);
        self->leave = S_NOT_LEADER;
        return;
    case ZL_ERR_UNAVAILABLE:
        // Its database does not answer: it did nothing with what we sent.
        // Come back later (or try the next broker): Ready again there, and
        // every unconfirmed settlement resent.
        if (self->leave)
            return;
        zl_info (S_COMPONENT, "broker %s: %s: %s", zl_eplist_current (self->brokers),
                 zl_error_code_name (e->code), e->message ? e->message : "");
        self->leave = S_UNAVAILABLE;
        return;
    case ZL_ERR_NOT_READY:
        // The broker does not know us (it restarted): introduce ourselves again
        // and resend what it may not have recorded.
        zl_info (S_COMPONENT, "broker says not ready; sending Ready again");
        self->need_ready = true;
        return;
    case ZL_ERR_STALE_LEASE:
    case ZL_ERR_UNKNOWN_JOB:
    case ZL_ERR_NOT_HOLDER:
    case ZL_ERR_CANCELLED:
    case ZL_ERR_MAX_RUN:
    case ZL_ERR_RESULT_TOO_LARGE: s_on_item_error (self, e->code, e->job_id, e->lease); return;
    default:
        zl_warn (S_COMPONENT, "broker error %s: %s", zl_error_code_name (e->code),
                 e->message ? e->message : "");
    }
}

static void
s_on_message (zl_worker_t *self, const zl_msg_t *msg, int64_t now_ms)
{
    zl_trace (S_COMPONENT, "<- %s", zl_msg_kind_name (msg->kind));
    switch (msg->kind) {
    case ZL_MSG_DISPATCH: s_on_dispatch (self, &msg->u.dispatch, now_ms); break;
    case ZL_MSG_SETTLED: s_on_settled (self, &msg->u.settled); break;
    case ZL_MSG_CANCEL: s_on_cancel (self, &msg->u.cancel); break;
    case ZL_MSG_ERROR: s_on_error (self, &msg->u.error); break;
    case ZL_MSG_HEARTBEAT: // its arrival is the point, and the pace it states
        self->broker_heartbeat_ms = zl_heartbeat_stated (msg->u.heartbeat.interval_ms);
        break;
    case ZL_MSG_READY:
    case ZL_MSG_ACK:
    case ZL_MSG_NACK:
    case ZL_MSG_EXTEND:
        // Our own words: the socket is connected to itself (a dial to a
        // closed loopback port can meet its own source port), or to another
        // worker, and would echo our heartbeats forever. No broker there:
        // leave it as if it were silent.
        if (!self->leave) {
            zl_warn (S_COMPONENT, "%s is not a broker (it sent us %s)",
                     zl_eplist_current (self->brokers), zl_msg_kind_name (msg->kind));
            self->leave = S_NOT_BROKER;
        }
        break;
    default:
        zl_warn (S_COMPONENT, "unexpected %s from broker, ignored", zl_msg_kind_name (msg->kind));
    }
}

/*  Take the connection's events: logged (the broker's silence, not the
    connection's, decides when to leave it: s_tick). */
static void
s_link_events (zl_worker_t *self)
{
    zl_link_event_t ev;
    while (self->dealer && zl_link_event (self->dealer, &ev) == 1) {
        const char *ep = zl_link_endpoint (self->dealer);
        if (ev.kind == ZL_LINK_REFUSED)
            zl_warn (S_COMPONENT, "the broker at %s refused the handshake: %s", ep, ev.detail);
        else if (ev.kind == ZL_LINK_CONNECTED)
            zl_debug (S_COMPONENT, "connected to %s", ep);
        else
            zl_debug (S_COMPONENT, "%s: %s", ep, ev.detail);
    }
}

/*  Read up to S_RECV_BATCH messages without blocking. */
static void
s_recv_all (zl_worker_t *self, int64_t now_ms)
{
    bool skipping = false; // the rest of a multi-frame message
    for (int i = 0; i < S_RECV_BATCH && self->dealer && !self->leave; i++) {
        const void *data;
        size_t size;
        bool more;
        if (zl_link_recv (self->dealer, &data, &size, &more) != 1)
            return;
        // Any frame, even a bad one, shows the broker is alive; the backoff
        // restarts only for what a serving broker sends (below).
        self->last_heard_ms = now_ms;
        if (skipping || more) {
            // Not ours (one Envelope per message): drop every part of it.
            if (!skipping)
                zl_warn (S_COMPONENT, "multi-frame message from broker, ignored");
            skipping = more;
            continue;
        }
        zl_msg_t msg;
        zl_decode_rc_t rc = zl_codec_decode (self->codec, data, size, &msg);
        if (rc != ZL_DECODE_OK) {
            zl_warn (S_COMPONENT, "undecodable frame from broker (rc %d), ignored", (int)rc);
            continue;
        }
        if (msg.kind == ZL_MSG_DISPATCH || msg.kind == ZL_MSG_SETTLED ||
            msg.kind == ZL_MSG_CANCEL || msg.kind == ZL_MSG_HEARTBEAT ||
            (msg.kind == ZL_MSG_ERROR && msg.u.error.code != ZL_ERR_NOT_LEADER &&
             msg.u.error.code != ZL_ERR_UNAVAILABLE))
            self->backoff_ms = self->opts.reconnect_min_ms; // a broker that serves
        s_on_message (self, &msg, now_ms);
    }
}

// ------------------------------------------------------------------ handler threads

/*  Run one job's handler; fills the job's result and run time. */
static void
s_run (zl_worker_t *self, zl_held_job_t *h)
{
    memset (&h->result, 0, sizeof h->result);
    int64_t start = zl_clock_mono_us ();
    self->opts.handler (&h->pub, &h->result, self->opts.handler_arg);
    // 0 on the wire means "not measured" (the broker then charges the
    // lease's length, queueing included): a handler quicker than 1 us says 1
    int64_t took = zl_clock_mono_us () - start;
    h->run_us = took > 0 ? (uint64_t)took : 1;
    h->result.error[ZL_WORKER_ERROR_MAX - 1] = '\0';
}

typedef enum { S_LOOP_DONE, S_LOOP_PASSED } s_loop_end_t;
static s_loop_end_t s_loop (zl_worker_t *self, zl_held_job_t **job);

/*  Put a finished job on the done queue; the loop is signalled when the
    queue stops being empty, unless this thread holds it (`mine`). Called
    with the lock held. */
static void
s_done_push (zl_worker_t *self, zl_held_job_t *h, bool mine)
{
    bool was_empty = !self->done_head;
    h->qnext = NULL;
    if (self->done_tail)
        self->done_tail->qnext = h;
    else
        self->done_head = h;
    self->done_tail = h;
    // One signal per empty -> non-empty transition, sent before this thread
    // may wait; the loop drains the signals before it takes the queue, so
    // none is missed.
    if (was_empty && !mine) {
        uint64_t one = 1;
        ssize_t rc = write (self->done_fd, &one, sizeof one);
        (void)rc; // a full counter still wakes the loop
        self->done_signalled = true;
    }
}

/*  The loop is done, or the threads must quit: every idle thread looks
    (end_fd stays readable). Called with the lock held. */
static void
s_end (zl_worker_t *self)
{
    uint64_t one = 1;
    ssize_t rc = write (self->end_fd, &one, sizeof one);
    (void)rc;
    pthread_cond_broadcast (&self->end_cond);
}

/*  Wake `n` idle threads (each takes one count of work_fd). */
static void
s_wake_idle (zl_worker_t *self, uint64_t n)
{
    if (!n)
        return;
    ssize_t rc = write (self->work_fd, &n, sizeof n);
    (void)rc; // a full counter still wakes them
}

static int s_next_timeout (zl_worker_t *self, int64_t now_ms);

/*  While the loop is free, an idle thread is woken by what the loop waits
    for: the broker's connection, a finished job, a stop request, or its
    next timer (loop_ep, one-shot in pool_ep). */
static void
s_watch (zl_worker_t *self, int64_t now_ms)
{
    int fd = self->dealer ? zl_link_fd (self->dealer) : -1;
    short want = self->dealer ? zl_link_poll_events (self->dealer) : 0;
    uint64_t serial = self->dealer ? zl_link_socket_serial (self->dealer) : 0;
    // the same socket watched for the same events as last time: already so
    // (a job at a time, this is most of them; each epoll_ctl is a system
    // call before the job starts)
    bool same = fd >= 0 && want && fd == self->watch_link_fd && want == self->watch_link_events &&
                serial == self->watch_link_serial;
    if (!same) {
        if (self->watch_link_fd >= 0 && self->watch_link_fd != fd)
            epoll_ctl (self->loop_ep, EPOLL_CTL_DEL, self->watch_link_fd, NULL);
        self->watch_link_fd = -1;
    }
    if (!same && fd >= 0 && want) {
        struct epoll_event ev = {.events = (want & POLLIN ? EPOLLIN : 0) |
                                           (want & POLLOUT ? EPOLLOUT : 0),
                                 .data.fd = fd};
        // MOD first: a socket closed and made again under the same number
        // left the set when it closed
        if (epoll_ctl (self->loop_ep, EPOLL_CTL_MOD, fd, &ev) == 0 ||
            epoll_ctl (self->loop_ep, EPOLL_CTL_ADD, fd, &ev) == 0) {
            self->watch_link_fd = fd;
            self->watch_link_events = want;
            self->watch_link_serial = serial;
        }
    }
    // The timer, at the loop's next deadline; left as it is when it is set
    // for no later and has not fired (its count is 0 until then): firing
    // early only has an idle thread take the loop, find nothing due and
    // watch again.
    int64_t due_ms = now_ms + s_next_timeout (self, now_ms);
    if (self->timer_due_ms <= now_ms || self->timer_due_ms > due_ms) {
        struct itimerspec due = {.it_value = {due_ms / 1000, (long)(due_ms % 1000) * 1000000L + 1}};
        timerfd_settime (self->timer_fd, TFD_TIMER_ABSTIME, &due, NULL); // (count back to 0)
        self->timer_due_ms = due_ms;
    }
    struct epoll_event w = {.events = EPOLLIN | EPOLLONESHOT, .data.fd = self->loop_ep};
    epoll_ctl (self->pool_ep, EPOLL_CTL_MOD, self->loop_ep, &w);
}

static void
s_unwatch (zl_worker_t *self)
{
    struct epoll_event w = {.events = 0, .data.fd = self->loop_ep};
    epoll_ctl (self->pool_ep, EPOLL_CTL_MOD, self->loop_ep, &w);
}

/*  A thread of the pool: it runs the jobs of the work queue, oldest first,
    and the loop. Each result goes on the done queue. A job cancelled before
    it is taken (its lease was lost while it waited) does not run: it goes
    back marked skipped and the loop hands it back. Acked-early jobs always
    run. A job just received may run on the loop's own thread, the loop
    left free meanwhile (s_start_here): when the job ends, the thread takes
    the loop back if no other did; an idle thread takes it over only if the
    loop has something to do before then (s_watch). So a short job costs no
    other thread's wake-up at all. The thread that called zl_worker_run
    (`caller`) starts with the loop, and returns once the loop is done,
    with its result. */
static int
s_pool (zl_worker_t *self, bool caller)
{
    zl_held_job_t *h = NULL; // the job to run
    bool loop = caller;
    for (;;) {
        if (loop) {
            loop = false;
            if (s_loop (self, &h) == S_LOOP_DONE) {
                pthread_mutex_lock (&self->lock);
                self->loop_done = true;
                s_end (self); // the caller, wherever it waits
                pthread_mutex_unlock (&self->lock);
                if (caller)
                    return self->loop_rc;
                continue;
            }
            // the loop is free while this thread runs `h`
        }
        if (h) {
            if (!h->acked_early && zl_worker_job_cancelled (&h->pub))
                h->skipped = true;
            else
                s_run (self, h);
            pthread_mutex_lock (&self->lock);
            if (self->loop_free) { // nobody needed it meanwhile: back here
                self->loop_free = false;
                loop = true;
            }
            s_done_push (self, h, loop); // the loop takes results as it starts
            pthread_mutex_unlock (&self->lock);
            if (loop)
                s_unwatch (self);
            h = NULL;
            continue;
        }
        // idle: a job of the queue, the loop when it needs a thread, or the end
        pthread_mutex_lock (&self->lock);
        if (self->loop_done || self->quit) {
            // the caller returns to join the others, which wait to be told
            while (!caller && !self->quit)
                pthread_cond_wait (&self->end_cond, &self->lock);
            pthread_mutex_unlock (&self->lock);
            return self->loop_rc;
        }
        if (self->work_head) {
            h = self->work_head;
            self->work_head = h->qnext;
            if (!self->work_head)
                self->work_tail = NULL;
            self->work_len--;
            pthread_mutex_unlock (&self->lock);
            continue;
        }
        self->n_waiting++;
        pthread_mutex_unlock (&self->lock);
        // signals as the loop takes them while waiting (they may come when
        // the loop is free and its thread runs a job with them blocked)
        struct epoll_event ev[2];
        int n = epoll_pwait (self->pool_ep, ev, 2, -1, &self->loop_sigmask);
        bool loop_event = false;
        for (int i = 0; i < n; i++) {
            if (ev[i].data.fd == self->work_fd) {
                uint64_t one;
                ssize_t rc = read (self->work_fd, &one, sizeof one);
                (void)rc; // another thread took the count: look anyway
            } else if (ev[i].data.fd == self->loop_ep)
                loop_event = true; // the watch fired (and is off: one-shot)
        }
        pthread_mutex_lock (&self->lock);
        self->n_waiting--;
        if (loop_event && self->loop_free) {
            self->loop_free = false;
            loop = true;
        }
        pthread_mutex_unlock (&self->lock);
    }
}

static void *
s_handler_thread (void *arg)
{
    s_pool (arg, false);
    return NULL;
}

static int
s_start_threads (zl_worker_t *self)
{
    // Handler threads block every signal, so signals land in the I/O thread
    // (whose poll they interrupt) and children start from a clean mask.
    sigset_t all, old;
    sigfillset (&all);
    pthread_sigmask (SIG_SETMASK, &all, &old);
    self->threads = zl_calloc (self->opts.concurrency, sizeof (pthread_t));
    int rc = 0;
    for (uint32_t i = 0; i < self->opts.concurrency; i++) {
        int err = pthread_create (&self->threads[i], NULL, s_handler_thread, self);
        if (err) {
            zl_error (S_COMPONENT, "pthread_create: %s", strerror (err));
            rc = -1;
            break;
        }
        self->n_threads++;
    }
    pthread_sigmask (SIG_SETMASK, &old, NULL);
    return rc;
}

static void
s_stop_threads (zl_worker_t *self)
{
    pthread_mutex_lock (&self->lock);
    self->quit = true;
    s_end (self);
    pthread_mutex_unlock (&self->lock);
    for (uint32_t i = 0; i < self->n_threads; i++)
        pthread_join (self->threads[i], NULL);
    ZL_FREE (self->threads);
    self->n_threads = 0;
}

/*  Take the work queue: the jobs no handler thread has taken yet, oldest
    first, linked by qnext. They are the I/O thread's again. */
static zl_held_job_t *
s_work_take_all (zl_worker_t *self)
{
    pthread_mutex_lock (&self->lock);
    zl_held_job_t *first = self->work_head;
    self->work_head = self->work_tail = NULL;
    self->work_len = 0;
    pthread_mutex_unlock (&self->lock);
    for (zl_held_job_t *h = first; h; h = h->qnext) {
        h->state = ZL_HELD_BACKLOG;
        self->n_handed--;
    }
    return first;
}

/*  Turn a finished job into a pending settlement and forget the job. */
static void s_collect_checkpoint (zl_worker_t *self, zl_held_job_t *h);

static void
s_on_result (zl_worker_t *self, zl_held_job_t *h)
{
    self->n_handed--;
    s_collect_checkpoint (self, h); // its last progress goes before its settlement
    if (h->skipped) {
        // cancelled while it waited in the work queue: it never ran
        s_hand_back (self, h, ZL_FAIL_TRANSIENT,
                     zl_worker_cancel_text (zl_worker_job_cancel_reason (&h->pub)));
        return;
    }
    const zl_worker_result_t *r = &h->result;
    const char *outcome = zl_worker_outcome_name (r->outcome);
    if (h->acked_early) {
        if (r->outcome != ZL_WORKER_ACK)
            zl_warn (S_COMPONENT, "job %" PRIu64 " attempt %u: %s after an early ack, lost: %s",
                     h->pub.job_id, h->pub.attempt, outcome, r->error);
    } else if (r->outcome == ZL_WORKER_ACK) {
        zl_debug (S_COMPONENT, "job %" PRIu64 " attempt %u: ack (%" PRIu64 " us)", h->pub.job_id,
                  h->pub.attempt, h->run_us);
        s_settle_t *p = s_settle (self, h, true, ZL_FAIL_UNSPECIFIED, NULL, 0, h->run_us);
        p->result = h->result.data; // the settlement owns the result now
        p->result_len = h->result.data ? h->result.data_len : 0;
        h->result.data = NULL;
    } else {
        zl_fail_class_t cls = r->outcome == ZL_WORKER_PERMANENT   ? ZL_FAIL_PERMANENT
                              : r->outcome == ZL_WORKER_THROTTLED ? ZL_FAIL_THROTTLED
                              : r->outcome == ZL_WORKER_NOT_YET   ? ZL_FAIL_NOT_YET
                                                                  : ZL_FAIL_TRANSIENT;
        zl_info (S_COMPONENT, "job %" PRIu64 " attempt %u: nack %s (%" PRIu64 " us): %s",
                 h->pub.job_id, h->pub.attempt, zl_fail_class_name (cls), h->run_us, r->error);
        s_settle (self, h, false, cls, r->error,
                  cls == ZL_FAIL_THROTTLED || cls == ZL_FAIL_NOT_YET ? r->retry_after_ms : 0,
                  h->run_us);
    }
    s_held_forget (self, h);
}

/*  Take every finished job from the done queue. */
static void
s_take_results (zl_worker_t *self)
{
    // Drain the signal first, then the queue (see s_done_push), and only
    // when one was sent: a job this thread ran and put back itself sent
    // none (a read that said EAGAIN after most jobs). While the signal's
    // flag is up the queue is not empty, so no other signal comes before
    // the queue is taken.
    pthread_mutex_lock (&self->lock);
    if (self->done_signalled) {
        self->done_signalled = false;
        pthread_mutex_unlock (&self->lock);
        uint64_t count;
        ssize_t got = read (self->done_fd, &count, sizeof count);
        (void)got;
        pthread_mutex_lock (&self->lock);
    }
    zl_held_job_t *h = self->done_head;
    self->done_head = self->done_tail = NULL;
    pthread_mutex_unlock (&self->lock);
    while (h) {
        zl_held_job_t *next = h->qnext;
        s_on_result (self, h);
        h = next;
    }
}

// ------------------------------------------------------------------ the loop's steps

static void
s_push_extend_with (zl_worker_t *self, const zl_held_job_t *h, zl_bytes_t checkpoint)
{
    if (self->n_extends == self->cap_extends) {
        self->cap_extends = self->cap_extends ? 2 * self->cap_extends : 16;
        self->extends = zl_realloc (self->extends, self->cap_extends * sizeof *self->extends);
    }
    self->extends[self->n_extends++] =
        (zl_extend_item_t){h->pub.job_id, h->pub.lease, h->pub.lease_ms, checkpoint};
}

static void
s_push_extend (zl_worker_t *self, const zl_held_job_t *h)
{
    s_push_extend_with (self, h, (zl_bytes_t){0});
}

/*  The checkpoint `h`'s handler saved, if any, into this flush's Extend
    (sent before any Ack or Nack of the flush, so it is stored before the
    job settles). Without a connection it is dropped: the lease is presumed
    lost anyway. */
static void
s_collect_checkpoint (zl_worker_t *self, zl_held_job_t *h)
{
    zl_held_ckpt_t *c = zl_held_job_take_checkpoint (h);
    if (!c)
        return;
    if (!self->dealer || h->acked_early) {
        free (c);
        return;
    }
    if (self->n_ckpt_out == self->cap_ckpt_out) {
        self->cap_ckpt_out = self->cap_ckpt_out ? 2 * self->cap_ckpt_out : 8;
        self->ckpt_out = zl_realloc (self->ckpt_out, self->cap_ckpt_out * sizeof *self->ckpt_out);
    }
    self->ckpt_out[self->n_ckpt_out++] = c;
    s_push_extend_with (self, h, (zl_bytes_t){c->data, c->len});
}

/*  Apply every timer that is due: liveness, reconnect, max run, extensions,
    the drain grace. */
static void
s_tick (zl_worker_t *self, int64_t now_ms)
{
    int64_t silence_ms = s_silence_ms (self);
    if (self->dealer && (self->leave || now_ms - self->last_heard_ms >= silence_ms))
        s_disconnect (self, now_ms);
    if (!self->dealer && now_ms >= self->reconnect_at_ms && s_connect (self, now_ms) != 0) {
        self->leave = S_STAY;
        zl_eplist_next (self->brokers); // a bad endpoint a standby named: the list again
        self->reconnect_at_ms = now_ms + self->opts.reconnect_max_ms;
    }

    // Only the jobs with a deadline that is due: the heap's top.
    zl_held_job_t *h;
    while ((h = zl_held_timers_due (self->timers, now_ms))) {
        if (zl_worker_job_cancelled (&h->pub)) {
            // cancelled outside the I/O thread (zl_worker_job_cancel)
            zl_held_timers_remove (self->timers, h);
            continue;
        }
        if (h->max_run_at_ms && now_ms >= h->max_run_at_ms) {
            zl_held_job_cancel (h, ZL_WORKER_MAX_RUN);
            zl_held_timers_remove (self->timers, h);
            if (h->pub.max_run_ms)
                zl_warn (S_COMPONENT, "job %" PRIu64 " attempt %u: max run time of %u ms exceeded",
                         h->pub.job_id, h->pub.attempt, h->pub.max_run_ms);
            else // the broker's (Error MAX_RUN): its last extension ran out
                zl_warn (S_COMPONENT,
                         "job %" PRIu64 " attempt %u: the broker's max run time was reached",
                         h->pub.job_id, h->pub.attempt);
            continue;
        }
        // The extension is due. Without a connection every held job has
        // been cancelled (s_disconnect), so the guard is only a safety net.
        if (self->dealer)
            s_push_extend (self, h);
        h->next_extend_ms = now_ms + h->pub.lease_ms / 2;
        zl_held_timers_update (self->timers, h);
    }

    if (self->draining && !self->drain_cancelled &&
        (now_ms >= self->drain_deadline_ms || atomic_load (&self->stop_requests) >= 2)) {
        self->drain_cancelled = true;
        size_t n = s_cancel_all (self, ZL_WORKER_SHUTDOWN);
        if (n)
            zl_warn (S_COMPONENT, "drain grace over: cancelled %zu running jobs", n);
    }
}

static int s_send_ready (zl_worker_t *self, int64_t now_ms);
static void s_flush (zl_worker_t *self, int64_t now_ms);

/*  zl_worker_stop was called: tell the broker to send nothing new (Ready
    with capacity 0), stop taking work and hand back every job no handler
    thread has taken (in ack_early mode the queued ones are acked already:
    they run, as if started). */
static void
s_begin_drain (zl_worker_t *self, int64_t now_ms)
{
    self->draining = true;
    self->drain_deadline_ms = now_ms + self->opts.drain_ms;
    zl_info (S_COMPONENT, "stopping: %zu jobs held, waiting up to %u ms for running ones",
             self->n_held, self->opts.drain_ms);
    // Ready first, so the broker stops dispatching before it sees the
    // hand-back Nacks (they go out at the next flush). If a Ready is owed
    // anyway, or this one cannot be sent, the flush sends it (capacity 0).
    if (self->dealer && !self->need_ready && s_send_ready (self, now_ms) != 0)
        self->need_ready = true;
    // The work queue first: it holds older jobs than the backlog.
    zl_held_job_t *h = self->opts.ack_early ? NULL : s_work_take_all (self);
    while (h) {
        zl_held_job_t *next = h->qnext;
        s_hand_back (self, h, ZL_FAIL_THROTTLED, "worker shutting down");
        h = next;
    }
    while ((h = s_backlog_pop (self)))
        s_hand_back (self, h, ZL_FAIL_THROTTLED, "worker shutting down");
}

/*  Move the backlog onto the work queue, in receipt order: all of it, so
    handler threads run job after job without waiting for this thread. In
    ack_early mode only one job per thread without one: each is acked
    first, and the local backlog must stay bounded. */
static void
s_start_jobs (zl_worker_t *self, int64_t now_ms)
{
    if (self->draining)
        return;
    zl_held_job_t *first = NULL, *last = NULL, *h;
    uint32_t n = 0;
    while ((!self->opts.ack_early || self->n_handed < self->n_threads) &&
           (h = s_backlog_pop (self))) {
        if (zl_worker_job_cancelled (&h->pub)) {
            s_hand_back (self, h, ZL_FAIL_TRANSIENT,
                         zl_worker_cancel_text (zl_worker_job_cancel_reason (&h->pub)));
            continue;
        }
        h->state = ZL_HELD_HANDED;
        self->n_handed++;
        if (self->opts.ack_early) {
            h->acked_early = true;
            s_settle (self, h, true, ZL_FAIL_UNSPECIFIED, NULL, 0, 0);
        }
        h->qnext = NULL;
        if (last)
            last->qnext = h;
        else
            first = h;
        last = h;
        n++;
    }
    if (!first)
        return;
    if (self->opts.ack_early)
        s_flush (self, now_ms); // the Acks leave before any handler starts
    pthread_mutex_lock (&self->lock);
    if (self->work_tail)
        self->work_tail->qnext = first;
    else
        self->work_head = first;
    self->work_tail = last;
    self->work_len += n;
    // One wake-up per job, and none when no thread sleeps: a thread that is
    // not waiting looks at the queue before it does. The wake-ups go after
    // the unlock, so that a woken thread does not wake only to wait for the
    // lock this thread still holds (a thread woken spuriously in between
    // finds the queue as it would after them).
    uint32_t wake = n < self->n_waiting ? n : self->n_waiting;
    pthread_mutex_unlock (&self->lock);
    s_wake_idle (self, wake);
}

/*  A job just received starts on the loop's own thread, before anything
    else, when idle threads outnumber the jobs waiting for one, so that one
    of them can take the loop over: the job's start waits for no other
    thread's wake-up. Returns the job (HANDED), taken from the backlog, or
    NULL (the loop then hands every job to the pool, s_start_jobs). */
static zl_held_job_t *
s_start_here (zl_worker_t *self)
{
    zl_held_job_t *h = self->backlog_head;
    if (self->draining || self->opts.ack_early || !h || zl_worker_job_cancelled (&h->pub))
        return NULL;
    if (self->dealer && zl_link_pending (self->dealer))
        return NULL; // more from the broker to take first: the loop stays here
    pthread_mutex_lock (&self->lock);
    // idle threads for what waits, for the rest of the backlog, and one for the loop
    bool here = self->n_waiting > self->work_len + (self->n_backlog - 1);
    pthread_mutex_unlock (&self->lock);
    if (!here)
        return NULL;
    s_backlog_pop (self);
    h->state = ZL_HELD_HANDED;
    self->n_handed++;
    return h;
}

/*  Leave the loop free while this thread runs a job (s_start_here found an
    idle thread to take it over if it needs one before the job ends). */
static void
s_free_loop (zl_worker_t *self, int64_t now_ms)
{
    pthread_mutex_lock (&self->lock);
    self->loop_free = true; // before the watch, which may fire at once
    pthread_mutex_unlock (&self->lock);
    s_watch (self, now_ms);
}

/*  Send Ready with our lanes and capacity: 0 once draining (the broker
    sends nothing new but keeps what we hold), and every lease we know of
    (held jobs, settlements not yet Settled): after a reconnect, the broker
    makes the old connection's other leases ready again at once, Dispatches
    that connection lost. Returns 0 or -1. */
static int
s_send_ready (zl_worker_t *self, int64_t now_ms)
{
    uint32_t capacity = self->draining ? 0 : self->opts.concurrency + self->opts.prefetch;
    size_t n = 0, cap = self->n_held + self->n_pending;
    zl_lease_ref_t *held = zl_malloc ((cap + 1) * sizeof *held);
    for (zl_held_job_t *h = self->held_head; h && n < cap; h = h->next)
        held[n++] = (zl_lease_ref_t){h->pub.job_id, h->pub.lease};
    zl_dlink_t *lists[] = {&self->unsent, &self->sent};
    for (size_t i = 0; i < 2; i++)
        for (zl_dlink_t *l = lists[i]->next; l != lists[i] && n < cap; l = l->next)
            held[n++] = (zl_lease_ref_t){((s_settle_t *)l)->job_id, ((s_settle_t *)l)->lease};
    // (a list too long for one frame is not sent: every lease then follows)
    bool listed = n <= S_READY_HELD_MAX;
    zl_msg_t m = {.kind = ZL_MSG_READY,
                  .u.ready = {.name = self->name,
                              .n_lanes = self->opts.n_lanes,
                              .lanes = (const char **)self->lanes,
                              .capacity = capacity,
                              .instance = self->instance,
                              .held_listed = listed,
                              .n_held = listed ? n : 0,
                              .held = held,
                              .heartbeat_ms = self->opts.heartbeat_ms}};
    int rc = s_send (self, &m, now_ms);
    free (held);
    return rc;
}

/*  Send the settlements not yet sent on this connection, as one Ack and one
    Nack frame, and move those that went out to the sent list. */
static void
s_send_settlements (zl_worker_t *self, int64_t now_ms)
{
    if (self->unsent.next == &self->unsent)
        return;
    if (self->cap_acks < self->n_pending) {
        self->cap_acks = self->n_pending;
        self->acks = zl_realloc (self->acks, self->cap_acks * sizeof *self->acks);
    }
    if (self->cap_nacks < self->n_pending) {
        self->cap_nacks = self->n_pending;
        self->nacks = zl_realloc (self->nacks, self->cap_nacks * sizeof *self->nacks);
    }
    size_t n_acks = 0, n_nacks = 0, result_bytes = 0;
    bool acks_out = true, nacks_out = false, any_ack = false;
    for (zl_dlink_t *l = self->unsent.next; l != &self->unsent; l = l->next) {
        s_settle_t *p = (s_settle_t *)l;
        if (p->ack) {
            // results make Ack frames big: one frame per S_ACK_FRAME_BYTES of them
            if (n_acks && result_bytes + p->result_len > S_ACK_FRAME_BYTES) {
                zl_msg_t m = {.kind = ZL_MSG_ACK, .u.ack = {n_acks, self->acks}};
                acks_out = acks_out && s_send (self, &m, now_ms) == 0;
                n_acks = 0;
                result_bytes = 0;
            }
            any_ack = true;
            result_bytes += p->result_len;
            self->acks[n_acks++] =
                (zl_ack_item_t){p->job_id, p->lease, p->run_us, {p->result, p->result_len}};
        } else
            self->nacks[n_nacks++] = (zl_nack_item_t){p->job_id, p->lease,          p->cls,
                                                      p->error,  p->retry_after_ms, p->run_us};
    }
    if (n_acks) {
        zl_msg_t m = {.kind = ZL_MSG_ACK, .u.ack = {n_acks, self->acks}};
        acks_out = acks_out && s_send (self, &m, now_ms) == 0;
    }
    acks_out = acks_out && any_ack;
    if (n_nacks) {
        zl_msg_t m = {.kind = ZL_MSG_NACK, .u.nack = {n_nacks, self->nacks}};
        nacks_out = s_send (self, &m, now_ms) == 0;
    }
    zl_dlink_t *next;
    for (zl_dlink_t *l = self->unsent.next; l != &self->unsent; l = next) {
        next = l->next;
        s_settle_t *p = (s_settle_t *)l;
        if (!(p->ack ? acks_out : nacks_out))
            continue; // its frame could not go out: retried at the next flush
        zl_dlink_unlink (l);
        zl_dlink_push (&self->sent, l);
        if (!p->counted) {
            p->counted = true;
            if (p->ack)
                S_COUNT (self, acked, 1);
            else
                S_COUNT (self, nacked, 1);
        }
    }
}

/*  Send Ready (if due), this turn's Acks, Nacks and Extends as one frame
    each, and a Heartbeat if nothing went out for a heartbeat interval. */
static void
s_flush (zl_worker_t *self, int64_t now_ms)
{
    if (!self->dealer)
        return; // kept for the next connection (extends are dropped)

    if (self->need_ready && s_send_ready (self, now_ms) == 0) {
        self->need_ready = false;
        s_pending_mark_unsent (self); // what came before Ready may be lost
    }

    // Extends first: a checkpoint saved before a job settled is stored before it
    if (self->n_extends) {
        zl_msg_t m = {.kind = ZL_MSG_EXTEND, .u.extend = {self->n_extends, self->extends}};
        if (s_send (self, &m, now_ms) == 0)
            S_COUNT (self, extends_sent, self->n_extends);
        self->n_extends = 0;
    }
    for (size_t i = 0; i < self->n_ckpt_out; i++)
        free (self->ckpt_out[i]);
    self->n_ckpt_out = 0;

    s_send_settlements (self, now_ms);

    if (now_ms - self->last_sent_ms >= (int64_t)self->opts.heartbeat_ms) {
        zl_msg_t m = {.kind = ZL_MSG_HEARTBEAT, .u.heartbeat.interval_ms = self->opts.heartbeat_ms};
        s_send (self, &m, now_ms);
    }
}

/*  Return how long the loop may sleep: until the earliest timer. */
static int
s_next_timeout (zl_worker_t *self, int64_t now_ms)
{
    int64_t next = now_ms + self->opts.heartbeat_ms;
    if (self->dealer) {
        next = s_min (next, self->last_heard_ms + s_silence_ms (self));
        next = s_min (next, self->last_sent_ms + self->opts.heartbeat_ms);
        int64_t link = zl_link_timeout (self->dealer, now_ms);
        if (link >= 0)
            next = s_min (next, now_ms + link);
    } else
        next = s_min (next, self->reconnect_at_ms);
    next = s_min (next, zl_held_timers_next_ms (self->timers));
    if (self->draining && !self->drain_cancelled)
        next = s_min (next, self->drain_deadline_ms);
    if (self->linger_deadline_ms)
        next = s_min (next, self->linger_deadline_ms);
    return next <= now_ms ? 0 : (int)(next - now_ms);
}

/*  While draining: true once no job is held and every settlement is
    confirmed, or the wait for confirmations (liveness intervals) ran out. */
static bool
s_finished (zl_worker_t *self, int64_t now_ms)
{
    if (!self->draining || self->n_held)
        return false;
    if (!self->n_pending)
        return true;
    if (!self->linger_deadline_ms)
        self->linger_deadline_ms = now_ms + (int64_t)self->opts.liveness * self->opts.heartbeat_ms;
    if (now_ms < self->linger_deadline_ms)
        return false;
    zl_warn (S_COMPONENT, "exiting with %zu settlements unconfirmed (the broker will requeue them)",
             self->n_pending);
    return true;
}

// ------------------------------------------------------------------ run

/*  The loop, on whichever thread of the pool holds it (signals are let in
    only while it waits, with the caller's mask, and while idle threads
    wait: they land in a wait they interrupt, never in a handler; every
    thread of the pool blocks them otherwise, so a job the loop's thread
    runs needs no change of mask before or after). One turn: fire due timers, start jobs on free
   handlers, send what the last events produced (one frame per kind), then wait for the earliest
   timer or an event and take it: stop requests, finished jobs, broker messages. It runs until the
   worker is done (S_LOOP_DONE, with loop_rc; on an error the jobs still held are cancelled and the
   queued ones taken back), or until this thread takes a job just received to run itself and passes
   the loop on (S_LOOP_PASSED, the job in `*job`). */
static s_loop_end_t
s_loop (zl_worker_t *self, zl_held_job_t **job)
{
    s_take_results (self); // this thread's own job among them, when it comes back
    int64_t now = zl_clock_mono_ms ();
    int rc = 0;
    for (;;) {
        s_tick (self, now);
        s_start_jobs (self, now);
        s_flush (self, now);
        if (self->dealer)
            zl_link_flush (self->dealer);
        if (s_finished (self, now))
            break;

        struct pollfd items[3] = {{self->done_fd, POLLIN, 0},
                                  {self->wake_fd, POLLIN, 0},
                                  {self->dealer ? zl_link_fd (self->dealer) : -1,
                                   self->dealer ? zl_link_poll_events (self->dealer) : 0, 0}};
        int ms = s_next_timeout (self, now);
        struct timespec wait = {ms / 1000, (long)(ms % 1000) * 1000000L};
        int n = ppoll (items, 3, &wait, &self->loop_sigmask);
        if (n < 0 && errno != EINTR) {
            zl_error (S_COMPONENT, "poll: %s", strerror (errno));
            rc = -1;
            break;
        }
        now = zl_clock_mono_ms ();
        if (n > 0 && (items[1].revents & POLLIN)) {
            uint64_t count;
            ssize_t got = read (self->wake_fd, &count, sizeof count);
            (void)got; // the stop counter below is the truth
        }
        if (atomic_load (&self->stop_requests) > 0 && !self->draining)
            s_begin_drain (self, now);
        if (n > 0 && (items[0].revents & POLLIN))
            s_take_results (self);
        if (atomic_exchange (&self->ckpt_flag, 0)) // handlers saved progress
            for (zl_held_job_t *h = self->held_head; h; h = h->next)
                s_collect_checkpoint (self, h);
        if (self->dealer) {
            if (items[2].fd >= 0) // no read when the poll saw nothing come
                zl_link_polled (self->dealer, n > 0 ? items[2].revents : 0);
            zl_link_pump (self->dealer, now); // dials, handshakes, writes that waited
            s_recv_all (self, now);
            s_link_events (self);
            // a job just received starts before anything else: here, or
            // on a handler thread
            zl_held_job_t *mine = s_start_here (self);
            s_start_jobs (self, now);
            if (mine) {
                s_free_loop (self, now);
                *job = mine;
                return S_LOOP_PASSED;
            }
        }
    }

    // On error, release whatever is still held: queued jobs are taken back
    // and running ones cancelled, so that the threads can be joined.
    s_cancel_all (self, ZL_WORKER_SHUTDOWN);
    (void)s_work_take_all (self); // its jobs are still held: forgotten after the join
    self->loop_rc = rc;
    return S_LOOP_DONE;
}

/*  The pool's file descriptors: done_fd and work_fd (eventfds), the epoll
    sets idle threads wait on (pool_ep: work_fd, and loop_ep, off until the
    loop is free) and the loop's watch (loop_ep: done_fd, wake_fd, timer_fd
    and the link's socket, s_watch). Returns 0 or -1 (errno). */
static int
s_open_fds (zl_worker_t *self)
{
    self->done_fd = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
    self->work_fd = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE);
    self->end_fd = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
    self->pool_ep = epoll_create1 (EPOLL_CLOEXEC);
    self->loop_ep = epoll_create1 (EPOLL_CLOEXEC);
    self->timer_fd = timerfd_create (CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    self->watch_link_fd = -1;
    if (self->done_fd < 0 || self->work_fd < 0 || self->end_fd < 0 || self->pool_ep < 0 ||
        self->loop_ep < 0 || self->timer_fd < 0)
        return -1;
    int loop_fds[] = {self->done_fd, self->wake_fd, self->timer_fd};
    for (size_t i = 0; i < sizeof loop_fds / sizeof loop_fds[0]; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = loop_fds[i]};
        if (epoll_ctl (self->loop_ep, EPOLL_CTL_ADD, loop_fds[i], &ev) != 0)
            return -1;
    }
    struct epoll_event work = {.events = EPOLLIN, .data.fd = self->work_fd};
    struct epoll_event end = {.events = EPOLLIN, .data.fd = self->end_fd};
    struct epoll_event watch = {.events = 0, .data.fd = self->loop_ep}; // off
    if (epoll_ctl (self->pool_ep, EPOLL_CTL_ADD, self->work_fd, &work) != 0 ||
        epoll_ctl (self->pool_ep, EPOLL_CTL_ADD, self->end_fd, &end) != 0 ||
        epoll_ctl (self->pool_ep, EPOLL_CTL_ADD, self->loop_ep, &watch) != 0)
        return -1;
    return 0;
}

static void
s_close_fds (zl_worker_t *self)
{
    int *fds[] = {&self->done_fd, &self->work_fd, &self->end_fd,
                  &self->pool_ep, &self->loop_ep, &self->timer_fd};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++) {
        if (*fds[i] >= 0)
            close (*fds[i]);
        *fds[i] = -1;
    }
}

int
zl_worker_run (zl_worker_t *self)
{
    if (self->started) {
        zl_error (S_COMPONENT, "zl_worker_run called twice");
        return -1;
    }
    self->started = true;
    sigset_t caller_mask, all;
    sigfillset (&all);
    pthread_sigmask (SIG_SETMASK, &all, &caller_mask); // let in only while waiting
    self->loop_sigmask = caller_mask;                  // the loop's, on whichever thread runs it
    if (s_open_fds (self) != 0) {
        zl_error (S_COMPONENT, "cannot create the pool's eventfds and epoll sets: %s",
                  strerror (errno));
        s_close_fds (self);
        pthread_sigmask (SIG_SETMASK, &caller_mask, NULL);
        return -1;
    }
    self->codec = zl_codec_new ();
    int rc = s_connect (self, zl_clock_mono_ms ());
    if (rc == 0)
        rc = s_start_threads (self);
    if (rc == 0) {
        zl_info (S_COMPONENT,
                 "%s (instance %016" PRIx64 ") serving %zu lanes with %u handlers, capacity %u",
                 self->name, self->instance, self->opts.n_lanes, self->opts.concurrency,
                 self->opts.concurrency + self->opts.prefetch);
        // this thread starts with the loop and takes part in the pool
        rc = s_pool (self, true);
    } else {
        s_cancel_all (self, ZL_WORKER_SHUTDOWN);
        (void)s_work_take_all (self);
    }
    pthread_sigmask (SIG_SETMASK, &caller_mask, NULL);
    s_stop_threads (self);
    s_take_results (self);
    self->backlog_head = self->backlog_tail = NULL;
    self->n_backlog = 0;
    while (self->held_head)
        s_held_forget (self, self->held_head);
    zl_link_destroy (&self->dealer);
    s_close_fds (self);
    zl_codec_destroy (&self->codec);
    zl_info (S_COMPONENT, "%s stopped", self->name);
    return rc;
}
