/*  breaker (zl_breaker_t): a lane's circuit breaker. "A circuit breaker per
    dependency stops the flood while it's down": after `failures` transient
    failures within `window_ms` the lane is OPEN and dispatches nothing for
    `cooldown_ms`; then HALF_OPEN, it lets `probes` jobs run at a time; as
    many successes in a row close it again, any failure opens it again for
    another cool-down. The jobs wait READY meanwhile (their deadlines still
    run); nothing is failed or moved.

    A pure state machine fed with outcomes and a monotonic clock; the job
    state machine (jobs.c) feeds it, the scheduler asks it before a lane's
    dispatch, the broker publishes its transitions. Its state is not
    durable: a restarted broker starts CLOSED. */
#ifndef ZL_BREAKER_H
#define ZL_BREAKER_H

#include "clock.h"
#include "msg.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    ZL_BREAKER_CLOSED = 0,
    ZL_BREAKER_OPEN = 1,
    ZL_BREAKER_HALF_OPEN = 2
} zl_breaker_state_t;

/*  Return "closed", "open" or "half_open". */
const char *zl_breaker_state_name (zl_breaker_state_t state);

typedef struct _zl_breaker_t zl_breaker_t;

/*  Return a CLOSED breaker (failures >= 1, probes >= 1; a window or a
    cool-down of 0 is taken as 1 ms). */
zl_breaker_t *zl_breaker_new (uint32_t failures, uint64_t window_ms, uint64_t cooldown_ms,
                              uint32_t probes);
/*  Destroy; nulls the caller's pointer (NULL-safe). */
void zl_breaker_destroy (zl_breaker_t **self_p);
/*  Move OPEN to HALF_OPEN once the cool-down ended by `now_ms`. */
void zl_breaker_tick (zl_breaker_t *self, int64_t now_ms);
/*  True if the lane may dispatch one more job now: CLOSED, or HALF_OPEN
    with fewer than `probes` probes out (ticks first). */
bool zl_breaker_may_dispatch (zl_breaker_t *self, int64_t now_ms);
/*  A job of the lane was dispatched (HALF_OPEN: one more probe out). */
void zl_breaker_dispatched (zl_breaker_t *self);
/*  A job of the lane succeeded (acked): HALF_OPEN counts it, and closes
    after `probes` successes. */
void zl_breaker_success (zl_breaker_t *self, int64_t now_ms);
/*  A job of the lane failed transiently (a TRANSIENT Nack, a lapsed lease,
    its worker died): CLOSED counts it in the window and opens at
    `failures`; HALF_OPEN opens again. */
void zl_breaker_failure (zl_breaker_t *self, int64_t now_ms);
/*  A job of the lane ended otherwise (THROTTLED, NOT_YET, PERMANENT,
    cancelled): a HALF_OPEN probe is no longer out, nothing else. */
void zl_breaker_neutral (zl_breaker_t *self);

typedef struct {
    zl_breaker_state_t state;
    uint32_t failures;     // transient failures in the window now (CLOSED)
    int64_t open_until_ms; // OPEN: monotonic end of the cool-down
    uint32_t probes_out;   // HALF_OPEN: probes running
    uint64_t opened;       // times it opened (counter)
    uint64_t transitions;  // state changes (counter: a change of it means an event)
} zl_breaker_view_t;

/*  The breaker as stats, metrics and events show it, at `now_ms`. */
zl_breaker_view_t zl_breaker_view (const zl_breaker_t *self, int64_t now_ms);
/*  True once per change of state since the last call (for its event). */
bool zl_breaker_take_change (zl_breaker_t *self);
/*  OPEN: when it half-opens (monotonic ms); else -1. */
int64_t zl_breaker_next_ms (const zl_breaker_t *self);
/*  Fill `out` with the breaker of lane `lane` (borrowed) as the protocol
    shows it, at `now` (until_ms in wall clock). */
void zl_breaker_info (const zl_breaker_t *self, const char *lane, zl_now_t now,
                      zl_breaker_info_t *out);

#endif
