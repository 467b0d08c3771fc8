"""Run jobs from a zlane broker: Worker, and the zlane-py-worker runner.

The thread that calls Worker.run owns the DEALER to the broker's backend and
every piece of worker state; handlers run in a thread pool (mode="thread") or
as asyncio tasks on an event loop (mode="asyncio"). It follows the backend
protocol as the C library does (worker/zlane_worker.c):

- Ready{name, lanes, capacity, instance, held} first, and again after every
  reconnect or Error{NOT_READY}; `instance` is random, chosen once per Worker,
  so that the broker hands a reconnected worker the leases of its old
  connection; `held` lists every lease the worker knows of (held jobs,
  unconfirmed settlements), so that the old connection's others, Dispatches
  lost with it, are ready again at once.
- Each dispatched job is held until its handler returns; its lease is
  extended at half-life while it waits or runs (Extend), and the job is
  cancelled (Job.cancelled) when the broker refuses an extension or the
  connection is lost.
- A handler that returns acks the job; one that raises Permanent nacks it
  PERMANENT (dead-lettered at once), Throttled(retry_after) nacks it THROTTLED,
  NotYet(retry_after) nacks it NOT_YET (retried without spending an attempt),
  anything else TRANSIENT with the traceback as the error text. run_us, the
  handler's run time (at least 1), goes with each.
- Settlements stay pending until Settled and are resent after a reconnect
  under the same lease token; the broker's fencing decides whether they count.
- Heartbeats both ways: a Heartbeat when nothing was sent for an interval
  (stating it: Heartbeat.interval_ms, Ready.heartbeat_ms), and a broker silent
  for liveness x the longer of this worker's heartbeat and the one the broker
  states is left: reconnect (the next broker of the list) after a full-jitter
  backoff. NOT_LEADER moves to the leader named.
- stop() (SIGTERM/SIGINT in run()) drains: Ready with capacity 0, unstarted jobs
  handed back, running ones finish (up to drain_timeout, then cancelled),
  settlements confirmed, and run() returns.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import logging
import os
import queue
import random
import signal
import socket
import sys
import threading
import time
import traceback
from collections import deque
from typing import Callable

import zmq

from ._conn import Backoff, EndpointList, Waker, now
from ._proto import check_text, clean_text, decode, enum_name, parse_endpoints, pb
from .curve import as_curve
from .errors import NotYet, Permanent, Throttled
from .records import to_record

log = logging.getLogger("zlane.worker")

LIVE, LEASE_LOST, DISCONNECTED, MAX_RUN, SHUTDOWN, BROKER_CANCELLED = (
    "", "lease lost", "broker connection lost", "max run time exceeded", "worker shutting down",
    "cancelled by the broker")

_ACK, _TRANSIENT, _THROTTLED, _PERMANENT = "ack", pb.FAILURE_TRANSIENT, pb.FAILURE_THROTTLED, \
    pb.FAILURE_PERMANENT
_NOT_YET = pb.FAILURE_NOT_YET
_FENCED = (pb.ERROR_STALE_LEASE, pb.ERROR_UNKNOWN_JOB, pb.ERROR_NOT_HOLDER, pb.ERROR_CANCELLED)
_CANCEL_LOCK = threading.Lock()  # a job's cancellation and its lazily made Event
_EXTEND, _MAX_RUN = 0, 1         # the kinds of timer of a held job


class Job:
    """A job as a handler sees it: id, lease, attempt (1 for the first delivery),
    tenant, lane, payload (bytes), headers (dict), idempotency_key (the producer's,
    or "job-<id>"), lease_ms, max_run_ms (0 = none), max_attempts, enqueued_at_ms
    (broker wall clock), parent_results (a list of (job_id, result bytes), one per
    parent of a job in a workflow, in the order it named them), batch (a batch's
    callback job: the BatchInfo record of the batch as it settled, with its counts
    and failed job ids; None for any other job), ordering_key (its
    JobSpec.ordering_key, "" none), checkpoint (the last progress checkpoint
    an earlier attempt saved, bytes, or None; save one with save_checkpoint).
    `cancelled` turns
    true once the lease is lost (or presumed lost) or the job ran out of time: a
    long handler may check it and return early. A handler that returns bytes or
    str gives the job that result (str as UTF-8): sent with the ack, kept by the
    broker and handed to the job's children; any other return value gives none."""

    __slots__ = ("id", "lease", "attempt", "tenant", "lane", "payload", "headers",
                 "idempotency_key", "lease_ms", "max_run_ms", "max_attempts", "enqueued_at_ms",
                 "parent_results", "batch", "ordering_key", "checkpoint", "_worker", "_event", "_reason", "_next_extend", "_max_run_at",
                 "_received", "_held")

    def __init__(self, msg=None, **fields):
        self._event = None          # made by the first wait_cancelled
        self._reason = LIVE
        self._next_extend = None
        self._max_run_at = None
        self._received = 0.0
        self._held = False          # in the worker's held set (its timers live)
        self._worker = None         # the Worker holding it (save_checkpoint)
        if msg is not None:         # a DispatchJob: read once, straight from the message
            self.id = msg.job_id
            self.lease = msg.lease
            self.attempt = msg.attempt
            self.tenant = msg.tenant
            self.lane = msg.lane
            self.payload = msg.payload
            self.headers = {h.key: h.value for h in msg.headers} if len(msg.headers) else {}
            self.idempotency_key = msg.idempotency_key
            self.lease_ms = msg.lease_ms
            self.max_run_ms = msg.max_run_ms
            self.max_attempts = msg.max_attempts
            self.enqueued_at_ms = msg.enqueued_at_ms
            self.parent_results = ([(int(r.job_id), bytes(r.result)) for r in msg.parent_results]
                                   if len(msg.parent_results) else [])
            self.batch = to_record(msg.batch) if msg.HasField("batch") else None
            self.ordering_key = msg.ordering_key
            self.checkpoint = bytes(msg.checkpoint) if msg.checkpoint else None
            return
        for name in ("id", "lease", "attempt", "lease_ms", "max_run_ms", "max_attempts",
                     "enqueued_at_ms"):
            setattr(self, name, int(fields.get(name, 0) or 0))
        self.tenant = fields.get("tenant", "")
        self.lane = fields.get("lane", "")
        self.payload = bytes(fields.get("payload", b""))
        self.headers = dict(fields.get("headers") or {})
        self.idempotency_key = fields.get("idempotency_key", "")
        self.parent_results = list(fields.get("parent_results") or [])
        self.batch = fields.get("batch")
        self.ordering_key = fields.get("ordering_key", "")
        self.checkpoint = fields.get("checkpoint")

    def save_checkpoint(self, data) -> None:
        """Save this job's progress: `data` (bytes, or str as UTF-8; at most the
        broker's max_checkpoint, 64 KiB by default) goes to the broker in an Extend at
        once (before the job's Ack or Nack), is stored with the job, and a later attempt
        of it gets it as job.checkpoint if this one does not finish. A later call
        replaces one not sent yet. Thread-safe. Raises ValueError for empty data and
        RuntimeError for a job no worker holds."""
        if isinstance(data, str):
            data = data.encode()
        data = bytes(data)
        if not data:
            raise ValueError("a checkpoint is at least one byte")
        worker = self._worker
        if worker is None:
            raise RuntimeError("this job is not held by a worker")
        worker._save_checkpoint(self, data)

    @property
    def cancelled(self) -> bool:
        """True once the job is cancelled (see cancel_reason)."""
        return self._reason != LIVE

    @property
    def cancel_reason(self) -> str:
        """Why the job was cancelled ("lease lost", ...), or "" while it is not."""
        return self._reason

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block up to `timeout` seconds until the job is cancelled; True if it is."""
        with _CANCEL_LOCK:
            if self._reason != LIVE:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def cancel(self, reason: str) -> bool:
        """Cancel the job (the first reason sticks). Returns True if this call did."""
        with _CANCEL_LOCK:
            if self._reason != LIVE:
                return False
            self._reason = reason
            if self._event is not None:
                self._event.set()
            return True

    def text(self, encoding: str = "utf-8") -> str:
        """The payload decoded as text."""
        return self.payload.decode(encoding)

    def __repr__(self):
        return (f"Job(id={self.id}, attempt={self.attempt}, tenant={self.tenant!r}, "
                f"lane={self.lane!r}, {len(self.payload)} bytes)")


class _Settle:
    __slots__ = ("job_id", "lease", "attempt", "ack", "cls", "error", "retry_after_ms", "run_us",
                 "counted", "result")

    def __init__(self, job, ack, cls=0, error="", retry_after_ms=0, run_us=0, result=b""):
        self.result = result
        self.job_id, self.lease, self.attempt = job.id, job.lease, job.attempt
        self.ack, self.cls = ack, cls
        self.error = clean_text(error) if not ack else ""
        self.retry_after_ms = retry_after_ms
        self.run_us = run_us
        self.counted = False


_READY_HELD_MAX = 100000  # leases a Ready lists at most
_HEARTBEAT_STATED_MAX_MS = 60000  # a longer interval stated by the broker counts as this


def _env(**body) -> bytes:
    return pb.Envelope(version=1, **body).SerializePartialToString()


def _ack_frame(acks) -> bytes:
    """One Ack frame of every settlement in `acks`, built on its Envelope."""
    env = pb.Envelope(version=1)
    add = env.ack.items.add
    for p in acks:
        if p.result:
            add(job_id=p.job_id, lease=p.lease, run_us=p.run_us, result=p.result)
        else:
            add(job_id=p.job_id, lease=p.lease, run_us=p.run_us)
    return env.SerializePartialToString()


class Worker:
    """Run handlers for jobs of the lanes they are registered for.

        worker = Worker("tcp://broker:5571", concurrency=8)

        @worker.handler("emails")
        def send(job):
            ...                # return: ack; raise zlane.Permanent / zlane.Throttled(5) / any

        worker.run()           # until SIGTERM / SIGINT or worker.stop()

    `endpoints`: the broker's backend, or a list of brokers sharing a store.
    `name`: shown in the broker's stats and in dead letters (default host-pid).
    `concurrency`: handlers running at once; `prefetch`: jobs held beyond that.
    `mode`: "thread" (a thread pool) or "asyncio" (handlers may be coroutines, run
    as tasks on one event loop). `heartbeat` (s) and `liveness`: the broker is
    left after liveness x the longer of `heartbeat` and the broker's own.
    `drain_timeout`: after stop(), how long running jobs may finish before they are
    cancelled. `curve`: a zlane.Curve or (broker's public certificate, this
    worker's secret certificate)."""

    def __init__(self, endpoints="tcp://127.0.0.1:5571", *, name: str | None = None,
                 concurrency: int = 1, mode: str = "thread", curve=None, prefetch: int = 0,
                 heartbeat: float = 1.0, liveness: int = 3, drain_timeout: float = 30.0,
                 reconnect_min: float = 0.1, reconnect_max: float = 5.0, extend: bool = True):
        self._brokers = EndpointList(parse_endpoints(endpoints))
        if mode not in ("thread", "asyncio"):
            raise ValueError("mode must be 'thread' or 'asyncio'")
        if concurrency < 1 or prefetch < 0:
            raise ValueError("concurrency must be at least 1 and prefetch at least 0")
        if heartbeat <= 0 or liveness < 1:
            raise ValueError("heartbeat and liveness must be positive")
        if not 0 < reconnect_min <= reconnect_max:
            raise ValueError("reconnect backoff must satisfy 0 < min <= max")
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        check_text("name", self.name, limit=128)
        self.concurrency = int(concurrency)
        self.prefetch = int(prefetch)
        self.mode = mode
        self._curve = as_curve(curve)
        self._heartbeat = float(heartbeat)
        self._heartbeat_ms = max(1, min(int(round(self._heartbeat * 1000)), 0xFFFFFFFF))
        self._broker_heartbeat = 0.0
        self._liveness = int(liveness)
        self._drain_timeout = float(drain_timeout)
        self._extend = extend
        self._backoff = Backoff(reconnect_min, reconnect_max)
        self._reconnect_max = reconnect_max
        self._handlers: dict[str, Callable] = {}
        self._instance = 0
        while not self._instance:
            self._instance = random.SystemRandom().getrandbits(64)
        self._waker = Waker()
        self._ckpt_lock = threading.Lock()
        self._ckpts: dict = {}  # (job id, lease) -> (job, bytes): saved, not yet sent
        self._stop_requests = 0
        self._started = False
        self._done: deque = deque()  # (job, settle or None: not run) from handlers
        self._wake_owed = False      # a handler woke the loop for results not yet taken
        self.stats = {"received": 0, "acked": 0, "nacked": 0, "settled": 0, "refused": 0,
                      "extends_sent": 0, "lease_lost": 0, "reconnects": 0, "cancelled": 0}

    # ------------------------------------------------------------ handlers

    def handler(self, *lanes: str):
        """Decorator: register the function for these lanes. It takes a Job; in
        asyncio mode it may be a coroutine function."""
        if not lanes:
            raise ValueError("handler() needs at least one lane")

        def register(fn):
            for lane in lanes:
                self.add_handler(lane, fn)
            return fn
        return register

    def add_handler(self, lane: str, fn: Callable) -> None:
        """Register `fn` as the handler of `lane` (replacing any)."""
        check_text("lane", lane, limit=128)
        if self._started:
            raise RuntimeError("handlers must be registered before run()")
        self._handlers[lane] = fn

    @property
    def lanes(self) -> list[str]:
        return list(self._handlers)

    def stop(self) -> None:
        """Ask the running worker to drain and stop; safe from any thread and from a
        signal handler. A second call cancels running jobs at once."""
        self._stop_requests += 1
        self._waker.wake()

    # ------------------------------------------------------------ running

    def run(self, *, install_signals: bool = True) -> None:
        """Connect and serve until stop() (and, from the main thread with
        `install_signals`, SIGTERM or SIGINT), then drain and return."""
        loop_thread = None
        loop = None
        if self.mode == "asyncio":
            loop = asyncio.new_event_loop()
            loop_thread = threading.Thread(target=loop.run_forever, name="zlane-worker-loop",
                                           daemon=True)
            loop_thread.start()
        old = {}
        if install_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                old[sig] = signal.signal(sig, lambda *_: self.stop())
        try:
            self._serve(loop)
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)
            if loop is not None:
                loop.call_soon_threadsafe(loop.stop)
                loop_thread.join()
                loop.close()

    async def run_async(self) -> None:
        """Serve from inside a running event loop (mode "asyncio"): handlers run as
        tasks on this loop, the socket in a thread. Returns after stop() and the drain."""
        if self.mode != "asyncio":
            raise RuntimeError("run_async needs mode='asyncio'")
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._serve, loop)

    def _serve(self, loop) -> None:
        if self._started:
            raise RuntimeError("a Worker runs once")
        if not self._handlers:
            raise ValueError("register a handler for at least one lane first")
        self._started = True
        self._loop = loop
        # thread mode: `concurrency` handler threads take jobs from one queue in
        # dispatch order; the loop hands them every job it may start at once
        self._jobq: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = []
        if loop is None:
            for i in range(self.concurrency):
                th = threading.Thread(target=self._handler_thread, name=f"zlane-handler-{i}",
                                      daemon=True)
                th.start()
                self._threads.append(th)
        # one lease-extension (and max-run) schedule: per (kind, interval) a deque
        # of (at, job) in time order, as every job of it gets the same interval
        self._timers: dict[tuple[int, int], deque] = {}
        self._ctx = zmq.Context()
        self._dealer = None
        self._held: dict[tuple[int, int], Job] = {}
        self._backlog: deque[Job] = deque()
        self._running = 0
        self._unsent: dict[_Settle, None] = {}  # ordered sets: to send / sent, unconfirmed
        self._sent: dict[_Settle, None] = {}
        self._pending: dict[tuple[int, int], list[_Settle]] = {}
        self._extends: list = []
        self._need_ready = False
        self._leave = None  # None, "not_leader", "not_broker", "unavailable"
        self._draining = False
        self._drain_cancelled = False
        self._drain_deadline = 0.0
        self._linger_deadline = None
        self._last_heard = self._last_sent = self._reconnect_at = now()
        poller = zmq.Poller()
        poller.register(self._waker.fd, zmq.POLLIN)
        try:
            t = now()
            self._connect(t)
            log.info("%s (instance %016x) serving lanes %s with %d handlers (%s), capacity %d",
                     self.name, self._instance, ",".join(self._handlers), self.concurrency,
                     self.mode, self.concurrency + self.prefetch)
            registered = None
            while True:
                self._tick(t)
                self._start_jobs()
                self._flush(t)
                if self._finished(t):
                    break
                if registered is not self._dealer:
                    if registered is not None:
                        try:
                            poller.unregister(registered)
                        except KeyError:
                            pass
                    registered = self._dealer
                    if registered is not None:
                        poller.register(registered, zmq.POLLIN)
                timeout = self._next_timeout(t)
                events = dict(poller.poll(int(timeout * 1000) + (1 if timeout > 0 else 0)))
                t = now()
                if self._waker.fd in events:
                    self._waker.drain()
                if self._stop_requests and not self._draining:
                    self._begin_drain(t)
                self._take_results()
                if self._dealer is not None and events.get(self._dealer):
                    self._recv_all(t)
        finally:
            for job in self._held.values():
                job.cancel(SHUTDOWN)
            self._unqueue()
            for _ in self._threads:
                self._jobq.put(None)
            for th in self._threads:
                th.join()
            if self._dealer is not None:
                self._dealer.close(0)
                self._dealer = None
            self._ctx.term()
            self._waker.close()
            log.info("%s stopped", self.name)

    # ------------------------------------------------------------ connection

    def _send(self, frame: bytes, t: float) -> bool:
        if self._dealer is None:
            return False
        try:
            self._dealer.send(frame, zmq.DONTWAIT)
        except zmq.ZMQError as exc:
            log.warning("send failed: %s", exc)
            return False
        self._last_sent = t
        return True

    def _connect(self, t: float) -> bool:
        endpoint = self._brokers.current
        d = self._ctx.socket(zmq.DEALER)
        d.linger = 0
        if self._curve is not None:
            self._curve.apply(d)
        try:
            d.connect(endpoint)
        except zmq.ZMQError as exc:
            log.error("cannot connect to %s: %s", endpoint, exc)
            d.close(0)
            return False
        log.info("%s connecting to %s", self.name, endpoint)
        self._dealer = d
        self._need_ready = True
        self._last_heard = self._last_sent = t
        self._broker_heartbeat = 0.0  # the pace this connection's broker states
        self._mark_unsent()
        return True

    def _disconnect(self, t: float) -> None:
        was = self._brokers.current
        why, self._leave = self._leave, None
        if why != "not_leader":
            self._brokers.next()
        self._dealer.close(0)
        self._dealer = None
        self._extends = []
        self.stats["reconnects"] += 1
        for job in self._held.values():
            if job.cancel(DISCONNECTED):
                job._next_extend = job._max_run_at = None
        delay = self._backoff.delay()
        self._reconnect_at = t + delay
        nxt = self._brokers.current
        if why == "not_leader":
            log.info("broker %s is not the leader; connecting to %s in %d ms", was, nxt,
                     delay * 1000)
        elif why == "unavailable":
            log.warning("broker %s cannot reach its database; trying %s in %d ms", was, nxt,
                        delay * 1000)
        else:
            log.warning("broker %s silent for %.1f s; %s %s in %d ms", was,
                        self._silence(),
                        "trying" if nxt != was else "reconnecting to", nxt, delay * 1000)

    def _mark_unsent(self) -> None:
        if self._sent:
            self._sent.update(self._unsent)
            self._unsent, self._sent = self._sent, {}

    # ------------------------------------------------------------ broker messages

    def _recv_all(self, t: float) -> None:
        for _ in range(256):
            if self._dealer is None or self._leave:
                return
            try:
                frames = self._dealer.recv_multipart(zmq.DONTWAIT)
            except zmq.Again:
                return
            self._last_heard = t
            if len(frames) != 1:
                log.warning("multi-frame message from broker, ignored")
                continue
            try:
                kind, msg = decode(frames[0])
            except ValueError as exc:
                log.warning("undecodable frame from broker, ignored: %s", exc)
                continue
            if kind in ("dispatch", "settled", "heartbeat") or (
                    kind == "error" and msg.code not in (pb.ERROR_NOT_LEADER,
                                                         pb.ERROR_UNAVAILABLE)):
                self._backoff.reset()
            if kind == "dispatch":
                self._on_dispatch(msg, t)
            elif kind == "settled":
                for item in msg.items:
                    if self._pending_pop((item.job_id, item.lease)):
                        self.stats["settled"] += 1
            elif kind == "error":
                self._on_error(msg, t)
            elif kind == "cancel":
                self._on_cancel(msg)
            elif kind == "heartbeat":
                self._broker_heartbeat = min(msg.interval_ms, _HEARTBEAT_STATED_MAX_MS) / 1000.0
            elif kind in ("ready", "ack", "nack", "extend"):
                if not self._leave:
                    log.warning("%s is not a broker (it sent us %s)", self._brokers.current, kind)
                    self._leave = "not_broker"
            else:
                log.warning("unexpected %s from broker, ignored", kind)

    def _on_dispatch(self, msg, t: float) -> None:
        held = self._held
        debug = log.isEnabledFor(logging.DEBUG)
        extend = self._extend
        for j in msg.jobs:
            job = Job(j)
            ref = (job.id, job.lease)
            if ref in held:
                log.warning("job %d attempt %d: dispatched twice, ignored", job.id, job.attempt)
                continue
            job._received = t
            if extend and job.lease_ms >= 2:
                self._schedule(_EXTEND, job, t, job.lease_ms // 2)
            if job.max_run_ms:
                self._schedule(_MAX_RUN, job, t, job.max_run_ms)
            held[ref] = job
            job._held = True
            job._worker = self
            if debug:
                log.debug("job %d attempt %d: received (tenant %s, lane %s, %d bytes, lease %d ms)",
                          job.id, job.attempt, job.tenant, job.lane, len(job.payload),
                          job.lease_ms)
            if self._draining:
                self._hand_back(job, _THROTTLED, SHUTDOWN)
            else:
                self._backlog.append(job)
        self.stats["received"] += len(msg.jobs)

    def _schedule(self, kind: int, job: Job, t: float, interval_ms: int) -> None:
        """Set the job's timer of `kind` to t + interval (the one schedule: a deque per
        kind and interval, each in time order)."""
        at = t + interval_ms / 1000.0
        if kind == _EXTEND:
            job._next_extend = at
        else:
            job._max_run_at = at
        dq = self._timers.get((kind, interval_ms))
        if dq is None:
            dq = self._timers[(kind, interval_ms)] = deque()
        dq.append((at, job))

    def _on_error(self, e, t: float) -> None:
        if e.items:
            for item in e.items:
                self._on_item_error(item.code, item.job_id, item.lease, t)
            return
        name = enum_name(pb.ErrorCode, e.code)
        if e.code == pb.ERROR_NOT_LEADER:
            if not self._leave:
                log.info("broker %s: %s: %s", self._brokers.current, name, e.message)
                self._brokers.follow(list(e.leader_endpoints))
                self._leave = "not_leader"
        elif e.code == pb.ERROR_UNAVAILABLE:
            if not self._leave:
                log.info("broker %s: %s: %s", self._brokers.current, name, e.message)
                self._leave = "unavailable"
        elif e.code == pb.ERROR_NOT_READY:
            log.info("broker says not ready; sending Ready again")
            self._need_ready = True
        elif e.code in _FENCED or e.code == pb.ERROR_MAX_RUN:
            self._on_item_error(e.code, e.job_id, e.lease, t)
        else:
            log.warning("broker error %s: %s", name, e.message)

    def _on_cancel(self, msg) -> None:
        """The broker cancelled jobs this worker holds (zlane-ctl cancel): each is
        cancelled (cancel_reason "cancelled by the broker"; a handler checking
        job.cancelled or waiting in job.wait_cancelled sees it) and nothing is settled
        for it: the broker ended it, and would refuse a late Ack or Nack CANCELLED. One
        not yet started never starts."""
        for item in msg.items:
            ref = (item.job_id, item.lease)
            job = self._held.get(ref)
            if job is None:  # settled already, not yet confirmed: that will be refused
                if self._pending_pop(ref):
                    self.stats["cancelled"] += 1
                continue
            job.cancel(BROKER_CANCELLED)
            job._reason = BROKER_CANCELLED  # whatever cancelled it first: nothing to settle
            job._next_extend = job._max_run_at = None
            self.stats["cancelled"] += 1
            log.info("job %d attempt %d: cancelled by the broker", job.id, job.attempt)
            try:
                self._backlog.remove(job)  # not started: dropped
            except ValueError:
                continue
            self._held.pop(ref, None)
            job._held = False

    def _on_item_error(self, code: int, job_id: int, lease: int, t: float) -> None:
        name = enum_name(pb.ErrorCode, code)
        ref = (job_id, lease)
        if code in _FENCED and self._pending_pop(ref, refused=True):
            return
        job = self._held.get(ref)
        if job is None or job.cancelled:
            return
        if code == pb.ERROR_MAX_RUN:
            if job._next_extend is None:
                return
            job._next_extend = None
            if job._max_run_at is None:
                self._schedule(_MAX_RUN, job, t, job.lease_ms)
            log.info("job %d attempt %d: lease extended up to its max run time; no more "
                     "extensions", job.id, job.attempt)
            return
        if code in _FENCED:
            job.cancel(LEASE_LOST)
            job._next_extend = job._max_run_at = None
            self.stats["lease_lost"] += 1
            log.warning("job %d attempt %d: extend refused (%s): lease lost", job.id, job.attempt,
                        name)

    def _pending_pop(self, ref, refused: bool = False) -> bool:
        chain = self._pending.get(ref)
        if not chain:
            return False
        p = chain.pop(0)
        if not chain:
            del self._pending[ref]
        self._sent.pop(p, None)
        self._unsent.pop(p, None)
        if refused:
            self.stats["refused"] += 1
            log.warning("job %d attempt %d: %s refused by broker", p.job_id, p.attempt,
                        "ack" if p.ack else "nack")
        return True

    # ------------------------------------------------------------ settlements

    def _settle(self, p: _Settle) -> None:
        self._unsent[p] = None
        self._pending.setdefault((p.job_id, p.lease), []).append(p)

    def _hand_back(self, job: Job, cls: int, why: str) -> None:
        log.info("job %d attempt %d: handed back unstarted (%s): %s", job.id, job.attempt,
                 enum_name(pb.FailureClass, cls), why)
        self._settle(_Settle(job, False, cls, why))
        self._held.pop((job.id, job.lease), None)
        job._held = False

    # ------------------------------------------------------------ handlers

    def _start_jobs(self) -> None:
        if self._draining:
            return
        # thread mode: every job to the handler threads' queue (they run `concurrency`
        # at once, in order); asyncio mode: up to `concurrency` tasks
        limit = self.concurrency if self._loop is not None else 1 << 62
        while self._backlog and self._running < limit:
            job = self._backlog.popleft()
            if job._reason == BROKER_CANCELLED:  # the broker ended it: nothing to settle
                self._held.pop((job.id, job.lease), None)
                job._held = False
                continue
            if job.cancelled:
                self._hand_back(job, _TRANSIENT, job.cancel_reason)
                continue
            fn = self._handlers.get(job.lane)
            if fn is None:  # a lane we did not ask for
                self._hand_back(job, _TRANSIENT, f"no handler for lane {job.lane!r}")
                continue
            self._running += 1
            if self._loop is not None:
                asyncio.run_coroutine_threadsafe(self._run_async(fn, job), self._loop)
            else:
                self._jobq.put((fn, job))

    def _unqueue(self) -> list:
        """Take back the jobs no handler thread has started."""
        jobs = []
        while True:
            try:
                item = self._jobq.get_nowait()
            except queue.Empty:
                return jobs
            if item is not None:
                self._running -= 1
                jobs.append(item[1])

    def _handler_thread(self) -> None:
        jobq = self._jobq
        while True:
            item = jobq.get()
            if item is None:
                return
            fn, job = item
            if job._reason != LIVE:  # cancelled while it waited: handed back unstarted
                self._report(job, None)
                continue
            self._run_thread(fn, job)

    def _report(self, job: Job, p) -> None:
        self._done.append((job, p))
        if not self._wake_owed:  # one wake-up for every result the loop has not taken
            self._wake_owed = True
            self._waker.wake()

    def _result(self, job: Job, start_ns: int, exc: BaseException | None, value=None) -> None:
        run_us = max(1, (time.perf_counter_ns() - start_ns) // 1000)
        if exc is None:
            if isinstance(value, str):
                value = value.encode("utf-8")
            result = bytes(value) if isinstance(value, (bytes, bytearray, memoryview)) else b""
            p = _Settle(job, True, run_us=run_us, result=result)
        elif isinstance(exc, Permanent):
            p = _Settle(job, False, _PERMANENT, str(exc) or type(exc).__name__, run_us=run_us)
        elif isinstance(exc, Throttled):
            p = _Settle(job, False, _THROTTLED, str(exc),
                        max(0, min(0xFFFFFFFF, int(exc.retry_after * 1000))), run_us)
        elif isinstance(exc, NotYet):  # 0 ms: the broker's default delay
            p = _Settle(job, False, _NOT_YET, str(exc),
                        max(0, min(0xFFFFFFFF, int(exc.retry_after * 1000))), run_us)
        else:
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            p = _Settle(job, False, _TRANSIENT, text, run_us=run_us)
        self._report(job, p)

    def _run_thread(self, fn, job: Job) -> None:
        start = time.perf_counter_ns()
        try:
            r = fn(job)
            if inspect.isawaitable(r):
                r = asyncio.run(_awaited(r))
        except BaseException as exc:  # noqa: BLE001 - every failure is the job's
            self._result(job, start, exc)
            return
        self._result(job, start, None, r)

    async def _run_async(self, fn, job: Job) -> None:
        start = time.perf_counter_ns()
        try:
            if inspect.iscoroutinefunction(fn):
                r = await fn(job)
            else:
                r = await asyncio.get_running_loop().run_in_executor(None, fn, job)
                if inspect.isawaitable(r):
                    r = await r
        except BaseException as exc:  # noqa: BLE001
            self._result(job, start, exc)
            return
        self._result(job, start, None, r)

    def _take_results(self) -> None:
        self._wake_owed = False  # before taking: a result added after this wakes us again
        done = self._done
        held = self._held
        debug = log.isEnabledFor(logging.DEBUG)
        while done:
            job, p = done.popleft()
            self._running -= 1
            if job._reason == BROKER_CANCELLED:  # the broker ended it: nothing to settle
                held.pop((job.id, job.lease), None)
                job._held = False
                continue
            if p is None:
                self._hand_back(job, _TRANSIENT, job.cancel_reason)
                continue
            if not p.ack:
                log.info("job %d attempt %d: nack %s (%d us): %s", job.id, job.attempt,
                         enum_name(pb.FailureClass, p.cls), p.run_us,
                         p.error.strip().splitlines()[-1] if p.error.strip() else "")
            elif debug:
                log.debug("job %d attempt %d: ack (%d us)", job.id, job.attempt, p.run_us)
            self._settle(p)
            held.pop((job.id, job.lease), None)
            job._held = False

    # ------------------------------------------------------------ the loop's steps

    def _silence(self) -> float:
        """How long a silence of the broker lasts before it is left: liveness x
        the longer of this worker's heartbeat and the broker's stated one."""
        return self._liveness * max(self._heartbeat, self._broker_heartbeat)

    def _tick(self, t: float) -> None:
        silence = self._silence()
        if self._dealer is not None and not self._leave and t - self._last_heard >= silence:
            # what came while this thread waited for the CPU (or the GIL) after
            # its poll was heard in time: read it before calling the broker silent
            self._recv_all(t)
        if self._dealer is not None and (self._leave or t - self._last_heard >= silence):
            self._disconnect(t)
        if self._dealer is None and t >= self._reconnect_at and not self._connect(t):
            self._leave = None
            self._brokers.next()
            self._reconnect_at = t + self._reconnect_max
        for (kind, interval), dq in self._timers.items():
            while dq:
                at, job = dq[0]
                if not job._held or job._reason != LIVE or at != (
                        job._next_extend if kind == _EXTEND else job._max_run_at):
                    dq.popleft()  # settled, cancelled or rescheduled: not due any more
                    continue
                if at > t:
                    break
                dq.popleft()
                if kind == _MAX_RUN:
                    job.cancel(MAX_RUN)
                    job._next_extend = job._max_run_at = None
                    log.warning("job %d attempt %d: max run time exceeded", job.id, job.attempt)
                    continue
                if self._dealer is not None:
                    self._extends.append(pb.ExtendItem(job_id=job.id, lease=job.lease,
                                                       lease_ms=job.lease_ms))
                self._schedule(_EXTEND, job, t, interval)
        if self._draining and not self._drain_cancelled and (
                t >= self._drain_deadline or self._stop_requests >= 2):
            self._drain_cancelled = True
            n = sum(1 for job in self._held.values() if job.cancel(SHUTDOWN))
            if n:
                log.warning("drain grace over: cancelled %d running jobs", n)

    def _begin_drain(self, t: float) -> None:
        self._draining = True
        self._drain_deadline = t + self._drain_timeout
        log.info("stopping: %d jobs held, waiting up to %.1f s for running ones",
                 len(self._held), self._drain_timeout)
        if self._dealer is not None and not self._need_ready and not self._send_ready(t):
            self._need_ready = True
        while self._backlog:
            self._hand_back(self._backlog.popleft(), _THROTTLED, SHUTDOWN)
        for job in self._unqueue():
            self._hand_back(job, _THROTTLED, SHUTDOWN)

    def _send_ready(self, t: float) -> bool:
        # every lease this worker knows of (held, or settled but not yet
        # Settled): after a reconnect the broker makes the old connection's
        # other leases, Dispatches lost with it, ready again at once
        capacity = 0 if self._draining else self.concurrency + self.prefetch
        held = [pb.LeaseRef(job_id=i, lease=lease) for i, lease in
                dict.fromkeys(list(self._held) + list(self._pending))]
        listed = len(held) <= _READY_HELD_MAX  # else every lease follows (one frame)
        return self._send(_env(ready=pb.Ready(name=self.name, lanes=list(self._handlers),
                                              capacity=capacity, instance=self._instance,
                                              held=held if listed else [],
                                              held_listed=listed,
                                              heartbeat_ms=self._heartbeat_ms)), t)

    def _save_checkpoint(self, job: "Job", data: bytes) -> None:
        with self._ckpt_lock:
            self._ckpts[(job.id, job.lease)] = (job, data)
        self._waker.wake()

    def _flush(self, t: float) -> None:
        if self._dealer is None:
            return
        if self._need_ready and self._send_ready(t):
            self._need_ready = False
            self._mark_unsent()  # what came before Ready may have been refused
        with self._ckpt_lock:
            ckpts, self._ckpts = self._ckpts, {}
        for job, data in ckpts.values():  # before any settlement: stored before the job ends
            self._extends.append(pb.ExtendItem(job_id=job.id, lease=job.lease,
                                               lease_ms=job.lease_ms, checkpoint=data))
        if self._extends:  # (first: a checkpoint goes before its job's Ack or Nack)
            if self._send(_env(extend=pb.Extend(items=self._extends)), t):
                self.stats["extends_sent"] += len(self._extends)
            self._extends = []
        if self._unsent:
            acks = [p for p in self._unsent if p.ack]
            nacks = [p for p in self._unsent if not p.ack]
            out_a = not acks or self._send(_ack_frame(acks), t)
            out_n = not nacks or self._send(_env(nack=pb.Nack(items=[
                pb.NackItem(job_id=p.job_id, lease=p.lease, error=p.error, run_us=p.run_us,
                            retry_after_ms=p.retry_after_ms, **{"class": p.cls})
                for p in nacks])), t)
            keep = {}
            for p in self._unsent:
                if not (out_a if p.ack else out_n):
                    keep[p] = None
                    continue
                self._sent[p] = None
                if not p.counted:
                    p.counted = True
                    self.stats["acked" if p.ack else "nacked"] += 1
            self._unsent = keep
        if t - self._last_sent >= self._heartbeat:
            self._send(_env(heartbeat=pb.Heartbeat(interval_ms=self._heartbeat_ms)), t)

    def _next_timeout(self, t: float) -> float:
        nxt = t + self._heartbeat
        if self._dealer is not None:
            nxt = min(nxt, self._last_heard + self._silence(),
                      self._last_sent + self._heartbeat)
        else:
            nxt = min(nxt, self._reconnect_at)
        for dq in self._timers.values():
            if dq and dq[0][0] < nxt:
                nxt = dq[0][0]  # perhaps a stale entry: an early wake-up, dropped by _tick
        if self._draining and not self._drain_cancelled:
            nxt = min(nxt, self._drain_deadline)
        if self._linger_deadline is not None:
            nxt = min(nxt, self._linger_deadline)
        return max(0.0, nxt - t)

    def _finished(self, t: float) -> bool:
        if not self._draining or self._held or self._running:
            return False
        if not self._pending:
            return True
        if self._linger_deadline is None:
            self._linger_deadline = t + self._liveness * self._heartbeat
        if t < self._linger_deadline:
            return False
        log.warning("exiting with %d settlements unconfirmed (the broker will requeue them)",
                    len(self._pending))
        return True


async def _awaited(awaitable):
    return await awaitable


# ---------------------------------------------------------------- zlane-py-worker

def _duration(text: str) -> float:
    text = text.strip()
    for suffix, scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if text.endswith(suffix) and text[:-len(suffix)].replace(".", "", 1).isdigit():
            return float(text[:-len(suffix)]) * scale
    return float(text)


def _load_target(spec: str):
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(f"zlane-py-worker: expected module:function, got {spec!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"zlane-py-worker: cannot import {module_name}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SystemExit(f"zlane-py-worker: {module_name} has no {attr}") from None
    return obj


def main(argv=None) -> int:
    """zlane-py-worker MODULE:FUNCTION --lane L --broker EP ...: run FUNCTION (a
    handler taking a zlane.Job) for the lanes given, or a zlane.Worker object with
    its own handlers; drains on SIGTERM."""
    ap = argparse.ArgumentParser(
        prog="zlane-py-worker",
        description="Run a Python handler for zlane jobs. MODULE:FUNCTION names a handler "
                    "(def f(job) or async def f(job)) or a zlane.Worker with its handlers. "
                    "Returning acks the job; raising zlane.Permanent dead-letters it; "
                    "zlane.Throttled(seconds) retries after that delay; zlane.NotYet(seconds) "
                    "retries after it without spending an attempt; any other exception "
                    "retries with backoff. SIGTERM or SIGINT drains and exits.")
    ap.add_argument("target", metavar="MODULE:FUNCTION")
    ap.add_argument("--broker", default=os.environ.get("ZLANE_BROKER", "tcp://127.0.0.1:5571"),
                    help="broker backend endpoint(s), comma-separated (default %(default)s)")
    ap.add_argument("--lane", "--lanes", action="append", default=[], dest="lanes",
                    help="lane to serve (repeat, or a comma list)")
    ap.add_argument("--concurrency", "-c", type=int, default=1)
    ap.add_argument("--prefetch", type=int, default=0)
    ap.add_argument("--mode", choices=("thread", "asyncio"), default=None,
                    help="default: asyncio for a coroutine function, thread otherwise")
    ap.add_argument("--name", default=None)
    ap.add_argument("--heartbeat", type=_duration, default=1.0, help="e.g. 1s, 200ms")
    ap.add_argument("--liveness", type=int, default=3)
    ap.add_argument("--drain-timeout", type=_duration, default=30.0)
    ap.add_argument("--curve-server", default=os.environ.get("ZLANE_CURVE_SERVER"),
                    help="the broker's public certificate ($ZLANE_CURVE_SERVER)")
    ap.add_argument("--cert", default=os.environ.get("ZLANE_CERT"),
                    help="this worker's secret certificate ($ZLANE_CERT)")
    ap.add_argument("-v", "--verbose", action="count", default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose > 1 else
                        logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if bool(args.curve_server) != bool(args.cert):
        ap.error("CURVE needs both --curve-server and --cert")
    curve = (args.curve_server, args.cert) if args.cert else None
    target = _load_target(args.target)
    lanes = [lane.strip() for item in args.lanes for lane in item.split(",") if lane.strip()]
    if isinstance(target, Worker):
        worker = target
        if lanes:
            ap.error("a Worker object brings its own lanes: leave --lane out")
    elif callable(target):
        if not lanes:
            ap.error("give at least one --lane")
        mode = args.mode or ("asyncio" if inspect.iscoroutinefunction(target) else "thread")
        worker = Worker(args.broker, name=args.name, concurrency=args.concurrency,
                        prefetch=args.prefetch, mode=mode, curve=curve,
                        heartbeat=args.heartbeat, liveness=args.liveness,
                        drain_timeout=args.drain_timeout)
        for lane in lanes:
            worker.add_handler(lane, target)
    else:
        ap.error(f"{args.target} is neither a function nor a zlane.Worker")
    worker.run()
    return 0


if __name__ == "__main__":  # python3 -m zlane.worker: the package's classes, not __main__'s
    from zlane.worker import main as _main
    sys.exit(_main())
