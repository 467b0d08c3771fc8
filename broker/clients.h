/*  clients: the client certificates let in with CURVE, read from the clients
    directory and found by public key (Z85 text). The directory is read at
    start, and a lookup looks at it again (one readdir and a stat per file)
    when ZL_CLIENTS_CHECK_MS have passed since the last look, or `miss_ms`
    when the key is not found; it reads the certificates again only if the
    directory changed. So a key just removed stops working within
    ZL_CLIENTS_CHECK_MS, and a key just added is let in within `miss_ms`.
    The ZAP handler, which strangers reach, keeps one with miss_ms =
    ZL_CLIENTS_CHECK_MS; the broker's loop, which sees only connections the
    handler let in, one with ZL_CLIENTS_MISS_MS, so it finds their keys too.

    Unlike czmq's zcertstore, which reads the directory on every lookup and
    aborts on a repeated key, two files holding the same public key are both
    left out, with an error logged: which one carries the real bindings is
    unknown, so neither is trusted. Files that are not certificates are
    skipped with a warning. One instance per thread. */
#ifndef ZL_CLIENTS_H
#define ZL_CLIENTS_H

#include <czmq.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZL_CLIENTS_CHECK_MS 250
#define ZL_CLIENTS_MISS_MS 1

typedef struct _zl_clients_t zl_clients_t;

/*  Read the certificates in `dir` (the directory must exist); a key not
    found looks at the directory again if `miss_ms` have passed. */
zl_clients_t *zl_clients_new (const char *dir, int64_t miss_ms);
/*  Destroy; nulls the caller's pointer. NULL-safe. */
void zl_clients_destroy (zl_clients_t **self_p);
/*  The certificate of `public_txt` (borrowed, valid until the next call), or
    NULL if it is not let in. `now_ms` is a monotonic clock reading. */
zcert_t *zl_clients_lookup (zl_clients_t *self, const char *public_txt, int64_t now_ms);
/*  True if the comma list `list` (a certificate's "tenants", "lanes" or a
    set of roles; "*" is everything, spaces after commas are allowed) names
    `name`. */
bool zl_clients_listed (const char *list, const char *name);
/*  How many keys are let in now. */
size_t zl_clients_count (zl_clients_t *self);

#endif
