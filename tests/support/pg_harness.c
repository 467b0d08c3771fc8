/*  pg_harness: a throwaway PostgreSQL cluster for tests.

    Layout of a cluster's temp dir ($TMPDIR or /tmp, "zlh-pg-XXXXXX"):
        data/           the data directory (initdb)
        initdb.log      what initdb printed
        postgres.log    the server's stderr: its log (logging_collector off)
        .s.PGSQL.<port> the unix socket (the TCP socket is on 127.0.0.1 only)

    Processes. initdb, useradd and the postmaster are forked here and exec'd
    directly (no shell, no su): in the child, a process group of its own, a
    small fixed environment, no inherited descriptors past stderr, then (as
    root) setgroups/setgid/setuid to the server user, then PR_SET_PDEATHSIG
    (set after the uid change, which would clear it). The postmaster is our
    child: we wait for it on a pidfd and reap it. zlh_pg_kill stops it
    (SIGSTOP), lists its children from /proc, opens pidfds on them and
    SIGKILLs it while the test process is, for that moment, a child
    subreaper: the children (backends, checkpointer, ...) become ours. They
    exit by themselves on noticing the postmaster's death, as after a real
    crash; s_orphans_reap waits for them and reaps them (SIGKILL after
    DIR_PROCS_MS), before a restart (a new postmaster refuses a data dir whose
    old shared memory is still attached) and before the dir is removed. It
    also waits for any other process working in the data dir (every server
    process chdirs there), which catches the children of a postmaster that
    died by itself. */
#define _GNU_SOURCE
#include "pg_harness.h"

#include "harness_util.h"

#include "zl_alloc.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef ZLH_PG_BINDIR
#define ZLH_PG_BINDIR "/usr/lib/postgresql/15/bin"
#endif

#define SUPERUSER "zlane"   // the cluster's superuser (initdb -U)
#define DBNAME "zlane_test" // the database zlh_pg_conninfo names
#define MAX_CLUSTERS 16
#define MAX_ORPHANS 128 // max_connections 20, plus the auxiliary processes
#define PORT_TRIES 5    // a free port taken by another before the server binds it
#define INITDB_MS 60000
#define READY_MS 30000      // a fresh server accepting connections
#define RECOVERY_MS 60000   // a restarted one, crash recovery included
#define SHUTDOWN_MS 10000   // fast shutdown, before SIGKILL
#define KILL_MS 5000        // a SIGKILLed process gone
#define STOP_MS 2000        // a SIGSTOPped postmaster stopped
#define DIR_PROCS_MS 10000  // a dead postmaster's children gone, before SIGKILL
#define PING_INTERVAL_MS 10 // between PQping attempts while the server starts
#define LOG_TAIL_BYTES 4096

typedef struct {
    pid_t pid;
    int pidfd; // -1 if pidfd_open failed
} s_child_t;

struct _zlh_pg_t {
    char dir[PATH_MAX];       // the temp dir (a real path: no symlinks)
    char data[PATH_MAX + 16]; // <dir>/data
    char log[PATH_MAX + 16];  // <dir>/postgres.log
    char initdb_log[PATH_MAX + 16];
    char bindir[PATH_MAX];
    char password[33]; // of SUPERUSER: 32 hex digits
    char conninfo[512];
    char uri[512];
    int port;
    pid_t pid; // the postmaster, or -1
    int pidfd; // on it, or -1
    // the children of a killed postmaster, still to be reaped (s_kill_postmaster)
    s_child_t orphans[MAX_ORPHANS];
    size_t n_orphans;
    bool drop; // run the server as uid/gid (the test runs as root)
    uid_t uid;
    gid_t gid;
};

static zlh_pg_t *s_clusters[MAX_CLUSTERS];
static pid_t s_owner; // the process that started them (not a forked child): 0 until then

// ---------------------------------------------------------------- small helpers

static void
s_remove_dir (const char *dir)
{
    if (getenv ("ZLT_KEEP"))
        fprintf (stderr, "pg_harness: keeping %s\n", dir);
    else
        zlh_remove_tree (dir);
}

// Return a port on 127.0.0.1 that was free a moment ago, or -1.
static int
s_free_port (void)
{
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    int port = -1;
    if (bind (fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname (fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs (sa.sin_port);
    close (fd);
    return port;
}

// ---------------------------------------------------------------- processes
// Fork and exec argv[0] (a path) with `argv`: stdin from /dev/null, stdout
// and stderr appended to `out_path` (NULL: inherited), in `cwd`, in a process
// group of its own, as uid/gid if `drop`, getting `pdeath_sig` when the
// test process dies. Returns 0 with `*child` set, or -1 (reason printed).
static int
s_spawn (const zlh_pg_t *self, const char *const argv[], const char *out_path, const char *cwd,
         int pdeath_sig, s_child_t *child)
{
    int out = -1;
    if (out_path) {
        out = open (out_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (out < 0) {
            fprintf (stderr, "pg_harness: open %s: %s\n", out_path, strerror (errno));
            return -1;
        }
    }
    int devnull = open ("/dev/null", O_RDONLY | O_CLOEXEC);
    char home[PATH_MAX + 8];
    snprintf (home, sizeof home, "HOME=%s", cwd);
    char *const envp[] = {"PATH=/usr/bin:/bin", "LC_ALL=C", "LANG=C", "TZ=UTC", home, NULL};
    bool drop = self && self->drop;
    uid_t uid = drop ? self->uid : 0;
    gid_t gid = drop ? self->gid : 0;
    pid_t parent = getpid ();

    pid_t pid = fork ();
    if (pid < 0) {
        fprintf (stderr, "pg_harness: fork: %s\n", strerror (errno));
        if (out >= 0)
            close (out);
        if (devnull >= 0)
            close (devnull);
        return -1;
    }
    if (pid == 0) { // async-signal-safe calls only, up to execve
        const char *step = "setpgid";
        setpgid (0, 0);
        if (devnull >= 0)
            dup2 (devnull, 0);
        if (out >= 0) {
            dup2 (out, 1);
            dup2 (out, 2);
        }
        close_range (3, ~0U, 0);
        if (chdir (cwd) < 0)
            step = "chdir";
        else if (drop && setgroups (0, NULL) < 0)
            step = "setgroups";
        else if (drop && setgid (gid) < 0)
            step = "setgid";
        else if (drop && setuid (uid) < 0)
            step = "setuid";
        else if (prctl (PR_SET_PDEATHSIG, pdeath_sig) < 0 || getppid () != parent)
            step = "prctl (PR_SET_PDEATHSIG)";
        else {
            step = "execve";
            execve (argv[0], (char *const *)argv, envp);
        }
        char num[16], *d = num + sizeof num; // errno in decimal: no strerror here
        *--d = '\0';
        for (int e = errno; d == num + sizeof num - 1 || e; e /= 10)
            *--d = (char)('0' + e % 10);
        const char *parts[] = {"pg_harness: child: ", step, " ", argv[0], ": errno ", d, "\n"};
        for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
            if (write (2, parts[i], strlen (parts[i])) < 0)
                break;
        _exit (127);
    }
    if (out >= 0)
        close (out);
    if (devnull >= 0)
        close (devnull);
    child->pid = pid;
    child->pidfd = zlh_pidfd_open (pid); // our unreaped child: no race
    return 0;
}

// Wait up to `timeout_ms` for our child to exit, and reap it. Returns 0
// (with `*status` if not NULL) or -1 on timeout.
static int
s_child_wait (s_child_t *child, int timeout_ms, int *status)
{
    int64_t deadline = zlh_now_ms () + timeout_ms;
    for (;;) {
        int st;
        pid_t r = waitpid (child->pid, &st, WNOHANG);
        if (r == child->pid || (r < 0 && errno == ECHILD)) {
            if (status)
                *status = r == child->pid ? st : 0;
            if (child->pidfd >= 0)
                close (child->pidfd);
            child->pidfd = -1;
            return 0;
        }
        int64_t left = deadline - zlh_now_ms ();
        if (left <= 0)
            return -1;
        if (child->pidfd >= 0) { // readable once it exits
            struct pollfd pfd = {child->pidfd, POLLIN, 0};
            poll (&pfd, 1, (int)left);
        } else { // no pidfd (an old kernel): look again every 5 ms
            poll (NULL, 0, left < 5 ? (int)left : 5);
        }
    }
}

// SIGKILL the child's process group and the child, and reap it.
static void
s_child_kill (s_child_t *child)
{
    kill (-child->pid, SIGKILL);
    kill (child->pid, SIGKILL);
    if (s_child_wait (child, KILL_MS, NULL) < 0)
        fprintf (stderr, "pg_harness: pid %d outlived SIGKILL for %d ms\n", (int)child->pid,
                 KILL_MS);
}

// Run argv to completion within `timeout_ms` (see s_spawn). Returns its
// exit code, 128 + signal, or -1 if it could not start or timed out (then
// its process group is killed).
static int
s_run (const zlh_pg_t *self, const char *const argv[], const char *out_path, const char *cwd,
       int timeout_ms)
{
    s_child_t child;
    if (s_spawn (self, argv, out_path, cwd, SIGKILL, &child) < 0)
        return -1;
    int status = 0;
    if (s_child_wait (&child, timeout_ms, &status) < 0) {
        fprintf (stderr, "pg_harness: %s did not finish within %d ms: killed\n", argv[0],
                 timeout_ms);
        s_child_kill (&child);
        return -1;
    }
    return WIFEXITED (status) ? WEXITSTATUS (status) : 128 + WTERMSIG (status);
}

// Return true if process `pid` works in `dir` (its cwd).
static bool
s_proc_in_dir (pid_t pid, const char *dir)
{
    char link[64], cwd[PATH_MAX];
    snprintf (link, sizeof link, "/proc/%d/cwd", (int)pid);
    ssize_t n = readlink (link, cwd, sizeof cwd - 1);
    if (n <= 0)
        return false;
    cwd[n] = '\0';
    return strcmp (cwd, dir) == 0;
}

// Return the parent of process `pid` (from /proc/<pid>/stat), or -1.
static pid_t
s_proc_ppid (pid_t pid)
{
    char path[64], buf[512];
    snprintf (path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read (fd, buf, sizeof buf - 1);
    close (fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    const char *p = strrchr (buf, ')'); // the command name may hold anything
    int ppid;
    char state;
    if (!p || sscanf (p + 1, " %c %d", &state, &ppid) != 2)
        return -1;
    return (pid_t)ppid;
}

// Add `pid` to the orphans (a pidfd opened on it) unless it is there or
// the list is full; `in_dir`: only if it still works in the data dir, looked
// at again once the pidfd holds it (so the pid was not reused meanwhile).
static void
s_orphan_add (zlh_pg_t *self, pid_t pid, bool in_dir)
{
    for (size_t i = 0; i < self->n_orphans; i++)
        if (self->orphans[i].pid == pid)
            return;
    if (self->n_orphans == MAX_ORPHANS) {
        fprintf (stderr, "pg_harness: more than %d server processes\n", MAX_ORPHANS);
        return;
    }
    int fd = zlh_pidfd_open (pid);
    if (fd < 0 || (in_dir && !s_proc_in_dir (pid, self->data))) {
        if (fd >= 0)
            close (fd);
        return;
    }
    self->orphans[self->n_orphans++] = (s_child_t){pid, fd};
}

// Add every process whose parent is `ppid` (ppid > 0), or which works in
// the data dir (ppid == 0), to the orphans.
static void
s_orphans_scan (zlh_pg_t *self, pid_t ppid)
{
    DIR *proc = opendir ("/proc");
    if (!proc)
        return;
    struct dirent *e;
    while ((e = readdir (proc))) {
        char *end;
        long pid = strtol (e->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        if (ppid > 0 ? s_proc_ppid ((pid_t)pid) == ppid : s_proc_in_dir ((pid_t)pid, self->data))
            s_orphan_add (self, (pid_t)pid, ppid == 0);
    }
    closedir (proc);
}

// SIGKILL the postmaster and reap it, keeping hold of its children: while
// it is stopped (SIGSTOP; it cannot fork) its children are listed and
// pidfds opened on them; for the moment of its death the test process is a
// child subreaper, so they become ours to reap (an init that does not reap,
// as in many containers, would keep them as zombies). They are left to
// exit by themselves; s_orphans_reap waits for them.
static void
s_kill_postmaster (zlh_pg_t *self)
{
    s_child_t pm = {self->pid, self->pidfd};
    self->pid = -1;
    self->pidfd = -1;
    kill (pm.pid, SIGSTOP);
    int64_t deadline = zlh_now_ms () + STOP_MS;
    for (;;) {
        int st;
        pid_t r = waitpid (pm.pid, &st, WUNTRACED | WNOHANG);
        if (r == pm.pid && WIFSTOPPED (st))
            break;
        if (r == pm.pid || (r < 0 && errno == ECHILD)) { // it died meanwhile, and is reaped
            if (pm.pidfd >= 0)
                close (pm.pidfd);
            return;
        }
        if (zlh_now_ms () >= deadline) { // listed all the same: the best we can do
            fprintf (stderr, "pg_harness: postgres %d did not stop within %d ms\n", (int)pm.pid,
                     STOP_MS);
            break;
        }
        poll (NULL, 0, 1);
    }
    s_orphans_scan (self, pm.pid);
    int subreaper = 0;
    prctl (PR_GET_CHILD_SUBREAPER, &subreaper);
    if (!subreaper)
        prctl (PR_SET_CHILD_SUBREAPER, 1);
    s_child_kill (&pm); // its children are ours once it is reaped
    if (!subreaper)
        prctl (PR_SET_CHILD_SUBREAPER, 0);
}

// Wait up to `timeout_ms` for the orphans to exit, reaping those that are
// our children. Returns how many are left (compacted at the front).
static size_t
s_orphans_wait (zlh_pg_t *self, int timeout_ms)
{
    int64_t deadline = zlh_now_ms () + timeout_ms;
    for (;;) {
        struct pollfd pfds[MAX_ORPHANS];
        for (size_t i = 0; i < self->n_orphans; i++)
            pfds[i] = (struct pollfd){self->orphans[i].pidfd, POLLIN, 0};
        int64_t left = deadline - zlh_now_ms ();
        if (self->n_orphans && poll (pfds, self->n_orphans, left > 0 ? (int)left : 0) < 0 &&
            errno != EINTR)
            break;
        size_t kept = 0;
        for (size_t i = 0; i < self->n_orphans; i++) {
            s_child_t *o = &self->orphans[i];
            if (pfds[i].revents) { // exited: reaped if ours (ECHILD if not)
                waitpid (o->pid, NULL, WNOHANG);
                close (o->pidfd);
            } else
                self->orphans[kept++] = *o;
        }
        self->n_orphans = kept;
        if (!kept || left <= 0)
            return kept;
    }
    return self->n_orphans;
}

// With the postmaster gone: wait (at most DIR_PROCS_MS) for its children
// and any other process still working in the data dir to exit, then
// SIGKILL any left. Returns how many had to be killed.
static size_t
s_orphans_reap (zlh_pg_t *self)
{
    s_orphans_scan (self, 0);
    size_t left = s_orphans_wait (self, DIR_PROCS_MS);
    for (size_t i = 0; i < left; i++)
        zlh_pidfd_kill (self->orphans[i].pidfd, SIGKILL);
    size_t stuck = s_orphans_wait (self, KILL_MS);
    if (left)
        fprintf (stderr, "pg_harness: %zu server process(es) of %s outlived %d ms: SIGKILLed\n",
                 left, self->data, DIR_PROCS_MS);
    if (stuck)
        fprintf (stderr, "pg_harness: %zu of them outlived SIGKILL for %d ms\n", stuck, KILL_MS);
    for (size_t i = 0; i < stuck; i++)
        close (self->orphans[i].pidfd);
    self->n_orphans = 0;
    return left;
}

// ---------------------------------------------------------------- registry
static void
s_at_exit (void)
{
    if (getpid () == s_owner) // a forked child that exits leaves them alone
        zlh_pg_cleanup ();
}

static int
s_register (zlh_pg_t *self)
{
    if (!s_owner) {
        s_owner = getpid ();
        atexit (s_at_exit);
    }
    for (size_t i = 0; i < MAX_CLUSTERS; i++)
        if (!s_clusters[i]) {
            s_clusters[i] = self;
            return 0;
        }
    fprintf (stderr, "pg_harness: more than %d clusters at once\n", MAX_CLUSTERS);
    return -1;
}

static void
s_unregister (zlh_pg_t *self)
{
    for (size_t i = 0; i < MAX_CLUSTERS; i++)
        if (s_clusters[i] == self)
            s_clusters[i] = NULL;
}

// ---------------------------------------------------------------- set-up steps
// As root, find (or create with useradd) the server user. Returns 0 or -1.
static int
s_server_user (zlh_pg_t *self)
{
    char why[256];
    if (zlh_server_user (&self->drop, &self->uid, &self->gid, why, sizeof why) == 0)
        return 0;
    fprintf (stderr, "pg_harness: %s\n", why);
    return -1;
}

// Make the temp dir (owned by the server user) and the paths in it.
static int
s_make_dir (zlh_pg_t *self)
{
    const char *base = getenv ("TMPDIR");
    if (!base || !base[0])
        base = "/tmp";
    char tmpl[PATH_MAX];
    snprintf (tmpl, sizeof tmpl, "%s/zlh-pg-XXXXXX", base);
    if (!mkdtemp (tmpl)) {
        fprintf (stderr, "pg_harness: mkdtemp %s: %s\n", tmpl, strerror (errno));
        return -1;
    }
    // the data dir is matched against /proc/<pid>/cwd: no symlinks in it
    if (!realpath (tmpl, self->dir)) {
        fprintf (stderr, "pg_harness: realpath %s: %s\n", tmpl, strerror (errno));
        rmdir (tmpl);
        return -1;
    }
    snprintf (self->data, sizeof self->data, "%s/data", self->dir);
    snprintf (self->log, sizeof self->log, "%s/postgres.log", self->dir);
    snprintf (self->initdb_log, sizeof self->initdb_log, "%s/initdb.log", self->dir);
    // quoted in postgresql.conf; the socket path must fit sockaddr_un
    if (strpbrk (self->dir, "'\\\n") || strlen (self->dir) > 80) {
        fprintf (stderr, "pg_harness: temp dir %s: too long or has quotes (set TMPDIR)\n",
                 self->dir);
        rmdir (self->dir);
        return -1;
    }
    if (self->drop && chown (self->dir, self->uid, self->gid) < 0) {
        fprintf (stderr, "pg_harness: chown %s: %s\n", self->dir, strerror (errno));
        rmdir (self->dir);
        return -1;
    }
    return 0;
}

static void
s_set_port (zlh_pg_t *self, int port)
{
    self->port = port;
    snprintf (self->conninfo, sizeof self->conninfo,
              "host=127.0.0.1 port=%d dbname=" DBNAME " user=" SUPERUSER
              " password=%s connect_timeout=5",
              port, self->password);
    snprintf (self->uri, sizeof self->uri,
              "postgresql://" SUPERUSER ":%s@127.0.0.1:%d/" DBNAME "?connect_timeout=5",
              self->password, port);
}

static int
s_append (const char *path, const char *text)
{
    int fd = open (path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len = strlen (text);
    ssize_t n = write (fd, text, len);
    return close (fd) == 0 && n == (ssize_t)len ? 0 : -1;
}

// initdb as the server user, with a random superuser password (SCRAM for
// every connection), then the harness's settings in postgresql.conf.
static int
s_initdb (zlh_pg_t *self)
{
    uint8_t raw[16];
    if (getrandom (raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
        fprintf (stderr, "pg_harness: getrandom: %s\n", strerror (errno));
        return -1;
    }
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf (self->password + 2 * i, 3, "%02x", raw[i]);

    char pwfile[PATH_MAX + 16];
    snprintf (pwfile, sizeof pwfile, "%s/pwfile", self->dir);
    int fd = open (pwfile, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || write (fd, self->password, 32) != 32 ||
        (self->drop && fchown (fd, self->uid, self->gid) < 0)) {
        fprintf (stderr, "pg_harness: write %s: %s\n", pwfile, strerror (errno));
        if (fd >= 0)
            close (fd);
        return -1;
    }
    close (fd);

    char initdb[PATH_MAX + 16], pwopt[PATH_MAX + 32];
    snprintf (initdb, sizeof initdb, "%s/initdb", self->bindir);
    snprintf (pwopt, sizeof pwopt, "--pwfile=%s", pwfile);
    const char *argv[] = {initdb,
                          "-D",
                          self->data,
                          "-U",
                          SUPERUSER,
                          pwopt,
                          "-A",
                          "scram-sha-256",
                          "-E",
                          "UTF8",
                          "--locale=C",
                          "--no-sync", // a throwaway cluster; the server itself runs with fsync on
                          "--no-instructions",
                          NULL};
    int rc = s_run (self, argv, self->initdb_log, self->dir, INITDB_MS);
    unlink (pwfile);
    if (rc != 0) {
        fprintf (stderr, "pg_harness: initdb failed (exit %d)%s\n", rc,
                 self->drop ? "; the server user must be able to reach the temp dir" : "");
        zlh_dump_tail ("initdb.log", self->initdb_log, LOG_TAIL_BYTES);
        return -1;
    }

    char conf[PATH_MAX + 48], text[PATH_MAX + 1024];
    snprintf (conf, sizeof conf, "%s/postgresql.conf", self->data);
    snprintf (text, sizeof text,
              "\n# tests/support/pg_harness.c: loopback only, durable commits, small\n"
              "listen_addresses = '127.0.0.1'\n"
              "unix_socket_directories = '%s'\n"
              "fsync = on\n"
              "synchronous_commit = on\n"
              "full_page_writes = on\n"
              "shared_buffers = 16MB\n"
              "max_connections = 20\n"
              "huge_pages = off\n"
              "logging_collector = off\n"
              "log_destination = 'stderr'\n"
              "log_line_prefix = '%%m [%%p] %%q%%u@%%d '\n"
              "log_timezone = 'UTC'\n"
              "timezone = 'UTC'\n"
              "lc_messages = 'C'\n",
              self->dir);
    if (s_append (conf, text) < 0) {
        fprintf (stderr, "pg_harness: append to %s: %s\n", conf, strerror (errno));
        return -1;
    }
    return 0;
}

// Return true if postmaster.pid says our postmaster is up and ready (its
// 1st line is its pid, its 8th its status), so that a PQping answered on
// the port is ours, not another server's that took the port first.
static bool
s_pidfile_ready (const zlh_pg_t *self)
{
    char path[PATH_MAX + 32], buf[1024];
    snprintf (path, sizeof path, "%s/postmaster.pid", self->data);
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read (fd, buf, sizeof buf - 1);
    close (fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    if (atol (buf) != (long)self->pid)
        return false;
    const char *line = buf;
    for (int i = 1; i < 8 && line; i++)
        if ((line = strchr (line, '\n')))
            line++;
    return line && strncmp (line, "ready", 5) == 0;
}

// Start the postmaster and wait up to `timeout_ms` until it accepts
// connections. Returns 0, -1 if it failed, or -2 if it exited because its
// port was taken.
static int
s_start_server (zlh_pg_t *self, int timeout_ms)
{
    char postgres[PATH_MAX + 16], port[16];
    snprintf (postgres, sizeof postgres, "%s/postgres", self->bindir);
    snprintf (port, sizeof port, "%d", self->port);
    const char *argv[] = {postgres, "-D", self->data, "-p", port, NULL};
    // the log is kept across restarts: each start is marked in it
    char mark[128];
    snprintf (mark, sizeof mark, "---- pg_harness: starting postgres on 127.0.0.1:%d\n",
              self->port);
    int fd = open (self->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (write (fd, mark, strlen (mark)) < 0)
            fprintf (stderr, "pg_harness: write %s: %s\n", self->log, strerror (errno));
        close (fd);
    }
    off_t log_from = 0;
    struct stat st;
    if (stat (self->log, &st) == 0)
        log_from = st.st_size;

    s_child_t child;
    if (s_spawn (self, argv, self->log, self->dir, SIGQUIT, &child) < 0)
        return -1;
    self->pid = child.pid;
    self->pidfd = child.pidfd;

    char ping[256];
    snprintf (ping, sizeof ping,
              "host=127.0.0.1 port=%d dbname=postgres user=" SUPERUSER " connect_timeout=2",
              self->port);
    int64_t deadline = zlh_now_ms () + timeout_ms;
    for (;;) {
        if (s_pidfile_ready (self) && PQping (ping) == PQPING_OK)
            return 0;
        int status;
        if (s_child_wait (&child, 0, &status) == 0) {
            self->pid = -1;
            self->pidfd = -1;
            bool port_taken = false;
            int lfd = open (self->log, O_RDONLY | O_CLOEXEC);
            if (lfd >= 0) {
                char buf[8192];
                ssize_t n = pread (lfd, buf, sizeof buf - 1, log_from);
                close (lfd);
                buf[n > 0 ? n : 0] = '\0';
                port_taken = strstr (buf, "Address already in use") != NULL;
            }
            if (port_taken)
                return -2;
            fprintf (stderr,
                     "pg_harness: postgres exited (status 0x%x) before accepting connections\n",
                     status);
            zlh_pg_dump_log (self, LOG_TAIL_BYTES);
            return -1;
        }
        int64_t left = deadline - zlh_now_ms ();
        if (left <= 0)
            break;
        // woken at once if the postmaster exits
        struct pollfd pfd = {child.pidfd, POLLIN, 0};
        poll (&pfd, child.pidfd >= 0 ? 1 : 0,
              left < PING_INTERVAL_MS ? (int)left : PING_INTERVAL_MS);
    }
    fprintf (stderr, "pg_harness: postgres did not accept connections within %d ms\n", timeout_ms);
    zlh_pg_dump_log (self, LOG_TAIL_BYTES);
    s_kill_postmaster (self);
    s_orphans_reap (self);
    return -1;
}

static int
s_create_database (zlh_pg_t *self)
{
    char conninfo[512];
    snprintf (conninfo, sizeof conninfo,
              "host=127.0.0.1 port=%d dbname=postgres user=" SUPERUSER
              " password=%s connect_timeout=5",
              self->port, self->password);
    PGconn *conn = PQconnectdb (conninfo);
    int rc = -1;
    if (PQstatus (conn) != CONNECTION_OK)
        fprintf (stderr, "pg_harness: connect: %s", PQerrorMessage (conn));
    else {
        PGresult *res = PQexec (conn, "CREATE DATABASE " DBNAME);
        if (PQresultStatus (res) == PGRES_COMMAND_OK)
            rc = 0;
        else
            fprintf (stderr, "pg_harness: CREATE DATABASE: %s", PQerrorMessage (conn));
        PQclear (res);
    }
    PQfinish (conn);
    return rc;
}

// Stop the postmaster if it runs: SIGINT (fast shutdown: it waits for its
// children), after SHUTDOWN_MS SIGKILL. Then wait for (or kill) the children
// of a killed postmaster and anything else left in the data dir. Returns 0
// (a clean shutdown), 1 (it was not running) or -1 (something was killed).
static int
s_shutdown (zlh_pg_t *self)
{
    int rc = 1;
    if (self->pid > 0) {
        s_child_t child = {self->pid, self->pidfd};
        kill (self->pid, SIGINT);
        int status;
        if (s_child_wait (&child, SHUTDOWN_MS, &status) == 0) {
            rc = WIFEXITED (status) && WEXITSTATUS (status) == 0 ? 0 : -1;
            self->pid = -1;
            self->pidfd = -1;
        } else {
            fprintf (stderr, "pg_harness: postgres %d did not shut down within %d ms: SIGKILL\n",
                     (int)self->pid, SHUTDOWN_MS);
            s_kill_postmaster (self);
            rc = -1;
        }
    }
    if (s_orphans_reap (self))
        rc = -1;
    return rc;
}

static void
s_free (zlh_pg_t *self)
{
    if (self->dir[0])
        s_remove_dir (self->dir);
    s_unregister (self);
    free (self);
}

// ---------------------------------------------------------------- API
zlh_pg_t *
zlh_pg_start (void)
{
    zlh_pg_t *self = ZL_NEW (zlh_pg_t);
    self->pid = -1;
    self->pidfd = -1;
    const char *bindir = getenv ("ZLANE_PG_BINDIR");
    snprintf (self->bindir, sizeof self->bindir, "%s",
              bindir && bindir[0] ? bindir : ZLH_PG_BINDIR);
    if (s_register (self) < 0) {
        free (self);
        return NULL;
    }
    if (s_server_user (self) < 0 || s_make_dir (self) < 0 || s_initdb (self) < 0)
        goto failed;
    int rc = -2;
    for (int i = 0; i < PORT_TRIES && rc == -2; i++) {
        int port = s_free_port ();
        if (port < 0) {
            fprintf (stderr, "pg_harness: no free port on 127.0.0.1: %s\n", strerror (errno));
            goto failed;
        }
        s_set_port (self, port);
        rc = s_start_server (self, READY_MS);
    }
    if (rc == -2)
        fprintf (stderr, "pg_harness: %d free ports were taken before postgres bound them\n",
                 PORT_TRIES);
    if (rc != 0 || s_create_database (self) < 0)
        goto failed;
    return self;
failed:
    s_shutdown (self);
    s_free (self);
    return NULL;
}

const char *
zlh_pg_conninfo (zlh_pg_t *self)
{
    return self->conninfo;
}

const char *
zlh_pg_uri (zlh_pg_t *self)
{
    return self->uri;
}

const char *
zlh_pg_dir (zlh_pg_t *self)
{
    return self->dir;
}

const char *
zlh_pg_data_dir (zlh_pg_t *self)
{
    return self->data;
}

const char *
zlh_pg_log_path (zlh_pg_t *self)
{
    return self->log;
}

int
zlh_pg_port (zlh_pg_t *self)
{
    return self->port;
}

pid_t
zlh_pg_pid (zlh_pg_t *self)
{
    return self->pid;
}

PGconn *
zlh_pg_connect (zlh_pg_t *self)
{
    PGconn *conn = PQconnectdb (self->conninfo);
    if (PQstatus (conn) == CONNECTION_OK)
        return conn;
    fprintf (stderr, "pg_harness: connect to 127.0.0.1:%d: %s", self->port, PQerrorMessage (conn));
    PQfinish (conn);
    return NULL;
}

int
zlh_pg_kill (zlh_pg_t *self)
{
    if (self->pid <= 0)
        return -1;
    s_kill_postmaster (self);
    return 0;
}

int
zlh_pg_restart (zlh_pg_t *self)
{
    s_shutdown (self); // waits for the processes of a killed server too
    int rc = s_start_server (self, RECOVERY_MS);
    if (rc == -2) {
        fprintf (stderr, "pg_harness: port %d was taken while postgres was down\n", self->port);
        zlh_pg_dump_log (self, LOG_TAIL_BYTES);
    }
    return rc == 0 ? 0 : -1;
}

void
zlh_pg_dump_log (zlh_pg_t *self, size_t max_bytes)
{
    if (self)
        zlh_dump_tail ("postgres.log", self->log, max_bytes);
}

int
zlh_pg_stop (zlh_pg_t **self_p)
{
    if (!self_p || !*self_p)
        return 1;
    zlh_pg_t *self = *self_p;
    int rc = s_shutdown (self);
    s_free (self);
    *self_p = NULL;
    return rc;
}

void
zlh_pg_cleanup (void)
{
    for (size_t i = 0; i < MAX_CLUSTERS; i++)
        if (s_clusters[i]) {
            zlh_pg_t *pg = s_clusters[i];
            zlh_pg_stop (&pg);
        }
}

int
zlh_pg_teardown (void **state)
{
    (void)state;
    zlh_pg_cleanup ();
    return 0;
}
