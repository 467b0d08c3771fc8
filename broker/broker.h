/*  broker: the zlane broker -- the event loop, its sockets and the table of
    message handlers (broker.c says the turn's order and where each noun
    lives). One thread owns all broker state. */
#ifndef ZL_BROKER_H
#define ZL_BROKER_H

#include "config.h"
#include "lead.h"

#include <stdint.h>

typedef struct _zl_broker_t zl_broker_t;

/*  Return a broker bound to the endpoints of `cfg` (borrowed; must outlive
    the broker), after its first election: leading (an LMDB store always),
    with the store's state recovered; or standing by, or without a
    database. NULL with a reason in `err`. */
zl_broker_t *zl_broker_new (zl_broker_config_t *cfg, char *err, size_t errlen);
/*  Destroy the broker, closing its sockets; nulls the caller's pointer. */
void zl_broker_destroy (zl_broker_t **self_p);
/*  What a turn returns. */
typedef enum {
    ZL_TURN_OK = 0,
    ZL_TURN_INTERRUPTED = 1,   // the wait was interrupted by a signal: nothing was done
    ZL_TURN_STORE_FAILED = -1, // the store failed: nothing was replied, the broker stops
    ZL_TURN_BAD_SOCKET = -2    // zl_broker_feed: not a socket name
} zl_turn_rc_t;

/*  Run one loop turn: wait at most `max_wait_ms` for input, then elect (when
    due) -> drain -> apply -> fire timers -> dispatch -> commit -> reply; a
    broker that does not lead only answers (broker.c). Returns ZL_TURN_OK
    (a turn whose commit was fenced or lost with the database included: the
    broker then goes on without the lead), ZL_TURN_INTERRUPTED, or
    ZL_TURN_STORE_FAILED (then the broker stops: every later call returns
    ZL_TURN_STORE_FAILED at once, sending nothing). */
int zl_broker_turn (zl_broker_t *self, int max_wait_ms);
/*  Run turns until `*stop` becomes non-zero. Returns 0, or -1 after a store
    failure. */
int zl_broker_run (zl_broker_t *self, volatile int *stop);
/*  Handle one frame as if `peer` (routing id bytes) had sent it on socket
    `which` ("frontend", "backend", "admin"), then run the rest of a turn
    (timers, dispatch, commit, replies). For fuzzing and tests; returns
    ZL_TURN_OK, ZL_TURN_BAD_SOCKET, or ZL_TURN_STORE_FAILED (the broker
    stopped, now or at an earlier turn). */
int zl_broker_feed (zl_broker_t *self, const char *which, const void *peer, size_t peer_len,
                    const void *data, size_t size);

/*  zl_broker_set_leadership, the tests' hook on the store's leadership
    calls: lead.h. */

/*  Return the endpoint actually bound for "frontend", "backend", "events"
    or "admin" (ephemeral ports resolved), or NULL. Borrowed. */
const char *zl_broker_endpoint (zl_broker_t *self, const char *which);

#endif
