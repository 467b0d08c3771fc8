/*  zlane-exp-handler: the job handler of the failure-mode experiments, run by
    zlane-worker --exec (payload on stdin, the job in ZLANE_*).

    In order: read the payload; --log's start line; --sleep; the crash rule
    (--crash-rate: a seeded hash of payload + attempt picks 5 % of attempts,
    which SIGKILL their own zlane-worker, before the effect with
    --crash-point before, after it with --crash-point after); the effect
    (--raw: one append-only line per execution; --effect: one appended line,
    not idempotent; --sink: a file named by ZLANE_IDEMPOTENCY_KEY made with
    O_EXCL, idempotent); --poison; --log's end line. Plain libc: starts fast. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void
s_usage (FILE *out)
{
    fprintf (out,
             "Usage: zlane-exp-handler [OPTIONS]   (run by zlane-worker --exec)\n"
             "  --log FILE            append \"start|end ID ATTEMPT TENANT ENQ_MS WALL_MS PAYLOAD"
             " [RC]\"\n"
             "  --sleep MS            sleep (fractions allowed) before the outcome\n"
             "  --poison SUBSTR       exit 1 if the payload contains SUBSTR\n"
             "  --crash-rate P        kill our zlane-worker (SIGKILL) on a fraction P of\n"
             "                        attempts, chosen by a hash of payload+attempt+seed\n"
             "  --crash-seed N        the hash seed [1]\n"
             "  --crash-point WHEN    before | after the effect [after]\n"
             "  --crash-log FILE      append \"PAYLOAD ATTEMPT\" before each crash\n"
             "  --raw FILE            append \"PAYLOAD ATTEMPT PID\" per execution (raw log)\n"
             "  --effect FILE         the effect: append \"PAYLOAD\" (not idempotent)\n"
             "  --sink DIR            the effect: create DIR/<idempotency key> with O_EXCL;\n"
             "                        an existing entry means done already (idempotent)\n");
}

static const char *
s_env (const char *name)
{
    const char *v = getenv (name);
    return v ? v : "";
}

static double
s_wall_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

// Append `line` in one O_APPEND write, so concurrent handlers never mix lines.
static void
s_append (const char *path, const char *line)
{
    int fd = open (path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    size_t n = strlen (line);
    if (fd < 0 || write (fd, line, n) != (ssize_t)n) {
        fprintf (stderr, "zlane-exp-handler: cannot append to %s: %s\n", path, strerror (errno));
        exit (3);
    }
    close (fd);
}

static uint64_t
s_mix (uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// A uniform number in [0, 1) from (seed, payload, attempt): the same job
// attempt crashes in every mode and every run.
static double
s_draw (uint64_t seed, const char *payload, long attempt)
{
    uint64_t h = s_mix (seed);
    for (const char *p = payload; *p; p++)
        h = s_mix (h ^ (uint8_t)*p);
    h = s_mix (h ^ (uint64_t)attempt);
    return (double)(h >> 11) / 9007199254740992.0;
}

// The pid of our zlane-worker: the nearest ancestor named zlane-worker
// (between us there may be the /bin/sh that ran the command).
static pid_t
s_worker_pid (void)
{
    pid_t pid = getppid ();
    for (int depth = 0; depth < 4 && pid > 1; depth++) {
        char path[64], comm[64] = "", stat[512];
        snprintf (path, sizeof path, "/proc/%d/comm", (int)pid);
        FILE *f = fopen (path, "r");
        if (f) {
            if (!fgets (comm, sizeof comm, f))
                comm[0] = '\0';
            fclose (f);
        }
        comm[strcspn (comm, "\n")] = '\0';
        if (!strcmp (comm, "zlane-worker"))
            return pid;
        snprintf (path, sizeof path, "/proc/%d/stat", (int)pid);
        f = fopen (path, "r");
        if (!f)
            return -1;
        size_t n = fread (stat, 1, sizeof stat - 1, f);
        fclose (f);
        stat[n] = '\0';
        char *close_paren = strrchr (stat, ')');
        int ppid;
        if (!close_paren || sscanf (close_paren + 1, " %*c %d", &ppid) != 1)
            return -1;
        pid = ppid;
    }
    return -1;
}

static void
s_crash (const char *crash_log, const char *payload, long attempt)
{
    if (crash_log) {
        char line[256];
        snprintf (line, sizeof line, "%s %ld\n", payload, attempt);
        s_append (crash_log, line);
    }
    pid_t worker = s_worker_pid ();
    if (worker <= 0 || kill (worker, SIGKILL) != 0) {
        fprintf (stderr, "zlane-exp-handler: cannot find or kill my zlane-worker\n");
        exit (4);
    }
    exit (0); // what we report no longer matters: nobody reads it
}

static char *
s_read_stdin (void)
{
    size_t cap = 256, len = 0;
    char *buf = malloc (cap);
    if (!buf)
        abort ();
    for (;;) {
        if (len + 1 >= cap) {
            cap *= 2;
            buf = realloc (buf, cap);
            if (!buf)
                abort ();
        }
        ssize_t n = read (0, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    buf[strcspn (buf, "\n")] = '\0'; // one line; the log is line based
    return buf;
}

static void
s_log (const char *path, const char *what, const char *payload, int rc)
{
    char line[512];
    int n = snprintf (line, sizeof line, "%s %s %s %s %s %.3f %.60s", what, s_env ("ZLANE_JOB_ID"),
                      s_env ("ZLANE_ATTEMPT"), s_env ("ZLANE_TENANT"),
                      s_env ("ZLANE_ENQUEUED_AT_MS"), s_wall_ms (), payload);
    if (rc >= 0)
        snprintf (line + n, sizeof line - (size_t)n, " %d\n", rc);
    else
        snprintf (line + n, sizeof line - (size_t)n, "\n");
    s_append (path, line);
}

int
main (int argc, char **argv)
{
    enum {
        O_LOG = 256,
        O_SLEEP,
        O_POISON,
        O_RATE,
        O_SEED,
        O_POINT,
        O_CLOG,
        O_RAW,
        O_EFFECT,
        O_SINK
    };
    static const struct option opts[] = {{"log", required_argument, 0, O_LOG},
                                         {"sleep", required_argument, 0, O_SLEEP},
                                         {"poison", required_argument, 0, O_POISON},
                                         {"crash-rate", required_argument, 0, O_RATE},
                                         {"crash-seed", required_argument, 0, O_SEED},
                                         {"crash-point", required_argument, 0, O_POINT},
                                         {"crash-log", required_argument, 0, O_CLOG},
                                         {"raw", required_argument, 0, O_RAW},
                                         {"effect", required_argument, 0, O_EFFECT},
                                         {"sink", required_argument, 0, O_SINK},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *log = NULL, *poison = NULL, *crash_log = NULL, *raw = NULL, *effect = NULL,
               *sink = NULL;
    double sleep_ms = 0, rate = 0;
    uint64_t seed = 1;
    int crash_after = 1, c;
    while ((c = getopt_long (argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_LOG: log = optarg; break;
        case O_SLEEP: sleep_ms = atof (optarg); break;
        case O_POISON: poison = optarg; break;
        case O_RATE: rate = atof (optarg); break;
        case O_SEED: seed = strtoull (optarg, NULL, 10); break;
        case O_POINT: crash_after = strcmp (optarg, "before") != 0; break;
        case O_CLOG: crash_log = optarg; break;
        case O_RAW: raw = optarg; break;
        case O_EFFECT: effect = optarg; break;
        case O_SINK: sink = optarg; break;
        case 'h': s_usage (stdout); return 0;
        default: s_usage (stderr); return 2;
        }
    }
    char *payload = s_read_stdin ();
    long attempt = atol (s_env ("ZLANE_ATTEMPT"));
    if (log)
        s_log (log, "start", payload, -1);
    if (sleep_ms > 0) {
        struct timespec ts = {(time_t)(sleep_ms / 1000),
                              (long)((sleep_ms - 1000.0 * (double)(long)(sleep_ms / 1000)) * 1e6)};
        while (nanosleep (&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    int crash = rate > 0 && s_draw (seed, payload, attempt) < rate;
    if (crash && !crash_after)
        s_crash (crash_log, payload, attempt);
    char line[512];
    if (raw) {
        snprintf (line, sizeof line, "%s %ld %ld\n", payload, attempt, (long)getpid ());
        s_append (raw, line);
    }
    if (effect) {
        snprintf (line, sizeof line, "%s\n", payload);
        s_append (effect, line);
    }
    if (sink) {
        const char *key = s_env ("ZLANE_IDEMPOTENCY_KEY");
        if (!*key || strchr (key, '/')) {
            fprintf (stderr, "zlane-exp-handler: unusable idempotency key '%s'\n", key);
            return 65;
        }
        snprintf (line, sizeof line, "%s/%s", sink, key);
        int fd = open (line, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) {
            // the effect and its record are one step: the entry IS the effect
            char body[128];
            int n = snprintf (body, sizeof body, "%s %ld %ld\n", payload, attempt, (long)getpid ());
            if (write (fd, body, (size_t)n) != n)
                return 3;
            close (fd);
        } else if (errno != EEXIST) {
            fprintf (stderr, "zlane-exp-handler: sink %s: %s\n", line, strerror (errno));
            return 3;
        }
    }
    if (crash && crash_after)
        s_crash (crash_log, payload, attempt);
    int rc = 0;
    if (poison && strstr (payload, poison)) {
        fprintf (stderr, "poison payload: contains '%s'\n", poison);
        rc = 1;
    }
    if (log)
        s_log (log, "end", payload, rc);
    free (payload);
    return rc;
}
