/*  store_pg: the PostgreSQL backend of the store (store_backend.h). Being
    written: open refuses for now. */
#include "store_backend.h"

#include <stdio.h>

static void *
s_open (const char *location, zl_durability_t mode, uint64_t map_size, char *err, size_t errlen)
{
    (void)location;
    (void)mode;
    (void)map_size;
    snprintf (err, errlen, "the PostgreSQL store is not finished yet");
    return NULL;
}

const zl_store_backend_t zl_store_pg = {.name = "postgresql", .open = s_open};
