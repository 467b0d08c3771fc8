#include "store.h"

#include "clock.h"
#include "log.h"
#include "zl_alloc.h"

#include <dirent.h>
#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/statvfs.h>

#define FULL_MARGIN (4u << 20)  // bytes kept free so acks and deletes always fit
#define IDEM_SEP '\0'           // key IDEM_SEP tenant: a C string cannot hold it
#define FORMAT_V1 "zlane-store-1"  // idem keys were tenant IDEM_SEP key

struct _zl_store_t {
    int lock_fd;       // flock on DIR/zlane.lock: one broker per data directory
    MDB_env *env;
    MDB_txn *txn;      // the turn's batch
    MDB_txn *sub;      // nested batch of one Submit
    MDB_dbi meta, jobs, state, idem, idem_log;
    char *dir;
    zl_durability_t mode;
    uint64_t map_size;
    size_t page_size;
    uint64_t last_append_id;  // jobs are appended in id order; UINT64_MAX = unknown
    bool batch_full;          // a write of the turn's batch ran out of room
    zl_arena_t *scratch;
    uint64_t commits, commit_us, commit_max_us;
    uint64_t used_pages;      // pages in use beyond the free list, last measured
    int64_t next_room_check_ms;
    bool room;
};

static MDB_txn *
s_txn (zl_store_t *self)
{
    return self->sub ? self->sub : self->txn;
}

static zl_store_rc_t
s_rc (zl_store_t *self, int rc, const char *what)
{
    if (rc == MDB_SUCCESS)
        return ZL_STORE_OK;
    if (rc == MDB_NOTFOUND)
        return ZL_STORE_NOT_FOUND;
    if (rc == MDB_MAP_FULL || rc == ENOSPC || rc == MDB_TXN_FULL) {
        zl_warn ("store", "%s: store full (%s)", what, mdb_strerror (rc));
        self->room = false;
        if (!self->sub)
            self->batch_full = true;  // the batch is lost; its commit will say why
        return ZL_STORE_FULL;
    }
    zl_error ("store", "%s failed: %s", what, mdb_strerror (rc));
    return ZL_STORE_ERROR;
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

// Swap one idem key from format 1 (tenant IDEM_SEP key) to this format
// (key IDEM_SEP tenant), in `out` (the same size).
static void
s_swap_v1_key (const MDB_val *in, char *out)
{
    const char *p = in->mv_data;
    const char *sep = memchr (p, IDEM_SEP, in->mv_size);
    size_t tl = sep ? (size_t) (sep - p) : in->mv_size;
    size_t kl = sep ? in->mv_size - tl - 1 : 0;
    memcpy (out, p + tl + 1, kl);
    out[kl] = IDEM_SEP;
    memcpy (out + kl + 1, p, tl);
}

// Upgrade a format 1 store inside `txn` (the caller commits it with the new
// format key, so a crash leaves the old store whole): the idem keys and the
// idem log's values change order; nothing else differs.
static int
s_upgrade_v1 (zl_store_t *self, MDB_txn *txn)
{
    MDB_cursor *c;
    MDB_val k, v;
    // the log's values keep their size: rewritten in place
    int rc = mdb_cursor_open (txn, self->idem_log, &c);
    if (rc)
        return rc;
    size_t n_log = 0;
    char *buf = NULL;
    size_t cap = 0;
    for (rc = mdb_cursor_get (c, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get (c, &k, &v, MDB_NEXT)) {
        if (v.mv_size > cap)
            buf = zl_realloc (buf, cap = v.mv_size * 2);
        s_swap_v1_key (&v, buf);
        MDB_val nv = {v.mv_size, buf};
        rc = mdb_cursor_put (c, &k, &nv, MDB_CURRENT);
        if (rc)
            break;
        n_log++;
    }
    mdb_cursor_close (c);
    if (rc != MDB_NOTFOUND) {
        free (buf);
        return rc;
    }
    // the idem keys change, so their order too: read them all, empty the
    // database, put them back
    MDB_stat st;
    rc = mdb_stat (txn, self->idem, &st);
    if (rc) {
        free (buf);
        return rc;
    }
    size_t n = 0;
    MDB_val *keys = zl_calloc (st.ms_entries + 1, sizeof *keys);
    MDB_val *vals = zl_calloc (st.ms_entries + 1, sizeof *vals);
    rc = mdb_cursor_open (txn, self->idem, &c);
    if (!rc) {
        for (rc = mdb_cursor_get (c, &k, &v, MDB_FIRST); rc == 0 && n < st.ms_entries;
             rc = mdb_cursor_get (c, &k, &v, MDB_NEXT)) {
            char *copy = zl_malloc (k.mv_size + v.mv_size);
            s_swap_v1_key (&k, copy);
            memcpy (copy + k.mv_size, v.mv_data, v.mv_size);
            keys[n] = (MDB_val) {k.mv_size, copy};
            vals[n] = (MDB_val) {v.mv_size, copy + k.mv_size};
            n++;
        }
        mdb_cursor_close (c);
        if (rc == 0 || rc == MDB_NOTFOUND)
            rc = mdb_drop (txn, self->idem, 0);
    }
    for (size_t i = 0; i < n && !rc; i++)
        rc = mdb_put (txn, self->idem, &keys[i], &vals[i], 0);
    for (size_t i = 0; i < n; i++)
        free (keys[i].mv_data);
    free (keys);
    free (vals);
    free (buf);
    if (!rc)
        zl_info ("store", "%s: upgraded from %s to %s (%zu idempotency keys, %zu log entries)",
                 self->dir, FORMAT_V1, ZL_STORE_FORMAT, n, n_log);
    return rc;
}

static int
s_open_dbs (zl_store_t *self, char *err, size_t errlen)
{
    MDB_txn *txn;
    int rc = mdb_txn_begin (self->env, NULL, 0, &txn);
    if (rc) {
        snprintf (err, errlen, "%s: cannot begin a transaction: %s", self->dir, mdb_strerror (rc));
        return -1;
    }
    struct {
        const char *name;
        unsigned flags;
        MDB_dbi *dbi;
    } dbs[] = {{"meta", 0, &self->meta},
               {"jobs", MDB_INTEGERKEY, &self->jobs},
               {"state", MDB_INTEGERKEY, &self->state},
               {"idem", 0, &self->idem},
               {"idem_log", MDB_INTEGERKEY, &self->idem_log}};
    // a store made by zlane has its format key; anything else is foreign
    MDB_dbi main_dbi;
    MDB_stat st;
    rc = mdb_dbi_open (txn, NULL, 0, &main_dbi);
    if (!rc)
        rc = mdb_stat (txn, main_dbi, &st);
    if (rc) {
        snprintf (err, errlen, "%s: not a readable LMDB store: %s", self->dir, mdb_strerror (rc));
        mdb_txn_abort (txn);
        return -1;
    }
    bool fresh = st.ms_entries == 0;
    for (size_t i = 0; i < sizeof dbs / sizeof dbs[0]; i++) {
        rc = mdb_dbi_open (txn, dbs[i].name, dbs[i].flags | MDB_CREATE, dbs[i].dbi);
        if (rc) {
            snprintf (err, errlen, "%s is not a zlane store (database '%s': %s)", self->dir,
                      dbs[i].name, mdb_strerror (rc));
            mdb_txn_abort (txn);
            return -1;
        }
    }
    MDB_val k = {6, "format"}, v;
    rc = mdb_get (txn, self->meta, &k, &v);
    if (rc == MDB_NOTFOUND && fresh) {
        v.mv_size = strlen (ZL_STORE_FORMAT);
        v.mv_data = (void *) ZL_STORE_FORMAT;
        rc = mdb_put (txn, self->meta, &k, &v, 0);
    } else if (rc == MDB_NOTFOUND) {
        snprintf (err, errlen, "%s holds an LMDB store that zlane did not make (no format key)",
                  self->dir);
        mdb_txn_abort (txn);
        return -1;
    } else if (rc == 0 && v.mv_size == strlen (FORMAT_V1) &&
               memcmp (v.mv_data, FORMAT_V1, v.mv_size) == 0) {
        rc = s_upgrade_v1 (self, txn);
        if (!rc) {
            v.mv_size = strlen (ZL_STORE_FORMAT);
            v.mv_data = (void *) ZL_STORE_FORMAT;
            rc = mdb_put (txn, self->meta, &k, &v, 0);
        }
        if (rc) {
            snprintf (err, errlen, "%s: cannot upgrade the store from %s: %s", self->dir,
                      FORMAT_V1, mdb_strerror (rc));
            mdb_txn_abort (txn);
            return -1;
        }
    } else if (rc == 0 && (v.mv_size != strlen (ZL_STORE_FORMAT) ||
                           memcmp (v.mv_data, ZL_STORE_FORMAT, v.mv_size) != 0)) {
        snprintf (err, errlen, "%s: store format '%.*s' is not supported (this build reads %s)",
                  self->dir, (int) (v.mv_size > 64 ? 64 : v.mv_size), (const char *) v.mv_data,
                  ZL_STORE_FORMAT);
        mdb_txn_abort (txn);
        return -1;
    }
    if (!rc)
        rc = mdb_txn_commit (txn);
    else
        mdb_txn_abort (txn);
    if (rc) {
        snprintf (err, errlen, "%s: cannot initialise the store: %s", self->dir, mdb_strerror (rc));
        return -1;
    }
    return 0;
}

zl_store_t *
zl_store_open (const char *dir, zl_durability_t mode, uint64_t map_size, char *err, size_t errlen)
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
    zl_store_t *self = ZL_NEW (zl_store_t);
    self->lock_fd = lock_fd;
    self->dir = zl_strdup (dir);
    self->mode = mode;
    self->map_size = map_size;
    self->scratch = zl_arena_new (64 * 1024);
    self->room = true;
    self->last_append_id = UINT64_MAX;  // read from the store at the first put
    int rc = mdb_env_create (&self->env);
    if (!rc)
        rc = mdb_env_set_maxdbs (self->env, 8);
    if (!rc)
        rc = mdb_env_set_mapsize (self->env, map_size);
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
        zl_store_close (&self);
        return NULL;
    }
    MDB_stat st;
    mdb_env_stat (self->env, &st);
    self->page_size = st.ms_psize;
    if (s_open_dbs (self, err, errlen) != 0) {
        zl_store_close (&self);
        return NULL;
    }
    return self;
}

void
zl_store_close (zl_store_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_store_t *self = *self_p;
    if (self->sub)
        mdb_txn_abort (self->sub);
    if (self->txn)
        mdb_txn_abort (self->txn);
    if (self->env) {
        if (self->mode == ZL_DURABILITY_NONE)
            mdb_env_sync (self->env, 1);  // a clean stop loses nothing even in this mode
        mdb_env_close (self->env);
    }
    zl_arena_destroy (&self->scratch);
    if (self->lock_fd >= 0)
        close (self->lock_fd);  // releases the flock
    free (self->dir);
    free (self);
    *self_p = NULL;
}

// ---------------------------------------------------------------- batches
zl_store_rc_t
zl_store_begin (zl_store_t *self)
{
    if (self->txn)
        return ZL_STORE_OK;
    zl_arena_reset (self->scratch);
    self->batch_full = false;
    return s_rc (self, mdb_txn_begin (self->env, NULL, 0, &self->txn), "begin");
}

bool
zl_store_in_batch (zl_store_t *self)
{
    return self->txn != NULL;
}

zl_store_rc_t
zl_store_sub_begin (zl_store_t *self)
{
    zl_store_rc_t rc = zl_store_begin (self);
    if (rc != ZL_STORE_OK)
        return rc;
    return s_rc (self, mdb_txn_begin (self->env, self->txn, 0, &self->sub), "nested begin");
}

zl_store_rc_t
zl_store_sub_commit (zl_store_t *self)
{
    int rc = mdb_txn_commit (self->sub);
    self->sub = NULL;
    return s_rc (self, rc, "nested commit");
}

void
zl_store_sub_abort (zl_store_t *self)
{
    if (self->sub)
        mdb_txn_abort (self->sub);
    self->sub = NULL;
    // appended ids of the aborted batch may be reused by no one (ids only
    // grow), but the append position must go back to what is on record
    MDB_cursor *c;
    MDB_val k, v;
    self->last_append_id = 0;
    if (mdb_cursor_open (self->txn, self->jobs, &c) == 0) {
        if (mdb_cursor_get (c, &k, &v, MDB_LAST) == 0)
            memcpy (&self->last_append_id, k.mv_data, sizeof (uint64_t));
        mdb_cursor_close (c);
    }
}

zl_store_rc_t
zl_store_commit (zl_store_t *self)
{
    if (!self->txn)
        return ZL_STORE_OK;
    if (self->sub)
        zl_store_sub_abort (self);
    int64_t t0 = zl_clock_mono_us ();
    int rc = mdb_txn_commit (self->txn);
    self->txn = NULL;
    uint64_t us = (uint64_t) (zl_clock_mono_us () - t0);
    self->commits++;
    self->commit_us += us;
    if (us > self->commit_max_us)
        self->commit_max_us = us;
    if (rc) {
        // the batch is gone; the append position must be re-read
        self->last_append_id = UINT64_MAX;
        if (self->batch_full && rc == MDB_BAD_TXN)
            rc = MDB_MAP_FULL;  // a put of this batch failed for want of room
        return s_rc (self, rc, "commit");
    }
    return ZL_STORE_OK;
}

// ---------------------------------------------------------------- writes
static MDB_val
s_id (uint64_t *id)
{
    MDB_val k = {sizeof (uint64_t), id};
    return k;
}

static void
s_sync_append_pos (zl_store_t *self)
{
    if (self->last_append_id != UINT64_MAX)
        return;
    self->last_append_id = 0;
    MDB_cursor *c;
    MDB_val k, v;
    if (mdb_cursor_open (s_txn (self), self->jobs, &c) == 0) {
        if (mdb_cursor_get (c, &k, &v, MDB_LAST) == 0)
            memcpy (&self->last_append_id, k.mv_data, sizeof (uint64_t));
        mdb_cursor_close (c);
    }
}

zl_store_rc_t
zl_store_put_job (zl_store_t *self, uint64_t id, const zl_job_rec_t *rec)
{
    void *handle;
    size_t size = zl_record_job_prepare (self->scratch, rec, &handle);
    s_sync_append_pos (self);
    MDB_val k = s_id (&id), v = {size, NULL};
    unsigned flags = MDB_RESERVE | (id > self->last_append_id ? MDB_APPEND : 0);
    int rc = mdb_put (s_txn (self), self->jobs, &k, &v, flags);
    if (rc == MDB_KEYEXIST && (flags & MDB_APPEND)) {
        // the append position was stale: put it in its place
        self->last_append_id = UINT64_MAX;
        rc = mdb_put (s_txn (self), self->jobs, &k, &v, MDB_RESERVE);
    }
    if (rc)
        return s_rc (self, rc, "put job");
    zl_record_write (handle, v.mv_data);
    if (id > self->last_append_id)
        self->last_append_id = id;
    if (rec->idempotency_key && rec->idempotency_key[0]) {
        // idem_log: id -> the idem key (key IDEM_SEP tenant), pruned in id
        // (= time) order
        size_t tl = strlen (rec->tenant), kl = strlen (rec->idempotency_key);
        MDB_val lv = {tl + 1 + kl, NULL};
        rc = mdb_put (s_txn (self), self->idem_log, &k, &lv, MDB_RESERVE | MDB_APPEND);
        if (rc == MDB_KEYEXIST)
            rc = mdb_put (s_txn (self), self->idem_log, &k, &lv, MDB_RESERVE);
        if (rc)
            return s_rc (self, rc, "put idem log");
        memcpy (lv.mv_data, rec->idempotency_key, kl);
        ((char *) lv.mv_data)[kl] = IDEM_SEP;
        memcpy ((char *) lv.mv_data + kl + 1, rec->tenant, tl);
    }
    return ZL_STORE_OK;
}

zl_store_rc_t
zl_store_put_state (zl_store_t *self, uint64_t id, const zl_state_rec_t *rec)
{
    void *handle;
    size_t size = zl_record_state_prepare (self->scratch, rec, &handle);
    MDB_val k = s_id (&id), v = {size, NULL};
    int rc = mdb_put (s_txn (self), self->state, &k, &v, MDB_RESERVE);
    if (rc)
        return s_rc (self, rc, "put state");
    zl_record_write (handle, v.mv_data);
    return ZL_STORE_OK;
}

zl_store_rc_t
zl_store_del_job (zl_store_t *self, uint64_t id)
{
    MDB_val k = s_id (&id);
    int rc = mdb_del (s_txn (self), self->jobs, &k, NULL);
    if (rc && rc != MDB_NOTFOUND)
        return s_rc (self, rc, "delete job");
    rc = mdb_del (s_txn (self), self->state, &k, NULL);
    if (rc && rc != MDB_NOTFOUND)
        return s_rc (self, rc, "delete state");
    return ZL_STORE_OK;
}

// The idem database's key: the idempotency key, then the tenant. Key first,
// so that keys made in sequence (the producer library's own, one counter over
// all tenants) land next to each other and a turn's inserts dirty few pages,
// however many tenants they are for.
static MDB_val
s_idem_key (char *buf, size_t size, const char *tenant, const char *key, char **heap)
{
    size_t tl = strlen (tenant), kl = strlen (key), n = tl + 1 + kl;
    char *p = n <= size ? buf : (*heap = zl_malloc (n));
    memcpy (p, key, kl);
    p[kl] = IDEM_SEP;
    memcpy (p + kl + 1, tenant, tl);
    MDB_val k = {n, p};
    return k;
}

zl_store_rc_t
zl_store_put_idem (zl_store_t *self, const char *tenant, const char *key,
                   const zl_idem_rec_t *rec)
{
    char buf[512], *heap = NULL;
    MDB_val k = s_idem_key (buf, sizeof buf, tenant, key, &heap);
    uint8_t out[32];
    MDB_val v = {zl_record_idem_encode (rec, out), out};
    int rc = mdb_put (s_txn (self), self->idem, &k, &v, 0);
    free (heap);
    return s_rc (self, rc, "put idem");
}

zl_store_rc_t
zl_store_set_next_id (zl_store_t *self, uint64_t next_id)
{
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
s_reader (zl_store_t *self, reader_t *r)
{
    r->own = !self->txn;
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

zl_store_rc_t
zl_store_get_job (zl_store_t *self, uint64_t id, zl_arena_t *arena, zl_job_rec_t *out)
{
    reader_t r;
    int rc = s_reader (self, &r);
    if (rc)
        return s_rc (self, rc, "read");
    MDB_val k = s_id (&id), v;
    rc = mdb_get (r.txn, self->jobs, &k, &v);
    zl_store_rc_t out_rc = s_rc (self, rc, "get job");
    // decode copies into the arena, so the record outlives the transaction
    if (out_rc == ZL_STORE_OK && zl_record_job_decode (arena, v.mv_data, v.mv_size, out) != 0) {
        zl_error ("store", "job %llu: record does not decode (corrupt store)",
                  (unsigned long long) id);
        out_rc = ZL_STORE_ERROR;
    }
    s_reader_done (&r);
    return out_rc;
}

zl_store_rc_t
zl_store_get_state (zl_store_t *self, uint64_t id, zl_arena_t *arena, zl_state_rec_t *out)
{
    reader_t r;
    int rc = s_reader (self, &r);
    if (rc)
        return s_rc (self, rc, "read");
    MDB_val k = s_id (&id), v;
    rc = mdb_get (r.txn, self->state, &k, &v);
    zl_store_rc_t out_rc = s_rc (self, rc, "get state");
    if (out_rc == ZL_STORE_OK && zl_record_state_decode (arena, v.mv_data, v.mv_size, out) != 0) {
        zl_error ("store", "job %llu: state record does not decode (corrupt store)",
                  (unsigned long long) id);
        out_rc = ZL_STORE_ERROR;
    }
    s_reader_done (&r);
    return out_rc;
}

zl_store_rc_t
zl_store_get_idem (zl_store_t *self, const char *tenant, const char *key, zl_idem_rec_t *out)
{
    reader_t r;
    int rc = s_reader (self, &r);
    if (rc)
        return s_rc (self, rc, "read");
    char buf[512], *heap = NULL;
    MDB_val k = s_idem_key (buf, sizeof buf, tenant, key, &heap), v;
    rc = mdb_get (r.txn, self->idem, &k, &v);
    zl_store_rc_t out_rc = s_rc (self, rc, "get idem");
    if (out_rc == ZL_STORE_OK && zl_record_idem_decode (v.mv_data, v.mv_size, out) != 0)
        out_rc = ZL_STORE_ERROR;
    free (heap);
    s_reader_done (&r);
    return out_rc;
}

size_t
zl_store_prune_idem (zl_store_t *self, int64_t before_ms, size_t max)
{
    MDB_txn *txn = s_txn (self);
    if (!txn)
        return 0;
    MDB_cursor *c;
    if (mdb_cursor_open (txn, self->idem_log, &c) != 0)
        return 0;
    size_t n = 0;
    MDB_val k, v;
    int rc = mdb_cursor_get (c, &k, &v, MDB_FIRST);
    while (rc == 0 && n < max) {
        MDB_val ik = {v.mv_size, v.mv_data}, iv;
        uint64_t log_id;
        memcpy (&log_id, k.mv_data, sizeof log_id);
        if (mdb_get (txn, self->idem, &ik, &iv) == 0) {
            zl_idem_rec_t rec;
            bool decoded = zl_record_idem_decode (iv.mv_data, iv.mv_size, &rec) == 0;
            // a key used again after it expired belongs to the newer job (a
            // later log entry): this entry just goes
            bool newer = decoded && rec.job_id != log_id;
            if (decoded && !newer && rec.seen_at_ms >= before_ms)
                break;  // the log is in time order: nothing older follows
            if (!newer)
                mdb_del (txn, self->idem, &ik, NULL);
        }
        if (mdb_cursor_del (c, 0) != 0)
            break;
        n++;
        rc = mdb_cursor_get (c, &k, &v, MDB_GET_CURRENT);
        if (rc == MDB_NOTFOUND || rc == EINVAL)
            rc = mdb_cursor_get (c, &k, &v, MDB_NEXT);
    }
    mdb_cursor_close (c);
    return n;
}

// Pages still free to use: the map's unused tail plus the free list. Counting
// the free list walks it, so it is done only when the tail runs low. LMDB
// opens no cursor on the free list inside a write transaction, so the walk
// reads the last committed free list in a read transaction of its own (also
// while the turn's batch is open: the environment is MDB_NOTLS).
static uint64_t
s_free_pages (zl_store_t *self)
{
    MDB_envinfo info;
    mdb_env_info (self->env, &info);
    uint64_t total = self->map_size / self->page_size;
    uint64_t tail = total > info.me_last_pgno + 1 ? total - info.me_last_pgno - 1 : 0;
    if (tail * self->page_size > 64 * (uint64_t) FULL_MARGIN)
        return tail;
    uint64_t listed = 0;
    MDB_txn *txn;
    if (mdb_txn_begin (self->env, NULL, MDB_RDONLY, &txn) != 0)
        return tail;
    MDB_cursor *c;
    if (mdb_cursor_open (txn, 0 /* FREE_DBI */, &c) == 0) {
        MDB_val k, v;
        while (mdb_cursor_get (c, &k, &v, MDB_NEXT) == 0)
            if (v.mv_size >= sizeof (size_t))
                listed += *(const size_t *) v.mv_data;
        mdb_cursor_close (c);
    }
    mdb_txn_abort (txn);
    return tail + listed;
}

bool
zl_store_has_room (zl_store_t *self, size_t bytes)
{
    int64_t now = zl_clock_mono_ms ();
    if (self->room && now < self->next_room_check_ms)
        return true;
    uint64_t free_bytes = s_free_pages (self) * self->page_size;
    // disk space matters too: LMDB grows data.mdb as it fills the map
    struct statvfs vfs;
    if (statvfs (self->dir, &vfs) == 0) {
        uint64_t disk = (uint64_t) vfs.f_bavail * vfs.f_frsize;
        struct stat sb;
        char path[4096];
        snprintf (path, sizeof path, "%s/data.mdb", self->dir);
        uint64_t file = stat (path, &sb) == 0 ? (uint64_t) sb.st_size : 0;
        uint64_t growth = self->map_size > file ? self->map_size - file : 0;
        if (disk < growth && disk < free_bytes)
            free_bytes = disk;
    }
    // a small map keeps a quarter of itself in reserve
    uint64_t margin = self->map_size / 4 < FULL_MARGIN ? self->map_size / 4 : FULL_MARGIN;
    bool ok = free_bytes > bytes + margin;
    self->room = ok;
    // plenty of room: look again in a while, not on every Submit
    self->next_room_check_ms = now + (free_bytes > 64 * (uint64_t) FULL_MARGIN ? 1000 : 0);
    return ok;
}

// ---------------------------------------------------------------- recovery
int
zl_store_recover (zl_store_t *self, zl_store_job_fn *fn, void *ctx, uint64_t *next_id, char *err,
                  size_t errlen)
{
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
    MDB_cursor *jc = NULL, *sc = NULL;
    mdb_cursor_open (txn, self->jobs, &jc);
    mdb_cursor_open (txn, self->state, &sc);
    zl_arena_t *arena = zl_arena_new (64 * 1024);
    MDB_val jk, jv, sk, sv;
    int src = mdb_cursor_get (sc, &sk, &sv, MDB_FIRST);
    int result = 0;
    for (rc = mdb_cursor_get (jc, &jk, &jv, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get (jc, &jk, &jv, MDB_NEXT)) {
        uint64_t id;
        memcpy (&id, jk.mv_data, sizeof id);
        zl_arena_reset (arena);
        zl_job_rec_t job;
        if (zl_record_job_decode (arena, jv.mv_data, jv.mv_size, &job) != 0) {
            snprintf (err, errlen, "%s: job %llu does not decode: the store is damaged",
                      self->dir, (unsigned long long) id);
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
                snprintf (err, errlen, "%s: state of job %llu does not decode: the store is "
                          "damaged", self->dir, (unsigned long long) id);
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
    mdb_cursor_close (jc);
    mdb_cursor_close (sc);
    mdb_txn_abort (txn);
    zl_arena_destroy (&arena);
    *next_id = max_id ? max_id : 1;
    self->last_append_id = UINT64_MAX;
    return result;
}

void
zl_store_stats (zl_store_t *self, zl_store_stats_t *out)
{
    memset (out, 0, sizeof *out);
    out->map_size = self->map_size;
    out->commits = self->commits;
    out->commit_us = self->commit_us;
    out->commit_max_us = self->commit_max_us;
    reader_t r;
    if (s_reader (self, &r) != 0)
        return;
    MDB_stat st;
    if (mdb_stat (r.txn, self->jobs, &st) == 0)
        out->jobs = st.ms_entries;
    if (mdb_stat (r.txn, self->state, &st) == 0)
        out->states = st.ms_entries;
    if (mdb_stat (r.txn, self->idem, &st) == 0)
        out->idem_keys = st.ms_entries;
    uint64_t total = self->map_size / self->page_size;
    out->used_bytes = (total - s_free_pages (self)) * self->page_size;
    s_reader_done (&r);
    struct stat sb;
    char path[4096];
    snprintf (path, sizeof path, "%s/data.mdb", self->dir);
    if (stat (path, &sb) == 0)
        out->file_bytes = (uint64_t) sb.st_size;
}
