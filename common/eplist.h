/*  eplist: the broker endpoints a client was given, as a comma-separated
    list ("tcp://a:5570,tcp://b:5570"), and the one it uses now. Brokers that
    share one store serve one at a time: a client talks to one endpoint,
    moves on to the next (round robin) when it stops answering, and follows
    a standby's NOT_LEADER to the leader's endpoint. Not thread-safe. */
#ifndef ZL_EPLIST_H
#define ZL_EPLIST_H

#include <stdbool.h>
#include <stddef.h>

#define ZL_EPLIST_MAX 64      // endpoints in one list
#define ZL_EPLIST_MAX_LEN 255 // bytes in one endpoint

typedef struct _zl_eplist_t zl_eplist_t;

/*  Return a new list parsed from `text` (entries separated by commas,
    blanks around them ignored), the first entry current; or NULL with
    errno EINVAL if an entry is empty or longer than ZL_EPLIST_MAX_LEN, or
    there are more than ZL_EPLIST_MAX. Caller owns. */
zl_eplist_t *zl_eplist_new (const char *text);

/*  Return 0 if ZeroMQ takes every endpoint of the list (tried on a
    throwaway socket, closed at once), or -1 with errno, the refused one in
    `*bad` (borrowed). */
int zl_eplist_probe (zl_eplist_t *self, const char **bad);

/*  Destroy the list; nulls the caller's pointer; NULL-safe. */
void zl_eplist_destroy (zl_eplist_t **self_p);

/*  Return the number of endpoints in the list (at least 1). */
size_t zl_eplist_size (zl_eplist_t *self);

/*  Return endpoint `index` of the list (borrowed), NULL past the end. */
const char *zl_eplist_at (zl_eplist_t *self, size_t index);

/*  Return the endpoint to use now (borrowed until the next move). */
const char *zl_eplist_current (zl_eplist_t *self);

/*  Return the whole list as "a, b" for messages (borrowed). */
const char *zl_eplist_text (zl_eplist_t *self);

/*  Return true if there is another endpoint to move to: the list has more
    than one, or the current one is a leader's endpoint from outside it. */
bool zl_eplist_roams (zl_eplist_t *self);

/*  Move to the next endpoint of the list, round robin (from a leader's
    endpoint outside the list: the one after the list entry used last).
    Returns the new current endpoint (borrowed). */
const char *zl_eplist_next (zl_eplist_t *self);

/*  Follow a NOT_LEADER that named `n` leader endpoints: move to the first
    of them that is in the list, else to the first well-formed one as given
    (copied); with none usable, to the next of the list. Returns true if it
    moved to a named endpoint. */
bool zl_eplist_follow (zl_eplist_t *self, size_t n, const char *const *leader);

#endif
