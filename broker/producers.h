/*  producers: the registry of connected producers (zl_producer_conn_t, not
    to be confused with the producer library's zl_producer_t), keyed by
    routing id. Every field of a record is written here, but the outbox,
    which belongs to replies.c. Credit is cumulative per connection: `limit`
    is how many job specs the producer may have sent since its Hello; it only
    grows. Who gets how much is admission.c's policy. */
#ifndef ZL_PRODUCERS_H
#define ZL_PRODUCERS_H

#include "replies.h"
#include "wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct zl_producer_conn {
    zl_peer_t peer;
    char key[2 * ZL_PEER_ID_MAX + 1]; // hex of the routing id
    char *name;                       // from Hello, or NULL
    uint64_t received;                // job specs received since Hello
    uint64_t limit;                   // credit granted (cumulative)
    int64_t last_seen_ms;             // monotonic
    zl_producer_outbox_t out;         // replies.c's
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
/*  Return all producers (borrowed) and their count. */
zl_producer_conn_t **zl_producers_all (zl_producers_t *self, size_t *count);

/*  A Hello: the connection starts again with `name` ("" = none) and no
    credit. */
void zl_producer_conn_restart (zl_producer_conn_t *p, const char *name, int64_t now_ms);
/*  The producer was heard from at `now_ms`. */
void zl_producer_conn_seen (zl_producer_conn_t *p, int64_t now_ms);
/*  Count one more job spec received; true if it was within the credit. */
bool zl_producer_conn_take_credit (zl_producer_conn_t *p);
/*  Raise the credit to what was received plus `share`; it never shrinks. */
void zl_producer_conn_grant (zl_producer_conn_t *p, uint64_t share);
/*  The credit granted so far. */
uint64_t zl_producer_conn_limit (const zl_producer_conn_t *p);
/*  Its name for the logs: the Hello's, or the routing id in hex. */
const char *zl_producer_conn_name (const zl_producer_conn_t *p);

#endif
