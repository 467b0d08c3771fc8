/*  zltest: the process-level harness for zlane's integration tests.
    Finds the built binaries, makes fresh temp directories, spawns processes
    in their own process groups (every one registered and SIGKILLed at
    teardown, at exit and on SIGINT/SIGTERM), starts a real broker on
    ephemeral 127.0.0.1 ports, and talks to it through small raw clients.
    Every wait is bounded and event driven (pidfd, inotify, zmq_poll). */
#ifndef ZLTEST_H
#define ZLTEST_H

#include "codec.h"
#include "msg.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

// ---------------------------------------------------------------- files
/*  Return the directory holding zlane's binaries: $ZLANE_BIN_DIR (set by
    ctest), else the directory of the running test executable, else the
    build tree's bin. Borrowed. */
const char *zlt_bin_dir (void);
/*  Return "<bin dir>/<name>". Caller owns. */
char *zlt_bin_path (const char *name);
/*  Return true if `path` exists and is executable. */
bool zlt_is_executable (const char *path);
/*  Return "<bin dir>/<name>" (caller owns). Fails the running cmocka test
    if it is not executable there (the binary was not built). */
char *zlt_bin (const char *name);
/*  Return "<dir>/<name>". Caller owns. */
char *zlt_path (const char *dir, const char *name);

/*  Return a new empty directory under $TMPDIR (or /tmp). The harness owns
    it: it is removed with its contents by zlt_cleanup and at exit (kept if
    $ZLT_KEEP is set). The path is borrowed until then. NULL on failure. */
const char *zlt_tmpdir (void);

/*  Read a whole file; returns a NUL-terminated buffer (caller owns) and sets
    `*len_p` if not NULL, or NULL if the file cannot be read. */
char *zlt_read_file (const char *path, size_t *len_p);
/*  Write `len` bytes to `path` (created or truncated). Returns 0 or -1. */
int zlt_write_file (const char *path, const void *data, size_t len);
/*  Print the last `max_bytes` of a file to stderr under a title, for failing
    tests to show what a process said. */
void zlt_dump_file (const char *title, const char *path, size_t max_bytes);

/*  A condition on a file's text, for zlt_wait_file. */
typedef bool (zlt_file_ready_fn) (const char *text, const void *arg);
/*  Wait up to `timeout_ms` until `ready (text, arg)` holds for the text of
    the file at `path` (never while it is missing), woken by inotify on its
    directory. Returns 0, or -1 on timeout. Fails the running cmocka test if
    the directory cannot be watched. */
int zlt_wait_file (const char *path, zlt_file_ready_fn *ready, const void *arg, int timeout_ms);
/*  Wait as zlt_wait_file until the file holds `needle`. Returns 0 or -1. */
int zlt_wait_file_has (const char *path, const char *needle, int timeout_ms);

// ---------------------------------------------------------------- processes
typedef struct _zlt_proc_t zlt_proc_t;

/*  Spawn argv[0] (a path) with `argv` (NULL-terminated) in a new process
    group; stdin from `in_path`, stdout/stderr appended to `out_path` /
    `err_path` (each NULL = /dev/null). The child dies with the test (PDEATHSIG).
    Returns the process (registered; the harness kills it at teardown), or
    NULL if fork or exec failed (the reason printed). */
zlt_proc_t *zlt_spawn (const char *const argv[], const char *in_path, const char *out_path,
                       const char *err_path);
/*  Return the process id (also its process group id). */
pid_t zlt_proc_pid (zlt_proc_t *self);
/*  Wait up to `timeout_ms` for the process to exit and reap it. Returns 0
    once it has exited (now or before), -1 on timeout. */
int zlt_proc_wait (zlt_proc_t *self, int timeout_ms);
/*  Return its exit code, 128 + signal if a signal ended it, or -1 while it
    runs (or was not yet reaped by zlt_proc_wait). */
int zlt_proc_exit_code (zlt_proc_t *self);
/*  Send `sig` to the process group. Returns 0 or -1 (already reaped). */
int zlt_proc_signal (zlt_proc_t *self, int sig);
/*  SIGKILL the group if still running, reap, unregister and free; nulls
    the caller's pointer. NULL-safe. */
void zlt_proc_destroy (zlt_proc_t **self_p);

/*  Run argv to completion (stdin/stdout/stderr as zlt_spawn) within
    `timeout_ms`. Returns the exit code (see zlt_proc_exit_code), or -1 if it
    could not start or did not finish in time (then it is killed). */
int zlt_run (const char *const argv[], const char *in_path, const char *out_path,
             const char *err_path, int timeout_ms);
/*  Run the built program `prog` (zlt_bin) with `args` (NULL-terminated, at
    most 30), stdin from `in_path` if given, its stdout and stderr in files
    of their own under `dir`, within `timeout_ms`. Returns as zlt_run; the
    output in *out and *err when asked (caller frees). Its stderr is printed
    when it fails and the caller did not ask for it, or did not finish. */
int zlt_run_program (const char *dir, const char *prog, const char *const *args,
                     const char *in_path, char **out, char **err, int timeout_ms);

// ---------------------------------------------------------------- broker
typedef struct _zlt_broker_t zlt_broker_t;

/*  Start zlane-broker in a fresh temp dir with every endpoint on
    tcp://127.0.0.1:*, --ports-file and --data in that dir (no --data when
    `args` give --store), then `args` (NULL-terminated extra flags; NULL
    means "--lane a --lane b"); with $ZLANE_WIRE_DUMP_DIR, a wire_dump there
    unless `args` set one. Waits (at most 10 s) for the ports file. Returns
    the broker (registered), or NULL if it died or timed out (its stderr is
    printed). */
zlt_broker_t *zlt_broker_start (const char *const args[]);
/*  Return an endpoint: which is "frontend", "backend", "events", "admin" or
    "metrics" (only when started with --metrics); NULL for an unknown name
    or a metrics page it does not have. Borrowed. */
const char *zlt_broker_endpoint (zlt_broker_t *self, const char *which);
/*  Return the broker's temp directory (its stderr is <dir>/broker.err). */
const char *zlt_broker_dir (zlt_broker_t *self);
/*  Return the broker process (borrowed). */
zlt_proc_t *zlt_broker_proc (zlt_broker_t *self);
/*  Print the last `max_bytes` of the broker's stderr (see zlt_dump_file),
    for a failing test. */
void zlt_broker_dump (zlt_broker_t *self, size_t max_bytes);
/*  SIGTERM the broker and wait up to `timeout_ms`. Returns its exit code,
    or -1 if it had to be killed. */
int zlt_broker_stop (zlt_broker_t *self, int timeout_ms);
/*  SIGKILL the broker process, as a crash would, and reap it. Returns 0, or
    -1 if no broker process was running. */
int zlt_broker_kill (zlt_broker_t *self);
/*  Start the broker again (a running one is SIGKILLed first) in the same
    temp dir with the same --data, the same flags and the four endpoints it
    bound at its first start, so clients reconnect to it. While the new
    process fails to bind (a port not yet free) it is retried until
    `timeout_ms`. Returns 0 once the new broker wrote its ports file, or -1
    (its stderr printed); zlt_broker_proc is the new process either way. */
int zlt_broker_restart (zlt_broker_t *self, int timeout_ms);
/*  Kill (if running) and free the broker; nulls the caller's pointer. */
void zlt_broker_destroy (zlt_broker_t **self_p);

// ---------------------------------------------------------------- clients
typedef struct _zlt_client_t zlt_client_t;

/*  Return a client socket (ZMQ_DEALER or ZMQ_SUB) connected to `endpoint`,
    with linger 0 and its own codec. A SUB client subscribes to nothing
    until zlt_client_subscribe. Registered; NULL if the connect failed. */
zlt_client_t *zlt_client_new (int type, const char *endpoint);
/*  Close the socket, unregister and free; nulls the caller's pointer. */
void zlt_client_destroy (zlt_client_t **self_p);
/*  Return the raw libzmq socket, for raw frames. Borrowed. */
void *zlt_client_sock (zlt_client_t *self);
/*  Return the client's codec (for building raw frames). Borrowed. */
zl_codec_t *zlt_client_codec (zlt_client_t *self);
/*  Subscribe a SUB client to topics starting with `prefix` ("" = all). */
void zlt_client_subscribe (zlt_client_t *self, const char *prefix);

/*  Encode and send one message as one frame. Returns 0 or -1. */
int zlt_client_send (zlt_client_t *self, const zl_msg_t *msg);
/*  Send raw bytes as one frame (`more` true: more frames follow). */
int zlt_client_send_raw (zlt_client_t *self, const void *data, size_t size, bool more);
/*  Wait up to `timeout_ms` for one message and decode it into `*out`
    (borrowed until the next receive on this client). On a SUB client the
    topic frame is skipped (see zlt_client_topic). Returns 0, -1 on timeout,
    -2 if the frame did not decode. */
int zlt_client_recv (zlt_client_t *self, zl_msg_t *out, int timeout_ms);
/*  Like zlt_client_recv, but skip Heartbeat and Credit messages (unless
    `kind` is one of them) until a message of `kind` or an Error arrives.
    Returns 0 with `*out` of kind `kind` or ZL_MSG_ERROR, -1 on timeout. */
int zlt_client_expect (zlt_client_t *self, zl_msg_kind_t kind, zl_msg_t *out, int timeout_ms);
/*  Send Hello (client name `name`) on a producer client and wait up to
    `timeout_ms` for its Credit. Returns the credit limit (> 0), or 0. */
uint64_t zlt_client_hello (zlt_client_t *self, const char *name, int timeout_ms);
/*  Return the topic of the last message a SUB client received. Borrowed. */
const char *zlt_client_topic (zlt_client_t *self);

// ---------------------------------------------------------------- admin stats
/*  Ask the admin socket (a DEALER client to the admin endpoint) for Stats
    and wait up to `timeout_ms`. Returns 0 with `*out` filled (borrowed
    until the client's next receive), -1 on timeout or a refused request. */
int zlt_stats (zlt_client_t *admin, zl_stats_t *out, int timeout_ms);
/*  Find counter `name` in `stats`. Returns 0 and sets `*value`, or -1. */
int zlt_stats_counter (const zl_stats_t *stats, const char *name, uint64_t *value);
/*  Find the group for `lane` and `tenant` in `stats`: a per-lane total if
    `tenant` is NULL or "", a per-tenant total if `lane` is, else lane x
    tenant. Returns it (borrowed) or NULL. */
const zl_group_stats_t *zlt_stats_group (const zl_stats_t *stats, const char *lane,
                                         const char *tenant);
/*  Return counter `name` from fresh stats (waits at most 5 s). Fails the
    running cmocka test if the broker does not answer or has no such counter. */
uint64_t zlt_counter (zlt_client_t *admin, const char *name);
/*  Copy the group for `lane`/`tenant` (see zlt_stats_group) from fresh
    stats into `*out`; its lane/tenant strings are set to NULL. Returns 0,
    or -1 if there is no such group or no answer within 5 s. */
int zlt_group (zlt_client_t *admin, const char *lane, const char *tenant, zl_group_stats_t *out);
/*  Poll stats about every 20 ms until counter `name` >= `min_value`, for at
    most `timeout_ms`. Returns 0 when reached, -1 on timeout (the last value
    is printed). */
int zlt_wait_counter (zlt_client_t *admin, const char *name, uint64_t min_value, int timeout_ms);
/*  Wait until every turn the broker began before this call has committed:
    the first Stats reply's loop_turns (counted as turns start, so it
    includes the turn that answered) until loop_turns_committed reaches it.
    A reply (Stats, or a plain job's Dispatch on LMDB) may leave before its
    turn's commit, and with LMDB's commit thread or on PostgreSQL a commit
    runs on while later turns answer. Call it after seeing the effect of a
    change (a job ran) and before a kill that must find that change on disk.
    Returns 0, or -1 after `timeout_ms` (said on stderr). */
int zlt_wait_turn_committed (zlt_client_t *admin, int timeout_ms);

// ---------------------------------------------------------------- job ids
/*  Parse `text`, one job id per line as zlane-submit prints them, into
    `ids` (at most `cap`); returns how many. Fails the running cmocka test
    on a line that is not a job id, a last line without a newline, or more
    than `cap` ids; `what` names the text in the message. */
size_t zlt_ids_parse (const char *text, uint64_t *ids, size_t cap, const char *what);
/*  The same for zlane-submit --json output, one {"seq":..,"job_id":..,
    "duplicate":..} per line, in seq order from 1 (a failed job fails the
    test); counts duplicate=true in *duplicates. */
size_t zlt_ids_parse_json (const char *text, uint64_t *ids, size_t cap, const char *what,
                           size_t *duplicates);
/*  Sort `n` job ids in ascending order, for zlt_ids_find. */
void zlt_ids_sort (uint64_t *ids, size_t n);
/*  Return the index of `id` in the sorted `ids`, or -1. */
long zlt_ids_find (const uint64_t *ids, size_t n, uint64_t id);

/*  A record file (zlane-testhandler --record: "<id> <attempt> <pid>" per
    execution) counted against the sorted printed job ids. */
typedef struct {
    size_t lines;      // executions
    size_t lost;       // printed ids never executed
    size_t duplicates; // executions beyond the first of a printed id
    size_t reruns;     // executions on attempt > 1
    size_t foreign;    // executions of ids nobody printed
    uint64_t first_foreign;
} zlt_tally_t;

/*  Count the record `text` (NULL = empty) against the sorted `ids`; runs[i]
    gets the executions of ids[i]. Fails the test on a malformed line. */
void zlt_tally_text (const char *text, const uint64_t *ids, size_t n_ids, unsigned *runs,
                     zlt_tally_t *t);
/*  The same for the record file at `path` (missing = empty). */
void zlt_tally (const char *path, const uint64_t *ids, size_t n_ids, unsigned *runs,
                zlt_tally_t *t);
/*  The executions in the record at `path` (written with --record-payload)
    checked against the test's input: `n_prefixes` producers, the one of
    `prefixes[p]` submitting the lines "<prefixes[p]> <i>", 0 <= i < n_lines
    (zlt_write_lines, zlt_fifo_feed), and printed the id
    `ids[p * n_lines + i]` for line i (0 = none printed). */
typedef struct {
    size_t mismatched; // a printed id run with another line's payload
    size_t unanswered; // an unprinted id run with an input line (below)
    size_t foreign;    // an unprinted id run with anything else
    uint64_t first_mismatched, first_foreign;
} zlt_payloads_t;
/*  An unprinted id run with an input line is a job that left for its
    worker before the commit that would have accepted it, and a crash undid
    the commit, so its producer was never told its id and sent it again
    (the LMDB broker's early dispatch, README "Durability"). A mismatch is
    an id given to two jobs. */
void zlt_payloads (const char *path, const uint64_t *ids, const char *const *prefixes,
                   size_t n_prefixes, size_t n_lines, zlt_payloads_t *out);
/*  Fail the test on a foreign run or a mismatch, or on more unanswered runs
    than the producers `resent` (each such run is a Submit sent again). */
void zlt_payloads_assert (const zlt_payloads_t *pl, size_t resent);

// ---------------------------------------------------------------- files of lines
/*  Write `n` lines "<prefix> <i>" to `path`; fails the test on an error. */
void zlt_write_lines (const char *path, const char *prefix, int n);
/*  The number of complete lines in `path` (0 if it is missing). */
size_t zlt_count_lines (const char *path);
/*  A zlt_file_ready_fn: true once `text` has *(size_t *)arg complete lines. */
bool zlt_has_lines (const char *text, const void *arg);
/*  How many times `needle` occurs in the file at `path` (0 if missing). */
size_t zlt_count_in_file (const char *path, const char *needle);
/*  Write `n` more lines "job <i>" to the FIFO `fd` (opened O_NONBLOCK,
    ideally with a one-page pipe buffer); `*fed` counts them. Returns once
    all but the buffer's worth were read by the process at the other end.
    Fails the test if that takes past `deadline` (zlt_now_ms). */
void zlt_fifo_feed (int fd, int *fed, int n, int64_t deadline);
/*  Wait until `out` has `want` lines, woken by every write to it
    (inotify). Fails the test, showing `err` (the process's stderr), if
    `proc` exits or `deadline` passes first. */
void zlt_wait_printed (const char *out, size_t want, zlt_proc_t *proc, const char *err,
                       int64_t deadline);
/*  Spawn zlane-worker on lane a for `brokers` (a list), running
    zlane-testhandler --record `record`, with 200 ms heartbeats, liveness 3,
    concurrency 4, -v; its stderr to <dir>/<name>.err, whose path goes to
    `*err_out` (caller frees). */
zlt_proc_t *zlt_worker_spawn (const char *dir, const char *name, const char *brokers,
                              const char *record, char **err_out);
/*  Fail the test if the file at `path` (a process's stderr) holds a
    sanitizer report, after showing it under `title`. */
void zlt_assert_no_sanitizer_report (const char *title, const char *path);

// ---------------------------------------------------------------- lifecycle
/*  Kill every registered process group (SIGKILL) and reap it, destroy
    every registered broker and client, remove every temp dir. Safe to call
    more than once; the harness is usable again afterwards. */
void zlt_cleanup (void);
/*  A cmocka setup/teardown that calls zlt_cleanup; returns 0. */
int zlt_teardown (void **state);

/*  Monotonic milliseconds, for measuring deadlines. */
int64_t zlt_now_ms (void);
/*  Wall-clock milliseconds (CLOCK_REALTIME): the clock zlane-testhandler
    logs with, for comparing with its times. */
int64_t zlt_wall_ms (void);

#endif
