#include "schedules.h"

#include "cron.h"
#include "log.h"
#include "text.h"
#include "zl_alloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIP_GRACE_MS 60000 // skip: a due tick younger than this is still enqueued
#define MAX_WALK 200000     // ticks walked at a time when catching up a long gap

typedef struct {
    uint64_t id; // its record in the store
    char *name, *cron_text, *tenant, *lane;
    uint8_t *payload;
    size_t payload_len;
    zl_header_t *headers;
    size_t n_headers;
    zl_cron_t cron;
    bool catch_up, paused;
    uint32_t catch_up_max;
    int64_t created_at_ms, last_tick_ms, next_tick_ms; // wall clock
} sched_t;

struct _zl_schedules_t {
    zl_schedules_env_t env;
    sched_t **all;
    size_t n, cap;
    zl_arena_t *scratch;
    uint64_t fired, skipped, failed;
};

zl_schedules_t *
zl_schedules_new (const zl_schedules_env_t *env)
{
    zl_schedules_t *self = ZL_NEW (zl_schedules_t);
    self->env = *env;
    self->scratch = zl_arena_new (4096);
    return self;
}

static void
s_free (sched_t *s)
{
    free (s->name);
    free (s->cron_text);
    free (s->tenant);
    free (s->lane);
    free (s->payload);
    for (size_t i = 0; i < s->n_headers; i++) {
        free ((char *)s->headers[i].key);
        free ((char *)s->headers[i].value);
    }
    free (s->headers);
    free (s);
}

void
zl_schedules_destroy (zl_schedules_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_schedules_t *self = *self_p;
    for (size_t i = 0; i < self->n; i++)
        s_free (self->all[i]);
    free (self->all);
    zl_arena_destroy (&self->scratch);
    free (self);
    *self_p = NULL;
}

static sched_t *
s_find (zl_schedules_t *self, const char *name, size_t *at)
{
    for (size_t i = 0; i < self->n; i++)
        if (!strcmp (self->all[i]->name, name)) {
            if (at)
                *at = i;
            return self->all[i];
        }
    return NULL;
}

static bool
s_name_ok (const char *name)
{
    size_t n = name ? strlen (name) : 0;
    if (n == 0 || n > 128)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == ':' || c == '-'))
            return false;
    }
    return true;
}

// The next tick after the last one (or after its creation).
static void
s_plan (sched_t *s)
{
    int64_t from = s->last_tick_ms > s->created_at_ms ? s->last_tick_ms : s->created_at_ms;
    s->next_tick_ms = zl_cron_next (&s->cron, from);
}

// Write the schedule's record and state into the turn's batch.
static zl_store_rc_t
s_write (zl_schedules_t *self, const sched_t *s, bool record)
{
    zl_store_rc_t rc = ZL_STORE_OK;
    if (record) {
        zl_schedule_rec_t sr = {s->name, s->cron_text, s->catch_up, s->catch_up_max,
                                s->created_at_ms};
        zl_job_rec_t rec = {.tenant = s->tenant,
                            .lane = s->lane,
                            .payload = {s->payload, s->payload_len},
                            .idempotency_key = "",
                            .n_headers = s->n_headers,
                            .headers = s->headers,
                            .enqueued_at_ms = s->created_at_ms,
                            .batch = "",
                            .batch_self = "",
                            .ordering_key = "",
                            .schedule = &sr};
        rc = zl_store_put_job (self->env.store, s->id, &rec);
    }
    if (rc == ZL_STORE_OK) {
        zl_state_rec_t st = {.state = ZL_JOB_WAITING,
                             .leased_to = "",
                             .schedule_last_tick_ms = s->last_tick_ms,
                             .schedule_paused = s->paused};
        rc = zl_store_put_state (self->env.store, s->id, &st);
    }
    return rc;
}

// A new schedule from its parts (strings copied).
static sched_t *
s_make (const zl_schedule_info_t *in, const zl_cron_t *cron)
{
    sched_t *s = ZL_NEW (sched_t);
    s->name = zl_strdup (in->name);
    s->cron_text = zl_strdup (in->cron);
    s->tenant = zl_strdup (in->tenant);
    s->lane = zl_strdup (in->lane);
    s->payload_len = in->payload.len;
    s->payload = zl_malloc (in->payload.len ? in->payload.len : 1);
    if (in->payload.len)
        memcpy (s->payload, in->payload.data, in->payload.len);
    s->n_headers = in->n_headers;
    s->headers = zl_calloc (in->n_headers ? in->n_headers : 1, sizeof *s->headers);
    for (size_t i = 0; i < in->n_headers; i++)
        s->headers[i] =
            (zl_header_t){zl_strdup (in->headers[i].key), zl_strdup (in->headers[i].value)};
    s->cron = *cron;
    s->catch_up = in->catch_up;
    s->catch_up_max = in->catch_up_max ? in->catch_up_max : ZL_SCHEDULE_CATCH_UP_DEFAULT;
    s->paused = in->paused;
    return s;
}

int
zl_schedules_add (zl_schedules_t *self, const zl_schedule_info_t *in, zl_now_t now, char *err,
                  size_t errlen)
{
    zl_arena_reset (self->scratch);
    const char *bad;
    zl_cron_t cron;
    if (!s_name_ok (in->name)) {
        snprintf (err, errlen, "a schedule's name is 1 to 128 of [A-Za-z0-9._:-]");
        return -1;
    }
    if (zl_cron_parse (in->cron ? in->cron : "", &cron, err, errlen) != 0)
        return -1;
    if ((bad = zl_text_name_problem (self->scratch, in->tenant, ZL_MAX_NAME, false))) {
        snprintf (err, errlen, "field 'tenant' %s", bad);
        return -1;
    }
    if (!in->lane || !zl_lanes_find (self->env.lanes, in->lane)) {
        snprintf (err, errlen, "lane '%s' is not declared", in->lane ? in->lane : "");
        return -1;
    }
    if (in->n_headers > ZL_MAX_HEADERS || in->catch_up_max > ZL_SCHEDULE_CATCH_UP_MAX) {
        snprintf (err, errlen, "at most %d headers and a catch_up_max of at most %d",
                  ZL_MAX_HEADERS, ZL_SCHEDULE_CATCH_UP_MAX);
        return -1;
    }
    if (zl_cron_next (&cron, now.wall_ms) < 0) {
        snprintf (err, errlen, "cron: '%s' never fires (no such day in 8 years)", in->cron);
        return -1;
    }
    sched_t *s = s_make (in, &cron);
    size_t at;
    sched_t *old = s_find (self, in->name, &at);
    if (old) { // replaced: same record, and its ticks so far are done
        s->id = old->id;
        s->created_at_ms = old->created_at_ms;
        s->last_tick_ms = old->last_tick_ms;
        s->paused = old->paused || in->paused;
    } else {
        s->id = zl_jobs_take_id (self->env.jobs);
        s->created_at_ms = now.wall_ms;
    }
    if (s_write (self, s, true) != ZL_STORE_OK) {
        snprintf (err, errlen, "the store refused the schedule's record");
        s_free (s);
        return -1;
    }
    s_plan (s);
    if (old) {
        s_free (old);
        self->all[at] = s;
    } else {
        if (self->n == self->cap) {
            self->cap = self->cap ? self->cap * 2 : 8;
            self->all = zl_realloc (self->all, self->cap * sizeof *self->all);
        }
        self->all[self->n++] = s;
    }
    zl_info ("schedules", "schedule %s %s: '%s', lane %s, tenant %s", s->name,
             old ? "replaced" : "added", s->cron_text, s->lane, s->tenant);
    return 0;
}

void
zl_schedules_add_config (zl_schedules_t *self, const zl_broker_config_t *cfg, zl_now_t now)
{
    for (size_t i = 0; i < cfg->n_schedules; i++) {
        const zl_schedule_config_t *c = &cfg->schedules[i];
        const char *payload = c->payload ? c->payload : "";
        zl_schedule_info_t s = {.name = c->name,
                                .cron = c->cron ? c->cron : "",
                                .tenant = c->tenant ? c->tenant : "",
                                .lane = c->lane ? c->lane : "",
                                .payload = {(const uint8_t *)payload, strlen (payload)},
                                .catch_up = c->catch_up,
                                .catch_up_max = c->catch_up_max};
        char err[256];
        if (zl_schedules_add (self, &s, now, err, sizeof err) != 0)
            zl_error ("schedules", "config schedule %s: %s: not scheduled", c->name, err);
    }
}

int
zl_schedules_remove (zl_schedules_t *self, const char *name)
{
    size_t at;
    sched_t *s = name ? s_find (self, name, &at) : NULL;
    if (!s)
        return -1;
    (void)zl_store_del_job (self->env.store, s->id, ZL_PRIORITY_DEFAULT); // a schedule has none
    self->all[at] = self->all[--self->n];
    zl_info ("schedules", "schedule %s removed", s->name);
    s_free (s);
    return 0;
}

int
zl_schedules_pause (zl_schedules_t *self, const char *name, bool paused, zl_now_t now)
{
    sched_t *s = name ? s_find (self, name, NULL) : NULL;
    if (!s)
        return -1;
    if (s->paused && !paused && now.wall_ms > s->last_tick_ms)
        s->last_tick_ms = now.wall_ms; // the ticks while it was paused are not caught up
    s->paused = paused;
    s_plan (s);
    (void)s_write (self, s, false);
    zl_info ("schedules", "schedule %s %s", s->name, paused ? "paused" : "resumed");
    return 0;
}

static int
s_by_name (const void *a, const void *b)
{
    return strcmp ((*(sched_t *const *)a)->name, (*(sched_t *const *)b)->name);
}

size_t
zl_schedules_list (zl_schedules_t *self, zl_arena_t *arena, zl_now_t now, zl_schedule_info_t **out)
{
    (void)now;
    if (self->n)
        qsort (self->all, self->n, sizeof *self->all, s_by_name);
    *out = zl_arena_alloc (arena, (self->n ? self->n : 1) * sizeof **out);
    for (size_t i = 0; i < self->n; i++) {
        const sched_t *s = self->all[i];
        (*out)[i] = (zl_schedule_info_t){.name = s->name,
                                         .cron = s->cron_text,
                                         .tenant = s->tenant,
                                         .lane = s->lane,
                                         .payload = {s->payload, s->payload_len},
                                         .n_headers = s->n_headers,
                                         .headers = s->headers,
                                         .catch_up = s->catch_up,
                                         .catch_up_max = s->catch_up_max,
                                         .paused = s->paused,
                                         .last_tick_ms = (uint64_t)s->last_tick_ms,
                                         .next_tick_ms =
                                             s->next_tick_ms > 0 ? (uint64_t)s->next_tick_ms : 0};
    }
    return self->n;
}

void
zl_schedules_restore (zl_schedules_t *self, uint64_t id, const zl_job_rec_t *rec,
                      const zl_state_rec_t *st)
{
    const zl_schedule_rec_t *sr = rec->schedule;
    zl_cron_t cron;
    char err[160];
    if (zl_cron_parse (sr->cron, &cron, err, sizeof err) != 0) {
        zl_warn ("schedules", "stored schedule %s: %s: ignored", sr->name, err);
        return;
    }
    zl_schedule_info_t in = {.name = sr->name,
                             .cron = sr->cron,
                             .tenant = rec->tenant,
                             .lane = rec->lane,
                             .payload = rec->payload,
                             .n_headers = rec->n_headers,
                             .headers = rec->headers,
                             .catch_up = sr->catch_up,
                             .catch_up_max = sr->catch_up_max,
                             .paused = st && st->schedule_paused};
    sched_t *s = s_make (&in, &cron);
    s->id = id;
    s->created_at_ms = sr->created_at_ms;
    s->last_tick_ms = st ? st->schedule_last_tick_ms : 0;
    s_plan (s);
    if (self->n == self->cap) {
        self->cap = self->cap ? self->cap * 2 : 8;
        self->all = zl_realloc (self->all, self->cap * sizeof *self->all);
    }
    self->all[self->n++] = s;
}

// Enqueue the job of `s`'s tick `tick`. Returns 0, or -1 if it could not.
static int
s_enqueue (zl_schedules_t *self, sched_t *s, int64_t tick, zl_now_t now)
{
    const zl_schedules_env_t *e = &self->env;
    zl_arena_reset (self->scratch);
    const char *key = zl_arena_printf (self->scratch, "cron:%s:%" PRId64, s->name, tick);
    zl_idem_rec_t seen;
    if (zl_store_get_idem (e->store, s->tenant, key, &seen) == ZL_STORE_OK)
        return 0; // enqueued before (its last tick's write was lost?): once only
    zl_lane_t *lane = zl_lanes_find (e->lanes, s->lane);
    if (!lane) {
        zl_warn ("schedules",
                 "schedule %s: lane %s is no longer declared: tick %" PRId64 " not enqueued",
                 s->name, s->lane, tick);
        return -1;
    }
    zl_header_t *h = zl_arena_alloc (self->scratch, (s->n_headers + 2) * sizeof *h);
    if (s->n_headers)
        memcpy (h, s->headers, s->n_headers * sizeof *h);
    h[s->n_headers] = (zl_header_t){"zlane-schedule", s->name};
    h[s->n_headers + 1] =
        (zl_header_t){"zlane-cron-tick", zl_arena_printf (self->scratch, "%" PRId64, tick)};
    zl_job_spec_t spec = {.tenant = s->tenant,
                          .lane = s->lane,
                          .payload = {s->payload, s->payload_len},
                          .idempotency_key = key,
                          .n_headers = s->n_headers + 2,
                          .headers = h,
                          .batch = "",
                          .ordering_key = ""};
    zl_flow_t *flow = zl_sched_flow (e->sched, lane, zl_lanes_tenant (e->lanes, s->tenant));
    uint64_t id = zl_jobs_take_id (e->jobs);
    if (zl_store_sub_begin (e->store) != ZL_STORE_OK)
        return -1;
    if (zl_jobs_stage (e->jobs, id, &spec, &lane->cfg, now) != ZL_STORE_OK ||
        zl_store_sub_commit (e->store) != ZL_STORE_OK) {
        zl_store_sub_abort (e->store);
        zl_warn ("schedules", "schedule %s: the store refused tick %" PRId64 "'s job", s->name,
                 tick);
        return -1;
    }
    // a crash before the commit would enqueue this tick again: its job must not
    // have run by then (one job per tick)
    zl_jobs_accept (e->jobs, id, &spec, flow, now)->after_commit = 1;
    zl_debug ("schedules", "schedule %s: tick %" PRId64 " enqueued as job %" PRIu64, s->name, tick,
              id);
    return 0;
}

// The due ticks of `s` by `now`: enqueue those the policy keeps, record the last.
static size_t
s_fire_one (zl_schedules_t *self, sched_t *s, zl_now_t now)
{
    uint32_t keep = s->catch_up ? s->catch_up_max : 1;
    int64_t *last = zl_malloc (keep * sizeof *last);
    uint64_t due = 0;
    int64_t t = s->next_tick_ms, latest = 0;
    for (uint32_t walked = 0; t >= 0 && t <= now.wall_ms; walked++) {
        if (walked == MAX_WALK) { // a long gap of frequent ticks: jump near now
            int64_t near = zl_cron_next (&s->cron, now.wall_ms - 86400000LL);
            if (near > t) {
                due += 1; // (approximate: the skipped stretch counts as one)
                t = near;
                walked = 0;
                continue;
            }
        }
        last[due % keep] = t;
        latest = t;
        due++;
        t = zl_cron_next (&s->cron, t);
    }
    if (!due) {
        free (last);
        return 0;
    }
    // the `keep` latest, oldest first; with skip, only one young enough
    size_t fired = 0, failed = 0;
    uint64_t first = due > keep ? due - keep : 0;
    for (uint64_t i = first; i < due; i++) {
        int64_t tick = last[i % keep];
        if (!s->catch_up && now.wall_ms - tick >= SKIP_GRACE_MS)
            continue;
        if (s_enqueue (self, s, tick, now) == 0) {
            fired++;
            self->fired++;
        } else {
            failed++;
            self->failed++;
        }
    }
    free (last);
    self->skipped += due - fired - failed;
    s->last_tick_ms = latest;
    s_plan (s);
    (void)s_write (self, s, false); // in the same batch as the jobs
    if (due > fired)
        zl_info ("schedules", "schedule %s: %" PRIu64 " tick(s) due, %zu enqueued, the rest %s",
                 s->name, due, fired, s->catch_up ? "past catch_up_max" : "missed (skip)");
    return fired;
}

size_t
zl_schedules_fire (zl_schedules_t *self, zl_now_t now)
{
    size_t n = 0;
    for (size_t i = 0; i < self->n; i++) {
        sched_t *s = self->all[i];
        if (!s->paused && s->next_tick_ms >= 0 && s->next_tick_ms <= now.wall_ms)
            n += s_fire_one (self, s, now);
    }
    return n;
}

int64_t
zl_schedules_next_ms (zl_schedules_t *self)
{
    int64_t next = -1;
    for (size_t i = 0; i < self->n; i++) {
        const sched_t *s = self->all[i];
        if (!s->paused && s->next_tick_ms >= 0 && (next < 0 || s->next_tick_ms < next))
            next = s->next_tick_ms;
    }
    return next;
}

void
zl_schedules_counts (zl_schedules_t *self, uint64_t *fired, uint64_t *skipped, uint64_t *failed)
{
    *fired = self->fired;
    *skipped = self->skipped;
    *failed = self->failed;
}

size_t
zl_schedules_count (zl_schedules_t *self)
{
    return self->n;
}
