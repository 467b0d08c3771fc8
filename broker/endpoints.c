#include "endpoints.h"

#include "zl_alloc.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

enum { EVENTS = ZL_SOCK_COUNT, N_SOCKS }; // the PUB after the ROUTERs

static const char *s_names[N_SOCKS] = {"frontend", "backend", "admin", "events"};

struct _zl_endpoints_t {
    const zl_broker_config_t *cfg;
    zsock_t *zsocks[N_SOCKS];
    void *socks[N_SOCKS];
    char bound[N_SOCKS][256];
};

static zsock_t *
s_router (const zl_broker_config_t *cfg)
{
    zsock_t *zs = zsock_new (ZMQ_ROUTER);
    void *s = zsock_resolve (zs);
    int one = 1, hwm = 100000, linger = 0;
    // a frame larger than this drops the sender's connection: it bounds what
    // one peer can make the broker buffer and decode (an Ack item carries up
    // to max_result; the worker library cuts Ack frames at 4 MiB of results)
    int64_t max_msg = (int64_t)cfg->max_payload * 2 + (int64_t)cfg->max_result +
                      (int64_t)cfg->max_checkpoint + (16 << 20);
    zmq_setsockopt (s, ZMQ_MAXMSGSIZE, &max_msg, sizeof max_msg);
    zmq_setsockopt (s, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt (s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt (s, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt (s, ZMQ_LINGER, &linger, sizeof linger);
    return zs;
}

zl_endpoints_t *
zl_endpoints_new (const zl_broker_config_t *cfg)
{
    zl_endpoints_t *self = ZL_NEW (zl_endpoints_t);
    self->cfg = cfg;
    for (int i = 0; i < ZL_SOCK_COUNT; i++)
        self->zsocks[i] = s_router (cfg);
    self->zsocks[EVENTS] = zsock_new (ZMQ_PUB);
    for (int i = 0; i < N_SOCKS; i++)
        self->socks[i] = zsock_resolve (self->zsocks[i]);
    int linger = 0;
    zmq_setsockopt (self->socks[EVENTS], ZMQ_LINGER, &linger, sizeof linger);
    return self;
}

void
zl_endpoints_destroy (zl_endpoints_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_endpoints_t *self = *self_p;
    for (int i = 0; i < N_SOCKS; i++)
        zsock_destroy (&self->zsocks[i]);
    free (self);
    *self_p = NULL;
}

void *
zl_endpoints_router (zl_endpoints_t *self, zl_sock_t sock)
{
    return self->socks[sock];
}

void *
zl_endpoints_events (zl_endpoints_t *self)
{
    return self->socks[EVENTS];
}

zsock_t **
zl_endpoints_zsocks (zl_endpoints_t *self, const char ***names)
{
    *names = s_names;
    return self->zsocks;
}

static int
s_bind (zl_endpoints_t *self, int slot, const char *endpoint, char *err, size_t errlen)
{
    if (zmq_bind (self->socks[slot], endpoint) != 0) {
        snprintf (err, errlen, "cannot bind %s: %s", endpoint, zmq_strerror (errno));
        return -1;
    }
    size_t len = sizeof self->bound[slot];
    zmq_getsockopt (self->socks[slot], ZMQ_LAST_ENDPOINT, self->bound[slot], &len);
    return 0;
}

int
zl_endpoints_bind (zl_endpoints_t *self, char *err, size_t errlen)
{
    const zl_broker_config_t *cfg = self->cfg;
    return s_bind (self, ZL_SOCK_FRONTEND, cfg->frontend, err, errlen) ||
                   s_bind (self, ZL_SOCK_BACKEND, cfg->backend, err, errlen) ||
                   s_bind (self, EVENTS, cfg->events, err, errlen) ||
                   s_bind (self, ZL_SOCK_ADMIN, cfg->admin, err, errlen)
               ? -1
               : 0;
}

const char *
zl_endpoints_bound (zl_endpoints_t *self, const char *which)
{
    for (int i = 0; i < N_SOCKS; i++)
        if (!strcmp (which, s_names[i]))
            return self->bound[i];
    return NULL;
}

int
zl_endpoints_advertise (const char *bound, const char *advertise, char *out, size_t size)
{
    if (strncmp (bound, "tcp://", 6) != 0) { // ipc, inproc: the same name for everyone
        snprintf (out, size, "%s", bound);
        return 0;
    }
    const char *host = bound + 6;
    const char *colon = strrchr (host, ':');
    if (!colon || colon == host || !colon[1])
        return -1;
    size_t host_len = (size_t)(colon - host);
    char name[256];
    if (advertise)
        snprintf (name, sizeof name, "%s", advertise);
    else
        snprintf (name, sizeof name, "%.*s", (int)host_len, host);
    if (!advertise && (!strcmp (name, "0.0.0.0") || !strcmp (name, "[::]") || !strcmp (name, "*") ||
                       !strcmp (name, "[*]"))) {
        if (gethostname (name, sizeof name) != 0 || !name[0])
            return -1;
        name[sizeof name - 1] = '\0';
    }
    bool v6 = strchr (name, ':') && name[0] != '[';
    snprintf (out, size, "tcp://%s%s%s%s", v6 ? "[" : "", name, v6 ? "]" : "", colon);
    return 0;
}

int
zl_endpoints_write_ports (zl_endpoints_t *self, const char *path, const char *metrics, char *err,
                          size_t errlen)
{
    char tmp[4096];
    snprintf (tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen (tmp, "w");
    if (!f) {
        snprintf (err, errlen, "cannot write ports file %s: %s", tmp, strerror (errno));
        return -1;
    }
    fprintf (f, "frontend=%s\nbackend=%s\nevents=%s\nadmin=%s\n", self->bound[ZL_SOCK_FRONTEND],
             self->bound[ZL_SOCK_BACKEND], self->bound[EVENTS], self->bound[ZL_SOCK_ADMIN]);
    if (metrics)
        fprintf (f, "metrics=%s\n", metrics);
    fclose (f);
    if (rename (tmp, path) != 0) {
        snprintf (err, errlen, "cannot rename %s: %s", tmp, strerror (errno));
        return -1;
    }
    return 0;
}
