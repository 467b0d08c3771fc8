/*  lead: this broker's leadership (lead.h). */
#include "lead.h"

#include "log.h"
#include "zl_alloc.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------- the store's calls
static zl_store_role_t
s_store_elect (void *ctx, zl_store_t *store, int64_t mono_ms, zl_store_lead_t *out)
{
    (void)ctx;
    return zl_store_elect (store, mono_ms, out);
}

static int64_t
s_store_elect_due (void *ctx, zl_store_t *store)
{
    (void)ctx;
    return zl_store_elect_due (store);
}

static zl_store_rc_t
s_store_commit (void *ctx, zl_store_t *store)
{
    (void)ctx;
    return zl_store_commit (store);
}

static const char *
s_store_recovery_cause (void *ctx, zl_store_t *store)
{
    (void)ctx;
    return zl_store_recovery_cause (store);
}

static const zl_leadership_t s_store_leadership = {s_store_elect, s_store_elect_due, s_store_commit,
                                                   s_store_recovery_cause};
static const zl_leadership_t *s_fns = &s_store_leadership;
static void *s_ctx;

void
zl_broker_set_leadership (const zl_leadership_t *fns, void *ctx)
{
    s_fns = fns ? fns : &s_store_leadership;
    s_ctx = fns ? ctx : NULL;
}

// ---------------------------------------------------------------- the state
struct _zl_lead_t {
    zl_store_t *store;
    char *name;
    zl_store_lead_t now; // as last elected
};

// The endpoint a standby names for each socket (store.h's slots).
static const int s_advertised[ZL_SOCK_COUNT] = {[ZL_SOCK_FRONTEND] = ZL_ADVERTISE_FRONTEND,
                                                [ZL_SOCK_BACKEND] = ZL_ADVERTISE_BACKEND,
                                                [ZL_SOCK_ADMIN] = ZL_ADVERTISE_ADMIN};

zl_lead_t *
zl_lead_new (zl_store_t *store, const char *name)
{
    zl_lead_t *self = ZL_NEW (zl_lead_t);
    self->store = store;
    self->name = zl_strdup (name);
    self->now.role = ZL_ROLE_STANDBY; // until the store says otherwise
    return self;
}

void
zl_lead_destroy (zl_lead_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free ((*self_p)->name);
    free (*self_p);
    *self_p = NULL;
}

// Say what changed in this broker's role, on a store that several brokers
// share (an LMDB broker always leads, and says nothing).
static void
s_say_role (zl_lead_t *self, const zl_store_lead_t *now, bool shared)
{
    const zl_store_lead_t *was = &self->now;
    if (!shared || (now->role == was->role && now->epoch == was->epoch && !now->took_over &&
                    !strcmp (now->leader_name, was->leader_name)))
        return;
    if (now->role == ZL_ROLE_LEADER)
        zl_info ("broker", "%s %s the lead (epoch %" PRIu64 ")", self->name,
                 now->took_over ? "took" : "holds", now->epoch);
    else if (now->role == ZL_ROLE_STANDBY && now->leader_name[0])
        zl_info ("broker", "%s stands by (epoch %" PRIu64 "): the leader is %s at %s", self->name,
                 now->epoch, now->leader_name,
                 now->leader[ZL_ADVERTISE_FRONTEND][0] ? now->leader[ZL_ADVERTISE_FRONTEND] : "?");
    else if (now->role == ZL_ROLE_STANDBY)
        zl_info ("broker", "%s stands by: no leader known yet", self->name);
    else
        zl_warn ("broker",
                 "%s: no writable database answers: refusing every request (UNAVAILABLE) "
                 "until one does",
                 self->name);
}

zl_store_role_t
zl_lead_elect (zl_lead_t *self, int64_t mono_ms, bool *was_leading)
{
    zl_store_lead_t lead;
    lead.role = s_fns->elect (s_ctx, self->store, mono_ms, &lead);
    s_say_role (self, &lead, zl_lead_due (self) != INT64_MAX);
    *was_leading = self->now.role == ZL_ROLE_LEADER;
    self->now = lead;
    return lead.role;
}

bool
zl_lead_step_down (zl_lead_t *self, zl_store_role_t role)
{
    bool was_leading = self->now.role == ZL_ROLE_LEADER;
    self->now.role = role;
    self->now.took_over = false;
    memset (self->now.leader, 0, sizeof self->now.leader);
    self->now.leader_name[0] = '\0';
    return was_leading;
}

const zl_store_lead_t *
zl_lead_state (zl_lead_t *self)
{
    return &self->now;
}

zl_store_role_t
zl_lead_role (zl_lead_t *self)
{
    return self->now.role;
}

int64_t
zl_lead_due (zl_lead_t *self)
{
    return s_fns->elect_due (s_ctx, self->store);
}

const char *
zl_lead_leader_for (zl_lead_t *self, zl_sock_t sock)
{
    return self->now.leader[s_advertised[sock]];
}

uint32_t
zl_lead_retry_after_ms (zl_lead_t *self, int64_t mono_ms)
{
    int64_t left = zl_lead_due (self) - mono_ms;
    return left < 100 ? 100 : left > 5000 ? 5000 : (uint32_t)left;
}

bool
zl_lead_answered_in_any_role (const zl_msg_t *msg)
{
    return msg->kind == ZL_MSG_ADMIN_REQUEST && msg->u.admin_request.op == ZL_ADMIN_STATS;
}

zl_store_rc_t
zl_lead_commit (zl_lead_t *self)
{
    return s_fns->commit (s_ctx, self->store);
}

zl_store_rc_t
zl_lead_commit_start (zl_lead_t *self)
{
    if (s_fns == &s_store_leadership)
        return zl_store_commit_start (self->store);
    return s_fns->commit (s_ctx, self->store); // the tests' table commits at once
}

const char *
zl_lead_recovery_cause (zl_lead_t *self)
{
    return s_fns->recovery_cause (s_ctx, self->store);
}
