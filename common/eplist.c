/*  eplist: a client's broker endpoints and the one in use. */
#include "eplist.h"

#include "zl_alloc.h"

#include <czmq.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct _zl_eplist_t {
    char *items[ZL_EPLIST_MAX];
    size_t n;
    size_t index;  // the list entry in use, or used last before `outside`
    char *outside; // a leader's endpoint that is not in the list, or NULL
    char *text;    // "a, b"
};

static bool
s_blank (char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

zl_eplist_t *
zl_eplist_new (const char *text)
{
    zl_eplist_t *self = ZL_NEW (zl_eplist_t);
    const char *p = text ? text : "";
    size_t text_len = 1;
    for (;;) {
        const char *end = strchr (p, ',');
        if (!end)
            end = p + strlen (p);
        const char *from = p, *to = end;
        while (from < to && s_blank (*from))
            from++;
        while (to > from && s_blank (to[-1]))
            to--;
        if (from == to || (size_t)(to - from) > ZL_EPLIST_MAX_LEN || self->n == ZL_EPLIST_MAX) {
            zl_eplist_destroy (&self);
            errno = EINVAL;
            return NULL;
        }
        self->items[self->n++] = zl_strndup (from, (size_t)(to - from));
        text_len += (size_t)(to - from) + 2;
        if (!*end)
            break;
        p = end + 1;
    }
    self->text = zl_calloc (1, text_len);
    for (size_t i = 0; i < self->n; i++) {
        if (i)
            strcat (self->text, ", ");
        strcat (self->text, self->items[i]);
    }
    return self;
}

int
zl_eplist_probe (zl_eplist_t *self, const char **bad)
{
    zsock_t *probe = zsock_new (ZMQ_DEALER);
    if (!probe) {
        errno = ENOMEM;
        return -1;
    }
    zsock_set_linger (probe, 0);
    int rc = 0, saved = 0;
    for (size_t i = 0; rc == 0 && i < self->n; i++)
        if (zmq_connect (zsock_resolve (probe), self->items[i]) < 0) {
            saved = errno;
            *bad = self->items[i];
            rc = -1;
        }
    zsock_destroy (&probe);
    errno = saved;
    return rc;
}

void
zl_eplist_destroy (zl_eplist_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_eplist_t *self = *self_p;
    for (size_t i = 0; i < self->n; i++)
        free (self->items[i]);
    free (self->outside);
    free (self->text);
    free (self);
    *self_p = NULL;
}

size_t
zl_eplist_size (zl_eplist_t *self)
{
    return self->n;
}

const char *
zl_eplist_at (zl_eplist_t *self, size_t index)
{
    return index < self->n ? self->items[index] : NULL;
}

const char *
zl_eplist_current (zl_eplist_t *self)
{
    return self->outside ? self->outside : self->items[self->index];
}

const char *
zl_eplist_text (zl_eplist_t *self)
{
    return self->text;
}

bool
zl_eplist_roams (zl_eplist_t *self)
{
    return self->n > 1 || self->outside;
}

const char *
zl_eplist_next (zl_eplist_t *self)
{
    ZL_FREE (self->outside);
    self->index = (self->index + 1) % self->n;
    return self->items[self->index];
}

//  An endpoint a standby named is network input: dial only what looks like
//  one ("transport://address", text, no comma, not too long).
static bool
s_well_formed (const char *endpoint)
{
    if (!endpoint)
        return false;
    size_t len = strlen (endpoint);
    const char *sep = strstr (endpoint, "://");
    if (len == 0 || len > ZL_EPLIST_MAX_LEN || !sep || sep == endpoint || !sep[3])
        return false;
    for (const char *c = endpoint; *c; c++)
        if ((unsigned char)*c <= ' ' || *c == ',' || *c == 0x7f)
            return false;
    return true;
}

bool
zl_eplist_follow (zl_eplist_t *self, size_t n, const char *const *leader)
{
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; leader[i] && k < self->n; k++)
            if (!strcmp (leader[i], self->items[k])) {
                ZL_FREE (self->outside);
                self->index = k;
                return true;
            }
    for (size_t i = 0; i < n; i++)
        if (s_well_formed (leader[i])) {
            free (self->outside);
            self->outside = zl_strdup (leader[i]);
            return true;
        }
    zl_eplist_next (self);
    return false;
}
