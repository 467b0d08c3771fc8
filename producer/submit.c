/*  zlane-submit: submit jobs to a zlane broker from the command line.
    One job from an argument, a file or stdin, or with --lines one job per
    input line. Prints one job id per line in input order; with --wait (one
    job) waits for the job's outcome and prints its result instead. Exit
    status: 0 all accepted (--wait: acked), 1 some rejected, 2 usage error,
    3 broker unreachable or timed out, 4 (--wait) dead-lettered, 5 (--wait)
    the broker does not know the job any more. Uses the producer library in
    nonblock mode so that it can show progress while it waits for credit. */
#include "zlane_producer.h"

#include "clock.h"
#include "log.h"
#include "wire.h"
#include "zl_alloc.h"

#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_PROGRAM "zlane-submit"
#define S_EXIT_OK 0
#define S_EXIT_REJECTED 1
#define S_EXIT_USAGE 2
#define S_EXIT_UNREACHABLE 3
#define S_EXIT_DEAD 4         // --wait: the job was dead-lettered
#define S_EXIT_UNKNOWN 5      // --wait: the broker does not know the job (outcome not kept)
#define S_PROGRESS_AFTER 1000 // lines before a progress line appears
#define S_PROGRESS_EVERY_MS 200
#define S_ERRORS_SHOWN 20 // per-job error lines before we only count
#define S_READ_CHUNK 65536
#define S_IDLE_POLL_MS 100 // input idle: how often the producer is pumped

static const char s_usage[] =
    "usage: zlane-submit [OPTIONS] --tenant T --lane L [PAYLOAD | --file F | -]\n"
    "       zlane-submit [OPTIONS] --tenant T --lane L --lines [--file F | -]\n"
    "       zlane-submit [OPTIONS] --tsv [--file F | -]\n"
    "\n"
    "Submit jobs to a zlane broker and print one job id per line, in input order.\n"
    "\n"
    "Job:\n"
    "  PAYLOAD               the payload, as given\n"
    "  --file F              read the payload (or, with --lines, the lines) from file F\n"
    "  -                     read the payload (or the lines) from stdin\n"
    "  --lines               submit one job per input line, without its newline\n"
    "  --tsv                 like --lines, each line TENANT<TAB>LANE<TAB>PAYLOAD\n"
    "                        (no --tenant/--lane then)\n"
    "  --tenant T            tenant the job belongs to (required)\n"
    "  --lane L              lane (job class) to submit to (required)\n"
    "  --key K               idempotency key; a key seen before returns the original\n"
    "                        job id (default: a generated key, unique per job)\n"
    "  --key-prefix P        with --lines: the key of line N is \"P<N>\" (N from 1)\n"
    "  --delay D             do not dispatch before D has passed (default 0)\n"
    "  --max-attempts N      attempts before dead-lettering (default: lane's)\n"
    "  --lease D             lease per attempt (default: lane's)\n"
    "  --max-run D           total run time allowed (default: lane's)\n"
    "  --header K=V          a header passed to the handler; repeatable\n"
    "  --priority N          0 (lowest) to 9, within the lane and tenant (default 5)\n"
    "  --ordering-key K      run one at a time, in order, with the jobs of this tenant\n"
    "                        and lane that have key K (FIFO group)\n"
    "  --max-age D           not run once D has passed since it was accepted: then\n"
    "                        dead-lettered (expired), a running attempt stopped\n"
    "  --after ID            run only once job ID was acked (its result is handed\n"
    "                        to this job's handler); repeatable\n"
    "  --wait                wait for the job's outcome: print its result (the\n"
    "                        bytes the handler returned) instead of its id, or its\n"
    "                        final error and exit 4 if it was dead-lettered\n"
    "  --wait-timeout D      with --wait: give up after D (exit 3) [no limit]\n"
    "\n"
    "Batches:\n"
    "  --batch ID            the job(s) join open batch ID (of the same tenant)\n"
    "  --open-batch ID|-     the job opens batch ID ('-': the broker names it) and is\n"
    "                        its callback, run once the closed batch has settled;\n"
    "                        prints the batch's id instead of the job's\n"
    "  --no-callback         with --open-batch: nothing runs when it settles\n"
    "  --close-batch ID      close batch ID once this call's jobs were accepted (with\n"
    "                        no payload and no --tenant/--lane: only close it)"
    "\n"
    "Connection and output:\n"
    "  --broker EP[,EP...]   broker frontend (default $ZLANE_BROKER or\n"
    "                        tcp://127.0.0.1:5570); several brokers sharing a store:\n"
    "                        one at a time, the next when it goes silent, the leader\n"
    "                        when a standby says NOT_LEADER; unaccepted jobs are\n"
    "                        resent there under the same keys\n"
    "  --timeout D           wait at most D for credit to submit a job, and at most D\n"
    "                        for the broker to accept it (default 30s)\n"
    "  --curve-server FILE   the broker's public certificate: talk CURVE (default\n"
    "                        $ZLANE_CURVE_SERVER); one for every broker of the list\n"
    "  --cert FILE           this producer's secret certificate, NAME_secret from\n"
    "                        zlane-ctl keygen (default $ZLANE_CERT)\n"
    "  --json                print {\"seq\":..,\"job_id\":..,\"duplicate\":..} per job\n"
    "  -q, --quiet           print no job ids and no progress; errors only\n"
    "  -v, --verbose         log connection events (twice: debug, three times: trace)\n"
    "  -h, --help            show this help\n"
    "\n"
    "Durations take a suffix: ms, s, m, h (a bare number is milliseconds).\n"
    "A rejected or timed-out job prints an empty line (with --json an object with\n"
    "\"error\") so that output line N still belongs to input line N.\n"
    "\n"
    "Exit status: 0 all accepted, 1 some rejected (UNAUTHORIZED: this key may not\n"
    "submit for the tenant), 2 usage error, 3 broker unreachable (or it refused the\n"
    "CURVE key) or a job timed out; with --wait: 0 acked, 4 dead-lettered, 5 the\n"
    "broker does not know the job (any more), 3 no outcome within --wait-timeout.\n";

typedef struct {
    const char *broker;
    const char *curve_server; // --curve-server, or $ZLANE_CURVE_SERVER
    const char *cert;         // --cert, or $ZLANE_CERT
    const char *tenant;
    const char *lane;
    const char *key;
    const char *key_prefix;
    const char *file;
    const char *payload; // positional PAYLOAD
    bool from_stdin;     // positional "-"
    bool lines;
    bool tsv;
    bool quiet;
    bool json;
    int verbose;
    uint32_t delay_ms;
    uint32_t max_attempts;
    uint32_t lease_ms;
    uint32_t max_run_ms;
    uint32_t timeout_ms;
    zl_header_t *headers;
    size_t n_headers;
    uint64_t *after; // --after: parents
    size_t n_after;
    bool wait;
    uint32_t wait_timeout_ms; // 0 = no limit
    const char *batch;        // --batch
    const char *open_batch;   // --open-batch ("-": the broker names it)
    bool no_callback;         // --no-callback
    const char *close_batch;  // --close-batch
    int priority;             // --priority, -1 = none
    uint32_t max_age_ms;      // --max-age
    const char *ordering_key; // --ordering-key
} s_args_t;

//  One job's result, kept until every earlier job's line is printed.
typedef struct {
    bool known;
    zl_producer_status_t status;
    bool duplicate;
    uint64_t job_id;
    zl_reject_code_t code;
    char *reason; // owned; failures only
} s_slot_t;

typedef struct {
    const s_args_t *args;
    zl_producer_t *producer;
    s_slot_t *slots; // slots[i] is seq base + i
    size_t cap;
    uint64_t base;
    uint64_t next_print; // seq whose line comes next
    uint64_t submitted, accepted, rejected, timed_out;
    uint64_t errors_shown;
    bool unreachable;    // a job found no credit within the timeout
    bool progress;       // a progress line may be shown
    bool progress_shown; // one is on the terminal now
    int64_t progress_at;
    bool held;      // a submit waited for credit since the last line
    char *batch_id; // --open-batch: the batch the job opened (owned)
} s_run_t;

// ---------------------------------------------------------------- messages

static const char *
s_seconds (uint32_t ms, char *buf, size_t size)
{
    snprintf (buf, size, "%.3g s", ms / 1000.0);
    return buf;
}

static void
s_progress_clear (s_run_t *run)
{
    if (run->progress_shown) {
        fputs ("\r\033[K", stderr);
        run->progress_shown = false;
    }
}

//  Print "zlane-submit: <message>" on stderr, above any progress line.
static void s_say (s_run_t *run, const char *fmt, ...) __attribute__ ((format (printf, 2, 3)));

static void
s_say (s_run_t *run, const char *fmt, ...)
{
    if (run)
        s_progress_clear (run);
    va_list args;
    va_start (args, fmt);
    fputs (S_PROGRAM ": ", stderr);
    vfprintf (stderr, fmt, args);
    fputc ('\n', stderr);
    va_end (args);
}

static void
s_progress (s_run_t *run, bool force)
{
    if (!run->progress || run->submitted <= S_PROGRESS_AFTER)
        return;
    int64_t now = zl_clock_mono_ms ();
    if (!force && now - run->progress_at < S_PROGRESS_EVERY_MS)
        return;
    run->progress_at = now;
    //  Credit comes back a few jobs at a time and is spent at once: the
    //  line says "waiting for credit" if a submit waited for it since the
    //  last line, not only if this instant is one without any.
    const char *state = "";
    if (!zl_producer_connected (run->producer))
        state = ", waiting for broker";
    else if (run->held || zl_producer_waiting_for_credit (run->producer))
        state = ", waiting for credit";
    run->held = false;
    fprintf (stderr, "\r\033[K" S_PROGRAM ": submitted %llu, accepted %llu%s",
             (unsigned long long)run->submitted, (unsigned long long)run->accepted, state);
    if (run->rejected || run->timed_out)
        fprintf (stderr, ", failed %llu", (unsigned long long)(run->rejected + run->timed_out));
    fflush (stderr);
    run->progress_shown = true;
}

// ---------------------------------------------------------------- output

static void
s_json_string (FILE *out, const char *s)
{
    fputc ('"', out);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf (out, "\\%c", *c);
        else if (*c == '\n')
            fputs ("\\n", out);
        else if (*c < 0x20 || *c == 0x7f)
            fprintf (out, "\\u%04x", *c);
        else
            fputc (*c, out);
    }
    fputc ('"', out);
}

static void
s_print_slot (s_run_t *run, uint64_t seq, const s_slot_t *slot)
{
    if (run->args->quiet || run->args->wait) // --wait prints the outcome instead
        return;
    bool ok = slot->status == ZL_PRODUCER_ACCEPTED;
    if (!run->args->json) {
        if (ok && run->batch_id)
            printf ("%s\n", run->batch_id);
        else if (ok)
            printf ("%llu\n", (unsigned long long)slot->job_id);
        else
            putchar ('\n'); // keeps output line N for input line N
        return;
    }
    if (ok) {
        printf ("{\"seq\":%llu,\"job_id\":%llu,\"duplicate\":%s", (unsigned long long)seq,
                (unsigned long long)slot->job_id, slot->duplicate ? "true" : "false");
        if (run->batch_id) {
            fputs (",\"batch_id\":", stdout);
            s_json_string (stdout, run->batch_id);
        }
        fputs ("}\n", stdout);
        return;
    }
    bool rejected = slot->status == ZL_PRODUCER_REJECTED;
    printf ("{\"seq\":%llu,\"job_id\":null,\"error\":\"%s\"", (unsigned long long)seq,
            rejected ? "rejected" : "timeout");
    if (rejected || slot->code)
        printf (",\"code\":\"%s\"", zl_reject_code_name (slot->code));
    fputs (",\"reason\":", stdout);
    s_json_string (stdout, slot->reason ? slot->reason : "");
    fputs ("}\n", stdout);
}

static s_slot_t *
s_slot (s_run_t *run, uint64_t seq)
{
    size_t index = (size_t)(seq - run->base);
    if (index >= run->cap) {
        size_t cap = run->cap ? run->cap : 1024;
        while (index >= cap)
            cap *= 2;
        run->slots = zl_realloc (run->slots, cap * sizeof *run->slots);
        memset (run->slots + run->cap, 0, (cap - run->cap) * sizeof *run->slots);
        run->cap = cap;
    }
    return &run->slots[index];
}

//  Print every result whose turn has come, then drop the printed prefix.
static void
s_print_ready (s_run_t *run)
{
    bool printed = false;
    while (run->next_print - run->base < run->cap) {
        s_slot_t *slot = &run->slots[run->next_print - run->base];
        if (!slot->known)
            break;
        if (!printed)
            s_progress_clear (run);
        printed = true;
        s_print_slot (run, run->next_print, slot);
        free (slot->reason);
        slot->reason = NULL;
        run->next_print++;
    }
    size_t done = (size_t)(run->next_print - run->base);
    if (done >= 4096 && done >= run->cap / 2) {
        memmove (run->slots, run->slots + done, (run->cap - done) * sizeof *run->slots);
        memset (run->slots + run->cap - done, 0, done * sizeof *run->slots);
        run->base = run->next_print;
    }
}

static void
s_on_result (const zl_producer_result_t *result, void *arg)
{
    s_run_t *run = arg;
    s_slot_t *slot = s_slot (run, result->seq);
    slot->known = true;
    slot->status = result->status;
    slot->duplicate = result->duplicate;
    slot->job_id = result->job_id;
    slot->code = result->code;
    if (result->batch_id && result->batch_id[0] && !run->batch_id)
        run->batch_id = zl_strdup (result->batch_id);
    if (result->status == ZL_PRODUCER_ACCEPTED) {
        run->accepted++;
    } else {
        slot->reason = zl_strdup (result->reason);
        bool rejected = result->status == ZL_PRODUCER_REJECTED;
        if (rejected)
            run->rejected++;
        else
            run->timed_out++;
        if (run->errors_shown++ < S_ERRORS_SHOWN) {
            if (rejected)
                s_say (run, "job %llu rejected: %s: %s", (unsigned long long)result->seq,
                       zl_reject_code_name (result->code), result->reason);
            else
                s_say (run, "job %llu timed out: %s", (unsigned long long)result->seq,
                       result->reason);
        } else if (run->errors_shown == S_ERRORS_SHOWN + 1)
            s_say (run, "(further failed jobs are counted, not listed)");
    }
    s_print_ready (run);
}

// ---------------------------------------------------------------- submitting

//  Submit one job, pumping the producer while there is no credit. Returns 0,
//  or -1 after saying why (the broker gave no credit within the timeout).
static int
s_submit (s_run_t *run, const zl_producer_job_t *job)
{
    int64_t start = zl_clock_mono_ms ();
    while (true) {
        uint64_t seq;
        if (zl_producer_submit (run->producer, job, &seq) == 0) {
            run->submitted++;
            s_progress (run, false);
            return 0;
        }
        if (errno != EAGAIN) {
            s_say (run, "cannot submit: %s", zl_producer_last_error (run->producer));
            return -1;
        }
        run->held = true;
        if (zl_clock_mono_ms () - start >= run->args->timeout_ms) {
            char took[32];
            s_seconds (run->args->timeout_ms, took, sizeof took);
            const char *refusal = zl_producer_refusal (run->producer);
            if (!zl_producer_connected (run->producer) && *refusal)
                s_say (run, "broker unreachable at %s for %s: %s", run->args->broker, took,
                       refusal);
            else if (*refusal)
                s_say (run, "no credit from broker at %s for %s: %s", run->args->broker, took,
                       refusal);
            else if (!zl_producer_connected (run->producer))
                s_say (run, "broker unreachable at %s for %s (is zlane-broker running?)",
                       run->args->broker, took);
            else
                s_say (run, "no credit from broker at %s for %s (queue full?)", run->args->broker,
                       took);
            run->unreachable = true;
            return -1;
        }
        fflush (stdout); // (as in s_wait_input)
        zl_producer_poll (run->producer, S_IDLE_POLL_MS);
        s_progress (run, false);
    }
}

static void
s_fill_job (const s_args_t *args, zl_producer_job_t *job)
{
    *job = (zl_producer_job_t){.tenant = args->tenant,
                               .lane = args->lane,
                               .idempotency_key = args->key,
                               .delay_ms = args->delay_ms,
                               .max_attempts = args->max_attempts,
                               .lease_ms = args->lease_ms,
                               .max_run_ms = args->max_run_ms,
                               .headers = args->headers,
                               .n_headers = args->n_headers,
                               .depends_on = args->after,
                               .n_depends_on = args->n_after,
                               .batch = args->batch,
                               .open_batch = args->open_batch != NULL,
                               .open_batch_id = args->open_batch && strcmp (args->open_batch, "-")
                                                    ? args->open_batch
                                                    : NULL,
                               .batch_no_callback = args->no_callback,
                               .max_age_ms = args->max_age_ms,
                               .ordering_key = args->ordering_key,
                               .has_priority = args->priority >= 0,
                               .priority = (uint8_t)(args->priority >= 0 ? args->priority : 0)};
}

//  Read all of `fd` into a new buffer. Returns 0 or -1 (errno).
static int
s_slurp (int fd, char **data_p, size_t *len_p)
{
    size_t cap = S_READ_CHUNK, len = 0;
    char *data = zl_malloc (cap);
    while (true) {
        if (len == cap)
            data = zl_realloc (data, cap *= 2);
        ssize_t n = read (fd, data + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            free (data);
            return -1;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    *data_p = data;
    *len_p = len;
    return 0;
}

//  Input lines from a file descriptor, read in chunks. While the input is
//  idle the producer keeps sending, receiving and delivering results.
typedef struct {
    int fd;
    char *buf;
    size_t start, len, cap;
    bool eof;
} s_reader_t;

static void
s_wait_input (s_run_t *run, int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll (&pfd, 1, 0) > 0)
        return;
    zl_producer_flush (run->producer); // the input paused: send the partial batch
    while (true) {
        zl_producer_poll (run->producer, 0);
        s_progress (run, false);
        // and what was printed goes out: a reader of a pipe or a file sees
        // each accepted job while the input waits (stdio holds 4 KiB there)
        fflush (stdout);
        int rc = poll (&pfd, 1, S_IDLE_POLL_MS);
        if (rc > 0 || (rc < 0 && errno != EINTR))
            return;
    }
}

//  Return 1 with the next line (without its newline), 0 at end, -1 on error.
static int
s_read_line (s_run_t *run, s_reader_t *r, const char **line, size_t *len)
{
    while (true) {
        char *nl = memchr (r->buf + r->start, '\n', r->len - r->start);
        if (nl || (r->eof && r->len > r->start)) {
            char *end = nl ? nl : r->buf + r->len;
            *line = r->buf + r->start;
            *len = (size_t)(end - *line);
            r->start = nl ? (size_t)(nl - r->buf) + 1 : r->len;
            return 1;
        }
        if (r->eof)
            return 0;
        if (r->start > 0) {
            memmove (r->buf, r->buf + r->start, r->len - r->start);
            r->len -= r->start;
            r->start = 0;
        }
        if (r->cap - r->len < S_READ_CHUNK / 2)
            r->buf = zl_realloc (r->buf, r->cap *= 2);
        s_wait_input (run, r->fd);
        ssize_t n = read (r->fd, r->buf + r->len, r->cap - r->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            r->eof = true;
        r->len += (size_t)(n > 0 ? n : 0);
    }
}

//  With --tsv a line is TENANT<TAB>LANE<TAB>PAYLOAD: point `job` at its
//  parts (tenant and lane copied into the 129-byte buffers). Returns 0 or -1.
static int
s_split_tsv (const char *line, size_t len, char *tenant, char *lane, zl_producer_job_t *job)
{
    const char *t1 = memchr (line, '\t', len);
    if (!t1 || t1 == line || (size_t)(t1 - line) > 128)
        return -1;
    const char *rest = t1 + 1;
    size_t rest_len = len - (size_t)(rest - line);
    const char *t2 = memchr (rest, '\t', rest_len);
    if (!t2 || t2 == rest || (size_t)(t2 - rest) > 128)
        return -1;
    memcpy (tenant, line, (size_t)(t1 - line));
    tenant[t1 - line] = '\0';
    memcpy (lane, rest, (size_t)(t2 - rest));
    lane[t2 - rest] = '\0';
    job->tenant = tenant;
    job->lane = lane;
    job->payload = t2 + 1;
    job->payload_len = len - (size_t)(t2 + 1 - line);
    return 0;
}

//  Submit one job per input line. Returns 0, or -1 if submitting stopped.
static int
s_submit_lines (s_run_t *run, int fd)
{
    char tenant[129], lane[129];
    const s_args_t *args = run->args;
    s_reader_t reader = {.fd = fd, .buf = zl_malloc (S_READ_CHUNK), .cap = S_READ_CHUNK};
    zl_producer_job_t job;
    s_fill_job (args, &job);
    size_t key_cap = (args->key_prefix ? strlen (args->key_prefix) : 0) + 24;
    char *key = zl_malloc (key_cap);
    int rc = 0;
    uint64_t number = 0;
    const char *line;
    size_t len;
    int got;
    while ((got = s_read_line (run, &reader, &line, &len)) == 1) {
        number++;
        job.payload = line;
        job.payload_len = len;
        if (args->tsv && s_split_tsv (line, len, tenant, lane, &job) < 0) {
            s_say (run, "line %llu: expected TENANT<TAB>LANE<TAB>PAYLOAD",
                   (unsigned long long)number);
            rc = -1;
            break;
        }
        if (args->key_prefix) {
            snprintf (key, key_cap, "%s%llu", args->key_prefix, (unsigned long long)number);
            job.idempotency_key = key;
        }
        if (s_submit (run, &job) < 0) {
            rc = -1;
            break;
        }
    }
    if (got < 0) {
        s_say (run, "cannot read input: %s", strerror (errno));
        rc = -1;
    }
    free (key);
    free (reader.buf);
    return rc;
}

//  Submit the single job. Returns 0, or -1 if it could not be submitted.
static int
s_submit_one (s_run_t *run)
{
    const s_args_t *args = run->args;
    zl_producer_job_t job;
    s_fill_job (args, &job);
    char *data = NULL;
    size_t len = 0;
    if (args->file || args->from_stdin) {
        int fd = args->file ? open (args->file, O_RDONLY) : STDIN_FILENO;
        if (fd < 0 || s_slurp (fd, &data, &len) < 0) {
            s_say (run, "cannot read %s: %s", args->file ? args->file : "stdin", strerror (errno));
            if (fd > STDIN_FILENO)
                close (fd);
            return -1;
        }
        if (fd != STDIN_FILENO)
            close (fd);
        job.payload = data;
        job.payload_len = len;
    } else {
        job.payload = args->payload;
        job.payload_len = strlen (args->payload);
    }
    int rc = s_submit (run, &job);
    free (data);
    return rc;
}

// ---------------------------------------------------------------- arguments

static int s_usage_error (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

static int
s_usage_error (const char *fmt, ...)
{
    va_list args;
    va_start (args, fmt);
    fputs (S_PROGRAM ": ", stderr);
    vfprintf (stderr, fmt, args);
    fputs ("\n" S_PROGRAM ": try --help\n", stderr);
    va_end (args);
    return -1;
}

static int
s_duration_arg (const char *flag, const char *text, uint32_t *out)
{
    uint64_t ms;
    if (zl_parse_duration_ms (text, &ms) < 0 || ms > UINT32_MAX)
        return s_usage_error ("%s: not a duration: '%s' (e.g. 500ms, 30s, 5m, 1h)", flag, text);
    *out = (uint32_t)ms;
    return 0;
}

enum {
    OPT_BROKER = 256,
    OPT_TENANT,
    OPT_LANE,
    OPT_KEY,
    OPT_KEY_PREFIX,
    OPT_DELAY,
    OPT_MAX_ATTEMPTS,
    OPT_LEASE,
    OPT_MAX_RUN,
    OPT_HEADER,
    OPT_TIMEOUT,
    OPT_JSON,
    OPT_FILE,
    OPT_LINES,
    OPT_TSV,
    OPT_CURVE_SERVER,
    OPT_CERT,
    OPT_AFTER,
    OPT_WAIT,
    OPT_WAIT_TIMEOUT,
    OPT_BATCH,
    OPT_OPEN_BATCH,
    OPT_NO_CALLBACK,
    OPT_CLOSE_BATCH,
    OPT_PRIORITY,
    OPT_MAX_AGE,
    OPT_ORDERING_KEY
};

static const struct option s_options[] = {
    {"broker", required_argument, NULL, OPT_BROKER},
    {"tenant", required_argument, NULL, OPT_TENANT},
    {"lane", required_argument, NULL, OPT_LANE},
    {"key", required_argument, NULL, OPT_KEY},
    {"key-prefix", required_argument, NULL, OPT_KEY_PREFIX},
    {"delay", required_argument, NULL, OPT_DELAY},
    {"max-attempts", required_argument, NULL, OPT_MAX_ATTEMPTS},
    {"lease", required_argument, NULL, OPT_LEASE},
    {"max-run", required_argument, NULL, OPT_MAX_RUN},
    {"header", required_argument, NULL, OPT_HEADER},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"json", no_argument, NULL, OPT_JSON},
    {"file", required_argument, NULL, OPT_FILE},
    {"lines", no_argument, NULL, OPT_LINES},
    {"tsv", no_argument, NULL, OPT_TSV},
    {"curve-server", required_argument, NULL, OPT_CURVE_SERVER},
    {"cert", required_argument, NULL, OPT_CERT},
    {"after", required_argument, NULL, OPT_AFTER},
    {"wait", no_argument, NULL, OPT_WAIT},
    {"wait-timeout", required_argument, NULL, OPT_WAIT_TIMEOUT},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"open-batch", required_argument, NULL, OPT_OPEN_BATCH},
    {"no-callback", no_argument, NULL, OPT_NO_CALLBACK},
    {"close-batch", required_argument, NULL, OPT_CLOSE_BATCH},
    {"priority", required_argument, NULL, OPT_PRIORITY},
    {"max-age", required_argument, NULL, OPT_MAX_AGE},
    {"ordering-key", required_argument, NULL, OPT_ORDERING_KEY},
    {"quiet", no_argument, NULL, 'q'},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0}};

//  Parse the command line into `args`. Returns 0, 1 after printing help, or
//  -1 after a usage message.
static int
s_parse_args (int argc, char **argv, s_args_t *args)
{
    const char *env_broker = getenv ("ZLANE_BROKER");
    const char *env_server = getenv ("ZLANE_CURVE_SERVER"), *env_cert = getenv ("ZLANE_CERT");
    *args = (s_args_t){.broker = env_broker && *env_broker ? env_broker : "tcp://127.0.0.1:5570",
                       .curve_server = env_server && *env_server ? env_server : NULL,
                       .cert = env_cert && *env_cert ? env_cert : NULL,
                       .timeout_ms = 30000,
                       .priority = -1};
    uint64_t number;
    int opt;
    opterr = 0;
    while ((opt = getopt_long (argc, argv, ":qvh", s_options, NULL)) != -1) {
        switch (opt) {
        case OPT_BROKER: args->broker = optarg; break;
        case OPT_CURVE_SERVER: args->curve_server = optarg; break;
        case OPT_CERT: args->cert = optarg; break;
        case OPT_TENANT: args->tenant = optarg; break;
        case OPT_LANE: args->lane = optarg; break;
        case OPT_KEY: args->key = optarg; break;
        case OPT_KEY_PREFIX: args->key_prefix = optarg; break;
        case OPT_FILE: args->file = optarg; break;
        case OPT_LINES: args->lines = true; break;
        case OPT_TSV:
            args->lines = true;
            args->tsv = true;
            break;
        case OPT_JSON: args->json = true; break;
        case 'q': args->quiet = true; break;
        case 'v': args->verbose++; break;
        case 'h': fputs (s_usage, stdout); return 1;
        case OPT_DELAY:
            if (s_duration_arg ("--delay", optarg, &args->delay_ms) < 0)
                return -1;
            break;
        case OPT_LEASE:
            if (s_duration_arg ("--lease", optarg, &args->lease_ms) < 0)
                return -1;
            break;
        case OPT_MAX_RUN:
            if (s_duration_arg ("--max-run", optarg, &args->max_run_ms) < 0)
                return -1;
            break;
        case OPT_TIMEOUT:
            if (s_duration_arg ("--timeout", optarg, &args->timeout_ms) < 0)
                return -1;
            if (args->timeout_ms == 0)
                return s_usage_error ("--timeout must be more than 0");
            break;
        case OPT_MAX_ATTEMPTS:
            if (zl_parse_u64 (optarg, &number) < 0 || number > UINT32_MAX)
                return s_usage_error ("--max-attempts: not a count: '%s'", optarg);
            args->max_attempts = (uint32_t)number;
            break;
        case OPT_HEADER: {
            const char *eq = strchr (optarg, '=');
            if (!eq || eq == optarg)
                return s_usage_error ("--header wants KEY=VALUE, not '%s'", optarg);
            args->headers =
                zl_realloc (args->headers, (args->n_headers + 1) * sizeof *args->headers);
            args->headers[args->n_headers++] =
                (zl_header_t){zl_strndup (optarg, (size_t)(eq - optarg)), eq + 1};
            break;
        }
        case OPT_AFTER: {
            char *end;
            errno = 0;
            unsigned long long id = strtoull (optarg, &end, 10);
            if (errno || end == optarg || *end || id == 0)
                return s_usage_error ("--after wants a job id, not '%s'", optarg);
            args->after = zl_realloc (args->after, (args->n_after + 1) * sizeof *args->after);
            args->after[args->n_after++] = id;
            break;
        }
        case OPT_WAIT: args->wait = true; break;
        case OPT_BATCH: args->batch = optarg; break;
        case OPT_OPEN_BATCH: args->open_batch = optarg; break;
        case OPT_NO_CALLBACK: args->no_callback = true; break;
        case OPT_CLOSE_BATCH: args->close_batch = optarg; break;
        case OPT_ORDERING_KEY: args->ordering_key = optarg; break;
        case OPT_MAX_AGE:
            if (s_duration_arg ("--max-age", optarg, &args->max_age_ms) < 0)
                return -1;
            break;
        case OPT_PRIORITY: {
            char *end;
            long p = strtol (optarg, &end, 10);
            if (end == optarg || *end || p < 0 || p > 9)
                return s_usage_error ("--priority wants 0 to 9, not '%s'", optarg);
            args->priority = (int)p;
            break;
        }
        case OPT_WAIT_TIMEOUT:
            if (s_duration_arg ("--wait-timeout", optarg, &args->wait_timeout_ms) < 0)
                return -1;
            break;
        case ':': return s_usage_error ("%s needs a value", argv[optind - 1]);
        default:
            if (optopt > 0 && optopt < OPT_BROKER)
                return s_usage_error ("unknown option '-%c'", optopt);
            return s_usage_error ("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) {
        if (strcmp (argv[optind], "-") == 0)
            args->from_stdin = true;
        else
            args->payload = argv[optind];
        optind++;
    }
    if (optind < argc)
        return s_usage_error ("unexpected argument '%s' (one payload per call; see --lines)",
                              argv[optind]);
    if (args->close_batch && optind >= argc && !args->tenant && !args->lane && !args->lines &&
        !args->file)
        return 0; // only a close
    if (args->wait && args->lines)
        return s_usage_error ("--wait waits for one job: not with --lines or --tsv");
    if (args->open_batch && (args->lines || args->batch))
        return s_usage_error ("--open-batch opens a batch with one job: not with --lines, "
                              "--tsv or --batch");
    if (args->no_callback && !args->open_batch)
        return s_usage_error ("--no-callback goes with --open-batch");
    if (args->tsv && (args->tenant || args->lane))
        return s_usage_error ("--tsv takes the tenant and lane from each line");
    if (!args->tsv && (!args->tenant || !*args->tenant))
        return s_usage_error ("--tenant is required");
    if (!args->tsv && (!args->lane || !*args->lane))
        return s_usage_error ("--lane is required");
    int sources = (args->payload != NULL) + (args->file != NULL) + args->from_stdin;
    if (sources > 1)
        return s_usage_error ("give one of PAYLOAD, --file F or -");
    if (args->lines) {
        if (args->payload)
            return s_usage_error ("--lines reads stdin or --file F, not a PAYLOAD argument");
        if (args->key)
            return s_usage_error ("--key names one job; with --lines use --key-prefix");
    } else {
        if (sources == 0)
            return s_usage_error ("no payload: give PAYLOAD, --file F or - for stdin");
        if (args->key_prefix)
            return s_usage_error ("--key-prefix goes with --lines; use --key for one job");
    }
    return 0;
}

static void
s_free_args (s_args_t *args)
{
    for (size_t i = 0; i < args->n_headers; i++)
        free ((char *)args->headers[i].key);
    free (args->headers);
    free (args->after);
}

// ---------------------------------------------------------------- --wait
typedef struct {
    bool got;
    int status;
    bool json;
} s_wait_t;

static void
s_on_outcome (const zl_producer_outcome_t *o, void *arg)
{
    s_wait_t *w = arg;
    w->got = true;
    if (w->json) {
        printf ("{\"job_id\":%llu,\"found\":%s,\"state\":", (unsigned long long)o->job_id,
                o->found ? "true" : "false");
        s_json_string (stdout, o->state);
        printf (",\"outcome\":\"%s\",\"result\":", zl_outcome_name (o->outcome));
        char *text = zl_strndup ((const char *)o->result.data, o->result.len);
        s_json_string (stdout, text);
        free (text);
        fputs (",\"error\":", stdout);
        s_json_string (stdout, o->error);
        printf (",\"failed_parent\":%llu}\n", (unsigned long long)o->failed_parent);
    }
    if (!o->found) {
        s_say (NULL, "job %llu: the broker does not know it (its outcome is not kept)",
               (unsigned long long)o->job_id);
        w->status = S_EXIT_UNKNOWN;
        return;
    }
    if (o->outcome == ZL_OUTCOME_ACKED) {
        if (!w->json && o->result.len)
            fwrite (o->result.data, 1, o->result.len, stdout);
        w->status = S_EXIT_OK;
        return;
    }
    s_say (NULL, "job %llu dead-lettered after %u attempt(s) (%s): %s",
           (unsigned long long)o->job_id, o->attempts, zl_outcome_name (o->outcome), o->error);
    w->status = S_EXIT_DEAD;
}

//  --wait: watch the job just accepted until its outcome comes; print it.
static int
s_wait_outcome (s_run_t *run)
{
    s_slot_t *slot = s_slot (run, run->base);
    if (!slot->known || slot->status != ZL_PRODUCER_ACCEPTED)
        return S_EXIT_REJECTED;
    s_wait_t w = {.json = run->args->json};
    zl_producer_set_outcome_fn (run->producer, s_on_outcome, &w);
    zl_producer_watch (run->producer, &slot->job_id, 1);
    int timeout = run->args->wait_timeout_ms ? (int)run->args->wait_timeout_ms : -1;
    while (!w.got && zl_producer_wait_outcomes (run->producer, timeout) < 0) {
        if (errno == ETIMEDOUT) {
            s_say (NULL, "job %llu: no outcome within --wait-timeout",
                   (unsigned long long)slot->job_id);
            return S_EXIT_UNREACHABLE;
        }
        if (errno != EINTR)
            return S_EXIT_UNREACHABLE;
    }
    fflush (stdout);
    return w.status;
}

// ---------------------------------------------------------------- main

int
main (int argc, char **argv)
{
    zl_log_set_program (S_PROGRAM);
    zsys_handler_set (NULL); // Ctrl-C ends the program, as for any filter
    s_args_t args;
    int parsed = s_parse_args (argc, argv, &args);
    if (parsed != 0) {
        s_free_args (&args);
        return parsed > 0 ? S_EXIT_OK : S_EXIT_USAGE;
    }
    static const zl_log_level_t levels[] = {ZL_LOG_WARN, ZL_LOG_INFO, ZL_LOG_DEBUG, ZL_LOG_TRACE};
    zl_log_set_level (levels[args.verbose < 3 ? args.verbose : 3]);

    int input = STDIN_FILENO;
    if (args.lines && args.file && (input = open (args.file, O_RDONLY)) < 0) {
        s_say (NULL, "cannot open %s: %s", args.file, strerror (errno));
        s_free_args (&args);
        return S_EXIT_USAGE;
    }

    s_run_t run = {.args = &args, .base = 1, .next_print = 1};
    run.progress = args.lines && !args.quiet && isatty (STDERR_FILENO);
    zl_producer_opts_t opts;
    zl_producer_opts_defaults (&opts);
    opts.endpoint = args.broker;
    opts.client = S_PROGRAM;
    opts.deadline_ms = args.timeout_ms;
    opts.nonblock = true;
    opts.on_result = s_on_result;
    opts.on_result_arg = &run;
    char err[512];
    if (zl_curve_load (&opts.curve, args.curve_server, args.cert, err, sizeof err) != 0) {
        s_say (NULL, "%s (--curve-server FILE --cert FILE)", err);
        if (input != STDIN_FILENO)
            close (input);
        s_free_args (&args);
        return S_EXIT_USAGE;
    }
    run.producer = zl_producer_new (&opts);
    memset (&opts.curve, 0, sizeof opts.curve);
    if (!run.producer) {
        s_say (NULL, "cannot connect to '%s': %s", args.broker, zmq_strerror (errno));
        if (input != STDIN_FILENO)
            close (input);
        s_free_args (&args);
        return S_EXIT_USAGE;
    }

    bool only_close = args.close_batch && !args.tenant && !args.lane && !args.lines;
    int rc = only_close ? 0 : args.lines ? s_submit_lines (&run, input) : s_submit_one (&run);
    //  Every job has a deadline, so this ends.
    while (zl_producer_wait (run.producer, S_PROGRESS_EVERY_MS) < 0 &&
           (errno == ETIMEDOUT || errno == EINTR))
        s_progress (&run, false);
    s_progress_clear (&run);
    fflush (stdout);

    int status = S_EXIT_OK;
    if (args.close_batch && rc == 0 &&
        zl_producer_close_batch (run.producer, args.close_batch, (int)args.timeout_ms) != 0) {
        s_say (NULL, "%s", zl_producer_last_error (run.producer));
        status = errno == ETIMEDOUT ? S_EXIT_UNREACHABLE : S_EXIT_REJECTED;
    }
    if (rc < 0 && args.lines)
        s_say (NULL, "stopped after %llu lines; the rest were not submitted",
               (unsigned long long)run.submitted);
    if (run.unreachable || run.timed_out > 0) {
        char took[32];
        if (run.timed_out > 0)
            s_say (NULL, "%llu of %llu jobs got no answer from the broker at %s within %s",
                   (unsigned long long)run.timed_out, (unsigned long long)run.submitted,
                   args.broker, s_seconds (args.timeout_ms, took, sizeof took));
        status = S_EXIT_UNREACHABLE;
    } else if (status != S_EXIT_OK) {
        // the close failed (said above)
    } else if (rc < 0) {
        status = S_EXIT_USAGE; // the input could not be read
    } else if (run.rejected > 0) {
        if (run.rejected > 1 || args.lines)
            s_say (NULL, "%llu of %llu jobs rejected", (unsigned long long)run.rejected,
                   (unsigned long long)run.submitted);
        status = S_EXIT_REJECTED;
    }

    if (status == S_EXIT_OK && args.wait)
        status = s_wait_outcome (&run);

    zl_producer_destroy (&run.producer);
    for (size_t i = 0; i < run.cap; i++)
        free (run.slots[i].reason);
    free (run.slots);
    free (run.batch_id);
    if (input != STDIN_FILENO)
        close (input);
    s_free_args (&args);
    return status;
}
