"use strict";
// Admin: AdminRequest / AdminReply on the broker's admin socket, as
// zlane-ctl does it; Subscriber: the events PUB socket as an async iterator.
const zmq = require("zeromq");
const proto = require("./proto");
const { EndpointList, curveOptions } = require("./common");
const errors = require("./errors");

const EC = proto.ErrorCode;
const Stats = proto.T("Stats");
const DeadLetter = proto.T("DeadLetter");
const DlqAlert = proto.T("DlqAlert");
const BatchInfo = proto.T("BatchInfo");
const Breaker = proto.T("Breaker");
const WorkerInfo = proto.T("WorkerInfo");
const JobOutcome = proto.T("JobOutcome");
const Schedule = proto.T("Schedule");
const GroupSort = proto.E("GroupSort").values;

function filter(f = {}) {
  if (typeof f === "string" || typeof f === "number" || typeof f === "bigint") f = { ids: [f] };
  if (Array.isArray(f)) f = { ids: f };
  const ids = (f.ids || []).map((x) => proto.u64(String(x)));
  const all = !!f.all;
  const from = Number(f.deadFromMs || 0), to = Number(f.deadToMs || 0);
  if (!all && !f.lane && !f.tenant && ids.length === 0 && !f.errorContains && !from && !to)
    throw new errors.ConfigError("a DLQ filter needs lane, tenant, ids, errorContains, deadFromMs, deadToMs or all: true");
  return {
    lane: f.lane || "",
    tenant: f.tenant || "",
    ids,
    all,
    error_contains: f.errorContains || "",
    dead_from_ms: proto.u64(String(Math.trunc(from))),
    dead_to_ms: proto.u64(String(Math.trunc(to))),
  };
}

/** A dead letter as a plain object (job id a string, payload a Buffer, headers an object). */
function deadLetter(msg) {
  const d = proto.plain(DeadLetter, msg);
  const headers = {};
  for (const h of d.headers) headers[h.key] = h.value;
  d.headers = headers;
  for (const a of d.attempts) a.outcome = a.outcome.replace(/^OUTCOME_/, "").toLowerCase();
  return d;
}

/** Stats with counters as an object {name: value} next to the lists. */
function stats(msg) {
  const s = proto.plain(Stats, msg);
  const counters = {};
  for (const c of s.counters) counters[c.name] = c.value;
  s.counters = counters;
  const lat = {};
  for (const l of s.latencies) lat[l.name] = l;
  s.latencies = lat;
  return s;
}

class Admin {
  /**
   * @param {object} opts endpoints: admin socket(s), a list as for the other
   *   clients; curve: {serverCert, clientCert}; timeoutMs: per request (5000)
   */
  constructor(opts = {}) {
    this._brokers = new EndpointList(opts.endpoints ?? opts.endpoint, "tcp://127.0.0.1:5573");
    this._curve = curveOptions(opts.curve);
    this._timeoutMs = opts.timeoutMs ?? 5000;
    this._nextId = 1;
    this._sock = null;
    this._pending = new Map(); // request id -> {resolve, reject}
    this._closed = false;
    this._chain = Promise.resolve();
  }

  /** Broker stats: counters {name: n}, lanes, tenants, groups, latencies, role...
   * With {lanesOnly: true}, no tenants or groups rows (tenantsKnown counts them): cheap.
   * With {groups: {lane, tenantContains, sort, ascending, offset, limit}}, the page of lane x
   * tenant rows it selects, sorted by the broker (sort: ready, delayed, inFlight, dlq,
   * oldestReady, submitted, acked, capped, throttled, tenant, lane; groupsMatched counts all). */
  async stats({ lanesOnly = false, groups } = {}) {
    const req = { lanes_only: !!lanesOnly };
    if (groups) {
      const sort = GroupSort[`GROUP_SORT_${String(groups.sort || "ready").replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase()}`];
      if (sort === undefined) throw new errors.ConfigError(`groups.sort: '${groups.sort}' is not one of ${Object.keys(GroupSort).map((k) => k.slice(11).toLowerCase()).join(", ")}`);
      req.groups = {
        lane: groups.lane || "",
        tenant_contains: groups.tenantContains || "",
        sort,
        ascending: !!groups.ascending,
        offset: groups.offset || 0,
        limit: groups.limit || 0,
      };
    }
    const r = await this._request({ stats: req });
    return stats(r.stats);
  }
  /** The connected workers: {name, host, lanes, capacity, inFlight, lastSeenAgeMs, instance, heartbeatMs}. */
  async workers() {
    const r = await this._request({ workers: {} });
    return (r.workers?.items || []).map((w) => proto.plain(WorkerInfo, w));
  }
  /** Dead letters (payload and attempts omitted) matching `f` ({lane, tenant, ids,
   * errorContains, deadFromMs, deadToMs, all}). */
  async dlqList(f = { all: true }, { limit = 100, afterId = "0" } = {}) {
    const r = await this._request({ dlq_list: { filter: filter(f), limit, after_id: proto.u64(String(afterId)) } });
    return (r.dlq_list?.items || []).map(deadLetter);
  }
  /** One dead letter with its payload, error and every attempt. */
  async dlqShow(jobId) {
    const r = await this._request({ dlq_show: { job_id: proto.u64(String(jobId)) } });
    return deadLetter(r.dead_letter);
  }
  /** Put dead letters back with a fresh attempt count; resolves with how many. */
  async dlqRedrive(f) {
    const r = await this._request({ dlq_redrive: filter(f) });
    return proto.u64Number(r.count);
  }
  /** Delete dead letters; resolves with how many. */
  async dlqPurge(f) {
    const r = await this._request({ dlq_purge: filter(f) });
    return proto.u64Number(r.count);
  }
  /** Cancel jobs (zlane-ctl cancel): resolves with one {jobId, outcome, state, cancelledAtMs}
   * per id, in order; outcome is "cancelled", "already_cancelled", "finished" or "unknown". */
  async cancel(...ids) {
    const list = ids.flat().map((id) => proto.u64(String(id)));
    const r = await this._request({ cancel: { ids: list } });
    return (r.cancel?.items || []).map((it) => ({
      jobId: proto.u64String(it.job_id),
      outcome: (proto.CancelOutcomeName[it.outcome] || "CANCEL_UNSPECIFIED").slice(7).toLowerCase(),
      state: it.state || "",
      cancelledAtMs: proto.u64Number(it.cancelled_at_ms),
    }));
  }
  /**
   * A batch as zlane-ctl batch show prints it: tenant, lane, jobId (its
   * callback), closed, settled, cancelled, the counts (jobs, acked, dead,
   * cancelledJobs, pending), failed (ids, at most 1000; failedMore beyond),
   * the times. found is false for a batch the broker does not know.
   */
  async batchShow(batchId) {
    if (typeof batchId !== "string" || !batchId) throw new errors.ConfigError("batchShow needs a batch id");
    const r = await this._request({ batch_show: { batch_id: batchId } });
    return proto.plain(BatchInfo, r.batch);
  }
  /** A job's state, or its outcome once final (zlane-ctl job show): {jobId, found, final,
   * state, outcome, result (Buffer), error, failedParent, tenant, lane, finishedAtMs, attempts}. */
  async jobShow(jobId) {
    const r = await this._request({ job_show: { job_id: proto.u64(String(jobId)) } });
    return proto.plain(JobOutcome, r.job);
  }
  /** The cron schedules (zlane-ctl schedule list). */
  async scheduleList() {
    const r = await this._request({ schedule_list: {} });
    return (r.schedules?.items || []).map((s) => proto.plain(Schedule, s));
  }
  async schedulePause(name) {
    await this._request({ schedule_pause: { name } });
  }
  async scheduleResume(name) {
    await this._request({ schedule_resume: { name } });
  }
  async pause(lane) {
    await this._request({ pause: { lane } });
  }
  async resume(lane) {
    await this._request({ resume: { lane } });
  }

  async close() {
    this._closed = true;
    this._closeSocket(new errors.ClosedError("admin closed"));
  }

  // One request at a time, to one broker of the list at a time: it moves on
  // when a broker stays silent for its share of the timeout, and follows a
  // NOT_LEADER to the leader; every broker gets one try.
  _request(op) {
    const run = () => this._try(op);
    const p = this._chain.then(run, run);
    this._chain = p.catch(() => {});
    return p;
  }

  async _try(op) {
    if (this._closed) throw new errors.ClosedError("admin closed");
    const deadline = Date.now() + this._timeoutMs;
    let tries = this._brokers.size + 1;
    let last = null;
    while (tries-- > 0) {
      const left = deadline - Date.now();
      if (left <= 0) break;
      // the time left, shared among the brokers not yet tried
      const untried = Math.max(1, Math.min(tries + 1, this._brokers.size));
      const wait = this._brokers.roams() ? Math.max(1, Math.floor(left / untried)) : left;
      try {
        const reply = await this._once(op, wait);
        if (reply.kind === "error") {
          const e = reply.body;
          if (e.code === EC.ERROR_NOT_LEADER || e.code === EC.ERROR_UNAVAILABLE) {
            last = new errors.AdminError(`broker at ${this._brokers.current()}: ${proto.ErrorCodeName[e.code]}: ${e.message}`, proto.ErrorCodeName[e.code]);
            if (e.code === EC.ERROR_NOT_LEADER) this._brokers.follow(e.leader_endpoints);
            else this._brokers.next();
            this._closeSocket();
            continue;
          }
          throw new errors.AdminError(`${proto.ErrorCodeName[e.code]}: ${e.message}`, proto.ErrorCodeName[e.code]);
        }
        const r = reply.body;
        if (!r.ok) throw new errors.AdminError(r.error || "request refused", "ADMIN_REFUSED");
        return r;
      } catch (e) {
        if (!(e instanceof errors.TimeoutError)) throw e;
        last = e;
        this._closeSocket();
        if (!this._brokers.roams()) break;
        this._brokers.next();
      }
    }
    throw last instanceof errors.AdminError
      ? last
      : new errors.TimeoutError(`no admin reply from ${this._brokers.text()} within ${this._timeoutMs} ms`);
  }

  _once(op, timeoutMs) {
    this._ensureSocket();
    const id = this._nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this._pending.delete(id);
        reject(new errors.TimeoutError(`no reply from ${this._brokers.current()}`));
      }, timeoutMs);
      this._pending.set(id, {
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this._sock.send(proto.encode("admin_request", { request_id: id, ...op })).catch(() => {});
    });
  }

  _ensureSocket() {
    if (this._sock) return;
    const sock = new zmq.Dealer({ linger: 0, sendTimeout: -1, ...this._curve });
    sock.connect(this._brokers.current());
    this._sock = sock;
    (async () => {
      try {
        for await (const frames of sock) {
          if (frames.length !== 1) continue;
          let m;
          try {
            m = proto.decode(frames[0]);
          } catch {
            continue;
          }
          if (m.kind === "admin_reply") {
            const p = this._pending.get(proto.u64Number(m.body.request_id));
            if (p) {
              this._pending.delete(proto.u64Number(m.body.request_id));
              p.resolve(m);
            }
          } else if (m.kind === "error") {
            // an Error answers the request in flight (one at a time)
            for (const [id, p] of this._pending) {
              this._pending.delete(id);
              p.resolve(m);
            }
          }
        }
      } catch {}
    })();
  }

  _closeSocket(err) {
    if (this._sock) {
      try {
        this._sock.close();
      } catch {}
      this._sock = null;
    }
    if (err) for (const p of this._pending.values()) p.reject(err);
    if (err) this._pending.clear();
  }
}

/**
 * The events socket as an async iterator of decoded events:
 *   {type: "deadLetter", topic: "dlq.<lane>.<tenant>", ...DeadLetter}
 *   {type: "dlqAlert", topic: "alert.dlq", depth, oldestAgeMs}
 *   {type: "batchDone", topic: "batch.<id>", ...BatchInfo} (a batch settled, once)
 *   {type: "breaker", topic: "breaker.<lane>", ...Breaker} (a lane's circuit breaker changed state)
 * It connects to every endpoint of the list at once: only the leader publishes.
 */
class Subscriber {
  constructor(opts = {}) {
    this._brokers = new EndpointList(opts.endpoints ?? opts.endpoint, "tcp://127.0.0.1:5572");
    const curve = curveOptions(opts.curve);
    this._sock = new zmq.Subscriber({ linger: 0, ...curve });
    const topics = opts.topics === undefined ? [""] : [].concat(opts.topics);
    for (const t of topics) this._sock.subscribe(t);
    this._handshakes = 0;
    this._onHandshake = [];
    this._sock.events.on("handshake", () => {
      this._handshakes++;
      for (const f of this._onHandshake.splice(0)) f();
    });
    for (const e of this._brokers.list) this._sock.connect(e);
    this._closed = false;
  }

  /** Resolve once the subscription's handshake with a broker holds (or after timeoutMs). */
  connected(timeoutMs = 5000) {
    if (this._handshakes) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new errors.TimeoutError("no handshake with an events socket")), timeoutMs);
      this._onHandshake.push(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }

  async *[Symbol.asyncIterator]() {
    try {
      for await (const frames of this._sock) {
        if (frames.length !== 2) continue;
        const topic = frames[0].toString("utf8");
        let m;
        try {
          m = proto.decode(frames[1]);
        } catch {
          continue;
        }
        if (m.kind === "dead_letter") yield { type: "deadLetter", topic, ...deadLetter(m.body) };
        else if (m.kind === "dlq_alert") yield { type: "dlqAlert", topic, ...proto.plain(DlqAlert, m.body) };
        else if (m.kind === "batch_done") yield { type: "batchDone", topic, ...proto.plain(BatchInfo, m.body) };
        else if (m.kind === "breaker") yield { type: "breaker", topic, ...proto.plain(Breaker, m.body) };
      }
    } catch (e) {
      if (!this._closed) throw e;
    }
  }

  async close() {
    this._closed = true;
    try {
      this._sock.close();
    } catch {}
  }
}

module.exports = { Admin, Subscriber };
