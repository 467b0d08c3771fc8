"""The operator's side: Admin (the admin socket's AdminRequest ops) and Subscriber
(the events PUB socket: DeadLetter, DlqAlert and a settled batch's BatchInfo)."""

from __future__ import annotations

import threading
from typing import Iterable, Iterator

import zmq

from ._conn import EndpointList, now
from ._proto import decode, enum_name, parse_endpoints, pb
from .curve import as_curve
from .errors import AdminRefused, BrokerError, Timeout, ZlaneError
from .records import to_record

_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
           | zmq.EVENT_HANDSHAKE_FAILED_AUTH)


def _handshake_text(event: int, curve: bool) -> str:
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return ("the broker refused this client's CURVE key: is its public certificate in the "
                "broker's clients directory, with a role that may do this?")
    if curve:
        return "the CURVE handshake failed: is the server certificate the broker's?"
    return "the handshake failed: the broker probably requires CURVE"


class Admin:
    """Requests to the broker's admin socket, as `zlane-ctl` sends them.

    `endpoints`: the admin endpoint, or a list of brokers sharing a store (each
    request goes to one at a time; a standby's NOT_LEADER is followed). `timeout`
    (s) bounds each request over the whole list. `curve`: a zlane.Curve or
    (broker's public certificate, an admin's or subscriber's secret certificate).
    Thread-safe (one request at a time)."""

    def __init__(self, endpoints="tcp://127.0.0.1:5573", *, curve=None, timeout: float = 5.0):
        self._brokers = EndpointList(parse_endpoints(endpoints))
        self._curve = as_curve(curve)
        self._timeout = float(timeout)
        self._ctx = zmq.Context()
        self._lock = threading.Lock()
        self._sock = None
        self._mon = None
        self._next_id = 1

    # ------------------------------------------------------------ the ops

    def stats(self, *, lanes_only: bool = False):
        """The broker's Stats record: counters (a dict), lanes, tenants and groups
        (GroupStats records), latencies, workers, producers, role, ... With
        lanes_only=True, no per-tenant or lane x tenant rows (tenants_known counts
        the tenants): cheap to poll."""
        return to_record(self._request(stats=pb.StatsRequest(lanes_only=lanes_only)).stats)

    def workers(self) -> list:
        """The connected workers (WorkerInfo records: name, host, lanes, capacity,
        in_flight, last_seen_age_ms, instance, heartbeat_ms), as zlane-ctl workers."""
        return [to_record(w) for w in self._request(workers=pb.WorkersRequest()).workers.items]

    def counter(self, name: str) -> int:
        """One broker counter from fresh stats (0 when it has none of that name)."""
        return self.stats().counters.get(name, 0)

    def dlq_list(self, *, lane: str = "", tenant: str = "", ids: Iterable[int] = (),
                 error_contains: str = "", dead_from_ms: int = 0, dead_to_ms: int = 0,
                 limit: int = 100, after_id: int = 0) -> list:
        """Dead letters (DeadLetter records, without payload and attempts), oldest
        first, at most `limit`, after `after_id` (for paging); every criterion given
        must hold: lane, tenant, ids, text in the final error (any case), died at or
        after dead_from_ms and before dead_to_ms (broker wall clock, ms)."""
        ids = list(ids)
        narrow = lane or tenant or ids or error_contains or dead_from_ms or dead_to_ms
        f = pb.DlqFilter(lane=lane, tenant=tenant, ids=ids, all=not narrow,
                         error_contains=error_contains, dead_from_ms=dead_from_ms,
                         dead_to_ms=dead_to_ms)
        reply = self._request(dlq_list=pb.DlqListRequest(filter=f, limit=limit,
                                                         after_id=after_id))
        return [to_record(item) for item in reply.dlq_list.items]

    def dlq_show(self, job_id: int):
        """One dead letter with its payload, error and every attempt."""
        return to_record(self._request(dlq_show=pb.DlqShowRequest(job_id=job_id)).dead_letter)

    def dlq_redrive(self, *ids: int, all: bool = False, lane: str = "", tenant: str = "") -> int:
        """Put dead letters back (a fresh attempt count); returns how many."""
        return self._request(dlq_redrive=self._filter(ids, all, lane, tenant)).count

    def dlq_purge(self, *ids: int, all: bool = False, lane: str = "", tenant: str = "") -> int:
        """Delete dead letters; returns how many."""
        return self._request(dlq_purge=self._filter(ids, all, lane, tenant)).count

    def cancel(self, *ids: int) -> list:
        """Cancel jobs (as zlane-ctl cancel): one (job_id, outcome, state) per id, in
        order; outcome "cancelled", "already_cancelled", "finished" or "unknown"; state
        the one it left ("ready", "delayed", "leased", "dead") or was cancelled in. A
        running job's worker is told (Cancel) and settles nothing for it."""
        if not ids:
            raise ValueError("name the jobs to cancel")
        r = self._request(cancel=pb.CancelRequest(ids=[int(i) for i in ids]))
        return [(it.job_id, enum_name(pb.CancelOutcome, it.outcome)[len("CANCEL_"):].lower(),
                 it.state) for it in r.cancel.items]

    def batch_show(self, batch_id: str):
        """A batch's BatchInfo record (as zlane-ctl batch show): tenant, lane, job_id
        (its callback), closed, settled, cancelled, the counts (jobs, acked, dead,
        cancelled_jobs, pending), failed (ids of the dead and cancelled, at most 1000;
        failed_more beyond), the times. `found` is False for a batch the broker does
        not know (never opened, or forgotten)."""
        if not isinstance(batch_id, str) or not batch_id:
            raise ValueError("batch_show needs a batch id (a non-empty str)")
        return to_record(self._request(batch_show=pb.BatchQuery(batch_id=batch_id)).batch)

    def pause(self, lane: str) -> None:
        """Stop dispatching from `lane` (until resume, or a broker restart)."""
        self._request(pause=pb.LaneControl(lane=lane))

    def resume(self, lane: str) -> None:
        """Dispatch from `lane` again."""
        self._request(resume=pb.LaneControl(lane=lane))

    @staticmethod
    def _filter(ids, all, lane, tenant):
        if not (ids or all or lane or tenant):
            raise ValueError("name what: ids, lane=, tenant= or all=True")
        return pb.DlqFilter(lane=lane, tenant=tenant, ids=list(ids), all=all)

    # ------------------------------------------------------------ plumbing

    def close(self) -> None:
        with self._lock:
            self._close_socket()
            self._ctx.term()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _open_socket(self) -> None:
        s = self._ctx.socket(zmq.DEALER)
        s.linger = 0
        if self._curve is not None:
            self._curve.apply(s)
        self._mon = s.get_monitor_socket(_FAILED)
        s.connect(self._brokers.current)
        self._sock = s

    def _close_socket(self) -> None:
        if self._sock is not None:
            try:
                self._sock.disable_monitor()
            except zmq.ZMQError:
                pass
            self._mon.close(0)
            self._sock.close(0)
        self._sock = self._mon = None

    def _request(self, **op):
        """Send one AdminRequest; return the AdminReply (ok). Raises AdminRefused (not
        ok), BrokerError, Timeout (no broker of the list answered), ZlaneError (the
        handshake was refused)."""
        with self._lock:
            end = now() + self._timeout
            tries = len(self._brokers.endpoints) + 1  # each broker once, plus a leader named
            errors = []
            while tries > 0:
                tries -= 1
                if self._sock is None:
                    self._open_socket()
                rid = self._next_id
                self._next_id += 1
                req = pb.Envelope(version=1, admin_request=pb.AdminRequest(request_id=rid, **op))
                share = max(0.05, (end - now()) / max(1, tries + 1))
                outcome = self._await_reply(rid, req.SerializeToString(), min(end, now() + share))
                if isinstance(outcome, tuple):  # ("move", why) or ("follow", named)
                    what, detail = outcome
                    errors.append(f"{self._brokers.current}: {detail if what == 'move' else 'not the leader'}")
                    self._close_socket()
                    if what == "follow":
                        self._brokers.follow(detail)
                    else:
                        self._brokers.next()
                    if now() >= end:
                        break
                    continue
                reply = outcome
                if not reply.ok:
                    raise AdminRefused(reply.error or "refused")
                return reply
            raise Timeout(f"no answer from the admin socket at {self._brokers} within "
                          f"{self._timeout:g} s ({'; '.join(errors) or 'silent'})")

    def _await_reply(self, rid, frame, until):
        # The request goes without blocking: a refused handshake can end the
        # connection's pipe before it is queued, and a DEALER without a pipe
        # blocks a send for ever; the monitor says why meanwhile.
        poller = zmq.Poller()
        poller.register(self._mon, zmq.POLLIN)
        try:
            self._sock.send(frame, zmq.DONTWAIT)
            frame = None
            poller.register(self._sock, zmq.POLLIN)
        except zmq.Again:
            poller.register(self._sock, zmq.POLLIN | zmq.POLLOUT)
        while True:
            left = until - now()
            if left <= 0:
                return ("move", "no answer")
            events = dict(poller.poll(int(left * 1000) + 1))
            if frame is not None and events.get(self._sock, 0) & zmq.POLLOUT:
                try:
                    self._sock.send(frame, zmq.DONTWAIT)
                    frame = None
                    poller.modify(self._sock, zmq.POLLIN)
                except zmq.Again:
                    pass
            if self._mon in events:
                frames = self._mon.recv_multipart()
                event = int.from_bytes(frames[0][:2], "little")
                raise ZlaneError(f"admin socket {self._brokers.current}: "
                                 f"{_handshake_text(event, self._curve is not None)}")
            if not events.get(self._sock, 0) & zmq.POLLIN:
                continue
            frames = self._sock.recv_multipart()
            if len(frames) != 1:
                continue
            try:
                kind, msg = decode(frames[0])
            except ValueError:
                continue
            if kind == "admin_reply":
                if msg.request_id == rid:
                    return msg
                continue  # a late answer to an earlier request
            if kind == "error":
                if msg.code == pb.ERROR_NOT_LEADER:
                    return ("follow", list(msg.leader_endpoints))
                if msg.code == pb.ERROR_UNAVAILABLE:
                    return ("move", "its database does not answer")
                raise BrokerError(msg.code, msg.message)


class Subscriber:
    """The broker's events: iterate it for DeadLetter, DlqAlert and BatchInfo records.

    `endpoints`: the events endpoint, or every broker of a list (only the leader
    publishes). `topics`: prefixes to subscribe to: "dlq." (every dead letter),
    "dlq.<lane>." (one lane), "alert.dlq" (the repeating DLQ alert), "batch." (every
    batch that settled, once each: BatchInfo), "batch.<id>" (one); by default
    everything. `curve`: (broker's public certificate, a subscriber's or admin's
    secret certificate). Each record also has `.topic`.

        with Subscriber("tcp://broker:5572", topics=["dlq."]) as sub:
            for dead in sub:
                print(dead.job_id, dead.error)
    """

    def __init__(self, endpoints="tcp://127.0.0.1:5572", *, topics: Iterable[str] = ("",),
                 curve=None):
        self._endpoints = parse_endpoints(endpoints)
        curve = as_curve(curve)
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.SUB)
        self._sock.linger = 0
        if curve is not None:
            curve.apply(self._sock)
        self._curve = curve is not None
        self._mon = self._sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | _FAILED)
        self._connected = 0
        self._refused = ""
        topics = list(topics) or [""]
        for t in topics:
            self._sock.setsockopt(zmq.SUBSCRIBE, t.encode("utf-8"))
        for ep in self._endpoints:
            self._sock.connect(ep)

    def _drain_monitor(self) -> None:
        while True:
            try:
                frames = self._mon.recv_multipart(zmq.DONTWAIT)
            except zmq.Again:
                return
            event = int.from_bytes(frames[0][:2], "little")
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._connected += 1
                self._refused = ""
            else:
                self._refused = _handshake_text(event, self._curve)

    def wait_connected(self, timeout: float = 10.0) -> bool:
        """Wait until a handshake with a broker succeeded; True if one did in time.
        Raises ZlaneError if the broker refused the handshake (a key it does not know,
        a role that may not read events)."""
        end = now() + timeout
        poller = zmq.Poller()
        poller.register(self._mon, zmq.POLLIN)
        while True:
            self._drain_monitor()
            if self._connected:
                return True
            if self._refused:
                raise ZlaneError(f"events socket {','.join(self._endpoints)}: {self._refused}")
            left = end - now()
            if left <= 0:
                return False
            poller.poll(int(left * 1000) + 1)

    def recv(self, timeout: float | None = None):
        """The next DeadLetter, DlqAlert, BatchInfo (a batch settled) or Breaker (a
        lane's circuit breaker changed state: topic breaker.<lane>) record, or None
        if none came within `timeout` seconds (None = wait)."""
        end = None if timeout is None else now() + timeout
        while True:
            left = None if end is None else max(0, end - now())
            if not self._sock.poll(None if left is None else int(left * 1000) + 1):
                self._drain_monitor()
                if end is not None and now() >= end:
                    return None
                continue
            frames = self._sock.recv_multipart()
            if len(frames) != 2:
                continue
            try:
                kind, msg = decode(frames[1])
            except ValueError:
                continue
            if kind not in ("dead_letter", "dlq_alert", "batch_done", "breaker"):
                continue
            rec = to_record(msg)
            rec.topic = frames[0].decode("utf-8", "replace")
            return rec

    def __iter__(self) -> Iterator:
        while True:
            yield self.recv()

    def close(self) -> None:
        try:
            self._sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self._mon.close(0)
        self._sock.close(0)
        self._ctx.term()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
