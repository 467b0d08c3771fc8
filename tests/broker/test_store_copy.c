/*  test_store_copy: `zlane-ctl store copy --from DIR --to LOCATION`, run as
    the program it is, from an LMDB store built here through store.h into a
    database on a server the harness starts: every job arrives with its
    record, state and idempotency key, the id counter with them, and the
    tool says the counts match; a destination that is not empty, and a
    source a broker still holds, are refused with exit 1 and nothing copied. */
#define _GNU_SOURCE
#include "arena.h"
#include "job.h"
#include "log.h"
#include "pg_harness.h"
#include "store.h"
#include "zltest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JOBS 3000
#define MAP (64ull << 20)

static zlh_pg_t *s_pg;

static void
s_payload (uint64_t id, char *buf, size_t size)
{
    snprintf (buf, size, "payload of job %llu", (unsigned long long)id);
}

// An LMDB store in `dir` with JOBS jobs: every third with a state, every
// fifth with a key. Returns the store's location (static).
static const char *
s_make_source (void)
{
    static char loc[1024];
    snprintf (loc, sizeof loc, "%s/source", zlt_tmpdir ());
    char err[512] = "";
    zl_store_t *store = zl_store_open (loc, ZL_DURABILITY_NONE, MAP, err, sizeof err);
    if (!store)
        fail_msg ("open %s: %s", loc, err);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    for (uint64_t id = 1; id <= JOBS; id++) {
        char payload[64], key[32];
        s_payload (id, payload, sizeof payload);
        snprintf (key, sizeof key, "order-%llu", (unsigned long long)id);
        zl_job_rec_t rec = {.tenant = id % 2 ? "acme" : "globex",
                            .lane = "email",
                            .payload = {(const uint8_t *)payload, strlen (payload)},
                            .idempotency_key = id % 5 == 0 ? key : "",
                            .max_attempts = 5,
                            .lease_ms = 30000,
                            .enqueued_at_ms = 1700000000000LL + (int64_t)id};
        assert_int_equal (zl_store_put_job (store, id, &rec), ZL_STORE_OK);
        if (id % 5 == 0) {
            zl_idem_rec_t idem = {id, rec.enqueued_at_ms, false};
            assert_int_equal (zl_store_put_idem (store, rec.tenant, key, &idem), ZL_STORE_OK);
        }
        if (id % 3 == 0) {
            zl_state_rec_t st = {.state = ZL_JOB_DELAYED, .attempt = 2, .due_at_ms = (int64_t)id};
            assert_int_equal (zl_store_put_state (store, id, &st), ZL_STORE_OK);
        }
    }
    assert_int_equal (zl_store_set_next_id (store, JOBS + 100), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_close (&store);
    return loc;
}

static int
s_copy (const char *from, const char *to, const char *out)
{
    char *ctl = zlt_bin ("zlane-ctl");
    const char *argv[] = {ctl, "store", "copy", "--from", from, "--to", to, "--batch", "700", NULL};
    int rc = zlt_run (argv, NULL, out, out, 60000);
    free (ctl);
    return rc;
}

static void
test_copy_and_verify (void **state)
{
    (void)state;
    zl_log_set_level (ZL_LOG_ERROR);
    s_pg = zlh_pg_start ();
    assert_non_null (s_pg);
    const char *from = s_make_source ();
    const char *to = zlh_pg_conninfo (s_pg);
    char *out = zlt_path (zlt_tmpdir (), "copy.out");
    int rc = s_copy (from, to, out);
    if (rc != 0)
        zlt_dump_file ("zlane-ctl store copy", out, 4096);
    assert_int_equal (rc, 0);
    char *text = zlt_read_file (out, NULL);
    assert_non_null (strstr (text, "copied 3000 job(s) (1000 with a state"));
    assert_non_null (strstr (text, "next id 3100"));
    assert_non_null (strstr (text, "verified: the counts match"));
    free (text);

    // the database holds every job as it was, its key and the id counter
    char err[512] = "";
    zl_store_t *store = zl_store_open (to, ZL_DURABILITY_FSYNC, MAP, err, sizeof err);
    assert_non_null (store);
    zl_store_lead_t lead;
    assert_int_equal (zl_store_elect (store, 0, &lead), ZL_ROLE_LEADER);
    zl_arena_t *arena = zl_arena_new (4096);
    for (uint64_t id = 1; id <= JOBS; id++) {
        zl_arena_reset (arena);
        zl_job_rec_t rec;
        assert_int_equal (zl_store_get_job (store, id, ZL_PRIORITY_DEFAULT, arena, &rec),
                          ZL_STORE_OK);
        char payload[64];
        s_payload (id, payload, sizeof payload);
        assert_int_equal (rec.payload.len, strlen (payload));
        assert_memory_equal (rec.payload.data, payload, rec.payload.len);
        assert_string_equal (rec.tenant, id % 2 ? "acme" : "globex");
        zl_state_rec_t st;
        assert_int_equal (zl_store_get_state (store, id, arena, &st),
                          id % 3 == 0 ? ZL_STORE_OK : ZL_STORE_NOT_FOUND);
        if (id % 3 == 0)
            assert_int_equal (st.due_at_ms, (int64_t)id);
    }
    zl_idem_rec_t idem;
    assert_int_equal (zl_store_get_idem (store, "globex", "order-10", &idem), ZL_STORE_OK);
    assert_int_equal (idem.job_id, 10);
    assert_int_equal (zl_store_get_idem (store, "acme", "order-10", &idem), ZL_STORE_NOT_FOUND);
    zl_store_close (&store);
    zl_arena_destroy (&arena);

    // a destination that is not empty is refused
    rc = s_copy (from, to, out);
    assert_int_equal (rc, 1);
    text = zlt_read_file (out, NULL);
    assert_non_null (strstr (text, "it must be empty"));
    free (text);

    // a source a broker holds (its lock) is refused
    store = zl_store_open (from, ZL_DURABILITY_NONE, MAP, err, sizeof err);
    assert_non_null (store);
    rc = s_copy (from, to, out);
    assert_int_equal (rc, 1);
    zl_store_close (&store);
    free (out);
    zlh_pg_stop (&s_pg);
}

int
main (void)
{
    const struct CMUnitTest cases[] = {cmocka_unit_test (test_copy_and_verify)};
    int failed = cmocka_run_group_tests_name ("store copy", cases, NULL, zlt_teardown);
    zlh_pg_cleanup ();
    return failed;
}
