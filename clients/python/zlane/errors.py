"""Exceptions: what the broker refused, and what a handler raises to say how a job failed."""

from __future__ import annotations

from ._proto import enum_name, pb


class ZlaneError(Exception):
    """Base class of every error the zlane client raises."""


class Timeout(ZlaneError, TimeoutError):
    """Nothing final came within the timeout: the broker was unreachable, refused the
    handshake, gave no credit, or did not answer. For a submit the job may have been
    accepted all the same (`sent` says whether it went on the wire)."""

    def __init__(self, message: str, *, sent: bool = False, code: int = 0):
        super().__init__(message)
        self.sent = sent
        self.code = code


class BrokerError(ZlaneError):
    """The broker answered an Error (admin and other requests): `code` is the
    ErrorCode number, `code_name` its name."""

    def __init__(self, code: int, message: str):
        self.code = code
        self.code_name = enum_name(pb.ErrorCode, code)
        super().__init__(f"{self.code_name}: {message}")


class BatchError(ZlaneError):
    """The broker did not close a batch (Producer.close_batch): `batch_id` names it,
    `error` is the broker's words (no such batch, another tenant's, cancelled)."""

    def __init__(self, batch_id: str, error: str):
        self.batch_id = batch_id
        self.error = error
        super().__init__(f"batch {batch_id!r} not closed: {error}")


class AdminRefused(ZlaneError):
    """An admin request the broker could not carry out (AdminReply.ok false)."""


class CurveError(ZlaneError):
    """A certificate file could not be used (missing, not a czmq certificate, no secret key)."""


class Rejected(ZlaneError):
    """The broker rejected a job (Rejected{code, reason, retry_after_ms}).

    `code` is the RejectCode number, `code_name` its name, `reason` the broker's
    words, `retry_after` seconds to wait before trying again (0 when none), and
    `key` the idempotency key the job was sent with."""

    code = pb.REJECT_UNSPECIFIED

    def __init__(self, reason: str = "", *, code: int | None = None, retry_after: float = 0.0,
                 key: str | None = None):
        if code is not None:
            self.code = code
        self.code_name = enum_name(pb.RejectCode, self.code)
        self.reason = reason
        self.retry_after = retry_after
        self.key = key
        super().__init__(f"{self.code_name}: {reason}" if reason else self.code_name)


class Invalid(Rejected):
    """A malformed job (empty tenant or lane, a bad string...): final."""
    code = pb.REJECT_INVALID


class PayloadTooLarge(Rejected):
    """The payload is above the broker's max_payload: final."""
    code = pb.REJECT_PAYLOAD_TOO_LARGE


class UnknownLane(Rejected):
    """The broker has no such lane: final."""
    code = pb.REJECT_UNKNOWN_LANE


class QueueFull(Rejected):
    """No room: no credit, or a lane's or tenant's max_depth. Try again after
    `retry_after` seconds. Raised at once by submit(block=False); a blocking submit
    waits and retries until its timeout."""
    code = pb.REJECT_QUEUE_FULL


class StoreFull(Rejected):
    """The broker's durable store is out of space (retried until the timeout)."""
    code = pb.REJECT_STORE_FULL


class Unauthorized(Rejected):
    """This client's CURVE key may not submit for that tenant: final."""
    code = pb.REJECT_UNAUTHORIZED


class ShuttingDown(Rejected):
    """The broker is stopping (retried until the timeout)."""
    code = pb.REJECT_SHUTTING_DOWN


class Unavailable(Rejected):
    """The broker's database does not answer (retried until the timeout)."""
    code = pb.REJECT_UNAVAILABLE


class UnknownBatch(Rejected):
    """The batch to join is not open at this broker (never opened, settled, or
    another tenant's): final."""
    code = pb.REJECT_UNKNOWN_BATCH


class BatchClosed(Rejected):
    """The batch to join is closed (or cancelled): final."""
    code = pb.REJECT_BATCH_CLOSED


class BatchExists(Rejected):
    """A batch of the id to open exists (opened by another spec): final."""
    code = pb.REJECT_BATCH_EXISTS


_BY_CODE = {cls.code: cls for cls in (Invalid, PayloadTooLarge, UnknownLane, QueueFull,
                                      StoreFull, Unauthorized, ShuttingDown, Unavailable,
                                      UnknownBatch, BatchClosed, BatchExists)}

#: Codes the producer retries (after retry_after) until the job's deadline.
RETRYABLE = frozenset({pb.REJECT_QUEUE_FULL, pb.REJECT_STORE_FULL, pb.REJECT_SHUTTING_DOWN,
                       pb.REJECT_UNAVAILABLE})


def rejection(code: int, reason: str, retry_after_ms: int = 0, key: str | None = None) -> Rejected:
    """The exception for one Rejection."""
    cls = _BY_CODE.get(code, Rejected)
    return cls(reason, code=code, retry_after=retry_after_ms / 1000.0, key=key)


# ---------------------------------------------------------------- raised by handlers

class Permanent(Exception):
    """Raise from a handler: the job can never succeed (bad input). It is
    dead-lettered at once (Nack PERMANENT), with the message as its error."""


class Throttled(Exception):
    """Raise from a handler: try again after `retry_after` seconds (Nack THROTTLED);
    the broker also holds that tenant's flow in that lane back for as long."""

    def __init__(self, retry_after: float = 1.0, message: str = ""):
        self.retry_after = float(retry_after)
        super().__init__(message or f"throttled: retry after {self.retry_after:g} s")


class NotYet(Exception):
    """Raise from a handler: what the job needs has not arrived yet (Nack NOT_YET).
    The broker retries it after `retry_after` seconds (None or 0: the broker's
    default, 1 s) without spending an attempt (the next delivery has the same
    attempt number), and dead-letters it once it has had more than the lane's
    max_not_yet (default 100) of these."""

    def __init__(self, retry_after: float | None = None, message: str = ""):
        self.retry_after = 0.0 if retry_after is None else float(retry_after)
        if self.retry_after < 0:
            raise ValueError("NotYet: retry_after must be >= 0")
        super().__init__(message or (f"not yet: retry after {self.retry_after:g} s"
                                     if self.retry_after else "not yet"))
