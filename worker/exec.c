/*  exec: run a shell command per job and map its exit to an outcome.

    The payload. It is written whole into a memfd, rewound, and that file is
    the command's stdin: a regular file that holds all of the payload before
    the command runs its first instruction. Nothing is fed after the start,
    so no death of the worker can leave the command reading a part of it
    (with a pipe fed by the worker, a SIGKILLed worker left an EOF where the
    rest of the payload should be, and the command ran on what it had).

    The guard. Every job gets a guard process (exec_guard.c): spawned by the
    handler thread as the leader of a new process group, it starts /bin/sh
    -c COMMAND in that group and then only waits, on two things: the
    command's exit and its lifeline, a pipe whose one write end the worker
    holds. The worker writes ZL_GUARD_TERM (SIGTERM the group) or
    ZL_GUARD_KILL on it to cancel the job; end of file on it means the
    worker is gone (killed, crashed, or the handler returned), and the
    guard then SIGKILLs its whole group, itself included, at once. The
    guard reports the command's wait status on a second pipe and exits. It
    is the only process that signals the group, and it leads the group
    whenever it does, so the group id cannot have been reused by then.

    Why this and not PR_SET_PDEATHSIG: that signal reaches only the direct
    child (the shell, not what the shell starts), and it fires when the
    forking thread ends, not the worker process. A SIGKILLed process runs
    nothing, so the worker cannot clean up after itself either: the watcher
    has to be another process, and the kernel's closing of a dead process's
    descriptors is the one event that always happens. (The shell does get
    PR_SET_PDEATHSIG from the guard, for a guard killed from outside.)

    Why a program, spawned. The guard is a small program whose bytes the
    library carries (zl_exec_guard_elf) and writes once into a sealed
    memfd; each job posix_spawns it from there. A spawn shares the
    worker's memory until the exec (no copy of its page tables, nothing
    made copy-on-write under its busy threads) and the exec closes every
    close-on-exec descriptor, so a guard started by one handler thread never
    holds another job's lifeline. On x86_64 the guard is freestanding (no
    libc) because a libc program's start-up alone costs about a millisecond
    on a VM that traps CPUID. Measured on a 2-core VM (bench_exec), the
    guard adds 0.1-0.35 ms of CPU per job, whatever the worker's size.
    Forking the worker instead (the guard then runs in the fork) cost
    0.5-0.9 ms, +1.8 ms at 64 MiB resident, several times that under ASan;
    a guard sharing the worker's memory (clone with CLONE_VM) would be
    killed with the worker by the OOM killer, which kills every process
    that shares the memory it frees. */
#define _GNU_SOURCE
#include "exec.h"

#include "clock.h"
#include "exec_guard.h"
#include "log.h"
#include "text.h"
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
#include <limits.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_COMPONENT "exec"
#define S_TAIL_MAX 2048   // stderr bytes kept (the error text takes at most 1 KiB)
#define S_LINE_MAX 256    // longest stderr line checked for retry-after=
#define S_WAIT_STEP_MS 20 // check period where the job has no cancel fd (no eventfd)
#define S_RETRY_PREFIX "retry-after="

extern char **environ;

struct _zl_exec_t {
    char *command;
    char *worker_name;
    uint32_t kill_grace_ms;
    int guard_fd;        // the guard program, in a sealed memfd
    char guard_path[32]; // "/proc/self/fd/<guard_fd>", what each job spawns
};

// ------------------------------------------------------------------ lifecycle

/*  Move *fd above stdio (a worker may run with 0, 1 or 2 closed, and the
    spawn makes 0 and 2 the guard's stdin and stderr). Returns 0 or errno. */
static int
s_above_stdio (int *fd)
{
    if (*fd > STDERR_FILENO)
        return 0;
    int moved = fcntl (*fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    if (moved < 0)
        return errno;
    close (*fd);
    *fd = moved;
    return 0;
}

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U // Linux 6.3: executable even where memfds default to noexec
#endif

/*  Write the guard program into a sealed memfd. Returns the descriptor
    (close-on-exec), or -1 with errno set. */
static int
s_guard_file (void)
{
    int fd = memfd_create (ZL_GUARD_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
    if (fd < 0 && errno == EINVAL) // a kernel older than MFD_EXEC
        fd = memfd_create (ZL_GUARD_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    size_t done = 0;
    while (done < zl_exec_guard_elf_len) {
        ssize_t n = write (fd, zl_exec_guard_elf + done, zl_exec_guard_elf_len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? errno : ENOSPC;
            close (fd);
            errno = e;
            return -1;
        }
        done += (size_t)n;
    }
    // Nobody changes it now, not even through /proc/<pid>/fd.
    if (fcntl (fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
        int e = errno;
        close (fd);
        errno = e;
        return -1;
    }
    return fd;
}

zl_exec_t *
zl_exec_new (const zl_exec_opts_t *opts)
{
    if (!opts->command || !*opts->command) {
        zl_error (S_COMPONENT, "a command is required");
        return NULL;
    }
    // Above stdio: the spawn makes 0 and 2 the guard's stdin and stderr.
    int guard_fd = s_guard_file ();
    int e = guard_fd < 0 ? errno : s_above_stdio (&guard_fd);
    char guard_path[32];
    snprintf (guard_path, sizeof guard_path, "/proc/self/fd/%d", guard_fd);
    if (!e && access (guard_path, X_OK) != 0)
        e = errno; // no /proc, or a noexec memfd
    if (e) {
        zl_error (S_COMPONENT, "cannot make the guard program runnable (%s): %s", guard_path,
                  strerror (e));
        if (guard_fd >= 0)
            close (guard_fd);
        return NULL;
    }
    // A guard that exits as we cancel its job must not kill us with SIGPIPE;
    // the write returns EPIPE instead. Leave a custom handler alone.
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
    self->guard_fd = guard_fd;
    // Spawned by this path: in the spawned child it names the child's copy
    // of the memfd, which the exec opens before it closes close-on-exec ones.
    memcpy (self->guard_path, guard_path, sizeof guard_path);
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
    close (self->guard_fd);
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
s_env_build (s_env_t *env, const zl_exec_t *self, const zl_worker_job_t *job, const char *result,
             const char *parents, const char *ckpt)
{
    s_env_setf (env, "ZLANE_JOB_ID=%" PRIu64, job->job_id);
    if (result)
        s_env_setf (env, "ZLANE_RESULT_FILE=%s", result);
    if (ckpt)
        s_env_setf (env, "ZLANE_CHECKPOINT=%s", ckpt);
    if (parents) {
        s_env_setf (env, "ZLANE_PARENT_RESULTS=%s", parents);
        s_env_setf (env, "ZLANE_PARENT_COUNT=%zu", job->n_parent_results);
    }
    if (job->batch) { // a batch's callback: the batch as it settled
        const zl_batch_info_t *b = job->batch;
        s_env_setf (env, "ZLANE_BATCH_ID=%s", b->batch_id);
        s_env_setf (env, "ZLANE_BATCH_JOBS=%" PRIu64, b->jobs);
        s_env_setf (env, "ZLANE_BATCH_ACKED=%" PRIu64, b->acked);
        s_env_setf (env, "ZLANE_BATCH_DEAD=%" PRIu64, b->dead);
        s_env_setf (env, "ZLANE_BATCH_CANCELLED=%" PRIu64, b->cancelled_jobs);
        s_env_setf (env, "ZLANE_BATCH_FAILED_MORE=%" PRIu64, b->failed_more);
        char *failed = zl_malloc (b->n_failed * 21 + 1), *at = failed;
        *at = '\0';
        for (size_t i = 0; i < b->n_failed; i++)
            at += sprintf (at, "%s%" PRIu64, i ? " " : "", b->failed[i]);
        s_env_setf (env, "ZLANE_BATCH_FAILED=%s", failed);
        free (failed);
    }
    s_env_setf (env, "ZLANE_ATTEMPT=%u", job->attempt);
    s_env_setf (env, "ZLANE_TENANT=%s", job->tenant);
    s_env_setf (env, "ZLANE_LANE=%s", job->lane);
    s_env_setf (env, "ZLANE_IDEMPOTENCY_KEY=%s", job->idempotency_key);
    if (job->ordering_key && job->ordering_key[0])
        s_env_setf (env, "ZLANE_ORDERING_KEY=%s", job->ordering_key);
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
    bool cut;              // bytes before the tail were dropped: it may start inside a character
    char line[S_LINE_MAX]; // the line being read, for retry-after=
    size_t line_n;
    bool line_long; // the current line overflowed: not a retry-after line
    bool has_retry;
    uint32_t retry_after_ms;                         // from the last retry-after= line
    char clean[ZL_TEXT_SANITIZED_SIZE (S_TAIL_MAX)]; // the tail as valid text
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
        cap->cut = cap->cut || cap->n || len > S_TAIL_MAX;
        cap->n = S_TAIL_MAX;
    } else {
        if (cap->n + len > S_TAIL_MAX) {
            size_t drop = cap->n + len - S_TAIL_MAX;
            memmove (cap->tail, cap->tail + drop, cap->n - drop);
            cap->n -= drop;
            cap->cut = true;
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

/*  Return the last `budget` bytes of the trimmed tail in *len, as valid
    UTF-8 without NUL (zl_text_sanitize: stderr may be binary) and starting
    on a character boundary. */
static const char *
s_capture_tail (s_capture_t *cap, size_t budget, size_t *len)
{
    size_t skip = 0;
    while (cap->cut && skip < 3 && skip < cap->n && ((unsigned char)cap->tail[skip] & 0xC0) == 0x80)
        skip++; // its character (at most 4 bytes) began in the bytes dropped
    size_t n = zl_text_sanitize (cap->tail + skip, cap->n - skip, cap->clean, sizeof cap->clean);
    const char *s = cap->clean, *end = cap->clean + n;
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

// ------------------------------------------------------------------ the payload

/*  Return a descriptor (close-on-exec) of a memfd holding the whole payload,
    rewound; -1 with errno set if it could not be made. */
static int
s_payload_file (const zl_worker_job_t *job)
{
    int fd = memfd_create ("zlane-payload", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t done = 0;
    while (done < job->len) {
        ssize_t n = write (fd, job->payload + done, job->len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? errno : ENOSPC;
            close (fd);
            errno = e;
            return -1;
        }
        done += (size_t)n;
    }
    if (lseek (fd, 0, SEEK_SET) != 0) {
        int e = errno;
        close (fd);
        errno = e;
        return -1;
    }
    return fd;
}

// ------------------------------------------------------------------ results

/*  Make an empty file from `templ` (mkstemp), its name left in `templ`.
    Returns 0, or -1 with errno set. */
static int
s_temp_file (char *templ, const void *data, size_t len)
{
    int fd = mkostemp (templ, O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t done = 0;
    while (done < len) {
        ssize_t n = write (fd, (const char *)data + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? errno : ENOSPC;
            close (fd);
            unlink (templ);
            errno = e;
            return -1;
        }
        done += (size_t)n;
    }
    close (fd);
    return 0;
}

/*  The file ZLANE_PARENT_RESULTS names: per parent, in the order the job
    named them, a line "<job id> <length>\n", then <length> bytes of its
    result and a "\n". Returns 0, or -1 with errno set. */
static int
s_parents_file (const zl_worker_job_t *job, char *path)
{
    size_t size = 0;
    for (size_t i = 0; i < job->n_parent_results; i++)
        size += 48 + job->parent_results[i].result.len;
    char *buf = zl_malloc (size + 1), *at = buf;
    for (size_t i = 0; i < job->n_parent_results; i++) {
        const zl_parent_result_t *p = &job->parent_results[i];
        at += sprintf (at, "%" PRIu64 " %zu\n", p->job_id, p->result.len);
        if (p->result.len)
            memcpy (at, p->result.data, p->result.len);
        at += p->result.len;
        *at++ = '\n';
    }
    int rc = s_temp_file (path, buf, (size_t)(at - buf));
    free (buf);
    return rc;
}

/*  Read the result file the command wrote (at most ZL_EXEC_RESULT_MAX
    bytes) into `result`. Returns 0, or -1 with the reason in `why`. */
static int
s_read_result (const char *path, zl_worker_result_t *result, char *why, size_t whylen)
{
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf (why, whylen, "cannot open $ZLANE_RESULT_FILE: %s", strerror (errno));
        return -1;
    }
    struct stat sb;
    if (fstat (fd, &sb) != 0 || sb.st_size > ZL_EXEC_RESULT_MAX) {
        snprintf (why, whylen, "$ZLANE_RESULT_FILE holds more than %d bytes", ZL_EXEC_RESULT_MAX);
        close (fd);
        return -1;
    }
    size_t len = (size_t)sb.st_size, done = 0;
    uint8_t *buf = zl_malloc (len ? len : 1);
    while (done < len) {
        ssize_t n = read (fd, buf + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    close (fd);
    zl_worker_result_data (result, buf, done);
    free (buf);
    return 0;
}

// ------------------------------------------------------------------ the worker's side

typedef struct {
    pid_t guard;   // the guard's pid, also the command's process group
    int life_fd;   // the lifeline's write end; -1 once closed
    int report_fd; // the guard's records; -1 at EOF
    int err_fd;    // the command's stderr; -1 at EOF
    char record[sizeof (zl_guard_record_t)];
    size_t record_n; // bytes of a record read so far
    bool exited;     // the guard reported the command's exit...
    int status;      // ...with this wait status
    int start_errno; // the command could not be started (0 = it was)
} s_child_t;

static void
s_close (int *fd)
{
    if (*fd >= 0)
        close (*fd);
    *fd = -1;
}

// Signals the guard (and so the command) gets back at their default.
static const int s_reset_signals[] = {SIGPIPE, SIGINT,  SIGTERM, SIGHUP,
                                      SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2};

/*  Spawn the guard (which starts the command) for `job`, with `payload`
    (taken: closed here) as the command's stdin. Returns 0, or an errno
    value. */
static int
s_spawn (const zl_exec_t *self, const zl_worker_job_t *job, int payload, const char *result,
         const char *parents, const char *ckpt, s_child_t *c)
{
    // Every end is close-on-exec, so that no other child of the worker
    // keeps one; the spawn gives the guard its own.
    int err[2] = {-1, -1}, life[2] = {-1, -1}, report[2] = {-1, -1};
    int e = 0;
    if (pipe2 (err, O_CLOEXEC) != 0 || pipe2 (life, O_CLOEXEC) != 0 ||
        pipe2 (report, O_CLOEXEC) != 0)
        e = errno;
    int *theirs[] = {&payload, &err[1], &life[0], &report[1]};
    for (size_t i = 0; !e && i < sizeof theirs / sizeof theirs[0]; i++)
        e = s_above_stdio (theirs[i]);
    if (!e) {
        s_env_t env = {0};
        s_env_build (&env, self, job, result, parents, ckpt);
        char life_text[16], report_text[16];
        snprintf (life_text, sizeof life_text, "%d", life[0]);
        snprintf (report_text, sizeof report_text, "%d", report[1]);
        char *argv[] = {ZL_GUARD_NAME, life_text,     report_text, "/bin/sh",
                        "-c",          self->command, NULL};

        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init (&fa);
        posix_spawn_file_actions_adddup2 (&fa, payload, STDIN_FILENO); // dup2 clears CLOEXEC
        posix_spawn_file_actions_adddup2 (&fa, err[1], STDERR_FILENO);
        posix_spawn_file_actions_adddup2 (&fa, life[0], life[0]); // the same: clears CLOEXEC
        posix_spawn_file_actions_adddup2 (&fa, report[1], report[1]);
        posix_spawnattr_t attr;
        posix_spawnattr_init (&attr);
        posix_spawnattr_setflags (&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                             POSIX_SPAWN_SETSIGDEF);
        posix_spawnattr_setpgroup (&attr, 0); // the guard leads a group of its own
        sigset_t all, defaults;
        sigfillset (&all);
        posix_spawnattr_setsigmask (&attr, &all); // the guard blocks everything
        sigemptyset (&defaults);
        for (size_t i = 0; i < sizeof s_reset_signals / sizeof s_reset_signals[0]; i++)
            sigaddset (&defaults, s_reset_signals[i]); // we may ignore some; the command must not
        posix_spawnattr_setsigdefault (&attr, &defaults);
        e = posix_spawn (&c->guard, self->guard_path, &fa, &attr, argv, env.v);
        posix_spawnattr_destroy (&attr);
        posix_spawn_file_actions_destroy (&fa);
        s_env_free (&env);
    }
    // The guard's ends are the guard's now; on failure, ours go too.
    int *ends[] = {&payload, &err[1], &life[0], &report[1], &err[0], &life[1], &report[0]};
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++)
        if (i < 4 || e)
            s_close (ends[i]);
    if (e)
        return e;
    c->life_fd = life[1];
    c->report_fd = report[0];
    c->err_fd = err[0];
    fcntl (c->report_fd, F_SETFL, fcntl (c->report_fd, F_GETFL) | O_NONBLOCK);
    fcntl (c->err_fd, F_SETFL, fcntl (c->err_fd, F_GETFL) | O_NONBLOCK);
    return 0;
}

/*  Read the guard's records; closes report_fd at EOF (the guard is gone). */
static void
s_read_records (s_child_t *c)
{
    for (;;) {
        ssize_t n = read (c->report_fd, c->record + c->record_n, sizeof c->record - c->record_n);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            s_close (&c->report_fd);
            return;
        }
        c->record_n += (size_t)n;
        if (c->record_n < sizeof c->record)
            continue;
        zl_guard_record_t r;
        memcpy (&r, c->record, sizeof r);
        c->record_n = 0;
        if (r.what == ZL_GUARD_EXITED) {
            c->exited = true;
            c->status = r.value;
        } else if (r.what == ZL_GUARD_START_FAILED)
            c->start_errno = r.value ? r.value : EINVAL;
    }
}

/*  Tell the guard `word` (ZL_GUARD_TERM or ZL_GUARD_KILL). */
static void
s_tell_guard (s_child_t *c, char word)
{
    while (write (c->life_fd, &word, 1) < 0 && errno == EINTR)
        ;
    // EPIPE: the guard is gone; its report (or EOF) is on the way
}

// ------------------------------------------------------------------ checkpoints
// ZLANE_CHECKPOINT: the file holds the last checkpoint when the command
// starts (empty: none); the command saves its progress by replacing it
// (write a temp file, rename it over). The handler looks at it every
// S_CKPT_STEP_MS while the command runs, and once more when it has exited,
// and hands what changed to zl_worker_job_checkpoint.
#define S_CKPT_STEP_MS 50

typedef struct {
    const char *path;
    struct stat seen; // the file as last read
} s_ckpt_t;

static bool
s_same_file (const struct stat *a, const struct stat *b)
{
    return a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

// The file changed since it was last read: send its content (not empty, at
// most ZL_EXEC_CHECKPOINT_MAX bytes) as the job's checkpoint.
static void
s_ckpt_check (s_ckpt_t *w, const zl_worker_job_t *job)
{
    struct stat sb;
    if (!w->path || stat (w->path, &sb) != 0 || s_same_file (&sb, &w->seen))
        return;
    w->seen = sb;
    if (sb.st_size == 0)
        return;
    if (sb.st_size > ZL_EXEC_CHECKPOINT_MAX) {
        zl_warn (S_COMPONENT,
                 "job %" PRIu64 " attempt %u: $ZLANE_CHECKPOINT holds %lld bytes, more than %d: "
                 "not saved",
                 job->job_id, job->attempt, (long long)sb.st_size, ZL_EXEC_CHECKPOINT_MAX);
        return;
    }
    int fd = open (w->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char *buf = zl_malloc ((size_t)sb.st_size);
    ssize_t n = read (fd, buf, (size_t)sb.st_size);
    close (fd);
    if (n > 0 && zl_worker_job_checkpoint (job, buf, (size_t)n) == 0)
        zl_debug (S_COMPONENT, "job %" PRIu64 " attempt %u: checkpoint of %zd bytes saved",
                  job->job_id, job->attempt, n);
    free (buf);
}

/*  Wait until the guard is gone: collect stderr and the guard's records,
    and on cancellation have the group SIGTERMed, then SIGKILLed after the
    grace. Sets *why (ZL_WORKER_LIVE unless the job was cancelled while the
    command ran). */
static void
s_supervise (const zl_exec_t *self, const zl_worker_job_t *job, s_child_t *c, s_capture_t *cap,
             s_ckpt_t *ckpt, zl_worker_cancel_t *why)
{
    int cancel_fd = zl_worker_job_cancel_fd (job);
    bool term_sent = false, kill_sent = false;
    int64_t kill_at = 0;
    *why = ZL_WORKER_LIVE;
    while (c->report_fd >= 0) {
        struct pollfd p[3];
        int np = 0, i_rep, i_err = -1;
        p[i_rep = np++] = (struct pollfd){c->report_fd, POLLIN, 0};
        if (c->err_fd >= 0)
            p[i_err = np++] = (struct pollfd){c->err_fd, POLLIN, 0};
        if (!term_sent && cancel_fd >= 0)
            p[np++] = (struct pollfd){cancel_fd, POLLIN, 0};
        // Without a cancel fd, check the flag on a short period instead.
        int timeout = cancel_fd >= 0 || term_sent ? -1 : S_WAIT_STEP_MS;
        if (term_sent && !kill_sent) {
            int64_t left = kill_at - zl_clock_mono_ms ();
            timeout = left < 0 ? 0 : (int)left;
        }
        if (timeout < 0 || timeout > S_CKPT_STEP_MS)
            timeout = S_CKPT_STEP_MS; // the checkpoint file's period
        if (poll (p, (nfds_t)np, timeout) < 0 && errno != EINTR) {
            zl_error (S_COMPONENT, "poll: %s", strerror (errno));
            return; // the handler closes the lifeline: the guard kills the group
        }
        if (i_err >= 0 && p[i_err].revents && !s_capture_read (cap, c->err_fd))
            s_close (&c->err_fd);
        if (p[i_rep].revents)
            s_read_records (c);
        s_ckpt_check (ckpt, job);
        if (c->report_fd < 0)
            break;

        if (!term_sent && zl_worker_job_cancelled (job)) {
            *why = zl_worker_job_cancel_reason (job);
            bool term = self->kill_grace_ms > 0;
            zl_warn (S_COMPONENT, "job %" PRIu64 " attempt %u: %s: sending %s to group %d",
                     job->job_id, job->attempt, zl_worker_cancel_text (*why),
                     term ? "SIGTERM" : "SIGKILL", (int)c->guard);
            s_tell_guard (c, term ? ZL_GUARD_TERM : ZL_GUARD_KILL);
            term_sent = true;
            kill_sent = !term;
            kill_at = zl_clock_mono_ms () + self->kill_grace_ms;
        }
        if (term_sent && !kill_sent && zl_clock_mono_ms () >= kill_at) {
            zl_warn (S_COMPONENT,
                     "job %" PRIu64 " attempt %u: group %d outlived the %u ms grace: SIGKILL",
                     job->job_id, job->attempt, (int)c->guard, self->kill_grace_ms);
            s_tell_guard (c, ZL_GUARD_KILL);
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
    else if (!prefix && (code == ZL_EXEC_EX_TEMPFAIL || code == ZL_EXEC_NOT_YET)) {
        outcome = code == ZL_EXEC_NOT_YET ? ZL_WORKER_NOT_YET : ZL_WORKER_THROTTLED;
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
    result->data = NULL; // the result file's bytes, once the command exited 0
    result->data_len = 0;
    if (zl_worker_job_cancelled (job)) {
        zl_worker_result_set (result, ZL_WORKER_TRANSIENT, 0, "%s (not started)",
                              zl_worker_cancel_text (zl_worker_job_cancel_reason (job)));
        return;
    }
    int64_t start = zl_clock_mono_ms ();
    int payload = s_payload_file (job);
    if (payload < 0) {
        int e = errno;
        zl_error (S_COMPONENT, "job %" PRIu64 " attempt %u: cannot write the payload file: %s",
                  job->job_id, job->attempt, strerror (e));
        zl_worker_result_set (result, ZL_WORKER_TRANSIENT, 0, "cannot write the payload file: %s",
                              strerror (e));
        return;
    }
    // the result file the command may write, its parents' results, and
    // its checkpoint file (holding the last one)
    const char *tmp = getenv ("TMPDIR");
    char result_path[PATH_MAX], parents_path[PATH_MAX], ckpt_path[PATH_MAX];
    snprintf (ckpt_path, sizeof ckpt_path, "%s/zlane-checkpoint-XXXXXX",
              tmp && *tmp ? tmp : "/tmp");
    snprintf (result_path, sizeof result_path, "%s/zlane-result-XXXXXX",
              tmp && *tmp ? tmp : "/tmp");
    snprintf (parents_path, sizeof parents_path, "%s/zlane-parents-XXXXXX",
              tmp && *tmp ? tmp : "/tmp");
    bool has_parents = job->n_parent_results > 0;
    bool has_ckpt = false;
    if (s_temp_file (result_path, NULL, 0) != 0 ||
        (has_parents && s_parents_file (job, parents_path) != 0) ||
        !(has_ckpt = s_temp_file (ckpt_path, job->checkpoint, job->checkpoint_len) == 0)) {
        int e = errno;
        unlink (result_path);
        if (has_parents)
            unlink (parents_path);
        close (payload);
        zl_worker_result_set (result, ZL_WORKER_TRANSIENT, 0, "cannot make a result file: %s",
                              strerror (e));
        return;
    }
    s_child_t child = {.guard = -1, .life_fd = -1, .report_fd = -1, .err_fd = -1};
    s_ckpt_t ckpt = {.path = ckpt_path};
    stat (ckpt_path, &ckpt.seen); // (what it holds now was received, not saved)
    int err = s_spawn (self, job, payload, result_path, has_parents ? parents_path : NULL,
                       ckpt_path, &child);
    if (err) {
        zl_error (S_COMPONENT, "job %" PRIu64 " attempt %u: cannot start /bin/sh: %s", job->job_id,
                  job->attempt, strerror (err));
        zl_worker_result_set (result, ZL_WORKER_TRANSIENT, 0, "cannot start /bin/sh: %s",
                              strerror (err));
        unlink (result_path);
        unlink (ckpt_path);
        if (has_parents)
            unlink (parents_path);
        return;
    }
    zl_debug (S_COMPONENT, "job %" PRIu64 " attempt %u: started, group %d", job->job_id,
              job->attempt, (int)child.guard);

    s_capture_t *cap = ZL_NEW (s_capture_t); // 8+ KiB: off the handler's stack
    zl_worker_cancel_t why;
    s_supervise (self, job, &child, cap, &ckpt, &why);
    s_ckpt_check (&ckpt, job); // what it saved last, before it exited (or died)
    // The guard reported and closed its end. Take what the command wrote
    // before it exited (background processes that still hold stderr are not
    // waited for), then close the lifeline: should the guard still be
    // running (the loop above failed), that kills the group.
    if (child.err_fd >= 0)
        s_capture_read (cap, child.err_fd);
    if (cap->line_n)
        s_capture_line (cap); // a last line without a newline
    s_close (&child.err_fd);
    s_close (&child.report_fd);
    s_close (&child.life_fd);
    int guard_status;
    while (waitpid (child.guard, &guard_status, 0) < 0 && errno == EINTR)
        ;
    // ECHILD: someone else reaped the guard (SIGCHLD ignored); its report counts

    if (child.start_errno) {
        zl_error (S_COMPONENT, "job %" PRIu64 " attempt %u: cannot start /bin/sh: %s", job->job_id,
                  job->attempt, strerror (child.start_errno));
        zl_worker_result_set (result, ZL_WORKER_TRANSIENT, 0, "cannot start /bin/sh: %s",
                              strerror (child.start_errno));
    } else
        s_report (result, child.exited, child.status, why, cap);
    free (cap);
    char why_result[160];
    if (result->outcome == ZL_WORKER_ACK &&
        s_read_result (result_path, result, why_result, sizeof why_result) != 0)
        zl_worker_result_set (result, ZL_WORKER_PERMANENT, 0, "%s", why_result);
    unlink (result_path);
    unlink (ckpt_path);
    if (has_parents)
        unlink (parents_path);
    zl_debug (S_COMPONENT, "job %" PRIu64 " attempt %u: group %d done in %" PRId64 " ms: %s%s%s",
              job->job_id, job->attempt, (int)child.guard, zl_clock_mono_ms () - start,
              zl_worker_outcome_name (result->outcome), result->error[0] ? ": " : "",
              result->error);
}
