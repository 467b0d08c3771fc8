/*  id_counter: see id_counter.h. */
#include "id_counter.h"

#include "zl_alloc.h"

#include <stdlib.h>

struct _zl_id_counter_t {
    bool ahead;
    uint64_t stored;  // written in the store (committed, or in this turn)
    uint64_t durable; // ... as of the last commit
};

zl_id_counter_t *
zl_id_counter_new (bool ahead)
{
    zl_id_counter_t *self = ZL_NEW (zl_id_counter_t);
    self->ahead = ahead;
    return self;
}

void
zl_id_counter_destroy (zl_id_counter_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free (*self_p);
    *self_p = NULL;
}

void
zl_id_counter_reset (zl_id_counter_t *self)
{
    self->stored = self->durable = 0;
}

bool
zl_id_counter_due (zl_id_counter_t *self, uint64_t next_id, uint64_t *value)
{
    uint64_t want = next_id;
    if (self->ahead)
        want = next_id + ZL_ID_RESERVE / 2 <= self->stored ? self->stored : next_id + ZL_ID_RESERVE;
    if (want == self->stored)
        return false;
    self->stored = *value = want;
    return true;
}

void
zl_id_counter_committed (zl_id_counter_t *self)
{
    self->durable = self->stored;
}

uint64_t
zl_id_counter_durable (const zl_id_counter_t *self)
{
    return self->durable;
}
