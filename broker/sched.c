#include "sched.h"

#include "heap.h"
#include "u64map.h"
#include "zl_alloc.h"

#include <stddef.h>
#include <stdlib.h>

#define NO_SLOT UINT32_MAX
#define DEFAULT_EST_US 1000

typedef struct {
    zl_flow_t **items;
    uint32_t size, cap;
} heap_t;

enum { PARK_NONE = 0, PARK_CAP, PARK_TIME };

static bool s_wake_less (const void *a, const void *b);

struct _zl_sched_t {
    zl_sched_policy_t policy;
    zl_heap_t *wake;  // time-parked flows by wake_ms
    zl_lane_t **lanes_waiting;  // lanes held back by their rate limit
    int64_t lane_wake_ms;       // earliest of their next tokens, or -1
    zl_u64map_t *by_key;  // (lane, tenant) -> flow
    zl_flow_t **flows;
    size_t n_flows, cap_flows;
};

zl_sched_t *
zl_sched_new (zl_sched_policy_t policy)
{
    zl_sched_t *self = ZL_NEW (zl_sched_t);
    self->policy = policy;
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
        zl_lane_t *lane = self->flows[i]->lane;
        if (lane->heap) {
            heap_t *h = lane->heap;
            free (h->items);
            free (h);
            lane->heap = NULL;
        }
        free (self->flows[i]);
    }
    free (self->flows);
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

zl_flow_t *
zl_sched_flow (zl_sched_t *self, zl_lane_t *lane, zl_tenant_t *tenant)
{
    uint64_t key = ((uint64_t) lane->index << 32 | tenant->index) + 1;
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
    self->flows[self->n_flows++] = flow;
    if (!lane->heap)
        lane->heap = ZL_NEW (heap_t);
    return flow;
}

zl_flow_t **
zl_sched_flows (zl_sched_t *self, size_t *count)
{
    *count = self->n_flows;
    return self->flows;
}

// ---------------------------------------------------------------- lane heap
// Each lane's backlogged flows. This heap stays hand-written, unlike the
// deadline heaps (common/heap.h): it is on the dispatch path, where an
// inlined comparison on the key matters (bench/bench_sched.c).
static inline int
s_less (const zl_flow_t *a, const zl_flow_t *b)
{
    if (a->key != b->key)
        return a->key < b->key;
    return a->tenant->index < b->tenant->index;
}

static void
s_set (heap_t *h, uint32_t i, zl_flow_t *f)
{
    h->items[i] = f;
    f->heap_idx = i;
}

static void
s_sift_up (heap_t *h, uint32_t i)
{
    zl_flow_t *f = h->items[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!s_less (f, h->items[p]))
            break;
        s_set (h, i, h->items[p]);
        i = p;
    }
    s_set (h, i, f);
}

static void
s_sift_down (heap_t *h, uint32_t i)
{
    zl_flow_t *f = h->items[i];
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, b = i;
        zl_flow_t *bf = f;
        if (l < h->size && s_less (h->items[l], bf))
            b = l, bf = h->items[l];
        if (r < h->size && s_less (h->items[r], bf))
            b = r, bf = h->items[r];
        if (b == i)
            break;
        s_set (h, i, bf);
        i = b;
    }
    s_set (h, i, f);
}

static void
s_heap_insert (heap_t *h, zl_flow_t *f)
{
    if (h->size == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 16;
        h->items = zl_realloc (h->items, h->cap * sizeof (zl_flow_t *));
    }
    s_set (h, h->size++, f);
    s_sift_up (h, h->size - 1);
}

static void
s_heap_remove (heap_t *h, zl_flow_t *f)
{
    uint32_t i = f->heap_idx;
    f->heap_idx = NO_SLOT;
    zl_flow_t *last = h->items[--h->size];
    if (i < h->size) {
        s_set (h, i, last);
        s_sift_up (h, i);
        s_sift_down (h, last->heap_idx);
    }
}

static void
s_heap_rekey (heap_t *h, zl_flow_t *f, double key)
{
    f->key = key;
    s_sift_up (h, f->heap_idx);
    s_sift_down (h, f->heap_idx);
}

// ---------------------------------------------------------------- queueing
// The key a flow has when its head job is `head`: FIFO orders flows by the
// arrival of their heads; WFQ by virtual start time, which for a flow that
// was idle is the lane's current virtual time (no banked credit).
static double
s_head_key (zl_sched_t *self, zl_flow_t *flow)
{
    if (self->policy == ZL_SCHED_FIFO)
        return (double) flow->head->seq;
    return flow->vfinish > flow->lane->vtime ? flow->vfinish : flow->lane->vtime;
}

void
zl_sched_push (zl_sched_t *self, zl_job_t *job)
{
    zl_flow_t *flow = job->flow;
    job->next = NULL;
    if (flow->tail)
        flow->tail->next = job;
    else
        flow->head = job;
    flow->tail = job;
    flow->ready++;
    if (flow->heap_idx == NO_SLOT && flow->parked == PARK_NONE) {
        flow->key = s_head_key (self, flow);
        s_heap_insert (flow->lane->heap, flow);
    }
}

// ---------------------------------------------------------------- parking
// Time-parked flows wait on the shared heap, earliest wake first.
static bool
s_wake_less (const void *a, const void *b)
{
    return ((const zl_flow_t *) a)->wake_ms < ((const zl_flow_t *) b)->wake_ms;
}

// Why `flow` may not run now (PARK_*), and until when for PARK_TIME.
static int
s_held_back (zl_flow_t *flow, int64_t now_ms, int64_t *until)
{
    zl_tenant_t *t = flow->tenant;
    if (flow->paused_until_ms > now_ms) {
        *until = flow->paused_until_ms;
        return PARK_TIME;
    }
    if ((t->cfg.max_in_flight && t->in_flight >= t->cfg.max_in_flight) ||
        (flow->lane->cfg.tenant_max_in_flight &&
         flow->in_flight >= flow->lane->cfg.tenant_max_in_flight))
        return PARK_CAP;
    if (!zl_bucket_ready (&t->bucket, now_ms)) {
        *until = zl_bucket_next_ms (&t->bucket, now_ms);
        return PARK_TIME;
    }
    return PARK_NONE;
}

static void
s_park (zl_sched_t *self, zl_flow_t *flow, int why, int64_t until)
{
    s_heap_remove (flow->lane->heap, flow);
    flow->parked = (uint8_t) why;
    if (why == PARK_CAP) {
        flow->capped++;
        flow->park_next = flow->tenant->capped;
        flow->tenant->capped = flow;
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
    if (flow->head && flow->heap_idx == NO_SLOT) {
        flow->key = s_head_key (self, flow);
        s_heap_insert (flow->lane->heap, flow);
    }
}

void
zl_sched_released (zl_sched_t *self, zl_flow_t *flow)
{
    zl_tenant_t *t = flow->tenant;
    if (!t->capped)
        return;
    if (t->cfg.max_in_flight && t->in_flight >= t->cfg.max_in_flight)
        return;  // still at the tenant's cap
    // below the tenant's cap: every flow it parked may try again (one that is
    // still at its own per-lane cap parks itself again on the next pop)
    zl_flow_t *list = t->capped;
    t->capped = NULL;
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
        self->lane_wake_ms = -1;  // lanes are looked at again on the next pop
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
    heap_t *h = lane->heap;
    return h && h->size > 0;
}

zl_job_t *
zl_sched_pop (zl_sched_t *self, zl_lane_t *lane, int64_t now_ms)
{
    heap_t *h = lane->heap;
    if (!h || h->size == 0)
        return NULL;
    if (lane->cfg.max_in_flight && lane->in_flight >= lane->cfg.max_in_flight)
        return NULL;  // the lane's cap: a finishing job frees a slot
    if (!zl_bucket_ready (&lane->bucket, now_ms)) {
        int64_t next = zl_bucket_next_ms (&lane->bucket, now_ms);
        if (self->lane_wake_ms < 0 || next < self->lane_wake_ms)
            self->lane_wake_ms = next;
        return NULL;
    }
    zl_flow_t *flow;
    for (;;) {
        if (h->size == 0)
            return NULL;
        flow = h->items[0];
        int64_t until = 0;
        int why = s_held_back (flow, now_ms, &until);
        if (why == PARK_NONE)
            break;
        s_park (self, flow, why, until);
    }
    zl_bucket_take (&lane->bucket, now_ms);
    zl_bucket_take (&flow->tenant->bucket, now_ms);
    zl_job_t *job = flow->head;
    flow->head = job->next;
    if (!flow->head)
        flow->tail = NULL;
    job->next = NULL;
    flow->ready--;
    if (self->policy == ZL_SCHED_WFQ) {
        double start = flow->key;
        lane->vtime = start;
        job->est_us = flow->est_us;
        flow->vfinish = start + (double) job->est_us / (double) flow->tenant->cfg.weight;
    }
    if (flow->head)
        s_heap_rekey (h, flow, s_head_key (self, flow));
    else
        s_heap_remove (h, flow);
    return job;
}

void
zl_sched_charge (zl_sched_t *self, zl_job_t *job, uint64_t run_us)
{
    zl_flow_t *flow = job->flow;
    flow->run_us += run_us;
    if (self->policy != ZL_SCHED_WFQ)
        return;
    // correct the estimate charged at dispatch with the real cost
    double delta = ((double) run_us - (double) job->est_us) / (double) flow->tenant->cfg.weight;
    flow->vfinish += delta;
    job->est_us = run_us;
    // running estimate for the next dispatch: EWMA with weight 1/8
    flow->est_us = (flow->est_us * 7 + (run_us ? run_us : 1)) / 8;
    if (flow->heap_idx != NO_SLOT)
        s_heap_rekey (flow->lane->heap, flow, s_head_key (self, flow));
}
