/*  store: the generic layer of the store (store.h). Picks the backend from
    the store's location, tracks the open batch and nested batch, asks the
    fault-injection hook, and passes every call on to the backend's table
    (store_backend.h). */
#include "store_backend.h"

#include "zl_alloc.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct _zl_store_t {
    const zl_store_backend_t *be;
    void *impl;    // the backend's own state
    bool batch;    // the turn's batch is open
    bool sub;      // a Submit's nested batch is open in it
    int txn_fault; // the error an injected write gave the turn's batch, 0 = none
    int sub_fault; //   and the nested one
    bool dirty;    // the open batch holds a write
    bool pending;  // a commit is under way (commit_start)
};

// ---------------------------------------------------------------- locations
// libpq's connection keywords: a location whose first word is one of them
// followed by '=' is a key=value connection string.
static const char *s_pq_keywords[] = {"host",
                                      "hostaddr",
                                      "port",
                                      "dbname",
                                      "user",
                                      "password",
                                      "passfile",
                                      "require_auth",
                                      "channel_binding",
                                      "connect_timeout",
                                      "client_encoding",
                                      "options",
                                      "application_name",
                                      "fallback_application_name",
                                      "keepalives",
                                      "keepalives_idle",
                                      "keepalives_interval",
                                      "keepalives_count",
                                      "tcp_user_timeout",
                                      "replication",
                                      "gssencmode",
                                      "sslmode",
                                      "sslnegotiation",
                                      "requiressl",
                                      "sslcompression",
                                      "sslcert",
                                      "sslkey",
                                      "sslpassword",
                                      "sslcertmode",
                                      "sslrootcert",
                                      "sslcrl",
                                      "sslcrldir",
                                      "sslsni",
                                      "requirepeer",
                                      "ssl_min_protocol_version",
                                      "ssl_max_protocol_version",
                                      "krbsrvname",
                                      "gsslib",
                                      "gssdelegation",
                                      "service",
                                      "target_session_attrs",
                                      "load_balance_hosts"};

static bool
s_prefix (const char *s, const char *prefix)
{
    return strncmp (s, prefix, strlen (prefix)) == 0;
}

// The length of a URI's scheme and its "://" ("postgresql://": 13), or 0
// when `s` does not start with one.
static size_t
s_scheme_len (const char *s)
{
    size_t n = 0;
    if (!isalpha ((unsigned char)s[0]))
        return 0;
    while (isalnum ((unsigned char)s[n]) || s[n] == '+' || s[n] == '-' || s[n] == '.')
        n++;
    return strncmp (s + n, "://", 3) == 0 ? n + 3 : 0;
}

// True if `s` starts, after blanks, with a libpq keyword and '='.
static bool
s_is_conninfo (const char *s)
{
    while (isspace ((unsigned char)*s))
        s++;
    size_t n = 0;
    while (isalnum ((unsigned char)s[n]) || s[n] == '_')
        n++;
    size_t eq = n;
    while (isspace ((unsigned char)s[eq]))
        eq++;
    if (n == 0 || s[eq] != '=')
        return false;
    for (size_t i = 0; i < sizeof s_pq_keywords / sizeof s_pq_keywords[0]; i++)
        if (strlen (s_pq_keywords[i]) == n && strncmp (s, s_pq_keywords[i], n) == 0)
            return true;
    return false;
}

zl_store_kind_t
zl_store_location_kind (const char *location)
{
    if (s_prefix (location, "postgresql://") || s_prefix (location, "postgres://") ||
        s_is_conninfo (location))
        return ZL_STORE_KIND_POSTGRESQL;
    return s_scheme_len (location) ? ZL_STORE_KIND_UNKNOWN : ZL_STORE_KIND_LMDB;
}

// Append `n` bytes of `s` to out[*len], keeping room for the NUL.
static void
s_put (char *out, size_t size, size_t *len, const char *s, size_t n)
{
    if (*len + 1 >= size)
        return;
    if (n > size - 1 - *len)
        n = size - 1 - *len;
    memcpy (out + *len, s, n);
    *len += n;
    out[*len] = '\0';
}

void
zl_store_location_safe (const char *location, char *out, size_t size)
{
    if (!size)
        return;
    out[0] = '\0';
    size_t len = 0;
    const char *p = location;
    size_t scheme = s_scheme_len (location);
    if (scheme) {
        // scheme://user:password@host...: the password goes
        s_put (out, size, &len, p, scheme);
        p += scheme;
        size_t auth = strcspn (p, "/?#");
        const char *at = NULL;
        for (size_t i = 0; i < auth; i++)
            if (p[i] == '@')
                at = p + i;
        const char *colon = at ? memchr (p, ':', (size_t)(at - p)) : NULL;
        if (colon) {
            s_put (out, size, &len, p, (size_t)(colon - p) + 1);
            s_put (out, size, &len, "***", 3);
            p = at;
        }
    }
    // password=VALUE, as a key=value word or a URI parameter: the value goes
    while (*p) {
        bool word_start =
            p == location || p[-1] == ' ' || p[-1] == '\t' || p[-1] == '?' || p[-1] == '&';
        if (word_start && s_prefix (p, "password")) {
            const char *q = p + 8;
            while (*q == ' ' || *q == '\t')
                q++;
            if (*q == '=') {
                q++;
                while (*q == ' ' || *q == '\t')
                    q++;
                s_put (out, size, &len, p, (size_t)(q - p));
                s_put (out, size, &len, "***", 3);
                if (*q == '\'') { // a quoted value, with \' and \\ escapes
                    for (q++; *q && *q != '\''; q++)
                        if (*q == '\\' && q[1])
                            q++;
                    if (*q)
                        q++;
                } else
                    q += strcspn (q, " \t&#");
                p = q;
                continue;
            }
        }
        s_put (out, size, &len, p, 1);
        p++;
    }
}

// ---------------------------------------------------------------- open/close
// The backends, by the kind of location they serve; a kind whose backend is
// not built in says so.
static const struct {
    zl_store_kind_t kind;
    const zl_store_backend_t *backend;
    const char *missing; // why there is none
} s_backends[] = {
    {ZL_STORE_KIND_LMDB, &zl_store_lmdb, NULL},
#ifdef ZL_HAVE_PG
    {ZL_STORE_KIND_POSTGRESQL, &zl_store_pg, NULL},
#else
    {ZL_STORE_KIND_POSTGRESQL, NULL,
     "this zlane-broker was built without the PostgreSQL store (libpq-dev was missing "
     "when it was built); install libpq-dev and rebuild, or give --data DIR for the LMDB "
     "store"},
#endif
};

zl_store_t *
zl_store_open (const char *location, zl_durability_t mode, uint64_t map_size, char *err,
               size_t errlen)
{
    zl_store_kind_t kind = zl_store_location_kind (location);
    const zl_store_backend_t *be = NULL;
    const char *missing = NULL;
    for (size_t i = 0; i < sizeof s_backends / sizeof s_backends[0]; i++)
        if (s_backends[i].kind == kind) {
            be = s_backends[i].backend;
            missing = s_backends[i].missing;
        }
    if (!be) {
        char safe[512];
        zl_store_location_safe (location, safe, sizeof safe);
        if (missing)
            snprintf (err, errlen, "store %s: %s", safe, missing);
        else
            snprintf (err, errlen,
                      "store %s: unknown kind of store (a directory is an LMDB store; "
                      "postgresql:// names a PostgreSQL database)",
                      safe);
        return NULL;
    }
    void *impl = be->open (location, mode, map_size, err, errlen);
    if (!impl)
        return NULL;
    zl_store_t *self = ZL_NEW (zl_store_t);
    self->be = be;
    self->impl = impl;
    return self;
}

void
zl_store_close (zl_store_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_store_t *self = *self_p;
    (void)zl_store_commit_finish (self, true); // what is under way ends first
    self->be->close (self->impl);
    free (self);
    *self_p = NULL;
}

const char *
zl_store_backend_name (zl_store_t *self)
{
    return self->be->name;
}

// ---------------------------------------------------------------- leadership
void
zl_store_set_candidate (zl_store_t *self, const zl_store_candidate_t *who)
{
    if (self->be->set_candidate)
        self->be->set_candidate (self->impl, who);
}

zl_store_role_t
zl_store_elect (zl_store_t *self, int64_t mono_ms, zl_store_lead_t *out)
{
    if (self->be->elect)
        return self->be->elect (self->impl, mono_ms, out);
    memset (out, 0, sizeof *out);
    out->role = ZL_ROLE_LEADER; // one broker per store: it leads, always
    return ZL_ROLE_LEADER;
}

int64_t
zl_store_elect_due (zl_store_t *self)
{
    return self->be->elect_due ? self->be->elect_due (self->impl) : INT64_MAX;
}

bool
zl_store_exclusive (zl_store_t *self)
{
    return self->be->elect == NULL; // no election: one broker per store
}

zl_store_role_t
zl_store_role (zl_store_t *self)
{
    return self->be->role ? self->be->role (self->impl) : ZL_ROLE_LEADER;
}

const char *
zl_store_recovery_cause (zl_store_t *self)
{
    return self->be->elect ? "leader_change" : "restart";
}

// ---------------------------------------------------------------- fault injection
static zl_store_fault_fn *s_fault_fn;
static void *s_fault_ctx;

void
zl_store_set_fault (zl_store_fault_fn *fn, void *ctx)
{
    s_fault_fn = fn;
    s_fault_ctx = ctx;
}

int
zl_store_fault_ask (zl_store_fault_t where)
{
    zl_store_fault_fn *fn = s_fault_fn;
    return fn ? fn (s_fault_ctx, where) : 0;
}

// The error injected into a write, or 0. It loses the batch it was in, as a
// real one does: that batch's commit fails with it.
static int
s_write_fault (zl_store_t *self)
{
    int rc = s_fault_fn ? s_fault_fn (s_fault_ctx, ZL_STORE_FAULT_WRITE) : 0;
    if (rc)
        *(self->sub ? &self->sub_fault : &self->txn_fault) = rc;
    self->dirty = true;
    return rc;
}

// ---------------------------------------------------------------- batches
zl_store_rc_t
zl_store_begin (zl_store_t *self)
{
    if (self->batch)
        return ZL_STORE_OK;
    self->txn_fault = 0;
    self->dirty = false;
    zl_store_rc_t rc = self->be->begin (self->impl);
    self->batch = rc == ZL_STORE_OK;
    return rc;
}

bool
zl_store_in_batch (zl_store_t *self)
{
    return self->batch;
}

bool
zl_store_batch_dirty (zl_store_t *self)
{
    return self->batch && self->dirty;
}

zl_store_rc_t
zl_store_sub_begin (zl_store_t *self)
{
    zl_store_rc_t rc = zl_store_begin (self);
    if (rc != ZL_STORE_OK)
        return rc;
    self->sub_fault = 0;
    rc = self->be->sub_begin (self->impl);
    self->sub = rc == ZL_STORE_OK;
    return rc;
}

zl_store_rc_t
zl_store_sub_commit (zl_store_t *self)
{
    int fault = self->sub_fault;
    self->sub = false;
    self->sub_fault = 0;
    return self->be->sub_commit (self->impl, fault);
}

void
zl_store_sub_abort (zl_store_t *self)
{
    self->sub = false;
    self->sub_fault = 0;
    self->be->sub_abort (self->impl);
}

zl_store_rc_t
zl_store_commit_finish (zl_store_t *self, bool wait)
{
    if (!self->pending)
        return ZL_STORE_OK;
    zl_store_rc_t rc = self->be->commit_finish (self->impl, wait);
    if (rc == ZL_STORE_PENDING)
        return rc;
    self->pending = false;
    if (rc != ZL_STORE_OK && self->batch) { // the next batch goes with it
        self->batch = self->sub = false;
        self->sub_fault = 0;
        (void)self->be->commit (self->impl, 0);
    }
    return rc;
}

bool
zl_store_use_commit_thread (zl_store_t *self, int64_t interval_us)
{
    return !self->batch && self->be->commit_thread &&
           self->be->commit_thread (self->impl, interval_us > 0 ? interval_us : 0);
}

bool
zl_store_commit_pending (zl_store_t *self)
{
    return self->pending;
}

int
zl_store_commit_fd (zl_store_t *self)
{
    return self->pending ? self->be->commit_fd (self->impl) : -1;
}

// The batch's commit, started (`start` and the backend has the two halves)
// or done; the commit under way before it, waited for first.
static zl_store_rc_t
s_commit (zl_store_t *self, bool start)
{
    if (!self->batch)
        return zl_store_commit_finish (self, true);
    if (start && self->pending && !self->dirty && !self->txn_fault) {
        // nothing written: the batch closes, the commit under way goes on
        self->batch = self->sub = false;
        self->sub_fault = 0;
        (void)self->be->commit_start (self->impl, 0);
        return ZL_STORE_PENDING;
    }
    zl_store_rc_t before = zl_store_commit_finish (self, true);
    if (before != ZL_STORE_OK)
        return before; // the batch was dropped with it
    int fault = self->txn_fault;
    if (!fault && s_fault_fn)
        fault = s_fault_fn (s_fault_ctx, ZL_STORE_FAULT_COMMIT);
    self->batch = self->sub = false;
    self->sub_fault = 0;
    if (!start || !self->be->commit_start)
        return self->be->commit (self->impl, fault);
    zl_store_rc_t rc = self->be->commit_start (self->impl, fault);
    self->pending = rc == ZL_STORE_PENDING;
    return rc;
}

zl_store_rc_t
zl_store_commit (zl_store_t *self)
{
    return s_commit (self, false);
}

zl_store_rc_t
zl_store_commit_start (zl_store_t *self)
{
    return s_commit (self, true);
}

// ---------------------------------------------------------------- writes
zl_store_rc_t
zl_store_put_job (zl_store_t *self, uint64_t id, const zl_job_rec_t *rec)
{
    int rc = s_write_fault (self);
    return rc ? self->be->fail (self->impl, rc, "put job")
              : self->be->put_job (self->impl, id, rec);
}

zl_store_rc_t
zl_store_put_state (zl_store_t *self, uint64_t id, const zl_state_rec_t *rec)
{
    int rc = s_write_fault (self);
    return rc ? self->be->fail (self->impl, rc, "put state")
              : self->be->put_state (self->impl, id, rec);
}

zl_store_rc_t
zl_store_del_job (zl_store_t *self, uint64_t id, unsigned priority)
{
    int rc = s_write_fault (self);
    return rc ? self->be->fail (self->impl, rc, "delete job")
              : self->be->del_job (self->impl, id, priority);
}

zl_store_rc_t
zl_store_put_idem (zl_store_t *self, const char *tenant, const char *key, const zl_idem_rec_t *rec)
{
    int rc = s_write_fault (self);
    return rc ? self->be->fail (self->impl, rc, "put idem")
              : self->be->put_idem (self->impl, tenant, key, rec);
}

zl_store_rc_t
zl_store_set_next_id (zl_store_t *self, uint64_t next_id)
{
    int rc = s_write_fault (self);
    return rc ? self->be->fail (self->impl, rc, "put next id")
              : self->be->set_next_id (self->impl, next_id);
}

// ---------------------------------------------------------------- reads and the rest
zl_store_rc_t
zl_store_get_job (zl_store_t *self, uint64_t id, unsigned priority, zl_arena_t *arena,
                  zl_job_rec_t *out)
{
    return self->be->get_job (self->impl, id, priority, arena, out);
}

zl_store_rc_t
zl_store_get_state (zl_store_t *self, uint64_t id, zl_arena_t *arena, zl_state_rec_t *out)
{
    return self->be->get_state (self->impl, id, arena, out);
}

zl_store_rc_t
zl_store_get_idem (zl_store_t *self, const char *tenant, const char *key, zl_idem_rec_t *out)
{
    return self->be->get_idem (self->impl, tenant, key, out);
}

size_t
zl_store_prune_idem (zl_store_t *self, int64_t now_ms, const zl_idem_policy_t *policy, size_t max)
{
    size_t n =
        self->batch && !self->sub ? self->be->prune_idem (self->impl, now_ms, policy, max) : 0;
    if (n)
        self->dirty = true;
    return n;
}

uint32_t
zl_store_room_retry_ms (zl_store_t *self)
{
    return self->be->room_retry_ms ? self->be->room_retry_ms (self->impl) : ZL_STORE_ROOM_RETRY_MS;
}

void
zl_store_measure_room (zl_store_t *self)
{
    if (self->be->measure_room)
        self->be->measure_room (self->impl);
}

bool
zl_store_has_room (zl_store_t *self, size_t bytes)
{
    return self->be->has_room (self->impl, bytes);
}

int
zl_store_recover (zl_store_t *self, zl_store_job_fn *fn, void *ctx, uint64_t *next_id, char *err,
                  size_t errlen)
{
    return self->be->recover (self->impl, fn, ctx, next_id, err, errlen);
}

void
zl_store_stats (zl_store_t *self, zl_store_stats_t *st)
{
    self->be->stats (self->impl, st);
    if (!self->be->elect) { // a store one broker holds alone: it leads, it answers
        st->role = ZL_ROLE_LEADER;
        st->reachable = 1;
    }
}
