"use strict";
// Producer: the frontend protocol as producer/zlane_producer.c speaks it.
//
// A job moves QUEUED -> INFLIGHT -> done (its promise settles), or through
// RETRY after a retryable rejection, and goes back to QUEUED when the
// connection it was sent on is lost. Every job carries an idempotency key,
// the caller's or "<instance>-<seq>" marked generated_key, so whatever was
// not Accepted is resent under the same key after a reconnect, a broker
// restart, Error NOT_READY (the broker forgot this session), a NOT_LEADER
// (move to the leader it names, or the next broker) or UNAVAILABLE (come
// back, or go on, after the backoff). A job told Accepted is never resent.
//
// Credit: Credit.limit counts the specs this connection may have sent since
// its Hello. Specs go on the wire only within it, max_batch per Submit frame,
// many frames in flight. submit() with {block: false} refuses a job at once
// with QueueFullError when there is no credit for it.
//
// Batches: a spec joins one (batch) or opens one (openBatch; its Acceptance
// names the batch). closeBatch waits for every job taken before it to be
// answered, then sends a Submit of only close_batches (again in every new
// session until answered) and settles on its Accepted.closed item.
const { EventEmitter } = require("node:events");
const zmq = require("zeromq");
const proto = require("./proto");
const { EndpointList, curveOptions, jitter, instanceHex } = require("./common");
const errors = require("./errors");

const RC = proto.RejectCode;
const EC = proto.ErrorCode;

const RETRY_MIN_MS = 50; // floor for a retryable rejection's delay
const BATCH_MAX_BYTES = 1 << 20; // a Submit frame stops growing past this
const SPEC_OVERHEAD = 64;
const HWM = 1000;
const RECONNECT_IVL_MS = 100;
const RECONNECT_IVL_MAX_MS = 1000; // a move waits random(0, this) at most
const HEARTBEAT_IVL_MS = 1000;
const HEARTBEAT_TIMEOUT_MS = 3000;
const REDIAL_MIN_MS = 1000; // ZeroMQ gives up on a refused handshake: we dial again
const REDIAL_MAX_MS = 30000;
const DIAL_TIMEOUT_MS = HEARTBEAT_TIMEOUT_MS; // several brokers: no answer by then, next
const TICK_MS = 25;

const S_QUEUED = 0;
const S_INFLIGHT = 1;
const S_RETRY = 2;

const RETRYABLE = new Set([
  RC.REJECT_QUEUE_FULL,
  RC.REJECT_STORE_FULL,
  RC.REJECT_SHUTTING_DOWN,
  RC.REJECT_UNAVAILABLE,
]);

function rejectError(code, reason, retryAfterMs) {
  const name = proto.RejectCodeName[code] || `REJECT_${code}`;
  const msg = `job rejected: ${name}${reason ? ": " + reason : ""}`;
  switch (code) {
    case RC.REJECT_INVALID:
      return new errors.InvalidJobError(msg, name, reason);
    case RC.REJECT_PAYLOAD_TOO_LARGE:
      return new errors.PayloadTooLargeError(msg, name, reason);
    case RC.REJECT_UNKNOWN_LANE:
      return new errors.UnknownLaneError(msg, name, reason);
    case RC.REJECT_UNAUTHORIZED:
      return new errors.UnauthorizedError(msg, name, reason);
    case RC.REJECT_QUEUE_FULL:
      return new errors.QueueFullError(msg, retryAfterMs, name, reason);
    case RC.REJECT_STORE_FULL:
      return new errors.StoreFullError(msg, retryAfterMs, reason);
    case RC.REJECT_UNKNOWN_BATCH:
      return new errors.UnknownBatchError(msg, name, reason);
    case RC.REJECT_BATCH_CLOSED:
      return new errors.BatchClosedError(msg, name, reason);
    case RC.REJECT_BATCH_EXISTS:
      return new errors.BatchExistsError(msg, name, reason);
    default:
      return new errors.RejectedError(msg, name, reason);
  }
}

function toBytes(payload) {
  if (payload === undefined || payload === null) return Buffer.alloc(0);
  if (Buffer.isBuffer(payload)) return payload;
  if (payload instanceof Uint8Array) return Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength);
  if (typeof payload === "string") return Buffer.from(payload, "utf8");
  return Buffer.from(JSON.stringify(payload), "utf8");
}

function toHeaders(headers) {
  if (!headers) return undefined;
  const pairs = Array.isArray(headers)
    ? headers.map((h) => (Array.isArray(h) ? h : [h.key, h.value]))
    : Object.entries(headers);
  if (pairs.length === 0) return undefined;
  return pairs.map(([key, value]) => {
    if (!key) throw new errors.InvalidJobError("a header needs a key", "INVALID", "");
    return { key: String(key), value: String(value ?? "") };
  });
}

function u32(v, name) {
  if (v === undefined || v === null) return 0;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 0xffffffff)
    throw new errors.InvalidJobError(`${name} must be an integer in 0..2^32-1`, "INVALID", "");
  return n;
}

const PRIORITY_MIN = 0;
const PRIORITY_MAX = 9;

/**
 * A spec's priority (JobSpec.priority, the oneof priority_given): 0 (lowest)
 * to 9 (highest), or null when it gives none (undefined / null: not sent, the
 * broker's default 5). A number outside 0..9 or not an integer: RangeError;
 * anything but a number: TypeError. Both thrown before anything is sent.
 */
function priority(v) {
  if (v === undefined || v === null) return null;
  if (typeof v !== "number")
    throw new TypeError(`priority must be an integer from ${PRIORITY_MIN} to ${PRIORITY_MAX} (or undefined for the broker's default 5), not ${typeof v}`);
  if (!Number.isInteger(v) || v < PRIORITY_MIN || v > PRIORITY_MAX)
    throw new RangeError(`priority must be an integer from ${PRIORITY_MIN} (lowest) to ${PRIORITY_MAX} (highest), not ${v}`);
  return v;
}

/**
 * A spec's deadlineMs (JobSpec.deadline_ms): the broker wall clock, ms since the
 * epoch, as a number or a Date; undefined / null / 0: none (0 on the wire). A time
 * already past is sent as it is: the broker rejects it (InvalidJobError). Not a
 * number or Date: TypeError; negative, not an integer, beyond 2^53 or an invalid
 * Date: RangeError. Both thrown before anything is sent.
 */
function deadlineMs(v) {
  if (v === undefined || v === null) return null;
  let ms = v;
  if (v instanceof Date) {
    ms = v.getTime();
    if (Number.isNaN(ms)) throw new RangeError("deadlineMs is an invalid Date");
  } else if (typeof v !== "number") {
    throw new TypeError(`deadlineMs must be a number (ms since the epoch) or a Date, not ${typeof v}`);
  }
  if (!Number.isSafeInteger(ms) || ms < 0)
    throw new RangeError(`deadlineMs must be a whole number of ms since the epoch (>= 0), not ${ms}`);
  return ms === 0 ? null : ms;
}

/**
 * A spec's maxAgeMs (JobSpec.max_age_ms): ms counted from the job's acceptance,
 * 0..2^32-1 (about 49.7 days); undefined / null / 0: none. Not a number:
 * TypeError; negative, not an integer or above 2^32-1: RangeError.
 */
function maxAgeMs(v) {
  if (v === undefined || v === null) return null;
  if (typeof v !== "number") throw new TypeError(`maxAgeMs must be a number of ms, not ${typeof v}`);
  if (!Number.isInteger(v) || v < 0 || v > 0xffffffff)
    throw new RangeError(`maxAgeMs must be a whole number of ms from 0 to 2^32-1, not ${v}`);
  return v === 0 ? null : v;
}

/**
 * A spec's orderingKey (JobSpec.ordering_key): a string of 1 to 256 bytes in
 * UTF-8; undefined / null / "": none. Not a string: TypeError; longer:
 * RangeError.
 */
function orderingKey(v) {
  if (v === undefined || v === null || v === "") return null;
  if (typeof v !== "string") throw new TypeError(`orderingKey must be a string, not ${typeof v}`);
  if (Buffer.byteLength(v) > 256) throw new RangeError("orderingKey is longer than 256 bytes");
  return v;
}

const BATCH_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** `v` if it can name a batch; one to open may not be all digits (the broker's names). */
function batchId(v, what, opening = false) {
  if (typeof v !== "string" || !BATCH_ID.test(v))
    throw new errors.InvalidJobError(`${what} must be 1 to 128 characters of [A-Za-z0-9._:-]`, "INVALID", "");
  if (opening && /^[0-9]+$/.test(v))
    throw new errors.InvalidJobError(
      `${what} '${v}' is all digits: those name the batches the broker names (openBatch: true for one)`,
      "INVALID",
      "",
    );
  return v;
}

/** The BatchOpen of a spec (openBatch: an id, or true / "" for a broker-named one), or null. */
function batchOpen(spec) {
  const o = spec.openBatch;
  if (o === undefined || o === null || o === false) {
    if (spec.noCallback || spec.close)
      throw new errors.InvalidJobError("noCallback and close go with openBatch", "INVALID", "");
    return null;
  }
  const id = o === true || o === "" ? "" : batchId(o, "openBatch", true);
  return { batch_id: id, no_callback: !!spec.noCallback, close: !!spec.close };
}

function duration(ms) {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  return `${(ms / 1000).toFixed(ms >= 10000 ? 0 : 1)} s`;
}

/**
 * The jobs of one submitMany call: one promise for all of them, settled
 * when the last one is (no promise per job).
 */
class Group {
  constructor(n) {
    this.left = n;
    this.values = new Array(n);
    this.errors = null;
    this.promise = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }
  settle(index, err, value) {
    if (err) (this.errors ??= new Array(this.values.length))[index] = err;
    else this.values[index] = value;
    if (--this.left === 0) this.end();
  }
  /** Taking the specs stopped at `n` (a bad spec): only the first n count. */
  truncate(n) {
    this.left -= this.values.length - n;
    this.values.length = n;
    if (this.errors) this.errors.length = n;
  }
  end() {
    if (!this.errors) return this.resolve(this.values);
    let first = null;
    const results = new Array(this.values.length);
    for (let i = 0; i < results.length; i++) {
      const e = this.errors[i];
      if (e && !first) first = e;
      results[i] = e ? { error: e } : { jobId: this.values[i] };
    }
    first.results = results;
    this.reject(first);
  }
}

/**
 * A job taken and not finished. It is its own JobSpec on the wire: the
 * encoder reads the proto's field names (snake_case) and skips those that
 * are null, so a field left at its default is not sent; the camelCase
 * fields are this library's bookkeeping, which the encoder never looks at.
 */
class PendingJob {
  constructor(seq, spec, key, autoKey) {
    this.seq = seq;
    this.tenant = spec.tenant;
    this.lane = spec.lane;
    this.payload = toBytes(spec.payload);
    this.idempotency_key = key;
    this.generated_key = autoKey ? true : null;
    this.delay_ms = spec.delayMs ? u32(spec.delayMs, "delayMs") : null;
    this.max_attempts = spec.maxAttempts ? u32(spec.maxAttempts, "maxAttempts") : null;
    this.lease_ms = spec.leaseMs ? u32(spec.leaseMs, "leaseMs") : null;
    this.max_run_ms = spec.maxRunMs ? u32(spec.maxRunMs, "maxRunMs") : null;
    this.headers = spec.headers ? toHeaders(spec.headers) ?? null : null;
    this.batch = spec.batch ? batchId(spec.batch, "batch") : null;
    this.open_batch = batchOpen(spec);
    // set, 0 included, it is encoded (the oneof priority_given); null: not sent
    this.priority = priority(spec.priority);
    // the broker's deadline: the earliest of these and the lane's max_age; null: not sent
    this.deadline_ms = deadlineMs(spec.deadlineMs);
    this.max_age_ms = maxAgeMs(spec.maxAgeMs);
    // one at a time, in order, with this tenant's jobs of the lane with this key
    this.ordering_key = orderingKey(spec.orderingKey);
    this.size = this.payload.length + SPEC_OVERHEAD;
    this.state = S_QUEUED;
    this.cause = "new";
    this.autoKey = autoKey;
    this.block = true;
    this.detail = false;
    this.sends = 0;
    this.session = -1;
    this.submittedAt = 0;
    this.deadline = 0;
    this.code = 0;
    this.reason = "";
    this.retryTimer = null;
    this.group = null;
    this.index = 0;
    this.resolve = null;
    this.reject = null;
    this.promise = null;
  }
}

class Producer extends EventEmitter {
  /**
   * @param {object} opts
   *   endpoints: broker frontend(s), "tcp://a:5570,tcp://b:5570" or an array
   *   client: name sent in Hello; curve: {serverCert, clientCert};
   *   deadlineMs: per job, from the submit call (default 30000);
   *   maxBatch: specs per Submit frame (default 256); block: default for submit
   */
  constructor(opts = {}) {
    super();
    this._brokers = new EndpointList(opts.endpoints ?? opts.endpoint, "tcp://127.0.0.1:5570");
    this._curve = curveOptions(opts.curve);
    this._client = opts.client ?? "zlane-node-producer";
    this._deadlineMs = opts.deadlineMs ?? 30000;
    this._maxBatch = Math.max(1, opts.maxBatch ?? 256);
    this._block = opts.block ?? true;
    this._instance = instanceHex();

    this._jobs = new Map(); // seq -> job
    this._nextSeq = 1;
    this._liveCursor = 1; // every job below this seq is finished
    this._queue = []; // send queue of seqs (may hold stale ones)
    this._qHead = 0;
    this._nQueued = 0;

    this._sock = null;
    this._gen = 0; // socket generation: events of a closed socket are ignored
    this._session = 0; // session generation: a new Hello starts a new one
    this._endpoint = this._brokers.current();
    this._connected = false;
    this._helloPending = false;
    this._creditLimit = 0;
    this._sentSinceHello = 0;
    this._refused = "";
    this._lastError = "";
    this._redialAt = 0;
    this._redialMs = REDIAL_MIN_MS;
    this._downSince = Date.now();
    this._backoffMs = RECONNECT_IVL_MS;
    this._leave = false;
    this._leaveWhy = "";
    this._dialDue = false;
    this._dialAt = 0;
    this._dialDeadline = 0;
    this._lastRetryAfterMs = 100;
    this._pumpScheduled = false;
    this._blockedRetry = null;
    this._closed = false;
    this._readyWaiters = [];
    this._flushWaiters = [];
    this._closes = []; // closeBatch calls waiting for their Accepted.closed item
    this.stats = {
      submitted: 0,
      accepted: 0,
      rejected: 0,
      timedOut: 0,
      specsSent: 0,
      resent: 0,
      retried: 0,
      connects: 0,
      disconnects: 0,
      moves: 0,
    };

    this._open();
    if (this._brokers.roams()) this._dialDeadline = Date.now() + DIAL_TIMEOUT_MS;
    this._timer = setInterval(() => this._tick(), TICK_MS);
    this._timer.unref();
  }

  // ------------------------------------------------------------ public API

  /** The endpoint in use now. */
  get endpoint() {
    return this._endpoint;
  }
  /** True while a handshake with a broker holds. */
  get connected() {
    return this._connected;
  }
  /** Jobs taken whose promise has not settled yet. */
  get outstanding() {
    return this._jobs.size;
  }
  /** How many more jobs fit in the credit now. */
  get creditAvailable() {
    const room = this._creditRoom();
    return room > this._nQueued ? room - this._nQueued : 0;
  }
  /** The last problem in words, "" if none. */
  get lastError() {
    return this._lastError;
  }

  /**
   * Resolve once a broker granted credit (the session is up); reject with
   * TimeoutError after `timeoutMs` (default the job deadline).
   */
  ready(timeoutMs = this._deadlineMs) {
    if (this._closed) return Promise.reject(new errors.ClosedError("producer closed"));
    if (this._connected && this._creditLimit > 0) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const w = { resolve, reject };
      w.timer = setTimeout(() => {
        this._readyWaiters = this._readyWaiters.filter((x) => x !== w);
        reject(new errors.TimeoutError(`no credit from a broker within ${duration(timeoutMs)}: ${this._why()}`));
      }, timeoutMs);
      this._readyWaiters.push(w);
    });
  }

  /**
   * Submit one job. Resolves with its job id (a decimal string) once the
   * broker Accepted it (with {detail: true}: {jobId, duplicate,
   * idempotencyKey, sends}); rejects with a RejectedError subclass, a
   * QueueFullError ({block: false} and no credit, or QUEUE_FULL), or a
   * TimeoutError once the deadline passed.
   */
  submit(spec, opts = {}) {
    try {
      const job = this._take(spec, opts, null, 0);
      this._schedulePump();
      return job.promise;
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /**
   * Submit many jobs, pipelined: max_batch specs per Submit frame and as
   * many frames in flight as the credit allows. Resolves with their job ids
   * in order once every one was Accepted; rejects with the first failure
   * (error.results then holds each job's {jobId} or {error}).
   */
  submitMany(specs, opts = {}) {
    const list = Array.isArray(specs) ? specs : [...specs];
    if (list.length === 0) return Promise.resolve([]);
    const group = new Group(list.length);
    let i = 0;
    try {
      const now = Date.now();
      for (; i < list.length; i++) this._take(list[i], opts, group, i, now);
    } catch (e) {
      // the jobs taken before the bad one go on; this call reports the bad one
      this._schedulePump();
      group.truncate(i);
      group.promise.catch(() => {});
      if (i > 0 && group.left === 0) group.end();
      return Promise.reject(e);
    }
    this._schedulePump();
    return group.promise;
  }

  /**
   * Open a batch: submit `spec` as its callback job (run once the batch is
   * closed and settled, its job.batch the summary) and resolve with the
   * batch's id once Accepted. spec.batchId names it; without one the broker
   * does (the job id in decimal). spec.noCallback, spec.close as in submit.
   */
  async openBatch(spec = {}, opts = {}) {
    const { batchId: id, ...rest } = spec;
    const r = await this.submit({ ...rest, openBatch: id || true }, { ...opts, detail: true });
    return r.batchId;
  }

  /**
   * Close batch `id`: no job joins it from now on; it settles (its callback
   * runs) once every job of it has. Waits for every job taken before this
   * call to be answered, then for the broker to confirm the close (sent again
   * in a new session: a reconnect, a broker restart, a move to the leader;
   * closing a closed batch is no error). Rejects with BatchError when the
   * broker refused it (no such batch, another tenant's, cancelled), or
   * TimeoutError after timeoutMs (default the job deadline).
   */
  closeBatch(id, { timeoutMs = this._deadlineMs } = {}) {
    if (this._closed) return Promise.reject(new errors.ClosedError("producer closed"));
    try {
      batchId(id, "batch id");
    } catch (e) {
      return Promise.reject(e);
    }
    return new Promise((resolve, reject) => {
      const c = { batchId: id, mark: this._nextSeq, session: -1, resolve, reject, timer: null };
      c.timer = setTimeout(() => {
        this._closes = this._closes.filter((x) => x !== c);
        const why =
          c.session < 0 && this._earliestSeq() < c.mark
            ? "the jobs submitted before it were not answered"
            : this._connected
              ? `no answer from broker at ${this._endpoint}`
              : this._why();
        reject(new errors.TimeoutError(`batch '${id}' not closed within ${duration(timeoutMs)}: ${why}`, { sent: c.session >= 0 }));
      }, timeoutMs);
      this._closes.push(c);
      this._schedulePump();
    });
  }

  /** Resolve once every job taken so far has settled (or after timeoutMs: false). */
  flush(timeoutMs = -1) {
    if (this._jobs.size === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const w = { resolve };
      if (timeoutMs >= 0)
        w.timer = setTimeout(() => {
          this._flushWaiters = this._flushWaiters.filter((x) => x !== w);
          resolve(false);
        }, timeoutMs);
      this._flushWaiters.push(w);
    });
  }

  /**
   * Close the socket. Jobs still outstanding are rejected with ClosedError
   * (await flush() first to wait for them).
   */
  async close() {
    if (this._closed) return;
    this._closed = true;
    clearInterval(this._timer);
    if (this._blockedRetry) clearTimeout(this._blockedRetry);
    this._closeSocket();
    const err = new errors.ClosedError("producer closed before the broker answered");
    for (const job of this._jobs.values()) {
      if (job.retryTimer) clearTimeout(job.retryTimer);
      this._settleJob(job, err);
    }
    this._jobs.clear();
    for (const w of this._readyWaiters) {
      clearTimeout(w.timer);
      w.reject(err);
    }
    this._readyWaiters = [];
    for (const c of this._closes) {
      clearTimeout(c.timer);
      c.reject(new errors.ClosedError(`producer closed before the broker answered the close of batch '${c.batchId}'`));
    }
    this._closes = [];
    this._wakeFlush();
  }

  // ------------------------------------------------------------ taking jobs

  _take(spec, opts, group, index, now = Date.now()) {
    if (this._closed) throw new errors.ClosedError("producer closed");
    if (!spec || typeof spec !== "object") throw new errors.InvalidJobError("no job", "INVALID", "");
    if (!spec.tenant || typeof spec.tenant !== "string")
      throw new errors.InvalidJobError("a job needs a tenant", "INVALID", "");
    if (!spec.lane || typeof spec.lane !== "string")
      throw new errors.InvalidJobError("a job needs a lane", "INVALID", "");
    const block = opts.block ?? this._block;
    if (!block && this.creditAvailable === 0) {
      throw new errors.QueueFullError(
        `no credit from broker at ${this._endpoint}${this._connected ? " (queue full?)" : ": " + this._why()}`,
        this._lastRetryAfterMs,
        "NO_CREDIT",
      );
    }
    const seq = this._nextSeq;
    const userKey = spec.key ?? spec.idempotencyKey;
    const autoKey = !userKey;
    const job = new PendingJob(seq, spec, autoKey ? `${this._instance}-${seq}` : String(userKey), autoKey);
    job.block = block;
    job.detail = !!opts.detail;
    job.submittedAt = now;
    job.deadline = now + this._deadlineMs;
    job.group = group;
    job.index = index;
    if (!group)
      job.promise = new Promise((resolve, reject) => {
        job.resolve = resolve;
        job.reject = reject;
      });
    this._nextSeq++;
    this._jobs.set(seq, job);
    this._nQueued++;
    this._queue.push(seq);
    this.stats.submitted++;
    return job;
  }

  // ------------------------------------------------------------ state

  _creditRoom() {
    if (!this._connected || this._creditLimit <= this._sentSinceHello) return 0;
    return this._creditLimit - this._sentSinceHello;
  }

  _setState(job, state) {
    if (job.state === S_QUEUED) this._nQueued--;
    if (state === S_QUEUED) this._nQueued++;
    job.state = state;
  }

  /** The lowest seq of a job not finished (jobs are kept in seq order), or Infinity. */
  _earliestSeq() {
    const it = this._jobs.keys().next();
    return it.done ? Infinity : it.value;
  }

  _finish(job, err, result, duplicate, batch) {
    if (job.state === S_QUEUED) this._nQueued--;
    job.state = -1;
    if (job.retryTimer) clearTimeout(job.retryTimer);
    this._jobs.delete(job.seq);
    if (err) {
      if (err instanceof errors.TimeoutError) this.stats.timedOut++;
      else this.stats.rejected++;
      this._settleJob(job, err);
    } else {
      this.stats.accepted++;
      this._settleJob(
        job,
        null,
        job.detail
          ? { jobId: result, duplicate: !!duplicate, idempotencyKey: job.idempotency_key, sends: job.sends, batchId: batch || "" }
          : result,
      );
    }
    if (this._closes.length) this._schedulePump(); // a close may wait for this job
    if (this._jobs.size === 0) this._wakeFlush();
  }

  _settleJob(job, err, value) {
    if (job.group) job.group.settle(job.index, err, value);
    else if (err) job.reject(err);
    else job.resolve(value);
  }

  _wakeFlush() {
    if (this._jobs.size && !this._closed) return;
    const ws = this._flushWaiters;
    this._flushWaiters = [];
    for (const w of ws) {
      clearTimeout(w.timer);
      w.resolve(true);
    }
  }

  _why() {
    if (!this._connected) {
      const where = this._brokers.roams() ? this._brokers.text() : this._endpoint;
      return `broker unreachable at ${where} for ${duration(Date.now() - this._downSince)}${this._refused ? ": " + this._refused : ""}`;
    }
    return this._refused || this._lastError || "no credit (queue full?)";
  }

  // ------------------------------------------------------------ sending

  _schedulePump() {
    if (this._pumpScheduled || this._closed) return;
    this._pumpScheduled = true;
    setImmediate(() => {
      this._pumpScheduled = false;
      this._sendQueued();
    });
  }

  _send(kind, body) {
    // sendTimeout 0: the promise settles at once (EAGAIN when the socket
    // cannot take it); callers deal with a failure in its handler.
    return this._sock.send(proto.encode(kind, body));
  }

  _sendQueued() {
    if (!this._connected || !this._sock || this._closed || this._blockedRetry) return;
    if (this._helloPending) {
      this._helloPending = false;
      const session = this._session;
      this._send("hello", { client: this._client }).catch(() => {
        if (session === this._session && this._connected) {
          this._helloPending = true;
          this._retryBlocked();
        }
      });
    }
    if (this._closes.length) this._sendCloses();
    while (this._qHead < this._queue.length) {
      const room = this._creditRoom();
      if (room === 0) break;
      const limit = Math.min(room, this._maxBatch);
      const batch = [];
      const specs = [];
      let bytes = 0;
      while (this._qHead < this._queue.length && batch.length < limit) {
        const job = this._jobs.get(this._queue[this._qHead]);
        if (!job || job.state !== S_QUEUED) {
          this._qHead++;
          continue;
        }
        if (batch.length > 0 && bytes + job.size > BATCH_MAX_BYTES) break;
        bytes += job.size;
        batch.push(job);
        specs.push(job);
        this._qHead++;
      }
      if (batch.length === 0) break;
      const session = this._session;
      for (const job of batch) {
        if (job.cause === "resend") this.stats.resent++;
        else if (job.cause === "retry") this.stats.retried++;
        job.cause = "new";
        job.sends++;
        job.session = session;
        this._setState(job, S_INFLIGHT);
      }
      this._sentSinceHello += batch.length;
      this.stats.specsSent += batch.length;
      this._send("submit", { jobs: specs }).catch(() => {
        // not taken by the socket (its queue is full, or it closed): the jobs
        // go back to the queue, and the credit they used with them
        if (session !== this._session) return; // a new session resends them anyway
        this._sentSinceHello -= batch.length;
        for (const job of batch) {
          if (job.state === S_INFLIGHT && job.session === session) {
            this._setState(job, S_QUEUED);
            job.cause = "resend";
            this._queue.push(job.seq);
          }
        }
        this._retryBlocked();
      });
    }
    if (this._qHead > 4096 && this._qHead * 2 > this._queue.length) {
      this._queue = this._queue.slice(this._qHead);
      this._qHead = 0;
    }
  }

  // A Submit of only close_batches per closeBatch not sent in this session,
  // once every job taken before it was answered; it takes no credit.
  _sendCloses() {
    const earliest = this._earliestSeq();
    const session = this._session;
    for (const c of this._closes) {
      if (c.session === session || earliest < c.mark) continue;
      c.session = session;
      this._send("submit", { close_batches: [c.batchId] }).catch(() => {
        if (c.session !== session || session !== this._session) return;
        c.session = -1;
        this._retryBlocked();
      });
    }
  }

  _onClosed(items) {
    for (const item of items) {
      for (const c of this._closes.filter((x) => x.session >= 0 && x.batchId === item.batch_id)) {
        this._closes.splice(this._closes.indexOf(c), 1);
        clearTimeout(c.timer);
        if (item.ok) c.resolve();
        else c.reject(new errors.BatchError(item.batch_id, item.error || "refused"));
      }
    }
  }

  _retryBlocked() {
    if (this._blockedRetry || this._closed) return;
    this._blockedRetry = setTimeout(() => {
      this._blockedRetry = null;
      this._sendQueued();
    }, 5);
  }

  // ------------------------------------------------------------ socket

  _open() {
    const gen = ++this._gen;
    const sock = new zmq.Dealer({
      linger: 100,
      sendHighWaterMark: HWM,
      receiveHighWaterMark: HWM,
      reconnectInterval: RECONNECT_IVL_MS,
      reconnectMaxInterval: RECONNECT_IVL_MAX_MS,
      heartbeatInterval: HEARTBEAT_IVL_MS,
      heartbeatTimeout: HEARTBEAT_TIMEOUT_MS,
      heartbeatTimeToLive: HEARTBEAT_TIMEOUT_MS,
      // queue nothing for a peer that is not there: what was unsent when a
      // connection died is resent by us after our Hello, never ahead of it
      immediate: true,
      sendTimeout: 0,
      ...this._curve,
    });
    this._sock = sock;
    const ev = sock.events;
    const live = (fn) => (e) => {
      if (gen === this._gen && !this._closed) fn(e);
    };
    ev.on("handshake", live(() => this._onConnected()));
    ev.on("disconnect", live(() => this._onDisconnected()));
    ev.on("handshake:error:auth", live((e) => this._onRefused("auth", e)));
    ev.on("handshake:error:protocol", live((e) => this._onRefused("protocol", e)));
    ev.on("handshake:error:other", live((e) => this._onRefused("other", e)));
    ev.on("connect:retry", live(() => {
      // the dial failed (nothing listens): with several brokers, the next
      if (this._brokers.roams() && !this._connected && !this._leave) this._leaveForNext("nothing answers there");
    }));
    try {
      sock.connect(this._endpoint);
    } catch (e) {
      this._lastError = `cannot dial broker at ${this._endpoint}: ${e.message}`;
      this.emit("warning", this._lastError);
      this._leaveForNext("its endpoint is not valid");
      return;
    }
    this._recvLoop(sock, gen);
  }

  async _recvLoop(sock, gen) {
    try {
      for await (const frames of sock) {
        if (gen !== this._gen || this._closed) break;
        if (frames.length !== 1) continue; // the protocol is one frame per message
        let msg;
        try {
          msg = proto.decode(frames[0]);
        } catch {
          this.emit("warning", `ignoring an undecodable message from ${this._endpoint}`);
          continue;
        }
        this._onMessage(msg);
      }
    } catch {
      // the socket was closed
    }
  }

  _closeSocket() {
    this._gen++;
    if (this._sock) {
      try {
        this._sock.close();
      } catch {}
      this._sock = null;
    }
  }

  _onConnected() {
    this._connected = true;
    this._refused = "";
    this._redialAt = 0;
    this._redialMs = REDIAL_MIN_MS;
    this.stats.connects++;
    const resend = this._newSession();
    this._lastError = "";
    if (this.stats.connects > 1)
      this.emit("reconnect", { endpoint: this._endpoint, resending: resend });
    this._schedulePump();
  }

  _onDisconnected() {
    if (!this._connected) return;
    if (this._brokers.roams() && !this._leave) this._leaveForNext("the connection was lost");
    this._connected = false;
    this._helloPending = false;
    this._creditLimit = 0;
    this._sentSinceHello = 0;
    this._session++;
    this._downSince = Date.now();
    this.stats.disconnects++;
    this._lastError = `lost connection to broker at ${this._endpoint}`;
    this.emit("disconnect", { endpoint: this._endpoint, outstanding: this._jobs.size });
  }

  _onRefused(kind, e) {
    // a broken connection says less than a refusal already known
    if (kind === "other" && this._refused) return;
    const curve = !!this._curve.curveServerKey;
    let why;
    if (kind === "auth")
      why = `the broker refused this client's CURVE key (ZAP status ${e?.error?.status ?? "?"}): is its public certificate in the broker's clients directory?`;
    else if (kind === "other")
      why = `the ${curve ? "CURVE" : "plaintext"} handshake failed (${e?.error?.message ?? "?"})${curve ? ": is the server certificate the broker's?" : ": the broker probably requires CURVE"}`;
    else if (/MECHANISM_MISMATCH/i.test(e?.error?.code ?? ""))
      why = curve ? "the broker does not use CURVE but this client does" : "the broker requires CURVE (a server and a client certificate)";
    else why = `the ${curve ? "CURVE" : "plaintext"} handshake failed (${e?.error?.code ?? e?.error?.message ?? "protocol error"})`;
    const again = why === this._refused;
    this._refused = why;
    if (kind !== "other" && !this._redialAt) {
      this._redialAt = Date.now() + this._redialMs;
      this._redialMs = Math.min(REDIAL_MAX_MS, this._redialMs * 2);
    }
    this._lastError = `handshake with ${this._endpoint} failed: ${why}`;
    if (!again) this.emit("warning", this._lastError);
  }

  // ------------------------------------------------------------ several brokers

  _leaveForNext(why) {
    if (this._leave) return;
    this._brokers.next();
    this._leave = true;
    this._leaveWhy = why;
    setImmediate(() => this._doLeave());
  }

  _doLeave() {
    if (!this._leave || this._closed) return;
    if (this._connected) this._onDisconnected();
    this._closeSocket();
    this._leave = false;
    this._redialAt = 0;
    this._dialDeadline = 0;
    const delay = jitter(this._backoffMs);
    this._backoffMs = Math.min(RECONNECT_IVL_MAX_MS, this._backoffMs * 2);
    const from = this._endpoint;
    this._endpoint = this._brokers.current();
    this.emit("move", { from, to: this._endpoint, why: this._leaveWhy, delayMs: delay });
    this._dialDue = true;
    this._dialAt = Date.now() + delay;
    this.stats.moves++;
  }

  // ------------------------------------------------------------ receiving

  _onMessage({ kind, body }) {
    const serves =
      kind === "accepted" ||
      kind === "credit" ||
      (kind === "rejected" && !(body.jobs.length && body.jobs[0].code === RC.REJECT_UNAVAILABLE));
    if (serves) this._backoffMs = RECONNECT_IVL_MS;
    this._dialDeadline = 0;
    switch (kind) {
      case "hello":
      case "submit":
        // our own words: a dial to a closed loopback port met its own port
        this.emit("warning", `the peer at ${this._endpoint} is not a broker (it sent us ${kind})`);
        this._leaveForNext("not a broker");
        break;
      case "accepted":
        for (const a of body.jobs) {
          const job = this._jobs.get(proto.u64Number(a.seq));
          if (!job) continue;
          // a generated key is this instance's own: the broker saw it only from our earlier send
          this._finish(job, null, proto.u64String(a.job_id), a.duplicate && !job.autoKey, a.batch_id);
        }
        if (body.closed && body.closed.length) this._onClosed(body.closed);
        break;
      case "rejected":
        this._onRejected(body);
        break;
      case "credit": {
        const limit = proto.u64Number(body.limit);
        if (this._connected && limit > this._creditLimit) {
          this._creditLimit = limit;
          const ws = this._readyWaiters;
          this._readyWaiters = [];
          for (const w of ws) {
            clearTimeout(w.timer);
            w.resolve();
          }
        }
        break;
      }
      case "error":
        this._onError(body);
        break;
      default:
        break;
    }
    this._schedulePump();
  }

  _onRejected(body) {
    if (body.jobs.length && body.jobs[0].code === RC.REJECT_UNAVAILABLE && this._brokers.roams())
      this._leaveForNext("its database does not answer");
    for (const r of body.jobs) {
      const job = this._jobs.get(proto.u64Number(r.seq));
      if (!job) continue;
      const code = r.code;
      const retryAfter = r.retry_after_ms || 0;
      if (code === RC.REJECT_QUEUE_FULL && retryAfter) this._lastRetryAfterMs = retryAfter;
      const full = code === RC.REJECT_QUEUE_FULL || code === RC.REJECT_STORE_FULL;
      if (!RETRYABLE.has(code) || (full && !job.block)) {
        this._finish(job, rejectError(code, r.reason, retryAfter));
        continue;
      }
      job.code = code;
      job.reason = r.reason;
      // only a job on the wire waits for a retry; a queued one is on its way back
      if (job.state === S_INFLIGHT) {
        this._setState(job, S_RETRY);
        const delay = Math.max(retryAfter, RETRY_MIN_MS);
        job.retryTimer = setTimeout(() => {
          job.retryTimer = null;
          if (job.state !== S_RETRY || this._closed) return;
          this._setState(job, S_QUEUED);
          job.cause = "retry";
          this._queue.push(job.seq);
          this._schedulePump();
        }, delay);
      }
    }
  }

  _onError(e) {
    const name = proto.ErrorCodeName[e.code] || `ERROR_${e.code}`;
    this._lastError = `broker at ${this._endpoint} reported ${name}: ${e.message}`;
    if (e.code === EC.ERROR_NOT_LEADER) {
      // a standby took nothing: go to the leader it names, or the next broker
      if (this._leave) return;
      this._brokers.follow(e.leader_endpoints);
      this._leave = true;
      this._leaveWhy = "it is not the leader";
      setImmediate(() => this._doLeave());
      return;
    }
    if (e.code === EC.ERROR_UNAVAILABLE) {
      this._leaveForNext("its database does not answer");
      return;
    }
    this.emit("warning", this._lastError);
    if (e.code === EC.ERROR_NOT_READY && this._connected) {
      // the broker has no session for us: Hello again, resend what is unanswered
      this._newSession();
    }
    if (e.code === EC.ERROR_UNAUTHORIZED) this._refused = `${name}: ${e.message}`;
  }

  // A new session: Hello, credit from zero, every job neither finished nor
  // waiting for a retry back in the send queue in seq order, under its key.
  _newSession() {
    this._session++;
    this._helloPending = true;
    this._creditLimit = 0;
    this._sentSinceHello = 0;
    this._queue = [];
    this._qHead = 0;
    let resend = 0;
    for (let seq = this._liveCursor; seq < this._nextSeq; seq++) {
      const job = this._jobs.get(seq);
      if (!job || (job.state !== S_QUEUED && job.state !== S_INFLIGHT)) continue;
      if (job.state === S_INFLIGHT) {
        this._setState(job, S_QUEUED);
        job.cause = "resend";
        resend++;
      }
      this._queue.push(seq);
    }
    return resend;
  }

  // ------------------------------------------------------------ timers

  _tick() {
    if (this._closed) return;
    const now = Date.now();
    if (this._dialDue && now >= this._dialAt) {
      this._dialDue = false;
      this._open();
      this._dialDeadline = this._brokers.roams() ? now + DIAL_TIMEOUT_MS : 0;
    }
    if (this._dialDeadline && now >= this._dialDeadline && !this._leave) {
      this._dialDeadline = 0;
      this._leaveForNext("no answer in time");
    }
    if (this._redialAt && now >= this._redialAt && this._sock && !this._leave) {
      // ZeroMQ does not retry a refused handshake, but the broker may admit
      // us now (it reloads its clients directory): dial again, or the next
      this._redialAt = 0;
      if (this._brokers.roams()) this._leaveForNext("its handshake failed");
      else {
        try {
          this._sock.disconnect(this._endpoint);
          this._sock.connect(this._endpoint);
        } catch {}
      }
    }
    // deadlines never decrease with seq: the lowest unfinished job expires first
    while (this._liveCursor < this._nextSeq) {
      const job = this._jobs.get(this._liveCursor);
      if (job) {
        if (job.deadline > now) break;
        this._finish(job, this._timeoutError(job, now));
      }
      this._liveCursor++;
    }
  }

  _timeoutError(job, now) {
    let why;
    const took = duration(now - job.submittedAt);
    if (!this._connected)
      why = `${this._why()}${job.sends ? " (the job was sent; it may have been accepted)" : ""}`;
    else if (job.state === S_INFLIGHT)
      why = `no reply from broker at ${this._endpoint} within ${took} (the job may have been accepted)`;
    else if (job.state === S_RETRY)
      why = `still refused by broker at ${this._endpoint} after ${took}: ${proto.RejectCodeName[job.code]}: ${job.reason}`;
    else why = `no credit from broker at ${this._endpoint} for ${took}${this._refused ? ": " + this._refused : " (queue full?)"}`;
    return new errors.TimeoutError(`job ${job.seq} timed out: ${why}`, {
      sent: job.sends > 0,
      idempotencyKey: job.idempotency_key,
    });
  }
}

module.exports = { Producer };
