/*  deps: the dependency graph of the jobs that have parents or children
    (workflows). A node per such job, keyed by job id: the ids of its
    children, how many of its parents are not acked yet while it waits, and
    the parent whose dead-lettering buried it. Jobs without dependencies
    have no node, so they cost nothing here. A job's own parents are in its
    stored record (JobRec.depends_on), read when needed. jobs.c owns the
    graph and changes it; nothing here changes a job's state. */
#ifndef ZL_DEPS_H
#define ZL_DEPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t *children; // ids, in the order they were added
    uint32_t n_children, cap_children;
    uint32_t parents_left;  // WAITING: parents not acked yet
    uint64_t failed_parent; // DEAD because this parent was dead-lettered; 0 = not
} zl_dep_t;

typedef struct _zl_deps_t zl_deps_t;

/*  Return an empty graph. */
zl_deps_t *zl_deps_new (void);
/*  Destroy the graph and its nodes; nulls the caller's pointer. */
void zl_deps_destroy (zl_deps_t **self_p);
/*  Return the node of job `id` (borrowed), made empty if absent and
    `create`; NULL if absent otherwise. */
zl_dep_t *zl_deps_get (zl_deps_t *self, uint64_t id, bool create);
/*  Add `child` to `node`'s children. */
void zl_deps_add_child (zl_dep_t *node, uint64_t child);
/*  Forget the node of job `id`, if any. */
void zl_deps_remove (zl_deps_t *self, uint64_t id);
/*  Number of nodes. */
size_t zl_deps_count (zl_deps_t *self);

#endif
