#include "scheduler.h"

#include "breaker.h"
#include "bucket.h"
#include "clock.h"
#include "heap.h"
#include "u64map.h"
#include "zl_alloc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define NO_SLOT UINT32_MAX
#define DEFAULT_EST_US 1000

// A slot of a lane's heap. The sort key lives in the slot, so sifting reads
// one array and not the flows: (hi, lo) where lo is the arrival seq of the
// flow's head job and hi is 0 under FIFO, and under WFQ the flow's virtual
// start time in quanta (the bits of the double itself with quantum 0).
typedef struct {
    uint64_t hi, lo;
    zl_flow_t *flow;
} slot_t;

typedef struct {
    slot_t *items;
    uint32_t size, cap;
} heap_t;

enum { PARK_NONE = 0, PARK_CAP, PARK_TIME };

// The scheduler's own state of a lane, by lane index (lane.h holds only what
// the lane module writes).
typedef struct {
    bool live;          // set up (a flow of the lane exists)
    heap_t heap;        // its backlogged flows
    double vtime;       // fair-queuing virtual time of this lane
    double pass;        // weighted share of workers serving several lanes
    zl_bucket_t bucket; // the lane's dispatch rate limit
} lane_state_t;

// ... and of a tenant, by tenant index.
typedef struct {
    bool live;
    zl_bucket_t bucket; // the tenant's dispatch rate limit
    zl_flow_t *capped;  // flows parked by this tenant's cap
} tenant_state_t;

static bool s_wake_less (const void *a, const void *b);

// The late heap's order: higher priority first, then lower sequence.
static bool
s_late_less (const void *a, const void *b)
{
    const zl_job_t *x = a, *y = b;
    return x->priority != y->priority ? x->priority > y->priority : x->seq < y->seq;
}

struct _zl_sched_t {
    zl_sched_policy_t policy;
    double lanes_vtime;        // virtual time of the weighted share across lanes
    double quantum;            // WFQ: virtual time per key step (us / weight); 0 = exact
    zl_heap_t *wake;           // time-parked flows by wake_ms
    zl_lane_t **lanes_waiting; // lanes held back by their rate limit
    int64_t lane_wake_ms;      // earliest of their next tokens, or -1
    zl_u64map_t *by_key;       // (lane, tenant) -> flow
    zl_flow_t **flows;
    size_t n_flows, cap_flows;
    lane_state_t *lane_st; // by lane index
    uint32_t n_lane_st, cap_lane_st;
    tenant_state_t *tenant_st; // by tenant index
    uint32_t n_tenant_st, cap_tenant_st;
};

static inline lane_state_t *
s_lane (zl_sched_t *self, const zl_lane_t *lane)
{
    return &self->lane_st[lane->index];
}

static inline tenant_state_t *
s_tenant (zl_sched_t *self, const zl_tenant_t *tenant)
{
    return &self->tenant_st[tenant->index];
}

// Make `*arr` (of `*cap` items of `size` bytes, zeroed when grown) hold
// slot `index`, and `*n` cover it.
static void
s_reserve (void **arr, uint32_t *cap, uint32_t *n, uint32_t index, size_t size)
{
    if (index >= *cap) {
        uint32_t want = *cap ? *cap : 16;
        while (want <= index)
            want *= 2;
        *arr = zl_realloc (*arr, want * size);
        memset ((char *)*arr + (size_t)*cap * size, 0, (size_t)(want - *cap) * size);
        *cap = want;
    }
    if (index >= *n)
        *n = index + 1;
}

// The scheduler's state of `lane`, set up on first use.
static lane_state_t *
s_track_lane (zl_sched_t *self, const zl_lane_t *lane)
{
    s_reserve ((void **)&self->lane_st, &self->cap_lane_st, &self->n_lane_st, lane->index,
               sizeof *self->lane_st);
    lane_state_t *ls = s_lane (self, lane);
    if (!ls->live) {
        ls->live = true;
        zl_bucket_init (&ls->bucket, lane->cfg.rate, lane->cfg.burst, zl_clock_mono_ms ());
    }
    return ls;
}

// The scheduler's state of `tenant`, set up on first use.
static tenant_state_t *
s_track_tenant (zl_sched_t *self, const zl_tenant_t *tenant)
{
    s_reserve ((void **)&self->tenant_st, &self->cap_tenant_st, &self->n_tenant_st, tenant->index,
               sizeof *self->tenant_st);
    tenant_state_t *ts = s_tenant (self, tenant);
    if (!ts->live) {
        ts->live = true;
        zl_bucket_init (&ts->bucket, tenant->cfg.rate, tenant->cfg.burst, zl_clock_mono_ms ());
    }
    return ts;
}

zl_bucket_t *
zl_sched_lane_bucket (zl_sched_t *self, const zl_lane_t *lane)
{
    return &s_track_lane (self, lane)->bucket;
}

zl_bucket_t *
zl_sched_tenant_bucket (zl_sched_t *self, const zl_tenant_t *tenant)
{
    return &s_track_tenant (self, tenant)->bucket;
}

zl_sched_t *
zl_sched_new (zl_sched_policy_t policy)
{
    zl_sched_t *self = ZL_NEW (zl_sched_t);
    self->policy = policy;
    self->quantum = ZL_SCHED_QUANTUM_US;
    self->by_key = zl_u64map_new ();
    self->lane_wake_ms = -1;
    self->wake = zl_heap_new (s_wake_less, offsetof (zl_flow_t, wake_idx), NO_SLOT);
    return self;
}

void
zl_sched_destroy (zl_sched_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_sched_t *self = *self_p;
    for (size_t i = 0; i < self->n_flows; i++) {
        zl_heap_destroy (&self->flows[i]->late);
        free (self->flows[i]);
    }
    free (self->flows);
    for (uint32_t i = 0; i < self->n_lane_st; i++)
        free (self->lane_st[i].heap.items);
    free (self->lane_st);
    free (self->tenant_st);
    zl_heap_destroy (&self->wake);
    free (self->lanes_waiting);
    zl_u64map_destroy (&self->by_key);
    free (self);
    *self_p = NULL;
}

zl_sched_policy_t
zl_sched_policy (zl_sched_t *self)
{
    return self->policy;
}

void
zl_sched_set_quantum (zl_sched_t *self, uint64_t quantum_us)
{
    self->quantum = (double)quantum_us;
}

zl_flow_t *
zl_sched_flow (zl_sched_t *self, zl_lane_t *lane, zl_tenant_t *tenant)
{
    uint64_t key = ((uint64_t)lane->index << 32 | tenant->index) + 1;
    zl_flow_t *flow = zl_u64map_get (self->by_key, key);
    if (flow)
        return flow;
    flow = ZL_NEW (zl_flow_t);
    flow->lane = lane;
    flow->tenant = tenant;
    flow->heap_idx = NO_SLOT;
    flow->wake_idx = NO_SLOT;
    flow->est_us = DEFAULT_EST_US;
    zl_u64map_put (self->by_key, key, flow);
    if (self->n_flows == self->cap_flows) {
        self->cap_flows = self->cap_flows ? self->cap_flows * 2 : 16;
        self->flows = zl_realloc (self->flows, self->cap_flows * sizeof (zl_flow_t *));
    }
    flow->index = (uint32_t)self->n_flows;
    self->flows[self->n_flows++] = flow;
    s_track_lane (self, lane);
    s_track_tenant (self, tenant);
    return flow;
}

zl_flow_t **
zl_sched_flows (zl_sched_t *self, size_t *count)
{
    *count = self->n_flows;
    return self->flows;
}

// ---------------------------------------------------------------- lane heap
// Each lane's backlogged flows, in a 4-ary min-heap of slots. It stays
// hand-written, unlike the deadline heaps (common/heap.h): it is on the
// dispatch path, where the inline key and the shallow tree matter with
// thousands of flows (bench/bench_sched.c).
#define ARITY 4

static inline bool
s_less (const slot_t *a, const slot_t *b)
{
    return a->hi != b->hi ? a->hi < b->hi : a->lo < b->lo;
}

static inline void
s_set (heap_t *h, uint32_t i, const slot_t *s)
{
    h->items[i] = *s;
    s->flow->heap_idx = i;
}

static void
s_sift_up (heap_t *h, uint32_t i)
{
    slot_t s = h->items[i];
    while (i > 0) {
        uint32_t p = (i - 1) / ARITY;
        if (!s_less (&s, &h->items[p]))
            break;
        s_set (h, i, &h->items[p]);
        i = p;
    }
    s_set (h, i, &s);
}

static void
s_sift_down (heap_t *h, uint32_t i)
{
    slot_t s = h->items[i];
    for (;;) {
        uint32_t first = ARITY * i + 1, b = i;
        const slot_t *bs = &s;
        uint32_t end = first + ARITY < h->size ? first + ARITY : h->size;
        for (uint32_t c = first; c < end; c++)
            if (s_less (&h->items[c], bs))
                b = c, bs = &h->items[c];
        if (b == i)
            break;
        s_set (h, i, bs);
        i = b;
    }
    s_set (h, i, &s);
}

static void
s_heap_insert (heap_t *h, zl_flow_t *f, uint64_t hi, uint64_t lo)
{
    if (h->size == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 16;
        h->items = zl_realloc (h->items, h->cap * sizeof (slot_t));
    }
    slot_t s = {hi, lo, f};
    s_set (h, h->size++, &s);
    s_sift_up (h, h->size - 1);
}

static void
s_heap_remove (heap_t *h, zl_flow_t *f)
{
    uint32_t i = f->heap_idx;
    f->heap_idx = NO_SLOT;
    slot_t last = h->items[--h->size];
    if (i < h->size) {
        s_set (h, i, &last);
        s_sift_up (h, i);
        s_sift_down (h, last.flow->heap_idx);
    }
}

// A backlogged flow's key changed: move it (nothing to do when it did not).
static void
s_heap_rekey (heap_t *h, zl_flow_t *f, uint64_t hi, uint64_t lo)
{
    slot_t *s = &h->items[f->heap_idx];
    if (s->hi == hi && s->lo == lo)
        return;
    bool up = hi < s->hi || (hi == s->hi && lo < s->lo);
    s->hi = hi;
    s->lo = lo;
    if (up)
        s_sift_up (h, f->heap_idx);
    else
        s_sift_down (h, f->heap_idx);
}

// ---------------------------------------------------------------- queueing
// The virtual start time of a flow's head job under WFQ: where the flow's
// last dispatch ended; for a flow that joins the heap (it was idle, or
// parked), no earlier than the lane's current virtual time, so it banks no
// credit.
static inline double
s_vstart (zl_sched_t *self, zl_flow_t *flow, bool joins)
{
    double vtime = s_lane (self, flow->lane)->vtime;
    if (joins && vtime > flow->vfinish)
        return vtime;
    return flow->vfinish;
}

// The heap key's high half for virtual time `v`. WFQ with a quantum Q orders
// flows by floor(v / Q) and, inside one quantum, by the arrival of their head
// jobs: a backlogged flow lags its exact share by at most one quantum plus
// one job, and flows that have had the same service go in arrival order
// (which keeps the store's writes in id order). Quantum 0 is exact
// start-time fair queuing.
static inline uint64_t
s_hi (zl_sched_t *self, double v)
{
    if (self->policy == ZL_SCHED_FIFO)
        return 0;
    if (!(v > 0))
        return 0;
    if (self->quantum > 0)
        return (uint64_t)(v / self->quantum);
    uint64_t bits; // a non-negative double's bits order like its value
    memcpy (&bits, &v, sizeof bits);
    return bits;
}

// (Re)place a backlogged flow in its lane's heap by its head job.
static void
s_enqueue (zl_sched_t *self, zl_flow_t *flow)
{
    flow->vstart = s_vstart (self, flow, flow->heap_idx == NO_SLOT);
    uint64_t hi = s_hi (self, flow->vstart), lo = flow->head->seq;
    heap_t *h = &s_lane (self, flow->lane)->heap;
    if (flow->heap_idx == NO_SLOT)
        s_heap_insert (h, flow, hi, lo);
    else
        s_heap_rekey (h, flow, hi, lo);
}

// The flow's next job: the head of its highest non-empty priority, or the
// late heap's top when it goes before that.
static void
s_set_head (zl_flow_t *flow)
{
    zl_job_t *fifo = flow->q_mask ? flow->q[31 - __builtin_clz (flow->q_mask)].head : NULL;
    zl_job_t *late = flow->late ? zl_heap_top (flow->late) : NULL;
    flow->head = late && (!fifo || s_late_less (late, fifo)) ? late : fifo;
}

// Take `job` out of its priority's FIFO, or the late heap.
static void
s_unlink (zl_flow_t *flow, zl_job_t *job)
{
    if (job->timer_idx != NO_SLOT) {
        zl_heap_remove (flow->late, job); // (resets timer_idx)
        s_set_head (flow);
        return;
    }
    unsigned p = job->priority <= ZL_PRIORITY_MAX ? job->priority : ZL_PRIORITY_DEFAULT;
    if (job->prev)
        job->prev->next = job->next;
    else
        flow->q[p].head = job->next;
    if (job->next)
        job->next->prev = job->prev;
    else
        flow->q[p].tail = job->prev;
    if (!flow->q[p].head)
        flow->q_mask &= (uint16_t) ~(1u << p);
    job->next = job->prev = NULL;
    s_set_head (flow);
}

int64_t
zl_sched_oldest_ready_ms (const zl_flow_t *flow)
{
    // the late heap's top is its oldest by sequence, near enough by time
    zl_job_t *late = flow->late ? zl_heap_top (flow->late) : NULL;
    int64_t oldest = late ? late->ready_ms : -1;
    for (unsigned m = flow->q_mask, p; m; m &= m - 1) {
        p = (unsigned)__builtin_ctz (m);
        int64_t t = flow->q[p].head->ready_ms;
        if (oldest < 0 || t < oldest)
            oldest = t;
    }
    return oldest;
}

void
zl_sched_push (zl_sched_t *self, zl_job_t *job)
{
    zl_flow_t *flow = job->flow;
    if (job->priority > ZL_PRIORITY_MAX)
        job->priority = ZL_PRIORITY_DEFAULT;
    unsigned p = job->priority;
    zl_job_t *was_head = flow->head;
    job->next = NULL;
    if (flow->q[p].tail && job->seq < flow->q[p].tail->seq) { // out of order: late
        if (!flow->late)
            flow->late = zl_heap_new (s_late_less, offsetof (zl_job_t, timer_idx), NO_SLOT);
        job->prev = NULL;
        zl_heap_set (flow->late, job);
    } else {
        job->prev = flow->q[p].tail;
        if (flow->q[p].tail)
            flow->q[p].tail->next = job;
        else
            flow->q[p].head = job;
        flow->q[p].tail = job;
        flow->q_mask |= (uint16_t)(1u << p);
    }
    s_set_head (flow);
    flow->ready++;
    if (flow->heap_idx == NO_SLOT && flow->parked == PARK_NONE)
        s_enqueue (self, flow);
    else if (flow->heap_idx != NO_SLOT && flow->head != was_head)
        s_enqueue (self, flow); // a higher priority came first: keyed by it now
}

void
zl_sched_remove (zl_sched_t *self, zl_job_t *job)
{
    zl_flow_t *flow = job->flow;
    bool was_head = flow->head == job;
    s_unlink (flow, job);
    flow->ready--;
    if (!was_head || flow->heap_idx == NO_SLOT)
        return; // its place in the lane heap is its head's: unchanged, or it is parked
    if (flow->head)
        s_enqueue (self, flow); // keyed by the new head
    else
        s_heap_remove (&s_lane (self, flow->lane)->heap, flow);
}

// ---------------------------------------------------------------- parking
// Time-parked flows wait on the shared heap, earliest wake first.
static bool
s_wake_less (const void *a, const void *b)
{
    return ((const zl_flow_t *)a)->wake_ms < ((const zl_flow_t *)b)->wake_ms;
}

// Why `flow` may not run now (PARK_*), and until when for PARK_TIME.
static int
s_held_back (zl_sched_t *self, zl_flow_t *flow, int64_t now_ms, int64_t *until)
{
    zl_tenant_t *t = flow->tenant;
    zl_bucket_t *bucket = &s_tenant (self, t)->bucket;
    if (flow->paused_until_ms > now_ms) {
        *until = flow->paused_until_ms;
        return PARK_TIME;
    }
    if ((t->cfg.max_in_flight && t->in_flight >= t->cfg.max_in_flight) ||
        (flow->lane->cfg.tenant_max_in_flight &&
         flow->in_flight >= flow->lane->cfg.tenant_max_in_flight))
        return PARK_CAP;
    if (!zl_bucket_ready (bucket, now_ms)) {
        *until = zl_bucket_next_ms (bucket, now_ms);
        return PARK_TIME;
    }
    return PARK_NONE;
}

static void
s_park (zl_sched_t *self, zl_flow_t *flow, int why, int64_t until)
{
    s_heap_remove (&s_lane (self, flow->lane)->heap, flow);
    flow->parked = (uint8_t)why;
    if (why == PARK_CAP) {
        tenant_state_t *ts = s_tenant (self, flow->tenant);
        flow->capped++;
        flow->park_next = ts->capped;
        ts->capped = flow;
    } else {
        flow->throttled++;
        flow->wake_ms = until;
        zl_heap_set (self->wake, flow);
    }
}

static void
s_unpark (zl_sched_t *self, zl_flow_t *flow)
{
    flow->parked = PARK_NONE;
    if (flow->head && flow->heap_idx == NO_SLOT)
        s_enqueue (self, flow);
}

void
zl_sched_released (zl_sched_t *self, zl_flow_t *flow)
{
    zl_tenant_t *t = flow->tenant;
    tenant_state_t *ts = s_tenant (self, t);
    if (!ts->capped)
        return;
    if (t->cfg.max_in_flight && t->in_flight >= t->cfg.max_in_flight)
        return; // still at the tenant's cap
    // below the tenant's cap: every flow it parked may try again (one that is
    // still at its own per-lane cap parks itself again on the next pop)
    zl_flow_t *list = ts->capped;
    ts->capped = NULL;
    while (list) {
        zl_flow_t *next = list->park_next;
        list->park_next = NULL;
        s_unpark (self, list);
        list = next;
    }
}

void
zl_sched_pause (zl_sched_t *self, zl_flow_t *flow, int64_t until_ms)
{
    if (until_ms > flow->paused_until_ms)
        flow->paused_until_ms = until_ms;
}

void
zl_sched_wake (zl_sched_t *self, int64_t now_ms)
{
    zl_flow_t *top;
    while ((top = zl_heap_top (self->wake)) && top->wake_ms <= now_ms)
        s_unpark (self, zl_heap_pop (self->wake));
    if (self->lane_wake_ms >= 0 && self->lane_wake_ms <= now_ms)
        self->lane_wake_ms = -1; // lanes are looked at again on the next pop
}

int64_t
zl_sched_next_wake (zl_sched_t *self)
{
    zl_flow_t *top = zl_heap_top (self->wake);
    int64_t next = top ? top->wake_ms : -1;
    if (self->lane_wake_ms >= 0 && (next < 0 || self->lane_wake_ms < next))
        next = self->lane_wake_ms;
    return next;
}

int
zl_sched_has_ready (zl_sched_t *self, zl_lane_t *lane)
{
    return lane->index < self->n_lane_st && s_lane (self, lane)->heap.size > 0;
}

zl_job_t *
zl_sched_pop (zl_sched_t *self, zl_lane_t *lane, int64_t now_ms)
{
    if (!zl_sched_has_ready (self, lane))
        return NULL;
    lane_state_t *ls = s_lane (self, lane);
    heap_t *h = &ls->heap;
    if (lane->cfg.max_in_flight && lane->in_flight >= lane->cfg.max_in_flight)
        return NULL; // the lane's cap: a finishing job frees a slot
    if (!zl_bucket_ready (&ls->bucket, now_ms)) {
        int64_t next = zl_bucket_next_ms (&ls->bucket, now_ms);
        if (self->lane_wake_ms < 0 || next < self->lane_wake_ms)
            self->lane_wake_ms = next;
        return NULL;
    }
    zl_flow_t *flow;
    for (;;) {
        if (h->size == 0)
            return NULL;
        flow = h->items[0].flow;
        int64_t until = 0;
        int why = s_held_back (self, flow, now_ms, &until);
        if (why == PARK_NONE)
            break;
        s_park (self, flow, why, until);
    }
    zl_bucket_take (&ls->bucket, now_ms);
    zl_bucket_take (&s_tenant (self, flow->tenant)->bucket, now_ms);
    zl_job_t *job = flow->head;
    s_unlink (flow, job);
    flow->ready--;
    if (self->policy == ZL_SCHED_WFQ) {
        double start = flow->vstart;
        if (start > ls->vtime) // inside a quantum starts may come out of order
            ls->vtime = start;
        job->est_us = flow->est_us;
        flow->vfinish = start + (double)job->est_us / (double)flow->tenant->cfg.weight;
    }
    if (flow->head)
        s_enqueue (self, flow);
    else
        s_heap_remove (h, flow);
    return job;
}

// ---------------------------------------------------------------- across lanes
zl_job_t *
zl_sched_next (zl_sched_t *self, zl_lane_t *const *lanes, size_t n_lanes, int64_t now_ms)
{
    zl_lane_t *order[64];
    uint32_t n = 0;
    for (size_t k = 0; k < n_lanes && n < 64; k++) {
        zl_lane_t *lane = lanes[k];
        if (lane->paused || !zl_sched_has_ready (self, lane))
            continue;
        if (lane->breaker && !zl_breaker_may_dispatch (lane->breaker, now_ms))
            continue;     // its breaker is open (or its probes are out): other lanes go on
        uint32_t i = n++; // insertion sort by pass: workers serve few lanes
        while (i > 0 && s_lane (self, order[i - 1])->pass > s_lane (self, lane)->pass) {
            order[i] = order[i - 1];
            i--;
        }
        order[i] = lane;
    }
    for (uint32_t i = 0; i < n; i++) {
        zl_lane_t *lane = order[i];
        zl_job_t *job = zl_sched_pop (self, lane, now_ms);
        if (!job)
            continue; // held back (caps, rate): the next lane may run
        if (lane->breaker)
            zl_breaker_dispatched (lane->breaker);
        // no banked share for a lane that was idle
        lane_state_t *ls = s_lane (self, lane);
        double start = ls->pass > self->lanes_vtime ? ls->pass : self->lanes_vtime;
        self->lanes_vtime = start;
        ls->pass = start + (double)(job->est_us ? job->est_us : 1) / lane->cfg.weight;
        return job;
    }
    return NULL;
}

void
zl_sched_charge (zl_sched_t *self, zl_job_t *job, uint64_t run_us)
{
    zl_flow_t *flow = job->flow;
    flow->run_us += run_us;
    // the lane's share, too, is worker time: the real cost replaces the
    // estimate zl_sched_next charged (before the flow's own correction below
    // overwrites job->est_us)
    zl_lane_t *lane = flow->lane;
    s_lane (self, lane)->pass +=
        ((double)(run_us ? run_us : 1) - (double)(job->est_us ? job->est_us : 1)) /
        (double)lane->cfg.weight;
    if (self->policy != ZL_SCHED_WFQ)
        return;
    // correct the estimate charged at dispatch with the real cost
    double delta = ((double)run_us - (double)job->est_us) / (double)flow->tenant->cfg.weight;
    flow->vfinish += delta;
    job->est_us = run_us;
    // running estimate for the next dispatch: EWMA with weight 1/8
    flow->est_us = (flow->est_us * 7 + (run_us ? run_us : 1)) / 8;
    if (flow->heap_idx != NO_SLOT)
        s_enqueue (self, flow);
}
