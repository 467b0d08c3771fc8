/*  lead: this broker's leadership, as the store elects it (store.h): the
    role, epoch and leader last elected, what changed at each election (and
    saying so in the log), who a standby names for each socket, and when a
    client turned away should come back. The broker asks it before each
    turn's batch (broker.c) and acts on the changes: load the store on
    taking the lead, forget its state on losing it.

    The store calls go through a table that tests may swap
    (zl_broker_set_leadership) to play a store that several brokers share. */
#ifndef ZL_LEAD_H
#define ZL_LEAD_H

#include "msg.h"
#include "replies.h" // zl_sock_t
#include "store.h"

#include <stdbool.h>
#include <stdint.h>

/*  The store's leadership calls the broker makes (store.h): elect,
    elect_due, the commit of a turn's batch, and the recovery cause. By
    default the store's own; tests swap in theirs to play the roles of a
    store that several brokers share on LMDB (a standby, an unreachable
    database, a fenced commit). Process-wide, like zl_store_set_fault; NULL
    restores the store's. */
typedef struct {
    zl_store_role_t (*elect) (void *ctx, zl_store_t *store, int64_t mono_ms, zl_store_lead_t *out);
    int64_t (*elect_due) (void *ctx, zl_store_t *store);
    zl_store_rc_t (*commit) (void *ctx, zl_store_t *store);
    const char *(*recovery_cause) (void *ctx, zl_store_t *store);
} zl_leadership_t;
void zl_broker_set_leadership (const zl_leadership_t *fns, void *ctx);

typedef struct _zl_lead_t zl_lead_t;

/*  A broker's leadership on `store` (borrowed), as `name` (copied) in the
    log; it stands by until the first election. */
zl_lead_t *zl_lead_new (zl_store_t *store, const char *name);
void zl_lead_destroy (zl_lead_t **self_p);

/*  Renew, watch or take the lead (outside a batch), log what changed.
    Returns the role; *was_leading says whether it led before. */
zl_store_role_t zl_lead_elect (zl_lead_t *self, int64_t mono_ms, bool *was_leading);
/*  This broker no longer leads (a store call showed it): it is `role` now;
    who leads is the next election's news. Returns whether it led. */
bool zl_lead_step_down (zl_lead_t *self, zl_store_role_t role);

/*  The role, the epoch and the leader as last elected (borrowed). */
const zl_store_lead_t *zl_lead_state (zl_lead_t *self);
zl_store_role_t zl_lead_role (zl_lead_t *self);
/*  When the next election is due (INT64_MAX: never, a store one broker holds). */
int64_t zl_lead_due (zl_lead_t *self);
/*  The leader's endpoint for clients of `sock` ("" unknown). */
const char *zl_lead_leader_for (zl_lead_t *self, zl_sock_t sock);
/*  How long a client turned away UNAVAILABLE should wait: until this broker
    dials its database again, within [100 ms, 5 s]. */
uint32_t zl_lead_retry_after_ms (zl_lead_t *self, int64_t mono_ms);
/*  True for the one request a broker answers whatever its role: Stats
    (operators must see the role). */
bool zl_lead_answered_in_any_role (const zl_msg_t *msg);

/*  The store calls the broker makes through the table above. */
zl_store_rc_t zl_lead_commit (zl_lead_t *self);
/*  The commit started (zl_store_commit_start): ZL_STORE_PENDING while the
    store commits; a swapped table's commit runs to its end. */
zl_store_rc_t zl_lead_commit_start (zl_lead_t *self);
const char *zl_lead_recovery_cause (zl_lead_t *self);

#endif
