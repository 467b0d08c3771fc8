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
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import heapq
import logging
import os
import secrets
import threading
from collections import deque
from typing import Any, Iterable, Mapping, Sequence

import zmq

from . import _conn
from ._conn import Backoff, EndpointList, Waker, now
from ._proto import check_text, decode, enum_name, parse_endpoints, pb
from .curve import as_curve
from .errors import QueueFull, RETRYABLE, Timeout, ZlaneError, rejection

log = logging.getLogger("zlane.producer")

_QUEUED, _INFLIGHT, _RETRY, _DONE = range(4)

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


class _Job:
    __slots__ = ("seq", "entry", "key", "auto_key", "size", "state", "deadline", "sends",
                 "code", "reason", "retry_after", "nonblock", "done", "resend")

    def __init__(self, seq, entry, key, auto_key, size, deadline, nonblock, done):
        self.seq = seq
        self.entry = entry          # the spec as a Submit.jobs entry, encoded once
        self.key = key
        self.auto_key = auto_key
        self.size = size
        self.state = _QUEUED
        self.deadline = deadline
        self.sends = 0
        self.code = 0
        self.reason = ""
        self.retry_after = 0.0
        self.nonblock = nonblock
        self.done = done            # callable(job_id | None, exception | None)
        self.resend = False


def _ms(seconds, what) -> int:
    if seconds is None:
        return 0
    ms = int(round(float(seconds) * 1000))
    if ms < 0 or ms > 0xFFFFFFFF:
        raise ValueError(f"{what} must be between 0 and {0xFFFFFFFF // 1000} seconds")
    return ms


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
        self._jobs: dict[int, _Job] = {}
        self._next_seq = 1
        self._n_queued = 0
        self._queue: deque[int] = deque()
        self._retries: list[tuple[float, int]] = []
        self._deadlines: list[tuple[float, int]] = []
        self._finished: list[tuple[_Job, Any, Any]] = []
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
               depends_on=None, block: bool = True, timeout: float | None = None) -> int:
        """Submit one job and return its job id once the broker Accepted it (durably).

        `payload`: bytes (str is UTF-8 encoded). `key`: an idempotency key (a key seen
        within the broker's dedup window returns the original job id); without one a
        key is generated for the library's own resends. `delay`, `lease`, `max_run`
        in seconds; `max_attempts` 0/None = the lane's default; `headers` a dict or
        pairs of str; `depends_on` job ids of parents: the job runs once they are all
        acked, with their results (Job.parent_results).

        `block`: wait for credit (True), or raise QueueFull at once when there is
        none or the broker answers QUEUE_FULL / STORE_FULL (False). `timeout`: how
        long (s) to keep trying, the job's deadline (default: the producer's).
        Raises a Rejected subclass (Invalid, PayloadTooLarge, UnknownLane, QueueFull,
        StoreFull, Unauthorized, ...) or Timeout."""
        fut = self.submit_future(tenant, lane, payload, key=key, delay=delay,
                                 max_attempts=max_attempts, headers=headers, lease=lease,
                                 max_run=max_run, depends_on=depends_on, block=block,
                                 timeout=timeout)
        return fut.result()

    def submit_future(self, tenant: str, lane: str, payload=b"", *, block: bool = True,
                      timeout: float | None = None, **options) -> concurrent.futures.Future:
        """Like submit, but return at once (once the job is taken: after waiting for
        credit when block=True) with a concurrent.futures.Future of the job id."""
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def done(job_id, exc):
            if exc is None:
                fut.set_result(job_id)
            else:
                fut.set_exception(exc)
        spec = dict(options, tenant=tenant, lane=lane, payload=payload)
        self._admit([spec], [done], wait=block, nonblock=not block, timeout=timeout)
        return fut

    def _submit_job_future(self, spec: dict, *, wait: bool, timeout) -> concurrent.futures.Future:
        """A blocking-semantics job (rejections retried), taken only if credit allows
        now when not `wait` (else QueueFull)."""
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def done(job_id, exc):
            if exc is None:
                fut.set_result(job_id)
            else:
                fut.set_exception(exc)
        self._admit([spec], [done], wait=wait, nonblock=False, timeout=timeout)
        return fut

    def submit_many(self, jobs: Iterable, *, block: bool = True, timeout: float | None = None,
                    return_exceptions: bool = False) -> list:
        """Submit many jobs, pipelined (many specs per Submit frame, many frames in
        flight within credit), and return their job ids in order.

        Each job is a dict of submit's arguments ({"tenant", "lane", "payload",
        "key", "headers", ...}) or a tuple (tenant, lane, payload). Jobs are taken as
        credit allows (block=True waits for it). The first failure is raised once every
        job has its result, unless `return_exceptions`, which puts each job's
        exception in its place in the list."""
        specs = [self._as_spec(j) for j in jobs]
        results: list = [None] * len(specs)
        remaining = [len(specs)]
        all_done = threading.Event()
        if not specs:
            return []

        def make_done(i):
            def done(job_id, exc):
                results[i] = exc if exc is not None else job_id
                with lock:
                    remaining[0] -= 1
                    last = remaining[0] == 0
                if last:
                    all_done.set()
            return done
        lock = threading.Lock()
        dones = [make_done(i) for i in range(len(specs))]
        taken = 0
        try:
            taken = self._admit(specs, dones, wait=block, nonblock=not block, timeout=timeout,
                                partial=True)
        finally:
            if taken < len(specs):  # the rest is refused (no credit) or failed validation
                for i in range(taken, len(specs)):
                    if results[i] is None:
                        dones[i](None, self._no_credit_error(not block))
        all_done.wait()
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
        with self._lock:
            return len(self._jobs)

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
                while self._jobs:
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

    @staticmethod
    def _as_spec(job) -> dict:
        if isinstance(job, Mapping):
            return dict(job)
        if isinstance(job, (tuple, list)) and 2 <= len(job) <= 3:
            return dict(zip(("tenant", "lane", "payload"), job))
        raise TypeError("a job is a dict of submit's arguments or (tenant, lane, payload)")

    def _encode(self, spec: dict, seq: int):
        spec = dict(spec)
        tenant = spec.pop("tenant", None)
        lane = spec.pop("lane", None)
        if not isinstance(tenant, str) or not tenant:
            raise ValueError("a job needs a tenant (a non-empty str)")
        if not isinstance(lane, str) or not lane:
            raise ValueError("a job needs a lane (a non-empty str)")
        payload = _payload(spec.pop("payload", b""))
        key = spec.pop("key", None)
        if key is None:
            key = spec.pop("idempotency_key", None)
        if key is not None and not isinstance(key, str):
            raise TypeError("key must be a str")
        auto = not key
        if auto:
            key = f"{self._instance}-{seq}"
        msg = pb.JobSpec(seq=seq, tenant=tenant, lane=lane, payload=payload,
                         idempotency_key=key, generated_key=auto,
                         delay_ms=_ms(spec.pop("delay", None), "delay"),
                         lease_ms=_ms(spec.pop("lease", None), "lease"),
                         max_run_ms=_ms(spec.pop("max_run", None), "max_run"))
        attempts = spec.pop("max_attempts", None)
        if attempts:
            if not 0 < int(attempts) <= 65535:
                raise ValueError("max_attempts must be between 1 and 65535")
            msg.max_attempts = int(attempts)
        for k, v in _headers(spec.pop("headers", None)):
            msg.headers.add(key=k, value=v)
        for parent in spec.pop("depends_on", None) or ():
            if not isinstance(parent, int) or not 0 < parent < 1 << 64:
                raise ValueError("depends_on holds job ids (ints above 0)")
            msg.depends_on.append(parent)
        if spec:
            raise TypeError(f"unknown job option(s): {', '.join(sorted(spec))}")
        raw = msg.SerializeToString()
        return _conn.spec_entry(raw), key, auto, len(raw)

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

    def _admit(self, specs, dones, *, wait, nonblock, timeout, partial=False) -> int:
        """Take jobs in order as credit allows, waiting for it if `wait` (until the
        deadline). Returns how many were taken (a spec that fails validation counts:
        its done gets the error when `partial`, else it is raised). Raises for the
        first job when none could be taken (QueueFull, Timeout)."""
        deadline = now() + (self._deadline if timeout is None else float(timeout))
        taken = 0
        failed = []
        with self._cv:
            while taken < len(specs):
                if self._closed:
                    raise ZlaneError("the producer is closed")
                room = self._available()
                if room <= 0:
                    self._waker.wake()  # the I/O thread sends what was taken meanwhile
                    left = deadline - now()
                    if not wait or left <= 0:
                        if taken:
                            break
                        raise self._no_credit_error(not wait)
                    self._waiters += 1
                    try:
                        self._cv.wait(left)
                    finally:
                        self._waiters -= 1
                    continue
                while taken < len(specs) and room > 0:
                    seq = self._next_seq
                    try:
                        entry, key, auto, size = self._encode(specs[taken], seq)
                    except Exception as exc:
                        if not partial:
                            raise
                        failed.append((taken, exc))
                        taken += 1
                        continue
                    self._next_seq += 1
                    job = _Job(seq, entry, key, auto, size, deadline, nonblock, dones[taken])
                    self._jobs[seq] = job
                    self._n_queued += 1
                    self._queue.append(seq)
                    heapq.heappush(self._deadlines, (deadline, seq))
                    self.stats["submitted"] += 1
                    taken += 1
                    room -= 1
        self._waker.wake()
        for i, exc in failed:
            dones[i](None, exc)
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
                for job, job_id, exc in finished:
                    job.done(job_id, exc)
        except Exception:  # pragma: no cover - a bug: fail every job rather than hang
            log.exception("zlane producer I/O thread failed")
        finally:
            with self._lock:
                self._closed = True
                for job in list(self._jobs.values()):
                    self._finish(job, None, Timeout("the producer was closed before the "
                                                    "broker answered", sent=job.sends > 0))
                finished, self._finished = self._finished, []
                self._close_socket()
                self._cv.notify_all()
            for job, job_id, exc in finished:
                job.done(job_id, exc)

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

    def _set_state(self, job: _Job, state: int) -> None:
        if job.state == _QUEUED:
            self._n_queued -= 1
        if state == _QUEUED:
            self._n_queued += 1
        job.state = state

    def _finish(self, job: _Job, job_id, exc) -> None:
        if job.state == _DONE:
            return
        self._set_state(job, _DONE)
        self._jobs.pop(job.seq, None)
        if exc is None:
            self.stats["accepted"] += 1
        elif isinstance(exc, Timeout):
            self.stats["timed_out"] += 1
        else:
            self.stats["rejected"] += 1
        self._finished.append((job, job_id, exc))

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
            _, seq = heapq.heappop(self._retries)
            job = self._jobs.get(seq)
            if job is not None and job.state == _RETRY:
                self._set_state(job, _QUEUED)
                self._queue.append(seq)
        while self._deadlines and self._deadlines[0][0] <= t:
            _, seq = heapq.heappop(self._deadlines)
            job = self._jobs.get(seq)
            if job is None:
                continue
            self._finish(job, None, self._timeout_error(job, t))

    def _timeout_error(self, job: _Job, t: float) -> ZlaneError:
        if job.state == _RETRY and job.code in RETRYABLE:
            exc = rejection(job.code, f"still refused after the job's deadline: {job.reason}",
                            int(job.retry_after * 1000), job.key)
            return exc
        if not self._connected:
            why = (f"broker unreachable at {self._where()} for {t - self._down_since:.1f} s")
            if job.sends:
                why += " (the job was sent; it may have been accepted)"
            if self._refused:
                why += f": {self._refused}"
        elif job.state == _INFLIGHT:
            why = f"no reply from broker at {self._endpoint} (the job may have been accepted)"
        else:
            why = f"no credit from broker at {self._endpoint} (queue full?)"
        return Timeout(why, sent=job.sends > 0, code=job.code)

    def _send(self, frame: bytes) -> bool:
        try:
            self._sock.send(frame, zmq.DONTWAIT)
            return True
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:
            log.warning("cannot send to %s: %s", self._endpoint, exc)
            return False

    def _send_queued(self) -> None:
        if not self._connected or self._sock is None:
            return
        if self._hello_pending:
            if not self._send(_conn_hello(self._client)):
                return
            self._hello_pending = False
        while self._queue:
            room = self._credit_limit - self._sent_since_hello
            if room <= 0:
                return
            limit = min(room, self._max_batch)
            batch: list[_Job] = []
            size = 0
            scanned = 0
            for seq in self._queue:
                if len(batch) >= limit:
                    break
                job = self._jobs.get(seq)
                if job is None or job.state != _QUEUED:
                    scanned += 1
                    continue
                if batch and size + job.size + 64 > _BATCH_MAX_BYTES:
                    break
                size += job.size + 64
                batch.append(job)
                scanned += 1
            if batch:
                if not self._send(_conn.submit_frame([j.entry for j in batch])):
                    return  # the jobs stay queued
                for job in batch:
                    if job.resend:
                        self.stats["resent"] += 1
                        job.resend = False
                    elif job.sends:
                        self.stats["retried"] += 1
                    job.sends += 1
                    self._set_state(job, _INFLIGHT)
                self._sent_since_hello += len(batch)
                self.stats["specs_sent"] += len(batch)
            for _ in range(scanned):
                self._queue.popleft()
            if not batch:
                return

    # ------------------------------------------------------------ replies

    def _drain_socket(self) -> None:
        for _ in range(1024):
            if self._sock is None or self._leave_why:
                return
            try:
                frames = self._sock.recv_multipart(zmq.DONTWAIT, copy=True)
            except zmq.Again:
                return
            if len(frames) != 1:
                log.warning("ignoring a multi-frame message from %s", self._endpoint)
                continue
            try:
                kind, msg = decode(frames[0])
            except ValueError as exc:
                log.warning("ignoring an undecodable message from %s: %s", self._endpoint, exc)
                continue
            self._on_message(kind, msg)

    def _on_message(self, kind, msg) -> None:
        serves = kind in ("accepted", "credit") or (
            kind == "rejected" and (not msg.jobs or msg.jobs[0].code != pb.REJECT_UNAVAILABLE))
        if serves:
            self._backoff.reset()
        self._dial_deadline = None
        if kind in ("hello", "submit"):
            if not self._leave_why:
                log.warning("the peer at %s is not a broker (it sent us %s)", self._endpoint, kind)
                self._leave_for_next("not a broker")
        elif kind == "accepted":
            for a in msg.jobs:
                job = self._jobs.get(a.seq)
                if job is not None:
                    self._finish(job, a.job_id, None)
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
            job = self._jobs.get(r.seq)
            if job is None:
                continue
            if r.retry_after_ms:
                self._last_retry_after = r.retry_after_ms / 1000.0
            nonblock_final = job.nonblock and r.code in (pb.REJECT_QUEUE_FULL,
                                                         pb.REJECT_STORE_FULL)
            if r.code not in RETRYABLE or nonblock_final:
                self._finish(job, None, rejection(r.code, r.reason, r.retry_after_ms, job.key))
                continue
            job.code, job.reason = r.code, r.reason
            job.retry_after = r.retry_after_ms / 1000.0
            if job.state == _INFLIGHT:
                self._set_state(job, _RETRY)
                heapq.heappush(self._retries, (t + max(_RETRY_MIN, job.retry_after), r.seq))

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
        resend = 0
        for seq in sorted(self._jobs):
            job = self._jobs[seq]
            if job.state == _INFLIGHT:
                self._set_state(job, _QUEUED)
                job.resend = True
                resend += 1
            if job.state == _QUEUED:
                self._queue.append(seq)
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
                 len(self._jobs))

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
