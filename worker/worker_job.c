/*  worker_job: one held job, its copies and its cancellation flag. */
#include "worker_job.h"

#include "clock.h"
#include "zl_alloc.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define S_FALLBACK_STEP_MS 10 // flag checks when no eventfd could be made

// Bump copies into the tail of the record's single allocation.
typedef struct {
    char *at;
} s_bump_t;

static const char *
s_copy_str (s_bump_t *b, const char *s)
{
    size_t len = s ? strlen (s) : 0;
    char *out = b->at;
    if (len)
        memcpy (out, s, len);
    out[len] = '\0';
    b->at += len + 1;
    return out;
}

static size_t
s_str_size (const char *s)
{
    return (s ? strlen (s) : 0) + 1;
}

zl_held_job_t *
zl_held_job_new (const zl_worker_job_t *fields)
{
    // Layout: record | headers array | parent results array | payload |
    // parents' result bytes | strings.
    size_t head = sizeof (zl_held_job_t);
    size_t headers_size = fields->n_headers * sizeof (zl_header_t);
    size_t parents_size = fields->n_parent_results * sizeof (zl_parent_result_t);
    size_t results_size = 0;
    for (size_t i = 0; i < fields->n_parent_results; i++)
        results_size += fields->parent_results[i].result.len;
    size_t strings_size = s_str_size (fields->tenant) + s_str_size (fields->lane) +
                          s_str_size (fields->idempotency_key) + s_str_size (fields->ordering_key);
    for (size_t i = 0; i < fields->n_headers; i++)
        strings_size += s_str_size (fields->headers[i].key) + s_str_size (fields->headers[i].value);
    size_t ckpt_size = fields->checkpoint ? fields->checkpoint_len : 0;
    zl_held_job_t *self = zl_calloc (1, head + headers_size + parents_size + fields->len +
                                            results_size + ckpt_size + strings_size);

    self->pub = *fields;
    zl_header_t *headers = (zl_header_t *)((char *)self + head);
    zl_parent_result_t *parents = (zl_parent_result_t *)((char *)headers + headers_size);
    uint8_t *payload = (uint8_t *)parents + parents_size;
    if (fields->len)
        memcpy (payload, fields->payload, fields->len);
    uint8_t *bytes = payload + fields->len;
    for (size_t i = 0; i < fields->n_parent_results; i++) {
        const zl_parent_result_t *in = &fields->parent_results[i];
        if (in->result.len)
            memcpy (bytes, in->result.data, in->result.len);
        parents[i] = (zl_parent_result_t){in->job_id, {bytes, in->result.len}};
        bytes += in->result.len;
    }
    self->pub.parent_results = parents;
    self->pub.checkpoint = NULL;
    self->pub.checkpoint_len = 0;
    if (ckpt_size) {
        memcpy (bytes, fields->checkpoint, ckpt_size);
        self->pub.checkpoint = bytes;
        self->pub.checkpoint_len = ckpt_size;
        bytes += ckpt_size;
    }
    s_bump_t b = {(char *)bytes};
    self->pub.payload = payload;
    self->pub.tenant = s_copy_str (&b, fields->tenant);
    self->pub.lane = s_copy_str (&b, fields->lane);
    self->pub.idempotency_key = s_copy_str (&b, fields->idempotency_key);
    self->pub.ordering_key = s_copy_str (&b, fields->ordering_key);
    for (size_t i = 0; i < fields->n_headers; i++) {
        headers[i].key = s_copy_str (&b, fields->headers[i].key);
        headers[i].value = s_copy_str (&b, fields->headers[i].value);
    }
    self->pub.headers = headers;
    atomic_init (&self->cancel, ZL_WORKER_LIVE);
    atomic_init (&self->cancel_fd, -1); // made by the first waiter (see s_cancel_fd)
    atomic_init (&self->ckpt, NULL);
    self->ckpt_flag = NULL;
    self->wake_fd = -1;
    return self;
}

void
zl_held_job_destroy (zl_held_job_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_held_job_t *self = *self_p;
    int fd = atomic_load (&self->cancel_fd);
    if (fd >= 0)
        close (fd);
    free (atomic_exchange (&self->ckpt, NULL));
    free (self->result.data);
    free (self);
    *self_p = NULL;
}

zl_held_ckpt_t *
zl_held_job_take_checkpoint (zl_held_job_t *self)
{
    return atomic_exchange (&self->ckpt, NULL);
}

int
zl_worker_job_checkpoint (const zl_worker_job_t *job, const void *data, size_t len)
{
    zl_held_job_t *self = zl_held_job_of (job);
    if (len == 0) {
        errno = EINVAL;
        return -1;
    }
    if (!self->ckpt_flag) {
        errno = ENOTCONN;
        return -1;
    }
    zl_held_ckpt_t *c = zl_malloc (sizeof *c + len);
    c->len = len;
    memcpy (c->data, data, len);
    free (atomic_exchange (&self->ckpt, c)); // one not sent yet: replaced
    atomic_store (self->ckpt_flag, 1);
    if (self->wake_fd >= 0) {
        uint64_t one = 1;
        ssize_t rc = write (self->wake_fd, &one, sizeof one);
        (void)rc; // the flag is what matters; the write only wakes the loop
    }
    return 0;
}

/*  Make `fd` (an eventfd) readable; -1 is ignored. */
static void
s_signal (int fd)
{
    if (fd < 0)
        return;
    uint64_t one = 1;
    ssize_t rc = write (fd, &one, sizeof one);
    (void)rc; // cannot fail short of a counter overflow; the flag is set anyway
}

/*  Return the job's cancel eventfd, making it on first use (only jobs whose
    handler waits on it pay a descriptor; the backlog does not), or -1 if
    no descriptor is available. */
static int
s_cancel_fd (zl_held_job_t *self)
{
    int fd = atomic_load (&self->cancel_fd);
    if (fd >= 0)
        return fd;
    int mine = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (mine < 0)
        return -1;
    int expected = -1;
    if (!atomic_compare_exchange_strong (&self->cancel_fd, &expected, mine)) {
        close (mine); // another thread was first
        return expected;
    }
    if (atomic_load (&self->cancel) != ZL_WORKER_LIVE)
        s_signal (mine); // cancelled before the fd existed
    return mine;
}

zl_held_job_t *
zl_held_job_of (const zl_worker_job_t *job)
{
    // pub is the first member, so the pointers coincide.
    return (zl_held_job_t *)job;
}

bool
zl_held_job_cancel (zl_held_job_t *self, zl_worker_cancel_t why)
{
    int expected = ZL_WORKER_LIVE;
    if (why == ZL_WORKER_LIVE ||
        !atomic_compare_exchange_strong (&self->cancel, &expected, (int)why))
        return false;
    // Flag first, then the fd: s_cancel_fd does the reverse, so at least one
    // side sees the other and the fd cannot miss the cancellation.
    s_signal (atomic_load (&self->cancel_fd));
    return true;
}

// ------------------------------------------------------------------ public

bool
zl_worker_job_cancelled (const zl_worker_job_t *job)
{
    return zl_worker_job_cancel_reason (job) != ZL_WORKER_LIVE;
}

zl_worker_cancel_t
zl_worker_job_cancel_reason (const zl_worker_job_t *job)
{
    return (zl_worker_cancel_t)atomic_load (&zl_held_job_of (job)->cancel);
}

const char *
zl_worker_cancel_text (zl_worker_cancel_t why)
{
    switch (why) {
    case ZL_WORKER_LIVE: return "not cancelled";
    case ZL_WORKER_LEASE_LOST: return "lease lost";
    case ZL_WORKER_DISCONNECTED: return "lease lost (broker connection lost)";
    case ZL_WORKER_MAX_RUN: return "max run time exceeded";
    case ZL_WORKER_SHUTDOWN: return "worker shutting down";
    case ZL_WORKER_CANCELLED: return "cancelled by the broker";
    }
    return "cancelled";
}

bool
zl_worker_job_wait_cancelled (const zl_worker_job_t *job, int timeout_ms)
{
    int fd = s_cancel_fd (zl_held_job_of (job));
    int64_t deadline = timeout_ms < 0 ? -1 : zl_clock_mono_ms () + timeout_ms;
    while (!zl_worker_job_cancelled (job)) {
        int left = -1;
        if (deadline >= 0) {
            int64_t ms = deadline - zl_clock_mono_ms ();
            if (ms <= 0)
                break;
            left = (int)ms;
        }
        // Without a descriptor, fall back to checking the flag every 10 ms.
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int step = fd < 0 && (left < 0 || left > S_FALLBACK_STEP_MS) ? S_FALLBACK_STEP_MS : left;
        if (poll (&p, fd < 0 ? 0 : 1, step) < 0 && errno != EINTR)
            break;
    }
    return zl_worker_job_cancelled (job);
}

int
zl_worker_job_cancel_fd (const zl_worker_job_t *job)
{
    return s_cancel_fd (zl_held_job_of (job));
}

zl_worker_job_t *
zl_worker_job_new (const zl_worker_job_t *fields)
{
    zl_held_job_t *held = zl_held_job_new (fields);
    return held ? &held->pub : NULL;
}

void
zl_worker_job_destroy (zl_worker_job_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_held_job_t *held = zl_held_job_of (*self_p);
    zl_held_job_destroy (&held);
    *self_p = NULL;
}

void
zl_worker_job_cancel (const zl_worker_job_t *job, zl_worker_cancel_t why)
{
    zl_held_job_cancel (zl_held_job_of (job), why);
}
