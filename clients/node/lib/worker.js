"use strict";
// Worker: the backend protocol as worker/zlane_worker.c speaks it.
//
// One DEALER to one broker at a time. Ready (lanes, capacity, instance) first
// and again after every reconnect; Dispatch -> held (backlog) -> a handler
// runs it (at most `concurrency` at once) -> a pending settlement (Ack or
// Nack) -> Settled from the broker (or a refusal) -> forgotten. Held jobs are
// extended at half their lease; heartbeats flow both ways (each stating its
// interval: Ready.heartbeat_ms, Heartbeat.interval_ms), and a broker silent for
// liveness x the longer of the two intervals is left (the next of the list, round robin,
// or the same again) after a full-jitter backoff: every held job's signal is
// aborted (its lease is presumed lost), Ready is sent again with the same
// instance and every lease the worker knows of (held_listed, held: the broker
// makes the old connection's others, Dispatches lost with it, ready again),
// and every unconfirmed settlement is resent with its lease token; the
// broker's fencing decides whether it still counts.
const { EventEmitter } = require("node:events");
const os = require("node:os");
const crypto = require("node:crypto");
const zmq = require("zeromq");
const proto = require("./proto");
const { EndpointList, curveOptions, jitter, sanitizeText } = require("./common");
const errors = require("./errors");

const READY_HELD_MAX = 100000; // leases a Ready lists at most
const HEARTBEAT_STATED_MAX_MS = 60000; // a longer interval stated by the broker counts as this

const EC = proto.ErrorCode;
const FC = proto.FailureClass;
const FENCED = new Set([EC.ERROR_STALE_LEASE, EC.ERROR_UNKNOWN_JOB, EC.ERROR_NOT_HOLDER, EC.ERROR_CANCELLED]);
const ERROR_MAX = 1023; // bytes of a Nack's error text

/** A cancellation reason, as AbortSignal.reason. */
class JobCancelledError extends errors.ZlaneError {
  constructor(why) {
    super(`job cancelled: ${why}`, "CANCELLED");
    this.why = why;
  }
}

function headersObject(list) {
  const out = {};
  if (list) for (let i = 0; i < list.length; i++) out[list[i].key] = list[i].value;
  return out;
}

const EMPTY = Buffer.alloc(0);
const BatchInfo = proto.T("BatchInfo");

/**
 * A job as a handler sees it. `payload` is a view into the Dispatch frame
 * (no copy); `signal` is made on first use (most handlers never look).
 */
class Job {
  #held;
  constructor(j, held) {
    this.#held = held;
    this.id = proto.u64String(j.job_id);
    this.attempt = j.attempt;
    this.tenant = j.tenant;
    this.lane = j.lane;
    const p = j.payload;
    this.payload = Buffer.isBuffer(p) ? p : p && p.length ? Buffer.from(p) : EMPTY;
    this.headers = headersObject(j.headers);
    this.idempotencyKey = j.idempotency_key;
    this.leaseMs = j.lease_ms;
    this.maxRunMs = j.max_run_ms;
    this.maxAttempts = j.max_attempts;
    this.enqueuedAt = proto.u64Number(j.enqueued_at_ms);
    // a batch's callback job: the batch as it settled (counts, failed ids)
    this.batch = j.batch ? proto.plain(BatchInfo, j.batch) : undefined;
    this.orderingKey = j.ordering_key || "";
    // the last progress checkpoint an earlier attempt saved (saveCheckpoint), or null
    this.checkpoint = j.checkpoint && j.checkpoint.length ? Buffer.from(j.checkpoint) : null;
  }
  /**
   * Save this job's progress: `data` (a Buffer/Uint8Array, or a string as UTF-8; at most
   * the broker's max_checkpoint, 64 KiB by default) goes to the broker in an Extend at
   * once (before the job's Ack or Nack), is stored with the job, and a later attempt
   * gets it as job.checkpoint if this one does not finish. Empty: RangeError.
   */
  saveCheckpoint(data) {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data);
    if (!bytes.length) throw new RangeError("a checkpoint is at least one byte");
    this.#held.saveCheckpoint(bytes);
  }
  /** An AbortSignal, aborted when the lease is lost, the max run time passed, or on a forced stop. */
  get signal() {
    return this.#held.signal();
  }
  text() {
    return this.payload.toString("utf8");
  }
  json() {
    return JSON.parse(this.payload.toString("utf8"));
  }
}

/**
 * An Ack or a Nack waiting for the broker's Settled. It is its own AckItem
 * or NackItem on the wire (the proto's field names; the encoder reads only
 * those of the item type and skips nulls).
 */
class Settlement {
  constructor(h, ack, cls, error, retryAfterMs, runUs) {
    this.job_id = h.jobId;
    this.lease = h.lease;
    this.run_us = runUs;
    this.class = ack ? null : cls;
    this.error = ack ? null : error;
    this.retry_after_ms = ack || !retryAfterMs ? null : retryAfterMs;
    this.ack = ack;
    this.counted = false;
  }
}

/** A job this worker holds: its lease, its timers, its cancellation. */
class Held {
  constructor(key, j, nextExtend, maxRunAt) {
    this.key = key;
    this.jobId = j.job_id;
    this.lease = j.lease;
    this.leaseMs = j.lease_ms;
    this.attempt = j.attempt;
    this.running = false;
    this.nextExtend = nextExtend;
    this.maxRunAt = maxRunAt;
    this.aborted = false;
    this.reason = undefined;
    this.ac = null;
    this.job = new Job(j, this);
  }
  signal() {
    if (!this.ac) {
      this.ac = new AbortController();
      if (this.aborted) this.ac.abort(this.reason);
    }
    return this.ac.signal;
  }
  saveCheckpoint(bytes) {
    if (!this.worker) throw new Error("this job is not held by a worker");
    this.worker._saveCheckpoint(this, bytes);
  }
  abort(reason) {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    if (this.ac) this.ac.abort(reason);
  }
}

class Worker extends EventEmitter {
  /**
   * @param {object} opts
   *   endpoints: broker backend(s), "tcp://a:5571,tcp://b:5571" or an array
   *   name: default "<hostname>-<pid>"; concurrency: handlers at once (default 1)
   *   prefetch: jobs held beyond concurrency (default 0)
   *   handlers: {lane: async (job) => {...}} (or worker.handle(lane, fn))
   *   heartbeatMs (1000), liveness (3), reconnectMinMs (100), reconnectMaxMs (5000)
   *   drainMs: after stop(), how long running jobs may finish (30000)
   *   curve: {serverCert, clientCert}; stopSignals: e.g. ["SIGTERM", "SIGINT"]
   */
  constructor(opts = {}) {
    super();
    this._brokers = new EndpointList(opts.endpoints ?? opts.endpoint, "tcp://127.0.0.1:5571");
    this._curve = curveOptions(opts.curve);
    this.name = opts.name || `${os.hostname()}-${process.pid}`;
    this._concurrency = opts.concurrency ?? 1;
    if (!Number.isInteger(this._concurrency) || this._concurrency < 1)
      throw new errors.ConfigError("concurrency must be an integer >= 1");
    this._prefetch = opts.prefetch ?? 0;
    if (!Number.isInteger(this._prefetch) || this._prefetch < 0)
      throw new errors.ConfigError("prefetch must be an integer >= 0");
    this._heartbeatMs = opts.heartbeatMs ?? 1000;
    this._liveness = opts.liveness ?? 3;
    this._reconnectMinMs = opts.reconnectMinMs ?? 100;
    this._reconnectMaxMs = opts.reconnectMaxMs ?? 5000;
    this._drainMs = opts.drainMs ?? 30000;
    this._extend = opts.extend ?? true;
    this._handlers = new Map();
    for (const [lane, fn] of Object.entries(opts.handlers || {})) this.handle(lane, fn);
    for (const lane of opts.lanes || []) if (!this._handlers.has(lane)) this._handlers.set(lane, null);
    this._defaultHandler = opts.handler || null;
    this._stopSignals = opts.stopSignals || [];

    // random, nonzero, the same in every Ready of this worker
    let inst;
    do inst = proto.Long.fromBytesLE([...crypto.randomBytes(8)], true);
    while (inst.isZero());
    this.instance = inst;

    this._sock = null;
    this._gen = 0;
    this._started = false;
    this._needReady = false;
    this._lastHeard = 0;
    this._listeningSince = 0; // the end of the last busy spell (a late tick)
    this._brokerHeartbeatMs = 0; // the interval this connection's broker states
    this._lastSent = 0;
    this._reconnectAt = 0;
    this._backoffMs = this._reconnectMinMs;
    this._leave = null; // null, "not_leader", "not_broker", "unavailable"
    this._held = new Map(); // "id:lease" -> held job
    this._backlog = [];
    this._running = 0;
    this._unsent = new Map(); // "id:lease" -> settlement, in insertion order
    this._sent = new Map();
    this._extends = [];
    this._flushScheduled = false;
    this._draining = false;
    this._drainCancelled = false;
    this._drainDeadline = 0;
    this._lingerDeadline = 0;
    this._stopped = false;
    this._timer = null;
    this._signalHandlers = [];
    this.stats = { received: 0, acked: 0, nacked: 0, settled: 0, refused: 0, extendsSent: 0, leaseLost: 0, reconnects: 0, cancelled: 0 };
    this.closed = new Promise((resolve) => (this._resolveClosed = resolve));
  }

  /** Register the handler for `lane` (an async function of the job). Returns this. */
  handle(lane, fn) {
    if (!lane || typeof lane !== "string") throw new errors.ConfigError("a lane name is required");
    if (typeof fn !== "function") throw new errors.ConfigError("a handler must be a function");
    const added = !this._handlers.has(lane);
    this._handlers.set(lane, fn);
    if (added && this._started && !this._draining) {
      this._needReady = true;
      this._scheduleFlush();
    }
    return this;
  }

  get lanes() {
    return [...this._handlers.keys()];
  }

  /**
   * Connect and serve. Returns this at once; `worker.closed` resolves once
   * the worker stopped (after stop() drained it).
   */
  start() {
    if (this._started) return this;
    if (this._handlers.size === 0) throw new errors.ConfigError("at least one lane (a handler) is required");
    for (const [lane, fn] of this._handlers)
      if (!fn && !this._defaultHandler) throw new errors.ConfigError(`no handler for lane '${lane}'`);
    this._started = true;
    for (const sig of this._stopSignals) {
      let n = 0;
      const h = () => {
        n++;
        this.emit("signal", sig);
        this.stop({ force: n > 1 }).catch(() => {});
      };
      process.on(sig, h);
      this._signalHandlers.push([sig, h]);
    }
    this._connect(Date.now());
    this._tickMs = Math.max(10, Math.min(100, this._heartbeatMs / 4));
    this._lastTick = Date.now();
    this._timer = setInterval(() => this._tick(), this._tickMs);
    return this;
  }

  /**
   * Stop: Ready with capacity 0 (the broker sends nothing new), hand back
   * what has not started (THROTTLED Nack), let running handlers finish for up
   * to drainMs, then abort their signals; settle everything, wait for the
   * broker's Settled (at most liveness x heartbeat), close. {force: true}
   * aborts running handlers at once. Resolves when stopped.
   */
  stop({ force = false } = {}) {
    if (!this._started) {
      this._started = true;
      this._finishStop();
      return this.closed;
    }
    if (!this._draining) this._beginDrain(Date.now());
    if (force && !this._drainCancelled) {
      this._drainCancelled = true;
      this._cancelAll("worker shutting down");
    }
    this._tick();
    return this.closed;
  }

  // ------------------------------------------------------------ connection

  _connect(now) {
    const gen = ++this._gen;
    const endpoint = this._brokers.current();
    const sock = new zmq.Dealer({ linger: 0, sendTimeout: 0, ...this._curve });
    try {
      sock.connect(endpoint);
    } catch (e) {
      sock.close();
      this.emit("warning", `cannot connect to ${endpoint}: ${e.message}`);
      return false;
    }
    this._sock = sock;
    this._needReady = true;
    this._lastHeard = now;
    this._brokerHeartbeatMs = 0;
    this._lastSent = now;
    this._markUnsent();
    this.emit("connecting", endpoint);
    this._recvLoop(sock, gen);
    this._scheduleFlush();
    return true;
  }

  async _recvLoop(sock, gen) {
    try {
      for await (const frames of sock) {
        if (gen !== this._gen) break;
        this._lastHeard = Date.now(); // any frame shows the broker is alive
        if (frames.length !== 1) {
          this.emit("warning", "multi-frame message from broker, ignored");
          continue;
        }
        let msg;
        try {
          msg = proto.decode(frames[0]);
        } catch {
          this.emit("warning", "undecodable frame from broker, ignored");
          continue;
        }
        this._onMessage(msg);
      }
    } catch {
      // closed
    }
  }

  _disconnect(now) {
    const was = this._brokers.current();
    const why = this._leave;
    this._leave = null;
    if (why !== "not_leader") this._brokers.next(); // one endpoint: the same again
    this._gen++;
    try {
      this._sock.close();
    } catch {}
    this._sock = null;
    this._extends = [];
    this.stats.reconnects++;
    this._cancelAll("the broker connection was lost");
    const delay = jitter(this._backoffMs);
    this._backoffMs = Math.min(this._reconnectMaxMs, this._backoffMs * 2);
    this._reconnectAt = now + delay;
    this.emit("disconnect", { endpoint: was, next: this._brokers.current(), why: why || "silent", delayMs: delay });
  }

  _send(kind, body, now = Date.now()) {
    if (!this._sock) return false;
    this._sock.send(proto.encode(kind, body)).catch(() => {
      // not taken (the queue to the broker is full, or the socket closed):
      // settlements stay pending and go out again after a reconnect
    });
    this._lastSent = now;
    return true;
  }

  // ------------------------------------------------------------ messages

  _onMessage({ kind, body }) {
    if (
      kind === "dispatch" ||
      kind === "settled" ||
      kind === "heartbeat" ||
      (kind === "error" && body.code !== EC.ERROR_NOT_LEADER && body.code !== EC.ERROR_UNAVAILABLE)
    )
      this._backoffMs = this._reconnectMinMs; // a broker that serves
    switch (kind) {
      case "dispatch":
        this._onDispatch(body);
        break;
      case "settled":
        for (const it of body.items) {
          const k = proto.leaseKey(it.job_id, it.lease);
          if (this._sent.delete(k) || this._unsent.delete(k)) this.stats.settled++;
        }
        this._checkFinished();
        break;
      case "error":
        this._onError(body);
        break;
      case "cancel":
        for (const it of body.items) this._onCancel(proto.leaseKey(it.job_id, it.lease));
        break;
      case "heartbeat":
        this._brokerHeartbeatMs = Math.min(body.interval_ms || 0, HEARTBEAT_STATED_MAX_MS);
        break;
      case "ready":
      case "ack":
      case "nack":
      case "extend":
        // our own words: connected to ourselves, no broker there
        if (!this._leave) {
          this.emit("warning", `${this._brokers.current()} is not a broker (it sent us ${kind})`);
          this._leave = "not_broker";
        }
        break;
      default:
        break;
    }
  }

  _onDispatch(d) {
    const now = Date.now();
    for (const j of d.jobs) {
      this.stats.received++;
      const key = proto.leaseKey(j.job_id, j.lease);
      if (this._held.has(key)) continue; // dispatched twice
      const h = new Held(key, j, this._extend && j.lease_ms >= 2 ? now + j.lease_ms / 2 : 0, j.max_run_ms ? now + j.max_run_ms : 0);
      h.worker = this;
      this._held.set(key, h);
      if (this._draining) this._handBack(h, FC.FAILURE_THROTTLED, "worker shutting down");
      else this._backlog.push(h);
    }
    this._startJobs();
  }

  _onError(e) {
    if (e.items && e.items.length) {
      for (const it of e.items) this._onItemError(it.code, it.job_id, it.lease);
      return;
    }
    switch (e.code) {
      case EC.ERROR_NOT_LEADER:
        if (this._leave) return;
        this._brokers.follow(e.leader_endpoints);
        this._leave = "not_leader";
        return;
      case EC.ERROR_UNAVAILABLE:
        if (!this._leave) this._leave = "unavailable";
        return;
      case EC.ERROR_NOT_READY:
        // the broker does not know us (it restarted): Ready again, resend
        this._needReady = true;
        this._scheduleFlush();
        return;
      case EC.ERROR_STALE_LEASE:
      case EC.ERROR_UNKNOWN_JOB:
      case EC.ERROR_NOT_HOLDER:
      case EC.ERROR_CANCELLED:
      case EC.ERROR_MAX_RUN:
        this._onItemError(e.code, e.job_id, e.lease);
        return;
      default:
        this.emit("warning", `broker error ${proto.ErrorCodeName[e.code]}: ${e.message}`);
    }
  }

  // The broker cancelled a job this worker holds (zlane-ctl cancel): its
  // signal is aborted (JobCancelledError "cancelled by the broker"), and
  // nothing is settled for it: the broker ended it already, and would refuse
  // a late Ack or Nack with CANCELLED.
  _onCancel(key) {
    const h = this._held.get(key);
    if (!h) {
      // settled already, not yet confirmed: that settlement will be refused
      if (this._sent.delete(key) || this._unsent.delete(key)) this.stats.cancelled++;
      this._checkFinished();
      return;
    }
    h.cancelled = true;
    h.nextExtend = 0;
    h.maxRunAt = 0;
    this.stats.cancelled++;
    if (!h.aborted) h.abort(new JobCancelledError("cancelled by the broker"));
    if (!h.running) {
      // still in the backlog: never started
      this._held.delete(key);
      const i = this._backlog.indexOf(h);
      if (i >= 0) this._backlog.splice(i, 1);
      this._checkFinished();
    }
  }

  _onItemError(code, jobId, lease) {
    const key = proto.leaseKey(jobId, lease);
    const fenced = FENCED.has(code);
    if (!fenced && code !== EC.ERROR_MAX_RUN) return;
    if (fenced && (this._sent.has(key) || this._unsent.has(key))) {
      this._sent.delete(key);
      this._unsent.delete(key);
      this.stats.refused++;
      this.emit("warning", `job ${proto.u64String(jobId)}: settlement refused by broker (${proto.ErrorCodeName[code]})`);
      this._checkFinished();
      return;
    }
    const h = this._held.get(key);
    if (!h || h.aborted) return;
    if (code === EC.ERROR_MAX_RUN) {
      if (!h.nextExtend) return;
      h.nextExtend = 0;
      if (!h.maxRunAt) h.maxRunAt = Date.now() + h.leaseMs;
      return;
    }
    h.abort(new JobCancelledError("lease lost"));
    h.nextExtend = 0;
    this.stats.leaseLost++;
  }

  // ------------------------------------------------------------ running jobs

  _startJobs() {
    if (this._draining) return;
    while (this._running < this._concurrency && this._backlog.length) {
      const h = this._backlog.shift();
      if (h.aborted) {
        this._handBack(h, FC.FAILURE_TRANSIENT, h.reason?.why || "cancelled");
        continue;
      }
      this._run(h);
    }
  }

  async _run(h) {
    h.running = true;
    this._running++;
    const fn = this._handlers.get(h.job.lane) || this._defaultHandler;
    const start = performance.now();
    let err = null;
    try {
      if (!fn) throw new errors.PermanentError(`no handler for lane '${h.job.lane}'`);
      await fn(h.job);
    } catch (e) {
      err = e ?? new Error("handler threw " + e);
    }
    const us = Math.round((performance.now() - start) * 1000);
    const runUs = us > 0 ? us : 1; // 0 on the wire means "not measured"
    this._running--;
    h.running = false;
    this._held.delete(h.key);
    if (h.cancelled) {
      // the broker ended it (Cancel): nothing to settle
      this.emit("cancelled", h.job);
      this._checkFinished();
      this._startJobs();
      return;
    }
    if (!err) this._unsent.set(h.key, new Settlement(h, true, 0, "", 0, runUs));
    else if (err instanceof errors.PermanentError || err?.code === "FAILURE_PERMANENT")
      this._settle(h, { cls: FC.FAILURE_PERMANENT, error: err.message, runUs });
    else if (err instanceof errors.ThrottledError || err?.code === "FAILURE_THROTTLED")
      this._settle(h, { cls: FC.FAILURE_THROTTLED, error: err.message, retryAfterMs: err.retryAfterMs ?? 1000, runUs });
    else if (err instanceof errors.NotYetError || err?.code === "FAILURE_NOT_YET")
      // not an attempt spent; 0 ms: the broker's default delay
      this._settle(h, { cls: FC.FAILURE_NOT_YET, error: err.message, retryAfterMs: Math.min(0xffffffff, Math.max(0, Math.round(err.retryAfterMs || 0))), runUs });
    else this._settle(h, { cls: FC.FAILURE_TRANSIENT, error: (err && (err.stack || err.message)) || String(err), runUs });
    this.emit(err ? "failed" : "completed", h.job, err);
    this._startJobs();
    this._scheduleFlush();
  }

  _settle(h, { ack = false, cls = 0, error = "", retryAfterMs = 0, runUs = 0 }) {
    this._unsent.set(h.key, new Settlement(h, ack, cls, ack ? "" : sanitizeText(error, ERROR_MAX), retryAfterMs, runUs));
  }

  _handBack(h, cls, why) {
    this._held.delete(h.key);
    this._settle(h, { cls, error: why });
    this._scheduleFlush();
  }

  _cancelAll(why) {
    for (const h of this._held.values()) {
      h.nextExtend = 0;
      h.maxRunAt = 0;
      if (!h.aborted) h.abort(new JobCancelledError(why));
    }
  }

  _markUnsent() {
    if (!this._sent.size) return;
    const all = new Map([...this._sent, ...this._unsent]);
    this._sent.clear();
    this._unsent = all;
  }

  // ------------------------------------------------------------ flush and timers

  _saveCheckpoint(h, bytes) {
    if (!this._sock || !this._held.has(h.key)) return; // the lease is gone: nothing to save
    this._extends.push({ job_id: h.jobId, lease: h.lease, lease_ms: h.leaseMs, checkpoint: bytes });
    this._scheduleFlush();
  }

  _scheduleFlush() {
    if (this._flushScheduled) return;
    this._flushScheduled = true;
    setImmediate(() => {
      this._flushScheduled = false;
      this._flush(Date.now());
    });
  }

  _flush(now) {
    if (!this._sock) return;
    if (this._needReady) {
      this._needReady = false;
      const capacity = this._draining ? 0 : this._concurrency + this._prefetch;
      // every lease this worker knows of (held, or settled and not yet Settled): after a
      // reconnect the broker makes the old connection's other leases (lost Dispatches) ready
      const held = new Map();
      for (const m of [this._held, this._unsent, this._sent]) {
        for (const [k, x] of m) held.set(k, { job_id: x.jobId ?? x.job_id, lease: x.lease });
      }
      const listed = held.size <= READY_HELD_MAX; // else every lease follows (one frame)
      this._send("ready", {
        name: this.name, lanes: this.lanes, capacity, instance: this.instance,
        held: listed ? [...held.values()] : [], held_listed: listed,
        heartbeat_ms: Math.round(this._heartbeatMs),
      }, now);
      this._markUnsent(); // what came before Ready may be lost
    }
    if (this._extends.length) { // first: a checkpoint goes before its job's Ack or Nack
      this._send("extend", { items: this._extends }, now);
      this.stats.extendsSent += this._extends.length;
      this._extends = [];
    }
    if (this._unsent.size) {
      const acks = [];
      const nacks = [];
      for (const s of this._unsent.values()) {
        (s.ack ? acks : nacks).push(s); // an AckItem or NackItem as it is
        if (!s.counted) {
          s.counted = true;
          if (s.ack) this.stats.acked++;
          else this.stats.nacked++;
        }
      }
      if (acks.length) this._send("ack", { items: acks }, now);
      if (nacks.length) this._send("nack", { items: nacks }, now);
      for (const [k, s] of this._unsent) this._sent.set(k, s);
      this._unsent.clear();
    }
    if (now - this._lastSent >= this._heartbeatMs)
      this._send("heartbeat", { interval_ms: Math.round(this._heartbeatMs) }, now);
  }

  _tick() {
    if (this._stopped) return;
    const now = Date.now();
    // the broker's silence lasts liveness x the longer of the two heartbeats
    const silence = this._liveness * Math.max(this._heartbeatMs, this._brokerHeartbeatMs);
    // a tick late by more than its interval follows a busy event loop (a handler's sync
    // code): the worker could not listen meanwhile (what the broker sent waits behind this
    // timer, or was never sent by a broker in this process), so the silence is counted
    // again from now: a full liveness x heartbeat of listening before the broker is left
    const late = now - this._lastTick > 2 * this._tickMs;
    this._lastTick = now;
    if (late) this._listeningSince = now;
    const quiet = now - Math.max(this._lastHeard, this._listeningSince);
    if (this._sock && (this._leave || quiet >= silence)) this._disconnect(now);
    if (!this._sock && now >= this._reconnectAt && !this._connect(now)) {
      this._leave = null;
      this._brokers.next();
      this._reconnectAt = now + this._reconnectMaxMs;
    }
    for (const h of this._held.values()) {
      if (h.aborted) continue;
      if (h.maxRunAt && now >= h.maxRunAt) {
        h.abort(new JobCancelledError("max run time exceeded"));
        h.nextExtend = 0;
        continue;
      }
      if (h.nextExtend && now >= h.nextExtend) {
        if (this._sock) this._extends.push({ job_id: h.jobId, lease: h.lease, lease_ms: h.leaseMs });
        h.nextExtend = now + h.leaseMs / 2;
      }
    }
    if (this._draining && !this._drainCancelled && now >= this._drainDeadline) {
      this._drainCancelled = true;
      this._cancelAll("worker shutting down: the drain grace ran out");
    }
    this._flush(now);
    this._checkFinished(now);
  }

  _beginDrain(now) {
    this._draining = true;
    this._drainDeadline = now + this._drainMs;
    this.emit("draining", { held: this._held.size });
    // Ready first (capacity 0), so the broker stops dispatching before it sees the hand-backs
    if (this._sock) {
      this._needReady = true;
      this._flush(now);
    }
    for (const h of this._backlog) this._handBack(h, FC.FAILURE_THROTTLED, "worker shutting down");
    this._backlog = [];
  }

  _checkFinished(now = Date.now()) {
    if (!this._draining || this._stopped || this._held.size) return;
    const pending = this._unsent.size + this._sent.size;
    if (pending) {
      if (!this._lingerDeadline) this._lingerDeadline = now + this._liveness * this._heartbeatMs;
      if (now < this._lingerDeadline) return;
      this.emit("warning", `exiting with ${pending} settlements unconfirmed (the broker will requeue them)`);
    }
    this._finishStop();
  }

  _finishStop() {
    this._stopped = true;
    if (this._timer) clearInterval(this._timer);
    for (const [sig, h] of this._signalHandlers) process.removeListener(sig, h);
    this._signalHandlers = [];
    this._gen++;
    if (this._sock) {
      const s = this._sock;
      this._sock = null;
      // linger 0: let the last Settled-confirmed frames go before closing
      try {
        s.close();
      } catch {}
    }
    this.emit("stopped");
    this._resolveClosed();
  }
}

module.exports = { Worker, JobCancelledError };
