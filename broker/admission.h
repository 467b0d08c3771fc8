/*  admission: credit and the checks every submitted job spec passes -- the
    policy over the producer records (producers.c holds and writes them).

    Credit: a producer's Hello gives it its share of the free room (max_depth
    less what is queued, split between the producers, at most
    producer_window); after every turn each producer's credit is raised to
    what it has sent plus its share again (zl_admission_regrant). Credit only
    grows. A Submit before Hello, or after the producer was forgotten for
    being silent past producer_idle, takes nothing.

    A Submit is accepted in two phases. Phase 1 decides each spec
    (zl_admission_decide: credit, the text rules and limits, the payload
    size, the lane, the key's tenants, store room, max_tenants, the
    idempotency key, the queue bounds) and writes every new job into a
    nested store batch, reserving its lane and tenant depth so the bounds
    hold exactly; if the store runs out of room the nested batch is dropped
    and those jobs are rejected STORE_FULL, with nothing changed in memory.
    Phase 2 makes the staged jobs live. The Accepted and Rejected replies
    are queued for after the turn's commit (replies.h). */
#ifndef ZL_ADMISSION_H
#define ZL_ADMISSION_H

#include "arena.h"
#include "clock.h"
#include "config.h"
#include "counters.h"
#include "jobs.h"
#include "lane.h"
#include "msg.h"
#include "producers.h"
#include "replies.h"
#include "scheduler.h"
#include "store.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct _zl_admission_t zl_admission_t;

/*  What admission works on, all borrowed and outliving it. */
typedef struct {
    const zl_broker_config_t *cfg;
    zl_lanes_t *lanes;
    zl_sched_t *sched;
    zl_jobs_t *jobs;
    zl_store_t *store;
    zl_producers_t *producers;
    zl_replies_t *replies;
    uint64_t *counters; // the broker's counters (ZL_CTR_*)
    zl_arena_t *turn;   // strings that live until the next turn
} zl_admission_env_t;

/*  True if the sender may submit for `tenant` (its key's binding). */
typedef bool (zl_admission_may_fn) (void *arg, const char *tenant);

/*  What becomes of one job spec. */
typedef enum { ZL_ADMIT_ACCEPT = 0, ZL_ADMIT_DUPLICATE, ZL_ADMIT_REFUSE } zl_admit_t;

typedef struct {
    zl_admit_t admit;
    // ZL_ADMIT_REFUSE: what is counted and told the producer
    zl_counter_id_t counter;
    zl_reject_code_t code;
    const char *reason; // static or in the turn arena
    uint32_t retry_after_ms;
    // ZL_ADMIT_DUPLICATE: the job the key names
    uint64_t original;
    // ZL_ADMIT_ACCEPT: where it goes
    zl_lane_t *lane;
    zl_tenant_t *tenant;
} zl_verdict_t;

/*  One Submit's state across its specs (zl_admission_decide's). */
typedef struct {
    zl_admission_may_fn *may;
    void *may_arg;
    bool room;      // the store has room for the Submit and its nested batch began
    bool failed;    // a store write failed: the rest is refused STORE_FULL
    bool listed;    // the declared lanes were named in a reason already
    uint64_t depth; // every lane's depth, with this Submit's staged jobs
} zl_admission_batch_t;

/*  Return the admission policy over `env` (copied). */
zl_admission_t *zl_admission_new (const zl_admission_env_t *env);
/*  Destroy; nulls the caller's pointer. */
void zl_admission_destroy (zl_admission_t **self_p);

/*  A Hello from `peer` with client name `name` (already checked): the
    connection starts again with its share of credit; a Credit is sent
    after the commit. Returns the producer (borrowed). */
zl_producer_conn_t *zl_admission_hello (zl_admission_t *self, const zl_peer_t *peer,
                                        const char *name, zl_now_t now);
/*  Decide one spec of a Submit from `p`: refused (with why), a duplicate
    of an earlier job, or to accept into a lane and tenant. Counts the spec
    against the producer's credit (and in jobs_submitted, jobs_duplicate,
    jobs_to_default_lane); the caller counts and answers a refusal. It may
    create the spec's tenant (or, with auto_lanes, its lane) but stores
    nothing. */
zl_verdict_t zl_admission_decide (zl_admission_t *self, zl_producer_conn_t *p,
                                  const zl_job_spec_t *spec, zl_admission_batch_t *batch,
                                  zl_now_t now);
/*  A Submit from `peer`, each spec decided, the accepted ones stored and
    made live, every reply queued for after the commit. `may` says which
    tenants the sender may submit for. Returns 0, or -1 if `peer` has no
    credit at all (never said Hello, or forgotten): nothing is taken and the
    caller answers NOT_READY. */
int zl_admission_submit (zl_admission_t *self, const zl_peer_t *peer, const zl_submit_t *sub,
                         zl_admission_may_fn *may, void *may_arg, zl_now_t now);
/*  Raise every producer's credit to its share of the free room (after the
    turn's changes, before the replies are flushed). */
void zl_admission_regrant (zl_admission_t *self);
/*  Forget the producers silent for producer_idle with nothing queued, and
    tell each (Error NOT_READY: send Hello again). */
void zl_admission_forget_idle (zl_admission_t *self, zl_now_t now);

#endif
