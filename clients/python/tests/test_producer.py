"""Producer and AsyncProducer against a real broker."""

import asyncio
import socket
import threading
import time

import pytest

import zlane
from conftest import FAST as FAST_ARGS, wait_for


class Collector:
    """A Worker run in a thread that records every job it sees."""

    def __init__(self, endpoint, lanes=("a",), concurrency=4, handler=None, **kw):
        self.jobs = []
        self.lock = threading.Lock()
        self.worker = zlane.Worker(endpoint, concurrency=concurrency, heartbeat=0.2, **kw)
        for lane in lanes:
            self.worker.add_handler(lane, self._handle)
        self.handler = handler
        self.thread = threading.Thread(target=self.worker.run, kwargs={"install_signals": False})
        self.thread.start()

    def _handle(self, job):
        with self.lock:
            self.jobs.append(job)
        if self.handler:
            self.handler(job)

    def payloads(self):
        with self.lock:
            return {j.payload for j in self.jobs}

    def stop(self):
        self.worker.stop()
        self.thread.join(20)
        assert not self.thread.is_alive(), "the worker did not drain"


@pytest.fixture
def collector_factory():
    made = []

    def make(*a, **kw):
        c = Collector(*a, **kw)
        made.append(c)
        return c
    yield make
    for c in made:
        if c.thread.is_alive():
            c.stop()


def test_submit_and_ack_end_to_end(broker, collector_factory):
    c = collector_factory(broker.backend)
    with zlane.Producer(broker.frontend, client="pytest") as p:
        job_id = p.submit("acme", "a", b"\x00\xffbinary", headers={"trace": "t-1", "n": 2},
                          key="order-42", max_attempts=3)
        assert isinstance(job_id, int) and job_id > 0
        # the same key within the window: the original job, nothing enqueued
        assert p.submit("acme", "a", b"again", key="order-42") == job_id
    wait_for(lambda: c.jobs, 10, "the job to run")
    broker.wait_counter("jobs_acked", 1)
    job = c.jobs[0]
    assert (job.id, job.tenant, job.lane, job.payload) == (job_id, "acme", "a", b"\x00\xffbinary")
    assert job.headers == {"trace": "t-1", "n": "2"}
    assert job.idempotency_key == "order-42"
    assert (job.attempt, job.max_attempts) == (1, 3)
    assert job.lease_ms > 0 and job.enqueued_at_ms > 0
    assert broker.counter("jobs_accepted") == 1 and broker.counter("jobs_duplicate") == 1
    c.stop()
    assert len(c.jobs) == 1


def test_submit_many_20000_nothing_lost(broker, collector_factory):
    n = 20000
    c = collector_factory(broker.backend, concurrency=8, prefetch=64)
    t0 = time.monotonic()
    with zlane.Producer(broker.frontend) as p:
        ids = p.submit_many([("acme" if i % 2 else "globex", "a", b"%d" % i) for i in range(n)])
        stats = dict(p.stats)
    took = time.monotonic() - t0
    assert len(ids) == n and len(set(ids)) == n, "every job its own id"
    assert stats["accepted"] == n and stats["specs_sent"] == n
    wait_for(lambda: len(c.payloads()) >= n, 60, f"{n} distinct jobs run")
    assert c.payloads() == {b"%d" % i for i in range(n)}  # exactly-or-more-once, none lost
    broker.wait_counter("jobs_acked", n)
    # plain jobs on LMDB leave for their worker before their turn's commit
    assert broker.counter("jobs_dispatched_before_commit") > 0
    print(f"submit_many: {n} jobs accepted in {took:.2f} s ({n / took:.0f} jobs/s)")


def test_generated_keys_are_marked(broker, collector_factory):
    c = collector_factory(broker.backend)
    with zlane.Producer(broker.frontend) as p:
        p.submit("acme", "a", b"x")
    wait_for(lambda: c.jobs, 10, "the job")
    key = c.jobs[0].idempotency_key
    assert key.endswith("-1") and len(key) == 18  # "<16 hex>-<seq>", made by the library
    assert broker.counter("store_idem_resend_log") >= 1  # kept in the resend window


def test_rejections_raise_their_class(broker_factory):
    b = broker_factory(lanes=("a",), args=["--durability", "none", "--max-payload", "1KiB"])
    with zlane.Producer(b.frontend) as p:
        with pytest.raises(zlane.UnknownLane) as e:
            p.submit("acme", "nope", b"x")
        assert e.value.code == zlane._proto.pb.REJECT_UNKNOWN_LANE and "nope" in str(e.value)
        with pytest.raises(zlane.PayloadTooLarge):
            p.submit("acme", "a", b"x" * 2048)
        with pytest.raises(zlane.Invalid):
            p.submit("acme", "a", b"x", headers={"k": "nul\0byte"})
        with pytest.raises(ValueError):
            p.submit("", "a", b"x")
        results = p.submit_many([("acme", "a", b"ok"), ("acme", "zzz", b"no"),
                                 {"tenant": "", "lane": "a"}], return_exceptions=True)
        assert isinstance(results[0], int)
        assert isinstance(results[1], zlane.UnknownLane)
        assert isinstance(results[2], ValueError)
        with pytest.raises(zlane.UnknownLane):
            p.submit_many([("acme", "a", b"ok"), ("acme", "zzz", b"no")])


def test_queue_full_without_blocking(broker_factory):
    b = broker_factory(args=["--durability", "none", "--max-depth", "5"], lanes=("a",))
    with zlane.Producer(b.frontend) as p:
        assert p.wait_connected(10)
        ids = [p.submit("acme", "a", b"%d" % i, block=False) for i in range(5)]
        assert len(set(ids)) == 5
        with pytest.raises(zlane.QueueFull) as e:
            for _ in range(100):  # credit is 5 at most: the queue holds 5
                p.submit("acme", "a", b"more", block=False)
        assert e.value.retry_after > 0
        t0 = time.monotonic()
        with pytest.raises(zlane.Timeout):  # blocking: waits for credit, up to its timeout
            p.submit("acme", "a", b"more", timeout=0.5)
        assert 0.4 <= time.monotonic() - t0 < 3
    assert b.counter("jobs_accepted") == 5


def test_blocked_submit_resumes_when_room_frees(broker_factory, collector_factory):
    b = broker_factory(args=["--durability", "none", "--max-depth", "20",
                             "--heartbeat", "200ms"], lanes=("a",))
    with zlane.Producer(b.frontend) as p:
        p.submit_many([("acme", "a", b"%d" % i) for i in range(20)])
        done = []
        t = threading.Thread(target=lambda: done.append(p.submit_many(
            [("acme", "a", b"x%d" % i) for i in range(50)], timeout=30)))
        t.start()
        c = collector_factory(b.backend)  # room frees as the worker acks
        t.join(30)
        assert done and len(done[0]) == 50
    wait_for(lambda: len(c.payloads()) == 70, 20, "70 jobs run")


def test_async_producer(broker, collector_factory):
    c = collector_factory(broker.backend)

    async def main():
        async with zlane.AsyncProducer(broker.frontend) as p:
            ids = await asyncio.gather(*(p.submit("acme", "a", b"async-%d" % i,
                                                  headers={"i": str(i)}) for i in range(300)))
            many = await p.submit_many([("acme", "a", b"bulk-%d" % i) for i in range(200)])
            with pytest.raises(zlane.UnknownLane):
                await p.submit("acme", "nope", b"x")
            return ids, many
    ids, many = asyncio.run(main())
    assert len(set(ids + many)) == 500
    wait_for(lambda: len(c.payloads()) == 500, 20, "500 jobs run")


def test_threads_submit_concurrently(broker, collector_factory):
    c = collector_factory(broker.backend, concurrency=4)
    results, errors = [], []
    with zlane.Producer(broker.frontend) as p:
        def submitter(t):
            try:
                for i in range(400):
                    results.append(p.submit("acme", "a", b"t%d-%d" % (t, i)))
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)
        threads = [threading.Thread(target=submitter, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert not errors
    assert len(results) == 3200 and len(set(results)) == 3200
    wait_for(lambda: len(c.payloads()) == 3200, 30, "3200 jobs run")


def _closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_unreachable_broker_times_out_clearly():
    with zlane.Producer(f"tcp://127.0.0.1:{_closed_port()}") as p:
        t0 = time.monotonic()
        with pytest.raises(zlane.Timeout) as e:
            p.submit("acme", "a", b"x", timeout=1.0)
        assert time.monotonic() - t0 < 2.5
        assert "unreachable" in str(e.value)
        with pytest.raises(zlane.QueueFull):
            p.submit("acme", "a", b"x", block=False)


def test_endpoint_list_skips_a_dead_broker(broker, collector_factory):
    c = collector_factory(f"tcp://127.0.0.1:{_closed_port()}, {broker.backend}")
    with zlane.Producer([f"tcp://127.0.0.1:{_closed_port()}", broker.frontend]) as p:
        ids = p.submit_many([("acme", "a", b"%d" % i) for i in range(100)], timeout=20)
        assert p.endpoint == broker.frontend
    assert len(set(ids)) == 100
    wait_for(lambda: len(c.payloads()) == 100, 20, "100 jobs run")
    with pytest.raises(ValueError):
        zlane.Producer("tcp://a:1,,tcp://b:2")


def test_forgotten_producer_says_hello_again(broker_factory, collector_factory):
    b = broker_factory(args=FAST_ARGS + ["--set", "producer_idle=300ms"])
    c = collector_factory(b.backend)
    with zlane.Producer(b.frontend) as p:
        p.submit("acme", "a", b"first")
        # the broker forgets a silent producer and says NOT_READY; the producer
        # says Hello again (a new session, credit from zero) by itself
        wait_for(lambda: "NOT_READY" in p.last_error or p.stats["connects"] > 1, 10,
                 "the broker to forget the producer")
        wait_for(lambda: p._available() > 0, 10, "credit in the new session")
        assert p.submit("acme", "a", b"second", timeout=10) > 0
    wait_for(lambda: c.payloads() == {b"first", b"second"}, 10, "both jobs run")


def test_queue_full_parts_of_frames_retried(broker_factory, collector_factory):
    """A lane bound below the credit: the broker takes part of each Submit frame and
    rejects the rest QUEUE_FULL; those jobs are resent (parts cut from their frames)
    as the worker drains the lane, each job once, headers and keys intact."""
    b = broker_factory(args=["--durability", "none", "--heartbeat", "200ms",
                             "--set", "lanes/a/max_depth=30"], lanes=("a",))
    jobs = [{"tenant": "acme", "lane": "a", "payload": b"p%d" % i,
             "headers": {"i": str(i)}, **({"key": f"k-{i}"} if i % 3 == 0 else {})}
            for i in range(400)]
    with zlane.Producer(b.frontend, max_batch=64) as p:
        assert p.wait_connected(10)
        c = collector_factory(b.backend)
        ids = p.submit_many(jobs, timeout=60)
        assert len(set(ids)) == 400
        assert p.stats["retried"] > 0 and p.stats["accepted"] == 400
    wait_for(lambda: len(c.payloads()) == 400, 30, "400 jobs run")
    assert sorted(c.payloads()) == sorted(b"p%d" % i for i in range(400))
    assert all(j.headers == {"i": j.payload[1:].decode()} for j in c.jobs)
    assert {j.idempotency_key for j in c.jobs if int(j.payload[1:]) % 3 == 0} == \
        {f"k-{i}" for i in range(0, 400, 3)}
