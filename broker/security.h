/*  security: the broker's transport security. Without CURVE it refuses an
    endpoint other hosts can reach unless --insecure (which warns). With
    CURVE it loads the broker's key pair, makes each ROUTER a CURVE server
    that lets in the keys of the clients directory (clients.c; the same
    directory serves the loop's per-message lookups), and makes the events
    PUB (a libzmq socket) one too, behind the ZAP handler (zap.c). It counts
    the refused handshakes of all of them. */
#ifndef ZL_SECURITY_H
#define ZL_SECURITY_H

#include "config.h"
#include "router.h"

#include <czmq.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _zl_security_t zl_security_t;

/*  Set up security for the `n_routers` ROUTERs and the events PUB socket
    (bound later; its ZAP domain admits subscriber and admin keys only), all
    borrowed and outliving it. Returns the security, or NULL with `err`
    filled (an endpoint refused, a certificate or the clients directory
    missing, the ZAP endpoint taken). */
zl_security_t *zl_security_new (const zl_broker_config_t *cfg, zl_router_t *const *routers,
                                size_t n_routers, zsock_t *events, char *err, size_t errlen);
/*  Stop the ZAP handler and the monitor; nulls the caller's pointer. */
void zl_security_destroy (zl_security_t **self_p);
/*  True if CURVE is on. */
bool zl_security_curve (zl_security_t *self);
/*  The certificate of a client's public key (the User-Id ZAP gave its
    connection), with its role and bindings; NULL if CURVE is off or the key
    is no longer let in. Borrowed until the next call. */
zcert_t *zl_security_client (zl_security_t *self, const char *public_txt, int64_t now_ms);
/*  Handshakes refused since the last call (each logged). */
uint64_t zl_security_refused (zl_security_t *self);
/*  True for an endpoint only this host can reach (loopback, ipc, inproc). */
bool zl_security_local_endpoint (const char *endpoint);

#endif
