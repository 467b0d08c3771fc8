#include "deps.h"

#include "u64map.h"
#include "zl_alloc.h"

#include <stdlib.h>

struct _zl_deps_t {
    zl_u64map_t *nodes; // job id -> zl_dep_t
};

zl_deps_t *
zl_deps_new (void)
{
    zl_deps_t *self = ZL_NEW (zl_deps_t);
    self->nodes = zl_u64map_new ();
    return self;
}

static void
s_node_free (zl_dep_t *node)
{
    free (node->children);
    free (node);
}

void
zl_deps_destroy (zl_deps_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_deps_t *self = *self_p;
    size_t cursor = 0;
    zl_dep_t *node;
    while ((node = zl_u64map_next (self->nodes, &cursor, NULL)))
        s_node_free (node);
    zl_u64map_destroy (&self->nodes);
    free (self);
    *self_p = NULL;
}

zl_dep_t *
zl_deps_get (zl_deps_t *self, uint64_t id, bool create)
{
    zl_dep_t *node = zl_u64map_get (self->nodes, id);
    if (!node && create) {
        node = ZL_NEW (zl_dep_t);
        zl_u64map_put (self->nodes, id, node);
    }
    return node;
}

void
zl_deps_add_child (zl_dep_t *node, uint64_t child)
{
    if (node->n_children == node->cap_children) {
        node->cap_children = node->cap_children ? node->cap_children * 2 : 2;
        node->children = zl_realloc (node->children, node->cap_children * sizeof (uint64_t));
    }
    node->children[node->n_children++] = child;
}

void
zl_deps_remove (zl_deps_t *self, uint64_t id)
{
    zl_dep_t *node = zl_u64map_remove (self->nodes, id);
    if (node)
        s_node_free (node);
}

size_t
zl_deps_count (zl_deps_t *self)
{
    return zl_u64map_size (self->nodes);
}
