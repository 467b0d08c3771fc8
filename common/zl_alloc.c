#include "zl_alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
s_out_of_memory (size_t size)
{
    fprintf (stderr, "zlane: out of memory allocating %zu bytes, aborting\n", size);
    abort ();
}

void *
zl_malloc (size_t size)
{
    void *p = malloc (size ? size : 1);
    if (!p)
        s_out_of_memory (size);
    return p;
}

void *
zl_calloc (size_t count, size_t size)
{
    void *p = calloc (count ? count : 1, size ? size : 1);
    if (!p)
        s_out_of_memory (count * size);
    return p;
}

void *
zl_realloc (void *ptr, size_t size)
{
    void *p = realloc (ptr, size ? size : 1);
    if (!p)
        s_out_of_memory (size);
    return p;
}

char *
zl_strdup (const char *s)
{
    return s ? zl_strndup (s, strlen (s)) : NULL;
}

char *
zl_strndup (const char *s, size_t len)
{
    char *p = zl_malloc (len + 1);
    memcpy (p, s, len);
    p[len] = '\0';
    return p;
}
