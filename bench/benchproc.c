#include "benchproc.h"

#include "clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <limits.h>
#include <stdbool.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROCS 64

static pid_t s_pids[MAX_PROCS];
static int s_n_pids;
static char s_tmp[PATH_MAX];

// Signal the child's process group, or the child alone if it has none of
// its own (forked without exec).
static void
s_signal (pid_t pid, int sig)
{
    if (kill (-pid, sig) != 0)
        kill (pid, sig);
}
static char s_bindir[PATH_MAX];
static const char *s_program = "zlane-bench";

void
zl_benchproc_stop_all (int grace_ms)
{
    for (int i = 0; i < s_n_pids; i++)
        if (s_pids[i] > 0)
            s_signal (s_pids[i], grace_ms > 0 ? SIGTERM : SIGKILL);
    int64_t deadline = zl_clock_mono_ms () + grace_ms;
    for (int i = 0; i < s_n_pids; i++) {
        while (s_pids[i] > 0 && waitpid (s_pids[i], NULL, WNOHANG) == 0) {
            if (zl_clock_mono_ms () >= deadline) {
                s_signal (s_pids[i], SIGKILL);
                waitpid (s_pids[i], NULL, 0);
                break;
            }
            usleep (10000);
        }
        if (s_pids[i] > 0)
            kill (-s_pids[i], SIGKILL); // anything left in its group (if it has one)
    }
    s_n_pids = 0;
}

static void
s_cleanup (void)
{
    zl_benchproc_stop_all (0);
    if (s_tmp[0]) {
        char cmd[PATH_MAX + 16];
        snprintf (cmd, sizeof cmd, "rm -rf '%s'", s_tmp);
        if (system (cmd) != 0)
            fprintf (stderr, "%s: could not remove %s\n", s_program, s_tmp);
        s_tmp[0] = '\0';
    }
}

static void
s_on_signal (int sig)
{
    for (int i = 0; i < s_n_pids; i++)
        if (s_pids[i] > 0)
            s_signal (s_pids[i], SIGKILL);
    _exit (128 + sig);
}

void
zl_benchproc_init (const char *program, const char *prefix)
{
    s_program = program;
    ssize_t n = readlink ("/proc/self/exe", s_bindir, sizeof s_bindir - 1);
    if (n > 0) {
        s_bindir[n] = '\0';
        char *slash = strrchr (s_bindir, '/');
        if (slash)
            *slash = '\0';
    }
    snprintf (s_tmp, sizeof s_tmp, "/tmp/%s.XXXXXX", prefix);
    if (!mkdtemp (s_tmp)) {
        s_tmp[0] = '\0';
        zl_benchproc_die ("cannot make a temp dir");
    }
    atexit (s_cleanup);
    signal (SIGINT, s_on_signal);
    signal (SIGTERM, s_on_signal);
}

const char *
zl_benchproc_tmp (void)
{
    return s_tmp;
}

const char *
zl_benchproc_bindir (void)
{
    if (!s_bindir[0]) {
        ssize_t n = readlink ("/proc/self/exe", s_bindir, sizeof s_bindir - 1);
        if (n > 0) {
            s_bindir[n] = '\0';
            char *slash = strrchr (s_bindir, '/');
            if (slash)
                *slash = '\0';
        }
    }
    return s_bindir;
}

void
zl_benchproc_adopt (pid_t pid)
{
    if (pid > 0 && s_n_pids < MAX_PROCS)
        s_pids[s_n_pids++] = pid;
}

pid_t
zl_benchproc_spawn (char *const argv[], const char *log)
{
    pid_t pid = fork ();
    if (pid == 0) {
        setpgid (0, 0);
        if (!freopen (log, "a", stderr))
            _exit (127);
        execv (argv[0], argv);
        fprintf (stderr, "exec %s: %s\n", argv[0], strerror (errno));
        _exit (127);
    }
    if (pid > 0) {
        setpgid (pid, pid);
        zl_benchproc_adopt (pid);
    }
    return pid;
}

void
zl_benchproc_forget (void)
{
    s_n_pids = 0;
    s_tmp[0] = '\0';
}

int
zl_benchproc_count (void)
{
    return s_n_pids;
}

pid_t
zl_benchproc_pid (int i)
{
    return i >= 0 && i < s_n_pids ? s_pids[i] : -1;
}

void
zl_benchproc_die (const char *msg)
{
    fprintf (stderr, "%s: %s\n", s_program, msg);
    exit (1); // atexit: the cleanup
}

uint64_t
zl_benchproc_rss (pid_t pid, uint64_t *anon, uint64_t *file)
{
    char path[64], line[256];
    uint64_t rss = 0, a = 0, f = 0;
    snprintf (path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *fp = fopen (path, "r");
    if (fp) {
        while (fgets (line, sizeof line, fp)) {
            unsigned long long kb;
            if (sscanf (line, "VmRSS: %llu kB", &kb) == 1)
                rss = kb * 1024;
            else if (sscanf (line, "RssAnon: %llu kB", &kb) == 1)
                a = kb * 1024;
            else if (sscanf (line, "RssFile: %llu kB", &kb) == 1)
                f = kb * 1024;
        }
        fclose (fp);
    }
    if (anon)
        *anon = a;
    if (file)
        *file = f;
    return rss;
}

double
zl_benchproc_cpu_seconds (pid_t pid)
{
    char path[64];
    snprintf (path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen (path, "r");
    if (!f)
        return 0;
    unsigned long utime = 0, stime = 0;
    int rc =
        fscanf (f, "%*d %*s %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime);
    fclose (f);
    return rc == 2 ? (double)(utime + stime) / (double)sysconf (_SC_CLK_TCK) : 0;
}

static int
s_cmp_i64 (const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

void
zl_benchproc_sort_i64 (int64_t *v, size_t n)
{
    qsort (v, n, sizeof *v, s_cmp_i64);
}

double
zl_benchproc_pct_ms (const int64_t *v, size_t n, double p)
{
    if (!n)
        return 0;
    size_t r = (size_t)(p / 100.0 * (double)n + 0.999999);
    r = r < 1 ? 1 : r > n ? n : r;
    return (double)v[r - 1] / 1000.0;
}

void
zl_benchproc_sleep_until (int64_t due_us)
{
    static __thread bool slack_set;
    if (!slack_set) {
        prctl (PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
        slack_set = true;
    }
    struct timespec ts = {(time_t)(due_us / 1000000), (long)(due_us % 1000000) * 1000};
    while (clock_nanosleep (CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

void
zl_benchproc_wait_events (int fd, char ev, int count, int timeout_ms)
{
    int64_t deadline = zl_clock_mono_us () + (int64_t)timeout_ms * 1000;
    while (count > 0) {
        struct pollfd p = {fd, POLLIN, 0};
        int left = (int)((deadline - zl_clock_mono_us ()) / 1000);
        char c;
        if (left <= 0 || poll (&p, 1, left) <= 0)
            zl_benchproc_die ("timed out waiting for the consumers");
        if (read (fd, &c, 1) != 1)
            zl_benchproc_die ("the consumers exited early");
        if (c == ev)
            count--;
    }
}

int
zl_benchproc_connect (int port)
{
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons ((uint16_t)port),
                            .sin_addr.s_addr = htonl (INADDR_LOOPBACK)};
    if (fd < 0 || connect (fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close (fd);
        return -1;
    }
    int one = 1;
    setsockopt (fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

void
zl_benchproc_write_all (int fd, const void *p, size_t n)
{
    const char *at = p;
    while (n) {
        ssize_t w = send (fd, at, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            zl_benchproc_die ("a write to a peer failed: it is gone");
        at += w;
        n -= (size_t)w;
    }
}
