/*  harness_util: what the server harnesses (pg_harness, patroni_harness)
    share: a monotonic clock, pidfds, a log's tail, a temp tree removed, and
    the unprivileged user PostgreSQL runs as when the test runs as root. */
#ifndef ZLH_HARNESS_UTIL_H
#define ZLH_HARNESS_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*  Monotonic milliseconds. */
int64_t zlh_now_ms (void);
/*  pidfd_open (2) and pidfd_send_signal (2): -1 with errno on failure. */
int zlh_pidfd_open (pid_t pid);
int zlh_pidfd_kill (int pidfd, int sig);
/*  Print the last `max_bytes` of the file at `path` to stderr under `title`. */
void zlh_dump_tail (const char *title, const char *path, size_t max_bytes);
/*  Remove the tree at `dir` (not following links). */
void zlh_remove_tree (const char *dir);
/*  The user the servers run as: none (*drop false) unless the test runs as
    root; then $ZLANE_PG_USER, or the system user `zlane-test`, created with
    useradd (bounded: 30 s) if missing. Returns 0, or -1 with why in `why`
    (no such user, or it is root). */
int zlh_server_user (bool *drop, uid_t *uid, gid_t *gid, char *why, size_t whylen);

#endif
