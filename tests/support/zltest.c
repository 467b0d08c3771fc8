/*  zltest: the process-level harness for zlane's integration tests.

    Every process, broker, client and temp dir the harness creates is
    registered. zlt_cleanup (the cmocka teardown) SIGKILLs every live
    process group first, then destroys the rest last-in first-out. At exit
    and on a fatal signal only the async-signal-safe part runs: kill the
    groups (and, at exit, remove the temp dirs). Not thread-safe. */
#define _GNU_SOURCE
#include "zltest.h"

#include "clock.h"
#include "zl_alloc.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <czmq.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef ZLT_BUILD_BIN_DIR
#define ZLT_BUILD_BIN_DIR "."
#endif

#define MAX_PROCS 128
#define MAX_RES 256
#define MAX_DIRS 64
#define BROKER_START_MS 10000
#define STATS_POLL_MS 20
#define STATS_WAIT_MS 5000

struct _zlt_proc_t {
    pid_t pid;
    int pidfd; // -1 if pidfd_open is unavailable
    int slot;  // in s_live
    bool reaped;
    int status;
    char name[64];
};

struct _zlt_broker_t {
    zlt_proc_t *proc;
    const char *dir; // a registered temp dir
    char err_path[PATH_MAX];
    char endpoints[5][256];
    char **args; // the extra flags, kept for restarts (NULL-terminated)
};

struct _zlt_client_t {
    zsock_t *zsock;
    void *sock;
    int type;
    zl_codec_t *codec;
    zmq_msg_t last; // the last received body, alive until the next receive
    bool have_last;
    char topic[256];
    uint64_t next_request;
};

typedef enum { RES_PROC, RES_BROKER, RES_CLIENT } res_kind_t;

typedef struct {
    res_kind_t kind;
    void *obj;
} res_t;

// the process groups still alive: read by the signal handler
static volatile pid_t s_live[MAX_PROCS];
static res_t s_res[MAX_RES];
static size_t s_n_res;
static char *s_dirs[MAX_DIRS];
static size_t s_n_dirs;
static bool s_ready;
// the broker's four sockets, then its optional metrics page (--metrics)
static const char *s_endpoint_names[5] = {"frontend", "backend", "events", "admin", "metrics"};

// ---------------------------------------------------------------- registry
static void
s_kill_live (void)
{
    for (int i = 0; i < MAX_PROCS; i++) {
        pid_t pid = s_live[i];
        if (pid > 0) {
            kill (-pid, SIGKILL);
            kill (pid, SIGKILL);
        }
    }
}

static int
s_rm_entry (const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove (path);
    return 0;
}

static void
s_remove_dirs (void)
{
    bool keep = getenv ("ZLT_KEEP") != NULL;
    for (size_t i = 0; i < s_n_dirs; i++) {
        if (keep)
            fprintf (stderr, "zltest: keeping %s\n", s_dirs[i]);
        else
            nftw (s_dirs[i], s_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        free (s_dirs[i]);
    }
    s_n_dirs = 0;
}

static void
s_at_exit (void)
{
    s_kill_live ();
    for (int i = 0; i < MAX_PROCS; i++)
        if (s_live[i] > 0)
            waitpid (s_live[i], NULL, 0); // SIGKILLed: they go at once
    s_remove_dirs ();
}

static void
s_on_fatal_signal (int sig)
{
    s_kill_live ();
    for (int i = 0; i < MAX_PROCS; i++) // SIGKILLed: they go at once
        if (s_live[i] > 0)
            waitpid (s_live[i], NULL, 0);
    signal (sig, SIG_DFL);
    raise (sig);
}

static void
s_init (void)
{
    if (s_ready)
        return;
    s_ready = true;
    zsys_handler_set (NULL); // ours, not czmq's: children must die with us
    atexit (s_at_exit);
    struct sigaction sa;
    memset (&sa, 0, sizeof sa);
    sa.sa_handler = s_on_fatal_signal;
    sigemptyset (&sa.sa_mask);
    int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGABRT, SIGSEGV, SIGBUS};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction (sigs[i], &sa, NULL);
}

static void
s_register (res_kind_t kind, void *obj)
{
    s_init ();
    if (s_n_res == MAX_RES) {
        fprintf (stderr, "zltest: more than %d live resources\n", MAX_RES);
        abort ();
    }
    s_res[s_n_res++] = (res_t){kind, obj};
}

static void
s_unregister (void *obj)
{
    for (size_t i = s_n_res; i-- > 0;)
        if (s_res[i].obj == obj) {
            memmove (&s_res[i], &s_res[i + 1], (s_n_res - i - 1) * sizeof (res_t));
            s_n_res--;
            return;
        }
}

void
zlt_cleanup (void)
{
    s_kill_live ();
    while (s_n_res) {
        res_t r = s_res[s_n_res - 1];
        switch (r.kind) {
        case RES_PROC: {
            zlt_proc_t *p = r.obj;
            zlt_proc_destroy (&p);
            break;
        }
        case RES_BROKER: {
            zlt_broker_t *b = r.obj;
            zlt_broker_destroy (&b);
            break;
        }
        case RES_CLIENT: {
            zlt_client_t *c = r.obj;
            zlt_client_destroy (&c);
            break;
        }
        }
    }
    s_remove_dirs ();
}

int
zlt_teardown (void **state)
{
    (void)state;
    zlt_cleanup ();
    return 0;
}

int64_t
zlt_now_ms (void)
{
    return zl_clock_mono_ms ();
}

int64_t
zlt_wall_ms (void)
{
    return zl_clock_wall_ms ();
}

// ---------------------------------------------------------------- files
const char *
zlt_bin_dir (void)
{
    static char dir[PATH_MAX];
    if (dir[0])
        return dir;
    const char *env = getenv ("ZLANE_BIN_DIR");
    if (env && env[0]) {
        snprintf (dir, sizeof dir, "%s", env);
        return dir;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink ("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char probe[PATH_MAX + 32];
        snprintf (probe, sizeof probe, "%s/zlane-broker", dirname (exe));
        if (zlt_is_executable (probe)) {
            snprintf (dir, sizeof dir, "%s", exe); // dirname() cut exe in place
            return dir;
        }
    }
    snprintf (dir, sizeof dir, "%s", ZLT_BUILD_BIN_DIR);
    return dir;
}

char *
zlt_bin_path (const char *name)
{
    const char *dir = zlt_bin_dir ();
    size_t len = strlen (dir) + strlen (name) + 2;
    char *path = zl_malloc (len);
    snprintf (path, len, "%s/%s", dir, name);
    return path;
}

bool
zlt_is_executable (const char *path)
{
    return access (path, X_OK) == 0;
}

char *
zlt_bin (const char *name)
{
    char *path = zlt_bin_path (name);
    if (!zlt_is_executable (path)) {
        free (path);
        fail_msg ("zltest: %s is not built (looked in %s)", name, zlt_bin_dir ());
    }
    return path;
}

char *
zlt_path (const char *dir, const char *name)
{
    size_t len = strlen (dir) + strlen (name) + 2;
    char *path = zl_malloc (len);
    snprintf (path, len, "%s/%s", dir, name);
    return path;
}

const char *
zlt_tmpdir (void)
{
    s_init ();
    if (s_n_dirs == MAX_DIRS)
        return NULL;
    const char *base = getenv ("TMPDIR");
    if (!base || !base[0])
        base = "/tmp";
    char path[PATH_MAX];
    snprintf (path, sizeof path, "%s/zltest-XXXXXX", base);
    if (!mkdtemp (path)) {
        fprintf (stderr, "zltest: mkdtemp %s: %s\n", path, strerror (errno));
        return NULL;
    }
    s_dirs[s_n_dirs++] = zl_strdup (path);
    return s_dirs[s_n_dirs - 1];
}

char *
zlt_read_file (const char *path, size_t *len_p)
{
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = zl_malloc (cap + 1);
    for (;;) {
        if (len == cap) {
            cap *= 2;
            buf = zl_realloc (buf, cap + 1);
        }
        ssize_t n = read (fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            free (buf);
            close (fd);
            return NULL;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close (fd);
    buf[len] = '\0';
    if (len_p)
        *len_p = len;
    return buf;
}

int
zlt_write_file (const char *path, const void *data, size_t len)
{
    int fd = open (path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    const char *p = data;
    while (len) {
        ssize_t n = write (fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            close (fd);
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return close (fd);
}

void
zlt_dump_file (const char *title, const char *path, size_t max_bytes)
{
    size_t len;
    char *text = zlt_read_file (path, &len);
    if (!text) {
        fprintf (stderr, "---- %s (%s): unreadable\n", title, path);
        return;
    }
    const char *from = len > max_bytes ? text + len - max_bytes : text;
    fprintf (stderr, "---- %s (%s)%s\n%s%s---- end of %s\n", title, path,
             len > max_bytes ? " [tail]" : "", from, len && text[len - 1] != '\n' ? "\n" : "",
             title);
    free (text);
}

int
zlt_wait_file (const char *path, zlt_file_ready_fn *ready, const void *arg, int timeout_ms)
{
    int64_t deadline = zlt_now_ms () + timeout_ms;
    // the watch is set before the first look, so no write is missed
    char *dir = zl_strdup (path);
    int ino = inotify_init1 (IN_CLOEXEC | IN_NONBLOCK);
    if (ino < 0 || inotify_add_watch (ino, dirname (dir),
                                      IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE | IN_MOVED_TO) < 0) {
        int err = errno;
        if (ino >= 0)
            close (ino);
        free (dir);
        fail_msg ("zltest: cannot watch the directory of %s: %s", path, strerror (err));
    }
    free (dir);
    int rc = -1;
    for (;;) {
        char *text = zlt_read_file (path, NULL);
        bool hit = text && ready (text, arg);
        free (text);
        if (hit) {
            rc = 0;
            break;
        }
        int64_t left = deadline - zlt_now_ms ();
        if (left <= 0)
            break;
        // and a look at least every second, whatever the events say
        struct pollfd pfd = {ino, POLLIN, 0};
        poll (&pfd, 1, left < 1000 ? (int)left : 1000);
        char buf[4096];
        while (read (ino, buf, sizeof buf) > 0)
            ;
    }
    close (ino);
    return rc;
}

static bool
s_has_needle (const char *text, const void *needle)
{
    return strstr (text, needle) != NULL;
}

int
zlt_wait_file_has (const char *path, const char *needle, int timeout_ms)
{
    return zlt_wait_file (path, s_has_needle, needle, timeout_ms);
}

// ---------------------------------------------------------------- processes
static int
s_open_or_null (const char *path, int flags)
{
    return open (path ? path : "/dev/null", flags | O_CLOEXEC, 0644);
}

static void
s_close (int *fd)
{
    if (*fd >= 0)
        close (*fd);
    *fd = -1;
}

// In the child, between fork and exec: async-signal-safe calls only.
static void
s_child (const char *const argv[], int in, int out, int err, int report, pid_t parent)
{
    setpgid (0, 0);
    prctl (PR_SET_PDEATHSIG, SIGKILL);
    if (getppid () != parent)
        _exit (127); // the test died before we armed PDEATHSIG
    sigset_t none;
    sigemptyset (&none);
    sigprocmask (SIG_SETMASK, &none, NULL);
    signal (SIGPIPE, SIG_DFL);
    if (dup2 (in, 0) < 0 || dup2 (out, 1) < 0 || dup2 (err, 2) < 0) {
        int e = errno;
        (void)!write (report, &e, sizeof e);
        _exit (127);
    }
    // nothing else of the test's (sockets, pidfds) leaks into the child
    syscall (SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */);
    execv (argv[0], (char *const *)argv);
    int e = errno;
    (void)!write (report, &e, sizeof e);
    _exit (127);
}

zlt_proc_t *
zlt_spawn (const char *const argv[], const char *in_path, const char *out_path,
           const char *err_path)
{
    s_init ();
    int slot = -1;
    for (int i = 0; i < MAX_PROCS && slot < 0; i++)
        if (s_live[i] == 0)
            slot = i;
    if (slot < 0) {
        fprintf (stderr, "zltest: more than %d live processes\n", MAX_PROCS);
        return NULL;
    }
    int in = s_open_or_null (in_path, O_RDONLY);
    int out = s_open_or_null (out_path, O_WRONLY | O_CREAT | O_APPEND);
    int err = s_open_or_null (err_path, O_WRONLY | O_CREAT | O_APPEND);
    int report[2] = {-1, -1};
    if (in < 0 || out < 0 || err < 0 || pipe2 (report, O_CLOEXEC) != 0) {
        fprintf (stderr, "zltest: cannot spawn %s: %s\n", argv[0], strerror (errno));
        s_close (&in), s_close (&out), s_close (&err);
        return NULL;
    }
    pid_t parent = getpid ();
    pid_t pid = fork ();
    if (pid == 0)
        s_child (argv, in, out, err, report[1], parent);
    s_close (&in), s_close (&out), s_close (&err), s_close (&report[1]);
    if (pid < 0) {
        fprintf (stderr, "zltest: fork: %s\n", strerror (errno));
        s_close (&report[0]);
        return NULL;
    }
    setpgid (pid, pid); // also here, so the group exists before we return
    s_live[slot] = pid;
    zlt_proc_t *self = ZL_NEW (zlt_proc_t);
    self->pid = pid;
    self->slot = slot;
    self->pidfd = (int)syscall (SYS_pidfd_open, pid, 0);
    if (self->pidfd >= 0)
        fcntl (self->pidfd, F_SETFD, FD_CLOEXEC);
    const char *base = strrchr (argv[0], '/');
    snprintf (self->name, sizeof self->name, "%s", base ? base + 1 : argv[0]);
    s_register (RES_PROC, self);
    // the report pipe closes on exec (nothing read) or carries exec's errno
    int exec_errno = 0;
    ssize_t n;
    do
        n = read (report[0], &exec_errno, sizeof exec_errno);
    while (n < 0 && errno == EINTR);
    s_close (&report[0]);
    if (n > 0) {
        fprintf (stderr, "zltest: cannot run %s: %s\n", argv[0], strerror (exec_errno));
        zlt_proc_destroy (&self);
        return NULL;
    }
    return self;
}

pid_t
zlt_proc_pid (zlt_proc_t *self)
{
    return self->pid;
}

static bool
s_reap (zlt_proc_t *self, int flags)
{
    if (self->reaped)
        return true;
    // peek first: while the exited leader is a zombie its id cannot be
    // reused, so killing what it left in its group cannot hit a stranger
    siginfo_t info;
    memset (&info, 0, sizeof info);
    int rc0;
    do
        rc0 = waitid (P_PID, (id_t)self->pid, &info, WEXITED | WNOWAIT | flags);
    while (rc0 < 0 && errno == EINTR);
    if (rc0 == 0 && info.si_pid == self->pid)
        kill (-self->pid, SIGKILL);
    int status;
    pid_t rc;
    do
        rc = waitpid (self->pid, &status, flags);
    while (rc < 0 && errno == EINTR);
    if (rc == self->pid || (rc < 0 && errno == ECHILD)) {
        self->reaped = true;
        self->status = rc == self->pid ? status : 0;
        s_live[self->slot] = 0;
    }
    return self->reaped;
}

int
zlt_proc_wait (zlt_proc_t *self, int timeout_ms)
{
    int64_t deadline = zlt_now_ms () + timeout_ms;
    while (!s_reap (self, WNOHANG)) {
        int64_t left = deadline - zlt_now_ms ();
        if (left <= 0)
            return -1;
        if (self->pidfd >= 0) {
            struct pollfd pfd = {self->pidfd, POLLIN, 0};
            poll (&pfd, 1, (int)left);
        } else { // no pidfd: step in short waits, still bounded
            struct timespec ts = {0, (left < 2 ? left : 2) * 1000000L};
            nanosleep (&ts, NULL);
        }
    }
    return 0;
}

int
zlt_proc_exit_code (zlt_proc_t *self)
{
    if (!self->reaped)
        return -1;
    if (WIFEXITED (self->status))
        return WEXITSTATUS (self->status);
    if (WIFSIGNALED (self->status))
        return 128 + WTERMSIG (self->status);
    return -1;
}

int
zlt_proc_signal (zlt_proc_t *self, int sig)
{
    if (self->reaped)
        return -1;
    return kill (-self->pid, sig) == 0 || kill (self->pid, sig) == 0 ? 0 : -1;
}

void
zlt_proc_destroy (zlt_proc_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zlt_proc_t *self = *self_p;
    if (!self->reaped) { // (reaping killed what it left in its group)
        kill (-self->pid, SIGKILL);
        kill (self->pid, SIGKILL);
        if (zlt_proc_wait (self, 5000) != 0) {
            fprintf (stderr, "zltest: %s (pid %d) survives SIGKILL; waiting\n", self->name,
                     (int)self->pid);
            s_reap (self, 0);
        }
    }
    if (self->pidfd >= 0)
        close (self->pidfd);
    s_unregister (self);
    free (self);
    *self_p = NULL;
}

// Where a process that hangs is stuck: every thread's stack, by gdb (when
// the machine has it), on stderr, so that a hang in CI can be read later.
static void
s_print_stacks (pid_t pid)
{
    char cmd[256];
    snprintf (cmd, sizeof cmd,
              "command -v gdb >/dev/null && timeout -s KILL 30 gdb -q -batch -p %d "
              "-ex 'thread apply all bt' </dev/null 2>/dev/null | grep -E '^(Thread|#)' >&2",
              (int)pid);
    if (system (cmd) == -1)
        fprintf (stderr, "zltest: cannot run gdb\n");
}

int
zlt_run (const char *const argv[], const char *in_path, const char *out_path, const char *err_path,
         int timeout_ms)
{
    zlt_proc_t *p = zlt_spawn (argv, in_path, out_path, err_path);
    if (!p)
        return -1;
    int code = -1;
    if (zlt_proc_wait (p, timeout_ms) == 0)
        code = zlt_proc_exit_code (p);
    else {
        fprintf (stderr, "zltest: %s did not finish within %d ms; its threads' stacks:\n", p->name,
                 timeout_ms);
        s_print_stacks (p->pid);
        fprintf (stderr, "zltest: %s killed\n", p->name);
    }
    zlt_proc_destroy (&p);
    return code;
}

int
zlt_run_program (const char *dir, const char *prog, const char *const *args, const char *in_path,
                 char **out, char **err, int timeout_ms)
{
    static int runs; // a file per run
    char name[64];
    snprintf (name, sizeof name, "run%d.out", ++runs);
    char *out_path = zlt_path (dir, name);
    snprintf (name, sizeof name, "run%d.err", runs);
    char *err_path = zlt_path (dir, name);
    char *bin = zlt_bin (prog);
    const char *argv[32] = {bin};
    size_t n = 1;
    for (; args[n - 1] && n < 31; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    int rc = zlt_run (argv, in_path, out_path, err_path, timeout_ms);
    if (out)
        *out = zlt_read_file (out_path, NULL);
    if (err)
        *err = zlt_read_file (err_path, NULL);
    if (rc < 0 || (rc != 0 && !err))
        zlt_dump_file (prog, err_path, 2000);
    free (bin);
    free (out_path);
    free (err_path);
    return rc;
}

// ---------------------------------------------------------------- broker
// Parse the ports file; returns 0 once all four endpoints are there.
static int
s_read_ports (zlt_broker_t *self, const char *path)
{
    char *text = zlt_read_file (path, NULL);
    if (!text)
        return -1;
    int found = 0;
    char *save = NULL;
    for (char *line = strtok_r (text, "\n", &save); line; line = strtok_r (NULL, "\n", &save)) {
        char *eq = strchr (line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        for (int i = 0; i < 5; i++)
            if (strcmp (line, s_endpoint_names[i]) == 0 && eq[1]) {
                snprintf (self->endpoints[i], sizeof self->endpoints[i], "%s", eq + 1);
                found |= 1 << i;
            }
    }
    free (text);
    return (found & 0xf) == 0xf ? 0 : -1;
}

// True if `path` has text past byte `from` that contains `needle`.
static bool
s_file_says (const char *path, size_t from, const char *needle)
{
    size_t len;
    char *text = zlt_read_file (path, &len);
    bool found = text && len > from && strstr (text + from, needle) != NULL;
    free (text);
    return found;
}

static size_t
s_file_size (const char *path)
{
    struct stat st;
    return stat (path, &st) == 0 ? (size_t)st.st_size : 0;
}

// Launch one broker process: on the endpoints it bound before if `again`,
// else on ephemeral ports; wait for its ports file until `deadline`. Returns
// 0 once it is up, -1 if it exited or timed out (`*bind_failed` set if its
// stderr says it could not bind). self->proc is the process either way.
static int
s_launch (zlt_broker_t *self, bool again, int64_t deadline, bool *bind_failed)
{
    *bind_failed = false;
    char *bin = zlt_bin_path ("zlane-broker");
    char ports[PATH_MAX], data[PATH_MAX];
    snprintf (ports, sizeof ports, "%s/ports", self->dir);
    snprintf (data, sizeof data, "%s/data", self->dir);
    unlink (ports); // a restart must not read the last run's file
    const char *argv[128];
    size_t n = 0;
    argv[n++] = bin;
    for (int i = 0; i < 4; i++) {
        static const char *const flags[4] = {"--frontend", "--backend", "--events", "--admin"};
        argv[n++] = flags[i];
        argv[n++] = again ? self->endpoints[i] : "tcp://127.0.0.1:*";
    }
    argv[n++] = "--ports-file";
    argv[n++] = ports;
    bool store = false; // a --store among the flags replaces --data
    for (size_t i = 0; self->args[i]; i++)
        store |= !strcmp (self->args[i], "--store");
    if (!store) {
        argv[n++] = "--data";
        argv[n++] = data;
    }
    for (size_t i = 0; self->args[i] && n < 127; i++)
        argv[n++] = self->args[i];
    argv[n] = NULL;

    size_t err_from = s_file_size (self->err_path);
    // watch the dir before the broker starts: the rename cannot be missed
    int ino = inotify_init1 (IN_CLOEXEC | IN_NONBLOCK);
    if (ino >= 0 && inotify_add_watch (ino, self->dir, IN_MOVED_TO | IN_CLOSE_WRITE) < 0)
        s_close (&ino);
    self->proc = zlt_spawn (argv, NULL, NULL, self->err_path);
    free (bin);
    // registered after its process: cleanup (last in, first out) destroys
    // the broker, and with it the process, before anything else of it
    s_unregister (self);
    s_register (RES_BROKER, self);
    bool up = false;
    while (self->proc && !(up = s_read_ports (self, ports) == 0)) {
        if (s_reap (self->proc, WNOHANG)) {
            fprintf (stderr, "zltest: zlane-broker exited (code %d) before writing %s\n",
                     zlt_proc_exit_code (self->proc), ports);
            *bind_failed = s_file_says (self->err_path, err_from, "cannot bind");
            break;
        }
        int64_t left = deadline - zlt_now_ms ();
        if (left <= 0) {
            fprintf (stderr, "zltest: zlane-broker wrote no ports file in time\n");
            break;
        }
        struct pollfd pfds[2] = {{ino, POLLIN, 0}, {self->proc->pidfd, POLLIN, 0}};
        if (ino >= 0 && self->proc->pidfd >= 0)
            poll (pfds, 2, (int)left);
        else {
            struct timespec ts = {0, 5 * 1000000L};
            nanosleep (&ts, NULL);
        }
        char buf[4096];
        while (ino >= 0 && read (ino, buf, sizeof buf) > 0)
            ;
    }
    s_close (&ino);
    return up ? 0 : -1;
}

zlt_broker_t *
zlt_broker_start (const char *const args[])
{
    static const char *const default_args[] = {"--lane", "a", "--lane", "b", NULL};
    if (!args)
        args = default_args;
    const char *dir = zlt_tmpdir ();
    if (!dir)
        return NULL;
    zlt_broker_t *self = ZL_NEW (zlt_broker_t);
    self->dir = dir;
    snprintf (self->err_path, sizeof self->err_path, "%s/broker.err", dir);
    size_t n_args = 0;
    while (args[n_args])
        n_args++;
    self->args = zl_malloc ((n_args + 3) * sizeof (char *));
    for (size_t i = 0; i < n_args; i++)
        self->args[i] = zl_strdup (args[i]);
    // ZLANE_WIRE_DUMP_DIR (set by CTest for the integration tests): every
    // frame the broker sends is kept there, for decoders in other languages
    const char *dump = getenv ("ZLANE_WIRE_DUMP_DIR");
    bool dumps = false; // the test names its own wire_dump
    for (size_t i = 0; i + 1 < n_args; i++)
        dumps |= !strcmp (args[i], "--set") && !strncmp (args[i + 1], "wire_dump=", 10);
    if (dump && *dump && !dumps) {
        static unsigned brokers;
        char set[4096];
        snprintf (set, sizeof set, "wire_dump=%s/broker-%d-%u.wire", dump, (int)getpid (),
                  brokers++);
        self->args[n_args++] = zl_strdup ("--set");
        self->args[n_args++] = zl_strdup (set);
    }
    self->args[n_args] = NULL;
    bool bind_failed;
    if (s_launch (self, false, zlt_now_ms () + BROKER_START_MS, &bind_failed) != 0) {
        zlt_dump_file ("zlane-broker stderr", self->err_path, 4000);
        zlt_broker_destroy (&self);
    }
    return self;
}

int
zlt_broker_kill (zlt_broker_t *self)
{
    if (!self->proc || zlt_proc_signal (self->proc, SIGKILL) != 0)
        return -1;
    if (zlt_proc_wait (self->proc, 5000) != 0) {
        fprintf (stderr, "zltest: zlane-broker survives SIGKILL for 5 s\n");
        return -1;
    }
    return 0;
}

int
zlt_broker_restart (zlt_broker_t *self, int timeout_ms)
{
    int64_t deadline = zlt_now_ms () + timeout_ms;
    zlt_proc_destroy (&self->proc); // SIGKILLs it if it still runs
    for (;;) {
        bool bind_failed;
        if (s_launch (self, true, deadline, &bind_failed) == 0)
            return 0;
        if (!bind_failed || zlt_now_ms () >= deadline)
            break;
        // a port of the killed broker is not free yet: try again shortly
        zlt_proc_destroy (&self->proc);
        poll (NULL, 0, 50);
    }
    zlt_dump_file ("zlane-broker stderr", self->err_path, 4000);
    return -1;
}

const char *
zlt_broker_endpoint (zlt_broker_t *self, const char *which)
{
    for (int i = 0; i < 5; i++)
        if (strcmp (which, s_endpoint_names[i]) == 0)
            return self->endpoints[i][0] ? self->endpoints[i] : NULL;
    return NULL;
}

const char *
zlt_broker_dir (zlt_broker_t *self)
{
    return self->dir;
}

zlt_proc_t *
zlt_broker_proc (zlt_broker_t *self)
{
    return self->proc;
}

void
zlt_broker_dump (zlt_broker_t *self, size_t max_bytes)
{
    zlt_dump_file ("zlane-broker stderr", self->err_path, max_bytes);
}

int
zlt_broker_stop (zlt_broker_t *self, int timeout_ms)
{
    if (!self->proc)
        return -1;
    zlt_proc_signal (self->proc, SIGTERM);
    if (zlt_proc_wait (self->proc, timeout_ms) != 0) {
        fprintf (stderr, "zltest: zlane-broker ignored SIGTERM for %d ms; killing\n", timeout_ms);
        zlt_proc_destroy (&self->proc);
        return -1;
    }
    return zlt_proc_exit_code (self->proc);
}

void
zlt_broker_destroy (zlt_broker_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zlt_broker_t *self = *self_p;
    zlt_proc_destroy (&self->proc);
    for (size_t i = 0; self->args && self->args[i]; i++)
        free (self->args[i]);
    free (self->args);
    s_unregister (self);
    free (self);
    *self_p = NULL;
}

// ---------------------------------------------------------------- clients
zlt_client_t *
zlt_client_new (int type, const char *endpoint)
{
    s_init ();
    zlt_client_t *self = ZL_NEW (zlt_client_t);
    self->type = type;
    self->zsock = zsock_new (type);
    self->sock = zsock_resolve (self->zsock);
    int linger = 0;
    zmq_setsockopt (self->sock, ZMQ_LINGER, &linger, sizeof linger);
    self->codec = zl_codec_new ();
    s_register (RES_CLIENT, self);
    if (zmq_connect (self->sock, endpoint) != 0) {
        fprintf (stderr, "zltest: connect %s: %s\n", endpoint, zmq_strerror (errno));
        zlt_client_destroy (&self);
    }
    return self;
}

void
zlt_client_destroy (zlt_client_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zlt_client_t *self = *self_p;
    if (self->have_last)
        zmq_msg_close (&self->last);
    zsock_destroy (&self->zsock);
    zl_codec_destroy (&self->codec);
    s_unregister (self);
    free (self);
    *self_p = NULL;
}

void *
zlt_client_sock (zlt_client_t *self)
{
    return self->sock;
}

zl_codec_t *
zlt_client_codec (zlt_client_t *self)
{
    return self->codec;
}

void
zlt_client_subscribe (zlt_client_t *self, const char *prefix)
{
    zmq_setsockopt (self->sock, ZMQ_SUBSCRIBE, prefix, strlen (prefix));
}

int
zlt_client_send (zlt_client_t *self, const zl_msg_t *msg)
{
    size_t size;
    const void *data = zl_codec_encode (self->codec, msg, &size);
    if (!data)
        return -1;
    return zlt_client_send_raw (self, data, size, false);
}

int
zlt_client_send_raw (zlt_client_t *self, const void *data, size_t size, bool more)
{
    int rc;
    do
        rc = zmq_send (self->sock, data, size, more ? ZMQ_SNDMORE : 0);
    while (rc < 0 && errno == EINTR);
    return rc < 0 ? -1 : 0;
}

// Wait for input on the socket; returns true if a message is waiting.
static bool
s_wait_input (void *sock, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - zlt_now_ms ();
        if (left < 0)
            left = 0;
        zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
        int rc = zmq_poll (&item, 1, (long)left);
        if (rc > 0)
            return true;
        if (rc == 0 || errno != EINTR || left == 0)
            return false;
    }
}

// Receive one frame without waiting; returns its size or -1.
static int
s_recv_frame (void *sock, zmq_msg_t *msg)
{
    zmq_msg_init (msg);
    if (zmq_msg_recv (msg, sock, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close (msg);
        return -1;
    }
    return (int)zmq_msg_size (msg);
}

int
zlt_client_recv (zlt_client_t *self, zl_msg_t *out, int timeout_ms)
{
    int64_t deadline = zlt_now_ms () + timeout_ms;
    if (self->have_last) {
        zmq_msg_close (&self->last);
        self->have_last = false;
    }
    memset (out, 0, sizeof *out);
    if (!s_wait_input (self->sock, deadline))
        return -1;
    if (s_recv_frame (self->sock, &self->last) < 0)
        return -1;
    self->have_last = true;
    if (self->type == ZMQ_SUB) { // topic first, then the envelope
        size_t len = zmq_msg_size (&self->last);
        if (len >= sizeof self->topic)
            len = sizeof self->topic - 1;
        memcpy (self->topic, zmq_msg_data (&self->last), len);
        self->topic[len] = '\0';
        bool more = zmq_msg_more (&self->last);
        zmq_msg_close (&self->last);
        self->have_last = false;
        if (!more || s_recv_frame (self->sock, &self->last) < 0)
            return -2;
        self->have_last = true;
    }
    if (zmq_msg_more (&self->last)) { // one frame per message: drop the rest, refuse
        bool more = true;
        while (more) {
            zmq_msg_t rest;
            if (s_recv_frame (self->sock, &rest) < 0)
                break;
            more = zmq_msg_more (&rest);
            zmq_msg_close (&rest);
        }
        return -2;
    }
    zl_decode_rc_t rc =
        zl_codec_decode (self->codec, zmq_msg_data (&self->last), zmq_msg_size (&self->last), out);
    return rc == ZL_DECODE_OK ? 0 : -2;
}

int
zlt_client_expect (zlt_client_t *self, zl_msg_kind_t kind, zl_msg_t *out, int timeout_ms)
{
    int64_t deadline = zlt_now_ms () + timeout_ms;
    for (;;) {
        int64_t left = deadline - zlt_now_ms ();
        int rc = zlt_client_recv (self, out, left > 0 ? (int)left : 0);
        if (rc == -1)
            return -1;
        if (rc == 0 && (out->kind == kind || out->kind == ZL_MSG_ERROR))
            return 0;
        if (rc == -2)
            fprintf (stderr, "zltest: skipping an undecodable frame\n");
        else if (out->kind != ZL_MSG_HEARTBEAT && out->kind != ZL_MSG_CREDIT)
            fprintf (stderr, "zltest: expected %s, skipping %s\n", zl_msg_kind_name (kind),
                     zl_msg_kind_name (out->kind));
    }
}

uint64_t
zlt_client_hello (zlt_client_t *self, const char *name, int timeout_ms)
{
    zl_msg_t m = {.kind = ZL_MSG_HELLO};
    m.u.hello.client = name;
    if (zlt_client_send (self, &m) != 0)
        return 0;
    int64_t deadline = zlt_now_ms () + timeout_ms;
    for (;;) {
        int64_t left = deadline - zlt_now_ms ();
        int rc = zlt_client_recv (self, &m, left > 0 ? (int)left : 0);
        if (rc == -1)
            return 0;
        if (rc == 0 && m.kind == ZL_MSG_CREDIT)
            return m.u.credit.limit;
        if (rc == 0 && m.kind == ZL_MSG_ERROR) {
            fprintf (stderr, "zltest: Hello refused: %s: %s\n", zl_error_code_name (m.u.error.code),
                     m.u.error.message);
            return 0;
        }
    }
}

const char *
zlt_client_topic (zlt_client_t *self)
{
    return self->topic;
}

// ---------------------------------------------------------------- admin stats
int
zlt_stats (zlt_client_t *admin, zl_stats_t *out, int timeout_ms)
{
    int64_t deadline = zlt_now_ms () + timeout_ms;
    zl_msg_t req = {.kind = ZL_MSG_ADMIN_REQUEST};
    req.u.admin_request.request_id = ++admin->next_request;
    req.u.admin_request.op = ZL_ADMIN_STATS;
    if (zlt_client_send (admin, &req) != 0)
        return -1;
    for (;;) {
        int64_t left = deadline - zlt_now_ms ();
        zl_msg_t reply;
        if (zlt_client_expect (admin, ZL_MSG_ADMIN_REPLY, &reply, left > 0 ? (int)left : 0) != 0)
            return -1;
        if (reply.kind == ZL_MSG_ERROR) {
            fprintf (stderr, "zltest: stats refused: %s: %s\n",
                     zl_error_code_name (reply.u.error.code), reply.u.error.message);
            return -1;
        }
        const zl_admin_reply_t *r = &reply.u.admin_reply;
        if (r->request_id != admin->next_request)
            continue; // the late answer to a request that timed out
        if (!r->ok || r->result != ZL_ADMIN_RESULT_STATS) {
            fprintf (stderr, "zltest: stats refused: %s\n", r->error ? r->error : "");
            return -1;
        }
        *out = r->stats;
        return 0;
    }
}

int
zlt_stats_counter (const zl_stats_t *stats, const char *name, uint64_t *value)
{
    for (size_t i = 0; i < stats->n_counters; i++)
        if (strcmp (stats->counters[i].name, name) == 0) {
            *value = stats->counters[i].value;
            return 0;
        }
    return -1;
}

const zl_group_stats_t *
zlt_stats_group (const zl_stats_t *stats, const char *lane, const char *tenant)
{
    bool any_lane = !lane || !lane[0], any_tenant = !tenant || !tenant[0];
    const zl_group_stats_t *list = stats->groups;
    size_t n = stats->n_groups;
    if (any_lane && any_tenant)
        return NULL;
    if (any_tenant)
        list = stats->lanes, n = stats->n_lanes;
    else if (any_lane)
        list = stats->tenants, n = stats->n_tenants;
    for (size_t i = 0; i < n; i++)
        if ((any_lane || strcmp (list[i].lane, lane) == 0) &&
            (any_tenant || strcmp (list[i].tenant, tenant) == 0))
            return &list[i];
    return NULL;
}

uint64_t
zlt_counter (zlt_client_t *admin, const char *name)
{
    zl_stats_t st;
    uint64_t value = 0;
    if (zlt_stats (admin, &st, STATS_WAIT_MS) != 0)
        fail_msg ("zltest: no stats from the broker within %d ms", STATS_WAIT_MS);
    if (zlt_stats_counter (&st, name, &value) != 0)
        fail_msg ("zltest: the broker has no counter named '%s'", name);
    return value;
}

int
zlt_group (zlt_client_t *admin, const char *lane, const char *tenant, zl_group_stats_t *out)
{
    zl_stats_t st;
    if (zlt_stats (admin, &st, STATS_WAIT_MS) != 0)
        return -1;
    const zl_group_stats_t *g = zlt_stats_group (&st, lane, tenant);
    if (!g)
        return -1;
    *out = *g;
    out->lane = NULL;
    out->tenant = NULL;
    return 0;
}

int
zlt_wait_counter (zlt_client_t *admin, const char *name, uint64_t min_value, int timeout_ms)
{
    int64_t deadline = zlt_now_ms () + timeout_ms;
    uint64_t value = 0;
    bool seen = false;
    for (;;) {
        int64_t left = deadline - zlt_now_ms ();
        zl_stats_t st;
        if (zlt_stats (admin, &st, left > 0 ? (int)left : 0) == 0 &&
            zlt_stats_counter (&st, name, &value) == 0) {
            seen = true;
            if (value >= min_value)
                return 0;
        }
        left = deadline - zlt_now_ms ();
        if (left <= 0)
            break;
        poll (NULL, 0, left < STATS_POLL_MS ? (int)left : STATS_POLL_MS);
    }
    if (seen)
        fprintf (stderr, "zltest: counter %s is %" PRIu64 " after %d ms, wanted >= %" PRIu64 "\n",
                 name, value, timeout_ms, min_value);
    else
        fprintf (stderr, "zltest: counter %s unavailable for %d ms\n", name, timeout_ms);
    return -1;
}

int
zlt_wait_turn_committed (zlt_client_t *admin, int timeout_ms)
{
    int64_t deadline = zlt_now_ms () + timeout_ms;
    uint64_t first = 0, turns = 0, committed = 0;
    bool seen = false;
    for (;;) {
        int64_t left = deadline - zlt_now_ms ();
        zl_stats_t st;
        if (zlt_stats (admin, &st, left > 0 ? (int)left : 0) == 0 &&
            zlt_stats_counter (&st, "loop_turns", &turns) == 0 &&
            zlt_stats_counter (&st, "loop_turns_committed", &committed) == 0) {
            if (!seen) {
                seen = true;
                first = turns;
            }
            if (committed >= first)
                return 0;
        }
        left = deadline - zlt_now_ms ();
        if (left <= 0)
            break;
        poll (NULL, 0, left < 5 ? (int)left : 5);
    }
    fprintf (stderr,
             "zltest: turn %" PRIu64 " not committed within %d ms (last committed %" PRIu64 ")%s\n",
             first, timeout_ms, committed, seen ? "" : " (no answer)");
    return -1;
}

// ---------------------------------------------------------------- job ids
size_t
zlt_ids_parse_json (const char *text, uint64_t *ids, size_t cap, const char *what,
                    size_t *duplicates)
{
    size_t n = 0;
    const char *p = text;
    while (*p) {
        const char *eol = strchr (p, '\n');
        if (!eol)
            fail_msg ("%s: last line has no newline: '%s'", what, p);
        uint64_t seq, id;
        char dup[8];
        if (sscanf (p, "{\"seq\":%" SCNu64 ",\"job_id\":%" SCNu64 ",\"duplicate\":%7[a-z]}", &seq,
                    &id, dup) != 3 ||
            id == 0)
            fail_msg ("%s: line %zu is not an accepted job: '%.*s'", what, n + 1, (int)(eol - p),
                      p);
        if (seq != n + 1)
            fail_msg ("%s: line %zu is for seq %" PRIu64, what, n + 1, seq);
        if (n == cap)
            fail_msg ("%s: more than %zu ids", what, cap);
        *duplicates += !strcmp (dup, "true");
        ids[n++] = id;
        p = eol + 1;
    }
    return n;
}

// One line of a --record file: "<id> <attempt> <pid>[ <payload>]"; fails the
// test if it is malformed (`n` numbers it). The payload (or "") in *payload.
static void
s_record_line (const char *line, size_t n, uint64_t *id, unsigned *attempt, const char **payload)
{
    long pid;
    int at = 0;
    if (sscanf (line, "%" SCNu64 " %u %ld %n", id, attempt, &pid, &at) != 3 || !at)
        fail_msg ("record line %zu is malformed: '%s'", n, line);
    *payload = line + at;
}

void
zlt_tally_text (const char *record_text, const uint64_t *ids, size_t n_ids, unsigned *runs,
                zlt_tally_t *t)
{
    memset (runs, 0, n_ids * sizeof *runs);
    *t = (zlt_tally_t){.lost = n_ids};
    char *text = record_text ? zl_strdup (record_text) : NULL;
    char *save = NULL;
    for (char *line = text ? strtok_r (text, "\n", &save) : NULL; line;
         line = strtok_r (NULL, "\n", &save)) {
        uint64_t id;
        unsigned attempt;
        const char *payload;
        s_record_line (line, t->lines + 1, &id, &attempt, &payload);
        t->lines++;
        t->reruns += attempt > 1;
        long at = zlt_ids_find (ids, n_ids, id);
        if (at < 0) {
            if (!t->foreign++)
                t->first_foreign = id;
        } else if (runs[at]++)
            t->duplicates++;
        else
            t->lost--;
    }
    free (text);
}

void
zlt_tally (const char *path, const uint64_t *ids, size_t n_ids, unsigned *runs, zlt_tally_t *t)
{
    char *text = zlt_read_file (path, NULL);
    zlt_tally_text (text, ids, n_ids, runs, t);
    free (text);
}

// The input line `payload` names: "<prefixes[p]> <i>", 0 <= i < n_lines,
// as p * n_lines + i; -1 if it is none.
static long
s_input_line (const char *payload, const char *const *prefixes, size_t n_prefixes, size_t n_lines)
{
    for (size_t k = 0; k < n_prefixes; k++) {
        size_t len = strlen (prefixes[k]);
        if (strncmp (payload, prefixes[k], len) != 0 || payload[len] != ' ')
            continue;
        const char *digits = payload + len + 1;
        char *end;
        errno = 0;
        unsigned long i = strtoul (digits, &end, 10);
        if (isdigit ((unsigned char)*digits) && !*end && !errno && i < n_lines)
            return (long)(k * n_lines + i);
    }
    return -1;
}

typedef struct {
    uint64_t id;
    size_t line;
} s_printed_t;

static int
s_printed_cmp (const void *a, const void *b)
{
    uint64_t x = ((const s_printed_t *)a)->id, y = ((const s_printed_t *)b)->id;
    return x < y ? -1 : x > y;
}

void
zlt_payloads (const char *path, const uint64_t *ids, const char *const *prefixes, size_t n_prefixes,
              size_t n_lines, zlt_payloads_t *out)
{
    *out = (zlt_payloads_t){0};
    size_t n = n_prefixes * n_lines, n_printed = 0;
    s_printed_t *printed = calloc (n ? n : 1, sizeof *printed);
    assert_non_null (printed);
    for (size_t i = 0; i < n; i++)
        if (ids[i])
            printed[n_printed++] = (s_printed_t){ids[i], i};
    qsort (printed, n_printed, sizeof *printed, s_printed_cmp);
    char *text = zlt_read_file (path, NULL);
    char *save = NULL;
    size_t n_line = 0;
    for (char *line = text ? strtok_r (text, "\n", &save) : NULL; line;
         line = strtok_r (NULL, "\n", &save)) {
        uint64_t id;
        unsigned attempt;
        const char *payload;
        s_record_line (line, ++n_line, &id, &attempt, &payload);
        long input = s_input_line (payload, prefixes, n_prefixes, n_lines);
        s_printed_t key = {id, 0};
        const s_printed_t *p = bsearch (&key, printed, n_printed, sizeof *printed, s_printed_cmp);
        if (p && input != (long)p->line) {
            if (!out->mismatched++)
                out->first_mismatched = id;
        } else if (!p && input >= 0)
            out->unanswered++;
        else if (!p && !out->foreign++)
            out->first_foreign = id;
    }
    free (text);
    free (printed);
}

void
zlt_payloads_assert (const zlt_payloads_t *pl, size_t resent)
{
    if (pl->foreign)
        fail_msg ("%zu executions of jobs nobody submitted (the first: job %" PRIu64 ")",
                  pl->foreign, pl->first_foreign);
    if (pl->mismatched)
        fail_msg ("%zu executions of a printed id carried another line (the first: job %" PRIu64
                  "): an id was given to two jobs",
                  pl->mismatched, pl->first_mismatched);
    if (pl->unanswered > resent)
        fail_msg ("%zu unprinted jobs ran with an input line, but the producers resent only %zu",
                  pl->unanswered, resent);
}

// ---------------------------------------------------------------- files of lines
void
zlt_write_lines (const char *path, const char *prefix, int n)
{
    FILE *f = fopen (path, "w");
    assert_non_null (f);
    for (int i = 0; i < n; i++)
        fprintf (f, "%s %d\n", prefix, i);
    assert_int_equal (fclose (f), 0);
}

size_t
zlt_count_lines (const char *path)
{
    char *text = zlt_read_file (path, NULL);
    size_t n = 0;
    for (const char *p = text; p && (p = strchr (p, '\n')); p++)
        n++;
    free (text);
    return n;
}

bool
zlt_has_lines (const char *text, const void *arg)
{
    size_t n = 0;
    for (const char *p = text; (p = strchr (p, '\n')); p++)
        n++;
    return n >= *(const size_t *)arg;
}

size_t
zlt_count_in_file (const char *path, const char *needle)
{
    char *text = zlt_read_file (path, NULL);
    size_t n = 0;
    for (const char *p = text; p && (p = strstr (p, needle)); p += strlen (needle))
        n++;
    free (text);
    return n;
}

void
zlt_fifo_feed (int fd, int *fed, int n, int64_t deadline)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream (&text, &len);
    assert_non_null (f);
    for (int i = 0; i < n; i++)
        fprintf (f, "job %d\n", (*fed)++);
    assert_int_equal (fclose (f), 0);
    for (size_t done = 0; done < len;) {
        ssize_t w = write (fd, text + done, len - done);
        if (w > 0) {
            done += (size_t)w;
            continue;
        }
        assert_true (w < 0 && errno == EAGAIN);
        int64_t left = deadline - zlt_now_ms ();
        if (left <= 0)
            fail_msg ("the producer read %zu of %zu bytes of its input in time", done, len);
        struct pollfd p = {fd, POLLOUT, 0};
        poll (&p, 1, (int)left);
    }
    free (text);
}

void
zlt_wait_printed (const char *out, size_t want, zlt_proc_t *proc, const char *err, int64_t deadline)
{
    while (zlt_wait_file (out, zlt_has_lines, &want, 200) != 0) {
        if (zlt_proc_wait (proc, 0) == 0 || zlt_now_ms () >= deadline) {
            zlt_dump_file ("its stderr", err, 3000);
            fail_msg ("%s has %zu of %zu lines", out, zlt_count_lines (out), want);
        }
    }
}

zlt_proc_t *
zlt_worker_spawn (const char *dir, const char *name, const char *brokers, const char *record,
                  char **err_out)
{
    char *bin = zlt_bin ("zlane-worker");
    char *handler = zlt_bin ("zlane-testhandler");
    char *cmd;
    assert_true (asprintf (&cmd, "'%s' --record '%s' --record-payload", handler, record) > 0);
    char file[96];
    snprintf (file, sizeof file, "%s.err", name);
    char *err = zlt_path (dir, file);
    const char *argv[] = {bin, "--broker",      brokers, "--lanes",     "a",     "--exec",
                          cmd, "--name",        name,    "--heartbeat", "200ms", "--liveness",
                          "3", "--concurrency", "4",     "-v",          NULL};
    zlt_proc_t *p = zlt_spawn (argv, NULL, NULL, err);
    assert_non_null (p);
    free (cmd);
    free (handler);
    free (bin);
    *err_out = err;
    return p;
}

void
zlt_assert_no_sanitizer_report (const char *title, const char *path)
{
    char *text = zlt_read_file (path, NULL);
    if (text && (strstr (text, "Sanitizer") || strstr (text, "runtime error:"))) {
        zlt_dump_file (title, path, 6000);
        fail_msg ("%s: a sanitizer report", title);
    }
    free (text);
}

size_t
zlt_ids_parse (const char *text, uint64_t *ids, size_t cap, const char *what)
{
    size_t n = 0;
    const char *p = text;
    while (*p) {
        const char *eol = strchr (p, '\n');
        if (!eol)
            fail_msg ("%s: last line has no newline: '%s'", what, p);
        char *end;
        uint64_t id = strtoull (p, &end, 10);
        if (end == p || end != eol || id == 0)
            fail_msg ("%s: line %zu is not a job id: '%.*s'", what, n + 1, (int)(eol - p), p);
        if (n == cap)
            fail_msg ("%s: more than %zu ids", what, cap);
        ids[n++] = id;
        p = eol + 1;
    }
    return n;
}

static int
s_cmp_id (const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void
zlt_ids_sort (uint64_t *ids, size_t n)
{
    qsort (ids, n, sizeof *ids, s_cmp_id);
}

long
zlt_ids_find (const uint64_t *ids, size_t n, uint64_t id)
{
    const uint64_t *hit = bsearch (&id, ids, n, sizeof *ids, s_cmp_id);
    return hit ? hit - ids : -1;
}
