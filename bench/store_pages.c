/*  zlane-store-pages: where the pages of a (stopped) broker's store go.

    zlane-store-pages DIR [--walk N]
        opens DIR/data.mdb read-only with LMDB and prints, for every
        database, its entries and pages (branch, leaf, overflow) and its
        bytes per entry; then the pages on LMDB's free list, walked (what
        the broker does to measure its room), timed (the best of N runs,
        default 20), and what is left: the pages of the runs of DUPSORT
        databases (the dedup index of format 3 keeps each prefix's keys in
        a run of its own, whose pages its database's totals do not count),
        with the bytes per entry they make. Works on any format of zlane
        store (it reads the catalogue of databases). */
#include <inttypes.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double
s_now_us (void)
{
    struct timespec t;
    clock_gettime (CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static uint64_t
s_pages (const MDB_stat *st)
{
    return st->ms_branch_pages + st->ms_leaf_pages + st->ms_overflow_pages;
}

static void
s_die (const char *what, int rc)
{
    fprintf (stderr, "zlane-store-pages: %s: %s\n", what, mdb_strerror (rc));
    exit (1);
}

int
main (int argc, char **argv)
{
    if (argc < 2 || !strcmp (argv[1], "-h") || !strcmp (argv[1], "--help")) {
        printf ("usage: zlane-store-pages DIR [--walk N]\n");
        return argc < 2 ? 2 : 0;
    }
    int times = argc >= 4 && !strcmp (argv[2], "--walk") ? atoi (argv[3]) : 20;
    if (times < 1)
        times = 1;
    MDB_env *env;
    MDB_txn *txn;
    int rc = mdb_env_create (&env);
    if (!rc)
        rc = mdb_env_set_maxdbs (env, 32);
    if (!rc)
        rc = mdb_env_open (env, argv[1], MDB_RDONLY, 0640);
    if (rc)
        s_die (argv[1], rc);
    MDB_envinfo info;
    mdb_env_info (env, &info);
    MDB_stat est;
    mdb_env_stat (env, &est);
    uint64_t ps = est.ms_psize, total = (uint64_t)info.me_last_pgno + 1;
    if ((rc = mdb_txn_begin (env, NULL, MDB_RDONLY, &txn)) != 0)
        s_die ("read transaction", rc);
    // the catalogue: every named database is a key of the main database
    MDB_dbi main_dbi, dbis[32];
    char names[32][64];
    int n = 0, dupsort = -1;
    mdb_dbi_open (txn, NULL, 0, &main_dbi);
    MDB_cursor *c;
    MDB_val k, v;
    mdb_cursor_open (txn, main_dbi, &c);
    for (rc = mdb_cursor_get (c, &k, &v, MDB_FIRST); rc == 0 && n < 32;
         rc = mdb_cursor_get (c, &k, &v, MDB_NEXT)) {
        snprintf (names[n], sizeof names[n], "%.*s", (int)k.mv_size, (const char *)k.mv_data);
        unsigned flags;
        if (mdb_dbi_open (txn, names[n], 0, &dbis[n]) == 0) {
            if (mdb_dbi_flags (txn, dbis[n], &flags) == 0 && (flags & MDB_DUPSORT))
                dupsort = n;
            n++;
        }
    }
    mdb_cursor_close (c);
    printf ("%s: page %" PRIu64 " bytes, %" PRIu64 " pages up to the last used (%.1f MiB), map "
            "%.1f MiB\n",
            argv[1], ps, total, (double)(total * ps) / 1048576.0,
            (double)info.me_mapsize / 1048576.0);
    printf ("%-14s %12s %8s %8s %9s %10s %9s\n", "database", "entries", "branch", "leaf",
            "overflow", "MiB", "B/entry");
    MDB_stat st;
    for (int i = -2; i < n; i++) {
        MDB_dbi d = i == -2 ? 0 : i == -1 ? main_dbi : dbis[i];
        const char *name = i == -2 ? "(free list)" : i == -1 ? "(catalogue)" : names[i];
        if (mdb_stat (txn, d, &st) != 0)
            continue;
        printf ("%-14s %12zu %8zu %8zu %9zu %10.2f %9.1f\n", name, st.ms_entries,
                st.ms_branch_pages, st.ms_leaf_pages, st.ms_overflow_pages,
                (double)(s_pages (&st) * ps) / 1048576.0,
                st.ms_entries ? (double)(s_pages (&st) * ps) / (double)st.ms_entries : 0.0);
    }
    mdb_txn_commit (txn); // (not abort: that would close the handles it opened)
    // free pages, both ways, timed
    double best_sum = 1e18, best_walk = 1e18;
    uint64_t by_sum = 0, by_walk = 0, records = 0;
    for (int r = 0; r < times; r++) {
        double t0 = s_now_us ();
        mdb_txn_begin (env, NULL, MDB_RDONLY, &txn);
        uint64_t t = 2;
        mdb_stat (txn, 0, &st);
        t += s_pages (&st);
        mdb_stat (txn, main_dbi, &st);
        t += s_pages (&st);
        for (int i = 0; i < n; i++)
            if (mdb_stat (txn, dbis[i], &st) == 0)
                t += s_pages (&st);
        mdb_txn_abort (txn);
        double t1 = s_now_us ();
        by_sum = total - t;
        if (t1 - t0 < best_sum)
            best_sum = t1 - t0;
        t0 = s_now_us ();
        mdb_txn_begin (env, NULL, MDB_RDONLY, &txn);
        mdb_cursor_open (txn, 0, &c);
        uint64_t f = 0;
        records = 0;
        while (mdb_cursor_get (c, &k, &v, MDB_NEXT) == 0) {
            size_t count;
            memcpy (&count, v.mv_data, sizeof count);
            f += count;
            records++;
        }
        mdb_cursor_close (c);
        mdb_txn_abort (txn);
        t1 = s_now_us ();
        by_walk = f;
        if (t1 - t0 < best_walk)
            best_walk = t1 - t0;
    }
    uint64_t runs = by_sum > by_walk ? by_sum - by_walk : 0;
    printf ("free pages: %" PRIu64 " (%.2f MiB) by walking the free list (%" PRIu64
            " records) in %.1f us; the trees' totals in %.2f us (best of %d)\n",
            by_walk, (double)(by_walk * ps) / 1048576.0, records, best_walk, best_sum, times);
    if (runs && dupsort >= 0 && mdb_txn_begin (env, NULL, MDB_RDONLY, &txn) == 0) {
        MDB_stat d;
        mdb_stat (txn, dbis[dupsort], &d);
        mdb_txn_abort (txn);
        printf ("%s's runs: %" PRIu64 " pages (%.2f MiB) more: %.1f bytes per entry in all\n",
                names[dupsort], runs, (double)(runs * ps) / 1048576.0,
                d.ms_entries ? (double)((runs + s_pages (&d)) * ps) / (double)d.ms_entries : 0.0);
    } else if (runs)
        printf ("%" PRIu64 " pages in no tree and not free  MISMATCH\n", runs);
    printf ("used: %" PRIu64 " pages, %.2f MiB\n", total - by_walk,
            (double)((total - by_walk) * ps) / 1048576.0);
    mdb_env_close (env);
    return runs && dupsort < 0 ? 1 : 0;
}
