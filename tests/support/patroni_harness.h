/*  patroni_harness: a throwaway two-node Patroni cluster on one etcd, for
    the PostgreSQL store's failover tests; one per zlh_patroni_t.

    zlh_patroni_start makes a fresh temp dir, picks six free 127.0.0.1 ports
    (etcd client and peer, and per node a PostgreSQL port and a Patroni REST
    API port), starts one etcd (v3 API) and two Patroni nodes, n0 and n1, on
    it, and returns once etcd answers and both Patroni processes run; one of
    them bootstraps the cluster (initdb), the other clones it. The cluster
    runs in Patroni's synchronous mode (not strict: a primary left without a
    standby keeps accepting writes, and Patroni never promotes a node that
    was not the synchronous standby), with fsync and synchronous_commit on,
    ttl 10 s, loop_wait 1 s, retry_timeout 4 s and primary_start_timeout 0:
    a primary whose postmaster dies is failed over to the standby at once
    instead of being restarted. Random passwords guard the superuser `zlane`,
    the replication user and the REST API's writes.

    Times measured on the 2-core machine: start 0.2-1 s; wait_ready 8-14 s
    (initdb, the standby's clone, Patroni naming it synchronous); failover
    0.5-2 s (Patroni notices the dead postmaster within a loop_wait); the
    old primary back as the synchronous standby 5-11 s (pg_rewind); stop 3 s
    (the standby's Patroni waits 2 s to be released from its sync role).

    Run as root, etcd and Patroni (and so PostgreSQL) run as the system user
    `zlane-test` ($ZLANE_PG_USER names another), created with useradd if
    missing, as pg_harness does. The binaries are those found at configure
    time (Debian's /usr/bin/patroni, /usr/bin/etcd, and PostgreSQL's bin dir
    for Patroni's bin_dir); $ZLANE_PATRONI, $ZLANE_ETCD and $ZLANE_PG_BINDIR
    override them.

    Processes. Everything runs under a keeper: a process forked here, in a
    session of its own, that is a child subreaper. It starts etcd and the
    Patroni nodes when asked and reaps every process of the cluster as soon
    as it exits, postmasters and their orphaned backends included (Patroni
    detaches its postmaster, and a dead postmaster left a zombie would look
    alive to Patroni and stall the failover). Processes are stopped by PID
    (pidfds, Linux >= 5.3): zlh_patroni_stop sends SIGTERM to both Patroni
    nodes (each stops its PostgreSQL), then to etcd, then the keeper SIGKILLs
    whatever is left and exits; a clean stop kills nothing. If the test
    process dies, the keeper sees its socket close and SIGKILLs the whole
    cluster. zlh_patroni_cleanup (a cmocka teardown) and an atexit hook stop
    every cluster still running. Every wait is bounded; the waits poll the
    REST API and the servers every 20 ms. No cmocka here: failures are
    return values, with a reason (zlh_patroni_error) also printed to stderr.
    Not thread-safe: call it from one thread. $ZLT_KEEP keeps the temp dir. */
#ifndef ZL_PATRONI_HARNESS_H
#define ZL_PATRONI_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define ZLH_PATRONI_NODES 2 // nodes are numbered 0 and 1

typedef struct _zlh_patroni_t zlh_patroni_t;

/*  Start a cluster as described above (etcd up, both Patroni nodes
    started; then zlh_patroni_wait_ready). Returns it
    (registered for the atexit hook; caller owns, zlh_patroni_stop frees), or
    NULL with the reason in `err` (and the logs' tails on stderr; nothing left
    running, the temp dir removed). */
zlh_patroni_t *zlh_patroni_start (char *err, size_t err_size);

/*  Wait up to `timeout_ms` until one node is the primary (Patroni's leader,
    its server writable) and the other its synchronous standby (so named by
    Patroni, and streaming with sync_state 'sync' on the primary). Returns
    the primary's node number, or -1 (the reason in zlh_patroni_error; -1 at
    once if etcd or a Patroni process has exited). */
int zlh_patroni_wait_ready (zlh_patroni_t *self, int timeout_ms);

/*  Return the libpq connection string that reaches whichever node is
    writable: "host=127.0.0.1,127.0.0.1 port=P0,P1 dbname=postgres
    user=zlane password=… connect_timeout=2 target_session_attrs=read-write".
    Borrowed. */
const char *zlh_patroni_conninfo (zlh_patroni_t *self);
/*  Return the connection string of `node` alone (any role). Borrowed. */
const char *zlh_patroni_node_conninfo (zlh_patroni_t *self, int node);
/*  Return the PostgreSQL port of `node` on 127.0.0.1. */
int zlh_patroni_port (zlh_patroni_t *self, int node);

/*  Return the node that is primary now (Patroni's leader, answering
    /primary, and its server not in recovery), or -1 if none is (or both
    claim to be). Does not wait. */
int zlh_patroni_primary (zlh_patroni_t *self);

/*  Return the PID of `node`'s postmaster (from postmaster.pid, checked
    against the process), or -1 while it is not running. */
pid_t zlh_patroni_postmaster_pid (zlh_patroni_t *self, int node);
/*  Return the PID of `node`'s Patroni process, or -1 once it exited. */
pid_t zlh_patroni_agent_pid (zlh_patroni_t *self, int node);
/*  Return the PID of etcd, or -1 once it exited. */
pid_t zlh_patroni_etcd_pid (zlh_patroni_t *self);
/*  Fill `pids` with up to `max` PIDs of the cluster's live processes: the
    keeper and every process working in the temp dir (etcd, Patroni, the
    PostgreSQL servers and their backends). Returns how many there are (may
    exceed `max`). */
size_t zlh_patroni_processes (zlh_patroni_t *self, pid_t *pids, size_t max);

/*  SIGKILL the primary's postmaster, as a crash would, and wait until it is
    gone (its backends exit by themselves and are reaped by the keeper);
    Patroni is left running, to fail over. Notes the time for
    zlh_patroni_wait_failover. Returns the node that was primary, or -1 if
    there was none (zlh_patroni_primary) or it could not be killed. */
int zlh_patroni_kill_primary (zlh_patroni_t *self);
/*  After zlh_patroni_kill_primary: wait up to `timeout_ms` (counted from
    the call) until the other node is the primary, as zlh_patroni_primary
    says. Returns the milliseconds from the kill until it was seen so (to
    within 20 ms), or -1 (the reason in zlh_patroni_error). */
int64_t zlh_patroni_wait_failover (zlh_patroni_t *self, int timeout_ms);

/*  Return the reason the last call failed ("" if none failed). Borrowed. */
const char *zlh_patroni_error (zlh_patroni_t *self);
/*  Return the temp dir: etcd/ and etcd.log; n0/ and n1/ each holding
    patroni.yml, patroni.log (Patroni's and PostgreSQL's log) and data/.
    Borrowed. */
const char *zlh_patroni_dir (zlh_patroni_t *self);
/*  Print the last `max_bytes` of each log to stderr, for a failing test.
    NULL-safe. */
void zlh_patroni_dump_logs (zlh_patroni_t *self, size_t max_bytes);

/*  Stop the cluster by PID as described above (Patroni SIGTERM, after 20 s
    SIGKILL; then etcd; then the keeper), reap the keeper, remove the temp
    dir, unregister and free; nulls the caller's pointer. Returns 0 if every
    process exited by itself, -1 if something had to be SIGKILLed. NULL-safe
    (returns 0). */
int zlh_patroni_stop (zlh_patroni_t **self_p);

/*  Stop and free every cluster still registered (the caller's pointers to
    them dangle afterwards); what the atexit hook runs. Safe to call more
    than once. */
void zlh_patroni_cleanup (void);
/*  A cmocka setup/teardown that calls zlh_patroni_cleanup; returns 0. */
int zlh_patroni_teardown (void **state);

#endif
