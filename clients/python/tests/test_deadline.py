"""Job deadlines (JobSpec.deadline_ms / max_age_ms) from the Python client against a
real broker with no worker: a job past its max_age is dead-lettered EXPIRED while
one without stays ready; a deadline already past is rejected (Invalid); bad values
are refused client-side before anything is sent."""

import asyncio
import datetime
import time

import pytest

import zlane
from conftest import wait_for


def _lane(admin, name):
    return {g.lane: g for g in admin.stats().lanes}[name]


def _check_expired(admin, expiring, kept):
    wait_for(lambda: [d.job_id for d in admin.dlq_list()] == [expiring], 15,
             "the job with max_age 0.3 s in the DLQ")
    dead = admin.dlq_show(expiring)
    assert dead.attempts, dead
    last = dead.attempts[-1]
    assert last.outcome == "OUTCOME_EXPIRED", dead
    assert "deadline passed" in last.error and "deadline passed" in dead.error, dead
    lane = _lane(admin, "a")
    assert lane.ready == 1 and lane.dlq == 1, lane
    assert admin.counter("jobs_dispatched") == 0
    assert kept not in {d.job_id for d in admin.dlq_list()}


@pytest.mark.parametrize("way", ["submit", "submit_many"])
def test_max_age_expires_and_past_deadline_rejected(broker, way):
    admin = broker.admin()
    with zlane.Producer(broker.frontend) as p:
        if way == "submit":
            expiring = p.submit("acme", "a", b"short", max_age=0.3)
            kept = p.submit("acme", "a", b"kept")
        else:
            expiring, kept = p.submit_many([
                {"tenant": "acme", "lane": "a", "payload": b"short", "max_age": 0.3},
                {"tenant": "acme", "lane": "a", "payload": b"kept"}])
        _check_expired(admin, expiring, kept)

        # already past at submit: the broker refuses it (INVALID), as epoch seconds
        # and as an aware datetime
        with pytest.raises(zlane.Invalid, match="deadline_ms"):
            p.submit("acme", "a", b"late", deadline=time.time() - 60)
        past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=1)
        with pytest.raises(zlane.Invalid, match="deadline_ms"):
            p.submit("acme", "a", b"late", deadline=past)
        out = p.submit_many([{"tenant": "acme", "lane": "a", "deadline": past}],
                            return_exceptions=True)
        assert isinstance(out[0], zlane.Invalid)

        # a deadline ahead is taken, and the job waits (ready) like the kept one
        ahead = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
        p.submit("acme", "a", b"later", deadline=ahead, max_age=3600)
        assert _lane(admin, "a").ready == 2


def test_deadline_async(broker):
    admin = broker.admin()

    async def main():
        async with zlane.AsyncProducer(broker.frontend) as p:
            expiring = await p.submit("acme", "a", b"short", max_age=0.3)
            kept = await p.submit("acme", "a", b"kept", deadline=time.time() + 3600)
            with pytest.raises(zlane.Invalid, match="deadline_ms"):
                await p.submit("acme", "a", b"late", deadline=time.time() - 60)
            with pytest.raises(ValueError):
                await p.submit("acme", "a", b"bad", max_age=-1)
            return expiring, kept
    expiring, kept = asyncio.run(main())
    _check_expired(admin, expiring, kept)


def test_deadline_refused_client_side(broker):
    naive = datetime.datetime.now() + datetime.timedelta(minutes=1)
    with zlane.Producer(broker.frontend) as p:
        assert p.wait_connected(10)
        for bad in (-1, -0.001, float("nan"), float("inf"), naive, 2 ** 70):
            with pytest.raises(ValueError):
                p.submit("acme", "a", b"x", deadline=bad)
        for bad in (-1, -0.5, float("nan"), 2 ** 32 / 1000, 1e10):
            with pytest.raises(ValueError):
                p.submit("acme", "a", b"x", max_age=bad)
        for bad in ("10", b"10", True, [1], datetime.date.today()):
            with pytest.raises(TypeError):
                p.submit("acme", "a", b"x", deadline=bad)
        for bad in ("10", True, datetime.timedelta(seconds=1)):
            with pytest.raises(TypeError):
                p.submit("acme", "a", b"x", max_age=bad)
        out = p.submit_many([{"tenant": "acme", "lane": "a", "max_age": -1},
                             {"tenant": "acme", "lane": "a", "deadline": "soon"}],
                            return_exceptions=True)
        assert isinstance(out[0], ValueError) and isinstance(out[1], TypeError)
        assert p.stats["specs_sent"] == 0, "nothing went out"
        # the largest max_age is taken
        p.submit("acme", "a", b"x", max_age=(2 ** 32 - 1) / 1000)
    assert broker.counter("jobs_accepted") == 1
