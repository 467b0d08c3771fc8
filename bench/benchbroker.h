/*  benchbroker: a zlane-broker child for the benchmark programs. It runs on
    ephemeral loopback ports with --ports-file, under `perf record` when
    ZLANE_BENCH_PERF is set; its endpoints are read back and its stats asked
    over the admin socket. The process itself belongs to benchproc, which
    kills it at exit. */
#ifndef ZL_BENCHBROKER_H
#define ZL_BENCHBROKER_H

#include "msg.h"

#include <stdint.h>
#include <sys/types.h>

typedef struct _zl_benchbroker_t zl_benchbroker_t;

/*  Start a broker whose data, ports file and log live in `dir`, with `args`
    (NULL-terminated: lanes, durability, limits) after the endpoints. With
    ZLANE_BENCH_PERF=PREFIX it runs under `perf record --call-graph=dwarf -o
    PREFIX.<dir's name>`. With ZLANE_BENCH_STORE set, the broker's store is
    that location (--store, e.g. a PostgreSQL database) instead of DIR/data. Exits the program
   (zl_benchproc_die) unless the broker writes its ports within 10 s. */
zl_benchbroker_t *zl_benchbroker_start (const char *dir, const char *const *args);
/*  Close the admin socket (the process stays with benchproc); nulls the
    caller's pointer. NULL-safe. */
void zl_benchbroker_destroy (zl_benchbroker_t **self_p);
/*  The child's pid (perf's, when profiling). */
pid_t zl_benchbroker_pid (zl_benchbroker_t *self);
/*  "frontend", "backend", "events" or "admin" (borrowed), or NULL. */
const char *zl_benchbroker_endpoint (zl_benchbroker_t *self, const char *which);
/*  The broker's stats (borrowed until the next call), or NULL without an
    answer in 5 s. */
const zl_stats_t *zl_benchbroker_stats (zl_benchbroker_t *self);
/*  A counter of `stats`, or -1 if it has none of that name. */
int64_t zl_benchbroker_counter_of (const zl_stats_t *stats, const char *name);
/*  A counter from fresh stats, or -1. */
int64_t zl_benchbroker_counter (zl_benchbroker_t *self, const char *name);
/*  Wait until counter `name` reaches `want`; exits the program after
    `timeout_ms`. */
void zl_benchbroker_wait (zl_benchbroker_t *self, const char *name, int64_t want, int timeout_ms);

#endif
