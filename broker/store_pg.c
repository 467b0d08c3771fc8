/*  store_pg: the PostgreSQL backend of the store (store_backend.h), for
    brokers that must outlive their host: several brokers share one
    database, one leads.

    The database is the broker's log, not its scheduler. The broker keeps
    its queues in memory and is the only reader of its tables, so this
    backend keeps a memory image of what it stored (each job's encoded job
    and state records, the idempotency index, next_id) and serves every
    read from it: a dispatch or a Submit costs no round trip. The database
    gets only appends: each loop turn's writes go in one transaction, sent
    in one pipeline (libpq pipeline mode: BEGIN, the fence, one INSERT per
    table of one row holding the turn's records packed, COMMIT), one round
    trip per turn. The image is loaded from the database when this broker
    takes the lead.

    The commit runs while the broker's next turn does (commit_start sends
    the pipeline and returns; commit_finish reads its results, polled on
    the connection's socket): the next batch is written into the image
    meanwhile, and the broker holds the first turn's replies until its
    commit ended (broker.c). At most one commit is under way. What a batch
    replaced in the image is freed when it is sent: a commit that fails
    clears the whole image (the store no longer leads; it is read back at
    the next takeover), and the batch written meanwhile goes with it.

    Tables, in the schema `zlane` (format zlane-pg-store, schema version
    1, created at the first start under an advisory lock; a schema `zlane`
    that holds something else, or a newer version, is refused):
    - meta (key, value): format, schema_version, the secret of the digests;
    - leader: one row, the lease (epoch, holder, its advertised endpoints,
      expires_at);
    - log: partitioned by segment; a row (seg, seq, data) per commit, data
      the commit's records packed: (kind, id, length, bytes) of kind JOB
      (the job record), STATE, DEL, NEXT_ID and FORGOTTEN (how far the
      keys' expiry went); a later record wins;
    - idem_resend, idem_user: the idempotency keys by class, partitioned
      by segment, a row per commit: (digest, job id, seen) packed.

    No bloat: nothing is ever updated or deleted row by row (except the one
    lease row, renewed every lease/4). Segments rotate: the log moves to a
    new partition after 500,000 rows or a minute; past 3 segments, the
    oldest one's live records (jobs still queued) are appended again to the
    current one in a turn's commit and the partition is then dropped. An
    idempotency segment is dropped when the newest key in it has outlived
    its window. A partition is created ahead of its use, and created and
    dropped in transactions of their own with a lock timeout, so a session
    that holds a lock on zlane's tables delays rotation (logged, retried)
    and never stalls a turn.

    Leadership (store.h): the lease row's epoch rises on every takeover;
    every commit calls zlane.fence(epoch), which locks the row FOR SHARE
    and raises if the epoch moved, so a deposed leader's commit fails and
    a takeover waits for the commit in flight. A standby polls the row
    every lease/8 and takes the lead when the lease lapsed (or when the
    lease is its own, after a reconnect). A clean close gives the lease up
    so that a standby takes over at once. Connection strings may name
    several hosts (target_session_attrs=read-write finds the primary); a
    lost connection makes the role UNREACHABLE until a dial succeeds. */
#include "store_backend.h"

#include "clock.h"
#include "log.h"
#include "siphash.h"
#include "u64map.h"
#include "zl_alloc.h"

#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <poll.h>
#include <unistd.h>

#define FORMAT "zlane-pg-store"
// 2: batches (a batch's record job, waiting, its progress in its state):
// version 1 reads as it is, and is marked 2 so that an older broker, which
// would run a batch's callback at once, refuses the database
#define SCHEMA_VERSION 2
#define SCHEMA_LOCK 0x7a6c616e65LL // pg_advisory_xact_lock key ("zlane") for creating the schema
#define FENCE_SQLSTATE "ZL001"     // zlane.fence: this epoch no longer leads
#define IDEM_SEG_MS (60 * 1000)    // an idempotency segment takes keys this long (resend)
#define IDEM_USER_SEG_MS (3600 * 1000) //   (users' keys)
#define MAX_SEGS 4096                  // segments of one series kept at most
#define LOCK_TIMEOUT "2s"              // DDL of rotation waits this long for its lock
#define RETRY_MIN_MS 250               // an unreachable database is dialled again after this,
#define RETRY_MAX_MS 2000              //   doubling up to this
#define FETCH_ROWS 20000               // rows per FETCH when loading the image
#define DIGEST_LEN 16
#define IDEM_ITEM_LEN (DIGEST_LEN + 16) // a key packed in a row: digest, job id, seen
#define SEQ_SHIFT 24 // a record's order: its row's seq, then its place in the row

// KIND_FORGOTTEN: the keys of class `id` seen before the 8 bytes of data
// (big-endian ms) were forgotten (expired or evicted, oldest first)
enum { KIND_JOB = 1, KIND_STATE = 2, KIND_DEL = 3, KIND_NEXT_ID = 4, KIND_FORGOTTEN = 5 };
// Rotation: the log moves to a new segment after s_rotate_rows rows or
// s_rotate_ms; s_keep_segs are kept, the current one included (tunable for
// tests and benchmarks: zl_store_pg_tune).
static uint64_t s_rotate_rows = 500000;
static int64_t s_rotate_ms = 60000;
static size_t s_keep_segs = 3;

void
zl_store_pg_tune (uint64_t rotate_rows, int64_t rotate_ms, unsigned keep_segs)
{
    s_rotate_rows = rotate_rows ? rotate_rows : 500000;
    s_rotate_ms = rotate_ms > 0 ? rotate_ms : 60000;
    s_keep_segs = keep_segs >= 2 ? keep_segs : 3;
}

enum { SER_LOG = 0, SER_RESEND = 1, SER_USER = 2, SER_COUNT = 3 };
static const char *s_series_table[SER_COUNT] = {"log", "idem_resend", "idem_user"};

// ---------------------------------------------------------------- the image
typedef struct {
    uint8_t *job; // the encoded job record (NULL: none yet)
    uint8_t *state;
    uint32_t job_len, state_len;
    int64_t job_seg, state_seg; // the log segment holding the latest row of each
    int64_t job_seq, state_seq; // while loading: the latest row's seq
    bool deleted;               // while loading: a DEL row was seen
} s_job_t;

typedef struct {
    uint8_t digest[DIGEST_LEN];
    uint64_t job_id;
    int64_t seen_ms;
    int64_t seq; // while loading
    bool generated;
} s_idem_t;

// One key's place in its class's expiry order (keys are put in time order).
typedef struct {
    uint64_t key64;
    int64_t seen_ms;
} s_fifo_item_t;

typedef struct {
    s_fifo_item_t *items;
    size_t head, len, cap; // a ring
} s_fifo_t;

// What a write of the open batch replaced, to undo it on abort and free it
// on commit.
enum { UNDO_CREATE, UNDO_JOB, UNDO_STATE, UNDO_DEL, UNDO_IDEM, UNDO_NEXT_ID };
typedef struct {
    int what;
    uint64_t id; // job id, or the key's 64-bit index
    uint8_t *old;
    uint32_t old_len;
    int64_t old_seg;
    void *ptr; // UNDO_DEL: the removed s_job_t; UNDO_IDEM: the replaced s_idem_t
} s_undo_t;

// A row waiting for the commit. data points into the image (kept until the
// commit or abort is done) or into rows_data.
typedef struct {
    int kind; // KIND_* for the log; for the idem series, unused
    int series;
    uint64_t id;
    const uint8_t *data;
    uint32_t len;
    s_idem_t idem; // idem series
} s_row_t;

// A series of segments (partitions of one table).
typedef struct {
    int64_t segs[MAX_SEGS];      // kept, oldest first; the last is the current one
    int64_t newest_ms[MAX_SEGS]; // idem series: the newest key in it
    size_t n;
    int64_t ready; // a partition created ahead, for the next segment (0 = none)
    int64_t started_ms;
    uint64_t rows; // in the current segment (since this broker took it)
} s_series_t;

typedef struct {
    char *location;
    char safe[512];
    zl_durability_t mode;
    uint64_t budget; // bytes the image may hold (the map_size setting)
    PGconn *conn;
    // leadership
    zl_store_role_t role;
    uint64_t epoch;
    char name[128];
    char advertise[ZL_ADVERTISE_COUNT][ZL_ADVERTISE_MAX];
    uint32_t lease_ms;
    char leader[ZL_ADVERTISE_COUNT][ZL_ADVERTISE_MAX];
    char leader_name[128];
    int64_t due_ms;          // the next zl_store_elect
    int64_t retry_ms;        // the current backoff while unreachable
    int64_t dial_started_ms; // a dial in progress (conn set, not yet connected) began then
    bool dialing;
    PostgresPollingStatusType dial_wants; // what the dial waits for: reading or writing
    bool schema_ok;
    // the image
    zl_u64map_t *jobs;   // id -> s_job_t
    zl_u64map_t *idem;   // key64 -> s_idem_t
    s_fifo_t fifo[2];    // expiry order per class: resend, user
    uint64_t n_class[2]; // keys kept per class
    uint8_t secret[ZL_SIPHASH_KEY_LEN];
    uint64_t next_id;
    int64_t forgotten[2];         // per class: keys seen before this are forgotten
    uint8_t forgotten_data[2][8]; // the rows' bytes
    uint64_t image_bytes;
    uint64_t n_states; // jobs in the image with a state record
    int64_t seq;       // the next row's
    // the open batch
    bool batch, sub, failed, sub_failed;
    s_undo_t *undo;
    size_t n_undo, cap_undo, sub_undo;
    s_row_t *rows;
    size_t n_rows, cap_rows, sub_rows;
    int64_t compact_seg; // a log segment whose live records the next commit moves (0 = none)
    // the commit under way (commit_start sent it; commit_finish reads its results)
    struct {
        bool on;
        bool ok, fenced; // so far: no error yet; the fence refused it
        int64_t t0_us;   // when it was sent
        uint64_t *moved; // the ids its compaction moved
        size_t n_moved;
        int64_t compact_seg; // the segment it compacted (0 = none)
        char why[512];       // the first error
    } fly;
    // segments
    s_series_t ser[SER_COUNT];
    int64_t drop_log_seg; // compacted: drop at the next maintenance
    // counters
    uint64_t commits, commit_us, commit_max_us;
    uint64_t takeovers, fenced, unreachable, rotations, idem_put;
    uint64_t dedup_expired, dedup_evicted;
    zl_arena_t *scratch;
} s_pg_t;

// ---------------------------------------------------------------- small helpers
static void
s_be64 (uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t
s_get_be64 (const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void
s_be32 (uint8_t *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint32_t
s_get_be32 (const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

// A growable byte buffer for binary arrays.
typedef struct {
    uint8_t *data;
    size_t len, cap;
} s_buf_t;

static uint8_t *
s_buf_take (s_buf_t *b, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 256;
        b->data = zl_realloc (b->data, b->cap);
    }
    uint8_t *p = b->data + b->len;
    b->len += n;
    return p;
}

// The message of the last error on the connection, one line.
static const char *
s_pq_error (s_pg_t *self)
{
    static char buf[512];
    const char *m = self->conn ? PQerrorMessage (self->conn) : "no connection";
    snprintf (buf, sizeof buf, "%s", m && *m ? m : "unknown error");
    for (char *p = buf; *p; p++)
        if (*p == '\n')
            *p = *(p + 1) ? ' ' : '\0';
    return buf;
}

static const char *
s_result_error (const PGresult *r)
{
    static char buf[512];
    const char *m = PQresultErrorMessage (r);
    snprintf (buf, sizeof buf, "%s", m && *m ? m : PQresStatus (PQresultStatus (r)));
    for (char *p = buf; *p; p++)
        if (*p == '\n')
            *p = *(p + 1) ? ' ' : '\0';
    return buf;
}

static bool
s_result_ok (const PGresult *r)
{
    ExecStatusType st = PQresultStatus (r);
    return st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
}

// Run one statement (no parameters) and say whether it worked; logs why not.
static bool
s_exec (s_pg_t *self, const char *sql, const char *what)
{
    PGresult *r = PQexec (self->conn, sql);
    bool ok = s_result_ok (r);
    if (!ok)
        zl_warn ("store", "%s: %s", what, s_result_error (r));
    PQclear (r);
    return ok;
}

// ---------------------------------------------------------------- the schema
static const char *s_schema_sql =
    "CREATE SCHEMA zlane;"
    "CREATE TABLE zlane.meta (key text PRIMARY KEY, value text NOT NULL);"
    "CREATE TABLE zlane.leader (id int PRIMARY KEY CHECK (id = 1), epoch bigint NOT NULL,"
    "  holder text NOT NULL, frontend text NOT NULL, backend text NOT NULL,"
    "  admin text NOT NULL, expires_at timestamptz NOT NULL);"
    "INSERT INTO zlane.leader VALUES (1, 0, '', '', '', '', '-infinity');"
    // a row per commit and table: the commit's records packed in `data`
    // (stored as is: they are mostly payloads, compressed or not by their
    // producers)
    "CREATE TABLE zlane.log (seg bigint NOT NULL, seq bigint NOT NULL, data bytea NOT NULL)"
    "  PARTITION BY LIST (seg);"
    "ALTER TABLE zlane.log ALTER data SET STORAGE EXTERNAL;"
    "CREATE TABLE zlane.idem_resend (LIKE zlane.log INCLUDING STORAGE) PARTITION BY LIST (seg);"
    "CREATE TABLE zlane.idem_user (LIKE zlane.log INCLUDING STORAGE) PARTITION BY LIST (seg);"
    // The fence of every commit: locks the lease row FOR SHARE (a takeover
    // waits for this commit) and raises if this epoch no longer leads; with
    // renew_ms > 0, renews the lease instead.
    "CREATE FUNCTION zlane.fence(my_epoch bigint, renew_ms int) RETURNS void"
    "  LANGUAGE plpgsql AS $$ BEGIN"
    "  IF renew_ms > 0 THEN"
    "    UPDATE zlane.leader SET expires_at = clock_timestamp() + renew_ms * interval '1 ms'"
    "      WHERE id = 1 AND epoch = my_epoch;"
    "  ELSE"
    "    PERFORM 1 FROM zlane.leader WHERE id = 1 AND epoch = my_epoch FOR SHARE;"
    "  END IF;"
    "  IF NOT FOUND THEN"
    "    RAISE EXCEPTION 'zlane: epoch % no longer leads', my_epoch USING ERRCODE = "
    "'" FENCE_SQLSTATE "';"
    "  END IF; END $$;";

static void
s_hex (const uint8_t *in, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf (out + 2 * i, "%02x", in[i]);
}

static int
s_unhex (const char *in, uint8_t *out, size_t n)
{
    if (strlen (in) != 2 * n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf (in + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    return 0;
}

// Read meta's `key` into out; false when missing.
static bool
s_meta (s_pg_t *self, const char *key, char *out, size_t size)
{
    const char *params[1] = {key};
    PGresult *r = PQexecParams (self->conn, "SELECT value FROM zlane.meta WHERE key = $1", 1, NULL,
                                params, NULL, NULL, 0);
    bool ok = PQresultStatus (r) == PGRES_TUPLES_OK && PQntuples (r) == 1;
    if (ok)
        snprintf (out, size, "%s", PQgetvalue (r, 0, 0));
    PQclear (r);
    return ok;
}

// Check the schema `zlane`, creating it when there is none, all under an
// advisory lock so that brokers starting together create it once. Returns
// 0; -1 with a reason (a foreign or newer schema: fatal); -2 when the
// connection failed meanwhile.
static int
s_schema (s_pg_t *self, char *err, size_t errlen)
{
    if (!s_exec (self, "BEGIN", "schema"))
        return -2;
    char sql[128];
    snprintf (sql, sizeof sql, "SELECT pg_advisory_xact_lock(%lld)", SCHEMA_LOCK);
    if (!s_exec (self, sql, "schema lock"))
        goto lost;
    PGresult *r =
        PQexec (self->conn, "SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = 'zlane'),"
                            " (SELECT count(*) FROM pg_tables WHERE schemaname = 'zlane'"
                            "  AND tablename = 'meta')");
    if (PQresultStatus (r) != PGRES_TUPLES_OK) {
        PQclear (r);
        goto lost;
    }
    bool has_schema = atoi (PQgetvalue (r, 0, 0)) > 0, has_meta = atoi (PQgetvalue (r, 0, 1)) > 0;
    PQclear (r);
    char value[128];
    if (!has_schema) {
        uint8_t secret[ZL_SIPHASH_KEY_LEN];
        if (getrandom (secret, sizeof secret, 0) != (ssize_t)sizeof secret) {
            snprintf (err, errlen, "store %.300s: no randomness for the secret", self->safe);
            s_exec (self, "ROLLBACK", "schema");
            return -1;
        }
        char hex[2 * ZL_SIPHASH_KEY_LEN + 1];
        s_hex (secret, sizeof secret, hex);
        char meta[512];
        snprintf (meta, sizeof meta,
                  "INSERT INTO zlane.meta VALUES ('format', '%s'), ('schema_version', '%d'),"
                  " ('secret', '%s'), ('created', now()::text)",
                  FORMAT, SCHEMA_VERSION, hex);
        if (!s_exec (self, s_schema_sql, "create schema") || !s_exec (self, meta, "create schema"))
            goto lost;
        zl_info ("store", "%s: created schema zlane (%s, version %d)", self->safe, FORMAT,
                 SCHEMA_VERSION);
    } else if (!has_meta || !s_meta (self, "format", value, sizeof value) ||
               strcmp (value, FORMAT) != 0) {
        snprintf (err, errlen,
                  "store %.300s: the schema \"zlane\" in this database is not a zlane store "
                  "(no zlane.meta saying format %s): refusing to touch it; use another "
                  "database",
                  self->safe, FORMAT);
        s_exec (self, "ROLLBACK", "schema");
        return -1;
    } else {
        if (!s_meta (self, "schema_version", value, sizeof value))
            goto lost;
        int version = atoi (value);
        if (version > SCHEMA_VERSION || version < 1) {
            snprintf (
                err, errlen,
                "store %.300s: the zlane schema in this database is version %.32s; this broker "
                "knows version %d at most: upgrade the broker",
                self->safe, value, SCHEMA_VERSION);
            s_exec (self, "ROLLBACK", "schema");
            return -1;
        }
        // versions below SCHEMA_VERSION are migrated here, in this
        // transaction, under the lock
        if (version < SCHEMA_VERSION) {
            char sql[128];
            snprintf (sql, sizeof sql,
                      "UPDATE zlane.meta SET value = '%d' WHERE key = 'schema_version'",
                      SCHEMA_VERSION);
            if (!s_exec (self, sql, "schema")) {
                s_exec (self, "ROLLBACK", "schema");
                return -2;
            }
            zl_info ("store", "store %.300s: schema version %d marked %d (nothing else changes)",
                     self->safe, version, SCHEMA_VERSION);
        }
    }
    if (!s_meta (self, "secret", value, sizeof value) ||
        s_unhex (value, self->secret, sizeof self->secret) != 0) {
        snprintf (err, errlen, "store %.300s: zlane.meta has no valid secret: the store is damaged",
                  self->safe);
        s_exec (self, "ROLLBACK", "schema");
        return -1;
    }
    if (!s_exec (self, "COMMIT", "schema"))
        return -2;
    self->schema_ok = true;
    return 0;
lost:
    s_exec (self, "ROLLBACK", "schema");
    return PQstatus (self->conn) == CONNECTION_OK ? -1 : -2;
}

// ---------------------------------------------------------------- the connection
static void
s_disconnect (s_pg_t *self)
{
    if (self->conn)
        PQfinish (self->conn);
    self->conn = NULL;
    self->dialing = false;
}

static void
s_set_unreachable (s_pg_t *self, const char *why)
{
    if (self->role != ZL_ROLE_UNREACHABLE) {
        zl_warn ("store", "%s: the database does not answer (%s): %s", self->safe, why,
                 self->role == ZL_ROLE_LEADER ? "stepping down" : "retrying");
        self->unreachable++;
    }
    self->role = ZL_ROLE_UNREACHABLE;
    s_disconnect (self);
}

// libpq's defaults for a broker, before the location's own settings (a
// later keyword wins): a dead host is noticed in seconds, not hours.
static const char *s_dial_keys[] = {"connect_timeout",     "keepalives",       "keepalives_idle",
                                    "keepalives_interval", "keepalives_count", "tcp_user_timeout",
                                    "application_name",    "dbname",           NULL};
#define DIAL_MAX_MS 10000 // a dial that has not connected by then starts again

// Start dialling the database without waiting (PQconnectStartParams);
// s_dial_poll moves it on. Returns 0, or -2 when it failed at once.
static int
s_dial_start (s_pg_t *self, int64_t mono_ms, char *err, size_t errlen)
{
    s_disconnect (self);
    const char *vals[] = {"3", "1", "5", "2", "3", "10000", "zlane-broker", self->location, NULL};
    self->conn = PQconnectStartParams (s_dial_keys, vals, 1);
    if (!self->conn || PQstatus (self->conn) == CONNECTION_BAD) {
        snprintf (err, errlen, "%s", s_pq_error (self));
        s_disconnect (self);
        return -2;
    }
    self->dial_started_ms = mono_ms;
    self->dial_wants = PGRES_POLLING_WRITING; // as after PQconnectStart
    return 0;
}

static int s_session (s_pg_t *self, char *err, size_t errlen);

// Move a dial on as far as it goes without blocking. Returns 0 (connected
// and checked), 1 (still dialling), -1 (fatal, reason in err), -2 (failed).
static int
s_dial_poll (s_pg_t *self, int64_t mono_ms, char *err, size_t errlen)
{
    // libpq's rule: call PQconnectPoll once the socket is ready the way
    // its last answer asked
    struct pollfd pfd = {PQsocket (self->conn),
                         self->dial_wants == PGRES_POLLING_READING ? POLLIN : POLLOUT, 0};
    PostgresPollingStatusType st = self->dial_wants;
    if (pfd.fd < 0 || poll (&pfd, 1, 0) != 0)
        st = self->dial_wants = PQconnectPoll (self->conn);
    if (st == PGRES_POLLING_OK)
        return s_session (self, err, errlen);
    if (st == PGRES_POLLING_FAILED || mono_ms - self->dial_started_ms > DIAL_MAX_MS) {
        snprintf (err, errlen, "%s",
                  st == PGRES_POLLING_FAILED ? s_pq_error (self) : "no answer in 10 s");
        s_disconnect (self);
        return -2;
    }
    return 1;
}

// Dial the database (any host of the location that is writable) and check
// the schema, waiting (at open). Returns 0; -1 (fatal, reason in err); -2
// (no answer, retry).
static int
s_connect (s_pg_t *self, char *err, size_t errlen)
{
    s_disconnect (self);
    const char *vals[] = {"3", "1", "5", "2", "3", "10000", "zlane-broker", self->location, NULL};
    self->conn = PQconnectdbParams (s_dial_keys, vals, 1);
    if (PQstatus (self->conn) != CONNECTION_OK) {
        snprintf (err, errlen, "%s", s_pq_error (self));
        s_disconnect (self);
        return -2;
    }
    return s_session (self, err, errlen);
}

// A new connection: writable, the session's settings, the schema.
static int
s_session (s_pg_t *self, char *err, size_t errlen)
{
    const char *sync = self->mode == ZL_DURABILITY_NONE ? "off" : "on";
    char sql[160];
    snprintf (sql, sizeof sql, "SET synchronous_commit = %s; SET lock_timeout = 0", sync);
    PGresult *r = PQexec (self->conn, "SELECT pg_is_in_recovery()");
    bool writable = PQresultStatus (r) == PGRES_TUPLES_OK && !strcmp (PQgetvalue (r, 0, 0), "f");
    PQclear (r);
    if (!writable) {
        snprintf (err, errlen,
                  "the server is read-only (a standby): add the primary's host, or "
                  "target_session_attrs=read-write");
        s_disconnect (self);
        return -2;
    }
    if (!s_exec (self, sql, "session settings")) {
        snprintf (err, errlen, "%s", s_pq_error (self));
        s_disconnect (self);
        return -2;
    }
    int rc = s_schema (self, err, errlen);
    if (rc == -2)
        snprintf (err, errlen, "%s", s_pq_error (self));
    if (rc != 0)
        s_disconnect (self);
    return rc;
}

// ---------------------------------------------------------------- the image's records
static void
s_job_free (s_pg_t *self, s_job_t *j)
{
    if (!j)
        return;
    self->image_bytes -= j->job_len + j->state_len + sizeof *j;
    free (j->job);
    free (j->state);
    free (j);
}

static void
s_undo_push (s_pg_t *self, s_undo_t u)
{
    if (self->n_undo == self->cap_undo) {
        self->cap_undo = self->cap_undo ? self->cap_undo * 2 : 256;
        self->undo = zl_realloc (self->undo, self->cap_undo * sizeof *self->undo);
    }
    self->undo[self->n_undo++] = u;
}

static s_row_t *
s_row_push (s_pg_t *self)
{
    if (self->n_rows == self->cap_rows) {
        self->cap_rows = self->cap_rows ? self->cap_rows * 2 : 256;
        self->rows = zl_realloc (self->rows, self->cap_rows * sizeof *self->rows);
    }
    s_row_t *r = &self->rows[self->n_rows++];
    memset (r, 0, sizeof *r);
    return r;
}

// Undo the writes from undo[from] on, newest first.
static void
s_undo_to (s_pg_t *self, size_t from)
{
    while (self->n_undo > from) {
        s_undo_t *u = &self->undo[--self->n_undo];
        if (u->what == UNDO_CREATE) {
            s_job_t *j = zl_u64map_remove (self->jobs, u->id);
            self->n_states -= j && j->state;
            s_job_free (self, j);
        } else if (u->what == UNDO_JOB || u->what == UNDO_STATE) {
            s_job_t *j = zl_u64map_get (self->jobs, u->id);
            uint8_t **field = u->what == UNDO_JOB ? &j->job : &j->state;
            uint32_t *len = u->what == UNDO_JOB ? &j->job_len : &j->state_len;
            int64_t *seg = u->what == UNDO_JOB ? &j->job_seg : &j->state_seg;
            if (u->what == UNDO_STATE)
                self->n_states -= j->state && !u->old;
            self->image_bytes -= *len;
            free (*field);
            *field = u->old;
            *len = u->old_len;
            *seg = u->old_seg;
            self->image_bytes += *len;
        } else if (u->what == UNDO_DEL) {
            zl_u64map_put (self->jobs, u->id, u->ptr);
            self->n_states += ((s_job_t *)u->ptr)->state != NULL;
        } else if (u->what == UNDO_IDEM) {
            s_idem_t *now = zl_u64map_remove (self->idem, u->id), *old = u->ptr;
            if (now)
                self->n_class[now->generated ? 0 : 1]--;
            free (now);
            if (old) {
                zl_u64map_put (self->idem, u->id, old);
                self->n_class[old->generated ? 0 : 1]++;
            }
        } else if (u->what == UNDO_NEXT_ID) {
            self->next_id = u->id;
        }
    }
}

// The batch is durable: free what its writes replaced.
static void
s_undo_forget (s_pg_t *self)
{
    for (size_t i = 0; i < self->n_undo; i++) {
        s_undo_t *u = &self->undo[i];
        if (u->what == UNDO_JOB || u->what == UNDO_STATE)
            free (u->old);
        else if (u->what == UNDO_DEL)
            s_job_free (self, u->ptr);
        else if (u->what == UNDO_IDEM)
            free (u->ptr);
    }
    self->n_undo = 0;
}

static void
s_batch_end (s_pg_t *self, bool committed)
{
    if (committed)
        s_undo_forget (self);
    else
        s_undo_to (self, 0);
    self->n_rows = 0;
    self->batch = self->sub = self->failed = self->sub_failed = false;
}

// Put `len` bytes as field `what` (UNDO_JOB or UNDO_STATE) of job `id`.
static zl_store_rc_t
s_put_field (s_pg_t *self, uint64_t id, int what, uint8_t *data, uint32_t len)
{
    s_job_t *j = zl_u64map_get (self->jobs, id);
    if (!j) {
        j = zl_calloc (1, sizeof *j);
        self->image_bytes += sizeof *j;
        zl_u64map_put (self->jobs, id, j);
        s_undo_push (self, (s_undo_t){.what = UNDO_CREATE, .id = id});
    } else {
        bool job = what == UNDO_JOB;
        s_undo_push (self, (s_undo_t){.what = what,
                                      .id = id,
                                      .old = job ? j->job : j->state,
                                      .old_len = job ? j->job_len : j->state_len,
                                      .old_seg = job ? j->job_seg : j->state_seg});
        if (job)
            self->image_bytes -= j->job_len;
        else
            self->image_bytes -= j->state_len;
    }
    int64_t seg = self->ser[SER_LOG].segs[self->ser[SER_LOG].n - 1];
    if (what == UNDO_JOB) {
        j->job = data, j->job_len = len, j->job_seg = seg;
    } else {
        self->n_states += !j->state;
        j->state = data, j->state_len = len, j->state_seg = seg;
    }
    self->image_bytes += len;
    s_row_t *r = s_row_push (self);
    *r = (s_row_t){.kind = what == UNDO_JOB ? KIND_JOB : KIND_STATE,
                   .series = SER_LOG,
                   .id = id,
                   .data = data,
                   .len = len};
    return ZL_STORE_OK;
}

// The key's digest and its 64-bit index in the map (never 0).
static uint64_t
s_idem_digest (s_pg_t *self, const char *tenant, const char *key, uint8_t digest[DIGEST_LEN])
{
    zl_siphash_t h;
    zl_siphash_init (&h, self->secret, DIGEST_LEN);
    zl_siphash_update (&h, tenant, strlen (tenant) + 1); // the NUL separates
    zl_siphash_update (&h, key, strlen (key));
    zl_siphash_final (&h, digest);
    uint64_t k = s_get_be64 (digest);
    return k ? k : 1;
}

static void
s_fifo_push (s_fifo_t *f, s_fifo_item_t item)
{
    if (f->len == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 1024;
        s_fifo_item_t *items = zl_malloc (cap * sizeof *items);
        for (size_t i = 0; i < f->len; i++)
            items[i] = f->items[(f->head + i) % f->cap];
        free (f->items);
        f->items = items;
        f->head = 0;
        f->cap = cap;
    }
    f->items[(f->head + f->len++) % f->cap] = item;
}

// Put an idempotency record into the image (undoable when `undo`).
static void
s_idem_set (s_pg_t *self, uint64_t k, const s_idem_t *rec, bool undo)
{
    s_idem_t *n = zl_malloc (sizeof *n);
    *n = *rec;
    s_idem_t *old = zl_u64map_remove (self->idem, k);
    zl_u64map_put (self->idem, k, n);
    self->n_class[rec->generated ? 0 : 1]++;
    if (old)
        self->n_class[old->generated ? 0 : 1]--;
    if (undo)
        s_undo_push (self, (s_undo_t){.what = UNDO_IDEM, .id = k, .ptr = old});
    else
        free (old);
    s_fifo_push (&self->fifo[rec->generated ? 0 : 1], (s_fifo_item_t){k, rec->seen_ms});
}

// ---------------------------------------------------------------- the image, whole
static void
s_image_clear (s_pg_t *self)
{
    if (self->batch)
        s_batch_end (self, false);
    size_t cursor = 0;
    uint64_t key;
    s_job_t *j;
    while ((j = zl_u64map_next (self->jobs, &cursor, &key)))
        s_job_free (self, j);
    zl_u64map_destroy (&self->jobs);
    self->jobs = zl_u64map_new ();
    s_idem_t *e;
    cursor = 0;
    while ((e = zl_u64map_next (self->idem, &cursor, &key)))
        free (e);
    zl_u64map_destroy (&self->idem);
    self->idem = zl_u64map_new ();
    for (int c = 0; c < 2; c++) {
        free (self->fifo[c].items);
        memset (&self->fifo[c], 0, sizeof self->fifo[c]);
    }
    self->next_id = 1;
    self->n_class[0] = self->n_class[1] = 0;
    self->forgotten[0] = self->forgotten[1] = 0;
    self->image_bytes = 0;
    self->n_states = 0;
    self->compact_seg = self->drop_log_seg = 0;
    memset (self->ser, 0, sizeof self->ser);
}

// The partitions of zlane.<table>, by segment number, ascending.
static int
s_list_segments (s_pg_t *self, int series)
{
    const char *params[1] = {s_series_table[series]};
    PGresult *r = PQexecParams (self->conn,
                                "SELECT substring(c.relname from '[0-9]+$')::bigint AS seg"
                                " FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                                " JOIN pg_class p ON p.oid = i.inhparent"
                                " JOIN pg_namespace n ON n.oid = p.relnamespace"
                                " WHERE n.nspname = 'zlane' AND p.relname = $1 ORDER BY seg",
                                1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus (r) != PGRES_TUPLES_OK) {
        zl_warn ("store", "listing zlane.%s: %s", s_series_table[series], s_result_error (r));
        PQclear (r);
        return -1;
    }
    s_series_t *s = &self->ser[series];
    s->n = 0;
    for (int i = 0; i < PQntuples (r) && s->n < MAX_SEGS; i++)
        s->segs[s->n++] = strtoll (PQgetvalue (r, i, 0), NULL, 10);
    PQclear (r);
    return 0;
}

// Create partition `seg` of series `series` in a transaction of its own
// that waits at most LOCK_TIMEOUT for its lock. Returns 0 or -1.
static int
s_create_segment (s_pg_t *self, int series, int64_t seg)
{
    char sql[256];
    snprintf (sql, sizeof sql,
              "BEGIN; SET LOCAL lock_timeout = '" LOCK_TIMEOUT "';"
              " CREATE TABLE IF NOT EXISTS zlane.%s_%" PRId64 " PARTITION OF zlane.%s"
              " FOR VALUES IN (%" PRId64 "); ALTER TABLE zlane.%s_%" PRId64
              " ALTER data SET STORAGE EXTERNAL; COMMIT",
              s_series_table[series], seg, s_series_table[series], seg, s_series_table[series],
              seg);
    if (s_exec (self, sql, "creating a segment"))
        return 0;
    s_exec (self, "ROLLBACK", "creating a segment");
    return -1;
}

static int
s_drop_segment (s_pg_t *self, int series, int64_t seg)
{
    char sql[256];
    snprintf (sql, sizeof sql,
              "BEGIN; SET LOCAL lock_timeout = '" LOCK_TIMEOUT "';"
              " DROP TABLE IF EXISTS zlane.%s_%" PRId64 "; COMMIT",
              s_series_table[series], seg);
    if (s_exec (self, sql, "dropping a segment")) {
        self->rotations++;
        return 0;
    }
    s_exec (self, "ROLLBACK", "dropping a segment");
    return -1;
}

// Index of segment `seg` in its series, or -1.
static int
s_seg_index (const s_series_t *s, int64_t seg)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->segs[i] == seg)
            return (int)i;
    return -1;
}

static void
s_seg_remove (s_series_t *s, int64_t seg)
{
    int i = s_seg_index (s, seg);
    if (i < 0)
        return;
    memmove (&s->segs[i], &s->segs[i + 1], (s->n - (size_t)i - 1) * sizeof s->segs[0]);
    memmove (&s->newest_ms[i], &s->newest_ms[i + 1],
             (s->n - (size_t)i - 1) * sizeof s->newest_ms[0]);
    s->n--;
}

// Open a fresh current segment for every series (after a takeover).
static int
s_fresh_segments (s_pg_t *self, int64_t mono_ms)
{
    for (int k = 0; k < SER_COUNT; k++) {
        s_series_t *s = &self->ser[k];
        int64_t seg = s->n ? s->segs[s->n - 1] + 1 : 1;
        if (s->n == MAX_SEGS || s_create_segment (self, k, seg) != 0)
            return -1;
        s->segs[s->n] = seg;
        s->newest_ms[s->n++] = 0;
        s->ready = 0;
        s->rows = 0;
        s->started_ms = mono_ms;
    }
    return 0;
}

// One record of the log, while loading: `seq` orders it among all.
static void
s_load_record (s_pg_t *self, int64_t seg, int64_t seq, int kind, uint64_t id, const uint8_t *data,
               uint32_t len)
{
    if (kind == KIND_NEXT_ID) {
        if (id > self->next_id)
            self->next_id = id;
        return;
    }
    if (kind == KIND_FORGOTTEN) {
        if (id < 2 && len == 8) {
            int64_t ms = (int64_t)s_get_be64 (data);
            if (ms > self->forgotten[id])
                self->forgotten[id] = ms;
        }
        return;
    }
    if (kind != KIND_JOB && kind != KIND_STATE && kind != KIND_DEL)
        return;
    s_job_t *j = zl_u64map_get (self->jobs, id);
    if (!j) {
        j = zl_calloc (1, sizeof *j);
        j->job_seq = j->state_seq = -1;
        zl_u64map_put (self->jobs, id, j);
    }
    if (kind == KIND_DEL) {
        j->deleted = true; // ids are never used again: gone for good
        return;
    }
    bool job = kind == KIND_JOB;
    if (seq <= (job ? j->job_seq : j->state_seq))
        return;
    uint8_t *copy = zl_malloc (len ? len : 1);
    memcpy (copy, data, len);
    if (job) {
        free (j->job);
        j->job = copy, j->job_len = len, j->job_seg = seg, j->job_seq = seq;
    } else {
        free (j->state);
        j->state = copy, j->state_len = len, j->state_seg = seg, j->state_seq = seq;
    }
}

// One key, while loading.
static void
s_load_key (s_pg_t *self, int series, int64_t seg, int64_t seq, const uint8_t *p)
{
    s_idem_t rec = {.job_id = s_get_be64 (p + DIGEST_LEN),
                    .seen_ms = (int64_t)s_get_be64 (p + DIGEST_LEN + 8),
                    .seq = seq,
                    .generated = series == SER_RESEND};
    memcpy (rec.digest, p, DIGEST_LEN);
    s_series_t *s = &self->ser[series];
    int at = s_seg_index (s, seg);
    if (at >= 0 && rec.seen_ms > s->newest_ms[at])
        s->newest_ms[at] = rec.seen_ms;
    uint64_t k = s_get_be64 (rec.digest);
    k = k ? k : 1;
    s_idem_t *old = zl_u64map_get (self->idem, k);
    if (old && old->seq > seq)
        return;
    s_idem_t *e = zl_malloc (sizeof *e);
    *e = rec;
    zl_u64map_put (self->idem, k, e);
    free (old);
}

// One row of a series (seg, seq, data), its packed records unpacked.
// Returns 0, or -1 when the row does not parse (the store is damaged).
static int
s_load_row (s_pg_t *self, int series, const PGresult *r, int i)
{
    int64_t seg = (int64_t)s_get_be64 ((const uint8_t *)PQgetvalue (r, i, 0));
    int64_t row_seq = (int64_t)s_get_be64 ((const uint8_t *)PQgetvalue (r, i, 1));
    const uint8_t *p = (const uint8_t *)PQgetvalue (r, i, 2);
    size_t len = (size_t)PQgetlength (r, i, 2), at = 0;
    if (row_seq >= self->seq)
        self->seq = row_seq + 1;
    for (int64_t n = 0; at < len; n++) {
        int64_t seq = row_seq << SEQ_SHIFT | n;
        if (series != SER_LOG) {
            if (len - at < IDEM_ITEM_LEN)
                return -1;
            s_load_key (self, series, seg, seq, p + at);
            at += IDEM_ITEM_LEN;
            continue;
        }
        if (len - at < 13)
            return -1;
        uint32_t n_bytes = s_get_be32 (p + at + 9);
        if (len - at - 13 < n_bytes)
            return -1;
        s_load_record (self, seg, seq, p[at], s_get_be64 (p + at + 1), p + at + 13, n_bytes);
        at += 13 + (size_t)n_bytes;
    }
    return 0;
}

// Read table zlane.<series> whole through a binary cursor into the image.
static int
s_load_series (s_pg_t *self, int series)
{
    char sql[256];
    snprintf (sql, sizeof sql,
              "DECLARE zl_load BINARY NO SCROLL CURSOR FOR SELECT seg, seq, data FROM zlane.%s",
              s_series_table[series]);
    if (!s_exec (self, sql, "loading the store"))
        return -1;
    for (;;) {
        PGresult *r = PQexec (self->conn, "FETCH "
                                          "20000"
                                          " FROM zl_load");
        if (PQresultStatus (r) != PGRES_TUPLES_OK) {
            zl_warn ("store", "loading zlane.%s: %s", s_series_table[series], s_result_error (r));
            PQclear (r);
            return -1;
        }
        int n = PQntuples (r), bad = 0;
        for (int i = 0; i < n && !bad; i++)
            bad = s_load_row (self, series, r, i) != 0;
        PQclear (r);
        if (bad) {
            zl_error ("store", "%s: a row of zlane.%s does not parse: the store is damaged",
                      self->safe, s_series_table[series]);
            return -1;
        }
        if (n == 0)
            break;
    }
    return s_exec (self, "CLOSE zl_load", "loading the store") ? 0 : -1;
}

static int
s_cmp_seen (const void *a, const void *b)
{
    const s_idem_t *x = *(s_idem_t *const *)a, *y = *(s_idem_t *const *)b;
    return x->seen_ms < y->seen_ms ? -1 : x->seen_ms > y->seen_ms;
}

// The image from the database, in one snapshot. Returns 0 or -1.
static int
s_load (s_pg_t *self, int64_t mono_ms)
{
    int64_t t0 = zl_clock_mono_us ();
    s_image_clear (self);
    self->seq = 1;
    if (!s_exec (self, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "loading the store"))
        return -1;
    int rc = 0;
    for (int k = 0; k < SER_COUNT && rc == 0; k++)
        rc = s_list_segments (self, k);
    for (int k = 0; k < SER_COUNT && rc == 0; k++)
        rc = s_load_series (self, k);
    if (rc != 0 || !s_exec (self, "COMMIT", "loading the store")) {
        s_exec (self, "ROLLBACK", "loading the store");
        s_image_clear (self);
        return -1;
    }
    // deleted jobs and states without a job go; the sizes are counted
    size_t cursor = 0, n_gone = 0;
    uint64_t key, max_id = 0;
    s_job_t *j;
    uint64_t *gone = NULL;
    size_t cap_gone = 0;
    while ((j = zl_u64map_next (self->jobs, &cursor, &key))) {
        if (j->deleted || !j->job) {
            if (n_gone == cap_gone) {
                cap_gone = cap_gone ? cap_gone * 2 : 1024;
                gone = zl_realloc (gone, cap_gone * sizeof *gone);
            }
            gone[n_gone++] = key;
            continue;
        }
        self->image_bytes += sizeof *j + j->job_len + j->state_len;
        self->n_states += j->state != NULL;
        if (key > max_id)
            max_id = key;
    }
    for (size_t i = 0; i < n_gone; i++) {
        j = zl_u64map_remove (self->jobs, gone[i]);
        free (j->job);
        free (j->state);
        free (j);
    }
    free (gone);
    if (self->next_id <= max_id)
        self->next_id = max_id + 1;
    // the expiry order of the keys: by time, per class; those forgotten
    // before go
    size_t n_idem = zl_u64map_size (self->idem);
    s_idem_t **all = zl_malloc ((n_idem ? n_idem : 1) * sizeof *all);
    size_t n = 0;
    s_idem_t *e;
    cursor = 0;
    while ((e = zl_u64map_next (self->idem, &cursor, &key)))
        all[n++] = e;
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (all[i]->seen_ms < self->forgotten[all[i]->generated ? 0 : 1]) {
            uint64_t k = s_get_be64 (all[i]->digest);
            free (zl_u64map_remove (self->idem, k ? k : 1));
        } else
            all[kept++] = all[i];
    }
    n = n_idem = kept;
    for (int c = 0; c < 2; c++)
        s_be64 (self->forgotten_data[c], (uint64_t)self->forgotten[c]);
    qsort (all, n, sizeof *all, s_cmp_seen);
    for (int c = 0; c < 2; c++) {
        for (size_t i = 0; i < n; i++)
            if (all[i]->generated == (c == 0)) {
                self->n_class[c]++;
                uint64_t k = s_get_be64 (all[i]->digest);
                s_fifo_push (&self->fifo[c], (s_fifo_item_t){k ? k : 1, all[i]->seen_ms});
            }
    }
    free (all);
    if (s_fresh_segments (self, mono_ms) != 0) {
        s_image_clear (self);
        return -1;
    }
    zl_info ("store",
             "%s: loaded %zu job(s) and %zu idempotency key(s) in %.1f ms (epoch %" PRIu64 ")",
             self->safe, zl_u64map_size (self->jobs), n_idem,
             (double)(zl_clock_mono_us () - t0) / 1000.0, self->epoch);
    return 0;
}

// ---------------------------------------------------------------- leadership
static void
s_lose_lead (s_pg_t *self, zl_store_role_t role, const char *why)
{
    if (self->role == ZL_ROLE_LEADER)
        zl_warn ("store", "%s: no longer the leader (epoch %" PRIu64 "): %s", self->safe,
                 self->epoch, why);
    s_image_clear (self);
    if (role == ZL_ROLE_UNREACHABLE)
        s_set_unreachable (self, why);
    else
        self->role = role;
}

// What a standby learns from the lease row; takes the lead when the lease
// lapsed or is this broker's own. Returns 1 when it took the lead, 0 when
// not, -1 when the connection failed.
static int
s_watch (s_pg_t *self, int64_t mono_ms)
{
    PGresult *r = PQexec (self->conn, "SELECT epoch, holder, frontend, backend, admin,"
                                      " expires_at < clock_timestamp() FROM zlane.leader");
    if (PQresultStatus (r) != PGRES_TUPLES_OK || PQntuples (r) != 1) {
        PQclear (r);
        return -1;
    }
    uint64_t seen = strtoull (PQgetvalue (r, 0, 0), NULL, 10);
    bool lapsed = !strcmp (PQgetvalue (r, 0, 5), "t");
    bool mine = !strcmp (PQgetvalue (r, 0, 1), self->name);
    self->epoch = seen;
    snprintf (self->leader_name, sizeof self->leader_name, "%s", PQgetvalue (r, 0, 1));
    for (int i = 0; i < ZL_ADVERTISE_COUNT; i++)
        snprintf (self->leader[i], sizeof self->leader[i], "%s",
                  lapsed ? "" : PQgetvalue (r, 0, 2 + i));
    PQclear (r);
    if (!lapsed && !mine)
        return 0;
    char epoch[24], lease[16];
    snprintf (epoch, sizeof epoch, "%" PRIu64, seen);
    snprintf (lease, sizeof lease, "%u", self->lease_ms);
    const char *params[] = {epoch,
                            self->name,
                            self->advertise[ZL_ADVERTISE_FRONTEND],
                            self->advertise[ZL_ADVERTISE_BACKEND],
                            self->advertise[ZL_ADVERTISE_ADMIN],
                            lease};
    r = PQexecParams (self->conn,
                      "UPDATE zlane.leader SET epoch = epoch + 1, holder = $2, frontend = $3,"
                      " backend = $4, admin = $5,"
                      " expires_at = clock_timestamp() + $6::int * interval '1 ms'"
                      " WHERE id = 1 AND epoch = $1::bigint"
                      " AND (expires_at < clock_timestamp() OR holder = $2) RETURNING epoch",
                      6, NULL, params, NULL, NULL, 0);
    if (PQresultStatus (r) != PGRES_TUPLES_OK) {
        PQclear (r);
        return -1;
    }
    int won = PQntuples (r) == 1;
    if (won)
        self->epoch = strtoull (PQgetvalue (r, 0, 0), NULL, 10);
    PQclear (r);
    if (!won)
        return 0;
    zl_info ("store", "%s: took the lead, epoch %" PRIu64 " (the last leader: %s)", self->safe,
             self->epoch, self->leader_name[0] ? self->leader_name : "none");
    self->role = ZL_ROLE_LEADER;
    if (s_load (self, mono_ms) != 0) {
        self->role = ZL_ROLE_STANDBY;
        return PQstatus (self->conn) == CONNECTION_OK ? 0 : -1;
    }
    self->takeovers++;
    memcpy (self->leader, self->advertise, sizeof self->leader);
    memcpy (self->leader_name, self->name, sizeof self->leader_name);
    return 1;
}

// The leader renews its lease. Returns 0, or -1 (fenced or lost: the role
// says which).
static int
s_renew (s_pg_t *self)
{
    char epoch[24], lease[16];
    snprintf (epoch, sizeof epoch, "%" PRIu64, self->epoch);
    snprintf (lease, sizeof lease, "%u", self->lease_ms);
    const char *params[] = {epoch, lease};
    PGresult *r = PQexecParams (self->conn, "SELECT zlane.fence($1::bigint, $2::int)", 2, NULL,
                                params, NULL, NULL, 0);
    bool ok = s_result_ok (r);
    const char *state = PQresultErrorField (r, PG_DIAG_SQLSTATE);
    bool fenced = !ok && state && !strcmp (state, FENCE_SQLSTATE);
    PQclear (r);
    if (ok)
        return 0;
    if (fenced) {
        self->fenced++;
        s_lose_lead (self, ZL_ROLE_STANDBY, "another broker took the lead");
    } else {
        s_lose_lead (self, ZL_ROLE_UNREACHABLE, s_pq_error (self));
    }
    return -1;
}

// The leader's housekeeping, outside the batch: partitions created ahead
// of their use, compacted log segments and expired key segments dropped.
static void s_maintain (s_pg_t *self, int64_t wall_ms);

static zl_idem_policy_t s_last_policy; // as given to the last prune: the windows of the keys

static void
s_fill_lead (s_pg_t *self, zl_store_lead_t *out)
{
    memset (out, 0, sizeof *out);
    out->role = self->role;
    out->epoch = self->epoch;
    for (int i = 0; i < ZL_ADVERTISE_COUNT; i++)
        snprintf (out->leader[i], sizeof out->leader[i], "%s", self->leader[i]);
    snprintf (out->leader_name, sizeof out->leader_name, "%s", self->leader_name);
}

static zl_store_role_t
s_pg_elect (void *be, int64_t mono_ms, zl_store_lead_t *out)
{
    s_pg_t *self = be;
    bool took = false;
    if (self->batch || self->fly.on) { // not inside a batch or a commit: nothing now
        s_fill_lead (self, out);
        return self->role;
    }
    if (self->role == ZL_ROLE_UNREACHABLE) {
        // the dial never blocks the loop: it moves on at each call
        char err[512] = "";
        int rc = self->dialing ? s_dial_poll (self, mono_ms, err, sizeof err)
                               : s_dial_start (self, mono_ms, err, sizeof err);
        if (!self->dialing && rc == 0)
            rc = 1; // started
        self->dialing = rc == 1;
        if (rc == 1) {
            self->due_ms = mono_ms + 10;
            s_fill_lead (self, out);
            return self->role;
        }
        if (rc == 0) {
            zl_info ("store", "%s: the database answers again", self->safe);
            self->role = ZL_ROLE_STANDBY;
            self->retry_ms = RETRY_MIN_MS;
        } else {
            if (rc == -1)
                zl_error ("store", "%s", err);
            else
                zl_debug ("store", "%s: still no answer: %s", self->safe, err);
            self->due_ms = mono_ms + self->retry_ms;
            if (self->retry_ms < RETRY_MAX_MS)
                self->retry_ms *= 2;
            s_fill_lead (self, out);
            return self->role;
        }
    }
    if (self->role == ZL_ROLE_STANDBY) {
        int rc = s_watch (self, mono_ms);
        if (rc < 0)
            s_lose_lead (self, ZL_ROLE_UNREACHABLE, s_pq_error (self));
        took = rc == 1;
    } else if (self->role == ZL_ROLE_LEADER && s_renew (self) == 0) {
        s_maintain (self, zl_clock_wall_ms ());
    }
    uint32_t step = self->role == ZL_ROLE_LEADER ? self->lease_ms / 4 : self->lease_ms / 8;
    if (self->role == ZL_ROLE_UNREACHABLE)
        step = (uint32_t)self->retry_ms;
    self->due_ms = mono_ms + (step < 50 ? 50 : step);
    s_fill_lead (self, out);
    out->took_over = took;
    return self->role;
}

static int64_t
s_pg_elect_due (void *be)
{
    return ((s_pg_t *)be)->due_ms;
}

static zl_store_role_t
s_pg_role (void *be)
{
    return ((s_pg_t *)be)->role;
}

static void
s_pg_set_candidate (void *be, const zl_store_candidate_t *who)
{
    s_pg_t *self = be;
    snprintf (self->name, sizeof self->name, "%s", who->name && *who->name ? who->name : "broker");
    for (int i = 0; i < ZL_ADVERTISE_COUNT; i++)
        snprintf (self->advertise[i], sizeof self->advertise[i], "%s",
                  who->advertise[i] ? who->advertise[i] : "");
    self->lease_ms = who->lease_ms ? who->lease_ms : 2000;
}

// ---------------------------------------------------------------- segments, rotated
static void
s_maintain (s_pg_t *self, int64_t wall_ms)
{
    for (int k = 0; k < SER_COUNT; k++) {
        s_series_t *s = &self->ser[k];
        if (!s->ready && s->n && s_create_segment (self, k, s->segs[s->n - 1] + 1) == 0)
            s->ready = s->segs[s->n - 1] + 1;
    }
    if (self->drop_log_seg && s_drop_segment (self, SER_LOG, self->drop_log_seg) == 0) {
        s_seg_remove (&self->ser[SER_LOG], self->drop_log_seg);
        self->drop_log_seg = 0;
    }
    // a key segment goes when its newest key has outlived its class's window
    for (int k = SER_RESEND; k <= SER_USER; k++) {
        s_series_t *s = &self->ser[k];
        uint64_t window =
            k == SER_RESEND ? s_last_policy.resend_window_ms : s_last_policy.user_window_ms;
        if (!window)
            continue;
        while (s->n > 1 && s->newest_ms[0] + (int64_t)window < wall_ms &&
               s_drop_segment (self, k, s->segs[0]) == 0)
            s_seg_remove (s, s->segs[0]);
    }
}

// At the start of a batch: move a series to its next segment when the
// current one is full or old and the next is ready, and pick a log segment
// to compact when more than s_keep_segs are kept.
static void
s_rotate (s_pg_t *self, int64_t mono_ms)
{
    for (int k = 0; k < SER_COUNT; k++) {
        s_series_t *s = &self->ser[k];
        int64_t age_max = k == SER_LOG      ? s_rotate_ms
                          : k == SER_RESEND ? IDEM_SEG_MS
                                            : IDEM_USER_SEG_MS;
        bool due = s->rows >= s_rotate_rows || (s->rows && mono_ms - s->started_ms >= age_max);
        if (!due || !s->ready || s->n == MAX_SEGS)
            continue;
        s->segs[s->n] = s->ready;
        s->newest_ms[s->n++] = 0;
        s->ready = 0;
        s->rows = 0;
        s->started_ms = mono_ms;
    }
    s_series_t *log = &self->ser[SER_LOG];
    if (!self->compact_seg && !self->fly.compact_seg && !self->drop_log_seg && log->n > s_keep_segs)
        self->compact_seg = log->segs[0];
}

// ---------------------------------------------------------------- batches
static zl_store_rc_t
s_pg_begin (void *be)
{
    s_pg_t *self = be;
    if (self->role != ZL_ROLE_LEADER)
        return self->role == ZL_ROLE_STANDBY ? ZL_STORE_FENCED : ZL_STORE_UNAVAILABLE;
    s_rotate (self, zl_clock_mono_ms ());
    self->batch = true;
    self->failed = false;
    self->n_rows = self->n_undo = 0;
    return ZL_STORE_OK;
}

static zl_store_rc_t
s_pg_sub_begin (void *be)
{
    s_pg_t *self = be;
    self->sub = true;
    self->sub_failed = false;
    self->sub_undo = self->n_undo;
    self->sub_rows = self->n_rows;
    return ZL_STORE_OK;
}

static void
s_pg_sub_abort (void *be)
{
    s_pg_t *self = be;
    if (!self->sub)
        return;
    s_undo_to (self, self->sub_undo);
    self->n_rows = self->sub_rows;
    self->sub = self->sub_failed = false;
}

static zl_store_rc_t
s_pg_sub_commit (void *be, int fault)
{
    s_pg_t *self = be;
    bool failed = fault || self->sub_failed;
    if (failed) {
        s_pg_sub_abort (be);
        return fault == ENOSPC ? ZL_STORE_FULL : ZL_STORE_ERROR;
    }
    self->sub = false;
    return ZL_STORE_OK;
}

static zl_store_rc_t
s_pg_fail (void *be, int error, const char *what)
{
    s_pg_t *self = be;
    zl_error ("store", "%s failed: %s", what, strerror (error));
    *(self->sub ? &self->sub_failed : &self->failed) = true;
    return error == ENOSPC ? ZL_STORE_FULL : ZL_STORE_ERROR;
}

// Queue the INSERT of the batch's records of `series` into the pipeline:
// one row, its records packed (s_load_blob reads them).
static int
s_send_rows (s_pg_t *self, int series, s_buf_t *blob, uint8_t seq_be[8])
{
    size_t n = 0;
    blob->len = 0;
    s_series_t *s = &self->ser[series];
    int64_t seg = s->segs[s->n - 1];
    for (size_t i = 0; i < self->n_rows; i++) {
        s_row_t *r = &self->rows[i];
        if (r->series != series)
            continue;
        n++;
        if (series == SER_LOG) { // kind, id, length (big-endian), the record
            uint8_t *p = s_buf_take (blob, 13 + (size_t)r->len);
            p[0] = (uint8_t)r->kind;
            s_be64 (p + 1, r->id);
            s_be32 (p + 9, r->len);
            if (r->len)
                memcpy (p + 13, r->data, r->len);
        } else { // digest, job id, seen (ms)
            uint8_t *p = s_buf_take (blob, IDEM_ITEM_LEN);
            memcpy (p, r->idem.digest, DIGEST_LEN);
            s_be64 (p + DIGEST_LEN, r->idem.job_id);
            s_be64 (p + DIGEST_LEN + 8, (uint64_t)r->idem.seen_ms);
            if (r->idem.seen_ms > s->newest_ms[s->n - 1])
                s->newest_ms[s->n - 1] = r->idem.seen_ms;
        }
    }
    if (!n)
        return 0;
    s->rows += n;
    s_be64 (seq_be, (uint64_t)self->seq++);
    char sql[160];
    snprintf (sql, sizeof sql,
              "INSERT INTO zlane.%s_%" PRId64 " (seg, seq, data) VALUES (%" PRId64 ", $1, $2)",
              s_series_table[series], seg, seg);
    const char *values[2] = {(const char *)seq_be, (const char *)blob->data};
    int lengths[2] = {8, (int)blob->len}, formats[2] = {1, 1};
    return PQsendQueryParams (self->conn, sql, 2, NULL, values, lengths, formats, 0) ? 0 : -1;
}

// The compaction of the batch: the live records of compact_seg appended
// again (to the current segment). Returns the ids moved (caller frees).
static uint64_t *
s_compact_rows (s_pg_t *self, size_t *n_moved)
{
    *n_moved = 0;
    if (!self->compact_seg)
        return NULL;
    size_t cap = 1024, n = 0, cursor = 0;
    uint64_t *moved = zl_malloc (cap * sizeof *moved), key;
    s_job_t *j;
    while ((j = zl_u64map_next (self->jobs, &cursor, &key))) {
        bool job = j->job && j->job_seg == self->compact_seg;
        bool state = j->state && j->state_seg == self->compact_seg;
        if (!job && !state)
            continue;
        if (job)
            *s_row_push (self) = (s_row_t){
                .kind = KIND_JOB, .series = SER_LOG, .id = key, .data = j->job, .len = j->job_len};
        if (state)
            *s_row_push (self) = (s_row_t){.kind = KIND_STATE,
                                           .series = SER_LOG,
                                           .id = key,
                                           .data = j->state,
                                           .len = j->state_len};
        if (n == cap)
            moved = zl_realloc (moved, (cap *= 2) * sizeof *moved);
        moved[n++] = key;
    }
    *s_row_push (self) = (s_row_t){.kind = KIND_NEXT_ID, .series = SER_LOG, .id = self->next_id};
    for (int c = 0; c < 2; c++)
        if (self->forgotten[c])
            *s_row_push (self) = (s_row_t){.kind = KIND_FORGOTTEN,
                                           .series = SER_LOG,
                                           .id = (uint64_t)c,
                                           .data = self->forgotten_data[c],
                                           .len = 8};
    *n_moved = n;
    return moved;
}

// The commit under way has ended: `rc` tells how. On a failure the store
// no longer leads: its image is cleared, and an open batch (written while
// the commit was under way) goes with it.
static zl_store_rc_t
s_fly_end (s_pg_t *self, zl_store_rc_t rc)
{
    self->fly.on = false;
    uint64_t us = (uint64_t)(zl_clock_mono_us () - self->fly.t0_us);
    uint64_t *moved = self->fly.moved;
    size_t n_moved = self->fly.n_moved;
    self->fly.moved = NULL;
    if (rc != ZL_STORE_OK) {
        free (moved);
        if (self->batch) { // its undo refers to the image, which goes
            s_undo_forget (self);
            self->n_rows = 0;
            self->failed = true;
        }
        if (rc == ZL_STORE_FENCED) {
            self->fenced++;
            s_lose_lead (self, ZL_ROLE_STANDBY,
                         "another broker took the lead: this commit was refused");
        } else {
            zl_error ("store", "%s: commit failed: %s", self->safe, self->fly.why);
            s_lose_lead (self, ZL_ROLE_UNREACHABLE, self->fly.why);
        }
        return rc;
    }
    self->commits++;
    self->commit_us += us;
    if (us > self->commit_max_us)
        self->commit_max_us = us;
    // the compacted segment holds nothing live now: drop it at the next
    // maintenance
    int64_t cur = self->ser[SER_LOG].segs[self->ser[SER_LOG].n - 1];
    for (size_t i = 0; i < n_moved; i++) {
        s_job_t *j = zl_u64map_get (self->jobs, moved[i]);
        if (j && j->job_seg == self->fly.compact_seg)
            j->job_seg = cur;
        if (j && j->state_seg == self->fly.compact_seg)
            j->state_seg = cur;
    }
    free (moved);
    if (self->fly.compact_seg)
        self->drop_log_seg = self->fly.compact_seg;
    self->fly.compact_seg = 0;
    return ZL_STORE_OK;
}

// Read the results of the commit under way, to its sync; without `wait`,
// only what has arrived (ZL_STORE_PENDING when the sync has not).
static zl_store_rc_t
s_pg_commit_finish (void *be, bool wait)
{
    s_pg_t *self = be;
    if (!self->fly.on)
        return ZL_STORE_OK;
    if (!wait && !PQconsumeInput (self->conn))
        self->fly.ok = false;
    bool synced = false, broken = !self->fly.ok && PQstatus (self->conn) != CONNECTION_OK;
    while (!synced && !broken) {
        if (!wait && PQisBusy (self->conn))
            return ZL_STORE_PENDING;
        PGresult *r = PQgetResult (self->conn);
        if (!r) {
            broken = PQstatus (self->conn) != CONNECTION_OK;
            continue; // the end of one query's results
        }
        ExecStatusType st = PQresultStatus (r);
        if (st == PGRES_PIPELINE_SYNC) {
            synced = true;
        } else if (st == PGRES_FATAL_ERROR && self->fly.ok) {
            self->fly.ok = false;
            const char *code = PQresultErrorField (r, PG_DIAG_SQLSTATE);
            self->fly.fenced = code && !strcmp (code, FENCE_SQLSTATE);
            snprintf (self->fly.why, sizeof self->fly.why, "%s", s_result_error (r));
        } else if (st == PGRES_PIPELINE_ABORTED) {
            self->fly.ok = false;
        }
        PQclear (r);
    }
    if (synced)
        PQexitPipelineMode (self->conn);
    bool ok = self->fly.ok && synced;
    if (!ok && !broken && PQtransactionStatus (self->conn) == PQTRANS_INERROR) {
        PGresult *r = PQexec (self->conn, "ROLLBACK"); // the BEGIN ran, the rest did not
        PQclear (r);
    }
    if (!self->fly.why[0])
        snprintf (self->fly.why, sizeof self->fly.why, "%s", s_pq_error (self));
    if (ok)
        return s_fly_end (self, ZL_STORE_OK);
    return s_fly_end (self, self->fly.fenced ? ZL_STORE_FENCED : ZL_STORE_UNAVAILABLE);
}

static int
s_pg_commit_fd (void *be)
{
    s_pg_t *self = be;
    return self->fly.on && self->conn ? PQsocket (self->conn) : -1;
}

// Send the batch in one pipeline (BEGIN, the fence, an INSERT per series,
// COMMIT, sync) and return without waiting: ZL_STORE_PENDING, or OK for an
// empty batch. The image already holds the batch; what its writes replaced
// is freed now (a failure clears the whole image: s_fly_end).
static zl_store_rc_t
s_pg_commit_start (void *be, int fault)
{
    s_pg_t *self = be;
    if (self->sub)
        s_pg_sub_abort (be);            // a nested batch left open is dropped
    if (self->role != ZL_ROLE_LEADER) { // lost while this batch was open
        s_batch_end (self, false);
        return self->role == ZL_ROLE_STANDBY ? ZL_STORE_FENCED : ZL_STORE_UNAVAILABLE;
    }
    if (fault || self->failed) {
        zl_error ("store", "commit failed: %s", strerror (fault ? fault : EIO));
        s_batch_end (self, false);
        return fault == ENOSPC ? ZL_STORE_FULL : ZL_STORE_ERROR;
    }
    if (!self->n_rows) { // nothing to send (a commit under way goes on)
        s_batch_end (self, true);
        return ZL_STORE_OK;
    }
    if (self->fly.on) { // store.c waits for it first; this is a backstop
        zl_store_rc_t rc = s_pg_commit_finish (be, true);
        if (rc != ZL_STORE_OK)
            return rc;
    }
    memset (&self->fly, 0, sizeof self->fly);
    self->fly.on = self->fly.ok = true;
    self->fly.t0_us = zl_clock_mono_us ();
    self->fly.compact_seg = self->compact_seg;
    self->fly.moved = s_compact_rows (self, &self->fly.n_moved);
    self->compact_seg = 0;
    char epoch[24];
    snprintf (epoch, sizeof epoch, "%" PRIu64, self->epoch);
    const char *fence_params[] = {epoch, "0"};
    s_buf_t blobs[SER_COUNT] = {{0}};
    uint8_t seqs[SER_COUNT][8];
    bool sent = PQenterPipelineMode (self->conn) &&
                PQsendQueryParams (self->conn, "BEGIN", 0, NULL, NULL, NULL, NULL, 0) &&
                PQsendQueryParams (self->conn, "SELECT zlane.fence($1::bigint, $2::int)", 2, NULL,
                                   fence_params, NULL, NULL, 0);
    for (int k = 0; k < SER_COUNT && sent; k++)
        sent = s_send_rows (self, k, &blobs[k], seqs[k]) == 0;
    sent = sent && PQsendQueryParams (self->conn, "COMMIT", 0, NULL, NULL, NULL, NULL, 0) &&
           PQpipelineSync (self->conn);
    for (int k = 0; k < SER_COUNT; k++)
        free (blobs[k].data);
    s_batch_end (self, true); // the rows are in libpq's buffer (or lost with the connection)
    if (!sent) {
        self->fly.ok = false;
        snprintf (self->fly.why, sizeof self->fly.why, "%s", s_pq_error (self));
        return s_fly_end (self, ZL_STORE_UNAVAILABLE); // and the connection is dropped
    }
    return ZL_STORE_PENDING;
}

static zl_store_rc_t
s_pg_commit (void *be, int fault)
{
    zl_store_rc_t rc = s_pg_commit_start (be, fault);
    return rc == ZL_STORE_PENDING ? s_pg_commit_finish (be, true) : rc;
}

// ---------------------------------------------------------------- writes
static uint8_t *
s_encode (s_pg_t *self, size_t (*prepare) (zl_arena_t *, const void *, void **), const void *rec,
          uint32_t *len)
{
    void *handle;
    zl_arena_reset (self->scratch);
    size_t n = prepare (self->scratch, rec, &handle);
    uint8_t *data = zl_malloc (n ? n : 1);
    zl_record_write (handle, data);
    *len = (uint32_t)n;
    return data;
}

static size_t
s_prepare_job (zl_arena_t *a, const void *rec, void **h)
{
    return zl_record_job_prepare (a, rec, h);
}

static size_t
s_prepare_state (zl_arena_t *a, const void *rec, void **h)
{
    return zl_record_state_prepare (a, rec, h);
}

static zl_store_rc_t
s_pg_put_job (void *be, uint64_t id, const zl_job_rec_t *rec)
{
    s_pg_t *self = be;
    uint32_t len;
    uint8_t *data = s_encode (self, s_prepare_job, rec, &len);
    return s_put_field (self, id, UNDO_JOB, data, len);
}

static zl_store_rc_t
s_pg_put_state (void *be, uint64_t id, const zl_state_rec_t *rec)
{
    s_pg_t *self = be;
    uint32_t len;
    uint8_t *data = s_encode (self, s_prepare_state, rec, &len);
    return s_put_field (self, id, UNDO_STATE, data, len);
}

static zl_store_rc_t
s_pg_del_job (void *be, uint64_t id, unsigned priority)
{
    (void)priority; // one table, keyed by id
    s_pg_t *self = be;
    s_job_t *j = zl_u64map_remove (self->jobs, id);
    if (!j)
        return ZL_STORE_OK;
    self->n_states -= j->state != NULL;
    s_undo_push (self, (s_undo_t){.what = UNDO_DEL, .id = id, .ptr = j});
    *s_row_push (self) = (s_row_t){.kind = KIND_DEL, .series = SER_LOG, .id = id};
    return ZL_STORE_OK;
}

static zl_store_rc_t
s_pg_put_idem (void *be, const char *tenant, const char *key, const zl_idem_rec_t *rec)
{
    s_pg_t *self = be;
    s_idem_t e = {.job_id = rec->job_id, .seen_ms = rec->seen_at_ms, .generated = rec->generated};
    uint64_t k = s_idem_digest (self, tenant, key, e.digest);
    s_idem_set (self, k, &e, true);
    s_row_t *r = s_row_push (self);
    r->series = rec->generated ? SER_RESEND : SER_USER;
    r->idem = e;
    self->idem_put++;
    return ZL_STORE_OK;
}

static zl_store_rc_t
s_pg_set_next_id (void *be, uint64_t next_id)
{
    s_pg_t *self = be;
    s_undo_push (self, (s_undo_t){.what = UNDO_NEXT_ID, .id = self->next_id});
    self->next_id = next_id;
    *s_row_push (self) = (s_row_t){.kind = KIND_NEXT_ID, .series = SER_LOG, .id = next_id};
    return ZL_STORE_OK;
}

// ---------------------------------------------------------------- reads
static zl_store_rc_t
s_pg_get_job (void *be, uint64_t id, unsigned priority, zl_arena_t *arena, zl_job_rec_t *out)
{
    (void)priority;
    s_pg_t *self = be;
    s_job_t *j = zl_u64map_get (self->jobs, id);
    if (!j || !j->job)
        return ZL_STORE_NOT_FOUND;
    if (zl_record_job_decode (arena, j->job, j->job_len, out) != 0) {
        zl_error ("store", "job %" PRIu64 ": its record does not decode", id);
        return ZL_STORE_ERROR;
    }
    return ZL_STORE_OK;
}

static zl_store_rc_t
s_pg_get_state (void *be, uint64_t id, zl_arena_t *arena, zl_state_rec_t *out)
{
    s_pg_t *self = be;
    s_job_t *j = zl_u64map_get (self->jobs, id);
    if (!j || !j->state)
        return ZL_STORE_NOT_FOUND;
    if (zl_record_state_decode (arena, j->state, j->state_len, out) != 0) {
        zl_error ("store", "job %" PRIu64 ": its state record does not decode", id);
        return ZL_STORE_ERROR;
    }
    return ZL_STORE_OK;
}

static zl_store_rc_t
s_pg_get_idem (void *be, const char *tenant, const char *key, zl_idem_rec_t *out)
{
    s_pg_t *self = be;
    uint8_t digest[DIGEST_LEN];
    uint64_t k = s_idem_digest (self, tenant, key, digest);
    s_idem_t *e = zl_u64map_get (self->idem, k);
    if (!e || memcmp (e->digest, digest, DIGEST_LEN) != 0)
        return ZL_STORE_NOT_FOUND;
    *out = (zl_idem_rec_t){e->job_id, e->seen_ms, e->generated};
    return ZL_STORE_OK;
}

// ---------------------------------------------------------------- keys forgotten
// Pop the head of class `c`'s expiry order; forget its key if the head is
// still the key's latest record. Returns true when a key went.
static bool
s_pop_key (s_pg_t *self, int c)
{
    s_fifo_t *f = &self->fifo[c];
    s_fifo_item_t it = f->items[f->head];
    f->head = (f->head + 1) % f->cap;
    f->len--;
    s_idem_t *e = zl_u64map_get (self->idem, it.key64);
    if (!e || e->seen_ms != it.seen_ms || e->generated != (c == 0))
        return false; // replaced since: its newer record is later in the order
    free (zl_u64map_remove (self->idem, it.key64));
    self->n_class[c]--;
    return true;
}

// Record how far class `c`'s keys are forgotten: before the oldest kept.
static void
s_note_forgotten (s_pg_t *self, int c)
{
    s_fifo_t *f = &self->fifo[c];
    int64_t w = f->len ? f->items[f->head].seen_ms : INT64_MAX;
    if (w <= self->forgotten[c])
        return;
    self->forgotten[c] = w;
    s_be64 (self->forgotten_data[c], (uint64_t)w);
    *s_row_push (self) = (s_row_t){.kind = KIND_FORGOTTEN,
                                   .series = SER_LOG,
                                   .id = (uint64_t)c,
                                   .data = self->forgotten_data[c],
                                   .len = 8};
}

static size_t
s_pg_prune_idem (void *be, int64_t now_ms, const zl_idem_policy_t *policy, size_t max)
{
    s_pg_t *self = be;
    s_last_policy = *policy;
    size_t budget = max + 2 * self->idem_put, done = 0;
    self->idem_put = 0;
    uint64_t window[2] = {policy->resend_window_ms, policy->user_window_ms};
    for (int c = 0; c < 2; c++)
        while (done < budget && self->fifo[c].len &&
               self->fifo[c].items[self->fifo[c].head].seen_ms + (int64_t)window[c] <= now_ms) {
            self->dedup_expired += s_pop_key (self, c);
            done++;
        }
    // past max_keys: the keys whose window is most used up go first
    while (done < budget && policy->max_keys && zl_u64map_size (self->idem) > policy->max_keys) {
        double used[2] = {-1, -1};
        for (int c = 0; c < 2; c++)
            if (self->fifo[c].len && window[c])
                used[c] = (double)(now_ms - self->fifo[c].items[self->fifo[c].head].seen_ms) /
                          (double)window[c];
        int c = used[0] >= used[1] ? 0 : 1;
        if (!self->fifo[c].len)
            break;
        self->dedup_evicted += s_pop_key (self, c);
        done++;
    }
    if (done)
        for (int c = 0; c < 2; c++)
            s_note_forgotten (self, c);
    return done;
}

// ---------------------------------------------------------------- room, recovery, stats
#define IMAGE_MARGIN (4u << 20) // kept free in the image's budget for acks and retries

static bool
s_pg_has_room (void *be, size_t bytes)
{
    s_pg_t *self = be;
    if (self->role != ZL_ROLE_LEADER)
        return false;
    uint64_t margin = self->budget / 4 < IMAGE_MARGIN ? self->budget / 4 : IMAGE_MARGIN;
    return self->image_bytes + bytes + margin <= self->budget;
}

static int
s_cmp_u64 (const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int
s_pg_recover (void *be, zl_store_job_fn *fn, void *ctx, uint64_t *next_id, char *err, size_t errlen)
{
    s_pg_t *self = be;
    size_t n = zl_u64map_size (self->jobs), cursor = 0, i = 0;
    uint64_t *ids = zl_malloc ((n ? n : 1) * sizeof *ids), key;
    while (zl_u64map_next (self->jobs, &cursor, &key))
        ids[i++] = key;
    qsort (ids, n, sizeof *ids, s_cmp_u64);
    zl_arena_t *arena = zl_arena_new (64 * 1024);
    int rc = 0;
    for (i = 0; i < n && rc == 0; i++) {
        zl_arena_reset (arena);
        zl_job_rec_t job;
        zl_state_rec_t state;
        bool has_state = false;
        if (s_pg_get_job (self, ids[i], ZL_PRIORITY_DEFAULT, arena, &job) != ZL_STORE_OK)
            rc = -1;
        else if (zl_u64map_get (self->jobs, ids[i]) &&
                 ((s_job_t *)zl_u64map_get (self->jobs, ids[i]))->state) {
            if (s_pg_get_state (self, ids[i], arena, &state) != ZL_STORE_OK)
                rc = -1;
            has_state = true;
        }
        if (rc == 0)
            fn (ctx, ids[i], &job, has_state ? &state : NULL);
        else
            snprintf (err, errlen, "store %.300s: job %" PRIu64 ": a record does not decode",
                      self->safe, ids[i]);
    }
    zl_arena_destroy (&arena);
    free (ids);
    *next_id = self->next_id;
    return rc;
}

static void
s_pg_stats (void *be, zl_store_stats_t *st)
{
    s_pg_t *self = be;
    memset (st, 0, sizeof *st);
    st->map_size = self->budget;
    st->used_bytes = self->image_bytes;
    st->free_bytes = self->budget > self->image_bytes ? self->budget - self->image_bytes : 0;
    st->jobs = zl_u64map_size (self->jobs);
    st->states = self->n_states;
    st->idem_keys = zl_u64map_size (self->idem);
    st->idem_resend_log = self->n_class[0];
    st->idem_user_log = self->n_class[1];
    st->dedup_expired = self->dedup_expired;
    st->dedup_evicted = self->dedup_evicted;
    st->commits = self->commits;
    st->commit_us = self->commit_us;
    st->commit_max_us = self->commit_max_us;
    st->role = self->role;
    st->epoch = self->epoch;
    st->takeovers = self->takeovers;
    st->fenced = self->fenced;
    st->unreachable = self->unreachable;
    st->reachable = self->conn && PQstatus (self->conn) == CONNECTION_OK;
    st->log_segments = self->ser[SER_LOG].n;
    for (int k = 0; k < SER_COUNT; k++)
        st->log_rows += self->ser[k].rows;
    st->log_rotations = self->rotations;
}

// ---------------------------------------------------------------- open, close
static void *
s_pg_open (const char *location, zl_durability_t mode, uint64_t map_size, char *err, size_t errlen)
{
    s_pg_t *self = zl_calloc (1, sizeof *self);
    self->location = zl_strdup (location);
    zl_store_location_safe (location, self->safe, sizeof self->safe);
    self->mode = mode;
    self->budget = map_size;
    self->jobs = zl_u64map_new ();
    self->idem = zl_u64map_new ();
    self->scratch = zl_arena_new (64 * 1024);
    self->next_id = 1;
    self->retry_ms = RETRY_MIN_MS;
    char host[64] = "";
    gethostname (host, sizeof host - 1);
    snprintf (self->name, sizeof self->name, "%s:%d", host, (int)getpid ());
    self->lease_ms = 2000;
    self->role = ZL_ROLE_UNREACHABLE;
    char why[512] = "";
    int rc = s_connect (self, why, sizeof why);
    if (rc == -1) {
        snprintf (err, errlen, "%s", why);
        zl_u64map_destroy (&self->jobs);
        zl_u64map_destroy (&self->idem);
        zl_arena_destroy (&self->scratch);
        free (self->location);
        free (self);
        return NULL;
    }
    if (rc == 0) {
        self->role = ZL_ROLE_STANDBY;
    } else {
        zl_warn ("store", "%s: the database does not answer yet (%s): retrying", self->safe, why);
        self->unreachable++;
    }
    return self;
}

static void
s_pg_close (void *be)
{
    s_pg_t *self = be;
    if (self->fly.on)
        (void)s_pg_commit_finish (be, true);
    if (self->batch)
        s_batch_end (self, false); // an open batch is aborted
    if (self->role == ZL_ROLE_LEADER && self->conn) {
        // give the lease up, so that a standby takes over at once
        char epoch[24];
        snprintf (epoch, sizeof epoch, "%" PRIu64, self->epoch);
        const char *params[] = {epoch};
        PGresult *r = PQexecParams (self->conn,
                                    "UPDATE zlane.leader SET expires_at = '-infinity'"
                                    " WHERE id = 1 AND epoch = $1::bigint",
                                    1, NULL, params, NULL, NULL, 0);
        PQclear (r);
    }
    s_image_clear (self);
    s_disconnect (self);
    zl_u64map_destroy (&self->jobs);
    zl_u64map_destroy (&self->idem);
    free (self->undo);
    free (self->rows);
    zl_arena_destroy (&self->scratch);
    free (self->location);
    free (self);
}

const zl_store_backend_t zl_store_pg = {.name = "postgresql",
                                        .open = s_pg_open,
                                        .close = s_pg_close,
                                        .begin = s_pg_begin,
                                        .commit_start = s_pg_commit_start,
                                        .commit_finish = s_pg_commit_finish,
                                        .commit_fd = s_pg_commit_fd,
                                        .sub_begin = s_pg_sub_begin,
                                        .sub_commit = s_pg_sub_commit,
                                        .sub_abort = s_pg_sub_abort,
                                        .commit = s_pg_commit,
                                        .fail = s_pg_fail,
                                        .put_job = s_pg_put_job,
                                        .put_state = s_pg_put_state,
                                        .del_job = s_pg_del_job,
                                        .put_idem = s_pg_put_idem,
                                        .set_next_id = s_pg_set_next_id,
                                        .get_job = s_pg_get_job,
                                        .get_state = s_pg_get_state,
                                        .get_idem = s_pg_get_idem,
                                        .prune_idem = s_pg_prune_idem,
                                        .has_room = s_pg_has_room,
                                        .recover = s_pg_recover,
                                        .stats = s_pg_stats,
                                        .set_candidate = s_pg_set_candidate,
                                        .elect = s_pg_elect,
                                        .elect_due = s_pg_elect_due,
                                        .role = s_pg_role};
