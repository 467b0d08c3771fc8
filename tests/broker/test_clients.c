/*  test_clients: the CURVE clients directory (broker/clients.c). Keys are
    found with their metadata; a key in two files is let in from neither
    (czmq's zcertstore would abort); secret files and files that are not
    certificates are skipped; a key added counts at the next millisecond, a
    key removed or rewritten once ZL_CLIENTS_CHECK_MS have passed, on the
    clock the caller gives (no sleeps: the clock is simulated). */
#define _GNU_SOURCE // nftw, mkdtemp
#include "clients.h"
#include "log.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <czmq.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T0 1000000 // simulated monotonic ms

typedef struct {
    char dir[1024];
} fx_t;

static int
s_rm_entry (const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove (path);
}

static int
s_setup (void **state)
{
    zl_log_set_level (ZL_LOG_ERROR);
    fx_t *fx = calloc (1, sizeof *fx);
    const char *tmp = getenv ("TMPDIR");
    snprintf (fx->dir, sizeof fx->dir, "%s/zlane-test-clients-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null (mkdtemp (fx->dir));
    *state = fx;
    return 0;
}

static int
s_teardown (void **state)
{
    fx_t *fx = *state;
    nftw (fx->dir, s_rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    free (fx);
    return 0;
}

// A new key pair with `role`; its public certificate saved as DIR/NAME.
// Returns the certificate (caller destroys).
static zcert_t *
s_cert (fx_t *fx, const char *name, const char *role)
{
    zcert_t *cert = zcert_new ();
    zcert_set_meta (cert, "role", "%s", role);
    char path[1100];
    snprintf (path, sizeof path, "%s/%s", fx->dir, name);
    assert_int_equal (zcert_save_public (cert, path), 0);
    return cert;
}

static void
s_file (fx_t *fx, const char *name, const char *text)
{
    char path[1100];
    snprintf (path, sizeof path, "%s/%s", fx->dir, name);
    FILE *f = fopen (path, "w");
    assert_non_null (f);
    fputs (text, f);
    fclose (f);
}

static void
s_unlink (fx_t *fx, const char *name)
{
    char path[1100];
    snprintf (path, sizeof path, "%s/%s", fx->dir, name);
    assert_int_equal (unlink (path), 0);
}

// The role the registry holds for `cert`'s key at `now`, or NULL.
static const char *
s_role (zl_clients_t *clients, zcert_t *cert, int64_t now)
{
    zcert_t *got = zl_clients_lookup (clients, zcert_public_txt (cert), now);
    return got ? zcert_meta (got, "role") : NULL;
}

static void
test_keys_and_metadata (void **state)
{
    fx_t *fx = *state;
    zcert_t *web = s_cert (fx, "web-1", "producer");
    zcert_t *worker = s_cert (fx, "worker-1", "worker");
    zl_clients_t *clients = zl_clients_new (fx->dir, ZL_CLIENTS_MISS_MS);
    assert_int_equal (zl_clients_count (clients), 2);
    assert_string_equal (s_role (clients, web, T0), "producer");
    assert_string_equal (s_role (clients, worker, T0), "worker");
    zcert_t *stranger = zcert_new ();
    assert_null (s_role (clients, stranger, T0));
    assert_null (zl_clients_lookup (clients, "not a key", T0));
    zl_clients_destroy (&clients);
    assert_null (clients);
    zl_clients_destroy (&clients); // NULL-safe
    zcert_destroy (&stranger);
    zcert_destroy (&web);
    zcert_destroy (&worker);
}

// Two files with one public key (say, one copied under a new name with other
// bindings): neither is let in; the other keys are.
static void
test_repeated_key_is_let_in_from_neither (void **state)
{
    fx_t *fx = *state;
    zcert_t *web = s_cert (fx, "web-1", "producer");
    zcert_t *ops = s_cert (fx, "ops", "admin");
    char path[1100];
    snprintf (path, sizeof path, "%s/ops-copy", fx->dir);
    zcert_t *copy = zcert_new_from (zcert_public_key (ops), zcert_secret_key (ops));
    zcert_set_meta (copy, "role", "subscriber");
    assert_int_equal (zcert_save_public (copy, path), 0);
    zcert_destroy (&copy);
    zl_clients_t *clients = zl_clients_new (fx->dir, ZL_CLIENTS_MISS_MS);
    assert_int_equal (zl_clients_count (clients), 1);
    assert_null (s_role (clients, ops, T0));
    assert_string_equal (s_role (clients, web, T0), "producer");
    // once the copy goes, the key is let in again (a miss looks again)
    s_unlink (fx, "ops-copy");
    assert_string_equal (s_role (clients, ops, T0 + ZL_CLIENTS_MISS_MS), "admin");
    zl_clients_destroy (&clients);
    zcert_destroy (&web);
    zcert_destroy (&ops);
}

// A secret key file and a file that is not a certificate are skipped.
static void
test_secret_and_junk_files_are_skipped (void **state)
{
    fx_t *fx = *state;
    zcert_t *web = zcert_new ();
    zcert_set_meta (web, "role", "producer");
    char path[1100];
    snprintf (path, sizeof path, "%s/web-1", fx->dir);
    assert_int_equal (zcert_save (web, path), 0); // web-1 and web-1_secret
    s_file (fx, "README", "these are the client keys\n");
    s_file (fx, ".hidden", "x\n");
    zl_clients_t *clients = zl_clients_new (fx->dir, ZL_CLIENTS_MISS_MS);
    assert_int_equal (zl_clients_count (clients), 1);
    assert_string_equal (s_role (clients, web, T0), "producer");
    zl_clients_destroy (&clients);
    zcert_destroy (&web);
}

// Keys added, removed and rewritten count once the check interval passed.
static void
test_directory_changes_count_after_the_interval (void **state)
{
    fx_t *fx = *state;
    zcert_t *web = s_cert (fx, "web-1", "producer");
    zl_clients_t *clients = zl_clients_new (fx->dir, ZL_CLIENTS_MISS_MS);
    int64_t now = T0;
    assert_string_equal (s_role (clients, web, now), "producer");

    // added: a miss looks at the directory again, at most every
    // ZL_CLIENTS_MISS_MS, so within that time the new key is still refused
    zcert_t *late = s_cert (fx, "late", "worker");
    assert_null (s_role (clients, late, now + ZL_CLIENTS_MISS_MS - 1));
    now += ZL_CLIENTS_MISS_MS;
    assert_string_equal (s_role (clients, late, now), "worker");
    assert_int_equal (zl_clients_count (clients), 2);

    // removed
    s_unlink (fx, "web-1");
    assert_string_equal (s_role (clients, web, now + 1), "producer");
    now += ZL_CLIENTS_CHECK_MS;
    assert_null (s_role (clients, web, now));
    assert_int_equal (zl_clients_count (clients), 1);

    // rewritten with other bindings (same name, other size)
    char path[1100];
    snprintf (path, sizeof path, "%s/late", fx->dir);
    zcert_t *again = zcert_new_from (zcert_public_key (late), zcert_secret_key (late));
    zcert_set_meta (again, "role", "admin");
    zcert_set_meta (again, "lanes", "a,b,c");
    assert_int_equal (zcert_save_public (again, path), 0);
    zcert_destroy (&again);
    now += ZL_CLIENTS_CHECK_MS;
    assert_string_equal (s_role (clients, late, now), "admin");
    zcert_t *got = zl_clients_lookup (clients, zcert_public_txt (late), now);
    assert_non_null (got);
    assert_string_equal (zcert_meta (got, "lanes"), "a,b,c");

    // an empty directory lets nobody in
    s_unlink (fx, "late");
    now += ZL_CLIENTS_CHECK_MS;
    assert_null (s_role (clients, late, now));
    assert_int_equal (zl_clients_count (clients), 0);
    zl_clients_destroy (&clients);
    zcert_destroy (&web);
    zcert_destroy (&late);
}

// With miss_ms = ZL_CLIENTS_CHECK_MS (the ZAP handler's, which strangers
// reach), unknown keys do not make it read the directory more often.
static void
test_misses_are_rate_limited (void **state)
{
    fx_t *fx = *state;
    zcert_t *web = s_cert (fx, "web-1", "producer");
    zl_clients_t *clients = zl_clients_new (fx->dir, ZL_CLIENTS_CHECK_MS);
    int64_t now = T0;
    assert_string_equal (s_role (clients, web, now), "producer"); // looked at T0
    zcert_t *late = s_cert (fx, "late", "worker");
    for (int64_t t = now + ZL_CLIENTS_MISS_MS; t < now + ZL_CLIENTS_CHECK_MS; t += 10)
        assert_null (s_role (clients, late, t));
    assert_string_equal (s_role (clients, late, now + ZL_CLIENTS_CHECK_MS), "worker");
    zl_clients_destroy (&clients);
    zcert_destroy (&web);
    zcert_destroy (&late);
}

// The comma lists certificates carry (tenants, lanes) and role sets.
static void
test_listed (void **state)
{
    (void)state;
    assert_true (zl_clients_listed ("*", "anything"));
    assert_true (zl_clients_listed ("acme,globex", "acme"));
    assert_true (zl_clients_listed ("acme,globex", "globex"));
    assert_true (zl_clients_listed ("acme, globex", "globex")); // a space after the comma
    assert_true (zl_clients_listed ("chat", "chat"));
    assert_false (zl_clients_listed ("acme,globex", "acm")); // not a prefix
    assert_false (zl_clients_listed ("acme,globex", "acmeglobex"));
    assert_false (zl_clients_listed ("acme,globex", "*")); // "*" only as the list
    assert_false (zl_clients_listed ("", "acme"));
    assert_false (zl_clients_listed (NULL, "acme"));
    assert_false (zl_clients_listed ("subscriber,admin", "producer"));
}

#define T(fn) cmocka_unit_test_setup_teardown (fn, s_setup, s_teardown)

int
main (void)
{
    const struct CMUnitTest tests[] = {
        T (test_keys_and_metadata),
        T (test_repeated_key_is_let_in_from_neither),
        T (test_secret_and_junk_files_are_skipped),
        T (test_directory_changes_count_after_the_interval),
        T (test_misses_are_rate_limited),
        cmocka_unit_test (test_listed),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
