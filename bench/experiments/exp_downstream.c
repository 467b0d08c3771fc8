/*  zlane-exp-downstream: the rate-limited downstream service of the retry-storm
    experiment. A UDP server on 127.0.0.1 that admits `limit` requests per
    window and rejects the rest: by default a sliding window (never more than
    `limit` admitted in any --window-ms), or with --bucket a token bucket
    (`limit` per window on average, at most `limit` at once).

    A request is one datagram "ATTEMPT JOB_ID"; the answer is "A " (admitted)
    or "R " (rejected, retry later) followed by the request. Every request is counted in windows of
    --window-ms from the first one. On SIGTERM or SIGINT it writes a summary
    (key=value lines) to --out, the per-window series to --series, and exits.
    Single-threaded: one recvfrom/sendto per request. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    uint32_t requests, retries, admitted;
} window_t;

static volatile sig_atomic_t s_stop;

static void
s_on_signal (int sig)
{
    (void)sig;
    s_stop = 1;
}

static int64_t
s_mono_us (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void
s_usage (FILE *out)
{
    fprintf (out, "Usage: zlane-exp-downstream --port-file F --limit N [--window-ms W] [--bucket]\n"
                  "                            [--out FILE] [--series FILE]\n"
                  "  --limit N       requests admitted per window\n"
                  "  --window-ms W   the window, one 'simulated second' [1000]; requests are\n"
                  "                  also counted per window from the first one\n"
                  "  --bucket        a token bucket (rate N per window, size N) instead of\n"
                  "                  the sliding window\n");
}

int
main (int argc, char **argv)
{
    static const struct option opts[] = {{"port-file", required_argument, 0, 'p'},
                                         {"limit", required_argument, 0, 'n'},
                                         {"bucket", no_argument, 0, 'b'},
                                         {"window-ms", required_argument, 0, 'w'},
                                         {"out", required_argument, 0, 'o'},
                                         {"series", required_argument, 0, 's'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *port_file = NULL, *out_path = NULL, *series_path = NULL;
    double window_ms = 1000;
    int limit = 0, bucket = 0, c;
    while ((c = getopt_long (argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'p': port_file = optarg; break;
        case 'n': limit = atoi (optarg); break;
        case 'b': bucket = 1; break;
        case 'w': window_ms = atof (optarg); break;
        case 'o': out_path = optarg; break;
        case 's': series_path = optarg; break;
        case 'h': s_usage (stdout); return 0;
        default: s_usage (stderr); return 2;
        }
    }
    if (!port_file || limit <= 0 || window_ms <= 0) {
        s_usage (stderr);
        return 2;
    }
    int64_t window_us = (int64_t)(window_ms * 1000.0);
    double rate_per_us = (double)limit / (double)window_us;

    int fd = socket (AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int big = 4 << 20;
    setsockopt (fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    socklen_t alen = sizeof addr;
    if (fd < 0 || bind (fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
        getsockname (fd, (struct sockaddr *)&addr, &alen) != 0) {
        perror ("zlane-exp-downstream: bind");
        return 1;
    }
    char tmp[4096];
    snprintf (tmp, sizeof tmp, "%s.tmp", port_file);
    FILE *pf = fopen (tmp, "w");
    if (!pf || fprintf (pf, "%d\n", ntohs (addr.sin_port)) < 0 || fclose (pf) != 0 ||
        rename (tmp, port_file) != 0) {
        perror ("zlane-exp-downstream: port file");
        return 1;
    }
    struct sigaction sa = {.sa_handler = s_on_signal};
    sigaction (SIGTERM, &sa, NULL);
    sigaction (SIGINT, &sa, NULL);

    size_t n_windows = 0, cap_windows = 1024;
    window_t *w = calloc (cap_windows, sizeof *w);
    double tokens = limit;
    int64_t *admits = calloc ((size_t)limit, sizeof *admits); // ring: last `limit` admissions
    size_t oldest = 0, n_admits = 0;
    int64_t t0 = -1, last_us = 0, last_admit_us = 0;
    uint64_t requests = 0, admitted = 0, rejected = 0, bad = 0;
    while (!s_stop) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll (&p, 1, 100) <= 0)
            continue;
        char buf[128];
        struct sockaddr_in from;
        socklen_t flen = sizeof from;
        ssize_t n = recvfrom (fd, buf, sizeof buf - 1, 0, (struct sockaddr *)&from, &flen);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        unsigned attempt;
        uint64_t job;
        if (sscanf (buf, "%u %" SCNu64, &attempt, &job) != 2) {
            bad++;
            continue;
        }
        int64_t now = s_mono_us ();
        if (t0 < 0) {
            t0 = now;
            last_us = now;
        }
        int ok;
        if (bucket) {
            tokens += (double)(now - last_us) * rate_per_us;
            if (tokens > limit)
                tokens = limit;
            last_us = now;
            ok = tokens >= 1.0;
            if (ok)
                tokens -= 1.0;
        } else {
            // admitted unless `limit` admissions lie within the last window
            ok = n_admits < (size_t)limit || admits[oldest] <= now - window_us;
            if (ok) {
                if (n_admits < (size_t)limit)
                    admits[n_admits++] = now;
                else {
                    admits[oldest] = now;
                    oldest = (oldest + 1) % (size_t)limit;
                }
            }
        }
        size_t i = (size_t)((double)(now - t0) / (window_ms * 1000.0));
        while (i >= cap_windows) {
            w = realloc (w, 2 * cap_windows * sizeof *w);
            memset (w + cap_windows, 0, cap_windows * sizeof *w);
            cap_windows *= 2;
        }
        if (i + 1 > n_windows)
            n_windows = i + 1;
        w[i].requests++;
        w[i].retries += attempt > 1;
        requests++;
        if (ok) {
            w[i].admitted++;
            admitted++;
            last_admit_us = now;
        } else
            rejected++;
        // the answer echoes the request, so a late answer is never taken
        // for the answer to a newer request
        char reply[160];
        int rn = snprintf (reply, sizeof reply, "%c %s", ok ? 'A' : 'R', buf);
        sendto (fd, reply, (size_t)rn, 0, (struct sockaddr *)&from, flen);
    }
    uint32_t peak = 0, peak_retry = 0;
    size_t peak_at = 0, peak_retry_at = 0;
    for (size_t i = 0; i < n_windows; i++) {
        if (w[i].requests > peak) {
            peak = w[i].requests;
            peak_at = i;
        }
        if (w[i].retries > peak_retry) {
            peak_retry = w[i].retries;
            peak_retry_at = i;
        }
    }
    FILE *out = out_path ? fopen (out_path, "w") : stdout;
    if (!out)
        out = stdout;
    fprintf (out,
             "requests=%" PRIu64 "\nadmitted=%" PRIu64 "\nrejected=%" PRIu64 "\nbad=%" PRIu64
             "\npeak=%u\npeak_window=%zu\npeak_retry=%u\npeak_retry_window=%zu\n"
             "last_admit_ms=%.3f\nwindow_ms=%g\nlimit=%d\nlimiter=%s\n",
             requests, admitted, rejected, bad, peak, peak_at, peak_retry, peak_retry_at,
             t0 < 0 ? 0.0 : (double)(last_admit_us - t0) / 1000.0, window_ms, limit,
             bucket ? "bucket" : "sliding-window");
    if (out != stdout)
        fclose (out);
    if (series_path) {
        FILE *s = fopen (series_path, "w");
        if (s) {
            fprintf (s, "window,requests,retries,admitted\n");
            for (size_t i = 0; i < n_windows; i++)
                fprintf (s, "%zu,%u,%u,%u\n", i, w[i].requests, w[i].retries, w[i].admitted);
            fclose (s);
        }
    }
    free (w);
    free (admits);
    close (fd);
    return 0;
}
