"use strict";
// The dashboard's own time series: one ring buffer per lane (and one for all
// lanes together) of the figures the overview charts, a point per poll, kept
// for `spanMs` (an hour by default). No external time-series database: the
// dashboard forgets its history when it restarts, the broker's counters do
// not.

const FIELDS = ["ready", "delayed", "inFlight", "dlq", "oldestReadyAgeMs", "submitRate", "ackRate"];

class Ring {
  constructor(capacity) {
    this.capacity = capacity;
    this.t = new Float64Array(capacity);
    this.v = FIELDS.map(() => new Float64Array(capacity));
    this.n = 0; // points held
    this.head = 0; // where the next one goes
  }

  push(t, point) {
    this.t[this.head] = t;
    FIELDS.forEach((f, i) => (this.v[i][this.head] = point[f] || 0));
    this.head = (this.head + 1) % this.capacity;
    if (this.n < this.capacity) this.n++;
  }

  /** The points at or after `sinceMs`, oldest first, as {t: [...], ready: [...], ...}. */
  since(sinceMs = 0) {
    const out = { t: [] };
    for (const f of FIELDS) out[f] = [];
    const start = (this.head - this.n + this.capacity) % this.capacity;
    for (let k = 0; k < this.n; k++) {
      const i = (start + k) % this.capacity;
      if (this.t[i] < sinceMs) continue;
      out.t.push(this.t[i]);
      FIELDS.forEach((f, j) => out[f].push(this.v[j][i]));
    }
    return out;
  }
}

class History {
  /** `spanMs` kept at one point per `stepMs` (the poll interval). */
  constructor({ spanMs = 3600000, stepMs = 2000 } = {}) {
    this.capacity = Math.max(2, Math.ceil(spanMs / Math.max(100, stepMs)) + 1);
    this.rings = new Map(); // lane ("" = all lanes) -> Ring
  }

  /** Record one poll: `lanes` is [{lane, ready, ...}] (the overview's rows). */
  record(t, lanes) {
    const total = {};
    for (const f of FIELDS) total[f] = 0;
    for (const row of lanes) {
      this._ring(row.lane).push(t, row);
      for (const f of FIELDS)
        total[f] = f === "oldestReadyAgeMs" ? Math.max(total[f], row[f] || 0) : total[f] + (row[f] || 0);
    }
    this._ring("").push(t, total);
  }

  /** A lane's series ("" = all lanes), or null for a lane never seen. */
  series(lane = "", sinceMs = 0) {
    const r = this.rings.get(lane);
    return r ? r.since(sinceMs) : null;
  }

  _ring(lane) {
    let r = this.rings.get(lane);
    if (!r) this.rings.set(lane, (r = new Ring(this.capacity)));
    return r;
  }
}

module.exports = { History, FIELDS };
