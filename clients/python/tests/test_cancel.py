"""Cancellation through the Python client: Admin.cancel of a running job
cancels it in the handler (job.cancelled, cancel_reason "cancelled by the
broker") and the worker settles nothing for it; a ready job is cancelled
before any worker runs it; unknown ids are said so."""

import threading

import zlane
from conftest import wait_for
from test_worker import run_worker, stop_worker


def test_cancel_running_and_ready(broker):
    started = threading.Event()
    seen = {}

    def handler(job):
        started.set()
        seen["cancelled"] = job.wait_cancelled(20)
        seen["reason"] = job.cancel_reason

    w, t = run_worker(broker.backend, {"a": handler})  # serves lane a only
    try:
        with zlane.Producer(broker.frontend) as p:
            running = p.submit("acme", "a", b"long")
            ready = p.submit("acme", "b", b"never run")  # nobody serves b
        assert started.wait(10)
        admin = broker.admin()
        answers = admin.cancel(running, ready, 987654321)
        assert answers == [(running, "cancelled", "leased"), (ready, "cancelled", "ready"),
                           (987654321, "unknown", "")]
        wait_for(lambda: "reason" in seen, 10, "the handler to see the cancel")
        assert seen == {"cancelled": True, "reason": "cancelled by the broker"}
        wait_for(lambda: w.stats["cancelled"] == 1, 10, "the worker to count the cancel")
        assert admin.cancel(running) == [(running, "already_cancelled", "leased")]
        assert broker.counter("jobs_cancelled") == 2
        assert broker.counter("jobs_acked") == 0
        assert broker.counter("err_cancelled") == 0  # no late settlement was sent
        assert w.stats["refused"] == 0 and w.stats["acked"] == 0 and w.stats["nacked"] == 0
    finally:
        stop_worker(w, t)
