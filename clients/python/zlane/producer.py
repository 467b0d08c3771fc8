"""Submit jobs to a zlane broker: Producer (threads) and AsyncProducer (asyncio).

One I/O thread per Producer owns the ZeroMQ DEALER (ZeroMQ sockets are not
thread-safe); callers in any thread hand it jobs under one lock and wait on
futures. It follows the frontend protocol as the C library does
(producer/zlane_producer.c):

- Hello, then Credit: the broker's `limit` counts the specs this connection may
  have sent since its Hello. Nothing is sent beyond it. A submit waits for credit
  (block=True, up to its timeout) or raises QueueFull at once (block=False).
- Many JobSpecs per Submit frame (up to max_batch), many Submits in flight
  within credit; each spec is answered by seq in Accepted or Rejected.
- Every job carries an idempotency key: the caller's, or "<instance>-<seq>"
  made here and marked generated_key. A job is kept until Accepted (or
  rejected for good, or its deadline passed) and resent under the same key in
  every new session: after a reconnect (a new handshake: a broker restart),
  Error{NOT_READY}, a move to another broker of the list (silence, a refused
  dial, Error{NOT_LEADER} with leader_endpoints, UNAVAILABLE).
- QUEUE_FULL, STORE_FULL, SHUTTING_DOWN and UNAVAILABLE rejections are retried
  after retry_after_ms until the job's deadline.
- Batches: a spec joins one (JobSpec.batch) or opens one (JobSpec.open_batch;
  its Acceptance names the batch). close_batch waits for every job taken before
  it to be answered, then sends a Submit with only close_batches (again in
  every new session until answered) and waits for its Accepted.closed item.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import functools
import heapq
import logging
import math
import numbers
import os
import re
import secrets
import threading
from collections import deque
from typing import Iterable, Mapping, Sequence

import zmq

from ._conn import Backoff, EndpointList, Waker, now
from ._proto import PROTOCOL_VERSION, check_text, decode, enum_name, parse_endpoints, pb
from .curve import as_curve
from .errors import BatchError, QueueFull, RETRYABLE, Timeout, ZlaneError, rejection

log = logging.getLogger("zlane.producer")


_RETRY_MIN = 0.05          # floor of a retryable rejection's delay (s)
_BATCH_MAX_BYTES = 1 << 20  # a Submit frame stops growing past this
_HWM = 1000
_HEARTBEAT_IVL_MS = 1000
_HEARTBEAT_TIMEOUT_MS = 3000
_DIAL_TIMEOUT = 3.0        # several brokers: no answer by then, the next
_REDIAL_MIN, _REDIAL_MAX = 1.0, 30.0  # after a refused handshake
_MONITOR_EVENTS = (zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED
                   | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                   | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_CONNECT_RETRIED)
_MECHANISM_MISMATCH = zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH


# per-job states, one byte each in a unit's `st`
_QUEUED, _INFLIGHT, _RETRY, _DONE, _QUEUED_AGAIN, _QUEUED_RETRY = range(6)
_QUEUED_STATES = (_QUEUED, _QUEUED_AGAIN, _QUEUED_RETRY)

_BATCH_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}\Z")


class JobId(int):
    """The job id (an int) of an accepted job that opened a batch, with `batch_id`:
    the batch's id (the one given, or the one the broker chose)."""

    def __new__(cls, job_id: int, batch_id: str = ""):
        self = super().__new__(cls, job_id)
        self.batch_id = batch_id
        return self


def _batch_id(what: str, value, *, opening: bool = False) -> str:
    """`value` if it can name a batch (1 to 128 bytes of [A-Za-z0-9._:-]; one to open
    may not be all digits: those are the names the broker gives), else ValueError."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not _BATCH_ID.match(value):
        raise ValueError(f"{what} must be 1 to 128 characters of [A-Za-z0-9._:-], not {value!r}")
    if opening and value.isdigit():
        raise ValueError(f"{what} {value!r} is all digits: those name the batches the broker "
                         f"names (open with batch id '' or True for one)")
    return value


class _Close:
    """A close_batch waiting for its Accepted.closed item: sent once per session."""
    __slots__ = ("batch_id", "frame", "sent", "agg")

    def __init__(self, batch_id, agg):
        self.batch_id = batch_id
        self.frame = pb.Envelope(version=PROTOCOL_VERSION, submit=pb.Submit(
            close_batches=[batch_id])).SerializePartialToString()
        self.sent = False
        self.agg = agg


class _Agg:
    """The result of one admission: a submit_many call (one Event) or one submit
    (a Future). `out` holds a job id or an exception per job, in the caller's order."""
    __slots__ = ("out", "left", "done", "nonblock")

    def __init__(self, n, done, nonblock):
        self.out = [None] * n
        self.left = n
        self.done = done            # callable(out) once every job has its result
        self.nonblock = nonblock


class _Unit:
    """Consecutive jobs (seqs first .. first+n-1) of one admission, encoded once as
    one Submit frame (protobuf's own serialisation) in the caller's thread. Each job's
    state is one byte of `st`; a job answered is DONE. The frame is sent as it is
    while every job in it is queued (the first send, a resend after a new session);
    a part of it (credit short, retries) is cut from the parsed frame."""
    __slots__ = ("first", "n", "frame", "nframe", "st", "nq", "agg", "base", "keys",
                 "deadline", "why", "open", "opens")

    def __init__(self, first, n, agg, base, deadline):
        self.first = first
        self.n = n
        self.frame = b""
        self.nframe = 0             # specs in frame
        self.st = None
        self.nq = 0                 # jobs in a queued state
        self.agg = agg
        self.base = base            # index of this unit's first job in agg.out
        self.keys = None            # the jobs' keys, or None: all generated (instance-seq)
        self.deadline = deadline
        self.why = None             # {i: (code, reason, retry_after)} of rejections retried
        self.open = 0               # jobs not DONE
        self.opens = False          # a job of it opens a batch (its Acceptance names it)


def _noop_done(out):
    pass


def _ms(seconds, what) -> int:
    if seconds is None:
        return 0
    ms = int(round(float(seconds) * 1000))
    if ms < 0 or ms > 0xFFFFFFFF:
        raise ValueError(f"{what} must be between 0 and {0xFFFFFFFF // 1000} seconds")
    return ms


_U32_MAX = 0xFFFFFFFF
_U64_MAX = (1 << 64) - 1


def _seconds(what: str, value) -> float:
    """`value` as a finite number >= 0 (an int or float, not a bool), else TypeError /
    ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    f = float(value)
    if not math.isfinite(f) or f < 0:
        raise ValueError(f"{what} must be a finite number >= 0, not {value!r}")
    return f


def _deadline_ms(value) -> int:
    """A job's `deadline` (an absolute time: epoch seconds as an int or float, or a
    timezone-aware datetime) as JobSpec.deadline_ms (ms since the epoch); None or 0:
    0, none. A time in the past is sent as it is: the broker rejects it (Invalid)."""
    if value is None:
        return 0
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("deadline as a datetime must be timezone-aware "
                             "(e.g. datetime.now(timezone.utc) + timedelta(minutes=5))")
        value = value.timestamp()
        if value < 0:
            raise ValueError("deadline must not be before the epoch")
    elif isinstance(value, datetime.date):
        raise TypeError("deadline must be epoch seconds or a timezone-aware datetime, not a date")
    secs = _seconds("deadline (epoch seconds)", value)
    ms = int(value) * 1000 if isinstance(value, int) else int(round(secs * 1000))
    if ms > _U64_MAX:
        raise ValueError(f"deadline {value!r} is beyond what deadline_ms holds")
    return ms if ms or not secs else 1  # a time, however early, never "none"


_ORDERING_KEY_MAX = 256  # bytes (ZL_ORDERING_KEY_MAX)


def _ordering_key(value) -> str:
    """A job's ordering key, checked: a str of 1 to 256 bytes in UTF-8 (or "": none)."""
    if not isinstance(value, str):
        raise TypeError(f"ordering_key must be a str, not {type(value).__name__}")
    if len(value.encode()) > _ORDERING_KEY_MAX:
        raise ValueError(f"ordering_key is longer than {_ORDERING_KEY_MAX} bytes")
    return value


def _max_age_ms(value) -> int:
    """A job's `max_age` (seconds from its acceptance) as JobSpec.max_age_ms; None or
    0: 0, none. Above 2^32-1 ms (about 49.7 days): ValueError."""
    if value is None:
        return 0
    secs = _seconds("max_age", value)
    ms = int(round(secs * 1000))
    if ms > _U32_MAX:
        raise ValueError(f"max_age must be at most {_U32_MAX / 1000:.3f} seconds "
                         f"(2^32-1 ms), not {value!r}")
    return ms if ms or not secs else 1  # under a ms, not "none"


PRIORITY_MIN, PRIORITY_MAX = 0, 9  # JobSpec.priority; absent: the broker's default 5


def _priority(value) -> int:
    """`value` as a job priority (an int 0 to 9), else TypeError / ValueError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"priority must be an int from {PRIORITY_MIN} to {PRIORITY_MAX} "
                        f"(or None for the broker's default 5), not {type(value).__name__}")
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise ValueError(f"priority must be from {PRIORITY_MIN} (lowest) to {PRIORITY_MAX} "
                         f"(highest), not {value}")
    return int(value)


def _headers(headers) -> list[tuple[str, str]]:
    if not headers:
        return []
    items = headers.items() if isinstance(headers, Mapping) else headers
    out = []
    for k, v in items:
        if not isinstance(k, str) or not k:
            raise ValueError("a header needs a non-empty str key")
        out.append((k, v if isinstance(v, str) else str(v)))
    return out


def _payload(payload) -> bytes:
    if payload is None:
        return b""
    if isinstance(payload, str):
        return payload.encode("utf-8")
    return bytes(payload)


class Producer:
    """Submit jobs to a broker (or a list of brokers sharing a store), from any thread.

    `endpoints`: the broker's frontend, or several ("tcp://a:5570,tcp://b:5570" or a
    list). `client`: the name sent in Hello. `curve`: a zlane.Curve or a pair
    (broker's public certificate, this client's secret certificate) as `zlane-ctl
    keygen` writes them. `deadline`: how long (s) a job is kept and resent when its
    submit gives no timeout. `max_batch`: specs per Submit frame.

    Use it as a context manager, or call close(). Thread-safe.
    """

    def __init__(self, endpoints="tcp://127.0.0.1:5570", *, client: str = "zlane-py",
                 curve=None, deadline: float = 30.0, max_batch: int = 256):
        self._brokers = EndpointList(parse_endpoints(endpoints))
        check_text("client", client, limit=128, empty=True)
        if deadline <= 0 or max_batch < 1:
            raise ValueError("deadline must be positive and max_batch at least 1")
        self._client = client
        self._curve = as_curve(curve)
        self._deadline = float(deadline)
        self._max_batch = int(max_batch)
        self._instance = secrets.token_hex(8)
        self._ctx = zmq.Context()
        for ep in self._brokers.endpoints:  # refuse at start what ZeroMQ does not take
            probe = self._ctx.socket(zmq.DEALER)
            try:
                probe.connect(ep)
            except zmq.ZMQError as exc:
                probe.close(0)
                self._ctx.term()
                raise ValueError(f"bad broker endpoint {ep!r}: {exc}") from None
            probe.close(0)

        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._waker = Waker()
        self._closed = False
        self._waiters = 0

        # guarded by _lock (the I/O thread holds it while it works)
        self._seqs: dict[int, _Unit] = {}       # seq -> its unit, until answered
        self._units: dict[_Unit, None] = {}     # units with jobs not DONE, oldest first
        self._next_seq = 1
        self._n_queued = 0                      # jobs queued or reserved, not sent
        self._n_open = 0                        # jobs taken without a result
        self._queue: deque[_Unit] = deque()     # units with queued jobs, to send in order
        self._retries: list = []                # (at, n, unit, index) of jobs to retry
        self._retry_seq = 0
        self._deadlines: list = []              # (deadline, n, unit)
        self._deadline_seq = 0
        self._finished: list[_Agg] = []         # results for the callers, outside the lock
        self._closes: list[_Close] = []         # close_batch calls waiting for their answer
        self._connected = False
        self._hello_pending = False
        self._credit_limit = 0
        self._sent_since_hello = 0
        self._refused = ""
        self._last_error = ""
        self._last_retry_after = 0.0
        self._down_since = now()
        self.stats = {"submitted": 0, "accepted": 0, "rejected": 0, "timed_out": 0,
                      "specs_sent": 0, "resent": 0, "retried": 0, "connects": 0,
                      "disconnects": 0, "moves": 0}

        # the I/O thread's own
        self._sock = None
        self._monitor = None
        self._endpoint = self._brokers.current
        self._backoff = Backoff(0.1, 1.0)
        self._leave_why = ""
        self._dial_at: float | None = None
        self._dial_deadline: float | None = None
        self._redial_at: float | None = None
        self._redial = _REDIAL_MIN
        self._open_socket()
        if self._brokers.roams:
            self._dial_deadline = now() + _DIAL_TIMEOUT
        self._thread = threading.Thread(target=self._run, name="zlane-producer", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ public API

    def submit(self, tenant: str, lane: str, payload=b"", *, key: str | None = None,
               delay: float | None = None, max_attempts: int | None = None,
               headers=None, lease: float | None = None, max_run: float | None = None,
               depends_on=None, batch: str | None = None, open_batch=None,
               no_callback: bool = False, close: bool = False, priority: int | None = None,
               deadline=None, max_age: float | None = None, ordering_key: str | None = None,
               block: bool = True, timeout: float | None = None) -> int:
        """Submit one job and return its job id once the broker Accepted it (durably).

        `payload`: bytes (str is UTF-8 encoded). `key`: an idempotency key (a key seen
        within the broker's dedup window returns the original job id); without one a
        key is generated for the library's own resends. `delay`, `lease`, `max_run`
        in seconds; `max_attempts` 0/None = the lane's default; `headers` a dict or
        pairs of str; `depends_on` job ids of parents: the job runs once they are all
        acked, with their results (Job.parent_results). `priority`: 0 (lowest) to 9
        (highest) within the job's flow (lane x tenant; FIFO within a priority; fair
        queuing across tenants unchanged); None sends none: the broker's default 5.
        Outside 0..9 raises ValueError before anything is sent.

        Deadline (the broker's, JobSpec.deadline_ms / max_age_ms): `deadline` an
        absolute time, epoch seconds (int or float, the broker's wall clock) or a
        timezone-aware datetime; `max_age` seconds counted from the job's acceptance.
        The broker takes the earliest of them and the lane's max_age; past it the job
        is never dispatched again (a running attempt is stopped) and is dead-lettered
        with outcome EXPIRED. None (or 0) sends none. A `deadline` already past is
        rejected by the broker (Invalid). Negative, NaN, a naive datetime or a
        max_age above 2^32-1 ms raises ValueError, a non-number TypeError, before
        anything is sent. (Not to be confused with `timeout`, this client's own.)

        `ordering_key` (JobSpec.ordering_key): the jobs of this tenant and lane with the
        same key run one at a time, in the order the broker accepted them; a job being
        retried holds the ones after it (README, "Ordering keys"). 1 to 256 bytes of
        UTF-8; not with depends_on or open_batch (the broker answers Invalid).

        Batches: `batch` joins the job to that open batch (of the same tenant).
        `open_batch` opens one with this job as its callback, run once the batch is
        closed and every job of it settled (its Job.batch the summary): a batch id,
        or True / "" for the broker to name it (after the job id); `no_callback`: the
        job only places the batch, nothing runs; `close`: closed at once after this
        Submit. A job that opened a batch returns a JobId (an int) whose `batch_id`
        is the batch's.

        `block`: wait for credit (True), or raise QueueFull at once when there is
        none or the broker answers QUEUE_FULL / STORE_FULL (False). `timeout`: how
        long (s) to keep trying, the job's deadline (default: the producer's).
        Raises a Rejected subclass (Invalid, PayloadTooLarge, UnknownLane, QueueFull,
        StoreFull, Unauthorized, ...) or Timeout."""
        fut = self.submit_future(tenant, lane, payload, key=key, delay=delay,
                                 max_attempts=max_attempts, headers=headers, lease=lease,
                                 max_run=max_run, depends_on=depends_on, batch=batch,
                                 open_batch=open_batch, no_callback=no_callback, close=close,
                                 priority=priority, deadline=deadline, max_age=max_age,
                                 ordering_key=ordering_key, block=block, timeout=timeout)
        return fut.result()

    def open_batch(self, tenant: str, lane: str, payload=b"", *, batch_id: str = "",
                   no_callback: bool = False, close: bool = False, **options) -> str:
        """Open a batch and return its id once the broker Accepted the opening job:
        the callback job (in `lane`, with `payload` and submit's other options), run
        once the batch is closed and settled. `batch_id` "" lets the broker name it
        (the job id in decimal)."""
        return self.submit(tenant, lane, payload, open_batch=batch_id or True,
                           no_callback=no_callback, close=close, **options).batch_id

    def close_batch(self, batch_id: str, *, timeout: float | None = None) -> None:
        """Close batch `batch_id`: no job joins it from now on; it settles (its callback
        runs) once every job of it has. Waits for every job taken before this call to
        be answered, then for the broker to confirm the close (sent again in a new
        session: a reconnect, a broker restart, a move to the leader; closing a closed
        batch is no error). `timeout` (s, default the producer's deadline) bounds it all.
        Raises BatchError when the broker refused it (no such batch, another tenant's,
        cancelled), Timeout when no answer came in time."""
        _batch_id("batch_id", batch_id)
        end = now() + (self._deadline if timeout is None else float(timeout))
        with self._cv:
            if self._closed:
                raise ZlaneError("the producer is closed")
            mark = self._next_seq
            self._waiters += 1
            try:  # every job taken before the close answered first: the close comes after
                while any(u.first < mark for u in self._units):
                    left = end - now()
                    if left <= 0:
                        raise Timeout(f"batch {batch_id!r} not closed: the jobs submitted "
                                      f"before its close had no answer in time")
                    self._cv.wait(min(left, 0.1))
            finally:
                self._waiters -= 1
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def done(out):
            if out[0] is None:
                fut.set_result(None)
            else:
                fut.set_exception(out[0])
        c = _Close(batch_id, _Agg(1, done, False))
        with self._cv:
            if self._closed:
                raise ZlaneError("the producer is closed")
            self._closes.append(c)
        self._waker.wake()
        try:
            fut.result(max(0.0, end - now()))
            return
        except concurrent.futures.TimeoutError:
            with self._cv:
                waiting = c in self._closes
                if waiting:
                    self._closes.remove(c)
                why = self._last_error
            if not waiting:  # answered just now
                fut.result()
                return
        raise Timeout(f"batch {batch_id!r}: no answer to its close from broker at "
                      f"{self._where()} in time" + (f" ({why})" if why else ""), sent=c.sent)

    def submit_future(self, tenant: str, lane: str, payload=b"", *, block: bool = True,
                      timeout: float | None = None, **options) -> concurrent.futures.Future:
        """Like submit, but return at once (once the job is taken: after waiting for
        credit when block=True) with a concurrent.futures.Future of the job id."""
        job = dict(options, tenant=tenant, lane=lane, payload=payload) if options else \
            (tenant, lane, payload)
        return self._future(job, wait=block, nonblock=not block, timeout=timeout)

    def _submit_job_future(self, spec: dict, *, wait: bool, timeout) -> concurrent.futures.Future:
        """A blocking-semantics job (rejections retried), taken only if credit allows
        now when not `wait` (else QueueFull)."""
        return self._future(spec, wait=wait, nonblock=False, timeout=timeout)

    def _future(self, job, *, wait, nonblock, timeout) -> concurrent.futures.Future:
        if isinstance(job, dict):  # refused at once, not after waiting for credit
            if job.get("priority") is not None:
                _priority(job["priority"])
            if job.get("deadline") is not None:
                _deadline_ms(job["deadline"])
            if job.get("max_age") is not None:
                _max_age_ms(job["max_age"])
            if job.get("ordering_key") is not None:
                _ordering_key(job["ordering_key"])
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def done(out):
            r = out[0]
            if isinstance(r, BaseException):
                fut.set_exception(r)
            else:
                fut.set_result(r)
        self._admit([job], _Agg(1, done, nonblock), wait=wait, timeout=timeout)
        return fut

    def submit_many(self, jobs: Iterable, *, block: bool = True, timeout: float | None = None,
                    return_exceptions: bool = False) -> list:
        """Submit many jobs, pipelined (many specs per Submit frame, many frames in
        flight within credit), and return their job ids in order.

        Each job is a dict of submit's arguments ({"tenant", "lane", "payload",
        "key", "headers", "priority", "deadline", "max_age", ...}) or a tuple (tenant, lane, payload). Jobs are taken as
        credit allows (block=True waits for it). The first failure is raised once every
        job has its result, unless `return_exceptions`, which puts each job's
        exception in its place in the list."""
        jobs = jobs if isinstance(jobs, list) else list(jobs)
        if not jobs:
            return []
        all_done = threading.Event()
        agg = _Agg(len(jobs), lambda out: all_done.set(), not block)
        taken = 0
        try:
            taken = self._admit(jobs, agg, wait=block, timeout=timeout, partial=True)
        finally:
            if taken < len(jobs):  # the rest is refused (no credit)
                err = self._no_credit_error(not block)
                with self._cv:
                    for i in range(taken, len(jobs)):
                        if agg.out[i] is None:
                            agg.out[i] = err
                            agg.left -= 1
                    if agg.left == 0:
                        all_done.set()
        all_done.wait()
        results = agg.out
        if not return_exceptions:
            for r in results:
                if isinstance(r, BaseException):
                    raise r
        return results

    def wait_connected(self, timeout: float = 10.0) -> bool:
        """Wait until a broker gave this producer credit; True if it did in time."""
        end = now() + timeout
        with self._cv:
            self._waiters += 1
            try:
                while not (self._connected and self._credit_limit > 0):
                    left = end - now()
                    if left <= 0 or self._closed:
                        return False
                    self._cv.wait(left)
                return True
            finally:
                self._waiters -= 1

    @property
    def connected(self) -> bool:
        """True while a handshake with a broker holds."""
        return self._connected

    @property
    def endpoint(self) -> str:
        """The broker endpoint in use."""
        return self._endpoint

    @property
    def outstanding(self) -> int:
        """Jobs taken that have no result yet."""
        return self._n_open

    @property
    def last_error(self) -> str:
        """The last problem in words, or ""."""
        return self._last_error

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every job taken has its result; True if so within `timeout`."""
        end = None if timeout is None else now() + timeout
        with self._cv:
            self._waiters += 1
            try:
                while self._n_open:
                    left = None if end is None else end - now()
                    if left is not None and left <= 0:
                        return False
                    self._cv.wait(0.1 if left is None else min(left, 0.1))
                return True
            finally:
                self._waiters -= 1

    def close(self, timeout: float | None = 0.0) -> None:
        """Stop the I/O thread and close the socket, after waiting up to `timeout`
        for outstanding jobs (None = until they all have results). Jobs still
        without a result end with Timeout."""
        if self._closed:
            return
        if timeout is None or timeout > 0:
            self.flush(timeout)
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._waker.wake()
        self._thread.join()
        self._waker.close()
        self._ctx.term()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(timeout=None if exc[0] is None else 0.0)

    # ------------------------------------------------------------ admission (caller threads)

    def _fill(self, jobs, first: int, env) -> tuple[list, list, int]:
        """Add a JobSpec per job to env.submit (seq first, first+1, ...) through
        protobuf's own API. Returns (errors as (index, exception), keys or None, bytes,
        whether a job opens a batch)."""
        add = env.submit.jobs.add
        inst = self._instance
        errors = []
        keys = None
        size = 0
        opens = False
        seq = first - 1
        for i, job in enumerate(jobs):
            seq += 1
            try:
                if type(job) is tuple and len(job) == 3:   # the bulk fast path
                    tenant, lane, payload = job
                    if type(tenant) is not str or not tenant:
                        raise ValueError("a job needs a tenant (a non-empty str)")
                    if type(lane) is not str or not lane:
                        raise ValueError("a job needs a lane (a non-empty str)")
                    if type(payload) is not bytes:
                        payload = _payload(payload)
                    add(seq=seq, tenant=tenant, lane=lane, payload=payload,
                        idempotency_key=f"{inst}-{seq}", generated_key=True)
                    size += len(payload)
                    if keys is not None:
                        keys.append(None)
                    continue
                kw, key = self._spec(job)
                kw["seq"] = seq
                if key is None:
                    kw["idempotency_key"] = f"{inst}-{seq}"
                    kw["generated_key"] = True
                else:
                    kw["idempotency_key"] = key
                    if keys is None:
                        keys = [None] * i
                if keys is not None:
                    keys.append(key)
                add(**kw)
                size += len(kw["payload"])
                if "open_batch" in kw:
                    opens = True
            except Exception as exc:  # noqa: BLE001 - the job's own error, in its place
                errors.append((i, exc))
                if keys is not None:
                    keys.append(None)
        return errors, keys, size, opens

    @staticmethod
    def _spec(job):
        """A job (a dict of submit's arguments, or (tenant, lane[, payload])) as
        JobSpec keywords (no seq, no key) and its caller's key or None."""
        if isinstance(job, Mapping):
            spec = dict(job)
        elif isinstance(job, (tuple, list)) and 2 <= len(job) <= 3:
            spec = dict(zip(("tenant", "lane", "payload"), job))
        else:
            raise TypeError("a job is a dict of submit's arguments or (tenant, lane, payload)")
        tenant = spec.pop("tenant", None)
        lane = spec.pop("lane", None)
        if not isinstance(tenant, str) or not tenant:
            raise ValueError("a job needs a tenant (a non-empty str)")
        if not isinstance(lane, str) or not lane:
            raise ValueError("a job needs a lane (a non-empty str)")
        kw = {"tenant": tenant, "lane": lane, "payload": _payload(spec.pop("payload", b""))}
        key = spec.pop("key", None)
        if key is None:
            key = spec.pop("idempotency_key", None)
        if key is not None and not isinstance(key, str):
            raise TypeError("key must be a str")
        for name, field in (("delay", "delay_ms"), ("lease", "lease_ms"),
                            ("max_run", "max_run_ms")):
            ms = _ms(spec.pop(name, None), name)
            if ms:
                kw[field] = ms
        attempts = spec.pop("max_attempts", None)
        if attempts:
            if not 0 < int(attempts) <= 65535:
                raise ValueError("max_attempts must be between 1 and 65535")
            kw["max_attempts"] = int(attempts)
        headers = _headers(spec.pop("headers", None))
        if headers:
            kw["headers"] = [pb.Header(key=k, value=v) for k, v in headers]
        parents = spec.pop("depends_on", None)
        if parents:
            for parent in parents:
                if not isinstance(parent, int) or not 0 < parent < 1 << 64:
                    raise ValueError("depends_on holds job ids (ints above 0)")
            kw["depends_on"] = list(parents)
        batch = spec.pop("batch", None)
        if batch:
            kw["batch"] = _batch_id("batch", batch)
        opener = spec.pop("open_batch", None)
        no_callback = bool(spec.pop("no_callback", False))
        close = bool(spec.pop("close", False))
        if opener is not None and opener is not False:
            if opener is True or opener == "":
                opener = ""
            else:
                _batch_id("open_batch", opener, opening=True)
            kw["open_batch"] = pb.BatchOpen(batch_id=opener, no_callback=no_callback, close=close)
        elif no_callback or close:
            raise ValueError("no_callback and close go with open_batch")
        priority = spec.pop("priority", None)
        if priority is not None:
            kw["priority"] = _priority(priority)  # sets the oneof priority_given, 0 too
        deadline_ms = _deadline_ms(spec.pop("deadline", None))
        if deadline_ms:
            kw["deadline_ms"] = deadline_ms
        max_age_ms = _max_age_ms(spec.pop("max_age", None))
        if max_age_ms:
            kw["max_age_ms"] = max_age_ms
        ordering_key = spec.pop("ordering_key", None)
        if ordering_key:
            kw["ordering_key"] = _ordering_key(ordering_key)
        if spec:
            raise TypeError(f"unknown job option(s): {', '.join(sorted(spec))}")
        return kw, key or None

    def _encode_units(self, jobs, first: int, agg: _Agg, base: int, deadline: float):
        """The units (up to max_batch jobs or about _BATCH_MAX_BYTES each) of `jobs`,
        seqs from `first`; returns (units, [(index in jobs, exception)])."""
        units = []
        errors = []
        mb = self._max_batch
        i = 0
        n = len(jobs)
        while i < n:
            k = min(mb, n - i)
            env = pb.Envelope(version=PROTOCOL_VERSION)
            errs, keys, size, opens = self._fill(jobs[i:i + k] if (i or k < n) else jobs,
                                                 first + i, env)
            if size > _BATCH_MAX_BYTES and k > 1:  # big payloads: fewer jobs a frame
                k = max(1, k * _BATCH_MAX_BYTES // size)
                env = pb.Envelope(version=PROTOCOL_VERSION)
                errs, keys, size, opens = self._fill(jobs[i:i + k], first + i, env)
            u = _Unit(first + i, k, agg, base + i, deadline)
            u.keys = keys
            u.opens = opens
            u.nframe = k - len(errs)
            st = bytearray(k)            # all _QUEUED
            for j, exc in errs:
                st[j] = _DONE
                errors.append((i + j, exc))
            u.st = st
            u.nq = u.open = u.nframe
            if u.nframe:
                u.frame = env.SerializePartialToString()  # proto3: no required fields, same bytes
                units.append(u)
            i += k
        return units, errors

    def _available(self) -> int:
        if not self._connected:
            return 0
        return self._credit_limit - self._sent_since_hello - self._n_queued

    def _no_credit_error(self, nonblock: bool) -> ZlaneError:
        if not self._connected:
            why = f"broker unreachable at {self._where()}"
            if self._refused:
                why += f": {self._refused}"
        else:
            why = f"no credit from broker at {self._endpoint} (queue full?)"
        if nonblock:
            return QueueFull(why, retry_after=self._last_retry_after or 0.1)
        return Timeout(why)

    def _where(self) -> str:
        return str(self._brokers) if self._brokers.roams else self._endpoint

    def _admit(self, jobs, agg: _Agg, *, wait, timeout, partial=False) -> int:
        """Take jobs in order as credit allows, waiting for it if `wait` (until the
        deadline): reserve credit and seqs under the lock, encode outside it, then
        queue the units for the I/O thread. Returns how many were taken (a job that
        fails validation counts: its result is the error when `partial`, else it is
        raised). Raises for the first job when none could be taken (QueueFull,
        Timeout)."""
        deadline = now() + (self._deadline if timeout is None else float(timeout))
        taken = 0
        n = len(jobs)
        while taken < n:
            with self._cv:
                while True:
                    if self._closed:
                        raise ZlaneError("the producer is closed")
                    room = self._available()
                    if room > 0:
                        break
                    left = deadline - now()
                    if not wait or left <= 0:
                        if taken:
                            return taken
                        raise self._no_credit_error(not wait)
                    self._waiters += 1
                    try:
                        self._cv.wait(left)
                    finally:
                        self._waiters -= 1
                # a slice of a few frames at a time: the I/O thread sends (and the broker
                # works on) each while the next is encoded, not all after the last
                k = min(room, n - taken, 4 * self._max_batch)
                first = self._next_seq
                self._next_seq += k
                self._n_queued += k     # reserved until the units are queued
            chunk = jobs if (taken == 0 and k == n) else jobs[taken:taken + k]
            try:
                units, errors = self._encode_units(chunk, first, agg, taken, deadline)
            except BaseException:
                with self._cv:
                    self._n_queued -= k
                raise
            if errors and not partial:
                with self._cv:
                    self._n_queued -= k
                raise errors[0][1]
            with self._cv:
                self._n_queued -= k
                if self._closed:  # the I/O thread has failed what it held: not these
                    raise ZlaneError("the producer is closed")
                for u in units:
                    self._n_queued += u.nframe
                    self._n_open += u.nframe
                    self._seqs.update(dict.fromkeys(range(u.first, u.first + u.n), u))
                    self._units[u] = None
                    self._queue.append(u)
                    self._deadline_seq += 1
                    heapq.heappush(self._deadlines, (deadline, self._deadline_seq, u))
                    self.stats["submitted"] += u.nframe
                for j, exc in errors:
                    agg.out[taken + j] = exc
                    agg.left -= 1
                if errors and agg.left == 0:
                    self._finished.append(agg)
            self._waker.wake()
            taken += k
        return taken

    # ------------------------------------------------------------ the I/O thread

    def _run(self):
        poller = zmq.Poller()
        poller.register(self._waker.fd, zmq.POLLIN)
        registered = registered_mon = None  # the sockets registered with the poller
        try:
            while True:
                with self._lock:
                    if self._closed:
                        break
                    t = now()
                    self._run_timers(t)
                    self._send_queued()
                    wait = self._next_wait(t)
                    sock, mon = self._sock, self._monitor
                if registered is not sock:
                    if registered is not None:
                        poller.unregister(registered)
                        poller.unregister(registered_mon)
                    registered = registered_mon = None
                    if sock is not None:
                        poller.register(sock, zmq.POLLIN)
                        poller.register(mon, zmq.POLLIN)
                        registered, registered_mon = sock, mon
                events = dict(poller.poll(None if wait is None else max(0, int(wait * 1000))))
                if self._waker.fd in events:
                    self._waker.drain()
                with self._lock:
                    if self._closed:
                        break
                    self._drain_monitor()
                    self._drain_socket()
                    if self._leave_why:
                        self._leave(now())
                    self._run_timers(now())
                    self._send_queued()
                    finished, self._finished = self._finished, []
                    if self._waiters:
                        self._cv.notify_all()
                for agg in finished:
                    agg.done(agg.out)
        except Exception:  # pragma: no cover - a bug: fail every job rather than hang
            log.exception("zlane producer I/O thread failed")
        finally:
            with self._lock:
                self._closed = True
                for u in list(self._units):
                    for i in range(u.n):
                        if u.st[i] != _DONE:
                            self._finish(u, i, Timeout(
                                "the producer was closed before the broker answered",
                                sent=u.st[i] not in (_QUEUED, _DONE)), "timed_out")
                for c in self._closes:
                    c.agg.out[0] = ZlaneError(f"the producer was closed before the broker "
                                              f"answered the close of batch {c.batch_id!r}")
                    c.agg.left = 0
                    self._finished.append(c.agg)
                self._closes.clear()
                finished, self._finished = self._finished, []
                self._close_socket()
                self._cv.notify_all()
            for agg in finished:
                agg.done(agg.out)

    def _next_wait(self, t: float) -> float | None:
        if self._leave_why:
            return 0.0
        nxt = [x for x in (self._redial_at, self._dial_at, self._dial_deadline) if x is not None]
        if self._retries:
            nxt.append(self._retries[0][0])
        if self._deadlines:
            nxt.append(self._deadlines[0][0])
        if not nxt:
            return None
        return max(0.0, min(nxt) - t)

    def _finish(self, u: _Unit, i: int, result, stat: str) -> None:
        """Job i of unit u has its result (a job id or an exception)."""
        st = u.st[i]
        if st == _DONE:
            return
        if st in _QUEUED_STATES:
            u.nq -= 1
            self._n_queued -= 1
        u.st[i] = _DONE
        u.open -= 1
        if not u.open:
            self._units.pop(u, None)
        self._n_open -= 1
        self._seqs.pop(u.first + i, None)
        self.stats[stat] += 1
        agg = u.agg
        agg.out[u.base + i] = result
        agg.left -= 1
        if agg.left == 0:
            self._finished.append(agg)

    def _key(self, u: _Unit, i: int) -> str:
        key = u.keys[i] if u.keys is not None else None
        return key or f"{self._instance}-{u.first + i}"

    def _run_timers(self, t: float) -> None:
        if self._dial_at is not None and t >= self._dial_at:
            self._dial(t)
        if self._dial_deadline is not None and t >= self._dial_deadline and not self._leave_why:
            self._dial_deadline = None
            self._leave_for_next("no answer in time")
        if self._redial_at is not None and t >= self._redial_at and self._sock is not None \
                and not self._leave_why:
            # ZeroMQ does not retry a refused handshake; the broker may admit us now
            self._redial_at = None
            if self._brokers.roams:
                self._leave_for_next("its handshake failed")
            else:
                try:
                    self._sock.disconnect(self._endpoint)
                except zmq.ZMQError:
                    pass
                self._sock.connect(self._endpoint)
        while self._retries and self._retries[0][0] <= t:
            _, _, u, i = heapq.heappop(self._retries)
            if u.st[i] == _RETRY:
                u.st[i] = _QUEUED_RETRY
                u.nq += 1
                self._n_queued += 1
                self._queue.append(u)
        while self._deadlines and self._deadlines[0][0] <= t:
            _, _, u = heapq.heappop(self._deadlines)
            if not u.open:
                continue
            for i in range(u.n):
                if u.st[i] != _DONE:
                    self._finish(u, i, self._timeout_error(u, i, t), "timed_out")

    def _timeout_error(self, u: _Unit, i: int, t: float) -> ZlaneError:
        st = u.st[i]
        sent = st not in (_QUEUED, _DONE)
        code, reason, retry_after = (u.why or {}).get(i, (0, "", 0.0))
        if st == _RETRY and code in RETRYABLE:
            return rejection(code, f"still refused after the job's deadline: {reason}",
                             int(retry_after * 1000), self._key(u, i))
        if not self._connected:
            why = (f"broker unreachable at {self._where()} for {t - self._down_since:.1f} s")
            if sent:
                why += " (the job was sent; it may have been accepted)"
            if self._refused:
                why += f": {self._refused}"
        elif st == _INFLIGHT:
            why = f"no reply from broker at {self._endpoint} (the job may have been accepted)"
        else:
            why = f"no credit from broker at {self._endpoint} (queue full?)"
        return Timeout(why, sent=sent, code=code)

    def _send(self, frame: bytes) -> bool:
        try:
            self._sock.send(frame, zmq.DONTWAIT)
            return True
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:
            log.warning("cannot send to %s: %s", self._endpoint, exc)
            return False

    def _part_frame(self, u: _Unit, idx: list[int]) -> bytes:
        """The Submit frame of jobs `idx` of unit u, cut from its frame with protobuf."""
        whole = pb.Envelope()
        whole.ParseFromString(u.frame)
        want = {u.first + i for i in idx}
        env = pb.Envelope(version=PROTOCOL_VERSION)
        env.submit.jobs.extend(s for s in whole.submit.jobs if s.seq in want)
        return env.SerializePartialToString()

    def _send_queued(self) -> None:
        if not self._connected or self._sock is None:
            return
        if self._hello_pending:
            if not self._send(_conn_hello(self._client)):
                return
            self._hello_pending = False
        for c in self._closes:  # a Submit of only close_batches takes no credit
            if not c.sent:
                if not self._send(c.frame):
                    return
                c.sent = True
        queue = self._queue
        stats = self.stats
        while queue:
            room = self._credit_limit - self._sent_since_hello
            if room <= 0:
                return
            u = queue[0]
            if not u.nq:
                queue.popleft()
                continue
            st = u.st
            if u.nq == u.nframe and u.nq <= room:  # the frame as encoded
                if not self._send(u.frame):
                    return  # the jobs stay queued
                again = st.count(_QUEUED_AGAIN)
                retried = st.count(_QUEUED_RETRY)
                stats["resent"] += again
                stats["retried"] += retried
                if u.nframe == u.n:
                    u.st = bytearray(b"\x01") * u.n  # _INFLIGHT: every job is in the frame
                else:
                    for i in range(u.n):
                        if st[i] != _DONE:
                            st[i] = _INFLIGHT
                sent = u.nq
                queue.popleft()
            else:
                idx = [i for i in range(u.n) if st[i] in _QUEUED_STATES][:room]
                if not self._send(self._part_frame(u, idx)):
                    return
                for i in idx:
                    if st[i] == _QUEUED_AGAIN:
                        stats["resent"] += 1
                    elif st[i] == _QUEUED_RETRY:
                        stats["retried"] += 1
                    st[i] = _INFLIGHT
                sent = len(idx)
                if sent == u.nq:
                    queue.popleft()
            u.nq -= sent
            self._n_queued -= sent
            self._sent_since_hello += sent
            stats["specs_sent"] += sent

    # ------------------------------------------------------------ replies

    def _drain_socket(self) -> None:
        for _ in range(1024):
            if self._sock is None or self._leave_why:
                return
            try:
                frame = self._sock.recv(zmq.DONTWAIT, copy=True)
            except zmq.Again:
                return
            if self._sock.rcvmore:
                while self._sock.rcvmore:
                    self._sock.recv()
                log.warning("ignoring a multi-frame message from %s", self._endpoint)
                continue
            try:
                kind, msg = decode(frame)
            except ValueError as exc:
                log.warning("ignoring an undecodable message from %s: %s", self._endpoint, exc)
                continue
            if kind == "accepted":
                self._on_accepted(msg)
            else:
                self._on_message(kind, msg)

    def _on_accepted(self, msg) -> None:
        self._backoff.reset()
        self._dial_deadline = None
        pop = self._seqs.pop
        n = 0
        done = self._finished
        for a in msg.jobs:
            seq = a.seq
            u = pop(seq, None)
            if u is None:
                continue                    # answered before (a resend's second answer)
            i = seq - u.first
            st = u.st
            s = st[i]
            if s == _DONE:
                continue
            if s != _INFLIGHT and s != _RETRY:  # queued again meanwhile: not to be sent
                u.nq -= 1
                self._n_queued -= 1
            st[i] = _DONE
            u.open -= 1
            if not u.open:
                self._units.pop(u, None)
            n += 1
            agg = u.agg
            agg.out[u.base + i] = JobId(a.job_id, a.batch_id) if u.opens and a.batch_id \
                else a.job_id
            agg.left -= 1
            if not agg.left:
                done.append(agg)
        self._n_open -= n
        self.stats["accepted"] += n
        if msg.closed:
            self._on_closed(msg.closed)

    def _on_closed(self, items) -> None:
        """Accepted.closed: the answers to close_batch's Submits."""
        for item in items:
            for c in [c for c in self._closes if c.sent and c.batch_id == item.batch_id]:
                self._closes.remove(c)
                c.agg.out[0] = None if item.ok else BatchError(item.batch_id,
                                                               item.error or "refused")
                c.agg.left = 0
                self._finished.append(c.agg)

    def _on_message(self, kind, msg) -> None:
        serves = kind == "credit" or (
            kind == "rejected" and (not msg.jobs or msg.jobs[0].code != pb.REJECT_UNAVAILABLE))
        if serves:
            self._backoff.reset()
        self._dial_deadline = None
        if kind in ("hello", "submit"):
            if not self._leave_why:
                log.warning("the peer at %s is not a broker (it sent us %s)", self._endpoint, kind)
                self._leave_for_next("not a broker")
        elif kind == "rejected":
            self._on_rejected(msg)
        elif kind == "credit":
            if self._connected and msg.limit > self._credit_limit:
                self._credit_limit = msg.limit
        elif kind == "error":
            self._on_error(msg)
        else:
            log.debug("ignoring %s from broker", kind)

    def _on_rejected(self, msg) -> None:
        if msg.jobs and msg.jobs[0].code == pb.REJECT_UNAVAILABLE and self._brokers.roams:
            self._leave_for_next("its database does not answer")
        t = now()
        for r in msg.jobs:
            u = self._seqs.get(r.seq)
            if u is None:
                continue
            i = r.seq - u.first
            if u.st[i] == _DONE:
                continue
            if r.retry_after_ms:
                self._last_retry_after = r.retry_after_ms / 1000.0
            nonblock_final = u.agg.nonblock and r.code in (pb.REJECT_QUEUE_FULL,
                                                           pb.REJECT_STORE_FULL)
            if r.code not in RETRYABLE or nonblock_final:
                self._finish(u, i, rejection(r.code, r.reason, r.retry_after_ms,
                                             self._key(u, i)), "rejected")
                continue
            if u.why is None:
                u.why = {}
            retry_after = r.retry_after_ms / 1000.0
            u.why[i] = (r.code, r.reason, retry_after)
            if u.st[i] == _INFLIGHT:
                u.st[i] = _RETRY
                self._retry_seq += 1
                heapq.heappush(self._retries, (t + max(_RETRY_MIN, retry_after),
                                               self._retry_seq, u, i))

    def _on_error(self, msg) -> None:
        name = enum_name(pb.ErrorCode, msg.code)
        self._last_error = f"broker at {self._endpoint} reported {name}: {msg.message}"
        if msg.code == pb.ERROR_NOT_LEADER:
            if self._leave_why:
                return
            log.info("%s", self._last_error)
            named = self._brokers.follow(list(msg.leader_endpoints))
            self._leave_why = "it is not the leader" + ("; the leader is elsewhere" if named else "")
            return
        if msg.code == pb.ERROR_UNAVAILABLE:
            log.info("%s", self._last_error)
            self._leave_for_next("its database does not answer")
            return
        log.warning("%s", self._last_error)
        if msg.code == pb.ERROR_NOT_READY and self._connected:
            n = self._new_session()
            log.info("broker at %s has no session for us: Hello again, resending %d jobs",
                     self._endpoint, n)
        if msg.code == pb.ERROR_UNAUTHORIZED:
            self._refused = f"{name}: {msg.message}"

    # ------------------------------------------------------------ connection

    def _new_session(self) -> int:
        """Hello, credit from zero, and every unfinished job not waiting for a retry goes
        back in the send queue in seq order, to be resent under its key."""
        self._hello_pending = True
        self._credit_limit = 0
        self._sent_since_hello = 0
        self._queue.clear()
        for c in self._closes:  # an unanswered close goes again
            c.sent = False
        resend = 0
        for u in sorted(self._units, key=lambda u: u.first):
            st = u.st
            for i in range(u.n):
                if st[i] == _INFLIGHT:
                    st[i] = _QUEUED_AGAIN
                    u.nq += 1
                    resend += 1
            if u.nq:
                self._queue.append(u)
        self._n_queued += resend
        return resend

    def _on_connected(self) -> None:
        self._connected = False
        self._drain_socket()  # replies buffered from the old connection; their credit is void
        self._connected = True
        self._refused = ""
        self._redial_at = None
        self._redial = _REDIAL_MIN
        self.stats["connects"] += 1
        n = self._new_session()
        self._last_error = ""
        if self.stats["connects"] > 1:
            log.info("reconnected to broker at %s; resending %d unanswered jobs", self._endpoint, n)

    def _on_disconnected(self) -> None:
        if not self._connected:
            return
        if self._brokers.roams and not self._leave_why:
            self._leave_for_next("the connection was lost")
        self._connected = False
        self._hello_pending = False
        self._credit_limit = 0
        self._sent_since_hello = 0
        self._down_since = now()
        self.stats["disconnects"] += 1
        self._last_error = f"lost connection to broker at {self._endpoint}"
        log.info("lost connection to broker at %s; %d jobs await a result", self._endpoint,
                 self._n_open)

    def _on_refused(self, event: int, value: int) -> None:
        if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL and self._refused:
            return
        curve = self._curve is not None
        if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            why = (f"the broker refused this client's CURVE key (ZAP status {value}): is its "
                   f"public certificate in the broker's clients directory?")
        elif event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            why = (f"the {'CURVE' if curve else 'plaintext'} handshake failed "
                   f"({os.strerror(value) if value else 'no detail'})"
                   + (": is the server certificate the broker's?" if curve else
                      ": the broker probably requires CURVE (a server and a client certificate)"))
        elif value == _MECHANISM_MISMATCH:
            why = ("the broker does not use CURVE but this client does" if curve else
                   "the broker requires CURVE (a server and a client certificate)")
        else:
            why = f"the {'CURVE' if curve else 'plaintext'} handshake failed (protocol error {value:#x})"
        if why != self._refused:
            log.warning("handshake with %s failed: %s", self._endpoint, why)
        self._refused = why
        self._last_error = f"handshake with {self._endpoint} failed: {why}"
        if event != zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL and self._redial_at is None:
            self._redial_at = now() + self._redial
            self._redial = min(_REDIAL_MAX, self._redial * 2)

    def _drain_monitor(self) -> None:
        while self._monitor is not None:
            try:
                frames = self._monitor.recv_multipart(zmq.DONTWAIT)
            except zmq.Again:
                return
            if len(frames[0]) < 6:
                continue
            event = int.from_bytes(frames[0][:2], "little")
            value = int.from_bytes(frames[0][2:6], "little")
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._on_connected()
            elif event == zmq.EVENT_DISCONNECTED:
                self._on_disconnected()
            elif event in (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                           zmq.EVENT_HANDSHAKE_FAILED_AUTH):
                self._on_refused(event, value)
            elif event == zmq.EVENT_CONNECT_RETRIED:
                if self._brokers.roams and not self._connected and not self._leave_why:
                    self._leave_for_next("nothing answers there")

    def _open_socket(self) -> None:
        s = self._ctx.socket(zmq.DEALER)
        s.linger = 100
        s.sndhwm = _HWM
        s.rcvhwm = _HWM
        s.reconnect_ivl = 100
        s.reconnect_ivl_max = 1000
        s.setsockopt(zmq.HEARTBEAT_IVL, _HEARTBEAT_IVL_MS)
        s.setsockopt(zmq.HEARTBEAT_TIMEOUT, _HEARTBEAT_TIMEOUT_MS)
        s.setsockopt(zmq.HEARTBEAT_TTL, _HEARTBEAT_TIMEOUT_MS)
        # queue nothing for a peer that is not there: what was unsent when a
        # connection died is resent by us after our Hello, never ahead of it
        s.immediate = 1
        if self._curve is not None:
            self._curve.apply(s)
        self._monitor = s.get_monitor_socket(_MONITOR_EVENTS)
        self._sock = s
        s.connect(self._endpoint)

    def _close_socket(self) -> None:
        if self._sock is not None:
            try:
                self._sock.disable_monitor()
            except zmq.ZMQError:
                pass
            self._monitor.close(0)
            self._sock.close(0)
        self._sock = None
        self._monitor = None

    def _dial(self, t: float) -> None:
        self._dial_at = None
        try:
            self._open_socket()
        except zmq.ZMQError as exc:
            log.warning("cannot dial broker at %s: %s", self._endpoint, exc)
            self._close_socket()
            self._leave_for_next("its endpoint is not valid")
            return
        self._dial_deadline = t + _DIAL_TIMEOUT if self._brokers.roams else None

    def _leave_for_next(self, why: str) -> None:
        if self._leave_why:
            return
        self._brokers.next()
        self._leave_why = why

    def _leave(self, t: float) -> None:
        why, self._leave_why = self._leave_why, ""
        if self._connected:
            self._leave_why = why  # no second move from the disconnect
            self._on_disconnected()
            self._leave_why = ""
        self._close_socket()
        self._redial_at = None
        self._dial_deadline = None
        delay = self._backoff.delay()
        log.info("leaving broker at %s (%s); trying %s in %d ms", self._endpoint, why,
                 self._brokers.current, delay * 1000)
        self._endpoint = self._brokers.current
        self._dial_at = t + delay
        self.stats["moves"] += 1


def _conn_hello(client: str) -> bytes:
    return pb.Envelope(version=1, hello=pb.Hello(client=client)).SerializeToString()


class AsyncProducer:
    """The Producer for asyncio applications (FastAPI, aiohttp...): the same options
    and semantics, with coroutines. The I/O happens in the Producer's own thread;
    awaiting never blocks the event loop.

        async with AsyncProducer("tcp://broker:5570") as p:
            job_id = await p.submit("acme", "emails", b'{"to": "a@b.c"}')
    """

    def __init__(self, endpoints="tcp://127.0.0.1:5570", **options):
        self._p = Producer(endpoints, **options)

    @property
    def producer(self) -> Producer:
        """The underlying thread-safe Producer."""
        return self._p

    async def submit(self, tenant: str, lane: str, payload=b"", *, block: bool = True,
                     timeout: float | None = None, **options) -> int:
        """As Producer.submit; waiting for credit and for the answer never blocks the loop."""
        if not block:
            fut = self._p.submit_future(tenant, lane, payload, block=False, timeout=timeout,
                                        **options)
            return await asyncio.wrap_future(fut)
        spec = dict(options, tenant=tenant, lane=lane, payload=payload)
        try:  # credit now: taken without leaving the loop
            fut = self._p._submit_job_future(spec, wait=False, timeout=timeout)
        except QueueFull:  # wait for credit in a thread
            loop = asyncio.get_running_loop()
            fut = await loop.run_in_executor(None, functools.partial(
                self._p._submit_job_future, spec, wait=True, timeout=timeout))
        return await asyncio.wrap_future(fut)

    async def open_batch(self, tenant: str, lane: str, payload=b"", *, batch_id: str = "",
                         no_callback: bool = False, close: bool = False, **options) -> str:
        """As Producer.open_batch: the batch's id once the opening job was Accepted."""
        job_id = await self.submit(tenant, lane, payload, open_batch=batch_id or True,
                                   no_callback=no_callback, close=close, **options)
        return job_id.batch_id

    async def close_batch(self, batch_id: str, *, timeout: float | None = None) -> None:
        """As Producer.close_batch, run off the event loop."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, functools.partial(self._p.close_batch, batch_id,
                                                           timeout=timeout))

    async def submit_many(self, jobs: Sequence, **options) -> list:
        """As Producer.submit_many, run off the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(self._p.submit_many,
                                                                  list(jobs), **options))

    async def wait_connected(self, timeout: float = 10.0) -> bool:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._p.wait_connected, timeout)

    async def close(self, timeout: float | None = 0.0) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._p.close, timeout)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close(None if exc[0] is None else 0.0)
