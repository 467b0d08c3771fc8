"""Job priority (JobSpec.priority, 0..9, absent = the broker's 5) from the Python
client: dispatch order within one flow against a real broker, and the client-side
refusal of a priority outside 0..9."""

import asyncio
import threading

import pytest

import zlane
from conftest import wait_for

# (payload, priority): None sends no priority (the broker's default 5)
JOBS = [(b"p1", 1), (b"p9-first", 9), (b"p-absent", None), (b"p9-second", 9), (b"p0", 0)]
# higher first, submit order within a priority, absent as 5, 0 told apart from absent
EXPECTED = [b"p9-first", b"p9-second", b"p-absent", b"p1", b"p0"]


def _submit_each(broker):
    with zlane.Producer(broker.frontend) as p:
        return [p.submit("acme", "a", payload, priority=prio) for payload, prio in JOBS]


def _submit_many(broker):
    jobs = []
    for payload, prio in JOBS:
        job = {"tenant": "acme", "lane": "a", "payload": payload}
        if prio is not None:
            job["priority"] = prio
        jobs.append(job)
    with zlane.Producer(broker.frontend) as p:
        return p.submit_many(jobs)


def _submit_async(broker):
    async def main():
        async with zlane.AsyncProducer(broker.frontend) as p:
            ids = []
            for payload, prio in JOBS:  # one at a time: the submit order is the arrival order
                ids.append(await p.submit("acme", "a", payload, priority=prio))
            return ids
    return asyncio.run(main())


@pytest.mark.parametrize("submit", [_submit_each, _submit_many, _submit_async],
                         ids=["submit", "submit_many", "async"])
def test_priority_orders_dispatch_within_a_flow(broker, submit):
    seen = []
    lock = threading.Lock()

    def handler(job):
        with lock:
            seen.append(job.payload)

    ids = submit(broker)  # every job Accepted (durably queued) before any worker is there
    assert len(set(ids)) == len(JOBS)
    assert broker.counter("jobs_accepted") == len(JOBS)
    assert broker.counter("jobs_dispatched") == 0

    # concurrency 1, no prefetch: one job at a time, so the dispatch order is observable
    w = zlane.Worker(broker.backend, concurrency=1, heartbeat=0.2)
    w.add_handler("a", handler)
    t = threading.Thread(target=w.run, kwargs={"install_signals": False})
    t.start()
    try:
        broker.wait_counter("jobs_acked", len(JOBS))
        wait_for(lambda: len(seen) == len(JOBS), 10, "the handler to see every job")
        assert seen == EXPECTED
    finally:
        w.stop()
        t.join(20)
        assert not t.is_alive(), "the worker did not drain"


def test_priority_outside_0_to_9_refused_client_side(broker):
    with zlane.Producer(broker.frontend) as p:
        assert p.wait_connected(10)
        for bad in (10, -1, 255):
            with pytest.raises(ValueError, match="priority must be from 0"):
                p.submit("acme", "a", b"x", priority=bad)
            with pytest.raises(ValueError, match="priority must be from 0"):
                p.submit_future("acme", "a", b"x", priority=bad)
        for bad in (True, "9", 9.0):
            with pytest.raises(TypeError, match="priority must be an int"):
                p.submit("acme", "a", b"x", priority=bad)
        out = p.submit_many([{"tenant": "acme", "lane": "a", "payload": b"ok", "priority": 9},
                             {"tenant": "acme", "lane": "a", "payload": b"bad", "priority": 10}],
                            return_exceptions=True)
        assert isinstance(out[0], int) and isinstance(out[1], ValueError)
        with pytest.raises(ValueError, match="priority must be from 0"):
            p.submit_many([{"tenant": "acme", "lane": "a", "priority": 10}])
        assert p.stats["specs_sent"] == 1  # only the valid job went out

    async def main():
        async with zlane.AsyncProducer(broker.frontend) as ap:
            with pytest.raises(ValueError, match="priority must be from 0"):
                await ap.submit("acme", "a", b"x", priority=10)
            with pytest.raises(ValueError, match="priority must be from 0"):
                await ap.submit("acme", "a", b"x", priority=10, block=False)
            return ap.producer.stats["specs_sent"]
    assert asyncio.run(main()) == 0
    assert broker.counter("jobs_submitted") == 1
