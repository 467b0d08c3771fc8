#include "lease.h"

#include "log.h"
#include "zl_alloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

struct _zl_lease_tokens_t {
    uint64_t batch[ZL_LEASE_BATCH];
    uint32_t left;              // unused tokens: batch[0 .. left - 1]
    zl_lease_random_fn *random; // getrandom, or a test's stand-in
};

// ---------------------------------------------------------------- tokens
zl_lease_tokens_t *
zl_lease_tokens_new (void)
{
    zl_lease_tokens_t *self = ZL_NEW (zl_lease_tokens_t);
    self->random = getrandom;
    return self;
}

void
zl_lease_tokens_destroy (zl_lease_tokens_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_lease_tokens_t *self = *self_p;
    explicit_bzero (self->batch, sizeof self->batch);
    free (self);
    *self_p = NULL;
}

void
zl_lease_tokens_set_random (zl_lease_tokens_t *self, zl_lease_random_fn *fn)
{
    self->random = fn ? fn : getrandom;
}

// Fill the whole batch from the CSPRNG: retry EINTR and short reads (a
// request over 256 bytes may be cut short by a signal); abort on any other
// failure rather than hand out guessable tokens.
static void
s_refill (zl_lease_tokens_t *self)
{
    unsigned char *buf = (unsigned char *)self->batch;
    size_t want = sizeof self->batch, got = 0;
    while (got < want) {
        ssize_t n = self->random (buf + got, want - got, 0);
        if (n > 0)
            got += (size_t)n;
        else if (n < 0 && errno == EINTR)
            continue;
        else {
            zl_error ("lease",
                      "getrandom failed (%s): cannot make unguessable lease tokens, "
                      "aborting",
                      n < 0 ? strerror (errno) : "no bytes");
            abort ();
        }
    }
    self->left = ZL_LEASE_BATCH;
}

uint64_t
zl_lease_tokens_next (zl_lease_tokens_t *self)
{
    if (self->left == 0)
        s_refill (self);
    uint64_t token = self->batch[--self->left] | 1;
    self->batch[self->left] = 0; // a token handed out stays only in its lease
    return token;
}

// ---------------------------------------------------------------- leases
zl_lease_t *
zl_lease_new (zl_lease_tokens_t *tokens, uint32_t lease_ms, uint32_t max_run_ms, zl_now_t now)
{
    zl_lease_t *self = zl_malloc (sizeof *self);
    self->token = zl_lease_tokens_next (tokens);
    self->lease_deadline_ms = now.mono_ms + lease_ms;
    self->run_deadline_ms = max_run_ms ? now.mono_ms + max_run_ms : 0;
    self->started_at_ms = now.wall_ms;
    self->started_us = now.mono_us;
    self->worker = NULL;
    self->prev = self->next = NULL;
    return self;
}

void
zl_lease_destroy (zl_lease_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free (*self_p);
    *self_p = NULL;
}

int64_t
zl_lease_due_ms (const zl_lease_t *self)
{
    if (self->run_deadline_ms && self->run_deadline_ms < self->lease_deadline_ms)
        return self->run_deadline_ms;
    return self->lease_deadline_ms;
}

bool
zl_lease_extend (zl_lease_t *self, uint32_t lease_ms, zl_now_t now)
{
    self->lease_deadline_ms = now.mono_ms + lease_ms;
    return zl_lease_due_ms (self) != self->lease_deadline_ms;
}

bool
zl_lease_max_run_reached (const zl_lease_t *self, int64_t now_ms)
{
    return self->run_deadline_ms && now_ms >= self->run_deadline_ms;
}

uint64_t
zl_lease_run_us (const zl_lease_t *self, zl_now_t now)
{
    return (uint64_t)(now.mono_us - self->started_us);
}
