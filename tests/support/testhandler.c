/*  zlane-testhandler: a scriptable job handler for integration tests, run by
    zlane-worker as its --exec command (payload on stdin, job in ZLANE_*).

    Order: read the payload; --record and --log's start line; --echo-env;
    --sleep (only on attempt N with --sleep-attempt N); then the first rule
    that applies decides the exit code: --ok-if-exists (0), --poison (1),
    --permanent-if (65), --throttle-ms (75, first attempt only),
    --fail-until-attempt (1), --fail-percent (1), else --exit (default 0);
    then --log's and --journal's end lines.
    Plain libc: it starts fast. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static void
s_usage (FILE *out)
{
    fprintf (out,
             "Usage: zlane-testhandler [OPTIONS]  (run by zlane-worker --exec)\n"
             "  --record FILE            append \"<ZLANE_JOB_ID> <ZLANE_ATTEMPT> <pid>\" to FILE\n"
             "  --record-payload         and \" <payload>\" on the same line (its first 200\n"
             "                           bytes, a byte other than a printable one as '?')\n"
             "  --log FILE               append \"start JOB ATTEMPT PID WALL_MS\" on start and\n"
             "                           \"end JOB ATTEMPT PID WALL_MS EXIT\" before exiting\n"
             "  --sleep MS               sleep before deciding the outcome\n"
             "  --sleep-attempt N        sleep only when ZLANE_ATTEMPT is N\n"
             "  --ok-if-exists FILE      exit 0 if FILE exists (before every other rule)\n"
             "  --exit N                 exit code when no other rule applies [0]\n"
             "  --fail-until-attempt N   exit 1 while ZLANE_ATTEMPT < N\n"
             "  --poison SUBSTR          exit 1 (message on stderr) if the payload has SUBSTR\n"
             "  --permanent-if SUBSTR    exit 65 if the payload has SUBSTR\n"
             "  --throttle-ms MS         on attempt 1 print retry-after=MSms, exit 75\n"
             "  --echo-env               print the environment to stderr\n"
             "  --fail-percent P         exit 1 (transient) in P %% of the runs, at random\n"
             "  --journal FILE           append \"start KEY PAYLOAD ATTEMPT\" on start and\n"
             "                           \"end KEY PAYLOAD ATTEMPT EXIT\" before exiting\n"
             "                           (KEY: ZLANE_ORDERING_KEY or -; PAYLOAD: its first\n"
             "                           200 bytes, for payloads without spaces)\n");
}

static long
s_number (const char *opt, const char *text)
{
    char *end;
    errno = 0;
    long v = strtol (text, &end, 10);
    if (errno || end == text || *end || v < 0) {
        fprintf (stderr, "zlane-testhandler: %s wants a number, got '%s'\n", opt, text);
        exit (2);
    }
    return v;
}

static char *
s_read_all (int fd, size_t *len_p)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc (cap + 1);
    if (!buf)
        abort ();
    for (;;) {
        if (len == cap) {
            cap *= 2;
            buf = realloc (buf, cap + 1);
            if (!buf)
                abort ();
        }
        ssize_t n = read (fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    *len_p = len;
    return buf;
}

static int
s_contains (const char *hay, size_t len, const char *needle)
{
    return memmem (hay, len, needle, strlen (needle)) != NULL;
}

static const char *
s_env (const char *name)
{
    const char *v = getenv (name);
    return v ? v : "";
}

static long long
s_wall_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// Append `line` to `path` in one O_APPEND write (concurrent handlers never
// mix lines); exits 3 if it cannot.
static void
s_append (const char *path, const char *line, int n)
{
    int fd = open (path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || write (fd, line, (size_t)n) != n) {
        fprintf (stderr, "zlane-testhandler: cannot record to %s: %s\n", path, strerror (errno));
        exit (3);
    }
    close (fd);
}

int
main (int argc, char **argv)
{
    enum {
        O_RECORD = 256,
        O_SLEEP,
        O_EXIT,
        O_FAIL_UNTIL,
        O_POISON,
        O_PERMANENT,
        O_THROTTLE,
        O_ECHO_ENV,
        O_LOG,
        O_SLEEP_ATTEMPT,
        O_OK_IF_EXISTS,
        O_FAIL_PERCENT,
        O_JOURNAL,
        O_RECORD_PAYLOAD,
        O_HELP
    };
    static const struct option opts[] = {{"record", required_argument, 0, O_RECORD},
                                         {"sleep", required_argument, 0, O_SLEEP},
                                         {"exit", required_argument, 0, O_EXIT},
                                         {"fail-until-attempt", required_argument, 0, O_FAIL_UNTIL},
                                         {"poison", required_argument, 0, O_POISON},
                                         {"permanent-if", required_argument, 0, O_PERMANENT},
                                         {"throttle-ms", required_argument, 0, O_THROTTLE},
                                         {"echo-env", no_argument, 0, O_ECHO_ENV},
                                         {"log", required_argument, 0, O_LOG},
                                         {"sleep-attempt", required_argument, 0, O_SLEEP_ATTEMPT},
                                         {"ok-if-exists", required_argument, 0, O_OK_IF_EXISTS},
                                         {"fail-percent", required_argument, 0, O_FAIL_PERCENT},
                                         {"journal", required_argument, 0, O_JOURNAL},
                                         {"record-payload", no_argument, 0, O_RECORD_PAYLOAD},
                                         {"help", no_argument, 0, O_HELP},
                                         {0, 0, 0, 0}};
    const char *record = NULL, *poison = NULL, *permanent = NULL, *log = NULL, *ok_file = NULL;
    const char *journal = NULL;
    long fail_percent = 0;
    long sleep_ms = 0, exit_code = 0, fail_until = 0, throttle_ms = -1, sleep_attempt = 0;
    int echo_env = 0, record_payload = 0, c;
    while ((c = getopt_long (argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_RECORD: record = optarg; break;
        case O_SLEEP: sleep_ms = s_number ("--sleep", optarg); break;
        case O_EXIT: exit_code = s_number ("--exit", optarg); break;
        case O_FAIL_UNTIL: fail_until = s_number ("--fail-until-attempt", optarg); break;
        case O_POISON: poison = optarg; break;
        case O_PERMANENT: permanent = optarg; break;
        case O_THROTTLE: throttle_ms = s_number ("--throttle-ms", optarg); break;
        case O_ECHO_ENV: echo_env = 1; break;
        case O_LOG: log = optarg; break;
        case O_SLEEP_ATTEMPT: sleep_attempt = s_number ("--sleep-attempt", optarg); break;
        case O_OK_IF_EXISTS: ok_file = optarg; break;
        case O_FAIL_PERCENT: fail_percent = s_number ("--fail-percent", optarg); break;
        case O_JOURNAL: journal = optarg; break;
        case O_RECORD_PAYLOAD: record_payload = 1; break;
        case 'h':
        case O_HELP: s_usage (stdout); return 0;
        default: s_usage (stderr); return 2;
        }
    }
    size_t len;
    char *payload = s_read_all (0, &len);
    long attempt = atol (s_env ("ZLANE_ATTEMPT"));

    if (record) {
        char line[512];
        int n = snprintf (line, 256, "%s %s %ld", s_env ("ZLANE_JOB_ID"), s_env ("ZLANE_ATTEMPT"),
                          (long)getpid ());
        if (n < 0 || n >= 256)
            n = 255;
        if (record_payload) {
            line[n++] = ' ';
            for (size_t i = 0; i < len && i < 200; i++)
                line[n++] = payload[i] >= 0x20 && payload[i] < 0x7f ? payload[i] : '?';
        }
        line[n++] = '\n';
        s_append (record, line, n);
    }
    if (log) {
        char line[256];
        int n = snprintf (line, sizeof line, "start %s %s %ld %lld\n", s_env ("ZLANE_JOB_ID"),
                          s_env ("ZLANE_ATTEMPT"), (long)getpid (), s_wall_ms ());
        s_append (log, line, n);
    }
    const char *okey = s_env ("ZLANE_ORDERING_KEY");
    if (!okey[0])
        okey = "-";
    int shown = len > 200 ? 200 : (int)len;
    if (journal) {
        char line[512];
        int n = snprintf (line, sizeof line, "start %s %.*s %ld\n", okey, shown, payload, attempt);
        s_append (journal, line, n);
    }
    if (echo_env)
        for (char **e = environ; *e; e++)
            fprintf (stderr, "%s\n", *e);
    if (sleep_ms > 0 && (sleep_attempt == 0 || attempt == sleep_attempt)) {
        struct timespec ts = {sleep_ms / 1000, (sleep_ms % 1000) * 1000000L};
        while (nanosleep (&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    int rc = (int)exit_code;
    struct stat st;
    if (ok_file && stat (ok_file, &st) == 0) {
        rc = 0;
    } else if (poison && s_contains (payload, len, poison)) {
        fprintf (stderr, "poison payload: contains '%s'\n", poison);
        rc = 1;
    } else if (permanent && s_contains (payload, len, permanent)) {
        fprintf (stderr, "bad input: payload contains '%s'\n", permanent);
        rc = 65;
    } else if (throttle_ms >= 0 && attempt <= 1) {
        fprintf (stderr, "retry-after=%ldms\n", throttle_ms);
        rc = 75;
    } else if (fail_until > 0 && attempt < fail_until) {
        fprintf (stderr, "failing attempt %ld until attempt %ld\n", attempt, fail_until);
        rc = 1;
    } else if (fail_percent > 0) {
        unsigned char r = 0;
        if (getrandom (&r, 1, 0) == 1 && (long)(r % 100) < fail_percent) {
            fprintf (stderr, "a random transient failure\n");
            rc = 1;
        }
    }
    if (journal) {
        char line[512];
        int n =
            snprintf (line, sizeof line, "end %s %.*s %ld %d\n", okey, shown, payload, attempt, rc);
        s_append (journal, line, n);
    }
    if (log) {
        char line[256];
        int n = snprintf (line, sizeof line, "end %s %s %ld %lld %d\n", s_env ("ZLANE_JOB_ID"),
                          s_env ("ZLANE_ATTEMPT"), (long)getpid (), s_wall_ms (), rc);
        s_append (log, line, n);
    }
    free (payload);
    return rc;
}
