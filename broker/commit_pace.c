/*  commit_pace: when the commit thread may start its next commit (see the
    header). */
#include "commit_pace.h"

#include "zl_alloc.h"

#include <stdlib.h>

struct _zl_commit_pace_t {
    int64_t interval_us;
    bool handed;      // the loop's: a commit it handed over has not ended
    bool open_behind; // the loop's open batch began while one had not
    int64_t last_start_us;
};

zl_commit_pace_t *
zl_commit_pace_new (int64_t interval_us)
{
    zl_commit_pace_t *self = ZL_NEW (zl_commit_pace_t);
    zl_commit_pace_set_interval (self, interval_us);
    return self;
}

void
zl_commit_pace_destroy (zl_commit_pace_t **self_p)
{
    ZL_FREE (*self_p);
}

void
zl_commit_pace_set_interval (zl_commit_pace_t *self, int64_t interval_us)
{
    self->interval_us = interval_us > 0 ? interval_us : 0;
}

void
zl_commit_pace_write (zl_commit_pace_t *self, bool first)
{
    if (first && self->handed)
        self->open_behind = true;
}

bool
zl_commit_pace_hand_over (zl_commit_pace_t *self)
{
    bool behind = self->open_behind;
    self->open_behind = false;
    self->handed = true;
    return behind;
}

void
zl_commit_pace_ended (zl_commit_pace_t *self)
{
    self->handed = false;
}

void
zl_commit_pace_not_behind (zl_commit_pace_t *self)
{
    self->open_behind = false;
}

int64_t
zl_commit_pace_due (const zl_commit_pace_t *self, bool behind)
{
    return behind && self->interval_us ? self->last_start_us + self->interval_us : 0;
}

void
zl_commit_pace_started (zl_commit_pace_t *self, int64_t now_us)
{
    self->last_start_us = now_us;
}
