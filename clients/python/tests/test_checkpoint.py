"""Progress checkpoints: a handler saves its progress (job.save_checkpoint); an
attempt that does not finish hands it to the next one (job.checkpoint), and the
dead letter keeps it."""

import threading

import pytest

import zlane
from test_worker import run_worker, stop_worker


def test_checkpoint_resumes_the_next_attempt(broker):
    lock = threading.Lock()
    seen = []  # (attempt, checkpoint received, steps run)

    def handler(job):
        start = int(job.checkpoint or b"0")
        steps = []
        for i in range(start + 1, 11):
            steps.append(i)
            job.save_checkpoint(str(i))
            if job.attempt == 1 and i == 5:
                with lock:
                    seen.append((job.attempt, job.checkpoint, steps))
                raise RuntimeError("crashed halfway")  # transient: retried
        with lock:
            seen.append((job.attempt, job.checkpoint, steps))
        return b"done"

    w, t = run_worker(broker.backend, {"a": handler})
    try:
        with zlane.Producer(broker.frontend) as p:
            p.submit("acme", "a", b"ten steps", max_attempts=3)
        broker.wait_counter("jobs_acked", 1)
        assert seen == [(1, None, [1, 2, 3, 4, 5]), (2, b"5", [6, 7, 8, 9, 10])]
        assert broker.admin().counter("checkpoints_saved") >= 1  # (unsent ones coalesce)
    finally:
        stop_worker(w, t)


def test_save_checkpoint_checks_its_argument():
    job = zlane.Job(id=1, lease=2)
    with pytest.raises(ValueError):
        job.save_checkpoint(b"")
    with pytest.raises(RuntimeError):  # not held by a worker
        job.save_checkpoint(b"x")
