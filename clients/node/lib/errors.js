"use strict";
// Errors as Error subclasses with a `code` (the protocol's name for it) and
// the data they carry, like zeromq.js and BullMQ.

class ZlaneError extends Error {
  constructor(message, code = "ZLANE_ERROR") {
    super(message);
    this.name = new.target.name;
    this.code = code;
  }
}

/** A job the broker refused for good (Rejected with a final code). */
class RejectedError extends ZlaneError {
  constructor(message, code, reason) {
    super(message, code);
    this.reason = reason;
  }
}
class InvalidJobError extends RejectedError {}
class PayloadTooLargeError extends RejectedError {}
class UnknownLaneError extends RejectedError {}
class UnauthorizedError extends RejectedError {}
/** The batch to join is not open here (never opened, settled, another tenant's). */
class UnknownBatchError extends RejectedError {}
/** The batch to join is closed (or cancelled). */
class BatchClosedError extends RejectedError {}
/** A batch of the id to open exists (opened by another spec). */
class BatchExistsError extends RejectedError {}

/**
 * The broker did not close a batch (Producer.closeBatch): `batchId` names
 * it, `reason` is the broker's words (no such batch, another tenant's, cancelled).
 */
class BatchError extends ZlaneError {
  constructor(batchId, reason) {
    super(`batch '${batchId}' not closed: ${reason}`, "BATCH_NOT_CLOSED");
    this.batchId = batchId;
    this.reason = reason;
  }
}

/** No room: no credit (block: false), or Rejected QUEUE_FULL. Retry after `retryAfterMs`. */
class QueueFullError extends RejectedError {
  constructor(message, retryAfterMs, code = "REJECT_QUEUE_FULL", reason = "") {
    super(message, code, reason);
    this.retryAfterMs = retryAfterMs;
  }
}
/** The broker's store is full (Rejected STORE_FULL, with block: false). */
class StoreFullError extends QueueFullError {
  constructor(message, retryAfterMs, reason = "") {
    super(message, retryAfterMs, "REJECT_STORE_FULL", reason);
  }
}

/**
 * The job's deadline passed before the broker accepted or refused it. When
 * `sent` is true the job went on the wire and may have been accepted; a
 * resubmission under the same idempotency key is then safe.
 */
class TimeoutError extends ZlaneError {
  constructor(message, { sent = false, idempotencyKey = "" } = {}) {
    super(message, "TIMEOUT");
    this.sent = sent;
    this.idempotencyKey = idempotencyKey;
  }
}

/** The producer, worker or admin was closed while the call waited. */
class ClosedError extends ZlaneError {
  constructor(message = "closed") {
    super(message, "CLOSED");
  }
}

/** A bad option, endpoint list or certificate. */
class ConfigError extends ZlaneError {
  constructor(message) {
    super(message, "CONFIG");
  }
}

/** An admin request the broker refused (AdminReply ok = false, or an Error). */
class AdminError extends ZlaneError {}

// ------------------------------------------------------------ handler outcomes
/** Throw from a handler: the job failed for good and is dead-lettered at once. */
class PermanentError extends ZlaneError {
  constructor(message) {
    super(message, "FAILURE_PERMANENT");
  }
}
/** Throw from a handler: retry the job after `retryAfterMs` (the tenant is paused in this lane as long). */
class ThrottledError extends ZlaneError {
  constructor(message, retryAfterMs = 1000) {
    super(message, "FAILURE_THROTTLED");
    this.retryAfterMs = retryAfterMs;
  }
}

/**
 * Throw from a handler: what the job needs has not arrived yet (Nack NOT_YET).
 * The broker retries it after `retryAfterMs` (0: its default, 1 s) without
 * spending an attempt, and dead-letters it past the lane's max_not_yet (100).
 */
class NotYetError extends ZlaneError {
  constructor(message = "not yet", retryAfterMs = 0) {
    super(message, "FAILURE_NOT_YET");
    if (!Number.isFinite(retryAfterMs) || retryAfterMs < 0)
      throw new RangeError(`NotYetError: retryAfterMs must be a number >= 0, not ${retryAfterMs}`);
    this.retryAfterMs = retryAfterMs;
  }
}

module.exports = {
  ZlaneError,
  RejectedError,
  InvalidJobError,
  PayloadTooLargeError,
  UnknownLaneError,
  UnauthorizedError,
  UnknownBatchError,
  BatchClosedError,
  BatchExistsError,
  BatchError,
  QueueFullError,
  StoreFullError,
  TimeoutError,
  ClosedError,
  ConfigError,
  AdminError,
  PermanentError,
  ThrottledError,
  NotYetError,
};
