#include "security.h"

#include "clients.h"
#include "clock.h"
#include "log.h"
#include "zap.h"
#include "zl_alloc.h"

#include <string.h>
#include <sys/stat.h>

#define MAX_ROUTERS 8

struct _zl_security_t {
    bool curve;
    zcert_t *cert;         // the broker's key pair
    zl_zap_t *zap;         // the ZAP handler of the events PUB (its own thread)
    zl_clients_t *clients; // the loop's view of the clients directory
    void *monitor;         // refused handshakes on the events PUB
    zl_router_t *routers[MAX_ROUTERS];
    size_t n_routers;
};

// A router's CURVE handshake (in the loop's thread): a key in the clients
// directory gets in; each message is then checked against its role.
static bool
s_let_in (void *arg, const uint8_t key[32])
{
    zl_security_t *self = arg;
    char text[41];
    return zmq_z85_encode (text, key, 32) &&
           zl_clients_lookup (self->clients, text, zl_clock_mono_ms ()) != NULL;
}

bool
zl_security_local_endpoint (const char *ep)
{
    if (!strncmp (ep, "ipc://", 6) || !strncmp (ep, "inproc://", 9))
        return true;
    const char *host = strstr (ep, "://");
    host = host ? host + 3 : ep;
    return !strncmp (host, "127.", 4) || !strncmp (host, "localhost:", 10) ||
           !strncmp (host, "[::1]:", 6);
}

// Without CURVE: every endpoint must be local, unless --insecure.
static int
s_check_plaintext (const zl_broker_config_t *cfg, char *err, size_t errlen)
{
    const char *eps[] = {cfg->frontend, cfg->backend, cfg->events, cfg->admin};
    for (int i = 0; i < 4; i++) {
        if (zl_security_local_endpoint (eps[i]))
            continue;
        if (!cfg->insecure) {
            snprintf (err, errlen,
                      "%s is reachable from other hosts but CURVE is off: start with "
                      "--curve --cert FILE --clients DIR, or with --insecure to accept "
                      "plaintext",
                      eps[i]);
            return -1;
        }
        zl_warn ("broker",
                 "INSECURE: %s is reachable from other hosts without CURVE: "
                 "traffic is plaintext and any client may connect",
                 eps[i]);
    }
    return 0;
}

// The broker's certificate: it must hold a secret key.
static zcert_t *
s_load_cert (const char *path, char *err, size_t errlen)
{
    zcert_t *cert = zcert_load (path);
    if (!cert) {
        snprintf (err, errlen,
                  "cannot load the broker certificate %s (make one with zlane-ctl keygen)", path);
        return NULL;
    }
    // a public certificate loads too, with a secret key of zeros: every
    // handshake would then fail while the broker looks healthy
    if (!strcmp (zcert_secret_txt (cert), "0000000000000000000000000000000000000000")) {
        snprintf (err, errlen,
                  "the broker certificate %s holds no secret key: give the NAME_secret file "
                  "that zlane-ctl keygen wrote",
                  path);
        zcert_destroy (&cert);
    }
    return cert;
}

zl_security_t *
zl_security_new (const zl_broker_config_t *cfg, zl_router_t *const *routers, size_t n_routers,
                 zsock_t *events, char *err, size_t errlen)
{
    if (n_routers > MAX_ROUTERS) {
        snprintf (err, errlen, "security: %zu routers, at most %d", n_routers, MAX_ROUTERS);
        return NULL;
    }
    if (!cfg->curve) {
        if (s_check_plaintext (cfg, err, errlen) != 0)
            return NULL;
        zl_security_t *self = ZL_NEW (zl_security_t);
        self->n_routers = n_routers;
        memcpy (self->routers, routers, n_routers * sizeof *routers);
        return self;
    }
    if (!cfg->cert || !cfg->clients) {
        snprintf (err, errlen,
                  "--curve needs --cert FILE (the broker's secret certificate) and "
                  "--clients DIR (allowed client certificates)");
        return NULL;
    }
    zcert_t *cert = s_load_cert (cfg->cert, err, errlen);
    if (!cert)
        return NULL;
    struct stat sb;
    if (stat (cfg->clients, &sb) != 0 || !S_ISDIR (sb.st_mode)) {
        snprintf (err, errlen, "clients directory %s does not exist", cfg->clients);
        zcert_destroy (&cert);
        return NULL;
    }
    zl_security_t *self = ZL_NEW (zl_security_t);
    self->curve = true;
    self->cert = cert;
    self->zap = zl_zap_new (cfg->clients);
    if (!self->zap) {
        snprintf (err, errlen, "cannot start the ZAP handler (inproc://zeromq.zap.01 is taken)");
        zl_security_destroy (&self);
        return NULL;
    }
    self->clients = zl_clients_new (cfg->clients, ZL_CLIENTS_MISS_MS);
    self->n_routers = n_routers;
    memcpy (self->routers, routers, n_routers * sizeof *routers);
    for (size_t i = 0; i < n_routers; i++)
        zl_router_set_curve (routers[i], zcert_public_key (cert), zcert_secret_key (cert), s_let_in,
                             self);
    zcert_apply (cert, events);
    zsock_set_curve_server (events, 1);
    zsock_set_zap_domain (events, ZL_ZAP_EVENTS);
    char ep[64];
    snprintf (ep, sizeof ep, "inproc://zlane-monitor-%p", (void *)self);
    zmq_socket_monitor (zsock_resolve (events), ep,
                        ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                            ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL);
    self->monitor = zmq_socket (zsys_init (), ZMQ_PAIR);
    zmq_connect (self->monitor, ep);
    zl_info ("broker", "CURVE on: key %s, %zu client key(s) from %s", zcert_public_txt (cert),
             zl_clients_count (self->clients), cfg->clients);
    return self;
}

void
zl_security_destroy (zl_security_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_security_t *self = *self_p;
    if (self->monitor)
        zmq_close (self->monitor);
    zl_zap_destroy (&self->zap);
    zl_clients_destroy (&self->clients);
    zcert_destroy (&self->cert);
    free (self);
    *self_p = NULL;
}

bool
zl_security_curve (zl_security_t *self)
{
    return self->curve;
}

zcert_t *
zl_security_client (zl_security_t *self, const char *public_txt, int64_t now_ms)
{
    if (!self->clients || !public_txt)
        return NULL;
    return zl_clients_lookup (self->clients, public_txt, now_ms);
}

uint64_t
zl_security_refused (zl_security_t *self)
{
    uint64_t refused = 0;
    for (size_t i = 0; i < self->n_routers; i++) // each logged by its router
        refused += zl_router_refused (self->routers[i]);
    if (self->monitor) {
        zmq_msg_t m;
        zmq_msg_init (&m);
        while (zmq_msg_recv (&m, self->monitor, ZMQ_DONTWAIT) >= 0) {
            // an event: a frame with the event number and value, then the endpoint
            bool event_frame = zmq_msg_size (&m) >= 6;
            uint16_t event = 0;
            if (event_frame)
                memcpy (&event, zmq_msg_data (&m), sizeof event);
            if (zmq_msg_more (&m))
                zmq_msg_recv (&m, self->monitor, ZMQ_DONTWAIT);
            if (event_frame) {
                refused++;
                zl_warn ("broker", "refused a connection on the events socket (%s)",
                         event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ? "unknown key"
                                                                  : "handshake failed");
            }
        }
        zmq_msg_close (&m);
    }
    return refused;
}
