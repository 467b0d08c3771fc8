"""The Celery side of bench/py_bench.py: one app on the Redis that py_bench starts
($PYBENCH_REDIS), one no-op task. The task counts its calls in the worker process
(pool solo or threads: one process) and, at $PYBENCH_TARGET calls, writes the
time from the first call to that one into $PYBENCH_DONE (JSON)."""

from __future__ import annotations

import json
import os
import threading
import time

from celery import Celery

app = Celery("py_bench", broker=os.environ.get("PYBENCH_REDIS", "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_ignore_result=True,          # no result backend: fire and forget, as zlane's no-op
    task_serializer="json",
    accept_content=["json"],
    worker_send_task_events=False,
    task_send_sent_event=False,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)

_lock = threading.Lock()
_count = 0
_first = 0.0
_target = int(os.environ.get("PYBENCH_TARGET", "0"))


@app.task(name="noop")
def noop(payload):
    global _count, _first
    with _lock:
        _count += 1
        if _count == 1:
            _first = time.perf_counter()
        if _count == _target:
            t = time.perf_counter()
            with open(os.environ["PYBENCH_DONE"] + ".tmp", "w") as f:
                json.dump({"jobs": _count, "from_first": t - _first, "t_end": time.time()}, f)
            os.rename(os.environ["PYBENCH_DONE"] + ".tmp", os.environ["PYBENCH_DONE"])
