"""Ordering keys: the jobs of a tenant and lane with the same key run one at a
time, in the order accepted, even on a worker with many handler threads; a
failing job holds the ones after it until its retry succeeds."""

import threading

import pytest

import zlane
from test_worker import run_worker, stop_worker


def test_same_key_runs_one_at_a_time_in_order(broker):
    lock = threading.Lock()
    running = {}   # key -> payload running now
    order = {}     # key -> payloads in the order they started
    overlaps = []
    failed_once = set()

    def handler(job):
        key = job.ordering_key
        with lock:
            if running.get(key):
                overlaps.append((running[key], job.payload))
            running[key] = job.payload
            order.setdefault(key, []).append(job.payload)
        try:
            if job.payload.endswith(b"-2") and job.payload not in failed_once:
                failed_once.add(job.payload)
                raise RuntimeError("the downstream blinked")  # transient: retried in place
            return b"ok"
        finally:
            with lock:
                running[key] = None

    w, t = run_worker(broker.backend, {"a": handler}, concurrency=8)
    try:
        with zlane.Producer(broker.frontend) as p:
            jobs = [{"tenant": "acme", "lane": "a", "payload": f"{k}-{i}".encode(),
                     "ordering_key": k} for i in range(6) for k in ("red", "blue")]
            p.submit_many(jobs)
        broker.wait_counter("jobs_acked", 12)
        assert overlaps == []
        for k in ("red", "blue"):
            want = [f"{k}-{i}".encode() for i in range(6)]
            want.insert(3, f"{k}-2".encode())  # its retry, before -3
            assert order[k] == want
        assert broker.admin().counter("jobs_ordering_held") == 0
    finally:
        stop_worker(w, t)


def test_ordering_key_is_checked_before_sending(broker):
    with zlane.Producer(broker.frontend) as p:
        with pytest.raises(ValueError):
            p.submit("acme", "a", b"x", ordering_key="k" * 257)
        with pytest.raises(TypeError):
            p.submit("acme", "a", b"x", ordering_key=7)
        with pytest.raises(zlane.Invalid):  # the broker's rule: no parents with a key
            parent = p.submit("acme", "a", b"p")
            p.submit("acme", "a", b"x", ordering_key="k", depends_on=[parent])
