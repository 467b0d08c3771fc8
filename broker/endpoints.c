#include "endpoints.h"

#include "router.h"
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
    zl_router_t *routers[ZL_SOCK_COUNT];
    zsock_t *events;
    char bound[N_SOCKS][256];
};

zl_endpoints_t *
zl_endpoints_new (const zl_broker_config_t *cfg)
{
    zl_endpoints_t *self = ZL_NEW (zl_endpoints_t);
    self->cfg = cfg;
    // a frame larger than this drops the sender's connection: it bounds what
    // one peer can make the broker buffer and decode (an Ack item carries up
    // to max_result; the worker library cuts Ack frames at 4 MiB of results)
    uint64_t max_frame = cfg->max_payload * 2 + cfg->max_result + cfg->max_checkpoint + (16 << 20);
    for (int i = 0; i < ZL_SOCK_COUNT; i++) {
        zl_router_opts_t o = {.name = s_names[i], .max_frame = max_frame};
        self->routers[i] = zl_router_new (&o);
        if (!self->routers[i]) {
            zl_endpoints_destroy (&self);
            return NULL;
        }
    }
    self->events = zsock_new (ZMQ_PUB);
    zsock_set_linger (self->events, 0);
    return self;
}

void
zl_endpoints_destroy (zl_endpoints_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_endpoints_t *self = *self_p;
    for (int i = 0; i < ZL_SOCK_COUNT; i++)
        zl_router_destroy (&self->routers[i]);
    zsock_destroy (&self->events);
    free (self);
    *self_p = NULL;
}

zl_router_t *
zl_endpoints_router (zl_endpoints_t *self, zl_sock_t sock)
{
    return self->routers[sock];
}

void *
zl_endpoints_events (zl_endpoints_t *self)
{
    return zsock_resolve (self->events);
}

zsock_t *
zl_endpoints_events_zsock (zl_endpoints_t *self)
{
    return self->events;
}

void
zl_endpoints_flush (zl_endpoints_t *self)
{
    // the workers' first: a job that arrives alone starts before its Accepted goes
    zl_router_flush (self->routers[ZL_SOCK_BACKEND]);
    zl_router_flush (self->routers[ZL_SOCK_FRONTEND]);
    zl_router_flush (self->routers[ZL_SOCK_ADMIN]);
}

static int
s_bind (zl_endpoints_t *self, int slot, const char *endpoint, char *err, size_t errlen)
{
    if (slot < ZL_SOCK_COUNT)
        return zl_router_bind (self->routers[slot], endpoint, self->bound[slot],
                               sizeof self->bound[slot], err, errlen);
    void *pub = zsock_resolve (self->events);
    if (zmq_bind (pub, endpoint) != 0) {
        snprintf (err, errlen, "cannot bind %s: %s", endpoint, zmq_strerror (errno));
        return -1;
    }
    size_t len = sizeof self->bound[slot];
    zmq_getsockopt (pub, ZMQ_LAST_ENDPOINT, self->bound[slot], &len);
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
