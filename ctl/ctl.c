/*  zlane-ctl: the operator's tool. Talks to the broker's admin socket
    (stats, dead-letter queue, lanes) and subscribes to its events socket. */
#include "clock.h"
#include "codec.h"
#include "json.h"
#include "rng.h"
#include "wire.h"

#include <czmq.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const char *admin;
    const char *events;
    uint64_t timeout_ms;
    int json;
} opts_t;

static volatile int s_stop = 0;

static void
s_on_signal (int sig)
{
    (void) sig;
    s_stop = 1;
}

static void
s_usage (FILE *out)
{
    fprintf (out,
        "Usage: zlane-ctl [--admin EP] [--events EP] [--timeout DUR] [--json] COMMAND ...\n"
        "\n"
        "Commands:\n"
        "  stats [--counter NAME] [--latency NAME]\n"
        "        per lane and tenant: ready, delayed, in flight, DLQ depth, oldest\n"
        "        ages, acks, nacks by class, lease expiries; broker counters\n"
        "  dlq list [--lane L] [--tenant T] [--limit N] [--after ID]\n"
        "  dlq show ID                 one dead letter with its attempt history\n"
        "  dlq redrive (--all | --lane L | --tenant T | ID...)   attempts reset\n"
        "  dlq purge   (--all | --lane L | --tenant T | ID...)\n"
        "  pause LANE | resume LANE    stop / restart dispatch from a lane\n"
        "  tail [--topic PREFIX]       print each event (dlq.<lane>.<tenant>, alert.dlq)\n"
        "\n"
        "Options:\n"
        "  --admin EP     broker admin endpoint   [tcp://127.0.0.1:5573]\n"
        "  --events EP    broker events endpoint  [tcp://127.0.0.1:5572]\n"
        "  --timeout DUR  how long to wait for the broker [5s]\n"
        "  --json         machine-readable output (one JSON object per line)\n"
        "  -h, --help     this help (also: zlane-ctl COMMAND --help)\n"
        "\n"
        "Exit status: 0 ok, 1 the broker refused or failed, 2 usage, 3 broker unreachable.\n");
}

static int
s_fail_usage (const char *fmt, const char *arg)
{
    fprintf (stderr, "zlane-ctl: ");
    fprintf (stderr, fmt, arg);
    fprintf (stderr, " (see zlane-ctl --help)\n");
    return 2;
}

// ---------------------------------------------------------------- request
// Send `req` and wait for the reply. Returns 0 with `reply` decoded (borrowed
// from `codec`), 3 if the broker did not answer in time.
static int
s_request (const opts_t *o, zl_codec_t *codec, zl_admin_request_t *req, zl_msg_t *reply,
           zsock_t **sock_out)
{
    zsock_t *sock = zsock_new (ZMQ_DEALER);
    void *s = zsock_resolve (sock);
    int linger = 0;
    zmq_setsockopt (s, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_connect (s, o->admin) != 0) {
        fprintf (stderr, "zlane-ctl: bad admin endpoint '%s': %s\n", o->admin,
                 zmq_strerror (errno));
        zsock_destroy (&sock);
        return 2;
    }
    zl_rng_t rng;
    zl_rng_seed (&rng, 0);
    req->request_id = zl_rng_next (&rng) >> 1;
    zl_msg_t m = {.kind = ZL_MSG_ADMIN_REQUEST};
    m.u.admin_request = *req;
    zl_wire_send (s, codec, &m, 0);
    int64_t deadline = zl_clock_mono_ms () + (int64_t) o->timeout_ms;
    for (;;) {
        long left = (long) (deadline - zl_clock_mono_ms ());
        if (left <= 0)
            break;
        zmq_pollitem_t item = {s, 0, ZMQ_POLLIN, 0};
        if (zmq_poll (&item, 1, left) <= 0)
            continue;
        zmq_msg_t frame;
        zmq_msg_init (&frame);
        if (zmq_msg_recv (&frame, s, 0) < 0) {
            zmq_msg_close (&frame);
            continue;
        }
        zl_decode_rc_t rc = zl_codec_decode (codec, zmq_msg_data (&frame), zmq_msg_size (&frame),
                                             reply);
        zmq_msg_close (&frame);
        if (rc != ZL_DECODE_OK)
            continue;
        if (reply->kind == ZL_MSG_ERROR) {
            fprintf (stderr, "zlane-ctl: broker error: %s: %s\n",
                     zl_error_code_name (reply->u.error.code), reply->u.error.message);
            zsock_destroy (&sock);
            return 1;
        }
        if (reply->kind == ZL_MSG_ADMIN_REPLY &&
            reply->u.admin_reply.request_id == req->request_id) {
            *sock_out = sock;  // the reply borrows nothing from it, but keep order simple
            return 0;
        }
    }
    fprintf (stderr, "zlane-ctl: no answer from the broker at %s within %" PRIu64 " ms\n",
             o->admin, o->timeout_ms);
    zsock_destroy (&sock);
    return 3;
}

static int
s_admin (const opts_t *o, zl_codec_t *codec, zl_admin_request_t *req, zl_msg_t *reply)
{
    zsock_t *sock = NULL;
    int rc = s_request (o, codec, req, reply, &sock);
    zsock_destroy (&sock);
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
    time_t secs = (time_t) (wall_ms / 1000);
    struct tm tm;
    gmtime_r (&secs, &tm);
    size_t n = strftime (buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf (buf + n, size - n, ".%03uZ", (unsigned) (wall_ms % 1000));
}

static void
s_age (char *buf, size_t size, uint64_t ms)
{
    if (ms < 10000)
        snprintf (buf, size, "%" PRIu64 "ms", ms);
    else if (ms < 600000)
        snprintf (buf, size, "%.1fs", (double) ms / 1000);
    else
        snprintf (buf, size, "%.1fm", (double) ms / 60000);
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
             g->oldest_dlq_age_ms, g->submitted, g->acked, g->nacked_transient,
             g->nacked_throttled, g->nacked_permanent, g->lease_expired, g->dead_lettered,
             g->run_us, g->throttled, g->capped, g->paused ? "true" : "false");
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

static void
s_print_stats_json (const zl_stats_t *st)
{
    printf ("{\"uptime_ms\":%" PRIu64 ",\"workers\":%u,\"producers\":%u,\"counters\":{",
            st->uptime_ms, st->workers, st->producers);
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
    printf ("}\n");
}

static void
s_print_row (const char *lane, const char *tenant, const zl_group_stats_t *g)
{
    char ra[16], da[16];
    s_age (ra, sizeof ra, g->oldest_ready_age_ms);
    s_age (da, sizeof da, g->oldest_dlq_age_ms);
    printf ("%-14.14s %-14.14s %8" PRIu64 " %7" PRIu64 " %8" PRIu64 " %6" PRIu64 " %8s %8s %9" PRIu64
            " %6" PRIu64 "/%" PRIu64 "/%" PRIu64 " %7" PRIu64 "%s\n",
            lane, tenant, g->ready, g->delayed, g->in_flight, g->dlq, ra, da, g->acked,
            g->nacked_transient, g->nacked_throttled, g->nacked_permanent, g->lease_expired,
            g->paused ? "  (paused)" : "");
}

static void
s_print_stats (const zl_stats_t *st)
{
    printf ("uptime %.1fs, %u worker(s), %u producer(s)\n", (double) st->uptime_ms / 1000,
            st->workers, st->producers);
    for (size_t i = 0; i < st->n_latencies; i++) {
        const zl_latency_t *l = &st->latencies[i];
        printf ("%-16s n=%" PRIu64 " p50=%.2fms p90=%.2fms p99=%.2fms max=%.2fms\n", l->name,
                l->count, l->p50_us / 1000.0, l->p90_us / 1000.0, l->p99_us / 1000.0,
                l->max_us / 1000.0);
    }
    printf ("\n%-14s %-14s %8s %7s %8s %6s %8s %8s %9s %14s %7s\n", "LANE", "TENANT", "READY",
            "DELAYED", "INFLIGHT", "DLQ", "OLDEST", "DLQ-AGE", "ACKED", "NACK T/TH/P",
            "EXPIRED");
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
        if (full) {
            printf (",\"payload\":");
            zl_json_bytes (stdout, d->payload.data, d->payload.len);
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
            d->job_id, d->lane, d->tenant, d->idempotency_key[0] ? d->idempotency_key : "-",
            enq, dead, d->error, d->payload.len, (int) (d->payload.len > 200 ? 200 : d->payload.len),
            (const char *) d->payload.data, d->payload.len > 200 ? "..." : "");
    for (size_t i = 0; i < d->n_headers; i++)
        printf ("  header   %s=%s\n", d->headers[i].key, d->headers[i].value);
    printf ("  attempts (%zu):\n", d->n_attempts);
    for (size_t i = 0; i < d->n_attempts; i++) {
        const zl_attempt_t *a = &d->attempts[i];
        char st[40];
        s_time (st, sizeof st, a->started_at_ms);
        printf ("    #%u %s on %s, ran %" PRIu64 " ms: %s: %s\n", a->attempt, st, a->worker,
                a->ended_at_ms - a->started_at_ms, zl_outcome_name (a->outcome), a->error);
    }
}

static int
s_parse_filter (int argc, char **argv, zl_dlq_filter_t *f, uint64_t *ids, const char *cmd)
{
    f->lane = f->tenant = "";
    for (int i = 0; i < argc; i++) {
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
    if (!f->all && !f->lane[0] && !f->tenant[0] && !f->n_ids) {
        fprintf (stderr, "zlane-ctl: dlq %s: say which: --all, --lane L, --tenant T or job ids\n",
                 cmd);
        return 2;
    }
    return 0;
}

static int
s_cmd_dlq (const opts_t *o, int argc, char **argv)
{
    if (argc < 1 || !strcmp (argv[0], "--help") || !strcmp (argv[0], "-h")) {
        printf ("Usage: zlane-ctl dlq list [--lane L] [--tenant T] [--limit N] [--after ID]\n"
                "       zlane-ctl dlq show ID\n"
                "       zlane-ctl dlq redrive (--all | --lane L | --tenant T | ID...)\n"
                "       zlane-ctl dlq purge (--all | --lane L | --tenant T | ID...)\n"
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
    uint64_t *ids = calloc ((size_t) argc + 1, sizeof (uint64_t));
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
            if (!strcmp (argv[i], "--lane") && i + 1 < argc)
                req.filter.lane = argv[++i];
            else if (!strcmp (argv[i], "--tenant") && i + 1 < argc)
                req.filter.tenant = argv[++i];
            else if (!strcmp (argv[i], "--limit") && i + 1 < argc && !zl_parse_u64 (argv[i + 1], &v))
                req.limit = (uint32_t) v, i++;
            else if (!strcmp (argv[i], "--after") && i + 1 < argc && !zl_parse_u64 (argv[i + 1], &v))
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
                    "alert.dlq (every few seconds while the DLQ is not empty).\n");
            return 0;
        }
        if (!strcmp (argv[i], "--topic") && i + 1 < argc)
            topic = argv[++i];
        else
            return s_fail_usage ("tail: unexpected argument '%s'", argv[i]);
    }
    zsock_t *sock = zsock_new (ZMQ_SUB);
    void *s = zsock_resolve (sock);
    if (zmq_connect (s, o->events) != 0) {
        fprintf (stderr, "zlane-ctl: bad events endpoint '%s': %s\n", o->events,
                 zmq_strerror (errno));
        zsock_destroy (&sock);
        return 2;
    }
    zmq_setsockopt (s, ZMQ_SUBSCRIBE, topic, strlen (topic));
    zl_codec_t *codec = zl_codec_new ();
    setvbuf (stdout, NULL, _IOLBF, 0);
    if (!o->json)
        fprintf (stderr, "zlane-ctl: tailing %s (topic prefix '%s'), Ctrl-C to stop\n", o->events,
                 topic);
    while (!s_stop) {
        zmq_pollitem_t item = {s, 0, ZMQ_POLLIN, 0};
        if (zmq_poll (&item, 1, 500) <= 0)
            continue;
        char t[512];
        int tn = zmq_recv (s, t, sizeof t - 1, 0);
        if (tn < 0)
            continue;
        t[tn < (int) sizeof t - 1 ? tn : (int) sizeof t - 1] = '\0';
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
        zl_decode_rc_t rc = zl_codec_decode (codec, zmq_msg_data (&frame), zmq_msg_size (&frame), &m);
        zmq_msg_close (&frame);
        if (rc != ZL_DECODE_OK)
            continue;
        char now[40];
        s_time (now, sizeof now, (uint64_t) zl_clock_wall_ms ());
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
    zsock_destroy (&sock);
    return 0;
}

int
main (int argc, char **argv)
{
    opts_t o = {"tcp://127.0.0.1:5573", "tcp://127.0.0.1:5572", 5000, 0};
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
    int rc;
    if (!strcmp (cmd, "stats"))
        rc = s_cmd_stats (&o, argc - i - 1, argv + i + 1);
    else if (!strcmp (cmd, "dlq"))
        rc = s_cmd_dlq (&o, argc - i - 1, argv + i + 1);
    else if (!strcmp (cmd, "pause") || !strcmp (cmd, "resume"))
        rc = s_cmd_lane (&o, cmd, argc - i - 1, argv + i + 1);
    else if (!strcmp (cmd, "tail"))
        rc = s_cmd_tail (&o, argc - i - 1, argv + i + 1);
    else
        rc = s_fail_usage ("unknown command '%s'", cmd);
    zsys_shutdown ();
    return rc;
}
