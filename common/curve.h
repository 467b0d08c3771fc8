/*  curve: client-side CURVE settings shared by the producer, the worker and
    zlane-ctl. Keys are Z85 text (40 characters), as czmq's certificates
    store them. */
#ifndef ZL_CURVE_H
#define ZL_CURVE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char server_public[41]; // the broker's public key; empty = CURVE off
    char public_key[41];    // this client's key pair
    char secret_key[41];
} zl_curve_t;

/*  True if `c` turns CURVE on. */
bool zl_curve_enabled (const zl_curve_t *c);
/*  Load the broker's public certificate file and this client's secret
    certificate file (zlane-ctl keygen writes both kinds). Returns 0, or -1
    with a reason in `err`. */
int zl_curve_load (zl_curve_t *c, const char *server_cert, const char *client_cert, char *err,
                   size_t errlen);
/*  Set the CURVE client options on `zsock` (a zsock_t *) before it connects;
    does nothing when CURVE is off. */
void zl_curve_apply (const zl_curve_t *c, void *zsock);

#endif
