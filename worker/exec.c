/*  exec: run a shell command per job and map its exit to an outcome.

    One child per call: posix_spawn /bin/sh -c COMMAND in a new process group
    with stdin and stderr on pipes (CLOEXEC, so concurrent spawns in other
    handler threads never inherit each other's ends). Then one poll loop
    feeds the payload, collects stderr, watches a pidfd for the exit and the
    job's cancel fd for a lost lease; nothing sleeps. */
#define _GNU_SOURCE
#include "exec.h"

#include "clock.h"
#include "log.h"
#include "wire.h"
#include "zl_alloc.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_COMPONENT "exec"
#define S_TAIL_MAX 2048   // stderr bytes kept (the error text takes at most 1 KiB)
#define S_LINE_MAX 256    // longest stderr line checked for retry-after=
#define S_WAIT_STEP_MS 20 // check period where pidfd_open or eventfd is missing
#define S_RETRY_PREFIX "retry-after="

extern char **environ;

struct _zl_exec_t {
    char *command;
    char *worker_name;
    uint32_t kill_grace_ms;
};

// ------------------------------------------------------------------ lifecycle

zl_exec_t *
zl_exec_new (const zl_exec_opts_t *opts)
{
    if (!opts->command || !*opts->command) {
        zl_error (S_COMPONENT, "a command is required");
        return NULL;
    }
    // A child that exits without reading its stdin must not kill us with
    // SIGPIPE; the write returns EPIPE instead. Leave a custom handler alone.
    struct sigaction old;
    if (sigaction (SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL) {
        struct sigaction ign = {.sa_handler = SIG_IGN};
        sigemptyset (&ign.sa_mask);
        sigaction (SIGPIPE, &ign, NULL);
    }
    zl_exec_t *self = ZL_NEW (zl_exec_t);
    self->command = zl_strdup (opts->command);
    self->worker_name = zl_strdup (opts->worker_name ? opts->worker_name : "");
    self->kill_grace_ms = opts->kill_grace_ms;
    return self;
}

void
zl_exec_destroy (zl_exec_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_exec_t *self = *self_p;
    free (self->command);
    free (self->worker_name);
    free (self);
    *self_p = NULL;
}

// ------------------------------------------------------------------ environment

typedef struct {
    char **v; // NULL-terminated; owned strings
    size_t n, cap;
} s_env_t;

static size_t
s_key_len (const char *entry)
{
    const char *eq = strchr (entry, '=');
    return eq ? (size_t)(eq - entry) : strlen (entry);
}

static ssize_t
s_env_find (const s_env_t *env, const char *entry)
{
    size_t len = s_key_len (entry);
    for (size_t i = 0; i < env->n; i++)
        if (s_key_len (env->v[i]) == len && memcmp (env->v[i], entry, len) == 0)
            return (ssize_t)i;
    return -1;
}

/*  Add `entry` ("KEY=VALUE", taken), replacing an entry with the same key
    when `replace`, else dropping `entry` if the key is present. */
static void
s_env_put (s_env_t *env, char *entry, bool replace)
{
    ssize_t at = s_env_find (env, entry);
    if (at >= 0) {
        if (replace) {
            free (env->v[at]);
            env->v[at] = entry;
        } else
            free (entry);
        return;
    }
    if (env->n + 2 > env->cap) {
        env->cap = env->cap ? 2 * env->cap : 64;
        env->v = zl_realloc (env->v, env->cap * sizeof (char *));
    }
    env->v[env->n++] = entry;
    env->v[env->n] = NULL;
}

static void s_env_setf (s_env_t *env, const char *fmt, ...) __attribute__ ((format (printf, 2, 3)));

static void
s_env_setf (s_env_t *env, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    int len = vsnprintf (NULL, 0, fmt, ap);
    va_end (ap);
    char *entry = zl_malloc ((size_t)len + 1);
    va_start (ap, fmt);
    vsnprintf (entry, (size_t)len + 1, fmt, ap);
    va_end (ap);
    s_env_put (env, entry, true);
}

/*  Build the child's environment: the job's ZLANE_* variables, then the
    worker's own environment minus stale job variables. */
static void
s_env_build (s_env_t *env, const zl_exec_t *self, const zl_worker_job_t *job)
{
    s_env_setf (env, "ZLANE_JOB_ID=%" PRIu64, job->job_id);
    s_env_setf (env, "ZLANE_ATTEMPT=%u", job->attempt);
    s_env_setf (env, "ZLANE_TENANT=%s", job->tenant);
    s_env_setf (env, "ZLANE_LANE=%s", job->lane);
    s_env_setf (env, "ZLANE_IDEMPOTENCY_KEY=%s", job->idempotency_key);
    s_env_setf (env, "ZLANE_LEASE_MS=%u", job->lease_ms);
    s_env_setf (env, "ZLANE_MAX_RUN_MS=%u", job->max_run_ms);
    s_env_setf (env, "ZLANE_MAX_ATTEMPTS=%u", job->max_attempts);
    s_env_setf (env, "ZLANE_ENQUEUED_AT_MS=%" PRIu64, job->enqueued_at_ms);
    s_env_setf (env, "ZLANE_WORKER=%s", self->worker_name);
    for (size_t i = 0; i < job->n_headers; i++) {
        const char *key = job->headers[i].key;
        if (!key || !*key)
            continue;
        // ZLANE_HEADER_<KEY>: uppercased, anything but [A-Z0-9] becomes '_'.
        size_t klen = strlen (key);
        char *name = zl_malloc (klen + 1);
        for (size_t k = 0; k < klen; k++)
            name[k] = isalnum ((unsigned char)key[k]) ? (char)toupper ((unsigned char)key[k]) : '_';
        name[klen] = '\0';
        s_env_setf (env, "ZLANE_HEADER_%s=%s", name, job->headers[i].value);
        free (name);
    }
    for (char **e = environ; e && *e; e++)
        if (strncmp (*e, "ZLANE_HEADER_", 13) != 0)
            s_env_put (env, zl_strdup (*e), false);
}

static void
s_env_free (s_env_t *env)
{
    for (size_t i = 0; i < env->n; i++)
        free (env->v[i]);
    ZL_FREE (env->v);
    env->n = env->cap = 0;
}

// ------------------------------------------------------------------ stderr capture

typedef struct {
    char tail[S_TAIL_MAX]; // the last bytes of stderr
    size_t n;
    char line[S_LINE_MAX]; // the line being read, for retry-after=
    size_t line_n;
    bool line_long; // the current line overflowed: not a retry-after line
    bool has_retry;
    uint32_t retry_after_ms; // from the last retry-after= line
} s_capture_t;

static bool
s_is_space (char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

/*  A complete stderr line: remember it if it reads "retry-after=<duration>". */
static void
s_capture_line (s_capture_t *cap)
{
    if (cap->line_long)
        return;
    cap->line[cap->line_n] = '\0';
    char *s = cap->line;
    while (s_is_space (*s))
        s++;
    char *end = s + strlen (s);
    while (end > s && s_is_space (end[-1]))
        *--end = '\0';
    uint64_t ms;
    if (strncmp (s, S_RETRY_PREFIX, strlen (S_RETRY_PREFIX)) == 0 &&
        zl_parse_duration_ms (s + strlen (S_RETRY_PREFIX), &ms) == 0) {
        cap->has_retry = true;
        cap->retry_after_ms = ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
    }
}

static void
s_capture_feed (s_capture_t *cap, const char *data, size_t len)
{
    // Keep the tail.
    if (len >= S_TAIL_MAX) {
        memcpy (cap->tail, data + len - S_TAIL_MAX, S_TAIL_MAX);
        cap->n = S_TAIL_MAX;
    } else {
        if (cap->n + len > S_TAIL_MAX) {
            size_t drop = cap->n + len - S_TAIL_MAX;
            memmove (cap->tail, cap->tail + drop, cap->n - drop);
            cap->n -= drop;
        }
        memcpy (cap->tail + cap->n, data, len);
        cap->n += len;
    }
    // Scan lines for retry-after=.
    for (size_t i = 0; i < len; i++) {
        if (data[i] == '\n') {
            s_capture_line (cap);
            cap->line_n = 0;
            cap->line_long = false;
        } else if (cap->line_n < S_LINE_MAX - 1)
            cap->line[cap->line_n++] = data[i];
        else
            cap->line_long = true;
    }
}

/*  Read what stderr has now. Returns false at EOF or error (fd done). */
static bool
s_capture_read (s_capture_t *cap, int fd)
{
    char buf[4096];
    for (;;) {
        ssize_t n = read (fd, buf, sizeof buf);
        if (n > 0) {
            s_capture_feed (cap, buf, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        return n < 0 && errno == EAGAIN;
    }
}

/*  Return the last `budget` bytes of the trimmed tail in *len (starting on
    a UTF-8 character boundary). */
static const char *
s_capture_tail (s_capture_t *cap, size_t budget, size_t *len)
{
    const char *s = cap->tail, *end = cap->tail + cap->n;
    while (end > s && s_is_space (end[-1]))
        end--;
    if ((size_t)(end - s) > budget)
        s = end - budget;
    while (s < end && ((unsigned char)*s & 0xC0) == 0x80)
        s++; // a continuation byte: the character began before the cut
    while (s < end && s_is_space (*s))
        s++;
    *len = (size_t)(end - s);
    return s;
}

// ------------------------------------------------------------------ the child

typedef struct {
    pid_t pid;
    int pidfd;  // -1 where pidfd_open is unavailable
    int in_fd;  // our end of the child's stdin; -1 once closed
    int err_fd; // our end of the child's stderr; -1 once at EOF
    const uint8_t *payload;
    size_t len, written;
} s_child_t;

static void
s_close (int *fd)
{
    if (*fd >= 0)
        close (*fd);
    *fd = -1;
}

/*  Start the command for `job`. Returns 0, or an errno value. */
static int
s_spawn (const zl_exec_t *self, const zl_worker_job_t *job, s_child_t *c)
{
    int in[2], err[2];
    if (pipe2 (in, O_CLOEXEC) != 0)
        return errno;
    if (pipe2 (err, O_CLOEXEC) != 0) {
        int e = errno;
        close (in[0]);
        close (in[1]);
        return e;
    }
    s_env_t env = {0};
    s_env_build (&env, self, job);

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init (&fa);
    posix_spawn_file_actions_adddup2 (&fa, in[0], STDIN_FILENO); // dup2 clears CLOEXEC
    posix_spawn_file_actions_adddup2 (&fa, err[1], STDERR_FILENO);
    posix_spawnattr_t attr;
    posix_spawnattr_init (&attr);
    posix_spawnattr_setflags (&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                         POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup (&attr, 0); // own group: cancellation kills it whole
    sigset_t none, defaults;
    sigemptyset (&none);
    posix_spawnattr_setsigmask (&attr, &none); // handler threads block everything
    sigemptyset (&defaults);
    int reset[] = {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2};
    for (size_t i = 0; i < sizeof reset / sizeof reset[0]; i++)
        sigaddset (&defaults, reset[i]); // we may ignore some; the child must not
    posix_spawnattr_setsigdefault (&attr, &defaults);

    char *argv[] = {"/bin/sh", "-c", self->command, NULL};
    int rc = posix_spawn (&c->pid, "/bin/sh", &fa, &attr, argv, env.v);
    posix_spawnattr_destroy (&attr);
    posix_spawn_file_actions_destroy (&fa);
    s_env_free (&env);
    close (in[0]);
    close (err[1]);
    if (rc != 0) {
        close (in[1]);
        close (err[0]);
        return rc;
    }
    c->in_fd = in[1];
    c->err_fd = err[0];
    fcntl (c->in_fd, F_SETFL, fcntl (c->in_fd, F_GETFL) | O_NONBLOCK);
    fcntl (c->err_fd, F_SETFL, fcntl (c->err_fd, F_GETFL) | O_NONBLOCK);
#ifdef SYS_pidfd_open
    c->pidfd = (int)syscall (SYS_pidfd_open, c->pid, 0);
#else
    c->pidfd = -1;
#endif
    c->payload = job->payload;
    c->len = job->len;
    c->written = 0;
    if (c->len == 0)
        s_close (&c->in_fd); // empty payload: EOF at once
    return 0;
}

/*  Write what the stdin pipe takes; close it when done or refused. */
static void
s_feed_stdin (s_child_t *c)
{
    while (c->written < c->len) {
        ssize_t n = write (c->in_fd, c->payload + c->written, c->len - c->written);
        if (n > 0) {
            c->written += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return; // pipe full: wait for POLLOUT
        break;      // EPIPE: the child stopped reading; that is its business
    }
    s_close (&c->in_fd);
}

/*  Supervise the child until it exits: feed stdin, collect stderr, and on
    cancellation SIGTERM its group, then SIGKILL after the grace. Sets
    *status (valid when it returns true) and *why (ZL_WORKER_LIVE unless
    the job was cancelled while the child ran). */
static bool
s_supervise (const zl_exec_t *self, const zl_worker_job_t *job, s_child_t *c, s_capture_t *cap,
             int *status, zl_worker_cancel_t *why)
{
    int cancel_fd = zl_worker_job_cancel_fd (job);
    bool term_sent = false, kill_sent = false;
    int64_t kill_at = 0;
    *why = ZL_WORKER_LIVE;
    for (;;) {
        struct pollfd p[4];
        int np = 0, i_pid = -1, i_in = -1, i_err = -1;
        if (c->pidfd >= 0)
            p[i_pid = np++] = (struct pollfd){c->pidfd, POLLIN, 0};
        if (c->in_fd >= 0)
            p[i_in = np++] = (struct pollfd){c->in_fd, POLLOUT, 0};
        if (c->err_fd >= 0)
            p[i_err = np++] = (struct pollfd){c->err_fd, POLLIN, 0};
        if (!term_sent && cancel_fd >= 0)
            p[np++] = (struct pollfd){cancel_fd, POLLIN, 0};
        // Without a pidfd or a cancel fd, check on a short period instead.
        int timeout = c->pidfd >= 0 && (cancel_fd >= 0 || term_sent) ? -1 : S_WAIT_STEP_MS;
        if (term_sent && !kill_sent) {
            int64_t left = kill_at - zl_clock_mono_ms ();
            left = left < 0 ? 0 : left;
            timeout = timeout < 0 || left < timeout ? (int)left : timeout;
        }
        if (poll (p, (nfds_t)np, timeout) < 0 && errno != EINTR) {
            zl_error (S_COMPONENT, "poll: %s", strerror (errno));
            timeout = S_WAIT_STEP_MS; // keep supervising; the waitpid below still works
        }

        if (i_in >= 0 && p[i_in].revents)
            s_feed_stdin (c);
        if (i_err >= 0 && p[i_err].revents && !s_capture_read (cap, c->err_fd))
            s_close (&c->err_fd);
        if (i_pid < 0 || p[i_pid].revents) {
            // Peek first (WNOWAIT): while the child is an unreaped zombie its
            // pid, hence its group id, cannot be reused, so a cancelled job's
            // stragglers can be killed safely before the reap.
            siginfo_t info = {0};
            int r = waitid (P_PID, (id_t)c->pid, &info, WEXITED | WNOHANG | WNOWAIT);
            if (r == 0 && info.si_pid == c->pid) {
                if (term_sent)
                    kill (-c->pid, SIGKILL); // leave nothing of a cancelled job behind
                while (waitpid (c->pid, status, 0) < 0 && errno == EINTR)
                    ;
                return true;
            }
            if (r < 0 && errno != EINTR) {
                zl_error (S_COMPONENT, "job %" PRIu64 " attempt %u: waitid %d: %s", job->job_id,
                          job->attempt, (int)c->pid, strerror (errno));
                return false; // someone else reaped it (SIGCHLD ignored?)
            }
        }

        if (!term_sent && zl_worker_job_cancelled (job)) {
            *why = zl_worker_job_cancel_reason (job);
            int sig = self->kill_grace_ms ? SIGTERM : SIGKILL;
            zl_warn (S_COMPONENT, "job %" PRIu64 " attempt %u: %s: sending %s to pid %d's group",
                     job->job_id, job->attempt, zl_worker_cancel_text (*why),
                     sig == SIGTERM ? "SIGTERM" : "SIGKILL", (int)c->pid);
            kill (-c->pid, sig);
            term_sent = true;
            kill_sent = sig == SIGKILL;
            kill_at = zl_clock_mono_ms () + self->kill_grace_ms;
        }
        if (term_sent && !kill_sent && zl_clock_mono_ms () >= kill_at) {
            zl_warn (S_COMPONENT,
                     "job %" PRIu64 " attempt %u: pid %d outlived the %u ms grace: SIGKILL",
                     job->job_id, job->attempt, (int)c->pid, self->kill_grace_ms);
            kill (-c->pid, SIGKILL);
            kill_sent = true;
        }
    }
}

// ------------------------------------------------------------------ outcome

/*  Fill `result` from the child's fate and the captured stderr. */
static void
s_report (zl_worker_result_t *result, bool status_known, int status, zl_worker_cancel_t why,
          s_capture_t *cap)
{
    char how[48];
    int code = -1;
    if (!status_known)
        snprintf (how, sizeof how, "exit status unknown");
    else if (WIFEXITED (status)) {
        code = WEXITSTATUS (status);
        snprintf (how, sizeof how, "exit status %d", code);
    } else
        snprintf (how, sizeof how, "killed by signal %d", WTERMSIG (status));

    zl_worker_outcome_t outcome = ZL_WORKER_TRANSIENT;
    uint32_t retry_after_ms = 0;
    const char *prefix = why != ZL_WORKER_LIVE ? zl_worker_cancel_text (why) : NULL;
    if (!prefix && code == 0)
        outcome = ZL_WORKER_ACK;
    else if (!prefix && code == ZL_EXEC_EX_DATAERR)
        outcome = ZL_WORKER_PERMANENT;
    else if (!prefix && code == ZL_EXEC_EX_TEMPFAIL) {
        outcome = ZL_WORKER_THROTTLED;
        retry_after_ms = cap->has_retry ? cap->retry_after_ms : ZL_EXEC_RETRY_AFTER_DEFAULT_MS;
    }
    if (outcome == ZL_WORKER_ACK) {
        zl_worker_result_set (result, ZL_WORKER_ACK, 0, "%s", "");
        return;
    }
    // "[<reason>: ]<stderr tail> (<how>)", or "[<reason> ](<how>)" / "<how>"
    // without a tail; at most ZL_WORKER_ERROR_MAX - 1 bytes.
    size_t fixed = (prefix ? strlen (prefix) + 2 : 0) + strlen (how) + 3;
    size_t tail_len;
    const char *tail = s_capture_tail (cap, ZL_WORKER_ERROR_MAX - 1 - fixed, &tail_len);
    if (tail_len)
        zl_worker_result_set (result, outcome, retry_after_ms, "%s%s%.*s (%s)",
                              prefix ? prefix : "", prefix ? ": " : "", (int)tail_len, tail, how);
    else if (prefix)
        zl_worker_result_set (result, outcome, retry_after_ms, "%s (%s)", prefix, how);
    else
        zl_worker_result_set (result, outcome, retry_after_ms, "%s", how);
}

void
zl_exec_handler (const zl_worker_job_t *job, zl_worker_result_t *result, void *arg)
{
    const zl_exec_t *self = arg;
    if (zl_worker_job_cancelled (job)) {
        zl_worker_result_set (result, ZL_WORKER_TRANSIENT, 0, "%s (not started)",
                              zl_worker_cancel_text (zl_worker_job_cancel_reason (job)));
        return;
    }
    s_child_t child = {.pid = -1, .pidfd = -1, .in_fd = -1, .err_fd = -1};
    int64_t start = zl_clock_mono_ms ();
    int err = s_spawn (self, job, &child);
    if (err) {
        zl_error (S_COMPONENT, "job %" PRIu64 " attempt %u: cannot start /bin/sh: %s", job->job_id,
                  job->attempt, strerror (err));
        zl_worker_result_set (result, ZL_WORKER_TRANSIENT, 0, "cannot start /bin/sh: %s",
                              strerror (err));
        return;
    }
    zl_debug (S_COMPONENT, "job %" PRIu64 " attempt %u: started pid %d", job->job_id, job->attempt,
              (int)child.pid);

    s_capture_t *cap = ZL_NEW (s_capture_t); // 2+ KiB: off the handler's stack
    int status = 0;
    zl_worker_cancel_t why;
    bool known = s_supervise (self, job, &child, cap, &status, &why);
    // The child is gone; take what it wrote before exiting. Background
    // processes that still hold stderr are not waited for.
    if (child.err_fd >= 0)
        s_capture_read (cap, child.err_fd);
    if (cap->line_n)
        s_capture_line (cap); // a last line without a newline
    s_close (&child.in_fd);
    s_close (&child.err_fd);
    s_close (&child.pidfd);

    s_report (result, known, status, why, cap);
    free (cap);
    zl_debug (S_COMPONENT, "job %" PRIu64 " attempt %u: pid %d done in %" PRId64 " ms: %s%s%s",
              job->job_id, job->attempt, (int)child.pid, zl_clock_mono_ms () - start,
              zl_worker_outcome_name (result->outcome), result->error[0] ? ": " : "",
              result->error);
}
