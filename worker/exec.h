/*  exec: a worker handler that runs a shell command once per job.
    The command runs as `/bin/sh -c COMMAND`, with the job in ZLANE_*
    environment variables, its stdout shared with the worker's, and the
    payload on stdin as a regular file (a memfd) that holds the whole
    payload before the command starts: it may be read, stat'ed or seeked
    from the first instruction, and nothing arrives later. A guard process
    per job leads the command's process group; when the worker dies (even
    by SIGKILL) the guard SIGKILLs the whole group, so no command outlives
    the worker that ran it. Exit contract:
        0                 -> Ack
        65 (EX_DATAERR)   -> PERMANENT Nack (bad input: straight to the DLQ)
        75 (EX_TEMPFAIL)  -> THROTTLED Nack; retry after the duration on the
                             last stderr line "retry-after=<duration>"
                             (e.g. "retry-after=5s"), 1 s if there is none
        79                -> NOT_YET Nack (what the job needs is not there yet):
                             retried after "retry-after=<duration>" as for 75
                             (1 s if none) without spending an attempt
        anything else, death by a signal included -> TRANSIENT Nack
    The error text is the tail of stderr (made valid UTF-8: bad bytes and
    NULs become U+FFFD) plus "exit status N" or "killed by signal S". When
    the job is cancelled (lease lost, max run time, shutdown, or the
    broker's Cancel: an operator cancelled it) the process group gets
    SIGTERM, then SIGKILL after the kill grace, and the job is reported
    TRANSIENT with the reason (for a job the broker cancelled, that report
    is refused CANCELLED: the job ends cancelled). Processes the command leaves running
    after a normal exit are not waited for nor killed, and processes that
    leave the group (setsid) are out of reach. */
#ifndef ZL_EXEC_H
#define ZL_EXEC_H

#include "zlane_worker.h"

#include <stdint.h>

#define ZL_EXEC_EX_DATAERR 65
#define ZL_EXEC_EX_TEMPFAIL 75
#define ZL_EXEC_NOT_YET 79 // above sysexits' range (64-78): zlane's own
#define ZL_EXEC_RETRY_AFTER_DEFAULT_MS 1000
#define ZL_EXEC_RESULT_MAX (64 << 20) // bytes read from $ZLANE_RESULT_FILE at most
#define ZL_EXEC_CHECKPOINT_MAX                                                                     \
    (16 << 20) // bytes read from $ZLANE_CHECKPOINT at most (the
               // broker's max_checkpoint decides what it keeps)

typedef struct _zl_exec_t zl_exec_t;

typedef struct {
    const char *command;     // shell command, required
    const char *worker_name; // exported as ZLANE_WORKER; NULL = ""
    uint32_t kill_grace_ms;  // SIGTERM -> SIGKILL delay; 0 = SIGKILL at once
} zl_exec_opts_t;

/*  Return a new exec handler for `opts` (copied), or NULL if no command was
    given or the guard program cannot be made runnable (it runs from a
    memfd through /proc/self/fd; the reason is logged). Ignores SIGPIPE
    process-wide (unless a handler is set) so that a word to a guard that
    has just exited cannot kill the worker (the write fails with EPIPE). */
zl_exec_t *zl_exec_new (const zl_exec_opts_t *opts);
/*  Destroy the handler; nulls the caller's pointer. */
void zl_exec_destroy (zl_exec_t **self_p);

/*  The handler (a zl_worker_handler_fn): pass the zl_exec_t as its arg. Runs
    the command for `job` and fills `result`. Thread-safe: any number of
    handler threads may run it at once. */
void zl_exec_handler (const zl_worker_job_t *job, zl_worker_result_t *result, void *arg);

#endif
