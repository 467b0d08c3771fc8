/*  id_counter: the job-id counter the store holds, and how far it is
    durable. Each commit writes the counter when it changed. Where jobs may
    leave before their commit (the broker's early dispatch), it runs ahead of
    the ids given, ZL_ID_RESERVE at a time: a job that left before a crash
    undid its commit has an id below the committed counter, which the
    restarted broker gives to no other job. Elsewhere it is the next id. */
#ifndef ZL_ID_COUNTER_H
#define ZL_ID_COUNTER_H

#include <stdbool.h>
#include <stdint.h>

#define ZL_ID_RESERVE 4096

typedef struct _zl_id_counter_t zl_id_counter_t;

/*  A counter that nothing was written for yet; `ahead`: reserve ids. */
zl_id_counter_t *zl_id_counter_new (bool ahead);
/*  Destroy; nulls the caller's pointer. */
void zl_id_counter_destroy (zl_id_counter_t **self_p);
/*  Forget what was written (the broker forgot its state). */
void zl_id_counter_reset (zl_id_counter_t *self);
/*  The value the turn's commit should write, given the next id to give:
    true with it in `*value` (taken as written), false if unchanged. */
bool zl_id_counter_due (zl_id_counter_t *self, uint64_t next_id, uint64_t *value);
/*  The turn's commit succeeded: what it wrote is durable. */
void zl_id_counter_committed (zl_id_counter_t *self);
/*  The counter as of the last commit: no later job gets an id below it
    (0 until a commit wrote one). */
uint64_t zl_id_counter_durable (const zl_id_counter_t *self);

#endif
