/*  fuzz_broker: libFuzzer target for the broker's message handling on one
    socket (FUZZ_SOCKET: "frontend", "backend" or "admin", set at build time).

    One in-process broker (lanes a and b, inproc endpoints, a fresh temp data
    dir, durability none, a 16 MiB map) lives across inputs and is rebuilt
    every ZLANE_FUZZ_RESET inputs (default 2000) so that state stays bounded.
    Its peers and clock are tests/support/broker_harness: three harness
    DEALERs ("<c>0", "<c>1", "<c>2") are connected to each ROUTER, so replies
    to them are delivered: the target reads them back and remembers the job
    ids and lease tokens it saw (Accepted, Dispatch).

    The clock is the harness's (it defines zl_clock_*, so common's clock.o
    is not linked) and advances only when an input says so, which makes
    leases lapse, delays end and workers die on demand.

    An input is a sequence of at most 64 records (truncation tolerant):
      flags:u8  [idlen:u8 id:idlen]  len:u16le  frame:len
      flags & 3      peer: 0-2 = harness peer, 3 = the literal id that follows
      flags >> 2 & 1 patch: an Ack/Nack/Extend takes (job id, lease) from a
                     Dispatch the harness saw (a lease with its low bit set is
                     kept, so stale tokens are still tried); an AdminRequest
                     takes job ids the harness saw
      flags >> 3 & 7 advance the clock first by 0, 1, 50, 400, 1500, 5000,
                     40000 ms or 25 h
    Each frame goes through zl_broker_feed (a whole broker turn). */
#include "broker.h"
#include "broker_harness.h"
#include "codec.h"
#include "config.h"
#include "log.h"
#include "msg.h"

#include <czmq.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FUZZ_SOCKET
#error "compile with -DFUZZ_SOCKET=\"frontend\" (or backend, admin)"
#endif

#define MAX_RECORDS 64
#define RING 64
#define SEED_JOBS 32

typedef struct {
    uint64_t job_id, lease;
} lease_t;

static const char *s_socks[3] = {"frontend", "backend", "admin"};

static struct {
    zl_broker_config_t cfg;
    zl_broker_t *broker;
    char *data_dir;
    zlh_t *harness;       // its peers
    zl_codec_t *codec;    // the target's own, to patch frames (the broker has one)
    lease_t leases[RING]; // recently dispatched (job id, lease)
    size_t n_leases, next_lease;
    uint64_t ids[RING]; // recently accepted or dispatched job ids
    size_t n_ids, next_id;
    unsigned generation; // brokers built so far (seed keys)
    unsigned inputs;     // inputs fed to this broker
    unsigned reset_every;
    uint64_t seq;
} S;

// ---------------------------------------------------------------- harness peers
static int
s_sock_index (const char *which)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp (which, s_socks[i]))
            return i;
    abort ();
}

static void
s_remember_id (uint64_t id)
{
    S.ids[S.next_id] = id;
    S.next_id = (S.next_id + 1) % RING;
    if (S.n_ids < RING)
        S.n_ids++;
}

static void
s_remember_lease (uint64_t id, uint64_t lease)
{
    S.leases[S.next_lease] = (lease_t){id, lease};
    S.next_lease = (S.next_lease + 1) % RING;
    if (S.n_leases < RING)
        S.n_leases++;
    s_remember_id (id);
}

// zlh_drain's callback: remember the job ids and leases the broker sent.
static void
s_remember (void *ctx, zlh_sock_t sock, int peer, const char *topic, const zl_msg_t *msg)
{
    if (msg->kind == ZL_MSG_DISPATCH)
        for (size_t i = 0; i < msg->u.dispatch.n; i++)
            s_remember_lease (msg->u.dispatch.jobs[i].job_id, msg->u.dispatch.jobs[i].lease);
    else if (msg->kind == ZL_MSG_ACCEPTED)
        for (size_t i = 0; i < msg->u.accepted.n; i++)
            s_remember_id (msg->u.accepted.jobs[i].job_id);
}

// Feed one frame. A broker whose store failed stops (zl_broker_run returns):
// no input may do that, so it counts as a crash.
static void
s_feed (const char *which, const void *peer, size_t peer_len, const void *data, size_t size)
{
    if (zl_broker_feed (S.broker, which, peer, peer_len, data, size) != 0) {
        fprintf (stderr, "fuzz: zl_broker_feed failed: the broker would stop here\n");
        abort ();
    }
    zlh_drain (S.harness, s_remember, NULL);
}

// Encode `msg` and feed it to the broker as harness peer `peer` of `which`.
static void
s_feed_msg (const char *which, int peer, const zl_msg_t *msg)
{
    if (zlh_feed (S.harness, (zlh_sock_t)s_sock_index (which), peer, msg) != 0) {
        fprintf (stderr, "fuzz: zl_broker_feed failed: the broker would stop here\n");
        abort ();
    }
    zlh_drain (S.harness, s_remember, NULL);
}

// ---------------------------------------------------------------- seeding
static void
s_submit_jobs (int n, uint32_t max_attempts)
{
    zl_job_spec_t specs[SEED_JOBS];
    char keys[SEED_JOBS][32];
    static const zl_header_t hdr[] = {{"trace", "fuzz"}};
    for (int i = 0; i < n && i < SEED_JOBS; i++) {
        S.seq++;
        snprintf (keys[i], sizeof keys[i], "seed-%u-%d", S.generation, i);
        specs[i] = (zl_job_spec_t){.seq = S.seq,
                                   .tenant = i % 3 ? "t1" : "t2",
                                   .lane = i % 2 ? "b" : "a",
                                   .payload = {(const uint8_t *)"payload", 7},
                                   .idempotency_key = i % 4 == 0 ? keys[i] : "",
                                   .delay_ms = i % 5 == 0 ? 1000 : 0,
                                   .max_attempts = max_attempts,
                                   .n_headers = i % 2,
                                   .headers = (zl_header_t *)hdr};
    }
    zl_msg_t m = {.kind = ZL_MSG_SUBMIT};
    m.u.submit = (zl_submit_t){(size_t)(n < SEED_JOBS ? n : SEED_JOBS), specs};
    s_feed_msg ("frontend", 0, &m);
}

// Jobs in both lanes, and a few dead letters (worker w2 takes some jobs and
// fails them PERMANENT, then drains to capacity 0).
static void
s_seed_state (void)
{
    zl_msg_t hello = {.kind = ZL_MSG_HELLO};
    hello.u.hello.client = "fuzz-seed";
    s_feed_msg ("frontend", 0, &hello);
    s_submit_jobs (SEED_JOBS, 2);

    const char *lanes[] = {"a", "b"};
    zl_msg_t ready = {.kind = ZL_MSG_READY};
    ready.u.ready = (zl_ready_t){"fuzz-seed-worker", 2, lanes, 6};
    size_t before = S.n_leases;
    s_feed_msg ("backend", 2, &ready);
    size_t got = S.n_leases - before;
    zl_nack_item_t items[6];
    size_t n = 0;
    for (size_t i = 0; i < got && n < 6; i++) {
        lease_t l = S.leases[(S.next_lease + RING - 1 - i) % RING];
        items[n++] =
            (zl_nack_item_t){l.job_id, l.lease, ZL_FAIL_PERMANENT, "seeded failure", 0, 1000};
    }
    ready.u.ready.capacity = 0; // keep what it holds, take nothing more
    zl_msg_t nack = {.kind = ZL_MSG_NACK};
    nack.u.nack = (zl_nack_t){n, items};
    s_feed_msg ("backend", 2, &nack);
    s_feed_msg ("backend", 2, &ready);
}

// ---------------------------------------------------------------- lifecycle
static void
s_teardown (void)
{
    zlh_destroy (&S.harness);
    zl_broker_destroy (&S.broker);
    if (S.data_dir) {
        if (zlh_rmdir (S.data_dir) != 0)
            fprintf (stderr, "fuzz: could not remove %s\n", S.data_dir);
        zstr_free (&S.data_dir);
    }
    zl_broker_config_free (&S.cfg);
}

static void
s_setup (void)
{
    S.generation++;
    S.inputs = 0;
    S.n_leases = S.next_lease = S.n_ids = S.next_id = 0;
    S.data_dir = zlh_tmpdir ("fuzz");
    if (!S.data_dir)
        abort ();
    zl_broker_config_t *cfg = &S.cfg;
    zl_broker_config_defaults (cfg);
    zlh_config_inproc (cfg, S.data_dir);
    cfg->durability = ZL_DURABILITY_NONE;
    cfg->map_size = 16u << 20;
    cfg->max_payload = 1024;
    cfg->max_depth = 5000;
    cfg->producer_window = 40;
    zl_broker_config_lane (cfg, "a");
    zl_lane_config_t *b = zl_broker_config_lane (cfg, "b");
    b->max_run_ms = 60000;
    b->max_in_flight = 8;
    zl_tenant_config_t *t1 = zl_broker_config_tenant (cfg, "t1");
    t1->max_in_flight = 4;

    char err[512];
    S.broker = zl_broker_new (cfg, err, sizeof err);
    if (!S.broker) {
        fprintf (stderr, "fuzz: zl_broker_new: %s\n", err);
        abort ();
    }
    S.harness = zlh_new (S.broker);
    if (!S.harness)
        abort ();
    s_seed_state ();
}

static void
s_at_exit (void)
{
    s_teardown ();
    zl_codec_destroy (&S.codec);
}

int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv ("ZSYS_SIGHANDLER", "false", 1); // leave SIGINT/SIGTERM to libFuzzer
    zsys_handler_set (NULL);
    zl_log_set_level (getenv ("ZLANE_FUZZ_VERBOSE") ? ZL_LOG_TRACE : ZL_LOG_ERROR);
    const char *every = getenv ("ZLANE_FUZZ_RESET");
    S.reset_every = every ? (unsigned)atoi (every) : 2000;
    if (S.reset_every == 0)
        S.reset_every = 2000;
    S.codec = zl_codec_new ();
    return 0;
}

// ---------------------------------------------------------------- one record
static void
s_patch_ids (uint64_t *job_id, uint64_t *lease)
{
    // k = 0 is the newest lease the harness saw, 1 the one before, ...
    if (lease && S.n_leases) {
        lease_t l = S.leases[(S.next_lease + RING - 1 - *job_id % S.n_leases) % RING];
        *job_id = l.job_id;
        if (!(*lease & 1))
            *lease = l.lease;
    } else if (!lease && S.n_ids)
        *job_id = S.ids[(S.next_id + RING - 1 - *job_id % S.n_ids) % RING];
}

// Rewrite ids in `frame` to ones the broker knows; returns the new frame
// (in the harness codec's encode arena) or the original.
static const uint8_t *
s_patch (const uint8_t *frame, size_t *size)
{
    zl_msg_t m;
    if (zl_codec_decode (S.codec, frame, *size, &m) != ZL_DECODE_OK)
        return frame;
    switch (m.kind) {
    case ZL_MSG_ACK:
        for (size_t i = 0; i < m.u.ack.n; i++)
            s_patch_ids (&m.u.ack.items[i].job_id, &m.u.ack.items[i].lease);
        break;
    case ZL_MSG_NACK:
        for (size_t i = 0; i < m.u.nack.n; i++)
            s_patch_ids (&m.u.nack.items[i].job_id, &m.u.nack.items[i].lease);
        break;
    case ZL_MSG_EXTEND:
        for (size_t i = 0; i < m.u.extend.n; i++)
            s_patch_ids (&m.u.extend.items[i].job_id, &m.u.extend.items[i].lease);
        break;
    case ZL_MSG_ADMIN_REQUEST: {
        zl_admin_request_t *r = &m.u.admin_request;
        s_patch_ids (&r->job_id, NULL);
        if (r->after_id)
            s_patch_ids (&r->after_id, NULL);
        for (size_t i = 0; i < r->filter.n_ids; i++)
            s_patch_ids (&r->filter.ids[i], NULL);
        break;
    }
    default: return frame;
    }
    const void *out = zl_codec_encode (S.codec, &m, size);
    return out ? out : frame;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    static const int64_t advance_ms[8] = {0, 1, 50, 400, 1500, 5000, 40000, 90000000};
    if (!S.broker) {
        s_setup ();
        atexit (s_at_exit); // after czmq's own: runs before it
    } else if (++S.inputs >= S.reset_every) {
        s_teardown ();
        s_setup ();
    }
    const char *which = FUZZ_SOCKET;
    int sock = s_sock_index (which);
    if (sock == 1 && S.inputs % 16 == 0)
        s_submit_jobs (8, 3); // keep work around for the workers

    size_t pos = 0;
    for (int r = 0; r < MAX_RECORDS && pos < size; r++) {
        uint8_t flags = data[pos++];
        char id[4];
        const void *peer = id;
        size_t peer_len;
        if ((flags & 3) == 3) {
            peer_len = pos < size ? data[pos++] : 0;
            if (peer_len > size - pos)
                peer_len = size - pos;
            peer = data + pos;
            pos += peer_len;
        } else {
            zlh_peer_id ((zlh_sock_t)sock, flags & 3, id);
            peer_len = strlen (id);
        }
        size_t len = 0;
        if (pos < size)
            len = data[pos++];
        if (pos < size)
            len |= (size_t)data[pos++] << 8;
        if (len > size - pos)
            len = size - pos;
        const uint8_t *frame = data + pos;
        pos += len;
        // a patched frame lives in the harness codec's encode arena
        if (flags & 4)
            frame = s_patch (frame, &len);
        zlh_clock_advance_us (advance_ms[(flags >> 3) & 7] * 1000);
        s_feed (which, peer, peer_len, frame, len);
    }
    return 0;
}
