/*  producers: the registry of connected producers and their credit.
    Credit is cumulative per connection: `limit` is how many job specs the
    producer may have sent since its Hello; it only grows. */
#ifndef ZL_PRODUCERS_H
#define ZL_PRODUCERS_H

#include "msg.h"
#include "wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct zl_producer_conn {
    zl_peer_t peer;
    char key[2 * ZL_PEER_ID_MAX + 1];
    char *name;
    uint64_t received;   // job specs received since Hello
    uint64_t limit;      // credit granted (cumulative)
    uint64_t sent_limit; // limit last sent to the producer
    int64_t last_seen_ms;
    // per-turn outbox
    zl_acceptance_t *acc;
    uint32_t n_acc, cap_acc;
    zl_rejection_t *rej; // reasons are static strings or turn-arena strings
    uint32_t n_rej, cap_rej;
} zl_producer_conn_t;

typedef struct _zl_producers_t zl_producers_t;

/*  Return an empty registry. */
zl_producers_t *zl_producers_new (void);
/*  Destroy; nulls the caller's pointer. */
void zl_producers_destroy (zl_producers_t **self_p);
/*  Return the producer `peer`, creating it if `create`; NULL otherwise. */
zl_producer_conn_t *zl_producers_get (zl_producers_t *self, const zl_peer_t *peer, bool create);
/*  Forget `producer`. */
void zl_producers_remove (zl_producers_t *self, zl_producer_conn_t *producer);
/*  Queue an acceptance for this turn. */
void zl_producer_conn_accept (zl_producer_conn_t *p, uint64_t seq, uint64_t job_id, bool duplicate);
/*  Queue a rejection for this turn (`reason` must outlive the turn). */
void zl_producer_conn_reject (zl_producer_conn_t *p, uint64_t seq, zl_reject_code_t code,
                              const char *reason, uint32_t retry_after_ms);
/*  Return all producers (borrowed) and their count. */
zl_producer_conn_t **zl_producers_all (zl_producers_t *self, size_t *count);

#endif
