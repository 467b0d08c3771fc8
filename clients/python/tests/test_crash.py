"""The broker SIGKILLed and restarted (LMDB, --durability fsync) while a producer
submits: every job is accepted once (resent under the same keys), none is lost."""

import threading
import time

import zlane
from conftest import wait_for
from test_producer import Collector


def test_broker_killed_mid_stream_nothing_lost(broker_factory):
    n = 10000
    # max_depth paces the producer by the worker, so the kills land mid-stream
    b = broker_factory(args=["--heartbeat", "200ms", "--durability", "fsync",
                             "--max-depth", "1500"], lanes=("a",))
    c = Collector(b.backend, concurrency=8, prefetch=32)
    out = {}
    p = zlane.Producer(b.frontend, deadline=60)
    try:
        def submit():
            try:
                out["ids"] = p.submit_many([("acme", "a", b"%d" % i) for i in range(n)],
                                           timeout=60)
            except Exception as exc:  # noqa: BLE001
                out["error"] = exc
        t = threading.Thread(target=submit)
        t.start()
        for kill_at in (2500, 6000):
            wait_for(lambda: p.stats["accepted"] >= kill_at or not t.is_alive(), 60,
                     f"{kill_at} jobs accepted")
            b.kill()
            t_kill = time.monotonic()
            b.start()
            wait_for(lambda: p.stats["accepted"] > kill_at + 100 or not t.is_alive(), 30,
                     "the producer to go on after the restart")
            print(f"kill at {kill_at}: producer going again after {time.monotonic() - t_kill:.2f} s")
        t.join(90)
        assert not t.is_alive(), "submit_many did not finish"
        assert "error" not in out, out.get("error")
        ids = out["ids"]
        assert len(ids) == n and len(set(ids)) == n  # one job per submission: no duplicates
        assert p.stats["connects"] >= 3 and p.stats["accepted"] == n
        wait_for(lambda: len(c.payloads()) == n, 60, f"{n} distinct jobs run")
        lost = n - len(c.payloads())
        executions = len(c.jobs)
        print(f"lost = {lost}, resent = {p.stats['resent']}, "
              f"duplicate executions = {executions - n}")
        assert lost == 0
    finally:
        p.close()
        c.stop()
