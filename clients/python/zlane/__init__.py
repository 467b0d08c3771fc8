"""zlane: the Python client of the zlane job broker.

    from zlane import Producer
    with Producer("tcp://127.0.0.1:5570") as p:
        job_id = p.submit("acme", "emails", b'{"to": "a@b.c"}')

Producer / AsyncProducer submit jobs, Worker runs handlers per lane, Admin and
Subscriber are the operator's side. Every message is proto/zlane.proto's.
"""

from .admin import Admin, Subscriber
from .curve import Curve
from .errors import (AdminRefused, BatchClosed, BatchError, BatchExists, BrokerError, CurveError,
                     Invalid, NotYet, PayloadTooLarge, Permanent, QueueFull, Rejected, ShuttingDown,
                     StoreFull, Throttled, Timeout, Unauthorized, Unavailable, UnknownBatch,
                     UnknownLane, ZlaneError)
from .producer import AsyncProducer, JobId, Producer
from .records import (Attempt, BatchInfo, DeadLetter, DlqAlert, GroupStats, Latency, Record,
                      Stats)

__version__ = "0.1.0"


def __getattr__(name):
    # zlane.worker is imported on first use, so that `python3 -m zlane.worker` runs
    # it as a script without importing it twice
    if name in ("Worker", "Job"):
        from . import worker
        return getattr(worker, name)
    raise AttributeError(f"module 'zlane' has no attribute {name!r}")

__all__ = [
    "Admin", "AdminRefused", "AsyncProducer", "Attempt", "BatchClosed", "BatchError",
    "BatchExists", "BatchInfo", "BrokerError", "Curve", "CurveError", "DeadLetter", "DlqAlert",
    "GroupStats", "Invalid", "Job", "JobId", "Latency", "NotYet", "PayloadTooLarge", "Permanent",
    "Producer", "QueueFull", "Record", "Rejected", "ShuttingDown", "Stats", "StoreFull",
    "Subscriber", "Throttled", "Timeout", "Unauthorized", "Unavailable", "UnknownBatch",
    "UnknownLane", "Worker", "ZlaneError",
]
