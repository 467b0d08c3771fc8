#include "breaker.h"

#include "zl_alloc.h"

#include <stdlib.h>

struct _zl_breaker_t {
    uint32_t failures, probes; // configuration
    int64_t window_ms, cooldown_ms;
    zl_breaker_state_t state;
    int64_t *fail_ms;    // the last `failures` failure times, a ring (CLOSED)
    uint32_t n_fail, at; // how many are in it, where the next goes
    int64_t open_until_ms;
    uint32_t probes_out, probes_ok;
    uint64_t opened, transitions;
    uint64_t told; // transitions already taken by zl_breaker_take_change
};

const char *
zl_breaker_state_name (zl_breaker_state_t state)
{
    switch (state) {
    case ZL_BREAKER_OPEN: return "open";
    case ZL_BREAKER_HALF_OPEN: return "half_open";
    default: return "closed";
    }
}

zl_breaker_t *
zl_breaker_new (uint32_t failures, uint64_t window_ms, uint64_t cooldown_ms, uint32_t probes)
{
    zl_breaker_t *self = ZL_NEW (zl_breaker_t);
    self->failures = failures ? failures : 1;
    self->probes = probes ? probes : 1;
    self->window_ms = window_ms ? (int64_t)window_ms : 1;
    self->cooldown_ms = cooldown_ms ? (int64_t)cooldown_ms : 1;
    self->fail_ms = zl_calloc (self->failures, sizeof *self->fail_ms);
    return self;
}

void
zl_breaker_destroy (zl_breaker_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free ((*self_p)->fail_ms);
    free (*self_p);
    *self_p = NULL;
}

static void
s_move (zl_breaker_t *self, zl_breaker_state_t to, int64_t now_ms)
{
    self->state = to;
    self->transitions++;
    if (to == ZL_BREAKER_CLOSED) // a fresh window (until then the ring shows why it opened)
        self->n_fail = self->at = 0;
    self->probes_out = self->probes_ok = 0;
    if (to == ZL_BREAKER_OPEN) {
        self->opened++;
        self->open_until_ms = now_ms + self->cooldown_ms;
    }
}

void
zl_breaker_tick (zl_breaker_t *self, int64_t now_ms)
{
    if (self->state == ZL_BREAKER_OPEN && now_ms >= self->open_until_ms)
        s_move (self, ZL_BREAKER_HALF_OPEN, now_ms);
}

bool
zl_breaker_may_dispatch (zl_breaker_t *self, int64_t now_ms)
{
    zl_breaker_tick (self, now_ms);
    switch (self->state) {
    case ZL_BREAKER_OPEN: return false;
    case ZL_BREAKER_HALF_OPEN: return self->probes_out < self->probes;
    default: return true;
    }
}

void
zl_breaker_dispatched (zl_breaker_t *self)
{
    if (self->state == ZL_BREAKER_HALF_OPEN)
        self->probes_out++;
}

void
zl_breaker_success (zl_breaker_t *self, int64_t now_ms)
{
    if (self->state != ZL_BREAKER_HALF_OPEN)
        return; // CLOSED: the window counts failures only; OPEN: a job from before
    if (self->probes_out)
        self->probes_out--;
    if (++self->probes_ok >= self->probes)
        s_move (self, ZL_BREAKER_CLOSED, now_ms);
}

// The failures of the ring still inside the window at `now_ms`.
static uint32_t
s_in_window (const zl_breaker_t *self, int64_t now_ms)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < self->n_fail; i++)
        n += now_ms - self->fail_ms[i] < self->window_ms;
    return n;
}

void
zl_breaker_failure (zl_breaker_t *self, int64_t now_ms)
{
    if (self->state == ZL_BREAKER_HALF_OPEN) {
        s_move (self, ZL_BREAKER_OPEN, now_ms); // a probe failed: another cool-down
        return;
    }
    if (self->state == ZL_BREAKER_OPEN)
        return; // a job that ran before it opened
    self->fail_ms[self->at] = now_ms;
    self->at = (self->at + 1) % self->failures;
    if (self->n_fail < self->failures)
        self->n_fail++;
    if (s_in_window (self, now_ms) >= self->failures)
        s_move (self, ZL_BREAKER_OPEN, now_ms);
}

void
zl_breaker_neutral (zl_breaker_t *self)
{
    if (self->state == ZL_BREAKER_HALF_OPEN && self->probes_out)
        self->probes_out--;
}

zl_breaker_view_t
zl_breaker_view (const zl_breaker_t *self, int64_t now_ms)
{
    return (zl_breaker_view_t){.state = self->state,
                               .failures = s_in_window (self, now_ms),
                               .open_until_ms =
                                   self->state == ZL_BREAKER_OPEN ? self->open_until_ms : 0,
                               .probes_out = self->probes_out,
                               .opened = self->opened,
                               .transitions = self->transitions};
}

bool
zl_breaker_take_change (zl_breaker_t *self)
{
    if (self->told == self->transitions)
        return false;
    self->told = self->transitions;
    return true;
}

int64_t
zl_breaker_next_ms (const zl_breaker_t *self)
{
    return self->state == ZL_BREAKER_OPEN ? self->open_until_ms : -1;
}

void
zl_breaker_info (const zl_breaker_t *self, const char *lane, zl_now_t now, zl_breaker_info_t *out)
{
    zl_breaker_view_t v = zl_breaker_view (self, now.mono_ms);
    *out = (zl_breaker_info_t){.lane = lane,
                               .state = (uint32_t)v.state,
                               .failures = v.failures,
                               .until_ms =
                                   v.state == ZL_BREAKER_OPEN
                                       ? (uint64_t)(now.wall_ms + v.open_until_ms - now.mono_ms)
                                       : 0,
                               .probes_out = v.probes_out,
                               .opened = v.opened};
}
