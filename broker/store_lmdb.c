/*  store_lmdb: the LMDB backend of the store (store_backend.h), the embedded
    default: a data directory on the broker's host.

    One write transaction spans one loop turn (group commit); a Submit's new
    jobs go in a nested transaction so that a full map rejects just that
    Submit and keeps the rest of the turn. In fsync mode the broker has the
    transaction made and committed on a commit thread ("the commit thread"
    below): the loop's writes go into an overlay first, and a write that
    finds the map full fails the thread's commit, and with it the broker,
    instead of one Submit (zl_store_has_room keeps the margin that makes
    that rare).

    Databases (format zlane-store-5): meta (format, next id, the secret key
    of the idempotency digests), a tree of job records per priority (id ->
    immutable job record: "jobs" for the default priority, "jobs.P" for
    each other P), state (id -> mutable state, absent = never attempted),
    dedup (the idempotency
    keys: under the 16-byte digest of a key's prefix, a run of fixed items --
    the key's number, its tenant's tag, job id, time, whose key -- in
    number order), and two expiry logs in id (= time) order, dedup_resend
    for the keys a client library made for its own resends and dedup_user
    for users' keys (id -> where the key is).

    Why a tree per priority: a flow runs its highest priority first, so the
    jobs that finish together are one priority's. In one tree keyed by id a
    priority's jobs are every few ids, and deleting a turn's finished jobs
    copied a page for nearly each of them (priorities ran at 0.6-0.8 of
    plain's throughput); one tree keyed by (priority, id) kept them together
    but took its inserts away from the tree's end, where LMDB's appends fill
    a page, so its pages were left half full. Each priority's tree is
    appended to and emptied in id order, as the one tree was before
    priorities. Recovery merges the trees by id.

    Room: data.mdb is preallocated (posix_fallocate) ahead of its use and
    LMDB's map ends where the allocated file does, so a write finds the map
    full before any commit could find the disk full; new jobs are let in
    while the free pages inside the file keep a margin for acks and deletes
    (see zl_store_has_room). */
#include "store_backend.h"

#include "clock.h"
#include "commit_pace.h"
#include "log.h"
#include "overlay.h"
#include "siphash.h"
#include "zl_alloc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lmdb.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define FULL_MARGIN (4u << 20)    // bytes kept free so acks and deletes always fit
#define GROW_MIN (32ull << 20)    // headroom preallocated ahead of the used pages: at least,
#define GROW_MAX (1ull << 30)     //   at most, and a quarter of the used size in between
#define GROW_STEP (1ull << 20)    // the file is grown in whole MiB
#define GROW_RETRY_MS 1000        // after the disk refused more, ask again this much later
#define EVICT_LOG_MS 60000        // early forgetting of keys is logged at most this often
#define DIGEST_LEN 16             // SipHash-2-4-128 of the key's prefix
#define TAG_LEN 8                 // SipHash-2-4-64 of the tenant
#define ITEM_LEN 33               // a dedup item: number (be64), tag, job id, seen ms (le64), flags
#define ITEM_GENERATED 1          // flags: a client library made the key
#define ROOM_WALK_MS 100          // the free list is walked at most this often while room is short
#define ROOM_IDLE_MS 1000         //   and this often while it is plentiful
#define ROOM_LOG_MS 10000         // a refusal of new jobs is logged at most this often
#define ROOM_BACK_MS 1000         // room is back in the log when it has held this long
#define IDEM_KEY_LEN 32           // where a key is: the prefix's digest, number, tenant's tag
#define MEMO_TEXT_MAX 128         // the longest tenant and key s_idem_memo_t keeps
#define LOG_VAL_LEN 24            // an expiry log's entry: the prefix's digest and number
#define IDEM_SEP '\0'             // formats 1 and 2 kept tenant and key in one string
#define FORMAT_V1 "zlane-store-1" // idem keys were tenant IDEM_SEP key
#define FORMAT_V2 "zlane-store-2" // idem keys were key IDEM_SEP tenant
#define FORMAT_V3 "zlane-store-3" // one tree of job records: split by priority at open
#define FORMAT_V4 "zlane-store-4" //   (the same as 3 with batches' records)
#define N_PRIO (ZL_PRIORITY_MAX + 1)
#define MIB(x) ((double)(x) / 1048576.0)

enum { LOG_RESEND = 0, LOG_USER = 1 }; // the two expiry logs, by whose key it is
// why new jobs are refused: this turn took the room, the file must grow, the
// disk is full, the map is full, a write found it full
enum { WHY_TURN, WHY_GROW, WHY_DISK, WHY_MAP, WHY_WRITE, WHY_KINDS };

typedef struct _s_async_t s_async_t; // the commit thread (see "the commit thread" below)

/*  A Submit looks its job's idempotency key up (get_idem), then puts it: the
    last key looked up or put, its digest, and whether its lookup found it
    absent and no put came since (a put of another key takes the memo, one
    of this key ends `absent`). A key found absent goes into the index
    without a second search for it. */
typedef struct {
    bool valid;
    size_t tl, kl;
    char tenant[MEMO_TEXT_MAX], key[MEMO_TEXT_MAX];
    uint8_t d[IDEM_KEY_LEN];
    bool absent; // its lookup did not find it, and it was not put since
} s_idem_memo_t;

typedef struct {
    int lock_fd; // flock on DIR/zlane.lock: one broker per data directory
    MDB_env *env;
    int fd;       // data.mdb (LMDB's descriptor), for preallocation
    MDB_txn *txn; // the turn's batch
    MDB_txn *sub; // nested batch of one Submit
    MDB_dbi meta, jobs[N_PRIO], state, dedup, dlog[2]; // jobs: a tree per priority
    uint8_t secret[ZL_SIPHASH_KEY_LEN];                // keys the digests of the dedup index
    char *dir;
    zl_durability_t mode;
    uint64_t map_size; // the configured limit (whole OS pages)
    uint64_t map_now;  // LMDB's map: the allocated file, up to map_size
    bool prealloc;     // the file is preallocated (false: the filesystem cannot)
    size_t page_size;
    uint64_t last_append_id[N_PRIO]; // each tree is appended to in id order; UINT64_MAX = unknown
    bool batch_full;                 // a write of the turn's batch ran out of room
    zl_arena_t *scratch;
    uint64_t commits, commit_us, commit_max_us;
    // room, measured after a commit when asked (s_refresh)
    bool room_stale;      // a commit happened since the last measure
    int64_t room_walk_ms; // the last walk of the free list
    uint64_t runs_pages;  // the dedup index's runs' pages, as of that walk
    uint64_t runs_items;  // its items then
    size_t noted_txnid;   // the transaction s_note_freed looked at last
    uint64_t room_walks, room_walk_us, room_walk_max_us;
    uint64_t room_measures, room_measures_on_submit;
    uint64_t room_bytes; // free in the map at the last measure, less what was let in since
    uint64_t last_need;  // what the last Submit asked has_room for (bytes and margin)
    uint64_t room_free;  // the last measure: free pages that can be used (bytes)
    uint64_t room_tail;  //   the map's unused rest
    uint64_t room_used;  //   the pages in use
    uint64_t freed_last; // pages the last commit freed: the next one cannot reuse them
    bool tick;           // make the next commit write, so that they become room
    uint8_t last_key[IDEM_KEY_LEN]; // the last idempotency key this batch put
    bool has_last_key;
    bool room;      // the last answer of zl_store_has_room
    bool room_soon; // after a refusal: the next commit brings room back
    int64_t refused_since_ms;
    uint64_t refused;                     // Submits refused since then
    int64_t refusal_logged_ms[WHY_KINDS]; // the last refusal the log said, by kind of reason
    uint64_t refusals_unlogged;           // refusals since that it did not
    bool refusal_said;                    // the current refusal is in the log
    int64_t room_back_ms;                 // room since (after a refusal), 0 = refusing
    uint64_t grow_wanted;                 // a refused Submit needed this much free: grow for it
    int64_t grow_retry_ms;                // the disk refused more: no attempt before this
    // the dedup index
    uint64_t idem_put; // keys put since the last prune
    s_idem_memo_t memo;
    uint64_t dedup_expired, dedup_evicted;
    uint64_t evicted_unlogged;
    double evicted_min_used;     // the least used-up window among them (fraction)
    int64_t evicted_min_age_ms;  // that key's age
    uint64_t evicted_min_window; // and window
    int64_t evict_logged_ms;
    s_async_t *async; // the commit thread, when it runs
} s_lmdb_t;

/*  The commit thread (zl_store_use_commit_thread; fsync mode). LMDB's
    write transaction must be begun and committed by one thread, and its
    commit holds that thread for two flushes. With the thread, the loop
    never touches LMDB's write transaction: its batch is an overlay of ops
    (overlay.h); zl_store_commit_start hands the overlay to the thread,
    which replays it into a transaction of its own and commits, while the
    loop goes on writing the next batch into a second overlay. The loop's
    reads look in its open overlay, then in the one being committed, then
    in LMDB's last committed state (a read transaction of its own: the
    environment is MDB_NOTLS). Before it replays a batch the thread waits
    until commit_pace.h lets the commit start (under a stream, the commit
    interval from the last one's start).

    `mu` guards all of s_lmdb_t but the two overlays and LMDB's commit
    itself: the loop holds it in every call that reads or measures the store
    (has_room, a read of LMDB, stats), the thread while it replays a batch
    and notes its commit, and not while LMDB commits (the flushes). The open
    overlay is the loop's alone; the one in flight is written by the loop
    only while the thread is idle and read by both while it commits. */
struct _s_async_t {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; // work for the thread, or a commit ended
    int efd;           // eventfd, written when a commit ends (zl_store_commit_fd)
    zl_overlay_t *open, *flight;
    bool batch, sub; // the loop's batch, and a nested one in it, are open
    size_t sub_mark; // where the nested batch began in `open`
    bool running;    // `flight` is the thread's until its commit ends
    bool quit;
    zl_store_rc_t result; // how the last commit ended
    // the open batch asked for the idempotency keys' pruning (zl_store_prune_idem),
    // which the thread runs in its transaction; and what the flight asked
    bool prune, flight_prune;
    int64_t prune_now;
    zl_idem_policy_t prune_policy;
    size_t prune_max;
    int64_t pruned_ms;      // the thread last pruned (monotonic): an idle store prunes every second
    uint64_t open_bytes;    // what zl_store_has_room let into `open`, and
    uint64_t flight_bytes;  //   into `flight`: not in LMDB's state yet, so not in a measure
    zl_arena_t *arena;      // the loop's encoding of records
    zl_commit_pace_t *pace; // when the thread may start a commit (--commit-interval)
    bool flight_behind;     // `flight` follows a stream: it waits for the pace
};

// The ops of an overlay, and the first byte of their keys: a job's record
// (key 'J', id), its state ('S', id), an idempotency key ('I', its place in
// the index), the id counter ('N').
enum { OP_PUT_JOB, OP_PUT_STATE, OP_DEL_JOB, OP_DEL_STATE, OP_PUT_IDEM, OP_NEXT_ID };
#define OKEY_ID_LEN 9

static void
s_okey_id (uint8_t key[OKEY_ID_LEN], char space, uint64_t id)
{
    key[0] = (uint8_t)space;
    memcpy (key + 1, &id, sizeof id);
}

// The latest write of `key` the loop made and LMDB has not committed yet:
// false when there is none (or no commit thread).
static bool
s_async_find (s_lmdb_t *self, const uint8_t *key, size_t len, zl_overlay_op_t *op)
{
    s_async_t *a = self->async;
    return a &&
           (zl_overlay_find (a->open, key, len, op) || zl_overlay_find (a->flight, key, len, op));
}

static void
s_async_lock (s_lmdb_t *self)
{
    if (self->async)
        pthread_mutex_lock (&self->async->mu);
}

static void
s_async_unlock (s_lmdb_t *self)
{
    if (self->async)
        pthread_mutex_unlock (&self->async->mu);
}

static MDB_txn *
s_txn (s_lmdb_t *self)
{
    return self->sub ? self->sub : self->txn;
}

static void
s_forget_append_pos (s_lmdb_t *self)
{
    for (unsigned p = 0; p < N_PRIO; p++)
        self->last_append_id[p] = UINT64_MAX;
}

static void s_room_lost (s_lmdb_t *self, const char *what);

static zl_store_rc_t
s_rc (s_lmdb_t *self, int rc, const char *what)
{
    if (rc == MDB_SUCCESS)
        return ZL_STORE_OK;
    if (rc == MDB_NOTFOUND)
        return ZL_STORE_NOT_FOUND;
    if (rc == MDB_MAP_FULL || rc == ENOSPC || rc == MDB_TXN_FULL) {
        zl_warn ("store", "%s: store full (%s)", what, mdb_strerror (rc));
        s_room_lost (self, what);
        if (!self->sub && !self->async)
            self->batch_full = true; // the batch is lost; its commit will say why
        return ZL_STORE_FULL;
    }
    zl_error ("store", "%s failed: %s", what, mdb_strerror (rc));
    return ZL_STORE_ERROR;
}

// ---------------------------------------------------------------- digests
// Where an idempotency key is in the dedup index (32 bytes): SipHash-2-4-128,
// under the store's secret, of 'P' and the key's prefix; the key's trailing
// number, big-endian; SipHash-2-4-64, same secret, of 'T' and the tenant
// (its tag). The key splits into prefix and number one way only: the number
// is the longest run of at most 19 decimal digits that ends the key and
// does not start with '0' (a lone "0" does), UINT64_MAX (which no 19 digits
// reach) when the key ends in none. The index is sorted by prefix, number,
// tenant, so the keys one producer makes in sequence ("<instance>-<seq>",
// the producer library's, or "order-1041"), for however many tenants, sit
// in one run in the order they come: a turn's inserts, and the pruning of
// the oldest, dirty few pages. Two (tenant, key) pairs share a place only
// if their prefixes' digests, numbers and tenants' tags are all equal;
// without the secret nobody can aim at that, so no tenant can make
// another's job be answered "duplicate".
static void
s_idem_key (const s_lmdb_t *self, const char *tenant, size_t tl, const char *key, size_t kl,
            uint8_t out[IDEM_KEY_LEN])
{
    size_t d = kl; // where the number starts
    while (d > 0 && kl - d < 19 && key[d - 1] >= '0' && key[d - 1] <= '9')
        d--;
    while (d + 1 < kl && key[d] == '0')
        d++;
    uint64_t n = UINT64_MAX;
    if (d < kl) {
        n = 0;
        for (size_t i = d; i < kl; i++)
            n = n * 10 + (uint64_t)(key[i] - '0');
    }
    zl_siphash_t h;
    zl_siphash_init (&h, self->secret, DIGEST_LEN);
    zl_siphash_update (&h, "P", 1);
    zl_siphash_update (&h, key, d);
    zl_siphash_final (&h, out);
    for (int i = 0; i < 8; i++)
        out[DIGEST_LEN + i] = (uint8_t)(n >> (56 - 8 * i));
    zl_siphash_init (&h, self->secret, TAG_LEN);
    zl_siphash_update (&h, "T", 1);
    zl_siphash_update (&h, tenant, tl);
    zl_siphash_final (&h, out + DIGEST_LEN + 8);
}

// The digest of (tenant, key), the memo's if it is the last key (a
// Submit's lookup, then its put); the memo holds it after.
static const uint8_t *
s_idem_digest (s_lmdb_t *self, const char *tenant, const char *key)
{
    s_idem_memo_t *m = &self->memo;
    size_t tl = strlen (tenant), kl = strlen (key);
    if (m->valid && m->tl == tl && m->kl == kl && !memcmp (m->tenant, tenant, tl) &&
        !memcmp (m->key, key, kl))
        return m->d;
    s_idem_key (self, tenant, tl, key, kl, m->d);
    m->valid = tl <= MEMO_TEXT_MAX && kl <= MEMO_TEXT_MAX;
    if (m->valid) {
        m->tl = tl;
        m->kl = kl;
        memcpy (m->tenant, tenant, tl);
        memcpy (m->key, key, kl);
    }
    m->absent = false;
    return m->d;
}

// The dedup index is MDB_DUPSORT | MDB_DUPFIXED: under each prefix's digest
// its keys, as fixed 33-byte items sorted by number then tenant's tag, so
// the keys of one prefix (one producer) fill pages of their own, each put
// at the end of its run and pruned from its front: full pages however many
// producers interleave, and no node header per key. An item, explicitly:
// the number (8 bytes, big-endian), the tenant's tag (8), the job id and
// the wall-clock ms it was seen (8 bytes each, little-endian), flags (1
// byte: ITEM_GENERATED).
static void
s_le64_put (uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t
s_le64_get (const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void
s_item_encode (const uint8_t ik[IDEM_KEY_LEN], const zl_idem_rec_t *rec, uint8_t out[ITEM_LEN])
{
    memcpy (out, ik + DIGEST_LEN, 8 + TAG_LEN);
    s_le64_put (out + 16, rec->job_id);
    s_le64_put (out + 24, (uint64_t)rec->seen_at_ms);
    out[32] = rec->generated ? ITEM_GENERATED : 0;
}

static void
s_item_decode (const uint8_t *in, zl_idem_rec_t *rec)
{
    rec->job_id = s_le64_get (in + 16);
    rec->seen_at_ms = (int64_t)s_le64_get (in + 24);
    rec->generated = (in[32] & ITEM_GENERATED) != 0;
}

// Put cursor `c` on the item of `ik` and decode it into *rec (may be NULL).
// Returns 0, MDB_NOTFOUND or an LMDB error.
static int
s_item_find (MDB_cursor *c, const uint8_t ik[IDEM_KEY_LEN], zl_idem_rec_t *rec)
{
    uint8_t probe[ITEM_LEN] = {0};
    memcpy (probe, ik + DIGEST_LEN, 8 + TAG_LEN);
    MDB_val k = {DIGEST_LEN, (void *)ik}, v = {ITEM_LEN, probe};
    int rc = mdb_cursor_get (c, &k, &v, MDB_GET_BOTH_RANGE);
    if (rc)
        return rc;
    if (v.mv_size != ITEM_LEN || memcmp (v.mv_data, ik + DIGEST_LEN, 8 + TAG_LEN) != 0)
        return MDB_NOTFOUND;
    if (rec)
        s_item_decode (v.mv_data, rec);
    return 0;
}

// Record `rec` for `ik`, replacing the item of an earlier job (`absent`:
// there is none, its lookup said).
static int
s_item_put (s_lmdb_t *self, MDB_txn *txn, const uint8_t ik[IDEM_KEY_LEN], const zl_idem_rec_t *rec,
            bool absent)
{
    MDB_cursor *c;
    int rc = mdb_cursor_open (txn, self->dedup, &c);
    if (rc)
        return rc;
    if (!absent) {
        rc = s_item_find (c, ik, NULL);
        rc = rc == 0 ? mdb_cursor_del (c, 0) : rc == MDB_NOTFOUND ? 0 : rc;
    }
    uint8_t item[ITEM_LEN];
    s_item_encode (ik, rec, item);
    MDB_val k = {DIGEST_LEN, (void *)ik}, v = {ITEM_LEN, item};
    if (!rc)
        rc = mdb_cursor_put (c, &k, &v, MDB_APPENDDUP); // the next of its run, mostly
    if (rc == MDB_KEYEXIST)
        rc = mdb_cursor_put (c, &k, &v, 0);
    mdb_cursor_close (c);
    return rc;
}

// Look up the item of `ik`: 0 with *rec (may be NULL), MDB_NOTFOUND or an
// LMDB error.
static int
s_item_get (s_lmdb_t *self, MDB_txn *txn, const uint8_t ik[IDEM_KEY_LEN], zl_idem_rec_t *rec)
{
    MDB_cursor *c;
    int rc = mdb_cursor_open (txn, self->dedup, &c);
    if (rc)
        return rc;
    rc = s_item_find (c, ik, rec);
    mdb_cursor_close (c);
    return rc;
}

// Put cursor `c` on the item of job `job_id` among the items at a log
// entry's place `lv` (the prefix's digest and number: the tenants who used
// that very key are told apart by the job id), and decode it into *rec (may
// be NULL). Returns 0, MDB_NOTFOUND or an LMDB error.
static int
s_item_find_job (MDB_cursor *c, const uint8_t lv[LOG_VAL_LEN], uint64_t job_id, zl_idem_rec_t *rec)
{
    uint8_t probe[ITEM_LEN] = {0};
    memcpy (probe, lv + DIGEST_LEN, 8);
    MDB_val k = {DIGEST_LEN, (void *)lv}, v = {ITEM_LEN, probe};
    int rc = mdb_cursor_get (c, &k, &v, MDB_GET_BOTH_RANGE);
    while (rc == 0) {
        if (v.mv_size != ITEM_LEN || memcmp (v.mv_data, lv + DIGEST_LEN, 8) != 0)
            return MDB_NOTFOUND;
        zl_idem_rec_t r;
        s_item_decode (v.mv_data, &r);
        if (r.job_id == job_id) {
            if (rec)
                *rec = r;
            return 0;
        }
        rc = mdb_cursor_get (c, &k, &v, MDB_NEXT_DUP);
    }
    return rc;
}

// The item of the job a log entry names: 0 with *rec, MDB_NOTFOUND (the key
// went, or a later job has it) or an LMDB error; with `del` it is removed.
static int
s_item_of_job (s_lmdb_t *self, MDB_txn *txn, const uint8_t lv[LOG_VAL_LEN], uint64_t job_id,
               zl_idem_rec_t *rec, bool del)
{
    MDB_cursor *c;
    int rc = mdb_cursor_open (txn, self->dedup, &c);
    if (rc)
        return rc;
    rc = s_item_find_job (c, lv, job_id, rec);
    if (rc == 0 && del)
        rc = mdb_cursor_del (c, 0);
    mdb_cursor_close (c);
    return rc;
}

// ---------------------------------------------------------------- open
static int
s_check_dir (const char *dir, char *err, size_t errlen)
{
    if (mkdir (dir, 0750) != 0 && errno != EEXIST) {
        snprintf (err, errlen, "cannot create data directory %s: %s", dir, strerror (errno));
        return -1;
    }
    DIR *d = opendir (dir);
    if (!d) {
        snprintf (err, errlen, "cannot open data directory %s: %s", dir, strerror (errno));
        return -1;
    }
    struct dirent *e;
    int rc = 0;
    while ((e = readdir (d))) {
        const char *n = e->d_name;
        if (!strcmp (n, ".") || !strcmp (n, "..") || !strcmp (n, "data.mdb") ||
            !strcmp (n, "lock.mdb") || !strcmp (n, "zlane.lock"))
            continue;
        snprintf (err, errlen,
                  "%s is not a zlane data directory: it holds '%s' (give --data an empty or "
                  "zlane directory)",
                  dir, n);
        rc = -1;
        break;
    }
    closedir (d);
    return rc;
}

// Split an idem key of format 1 (tenant IDEM_SEP key) or 2 (key IDEM_SEP
// tenant) into its tenant and key.
static void
s_old_key (const MDB_val *v, bool v1, const char **tenant, size_t *tl, const char **key, size_t *kl)
{
    const char *p = v->mv_data;
    const char *sep = memchr (p, IDEM_SEP, v->mv_size);
    size_t first = sep ? (size_t)(sep - p) : v->mv_size;
    size_t second = sep ? v->mv_size - first - 1 : 0;
    const char *a = p, *b = sep ? sep + 1 : p + first;
    *tenant = v1 ? a : b;
    *tl = v1 ? first : second;
    *key = v1 ? b : a;
    *kl = v1 ? second : first;
}

// Upgrade a format 1 or 2 store inside `txn` (the caller commits it with the
// new format key, so a crash leaves the old store whole). The string-keyed
// idem database and its log become the digest-keyed dedup index and the
// users' expiry log (which class an old key was is not known: each keeps the
// users' window, the longer one); then the old databases are deleted.
static int
s_upgrade (s_lmdb_t *self, MDB_txn *txn, const char *from)
{
    bool v1 = !strcmp (from, FORMAT_V1);
    int64_t t0 = zl_clock_mono_ms ();
    MDB_dbi idem, log;
    int rc = mdb_dbi_open (txn, "idem", 0, &idem);
    if (rc == MDB_NOTFOUND)
        return 0; // no key was ever kept
    if (!rc)
        rc = mdb_dbi_open (txn, "idem_log", MDB_INTEGERKEY, &log);
    if (rc)
        return rc;
    size_t n_keys = 0, n_stale = 0, n_unlogged = 0;
    MDB_cursor *c;
    MDB_val k, v;
    // 1. the log in id order: each entry still owning its key moves over
    rc = mdb_cursor_open (txn, log, &c);
    if (rc)
        return rc;
    for (rc = mdb_cursor_get (c, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get (c, &k, &v, MDB_NEXT)) {
        uint64_t id;
        MDB_val iv;
        zl_idem_rec_t rec;
        if (k.mv_size != sizeof id)
            continue;
        memcpy (&id, k.mv_data, sizeof id);
        if (mdb_get (txn, idem, &v, &iv) != 0 ||
            zl_record_idem_decode (iv.mv_data, iv.mv_size, &rec) != 0 || rec.job_id != id) {
            n_stale++; // the key went, or belongs to a later job
            continue;
        }
        const char *tenant, *key;
        size_t tl, kl;
        s_old_key (&v, v1, &tenant, &tl, &key, &kl);
        uint8_t d[IDEM_KEY_LEN];
        s_idem_key (self, tenant, tl, key, kl, d);
        rec.generated = false;
        MDB_val lk = {sizeof id, &id}, lv = {LOG_VAL_LEN, d};
        rc = s_item_put (self, txn, d, &rec, false);
        if (!rc)
            rc = mdb_put (txn, self->dlog[LOG_USER], &lk, &lv, MDB_APPEND);
        if (rc == MDB_KEYEXIST)
            rc = mdb_put (txn, self->dlog[LOG_USER], &lk, &lv, 0);
        if (rc)
            break;
        n_keys++;
    }
    mdb_cursor_close (c);
    if (rc != MDB_NOTFOUND)
        return rc;
    // 2. keys without a log entry (none should be): kept too, logged by job id
    rc = mdb_cursor_open (txn, idem, &c);
    if (rc)
        return rc;
    for (rc = mdb_cursor_get (c, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get (c, &k, &v, MDB_NEXT)) {
        zl_idem_rec_t rec;
        if (zl_record_idem_decode (v.mv_data, v.mv_size, &rec) != 0)
            continue;
        const char *tenant, *key;
        size_t tl, kl;
        s_old_key (&k, v1, &tenant, &tl, &key, &kl);
        uint8_t d[IDEM_KEY_LEN];
        s_idem_key (self, tenant, tl, key, kl, d);
        if (s_item_get (self, txn, d, NULL) == 0)
            continue; // moved in step 1
        rec.generated = false;
        MDB_val lk = {sizeof rec.job_id, &rec.job_id}, lv = {LOG_VAL_LEN, d};
        rc = s_item_put (self, txn, d, &rec, false);
        if (!rc)
            rc = mdb_put (txn, self->dlog[LOG_USER], &lk, &lv, 0);
        if (rc)
            break;
        n_unlogged++;
    }
    mdb_cursor_close (c);
    if (rc != MDB_NOTFOUND)
        return rc;
    rc = mdb_drop (txn, idem, 1);
    if (!rc)
        rc = mdb_drop (txn, log, 1);
    if (!rc)
        zl_info ("store",
                 "%s: upgrading from %s to %s: %zu idempotency keys moved to the digest index "
                 "(kept for dedup_window as users' keys), %zu stale log entries dropped, %zu "
                 "keys had no log entry (%" PRId64 " ms; committed with the format key)",
                 self->dir, from, ZL_STORE_FORMAT, n_keys + n_unlogged, n_stale, n_unlogged,
                 zl_clock_mono_ms () - t0);
    return rc;
}

static int
s_open_dedup (s_lmdb_t *self, MDB_txn *txn, unsigned create)
{
    int rc = mdb_dbi_open (txn, "dedup", MDB_DUPSORT | MDB_DUPFIXED | create, &self->dedup);
    if (!rc)
        rc = mdb_dbi_open (txn, "dedup_resend", MDB_INTEGERKEY | create, &self->dlog[LOG_RESEND]);
    if (!rc)
        rc = mdb_dbi_open (txn, "dedup_user", MDB_INTEGERKEY | create, &self->dlog[LOG_USER]);
    return rc;
}

static int
s_new_secret (s_lmdb_t *self, MDB_txn *txn)
{
    if (getrandom (self->secret, sizeof self->secret, 0) != (ssize_t)sizeof self->secret)
        return errno ? errno : EIO;
    MDB_val k = {11, "idem_secret"}, v = {sizeof self->secret, self->secret};
    return mdb_put (txn, self->meta, &k, &v, 0);
}

static int
s_put_format (s_lmdb_t *self, MDB_txn *txn)
{
    MDB_val k = {6, "format"}, v = {strlen (ZL_STORE_FORMAT), (void *)ZL_STORE_FORMAT};
    return mdb_put (txn, self->meta, &k, &v, 0);
}

static int
s_fail (MDB_txn *txn)
{
    mdb_txn_abort (txn);
    return -1;
}

// Formats 3 and 4 kept every job record in "jobs": move those of the other
// priorities to their trees, in id order (so each is appended to).
static MDB_val s_id (uint64_t *id);

static int
s_split_priorities (s_lmdb_t *self, MDB_txn *txn, size_t *moved)
{
    MDB_cursor *c;
    MDB_val k, v;
    int rc = mdb_cursor_open (txn, self->jobs[ZL_PRIORITY_DEFAULT], &c);
    if (rc)
        return rc;
    zl_arena_t *arena = zl_arena_new (4096);
    for (rc = mdb_cursor_get (c, &k, &v, MDB_FIRST); rc == 0;) {
        zl_arena_reset (arena);
        zl_job_rec_t rec;
        if (zl_record_job_decode (arena, v.mv_data, v.mv_size, &rec) != 0) {
            rc = mdb_cursor_get (c, &k, &v, MDB_NEXT); // recovery names it
            continue;
        }
        unsigned p = zl_record_priority (&rec);
        if (p == ZL_PRIORITY_DEFAULT) {
            rc = mdb_cursor_get (c, &k, &v, MDB_NEXT);
            continue;
        }
        uint64_t next;
        memcpy (&next, k.mv_data, sizeof next);
        next++;
        rc = mdb_put (txn, self->jobs[p], &k, &v, MDB_APPEND);
        if (!rc)
            rc = mdb_cursor_del (c, 0);
        if (rc)
            break;
        (*moved)++;
        k = s_id (&next);
        rc = mdb_cursor_get (c, &k, &v, MDB_SET_RANGE);
    }
    mdb_cursor_close (c);
    zl_arena_destroy (&arena);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

static int
s_open_dbs (s_lmdb_t *self, char *err, size_t errlen)
{
    MDB_txn *txn;
    int rc = mdb_txn_begin (self->env, NULL, 0, &txn);
    if (rc) {
        snprintf (err, errlen, "%s: cannot begin a transaction: %s", self->dir, mdb_strerror (rc));
        return -1;
    }
    // a store made by zlane has its format key; anything else is foreign
    MDB_dbi main_dbi;
    MDB_stat st;
    rc = mdb_dbi_open (txn, NULL, 0, &main_dbi);
    if (!rc)
        rc = mdb_stat (txn, main_dbi, &st);
    if (rc) {
        snprintf (err, errlen, "%s: not a readable LMDB store: %s", self->dir, mdb_strerror (rc));
        return s_fail (txn);
    }
    bool fresh = st.ms_entries == 0;
    struct {
        const char *name;
        unsigned flags;
        MDB_dbi *dbi;
    } dbs[] = {{"meta", 0, &self->meta},
               {"jobs", MDB_INTEGERKEY, &self->jobs[ZL_PRIORITY_DEFAULT]},
               {"state", MDB_INTEGERKEY, &self->state}};
    for (size_t i = 0; i < sizeof dbs / sizeof dbs[0]; i++) {
        rc = mdb_dbi_open (txn, dbs[i].name, dbs[i].flags | MDB_CREATE, dbs[i].dbi);
        if (rc) {
            snprintf (err, errlen, "%s is not a zlane store (database '%s': %s)", self->dir,
                      dbs[i].name, mdb_strerror (rc));
            return s_fail (txn);
        }
    }
    MDB_val k = {6, "format"}, v;
    rc = mdb_get (txn, self->meta, &k, &v);
    // the other priorities' trees: made by a broker of this format, made
    // here for an older store (and dropped with the transaction when the
    // store is refused)
    bool older =
        rc == 0 &&
        ((v.mv_size == strlen (FORMAT_V3) && memcmp (v.mv_data, FORMAT_V3, v.mv_size) == 0) ||
         (v.mv_size == strlen (FORMAT_V4) && memcmp (v.mv_data, FORMAT_V4, v.mv_size) == 0));
    bool ours = rc == 0 && v.mv_size == strlen (ZL_STORE_FORMAT) &&
                memcmp (v.mv_data, ZL_STORE_FORMAT, v.mv_size) == 0;
    for (unsigned p = 0; p < N_PRIO; p++) {
        char name[16];
        if (p == ZL_PRIORITY_DEFAULT)
            continue;
        snprintf (name, sizeof name, "jobs.%u", p);
        int orc =
            mdb_dbi_open (txn, name, MDB_INTEGERKEY | (ours ? 0 : MDB_CREATE), &self->jobs[p]);
        if (orc) {
            snprintf (err, errlen, "%s: the store is damaged (database '%s': %s)", self->dir, name,
                      mdb_strerror (orc));
            return s_fail (txn);
        }
    }
    if (rc == 0) // the format's value again: the opens wrote to the catalogue
        rc = mdb_get (txn, self->meta, &k, &v);
    const char *step = "initialise";
    if (rc == MDB_NOTFOUND && fresh) {
        rc = s_open_dedup (self, txn, MDB_CREATE);
        if (!rc)
            rc = s_new_secret (self, txn);
        if (!rc)
            rc = s_put_format (self, txn);
    } else if (rc == MDB_NOTFOUND) {
        snprintf (err, errlen, "%s holds an LMDB store that zlane did not make (no format key)",
                  self->dir);
        return s_fail (txn);
    } else if (rc == 0 && (ours || older)) {
        MDB_val sk = {11, "idem_secret"}, sv;
        rc = s_open_dedup (self, txn, 0);
        if (!rc)
            rc = mdb_get (txn, self->meta, &sk, &sv);
        if (!rc && sv.mv_size != sizeof self->secret)
            rc = MDB_CORRUPTED;
        if (rc) {
            snprintf (err, errlen,
                      "%s: the store is damaged: its idempotency index or its secret is missing "
                      "(%s)",
                      self->dir, mdb_strerror (rc));
            return s_fail (txn);
        }
        memcpy (self->secret, sv.mv_data, sizeof self->secret);
        if (older) {
            char from[16];
            snprintf (from, sizeof from, "%.*s", (int)v.mv_size, (const char *)v.mv_data);
            size_t moved = 0;
            step = "split the job records of";
            rc = s_split_priorities (self, txn, &moved);
            if (!rc)
                rc = s_put_format (self, txn);
            if (!rc)
                zl_info ("store",
                         "%s: format %s upgraded to %s: %zu job record(s) of priorities "
                         "other than %d moved to their own trees",
                         self->dir, from, ZL_STORE_FORMAT, moved, ZL_PRIORITY_DEFAULT);
            if (rc) {
                snprintf (err, errlen, "%s: cannot upgrade the store from %s: %s%s", self->dir,
                          from, mdb_strerror (rc),
                          rc == MDB_MAP_FULL ? " (start once with a larger --map-size)" : "");
                return s_fail (txn);
            }
        }
    } else if (rc == 0 && ((v.mv_size == strlen (FORMAT_V1) &&
                            memcmp (v.mv_data, FORMAT_V1, v.mv_size) == 0) ||
                           (v.mv_size == strlen (FORMAT_V2) &&
                            memcmp (v.mv_data, FORMAT_V2, v.mv_size) == 0))) {
        const char *from = memcmp (v.mv_data, FORMAT_V1, v.mv_size) == 0 ? FORMAT_V1 : FORMAT_V2;
        step = "upgrade";
        rc = s_open_dedup (self, txn, MDB_CREATE);
        if (!rc)
            rc = s_new_secret (self, txn);
        size_t moved = 0;
        if (!rc)
            rc = s_upgrade (self, txn, from);
        if (!rc)
            rc = s_split_priorities (self, txn, &moved);
        if (!rc)
            rc = s_put_format (self, txn);
        if (rc) {
            snprintf (err, errlen, "%s: cannot upgrade the store from %s: %s%s", self->dir, from,
                      mdb_strerror (rc),
                      rc == MDB_MAP_FULL ? " (start once with a larger --map-size)" : "");
            return s_fail (txn);
        }
    } else if (rc == 0) {
        snprintf (err, errlen, "%s: store format '%.*s' is not supported (this build reads %s)",
                  self->dir, (int)(v.mv_size > 64 ? 64 : v.mv_size), (const char *)v.mv_data,
                  ZL_STORE_FORMAT);
        return s_fail (txn);
    }
    if (!rc)
        rc = mdb_txn_commit (txn);
    else
        mdb_txn_abort (txn);
    if (rc) {
        snprintf (err, errlen, "%s: cannot %s the store: %s", self->dir, step, mdb_strerror (rc));
        return -1;
    }
    return 0;
}

// ---------------------------------------------------------------- room
// Room kept for acks and deletes: 4 MiB, a quarter of a map below 16 MiB.
// A turn's acks and deletes copy few pages: they delete jobs in about id
// order, and a page emptied in the batch that copied it is reused at once;
// the pruning of idempotency keys runs in a nested batch that gives up
// rather than take this room.
static uint64_t
s_margin (const s_lmdb_t *self)
{
    return self->map_size / 4 < FULL_MARGIN ? self->map_size / 4 : FULL_MARGIN;
}

// After a commit: how many pages it freed, from the free list's newest
// record. LMDB reuses them only from the commit after next, so until the
// next commit they are not room.
static void
s_note_freed (s_lmdb_t *self)
{
    MDB_envinfo info;
    MDB_txn *txn;
    MDB_cursor *c;
    MDB_val k, v;
    uint64_t freed = 0;
    mdb_env_info (self->env, &info);
    if (info.me_last_txnid == self->noted_txnid)
        return; // a commit that wrote nothing (LMDB made no new transaction)
    self->noted_txnid = info.me_last_txnid;
    if (mdb_txn_begin (self->env, NULL, MDB_RDONLY, &txn) != 0)
        return;
    if (mdb_cursor_open (txn, 0 /* FREE_DBI */, &c) == 0) {
        size_t id, n;
        if (mdb_cursor_get (c, &k, &v, MDB_LAST) == 0 && k.mv_size == sizeof id &&
            v.mv_size >= sizeof n) {
            memcpy (&id, k.mv_data, sizeof id);
            memcpy (&n, v.mv_data, sizeof n);
            if (id == info.me_last_txnid)
                freed = n;
        }
        mdb_cursor_close (c);
    }
    mdb_txn_abort (txn);
    self->freed_last = freed;
}

static uint64_t
s_file_bytes (const s_lmdb_t *self)
{
    struct stat sb;
    return fstat (self->fd, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

static uint64_t
s_disk_free (const s_lmdb_t *self)
{
    struct statvfs vfs;
    return statvfs (self->dir, &vfs) == 0 ? (uint64_t)vfs.f_bavail * vfs.f_frsize : 0;
}

// Count the pages on LMDB's free list, walking it in a read transaction of
// its own (also while the turn's batch is open: the environment is
// MDB_NOTLS). It reads one record per commit whose pages are still free.
static uint64_t
s_walk_free (s_lmdb_t *self)
{
    int64_t t0 = zl_clock_mono_us ();
    uint64_t n = 0;
    MDB_txn *txn;
    MDB_cursor *c;
    MDB_val k, v;
    if (mdb_txn_begin (self->env, NULL, MDB_RDONLY, &txn) != 0)
        return 0;
    if (mdb_cursor_open (txn, 0 /* FREE_DBI */, &c) == 0) {
        while (mdb_cursor_get (c, &k, &v, MDB_NEXT) == 0) {
            size_t count;
            if (v.mv_size >= sizeof count) {
                memcpy (&count, v.mv_data, sizeof count);
                n += count;
            }
        }
        mdb_cursor_close (c);
    }
    mdb_txn_abort (txn);
    uint64_t us = (uint64_t)(zl_clock_mono_us () - t0);
    self->room_walks++;
    self->room_walk_us += us;
    if (us > self->room_walk_max_us)
        self->room_walk_max_us = us;
    return n;
}

// The pages of every tree's own totals (the free list's, the catalogue's,
// each database's; two meta pages), and the dedup index's items, from O(1)
// mdb_stat calls on the last committed state.
static uint64_t
s_tree_pages (s_lmdb_t *self, uint64_t *items)
{
    uint64_t n = 2;
    MDB_txn *txn;
    *items = 0;
    if (mdb_txn_begin (self->env, NULL, MDB_RDONLY, &txn) != 0)
        return n;
    MDB_dbi dbis[8 + N_PRIO - 1] = {0 /* FREE_DBI */, 1 /* MAIN_DBI */, self->meta,   self->state,
                                    self->dedup,      self->dlog[0],    self->dlog[1]};
    for (unsigned p = 0; p < N_PRIO; p++)
        dbis[7 + p] = self->jobs[p];
    for (size_t i = 0; i < sizeof dbis / sizeof dbis[0]; i++) {
        MDB_stat st;
        if (mdb_stat (txn, dbis[i], &st) == 0) {
            n += st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages;
            if (dbis[i] == self->dedup)
                *items = st.ms_entries;
        }
    }
    mdb_txn_abort (txn);
    return n;
}

// Measure the room from the last committed state. Every page below the
// last used one is a meta page, a page of a tree, one of the dedup index's
// runs (a DUPSORT database's runs have their pages in their own records,
// not in its totals) or free. With `walk` the free list is walked: the
// free pages are exact and the runs' pages what is left. Without, the runs
// are taken as at the last walk plus a page per 64 items more (they hold
// 163 to a page), and the free pages are what is left: exact for jobs,
// states and logs, erring on the side of less room for the keys. The pages
// the last commit freed are not room until the next one; the unused rest
// of the map is (with preallocation it lies inside the allocated file).
static void
s_measure (s_lmdb_t *self, bool walk)
{
    MDB_envinfo info;
    mdb_env_info (self->env, &info);
    uint64_t pages = (uint64_t)info.me_last_pgno + 1, items;
    uint64_t trees = s_tree_pages (self, &items), free_pages;
    if (walk) {
        free_pages = s_walk_free (self);
        if (free_pages > pages)
            free_pages = pages;
        uint64_t rest = pages - free_pages;
        self->runs_pages = rest > trees ? rest - trees : 0;
        self->runs_items = items;
        self->room_walk_ms = zl_clock_mono_ms ();
    } else {
        uint64_t more = items > self->runs_items ? items - self->runs_items : 0;
        uint64_t taken = trees + self->runs_pages + (more + 63) / 64;
        free_pages = pages > taken ? pages - taken : 0;
    }
    uint64_t ps = self->page_size;
    self->room_used = (pages - free_pages) * ps;
    uint64_t usable = free_pages > self->freed_last ? free_pages - self->freed_last : 0;
    self->room_free = usable * ps;
    uint64_t end = pages * ps;
    self->room_tail = self->map_now > end ? self->map_now - end : 0;
    self->room_bytes = self->room_free + self->room_tail;
    if (!self->prealloc) {
        // the map is map_size and the file grows as LMDB writes: what lies
        // beyond the file counts as far as the disk holds it
        uint64_t file = s_file_bytes (self);
        uint64_t in_file = file > end ? file - end : 0;
        uint64_t beyond = self->map_size > (file > end ? file : end)
                              ? self->map_size - (file > end ? file : end)
                              : 0;
        uint64_t disk = s_disk_free (self);
        self->room_bytes = self->room_free + in_file + (disk < beyond ? disk : beyond);
    }
    if (self->async) { // what the batches LMDB has not committed yet let in
        uint64_t unc = self->async->open_bytes + self->async->flight_bytes;
        self->room_bytes -= unc < self->room_bytes ? unc : self->room_bytes;
    }
    self->room_stale = false;
    self->room_measures++;
}

// Measure again after a commit (nothing changed before): from the trees'
// totals every time, with a walk of the free list at most every
// ROOM_WALK_MS while `need` bytes are short (the estimate of the keys' runs
// may be what is short), and at least every ROOM_IDLE_MS.
static void
s_refresh (s_lmdb_t *self, uint64_t need)
{
    if (!self->room_stale)
        return;
    int64_t since = zl_clock_mono_ms () - self->room_walk_ms;
    bool walk = self->room_walks == 0 || since >= ROOM_IDLE_MS;
    s_measure (self, walk);
    if (!walk && self->room_bytes < need && since >= ROOM_WALK_MS)
        s_measure (self, true);
}

// What more the file could grow by: the disk's free space, up to map_size.
static uint64_t
s_growable (const s_lmdb_t *self)
{
    if (!self->prealloc || self->map_now >= self->map_size)
        return 0;
    uint64_t disk = s_disk_free (self), beyond = self->map_size - self->map_now;
    return disk < beyond ? disk : beyond;
}

// Why there is no room, in words, for the log; returns the kind of reason.

static int
s_why (s_lmdb_t *self, size_t bytes, char *out, size_t size)
{
    uint64_t margin = s_margin (self), growable = s_growable (self), disk = s_disk_free (self);
    uint64_t free_in = self->room_free + self->room_tail;
    char later[96] = "";
    if (self->freed_last * self->page_size >= (64u << 10))
        snprintf (later, sizeof later, " (%.1f MiB more after the next commit)",
                  MIB (self->freed_last * self->page_size));
    if (free_in >= bytes + margin) {
        snprintf (out, size,
                  "this turn's Submits took the room: %.1f MiB left of the %.1f MiB free at the "
                  "last commit, a Submit of %zu bytes, %.1f MiB kept for acks and deletes",
                  MIB (self->room_bytes), MIB (free_in), bytes, MIB (margin));
        return WHY_TURN;
    }
    if (self->prealloc && growable + free_in >= bytes + margin) {
        snprintf (out, size,
                  "a Submit of %zu bytes needs more than the %.1f MiB free in the store's "
                  "preallocated file (%.1f MiB); the file grows at the next commit",
                  bytes, MIB (free_in), MIB (self->map_now));
        return WHY_GROW;
    }
    if ((self->prealloc ? self->map_now : s_file_bytes (self)) + disk < self->map_size) {
        snprintf (out, size,
                  "the disk is full: %s has %.1f MiB free; the store's file holds %.1f MiB, "
                  "%.1f MiB of it free%s (the free pages of acked jobs count), and %.1f MiB is "
                  "kept for acks and deletes",
                  self->dir, MIB (disk), MIB (self->map_now), MIB (free_in), later, MIB (margin));
        return WHY_DISK;
    }
    snprintf (out, size,
              "the store is full: map_size (%.1f MiB) is reached, %.1f MiB of it free%s (the "
              "free pages of acked jobs count), and %.1f MiB is kept for acks and deletes",
              MIB (self->map_size), MIB (free_in), later, MIB (margin));
    return WHY_MAP;
}

// Say in the log that new jobs are refused, and why.
static void
s_say_refusal (s_lmdb_t *self, int kind, const char *why, int64_t now)
{
    char more[96] = "";
    if (self->refusals_unlogged)
        snprintf (more, sizeof more, " (and %" PRIu64 " brief refusals since the last line)",
                  self->refusals_unlogged);
    zl_warn ("store", "%s: refusing new jobs (STORE_FULL) until room comes back%s: %s", self->dir,
             more, why);
    self->refusal_logged_ms[kind] = now;
    self->refusals_unlogged = 0;
    self->refusal_said = true;
    self->refused_since_ms = now;
}

// A change between refusing and accepting new jobs, for the log. A refusal
// is said with its reason, each kind of reason at most every ROOM_LOG_MS
// (one that lasts is said once that much has passed); the return of room,
// once room has held for ROOM_BACK_MS (s_say_room_back), so that a store at
// its margin, refusing and accepting turn by turn, makes one refusal of it
// and not a line a turn. The refusals not said are counted and told in the
// next line. A refusal because this turn's Submits took the room is only
// counted: the next commit measures again.
static void
s_room_change (s_lmdb_t *self, bool ok, int kind, const char *why)
{
    int64_t now = zl_clock_mono_ms ();
    self->room = ok;
    if (ok) {
        self->room_back_ms = now;
        return;
    }
    self->room_back_ms = 0;
    self->refused++;
    if (self->refusal_said)
        return; // the refusal said goes on
    self->refused = 1;
    if (kind == WHY_TURN ||
        (self->refusal_logged_ms[kind] && now - self->refusal_logged_ms[kind] < ROOM_LOG_MS))
        self->refusals_unlogged++;
    else
        s_say_refusal (self, kind, why, now);
}

// Say that room is back, once it has held for ROOM_BACK_MS after a refusal
// that was said. Called at every commit.
static void
s_say_room_back (s_lmdb_t *self)
{
    if (!self->refusal_said || !self->room || !self->room_back_ms)
        return;
    int64_t now = zl_clock_mono_ms ();
    if (now - self->room_back_ms < ROOM_BACK_MS)
        return;
    zl_info ("store",
             "%s: accepting new jobs again after %.1f s (%" PRIu64 " Submits refused): %.1f MiB "
             "free in the store, %.1f MiB used",
             self->dir, (double)(self->room_back_ms - self->refused_since_ms) / 1000.0,
             self->refused, MIB (self->room_bytes), MIB (self->room_used));
    self->refusal_said = false;
}

// Note the answer of zl_store_has_room; say in the log when it changes.
static void
s_note_room (s_lmdb_t *self, bool ok, size_t bytes)
{
    char why[512] = "";
    int kind = WHY_TURN;
    if (ok == self->room) {
        self->refused += !ok;
        if (ok || self->refusal_said)
            return;
        // refusing, unsaid: say it if its reason is new, or once it lasted
        int64_t now = zl_clock_mono_ms ();
        kind = s_why (self, bytes, why, sizeof why);
        if (kind != WHY_TURN && (!self->refusal_logged_ms[kind] ||
                                 now - self->refusal_logged_ms[kind] >= ROOM_LOG_MS)) {
            if (self->refusals_unlogged)
                self->refusals_unlogged--; // this one is said now
            s_say_refusal (self, kind, why, now);
        }
        return;
    }
    if (!ok)
        kind = s_why (self, bytes, why, sizeof why);
    s_room_change (self, ok, kind, why);
}

// A write found the map full although zl_store_has_room said yes (large
// records find no run of free pages long enough): no room until measured.
static void
s_room_lost (s_lmdb_t *self, const char *what)
{
    self->room_bytes = 0;
    self->room_stale = true;
    if (self->room) {
        char why[256];
        snprintf (why, sizeof why, "a write (%s) found the store full", what);
        s_room_change (self, false, WHY_WRITE, why);
        self->refused = 0;
    }
}

// Keep the allocated file ahead of the used pages and LMDB's map on the
// file: grow both (no transaction may be open) when the headroom falls
// below half its target or a refused Submit wanted more.
static void
s_grow (s_lmdb_t *self)
{
    if (!self->prealloc || self->map_now >= self->map_size)
        return;
    int64_t now = zl_clock_mono_ms ();
    if (now < self->grow_retry_ms)
        return;
    MDB_envinfo info;
    mdb_env_info (self->env, &info);
    uint64_t ps = self->page_size, used = ((uint64_t)info.me_last_pgno + 1) * ps;
    uint64_t head = used / 4 < GROW_MIN ? GROW_MIN : used / 4 > GROW_MAX ? GROW_MAX : used / 4;
    if (self->grow_wanted + s_margin (self) > head)
        head = self->grow_wanted + s_margin (self);
    if (self->map_now >= used + head / 2 && !self->grow_wanted)
        return;
    uint64_t want = (used + head + GROW_STEP - 1) / GROW_STEP * GROW_STEP;
    if (want > self->map_size)
        want = self->map_size;
    uint64_t file = s_file_bytes (self) / ps * ps, end = file;
    if (want > file) {
        // ask the disk for what it says it has, then for less while it refuses
        uint64_t ext = want - file, disk = s_disk_free (self) / ps * ps;
        if (ext > disk)
            ext = disk;
        int rc = ENOSPC;
        while (ext >= ps && (rc = posix_fallocate (self->fd, (off_t)file, (off_t)ext)) != 0 &&
               (rc == ENOSPC || rc == EFBIG))
            ext = ext / 2 / ps * ps;
        if (rc == 0)
            end = file + ext;
        else if (rc != ENOSPC && rc != EFBIG) {
            zl_warn ("store",
                     "%s: cannot preallocate data.mdb (%s): the map stays at map_size and a "
                     "full disk may stop the broker at a commit",
                     self->dir, strerror (rc));
            self->prealloc = false;
            if (mdb_env_set_mapsize (self->env, self->map_size) == 0)
                self->map_now = self->map_size;
            self->room_stale = true;
            return;
        }
        if (end < want)
            self->grow_retry_ms = now + GROW_RETRY_MS; // the disk is short: not every commit
    }
    uint64_t map = end < self->map_size ? end : self->map_size;
    if (map > self->map_now && mdb_env_set_mapsize (self->env, map) == 0) {
        zl_debug ("store", "%s: data.mdb preallocated to %.1f MiB (%.1f MiB used)", self->dir,
                  MIB (map), MIB (used));
        self->map_now = map;
        self->room_stale = true;
    }
    self->grow_wanted = 0;
}

static bool
s_room_for (s_lmdb_t *self, size_t bytes)
{
    uint64_t need = (uint64_t)bytes + s_margin (self);
    self->last_need = need;
    self->room_measures_on_submit += self->room_stale;
    s_refresh (self, need);
    bool ok = self->room_bytes >= need;
    if (ok)
        self->room_bytes -= bytes;
    else if (self->freed_last && self->room_bytes + self->freed_last * self->page_size >= need)
        self->tick = true; // what the last commit freed is room after one more commit
    else if (self->prealloc && self->map_now < self->map_size && need > self->grow_wanted)
        self->grow_wanted = need; // the next commit grows the file if the disk can
    if (!ok) {
        char why[512];
        int kind = s_why (self, bytes, why, sizeof why);
        self->room_soon = self->tick || kind == WHY_TURN || kind == WHY_GROW;
    }
    s_note_room (self, ok, bytes);
    return ok;
}

static bool
s_lmdb_has_room (void *be, size_t bytes)
{
    s_lmdb_t *self = be;
    s_async_lock (self);
    bool ok = s_room_for (self, bytes);
    if (ok && self->async)
        self->async->open_bytes += bytes;
    s_async_unlock (self);
    return ok;
}

// Ahead of the next Submit (store.h): a measure that finds room short is
// left to that Submit, which measures for its own need (and may walk).
static void
s_lmdb_measure_room (void *be)
{
    s_lmdb_t *self = be;
    s_async_lock (self);
    if (self->room_stale) {
        uint64_t need = self->last_need ? self->last_need : s_margin (self);
        s_refresh (self, need);
        if (self->room_bytes < 2 * need)
            self->room_stale = true;
    }
    s_async_unlock (self);
}

static uint32_t
s_lmdb_room_retry_ms (void *be)
{
    s_lmdb_t *self = be;
    s_async_lock (self);
    bool soon = self->room_soon;
    s_async_unlock (self);
    return soon ? ZL_STORE_ROOM_SOON_MS : ZL_STORE_ROOM_RETRY_MS;
}

// ---------------------------------------------------------------- open/close
static void s_lmdb_close (void *be);

static void *
s_lmdb_open (const char *dir, zl_durability_t mode, uint64_t map_size, char *err, size_t errlen)
{
    if (s_check_dir (dir, err, errlen) != 0)
        return NULL;
    // LMDB would let a second process share the store; two brokers on one
    // store would each hand out the same jobs, so the second one refuses
    char lock_path[4096];
    snprintf (lock_path, sizeof lock_path, "%s/zlane.lock", dir);
    int lock_fd = open (lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
    if (lock_fd < 0) {
        snprintf (err, errlen, "cannot open %s: %s", lock_path, strerror (errno));
        return NULL;
    }
    if (flock (lock_fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf (err, errlen, "%s is in use by another zlane-broker (%s is locked)", dir,
                  lock_path);
        close (lock_fd);
        return NULL;
    }
    s_lmdb_t *self = ZL_NEW (s_lmdb_t);
    self->lock_fd = lock_fd;
    self->fd = -1;
    self->dir = zl_strdup (dir);
    self->mode = mode;
    long os_page = sysconf (_SC_PAGESIZE);
    uint64_t op = os_page > 0 ? (uint64_t)os_page : 4096;
    self->map_size = map_size / op * op;
    self->map_now = self->map_size; // until the store is open and its file allocated
    self->scratch = zl_arena_new (64 * 1024);
    self->room = true;
    self->room_stale = true;
    s_forget_append_pos (self); // read from the store at the first put
    int rc = mdb_env_create (&self->env);
    if (!rc) // meta, the job trees, state, dedup and its logs; idem, idem_log (formats 1-2)
        rc = mdb_env_set_maxdbs (self->env, 8 + N_PRIO);
    if (!rc)
        rc = mdb_env_set_mapsize (self->env, self->map_size);
    unsigned flags = MDB_NOTLS | MDB_NORDAHEAD;
    if (mode == ZL_DURABILITY_NONE)
        flags |= MDB_NOSYNC | MDB_NOMETASYNC;
    if (!rc)
        rc = mdb_env_open (self->env, dir, flags, 0640);
    if (rc) {
        snprintf (err, errlen, "%s: cannot open the store: %s%s", dir, mdb_strerror (rc),
                  rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH
                      ? " (data.mdb is not a zlane store, or is damaged)"
                      : "");
        s_lmdb_close (self);
        return NULL;
    }
    MDB_stat st;
    mdb_env_stat (self->env, &st);
    self->page_size = st.ms_psize;
    if (s_open_dbs (self, err, errlen) != 0) {
        s_lmdb_close (self);
        return NULL;
    }
    s_note_freed (self);
    // from here LMDB's map ends where the allocated file does
    self->prealloc = mdb_env_get_fd (self->env, &self->fd) == 0;
    if (self->prealloc) {
        uint64_t ps = self->page_size, file = s_file_bytes (self) / ps * ps;
        MDB_envinfo info;
        mdb_env_info (self->env, &info);
        uint64_t used = ((uint64_t)info.me_last_pgno + 1) * ps;
        uint64_t map = file > used ? file : used;
        if (map > self->map_size)
            map = self->map_size > used ? self->map_size : used;
        if (mdb_env_set_mapsize (self->env, map) == 0)
            self->map_now = map;
        s_grow (self);
    }
    return self;
}

static void s_async_stop (s_lmdb_t *self);

static void
s_lmdb_close (void *be)
{
    s_lmdb_t *self = be;
    s_async_stop (self);
    if (self->sub)
        mdb_txn_abort (self->sub);
    if (self->txn)
        mdb_txn_abort (self->txn);
    if (self->env) {
        if (self->mode == ZL_DURABILITY_NONE)
            mdb_env_sync (self->env, 1); // a clean stop loses nothing even in this mode
        mdb_env_close (self->env);
    }
    zl_arena_destroy (&self->scratch);
    if (self->lock_fd >= 0)
        close (self->lock_fd); // releases the flock
    free (self->dir);
    free (self);
}

// ---------------------------------------------------------------- batches
static zl_store_rc_t s_async_begin (s_lmdb_t *self, bool sub);
static zl_store_rc_t s_async_sub_end (s_lmdb_t *self, int fault, bool keep);

static zl_store_rc_t
s_begin_txn (s_lmdb_t *self)
{
    if (self->txn)
        return ZL_STORE_OK;
    zl_arena_reset (self->scratch);
    self->batch_full = false;
    self->has_last_key = false;
    return s_rc (self, mdb_txn_begin (self->env, NULL, 0, &self->txn), "begin");
}

static zl_store_rc_t
s_lmdb_begin (void *be)
{
    s_lmdb_t *self = be;
    return self->async ? s_async_begin (self, false) : s_begin_txn (self);
}

static zl_store_rc_t
s_lmdb_sub_begin (void *be)
{
    s_lmdb_t *self = be;
    if (self->async)
        return s_async_begin (self, true);
    zl_store_rc_t rc = s_lmdb_begin (self);
    if (rc != ZL_STORE_OK)
        return rc;
    return s_rc (self, mdb_txn_begin (self->env, self->txn, 0, &self->sub), "nested begin");
}

static zl_store_rc_t
s_lmdb_sub_commit (void *be, int fault)
{
    s_lmdb_t *self = be;
    if (self->async)
        return s_async_sub_end (self, fault, true);
    int rc = fault;
    if (rc)
        mdb_txn_abort (self->sub);
    else
        rc = mdb_txn_commit (self->sub);
    self->sub = NULL;
    return s_rc (self, rc, "nested commit");
}

static void
s_lmdb_sub_abort (void *be)
{
    s_lmdb_t *self = be;
    if (self->async) {
        (void)s_async_sub_end (self, 0, false);
        return;
    }
    if (self->sub)
        mdb_txn_abort (self->sub);
    self->sub = NULL;
    // appended ids of the aborted batch may be reused by no one (ids only
    // grow), but the append positions must go back to what is on record
    s_forget_append_pos (self);
}

// Commit the open transaction (abort it with `fault`); with `mu`, that lock
// is let go while LMDB commits (the commit thread's flushes).
static zl_store_rc_t
s_commit_txn (s_lmdb_t *self, int fault, pthread_mutex_t *mu)
{
    if (!self->txn)
        return ZL_STORE_OK;
    if (self->sub)
        s_lmdb_sub_abort (self);
    if (self->tick) {
        // LMDB reuses the pages a commit freed only after a later commit
        // that wrote something: while jobs are refused and nothing else
        // writes (the queue drained), that later commit would never come
        // (in a nested batch: if even this finds no room, the turn is unharmed)
        uint64_t n = self->commits;
        MDB_val k = {9, "room_tick"}, v = {sizeof n, &n};
        MDB_txn *tick;
        if (!self->sub && mdb_txn_begin (self->env, self->txn, 0, &tick) == 0) {
            if (mdb_put (tick, self->meta, &k, &v, 0) == 0)
                mdb_txn_commit (tick);
            else
                mdb_txn_abort (tick);
        }
        self->tick = false;
    }
    MDB_txn *txn = self->txn;
    self->txn = NULL;
    if (mu)
        pthread_mutex_unlock (mu);
    int64_t t0 = zl_clock_mono_us ();
    int rc = fault;
    if (rc)
        mdb_txn_abort (txn);
    else
        rc = mdb_txn_commit (txn);
    uint64_t us = (uint64_t)(zl_clock_mono_us () - t0);
    if (mu)
        pthread_mutex_lock (mu);
    self->commits++;
    self->commit_us += us;
    if (us > self->commit_max_us)
        self->commit_max_us = us;
    self->room_stale = true;
    if (rc) {
        // the batch is gone; the append positions must be re-read
        s_forget_append_pos (self);
        if (self->batch_full && rc == MDB_BAD_TXN)
            rc = MDB_MAP_FULL; // a put of this batch failed for want of room
        return s_rc (self, rc, "commit");
    }
    s_note_freed (self);
    s_grow (self);
    s_say_room_back (self);
    return ZL_STORE_OK;
}

static zl_store_rc_t s_async_commit (s_lmdb_t *self, int fault);

static zl_store_rc_t
s_lmdb_commit (void *be, int fault)
{
    s_lmdb_t *self = be;
    return self->async ? s_async_commit (self, fault) : s_commit_txn (self, fault, NULL);
}

// ---------------------------------------------------------------- writes
static MDB_val
s_id (uint64_t *id)
{
    MDB_val k = {sizeof (uint64_t), id};
    return k;
}

static void
s_sync_append_pos (s_lmdb_t *self, unsigned p)
{
    if (self->last_append_id[p] != UINT64_MAX)
        return;
    self->last_append_id[p] = 0;
    MDB_cursor *c;
    MDB_val k, v;
    if (mdb_cursor_open (s_txn (self), self->jobs[p], &c) == 0) {
        if (mdb_cursor_get (c, &k, &v, MDB_LAST) == 0)
            memcpy (&self->last_append_id[p], k.mv_data, sizeof (uint64_t));
        mdb_cursor_close (c);
    }
}

// Delete job `id`'s record from every tree but priority `p`'s: an id lives
// in one tree, whatever priority a later put gives it.
static int
s_del_elsewhere (s_lmdb_t *self, uint64_t id, unsigned p)
{
    MDB_val k = s_id (&id);
    for (unsigned q = 0; q < N_PRIO; q++) {
        int rc = q == p ? MDB_NOTFOUND : mdb_del (s_txn (self), self->jobs[q], &k, NULL);
        if (rc && rc != MDB_NOTFOUND)
            return rc;
    }
    return 0;
}

// Make room for job `id`'s record of `size` bytes in priority `p`'s tree:
// the caller writes it at *out.
static zl_store_rc_t
s_job_reserve (s_lmdb_t *self, uint64_t id, unsigned p, size_t size, void **out)
{
    s_sync_append_pos (self, p);
    MDB_val k = s_id (&id), v = {size, NULL};
    bool append = id > self->last_append_id[p];
    // a new id is appended; an id written before (a record rewritten) may
    // have been put with another priority
    int rc = append ? 0 : s_del_elsewhere (self, id, p);
    if (!rc)
        rc = mdb_put (s_txn (self), self->jobs[p], &k, &v, MDB_RESERVE | (append ? MDB_APPEND : 0));
    if (rc == MDB_KEYEXIST && append) {
        // the append position was stale: put it in its place
        self->last_append_id[p] = UINT64_MAX;
        rc = s_del_elsewhere (self, id, p);
        if (!rc)
            rc = mdb_put (s_txn (self), self->jobs[p], &k, &v, MDB_RESERVE);
    }
    if (rc)
        return s_rc (self, rc, "put job");
    *out = v.mv_data;
    if (id > self->last_append_id[p])
        self->last_append_id[p] = id;
    // a record of more than about half a page takes whole overflow pages:
    // what zl_store_has_room was told (its bytes and a little) may be short
    uint64_t ps = self->page_size;
    if (size > ps / 2 - 64) {
        uint64_t taken = (size + 16 + ps - 1) / ps * ps, told = size + 256;
        uint64_t more = taken > told ? taken - told : 0;
        self->room_bytes -= more < self->room_bytes ? more : self->room_bytes;
    }
    return ZL_STORE_OK;
}

static zl_store_rc_t s_async_put_job (s_lmdb_t *self, uint64_t id, const zl_job_rec_t *rec);
static zl_store_rc_t s_async_put_state (s_lmdb_t *self, uint64_t id, const zl_state_rec_t *rec);
static zl_store_rc_t s_async_del_job (s_lmdb_t *self, uint64_t id, unsigned priority);
static zl_store_rc_t s_async_put_idem (s_lmdb_t *self, const uint8_t d[IDEM_KEY_LEN],
                                       const zl_idem_rec_t *rec, bool absent);
static zl_store_rc_t s_async_set_next_id (s_lmdb_t *self, uint64_t next_id);

static zl_store_rc_t
s_lmdb_put_job (void *be, uint64_t id, const zl_job_rec_t *rec)
{
    s_lmdb_t *self = be;
    if (self->async)
        return s_async_put_job (self, id, rec);
    void *handle, *at;
    size_t size = zl_record_job_prepare (self->scratch, rec, &handle);
    zl_store_rc_t rc = s_job_reserve (self, id, zl_record_priority (rec), size, &at);
    if (rc == ZL_STORE_OK)
        zl_record_write (handle, at);
    return rc;
}

// Make room for job `id`'s state record of `size` bytes: the caller writes
// it at *out.
static zl_store_rc_t
s_state_reserve (s_lmdb_t *self, uint64_t id, size_t size, void **out)
{
    MDB_val k = s_id (&id), v = {size, NULL};
    int rc = mdb_put (s_txn (self), self->state, &k, &v, MDB_RESERVE);
    if (rc)
        return s_rc (self, rc, "put state");
    *out = v.mv_data;
    return ZL_STORE_OK;
}

static zl_store_rc_t
s_lmdb_put_state (void *be, uint64_t id, const zl_state_rec_t *rec)
{
    s_lmdb_t *self = be;
    if (self->async)
        return s_async_put_state (self, id, rec);
    void *handle, *at;
    size_t size = zl_record_state_prepare (self->scratch, rec, &handle);
    zl_store_rc_t rc = s_state_reserve (self, id, size, &at);
    if (rc == ZL_STORE_OK)
        zl_record_write (handle, at);
    return rc;
}

// Delete job `id` and its state in the open transaction.
static zl_store_rc_t
s_del_txn (s_lmdb_t *self, uint64_t id, unsigned priority)
{
    unsigned p = priority < N_PRIO ? priority : ZL_PRIORITY_DEFAULT;
    MDB_val k = s_id (&id);
    int rc = mdb_del (s_txn (self), self->jobs[p], &k, NULL);
    if (rc == MDB_NOTFOUND) // put with another priority than the caller knows
        rc = s_del_elsewhere (self, id, p);
    if (rc && rc != MDB_NOTFOUND)
        return s_rc (self, rc, "delete job");
    rc = mdb_del (s_txn (self), self->state, &k, NULL);
    if (rc && rc != MDB_NOTFOUND)
        return s_rc (self, rc, "delete state");
    return ZL_STORE_OK;
}

static zl_store_rc_t
s_lmdb_del_job (void *be, uint64_t id, unsigned priority)
{
    s_lmdb_t *self = be;
    return self->async ? s_async_del_job (self, id, priority) : s_del_txn (self, id, priority);
}

// Before a key's put, in a nested batch (a Submit's): true if there is
// room for it, else the Submit is refused.
static bool
s_idem_room (s_lmdb_t *self, const uint8_t d[IDEM_KEY_LEN], bool sub)
{
    // a key far from the last one (another prefix) may cost a page of its
    // own: inside a Submit while room is short it is charged so, and refused
    // before it could take the room kept for acks and deletes
    bool near = self->has_last_key && memcmp (self->last_key, d, DIGEST_LEN) == 0;
    memcpy (self->last_key, d, IDEM_KEY_LEN);
    self->has_last_key = true;
    uint64_t margin = s_margin (self);
    if (sub && !near) {
        s_refresh (self, 4 * margin);
        if (self->room_bytes < 4 * margin) {
            if (self->room_bytes < margin + self->page_size) {
                s_room_lost (self, "put idem: the rest is kept for acks and deletes");
                return false;
            }
            self->room_bytes -= self->page_size;
        }
    }
    return true;
}

// The key's item and its expiry log entry, in the open transaction.
static zl_store_rc_t
s_idem_write (s_lmdb_t *self, const uint8_t d[IDEM_KEY_LEN], const zl_idem_rec_t *rec, bool absent)
{
    int rc = s_item_put (self, s_txn (self), d, rec, absent);
    if (rc)
        return s_rc (self, rc, "put idem");
    // the expiry log of its class, in id (= time) order
    uint64_t id = rec->job_id;
    MDB_dbi log = self->dlog[rec->generated ? LOG_RESEND : LOG_USER];
    MDB_val lk = s_id (&id), lv = {LOG_VAL_LEN, (void *)d};
    rc = mdb_put (s_txn (self), log, &lk, &lv, MDB_APPEND);
    if (rc == MDB_KEYEXIST) // not the largest id: put it in its place
        rc = mdb_put (s_txn (self), log, &lk, &lv, 0);
    if (rc)
        return s_rc (self, rc, "put idem log");
    self->idem_put++;
    return ZL_STORE_OK;
}

static zl_store_rc_t
s_lmdb_put_idem (void *be, const char *tenant, const char *key, const zl_idem_rec_t *rec)
{
    s_lmdb_t *self = be;
    const uint8_t *d = s_idem_digest (self, tenant, key);
    s_idem_memo_t *m = &self->memo;
    bool absent = m->absent;
    m->absent = false;
    if (self->async)
        return s_async_put_idem (self, d, rec, absent);
    if (!s_idem_room (self, d, self->sub != NULL))
        return ZL_STORE_FULL;
    return s_idem_write (self, d, rec, absent);
}

static zl_store_rc_t
s_lmdb_set_next_id (void *be, uint64_t next_id)
{
    s_lmdb_t *self = be;
    if (self->async)
        return s_async_set_next_id (self, next_id);
    MDB_val k = {7, "next_id"}, v = {sizeof next_id, &next_id};
    return s_rc (self, mdb_put (s_txn (self), self->meta, &k, &v, 0), "put next id");
}

// ---------------------------------------------------------------- reads
// Reads outside a batch use a short read transaction.
typedef struct {
    MDB_txn *txn;
    bool own;
} reader_t;

static int
s_reader (s_lmdb_t *self, reader_t *r)
{
    r->own = !self->txn || self->async; // the thread's transaction is not the loop's
    if (!r->own) {
        r->txn = s_txn (self);
        return 0;
    }
    return mdb_txn_begin (self->env, NULL, MDB_RDONLY, &r->txn);
}

static void
s_reader_done (reader_t *r)
{
    if (r->own)
        mdb_txn_abort (r->txn);
}

// Decode job `id`'s record (`what`: "record" or "state record") into the
// arena, so that it outlives the transaction or overlay it was read from.
static zl_store_rc_t
s_decoded (int rc, uint64_t id, const char *what)
{
    if (rc == 0)
        return ZL_STORE_OK;
    zl_error ("store", "job %llu: %s does not decode (corrupt store)", (unsigned long long)id,
              what);
    return ZL_STORE_ERROR;
}

static zl_store_rc_t
s_lmdb_get_job (void *be, uint64_t id, unsigned priority, zl_arena_t *arena, zl_job_rec_t *out)
{
    s_lmdb_t *self = be;
    uint8_t ok[OKEY_ID_LEN];
    zl_overlay_op_t op;
    s_okey_id (ok, 'J', id);
    if (s_async_find (self, ok, sizeof ok, &op))
        return op.kind != OP_PUT_JOB
                   ? ZL_STORE_NOT_FOUND
                   : s_decoded (zl_record_job_decode (arena, op.data, op.len, out), id, "record");
    s_async_lock (self);
    reader_t r;
    int rc = s_reader (self, &r);
    zl_store_rc_t out_rc = s_rc (self, rc, "read");
    if (!rc) {
        unsigned p = priority < N_PRIO ? priority : ZL_PRIORITY_DEFAULT;
        MDB_val k = s_id (&id), v;
        rc = mdb_get (r.txn, self->jobs[p], &k, &v);
        for (unsigned q = 0; rc == MDB_NOTFOUND && q < N_PRIO; q++) // put with another priority
            if (q != p)
                rc = mdb_get (r.txn, self->jobs[q], &k, &v);
        out_rc = s_rc (self, rc, "get job");
        if (out_rc == ZL_STORE_OK)
            out_rc =
                s_decoded (zl_record_job_decode (arena, v.mv_data, v.mv_size, out), id, "record");
        s_reader_done (&r);
    }
    s_async_unlock (self);
    return out_rc;
}

static zl_store_rc_t
s_lmdb_get_state (void *be, uint64_t id, zl_arena_t *arena, zl_state_rec_t *out)
{
    s_lmdb_t *self = be;
    uint8_t ok[OKEY_ID_LEN];
    zl_overlay_op_t op;
    s_okey_id (ok, 'S', id);
    if (s_async_find (self, ok, sizeof ok, &op))
        return op.kind != OP_PUT_STATE
                   ? ZL_STORE_NOT_FOUND
                   : s_decoded (zl_record_state_decode (arena, op.data, op.len, out), id,
                                "state record");
    s_async_lock (self);
    reader_t r;
    int rc = s_reader (self, &r);
    zl_store_rc_t out_rc = s_rc (self, rc, "read");
    if (!rc) {
        MDB_val k = s_id (&id), v;
        out_rc = s_rc (self, mdb_get (r.txn, self->state, &k, &v), "get state");
        if (out_rc == ZL_STORE_OK)
            out_rc = s_decoded (zl_record_state_decode (arena, v.mv_data, v.mv_size, out), id,
                                "state record");
        s_reader_done (&r);
    }
    s_async_unlock (self);
    return out_rc;
}

static zl_store_rc_t
s_lmdb_get_idem (void *be, const char *tenant, const char *key, zl_idem_rec_t *out)
{
    s_lmdb_t *self = be;
    uint8_t ok[1 + IDEM_KEY_LEN];
    zl_overlay_op_t op;
    ok[0] = 'I';
    memcpy (ok + 1, s_idem_digest (self, tenant, key), IDEM_KEY_LEN);
    if (s_async_find (self, ok, sizeof ok, &op)) {
        s_item_decode (op.data, out);
        return ZL_STORE_OK;
    }
    s_async_lock (self);
    reader_t r;
    int rc = s_reader (self, &r);
    zl_store_rc_t out_rc = s_rc (self, rc, "read");
    if (!rc) {
        out_rc = s_rc (self, s_item_get (self, r.txn, ok + 1, out), "get idem");
        s_reader_done (&r);
    }
    s_async_unlock (self);
    // absent where the put will go: the batch, or (none open) the last commit
    self->memo.absent = out_rc == ZL_STORE_NOT_FOUND;
    return out_rc;
}

// ---------------------------------------------------------------- dedup pruning
// The head of an expiry log whose key still belongs to it: its id, digest
// and record. Entries whose key went, or now belongs to a later job (a key
// used again after it expired), are deleted on the way, each one counted in
// *work, up to `budget`. Returns 0, MDB_NOTFOUND (empty, or out of budget)
// or an LMDB error.
typedef struct {
    uint64_t id;
    uint8_t digest[LOG_VAL_LEN];
    zl_idem_rec_t rec;
} head_t;

static int
s_head (s_lmdb_t *self, MDB_txn *txn, MDB_cursor *c, head_t *h, size_t *work, size_t budget)
{
    while (*work < budget) {
        MDB_val k, v;
        int rc = mdb_cursor_get (c, &k, &v, MDB_FIRST);
        if (rc)
            return rc;
        bool ok = k.mv_size == sizeof h->id && v.mv_size == LOG_VAL_LEN;
        if (ok) {
            memcpy (&h->id, k.mv_data, sizeof h->id);
            memcpy (h->digest, v.mv_data, LOG_VAL_LEN);
            ok = s_item_of_job (self, txn, h->digest, h->id, &h->rec, false) == 0;
        }
        if (ok)
            return 0;
        rc = mdb_cursor_del (c, 0);
        if (rc)
            return rc;
        (*work)++;
    }
    return MDB_NOTFOUND;
}

// Forget the key at the head of log `c`.
static int
s_forget (s_lmdb_t *self, MDB_txn *txn, MDB_cursor *c, head_t *h)
{
    int rc = s_item_of_job (self, txn, h->digest, h->id, NULL, true);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    MDB_val k, v;
    rc = mdb_cursor_get (c, &k, &v, MDB_FIRST); // the cursor is on the head again
    return rc ? rc : mdb_cursor_del (c, 0);
}

// How much of its window a key has used: age / window (a window of 0 is
// used up at once).
static double
s_used_up (const head_t *h, int64_t now_ms, uint64_t window_ms)
{
    double age = (double)(now_ms - h->rec.seen_at_ms);
    return window_ms ? age / (double)window_ms : INFINITY;
}

// Whether pruning has anything to do: a log head that expired or whose key
// went, or more keys than the bound. Reads only.
static bool
s_prune_due (s_lmdb_t *self, MDB_txn *txn, int64_t now_ms, const uint64_t window[2],
             uint64_t max_keys)
{
    MDB_stat st;
    if (max_keys && mdb_stat (txn, self->dedup, &st) == 0 && st.ms_entries > max_keys)
        return true;
    for (int w = 0; w < 2; w++) {
        MDB_cursor *c;
        MDB_val k, v;
        zl_idem_rec_t rec;
        if (mdb_cursor_open (txn, self->dlog[w], &c) != 0)
            continue;
        int rc = mdb_cursor_get (c, &k, &v, MDB_FIRST);
        uint64_t id = 0;
        if (rc == 0 && k.mv_size == sizeof id)
            memcpy (&id, k.mv_data, sizeof id);
        bool due = rc == 0 && (k.mv_size != sizeof id || v.mv_size != LOG_VAL_LEN ||
                               s_item_of_job (self, txn, v.mv_data, id, &rec, false) != 0 ||
                               now_ms - rec.seen_at_ms >= (int64_t)window[w]);
        mdb_cursor_close (c);
        if (due)
            return true;
    }
    return false;
}

static size_t s_async_prune_idem (s_lmdb_t *self, int64_t now_ms, const zl_idem_policy_t *policy,
                                  size_t max);

static size_t
s_prune_txn (s_lmdb_t *self, int64_t now_ms, const zl_idem_policy_t *policy, size_t max)
{
    if (!self->txn || self->sub)
        return 0;
    size_t budget = max + (self->idem_put > SIZE_MAX / 4 ? SIZE_MAX / 2 : 2 * self->idem_put);
    self->idem_put = 0;
    uint64_t window[2];
    window[LOG_RESEND] = policy->resend_window_ms;
    window[LOG_USER] = policy->user_window_ms;
    if (!s_prune_due (self, self->txn, now_ms, window, policy->max_keys))
        return 0;
    // in a nested batch of its own: if the map is too full even to delete
    // (a delete copies pages too), the pruning waits and the turn goes on
    MDB_txn *txn;
    if (mdb_txn_begin (self->env, self->txn, 0, &txn) != 0)
        return 0;
    MDB_cursor *c[2] = {NULL, NULL};
    int rc = mdb_cursor_open (txn, self->dlog[LOG_RESEND], &c[LOG_RESEND]);
    if (!rc)
        rc = mdb_cursor_open (txn, self->dlog[LOG_USER], &c[LOG_USER]);
    size_t work = 0;
    uint64_t expired = 0, evicted = 0;
    double evicted_min_used = INFINITY;
    int64_t evicted_min_age_ms = 0;
    uint64_t evicted_min_window = 0;
    head_t h[2];
    // 1. each log in time order, while its head's window has passed (the
    // same rule as a lookup's: expired once now - seen >= window)
    for (int w = 0; w < 2 && !rc; w++) {
        while (work < budget && (rc = s_head (self, txn, c[w], &h[w], &work, budget)) == 0 &&
               now_ms - h[w].rec.seen_at_ms >= (int64_t)window[w]) {
            if ((rc = s_forget (self, txn, c[w], &h[w])) != 0)
                break;
            expired++;
            work++;
        }
        if (rc == MDB_NOTFOUND)
            rc = 0; // this log is done (empty, or out of budget)
    }
    // 2. past the bound, the key whose window is most used up goes first, so
    // that both classes keep the same share of their windows
    MDB_stat st;
    if (!rc && policy->max_keys && (rc = mdb_stat (txn, self->dedup, &st)) == 0) {
        uint64_t kept = st.ms_entries;
        while (kept > policy->max_keys && work < budget && !rc) {
            bool have[2];
            for (int w = 0; w < 2; w++)
                have[w] = s_head (self, txn, c[w], &h[w], &work, budget) == 0;
            if (!have[0] && !have[1])
                break;
            int w = !have[LOG_RESEND] ? LOG_USER
                    : !have[LOG_USER] ? LOG_RESEND
                    : s_used_up (&h[LOG_RESEND], now_ms, window[LOG_RESEND]) >=
                            s_used_up (&h[LOG_USER], now_ms, window[LOG_USER])
                        ? LOG_RESEND
                        : LOG_USER;
            double used = s_used_up (&h[w], now_ms, window[w]);
            if ((rc = s_forget (self, txn, c[w], &h[w])) != 0)
                break;
            if (used < evicted_min_used) {
                evicted_min_used = used;
                evicted_min_age_ms = now_ms - h[w].rec.seen_at_ms;
                evicted_min_window = window[w];
            }
            evicted++;
            kept--;
            work++;
        }
    }
    for (int w = 0; w < 2; w++)
        if (c[w])
            mdb_cursor_close (c[w]);
    if (!rc)
        rc = mdb_txn_commit (txn);
    else
        mdb_txn_abort (txn);
    if (rc) {
        zl_debug ("store", "%s: pruning idempotency keys waits: %s", self->dir, mdb_strerror (rc));
        return 0;
    }
    self->dedup_expired += expired;
    self->dedup_evicted += evicted;
    if (evicted) {
        if (self->evicted_unlogged == 0 || evicted_min_used < self->evicted_min_used) {
            self->evicted_min_used = evicted_min_used;
            self->evicted_min_age_ms = evicted_min_age_ms;
            self->evicted_min_window = evicted_min_window;
        }
        self->evicted_unlogged += evicted;
    }
    int64_t mono = zl_clock_mono_ms ();
    if (self->evicted_unlogged &&
        (self->evict_logged_ms == 0 || mono - self->evict_logged_ms >= EVICT_LOG_MS)) {
        zl_warn ("store",
                 "%s: %" PRIu64 " idempotency key(s) forgotten before their window ended: the "
                 "index holds dedup_max_keys (%" PRIu64 ") keys; the one that had used least of "
                 "its window was %.1f s old, of %.0f s (counted in dedup_evicted)",
                 self->dir, self->evicted_unlogged, policy->max_keys,
                 (double)self->evicted_min_age_ms / 1000.0,
                 (double)self->evicted_min_window / 1000.0);
        self->evicted_unlogged = 0;
        self->evict_logged_ms = mono;
    }
    return work;
}

static size_t
s_lmdb_prune_idem (void *be, int64_t now_ms, const zl_idem_policy_t *policy, size_t max)
{
    s_lmdb_t *self = be;
    return self->async ? s_async_prune_idem (self, now_ms, policy, max)
                       : s_prune_txn (self, now_ms, policy, max);
}

// ---------------------------------------------------------------- recovery
static int
s_lmdb_recover (void *be, zl_store_job_fn *fn, void *ctx, uint64_t *next_id, char *err,
                size_t errlen)
{
    s_lmdb_t *self = be;
    MDB_txn *txn;
    int rc = mdb_txn_begin (self->env, NULL, MDB_RDONLY, &txn);
    if (rc) {
        snprintf (err, errlen, "%s: %s", self->dir, mdb_strerror (rc));
        return -1;
    }
    uint64_t max_id = 0;
    MDB_val k = {7, "next_id"}, v;
    if (mdb_get (txn, self->meta, &k, &v) == 0 && v.mv_size == sizeof (uint64_t))
        memcpy (&max_id, v.mv_data, sizeof max_id);
    // the priorities' trees, merged in id order (the order of submission)
    MDB_cursor *jc[N_PRIO] = {NULL}, *sc = NULL;
    MDB_val jk[N_PRIO], jv[N_PRIO], sk, sv;
    int jrc[N_PRIO];
    uint64_t head[N_PRIO];
    for (unsigned p = 0; p < N_PRIO; p++) {
        jrc[p] = mdb_cursor_open (txn, self->jobs[p], &jc[p]);
        if (!jrc[p])
            jrc[p] = mdb_cursor_get (jc[p], &jk[p], &jv[p], MDB_FIRST);
        if (!jrc[p])
            memcpy (&head[p], jk[p].mv_data, sizeof head[p]);
    }
    mdb_cursor_open (txn, self->state, &sc);
    zl_arena_t *arena = zl_arena_new (64 * 1024);
    int src = mdb_cursor_get (sc, &sk, &sv, MDB_FIRST);
    int result = 0;
    for (;;) {
        unsigned p = N_PRIO;
        rc = MDB_NOTFOUND;
        for (unsigned q = 0; q < N_PRIO; q++) {
            if (jrc[q] && jrc[q] != MDB_NOTFOUND)
                rc = jrc[q]; // a tree that cannot be read
            else if (!jrc[q] && (p == N_PRIO || head[q] < head[p]))
                p = q;
        }
        if (p == N_PRIO || rc != MDB_NOTFOUND)
            break;
        rc = 0;
        uint64_t id = head[p];
        MDB_val jval = jv[p];
        jrc[p] = mdb_cursor_get (jc[p], &jk[p], &jv[p], MDB_NEXT);
        if (!jrc[p])
            memcpy (&head[p], jk[p].mv_data, sizeof head[p]);
        zl_arena_reset (arena);
        zl_job_rec_t job;
        if (zl_record_job_decode (arena, jval.mv_data, jval.mv_size, &job) != 0) {
            snprintf (err, errlen, "%s: job %llu does not decode: the store is damaged", self->dir,
                      (unsigned long long)id);
            result = -1;
            break;
        }
        // state records are a subset of job ids, both in id order: merge
        uint64_t sid = 0;
        while (src == 0 && (memcpy (&sid, sk.mv_data, sizeof sid), sid < id))
            src = mdb_cursor_get (sc, &sk, &sv, MDB_NEXT);
        zl_state_rec_t state, *sp = NULL;
        if (src == 0 && sid == id) {
            if (zl_record_state_decode (arena, sv.mv_data, sv.mv_size, &state) != 0) {
                snprintf (err, errlen,
                          "%s: state of job %llu does not decode: the store is "
                          "damaged",
                          self->dir, (unsigned long long)id);
                result = -1;
                break;
            }
            sp = &state;
        }
        if (id >= max_id)
            max_id = id + 1;
        fn (ctx, id, &job, sp);
    }
    if (result == 0 && rc != MDB_NOTFOUND) {
        snprintf (err, errlen, "%s: reading jobs: %s", self->dir, mdb_strerror (rc));
        result = -1;
    }
    for (unsigned p = 0; p < N_PRIO; p++)
        mdb_cursor_close (jc[p]);
    mdb_cursor_close (sc);
    mdb_txn_abort (txn);
    zl_arena_destroy (&arena);
    *next_id = max_id ? max_id : 1;
    s_forget_append_pos (self);
    return result;
}

static void
s_lmdb_stats (void *be, zl_store_stats_t *out)
{
    s_lmdb_t *self = be;
    s_async_lock (self);
    bool batch = self->async ? self->async->batch : self->txn != NULL;
    memset (out, 0, sizeof *out);
    out->map_size = self->map_size;
    out->commits = self->commits;
    out->commit_us = self->commit_us;
    out->commit_max_us = self->commit_max_us;
    out->dedup_expired = self->dedup_expired;
    out->dedup_evicted = self->dedup_evicted;
    out->room_measures = self->room_measures;
    out->room_measures_on_submit = self->room_measures_on_submit;
    out->room_walks = self->room_walks;
    out->room_walk_max_us = self->room_walk_max_us;
    reader_t r;
    if (s_reader (self, &r) != 0) {
        s_async_unlock (self);
        return;
    }
    MDB_stat st;
    for (unsigned p = 0; p < N_PRIO; p++)
        if (mdb_stat (r.txn, self->jobs[p], &st) == 0)
            out->jobs += st.ms_entries;
    if (mdb_stat (r.txn, self->state, &st) == 0)
        out->states = st.ms_entries;
    if (mdb_stat (r.txn, self->dedup, &st) == 0)
        out->idem_keys = st.ms_entries;
    if (mdb_stat (r.txn, self->dlog[LOG_RESEND], &st) == 0)
        out->idem_resend_log = st.ms_entries;
    if (mdb_stat (r.txn, self->dlog[LOG_USER], &st) == 0)
        out->idem_user_log = st.ms_entries;
    s_reader_done (&r);
    // the committed state's room (what the open batch let in is not counted)
    uint64_t left = self->room_bytes;
    bool measured = !self->room_stale; // `left` is a measure, less what was let in since
    s_measure (self, true);
    out->used_bytes = self->room_used;
    out->free_bytes = self->room_bytes + s_growable (self);
    if (batch && measured && left < self->room_bytes)
        self->room_bytes = left; // keep what this turn's Submits took
    out->file_bytes = self->fd >= 0 ? s_file_bytes (self) : 0;
    s_async_unlock (self);
}

// An error the fault hook injected into a write, as if LMDB had returned it.
static zl_store_rc_t
s_lmdb_fail (void *be, int error, const char *what)
{
    s_async_lock (be);
    zl_store_rc_t rc = s_rc (be, error, what);
    s_async_unlock (be);
    return rc;
}

// ---------------------------------------------------------------- the commit thread
// (the design: at s_async_t above)

static zl_store_rc_t
s_async_begin (s_lmdb_t *self, bool sub)
{
    s_async_t *a = self->async;
    if (!a->batch) {
        a->batch = true;
        self->has_last_key = false; // the keys' nearness is the loop's (s_idem_room)
    }
    if (sub) {
        a->sub = true;
        a->sub_mark = zl_overlay_count (a->open);
    }
    return ZL_STORE_OK;
}

// The nested batch ends: kept (`keep` and no `fault`) or its ops dropped.
static zl_store_rc_t
s_async_sub_end (s_lmdb_t *self, int fault, bool keep)
{
    s_async_t *a = self->async;
    if (!a->sub)
        return ZL_STORE_OK;
    a->sub = false;
    if (keep && !fault)
        return ZL_STORE_OK;
    zl_overlay_cut (a->open, a->sub_mark);
    if (!fault)
        return ZL_STORE_OK;
    pthread_mutex_lock (&a->mu);
    zl_store_rc_t rc = s_rc (self, fault, "nested commit");
    pthread_mutex_unlock (&a->mu);
    return rc;
}

// An op into the loop's open batch (the pace learns whether the batch
// began while a commit was under way).
static void *
s_async_add (s_async_t *a, int kind, uint64_t arg, const void *key, size_t key_len,
             const void *data, size_t len)
{
    zl_commit_pace_write (a->pace, zl_overlay_count (a->open) == 0);
    return zl_overlay_add (a->open, kind, arg, key, key_len, data, len);
}

// A Submit's record of overflow pages: LMDB needs a run of free pages for
// it, which a fragmented free list may not have although the room is
// there. The loop's put cannot find out (the thread writes it later, and a
// failed write there fails the whole batch), so near a full store it is
// let in only while half the map's unused tail, which is one run, holds it.
static bool
s_async_fits (s_lmdb_t *self, size_t size)
{
    pthread_mutex_lock (&self->async->mu);
    s_refresh (self, 0);
    uint64_t ps = self->page_size, need = (size + 16 + ps - 1) / ps * ps;
    bool fits = self->room_tail / 2 >= need || self->room_bytes >= need + 8 * s_margin (self);
    if (!fits)
        s_room_lost (self, "put job: a record of overflow pages near a full store");
    pthread_mutex_unlock (&self->async->mu);
    return fits;
}

static zl_store_rc_t
s_async_put_job (s_lmdb_t *self, uint64_t id, const zl_job_rec_t *rec)
{
    s_async_t *a = self->async;
    uint8_t key[OKEY_ID_LEN];
    void *handle;
    s_okey_id (key, 'J', id);
    zl_arena_reset (a->arena);
    size_t size = zl_record_job_prepare (a->arena, rec, &handle);
    if (a->sub && size > self->page_size / 2 - 64 && !s_async_fits (self, size))
        return ZL_STORE_FULL;
    zl_record_write (
        handle, s_async_add (a, OP_PUT_JOB, zl_record_priority (rec), key, sizeof key, NULL, size));
    return ZL_STORE_OK;
}

static zl_store_rc_t
s_async_put_state (s_lmdb_t *self, uint64_t id, const zl_state_rec_t *rec)
{
    s_async_t *a = self->async;
    uint8_t key[OKEY_ID_LEN];
    void *handle;
    s_okey_id (key, 'S', id);
    zl_arena_reset (a->arena);
    size_t size = zl_record_state_prepare (a->arena, rec, &handle);
    zl_record_write (handle, s_async_add (a, OP_PUT_STATE, 0, key, sizeof key, NULL, size));
    return ZL_STORE_OK;
}

static zl_store_rc_t
s_async_del_job (s_lmdb_t *self, uint64_t id, unsigned priority)
{
    s_async_t *a = self->async;
    uint8_t key[OKEY_ID_LEN];
    s_okey_id (key, 'J', id);
    s_async_add (a, OP_DEL_JOB, priority, key, sizeof key, NULL, 0);
    s_okey_id (key, 'S', id); // the replay's delete of the job takes its state too
    s_async_add (a, OP_DEL_STATE, 0, key, sizeof key, NULL, 0);
    return ZL_STORE_OK;
}

// (`absent`: the op's arg, for the replay's s_idem_write: its lookup saw
// the overlays and the last commit, which the replay starts from)
static zl_store_rc_t
s_async_put_idem (s_lmdb_t *self, const uint8_t d[IDEM_KEY_LEN], const zl_idem_rec_t *rec,
                  bool absent)
{
    s_async_t *a = self->async;
    pthread_mutex_lock (&a->mu);
    bool room = s_idem_room (self, d, a->sub);
    pthread_mutex_unlock (&a->mu);
    if (!room)
        return ZL_STORE_FULL;
    uint8_t key[1 + IDEM_KEY_LEN];
    key[0] = 'I';
    memcpy (key + 1, d, IDEM_KEY_LEN);
    s_item_encode (d, rec, s_async_add (a, OP_PUT_IDEM, absent, key, sizeof key, NULL, ITEM_LEN));
    return ZL_STORE_OK;
}

static zl_store_rc_t
s_async_set_next_id (s_lmdb_t *self, uint64_t next_id)
{
    s_async_add (self->async, OP_NEXT_ID, 0, "N", 1, &next_id, sizeof next_id);
    return ZL_STORE_OK;
}

static size_t
s_async_prune_idem (s_lmdb_t *self, int64_t now_ms, const zl_idem_policy_t *policy, size_t max)
{
    s_async_t *a = self->async;
    if (a->batch && !a->sub) {
        a->prune = true;
        a->prune_now = now_ms;
        a->prune_policy = *policy;
        a->prune_max = max;
    }
    return 0; // the thread prunes when it commits the batch (and writes only then)
}

// One op of the batch, into the thread's transaction.
static zl_store_rc_t
s_replay_op (s_lmdb_t *self, const zl_overlay_op_t *op)
{
    uint64_t id = 0;
    void *at;
    zl_store_rc_t rc = ZL_STORE_OK;
    if (op->key_len == OKEY_ID_LEN)
        memcpy (&id, op->key + 1, sizeof id);
    switch (op->kind) {
    case OP_PUT_JOB:
        rc = s_job_reserve (self, id, op->arg < N_PRIO ? op->arg : ZL_PRIORITY_DEFAULT, op->len,
                            &at);
        if (rc == ZL_STORE_OK)
            memcpy (at, op->data, op->len);
        return rc;
    case OP_PUT_STATE:
        rc = s_state_reserve (self, id, op->len, &at);
        if (rc == ZL_STORE_OK)
            memcpy (at, op->data, op->len);
        return rc;
    case OP_DEL_JOB: return s_del_txn (self, id, op->arg);
    case OP_PUT_IDEM: {
        zl_idem_rec_t rec;
        s_item_decode (op->data, &rec);
        return s_idem_write (self, op->key + 1, &rec, op->arg != 0);
    }
    case OP_NEXT_ID: {
        uint64_t next;
        memcpy (&next, op->data, sizeof next);
        MDB_val k = {7, "next_id"}, v = {sizeof next, &next};
        return s_rc (self, mdb_put (self->txn, self->meta, &k, &v, 0), "put next id");
    }
    default: return ZL_STORE_OK; // OP_DEL_STATE: the job's delete took it
    }
}

// The thread's work on one batch, `mu` held: replay it into a transaction
// and commit it (LMDB's flushes with `mu` let go).
static zl_store_rc_t
s_replay (s_lmdb_t *self)
{
    s_async_t *a = self->async;
    zl_store_rc_t rc = s_begin_txn (self);
    size_t n = zl_overlay_count (a->flight);
    for (size_t i = 0; rc == ZL_STORE_OK && i < n; i++) {
        zl_overlay_op_t op = zl_overlay_at (a->flight, i);
        rc = s_replay_op (self, &op);
    }
    if (rc == ZL_STORE_OK && a->flight_prune) {
        (void)s_prune_txn (self, a->prune_now, &a->prune_policy, a->prune_max);
        a->pruned_ms = zl_clock_mono_ms ();
    }
    if (rc != ZL_STORE_OK) { // logged by s_rc; nothing of the batch is kept
        if (self->txn)
            mdb_txn_abort (self->txn);
        self->txn = NULL;
        s_forget_append_pos (self);
        self->room_stale = true;
        return rc;
    }
    pthread_mutex_unlock (&a->mu); // a test's hook may hold the commit here
    int fault = zl_store_fault_ask (ZL_STORE_FAULT_FLUSH);
    pthread_mutex_lock (&a->mu);
    return s_commit_txn (self, fault, &a->mu);
}

static int64_t
s_real_us (void) // the disk's time, not zl_clock's (which a test may stop)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

// Wait (`mu` held; let go meanwhile) until the pace lets the batch's
// commit start: a batch that follows a stream waits out the interval (the
// jobs have left for their workers already; their Accepted waits with it)
// unless a caller comes to wait for it or the store closes.
static void
s_pace_wait (s_async_t *a)
{
    int64_t due;
    while ((due = zl_commit_pace_due (a->pace, a->flight_behind)) > s_real_us () && !a->quit) {
        struct timespec ts = {(time_t)(due / 1000000), (long)(due % 1000000) * 1000};
        pthread_cond_timedwait (&a->cv, &a->mu, &ts); // (a monotonic cv)
    }
    zl_commit_pace_started (a->pace, s_real_us ());
}

static void *
s_committer (void *arg)
{
    s_lmdb_t *self = arg;
    s_async_t *a = self->async;
    sigset_t all; // the process's signals are the loop's to take
    sigfillset (&all);
    pthread_sigmask (SIG_BLOCK, &all, NULL);
    pthread_mutex_lock (&a->mu);
    for (;;) {
        while (!a->running && !a->quit)
            pthread_cond_wait (&a->cv, &a->mu);
        if (!a->running)
            break;
        s_pace_wait (a);
        a->result = s_replay (self);
        a->flight_bytes = 0;
        a->running = false;
        pthread_cond_broadcast (&a->cv);
        uint64_t one = 1;
        if (write (a->efd, &one, sizeof one) < 0) // the loop polls it; it cannot overflow here
            zl_debug ("store", "%s: commit thread: eventfd: %s", self->dir, strerror (errno));
    }
    pthread_mutex_unlock (&a->mu);
    return NULL;
}

// Drop the loop's open batch (a commit failed, or it was aborted).
static void
s_async_drop (s_async_t *a)
{
    zl_overlay_clear (a->open);
    a->batch = a->sub = a->prune = false;
    zl_commit_pace_not_behind (a->pace);
    a->open_bytes = 0;
}

static zl_store_rc_t
s_async_finish (void *be, bool wait)
{
    s_lmdb_t *self = be;
    s_async_t *a = self->async;
    if (!a)
        return ZL_STORE_OK;
    pthread_mutex_lock (&a->mu);
    if (wait && a->running) { // its caller waits: no pace
        a->flight_behind = false;
        pthread_cond_broadcast (&a->cv);
    }
    while (a->running && wait)
        pthread_cond_wait (&a->cv, &a->mu);
    bool running = a->running;
    zl_store_rc_t rc = a->result;
    a->result = ZL_STORE_OK;
    pthread_mutex_unlock (&a->mu);
    if (running)
        return ZL_STORE_PENDING;
    zl_commit_pace_ended (a->pace);
    uint64_t n;
    if (read (a->efd, &n, sizeof n) < 0 && errno != EAGAIN)
        zl_debug ("store", "%s: commit thread: eventfd: %s", self->dir, strerror (errno));
    zl_overlay_clear (a->flight);
    if (rc != ZL_STORE_OK)
        s_async_drop (a); // written after a batch that failed: it goes with it
    return rc;
}

static zl_store_rc_t
s_async_start (void *be, int fault)
{
    s_lmdb_t *self = be;
    s_async_t *a = self->async;
    if (!a)
        return s_commit_txn (self, fault, NULL); // commits as zl_store_commit
    if (!a->batch)
        return ZL_STORE_OK;
    if (a->sub) // a nested batch left open is dropped
        zl_overlay_cut (a->open, a->sub_mark);
    a->sub = false;
    if (fault) {
        s_async_drop (a);
        pthread_mutex_lock (&a->mu);
        zl_store_rc_t rc = s_rc (self, fault, "commit");
        pthread_mutex_unlock (&a->mu);
        return rc;
    }
    pthread_mutex_lock (&a->mu);
    if (a->running) { // store.c closes an empty batch so while one commits
        pthread_mutex_unlock (&a->mu);
        s_async_drop (a);
        return ZL_STORE_PENDING;
    }
    // an empty batch goes only for what the thread alone can do: prune the
    // keys (every second while idle), or the write that frees pages (`tick`)
    bool idle_prune = a->prune && zl_clock_mono_ms () - a->pruned_ms >= ROOM_IDLE_MS;
    if (zl_overlay_count (a->open) == 0 && !idle_prune && !self->tick) {
        pthread_mutex_unlock (&a->mu);
        s_async_drop (a);
        return ZL_STORE_OK;
    }
    zl_overlay_t *t = a->flight;
    a->flight = a->open;
    a->open = t;
    a->flight_prune = a->prune;
    a->flight_bytes = a->open_bytes;
    a->flight_behind = zl_commit_pace_hand_over (a->pace);
    a->running = true;
    pthread_cond_broadcast (&a->cv);
    pthread_mutex_unlock (&a->mu);
    s_async_drop (a);
    return ZL_STORE_PENDING;
}

static int
s_async_fd (void *be)
{
    s_lmdb_t *self = be;
    return self->async ? self->async->efd : -1;
}

// zl_store_commit with the thread: start, then wait for the end.
static zl_store_rc_t
s_async_commit (s_lmdb_t *self, int fault)
{
    if (!self->async->running && !self->async->batch)
        return ZL_STORE_OK;
    zl_store_rc_t rc = s_async_finish (self, true);
    if (rc != ZL_STORE_OK)
        return rc;
    zl_commit_pace_not_behind (self->async->pace); // its caller waits for it
    rc = s_async_start (self, fault);
    return rc == ZL_STORE_PENDING ? s_async_finish (self, true) : rc;
}

static void
s_async_free (s_async_t *a)
{
    zl_overlay_destroy (&a->open);
    zl_overlay_destroy (&a->flight);
    zl_commit_pace_destroy (&a->pace);
    zl_arena_destroy (&a->arena);
    pthread_mutex_destroy (&a->mu);
    pthread_cond_destroy (&a->cv);
    close (a->efd);
    free (a);
}

static bool
s_lmdb_commit_thread (void *be, int64_t interval_us)
{
    s_lmdb_t *self = be;
    if (self->async) {
        pthread_mutex_lock (&self->async->mu);
        zl_commit_pace_set_interval (self->async->pace, interval_us);
        pthread_mutex_unlock (&self->async->mu);
        return true;
    }
    if (self->mode != ZL_DURABILITY_FSYNC || self->txn)
        return false; // `none` commits into the page cache: a hand-off would cost more
    s_async_t *a = ZL_NEW (s_async_t);
    a->efd = eventfd (0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (a->efd < 0) {
        zl_warn ("store", "%s: no commit thread (eventfd: %s): the loop commits", self->dir,
                 strerror (errno));
        free (a);
        return false;
    }
    pthread_mutex_init (&a->mu, NULL);
    pthread_condattr_t ca; // the interval's wait is on the monotonic clock
    pthread_condattr_init (&ca);
    pthread_condattr_setclock (&ca, CLOCK_MONOTONIC);
    pthread_cond_init (&a->cv, &ca);
    pthread_condattr_destroy (&ca);
    a->pace = zl_commit_pace_new (interval_us);
    a->open = zl_overlay_new ();
    a->flight = zl_overlay_new ();
    a->arena = zl_arena_new (64 * 1024);
    a->pruned_ms = zl_clock_mono_ms ();
    self->async = a;
    int rc = pthread_create (&a->thread, NULL, s_committer, self);
    if (rc) {
        zl_warn ("store", "%s: no commit thread (%s): the loop commits", self->dir, strerror (rc));
        self->async = NULL;
        s_async_free (a);
        return false;
    }
    return true;
}

// Stop the thread after the commit under way (a batch still open is dropped,
// as a closing store aborts its transaction).
static void
s_async_stop (s_lmdb_t *self)
{
    s_async_t *a = self->async;
    if (!a)
        return;
    pthread_mutex_lock (&a->mu);
    a->quit = true;
    pthread_cond_broadcast (&a->cv);
    pthread_mutex_unlock (&a->mu);
    pthread_join (a->thread, NULL);
    self->async = NULL;
    s_async_free (a);
}

const zl_store_backend_t zl_store_lmdb = {.name = "lmdb",
                                          .open = s_lmdb_open,
                                          .close = s_lmdb_close,
                                          .begin = s_lmdb_begin,
                                          .sub_begin = s_lmdb_sub_begin,
                                          .sub_commit = s_lmdb_sub_commit,
                                          .sub_abort = s_lmdb_sub_abort,
                                          .commit = s_lmdb_commit,
                                          .commit_start = s_async_start,
                                          .commit_finish = s_async_finish,
                                          .commit_fd = s_async_fd,
                                          .commit_thread = s_lmdb_commit_thread,
                                          .fail = s_lmdb_fail,
                                          .put_job = s_lmdb_put_job,
                                          .put_state = s_lmdb_put_state,
                                          .del_job = s_lmdb_del_job,
                                          .put_idem = s_lmdb_put_idem,
                                          .set_next_id = s_lmdb_set_next_id,
                                          .get_job = s_lmdb_get_job,
                                          .get_state = s_lmdb_get_state,
                                          .get_idem = s_lmdb_get_idem,
                                          .prune_idem = s_lmdb_prune_idem,
                                          .has_room = s_lmdb_has_room,
                                          .room_retry_ms = s_lmdb_room_retry_ms,
                                          .measure_room = s_lmdb_measure_room,
                                          .recover = s_lmdb_recover,
                                          .stats = s_lmdb_stats};
