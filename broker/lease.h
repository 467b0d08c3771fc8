/*  lease: what a LEASED job holds while one worker runs one attempt of it
    (zl_lease_t), and where lease tokens come from (zl_lease_tokens_t).

    jobs.c makes a lease when it dispatches a job (zl_lease_new) and frees it
    when the attempt ends (ack, nack, lapse, max run, worker gone); while the
    job is LEASED, job->lease points at it. zl_lease_t is an open record, like
    zl_job_t: anyone may read its fields, and each field has one writer:

      token              lease.c, at new; never changes. Ack, nack and extend
                         must quote it: it fences off every earlier holder.
      lease_deadline_ms  lease.c: now + lease_ms at new and at each extend
                         (monotonic; not capped, see zl_lease_due_ms).
      run_deadline_ms    lease.c, at new: now + max_run_ms, 0 = no max run;
                         no extension moves it (monotonic).
      started_at_ms      lease.c, at new: wall clock of the attempt's start
                         (stored in the job's state record, shown to people).
      started_us         lease.c, at new: monotonic, to measure run time.
      worker, prev, next the holder links: they belong to the worker registry
                         (workers.c zl_worker_conn_hold / zl_worker_conn_release),
                         which threads each worker's held jobs through them.
                         NULL until hold and after release.

    The job's timer is due at zl_lease_due_ms, the earlier of the two
    deadlines; that arithmetic lives here and nowhere else.

    Tokens are unguessable: each is 64 bits from the OS CSPRNG (getrandom(2))
    with the low bit set (never zero; 63 random bits). They are drawn in
    batches of ZL_LEASE_BATCH by one getrandom call, so dispatch makes one
    system call per ZL_LEASE_BATCH leases, not one per job. If the OS cannot
    supply random bytes (after retrying EINTR and short reads) the process
    logs why and aborts: a broker must not run on guessable tokens. One
    thread owns a token source; there is no locking. */
#ifndef ZL_LEASE_H
#define ZL_LEASE_H

#include "clock.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define ZL_LEASE_BATCH 256 // tokens drawn per getrandom call

struct zl_worker_conn;
struct zl_job;

typedef struct zl_lease {
    uint64_t token;                // this attempt's lease token (odd, so never 0)
    int64_t lease_deadline_ms;     // monotonic
    int64_t run_deadline_ms;       // monotonic, 0 = none
    int64_t started_at_ms;         // wall clock of this attempt's start
    int64_t started_us;            // monotonic, for run time
    struct zl_worker_conn *worker; // holder links: written by the worker registry only
    struct zl_job *prev, *next;    // the holding worker's list of jobs
} zl_lease_t;

typedef struct _zl_lease_tokens_t zl_lease_tokens_t;

/*  The function that fills a token batch: getrandom(2)'s signature and
    contract (bytes written, or -1 with errno). */
typedef ssize_t (zl_lease_random_fn) (void *buf, size_t len, unsigned int flags);

/*  Return an empty token source; its first draw fills a batch. */
zl_lease_tokens_t *zl_lease_tokens_new (void);
/*  Destroy the source (its unused tokens are wiped); nulls the caller's
    pointer. NULL-safe. */
void zl_lease_tokens_destroy (zl_lease_tokens_t **self_p);
/*  Return the next token: nonzero, low bit set, from the OS CSPRNG. Refills
    the batch when it is empty (one getrandom call); aborts if the OS cannot
    supply random bytes. */
uint64_t zl_lease_tokens_next (zl_lease_tokens_t *self);
/*  For tests (fault injection): fill batches with `fn` instead of
    getrandom; NULL restores getrandom. Tokens already drawn stay. */
void zl_lease_tokens_set_random (zl_lease_tokens_t *self, zl_lease_random_fn *fn);

/*  Return a new lease (caller owns) for an attempt starting `now`: a token
    from `tokens`, lease deadline now + lease_ms, run deadline now +
    max_run_ms (0 = none), start times from `now`, no holder. */
zl_lease_t *zl_lease_new (zl_lease_tokens_t *tokens, uint32_t lease_ms, uint32_t max_run_ms,
                          zl_now_t now);
/*  Free the lease; nulls the caller's pointer. NULL-safe. Its holder links
    are not touched: the worker registry releases it first. */
void zl_lease_destroy (zl_lease_t **self_p);
/*  Return when the attempt must end (monotonic ms): the lease deadline, or
    the run deadline if there is one and it comes first. */
int64_t zl_lease_due_ms (const zl_lease_t *self);
/*  Extend: the lease deadline becomes now + lease_ms. Returns true if the
    run deadline comes first, so the attempt still ends there (the lease
    changed all the same), false if the new lease deadline holds. */
bool zl_lease_extend (zl_lease_t *self, uint32_t lease_ms, zl_now_t now);
/*  True if the attempt has a max run and `now_ms` (monotonic) has reached
    its run deadline. */
bool zl_lease_max_run_reached (const zl_lease_t *self, int64_t now_ms);
/*  Return the monotonic microseconds since the attempt started. */
uint64_t zl_lease_run_us (const zl_lease_t *self, zl_now_t now);

#endif
