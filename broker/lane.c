#include "lane.h"

#include "breaker.h"

#include "msg.h"
#include "zl_alloc.h"

#include <czmq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct _zl_lanes_t {
    zl_lane_t **lanes;
    uint32_t n_lanes;
    zl_tenant_t **tenants;
    uint32_t n_tenants, cap_tenants;
    zhashx_t *lane_by_name;   // borrowed lane pointers
    zhashx_t *tenant_by_name; // borrowed tenant pointers
    bool auto_lanes;
    zl_lane_config_t lane_defaults;
    zl_tenant_config_t tenant_defaults;
    const zl_broker_config_t *cfg;
};

static zl_lane_t *
s_add_lane (zl_lanes_t *self, const zl_lane_config_t *lc, const char *name)
{
    zl_lane_t *lane = ZL_NEW (zl_lane_t);
    lane->index = self->n_lanes;
    lane->name = zl_strdup (name);
    lane->cfg = *lc;
    lane->cfg.name = lane->name;
    if (lc->breaker_failures)
        lane->breaker = zl_breaker_new (lc->breaker_failures, lc->breaker_window_ms,
                                        lc->breaker_cooldown_ms, lc->breaker_probes);
    self->lanes = zl_realloc (self->lanes, (self->n_lanes + 1) * sizeof (zl_lane_t *));
    self->lanes[self->n_lanes++] = lane;
    zhashx_insert (self->lane_by_name, lane->name, lane);
    return lane;
}

zl_lanes_t *
zl_lanes_new (const zl_broker_config_t *cfg)
{
    zl_lanes_t *self = ZL_NEW (zl_lanes_t);
    self->lane_by_name = zhashx_new ();
    self->tenant_by_name = zhashx_new ();
    self->auto_lanes = cfg->auto_lanes;
    self->lane_defaults = cfg->lane_defaults;
    self->tenant_defaults = cfg->tenant_defaults;
    self->cfg = cfg;
    for (size_t i = 0; i < cfg->n_lanes; i++)
        s_add_lane (self, &cfg->lanes[i], cfg->lanes[i].name);
    for (size_t i = 0; i < cfg->n_tenants; i++)
        zl_lanes_tenant (self, cfg->tenants[i].name);
    return self;
}

void
zl_lanes_destroy (zl_lanes_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_lanes_t *self = *self_p;
    for (uint32_t i = 0; i < self->n_lanes; i++) {
        zl_breaker_destroy (&self->lanes[i]->breaker);
        free (self->lanes[i]->name);
        free (self->lanes[i]);
    }
    for (uint32_t i = 0; i < self->n_tenants; i++) {
        free (self->tenants[i]->name);
        free (self->tenants[i]);
    }
    free (self->lanes);
    free (self->tenants);
    zhashx_destroy (&self->lane_by_name);
    zhashx_destroy (&self->tenant_by_name);
    free (self);
    *self_p = NULL;
}

zl_lane_t *
zl_lanes_lookup (zl_lanes_t *self, const char *name)
{
    zl_lane_t *lane = zhashx_lookup (self->lane_by_name, name);
    if (!lane && self->auto_lanes && name[0] && strlen (name) <= ZL_MAX_NAME &&
        self->n_lanes < self->cfg->max_lanes)
        lane = s_add_lane (self, &self->lane_defaults, name);
    return lane;
}

zl_lane_t *
zl_lanes_find (zl_lanes_t *self, const char *name)
{
    return zhashx_lookup (self->lane_by_name, name);
}

zl_lane_t *
zl_lanes_add (zl_lanes_t *self, const char *name)
{
    zl_lane_t *lane = zhashx_lookup (self->lane_by_name, name);
    return lane ? lane : s_add_lane (self, &self->lane_defaults, name);
}

zl_lane_t *
zl_lanes_at (zl_lanes_t *self, uint32_t index)
{
    return index < self->n_lanes ? self->lanes[index] : NULL;
}

uint32_t
zl_lanes_count (zl_lanes_t *self)
{
    return self->n_lanes;
}

zl_tenant_t *
zl_lanes_tenant_find (zl_lanes_t *self, const char *name)
{
    return zhashx_lookup (self->tenant_by_name, name);
}

zl_tenant_t *
zl_lanes_tenant (zl_lanes_t *self, const char *name)
{
    zl_tenant_t *t = zhashx_lookup (self->tenant_by_name, name);
    if (t)
        return t;
    t = ZL_NEW (zl_tenant_t);
    t->index = self->n_tenants;
    t->name = zl_strdup (name);
    t->cfg = self->tenant_defaults;
    for (size_t i = 0; i < self->cfg->n_tenants; i++)
        if (strcmp (self->cfg->tenants[i].name, name) == 0)
            t->cfg = self->cfg->tenants[i];
    t->cfg.name = t->name;
    if (self->n_tenants == self->cap_tenants) {
        self->cap_tenants = self->cap_tenants ? self->cap_tenants * 2 : 16;
        self->tenants = zl_realloc (self->tenants, self->cap_tenants * sizeof (zl_tenant_t *));
    }
    self->tenants[self->n_tenants++] = t;
    zhashx_insert (self->tenant_by_name, t->name, t);
    return t;
}

zl_tenant_t *
zl_lanes_tenant_at (zl_lanes_t *self, uint32_t index)
{
    return index < self->n_tenants ? self->tenants[index] : NULL;
}

uint32_t
zl_lanes_tenant_count (zl_lanes_t *self)
{
    return self->n_tenants;
}

uint64_t
zl_lanes_total_depth (zl_lanes_t *self)
{
    uint64_t depth = 0;
    for (uint32_t i = 0; i < self->n_lanes; i++)
        depth += self->lanes[i]->depth;
    return depth;
}

void
zl_lanes_count_depth (zl_lane_t *lane, zl_tenant_t *tenant, int64_t delta)
{
    lane->depth += (uint64_t)delta;
    tenant->depth += (uint64_t)delta;
}

void
zl_lanes_count_running (zl_lane_t *lane, zl_tenant_t *tenant, int delta)
{
    lane->in_flight += (uint32_t)delta;
    tenant->in_flight += (uint32_t)delta;
}

void
zl_lane_set_paused (zl_lane_t *lane, bool paused)
{
    lane->paused = paused;
}

const char *
zl_lanes_names (zl_lanes_t *self, zl_arena_t *arena, uint32_t max)
{
    uint32_t n = self->n_lanes;
    uint32_t shown = n < max ? n : max;
    size_t size = 32;
    for (uint32_t i = 0; i < shown; i++)
        size += strlen (self->lanes[i]->name) + 2;
    char *out = zl_arena_alloc (arena, size);
    out[0] = '\0';
    for (uint32_t i = 0; i < shown; i++) {
        if (i)
            strcat (out, ", ");
        strcat (out, self->lanes[i]->name);
    }
    if (shown < n)
        snprintf (out + strlen (out), 32, " and %u more", n - shown);
    return out;
}

int64_t
zl_lanes_breaker_wake (zl_lanes_t *self)
{
    int64_t wake = -1;
    for (uint32_t i = 0; i < self->n_lanes; i++) {
        int64_t t = self->lanes[i]->breaker ? zl_breaker_next_ms (self->lanes[i]->breaker) : -1;
        if (t >= 0 && (wake < 0 || t < wake))
            wake = t;
    }
    return wake;
}
