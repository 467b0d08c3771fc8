"""NotYet: a handler's "what the job needs has not arrived yet" (Nack NOT_YET),
retried by the broker without spending an attempt, and dead-lettered past the
lane's max_not_yet."""

import threading

import pytest

import zlane
from conftest import FAST, wait_for
from test_worker import run_worker, stop_worker


def test_not_yet_is_an_exception_with_a_delay():
    assert zlane.NotYet().retry_after == 0.0            # None: the broker's default
    assert zlane.NotYet(0.25).retry_after == 0.25
    assert "not yet" in str(zlane.NotYet())
    assert str(zlane.NotYet(1, "row 7 not there")) == "row 7 not there"
    with pytest.raises(ValueError):
        zlane.NotYet(-1)


def test_not_yet_retries_without_spending_an_attempt(broker):
    lock = threading.Lock()
    seen = []  # the attempt number of every delivery

    def handler(job):
        with lock:
            seen.append(job.attempt)
            n = len(seen)
        if n <= 2:
            raise zlane.NotYet(0.05, "the row has not arrived")
        return b"done"
    w, t = run_worker(broker.backend, {"a": handler})
    try:
        with zlane.Producer(broker.frontend) as p:
            job_id = p.submit("acme", "a", b"needs-a-row", max_attempts=2)
        broker.wait_counter("jobs_acked", 1)
        assert seen == [1, 1, 1]  # ran 3 times, every delivery attempt 1
        admin = broker.admin()
        st = admin.stats()
        assert st.counters["jobs_acked"] == 1
        assert st.counters["jobs_not_yet"] == 2
        assert st.counters.get("jobs_not_yet_exhausted", 0) == 0
        assert admin.dlq_list() == []  # nothing dead-lettered
        with pytest.raises(zlane.AdminRefused):
            admin.dlq_show(job_id)
        assert w.stats["nacked"] == 2 and w.stats["acked"] == 1
    finally:
        stop_worker(w, t)


def test_not_yet_past_max_not_yet_is_dead_lettered(broker_factory):
    broker = broker_factory(FAST + ["--set", "lanes/a/max_not_yet=2"], lanes=("a",))
    lock = threading.Lock()
    seen = []

    def handler(job):
        with lock:
            seen.append(job.attempt)
        raise zlane.NotYet(0.05, "still nothing")
    w, t = run_worker(broker.backend, {"a": handler})
    try:
        with zlane.Producer(broker.frontend) as p:
            job_id = p.submit("acme", "a", b"never-arrives")
        admin = broker.admin()
        dead = wait_for(lambda: admin.dlq_list(), 20, "the job in the DLQ")
        assert [d.job_id for d in dead] == [job_id]
        letter = admin.dlq_show(job_id)
        assert "past the lane's max_not_yet (2)" in letter.error
        assert "still nothing" in letter.error
        assert [a.outcome for a in letter.attempts] == ["OUTCOME_NOT_YET"] * 3
        assert seen == [1, 1, 1]  # 2 allowed, the third dead-letters it
        assert admin.counter("jobs_not_yet_exhausted") == 1
    finally:
        stop_worker(w, t)
