#include "batches.h"

#include "u64map.h"
#include "zl_alloc.h"

#include <czmq.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t *v;
    size_t n, cap;
} ids_t;

struct zl_batch {
    char *id, *tenant, *lane;
    uint64_t job_id; // its record job (and callback)
    bool callback, closed, settled, cancelled;
    bool dirty, due; // listed in self->dirty / self->due
    uint64_t joined, acked, dead, cancelled_n;
    zl_u64map_t *classes; // member id -> (void *)(class + 1), settling only
    ids_t lost_dead, lost_cancelled;
    int64_t opened_at_ms, closed_at_ms, settled_at_ms;
};

struct _zl_batches_t {
    zhashx_t *by_id;      // id -> zl_batch_t (owns it)
    zl_u64map_t *records; // record job id -> zl_batch_t
    zl_u64map_t *members; // member id -> zl_batch_t (settling batches only)
    zl_batch_t **dirty, **due;
    size_t n_dirty, cap_dirty, n_due, cap_due;
    // restore: members met before their batch
    struct orphan {
        char *id;
        uint64_t member;
        zl_batch_class_t cls;
    } * orphans;
    size_t n_orphans, cap_orphans;
};

static void
s_ids_push (ids_t *a, uint64_t v)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 16;
        a->v = zl_realloc (a->v, a->cap * sizeof *a->v);
    }
    a->v[a->n++] = v;
}

static void
s_batch_free (void **item)
{
    zl_batch_t *b = *item;
    if (!b)
        return;
    zl_u64map_destroy (&b->classes);
    free (b->lost_dead.v);
    free (b->lost_cancelled.v);
    free (b->id);
    free (b->tenant);
    free (b->lane);
    free (b);
    *item = NULL;
}

zl_batches_t *
zl_batches_new (void)
{
    zl_batches_t *self = ZL_NEW (zl_batches_t);
    self->by_id = zhashx_new ();
    zhashx_set_destructor (self->by_id, s_batch_free);
    self->records = zl_u64map_new ();
    self->members = zl_u64map_new ();
    return self;
}

void
zl_batches_destroy (zl_batches_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_batches_t *self = *self_p;
    zhashx_destroy (&self->by_id);
    zl_u64map_destroy (&self->records);
    zl_u64map_destroy (&self->members);
    free (self->dirty);
    free (self->due);
    for (size_t i = 0; i < self->n_orphans; i++)
        free (self->orphans[i].id);
    free (self->orphans);
    free (self);
    *self_p = NULL;
}

bool
zl_batches_id_valid (const char *id)
{
    size_t n = strlen (id);
    if (n == 0 || n > ZL_BATCH_ID_MAX)
        return false;
    bool digits = true;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        bool digit = c >= '0' && c <= '9';
        if (!digit && !(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && c != '.' && c != '_' &&
            c != ':' && c != '-')
            return false;
        digits = digits && digit;
    }
    return !digits;
}

static void
s_list (zl_batch_t ***list, size_t *n, size_t *cap, zl_batch_t *b)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        *list = zl_realloc (*list, *cap * sizeof **list);
    }
    (*list)[(*n)++] = b;
}

static void
s_dirty (zl_batches_t *self, zl_batch_t *b)
{
    if (!b->dirty && !b->settled) {
        b->dirty = true;
        s_list (&self->dirty, &self->n_dirty, &self->cap_dirty, b);
    }
}

static uint64_t
s_pending (const zl_batch_t *b)
{
    uint64_t done = b->acked + b->dead + b->cancelled_n;
    return b->joined > done ? b->joined - done : 0;
}

// Due to settle: closed, nothing pending, not settled or cancelled.
static void
s_check_due (zl_batches_t *self, zl_batch_t *b)
{
    if (b->closed && !b->settled && !b->cancelled && !b->due && s_pending (b) == 0) {
        b->due = true;
        s_list (&self->due, &self->n_due, &self->cap_due, b);
    }
}

static zl_batch_t *
s_new (zl_batches_t *self, const char *id, uint64_t job_id, const char *tenant, const char *lane,
       bool callback)
{
    zl_batch_t *b = ZL_NEW (zl_batch_t);
    b->id = zl_strdup (id);
    b->tenant = zl_strdup (tenant);
    b->lane = zl_strdup (lane);
    b->job_id = job_id;
    b->callback = callback;
    b->classes = zl_u64map_new ();
    zhashx_update (self->by_id, b->id, b);
    zl_u64map_put (self->records, job_id, b);
    return b;
}

zl_batch_t *
zl_batches_open (zl_batches_t *self, const char *id, uint64_t job_id, const char *tenant,
                 const char *lane, bool callback, int64_t opened_at_ms)
{
    zl_batch_t *b = s_new (self, id, job_id, tenant, lane, callback);
    b->opened_at_ms = opened_at_ms;
    s_dirty (self, b);
    return b;
}

zl_batch_t *
zl_batches_find (zl_batches_t *self, const char *id)
{
    return zhashx_lookup (self->by_id, id);
}

zl_batch_t *
zl_batches_of_record (zl_batches_t *self, uint64_t job_id)
{
    return zl_u64map_get (self->records, job_id);
}

const char *
zl_batch_id (const zl_batch_t *b)
{
    return b->id;
}

uint64_t
zl_batch_job (const zl_batch_t *b)
{
    return b->job_id;
}

const char *
zl_batch_tenant (const zl_batch_t *b)
{
    return b->tenant;
}

bool
zl_batch_closed (const zl_batch_t *b)
{
    return b->closed;
}

bool
zl_batch_settled (const zl_batch_t *b)
{
    return b->settled;
}

bool
zl_batch_cancelled (const zl_batch_t *b)
{
    return b->cancelled;
}

bool
zl_batch_has_callback (const zl_batch_t *b)
{
    return b->callback;
}

void
zl_batches_join (zl_batches_t *self, zl_batch_t *b, uint64_t member)
{
    b->joined++;
    zl_u64map_put (b->classes, member, (void *)(uintptr_t)(ZL_BATCH_PENDING + 1));
    zl_u64map_put (self->members, member, b);
    s_dirty (self, b);
}

static uint64_t *
s_count (zl_batch_t *b, zl_batch_class_t cls)
{
    switch (cls) {
    case ZL_BATCH_ACKED: return &b->acked;
    case ZL_BATCH_DEAD: return &b->dead;
    case ZL_BATCH_CANCELLED: return &b->cancelled_n;
    default: return NULL;
    }
}

void
zl_batches_moved (zl_batches_t *self, uint64_t member, zl_batch_class_t cls)
{
    zl_batch_t *b = zl_u64map_get (self->members, member);
    if (!b)
        return;
    zl_batch_class_t was = (zl_batch_class_t)((uintptr_t)zl_u64map_get (b->classes, member) - 1);
    if (was == cls)
        return;
    uint64_t *from = s_count (b, was), *to = s_count (b, cls);
    if (cls == ZL_BATCH_GONE) {
        // deleted: it stays counted as what it was, its id on the record
        if (was == ZL_BATCH_DEAD)
            s_ids_push (&b->lost_dead, member);
        else if (was == ZL_BATCH_CANCELLED)
            s_ids_push (&b->lost_cancelled, member);
        else if (was == ZL_BATCH_PENDING) // (not a path jobs.c takes) counted dead
            s_ids_push (&b->lost_dead, member), b->dead++;
        zl_u64map_remove (b->classes, member);
        zl_u64map_remove (self->members, member);
        s_dirty (self, b);
        s_check_due (self, b);
        return;
    }
    if (from)
        (*from)--;
    if (to)
        (*to)++;
    if (cls == ZL_BATCH_ACKED) { // final: nothing more to know of it
        zl_u64map_remove (b->classes, member);
        zl_u64map_remove (self->members, member);
    } else
        zl_u64map_put (b->classes, member, (void *)(uintptr_t)(cls + 1));
    s_check_due (self, b);
}

void
zl_batches_close (zl_batches_t *self, zl_batch_t *b, int64_t at_ms)
{
    if (b->closed)
        return;
    b->closed = true;
    b->closed_at_ms = at_ms;
    s_dirty (self, b);
    s_check_due (self, b);
}

static void
s_drop_members (zl_batches_t *self, zl_batch_t *b)
{
    size_t cursor = 0;
    uint64_t member;
    while (zl_u64map_next (b->classes, &cursor, &member))
        zl_u64map_remove (self->members, member);
    zl_u64map_destroy (&b->classes);
    b->classes = zl_u64map_new ();
}

void
zl_batches_cancelled (zl_batches_t *self, zl_batch_t *b)
{
    b->cancelled = true;
    s_drop_members (self, b);
}

static void
s_unlist (zl_batch_t **list, size_t *n, zl_batch_t *b)
{
    for (size_t i = 0; i < *n; i++)
        if (list[i] == b) {
            list[i] = list[--*n];
            return;
        }
}

void
zl_batches_forget (zl_batches_t *self, uint64_t job_id)
{
    zl_batch_t *b = zl_u64map_remove (self->records, job_id);
    if (!b)
        return;
    s_drop_members (self, b);
    if (b->dirty)
        s_unlist (self->dirty, &self->n_dirty, b);
    if (b->due)
        s_unlist (self->due, &self->n_due, b);
    zhashx_delete (self->by_id, b->id);
}

void
zl_batches_take_changes (zl_batches_t *self, zl_arena_t *arena, zl_batch_t ***dirty,
                         size_t *n_dirty, zl_batch_t ***due, size_t *n_due)
{
    *n_dirty = self->n_dirty;
    *dirty = zl_arena_alloc (arena, (self->n_dirty + 1) * sizeof **dirty);
    for (size_t i = 0; i < self->n_dirty; i++) {
        (*dirty)[i] = self->dirty[i];
        self->dirty[i]->dirty = false;
    }
    // due when listed, and still (a dead job may have been redriven since)
    *n_due = 0;
    *due = zl_arena_alloc (arena, (self->n_due + 1) * sizeof **due);
    for (size_t i = 0; i < self->n_due; i++) {
        zl_batch_t *b = self->due[i];
        b->due = false;
        if (b->closed && !b->settled && !b->cancelled && s_pending (b) == 0)
            (*due)[(*n_due)++] = b;
    }
    self->n_dirty = self->n_due = 0;
}

static const uint64_t *
s_copy (zl_arena_t *arena, const ids_t *a)
{
    uint64_t *v = zl_arena_alloc (arena, (a->n + 1) * sizeof *v);
    if (a->n)
        memcpy (v, a->v, a->n * sizeof *v);
    return v;
}

void
zl_batches_progress (const zl_batch_t *b, zl_arena_t *arena, zl_batch_rec_t *out)
{
    *out = (zl_batch_rec_t){.closed = b->closed,
                            .joined = b->joined,
                            .n_lost_dead = b->lost_dead.n,
                            .lost_dead = s_copy (arena, &b->lost_dead),
                            .n_lost_cancelled = b->lost_cancelled.n,
                            .lost_cancelled = s_copy (arena, &b->lost_cancelled),
                            .opened_at_ms = b->opened_at_ms,
                            .closed_at_ms = b->closed_at_ms};
}

static int
s_cmp_u64 (const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

// The failed members (dead, cancelled, deleted), ascending, at most
// ZL_BATCH_FAILED_MAX of them in `arena`; how many more in *more.
static const uint64_t *
s_failed (const zl_batch_t *b, zl_arena_t *arena, size_t *n, uint64_t *more)
{
    size_t total = b->lost_dead.n + b->lost_cancelled.n + zl_u64map_size (b->classes);
    uint64_t *all = zl_malloc ((total + 1) * sizeof *all);
    size_t k = 0;
    for (size_t i = 0; i < b->lost_dead.n; i++)
        all[k++] = b->lost_dead.v[i];
    for (size_t i = 0; i < b->lost_cancelled.n; i++)
        all[k++] = b->lost_cancelled.v[i];
    size_t cursor = 0;
    uint64_t member;
    void *v;
    while ((v = zl_u64map_next (b->classes, &cursor, &member))) {
        zl_batch_class_t cls = (zl_batch_class_t)((uintptr_t)v - 1);
        if (cls == ZL_BATCH_DEAD || cls == ZL_BATCH_CANCELLED)
            all[k++] = member;
    }
    if (k)
        qsort (all, k, sizeof *all, s_cmp_u64);
    *n = k < ZL_BATCH_FAILED_MAX ? k : ZL_BATCH_FAILED_MAX;
    *more = k - *n;
    uint64_t *out = zl_arena_alloc (arena, (*n + 1) * sizeof *out);
    if (*n)
        memcpy (out, all, *n * sizeof *out);
    free (all);
    return out;
}

void
zl_batches_settle (zl_batches_t *self, zl_batch_t *b, int64_t at_ms, zl_arena_t *arena,
                   zl_batch_rec_t *out)
{
    zl_batches_progress (b, arena, out);
    out->acked = b->acked;
    out->dead = b->dead;
    out->cancelled = b->cancelled_n;
    out->failed = s_failed (b, arena, &out->n_failed, &out->failed_more);
    out->settled_at_ms = at_ms;
    b->settled = true;
    b->settled_at_ms = at_ms;
    s_drop_members (self, b);
}

void
zl_batches_info_settled (const char *id, const char *tenant, const char *lane, uint64_t job_id,
                         bool callback, const zl_batch_rec_t *summary, zl_batch_info_t *out)
{
    *out = (zl_batch_info_t){.batch_id = id,
                             .found = true,
                             .tenant = tenant,
                             .lane = lane,
                             .job_id = job_id,
                             .callback = callback,
                             .closed = true,
                             .settled = true,
                             .jobs = summary->joined,
                             .acked = summary->acked,
                             .dead = summary->dead,
                             .cancelled_jobs = summary->cancelled,
                             .n_failed = summary->n_failed,
                             .failed = summary->failed,
                             .failed_more = summary->failed_more,
                             .opened_at_ms = (uint64_t)summary->opened_at_ms,
                             .closed_at_ms = (uint64_t)summary->closed_at_ms,
                             .settled_at_ms = (uint64_t)summary->settled_at_ms};
}

void
zl_batches_info (const zl_batch_t *b, const zl_batch_rec_t *summary, zl_arena_t *arena,
                 zl_batch_info_t *out)
{
    if (summary) {
        zl_batches_info_settled (b->id, b->tenant, b->lane, b->job_id, b->callback, summary, out);
        return;
    }
    *out = (zl_batch_info_t){.batch_id = b->id,
                             .found = true,
                             .tenant = b->tenant,
                             .lane = b->lane,
                             .job_id = b->job_id,
                             .callback = b->callback,
                             .closed = b->closed,
                             .settled = b->settled,
                             .cancelled = b->cancelled};
    out->jobs = b->joined;
    out->acked = b->acked;
    out->dead = b->dead;
    out->cancelled_jobs = b->cancelled_n;
    out->pending = s_pending (b);
    out->failed = s_failed (b, arena, &out->n_failed, &out->failed_more);
    out->opened_at_ms = (uint64_t)b->opened_at_ms;
    out->closed_at_ms = (uint64_t)b->closed_at_ms;
    out->settled_at_ms = (uint64_t)b->settled_at_ms;
}

zl_batch_t *
zl_batches_restore (zl_batches_t *self, const char *id, uint64_t job_id, const char *tenant,
                    const char *lane, bool callback, const zl_batch_rec_t *p)
{
    zl_batch_t *b = s_new (self, id, job_id, tenant, lane, callback);
    if (p) {
        b->closed = p->closed;
        b->joined = p->joined;
        for (size_t i = 0; i < p->n_lost_dead; i++)
            s_ids_push (&b->lost_dead, p->lost_dead[i]);
        for (size_t i = 0; i < p->n_lost_cancelled; i++)
            s_ids_push (&b->lost_cancelled, p->lost_cancelled[i]);
        b->opened_at_ms = p->opened_at_ms;
        b->closed_at_ms = p->closed_at_ms;
    }
    return b;
}

void
zl_batches_restore_settled (zl_batches_t *self, const char *id, uint64_t job_id, const char *tenant,
                            const char *lane, bool callback, bool cancelled)
{
    zl_batch_t *b = s_new (self, id, job_id, tenant, lane, callback);
    b->closed = true;
    b->settled = !cancelled;
    b->cancelled = cancelled;
}

void
zl_batches_restore_member (zl_batches_t *self, const char *id, uint64_t member,
                           zl_batch_class_t cls)
{
    if (self->n_orphans == self->cap_orphans) {
        self->cap_orphans = self->cap_orphans ? self->cap_orphans * 2 : 64;
        self->orphans = zl_realloc (self->orphans, self->cap_orphans * sizeof *self->orphans);
    }
    self->orphans[self->n_orphans++] = (struct orphan){zl_strdup (id), member, cls};
}

size_t
zl_batches_restore_done (zl_batches_t *self)
{
    size_t lost = 0;
    for (size_t i = 0; i < self->n_orphans; i++) {
        struct orphan *o = &self->orphans[i];
        zl_batch_t *b = zhashx_lookup (self->by_id, o->id);
        if (b && !b->settled && !b->cancelled && o->cls != ZL_BATCH_ACKED) {
            zl_u64map_put (b->classes, o->member, (void *)(uintptr_t)(o->cls + 1));
            zl_u64map_put (self->members, o->member, b);
            uint64_t *count = s_count (b, o->cls);
            if (count)
                (*count)++;
        } else if (!b)
            lost++;
        free (o->id);
    }
    free (self->orphans);
    self->orphans = NULL;
    self->n_orphans = self->cap_orphans = 0;
    // what is not among the members kept was acked (and deleted), or deleted
    // while dead or cancelled (on the record)
    for (zl_batch_t *b = zhashx_first (self->by_id); b; b = zhashx_next (self->by_id)) {
        if (b->settled || b->cancelled)
            continue;
        b->dead += b->lost_dead.n;
        b->cancelled_n += b->lost_cancelled.n;
        uint64_t known = b->dead + b->cancelled_n;
        size_t cursor = 0;
        void *v;
        while ((v = zl_u64map_next (b->classes, &cursor, NULL)))
            known += (zl_batch_class_t)((uintptr_t)v - 1) == ZL_BATCH_PENDING;
        b->acked = b->joined > known ? b->joined - known : 0;
        s_check_due (self, b);
    }
    return lost;
}

size_t
zl_batches_count (zl_batches_t *self)
{
    return zhashx_size (self->by_id);
}

size_t
zl_batches_members (zl_batches_t *self)
{
    return zl_u64map_size (self->members);
}

bool
zl_batches_pending_changes (const zl_batches_t *self)
{
    return self->n_dirty || self->n_due;
}
