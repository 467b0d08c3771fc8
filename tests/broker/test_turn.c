/*  test_turn: the broker's turn, its order and its promise, through the
    broker's public API (zl_broker_feed, zl_broker_turn) on the in-process
    harness the fuzz targets use (tests/support/broker_harness: inproc peers,
    a fake clock), with store faults injected through zl_store_set_fault.

    The order: every reply that promises a state change (Credit, Accepted,
    Rejected, Dispatch, Settled, an admin reply that changed something, a
    DeadLetter event) leaves after the turn's commit. The fault hook is also
    the observer: asked for the commit, it reads what the peers received so
    far, which must hold none of them (an Error for bad input, sent at once,
    shows that it would see them). Within the flush a worker's Dispatch
    goes before the producer's Accepted (read from the broker's wire_dump,
    which records the frames in the order they were sent).

    The promise: when the commit fails (or a store write of the turn does),
    none of them leaves, zl_broker_feed and zl_broker_turn return -1 and keep
    refusing, and a broker restarted on the same data dir recovers exactly
    what earlier turns committed: the failed turn's Submit, Ack, dead-letter
    and redrive are not there. */
#include "broker.h"
#include "broker_harness.h"
#include "clock.h"
#include "codec.h"
#include "config.h"
#include "log.h"
#include "msg.h"
#include "store.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>

#define MAX_SEEN 64 // messages one turn sends the harness
#define MAX_IDS 16  // job ids one message carries

// ---------------------------------------------------------------- what arrived
// One message a harness peer (or the SUB) received, as much as the tests read.
typedef struct {
    zlh_sock_t sock;
    int peer;
    zl_msg_kind_t kind;
    size_t n; // jobs, items, dead letters
    uint64_t ids[MAX_IDS];
    uint64_t leases[MAX_IDS];
    uint32_t attempts[MAX_IDS]; // dispatch
    uint64_t limit;             // credit
    zl_reject_code_t reject;    // rejected: the first job's
    zl_error_code_t error;      // error
    bool ok;                    // admin reply
    uint64_t count;             //   redrive, purge
    size_t n_workers;           //   workers: how many, and the first's
    char worker[16], worker_lane[16];
    uint64_t groups_matched;
    char group_tenant[16]; // the first row's
    uint64_t group_ready;
    uint32_t worker_capacity, worker_in_flight, worker_heartbeat_ms;
    size_t n_groups, n_tenants; //   stats
    uint32_t tenants_known;
    uint64_t lane_dlq, lane_oldest_dlq, group_dlq, group_oldest_dlq; // the first lane's, group's
    char topic[64];                                                  // event
} seen_t;

typedef struct {
    seen_t items[MAX_SEEN];
    size_t n;
} seen_log_t;

static struct {
    char *dir;
    zl_broker_config_t cfg;
    zl_broker_t *broker;
    zlh_t *h;            // NULL while a broker starts: the hook then only counts
    seen_log_t early;    // what had arrived when the turn asked for its commit
    seen_log_t got;      // what arrived after (zl_broker_feed returned)
    int commits;         // commits asked for in the last feed
    int commit_fault;    // the error the commits fail with (0 = none)
    int write_fault;     // the error one write fails with ...
    int write_fault_at;  //   the how-manieth write from now (0 = none)
    int writes;          // writes since the test last set it to 0
    char *wire_dump;     // the broker's wire_dump file, if the test set one
    bool dispatch_early; // the broker's default: plain jobs may leave before the commit
} T;

static void
s_record (void *ctx, zlh_sock_t sock, int peer, const char *topic, const zl_msg_t *m)
{
    seen_log_t *log = ctx;
    if (log->n == MAX_SEEN)
        fail_msg ("more than %d messages in one turn", MAX_SEEN);
    seen_t *s = &log->items[log->n++];
    memset (s, 0, sizeof *s);
    s->sock = sock;
    s->peer = peer;
    s->kind = m->kind;
    if (topic)
        snprintf (s->topic, sizeof s->topic, "%s", topic);
    switch (m->kind) {
    case ZL_MSG_ACCEPTED:
        for (size_t i = 0; i < m->u.accepted.n && s->n < MAX_IDS; i++)
            s->ids[s->n++] = m->u.accepted.jobs[i].job_id;
        break;
    case ZL_MSG_REJECTED:
        s->n = m->u.rejected.n;
        s->reject = m->u.rejected.n ? m->u.rejected.jobs[0].code : ZL_REJECT_UNSPECIFIED;
        break;
    case ZL_MSG_CREDIT: s->limit = m->u.credit.limit; break;
    case ZL_MSG_DISPATCH:
        for (size_t i = 0; i < m->u.dispatch.n && s->n < MAX_IDS; i++) {
            s->ids[s->n] = m->u.dispatch.jobs[i].job_id;
            s->leases[s->n] = m->u.dispatch.jobs[i].lease;
            s->attempts[s->n++] = m->u.dispatch.jobs[i].attempt;
        }
        break;
    case ZL_MSG_SETTLED:
        for (size_t i = 0; i < m->u.settled.n && s->n < MAX_IDS; i++) {
            s->ids[s->n] = m->u.settled.items[i].job_id;
            s->leases[s->n++] = m->u.settled.items[i].lease;
        }
        break;
    case ZL_MSG_DEAD_LETTER:
        s->ids[0] = m->u.dead_letter.job_id;
        s->n = 1;
        break;
    case ZL_MSG_ERROR: s->error = m->u.error.code; break;
    case ZL_MSG_ADMIN_REPLY:
        s->ok = m->u.admin_reply.ok;
        s->count = m->u.admin_reply.count;
        for (size_t i = 0; i < m->u.admin_reply.n_dead_letters && s->n < MAX_IDS; i++)
            s->ids[s->n++] = m->u.admin_reply.dead_letters[i].job_id;
        if (m->u.admin_reply.result == ZL_ADMIN_RESULT_STATS) {
            const zl_stats_t *st = &m->u.admin_reply.stats;
            s->n_groups = st->n_groups;
            s->n_tenants = st->n_tenants;
            s->tenants_known = st->tenants_known;
            s->lane_dlq = st->n_lanes ? st->lanes[0].dlq : 0;
            s->lane_oldest_dlq = st->n_lanes ? st->lanes[0].oldest_dlq_age_ms : 0;
            s->group_dlq = st->n_groups ? st->groups[0].dlq : 0;
            s->group_oldest_dlq = st->n_groups ? st->groups[0].oldest_dlq_age_ms : 0;
            s->groups_matched = st->groups_matched;
            snprintf (s->group_tenant, sizeof s->group_tenant, "%s",
                      st->n_groups ? st->groups[0].tenant : "");
            s->group_ready = st->n_groups ? st->groups[0].ready : 0;
        }
        s->n_workers = m->u.admin_reply.n_workers;
        if (s->n_workers) {
            const zl_worker_info_t *w = &m->u.admin_reply.workers[0];
            snprintf (s->worker, sizeof s->worker, "%s", w->name);
            snprintf (s->worker_lane, sizeof s->worker_lane, "%s", w->n_lanes ? w->lanes[0] : "");
            s->worker_capacity = w->capacity;
            s->worker_in_flight = w->in_flight;
            s->worker_heartbeat_ms = w->heartbeat_ms;
        }
        break;
    default: break;
    }
}

// The store's fault hook, and the observer of the commit.
static int
s_fault (void *ctx, zl_store_fault_t where)
{
    if (where == ZL_STORE_FAULT_FLUSH) // the commit thread's (not this test's)
        return 0;
    if (where == ZL_STORE_FAULT_COMMIT) {
        T.commits++;
        if (T.h)
            zlh_drain (T.h, s_record, &T.early);
        return T.commit_fault;
    }
    if (++T.writes == T.write_fault_at) {
        T.write_fault_at = 0; // once
        return T.write_fault;
    }
    return 0;
}

// The first message of `kind` in `log` (to `sock`, any peer), or NULL.
static const seen_t *
s_find (const seen_log_t *log, zlh_sock_t sock, zl_msg_kind_t kind)
{
    for (size_t i = 0; i < log->n; i++)
        if (log->items[i].sock == sock && log->items[i].kind == kind)
            return &log->items[i];
    return NULL;
}

// A message that says a state change happened (it must wait for the commit).
static bool
s_promises (const seen_t *s)
{
    switch (s->kind) {
    case ZL_MSG_DISPATCH: return !T.dispatch_early; // (a plain job's may go before)
    case ZL_MSG_ACCEPTED:
    case ZL_MSG_REJECTED:
    case ZL_MSG_CREDIT:
    case ZL_MSG_SETTLED:
    case ZL_MSG_DEAD_LETTER:
    case ZL_MSG_ADMIN_REPLY: return true;
    default: return false;
    }
}

static void
s_assert_no_promise (const seen_log_t *log, const char *when)
{
    for (size_t i = 0; i < log->n; i++)
        if (s_promises (&log->items[i]))
            fail_msg ("%s: a %s reached %c%d", when, zl_msg_kind_name (log->items[i].kind),
                      "pwae"[log->items[i].sock], log -> items[i].peer);
}

// ---------------------------------------------------------------- the broker
static void
s_start (void)
{
    zl_broker_config_defaults (&T.cfg);
    zlh_config_inproc (&T.cfg, T.dir);
    zl_broker_config_lane (&T.cfg, "a");
    // the order tested here is the strict one, but where a test asks
    T.cfg.dispatch_after_commit = !T.dispatch_early;
    if (T.wire_dump)
        T.cfg.wire_dump = strdup (T.wire_dump);
    char err[512];
    T.broker = zl_broker_new (&T.cfg, err, sizeof err);
    if (!T.broker)
        fail_msg ("zl_broker_new: %s", err);
    zlh_t *h = zlh_new (T.broker);
    assert_non_null (h);
    T.h = h;
}

static void
s_stop (void)
{
    zlh_destroy (&T.h);
    zl_broker_destroy (&T.broker);
    zl_broker_config_free (&T.cfg);
}

// Stop and start again on the same data dir, faults cleared.
static void
s_restart (void)
{
    T.commit_fault = T.write_fault = T.write_fault_at = 0;
    s_stop ();
    s_start ();
}

static int
s_setup (void **state)
{
    (void)state;
    memset (&T, 0, sizeof T);
    zl_log_set_level (ZL_LOG_ERROR);
    T.dir = zlh_tmpdir ("turn");
    assert_non_null (T.dir);
    zl_store_set_fault (s_fault, NULL);
    s_start ();
    return 0;
}

static int
s_teardown (void **state)
{
    (void)state;
    s_stop ();
    zl_store_set_fault (NULL, NULL);
    free (T.wire_dump); // (the file is in T.dir)
    zlh_rmdir (T.dir);
    free (T.dir);
    return 0;
}

// ---------------------------------------------------------------- feeding
// Feed `msg` as peer `peer` of `sock`: one turn. What arrived before its
// commit is in T.early, the rest in T.got. Returns zl_broker_feed's answer.
static int
s_feed (zlh_sock_t sock, int peer, const zl_msg_t *msg)
{
    T.early.n = T.got.n = 0;
    T.commits = 0;
    int rc = zlh_feed (T.h, sock, peer, msg);
    zlh_drain (T.h, s_record, &T.got);
    return rc;
}

// Feed and expect a committed turn whose promises all came after the commit.
static void
s_feed_ok (zlh_sock_t sock, int peer, const zl_msg_t *msg)
{
    assert_int_equal (s_feed (sock, peer, msg), 0);
    assert_int_equal (T.commits, 1);
    s_assert_no_promise (&T.early, "before the commit");
}

// Feed into a failing turn: -1, and nothing that promises anything.
static void
s_feed_fails (zlh_sock_t sock, int peer, const zl_msg_t *msg)
{
    assert_int_equal (s_feed (sock, peer, msg), -1);
    s_assert_no_promise (&T.early, "failed turn, before the commit");
    s_assert_no_promise (&T.got, "failed turn");
}

static zl_msg_t
s_hello_msg (void)
{
    zl_msg_t m = {.kind = ZL_MSG_HELLO};
    m.u.hello.client = "test-turn";
    return m;
}

static void
s_hello (int peer)
{
    zl_msg_t m = s_hello_msg ();
    s_feed_ok (ZLH_FRONTEND, peer, &m);
}

// A Submit of `n` jobs (tenant t, lane a), seqs first_seq.. .
static zl_msg_t
s_submit_msg (uint64_t first_seq, size_t n)
{
    static zl_job_spec_t specs[MAX_IDS];
    assert_true (n <= MAX_IDS);
    for (size_t i = 0; i < n; i++)
        specs[i] = (zl_job_spec_t){.seq = first_seq + i,
                                   .tenant = "t",
                                   .lane = "a",
                                   .payload = {(const uint8_t *)"payload", 7},
                                   .idempotency_key = ""};
    zl_msg_t m = {.kind = ZL_MSG_SUBMIT};
    m.u.submit = (zl_submit_t){n, specs};
    return m;
}

// Submit `n` jobs from producer `peer` (after its Hello); their ids to `ids`.
static void
s_submit (int peer, uint64_t first_seq, size_t n, uint64_t *ids)
{
    zl_msg_t m = s_submit_msg (first_seq, n);
    s_feed_ok (ZLH_FRONTEND, peer, &m);
    const seen_t *acc = s_find (&T.got, ZLH_FRONTEND, ZL_MSG_ACCEPTED);
    assert_non_null (acc);
    assert_int_equal (acc->peer, peer);
    assert_int_equal (acc->n, n);
    for (size_t i = 0; i < n; i++)
        ids[i] = acc->ids[i];
}

static zl_msg_t
s_ready_msg (int peer, uint32_t capacity)
{
    static const char *lanes[] = {"a"};
    static const char *names[ZLH_PEERS] = {"w0", "w1", "w2"};
    zl_msg_t m = {.kind = ZL_MSG_READY};
    m.u.ready = (zl_ready_t){names[peer], 1, lanes, capacity, 0};
    return m;
}

static zl_msg_t
s_ack_msg (uint64_t id, uint64_t lease)
{
    static zl_ack_item_t item;
    item = (zl_ack_item_t){id, lease, 1000};
    zl_msg_t m = {.kind = ZL_MSG_ACK};
    m.u.ack = (zl_ack_t){1, &item};
    return m;
}

static zl_msg_t
s_nack_permanent_msg (uint64_t id, uint64_t lease)
{
    static zl_nack_item_t item;
    item = (zl_nack_item_t){id, lease, ZL_FAIL_PERMANENT, "bad input", 0, 1000};
    zl_msg_t m = {.kind = ZL_MSG_NACK};
    m.u.nack = (zl_nack_t){1, &item};
    return m;
}

static zl_msg_t
s_admin_msg (zl_admin_op_t op, uint64_t id)
{
    static uint64_t ids[1];
    zl_msg_t m = {.kind = ZL_MSG_ADMIN_REQUEST};
    zl_admin_request_t *r = &m.u.admin_request;
    r->request_id = 7;
    r->op = op;
    r->filter.lane = r->filter.tenant = "";
    r->lane = "";
    if (id) {
        ids[0] = id;
        r->filter.n_ids = 1;
        r->filter.ids = ids;
    } else
        r->filter.all = true;
    r->limit = 100;
    return m;
}

// The dead letters' ids, by an admin "dlq list" (ascending as listed).
static size_t
s_dlq_list (uint64_t *ids)
{
    zl_msg_t m = s_admin_msg (ZL_ADMIN_DLQ_LIST, 0);
    assert_int_equal (s_feed (ZLH_ADMIN, 0, &m), 0);
    const seen_t *r = s_find (&T.got, ZLH_ADMIN, ZL_MSG_ADMIN_REPLY);
    if (!r)
        r = s_find (&T.early, ZLH_ADMIN, ZL_MSG_ADMIN_REPLY); // it describes memory: at once
    assert_non_null (r);
    assert_true (r->ok);
    memcpy (ids, r->ids, r->n * sizeof *ids);
    return r->n;
}

// The jobs a fresh worker `peer` with room for all gets at once (before or
// after the commit), sorted.
static size_t
s_take_all (int peer, uint64_t *ids, uint64_t *leases, uint32_t *attempts)
{
    zl_msg_t m = s_ready_msg (peer, MAX_IDS);
    s_feed_ok (ZLH_BACKEND, peer, &m);
    size_t n = 0;
    for (size_t i = 0; i < T.early.n + T.got.n; i++) {
        const seen_t *s = i < T.early.n ? &T.early.items[i] : &T.got.items[i - T.early.n];
        if (s->kind != ZL_MSG_DISPATCH)
            continue;
        assert_int_equal (s->peer, peer);
        for (size_t j = 0; j < s->n && n < MAX_IDS; j++, n++) {
            ids[n] = s->ids[j];
            if (leases)
                leases[n] = s->leases[j];
            if (attempts)
                attempts[n] = s->attempts[j];
        }
    }
    for (size_t i = 1; i < n; i++) // insertion sort, ids with their leases
        for (size_t j = i; j > 0 && ids[j - 1] > ids[j]; j--) {
            uint64_t t = ids[j];
            ids[j] = ids[j - 1];
            ids[j - 1] = t;
            if (leases) {
                t = leases[j];
                leases[j] = leases[j - 1];
                leases[j - 1] = t;
            }
            if (attempts) {
                uint32_t a = attempts[j];
                attempts[j] = attempts[j - 1];
                attempts[j - 1] = a;
            }
        }
    return n;
}

// After a failed turn: the broker refuses every further turn, fed or
// polled, and sends nothing that promises (the failed turn's held replies
// included), even once the store would work again (the fault was transient).
static void
s_assert_stopped (void)
{
    T.commit_fault = T.write_fault = T.write_fault_at = 0;
    zl_msg_t hello = s_hello_msg ();
    assert_int_equal (s_feed (ZLH_FRONTEND, 2, &hello), -1);
    s_assert_no_promise (&T.early, "stopped broker, fed");
    s_assert_no_promise (&T.got, "stopped broker, fed");
    T.early.n = T.got.n = 0;
    zlh_clock_advance_us (2000000); // timers due: heartbeats, liveness
    assert_int_equal (zl_broker_turn (T.broker, 0), -1);
    zlh_drain (T.h, s_record, &T.got);
    s_assert_no_promise (&T.early, "stopped broker, a turn");
    s_assert_no_promise (&T.got, "stopped broker, a turn");
}

// ---------------------------------------------------------------- the order
static void
test_turn_order_replies_after_the_commit (void **state)
{
    (void)state;
    // bad input is answered at once, before the commit: the observer sees it
    zl_msg_t early_submit = s_submit_msg (1, 1);
    s_feed_ok (ZLH_FRONTEND, 1, &early_submit);
    const seen_t *err = s_find (&T.early, ZLH_FRONTEND, ZL_MSG_ERROR);
    assert_non_null (err);
    assert_int_equal (err->peer, 1);
    assert_int_equal (err->error, ZL_ERR_NOT_READY);

    // Hello: Credit, after the commit
    s_hello (0);
    const seen_t *credit = s_find (&T.got, ZLH_FRONTEND, ZL_MSG_CREDIT);
    assert_non_null (credit);
    assert_int_equal (credit->peer, 0);
    assert_true (credit->limit > 0);
    assert_null (s_find (&T.got, ZLH_FRONTEND, ZL_MSG_ACCEPTED));

    // Submit: Accepted, after the commit
    uint64_t ids[2];
    s_submit (0, 1, 2, ids);
    assert_true (ids[0] < ids[1]);

    // Ready: Dispatch
    zl_msg_t ready = s_ready_msg (0, 1);
    s_feed_ok (ZLH_BACKEND, 0, &ready);
    const seen_t *d = s_find (&T.got, ZLH_BACKEND, ZL_MSG_DISPATCH);
    assert_non_null (d);
    assert_int_equal (d->peer, 0);
    assert_int_equal (d->n, 1);
    assert_int_equal (d->ids[0], ids[0]);
    assert_int_equal (d->attempts[0], 1);
    uint64_t lease0 = d->leases[0];

    // Ack: Settled, then the freed capacity's Dispatch
    zl_msg_t ack = s_ack_msg (ids[0], lease0);
    s_feed_ok (ZLH_BACKEND, 0, &ack);
    const seen_t *settled = s_find (&T.got, ZLH_BACKEND, ZL_MSG_SETTLED);
    assert_non_null (settled);
    assert_int_equal (settled->n, 1);
    assert_int_equal (settled->ids[0], ids[0]);
    assert_int_equal (settled->leases[0], lease0);
    d = s_find (&T.got, ZLH_BACKEND, ZL_MSG_DISPATCH);
    assert_non_null (d);
    assert_true (settled < d); // in the order they arrived
    assert_int_equal (d->ids[0], ids[1]);
    uint64_t lease1 = d->leases[0];

    // Nack PERMANENT: Settled, and the DeadLetter event on the PUB
    zl_msg_t nack = s_nack_permanent_msg (ids[1], lease1);
    s_feed_ok (ZLH_BACKEND, 0, &nack);
    settled = s_find (&T.got, ZLH_BACKEND, ZL_MSG_SETTLED);
    assert_non_null (settled);
    assert_int_equal (settled->ids[0], ids[1]);
    const seen_t *ev = s_find (&T.got, ZLH_EVENTS, ZL_MSG_DEAD_LETTER);
    assert_non_null (ev);
    assert_int_equal (ev->ids[0], ids[1]);
    assert_string_equal (ev->topic, "dlq.a.t");

    // redrive: "redrove 1", and the job goes out again (attempt 2)
    zl_msg_t redrive = s_admin_msg (ZL_ADMIN_DLQ_REDRIVE, ids[1]);
    s_feed_ok (ZLH_ADMIN, 0, &redrive);
    const seen_t *reply = s_find (&T.got, ZLH_ADMIN, ZL_MSG_ADMIN_REPLY);
    assert_non_null (reply);
    assert_true (reply->ok);
    assert_int_equal (reply->count, 1);
    d = s_find (&T.got, ZLH_BACKEND, ZL_MSG_DISPATCH);
    assert_non_null (d);
    assert_int_equal (d->ids[0], ids[1]);
}

// The kinds of the frames the broker sent, in the order it sent them, as its
// wire_dump recorded them from byte `from` on (4-byte little-endian length,
// then the frame). Returns how many.
static size_t
s_dumped_kinds (off_t from, zl_msg_kind_t *kinds, size_t max)
{
    FILE *f = fopen (T.wire_dump, "rb");
    assert_non_null (f);
    assert_int_equal (fseeko (f, from, SEEK_SET), 0);
    zl_codec_t *codec = zl_codec_new ();
    static uint8_t frame[1 << 16];
    uint8_t len[4];
    size_t n = 0;
    while (n < max && fread (len, 1, sizeof len, f) == sizeof len) {
        size_t size = len[0] | (size_t)len[1] << 8 | (size_t)len[2] << 16 | (size_t)len[3] << 24;
        assert_true (size <= sizeof frame);
        assert_int_equal (fread (frame, 1, size, f), size);
        zl_msg_t m;
        assert_int_equal (zl_codec_decode (codec, frame, size, &m), ZL_DECODE_OK);
        kinds[n++] = m.kind;
    }
    zl_codec_destroy (&codec);
    fclose (f);
    return n;
}

// A job submitted to an idle worker: the turn sends its Dispatch before the
// producer's Accepted (the job starts one send sooner), both after the commit.
static void
test_turn_dispatch_goes_before_accepted (void **state)
{
    (void)state;
    char path[4096];
    snprintf (path, sizeof path, "%s/wire.dump", T.dir);
    T.wire_dump = strdup (path);
    s_restart ();
    s_hello (0);
    zl_msg_t ready = s_ready_msg (0, 1);
    s_feed_ok (ZLH_BACKEND, 0, &ready);
    struct stat st;
    assert_int_equal (stat (T.wire_dump, &st), 0);

    zl_msg_t submit = s_submit_msg (1, 1);
    s_feed_ok (ZLH_FRONTEND, 0, &submit);
    assert_non_null (s_find (&T.got, ZLH_FRONTEND, ZL_MSG_ACCEPTED));
    assert_non_null (s_find (&T.got, ZLH_BACKEND, ZL_MSG_DISPATCH));
    zl_msg_kind_t kinds[MAX_SEEN];
    size_t n = s_dumped_kinds (st.st_size, kinds, MAX_SEEN);
    size_t dispatch = n, accepted = n;
    for (size_t i = 0; i < n; i++) {
        if (kinds[i] == ZL_MSG_DISPATCH && dispatch == n)
            dispatch = i;
        if (kinds[i] == ZL_MSG_ACCEPTED && accepted == n)
            accepted = i;
    }
    assert_true (dispatch < n);
    assert_true (accepted < n);
    assert_true (dispatch < accepted);
}

// The Dispatch of job `id` in `log`, or NULL.
static const seen_t *
s_find_dispatch (const seen_log_t *log, uint64_t id)
{
    for (size_t i = 0; i < log->n; i++) {
        const seen_t *s = &log->items[i];
        for (size_t j = 0; s->kind == ZL_MSG_DISPATCH && j < s->n; j++)
            if (s->ids[j] == id)
                return s;
    }
    return NULL;
}

// A broker with the default on LMDB (plain jobs may leave before the
// commit), producer 0 said Hello and worker 0 is ready for 4 jobs.
static void
s_restart_early (void)
{
    T.dispatch_early = true;
    s_restart ();
    s_hello (0);
    zl_msg_t ready = s_ready_msg (0, 4);
    s_feed_ok (ZLH_BACKEND, 0, &ready);
}

// The broker's default on LMDB: a plain job goes to its worker before the
// turn's commit, the producer's Accepted after it; a job that waits on
// another (an ordering key) still waits for the commit.
static void
test_dispatch_before_the_commit (void **state)
{
    (void)state;
    s_restart_early ();

    zl_msg_t submit = s_submit_msg (1, 1);
    assert_int_equal (s_feed (ZLH_FRONTEND, 0, &submit), 0);
    assert_int_equal (T.commits, 1);
    const seen_t *acc = s_find (&T.got, ZLH_FRONTEND, ZL_MSG_ACCEPTED);
    assert_non_null (acc);
    assert_null (s_find (&T.early, ZLH_FRONTEND, ZL_MSG_ACCEPTED));
    const seen_t *d = s_find_dispatch (&T.early, acc->ids[0]);
    assert_non_null (d);
    assert_int_equal (d->peer, 0);
    assert_null (s_find (&T.got, ZLH_BACKEND, ZL_MSG_DISPATCH));

    zl_msg_t keyed = s_submit_msg (2, 1);
    keyed.u.submit.jobs[0].ordering_key = "k";
    assert_int_equal (s_feed (ZLH_FRONTEND, 0, &keyed), 0);
    acc = s_find (&T.got, ZLH_FRONTEND, ZL_MSG_ACCEPTED);
    assert_non_null (acc);
    assert_null (s_find (&T.early, ZLH_BACKEND, ZL_MSG_DISPATCH));
    assert_non_null (s_find_dispatch (&T.got, acc->ids[0]));
}

// A schedule's tick is no plain job: a crash before the commit of its
// enqueue would enqueue the tick again after the restart, so its Dispatch
// waits for that commit (the one job per tick runs once).
static void
test_tick_waits_for_its_commit (void **state)
{
    (void)state;
    s_restart_early ();
    zl_msg_t add = s_admin_msg (ZL_ADMIN_SCHEDULE_ADD, 0);
    add.u.admin_request.schedule =
        (zl_schedule_info_t){.name = "every", .cron = "@every 1s", .tenant = "t", .lane = "a"};
    assert_int_equal (s_feed (ZLH_ADMIN, 0, &add), 0);
    assert_null (s_find (&T.got, ZLH_BACKEND, ZL_MSG_DISPATCH)); // no tick yet

    zlh_clock_advance_us (1100 * 1000);
    zl_msg_t submit = s_submit_msg (1, 1); // a turn: the tick fires in it
    assert_int_equal (s_feed (ZLH_FRONTEND, 0, &submit), 0);
    const seen_t *acc = s_find (&T.got, ZLH_FRONTEND, ZL_MSG_ACCEPTED);
    assert_non_null (acc);
    const seen_t *early = s_find (&T.early, ZLH_BACKEND, ZL_MSG_DISPATCH);
    assert_non_null (early); // the submitted job, before the commit
    assert_int_equal (early->n, 1);
    assert_int_equal (early->ids[0], acc->ids[0]);
    const seen_t *after = s_find (&T.got, ZLH_BACKEND, ZL_MSG_DISPATCH);
    assert_non_null (after); // the tick's job, after it
    assert_int_equal (after->n, 1);
    assert_int_not_equal (after->ids[0], acc->ids[0]);
    assert_int_equal (T.commits, 1);
}

// A job sent before a commit that failed was never Accepted; the restarted
// broker does not hold it, and gives its id to no other job (the idempotency
// key "job-<id>" the worker saw stays that job's).
static void
test_dispatch_before_a_failed_commit (void **state)
{
    (void)state;
    s_restart_early ();
    uint64_t kept;
    s_submit (0, 1, 1, &kept); // (sent before its commit, which succeeded)
    assert_non_null (s_find_dispatch (&T.early, kept));

    T.commit_fault = EIO;
    zl_msg_t submit = s_submit_msg (2, 1);
    assert_int_equal (s_feed (ZLH_FRONTEND, 0, &submit), -1);
    assert_null (s_find (&T.early, ZLH_FRONTEND, ZL_MSG_ACCEPTED));
    assert_null (s_find (&T.got, ZLH_FRONTEND, ZL_MSG_ACCEPTED));
    const seen_t *d = s_find (&T.early, ZLH_BACKEND, ZL_MSG_DISPATCH);
    assert_non_null (d);
    uint64_t lost = d->ids[0];
    assert_true (lost > kept);

    s_restart ();
    uint64_t ids[MAX_IDS];
    assert_int_equal (s_take_all (0, ids, NULL, NULL), 1); // the committed one, again
    assert_int_equal (ids[0], kept);
    s_hello (0);
    uint64_t next;
    s_submit (0, 1, 1, &next);
    assert_true (next > lost);
}

// ---------------------------------------------------------------- the promise
static void
test_failed_commit_submit (void **state)
{
    (void)state;
    s_hello (0);
    uint64_t a;
    s_submit (0, 1, 1, &a);

    T.commit_fault = EIO;
    zl_msg_t sub = s_submit_msg (2, 1);
    s_feed_fails (ZLH_FRONTEND, 0, &sub);
    assert_int_equal (T.commits, 1); // the commit was asked for, and failed
    s_assert_stopped ();

    // a restart recovers A, and not the failed turn's job
    s_restart ();
    uint64_t ids[MAX_IDS];
    uint32_t attempts[MAX_IDS];
    assert_int_equal (s_take_all (0, ids, NULL, attempts), 1);
    assert_int_equal (ids[0], a);
    assert_int_equal (attempts[0], 1);
    // and works: a new Submit is accepted
    s_hello (0);
    uint64_t c;
    s_submit (0, 1, 1, &c);
    assert_true (c > a);
}

static void
test_failed_commit_ack_and_dead_letter (void **state)
{
    (void)state;
    s_hello (0);
    uint64_t ids[3];
    s_submit (0, 1, 3, ids);
    zl_msg_t ready = s_ready_msg (0, 2);
    s_feed_ok (ZLH_BACKEND, 0, &ready);
    const seen_t *d = s_find (&T.got, ZLH_BACKEND, ZL_MSG_DISPATCH);
    assert_non_null (d);
    assert_int_equal (d->n, 2);
    uint64_t lease_a = d->leases[0], lease_b = d->leases[1];
    assert_int_equal (d->ids[0], ids[0]);
    assert_int_equal (d->ids[1], ids[1]);
    // A dies, committed: its event comes (so the SUB hears the PUB), C goes out
    zl_msg_t nack = s_nack_permanent_msg (ids[0], lease_a);
    s_feed_ok (ZLH_BACKEND, 0, &nack);
    assert_non_null (s_find (&T.got, ZLH_EVENTS, ZL_MSG_DEAD_LETTER));
    d = s_find (&T.got, ZLH_BACKEND, ZL_MSG_DISPATCH);
    assert_non_null (d);
    assert_int_equal (d->ids[0], ids[2]);

    // B's death is not committed: no Settled, no event
    T.commit_fault = EIO;
    nack = s_nack_permanent_msg (ids[1], lease_b);
    s_feed_fails (ZLH_BACKEND, 0, &nack);
    s_assert_stopped ();

    s_restart ();
    uint64_t dead[MAX_IDS];
    assert_int_equal (s_dlq_list (dead), 1);
    assert_int_equal (dead[0], ids[0]);
    uint64_t got[MAX_IDS], leases[MAX_IDS];
    assert_int_equal (s_take_all (1, got, leases, NULL), 2); // B and C were leased
    assert_int_equal (got[0], ids[1]);
    assert_int_equal (got[1], ids[2]);

    // B's Ack is not committed: no Settled
    T.commit_fault = EIO;
    zl_msg_t ack = s_ack_msg (got[0], leases[0]);
    s_feed_fails (ZLH_BACKEND, 1, &ack);
    s_assert_stopped ();

    s_restart ();
    assert_int_equal (s_dlq_list (dead), 1);
    assert_int_equal (s_take_all (2, got, NULL, NULL), 2);
    assert_int_equal (got[0], ids[1]);
    assert_int_equal (got[1], ids[2]);
}

static void
test_failed_commit_redrive (void **state)
{
    (void)state;
    s_hello (0);
    uint64_t a;
    s_submit (0, 1, 1, &a);
    zl_msg_t ready = s_ready_msg (0, 1);
    s_feed_ok (ZLH_BACKEND, 0, &ready);
    const seen_t *d = s_find (&T.got, ZLH_BACKEND, ZL_MSG_DISPATCH);
    assert_non_null (d);
    zl_msg_t nack = s_nack_permanent_msg (a, d->leases[0]);
    s_feed_ok (ZLH_BACKEND, 0, &nack);
    assert_non_null (s_find (&T.got, ZLH_EVENTS, ZL_MSG_DEAD_LETTER));

    // the redrive is not committed: no "redrove" reply, no Dispatch to w0
    T.commit_fault = EIO;
    zl_msg_t redrive = s_admin_msg (ZL_ADMIN_DLQ_REDRIVE, a);
    s_feed_fails (ZLH_ADMIN, 0, &redrive);
    s_assert_stopped ();

    s_restart ();
    uint64_t dead[MAX_IDS];
    assert_int_equal (s_dlq_list (dead), 1);
    assert_int_equal (dead[0], a);
    uint64_t got[MAX_IDS];
    assert_int_equal (s_take_all (0, got, NULL, NULL), 0);
    // the redrive itself works
    s_feed_ok (ZLH_ADMIN, 0, &redrive);
    const seen_t *reply = s_find (&T.got, ZLH_ADMIN, ZL_MSG_ADMIN_REPLY);
    assert_non_null (reply);
    assert_int_equal (reply->count, 1);
    assert_non_null (s_find (&T.got, ZLH_BACKEND, ZL_MSG_DISPATCH));
}

// A store write that fails in the middle of the turn (the first lease's
// state, while dispatching) stops the broker as a failed commit does.
static void
test_failed_write_mid_turn (void **state)
{
    (void)state;
    s_hello (0);
    uint64_t ids[2];
    s_submit (0, 1, 2, ids);

    T.write_fault = EIO;
    T.write_fault_at = 1;
    T.writes = 0;
    zl_msg_t ready = s_ready_msg (0, 2);
    s_feed_fails (ZLH_BACKEND, 0, &ready);
    assert_int_equal (T.writes, 2); // the other lease's write went through, in memory
    s_assert_stopped ();

    // neither lease was committed: both jobs go out again as first attempts
    s_restart ();
    uint64_t got[MAX_IDS];
    uint32_t attempts[MAX_IDS];
    assert_int_equal (s_take_all (1, got, NULL, attempts), 2);
    assert_int_equal (got[0], ids[0]);
    assert_int_equal (got[1], ids[1]);
    assert_int_equal (attempts[0], 1);
    assert_int_equal (attempts[1], 1);
}

// A write that finds the store full inside a Submit's nested batch rejects
// that Submit's jobs STORE_FULL after the commit; the rest of the turn is
// committed and the broker goes on.
static void
test_full_write_in_a_submit (void **state)
{
    (void)state;
    s_hello (0);
    uint64_t a;
    s_submit (0, 1, 1, &a);

    T.write_fault = ENOSPC;
    T.write_fault_at = 1;
    T.writes = 0;
    zl_msg_t sub = s_submit_msg (2, 2);
    s_feed_ok (ZLH_FRONTEND, 0, &sub);
    assert_null (s_find (&T.got, ZLH_FRONTEND, ZL_MSG_ACCEPTED));
    const seen_t *rej = s_find (&T.got, ZLH_FRONTEND, ZL_MSG_REJECTED);
    assert_non_null (rej);
    assert_int_equal (rej->n, 2);
    assert_int_equal (rej->reject, ZL_REJECT_STORE_FULL);

    uint64_t c;
    s_submit (0, 4, 1, &c);
    s_restart ();
    uint64_t got[MAX_IDS];
    assert_int_equal (s_take_all (0, got, NULL, NULL), 2);
    assert_int_equal (got[0], a);
    assert_int_equal (got[1], c);
}

// An I/O error (not a full store) writing a Submit's job: not a STORE_FULL
// answer but a store failure: the broker stops without replying, and a
// restart has only what earlier turns committed.
static void
test_io_error_in_a_submit (void **state)
{
    (void)state;
    s_hello (0);
    uint64_t a;
    s_submit (0, 1, 1, &a);

    T.write_fault = EIO;
    T.write_fault_at = 1;
    T.writes = 0;
    zl_msg_t sub = s_submit_msg (2, 2);
    s_feed_fails (ZLH_FRONTEND, 0, &sub);
    assert_null (s_find (&T.got, ZLH_FRONTEND, ZL_MSG_REJECTED));
    s_assert_stopped ();

    s_restart ();
    uint64_t got[MAX_IDS];
    assert_int_equal (s_take_all (0, got, NULL, NULL), 1);
    assert_int_equal (got[0], a);
}

// ---------------------------------------------------------------- return codes
static void
s_on_alarm (int sig)
{
    (void)sig;
}

// Each of a turn's outcomes has its own value: done, interrupted by a
// signal (nothing done, the broker goes on), the store failed (it stops),
// and, for feed, a socket name that is not one.
static void
test_turn_return_codes (void **state)
{
    (void)state;
    zl_msg_t hello = s_hello_msg ();
    assert_int_equal (s_feed (ZLH_FRONTEND, 0, &hello), ZL_TURN_OK);
    uint8_t byte = 0;
    assert_int_equal (zl_broker_feed (T.broker, "nowhere", "p", 1, &byte, 1), ZL_TURN_BAD_SOCKET);
    // a signal during the wait (no SA_RESTART): the turn ends, interrupted
    struct sigaction sa = {.sa_handler = s_on_alarm}, old;
    sigemptyset (&sa.sa_mask);
    assert_int_equal (sigaction (SIGALRM, &sa, &old), 0);
    struct itimerval it = {.it_value = {0, 20000}}; // 20 ms into a wait of 5 s
    assert_int_equal (setitimer (ITIMER_REAL, &it, NULL), 0);
    int rc = zl_broker_turn (T.broker, 5000);
    sigaction (SIGALRM, &old, NULL);
    assert_int_equal (rc, ZL_TURN_INTERRUPTED);
    assert_int_equal (zl_broker_turn (T.broker, 0), ZL_TURN_OK); // it goes on
    T.commit_fault = EIO;
    zl_msg_t sub = s_submit_msg (1, 1);
    assert_int_equal (s_feed (ZLH_FRONTEND, 0, &sub), ZL_TURN_STORE_FAILED);
    T.commit_fault = 0;
    assert_int_equal (zl_broker_turn (T.broker, 0), ZL_TURN_STORE_FAILED);
    assert_int_equal (zl_broker_feed (T.broker, "nowhere", "p", 1, &byte, 1), ZL_TURN_BAD_SOCKET);
}

// A resend of an accepted job whose deadline has passed since is still its
// duplicate (the same id, not INVALID): the key is checked first. A new job
// with a deadline already past is refused INVALID.
static void
test_deadline_resend_is_a_duplicate (void **state)
{
    (void)state;
    s_hello (0);
    zl_job_spec_t spec = {.seq = 1,
                          .tenant = "t",
                          .lane = "a",
                          .payload = {(const uint8_t *)"p", 1},
                          .idempotency_key = "order-1",
                          .deadline_ms = (uint64_t)zl_clock_wall_ms () + 50};
    zl_msg_t m = {.kind = ZL_MSG_SUBMIT};
    m.u.submit = (zl_submit_t){1, &spec};
    s_feed_ok (ZLH_FRONTEND, 0, &m);
    const seen_t *acc = s_find (&T.got, ZLH_FRONTEND, ZL_MSG_ACCEPTED);
    assert_non_null (acc);
    uint64_t id = acc->ids[0];
    zlh_clock_advance_us (100 * 1000); // (the harness's clock) the deadline passes
    spec.seq = 2;
    s_feed_ok (ZLH_FRONTEND, 0, &m);
    acc = s_find (&T.got, ZLH_FRONTEND, ZL_MSG_ACCEPTED);
    assert_non_null (acc);
    assert_int_equal (acc->ids[0], id);
    spec.seq = 3;
    spec.idempotency_key = "order-2";
    s_feed_ok (ZLH_FRONTEND, 0, &m);
    const seen_t *rej = s_find (&T.got, ZLH_FRONTEND, ZL_MSG_REJECTED);
    assert_non_null (rej);
    assert_int_equal (rej->reject, ZL_REJECT_INVALID);
}

// The admin reply to `m` (read-only requests are answered at once).
static const seen_t *
s_admin_reply (zl_msg_t *m)
{
    assert_int_equal (s_feed (ZLH_ADMIN, 0, m), 0);
    const seen_t *r = s_find (&T.got, ZLH_ADMIN, ZL_MSG_ADMIN_REPLY);
    if (!r)
        r = s_find (&T.early, ZLH_ADMIN, ZL_MSG_ADMIN_REPLY);
    assert_non_null (r);
    return r;
}

/*  The DLQ filters on the final error (any case) and the time a job died,
    for list, redrive and purge; and the workers list (name, lanes,
    capacity, jobs in flight). */
static void
test_dlq_filters_and_workers (void **state)
{
    (void)state;
    s_hello (0);
    uint64_t ids[4];
    s_submit (0, 1, 4, ids);
    zl_msg_t ready = s_ready_msg (0, 4);
    ready.u.ready.heartbeat_ms = UINT32_MAX; // stated, and taken as 60 s
    s_feed_ok (ZLH_BACKEND, 0, &ready);
    const seen_t *d = s_find (&T.got, ZLH_BACKEND, ZL_MSG_DISPATCH);
    assert_non_null (d);
    assert_int_equal (d->n, 4);
    uint64_t leases[4];
    memcpy (leases, d->leases, sizeof leases);

    zl_msg_t w = s_admin_msg (ZL_ADMIN_WORKERS, 0);
    const seen_t *r = s_admin_reply (&w);
    assert_true (r->ok);
    assert_int_equal (r->n_workers, 1);
    assert_string_equal (r->worker, "w0");
    assert_string_equal (r->worker_lane, "a");
    assert_int_equal (r->worker_capacity, 4);
    assert_int_equal (r->worker_in_flight, 4);
    assert_int_equal (r->worker_heartbeat_ms, ZL_HEARTBEAT_STATED_MAX_MS);

    // three die with different errors; the fourth is acked
    static const char *errors[] = {"SMTP timeout after 30s", "bad address", "smtp TIMEOUT again"};
    for (int i = 0; i < 3; i++) {
        zl_nack_item_t item = {ids[i], leases[i], ZL_FAIL_PERMANENT, errors[i], 0, 1000};
        zl_msg_t nack = {.kind = ZL_MSG_NACK};
        nack.u.nack = (zl_nack_t){1, &item};
        s_feed_ok (ZLH_BACKEND, 0, &nack);
    }
    zl_msg_t ack = s_ack_msg (ids[3], leases[3]);
    s_feed_ok (ZLH_BACKEND, 0, &ack);
    r = s_admin_reply (&w);
    assert_int_equal (r->worker_in_flight, 0);

    // Stats: the lane x tenant rows, or the lanes only (the same lane figures)
    zl_msg_t stats = s_admin_msg (ZL_ADMIN_STATS, 0);
    r = s_admin_reply (&stats);
    assert_int_equal (r->n_groups, 1);
    assert_int_equal (r->n_tenants, 1);
    assert_int_equal (r->tenants_known, 1);
    assert_int_equal (r->lane_dlq, 3);
    assert_int_equal (r->group_dlq, 3);
    assert_int_equal (r->group_oldest_dlq, r->lane_oldest_dlq);
    uint64_t oldest = r->lane_oldest_dlq;
    stats.u.admin_request.stats_lanes_only = true;
    r = s_admin_reply (&stats);
    assert_int_equal (r->n_groups, 0);
    assert_int_equal (r->n_tenants, 0);
    assert_int_equal (r->tenants_known, 1);
    assert_int_equal (r->lane_dlq, 3);
    assert_true (r->lane_oldest_dlq >= oldest);

    zl_msg_t list = s_admin_msg (ZL_ADMIN_DLQ_LIST, 0);
    list.u.admin_request.filter.all = false;
    list.u.admin_request.filter.error_contains = "timeout";
    r = s_admin_reply (&list);
    assert_true (r->ok);
    assert_int_equal (r->n, 2);
    assert_int_equal (r->ids[0], ids[0]);
    assert_int_equal (r->ids[1], ids[2]);
    // a text no error holds matches nothing (ok, empty)
    list.u.admin_request.filter.error_contains = "refused";
    r = s_admin_reply (&list);
    assert_true (r->ok);
    assert_int_equal (r->n, 0);
    // by time: every one died before a day from now, none after it
    uint64_t later = (uint64_t)zl_clock_wall_ms () + 86400000;
    list.u.admin_request.filter.error_contains = "";
    list.u.admin_request.filter.dead_to_ms = later;
    r = s_admin_reply (&list);
    assert_int_equal (r->n, 3);
    list.u.admin_request.filter.dead_to_ms = 0;
    list.u.admin_request.filter.dead_from_ms = later;
    r = s_admin_reply (&list);
    assert_int_equal (r->n, 0);
    // a window that ends before it starts is refused
    list.u.admin_request.filter.dead_to_ms = later - 1;
    assert_int_equal (s_feed (ZLH_ADMIN, 0, &list), 0);
    assert_non_null (s_find (&T.early, ZLH_ADMIN, ZL_MSG_ERROR)); // bad input: answered at once
    // and a text past ZL_DLQ_ERROR_FILTER_MAX
    static char long_text[ZL_DLQ_ERROR_FILTER_MAX + 2];
    memset (long_text, 'x', sizeof long_text - 1);
    list.u.admin_request.filter.dead_to_ms = list.u.admin_request.filter.dead_from_ms = 0;
    list.u.admin_request.filter.error_contains = long_text;
    assert_int_equal (s_feed (ZLH_ADMIN, 0, &list), 0);
    assert_non_null (s_find (&T.early, ZLH_ADMIN, ZL_MSG_ERROR));
    list.u.admin_request.filter.error_contains = "";

    // redrive by error text: the two timeouts come back, "bad address" stays
    zl_msg_t redrive = s_admin_msg (ZL_ADMIN_DLQ_REDRIVE, 0);
    redrive.u.admin_request.filter.all = false;
    redrive.u.admin_request.filter.error_contains = "TimeOut";
    s_feed_ok (ZLH_ADMIN, 0, &redrive);
    r = s_find (&T.got, ZLH_ADMIN, ZL_MSG_ADMIN_REPLY);
    assert_non_null (r);
    assert_true (r->ok);
    assert_int_equal (r->count, 2);
    uint64_t dead[MAX_IDS];
    assert_int_equal (s_dlq_list (dead), 1);
    assert_int_equal (dead[0], ids[1]);
}

/*  A group query: the lane x tenant rows it selects (tenant text in any
    case, a lane), sorted by a figure or a name, paged; a limit past the
    bound is refused. */
static void
test_stats_group_query (void **state)
{
    (void)state;
    s_hello (0);
    static const char *tenants[] = {"acme", "acme", "acme", "beta", "Acme-2", "Acme-2"};
    zl_job_spec_t specs[6];
    for (size_t i = 0; i < 6; i++)
        specs[i] = (zl_job_spec_t){.seq = i + 1,
                                   .tenant = tenants[i],
                                   .lane = "a",
                                   .payload = {(const uint8_t *)"p", 1},
                                   .idempotency_key = ""};
    zl_msg_t sub = {.kind = ZL_MSG_SUBMIT};
    sub.u.submit = (zl_submit_t){6, specs};
    s_feed_ok (ZLH_FRONTEND, 0, &sub);

    zl_msg_t q = s_admin_msg (ZL_ADMIN_STATS, 0);
    zl_group_query_t *g = &q.u.admin_request.stats_groups;
    *g = (zl_group_query_t){.set = true, .lane = "a", .tenant_contains = "ACME", .limit = 1};
    const seen_t *r = s_admin_reply (&q); // by ready, largest first
    assert_true (r->ok);
    assert_int_equal (r->groups_matched, 2);
    assert_int_equal (r->n_groups, 1);
    assert_int_equal (r->n_tenants, 0);
    assert_string_equal (r->group_tenant, "acme");
    assert_int_equal (r->group_ready, 3);
    g->offset = 1;
    r = s_admin_reply (&q);
    assert_string_equal (r->group_tenant, "Acme-2");
    assert_int_equal (r->group_ready, 2);
    g->offset = 5; // past the end: an empty page
    r = s_admin_reply (&q);
    assert_int_equal (r->groups_matched, 2);
    assert_int_equal (r->n_groups, 0);
    *g = (zl_group_query_t){.set = true, .sort = ZL_GROUP_SORT_TENANT, .ascending = true};
    r = s_admin_reply (&q);
    assert_int_equal (r->groups_matched, 3);
    assert_int_equal (r->n_groups, 3);
    assert_string_equal (r->group_tenant, "Acme-2");
    g->ascending = false;
    r = s_admin_reply (&q);
    assert_string_equal (r->group_tenant, "beta");
    *g = (zl_group_query_t){.set = true, .lane = "nope"};
    r = s_admin_reply (&q);
    assert_int_equal (r->groups_matched, 0);
    g->limit = ZL_GROUP_QUERY_MAX + 1;
    r = s_admin_reply (&q);
    assert_false (r->ok);
}

#define T_(fn) cmocka_unit_test_setup_teardown (fn, s_setup, s_teardown)

int
main (void)
{
    const struct CMUnitTest tests[] = {
        T_ (test_turn_order_replies_after_the_commit),
        T_ (test_turn_dispatch_goes_before_accepted),
        T_ (test_dispatch_before_the_commit),
        T_ (test_dispatch_before_a_failed_commit),
        T_ (test_tick_waits_for_its_commit),
        T_ (test_failed_commit_submit),
        T_ (test_failed_commit_ack_and_dead_letter),
        T_ (test_failed_commit_redrive),
        T_ (test_failed_write_mid_turn),
        T_ (test_full_write_in_a_submit),
        T_ (test_io_error_in_a_submit),
        T_ (test_turn_return_codes),
        T_ (test_deadline_resend_is_a_duplicate),
        T_ (test_dlq_filters_and_workers),
        T_ (test_stats_group_query),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
