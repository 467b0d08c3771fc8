/*  commit_mark: how far the loop's turns are committed (commit_mark.h). */
#include "commit_mark.h"

#include "zl_alloc.h"

#include <stdlib.h>

struct _zl_commit_mark_t {
    uint64_t committed; // every turn up to this one
    uint64_t started;   // the turn that started the commit under way
};

zl_commit_mark_t *
zl_commit_mark_new (void)
{
    return ZL_NEW (zl_commit_mark_t);
}

void
zl_commit_mark_destroy (zl_commit_mark_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free (*self_p);
    *self_p = NULL;
}

static void
s_reach (zl_commit_mark_t *self, uint64_t turn)
{
    if (turn > self->committed)
        self->committed = turn;
}

void
zl_commit_mark_done (zl_commit_mark_t *self, uint64_t turn)
{
    s_reach (self, turn);
}

void
zl_commit_mark_started (zl_commit_mark_t *self, uint64_t turn)
{
    self->started = turn;
}

void
zl_commit_mark_ended (zl_commit_mark_t *self)
{
    s_reach (self, self->started);
}

uint64_t
zl_commit_mark_turn (const zl_commit_mark_t *self)
{
    return self->committed;
}
