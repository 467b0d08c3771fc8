"""Batches: open one, join 20 jobs to it (one failing for good), close it, and the
callback runs with the summary; batch_show and the batch.<id> event agree; the
broker's refusals (a closed batch, an unknown one, an id taken) surface as
exceptions; the asyncio producer does the same."""

import asyncio
import time

import pytest

import zlane
from conftest import wait_for
from test_worker import run_worker, stop_worker


def subscribe_batches(b, p, timeout=15.0, topics=("batch.",), lane="a"):
    """A Subscriber to "batch." (and the other `topics`, asked for first, so
    in effect by then too) whose subscription has taken effect: empty batches
    opened with close=True in `lane` settle at once and publish batch.<id>;
    open them until one's event arrives (a subscription starts a moment after
    the handshake)."""
    sub = zlane.Subscriber(b.events, topics=list(topics))
    assert sub.wait_connected(10)
    end = time.monotonic() + timeout
    n = 0
    while time.monotonic() < end:
        n += 1
        probe = p.open_batch("acme", lane, batch_id=f"probe-{n}", no_callback=True, close=True)
        got = sub.recv(timeout=1)
        while got is not None and got.batch_id != probe:
            got = sub.recv(timeout=1)
        if got is not None:
            return sub
    sub.close()
    pytest.fail("no batch.<id> event on the events socket")


def test_batch_callback_gets_the_summary(broker):
    callbacks = []

    def handler(job):
        if job.payload == b"fail":
            raise zlane.Permanent("this one fails for good")
        if job.batch is not None:
            callbacks.append(job)
    with zlane.Producer(broker.frontend) as p:
        sub = subscribe_batches(broker, p)
        w = t = None
        try:
            bid = p.open_batch("acme", "b", b"callback", batch_id="py-reports.2024:1")
            assert bid == "py-reports.2024:1"
            jobs = [{"tenant": "acme", "lane": "a", "payload": b"fail" if i == 7 else b"ok",
                     "batch": bid} for i in range(20)]
            ids = p.submit_many(jobs)
            assert len(set(ids)) == 20
            p.close_batch(bid, timeout=10)
            p.close_batch(bid, timeout=10)  # closing a closed batch is no error

            shown = broker.admin().batch_show(bid)
            assert isinstance(shown, zlane.BatchInfo)
            assert (shown.found, shown.closed, shown.settled, shown.jobs, shown.pending) == \
                (True, True, False, 20, 20)
            with pytest.raises(zlane.BatchClosed) as exc:  # closed: no job joins it now
                p.submit("acme", "a", b"late", batch=bid)
            assert exc.value.code_name == "REJECT_BATCH_CLOSED"

            w, t = run_worker(broker.backend, {"a": handler, "b": handler}, concurrency=4)
            wait_for(lambda: callbacks, 20, "the batch's callback to run")
            cb = callbacks[0]
            assert cb.payload == b"callback" and cb.lane == "b"
            s = cb.batch
            assert isinstance(s, zlane.BatchInfo) and s.batch_id == bid
            assert (s.jobs, s.acked, s.dead, s.cancelled_jobs, s.pending) == (20, 19, 1, 0, 0)
            assert s.failed == [ids[7]] and s.failed_more == 0
            assert s.job_id == cb.id and s.callback and s.closed and s.settled

            shown = broker.admin().batch_show(bid)
            assert (shown.found, shown.settled, shown.tenant, shown.lane) == \
                (True, True, "acme", "b")
            assert (shown.jobs, shown.acked, shown.dead, shown.failed) == (20, 19, 1, [ids[7]])
            assert shown.settled_at_ms >= shown.closed_at_ms >= shown.opened_at_ms > 0
            assert broker.admin().batch_show("no-such-batch").found is False

            event = sub.recv(timeout=10)
            assert isinstance(event, zlane.BatchInfo), "no batch.<id> event"
            assert event.topic == f"batch.{bid}"
            assert (event.batch_id, event.jobs, event.acked, event.dead, event.failed) == \
                (bid, 20, 19, 1, [ids[7]])
        finally:
            sub.close()
            if w is not None:
                stop_worker(w, t)


def test_batch_refusals_and_broker_named(broker):
    with zlane.Producer(broker.frontend) as p:
        with pytest.raises(zlane.BatchError) as exc:
            p.close_batch("never-opened", timeout=10)
        assert exc.value.batch_id == "never-opened" and exc.value.error
        with pytest.raises(zlane.UnknownBatch):
            p.submit("acme", "a", b"x", batch="never-opened")

        job_id = p.submit("acme", "a", b"cb", open_batch=True, no_callback=True)
        assert isinstance(job_id, zlane.JobId) and job_id.batch_id == str(job_id)
        with pytest.raises(zlane.UnknownBatch):  # a batch is the tenant's own
            p.submit("globex", "a", b"x", batch=job_id.batch_id)
        p.submit("acme", "a", b"member", batch=job_id.batch_id)
        with pytest.raises(zlane.BatchExists):
            p.submit("acme", "a", b"again", open_batch="py-dup")
            p.submit("acme", "a", b"again", open_batch="py-dup")
        p.close_batch(job_id.batch_id, timeout=10)
        shown = broker.admin().batch_show(job_id.batch_id)
        assert (shown.jobs, shown.closed, shown.callback) == (1, True, False)

        # opened and joined in one Submit (submit_many), closed by the opening spec
        ids = p.submit_many([{"tenant": "acme", "lane": "a", "open_batch": "py-one-submit",
                              "close": True}] +
                            [{"tenant": "acme", "lane": "a", "batch": "py-one-submit"}] * 3)
        assert ids[0].batch_id == "py-one-submit"
        shown = broker.admin().batch_show("py-one-submit")
        assert (shown.jobs, shown.closed) == (3, True)

        for bad in ("123", "has space", "x" * 129):
            with pytest.raises(ValueError):
                p.submit("acme", "a", open_batch=bad)
        with pytest.raises(ValueError):
            p.submit("acme", "a", close=True)  # close goes with open_batch


def test_async_producer_batches(broker):
    done = []
    w, t = run_worker(broker.backend, {"a": lambda job: done.append(job) if job.batch else None})

    async def main():
        async with zlane.AsyncProducer(broker.frontend) as p:
            bid = await p.open_batch("acme", "a", b"cb")
            assert bid.isdigit()  # named by the broker after the job id
            for i in range(5):
                await p.submit("acme", "a", str(i), batch=bid)
            await p.close_batch(bid, timeout=10)
            with pytest.raises(zlane.BatchError):
                await p.close_batch("py-async-unknown", timeout=10)
            return bid
    try:
        bid = asyncio.run(main())
        wait_for(lambda: done, 20, "the callback")
        assert done[0].batch.batch_id == bid and done[0].batch.acked == 5
    finally:
        stop_worker(w, t)


def test_close_batch_across_a_broker_restart(broker):
    import concurrent.futures
    with zlane.Producer(broker.frontend) as p:
        bid = p.open_batch("acme", "a", batch_id="py-restart", no_callback=True)
        p.submit("acme", "a", b"member", batch=bid)
        broker.stop()
        wait_for(lambda: not p.connected, 10, "the producer to see the broker gone")
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            # the close waits for a broker, and goes in the new session
            closing = pool.submit(p.close_batch, bid, timeout=20)
            broker.start()
            closing.result(30)
        shown = broker.admin().batch_show(bid)
        assert (shown.closed, shown.jobs, shown.callback) == (True, 1, False)

        broker.stop()  # an unanswered close ends in Timeout at its deadline
        wait_for(lambda: not p.connected, 10, "the producer to see the broker gone")
        t0 = time.monotonic()
        with pytest.raises(zlane.Timeout):
            p.close_batch(bid, timeout=0.3)
        assert time.monotonic() - t0 < 2
