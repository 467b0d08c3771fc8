/*  zap: the broker's ZAP handler (ZeroMQ RFC 27) for CURVE, an actor with its
    own thread, bound to inproc://zeromq.zap.01 in czmq's context. It lets a
    client's handshake through when its public key is in the clients
    directory (see clients.h), and gives the key as the connection's User-Id.

    Each broker socket has a ZAP domain (ZL_ZAP_EVENTS for the events PUB
    socket). On the events socket a key also needs the role subscriber or
    admin: a PUB socket cannot answer a subscriber with an Error, so the role
    is checked at the handshake. On the other sockets every known key gets in
    and the broker checks each message against the key's role, answering a
    refused one with Error UNAUTHORIZED. A refused handshake is seen by the
    broker's socket monitors (err_auth_failed). */
#ifndef ZL_ZAP_H
#define ZL_ZAP_H

#define ZL_ZAP_EVENTS "zlane-events"
#define ZL_ZAP_OTHER "zlane"

typedef struct _zl_zap_t zl_zap_t;

/*  Start the handler for the certificates in `clients_dir`. NULL if the ZAP
    endpoint cannot be bound (another handler has it). */
zl_zap_t *zl_zap_new (const char *clients_dir);
/*  Stop the handler; nulls the caller's pointer. NULL-safe. */
void zl_zap_destroy (zl_zap_t **self_p);

#endif
