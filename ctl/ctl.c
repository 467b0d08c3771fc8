/*  zlane-ctl: the operator's tool. Talks to the broker's admin socket
    (stats, dead-letter queue, lanes), subscribes to its events socket and
    makes CURVE certificates (keygen). */
#include "clock.h"
#include "codec.h"
#include "curve.h"
#include "eplist.h"
#include "json.h"
#include "rng.h"
#include "store_copy.h"
#include "wire.h"

#include <ctype.h>
#include <czmq.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *admin;
    const char *events;
    uint64_t timeout_ms;
    int json;
    const char *curve_server; // the broker's public certificate (--curve-server)
    const char *cert;         // this client's secret certificate (--cert)
    zl_curve_t curve;         // loaded from the two above; off when both are absent
} opts_t;

static volatile int s_stop = 0;

static void
s_on_signal (int sig)
{
    (void)sig;
    s_stop = 1;
}

static void
s_usage (FILE *out)
{
    fprintf (
        out,
        "Usage: zlane-ctl [--admin EP] [--events EP] [--timeout DUR] [--json]\n"
        "                 [--curve-server FILE --cert FILE] COMMAND ...\n"
        "\n"
        "Commands:\n"
        "  stats [--counter NAME] [--latency NAME]\n"
        "        per lane and tenant: ready, delayed, in flight, DLQ depth, oldest\n"
        "        ages, acks, nacks by class, lease expiries; broker counters\n"
        "  dlq list [--lane L] [--tenant T] [--error TEXT] [--since DUR] [--until DUR]\n"
        "           [--limit N] [--after ID]\n"
        "  dlq show ID                 one dead letter with its attempt history\n"
        "  dlq redrive (--all | FILTER | ID...)   attempts reset (FILTER: as for list)\n"
        "  dlq purge   (--all | FILTER | ID...)\n"
        "  workers                     connected workers: name, host, lanes, capacity,\n"
        "                              jobs in flight, last heard from\n"
        "  job show ID                 a job's state, or its outcome once final (acked\n"
        "                              with its result, or dead-lettered with its error)\n"
        "  job result ID               only the result's bytes (exit 4: dead-lettered,\n"
        "                              5: unknown or not kept, 6: not final yet)\n"
        "  batch show ID               a batch's progress (jobs joined, acked, dead,\n"
        "                              cancelled, pending), or its summary once settled\n"
        "  schedule add NAME --cron EXPR --lane L --tenant T [--missed skip|catch_up[:N]]\n"
        "               [--header K=V]... [--paused] PAYLOAD\n"
        "                              a cron schedule (UTC; 'm h dom mon dow', @hourly,\n"
        "                              '@every 30s'): a job per tick, once (replaces one\n"
        "                              of that name)\n"
        "  schedule list | remove NAME | pause NAME | resume NAME\n"
        "  pause LANE | resume LANE    stop / restart dispatch from a lane\n"
        "  cancel ID...                cancel jobs: ready, delayed, dead-lettered or\n"
        "                              running (its worker is told to stop it)\n"
        "  tail [--topic PREFIX]       print each event (dlq.<lane>.<tenant>, alert.dlq,\n"
        "                              done.<lane>.<tenant> for lanes with publish_done,\n"
        "                              batch.<id> when a batch settles)\n"
        "  store copy --from DIR --to LOCATION [--batch N]\n"
        "        move a stopped broker's LMDB store into an empty PostgreSQL store,\n"
        "        then verify the counts (offline: no broker may run on either)\n"
        "  keygen NAME [--role R] [--tenants LIST] [--lanes LIST] [--dir DIR]\n"
        "        write a CURVE certificate pair: DIR/NAME (public) and DIR/NAME_secret\n"
        "\n"
        "Options:\n"
        "  --admin EP     broker admin endpoint   [tcp://127.0.0.1:5573]\n"
        "  --events EP    broker events endpoint  [tcp://127.0.0.1:5572]\n"
        "                 Both take a comma-separated list (brokers sharing a store):\n"
        "                 requests go to one at a time until one answers (a standby's\n"
        "                 NOT_LEADER sends them to the leader); tail listens to all.\n"
        "                 One --curve-server key serves for every broker of the list.\n"
        "  --timeout DUR  how long to wait for the broker(s) [5s]\n"
        "  --json         machine-readable output (one JSON object per line)\n"
        "  --curve-server FILE  the broker's public certificate: talk CURVE\n"
        "                 (default $ZLANE_CURVE_SERVER)\n"
        "  --cert FILE    this operator's secret certificate, NAME_secret from keygen\n"
        "                 (default $ZLANE_CERT)\n"
        "  -h, --help     this help (also: zlane-ctl COMMAND --help)\n"
        "\n"
        "With CURVE the broker checks the key's role: stats, dlq list and dlq show\n"
        "need admin or subscriber, redrive, purge, pause, resume and cancel need admin,\n"
        "tail needs subscriber or admin (other keys are refused at the handshake).\n"
        "\n"
        "Exit status: 0 ok, 1 the broker refused or failed, 2 usage, 3 broker unreachable\n"
        "(or it refused the CURVE handshake: an unknown key, or plaintext to a CURVE broker).\n");
}

static int
s_fail_usage (const char *fmt, const char *arg)
{
    fprintf (stderr, "zlane-ctl: ");
    fprintf (stderr, fmt, arg);
    fprintf (stderr, " (see zlane-ctl --help)\n");
    return 2;
}

// ---------------------------------------------------------------- connecting
// A socket to the broker with this operator's CURVE keys (if any) and a
// monitor that reports failed handshakes: a refused key is said at once
// instead of showing up as silence.
typedef struct {
    zsock_t *sock;
    void *handle;
    zsock_t *monitor; // PAIR receiving the socket's handshake failures
    const char *endpoint;
} conn_t;

#define S_HANDSHAKE_FAILED                                                                         \
    (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |                       \
     ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)

// Connect `c` to every endpoint of `brokers` from `first` on (one for
// requests, all for tail); `what` names them in errors, `events` the
// monitor events to watch. Returns 0, or 2 after saying why (a bad
// endpoint).
static int
s_conn_open (conn_t *c, const opts_t *o, int type, zl_eplist_t *brokers, size_t first, size_t n,
             const char *what, int events)
{
    static unsigned conns; // inproc names must be unique: sockets close lazily
    memset (c, 0, sizeof *c);
    c->endpoint = n == 1 ? zl_eplist_current (brokers) : zl_eplist_text (brokers);
    c->sock = zsock_new (type);
    c->handle = zsock_resolve (c->sock);
    int linger = 0;
    zmq_setsockopt (c->handle, ZMQ_LINGER, &linger, sizeof linger);
    zl_curve_apply (&o->curve, c->sock); // brokers of one deployment share their key
    char monitor[64];
    snprintf (monitor, sizeof monitor, "inproc://zlane-ctl-monitor-%u", conns++);
    c->monitor = zsock_new (ZMQ_PAIR);
    zmq_socket_monitor (c->handle, monitor, events);
    zmq_connect (zsock_resolve (c->monitor), monitor);
    for (size_t i = first; i < first + n; i++) {
        const char *endpoint = n == 1 ? zl_eplist_current (brokers) : zl_eplist_at (brokers, i);
        if (zmq_connect (c->handle, endpoint) != 0) {
            fprintf (stderr, "zlane-ctl: bad %s endpoint '%s': %s\n", what, endpoint,
                     zmq_strerror (errno));
            return 2;
        }
    }
    return 0;
}

// Parse a --admin or --events list and check that ZeroMQ takes every
// endpoint of it; NULL after saying why.
static zl_eplist_t *
s_brokers (const char *text, const char *what)
{
    zl_eplist_t *brokers = zl_eplist_new (text);
    const char *bad = NULL;
    if (!brokers)
        fprintf (stderr, "zlane-ctl: bad %s endpoint list '%s' (an entry is empty or too long)\n",
                 what, text);
    else if (zl_eplist_probe (brokers, &bad) != 0) {
        fprintf (stderr, "zlane-ctl: bad %s endpoint '%s': %s\n", what, bad, zmq_strerror (errno));
        zl_eplist_destroy (&brokers);
    }
    return brokers;
}

static void
s_conn_close (conn_t *c)
{
    if (c->handle)
        zmq_socket_monitor (c->handle, NULL, 0);
    zsock_destroy (&c->monitor);
    zsock_destroy (&c->sock);
    c->handle = NULL;
}

typedef enum { S_CONN_OK = 0, S_CONN_REFUSED, S_CONN_NOBODY } s_conn_event_t;

// Read one event from the monitor, if there is one: a handshake failure
// (its reason in words in `why`: S_CONN_REFUSED) or a dial that found
// nothing listening (S_CONN_NOBODY); S_CONN_OK if there was none.
static s_conn_event_t
s_conn_refused (conn_t *c, const opts_t *o, char *why, size_t size)
{
    zmq_msg_t m;
    zmq_msg_init (&m);
    if (zmq_msg_recv (&m, zsock_resolve (c->monitor), ZMQ_DONTWAIT) < 0) {
        zmq_msg_close (&m);
        return S_CONN_OK;
    }
    uint16_t event = 0;
    uint32_t value = 0;
    if (zmq_msg_size (&m) >= 6) {
        memcpy (&event, zmq_msg_data (&m), 2);
        memcpy (&value, (const uint8_t *)zmq_msg_data (&m) + 2, 4);
    }
    while (zmq_msg_more (&m)) // the endpoint frame
        if (zmq_msg_recv (&m, zsock_resolve (c->monitor), ZMQ_DONTWAIT) < 0)
            break;
    zmq_msg_close (&m);
    bool curve = zl_curve_enabled (&o->curve);
    if (event == ZMQ_EVENT_CONNECT_RETRIED) {
        snprintf (why, size, "nothing answers at %s", c->endpoint);
        return S_CONN_NOBODY;
    }
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
        snprintf (why, size,
                  "the broker at %s refused this key (ZAP status %u): is its public "
                  "certificate in the broker's clients directory?",
                  c->endpoint, value);
    else if (!curve)
        snprintf (why, size,
                  "the broker at %s refused the plaintext handshake: it requires "
                  "CURVE, give --curve-server FILE and --cert FILE",
                  c->endpoint);
    else if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
        snprintf (why, size, "the broker at %s does not use CURVE: drop --curve-server and --cert",
                  c->endpoint);
    else
        snprintf (why, size, "the handshake with the broker at %s failed (event 0x%x, 0x%x)%s",
                  c->endpoint, event, value,
                  curve ? ": is --curve-server the broker's public certificate?" : "");
    return S_CONN_REFUSED;
}

// ---------------------------------------------------------------- request
// Send `req` and wait for the reply, from one broker of the --admin list at
// a time: the first, then the next whenever one finds nothing listening,
// refuses the handshake or stays silent for its share of --timeout, and the
// leader a standby names (Error NOT_LEADER). Returns 0 with `reply` decoded
// (borrowed from `codec`), 1 if a broker answered with another Error, 2 for
// a bad endpoint, 3 if none answered in time or every one refused us.
static int
s_request (const opts_t *o, zl_codec_t *codec, zl_admin_request_t *req, zl_msg_t *reply,
           conn_t *conn)
{
    zl_eplist_t *brokers = s_brokers (o->admin, "admin");
    if (!brokers)
        return 2;
    size_t n = zl_eplist_size (brokers);
    zl_rng_t rng;
    zl_rng_seed (&rng, 0);
    req->request_id = zl_rng_next (&rng) >> 1;
    zl_msg_t m = {.kind = ZL_MSG_ADMIN_REQUEST};
    m.u.admin_request = *req;
    int64_t deadline = zl_clock_mono_ms () + (int64_t)o->timeout_ms;
    size_t untried = n; // brokers of the list not yet tried since the last NOT_LEADER
    int rc = 3, hops = 0;
    bool unavailable = false; // the last broker that answered has no database
    char why[512] = "";
    for (; untried > 0 && zl_clock_mono_ms () < deadline; untried--) {
        unavailable = false;
        if (s_conn_open (conn, o, ZMQ_DEALER, brokers, 0, 1, "admin",
                         S_HANDSHAKE_FAILED | (n > 1 ? ZMQ_EVENT_CONNECT_RETRIED : 0)) != 0) {
            rc = 2;
            break;
        }
        void *s = conn->handle;
        // never a blocking send: a handshake the broker refuses can end the
        // connection's pipe before the request is queued, and a DEALER with
        // no pipe blocks a send for ever; the monitor says why meanwhile
        bool sent = zl_wire_send (s, codec, &m, ZMQ_DONTWAIT) == 0;
        // a share of what is left, so that every broker of the list gets one
        int64_t now = zl_clock_mono_ms ();
        int64_t until = now + (deadline - now) / (int64_t)untried;
        bool next = false;
        while (!next) {
            long left = (long)(until - zl_clock_mono_ms ());
            if (left <= 0)
                break;
            zmq_pollitem_t items[] = {{s, 0, (short)(ZMQ_POLLIN | (sent ? 0 : ZMQ_POLLOUT)), 0},
                                      {zsock_resolve (conn->monitor), 0, ZMQ_POLLIN, 0}};
            if (zmq_poll (items, 2, left) <= 0)
                continue;
            if (!sent && (items[0].revents & ZMQ_POLLOUT))
                sent = zl_wire_send (s, codec, &m, ZMQ_DONTWAIT) == 0;
            s_conn_event_t ev = s_conn_refused (conn, o, why, sizeof why);
            if (ev != S_CONN_OK) {
                if (ev == S_CONN_REFUSED || n > 1)
                    fprintf (stderr, "zlane-ctl: %s\n", why);
                if (ev == S_CONN_REFUSED && n == 1) {
                    zl_eplist_destroy (&brokers);
                    s_conn_close (conn);
                    return 3;
                }
                next = true;
                break;
            }
            if (!(items[0].revents & ZMQ_POLLIN))
                continue;
            zmq_msg_t frame;
            zmq_msg_init (&frame);
            if (zmq_msg_recv (&frame, s, 0) < 0) {
                zmq_msg_close (&frame);
                continue;
            }
            zl_decode_rc_t drc =
                zl_codec_decode (codec, zmq_msg_data (&frame), zmq_msg_size (&frame), reply);
            zmq_msg_close (&frame);
            if (drc != ZL_DECODE_OK)
                continue;
            if (reply->kind == ZL_MSG_ADMIN_REQUEST) {
                // our own request: the socket met itself (a dial to a closed
                // loopback port can), no broker there
                snprintf (why, sizeof why, "nothing but ourselves at %s", conn->endpoint);
                fprintf (stderr, "zlane-ctl: %s\n", why);
                next = true;
                break;
            }
            if (reply->kind == ZL_MSG_ERROR && reply->u.error.code == ZL_ERR_NOT_LEADER &&
                hops < 2 * (int)n + 2) {
                // a standby did nothing: ask the leader it names (or the next)
                fprintf (stderr, "zlane-ctl: the broker at %s is not the leader: %s\n",
                         conn->endpoint, reply->u.error.message);
                hops++;
                bool named =
                    zl_eplist_follow (brokers, reply->u.error.n_leader_endpoints,
                                      (const char *const *)reply->u.error.leader_endpoints);
                untried = named ? n + 2 : untried; // the leader, then the list again
                s_conn_close (conn);
                goto moved;
            }
            if (reply->kind == ZL_MSG_ERROR && reply->u.error.code == ZL_ERR_UNAVAILABLE) {
                // its database does not answer, it did nothing: the next
                // broker, or this one again a little later
                fprintf (stderr, "zlane-ctl: the broker at %s cannot reach its database: %s\n",
                         conn->endpoint, reply->u.error.message);
                unavailable = true;
                next = true;
                break;
            }
            if (reply->kind == ZL_MSG_ERROR) {
                fprintf (stderr, "zlane-ctl: broker error: %s: %s\n",
                         zl_error_code_name (reply->u.error.code), reply->u.error.message);
                zl_eplist_destroy (&brokers);
                s_conn_close (conn);
                return 1;
            }
            if (reply->kind == ZL_MSG_ADMIN_REPLY &&
                reply->u.admin_reply.request_id == req->request_id) {
                conn->endpoint = NULL; // it was the list's
                zl_eplist_destroy (&brokers);
                return 0; // conn stays open; the reply borrows nothing from it
            }
        }
        if (!next && n > 1)
            fprintf (stderr, "zlane-ctl: no answer from the broker at %s\n", conn->endpoint);
        s_conn_close (conn);
        zl_eplist_next (brokers);
        int64_t left = deadline - zl_clock_mono_ms ();
        if (unavailable && untried == 1 && left > 0) {
            // every broker tried, the last without its database: the list
            // again after a pause, until --timeout
            untried = n + 1;
            poll (NULL, 0, left < 250 ? (int)left : 250);
        }
        continue;
    moved:;
    }
    if (unavailable) {
        fprintf (stderr,
                 "zlane-ctl: the broker%s at %s could not reach %s database within %" PRIu64
                 " ms; nothing was done\n",
                 n > 1 ? "s" : "", zl_eplist_text (brokers), n > 1 ? "their" : "its",
                 o->timeout_ms);
        rc = 1;
    } else if (rc == 3)
        fprintf (stderr, "zlane-ctl: no answer from the broker%s at %s within %" PRIu64 " ms%s\n",
                 n > 1 ? "s" : "", zl_eplist_text (brokers), o->timeout_ms,
                 zl_curve_enabled (&o->curve) ? ""
                                              : " (if it runs with --curve, give --curve-server "
                                                "and --cert)");
    zl_eplist_destroy (&brokers);
    s_conn_close (conn);
    return rc;
}

static int
s_admin (const opts_t *o, zl_codec_t *codec, zl_admin_request_t *req, zl_msg_t *reply)
{
    conn_t conn = {0};
    int rc = s_request (o, codec, req, reply, &conn);
    s_conn_close (&conn);
    if (rc != 0)
        return rc;
    if (!reply->u.admin_reply.ok) {
        fprintf (stderr, "zlane-ctl: %s\n", reply->u.admin_reply.error);
        return 1;
    }
    return 0;
}

// ---------------------------------------------------------------- output
static void
s_time (char *buf, size_t size, uint64_t wall_ms)
{
    time_t secs = (time_t)(wall_ms / 1000);
    struct tm tm;
    gmtime_r (&secs, &tm);
    size_t n = strftime (buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf (buf + n, size - n, ".%03uZ", (unsigned)(wall_ms % 1000));
}

static void
s_age (char *buf, size_t size, uint64_t ms)
{
    if (ms < 10000)
        snprintf (buf, size, "%" PRIu64 "ms", ms);
    else if (ms < 600000)
        snprintf (buf, size, "%.1fs", (double)ms / 1000);
    else
        snprintf (buf, size, "%.1fm", (double)ms / 60000);
}

static void
s_json_group (FILE *out, const zl_group_stats_t *g)
{
    fprintf (out, "{\"lane\":");
    zl_json_str (out, g->lane);
    fprintf (out, ",\"tenant\":");
    zl_json_str (out, g->tenant);
    fprintf (out,
             ",\"ready\":%" PRIu64 ",\"delayed\":%" PRIu64 ",\"in_flight\":%" PRIu64
             ",\"dlq\":%" PRIu64 ",\"oldest_ready_age_ms\":%" PRIu64
             ",\"oldest_dlq_age_ms\":%" PRIu64 ",\"submitted\":%" PRIu64 ",\"acked\":%" PRIu64
             ",\"nacked_transient\":%" PRIu64 ",\"nacked_throttled\":%" PRIu64
             ",\"nacked_permanent\":%" PRIu64 ",\"lease_expired\":%" PRIu64
             ",\"dead_lettered\":%" PRIu64 ",\"run_us\":%" PRIu64 ",\"throttled\":%" PRIu64
             ",\"capped\":%" PRIu64 ",\"paused\":%s}",
             g->ready, g->delayed, g->in_flight, g->dlq, g->oldest_ready_age_ms,
             g->oldest_dlq_age_ms, g->submitted, g->acked, g->nacked_transient, g->nacked_throttled,
             g->nacked_permanent, g->lease_expired, g->dead_lettered, g->run_us, g->throttled,
             g->capped, g->paused ? "true" : "false");
}

static void
s_json_groups (FILE *out, const char *name, const zl_group_stats_t *g, size_t n)
{
    fprintf (out, ",\"%s\":[", name);
    for (size_t i = 0; i < n; i++) {
        if (i)
            fputc (',', out);
        s_json_group (out, &g[i]);
    }
    fputc (']', out);
}

// Counter `name` of `st`, 0 if it has none.
static uint64_t
s_counter_of (const zl_stats_t *st, const char *name)
{
    for (size_t i = 0; i < st->n_counters; i++)
        if (!strcmp (st->counters[i].name, name))
            return st->counters[i].value;
    return 0;
}

// A breaker state's name, as breaker.h spells it.
static const char *
s_breaker_name (uint32_t state)
{
    return state == 1 ? "open" : state == 2 ? "half_open" : "closed";
}

static void
s_print_stats_json (const zl_stats_t *st)
{
    printf ("{\"uptime_ms\":%" PRIu64 ",\"workers\":%u,\"producers\":%u,\"store_backend\":",
            st->uptime_ms, st->workers, st->producers);
    zl_json_str (stdout, st->store_backend ? st->store_backend : "");
    printf (",\"role\":");
    zl_json_str (stdout, st->role ? st->role : "");
    printf (",\"epoch\":%" PRIu64 ",\"store_reachable\":%s,\"takeovers\":%" PRIu64
            ",\"fenced\":%" PRIu64 ",\"leader\":",
            st->epoch, st->store_reachable ? "true" : "false", st->takeovers, st->fenced);
    zl_json_str (stdout, st->leader ? st->leader : "");
    printf (",\"counters\":{");
    for (size_t i = 0; i < st->n_counters; i++)
        printf ("%s\"%s\":%" PRIu64, i ? "," : "", st->counters[i].name, st->counters[i].value);
    printf ("},\"latencies\":{");
    for (size_t i = 0; i < st->n_latencies; i++) {
        const zl_latency_t *l = &st->latencies[i];
        printf ("%s\"%s\":{\"count\":%" PRIu64 ",\"p50_us\":%" PRIu64 ",\"p90_us\":%" PRIu64
                ",\"p99_us\":%" PRIu64 ",\"max_us\":%" PRIu64 "}",
                i ? "," : "", l->name, l->count, l->p50_us, l->p90_us, l->p99_us, l->max_us);
    }
    printf ("}");
    s_json_groups (stdout, "lanes", st->lanes, st->n_lanes);
    s_json_groups (stdout, "tenants", st->tenants, st->n_tenants);
    s_json_groups (stdout, "groups", st->groups, st->n_groups);
    printf (",\"breakers\":[");
    for (size_t i = 0; i < st->n_breakers; i++) {
        const zl_breaker_info_t *b = &st->breakers[i];
        printf ("%s{\"lane\":", i ? "," : "");
        zl_json_str (stdout, b->lane);
        printf (",\"state\":\"%s\",\"failures\":%u,\"until_ms\":%" PRIu64
                ",\"probes_out\":%u,\"opened\":%" PRIu64 "}",
                s_breaker_name (b->state), b->failures, b->until_ms, b->probes_out, b->opened);
    }
    printf ("]}\n");
}

static void
s_print_row (const char *lane, const char *tenant, const zl_group_stats_t *g)
{
    char ra[16], da[16];
    s_age (ra, sizeof ra, g->oldest_ready_age_ms);
    s_age (da, sizeof da, g->oldest_dlq_age_ms);
    printf ("%-14.14s %-14.14s %8" PRIu64 " %7" PRIu64 " %8" PRIu64 " %6" PRIu64
            " %8s %8s %9" PRIu64 " %6" PRIu64 "/%" PRIu64 "/%" PRIu64 " %7" PRIu64 "%s\n",
            lane, tenant, g->ready, g->delayed, g->in_flight, g->dlq, ra, da, g->acked,
            g->nacked_transient, g->nacked_throttled, g->nacked_permanent, g->lease_expired,
            g->paused ? "  (paused)" : "");
}

static void
s_print_stats (const zl_stats_t *st)
{
    for (size_t i = 0; i < st->n_breakers; i++) {
        const zl_breaker_info_t *b = &st->breakers[i];
        printf ("breaker %s: %s, %u failure(s) in its window, opened %" PRIu64 " time(s)\n",
                b->lane, s_breaker_name (b->state), b->failures, b->opened);
    }
    printf ("uptime %.1fs, %u worker(s), %u producer(s)\n", (double)st->uptime_ms / 1000,
            st->workers, st->producers);
    const char *role = st->role && st->role[0] ? st->role : "?";
    const char *leader = st->leader && st->leader[0] ? st->leader : NULL;
    printf ("role %s, epoch %" PRIu64 "%s%s; store %s, database %s; %" PRIu64
            " takeover(s), %" PRIu64 " fenced commit(s)\n",
            role, st->epoch, strcmp (role, "leader") && leader ? ", the leader is " : "",
            strcmp (role, "leader") && leader ? leader : "",
            st->store_backend && st->store_backend[0] ? st->store_backend : "?",
            st->store_reachable ? "reachable" : "UNREACHABLE", st->takeovers, st->fenced);
    printf ("commits %" PRIu64 ": avg %.2fms, max %.2fms\n", s_counter_of (st, "store_commits"),
            s_counter_of (st, "store_commit_avg_us") / 1000.0,
            s_counter_of (st, "store_commit_max_us") / 1000.0);
    for (size_t i = 0; i < st->n_latencies; i++) {
        const zl_latency_t *l = &st->latencies[i];
        printf ("%-16s n=%" PRIu64 " p50=%.2fms p90=%.2fms p99=%.2fms max=%.2fms\n", l->name,
                l->count, l->p50_us / 1000.0, l->p90_us / 1000.0, l->p99_us / 1000.0,
                l->max_us / 1000.0);
    }
    printf ("\n%-14s %-14s %8s %7s %8s %6s %8s %8s %9s %14s %7s\n", "LANE", "TENANT", "READY",
            "DELAYED", "INFLIGHT", "DLQ", "OLDEST", "DLQ-AGE", "ACKED", "NACK T/TH/P", "EXPIRED");
    for (size_t i = 0; i < st->n_lanes; i++)
        s_print_row (st->lanes[i].lane, "*", &st->lanes[i]);
    for (size_t i = 0; i < st->n_tenants; i++)
        s_print_row ("*", st->tenants[i].tenant, &st->tenants[i]);
    for (size_t i = 0; i < st->n_groups; i++)
        s_print_row (st->groups[i].lane, st->groups[i].tenant, &st->groups[i]);
    printf ("\ncounters:");
    int col = 0;
    for (size_t i = 0; i < st->n_counters; i++) {
        if (!st->counters[i].value)
            continue;
        printf ("%s%s=%" PRIu64, col++ % 4 ? "  " : "\n  ", st->counters[i].name,
                st->counters[i].value);
    }
    printf ("\n");
}

static int
s_cmd_stats (const opts_t *o, int argc, char **argv)
{
    const char *counter = NULL, *latency = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp (argv[i], "--help") || !strcmp (argv[i], "-h")) {
            printf ("Usage: zlane-ctl stats [--json] [--counter NAME] [--latency NAME]\n"
                    "  --counter NAME   print one broker counter's value (e.g. jobs_acked)\n"
                    "  --latency NAME   print 'count p50_us p90_us p99_us max_us' of\n"
                    "                   submit_to_start or submit_to_ack\n");
            return 0;
        }
        if (!strcmp (argv[i], "--counter") && i + 1 < argc)
            counter = argv[++i];
        else if (!strcmp (argv[i], "--latency") && i + 1 < argc)
            latency = argv[++i];
        else
            return s_fail_usage ("stats: unexpected argument '%s'", argv[i]);
    }
    zl_codec_t *codec = zl_codec_new ();
    zl_admin_request_t req = {.op = ZL_ADMIN_STATS};
    zl_msg_t reply;
    int rc = s_admin (o, codec, &req, &reply);
    if (rc == 0) {
        const zl_stats_t *st = &reply.u.admin_reply.stats;
        if (counter) {
            rc = 1;
            for (size_t i = 0; i < st->n_counters; i++)
                if (!strcmp (st->counters[i].name, counter)) {
                    printf ("%" PRIu64 "\n", st->counters[i].value);
                    rc = 0;
                }
            if (rc)
                fprintf (stderr, "zlane-ctl: no counter named '%s'\n", counter);
        } else if (latency) {
            rc = 1;
            for (size_t i = 0; i < st->n_latencies; i++)
                if (!strcmp (st->latencies[i].name, latency)) {
                    const zl_latency_t *l = &st->latencies[i];
                    printf ("%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
                            l->count, l->p50_us, l->p90_us, l->p99_us, l->max_us);
                    rc = 0;
                }
            if (rc)
                fprintf (stderr, "zlane-ctl: no latency named '%s'\n", latency);
        } else if (o->json)
            s_print_stats_json (st);
        else
            s_print_stats (st);
    }
    zl_codec_destroy (&codec);
    return rc;
}

// ---------------------------------------------------------------- dlq
static void
s_print_dead_letter (const opts_t *o, const zl_dead_letter_t *d, bool full)
{
    char enq[40], dead[40];
    s_time (enq, sizeof enq, d->enqueued_at_ms);
    s_time (dead, sizeof dead, d->dead_at_ms);
    if (o->json) {
        printf ("{\"job_id\":%" PRIu64 ",\"lane\":", d->job_id);
        zl_json_str (stdout, d->lane);
        printf (",\"tenant\":");
        zl_json_str (stdout, d->tenant);
        printf (",\"idempotency_key\":");
        zl_json_str (stdout, d->idempotency_key);
        printf (",\"enqueued_at_ms\":%" PRIu64 ",\"dead_at_ms\":%" PRIu64 ",\"error\":",
                d->enqueued_at_ms, d->dead_at_ms);
        zl_json_str (stdout, d->error);
        if (d->ordering_key && d->ordering_key[0]) {
            printf (",\"ordering_key\":");
            zl_json_str (stdout, d->ordering_key);
            printf (",\"ordering_head\":%s", d->ordering_head ? "true" : "false");
        }
        if (full) {
            printf (",\"payload\":");
            zl_json_bytes (stdout, d->payload.data, d->payload.len);
            if (d->checkpoint.len) {
                printf (",\"checkpoint\":");
                zl_json_bytes (stdout, d->checkpoint.data, d->checkpoint.len);
            }
            printf (",\"headers\":{");
            for (size_t i = 0; i < d->n_headers; i++) {
                if (i)
                    putchar (',');
                zl_json_str (stdout, d->headers[i].key);
                putchar (':');
                zl_json_str (stdout, d->headers[i].value);
            }
            printf ("},\"attempts\":[");
            for (size_t i = 0; i < d->n_attempts; i++) {
                const zl_attempt_t *a = &d->attempts[i];
                printf ("%s{\"attempt\":%u,\"worker\":", i ? "," : "", a->attempt);
                zl_json_str (stdout, a->worker);
                printf (",\"started_at_ms\":%" PRIu64 ",\"ended_at_ms\":%" PRIu64
                        ",\"outcome\":\"%s\",\"error\":",
                        a->started_at_ms, a->ended_at_ms, zl_outcome_name (a->outcome));
                zl_json_str (stdout, a->error);
                putchar ('}');
            }
            putchar (']');
        }
        printf ("}\n");
        return;
    }
    if (!full) {
        printf ("%-12" PRIu64 " %-14s %-14s %s  %.80s\n", d->job_id, d->lane, d->tenant, dead,
                d->error);
        return;
    }
    printf ("job %" PRIu64 "\n  lane %s, tenant %s\n  idempotency key %s\n"
            "  enqueued %s\n  dead     %s\n  error    %s\n  payload  %zu bytes: %.*s%s\n",
            d->job_id, d->lane, d->tenant, d->idempotency_key[0] ? d->idempotency_key : "-", enq,
            dead, d->error, d->payload.len, (int)(d->payload.len > 200 ? 200 : d->payload.len),
            (const char *)d->payload.data, d->payload.len > 200 ? "..." : "");
    for (size_t i = 0; i < d->n_headers; i++)
        printf ("  header   %s=%s\n", d->headers[i].key, d->headers[i].value);
    if (d->ordering_key && d->ordering_key[0])
        printf ("  ordering key %s (%s)\n", d->ordering_key,
                d->ordering_head ? "it died at its head: the next job of the key went on"
                                 : "it died waiting its turn");
    if (d->checkpoint.len)
        printf ("  checkpoint %zu bytes: %.*s%s\n", d->checkpoint.len,
                (int)(d->checkpoint.len > 200 ? 200 : d->checkpoint.len),
                (const char *)d->checkpoint.data, d->checkpoint.len > 200 ? "..." : "");
    printf ("  attempts (%zu):\n", d->n_attempts);
    for (size_t i = 0; i < d->n_attempts; i++) {
        const zl_attempt_t *a = &d->attempts[i];
        char st[40];
        s_time (st, sizeof st, a->started_at_ms);
        printf ("    #%u %s on %s, ran %" PRIu64 " ms: %s: %s\n", a->attempt, st, a->worker,
                a->ended_at_ms - a->started_at_ms, zl_outcome_name (a->outcome), a->error);
    }
}

/*  The filter options both list and redrive/purge take: --error TEXT (in the
    final error, any case), --since DUR (died within the last DUR), --until
    DUR (died more than DUR ago). Returns 1 if argv[*i] was one (and moves
    *i past its value), 0 if not, -1 (said why) for a bad value. */
static int
s_filter_option (int argc, char **argv, int *i, zl_dlq_filter_t *f)
{
    const char *a = argv[*i];
    bool since = !strcmp (a, "--since"), until = !strcmp (a, "--until");
    if (!since && !until && strcmp (a, "--error") != 0)
        return 0;
    if (*i + 1 >= argc) {
        fprintf (stderr, "zlane-ctl: dlq: %s needs a value\n", a);
        return -1;
    }
    const char *v = argv[++*i];
    if (!since && !until) {
        f->error_contains = v;
        return 1;
    }
    uint64_t ms;
    if (zl_parse_duration_ms (v, &ms) != 0) {
        fprintf (stderr, "zlane-ctl: dlq: %s '%s' is not a duration (30s, 5m, 2h)\n", a, v);
        return -1;
    }
    uint64_t now = (uint64_t)zl_clock_wall_ms (), at = ms < now ? now - ms : 1;
    if (since)
        f->dead_from_ms = at;
    else
        f->dead_to_ms = at;
    return 1;
}

static int
s_parse_filter (int argc, char **argv, zl_dlq_filter_t *f, uint64_t *ids, const char *cmd)
{
    f->lane = f->tenant = "";
    for (int i = 0; i < argc; i++) {
        int opt = s_filter_option (argc, argv, &i, f);
        if (opt < 0)
            return 2;
        if (opt)
            continue;
        if (!strcmp (argv[i], "--all"))
            f->all = true;
        else if (!strcmp (argv[i], "--lane") && i + 1 < argc)
            f->lane = argv[++i];
        else if (!strcmp (argv[i], "--tenant") && i + 1 < argc)
            f->tenant = argv[++i];
        else {
            uint64_t id;
            if (zl_parse_u64 (argv[i], &id) != 0) {
                fprintf (stderr, "zlane-ctl: dlq %s: '%s' is not a job id or option\n", cmd,
                         argv[i]);
                return 2;
            }
            ids[f->n_ids++] = id;
        }
    }
    f->ids = ids;
    if (!f->all && !f->lane[0] && !f->tenant[0] && !f->n_ids && !f->error_contains &&
        !f->dead_from_ms && !f->dead_to_ms) {
        fprintf (stderr,
                 "zlane-ctl: dlq %s: say which: --all, --lane L, --tenant T, --error TEXT, "
                 "--since DUR, --until DUR or job ids\n",
                 cmd);
        return 2;
    }
    return 0;
}

static int
s_cmd_dlq (const opts_t *o, int argc, char **argv)
{
    if (argc < 1 || !strcmp (argv[0], "--help") || !strcmp (argv[0], "-h")) {
        printf ("Usage: zlane-ctl dlq list [FILTER] [--limit N] [--after ID]\n"
                "       zlane-ctl dlq show ID\n"
                "       zlane-ctl dlq redrive (--all | FILTER | ID...)\n"
                "       zlane-ctl dlq purge (--all | FILTER | ID...)\n"
                "FILTER: any of --lane L, --tenant T, --error TEXT (in the final error,\n"
                "any case), --since DUR (died within the last DUR), --until DUR (died\n"
                "more than DUR ago).\n"
                "redrive puts dead letters back in their lane with a fresh attempt count;\n"
                "purge deletes them.\n");
        return argc < 1 ? 2 : 0;
    }
    const char *sub = argv[0];
    argc--, argv++;
    zl_codec_t *codec = zl_codec_new ();
    zl_admin_request_t req = {0};
    req.filter.lane = req.filter.tenant = "";
    req.lane = "";
    uint64_t *ids = calloc ((size_t)argc + 1, sizeof (uint64_t));
    int rc = 0;
    for (int i = 0; i < argc; i++)
        if (!strcmp (argv[i], "--help") || !strcmp (argv[i], "-h")) {
            printf ("see: zlane-ctl dlq --help\n");
            goto done;
        }
    if (!strcmp (sub, "list")) {
        req.op = ZL_ADMIN_DLQ_LIST;
        for (int i = 0; i < argc; i++) {
            uint64_t v;
            int opt = s_filter_option (argc, argv, &i, &req.filter);
            if (opt < 0) {
                rc = 2;
                goto done;
            }
            if (opt)
                continue;
            if (!strcmp (argv[i], "--lane") && i + 1 < argc)
                req.filter.lane = argv[++i];
            else if (!strcmp (argv[i], "--tenant") && i + 1 < argc)
                req.filter.tenant = argv[++i];
            else if (!strcmp (argv[i], "--limit") && i + 1 < argc &&
                     !zl_parse_u64 (argv[i + 1], &v))
                req.limit = (uint32_t)v, i++;
            else if (!strcmp (argv[i], "--after") && i + 1 < argc &&
                     !zl_parse_u64 (argv[i + 1], &v))
                req.after_id = v, i++;
            else {
                rc = s_fail_usage ("dlq list: unexpected argument '%s'", argv[i]);
                goto done;
            }
        }
    } else if (!strcmp (sub, "show")) {
        req.op = ZL_ADMIN_DLQ_SHOW;
        if (argc != 1 || zl_parse_u64 (argv[0], &req.job_id) != 0) {
            rc = s_fail_usage ("dlq show wants one job id%s", "");
            goto done;
        }
    } else if (!strcmp (sub, "redrive") || !strcmp (sub, "purge")) {
        req.op = !strcmp (sub, "redrive") ? ZL_ADMIN_DLQ_REDRIVE : ZL_ADMIN_DLQ_PURGE;
        if ((rc = s_parse_filter (argc, argv, &req.filter, ids, sub)) != 0)
            goto done;
    } else {
        rc = s_fail_usage ("unknown dlq command '%s'", sub);
        goto done;
    }
    zl_msg_t reply;
    rc = s_admin (o, codec, &req, &reply);
    if (rc != 0)
        goto done;
    const zl_admin_reply_t *r = &reply.u.admin_reply;
    if (req.op == ZL_ADMIN_DLQ_LIST) {
        if (!o->json)
            printf ("%-12s %-14s %-14s %-24s  %s\n", "JOB", "LANE", "TENANT", "DEAD AT", "ERROR");
        for (size_t i = 0; i < r->n_dead_letters; i++)
            s_print_dead_letter (o, &r->dead_letters[i], false);
    } else if (req.op == ZL_ADMIN_DLQ_SHOW)
        s_print_dead_letter (o, &r->dead_letter, true);
    else if (o->json)
        printf ("{\"%s\":%" PRIu64 "}\n", sub, r->count);
    else
        printf ("%s %" PRIu64 " dead letter(s)\n", !strcmp (sub, "redrive") ? "redrove" : "purged",
                r->count);
done:
    free (ids);
    zl_codec_destroy (&codec);
    return rc;
}

// zlane-ctl workers: one line (or JSON object) per connected worker.
static int
s_cmd_workers (const opts_t *o, int argc, char **argv)
{
    if (argc > 0) {
        if (!strcmp (argv[0], "--help") || !strcmp (argv[0], "-h")) {
            printf ("Usage: zlane-ctl workers\n");
            return 0;
        }
        return s_fail_usage ("workers: unexpected argument '%s'", argv[0]);
    }
    zl_codec_t *codec = zl_codec_new ();
    zl_admin_request_t req = {.op = ZL_ADMIN_WORKERS, .lane = ""};
    req.filter.lane = req.filter.tenant = "";
    zl_msg_t reply;
    int rc = s_admin (o, codec, &req, &reply);
    if (rc == 0) {
        const zl_admin_reply_t *r = &reply.u.admin_reply;
        if (!o->json)
            printf ("%-24s %-16s %-24s %8s %9s %10s %10s\n", "NAME", "HOST", "LANES", "CAPACITY",
                    "IN FLIGHT", "LAST SEEN", "HEARTBEAT");
        for (size_t i = 0; i < r->n_workers; i++) {
            const zl_worker_info_t *w = &r->workers[i];
            if (o->json) {
                printf ("{\"name\":");
                zl_json_str (stdout, w->name);
                printf (",\"host\":");
                zl_json_str (stdout, w->host);
                printf (",\"lanes\":[");
                for (size_t k = 0; k < w->n_lanes; k++) {
                    printf ("%s", k ? "," : "");
                    zl_json_str (stdout, w->lanes[k]);
                }
                printf ("],\"capacity\":%u,\"in_flight\":%u,\"last_seen_age_ms\":%" PRIu64
                        ",\"instance\":\"%016" PRIx64 "\",\"heartbeat_ms\":%u}\n",
                        w->capacity, w->in_flight, w->last_seen_age_ms, w->instance,
                        w->heartbeat_ms);
                continue;
            }
            char lanes[256] = "";
            size_t used = 0;
            for (size_t k = 0; k < w->n_lanes && used < sizeof lanes - 1; k++)
                used += (size_t)snprintf (lanes + used, sizeof lanes - used, "%s%s", k ? "," : "",
                                          w->lanes[k]);
            char pace[16] = "-";
            if (w->heartbeat_ms)
                snprintf (pace, sizeof pace, "%ums", w->heartbeat_ms);
            printf ("%-24s %-16s %-24s %8u %9u %8" PRIu64 "ms %10s\n", w->name,
                    w->host[0] ? w->host : "-", lanes, w->capacity, w->in_flight,
                    w->last_seen_age_ms, pace);
        }
    }
    zl_codec_destroy (&codec);
    return rc;
}

static int
s_cmd_lane (const opts_t *o, const char *cmd, int argc, char **argv)
{
    if (argc != 1 || !strcmp (argv[0], "--help") || !strcmp (argv[0], "-h")) {
        printf ("Usage: zlane-ctl %s LANE\n", cmd);
        return argc == 1 ? 0 : 2;
    }
    zl_codec_t *codec = zl_codec_new ();
    zl_admin_request_t req = {.op = !strcmp (cmd, "pause") ? ZL_ADMIN_PAUSE : ZL_ADMIN_RESUME,
                              .lane = argv[0]};
    req.filter.lane = req.filter.tenant = "";
    zl_msg_t reply;
    int rc = s_admin (o, codec, &req, &reply);
    if (rc == 0)
        printf ("lane %s %s\n", argv[0], !strcmp (cmd, "pause") ? "paused" : "resumed");
    zl_codec_destroy (&codec);
    return rc;
}

// ---------------------------------------------------------------- cancel
/*  zlane-ctl cancel ID...: one line per id saying what became of it. Exit 0
    when every id is cancelled now or was before, 1 when one is finished
    (nothing to cancel) or unknown. */
static int
s_cmd_cancel (const opts_t *o, int argc, char **argv)
{
    if (argc < 1 || !strcmp (argv[0], "--help") || !strcmp (argv[0], "-h")) {
        printf ("Usage: zlane-ctl cancel ID...\n"
                "Cancel jobs by id (at most %d). A ready, delayed or dead-lettered job is\n"
                "removed; a running one is recorded cancelled at once and its worker told\n"
                "to stop it (its late ack is refused). Each id is answered on its own:\n"
                "cancelled (the state it left), already cancelled (kept for the broker's\n"
                "result_retention), finished (acked or purged: nothing to cancel) or\n"
                "unknown (never issued). Exit 0 if every id is cancelled, now or before.\n",
                ZL_CANCEL_MAX_IDS);
        return argc < 1 ? 2 : 0;
    }
    if (argc > ZL_CANCEL_MAX_IDS) {
        fprintf (stderr, "zlane-ctl: cancel: at most %d ids at a time (see zlane-ctl --help)\n",
                 ZL_CANCEL_MAX_IDS);
        return 2;
    }
    uint64_t *ids = calloc ((size_t)argc, sizeof (uint64_t));
    for (int i = 0; i < argc; i++)
        if (zl_parse_u64 (argv[i], &ids[i]) != 0 || ids[i] == 0) {
            fprintf (stderr, "zlane-ctl: cancel: '%s' is not a job id (see zlane-ctl --help)\n",
                     argv[i]);
            free (ids);
            return 2;
        }
    zl_codec_t *codec = zl_codec_new ();
    zl_admin_request_t req = {.op = ZL_ADMIN_CANCEL, .n_ids = (size_t)argc, .ids = ids};
    req.filter.lane = req.filter.tenant = "";
    req.lane = "";
    zl_msg_t reply;
    int rc = s_admin (o, codec, &req, &reply);
    const zl_admin_reply_t *r = &reply.u.admin_reply;
    if (rc == 0 && r->result != ZL_ADMIN_RESULT_CANCEL) {
        fprintf (stderr, "zlane-ctl: cancel: the broker's reply holds no cancel result\n");
        rc = 1;
    }
    for (size_t i = 0; rc == 0 && i < r->n_cancel_items; i++) {
        const zl_cancel_item_t *it = &r->cancel_items[i];
        const char *state = it->state ? it->state : "";
        bool done =
            it->outcome == ZL_CANCEL_CANCELLED || it->outcome == ZL_CANCEL_ALREADY_CANCELLED;
        if (o->json) {
            printf ("{\"job_id\":%" PRIu64 ",\"outcome\":", it->job_id);
            zl_json_str (stdout, zl_cancel_outcome_name (it->outcome));
            printf (",\"state\":");
            zl_json_str (stdout, state);
            printf (",\"cancelled_at_ms\":%" PRIu64 "}\n", it->cancelled_at_ms);
        } else {
            char at[40];
            s_time (at, sizeof at, it->cancelled_at_ms);
            switch (it->outcome) {
            case ZL_CANCEL_CANCELLED:
                printf ("%" PRIu64 " cancelled (it was %s%s)\n", it->job_id, state,
                        !strcmp (state, "leased") ? ": its worker was told to stop it" : "");
                break;
            case ZL_CANCEL_ALREADY_CANCELLED:
                printf ("%" PRIu64 " already cancelled at %s (it was %s)\n", it->job_id, at, state);
                break;
            case ZL_CANCEL_FINISHED:
                printf ("%" PRIu64 " finished: no live job (acked, purged or expired); nothing "
                        "to cancel\n",
                        it->job_id);
                break;
            default: printf ("%" PRIu64 " unknown: no such job was ever issued\n", it->job_id);
            }
        }
        if (!done)
            rc = 1;
    }
    free (ids);
    zl_codec_destroy (&codec);
    return rc;
}

// ---------------------------------------------------------------- job
static int
s_cmd_job (const opts_t *o, int argc, char **argv)
{
    const char *sub = argc ? argv[0] : "";
    zl_admin_request_t req = {.op = ZL_ADMIN_JOB_SHOW};
    req.filter.lane = req.filter.tenant = "";
    if ((strcmp (sub, "show") && strcmp (sub, "result")) || argc != 2 ||
        zl_parse_u64 (argv[1], &req.job_id) != 0) {
        if (!strcmp (sub, "--help") || !strcmp (sub, "-h")) {
            printf ("Usage: zlane-ctl job show ID | zlane-ctl job result ID\n");
            return 0;
        }
        return s_fail_usage ("job wants 'show ID' or 'result ID'%s", "");
    }
    zl_codec_t *codec = zl_codec_new ();
    zl_msg_t reply;
    int rc = s_admin (o, codec, &req, &reply);
    if (rc != 0) {
        zl_codec_destroy (&codec);
        return rc;
    }
    const zl_job_outcome_t *j = &reply.u.admin_reply.job;
    bool raw = !strcmp (sub, "result");
    if (raw) {
        if (!j->found)
            rc = 5;
        else if (!j->final)
            rc = 6;
        else if (j->outcome != ZL_OUTCOME_ACKED)
            rc = 4;
        if (rc == 0)
            fwrite (j->result.data, 1, j->result.len, stdout);
        else
            fprintf (stderr, "zlane-ctl: job %" PRIu64 ": %s%s%s\n", req.job_id,
                     !j->found   ? "unknown (or its outcome is no longer kept)"
                     : !j->final ? "not finished: "
                                 : "dead-lettered: ",
                     j->found && !j->final ? j->state : "", j->found && j->final ? j->error : "");
    } else if (o->json) {
        printf ("{\"job_id\":%" PRIu64 ",\"found\":%s,\"final\":%s,\"state\":", j->job_id,
                j->found ? "true" : "false", j->final ? "true" : "false");
        zl_json_str (stdout, j->state);
        printf (",\"lane\":");
        zl_json_str (stdout, j->lane);
        printf (",\"tenant\":");
        zl_json_str (stdout, j->tenant);
        printf (",\"outcome\":\"%s\",\"attempts\":%u,\"finished_at_ms\":%" PRIu64 ",\"result\":",
                zl_outcome_name (j->outcome), j->attempts, j->finished_at_ms);
        zl_json_bytes (stdout, j->result.data, j->result.len);
        printf (",\"error\":");
        zl_json_str (stdout, j->error);
        printf (",\"failed_parent\":%" PRIu64 "}\n", j->failed_parent);
    } else if (!j->found) {
        printf ("job %" PRIu64 ": unknown (never issued, or finished and its outcome not kept, "
                "or past result_retention)\n",
                req.job_id);
    } else {
        printf ("job %" PRIu64 "\n  lane %s, tenant %s\n  state    %s%s\n  attempts %u\n",
                j->job_id, j->lane, j->tenant, j->state, j->final ? " (final)" : "", j->attempts);
        if (j->final) {
            char fin[40];
            s_time (fin, sizeof fin, j->finished_at_ms);
            printf ("  outcome  %s at %s\n", zl_outcome_name (j->outcome), fin);
            if (j->outcome == ZL_OUTCOME_ACKED)
                printf ("  result   %zu bytes: %.*s%s\n", j->result.len,
                        (int)(j->result.len > 200 ? 200 : j->result.len),
                        (const char *)j->result.data, j->result.len > 200 ? "..." : "");
            else
                printf ("  error    %s\n", j->error);
            if (j->failed_parent)
                printf ("  parent   %" PRIu64 " (dead-lettered)\n", j->failed_parent);
        }
    }
    if (!raw && !j->found)
        rc = 1;
    zl_codec_destroy (&codec);
    return rc;
}

// ---------------------------------------------------------------- schedule
static void
s_print_schedule (const opts_t *o, const zl_schedule_info_t *s)
{
    char last[40] = "-", next[40] = "-";
    if (s->last_tick_ms)
        s_time (last, sizeof last, s->last_tick_ms);
    if (s->next_tick_ms)
        s_time (next, sizeof next, s->next_tick_ms);
    if (o->json) {
        printf ("{\"name\":");
        zl_json_str (stdout, s->name);
        printf (",\"cron\":");
        zl_json_str (stdout, s->cron);
        printf (",\"lane\":");
        zl_json_str (stdout, s->lane);
        printf (",\"tenant\":");
        zl_json_str (stdout, s->tenant);
        printf (",\"missed\":\"%s\",\"catch_up_max\":%u,\"paused\":%s,\"last_tick_ms\":%" PRIu64
                ",\"next_tick_ms\":%" PRIu64 ",\"payload\":",
                s->catch_up ? "catch_up" : "skip", s->catch_up_max, s->paused ? "true" : "false",
                s->last_tick_ms, s->next_tick_ms);
        zl_json_bytes (stdout, s->payload.data, s->payload.len);
        printf ("}\n");
        return;
    }
    printf ("%-20s %-18s %-12s %-12s %-10s next %s  last %s%s\n", s->name, s->cron, s->lane,
            s->tenant, s->catch_up ? "catch_up" : "skip", next, last,
            s->paused ? "  (paused)" : "");
}

static int
s_cmd_schedule (const opts_t *o, int argc, char **argv)
{
    const char *sub = argc ? argv[0] : "";
    zl_admin_request_t req = {0};
    req.filter.lane = req.filter.tenant = "";
    req.lane = "";
    static zl_header_t headers[64];
    size_t n_headers = 0;
    if (!strcmp (sub, "list") && argc == 1)
        req.op = ZL_ADMIN_SCHEDULE_LIST;
    else if ((!strcmp (sub, "remove") || !strcmp (sub, "pause") || !strcmp (sub, "resume")) &&
             argc == 2) {
        req.op = !strcmp (sub, "remove")  ? ZL_ADMIN_SCHEDULE_REMOVE
                 : !strcmp (sub, "pause") ? ZL_ADMIN_SCHEDULE_PAUSE
                                          : ZL_ADMIN_SCHEDULE_RESUME;
        req.schedule.name = argv[1];
    } else if (!strcmp (sub, "add") && argc >= 2) {
        req.op = ZL_ADMIN_SCHEDULE_ADD;
        req.schedule.name = argv[1];
        const char *payload = NULL;
        for (int i = 2; i < argc; i++) {
            const char *a = argv[i];
            bool more = i + 1 < argc;
            if (!strcmp (a, "--cron") && more)
                req.schedule.cron = argv[++i];
            else if (!strcmp (a, "--lane") && more)
                req.schedule.lane = argv[++i];
            else if (!strcmp (a, "--tenant") && more)
                req.schedule.tenant = argv[++i];
            else if (!strcmp (a, "--paused"))
                req.schedule.paused = true;
            else if (!strcmp (a, "--missed") && more) {
                const char *m = argv[++i];
                if (!strcmp (m, "skip"))
                    req.schedule.catch_up = false;
                else if (!strncmp (m, "catch_up", 8) && (m[8] == '\0' || m[8] == ':')) {
                    req.schedule.catch_up = true;
                    req.schedule.catch_up_max = m[8] ? (uint32_t)strtoul (m + 9, NULL, 10) : 0;
                } else
                    return s_fail_usage ("--missed wants skip or catch_up[:N], not '%s'", m);
            } else if (!strcmp (a, "--header") && more && n_headers < 64) {
                char *kv = argv[++i], *eq = strchr (kv, '=');
                if (!eq)
                    return s_fail_usage ("--header wants K=V, not '%s'", kv);
                *eq = '\0';
                headers[n_headers++] = (zl_header_t){kv, eq + 1};
            } else if (a[0] == '-' && a[1])
                return s_fail_usage ("schedule add: unknown option '%s'", a);
            else if (!payload)
                payload = a;
            else
                return s_fail_usage ("schedule add: one PAYLOAD, not '%s'", a);
        }
        if (!req.schedule.cron || !req.schedule.lane || !req.schedule.tenant)
            return s_fail_usage ("schedule add wants --cron, --lane and --tenant%s", "");
        req.schedule.payload =
            (zl_bytes_t){(const uint8_t *)(payload ? payload : ""), payload ? strlen (payload) : 0};
        req.schedule.n_headers = n_headers;
        req.schedule.headers = headers;
    } else {
        if (!strcmp (sub, "--help") || !strcmp (sub, "-h")) {
            printf ("Usage: zlane-ctl schedule add NAME --cron EXPR --lane L --tenant T "
                    "[--missed skip|catch_up[:N]] [--header K=V]... [--paused] PAYLOAD\n"
                    "       zlane-ctl schedule list | remove NAME | pause NAME | resume NAME\n");
            return 0;
        }
        return s_fail_usage ("schedule wants add, list, remove, pause or resume%s", "");
    }
    zl_codec_t *codec = zl_codec_new ();
    zl_msg_t reply;
    int rc = s_admin (o, codec, &req, &reply);
    if (rc == 0) {
        const zl_admin_reply_t *r = &reply.u.admin_reply;
        for (size_t i = 0; i < r->n_schedules; i++)
            s_print_schedule (o, &r->schedules[i]);
        if (req.op != ZL_ADMIN_SCHEDULE_LIST && req.op != ZL_ADMIN_SCHEDULE_ADD && !o->json)
            printf ("schedule %s: %s\n", req.schedule.name, sub);
    }
    zl_codec_destroy (&codec);
    return rc;
}

// ---------------------------------------------------------------- batch
static int
s_cmd_batch (const opts_t *o, int argc, char **argv)
{
    const char *sub = argc ? argv[0] : "";
    if (strcmp (sub, "show") != 0 || argc != 2) {
        if (!strcmp (sub, "--help") || !strcmp (sub, "-h")) {
            printf ("Usage: zlane-ctl batch show ID\n");
            return 0;
        }
        return s_fail_usage ("batch wants 'show ID'%s", "");
    }
    zl_admin_request_t req = {.op = ZL_ADMIN_BATCH_SHOW, .batch_id = argv[1]};
    req.filter.lane = req.filter.tenant = "";
    req.lane = "";
    zl_codec_t *codec = zl_codec_new ();
    zl_msg_t reply;
    int rc = s_admin (o, codec, &req, &reply);
    if (rc != 0) {
        zl_codec_destroy (&codec);
        return rc;
    }
    const zl_batch_info_t *b = &reply.u.admin_reply.batch;
    const char *state = !b->found      ? "unknown"
                        : b->cancelled ? "cancelled"
                        : b->settled   ? "settled"
                        : b->closed    ? "closed"
                                       : "open";
    if (o->json) {
        printf ("{\"batch_id\":");
        zl_json_str (stdout, argv[1]);
        printf (",\"found\":%s,\"state\":\"%s\",\"tenant\":", b->found ? "true" : "false", state);
        zl_json_str (stdout, b->tenant ? b->tenant : "");
        printf (",\"lane\":");
        zl_json_str (stdout, b->lane ? b->lane : "");
        printf (",\"job_id\":%" PRIu64 ",\"callback\":%s,\"jobs\":%" PRIu64 ",\"acked\":%" PRIu64
                ",\"dead\":%" PRIu64 ",\"cancelled\":%" PRIu64 ",\"pending\":%" PRIu64
                ",\"failed\":[",
                b->job_id, b->callback ? "true" : "false", b->jobs, b->acked, b->dead,
                b->cancelled_jobs, b->pending);
        for (size_t i = 0; i < b->n_failed; i++)
            printf ("%s%" PRIu64, i ? "," : "", b->failed[i]);
        printf ("],\"failed_more\":%" PRIu64 ",\"opened_at_ms\":%" PRIu64
                ",\"closed_at_ms\":%" PRIu64 ",\"settled_at_ms\":%" PRIu64 "}\n",
                b->failed_more, b->opened_at_ms, b->closed_at_ms, b->settled_at_ms);
    } else if (!b->found) {
        printf ("batch %s: unknown (never opened here, or settled and forgotten after "
                "result_retention)\n",
                argv[1]);
    } else {
        printf ("batch %s: %s\n  tenant %s, callback %s (job %" PRIu64 ", lane %s)\n", argv[1],
                state, b->tenant, b->callback ? "yes" : "none", b->job_id, b->lane);
        printf ("  jobs %" PRIu64 ": %" PRIu64 " acked, %" PRIu64 " dead, %" PRIu64
                " cancelled, %" PRIu64 " pending\n",
                b->jobs, b->acked, b->dead, b->cancelled_jobs, b->pending);
        if (b->n_failed) {
            printf ("  failed");
            for (size_t i = 0; i < b->n_failed && i < 20; i++)
                printf (" %" PRIu64, b->failed[i]);
            uint64_t more = b->failed_more + (b->n_failed > 20 ? b->n_failed - 20 : 0);
            if (more)
                printf (" (and %" PRIu64 " more; --json lists up to 1000)", more);
            printf ("\n");
        }
    }
    if (!b->found)
        rc = 1;
    zl_codec_destroy (&codec);
    return rc;
}

// ---------------------------------------------------------------- tail
static int
s_cmd_tail (const opts_t *o, int argc, char **argv)
{
    const char *topic = "";
    for (int i = 0; i < argc; i++) {
        if (!strcmp (argv[i], "--help") || !strcmp (argv[i], "-h")) {
            printf ("Usage: zlane-ctl tail [--json] [--topic PREFIX]\n"
                    "Subscribes to the broker's events and prints one line per event until\n"
                    "interrupted. Topics: dlq.<lane>.<tenant> (a job was dead-lettered) and\n"
                    "alert.dlq (every few seconds while the DLQ is not empty).\n"
                    "Exits 3 if the broker refuses the handshake (see --curve-server).\n");
            return 0;
        }
        if (!strcmp (argv[i], "--topic") && i + 1 < argc)
            topic = argv[++i];
        else
            return s_fail_usage ("tail: unexpected argument '%s'", argv[i]);
    }
    // every broker of the list: only the leader publishes
    zl_eplist_t *brokers = s_brokers (o->events, "events");
    if (!brokers)
        return 2;
    conn_t conn;
    if (s_conn_open (&conn, o, ZMQ_SUB, brokers, 0, zl_eplist_size (brokers), "events",
                     S_HANDSHAKE_FAILED) != 0) {
        s_conn_close (&conn);
        zl_eplist_destroy (&brokers);
        return 2;
    }
    void *s = conn.handle;
    zmq_setsockopt (s, ZMQ_SUBSCRIBE, topic, strlen (topic));
    int rc = 0;
    zl_codec_t *codec = zl_codec_new ();
    setvbuf (stdout, NULL, _IOLBF, 0);
    if (!o->json)
        fprintf (stderr, "zlane-ctl: tailing %s (topic prefix '%s'), Ctrl-C to stop\n", o->events,
                 topic);
    while (!s_stop) {
        zmq_pollitem_t items[] = {{s, 0, ZMQ_POLLIN, 0},
                                  {zsock_resolve (conn.monitor), 0, ZMQ_POLLIN, 0}};
        if (zmq_poll (items, 2, 500) <= 0)
            continue;
        // ZeroMQ does not retry a refused handshake: nothing would ever come
        char why[512];
        if (s_conn_refused (&conn, o, why, sizeof why)) {
            fprintf (stderr, "zlane-ctl: %s\n", why);
            rc = 3;
            break;
        }
        if (!(items[0].revents & ZMQ_POLLIN))
            continue;
        char t[512];
        int tn = zmq_recv (s, t, sizeof t - 1, 0);
        if (tn < 0)
            continue;
        t[tn < (int)sizeof t - 1 ? tn : (int)sizeof t - 1] = '\0';
        int more = 0;
        size_t ml = sizeof more;
        zmq_getsockopt (s, ZMQ_RCVMORE, &more, &ml);
        if (!more)
            continue;
        zmq_msg_t frame;
        zmq_msg_init (&frame);
        if (zmq_msg_recv (&frame, s, 0) < 0) {
            zmq_msg_close (&frame);
            continue;
        }
        zl_msg_t m;
        zl_decode_rc_t drc =
            zl_codec_decode (codec, zmq_msg_data (&frame), zmq_msg_size (&frame), &m);
        zmq_msg_close (&frame);
        if (drc != ZL_DECODE_OK)
            continue;
        char now[40];
        s_time (now, sizeof now, (uint64_t)zl_clock_wall_ms ());
        if (m.kind == ZL_MSG_DEAD_LETTER) {
            const zl_dead_letter_t *d = &m.u.dead_letter;
            if (o->json) {
                printf ("{\"topic\":");
                zl_json_str (stdout, t);
                printf (",\"event\":\"dead_letter\",\"job_id\":%" PRIu64 ",\"lane\":", d->job_id);
                zl_json_str (stdout, d->lane);
                printf (",\"tenant\":");
                zl_json_str (stdout, d->tenant);
                printf (",\"attempts\":%zu,\"error\":", d->n_attempts);
                zl_json_str (stdout, d->error);
                printf ("}\n");
            } else
                printf ("%s %s job=%" PRIu64 " lane=%s tenant=%s attempts=%zu error=%.200s\n", now,
                        t, d->job_id, d->lane, d->tenant, d->n_attempts, d->error);
        } else if (m.kind == ZL_MSG_JOB_DONE) {
            const zl_job_outcome_t *d = &m.u.outcome;
            if (o->json) {
                printf ("{\"topic\":");
                zl_json_str (stdout, t);
                printf (",\"event\":\"job_done\",\"job_id\":%" PRIu64
                        ",\"outcome\":\"%s\",\"result\":",
                        d->job_id, zl_outcome_name (d->outcome));
                zl_json_bytes (stdout, d->result.data, d->result.len);
                printf (",\"error\":");
                zl_json_str (stdout, d->error);
                printf ("}\n");
            } else
                printf ("%s %s job=%" PRIu64 " outcome=%s result=%zu bytes error=%.200s\n", now, t,
                        d->job_id, zl_outcome_name (d->outcome), d->result.len, d->error);
        } else if (m.kind == ZL_MSG_BREAKER) {
            const zl_breaker_info_t *b = &m.u.breaker;
            if (o->json) {
                printf ("{\"topic\":");
                zl_json_str (stdout, t);
                printf (",\"event\":\"breaker\",\"lane\":");
                zl_json_str (stdout, b->lane);
                printf (",\"state\":\"%s\",\"failures\":%u,\"until_ms\":%" PRIu64
                        ",\"opened\":%" PRIu64 "}\n",
                        s_breaker_name (b->state), b->failures, b->until_ms, b->opened);
            } else
                printf ("%s %s state=%s failures=%u opened=%" PRIu64 "\n", now, t,
                        s_breaker_name (b->state), b->failures, b->opened);
        } else if (m.kind == ZL_MSG_BATCH_DONE) {
            const zl_batch_info_t *b = &m.u.batch_done;
            if (o->json) {
                printf ("{\"topic\":");
                zl_json_str (stdout, t);
                printf (",\"event\":\"batch_done\",\"batch_id\":");
                zl_json_str (stdout, b->batch_id);
                printf (",\"jobs\":%" PRIu64 ",\"acked\":%" PRIu64 ",\"dead\":%" PRIu64
                        ",\"cancelled\":%" PRIu64 ",\"callback_job\":%" PRIu64 "}\n",
                        b->jobs, b->acked, b->dead, b->cancelled_jobs, b->callback ? b->job_id : 0);
            } else
                printf ("%s %s jobs=%" PRIu64 " acked=%" PRIu64 " dead=%" PRIu64
                        " cancelled=%" PRIu64 "\n",
                        now, t, b->jobs, b->acked, b->dead, b->cancelled_jobs);
        } else if (m.kind == ZL_MSG_DLQ_ALERT) {
            if (o->json)
                printf ("{\"topic\":\"%s\",\"event\":\"dlq_alert\",\"depth\":%" PRIu64
                        ",\"oldest_age_ms\":%" PRIu64 "}\n",
                        "alert.dlq", m.u.dlq_alert.depth, m.u.dlq_alert.oldest_age_ms);
            else
                printf ("%s %s depth=%" PRIu64 " oldest_age=%.1fs\n", now, t, m.u.dlq_alert.depth,
                        m.u.dlq_alert.oldest_age_ms / 1000.0);
        }
    }
    zl_codec_destroy (&codec);
    s_conn_close (&conn);
    zl_eplist_destroy (&brokers);
    return rc;
}

// ---------------------------------------------------------------- keygen
static const char *const s_roles[] = {"producer", "worker", "admin", "subscriber"};

static void
s_keygen_usage (FILE *out)
{
    fprintf (out, "Usage: zlane-ctl keygen NAME [--role ROLE] [--tenants LIST] [--lanes LIST]\n"
                  "                        [--dir DIR]\n"
                  "Write a new CURVE key pair as two czmq certificates:\n"
                  "  DIR/NAME         the public certificate, with the role and bindings as\n"
                  "                   metadata. A client's goes into the broker's --clients\n"
                  "                   directory; the broker's goes to every client\n"
                  "                   (--curve-server).\n"
                  "  DIR/NAME_secret  the key pair (mode 0600): stays on the host that uses\n"
                  "                   it (--cert).\n"
                  "Existing files are never overwritten.\n"
                  "\n"
                  "  --role ROLE      producer (submit jobs), worker (take jobs), admin (all\n"
                  "                   of zlane-ctl), subscriber (stats, dlq list/show, tail).\n"
                  "                   Leave it out for the broker's own certificate.\n"
                  "  --tenants LIST   producer: the tenants it may submit for (a,b or *)\n"
                  "  --lanes LIST     worker: the lanes it may take jobs from (a,b or *)\n"
                  "  --dir DIR        where to write (made if missing) [.]\n"
                  "Prints the public key and the files written (with --json one object).\n");
}

// True if `list` is "*" or comma-separated names without blanks.
static bool
s_valid_list (const char *list)
{
    if (!strcmp (list, "*"))
        return true;
    if (!*list)
        return false;
    for (const char *p = list; *p; p++) {
        if (*p == ',' && (p == list || p[1] == ',' || !p[1]))
            return false; // an empty item
        if (*p == ' ' || *p == '\t' || *p == '*' || (unsigned char)*p < 0x20)
            return false;
    }
    return true;
}

static bool
s_valid_name (const char *name)
{
    if (!*name || *name == '.' || strlen (name) > 200)
        return false;
    for (const char *p = name; *p; p++)
        if (!(isalnum ((unsigned char)*p) || *p == '-' || *p == '_' || *p == '.' || *p == '@'))
            return false;
    return true;
}

static int
s_cmd_keygen (const opts_t *o, int argc, char **argv)
{
    const char *name = NULL, *role = NULL, *tenants = NULL, *lanes = NULL, *dir = ".";
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp (a, "--help") || !strcmp (a, "-h")) {
            s_keygen_usage (stdout);
            return 0;
        }
        if (!strcmp (a, "--role") || !strcmp (a, "--tenants") || !strcmp (a, "--lanes") ||
            !strcmp (a, "--dir")) {
            if (i + 1 >= argc)
                return s_fail_usage ("keygen: %s needs a value", a);
            const char *v = argv[++i];
            if (!strcmp (a, "--role"))
                role = v;
            else if (!strcmp (a, "--tenants"))
                tenants = v;
            else if (!strcmp (a, "--lanes"))
                lanes = v;
            else
                dir = v;
        } else if (a[0] == '-')
            return s_fail_usage ("keygen: unknown option '%s'", a);
        else if (!name)
            name = a;
        else
            return s_fail_usage ("keygen: unexpected argument '%s'", a);
    }
    if (!name)
        return s_fail_usage ("keygen needs a NAME%s", "");
    if (!s_valid_name (name))
        return s_fail_usage ("keygen: '%s' is not a file name (letters, digits, - _ . @)", name);
    if (strlen (name) > 7 && !strcmp (name + strlen (name) - 7, "_secret"))
        return s_fail_usage ("keygen: NAME may not end in _secret ('%s')", name);
    if (role) {
        bool known = false;
        for (size_t i = 0; i < sizeof s_roles / sizeof s_roles[0]; i++)
            known |= !strcmp (role, s_roles[i]);
        if (!known)
            return s_fail_usage ("keygen: unknown role '%s' (producer, worker, admin or "
                                 "subscriber)",
                                 role);
    }
    if (tenants && !s_valid_list (tenants))
        return s_fail_usage ("keygen: --tenants wants a,b,c or *, not '%s'", tenants);
    if (lanes && !s_valid_list (lanes))
        return s_fail_usage ("keygen: --lanes wants a,b,c or *, not '%s'", lanes);
    if ((tenants || lanes) && !role)
        return s_fail_usage ("keygen: --tenants and --lanes bind a client: give its --role%s", "");
    if (tenants && strcmp (role, "producer") != 0)
        fprintf (stderr,
                 "zlane-ctl: keygen: note: only producers are bound to tenants; "
                 "--tenants is recorded but a %s key ignores it\n",
                 role);
    if (lanes && strcmp (role, "worker") != 0)
        fprintf (stderr,
                 "zlane-ctl: keygen: note: only workers are bound to lanes; "
                 "--lanes is recorded but a %s key ignores it\n",
                 role);
    if (role && !strcmp (role, "producer") && !tenants)
        fprintf (stderr, "zlane-ctl: keygen: note: a producer key without --tenants may submit "
                         "for no tenant\n");
    if (role && !strcmp (role, "worker") && !lanes)
        fprintf (stderr, "zlane-ctl: keygen: note: a worker key without --lanes may take jobs "
                         "from no lane\n");

    char pub[4096], secret[4096];
    if (snprintf (pub, sizeof pub, "%s/%s", dir, name) >= (int)sizeof pub ||
        snprintf (secret, sizeof secret, "%s/%s_secret", dir, name) >= (int)sizeof secret)
        return s_fail_usage ("keygen: the path '%s' is too long", dir);
    const char *paths[] = {pub, secret};
    for (int i = 0; i < 2; i++)
        if (access (paths[i], F_OK) == 0) {
            fprintf (stderr,
                     "zlane-ctl: keygen: %s already exists; not overwriting it "
                     "(remove it or pick another NAME)\n",
                     paths[i]);
            return 1;
        }
    struct stat sb;
    if (stat (dir, &sb) != 0 && zsys_dir_create ("%s", dir) != 0) {
        fprintf (stderr, "zlane-ctl: keygen: cannot create %s: %s\n", dir, strerror (errno));
        return 1;
    }
    zcert_t *cert = zcert_new ();
    zcert_set_meta (cert, "name", "%s", name);
    if (role)
        zcert_set_meta (cert, "role", "%s", role);
    if (tenants)
        zcert_set_meta (cert, "tenants", "%s", tenants);
    if (lanes)
        zcert_set_meta (cert, "lanes", "%s", lanes);
    // the secret file is never readable by others, not even for a moment
    mode_t old = umask (077);
    const char *failed = NULL;
    if (zcert_save_secret (cert, secret) != 0 || chmod (secret, 0600) != 0)
        failed = secret;
    umask (old);
    if (!failed && zcert_save_public (cert, pub) != 0)
        failed = pub;
    if (failed) {
        fprintf (stderr, "zlane-ctl: keygen: cannot write %s: %s\n", failed, strerror (errno));
        unlink (secret);
        unlink (pub);
        zcert_destroy (&cert);
        return 1;
    }
    if (o->json) {
        printf ("{\"name\":");
        zl_json_str (stdout, name);
        printf (",\"public_key\":\"%s\",\"public\":", zcert_public_txt (cert));
        zl_json_str (stdout, pub);
        printf (",\"secret\":");
        zl_json_str (stdout, secret);
        printf (",\"role\":");
        if (role)
            zl_json_str (stdout, role);
        else
            printf ("null");
        printf ("}\n");
    } else {
        printf ("public key %s\n", zcert_public_txt (cert));
        printf ("wrote %s: public certificate; %s\n", pub,
                role ? "put it in the broker's clients directory (--clients DIR)"
                     : "give it to every client host (their --curve-server FILE)");
        printf ("wrote %s: secret certificate, mode 0600; keep it on the host that uses it "
                "(%s)\n",
                secret, role ? "--cert FILE" : "the broker's --cert FILE");
    }
    zcert_destroy (&cert);
    return 0;
}

int
main (int argc, char **argv)
{
    opts_t o = {"tcp://127.0.0.1:5573", "tcp://127.0.0.1:5572", 5000, 0};
    o.curve_server = getenv ("ZLANE_CURVE_SERVER");
    o.cert = getenv ("ZLANE_CERT");
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp (argv[i], "-h") || !strcmp (argv[i], "--help")) {
            s_usage (stdout);
            return 0;
        } else if (!strcmp (argv[i], "--json"))
            o.json = 1;
        else if (!strcmp (argv[i], "--admin") && i + 1 < argc)
            o.admin = argv[++i];
        else if (!strcmp (argv[i], "--events") && i + 1 < argc)
            o.events = argv[++i];
        else if (!strcmp (argv[i], "--curve-server") && i + 1 < argc)
            o.curve_server = argv[++i];
        else if (!strcmp (argv[i], "--cert") && i + 1 < argc)
            o.cert = argv[++i];
        else if (!strcmp (argv[i], "--timeout") && i + 1 < argc) {
            if (zl_parse_duration_ms (argv[++i], &o.timeout_ms) != 0)
                return s_fail_usage ("'%s' is not a duration", argv[i]);
        } else
            return s_fail_usage ("unknown option '%s'", argv[i]);
    }
    if (i >= argc) {
        s_usage (stderr);
        return 2;
    }
    // --json may also follow the command
    for (int k = i + 1; k < argc; k++)
        if (!strcmp (argv[k], "--json")) {
            o.json = 1;
            for (int m = k; m < argc - 1; m++)
                argv[m] = argv[m + 1];
            argc--;
            k--;
        }
    zsys_handler_set (NULL);
    zsys_init ();
    struct sigaction sa;
    memset (&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigaction (SIGINT, &sa, NULL);
    sigaction (SIGTERM, &sa, NULL);
    const char *cmd = argv[i];
    if (o.curve_server && !*o.curve_server)
        o.curve_server = NULL;
    if (o.cert && !*o.cert)
        o.cert = NULL;
    char err[512];
    if (strcmp (cmd, "keygen") != 0 && strcmp (cmd, "store") != 0 &&
        zl_curve_load (&o.curve, o.curve_server, o.cert, err, sizeof err) != 0) {
        fprintf (stderr, "zlane-ctl: %s (--curve-server FILE --cert FILE)\n", err);
        zsys_shutdown ();
        return 2;
    }
    int rc;
    if (!strcmp (cmd, "keygen"))
        rc = s_cmd_keygen (&o, argc - i - 1, argv + i + 1);
    else if (!strcmp (cmd, "stats"))
        rc = s_cmd_stats (&o, argc - i - 1, argv + i + 1);
    else if (!strcmp (cmd, "dlq"))
        rc = s_cmd_dlq (&o, argc - i - 1, argv + i + 1);
    else if (!strcmp (cmd, "workers"))
        rc = s_cmd_workers (&o, argc - i - 1, argv + i + 1);
    else if (!strcmp (cmd, "pause") || !strcmp (cmd, "resume"))
        rc = s_cmd_lane (&o, cmd, argc - i - 1, argv + i + 1);
    else if (!strcmp (cmd, "cancel"))
        rc = s_cmd_cancel (&o, argc - i - 1, argv + i + 1);
    else if (!strcmp (cmd, "tail"))
        rc = s_cmd_tail (&o, argc - i - 1, argv + i + 1);
    else if (!strcmp (cmd, "job"))
        rc = s_cmd_job (&o, argc - i - 1, argv + i + 1);
    else if (!strcmp (cmd, "batch"))
        rc = s_cmd_batch (&o, argc - i - 1, argv + i + 1);
    else if (!strcmp (cmd, "schedule"))
        rc = s_cmd_schedule (&o, argc - i - 1, argv + i + 1);
    else if (!strcmp (cmd, "store"))
        rc = zl_ctl_store_copy (argc - i - 1, argv + i + 1);
    else
        rc = s_fail_usage ("unknown command '%s'", cmd);
    zsys_shutdown ();
    return rc;
}
