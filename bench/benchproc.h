/*  benchproc: what every benchmark program needs around its measurements:
    a temp dir, child processes in their own process groups that are killed
    at exit or on SIGINT/SIGTERM, a fatal-error exit, and /proc readings of
    a process's memory and CPU time. One per process (static state). */
#ifndef ZL_BENCHPROC_H
#define ZL_BENCHPROC_H

#include <stdint.h>
#include <sys/types.h>

/*  Make the temp dir (/tmp/<prefix>.XXXXXX), note the binaries' dir (this
    program's own), and arrange the cleanup. `program` names error lines. */
void zl_benchproc_init (const char *program, const char *prefix);
/*  The temp dir; "" before init. Borrowed. */
const char *zl_benchproc_tmp (void);
/*  The directory this program runs from (where the zlane binaries are). */
const char *zl_benchproc_bindir (void);
/*  Start argv[0] (a path) with stderr appended to `log`, in its own process
    group; it is killed at exit. Returns its pid or -1. */
pid_t zl_benchproc_spawn (char *const argv[], const char *log);
/*  Register a child forked by the caller, to be killed at exit. */
void zl_benchproc_adopt (pid_t pid);
/*  In a forked child: the parent cleans up, not this process. */
void zl_benchproc_forget (void);
/*  Number of children and the pid of child `i` (in start order). */
int zl_benchproc_count (void);
pid_t zl_benchproc_pid (int i);
/*  SIGTERM every child's group, SIGKILL what is left after `grace_ms`. */
void zl_benchproc_stop_all (int grace_ms);
/*  Print "program: msg", clean up and exit 1. */
void zl_benchproc_die (const char *msg) __attribute__ ((noreturn));
/*  Resident memory of `pid` in bytes (total); anonymous and file-backed
    parts in *anon / *file when not NULL. */
uint64_t zl_benchproc_rss (pid_t pid, uint64_t *anon, uint64_t *file);
/*  CPU seconds (user + system) `pid` has used so far. */
double zl_benchproc_cpu_seconds (pid_t pid);
/*  Sort `n` samples (µs) ascending. */
void zl_benchproc_sort_i64 (int64_t *v, size_t n);
/*  The p-th percentile (nearest rank) of sorted samples in µs, in ms; 0
    when there are none. */
double zl_benchproc_pct_ms (const int64_t *v, size_t n, double p);
/*  Read bytes from `fd` (a pipe the bench's consumers write one byte per
    event to) until `count` of them are `ev`; die on a timeout or when every
    writer is gone. */
/*  Sleep until `due_us` on CLOCK_MONOTONIC (the open-loop producers of the
    latency runs: zlane's, beanstalkd's, RabbitMQ's). The calling thread's
    timer slack is set to 1 ns first: the kernel's default 50 us would
    make every producer send up to 50 us late, and each latency is charged
    from the due time. */
void zl_benchproc_sleep_until (int64_t due_us);
void zl_benchproc_wait_events (int fd, char ev, int count, int timeout_ms);
/*  A TCP connection to 127.0.0.1:`port` with TCP_NODELAY (the peers'
    benches and the floor); -1 if it cannot be made. */
int zl_benchproc_connect (int port);
/*  Send all `n` bytes to socket `fd` (no SIGPIPE); die if it cannot. */
void zl_benchproc_write_all (int fd, const void *p, size_t n);

#endif
