/*  batch_hold: when a turn of the loop may leave its batch open
    (batch_hold.h). */
#include "batch_hold.h"

#include "zl_alloc.h"

#include <stdlib.h>

struct _zl_batch_hold_t {
    int64_t interval_ms;
    bool committed;  // the loop committed at least once
    int64_t last_ms; // its last commit
    bool open;       // a batch is held open, due at last_ms + interval_ms
};

zl_batch_hold_t *
zl_batch_hold_new (uint64_t interval_ms)
{
    zl_batch_hold_t *self = ZL_NEW (zl_batch_hold_t);
    self->interval_ms = (int64_t)interval_ms;
    return self;
}

void
zl_batch_hold_destroy (zl_batch_hold_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free (*self_p);
    *self_p = NULL;
}

bool
zl_batch_hold_may (const zl_batch_hold_t *self, int64_t now_ms)
{
    return self->interval_ms > 0 && self->committed && now_ms < self->last_ms + self->interval_ms;
}

void
zl_batch_hold_leave (zl_batch_hold_t *self)
{
    self->open = true;
}

void
zl_batch_hold_committed (zl_batch_hold_t *self, int64_t now_ms)
{
    self->committed = true;
    self->last_ms = now_ms;
    self->open = false;
}

int64_t
zl_batch_hold_due (const zl_batch_hold_t *self)
{
    return self->open ? self->last_ms + self->interval_ms : -1;
}
