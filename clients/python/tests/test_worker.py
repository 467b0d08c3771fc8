"""Worker: failure classes, lease extension, drain on SIGTERM, asyncio mode."""

import asyncio
import os
import signal
import sys
import threading
import time

import pytest
import zmq

import zlane
from conftest import py_env, wait_for


def run_worker(endpoint, lanes_handlers, **kw):
    kw.setdefault("heartbeat", 0.2)
    w = zlane.Worker(endpoint, **kw)
    for lane, fn in lanes_handlers.items():
        w.add_handler(lane, fn)
    t = threading.Thread(target=w.run, kwargs={"install_signals": False})
    t.start()
    return w, t


def stop_worker(w, t):
    w.stop()
    t.join(20)
    assert not t.is_alive()


def test_exceptions_map_to_nack_classes(broker):
    attempts = {}
    times = {}

    def handler(job):
        attempts[job.payload] = job.attempt
        times.setdefault(job.payload, []).append(time.monotonic())
        if job.payload == b"perm":
            raise zlane.Permanent("bad input: no recipient")
        if job.payload == b"throttle" and job.attempt == 1:
            raise zlane.Throttled(0.4, "rate limited upstream")
        if job.payload == b"flaky" and job.attempt == 1:
            raise ConnectionError("upstream reset")
        if job.payload == b"always":
            raise ValueError("cannot parse this")
    w, t = run_worker(broker.backend, {"a": handler}, concurrency=4)
    try:
        with zlane.Producer(broker.frontend) as p:
            perm = p.submit("acme", "a", b"perm")
            p.submit("acme", "a", b"throttle")
            p.submit("acme", "a", b"flaky")
            always = p.submit("acme", "a", b"always", max_attempts=2)
        admin = broker.admin()
        wait_for(lambda: len(admin.dlq_list()) == 2, 20, "two dead letters")
        wait_for(lambda: attempts.get(b"throttle") == 2 and attempts.get(b"flaky") == 2, 20,
                 "the throttled and the transient job retried")
        broker.wait_counter("jobs_acked", 2)
        dead = admin.dlq_show(perm)
        assert dead.error == "bad input: no recipient" and dead.payload == b"perm"
        assert [a.outcome for a in dead.attempts] == ["OUTCOME_PERMANENT"]
        assert attempts[b"perm"] == 1  # dead-lettered at once
        dead = admin.dlq_show(always)
        assert [a.outcome for a in dead.attempts] == ["OUTCOME_TRANSIENT"] * 2
        assert "Traceback" in dead.error and "ValueError: cannot parse this" in dead.error
        assert times[b"throttle"][1] - times[b"throttle"][0] >= 0.35  # waited as asked
        st = admin.stats()
        assert st.counters["jobs_nacked"] == 5
        grp = [g for g in st.lanes if g.lane == "a"][0]
        assert (grp.nacked_permanent, grp.nacked_throttled, grp.nacked_transient) == (1, 1, 3)
        assert grp.run_us > 0  # run_us reported
        # (the Stats reply can leave before its turn's commit, the Settled after it)
        wait_for(lambda: w.stats["settled"] == 7, 10, "the seven settlements")
    finally:
        stop_worker(w, t)


def test_lease_extended_while_the_handler_runs(broker):
    ran = []

    def handler(job):
        ran.append(job.attempt)
        time.sleep(2.6)  # the job's work: 2.6 times its 1 s lease (each Extend has 0.5 s)
        assert not job.cancelled
    w, t = run_worker(broker.backend, {"a": handler})
    try:
        with zlane.Producer(broker.frontend) as p:
            p.submit("acme", "a", b"long", lease=1.0)
        broker.wait_counter("jobs_acked", 1)
        assert ran == [1]
        assert broker.counter("leases_extended") >= 3
        assert broker.counter("jobs_dispatched") == 1
        assert w.stats["extends_sent"] >= 3 and w.stats["lease_lost"] == 0
    finally:
        stop_worker(w, t)


def test_asyncio_mode(broker):
    seen = []
    running = [0, 0]  # now, most at once (one event loop: no lock)

    async def handler(job):
        running[0] += 1
        running[1] = max(running[1], running[0])
        await asyncio.sleep(0.2)
        running[0] -= 1
        seen.append(job.payload)
    w, t = run_worker(broker.backend, {"a": handler, "b": handler}, concurrency=20,
                      mode="asyncio")
    try:
        with zlane.Producer(broker.frontend) as p:
            p.submit_many([("acme", "ab"[i % 2], b"%d" % i) for i in range(40)])
        wait_for(lambda: len(seen) == 40, 20, "40 async jobs")
        # up to 20 at a time on one event loop (not one after another)
        assert running[1] >= 10, running
        assert running[1] <= 20, running
    finally:
        stop_worker(w, t)


def test_run_async_inside_a_loop(broker):
    seen = []

    async def main():
        w = zlane.Worker(broker.backend, heartbeat=0.2, mode="asyncio", concurrency=4)

        @w.handler("a")
        async def handle(job):
            seen.append(asyncio.get_running_loop())
        task = asyncio.ensure_future(w.run_async())
        with zlane.Producer(broker.frontend) as p:
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: p.submit_many([("acme", "a", b"x")] * 5))
        while len(seen) < 5:
            await asyncio.sleep(0.01)
        w.stop()
        await asyncio.wait_for(task, 20)
        return asyncio.get_running_loop()
    loop = asyncio.run(main())
    assert all(s is loop for s in seen)


def _lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().split("\n")[:-1]


@pytest.mark.parametrize("target", ["handlers:slow", "handlers:aslow"])
def test_py_worker_drains_on_sigterm(broker, procs, tmp_path, target):
    log = str(tmp_path / "jobs.log")
    env = dict(py_env(), ZLANE_TEST_LOG=log)
    with zlane.Producer(broker.frontend) as p:
        ids = p.submit_many([("acme", "a", b"0.6")] * 5)
    w = procs([sys.executable, "-m", "zlane.worker", target, "--lane", "a", "--broker",
               broker.backend, "--concurrency", "2", "--heartbeat", "200ms", "-v"],
              env=env, log=str(tmp_path / "worker.out"))
    wait_for(lambda: len([l for l in _lines(log) if l.startswith("start")]) == 2, 15,
             "two jobs started")
    w.proc.send_signal(signal.SIGTERM)
    try:
        rc = w.proc.wait(15)
    except Exception:
        pytest.fail("zlane-py-worker did not drain:\n" + w.log())
    assert rc == 0, w.log()
    lines = _lines(log)
    started = [l.split()[1] for l in lines if l.startswith("start")]
    finished = [l.split()[1] for l in lines if l.startswith("done")]
    assert len(started) == 2 and sorted(started) == sorted(finished), lines  # in-flight finished
    assert broker.counter("jobs_acked") == 2  # and were settled before it exited
    # the other three were handed back, not lost: a second worker runs them
    w2 = procs([sys.executable, "-m", "zlane.worker", target, "--lane", "a", "--broker",
                broker.backend, "--concurrency", "3", "--heartbeat", "200ms"], env=env)
    broker.wait_counter("jobs_acked", 5)
    done_ids = {int(l.split()[1]) for l in _lines(log) if l.startswith("done")}
    assert done_ids == set(ids)
    w2.proc.send_signal(signal.SIGTERM)
    assert w2.proc.wait(15) == 0


def test_worker_reconnects_after_broker_restart(broker_factory):
    b = broker_factory(args=["--heartbeat", "200ms", "--durability", "fsync"])
    seen = []
    w, t = run_worker(b.backend, {"a": lambda job: seen.append(job.payload)})
    try:
        with zlane.Producer(b.frontend) as p:
            p.submit("acme", "a", b"before")
            wait_for(lambda: b"before" in seen, 10, "the first job")
            b.kill()
            b.start()
            p.submit("acme", "a", b"after", timeout=20)
        # the broker forgot the worker: it says Ready again (after NOT_READY, or
        # when the broker's silence passed liveness x heartbeat) and is served
        wait_for(lambda: b"after" in seen, 20, "a job after the restart")
        assert b.counter("workers_ready") >= 1
    finally:
        stop_worker(w, t)


def test_silent_broker_is_left_and_settlements_resent(broker):
    go = threading.Event()
    runs = []

    def handler(job):
        runs.append(job.attempt)
        go.wait(20)
    w, t = run_worker(broker.backend, {"a": handler})
    try:
        with zlane.Producer(broker.frontend) as p:
            p.submit("acme", "a", b"x")
        wait_for(lambda: runs, 10, "the job to start")
        broker.proc.send_signal(signal.SIGSTOP)  # silent: no heartbeats, no Settled
        try:
            go.set()  # the handler returns; its Ack waits for a Settled that does not come
            wait_for(lambda: w.stats["acked"] == 1, 10, "the ack to be sent")
            wait_for(lambda: w.stats["reconnects"] >= 1, 10, "liveness to run out")
        finally:
            broker.proc.send_signal(signal.SIGCONT)
        # on the new connection: Ready again, the Ack resent; the broker settles the
        # job once (a redelivery, if it declared the old connection dead first, runs again)
        broker.wait_counter("jobs_acked", 1)
        wait_for(lambda: w.stats["settled"] + w.stats["refused"] >= 1, 10, "the ack answered")
        assert broker.counter("jobs_acked") == 1
    finally:
        stop_worker(w, t)


def test_results_and_parent_results(broker):
    """A handler's return value (bytes or str) is the job's result; a child's
    handler gets its parents' results (the child submitted by zlane-submit
    --after, the C CLI); zlane-ctl job result reads a result back."""
    import subprocess
    from conftest import BIN_DIR
    seen = {}

    def handler(job):
        seen[job.payload] = job.parent_results
        if job.payload == b"bytes":
            return b"\x00\x01raw"
        if job.payload == b"none":
            return 42  # not bytes or str: no result
        return "res-" + job.text()
    w, t = run_worker(broker.backend, {"a": handler})
    try:
        with zlane.Producer(broker.frontend) as p:
            parent = p.submit("acme", "a", b"parent")
            raw = p.submit("acme", "a", b"bytes")
            p.submit("acme", "a", b"none")
        broker.wait_counter("jobs_acked", 3)
        ctl = [os.path.join(BIN_DIR, "zlane-ctl"), "--admin", broker.admin_ep, "job",
               "result"]
        out = subprocess.run(ctl + [str(parent)], capture_output=True, timeout=20)
        assert out.returncode == 0 and out.stdout == b"res-parent", out
        out = subprocess.run(ctl + [str(raw)], capture_output=True, timeout=20)
        assert out.returncode == 0 and out.stdout == b"\x00\x01raw", out
        sub = subprocess.run([os.path.join(BIN_DIR, "zlane-submit"), "--broker", broker.frontend,
                              "--tenant", "acme", "--lane", "a", "--after", str(parent), "--wait",
                              "child"], capture_output=True, timeout=30)
        assert sub.returncode == 0 and sub.stdout == b"res-child", sub
        assert seen[b"child"] == [(parent, b"res-parent")]
        assert seen[b"parent"] == []
        with zlane.Producer(broker.frontend) as p:  # the Python producer's depends_on
            p.submit("acme", "a", b"grandchild", depends_on=[parent, raw])
        wait_for(lambda: b"grandchild" in seen, 20, "the grandchild ran")
        assert seen[b"grandchild"] == [(parent, b"res-parent"), (raw, b"\x00\x01raw")]
        with pytest.raises(zlane.Rejected, match="unknown"):
            with zlane.Producer(broker.frontend) as p:
                p.submit("acme", "a", b"orphan", depends_on=[987654])
    finally:
        stop_worker(w, t)


def test_ready_after_a_reconnect_lists_the_leases_known():
    """A broker that goes silent is left; the Ready on the new connection lists
    every lease the worker knows of (a running job, an Ack not yet Settled), so
    the broker can hand out at once the leases whose Dispatch was lost."""
    from zlane._proto import decode, pb
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    router.linger = 0
    port = router.bind_to_random_port("tcp://127.0.0.1")
    go = threading.Event()

    def handler(job):
        if job.payload == b"wait":
            go.wait(20)

    def expect(kind, timeout=10.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if router.poll(100):
                peer, frame = router.recv_multipart()
                k, msg = decode(frame)
                if k == kind:
                    return peer, msg
        pytest.fail(f"no {kind} from the worker")

    # (silent after 2 s: the test's Dispatch arrives before it, however slow the machine)
    w, t = run_worker(f"tcp://127.0.0.1:{port}", {"a": handler}, concurrency=2, liveness=10)
    try:
        peer, ready = expect("ready")
        assert ready.held_listed and len(ready.held) == 0 and ready.instance
        jobs = [pb.Job(job_id=1, lease=11, attempt=1, tenant="t", lane="a", payload=b"wait",
                       lease_ms=60000),
                pb.Job(job_id=2, lease=22, attempt=1, tenant="t", lane="a", payload=b"ack",
                       lease_ms=60000)]
        env = pb.Envelope(version=1)
        env.dispatch.jobs.extend(jobs)
        router.send_multipart([peer, env.SerializeToString()])
        _, ack = expect("ack")
        assert [i.job_id for i in ack.items] == [2]
        # no Settled, no heartbeat: after liveness x heartbeat the worker reconnects
        peer2, again = expect("ready")
        assert peer2 != peer and again.instance == ready.instance and again.held_listed
        assert sorted((r.job_id, r.lease) for r in again.held) == [(1, 11), (2, 22)]
        assert w.stats["reconnects"] >= 1
    finally:
        go.set()
        stop_worker(w, t)
        router.close()


def test_a_worker_starved_of_the_gil_does_not_leave_a_live_broker(broker_factory):
    """A handler that holds the GIL for a second (a C call: sum over a range)
    starves the worker's loop thread past liveness x heartbeat while the broker
    keeps sending heartbeats: what arrived meanwhile is read before the broker
    is called silent, so the worker stays on its connection."""
    b = broker_factory(args=["--heartbeat", "250ms", "--liveness", "100", "--durability", "none"])

    def handler(job):
        sum(range(10 ** 8))
    w = zlane.Worker(b.backend, heartbeat=0.1, liveness=3, concurrency=1)  # silent after 0.3 s
    w.add_handler("a", handler)
    t = threading.Thread(target=w.run, kwargs={"install_signals": False})
    t.start()
    try:
        with zlane.Producer(b.frontend) as p:
            for _ in range(3):
                p.submit("acme", "a", b"x")
        b.wait_counter("jobs_acked", 3)
        assert w.stats["reconnects"] == 0
    finally:
        stop_worker(w, t)


def test_ready_lists_at_most_100000_leases():
    """A list too long for one frame is left out: held_listed unset, every
    lease then follows the worker to its new connection."""
    from zlane._proto import decode
    w = zlane.Worker("tcp://127.0.0.1:1")
    w.add_handler("a", lambda job: None)
    sent = []
    w._send = lambda frame, t: sent.append(decode(frame)[1]) or True
    w._draining, w._pending = False, {}
    for n, listed in ((100000, True), (100001, False)):
        w._held = {(i + 1, 7): None for i in range(n)}
        w._send_ready(0.0)
        assert sent[-1].held_listed is listed
        assert len(sent[-1].held) == (n if listed else 0)


def test_the_broker_gives_back_at_once_what_a_reconnected_worker_never_got(broker_factory):
    """The real broker, spoken to with Python's own protobuf: a worker's second
    connection (the same instance) lists one of its two leases in Ready; the
    other, whose Dispatch it never read, comes back at once on the new
    connection, attempt 1 under a new token, long before its 30 s lease lapses."""
    from zlane._proto import decode, pb
    b = broker_factory(args=["--heartbeat", "1s", "--liveness", "60", "--durability", "none"])
    ctx = zmq.Context.instance()
    socks = []

    def dealer():
        s = ctx.socket(zmq.DEALER)
        s.linger = 0
        s.connect(b.backend)
        socks.append(s)
        return s

    def ready(s, held=None):
        r = pb.Ready(name="raw", lanes=["a"], capacity=2, instance=77)
        if held is not None:
            r.held.extend(held)
            r.held_listed = True
        s.send(pb.Envelope(version=1, ready=r).SerializeToString())

    def jobs(s, n):
        got, end = [], time.monotonic() + 10
        while len(got) < n:
            assert s.poll(max(1, int((end - time.monotonic()) * 1000))), "no Dispatch"
            kind, msg = decode(s.recv())
            if kind == "dispatch":
                got.extend(msg.jobs)
        return got

    try:
        a = dealer()
        ready(a)
        b.wait_counter("workers_ready", 1)
        with zlane.Producer(b.frontend) as p:
            ids = {p.submit("acme", "a", b"%d" % i) for i in range(2)}
        kept, lost = jobs(a, 2)
        assert {kept.job_id, lost.job_id} == ids
        a2 = dealer()
        ready(a2, [pb.LeaseRef(job_id=kept.job_id, lease=kept.lease)])
        again = jobs(a2, 1)[0]
        assert (again.job_id, again.attempt) == (lost.job_id, 1) and again.lease != lost.lease
        assert b.counter("leases_unreached") == 1 and b.counter("workers_reconnected") == 1
        env = pb.Envelope(version=1)
        for j in (kept, again):
            env.ack.items.add(job_id=j.job_id, lease=j.lease, run_us=1)
        a2.send(env.SerializeToString())
        b.wait_counter("jobs_acked", 2)
    finally:
        for s in socks:
            s.close()


def test_heartbeat_paces_differ(broker_factory):
    """Each side judges the other by the longer of the two heartbeats (the
    broker's 400 ms, liveness 3: 1.2 s): a worker that heartbeats every 2 s is
    not declared dead after 1.2 s of its silence, and one at 50 ms does not
    leave the broker after 150 ms of the broker's. Both serve through the
    window. (Each window with the change is 4-8 times the one without.)"""
    broker = broker_factory(args=["--heartbeat", "400ms", "--liveness", "3",
                                  "--durability", "none"], lanes=("a",))
    seen = []
    slow, ts = run_worker(broker.backend, {"a": lambda job: seen.append(job.payload)},
                          heartbeat=2.0, liveness=3, name="slow")
    fast, tf = run_worker(broker.backend, {"a": lambda job: seen.append(job.payload)},
                          heartbeat=0.05, liveness=3, name="fast")
    try:
        broker.wait_counter("workers_ready", 2)
        time.sleep(3.0)  # the window watched: 2.5 of the broker's liveness spans, 20 of fast's
        assert broker.counter("workers_dead") == 0
        assert broker.counter("workers_ready") == 2  # nobody came back
        assert slow.stats["reconnects"] == 0 and fast.stats["reconnects"] == 0
        # the admin API shows the pace each stated (WorkerInfo.heartbeat_ms)
        assert {w.name: w.heartbeat_ms for w in broker.admin().workers()} == {
            "slow": 2000, "fast": 50}
        with zlane.Producer(broker.frontend) as p:
            for i in range(4):
                p.submit("acme", "a", b"j%d" % i)
        wait_for(lambda: len(seen) == 4, 10, "the jobs")
    finally:
        stop_worker(slow, ts)
        stop_worker(fast, tf)
