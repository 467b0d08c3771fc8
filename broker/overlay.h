/*  overlay: the store writes a batch holds before they reach the store, in
    the order they were made, with an index to find the latest one of a key.

    The LMDB store's commit thread (store_lmdb.c) commits one batch while
    the loop writes the next: the loop's writes go into an overlay instead
    of LMDB's write transaction (which the thread owns), its reads look in
    the open batch's overlay and then in the one being committed before
    they read LMDB, and the thread replays the overlay in order into its
    transaction. An op is a kind, a small argument, a key (what a read
    looks it up by; none for an op no read needs) and its data, all copied
    in. A nested batch (one Submit's writes) is a mark: dropping it drops
    the ops after the mark. */
#ifndef ZL_OVERLAY_H
#define ZL_OVERLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _zl_overlay_t zl_overlay_t;

/*  One op, borrowed from the overlay until it is cleared or cut. */
typedef struct {
    unsigned kind;
    unsigned arg;
    const uint8_t *key; // NULL for an op without a key
    size_t key_len;
    const uint8_t *data;
    size_t len;
} zl_overlay_op_t;

zl_overlay_t *zl_overlay_new (void);
/*  Destroy; nulls the caller's pointer. */
void zl_overlay_destroy (zl_overlay_t **self_p);
/*  Drop every op (the memory is kept for the next batch). */
void zl_overlay_clear (zl_overlay_t *self);
/*  Append an op. `key` (`key_len` bytes, at most 64; NULL: none) makes it
    the one zl_overlay_find returns for that key until a later op of the same
    key. Key and data are copied; with `data` NULL the caller writes the
    `len` bytes at the pointer returned (valid until the next add). */
uint8_t *zl_overlay_add (zl_overlay_t *self, unsigned kind, unsigned arg, const void *key,
                         size_t key_len, const void *data, size_t len);
/*  How many ops it holds: a mark for zl_overlay_cut. */
size_t zl_overlay_count (const zl_overlay_t *self);
/*  Drop the ops from `mark` on (a nested batch aborted). */
void zl_overlay_cut (zl_overlay_t *self, size_t mark);
/*  The op at `i` (< zl_overlay_count), in the order they were added. */
zl_overlay_op_t zl_overlay_at (const zl_overlay_t *self, size_t i);
/*  The latest op of `key`: true with it in *out, false when none has it. */
bool zl_overlay_find (const zl_overlay_t *self, const void *key, size_t key_len,
                      zl_overlay_op_t *out);
/*  Bytes the ops hold (keys and data). */
size_t zl_overlay_bytes (const zl_overlay_t *self);

#endif
