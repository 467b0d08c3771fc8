#include "clients.h"

#include "log.h"
#include "zl_alloc.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

struct _zl_clients_t {
    char *dir;
    zhashx_t *by_key;   // public key text -> zcert_t (owned)
    uint64_t signature; // of the directory listing it was read from
    int64_t checked_ms; // when the directory was last looked at
    int64_t miss_ms;    // a key not found looks again after this long
    bool checked_once;
};

static void
s_cert_destroy (void **item)
{
    zcert_destroy ((zcert_t **)item);
}

// Call `fn` for each regular, not hidden file in `dir`.
typedef void (file_fn) (void *arg, const char *name, const char *path, const struct stat *sb);

static void
s_each_file (const char *dir, file_fn *fn, void *arg)
{
    DIR *d = opendir (dir);
    if (!d)
        return;
    struct dirent *e;
    char path[4096];
    while ((e = readdir (d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf (path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (stat (path, &sb) == 0 && S_ISREG (sb.st_mode))
            fn (arg, e->d_name, path, &sb);
    }
    closedir (d);
}

// Add one file's name, size and change time to a fingerprint. Order-free
// (a sum), since readdir's order is not stable.
static void
s_sign_file (void *arg, const char *name, const char *path, const struct stat *sb)
{
    (void)path;
    uint64_t parts[4] = {(uint64_t)sb->st_size, (uint64_t)sb->st_mtim.tv_sec,
                         (uint64_t)sb->st_mtim.tv_nsec, (uint64_t)sb->st_ino};
    uint64_t f = 1469598103934665603ULL; // FNV-1a
    for (const char *p = name; *p; p++)
        f = (f ^ (uint8_t)*p) * 1099511628211ULL;
    for (int i = 0; i < 4; i++)
        f = (f ^ parts[i]) * 1099511628211ULL;
    *(uint64_t *)arg += f;
}

// A fingerprint of the directory's listing: one readdir and a stat per file.
static uint64_t
s_signature (const char *dir)
{
    uint64_t h = 0;
    s_each_file (dir, s_sign_file, &h);
    return h;
}

static bool
s_ends_with (const char *s, const char *suffix)
{
    size_t n = strlen (s), m = strlen (suffix);
    return n >= m && !strcmp (s + n - m, suffix);
}

typedef struct {
    zhashx_t *by_key;   // public key text -> zcert_t
    zhashx_t *file_of;  // public key text -> the file it came from
    zhashx_t *repeated; // keys seen in two files
} load_t;

#define MAX_CERT_BYTES (64 * 1024)

// True if the file parses as a czmq certificate. zcert_load leaks on a file
// that does not parse (czmq 4.2's zconfig_load keeps no owner for the file
// handle), so a file is parsed from memory first and loaded only if it does.
static bool
s_is_cert (const char *path, const struct stat *sb)
{
    if (sb->st_size <= 0 || sb->st_size > MAX_CERT_BYTES)
        return false;
    FILE *f = fopen (path, "rb");
    if (!f)
        return false;
    char *text = zl_malloc ((size_t)sb->st_size + 1);
    size_t n = fread (text, 1, (size_t)sb->st_size, f);
    fclose (f);
    text[n] = '\0';
    zconfig_t *root = strlen (text) == n ? zconfig_str_load (text) : NULL;
    const char *key = root ? zconfig_get (root, "/curve/public-key", NULL) : NULL;
    bool ok = key && strlen (key) == 40;
    zconfig_destroy (&root);
    free (text);
    return ok;
}

static void
s_load_file (void *arg, const char *name, const char *path, const struct stat *sb)
{
    load_t *l = arg;
    if (s_ends_with (name, "_secret")) {
        zl_warn ("clients",
                 "%s holds a secret key: skipped (secret keys stay on the client's "
                 "host; the clients directory takes public certificates)",
                 path);
        return;
    }
    zcert_t *cert = s_is_cert (path, sb) ? zcert_load (path) : NULL;
    if (!cert) {
        zl_warn ("clients", "%s is not a certificate: skipped", path);
        return;
    }
    const char *key = zcert_public_txt (cert);
    const char *first = zhashx_lookup (l->file_of, key);
    if (first) {
        zl_error ("clients", "%s and %s hold the same public key %s: neither is let in", first,
                  name, key);
        zhashx_insert (l->repeated, key, (void *)first);
        zcert_destroy (&cert);
        return;
    }
    zhashx_insert (l->file_of, key, (void *)name);
    zhashx_insert (l->by_key, key, cert);
}

// Read every certificate in the directory into a fresh table.
static zhashx_t *
s_load (const char *dir)
{
    load_t l = {zhashx_new (), zhashx_new (), zhashx_new ()};
    zhashx_set_destructor (l.by_key, s_cert_destroy);
    for (int i = 0; i < 2; i++) {
        zhashx_t *h = i ? l.repeated : l.file_of;
        zhashx_set_destructor (h, (zhashx_destructor_fn *)zstr_free);
        zhashx_set_duplicator (h, (zhashx_duplicator_fn *)strdup);
    }
    s_each_file (dir, s_load_file, &l);
    for (const char *first = zhashx_first (l.repeated); first; first = zhashx_next (l.repeated))
        zhashx_delete (l.by_key, zhashx_cursor (l.repeated));
    zhashx_destroy (&l.repeated);
    zhashx_destroy (&l.file_of);
    return l.by_key;
}

zl_clients_t *
zl_clients_new (const char *dir, int64_t miss_ms)
{
    zl_clients_t *self = ZL_NEW (zl_clients_t);
    self->miss_ms = miss_ms;
    self->dir = zl_strdup (dir);
    self->signature = s_signature (dir);
    self->by_key = s_load (dir);
    return self;
}

void
zl_clients_destroy (zl_clients_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_clients_t *self = *self_p;
    zhashx_destroy (&self->by_key);
    free (self->dir);
    free (self);
    *self_p = NULL;
}

// Read the directory again if it changed and it was not looked at in the
// last `interval_ms`.
static void
s_refresh (zl_clients_t *self, int64_t now_ms, int64_t interval_ms)
{
    if (self->checked_once && now_ms - self->checked_ms < interval_ms)
        return;
    self->checked_once = true;
    self->checked_ms = now_ms;
    uint64_t signature = s_signature (self->dir);
    if (signature == self->signature)
        return;
    self->signature = signature;
    zhashx_destroy (&self->by_key);
    self->by_key = s_load (self->dir);
    zl_info ("clients", "%s changed: %zu client key(s) let in", self->dir,
             zhashx_size (self->by_key));
}

zcert_t *
zl_clients_lookup (zl_clients_t *self, const char *public_txt, int64_t now_ms)
{
    s_refresh (self, now_ms, ZL_CLIENTS_CHECK_MS);
    zcert_t *cert = zhashx_lookup (self->by_key, public_txt);
    if (!cert) {
        s_refresh (self, now_ms, self->miss_ms);
        cert = zhashx_lookup (self->by_key, public_txt);
    }
    return cert;
}

bool
zl_clients_listed (const char *list, const char *name)
{
    if (!list)
        return false;
    if (!strcmp (list, "*"))
        return true;
    size_t n = strlen (name);
    for (const char *p = list; *p;) {
        const char *comma = strchr (p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen (p);
        while (len && *p == ' ')
            p++, len--;
        if (len == n && !strncmp (p, name, n))
            return true;
        if (!comma)
            break;
        p = comma + 1;
    }
    return false;
}

size_t
zl_clients_count (zl_clients_t *self)
{
    return zhashx_size (self->by_key);
}
