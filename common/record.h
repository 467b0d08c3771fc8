/*  record: the durable store's records <-> bytes (proto/zlane_store.proto).
    Like the wire codec, the only place that sees those generated types.
    A job is two records: the immutable job (payload and settings, written
    once) and its mutable state (absent while the job was never attempted). */
#ifndef ZL_RECORD_H
#define ZL_RECORD_H

#include "arena.h"
#include "msg.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*  Format 5 (LMDB: a tree of job records per priority, store_lmdb.c) reads
    formats 3 and 4 (format 4 added batches' records) by moving their job
    records of other priorities than the default to their trees when it
    opens them, and marks them 5, so that an older broker, which would not
    see those records, refuses the store. */
#define ZL_STORE_FORMAT "zlane-store-5"

/*  A batch's durable record (zlane_store.proto BatchRec): its progress while
    open, its summary once settled. */
typedef struct {
    bool closed;
    uint64_t joined;
    size_t n_lost_dead, n_lost_cancelled;
    const uint64_t *lost_dead, *lost_cancelled; // members deleted before it settled
    int64_t opened_at_ms, closed_at_ms;         // wall clock
    // settled
    uint64_t acked, dead, cancelled;
    size_t n_failed;
    const uint64_t *failed;
    uint64_t failed_more;
    int64_t settled_at_ms;
} zl_batch_rec_t;

typedef struct {
    const char *name;
    const char *cron;
    bool catch_up;
    uint32_t catch_up_max;
    int64_t created_at_ms;
} zl_schedule_rec_t;

typedef struct {
    const char *tenant;
    const char *lane;
    zl_bytes_t payload;
    const char *idempotency_key; // "" when none
    size_t n_headers;
    zl_header_t *headers;
    uint32_t max_attempts;
    uint32_t lease_ms;
    uint32_t max_run_ms;
    int64_t enqueued_at_ms;
    size_t n_depends_on; // parents, by id (dependencies)
    const uint64_t *depends_on;
    const char *batch;      // a member of this batch ("" none)
    const char *batch_self; // the record and callback job of this batch ("" none)
    bool batch_no_callback;
    const zl_batch_rec_t *batch_summary; // batch_self, settled: its summary (else NULL)
    // its priority + 1; 0 (a zeroed record, or one written before priorities):
    // ZL_PRIORITY_DEFAULT (zl_record_priority)
    uint32_t priority_plus1;
    int64_t deadline_ms;               // wall clock, 0 = none
    const char *ordering_key;          // "" none
    const zl_schedule_rec_t *schedule; // a cron schedule's record (else NULL)
} zl_job_rec_t;

/*  A job record's priority, 0 to ZL_PRIORITY_MAX. */
#define zl_record_priority(rec)                                                                    \
    ((rec)->priority_plus1 >= 1 && (rec)->priority_plus1 <= ZL_PRIORITY_MAX + 1                    \
         ? (rec)->priority_plus1 - 1                                                               \
         : ZL_PRIORITY_DEFAULT)

typedef struct {
    uint32_t state; // zl_job_state_t values
    uint32_t attempt;
    uint64_t ready_seq;
    int64_t due_at_ms;  // wall clock
    int64_t dead_at_ms; // wall clock
    size_t n_history;
    zl_attempt_t *history;
    const char *leased_to;
    int64_t started_at_ms;
    int64_t cancelled_at_ms;       // state cancelled: wall clock
    uint32_t cancelled_from;       // state cancelled: the state it was cancelled in
    zl_bytes_t result;             // done: the ack's result
    int64_t done_at_ms;            // done: wall clock of the ack
    uint64_t failed_parent;        // dead for a parent: that parent
    const zl_batch_rec_t *batch;   // a batch's record job, waiting: its progress (else NULL)
    uint64_t order_seq;            // its place among its ordering key's jobs (0: its id)
    bool ordering_head;            // dead: it died at the head of its ordering key
    zl_bytes_t checkpoint;         // the last progress checkpoint (empty: none)
    int64_t schedule_last_tick_ms; // a schedule's record: its last tick
    bool schedule_paused;
} zl_state_rec_t;

typedef struct {
    uint64_t job_id;
    int64_t seen_at_ms; // wall clock
    bool generated;     // a client library made the key: kept for resend_window only
} zl_idem_rec_t;

/*  Encoding is two steps so that the caller can reserve exactly the space:
    prepare returns the size and an opaque handle living in `scratch`; write
    packs into `out`, which must hold that many bytes. */
size_t zl_record_job_prepare (zl_arena_t *scratch, const zl_job_rec_t *rec, void **handle);
size_t zl_record_state_prepare (zl_arena_t *scratch, const zl_state_rec_t *rec, void **handle);
size_t zl_record_write (void *handle, uint8_t *out);

/*  Decode; strings and arrays live in `arena` (payload bytes too). Returns 0
    or -1 if the bytes are not such a record. */
int zl_record_job_decode (zl_arena_t *arena, const void *data, size_t len, zl_job_rec_t *out);
int zl_record_state_decode (zl_arena_t *arena, const void *data, size_t len, zl_state_rec_t *out);

/*  Encode an idempotency record of formats 1 and 2 (`generated` is not kept)
    into `out` (at least 32 bytes); returns the size. */
size_t zl_record_idem_encode (const zl_idem_rec_t *rec, uint8_t *out);
/*  Decode an idempotency record of formats 1 and 2 (`generated` false);
    returns 0 or -1. */
int zl_record_idem_decode (const void *data, size_t len, zl_idem_rec_t *out);

#endif
