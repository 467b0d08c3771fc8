/*  broker_harness: see broker_harness.h. */
#include "broker_harness.h"

#include "clock.h"
#include "codec.h"

#include <czmq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *s_names[ZLH_SOCKS] = {"frontend", "backend", "admin", "events"};

struct _zlh_t {
    zl_broker_t *broker;
    zsock_t *peers[ZLH_EVENTS][ZLH_PEERS]; // [socket][peer]: DEALERs
    zsock_t *sub;                          // on the broker's PUB, every topic
    zl_codec_t *codec;
};

// ---------------------------------------------------------------- the clock
// Fixed epochs plus what the caller advanced: runs do not depend on the time.
static int64_t s_advance_us;
#define MONO_EPOCH_US (1000000LL * 1000000)
#define WALL_EPOCH_US (1767225600LL * 1000000) // 2026-01-01

int64_t
zl_clock_mono_us (void)
{
    return MONO_EPOCH_US + s_advance_us;
}

int64_t
zl_clock_mono_ms (void)
{
    return zl_clock_mono_us () / 1000;
}

int64_t
zl_clock_wall_us (void)
{
    return WALL_EPOCH_US + s_advance_us;
}

int64_t
zl_clock_wall_ms (void)
{
    return zl_clock_wall_us () / 1000;
}

void
zlh_clock_advance_us (int64_t us)
{
    s_advance_us += us;
}

// ---------------------------------------------------------------- set-up
char *
zlh_tmpdir (const char *tag)
{
    const char *tmp = getenv ("TMPDIR");
    char *dir = zsys_sprintf ("%s/zlane-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", tag);
    if (!dir)
        abort ();
    if (!mkdtemp (dir)) {
        perror ("zlh_tmpdir: mkdtemp");
        zstr_free (&dir);
    }
    return dir;
}

int
zlh_rmdir (const char *dir)
{
    char *cmd = zsys_sprintf ("rm -rf '%s'", dir);
    if (!cmd)
        abort ();
    int rc = system (cmd) == 0 ? 0 : -1;
    zstr_free (&cmd);
    return rc;
}

void
zlh_config_inproc (zl_broker_config_t *cfg, const char *data_dir)
{
    static unsigned generation;
    generation++;
    char **slots[4] = {&cfg->frontend, &cfg->backend, &cfg->admin, &cfg->events};
    for (int i = 0; i < 4; i++) {
        char ep[128];
        snprintf (ep, sizeof ep, "inproc://zlh-%d-%u-%s", (int)getpid (), generation, s_names[i]);
        free (*slots[i]);
        *slots[i] = strdup (ep);
    }
    free (cfg->data_dir);
    cfg->data_dir = strdup (data_dir);
    if (!cfg->frontend || !cfg->backend || !cfg->admin || !cfg->events || !cfg->data_dir)
        abort ();
}

void
zlh_peer_id (zlh_sock_t sock, int peer, char out[4])
{
    out[0] = "pwae"[sock];
    out[1] = (char)('0' + peer);
    out[2] = '\0';
}

zlh_t *
zlh_new (zl_broker_t *broker)
{
    zlh_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->broker = broker;
    self->codec = zl_codec_new ();
    for (int s = 0; s < ZLH_EVENTS; s++)
        for (int p = 0; p < ZLH_PEERS; p++) {
            char id[4];
            zlh_peer_id ((zlh_sock_t)s, p, id);
            zsock_t *d = zsock_new (ZMQ_DEALER);
            zsock_set_linger (d, 0);
            zsock_set_identity (d, id);
            self->peers[s][p] = d;
            if (zsock_connect (d, "%s", zl_broker_endpoint (broker, s_names[s])) != 0) {
                fprintf (stderr, "zlh_new: cannot connect %s\n", id);
                zlh_destroy (&self);
                return NULL;
            }
        }
    // inproc: the subscription is in the pipe before the broker's first
    // publish, which reads it (the PUB takes in new pipes when it sends)
    self->sub = zsock_new (ZMQ_SUB);
    zsock_set_linger (self->sub, 0);
    zsock_set_subscribe (self->sub, "");
    if (zsock_connect (self->sub, "%s", zl_broker_endpoint (broker, "events")) != 0) {
        fprintf (stderr, "zlh_new: cannot connect the SUB\n");
        zlh_destroy (&self);
        return NULL;
    }
    // Make the broker's ROUTERs learn the peers' routing ids: each peer sends
    // a frame that is not an Envelope and waits for the broker's Error.
    for (int s = 0; s < ZLH_EVENTS; s++)
        for (int p = 0; p < ZLH_PEERS; p++)
            zmq_send (zsock_resolve (self->peers[s][p]), "x", 1, 0);
    int replies = 0;
    for (int tries = 0; tries < 100 && replies < ZLH_EVENTS * ZLH_PEERS; tries++) {
        zl_broker_turn (broker, 10);
        replies += zlh_drain (self, NULL, NULL);
    }
    if (replies < ZLH_EVENTS * ZLH_PEERS) {
        fprintf (stderr, "zlh_new: harness peers not connected (%d replies)\n", replies);
        zlh_destroy (&self);
    }
    return self;
}

void
zlh_destroy (zlh_t **self_p)
{
    zlh_t *self = *self_p;
    if (!self)
        return;
    for (int s = 0; s < ZLH_EVENTS; s++)
        for (int p = 0; p < ZLH_PEERS; p++)
            zsock_destroy (&self->peers[s][p]);
    zsock_destroy (&self->sub);
    zl_codec_destroy (&self->codec);
    free (self);
    *self_p = NULL;
}

// ---------------------------------------------------------------- traffic
// Read one socket dry. An event is two frames, topic then Envelope.
static int
s_drain_one (zlh_t *self, zlh_sock_t sock, int peer, void *zs, zlh_msg_fn *fn, void *ctx)
{
    int n = 0;
    zmq_msg_t m;
    zmq_msg_init (&m);
    char topic[256];
    while (zmq_msg_recv (&m, zs, ZMQ_DONTWAIT) >= 0) {
        if (sock == ZLH_EVENTS && zmq_msg_more (&m)) {
            size_t len = zmq_msg_size (&m) < sizeof topic ? zmq_msg_size (&m) : sizeof topic - 1;
            memcpy (topic, zmq_msg_data (&m), len);
            topic[len] = '\0';
            if (zmq_msg_recv (&m, zs, 0) < 0)
                break;
        }
        n++;
        zl_msg_t msg;
        if (fn && zl_codec_decode (self->codec, zmq_msg_data (&m), zmq_msg_size (&m), &msg) ==
                      ZL_DECODE_OK)
            fn (ctx, sock, peer, sock == ZLH_EVENTS ? topic : NULL, &msg);
    }
    zmq_msg_close (&m);
    return n;
}

int
zlh_drain (zlh_t *self, zlh_msg_fn *fn, void *ctx)
{
    int n = 0;
    for (int s = 0; s < ZLH_EVENTS; s++)
        for (int p = 0; p < ZLH_PEERS; p++)
            n += s_drain_one (self, (zlh_sock_t)s, p, zsock_resolve (self->peers[s][p]), fn, ctx);
    n += s_drain_one (self, ZLH_EVENTS, 0, zsock_resolve (self->sub), fn, ctx);
    return n;
}

int
zlh_send (zlh_t *self, zlh_sock_t sock, int peer, const zl_msg_t *msg)
{
    size_t size;
    const void *data = zl_codec_encode (self->codec, msg, &size);
    if (!data || sock >= ZLH_EVENTS)
        abort ();
    return zmq_send (zsock_resolve (self->peers[sock][peer]), data, size, 0) < 0 ? -1 : 0;
}

int
zlh_feed (zlh_t *self, zlh_sock_t sock, int peer, const zl_msg_t *msg)
{
    char id[4];
    zlh_peer_id (sock, peer, id);
    size_t size;
    const void *data = zl_codec_encode (self->codec, msg, &size);
    if (!data || sock >= ZLH_EVENTS)
        abort ();
    return zl_broker_feed (self->broker, s_names[sock], id, strlen (id), data, size);
}
