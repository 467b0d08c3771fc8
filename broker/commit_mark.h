/*  commit_mark: how far the loop's turns are committed (the counter
    loop_turns_committed). A turn's writes go into the store's batch and
    are committed at its end; a commit that runs on past its turn (LMDB's
    commit thread, PostgreSQL) covers the writes of every turn up to the
    one that started it, and those turns are committed only when it ends.
    Meanwhile later turns answer, so a tool that must know a change is on
    disk waits until the mark reaches the turn that showed it. Turn numbers
    are the caller's (loop_turns), increasing. */
#ifndef ZL_COMMIT_MARK_H
#define ZL_COMMIT_MARK_H

#include <stdint.h>

typedef struct _zl_commit_mark_t zl_commit_mark_t;

/*  No turn committed yet. */
zl_commit_mark_t *zl_commit_mark_new (void);
/*  Destroy; nulls the caller's pointer. */
void zl_commit_mark_destroy (zl_commit_mark_t **self_p);
/*  Turn `turn` left nothing uncommitted: its commit ended within it, or it
    wrote nothing and no commit is under way. */
void zl_commit_mark_done (zl_commit_mark_t *self, uint64_t turn);
/*  Turn `turn` started a commit that runs on (or closed an empty batch
    while one does): its turns are committed when that commit ends. */
void zl_commit_mark_started (zl_commit_mark_t *self, uint64_t turn);
/*  The commit under way ended, committed. */
void zl_commit_mark_ended (zl_commit_mark_t *self);
/*  The last turn whose writes are all committed; 0: none yet. */
uint64_t zl_commit_mark_turn (const zl_commit_mark_t *self);

#endif
