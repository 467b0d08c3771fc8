/*  test_leadership: the broker's side of leadership (broker.c), on the
    in-process harness (tests/support/broker_harness: inproc peers, a fake
    clock) over an LMDB store, with the store's leadership played by this
    test through zl_broker_set_leadership: what each election says (leader,
    standby naming a leader or none, no database), when the next one is
    due, what a commit returns (FENCED, UNAVAILABLE), and the recovery
    cause.

    Checked: an LMDB broker leads at epoch 0 and says so in Stats; a standby
    answers every message NOT_LEADER with the leader's endpoint for that
    socket, an unreachable broker Rejected/Error UNAVAILABLE, both answer
    Stats and do nothing else (no commit, no dispatch); the turn that loses
    the lead (an election, a fenced or unavailable commit) sends none of its
    promises and forgets the broker's state, telling its producers and
    workers to start again (NOT_LEADER, UNAVAILABLE, or NOT_READY when it
    took the lead again); the broker recovers the store's
    state when it leads again, and an attempt that ran under the last leader
    ends as leader_change (or broker_restart, as the store says); a recovery
    whose commit is fenced leaves the broker standing by; elections run
    only when due, and never inside a batch; a standby's loop waits for its
    next election instead of spinning on the timers it no longer has. */
#include "broker.h"
#include "broker_harness.h"
#include "clock.h"
#include "config.h"
#include "log.h"
#include "metrics.h"
#include "msg.h"
#include "store.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SEEN 64
#define MAX_IDS 16

// ---------------------------------------------------------------- the played store
static struct {
    zl_store_role_t role; // what the next election says
    bool take_over;       // a LEADER answer says took_over (once)
    uint64_t epoch;       //
    const char *leader[ZL_ADVERTISE_COUNT];
    const char *leader_name;
    int64_t due;          // elect_due's answer; INT64_MAX after each election
    int elects;           // elections asked
    int elects_in_batch;  // ... while a batch was open (never allowed)
    zl_store_rc_t commit; // what commits return; ZL_STORE_OK: the store's own
    bool commit_lands;    // a failing commit: the batch lands first (its fate unknown)
    const char *cause;    // the recovery cause
    int commits;          // commits asked
    bool abort_next;      // the fault hook fails the next commit (the batch is dropped)
} F;

static zl_store_role_t
s_elect (void *ctx, zl_store_t *store, int64_t mono_ms, zl_store_lead_t *out)
{
    (void)ctx;
    (void)mono_ms;
    F.elects++;
    if (zl_store_in_batch (store))
        F.elects_in_batch++;
    memset (out, 0, sizeof *out);
    out->role = F.role;
    out->epoch = F.epoch;
    out->took_over = F.role == ZL_ROLE_LEADER && F.take_over;
    F.take_over = false;
    for (int i = 0; i < ZL_ADVERTISE_COUNT; i++)
        snprintf (out->leader[i], sizeof out->leader[i], "%s", F.leader[i] ? F.leader[i] : "");
    snprintf (out->leader_name, sizeof out->leader_name, "%s", F.leader_name ? F.leader_name : "");
    F.due = INT64_MAX;
    return F.role;
}

static int64_t
s_elect_due (void *ctx, zl_store_t *store)
{
    (void)ctx;
    (void)store;
    return F.due;
}

static zl_store_rc_t
s_commit (void *ctx, zl_store_t *store)
{
    (void)ctx;
    F.commits++;
    if (F.commit == ZL_STORE_OK)
        return zl_store_commit (store);
    F.abort_next = !F.commit_lands; // FENCED: nothing landed
    zl_store_commit (store);
    F.abort_next = false;
    return F.commit;
}

static const char *
s_cause (void *ctx, zl_store_t *store)
{
    (void)ctx;
    (void)store;
    return F.cause;
}

static const zl_leadership_t s_played = {s_elect, s_elect_due, s_commit, s_cause};

static int
s_fault (void *ctx, zl_store_fault_t where)
{
    (void)ctx;
    return where == ZL_STORE_FAULT_COMMIT && F.abort_next ? EIO : 0;
}

// Play a leader (as LMDB is), elections never due.
static void
s_play_leader (void)
{
    memset (&F, 0, sizeof F);
    F.role = ZL_ROLE_LEADER;
    F.due = INT64_MAX;
    F.cause = "leader_change";
}

// The next turn's election says `role` (leader endpoints and name as given).
static void
s_next_election (zl_store_role_t role, const char *name, const char *fe, const char *be,
                 const char *ad)
{
    F.role = role;
    F.leader_name = name;
    F.leader[ZL_ADVERTISE_FRONTEND] = fe;
    F.leader[ZL_ADVERTISE_BACKEND] = be;
    F.leader[ZL_ADVERTISE_ADMIN] = ad;
    F.due = 0;
}

// ---------------------------------------------------------------- what arrived
typedef struct {
    zlh_sock_t sock;
    int peer;
    zl_msg_kind_t kind;
    size_t n;
    uint64_t ids[MAX_IDS];
    uint32_t attempts[MAX_IDS];
    bool duplicate[MAX_IDS];
    zl_reject_code_t reject[MAX_IDS];
    uint32_t retry_after_ms;
    zl_error_code_t error;
    size_t n_leader;
    char leader[128];
    char text[512];
    bool ok;
    // admin: stats
    char role[16], leader_name[128], backend[16];
    uint64_t epoch, takeovers, ready, not_leader, unavailable, stepdowns;
    bool reachable, has_stats;
    // admin: dlq show
    zl_outcome_t outcomes[MAX_IDS];
    size_t n_attempts;
} seen_t;

static struct {
    char *dir;
    zl_broker_config_t cfg;
    zl_broker_t *broker;
    zlh_t *h;
    seen_t got[MAX_SEEN];
    size_t n_got;
} T;

static uint64_t
s_counter (const zl_stats_t *st, const char *name)
{
    for (size_t i = 0; i < st->n_counters; i++)
        if (!strcmp (st->counters[i].name, name))
            return st->counters[i].value;
    fail_msg ("no counter %s", name);
    return 0;
}

static void
s_record (void *ctx, zlh_sock_t sock, int peer, const char *topic, const zl_msg_t *m)
{
    (void)ctx;
    (void)topic;
    if (T.n_got == MAX_SEEN)
        fail_msg ("more than %d messages in one turn", MAX_SEEN);
    seen_t *s = &T.got[T.n_got++];
    memset (s, 0, sizeof *s);
    s->sock = sock;
    s->peer = peer;
    s->kind = m->kind;
    switch (m->kind) {
    case ZL_MSG_ACCEPTED:
        for (size_t i = 0; i < m->u.accepted.n && s->n < MAX_IDS; i++, s->n++) {
            s->ids[s->n] = m->u.accepted.jobs[i].job_id;
            s->duplicate[s->n] = m->u.accepted.jobs[i].duplicate;
        }
        break;
    case ZL_MSG_REJECTED:
        for (size_t i = 0; i < m->u.rejected.n && s->n < MAX_IDS; i++, s->n++) {
            s->ids[s->n] = m->u.rejected.jobs[i].seq;
            s->reject[s->n] = m->u.rejected.jobs[i].code;
            s->retry_after_ms = m->u.rejected.jobs[i].retry_after_ms;
        }
        break;
    case ZL_MSG_DISPATCH:
        for (size_t i = 0; i < m->u.dispatch.n && s->n < MAX_IDS; i++, s->n++) {
            s->ids[s->n] = m->u.dispatch.jobs[i].job_id;
            s->attempts[s->n] = m->u.dispatch.jobs[i].attempt;
        }
        break;
    case ZL_MSG_ERROR:
        s->error = m->u.error.code;
        s->n_leader = m->u.error.n_leader_endpoints;
        if (s->n_leader)
            snprintf (s->leader, sizeof s->leader, "%s", m->u.error.leader_endpoints[0]);
        snprintf (s->text, sizeof s->text, "%s", m->u.error.message);
        break;
    case ZL_MSG_ADMIN_REPLY: {
        const zl_admin_reply_t *r = &m->u.admin_reply;
        s->ok = r->ok;
        if (r->result == ZL_ADMIN_RESULT_STATS) {
            const zl_stats_t *st = &r->stats;
            s->has_stats = true;
            snprintf (s->role, sizeof s->role, "%s", st->role);
            snprintf (s->leader_name, sizeof s->leader_name, "%s", st->leader);
            snprintf (s->backend, sizeof s->backend, "%s", st->store_backend);
            s->epoch = st->epoch;
            s->takeovers = st->takeovers;
            s->reachable = st->store_reachable;
            for (size_t i = 0; i < st->n_lanes; i++)
                s->ready += st->lanes[i].ready + st->lanes[i].delayed + st->lanes[i].in_flight;
            s->not_leader = s_counter (st, "err_not_leader");
            s->unavailable = s_counter (st, "err_unavailable");
            s->stepdowns = s_counter (st, "leader_stepdowns");
        }
        if (r->result == ZL_ADMIN_RESULT_DEAD_LETTER)
            for (size_t i = 0; i < r->dead_letter.n_attempts && i < MAX_IDS; i++)
                s->outcomes[s->n_attempts++] = r->dead_letter.attempts[i].outcome;
        break;
    }
    default: break;
    }
}

// The first message of `kind` to `sock` that arrived, or NULL.
static const seen_t *
s_find (zlh_sock_t sock, zl_msg_kind_t kind)
{
    for (size_t i = 0; i < T.n_got; i++)
        if (T.got[i].sock == sock && T.got[i].kind == kind)
            return &T.got[i];
    return NULL;
}

// True if anything that promises a state change arrived.
static bool
s_any_promise (void)
{
    for (size_t i = 0; i < T.n_got; i++)
        switch (T.got[i].kind) {
        case ZL_MSG_ACCEPTED:
        case ZL_MSG_CREDIT:
        case ZL_MSG_DISPATCH:
        case ZL_MSG_SETTLED:
        case ZL_MSG_DEAD_LETTER: return true;
        case ZL_MSG_REJECTED:
            if (T.got[i].reject[0] != ZL_REJECT_UNAVAILABLE)
                return true;
            break;
        default: break;
        }
    return false;
}

// ---------------------------------------------------------------- the broker
static void
s_start (void)
{
    zl_broker_config_defaults (&T.cfg);
    zlh_config_inproc (&T.cfg, T.dir);
    zl_broker_config_lane (&T.cfg, "a");
    char err[512];
    T.broker = zl_broker_new (&T.cfg, err, sizeof err);
    if (!T.broker)
        fail_msg ("zl_broker_new: %s", err);
    T.h = zlh_new (T.broker);
    assert_non_null (T.h);
}

static void
s_stop (void)
{
    zlh_destroy (&T.h);
    zl_broker_destroy (&T.broker);
    zl_broker_config_free (&T.cfg);
}

static int
s_setup (void **state)
{
    (void)state;
    memset (&T, 0, sizeof T);
    zl_log_set_level (ZL_LOG_ERROR);
    T.dir = zlh_tmpdir ("leadership");
    assert_non_null (T.dir);
    s_play_leader ();
    zl_store_set_fault (s_fault, NULL);
    zl_broker_set_leadership (&s_played, NULL);
    s_start ();
    return 0;
}

static int
s_teardown (void **state)
{
    (void)state;
    s_stop ();
    zl_broker_set_leadership (NULL, NULL);
    zl_store_set_fault (NULL, NULL);
    zlh_rmdir (T.dir);
    free (T.dir);
    return 0;
}

// Feed `msg` as `peer` of `sock` (one turn); what arrived goes to T.got.
static int
s_feed (zlh_sock_t sock, int peer, const zl_msg_t *msg)
{
    T.n_got = 0;
    int rc = zlh_feed (T.h, sock, peer, msg);
    zlh_drain (T.h, s_record, NULL);
    return rc;
}

static zl_msg_t
s_hello_msg (void)
{
    zl_msg_t m = {.kind = ZL_MSG_HELLO};
    m.u.hello.client = "test-leadership";
    return m;
}

static zl_msg_t
s_submit_msg (uint64_t first_seq, size_t n, const char *key, uint32_t max_attempts)
{
    static zl_job_spec_t specs[MAX_IDS];
    assert_true (n <= MAX_IDS);
    for (size_t i = 0; i < n; i++)
        specs[i] = (zl_job_spec_t){.seq = first_seq + i,
                                   .tenant = "t",
                                   .lane = "a",
                                   .payload = {(const uint8_t *)"payload", 7},
                                   .idempotency_key = key ? key : "",
                                   .max_attempts = max_attempts};
    zl_msg_t m = {.kind = ZL_MSG_SUBMIT};
    m.u.submit = (zl_submit_t){n, specs};
    return m;
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
s_admin_msg (zl_admin_op_t op, uint64_t job_id)
{
    zl_msg_t m = {.kind = ZL_MSG_ADMIN_REQUEST};
    zl_admin_request_t *r = &m.u.admin_request;
    r->request_id = 7;
    r->op = op;
    r->filter.lane = r->filter.tenant = "";
    r->filter.all = true;
    r->lane = "";
    r->limit = 100;
    r->job_id = job_id;
    return m;
}

// Submit `n` jobs as producer `peer` (after its Hello): their ids to `ids`.
static void
s_submit (int peer, uint64_t first_seq, size_t n, uint32_t max_attempts, uint64_t *ids)
{
    zl_msg_t m = s_submit_msg (first_seq, n, NULL, max_attempts);
    assert_int_equal (s_feed (ZLH_FRONTEND, peer, &m), ZL_TURN_OK);
    const seen_t *acc = s_find (ZLH_FRONTEND, ZL_MSG_ACCEPTED);
    assert_non_null (acc);
    assert_int_equal (acc->n, n);
    memcpy (ids, acc->ids, n * sizeof *ids);
}

static void
s_hello (int peer)
{
    zl_msg_t m = s_hello_msg ();
    assert_int_equal (s_feed (ZLH_FRONTEND, peer, &m), ZL_TURN_OK);
    assert_non_null (s_find (ZLH_FRONTEND, ZL_MSG_CREDIT));
}

// The broker's Stats, asked on admin peer 0 (answered in every role).
static seen_t
s_stats (void)
{
    zl_msg_t m = s_admin_msg (ZL_ADMIN_STATS, 0);
    assert_int_equal (s_feed (ZLH_ADMIN, 0, &m), ZL_TURN_OK);
    const seen_t *r = s_find (ZLH_ADMIN, ZL_MSG_ADMIN_REPLY);
    assert_non_null (r);
    assert_true (r->ok);
    assert_true (r->has_stats);
    return *r;
}

// The Error `sock`'s peer 0 got for `msg`, which must be the only reply.
static seen_t
s_refused (zlh_sock_t sock, const zl_msg_t *msg)
{
    assert_int_equal (s_feed (sock, 0, msg), ZL_TURN_OK);
    assert_int_equal (T.n_got, 1);
    assert_int_equal (T.got[0].kind, ZL_MSG_ERROR);
    assert_int_equal (T.got[0].sock, sock);
    return T.got[0];
}

// ---------------------------------------------------------------- the tests
// On LMDB (the store's own leadership, not the played one) the broker leads
// at epoch 0 and Stats say so: role leader, reachable, no takeover, the
// leader being this broker (host:pid).
static void
test_lmdb_leads_at_epoch_0 (void **state)
{
    (void)state;
    s_stop ();
    zl_broker_set_leadership (NULL, NULL);
    s_start ();
    seen_t st = s_stats ();
    assert_string_equal (st.role, "leader");
    assert_int_equal (st.epoch, 0);
    assert_true (st.reachable);
    assert_int_equal (st.takeovers, 0);
    assert_string_equal (st.backend, "lmdb");
    assert_non_null (strchr (st.leader_name, ':')); // host:pid
    assert_int_equal (st.not_leader + st.unavailable + st.stepdowns, 0);
    s_hello (0);
    uint64_t id;
    s_submit (0, 1, 1, 0, &id);
}

// A standby names the leader's endpoint of the socket each message came
// to, and its name; Stats still answer (role standby, the leader named),
// and nothing else is done: no commit, no Credit, no Dispatch.
static void
test_standby_names_the_leader (void **state)
{
    (void)state;
    s_next_election (ZL_ROLE_STANDBY, "broker-b:77", "tcp://b:5570", "tcp://b:5571",
                     "tcp://b:5573");
    F.epoch = 4;
    int commits = F.commits, elects = F.elects;
    zl_msg_t hello = s_hello_msg ();
    seen_t e = s_refused (ZLH_FRONTEND, &hello);
    assert_int_equal (F.elects, elects + 1);
    assert_int_equal (e.error, ZL_ERR_NOT_LEADER);
    assert_int_equal (e.n_leader, 1);
    assert_string_equal (e.leader, "tcp://b:5570");
    assert_non_null (strstr (e.text, "broker-b:77"));

    zl_msg_t sub = s_submit_msg (1, 3, NULL, 0);
    e = s_refused (ZLH_FRONTEND, &sub);
    assert_int_equal (e.error, ZL_ERR_NOT_LEADER);
    zl_msg_t ready = s_ready_msg (0, 4);
    e = s_refused (ZLH_BACKEND, &ready);
    assert_int_equal (e.error, ZL_ERR_NOT_LEADER);
    assert_string_equal (e.leader, "tcp://b:5571");
    zl_msg_t hb = {.kind = ZL_MSG_HEARTBEAT};
    e = s_refused (ZLH_BACKEND, &hb);
    assert_string_equal (e.leader, "tcp://b:5571");
    zl_msg_t list = s_admin_msg (ZL_ADMIN_DLQ_LIST, 0);
    e = s_refused (ZLH_ADMIN, &list);
    assert_int_equal (e.error, ZL_ERR_NOT_LEADER);
    assert_string_equal (e.leader, "tcp://b:5573");
    zl_msg_t pause = s_admin_msg (ZL_ADMIN_PAUSE, 0);
    pause.u.admin_request.lane = "a";
    e = s_refused (ZLH_ADMIN, &pause);
    assert_string_equal (e.leader, "tcp://b:5573");

    seen_t st = s_stats ();
    assert_string_equal (st.role, "standby");
    assert_string_equal (st.leader_name, "broker-b:77");
    assert_int_equal (st.epoch, 4);
    assert_true (st.reachable);
    assert_int_equal (st.not_leader, 6);
    assert_int_equal (F.commits, commits);   // nothing to commit, nothing committed
    assert_int_equal (F.elects, elects + 1); // only when due
    assert_int_equal (F.elects_in_batch, 0);

    // bad input is answered as such, whatever the role
    assert_int_equal (zl_broker_feed (T.broker, "frontend", "p0", 2, "x", 1), ZL_TURN_OK);
    T.n_got = 0;
    zlh_drain (T.h, s_record, NULL);
    assert_int_equal (T.n_got, 1);
    assert_int_equal (T.got[0].error, ZL_ERR_BAD_FRAME);
}

// A standby that knows no leader yet names none: the client tries the
// next broker it knows.
static void
test_standby_without_a_leader (void **state)
{
    (void)state;
    s_next_election (ZL_ROLE_STANDBY, NULL, NULL, NULL, NULL);
    zl_msg_t hello = s_hello_msg ();
    seen_t e = s_refused (ZLH_FRONTEND, &hello);
    assert_int_equal (e.error, ZL_ERR_NOT_LEADER);
    assert_int_equal (e.n_leader, 0);
    assert_non_null (strstr (e.text, "no leader"));
    seen_t st = s_stats ();
    assert_string_equal (st.role, "standby");
    assert_string_equal (st.leader_name, "");
}

// Without a database: each spec of a Submit is Rejected UNAVAILABLE with a
// retry-after, every other message gets Error{UNAVAILABLE}; Stats say
// unreachable; nothing is committed. Once the database answers and the
// broker leads, it serves.
static void
test_unreachable_refuses_until_the_database_answers (void **state)
{
    (void)state;
    s_hello (0); // a session with the leader it was
    s_next_election (ZL_ROLE_UNREACHABLE, NULL, NULL, NULL, NULL);
    int commits = F.commits;
    zl_msg_t sub = s_submit_msg (1, 3, NULL, 0);
    assert_int_equal (s_feed (ZLH_FRONTEND, 0, &sub), ZL_TURN_OK);
    F.due = zl_clock_mono_ms () + 1500; // the next dial
    assert_int_equal (T.n_got, 2);      // the session it forgot, then the Submit
    assert_int_equal (T.got[0].kind, ZL_MSG_ERROR);
    assert_int_equal (T.got[0].error, ZL_ERR_UNAVAILABLE);
    const seen_t *rej = s_find (ZLH_FRONTEND, ZL_MSG_REJECTED);
    assert_non_null (rej);
    assert_int_equal (rej->n, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal (rej->ids[i], 1 + i);
        assert_int_equal (rej->reject[i], ZL_REJECT_UNAVAILABLE);
    }
    assert_true (rej->retry_after_ms >= 100 && rej->retry_after_ms <= 5000);
    // told when the broker dials the database next (1.5 s from now)
    assert_int_equal (s_feed (ZLH_FRONTEND, 0, &sub), ZL_TURN_OK);
    assert_int_equal (T.got[0].retry_after_ms, 1500);

    zl_msg_t hello = s_hello_msg ();
    seen_t e = s_refused (ZLH_FRONTEND, &hello);
    assert_int_equal (e.error, ZL_ERR_UNAVAILABLE);
    zl_msg_t ready = s_ready_msg (0, 4);
    e = s_refused (ZLH_BACKEND, &ready);
    assert_int_equal (e.error, ZL_ERR_UNAVAILABLE);
    zl_msg_t show = s_admin_msg (ZL_ADMIN_DLQ_SHOW, 1);
    e = s_refused (ZLH_ADMIN, &show);
    assert_int_equal (e.error, ZL_ERR_UNAVAILABLE);
    seen_t st = s_stats ();
    assert_string_equal (st.role, "unreachable");
    assert_false (st.reachable);
    assert_int_equal (st.unavailable, 5);
    assert_int_equal (F.commits, commits);

    // the database answers again: the broker leads and serves
    s_next_election (ZL_ROLE_LEADER, NULL, NULL, NULL, NULL);
    s_hello (0);
    uint64_t id;
    s_submit (0, 10, 1, 0, &id);
    st = s_stats ();
    assert_string_equal (st.role, "leader");
    assert_true (st.reachable);
}

// Losing the lead at an election forgets the broker's state: a standby
// holds no jobs. Taking it back recovers them from the store; the attempt
// that was running ends as leader_change: a job on its last attempt is
// dead-lettered with it in its history, the other goes out again as
// attempt 2.
static void
test_takeover_recovers_and_ends_running_attempts (void **state)
{
    (void)state;
    s_hello (0);
    uint64_t last, other;
    s_submit (0, 1, 1, 1, &last); // max_attempts 1
    s_submit (0, 2, 1, 0, &other);
    zl_msg_t ready = s_ready_msg (0, 4);
    assert_int_equal (s_feed (ZLH_BACKEND, 0, &ready), ZL_TURN_OK);
    const seen_t *d = s_find (ZLH_BACKEND, ZL_MSG_DISPATCH);
    assert_non_null (d);
    assert_int_equal (d->n, 2);

    s_next_election (ZL_ROLE_STANDBY, "broker-b:77", "tcp://b:5570", "tcp://b:5571",
                     "tcp://b:5573");
    seen_t st = s_stats ();
    assert_string_equal (st.role, "standby");
    assert_int_equal (st.ready, 0); // forgotten
    assert_int_equal (st.stepdowns, 1);
    // and told so, each sent to the leader's socket of its kind
    const seen_t *told = s_find (ZLH_FRONTEND, ZL_MSG_ERROR);
    assert_non_null (told);
    assert_int_equal (told->error, ZL_ERR_NOT_LEADER);
    assert_string_equal (told->leader, "tcp://b:5570");
    told = s_find (ZLH_BACKEND, ZL_MSG_ERROR);
    assert_non_null (told);
    assert_int_equal (told->error, ZL_ERR_NOT_LEADER);
    assert_string_equal (told->leader, "tcp://b:5571");
    assert_false (s_any_promise ());

    // another broker led meanwhile: this one takes over
    s_next_election (ZL_ROLE_LEADER, NULL, NULL, NULL, NULL);
    F.take_over = true;
    F.epoch = 5;
    st = s_stats ();
    assert_string_equal (st.role, "leader");
    assert_int_equal (st.epoch, 5);
    assert_int_equal (st.ready, 1); // the other job; the last one is dead
    zl_msg_t show = s_admin_msg (ZL_ADMIN_DLQ_SHOW, last);
    assert_int_equal (s_feed (ZLH_ADMIN, 0, &show), ZL_TURN_OK);
    const seen_t *r = s_find (ZLH_ADMIN, ZL_MSG_ADMIN_REPLY);
    assert_non_null (r);
    assert_true (r->ok);
    assert_int_equal (r->n_attempts, 1);
    assert_int_equal (r->outcomes[0], ZL_OUTCOME_LEADER_CHANGE);
    // the worker is a stranger to the new leader: Ready again, and the
    // other job comes as its second attempt
    zl_msg_t hb = {.kind = ZL_MSG_HEARTBEAT};
    seen_t e = s_refused (ZLH_BACKEND, &hb);
    assert_int_equal (e.error, ZL_ERR_NOT_READY);
    assert_int_equal (s_feed (ZLH_BACKEND, 0, &ready), ZL_TURN_OK);
    d = s_find (ZLH_BACKEND, ZL_MSG_DISPATCH);
    assert_non_null (d);
    assert_int_equal (d->n, 1);
    assert_int_equal (d->ids[0], other);
    assert_int_equal (d->attempts[0], 2);
}

// The same with the store's cause "restart": broker_restart in the history.
static void
test_takeover_after_a_restart_says_broker_restart (void **state)
{
    (void)state;
    s_hello (0);
    uint64_t id;
    s_submit (0, 1, 1, 1, &id);
    zl_msg_t ready = s_ready_msg (0, 1);
    assert_int_equal (s_feed (ZLH_BACKEND, 0, &ready), ZL_TURN_OK);
    assert_non_null (s_find (ZLH_BACKEND, ZL_MSG_DISPATCH));
    s_next_election (ZL_ROLE_UNREACHABLE, NULL, NULL, NULL, NULL);
    s_stats ();
    s_next_election (ZL_ROLE_LEADER, NULL, NULL, NULL, NULL);
    F.cause = "restart";
    s_stats ();
    zl_msg_t show = s_admin_msg (ZL_ADMIN_DLQ_SHOW, id);
    assert_int_equal (s_feed (ZLH_ADMIN, 0, &show), ZL_TURN_OK);
    const seen_t *r = s_find (ZLH_ADMIN, ZL_MSG_ADMIN_REPLY);
    assert_non_null (r);
    assert_int_equal (r->n_attempts, 1);
    assert_int_equal (r->outcomes[0], ZL_OUTCOME_BROKER_RESTART);
}

// A fenced commit: the turn returns OK but sends none of its promises, the
// broker stands by (NOT_LEADER from then on, state forgotten), and the
// fenced turn's job is not in the store when the broker leads again.
static void
test_fenced_commit_sends_nothing (void **state)
{
    (void)state;
    s_hello (0);
    uint64_t kept;
    s_submit (0, 1, 1, 0, &kept);
    F.commit = ZL_STORE_FENCED;
    zl_msg_t sub = s_submit_msg (2, 2, NULL, 0);
    assert_int_equal (s_feed (ZLH_FRONTEND, 0, &sub), ZL_TURN_OK);
    assert_false (s_any_promise ());
    // the producer is told to start again, at a leader it does not know yet
    assert_int_equal (T.n_got, 1);
    assert_int_equal (T.got[0].error, ZL_ERR_NOT_LEADER);
    assert_int_equal (T.got[0].n_leader, 0);
    F.commit = ZL_STORE_OK;
    zl_msg_t hello = s_hello_msg ();
    seen_t e = s_refused (ZLH_FRONTEND, &hello);
    assert_int_equal (e.error, ZL_ERR_NOT_LEADER);
    seen_t st = s_stats ();
    assert_string_equal (st.role, "standby");
    assert_int_equal (st.ready, 0);
    assert_int_equal (st.stepdowns, 1);

    s_next_election (ZL_ROLE_LEADER, NULL, NULL, NULL, NULL);
    F.take_over = true;
    st = s_stats ();
    assert_string_equal (st.role, "leader");
    assert_int_equal (st.ready, 1); // the first job, not the fenced turn's two
    zl_msg_t ready = s_ready_msg (1, 4);
    assert_int_equal (s_feed (ZLH_BACKEND, 1, &ready), ZL_TURN_OK);
    const seen_t *d = s_find (ZLH_BACKEND, ZL_MSG_DISPATCH);
    assert_non_null (d);
    assert_int_equal (d->n, 1);
    assert_int_equal (d->ids[0], kept);
}

// A commit lost with the database (its fate unknown: here it landed):
// nothing is sent, the broker refuses UNAVAILABLE; once it leads again, the
// producer's resend under the same key finds the job: Accepted duplicate.
static void
test_unavailable_commit_and_the_resend (void **state)
{
    (void)state;
    s_hello (0);
    F.commit = ZL_STORE_UNAVAILABLE;
    F.commit_lands = true;
    zl_msg_t sub = s_submit_msg (1, 1, "order-17", 0);
    assert_int_equal (s_feed (ZLH_FRONTEND, 0, &sub), ZL_TURN_OK);
    assert_false (s_any_promise ());
    assert_int_equal (T.n_got, 1); // told to come back later
    assert_int_equal (T.got[0].error, ZL_ERR_UNAVAILABLE);
    F.commit = ZL_STORE_OK;
    assert_int_equal (s_feed (ZLH_FRONTEND, 0, &sub), ZL_TURN_OK);
    const seen_t *rej = s_find (ZLH_FRONTEND, ZL_MSG_REJECTED);
    assert_non_null (rej);
    assert_int_equal (rej->reject[0], ZL_REJECT_UNAVAILABLE);
    assert_string_equal (s_stats ().role, "unreachable");

    s_next_election (ZL_ROLE_LEADER, NULL, NULL, NULL, NULL);
    zl_msg_t hello = s_hello_msg ();
    assert_int_equal (s_feed (ZLH_FRONTEND, 0, &hello), ZL_TURN_OK);
    assert_int_equal (s_feed (ZLH_FRONTEND, 0, &sub), ZL_TURN_OK);
    const seen_t *acc = s_find (ZLH_FRONTEND, ZL_MSG_ACCEPTED);
    assert_non_null (acc);
    assert_int_equal (acc->n, 1);
    assert_true (acc->duplicate[0]);
    assert_int_equal (s_stats ().ready, 1);
}

// Recovery whose commit is fenced (another broker took the lead while this
// one loaded): the broker stands by instead of stopping, and loads the
// store at its next lead.
static void
test_fenced_recovery_stands_by (void **state)
{
    (void)state;
    s_hello (0);
    uint64_t ids[2];
    s_submit (0, 1, 2, 0, ids);
    zl_msg_t ready = s_ready_msg (0, 4);
    assert_int_equal (s_feed (ZLH_BACKEND, 0, &ready), ZL_TURN_OK); // leased: recovery writes
    s_next_election (ZL_ROLE_STANDBY, NULL, NULL, NULL, NULL);
    s_stats ();
    s_next_election (ZL_ROLE_LEADER, NULL, NULL, NULL, NULL);
    F.take_over = true;
    F.commit = ZL_STORE_FENCED;
    seen_t st = s_stats ();
    assert_string_equal (st.role, "standby");
    assert_int_equal (st.ready, 0);
    F.commit = ZL_STORE_OK;
    s_next_election (ZL_ROLE_LEADER, NULL, NULL, NULL, NULL);
    F.take_over = true;
    st = s_stats ();
    assert_string_equal (st.role, "leader");
    assert_int_equal (st.ready, 2);
}

// An election that says this broker took the lead while it was leading
// (its lease lapsed unseen, and others may have led since): it loads the
// store again, and tells its producers and workers to say Hello and Ready
// again.
static void
test_lead_taken_again_starts_over (void **state)
{
    (void)state;
    s_hello (0);
    uint64_t id;
    s_submit (0, 1, 1, 0, &id);
    zl_msg_t ready = s_ready_msg (0, 1);
    assert_int_equal (s_feed (ZLH_BACKEND, 0, &ready), ZL_TURN_OK);
    s_next_election (ZL_ROLE_LEADER, NULL, NULL, NULL, NULL);
    F.take_over = true;
    F.epoch = 9;
    seen_t st = s_stats ();
    assert_string_equal (st.role, "leader");
    assert_int_equal (st.stepdowns, 1);
    assert_int_equal (st.ready, 1); // the leased job, ready again
    const seen_t *told = s_find (ZLH_FRONTEND, ZL_MSG_ERROR);
    assert_non_null (told);
    assert_int_equal (told->error, ZL_ERR_NOT_READY);
    told = s_find (ZLH_BACKEND, ZL_MSG_ERROR);
    assert_non_null (told);
    assert_int_equal (told->error, ZL_ERR_NOT_READY);
}

// A broker that starts as a standby loads nothing until it leads; its loop
// waits for the next election (here 10 s away on the harness's clock)
// rather than spinning on heartbeat and alert times it does not keep.
static void
test_standby_at_start_waits_for_its_election (void **state)
{
    (void)state;
    s_hello (0);
    uint64_t id;
    s_submit (0, 1, 1, 0, &id);
    s_stop ();
    s_next_election (ZL_ROLE_STANDBY, "broker-b:77", "tcp://b:5570", "tcp://b:5571",
                     "tcp://b:5573");
    s_start (); // elects once at start, then its turns (zlh_new's) elect no more
    int elects = F.elects;
    F.due = zl_clock_mono_ms () + 10000;
    zlh_clock_advance_us (5 * 1000000); // past heartbeat and alert times
    struct timespec t0, t1;
    clock_gettime (CLOCK_MONOTONIC, &t0);
    assert_int_equal (zl_broker_turn (T.broker, 200), ZL_TURN_OK);
    clock_gettime (CLOCK_MONOTONIC, &t1);
    int64_t waited_ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    assert_true (waited_ms >= 150); // it waited (for input or its election)
    assert_int_equal (F.elects, elects);
    seen_t st = s_stats ();
    assert_string_equal (st.role, "standby");
    assert_int_equal (st.ready, 0);
    // its election comes and says it leads: it loads the store, finds the job
    s_next_election (ZL_ROLE_LEADER, NULL, NULL, NULL, NULL);
    st = s_stats ();
    assert_int_equal (F.elects, elects + 1);
    assert_string_equal (st.role, "leader");
    assert_int_equal (st.ready, 1);
    assert_int_equal (F.elects_in_batch, 0);
}

// The metrics page shows the role, the epoch and reachability.
static void
test_metrics_show_the_role (void **state)
{
    (void)state;
    zl_stats_t st = {.store_backend = "postgresql",
                     .role = "standby",
                     .epoch = 12,
                     .store_reachable = true,
                     .takeovers = 2,
                     .fenced = 3};
    size_t len;
    char *page = zl_metrics_render (&st, true, &len);
    static const char *const want[] = {"zlane_store_role{role=\"leader\"} 0\n",
                                       "zlane_store_role{role=\"standby\"} 1\n",
                                       "zlane_store_role{role=\"unreachable\"} 0\n",
                                       "zlane_store_epoch 12\n",
                                       "zlane_store_reachable 1\n",
                                       "zlane_store_takeovers_total 2\n",
                                       "zlane_store_fenced_total 3\n",
                                       "# TYPE zlane_store_role gauge\n",
                                       "# TYPE zlane_store_fenced_total counter\n"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr (page, want[i]))
            fail_msg ("the page lacks '%s'", want[i]);
    free (page);
    st.role = "unreachable";
    st.store_reachable = false;
    page = zl_metrics_render (&st, true, &len);
    assert_non_null (strstr (page, "zlane_store_role{role=\"unreachable\"} 1\n"));
    assert_non_null (strstr (page, "zlane_store_reachable 0\n"));
    free (page);
}

#define T_(fn) cmocka_unit_test_setup_teardown (fn, s_setup, s_teardown)

int
main (void)
{
    const struct CMUnitTest tests[] = {
        T_ (test_lmdb_leads_at_epoch_0),
        T_ (test_standby_names_the_leader),
        T_ (test_standby_without_a_leader),
        T_ (test_unreachable_refuses_until_the_database_answers),
        T_ (test_takeover_recovers_and_ends_running_attempts),
        T_ (test_takeover_after_a_restart_says_broker_restart),
        T_ (test_fenced_commit_sends_nothing),
        T_ (test_unavailable_commit_and_the_resend),
        T_ (test_fenced_recovery_stands_by),
        T_ (test_lead_taken_again_starts_over),
        T_ (test_standby_at_start_waits_for_its_election),
        T_ (test_metrics_show_the_role),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
