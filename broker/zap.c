#include "zap.h"

#include "clients.h"
#include "clock.h"
#include "log.h"
#include "zl_alloc.h"

#include <czmq.h>
#include <stdbool.h>
#include <string.h>

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"

struct _zl_zap_t {
    zactor_t *actor;
};

// Decide one request: 200 with the key's text as User-Id, or 400 and why.
static const char *
s_decide (zl_clients_t *clients, zmsg_t *req, char *user_id, const char **why)
{
    // version, request id, domain, address, identity, mechanism, credentials
    // (zmsg_next starts over after the last frame: count them first)
    zframe_t *f[7] = {0};
    if (zmsg_size (req) < 7) {
        *why = "malformed ZAP request";
        return "500";
    }
    for (int i = 0; i < 7; i++)
        f[i] = i ? zmsg_next (req) : zmsg_first (req);
    if (!zframe_streq (f[0], "1.0")) {
        *why = "malformed ZAP request";
        return "500";
    }
    if (!zframe_streq (f[5], "CURVE") || zframe_size (f[6]) != 32) {
        *why = "CURVE only";
        return "400";
    }
    zmq_z85_encode (user_id, zframe_data (f[6]), 32);
    zcert_t *cert = zl_clients_lookup (clients, user_id, zl_clock_mono_ms ());
    if (!cert) {
        *why = "unknown key";
        return "400";
    }
    if (zframe_streq (f[2], ZL_ZAP_EVENTS)) {
        const char *role = zcert_meta (cert, "role");
        if (!role || !zl_clients_listed ("subscriber,admin", role)) {
            zl_warn ("zap", "events: key %s (role %s) may not subscribe", user_id,
                     role ? role : "none");
            *why = "this key's role may not subscribe";
            return "400";
        }
    }
    *why = "OK";
    return "200";
}

static void
s_answer (zsock_t *handler, zl_clients_t *clients)
{
    zmsg_t *req = zmsg_recv (handler);
    if (!req)
        return;
    char user_id[41] = "";
    const char *why;
    const char *status = s_decide (clients, req, user_id, &why);
    zframe_t *request_id = zmsg_first (req) ? zmsg_next (req) : NULL;
    zmsg_t *rep = zmsg_new ();
    zmsg_addstr (rep, "1.0");
    if (request_id)
        zmsg_addmem (rep, zframe_data (request_id), zframe_size (request_id));
    else
        zmsg_addstr (rep, "");
    zmsg_addstr (rep, status);
    zmsg_addstr (rep, why);
    zmsg_addstr (rep, strcmp (status, "200") ? "" : user_id);
    zmsg_addmem (rep, NULL, 0); // no metadata
    zmsg_send (&rep, handler);
    zmsg_destroy (&req);
}

static void
s_actor (zsock_t *pipe, void *args)
{
    // strangers reach this one: a miss does not read the directory again
    // more often than the regular check
    zl_clients_t *clients = zl_clients_new ((const char *)args, ZL_CLIENTS_CHECK_MS);
    zsock_t *handler = zsock_new (ZMQ_REP);
    zsock_signal (pipe, 0); // zactor_new's handshake; then whether it bound
    if (zsock_bind (handler, "%s", ZAP_ENDPOINT) != 0) {
        zstr_send (pipe, "FAIL");
        zsock_destroy (&handler);
        zl_clients_destroy (&clients);
        zmsg_t *cmd = zmsg_recv (pipe); // $TERM from zactor_destroy
        zmsg_destroy (&cmd);
        return;
    }
    zstr_send (pipe, "OK");
    zpoller_t *poller = zpoller_new (pipe, handler, NULL);
    for (;;) {
        void *which = zpoller_wait (poller, -1);
        if (which == handler)
            s_answer (handler, clients);
        else if (which == pipe) {
            zmsg_t *cmd = zmsg_recv (pipe);
            char *verb = cmd ? zmsg_popstr (cmd) : NULL;
            bool term = !verb || streq (verb, "$TERM");
            zstr_free (&verb);
            zmsg_destroy (&cmd);
            if (term)
                break;
        } else
            break; // interrupted
    }
    zpoller_destroy (&poller);
    zsock_destroy (&handler);
    zl_clients_destroy (&clients);
}

zl_zap_t *
zl_zap_new (const char *clients_dir)
{
    zl_zap_t *self = ZL_NEW (zl_zap_t);
    self->actor = zactor_new (s_actor, (void *)clients_dir);
    char *status = self->actor ? zstr_recv (self->actor) : NULL;
    bool ok = status && streq (status, "OK");
    zstr_free (&status);
    if (!ok)
        zl_zap_destroy (&self);
    return self;
}

void
zl_zap_destroy (zl_zap_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zactor_destroy (&(*self_p)->actor);
    free (*self_p);
    *self_p = NULL;
}
