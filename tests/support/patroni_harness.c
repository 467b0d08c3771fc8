/*  patroni_harness: a throwaway Patroni + etcd cluster for tests.

    Layout of a cluster's temp dir ($TMPDIR or /tmp, "zlh-patroni-XXXXXX"),
    owned by the server user:
        etcd/           etcd's working dir; etcd/data its data dir
        etcd.log        what etcd printed
        n0/, n1/        a node each: its working dir (HOME), holding
            patroni.yml     its Patroni configuration (written here)
            patroni.log     what Patroni and its PostgreSQL printed
            pgpass          written by Patroni
            data/           the data directory (Patroni's initdb or basebackup)
            .s.PGSQL.<port> the unix socket (TCP is on 127.0.0.1 only)

    Ports. Six ports are taken with bind (127.0.0.1, port 0) and the sockets
    kept, bound but not listening and with SO_REUSEADDR set after the bind,
    until the cluster is stopped: etcd, Patroni and PostgreSQL all set
    SO_REUSEADDR, so they can still listen on them, while the kernel never
    hands such a port to an outgoing connection (the cluster's own
    connections to etcd and between the nodes would otherwise take one of
    the ports not yet listened on) nor to another bind without
    SO_REUSEADDR.

    The keeper. Patroni starts its postmaster through a helper that exits,
    so the postmaster is orphaned; a child subreaper inherits it, and its
    backends when it dies. The test process is not made one (it would adopt
    and have to reap the orphans of everything else it runs): a forked
    keeper is. It takes commands on a SOCK_SEQPACKET socketpair: a byte
    naming what to start (etcd, node 0, node 1; the argv and environment are
    in its copy of the zlh_patroni_t, prepared before the fork); it forks and
    execs that (a process group of its own, a fixed environment, no
    inherited descriptors, signals reset, as the server user) and answers
    with the PID and, by SCM_RIGHTS, a pidfd on it (opened before it could
    be reaped, so the test process holds the right process). Between
    commands it reaps every child that exits (a signalfd for SIGCHLD): at
    once, since Patroni asks psutil whether its postmaster runs, and psutil
    counts a zombie as running (in a trial without the keeper, under an init
    that reaps late, Patroni noticed the killed postmaster 2.4 s late). When
    the socket closes (zlh_patroni_stop, or the test process died) or it
    gets SIGTERM, SIGINT or SIGHUP, it SIGKILLs its children, again and
    again as their orphans become its children, until it has none, and exits
    with 0 if there was nothing to kill, 1 otherwise. Signals are sent from
    the test process through the pidfds. */
#define _GNU_SOURCE
#include "patroni_harness.h"

#include "harness_util.h"

#include "zl_alloc.h"

#include <libpq-fe.h>

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
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef ZLH_PG_BINDIR
#define ZLH_PG_BINDIR "/usr/lib/postgresql/15/bin"
#endif

#ifndef ZLH_PATRONI
#define ZLH_PATRONI "/usr/bin/patroni"
#endif
#ifndef ZLH_ETCD
#define ZLH_ETCD "/usr/bin/etcd"
#endif
#define SUPERUSER "zlane"       // the clusters' superuser
#define REPLICATOR "replicator" // their replication user
#define SCOPE "zlh"             // Patroni's cluster name (the etcd key prefix)
// one node's connection string: its port, the superuser's password
#define NODE_CONNINFO                                                                              \
    "host=127.0.0.1 port=%d dbname=postgres user=" SUPERUSER " password=%s connect_timeout=2"
#define MAX_CLUSTERS 4
#define ETCD_READY_MS 30000 // etcd answering /health
#define SPAWN_MS 10000      // the keeper's answer to a start command
#define AGENT_STOP_MS 20000 // Patroni stopping its PostgreSQL and exiting, before SIGKILL
#define ETCD_STOP_MS 5000
#define KEEPER_MS 10000 // the keeper killing what is left and exiting
#define KILL_MS 5000    // a SIGKILLed process gone
#define HTTP_MS 1000    // one REST API request
#define POLL_MS 20      // between two looks in the waits
#define LOG_TAIL_BYTES 4096

// What the keeper can start: etcd and the Patroni nodes.
enum { PROC_NODE0, PROC_NODE1, PROC_ETCD, N_PROCS };

// A program to run: argv and envp point into pool.
typedef struct {
    char pool[8192];
    size_t used;
    char *argv[32];
    int argc;
    char *envp[8];
    int envc;
    char cwd[PATH_MAX + 16];
    char log[PATH_MAX + 32];
} s_spec_t;

typedef struct {
    pid_t pid; // -1 if not started, or seen gone
    int pidfd; // -1 then
} s_proc_t;

typedef struct {
    char dir[PATH_MAX + 8]; // <dir>/nK
    char data[PATH_MAX + 16];
    char conf[PATH_MAX + 32];
    char conninfo[512];
    char probe_conninfo[600]; // the same, with a statement_timeout
    int pg_port;
    int api_port;
    PGconn *probe; // a connection the waits keep while they poll, or NULL
} s_node_t;

struct _zlh_patroni_t {
    char dir[PATH_MAX]; // the temp dir (a real path: matched against /proc/<pid>/cwd)
    char etcd_dir[PATH_MAX + 16];
    char etcd_log[PATH_MAX + 16];
    char bindir[PATH_MAX];
    char patroni[PATH_MAX];
    char etcd[PATH_MAX];
    char su_password[33]; // 32 hex digits each
    char repl_password[33];
    char api_password[33];
    char conninfo[1024];
    char err[1024];
    int etcd_client_port;
    int etcd_peer_port;
    int reserved[6]; // the bound sockets that hold the ports, or -1
    s_node_t nodes[ZLH_PATRONI_NODES];
    s_spec_t specs[N_PROCS];
    s_proc_t procs[N_PROCS];
    s_proc_t keeper;  // our child
    pid_t keeper_pid; // the same, until reaped (keeper.pid is -1 once it is seen gone)
    int sock;         // to the keeper, or -1
    int killed;       // the node zlh_patroni_kill_primary killed, or -1
    int64_t killed_at_ms;
    bool drop; // run the cluster as uid/gid (the test runs as root)
    uid_t uid;
    gid_t gid;
};

static zlh_patroni_t *s_clusters[MAX_CLUSTERS];
static pid_t s_owner; // the process that started them (not a forked child): 0 until then

// ---------------------------------------------------------------- small helpers

// Record why the current call failed, print it, and return -1.
static int
s_fail (zlh_patroni_t *self, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (self->err, sizeof self->err, fmt, ap);
    va_end (ap);
    fprintf (stderr, "patroni_harness: %s\n", self->err);
    return -1;
}

static void
s_random_hex (char out[33])
{
    uint8_t raw[16];
    if (getrandom (raw, sizeof raw, 0) != (ssize_t)sizeof raw) // a 16-byte read does not fail
        abort ();
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf (out + 2 * i, 3, "%02x", raw[i]);
}

// Write `text` to a new file at `path` (mode 0600, owned by the server
// user). Returns 0 or -1.
static int
s_write_file (zlh_patroni_t *self, const char *path, const char *text)
{
    int fd = open (path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    size_t len = strlen (text);
    bool ok = fd >= 0 && write (fd, text, len) == (ssize_t)len &&
              (!self->drop || fchown (fd, self->uid, self->gid) == 0);
    if (fd >= 0 && close (fd) < 0)
        ok = false;
    return ok ? 0 : s_fail (self, "write %s: %s", path, strerror (errno));
}

static int
s_make_subdir (zlh_patroni_t *self, const char *path)
{
    if (mkdir (path, 0700) < 0 || (self->drop && chown (path, self->uid, self->gid) < 0))
        return s_fail (self, "mkdir %s: %s", path, strerror (errno));
    return 0;
}

// ---------------------------------------------------------------- /proc
// Return true if process `pid` works in `dir` or below it (its cwd).
static bool
s_proc_under (pid_t pid, const char *dir)
{
    char link[64], cwd[PATH_MAX];
    snprintf (link, sizeof link, "/proc/%d/cwd", (int)pid);
    ssize_t n = readlink (link, cwd, sizeof cwd - 1);
    if (n <= 0)
        return false;
    cwd[n] = '\0';
    size_t len = strlen (dir);
    return strncmp (cwd, dir, len) == 0 && (cwd[len] == '\0' || cwd[len] == '/');
}

// Read process `pid`'s state letter and parent from /proc/<pid>/stat.
// Returns 0 or -1 (gone).
static int
s_proc_stat (pid_t pid, char *state, pid_t *ppid)
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
    int parent;
    if (!p || sscanf (p + 1, " %c %d", state, &parent) != 2)
        return -1;
    *ppid = (pid_t)parent;
    return 0;
}

// Call `fn` for every process in /proc (stopping early if it returns false).
static void
s_proc_each (bool (*fn) (pid_t pid, void *arg), void *arg)
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
        if (!fn ((pid_t)pid, arg))
            break;
    }
    closedir (proc);
}

// ---------------------------------------------------------------- processes we hold
// Return true while the process runs; once it is seen gone, close its pidfd.
static bool
s_proc_alive (s_proc_t *proc)
{
    if (proc->pid <= 0)
        return false;
    struct pollfd pfd = {proc->pidfd, POLLIN, 0};
    if (poll (&pfd, 1, 0) == 0)
        return true;
    close (proc->pidfd);
    proc->pid = -1;
    proc->pidfd = -1;
    return false;
}

// Wait until `deadline_ms` for the process to exit. Returns 0 (gone) or -1.
static int
s_proc_wait (s_proc_t *proc, int64_t deadline_ms)
{
    while (s_proc_alive (proc)) {
        int64_t left = deadline_ms - zlh_now_ms ();
        if (left <= 0)
            return -1;
        struct pollfd pfd = {proc->pidfd, POLLIN, 0}; // readable once it exits
        poll (&pfd, 1, (int)left);
    }
    return 0;
}

// SIGKILL the process and wait (KILL_MS) for it to go.
static void
s_proc_kill (s_proc_t *proc)
{
    if (!s_proc_alive (proc))
        return;
    zlh_pidfd_kill (proc->pidfd, SIGKILL);
    if (s_proc_wait (proc, zlh_now_ms () + KILL_MS) < 0)
        fprintf (stderr, "patroni_harness: pid %d outlived SIGKILL for %d ms\n", (int)proc->pid,
                 KILL_MS);
}

// ---------------------------------------------------------------- the keeper
// (runs in the forked keeper process; see the comment at the top)

// Reap every child that has exited.
static void
s_keeper_reap (void)
{
    while (waitpid (-1, NULL, WNOHANG) > 0)
        ;
}

static bool
s_keeper_kill_child (pid_t pid, void *arg)
{
    char state;
    pid_t ppid;
    if (s_proc_stat (pid, &state, &ppid) == 0 && ppid == getpid () && state != 'Z') {
        kill (pid, SIGKILL); // our unreaped child: the pid cannot have been reused
        (*(int *)arg)++;
    }
    return true;
}

// SIGKILL every child, and every orphan that becomes one, until there are
// none (at most KEEPER_MS). Returns true if there was anything to kill.
static bool
s_keeper_sweep (int sfd)
{
    bool killed = false;
    int64_t deadline = zlh_now_ms () + KEEPER_MS;
    for (;;) {
        s_keeper_reap ();
        int n = 0;
        s_proc_each (s_keeper_kill_child, &n);
        killed |= n > 0;
        if (n == 0 && waitpid (-1, NULL, WNOHANG) < 0 && errno == ECHILD)
            return killed;
        if (zlh_now_ms () >= deadline)
            return true;
        struct pollfd pfd = {sfd, POLLIN, 0}; // a SIGCHLD, or look again after 50 ms
        if (poll (&pfd, 1, 50) > 0) {
            struct signalfd_siginfo si[8];
            if (read (sfd, si, sizeof si) < 0)
                return true;
        }
    }
}

// Fork and exec `spec` as described at the top. Returns the PID or -1.
static pid_t
s_keeper_exec (const zlh_patroni_t *self, const s_spec_t *spec)
{
    int out = open (spec->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int devnull = open ("/dev/null", O_RDONLY | O_CLOEXEC);
    if (out < 0 || devnull < 0) {
        if (out >= 0)
            close (out);
        if (devnull >= 0)
            close (devnull);
        return -1;
    }
    if (self->drop && fchown (out, self->uid, self->gid) < 0) {
        close (out);
        close (devnull);
        return -1;
    }
    pid_t pid = fork ();
    if (pid == 0) {
        setpgid (0, 0);
        sigset_t none;
        sigemptyset (&none);
        sigprocmask (SIG_SETMASK, &none, NULL);
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        for (int sig = 1; sig < NSIG; sig++)
            sigaction (sig, &dfl, NULL); // fails harmlessly for SIGKILL, SIGSTOP
        dup2 (devnull, 0);
        dup2 (out, 1);
        dup2 (out, 2);
        close_range (3, ~0U, 0);
        const char *step = "execve";
        if (chdir (spec->cwd) < 0)
            step = "chdir";
        else if (self->drop && setgroups (0, NULL) < 0)
            step = "setgroups";
        else if (self->drop && setgid (self->gid) < 0)
            step = "setgid";
        else if (self->drop && setuid (self->uid) < 0)
            step = "setuid";
        else
            execve (spec->argv[0], spec->argv, spec->envp);
        // into the log; async-signal-safe calls only
        const char *parts[] = {"patroni_harness: keeper: ", step, " ", spec->argv[0], " failed\n"};
        for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
            if (write (2, parts[i], strlen (parts[i])) < 0)
                break;
        _exit (127);
    }
    close (out);
    close (devnull);
    return pid;
}

// Start spec `what` and answer {pid, errno} with a pidfd attached.
static void
s_keeper_start (const zlh_patroni_t *self, unsigned what, int sock)
{
    int32_t reply[2] = {-1, EINVAL};
    int pidfd = -1;
    if (what < N_PROCS) {
        pid_t pid = s_keeper_exec (self, &self->specs[what]);
        if (pid > 0)
            pidfd = zlh_pidfd_open (pid); // our unreaped child: the right process
        reply[0] = pid > 0 && pidfd >= 0 ? (int32_t)pid : -1;
        reply[1] = reply[0] > 0 ? 0 : errno;
        if (pid > 0 && pidfd < 0)
            kill (pid, SIGKILL); // reaped with the rest
    }
    struct iovec iov = {reply, sizeof reply};
    union {
        char buf[CMSG_SPACE (sizeof (int))];
        struct cmsghdr align;
    } control;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (pidfd >= 0) {
        msg.msg_control = control.buf;
        msg.msg_controllen = sizeof control.buf;
        struct cmsghdr *cmsg = CMSG_FIRSTHDR (&msg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN (sizeof (int));
        memcpy (CMSG_DATA (cmsg), &pidfd, sizeof (int));
    }
    sendmsg (sock, &msg, MSG_NOSIGNAL); // if the test process is gone, the next recv says so
    if (pidfd >= 0)
        close (pidfd);
}

// Close every descriptor above stderr but `a` and `b`.
static void
s_close_all_but (int a, int b)
{
    int lo = a < b ? a : b, hi = a < b ? b : a;
    if (lo > 3)
        close_range (3, (unsigned)lo - 1, 0);
    if (hi > lo + 1)
        close_range ((unsigned)lo + 1, (unsigned)hi - 1, 0);
    close_range ((unsigned)hi + 1, ~0U, 0);
}

static void __attribute__ ((noreturn)) s_keeper_main (const zlh_patroni_t *self, int sock)
{
    setsid (); // signals to the test's process group or terminal do not reach the cluster
    prctl (PR_SET_CHILD_SUBREAPER, 1);
    sigset_t mask;
    sigemptyset (&mask);
    sigaddset (&mask, SIGCHLD);
    sigaddset (&mask, SIGTERM);
    sigaddset (&mask, SIGINT);
    sigaddset (&mask, SIGHUP);
    sigprocmask (SIG_BLOCK, &mask, NULL);
    signal (SIGPIPE, SIG_IGN);
    int sfd = signalfd (-1, &mask, SFD_CLOEXEC);
    if (sfd < 0)
        _exit (2);
    s_close_all_but (sock, sfd); // the test's sockets, pidfds and reserved ports are not ours

    for (bool done = false; !done;) {
        struct pollfd pfds[2] = {{sock, POLLIN, 0}, {sfd, POLLIN, 0}};
        if (poll (pfds, 2, -1) < 0 && errno != EINTR)
            break;
        if (pfds[1].revents & POLLIN) {
            struct signalfd_siginfo si[8];
            ssize_t n = read (sfd, si, sizeof si);
            for (ssize_t i = 0; i < n / (ssize_t)sizeof si[0]; i++)
                if (si[i].ssi_signo != SIGCHLD)
                    done = true;
            s_keeper_reap ();
        }
        if (!done && pfds[0].revents) {
            unsigned char what;
            if (recv (sock, &what, 1, 0) == 1)
                s_keeper_start (self, what, sock);
            else
                done = true; // closed: stop, or the test process died
        }
    }
    _exit (s_keeper_sweep (sfd) ? 1 : 0);
}

// Fork the keeper. Returns 0 or -1.
static int
s_keeper_fork (zlh_patroni_t *self)
{
    int sv[2];
    if (socketpair (AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return s_fail (self, "socketpair: %s", strerror (errno));
    fflush (NULL); // nothing buffered printed twice
    pid_t pid = fork ();
    if (pid < 0) {
        close (sv[0]);
        close (sv[1]);
        return s_fail (self, "fork: %s", strerror (errno));
    }
    if (pid == 0) {
        close (sv[0]);
        s_keeper_main (self, sv[1]);
    }
    close (sv[1]);
    self->sock = sv[0];
    self->keeper.pid = self->keeper_pid = pid;
    self->keeper.pidfd = zlh_pidfd_open (pid); // our unreaped child
    if (self->keeper.pidfd < 0) {
        kill (pid, SIGKILL);
        waitpid (pid, NULL, 0);
        self->keeper.pid = self->keeper_pid = -1;
        return s_fail (self, "pidfd_open: %s (Linux >= 5.3 is needed)", strerror (errno));
    }
    return 0;
}

// Ask the keeper to start `what`. Returns 0 (self->procs[what] set) or -1.
static int
s_keeper_run (zlh_patroni_t *self, int what)
{
    const char *name = self->specs[what].argv[0];
    unsigned char cmd = (unsigned char)what;
    if (send (self->sock, &cmd, 1, MSG_NOSIGNAL) != 1)
        return s_fail (self, "keeper: send: %s", strerror (errno));
    struct pollfd pfd = {self->sock, POLLIN, 0};
    if (poll (&pfd, 1, SPAWN_MS) != 1)
        return s_fail (self, "keeper: no answer within %d ms to starting %s", SPAWN_MS, name);
    int32_t reply[2];
    struct iovec iov = {reply, sizeof reply};
    union {
        char buf[CMSG_SPACE (sizeof (int))];
        struct cmsghdr align;
    } control;
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = control.buf,
                         .msg_controllen = sizeof control.buf};
    ssize_t n = recvmsg (self->sock, &msg, MSG_CMSG_CLOEXEC);
    int pidfd = -1;
    struct cmsghdr *cmsg = n > 0 ? CMSG_FIRSTHDR (&msg) : NULL;
    if (cmsg && cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS)
        memcpy (&pidfd, CMSG_DATA (cmsg), sizeof (int));
    if (n != (ssize_t)sizeof reply || reply[0] <= 0 || pidfd < 0) {
        if (pidfd >= 0)
            close (pidfd);
        return s_fail (self, "keeper: could not start %s: %s", name,
                       n == (ssize_t)sizeof reply ? strerror (reply[1]) : "no answer");
    }
    self->procs[what] = (s_proc_t){reply[0], pidfd};
    return 0;
}

// ---------------------------------------------------------------- HTTP
// GET `path` from 127.0.0.1:`port` (HTTP/1.0, read to the end). Returns
// the status code, or -1 if there was no answer within HTTP_MS.
static int
s_http_status (int port, const char *path)
{
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons ((uint16_t)port)};
    sa.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    int64_t deadline = zlh_now_ms () + HTTP_MS;
    int status = -1;
    char req[256], buf[4096];
    int len =
        snprintf (req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1:%d\r\n\r\n", path, port);
    size_t sent = 0, got = 0;
    if (connect (fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS)
        goto done;
    for (;;) {
        int64_t left = deadline - zlh_now_ms ();
        struct pollfd pfd = {fd, sent < (size_t)len ? POLLOUT : POLLIN, 0};
        if (left <= 0 || poll (&pfd, 1, (int)left) <= 0)
            goto done;
        if (sent < (size_t)len) {
            ssize_t n = send (fd, req + sent, (size_t)len - sent, MSG_NOSIGNAL);
            if (n < 0 && errno != EAGAIN)
                goto done;
            sent += n > 0 ? (size_t)n : 0;
            continue;
        }
        ssize_t n = recv (fd, buf + got, sizeof buf - 1 - got, 0);
        if (n < 0 && errno == EAGAIN)
            continue;
        got += n > 0 ? (size_t)n : 0;
        if (n > 0 && got < sizeof buf - 1)
            continue;
        // the end (or more than a status needs): "HTTP/1.x NNN ..."
        buf[got] = '\0';
        int code;
        if (sscanf (buf, "HTTP/%*d.%*d %d", &code) == 1)
            status = code;
        goto done;
    }
done:
    close (fd);
    return status;
}

// ---------------------------------------------------------------- set-up steps
// As root, find (or create with useradd) the server user. Copied in small
// from pg_harness.c's s_server_user (static there): the same user, the same
// $ZLANE_PG_USER. Returns 0 or -1.
static int
s_server_user (zlh_patroni_t *self)
{
    char why[256];
    if (zlh_server_user (&self->drop, &self->uid, &self->gid, why, sizeof why) == 0)
        return 0;
    return s_fail (self, "%s", why);
}

// Make the temp dir (owned by the server user), the dirs in it and the paths.
static int
s_make_dirs (zlh_patroni_t *self)
{
    const char *base = getenv ("TMPDIR");
    char tmpl[PATH_MAX];
    snprintf (tmpl, sizeof tmpl, "%s/zlh-patroni-XXXXXX", base && base[0] ? base : "/tmp");
    if (!mkdtemp (tmpl))
        return s_fail (self, "mkdtemp %s: %s", tmpl, strerror (errno));
    if (!realpath (tmpl, self->dir)) {
        rmdir (tmpl);
        return s_fail (self, "realpath %s: %s", tmpl, strerror (errno));
    }
    // quoted in patroni.yml; the unix sockets' paths must fit sockaddr_un
    if (strpbrk (self->dir, "'\\\n\"") || strlen (self->dir) > 80) {
        int rc = s_fail (self, "temp dir %s: too long or has quotes (set TMPDIR)", self->dir);
        rmdir (self->dir);
        self->dir[0] = '\0';
        return rc;
    }
    if (self->drop && chown (self->dir, self->uid, self->gid) < 0) {
        int rc = s_fail (self, "chown %s: %s", self->dir, strerror (errno));
        rmdir (self->dir);
        self->dir[0] = '\0';
        return rc;
    }
    snprintf (self->etcd_dir, sizeof self->etcd_dir, "%s/etcd", self->dir);
    snprintf (self->etcd_log, sizeof self->etcd_log, "%s/etcd.log", self->dir);
    if (s_make_subdir (self, self->etcd_dir) < 0)
        return -1;
    for (int i = 0; i < ZLH_PATRONI_NODES; i++) {
        s_node_t *node = &self->nodes[i];
        snprintf (node->dir, sizeof node->dir, "%s/n%d", self->dir, i);
        snprintf (node->data, sizeof node->data, "%s/n%d/data", self->dir, i);
        snprintf (node->conf, sizeof node->conf, "%s/n%d/patroni.yml", self->dir, i);
        if (s_make_subdir (self, node->dir) < 0)
            return -1;
    }
    return 0;
}

// Take the six ports (see the comment at the top) and write the
// connection strings. Returns 0 or -1.
static int
s_reserve_ports (zlh_patroni_t *self)
{
    int ports[6];
    for (int i = 0; i < 6; i++) {
        int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
        sa.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
        socklen_t len = sizeof sa;
        int on = 1;
        if (fd < 0 || bind (fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
            getsockname (fd, (struct sockaddr *)&sa, &len) < 0 ||
            setsockopt (fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) < 0) {
            int rc = s_fail (self, "no free port on 127.0.0.1: %s", strerror (errno));
            if (fd >= 0)
                close (fd);
            return rc;
        }
        self->reserved[i] = fd;
        ports[i] = ntohs (sa.sin_port);
    }
    self->etcd_client_port = ports[4];
    self->etcd_peer_port = ports[5];
    for (int i = 0; i < ZLH_PATRONI_NODES; i++) {
        s_node_t *node = &self->nodes[i];
        node->pg_port = ports[2 * i];
        node->api_port = ports[2 * i + 1];
        snprintf (node->conninfo, sizeof node->conninfo, NODE_CONNINFO, node->pg_port,
                  self->su_password);
        snprintf (node->probe_conninfo, sizeof node->probe_conninfo,
                  NODE_CONNINFO " options='-c statement_timeout=2000'", node->pg_port,
                  self->su_password);
    }
    snprintf (self->conninfo, sizeof self->conninfo,
              "host=127.0.0.1,127.0.0.1 port=%d,%d dbname=postgres user=" SUPERUSER
              " password=%s connect_timeout=2 target_session_attrs=read-write",
              self->nodes[0].pg_port, self->nodes[1].pg_port, self->su_password);
    return 0;
}

// Append an argument (or, with `env`, an environment entry) to `spec`.
static void
s_spec_add (s_spec_t *spec, bool env, const char *fmt, ...)
{
    char *at = spec->pool + spec->used;
    size_t room = sizeof spec->pool - spec->used;
    va_list ap;
    va_start (ap, fmt);
    int n = vsnprintf (at, room, fmt, ap);
    va_end (ap);
    // the specs are fixed and small: running out of room is a bug here
    if (n < 0 || (size_t)n >= room ||
        spec->argc + 1 >= (int)(sizeof spec->argv / sizeof (char *)) ||
        spec->envc + 1 >= (int)(sizeof spec->envp / sizeof (char *)))
        abort ();
    spec->used += (size_t)n + 1;
    if (env)
        spec->envp[spec->envc++] = at;
    else
        spec->argv[spec->argc++] = at;
}

// The fixed environment: nothing of the test's ($ETCD_*, $PATRONI_* and
// $PG* would change their configuration).
static void
s_spec_env (s_spec_t *spec)
{
    s_spec_add (spec, true, "PATH=/usr/bin:/bin");
    s_spec_add (spec, true, "LANG=C.UTF-8");
    s_spec_add (spec, true, "LC_ALL=C.UTF-8");
    s_spec_add (spec, true, "TZ=UTC");
    s_spec_add (spec, true, "HOME=%s", spec->cwd);
}

static void
s_etcd_spec (zlh_patroni_t *self)
{
    s_spec_t *spec = &self->specs[PROC_ETCD];
    snprintf (spec->cwd, sizeof spec->cwd, "%s", self->etcd_dir);
    snprintf (spec->log, sizeof spec->log, "%s", self->etcd_log);
    s_spec_env (spec);
    char token[33];
    s_random_hex (token);
    s_spec_add (spec, false, "%s", self->etcd);
    s_spec_add (spec, false, "--name=e0");
    s_spec_add (spec, false, "--data-dir=%s/data", self->etcd_dir);
    s_spec_add (spec, false, "--listen-client-urls=http://127.0.0.1:%d", self->etcd_client_port);
    s_spec_add (spec, false, "--advertise-client-urls=http://127.0.0.1:%d", self->etcd_client_port);
    s_spec_add (spec, false, "--listen-peer-urls=http://127.0.0.1:%d", self->etcd_peer_port);
    s_spec_add (spec, false, "--initial-advertise-peer-urls=http://127.0.0.1:%d",
                self->etcd_peer_port);
    s_spec_add (spec, false, "--initial-cluster=e0=http://127.0.0.1:%d", self->etcd_peer_port);
    s_spec_add (spec, false, "--initial-cluster-state=new");
    s_spec_add (spec, false, "--initial-cluster-token=%s", token);
    s_spec_add (spec, false, "--logger=zap");
}

// Write node `i`'s patroni.yml and its spec. Returns 0 or -1.
static int
s_node_setup (zlh_patroni_t *self, int i)
{
    s_node_t *node = &self->nodes[i];
    char *yml = zl_malloc (8192);
    int n = snprintf (
        yml, 8192,
        "# tests/support/patroni_harness.c: node n%d of a throwaway cluster\n"
        "scope: " SCOPE "\n"
        "name: n%d\n"
        "log:\n"
        "  level: INFO\n"
        "restapi:\n"
        "  listen: 127.0.0.1:%d\n"
        "  connect_address: 127.0.0.1:%d\n"
        "  authentication: {username: zlane, password: '%s'}\n" // for its writes; GETs are open
        "etcd3:\n"
        "  hosts: 127.0.0.1:%d\n"
        "bootstrap:\n"
        "  dcs:\n"
        // Patroni 3.0 takes whole seconds, loop_wait 1 the least; it wants
        // ttl >= loop_wait + 2 * retry_timeout. A dead postmaster is noticed
        // within a loop_wait and the leader key released at once, so the
        // failover does not wait for the ttl (that is for a dead Patroni);
        // retry_timeout 4 leaves room for a loaded machine's slow etcd
        "    ttl: 10\n"
        "    loop_wait: 1\n"
        "    retry_timeout: 4\n"
        "    maximum_lag_on_failover: 1048576\n"
        // a crashed primary is failed over, not restarted in place
        "    primary_start_timeout: 0\n"
        // commits wait for the standby, and only the standby named in etcd's
        // /sync key may be promoted; not strict, so that a primary left alone
        // (its standby down, or just promoted) keeps taking writes: strict
        // would hold every write after a failover until the old primary is
        // back as a standby (5-10 s more)
        "    synchronous_mode: true\n"
        "    synchronous_mode_strict: false\n"
        "    synchronous_node_count: 1\n"
        "    postgresql:\n"
        "      use_pg_rewind: true\n" // the old primary rejoins as a standby
        "      use_slots: true\n"
        "      parameters:\n"
        "        fsync: 'on'\n"
        "        synchronous_commit: 'on'\n"
        "        full_page_writes: 'on'\n"
        "        max_connections: 30\n"
        "        shared_buffers: 16MB\n"
        "        huge_pages: 'off'\n"
        "  initdb:\n"
        "    - encoding: UTF8\n"
        "    - locale: C\n"
        "  pg_hba:\n"
        "    - local all all scram-sha-256\n"
        "    - host all all 127.0.0.1/32 scram-sha-256\n"
        "    - host replication " REPLICATOR " 127.0.0.1/32 scram-sha-256\n"
        "postgresql:\n"
        "  listen: 127.0.0.1:%d\n"
        "  connect_address: 127.0.0.1:%d\n"
        "  data_dir: '%s'\n"
        "  bin_dir: '%s'\n"
        "  pgpass: '%s/pgpass'\n"
        "  remove_data_directory_on_rewind_failure: true\n" // then it clones the primary
        "  remove_data_directory_on_diverged_timelines: true\n"
        "  authentication:\n"
        "    superuser: {username: " SUPERUSER ", password: '%s'}\n"
        "    replication: {username: " REPLICATOR ", password: '%s'}\n"
        "  parameters:\n"
        "    unix_socket_directories: '%s'\n"
        "    logging_collector: 'off'\n"
        "    log_line_prefix: '%%m [%%p] %%q%%u@%%d '\n"
        "    log_timezone: UTC\n"
        "    timezone: UTC\n"
        "    lc_messages: C\n"
        "watchdog:\n"
        "  mode: 'off'\n"
        "tags: {nofailover: false, noloadbalance: false, clonefrom: false, nosync: false}\n",
        i, i, node->api_port, node->api_port, self->api_password, self->etcd_client_port,
        node->pg_port, node->pg_port, node->data, self->bindir, node->dir, self->su_password,
        self->repl_password, node->dir);
    int rc = n > 0 && n < 8192 ? s_write_file (self, node->conf, yml)
                               : s_fail (self, "patroni.yml of n%d: too long", i);
    free (yml);

    s_spec_t *spec = &self->specs[PROC_NODE0 + i];
    snprintf (spec->cwd, sizeof spec->cwd, "%s", node->dir);
    snprintf (spec->log, sizeof spec->log, "%s/patroni.log", node->dir);
    s_spec_env (spec);
    s_spec_add (spec, false, "%s", self->patroni);
    s_spec_add (spec, false, "%s", node->conf);
    return rc;
}

// Wait for etcd to answer /health with 200. Returns 0 or -1.
static int
s_wait_etcd (zlh_patroni_t *self)
{
    int64_t deadline = zlh_now_ms () + ETCD_READY_MS;
    for (;;) {
        if (s_http_status (self->etcd_client_port, "/health") == 200)
            return 0;
        if (!s_proc_alive (&self->procs[PROC_ETCD]))
            return s_fail (self, "etcd exited before answering on 127.0.0.1:%d",
                           self->etcd_client_port);
        if (zlh_now_ms () >= deadline)
            return s_fail (self, "etcd did not answer /health on 127.0.0.1:%d within %d ms",
                           self->etcd_client_port, ETCD_READY_MS);
        poll (NULL, 0, POLL_MS);
    }
}

// ---------------------------------------------------------------- probing the nodes
static void
s_close_probes (zlh_patroni_t *self)
{
    for (int i = 0; i < ZLH_PATRONI_NODES; i++) {
        PQfinish (self->nodes[i].probe);
        self->nodes[i].probe = NULL;
    }
}

// Run `sql` (one value) on node `i` through its probe connection (made if
// need be). Returns the value's first character, or 0 if the node did not
// answer (the probe then closed).
static char
s_probe (zlh_patroni_t *self, int i, const char *sql)
{
    s_node_t *node = &self->nodes[i];
    if (!node->probe) {
        node->probe = PQconnectdb (node->probe_conninfo);
        if (PQstatus (node->probe) != CONNECTION_OK) {
            PQfinish (node->probe);
            node->probe = NULL;
            return 0;
        }
    }
    PGresult *res = PQexec (node->probe, sql);
    char v = 0;
    if (PQresultStatus (res) == PGRES_TUPLES_OK && PQntuples (res) == 1 && PQnfields (res) == 1)
        v = PQgetvalue (res, 0, 0)[0];
    PQclear (res);
    if (!v) {
        PQfinish (node->probe);
        node->probe = NULL;
    }
    return v;
}

// Return true if node `i` is the primary: its server out of recovery and
// its Patroni answering /primary (it holds the leader key).
static bool
s_is_primary (zlh_patroni_t *self, int i)
{
    return s_probe (self, i, "SELECT pg_catalog.pg_is_in_recovery()") == 'f' &&
           s_http_status (self->nodes[i].api_port, "/primary") == 200;
}

// Return the only primary, or -1.
static int
s_find_primary (zlh_patroni_t *self)
{
    int primary = -1, n = 0;
    for (int i = 0; i < ZLH_PATRONI_NODES; i++)
        if (s_is_primary (self, i)) {
            primary = i;
            n++;
        }
    return n == 1 ? primary : -1;
}

// Return 0 while etcd and both Patroni processes run, else -1 (the reason set).
static int
s_check_procs (zlh_patroni_t *self)
{
    if (!s_proc_alive (&self->procs[PROC_ETCD]))
        return s_fail (self, "etcd has exited (see %s)", self->etcd_log);
    for (int i = 0; i < ZLH_PATRONI_NODES; i++)
        if (!s_proc_alive (&self->procs[PROC_NODE0 + i]))
            return s_fail (self, "Patroni of n%d has exited (see %s/patroni.log)", i,
                           self->nodes[i].dir);
    return 0;
}

// ---------------------------------------------------------------- stopping
static bool
s_kill_under_dir (pid_t pid, void *arg)
{
    zlh_patroni_t *self = arg;
    if (!s_proc_under (pid, self->dir))
        return true;
    s_proc_t proc = {pid, zlh_pidfd_open (pid)};
    // looked at again once the pidfd holds it: the pid was not reused meanwhile
    if (proc.pidfd >= 0 && s_proc_under (pid, self->dir)) {
        fprintf (stderr, "patroni_harness: pid %d still works in %s: SIGKILL\n", (int)pid,
                 self->dir);
        s_proc_kill (&proc);
    }
    if (proc.pidfd >= 0)
        close (proc.pidfd);
    return true;
}

// Stop everything (see zlh_patroni_stop). Returns 0 or -1 (something killed).
static int
s_shutdown (zlh_patroni_t *self)
{
    bool killed = false;
    s_close_probes (self);
    // Patroni stops its PostgreSQL on SIGTERM; both at once
    for (int i = 0; i < N_PROCS; i++)
        if (i != PROC_ETCD && s_proc_alive (&self->procs[i]))
            zlh_pidfd_kill (self->procs[i].pidfd, SIGTERM);
    int64_t deadline = zlh_now_ms () + AGENT_STOP_MS;
    for (int i = 0; i < N_PROCS; i++)
        if (i != PROC_ETCD && s_proc_wait (&self->procs[i], deadline) < 0) {
            fprintf (stderr, "patroni_harness: Patroni of n%d did not stop within %d ms: SIGKILL\n",
                     i, AGENT_STOP_MS);
            s_proc_kill (&self->procs[i]);
            killed = true;
        }
    if (s_proc_alive (&self->procs[PROC_ETCD])) {
        zlh_pidfd_kill (self->procs[PROC_ETCD].pidfd, SIGTERM);
        if (s_proc_wait (&self->procs[PROC_ETCD], zlh_now_ms () + ETCD_STOP_MS) < 0) {
            fprintf (stderr, "patroni_harness: etcd did not stop within %d ms: SIGKILL\n",
                     ETCD_STOP_MS);
            s_proc_kill (&self->procs[PROC_ETCD]);
            killed = true;
        }
    }
    // the keeper kills what is left (a postmaster whose Patroni was killed) and exits
    if (self->sock >= 0) {
        close (self->sock);
        self->sock = -1;
    }
    if (self->keeper_pid > 0) {
        pid_t pid = self->keeper_pid;
        self->keeper_pid = -1;
        if (s_proc_wait (&self->keeper, zlh_now_ms () + KEEPER_MS + KILL_MS) < 0) {
            fprintf (stderr, "patroni_harness: the keeper did not exit: SIGKILL\n");
            s_proc_kill (&self->keeper);
        }
        int status = 0;
        waitpid (pid, &status, 0); // exited: does not block
        if (!WIFEXITED (status) || WEXITSTATUS (status) != 0) {
            fprintf (stderr, "patroni_harness: the keeper had processes to SIGKILL (status 0x%x)\n",
                     status);
            killed = true;
        }
    }
    for (int i = 0; i < N_PROCS; i++)
        s_proc_alive (&self->procs[i]); // closes the pidfds of the gone
    // the keeper was killed before it could sweep, say: whatever still works here
    if (self->dir[0])
        s_proc_each (s_kill_under_dir, self);
    for (int i = 0; i < 6; i++)
        if (self->reserved[i] >= 0) {
            close (self->reserved[i]);
            self->reserved[i] = -1;
        }
    return killed ? -1 : 0;
}

static void
s_at_exit (void)
{
    if (getpid () == s_owner) // a forked child that exits leaves them alone
        zlh_patroni_cleanup ();
}

static void
s_unregister (zlh_patroni_t *self)
{
    for (size_t i = 0; i < MAX_CLUSTERS; i++)
        if (s_clusters[i] == self)
            s_clusters[i] = NULL;
}

static void
s_free (zlh_patroni_t *self)
{
    if (self->dir[0]) {
        if (getenv ("ZLT_KEEP"))
            fprintf (stderr, "patroni_harness: keeping %s\n", self->dir);
        else
            zlh_remove_tree (self->dir);
    }
    s_unregister (self);
    free (self);
}

// ---------------------------------------------------------------- API
static int
s_start (zlh_patroni_t *self)
{
    if (!s_owner) {
        s_owner = getpid ();
        atexit (s_at_exit);
    }
    size_t slot = 0;
    while (slot < MAX_CLUSTERS && s_clusters[slot])
        slot++;
    if (slot == MAX_CLUSTERS)
        return s_fail (self, "more than %d clusters at once", MAX_CLUSTERS);
    s_clusters[slot] = self;

    const char *env = getenv ("ZLANE_PG_BINDIR");
    snprintf (self->bindir, sizeof self->bindir, "%s", env && env[0] ? env : ZLH_PG_BINDIR);
    env = getenv ("ZLANE_PATRONI");
    snprintf (self->patroni, sizeof self->patroni, "%s", env && env[0] ? env : ZLH_PATRONI);
    env = getenv ("ZLANE_ETCD");
    snprintf (self->etcd, sizeof self->etcd, "%s", env && env[0] ? env : ZLH_ETCD);
    const char *need[] = {self->patroni, self->etcd};
    for (size_t i = 0; i < 2; i++)
        if (access (need[i], X_OK) < 0)
            return s_fail (self, "%s: %s (Debian: patroni, etcd-server; scripts/deps.sh --test)",
                           need[i], strerror (errno));
    char pg_ctl[PATH_MAX + 16];
    snprintf (pg_ctl, sizeof pg_ctl, "%s/pg_ctl", self->bindir);
    if (access (pg_ctl, X_OK) < 0)
        return s_fail (self, "%s: %s (set ZLANE_PG_BINDIR)", pg_ctl, strerror (errno));

    s_random_hex (self->su_password);
    s_random_hex (self->repl_password);
    s_random_hex (self->api_password);
    if (s_server_user (self) < 0 || s_make_dirs (self) < 0 || s_reserve_ports (self) < 0)
        return -1;
    s_etcd_spec (self);
    for (int i = 0; i < ZLH_PATRONI_NODES; i++)
        if (s_node_setup (self, i) < 0)
            return -1;
    if (s_keeper_fork (self) < 0 || s_keeper_run (self, PROC_ETCD) < 0 || s_wait_etcd (self) < 0)
        return -1;
    for (int i = 0; i < ZLH_PATRONI_NODES; i++)
        if (s_keeper_run (self, PROC_NODE0 + i) < 0)
            return -1;
    return 0;
}

zlh_patroni_t *
zlh_patroni_start (char *err, size_t err_size)
{
    zlh_patroni_t *self = ZL_NEW (zlh_patroni_t);
    self->sock = -1;
    self->killed = -1;
    self->keeper = (s_proc_t){-1, -1};
    for (int i = 0; i < N_PROCS; i++)
        self->procs[i] = (s_proc_t){-1, -1};
    for (int i = 0; i < 6; i++)
        self->reserved[i] = -1;
    if (s_start (self) == 0) {
        if (err_size)
            err[0] = '\0';
        return self;
    }
    if (err_size)
        snprintf (err, err_size, "%s", self->err);
    if (self->keeper_pid > 0) // something ran: its logs say why it failed
        zlh_patroni_dump_logs (self, LOG_TAIL_BYTES);
    s_shutdown (self);
    s_free (self);
    return NULL;
}

int
zlh_patroni_wait_ready (zlh_patroni_t *self, int timeout_ms)
{
    self->err[0] = '\0';
    int64_t deadline = zlh_now_ms () + timeout_ms;
    int rc = -1;
    while (s_check_procs (self) == 0) {
        int p = s_find_primary (self);
        if (p >= 0) {
            char sql[256];
            snprintf (sql, sizeof sql,
                      "SELECT count(*) FROM pg_catalog.pg_stat_replication WHERE "
                      "application_name = 'n%d' AND state = 'streaming' AND sync_state = 'sync'",
                      1 - p);
            if (s_http_status (self->nodes[1 - p].api_port, "/sync") == 200 &&
                s_probe (self, p, sql) == '1') {
                rc = p;
                break;
            }
        }
        if (zlh_now_ms () >= deadline) {
            s_fail (self,
                    "no primary with a synchronous standby within %d ms (n0: /primary %d /sync "
                    "%d; n1: /primary %d /sync %d)",
                    timeout_ms, s_http_status (self->nodes[0].api_port, "/primary"),
                    s_http_status (self->nodes[0].api_port, "/sync"),
                    s_http_status (self->nodes[1].api_port, "/primary"),
                    s_http_status (self->nodes[1].api_port, "/sync"));
            break;
        }
        poll (NULL, 0, POLL_MS);
    }
    s_close_probes (self);
    return rc;
}

const char *
zlh_patroni_conninfo (zlh_patroni_t *self)
{
    return self->conninfo;
}

const char *
zlh_patroni_node_conninfo (zlh_patroni_t *self, int node)
{
    return self->nodes[node].conninfo;
}

int
zlh_patroni_port (zlh_patroni_t *self, int node)
{
    return self->nodes[node].pg_port;
}

int
zlh_patroni_primary (zlh_patroni_t *self)
{
    int p = s_find_primary (self);
    s_close_probes (self);
    return p;
}

pid_t
zlh_patroni_postmaster_pid (zlh_patroni_t *self, int node)
{
    char path[PATH_MAX + 32], buf[32];
    snprintf (path, sizeof path, "%s/postmaster.pid", self->nodes[node].data);
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read (fd, buf, sizeof buf - 1);
    close (fd);
    buf[n > 0 ? n : 0] = '\0';
    pid_t pid = (pid_t)atol (buf);
    // a stale file names a dead (or another) process: the postmaster works in its data dir
    return pid > 0 && s_proc_under (pid, self->nodes[node].data) ? pid : -1;
}

pid_t
zlh_patroni_agent_pid (zlh_patroni_t *self, int node)
{
    s_proc_t *proc = &self->procs[PROC_NODE0 + node];
    return s_proc_alive (proc) ? proc->pid : -1;
}

pid_t
zlh_patroni_etcd_pid (zlh_patroni_t *self)
{
    s_proc_t *proc = &self->procs[PROC_ETCD];
    return s_proc_alive (proc) ? proc->pid : -1;
}

typedef struct {
    const char *dir;
    pid_t *pids;
    size_t max;
    size_t n;
} s_listing_t;

static bool
s_list_under_dir (pid_t pid, void *arg)
{
    s_listing_t *l = arg;
    if (s_proc_under (pid, l->dir)) {
        if (l->n < l->max)
            l->pids[l->n] = pid;
        l->n++;
    }
    return true;
}

size_t
zlh_patroni_processes (zlh_patroni_t *self, pid_t *pids, size_t max)
{
    s_listing_t l = {self->dir, pids, max, 0};
    if (s_proc_alive (&self->keeper)) {
        if (max)
            pids[0] = self->keeper.pid;
        l.n = 1;
    }
    s_proc_each (s_list_under_dir, &l);
    return l.n;
}

int
zlh_patroni_kill_primary (zlh_patroni_t *self)
{
    self->err[0] = '\0';
    int p = zlh_patroni_primary (self);
    if (p < 0)
        return s_fail (self, "no primary to kill");
    pid_t pid = zlh_patroni_postmaster_pid (self, p);
    s_proc_t pm = {pid, pid > 0 ? zlh_pidfd_open (pid) : -1};
    // looked at again once the pidfd holds it: the pid was not reused meanwhile
    if (pm.pidfd < 0 || !s_proc_under (pid, self->nodes[p].data) || !s_proc_alive (&pm)) {
        if (pm.pidfd >= 0)
            close (pm.pidfd);
        return s_fail (self, "the postmaster of n%d (pid %d) is not running", p, (int)pid);
    }
    self->killed_at_ms = zlh_now_ms ();
    self->killed = p;
    zlh_pidfd_kill (pm.pidfd, SIGKILL);
    int rc = s_proc_wait (&pm, zlh_now_ms () + KILL_MS);
    if (pm.pidfd >= 0)
        close (pm.pidfd);
    if (rc < 0)
        return s_fail (self, "the postmaster of n%d (pid %d) outlived SIGKILL for %d ms", p,
                       (int)pid, KILL_MS);
    return p;
}

int64_t
zlh_patroni_wait_failover (zlh_patroni_t *self, int timeout_ms)
{
    self->err[0] = '\0';
    if (self->killed < 0)
        return s_fail (self, "wait_failover: no zlh_patroni_kill_primary before");
    int other = 1 - self->killed;
    int64_t deadline = zlh_now_ms () + timeout_ms;
    int64_t rc = -1;
    while (s_check_procs (self) == 0) {
        if (s_is_primary (self, other) && !s_is_primary (self, self->killed)) {
            rc = zlh_now_ms () - self->killed_at_ms;
            break;
        }
        if (zlh_now_ms () >= deadline) {
            s_fail (self, "n%d did not become the primary within %d ms of n%d's postmaster's kill",
                    other, timeout_ms, self->killed);
            break;
        }
        poll (NULL, 0, POLL_MS);
    }
    s_close_probes (self);
    return rc;
}

const char *
zlh_patroni_error (zlh_patroni_t *self)
{
    return self->err;
}

const char *
zlh_patroni_dir (zlh_patroni_t *self)
{
    return self->dir;
}

void
zlh_patroni_dump_logs (zlh_patroni_t *self, size_t max_bytes)
{
    if (!self || !self->dir[0])
        return;
    zlh_dump_tail ("etcd.log", self->etcd_log, max_bytes);
    for (int i = 0; i < ZLH_PATRONI_NODES; i++) {
        char path[PATH_MAX + 32], title[32];
        snprintf (path, sizeof path, "%s/patroni.log", self->nodes[i].dir);
        snprintf (title, sizeof title, "n%d/patroni.log", i);
        zlh_dump_tail (title, path, max_bytes);
    }
}

int
zlh_patroni_stop (zlh_patroni_t **self_p)
{
    if (!self_p || !*self_p)
        return 0;
    zlh_patroni_t *self = *self_p;
    int rc = s_shutdown (self);
    s_free (self);
    *self_p = NULL;
    return rc;
}

void
zlh_patroni_cleanup (void)
{
    for (size_t i = 0; i < MAX_CLUSTERS; i++)
        if (s_clusters[i]) {
            zlh_patroni_t *cluster = s_clusters[i];
            zlh_patroni_stop (&cluster);
        }
}

int
zlh_patroni_teardown (void **state)
{
    (void)state;
    zlh_patroni_cleanup ();
    return 0;
}
