/*  dlist: an intrusive circular doubly linked list with a sentinel. A link
    knows both neighbours, so unlinking needs no head; a link alone (just
    made, or unlinked) points at itself. The broker's router keeps its
    connections in such lists, the worker its settlements. Header only. */
#ifndef ZL_DLIST_H
#define ZL_DLIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct _zl_dlink_t {
    struct _zl_dlink_t *prev, *next;
} zl_dlink_t;

/*  The struct of `type` whose member `field` is the link at `ptr`. */
#define ZL_DLINK_OWNER(ptr, type, field) ((type *)((char *)(ptr)-offsetof (type, field)))

/*  Make `l` a link alone, or an empty list's sentinel. */
static inline void
zl_dlink_init (zl_dlink_t *l)
{
    l->prev = l->next = l;
}

/*  True if `l` is in a list (for a sentinel: the list is not empty). */
static inline bool
zl_dlink_linked (const zl_dlink_t *l)
{
    return l->next != l;
}

/*  Put `l` (alone) at the end of the list whose sentinel is `head`. */
static inline void
zl_dlink_push (zl_dlink_t *head, zl_dlink_t *l)
{
    l->prev = head->prev;
    l->next = head;
    head->prev->next = l;
    head->prev = l;
}

/*  Take `l` out of its list; it is alone after. Harmless on a link alone. */
static inline void
zl_dlink_unlink (zl_dlink_t *l)
{
    l->prev->next = l->next;
    l->next->prev = l->prev;
    zl_dlink_init (l);
}

#endif
