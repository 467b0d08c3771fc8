"use strict";
// zlane-web: the operators' dashboard. An admin-socket client of the broker
// (through the Node.js client, the same protocol zlane-ctl speaks) and a small
// HTTP server for one page and its JSON API:
//
//   - one poller asks the broker for Stats and the worker list every
//     `refreshMs`, whatever the number of browsers, and keeps an hour of the
//     overview's figures in its own ring buffers (history.js);
//   - a subscriber on the broker's events socket passes dead letters to the
//     browsers as they arrive (server-sent events, with the stats);
//   - reads are open (loopback by default); actions (redrive, purge, pause,
//     resume) need a login with the configured password (a session cookie,
//     HttpOnly and SameSite=Strict, plus a CSRF token in a header) or the
//     configured token as a bearer, and are refused when neither is set or
//     `readOnly` is on. Every action is logged with who and what.
//   - every asset comes from this server (public/): no request leaves for
//     another host, and the Content-Security-Policy forbids inline script.
const crypto = require("node:crypto");
const fs = require("node:fs");
const http = require("node:http");
const path = require("node:path");
const zlane = require("../../clients/node");
const { History } = require("./history");

const PUBLIC = path.join(__dirname, "..", "public");
const TYPES = { ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml" };
const CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join("; ");
const SESSION_MS = 12 * 3600 * 1000;
const MAX_BODY = 64 * 1024;
const MAX_STREAMS = 200;
const LOGIN_FAILURES_PER_MIN = 10;

function sha256(s) {
  return crypto.createHash("sha256").update(String(s)).digest();
}

/** A secret compared in constant time (hashes of equal length). */
function sameSecret(given, expected) {
  if (!expected || typeof given !== "string" || !given) return false;
  return crypto.timingSafeEqual(sha256(given), sha256(expected));
}

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function parseCookies(header) {
  const out = {};
  for (const part of String(header || "").split(";")) {
    const i = part.indexOf("=");
    if (i > 0) out[part.slice(0, i).trim()] = part.slice(i + 1).trim();
  }
  return out;
}

function lanesRows(stats, prev, dtMs) {
  const breakers = new Map((stats.breakers || []).map((b) => [b.lane, b]));
  return (stats.lanes || []).map((g) => {
    const p = prev && prev.get(g.lane);
    const rate = (now, before) => (p && dtMs > 0 && now >= before ? ((now - before) * 1000) / dtMs : 0);
    const b = breakers.get(g.lane);
    return {
      lane: g.lane,
      ready: g.ready,
      delayed: g.delayed,
      inFlight: g.inFlight,
      dlq: g.dlq,
      oldestReadyAgeMs: g.oldestReadyAgeMs,
      oldestDlqAgeMs: g.oldestDlqAgeMs,
      submitted: g.submitted,
      acked: g.acked,
      deadLettered: g.deadLettered,
      submitRate: p ? rate(g.submitted, p.submitted) : 0,
      ackRate: p ? rate(g.acked, p.acked) : 0,
      capped: g.capped,
      throttled: g.throttled,
      paused: g.paused,
      breaker: b ? String(b.state).replace(/^BREAKER_/, "").toLowerCase() : "",
    };
  });
}

// the tenants table's sortable columns -> the broker's GroupSort
const TENANT_SORTS = { tenant: "tenant", lane: "lane", ready: "ready", delayed: "delayed", inFlight: "inFlight", dlq: "dlq", oldestReadyAgeMs: "oldestReady", submitted: "submitted", acked: "acked", capped: "capped", throttled: "throttled" };

class Dashboard {
  /**
   * opts: admin (endpoint or list), events (endpoint or list; none: no live
   * dead letters), curve ({serverCert, clientCert}), listen ("host:port"),
   * refreshMs (2000), historyMs (3600000), password, token, readOnly,
   * log (a function of one line; default stdout).
   */
  constructor(opts = {}) {
    this.opts = opts;
    this.refreshMs = Math.max(200, opts.refreshMs || 2000);
    this.admin = new zlane.Admin({ endpoints: opts.admin, curve: opts.curve, timeoutMs: opts.timeoutMs || 5000 });
    this.history = new History({ spanMs: opts.historyMs || 3600000, stepMs: this.refreshMs });
    this.password = opts.password || "";
    this.token = opts.token || "";
    this.actionsOn = !opts.readOnly && !!(this.password || this.token);
    this.sessions = new Map(); // id -> {user, csrf, expires}
    this.loginFailures = new Map(); // remote address -> [times]
    this.streams = new Set();
    this.latest = null; // {at, stats, lanes, workers, error}
    this.prevLanes = null;
    this.groupPages = new Map(); // a group query -> {at, page, fetching}
    this.groupPrev = new Map(); // lane\0tenant -> {at, submitted, acked}: for the rates
    this.lastPollAt = 0;
    this.polls = 0;
    this.pollErrors = 0;
    this.say = opts.log || ((line) => process.stdout.write(line + "\n"));
    this.server = http.createServer((req, res) => this._serve(req, res));
    this.server.headersTimeout = 10000;
    this.server.requestTimeout = 30000;
    this.timer = null;
    this.closed = false;
  }

  /** Start serving and polling; resolves with the URL it listens on. */
  async start() {
    const [host, port] = splitListen(this.opts.listen || "127.0.0.1:8090");
    await new Promise((resolve, reject) => {
      this.server.once("error", reject);
      this.server.listen(port, host, resolve);
    });
    const a = this.server.address();
    this.url = `http://${a.family === "IPv6" ? `[${a.address}]` : a.address}:${a.port}/`;
    this.loopbackOnly = a.address.startsWith("127.") || a.address === "::1";
    // the first figures, if the broker answers within a second; the page is
    // served either way (and says the broker does not answer)
    const first = this._poll().then(() => this._schedule());
    await Promise.race([first, new Promise((r) => setTimeout(r, 1000))]);
    if (this.opts.events) this._subscribe();
    return this.url;
  }

  async close() {
    this.closed = true;
    clearTimeout(this.timer);
    for (const s of this.streams) s.end();
    if (this.sub) await this.sub.close();
    await this.admin.close();
    await new Promise((r) => this.server.close(r));
    this.server.closeAllConnections?.();
  }

  // ------------------------------------------------------------ the broker
  _schedule() {
    if (this.closed) return;
    this.timer = setTimeout(async () => {
      await this._poll();
      this._schedule();
    }, this.refreshMs);
  }

  async _poll() {
    const at = Date.now();
    try {
      // the lanes only: what every poll needs costs the broker one pass over
      // its flows, whatever the number of tenants (the tenants page asks
      // for the lane x tenant rows itself: _groupPage)
      const [stats, workers] = await Promise.all([this.admin.stats({ lanesOnly: true }), this.admin.workers()]);
      const dt = this.lastPollAt ? at - this.lastPollAt : 0;
      const lanes = lanesRows(stats, this.prevLanes, dt);
      this.prevLanes = new Map(lanes.map((l) => [l.lane, l]));
      this.lastPollAt = at;
      this.latest = { at, stats, lanes, workers, error: "" };
      this.history.record(at, lanes);
      this.polls++;
    } catch (e) {
      this.pollErrors++;
      this.latest = { ...(this.latest || { stats: null, lanes: [], workers: [] }), at, error: String(e.message || e) };
    }
    this._broadcast("stats", this._overview());
  }

  /**
   * A page of the lane x tenant rows, sorted and cut by the broker (a group
   * query: its cost does not grow with the page's size, and a 10,000-tenant
   * broker sends 50 rows, not 20,000). The same query is asked at most once
   * per refresh, whatever the number of browsers showing it.
   */
  async _groupPage(query) {
    const key = JSON.stringify(query);
    const now = Date.now();
    let c = this.groupPages.get(key);
    if (c && now - c.at < this.refreshMs) return c.page;
    if (c && c.fetching) return c.fetching;
    if (!c) {
      if (this.groupPages.size >= 64) this.groupPages.delete(this.groupPages.keys().next().value);
      this.groupPages.set(key, (c = { at: 0, page: null, fetching: null }));
    }
    c.fetching = (async () => {
      try {
        const s = await this.admin.stats({ groups: query });
        const at = Date.now();
        const rows = s.groups.map((g) => {
          const k = `${g.lane}\u0000${g.tenant}`;
          const p = this.groupPrev.get(k);
          const dt = p ? at - p.at : 0;
          const rate = (x, y) => (p && dt > 0 && x >= y ? ((x - y) * 1000) / dt : null);
          this.groupPrev.set(k, { at, submitted: g.submitted, acked: g.acked });
          return { ...g, submitRate: p ? rate(g.submitted, p.submitted) : null, ackRate: p ? rate(g.acked, p.acked) : null };
        });
        if (this.groupPrev.size > 100000) this.groupPrev.clear();
        c.page = { at, matched: s.groupsMatched, rows };
        c.at = at;
        return c.page;
      } finally {
        c.fetching = null;
      }
    })();
    return c.fetching;
  }

  _subscribe() {
    this.sub = new zlane.Subscriber({ endpoints: this.opts.events, curve: this.opts.curve, topics: ["dlq."] });
    (async () => {
      try {
        for await (const ev of this.sub) {
          if (ev.type !== "deadLetter") continue;
          this._broadcast("dead", {
            jobId: ev.jobId,
            lane: ev.lane,
            tenant: ev.tenant,
            error: ev.error,
            deadAtMs: ev.deadAtMs,
            attempts: ev.attempts.length,
          });
        }
      } catch (e) {
        if (!this.closed) this.say(JSON.stringify({ at: new Date().toISOString(), event: "subscriber_failed", error: String(e.message || e) }));
      }
    })();
  }

  _overview() {
    const l = this.latest || { lanes: [], workers: [], stats: null, at: 0, error: "not polled yet" };
    const s = l.stats;
    return {
      at: l.at,
      error: l.error,
      refreshMs: this.refreshMs,
      broker: s
        ? {
            role: s.role,
            leader: s.leader,
            epoch: s.epoch,
            store: s.storeBackend,
            storeReachable: s.storeReachable,
            uptimeMs: s.uptimeMs,
            workers: s.workers,
            producers: s.producers,
            tenants: s.tenantsKnown,
          }
        : null,
      lanes: l.lanes,
    };
  }

  // ------------------------------------------------------------ HTTP
  /** The Host header names this dashboard (a DNS-rebinding page names its own host). */
  _hostAllowed(req) {
    const host = String(req.headers.host || "").toLowerCase();
    if (this.opts.publicHosts && this.opts.publicHosts.length)
      return this.opts.publicHosts.some((h) => host === h.toLowerCase() || host.startsWith(`${h.toLowerCase()}:`)) || this._loopbackHost(host);
    return this._loopbackHost(host) || !this.loopbackOnly;
  }

  _loopbackHost(host) {
    const port = this.server.address()?.port;
    const names = ["127.0.0.1", "localhost", "[::1]"];
    return names.some((n) => host === `${n}:${port}` || host === n) || /^127\.\d+\.\d+\.\d+(:\d+)?$/.test(host);
  }

  async _serve(req, res) {
    const url = new URL(req.url, "http://dashboard");
    if (!this._hostAllowed(req)) {
      res.writeHead(421, { "Content-Type": "text/plain; charset=utf-8" });
      res.end("this dashboard does not answer to that host name (see --public-host)\n");
      return;
    }
    res.setHeader("Content-Security-Policy", CSP);
    res.setHeader("X-Content-Type-Options", "nosniff");
    res.setHeader("X-Frame-Options", "DENY");
    res.setHeader("Referrer-Policy", "no-referrer");
    try {
      if (url.pathname.startsWith("/api/")) {
        res.setHeader("Cache-Control", "no-store");
        const out = await this._api(req, res, url);
        if (out !== undefined) this._json(res, 200, out);
      } else this._static(req, res, url.pathname);
    } catch (e) {
      const status = e instanceof HttpError ? e.status : e instanceof zlane.AdminError ? 409 : e instanceof zlane.TimeoutError ? 504 : 500;
      if (!res.headersSent) this._json(res, status, { error: String(e.message || e) });
      else res.end();
    }
  }

  _json(res, status, body) {
    const data = JSON.stringify(body);
    res.writeHead(status, { "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(data) });
    res.end(data);
  }

  _static(req, res, pathname) {
    if (req.method !== "GET" && req.method !== "HEAD") throw new HttpError(405, "method not allowed");
    const name = pathname === "/" ? "index.html" : pathname.slice(1);
    if (!/^[a-z0-9_-]+\.(html|js|css|svg)$/.test(name)) throw new HttpError(404, "not found");
    const file = path.join(PUBLIC, name);
    let data;
    try {
      data = fs.readFileSync(file);
    } catch {
      throw new HttpError(404, "not found");
    }
    res.writeHead(200, { "Content-Type": TYPES[path.extname(name)], "Content-Length": data.length, "Cache-Control": "no-cache" });
    res.end(req.method === "HEAD" ? undefined : data);
  }

  async _body(req) {
    const type = String(req.headers["content-type"] || "");
    if (!type.startsWith("application/json")) throw new HttpError(415, "send application/json");
    let size = 0;
    const parts = [];
    for await (const c of req) {
      size += c.length;
      if (size > MAX_BODY) throw new HttpError(413, "request body too large");
      parts.push(c);
    }
    try {
      const v = JSON.parse(Buffer.concat(parts).toString("utf8") || "{}");
      if (!v || typeof v !== "object" || Array.isArray(v)) throw new Error();
      return v;
    } catch {
      throw new HttpError(400, "the body is not a JSON object");
    }
  }

  /** Who is asking: {user, session} (user null for anonymous). */
  _who(req) {
    const auth = String(req.headers.authorization || "");
    if (auth.startsWith("Bearer ") && this.token && sameSecret(auth.slice(7), this.token))
      return { user: "token", bearer: true, session: null };
    const id = parseCookies(req.headers.cookie).zlane_session;
    const s = id && this.sessions.get(id);
    if (s && s.expires > Date.now()) return { user: s.user, bearer: false, session: s, id };
    if (s) this.sessions.delete(id);
    return { user: null, bearer: false, session: null };
  }

  /** The caller may act: logged in (with the CSRF header) or the bearer token. */
  _mayAct(req, who) {
    if (!this.actionsOn) throw new HttpError(403, "actions are turned off on this dashboard (read-only)");
    if (!who.user) throw new HttpError(401, "log in to do this");
    if (!who.bearer) {
      const csrf = String(req.headers["x-csrf-token"] || "");
      if (!sameSecret(csrf, who.session.csrf)) throw new HttpError(403, "missing or wrong CSRF token");
      const origin = req.headers.origin;
      if (origin && origin !== `http://${req.headers.host}` && origin !== `https://${req.headers.host}`)
        throw new HttpError(403, "cross-origin request refused");
    }
  }

  _audit(req, who, action, what, result) {
    this.say(
      JSON.stringify({
        at: new Date().toISOString(),
        event: "action",
        who: who.user,
        from: req.socket.remoteAddress,
        action,
        what,
        ...result,
      }),
    );
  }

  async _act(req, who, action, what, fn) {
    this._mayAct(req, who);
    try {
      const out = await fn();
      this._audit(req, who, action, what, { ok: true, result: out });
      return out;
    } catch (e) {
      this._audit(req, who, action, what, { ok: false, error: String(e.message || e) });
      throw e;
    }
  }

  async _api(req, res, url) {
    const p = url.pathname;
    const q = url.searchParams;
    const who = this._who(req);
    const get = req.method === "GET";
    const post = req.method === "POST";
    if (!get && !post) throw new HttpError(405, "method not allowed");
    let m;

    if (p === "/api/session" && get)
      return { user: who.user, actions: this.actionsOn, login: !!this.password && this.actionsOn, csrf: who.session ? who.session.csrf : null };
    if (p === "/api/login" && post) return this._login(req, res);
    if (p === "/api/logout" && post) {
      if (who.id) this.sessions.delete(who.id);
      res.setHeader("Set-Cookie", "zlane_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
      return { user: null };
    }
    if (p === "/api/stream" && get) return this._stream(req, res);

    if (get) {
      if (p === "/api/overview") return this._overview();
      if (p === "/api/history") {
        const since = Date.now() - Math.min(Number(q.get("minutes") || 60), 24 * 60) * 60000;
        return { lane: q.get("lane") || "", series: this.history.series(q.get("lane") || "", since) };
      }
      if (p === "/api/tenants") return this._tenants(q);
      if (p === "/api/workers") return { at: this.latest?.at || 0, workers: this.latest?.workers || [] };
      if (p === "/api/dlq") return this._dlqList(q);
      if ((m = p.match(/^\/api\/dlq\/(\d{1,20})$/))) return this._dlqShow(m[1]);
      if (p === "/api/schedules") return { schedules: (await this.admin.scheduleList()).map(scheduleRow) };
      if ((m = p.match(/^\/api\/jobs\/(\d{1,20})$/))) return jobRow(await this.admin.jobShow(m[1]));
      if ((m = p.match(/^\/api\/jobs\/(\d{1,20})\/graph$/))) return this._graph(m[1]);
      if ((m = p.match(/^\/api\/batches\/([^/]{1,200})$/))) return this.admin.batchShow(decodeURIComponent(m[1]));
      throw new HttpError(404, "no such API");
    }

    // actions
    if ((m = p.match(/^\/api\/dlq\/(redrive|purge)$/))) {
      const body = await this._body(req);
      const f = dlqTarget(body);
      const verb = m[1];
      return this._act(req, who, `dlq.${verb}`, f, async () => ({
        count: verb === "redrive" ? await this.admin.dlqRedrive(f) : await this.admin.dlqPurge(f),
      }));
    }
    if ((m = p.match(/^\/api\/lanes\/([^/]{1,200})\/(pause|resume)$/))) {
      const lane = decodeURIComponent(m[1]);
      const verb = m[2];
      await this._body(req);
      const out = await this._act(req, who, `lane.${verb}`, { lane }, async () => {
        await (verb === "pause" ? this.admin.pause(lane) : this.admin.resume(lane));
        return { lane, paused: verb === "pause" };
      });
      this._poll(); // the overview shows it at once, not at the next tick
      return out;
    }
    if ((m = p.match(/^\/api\/schedules\/([^/]{1,200})\/(pause|resume)$/))) {
      const name = decodeURIComponent(m[1]);
      const verb = m[2];
      await this._body(req);
      return this._act(req, who, `schedule.${verb}`, { name }, async () => {
        await (verb === "pause" ? this.admin.schedulePause(name) : this.admin.scheduleResume(name));
        return { name, paused: verb === "pause" };
      });
    }
    throw new HttpError(404, "no such API");
  }

  async _login(req, res) {
    const from = req.socket.remoteAddress || "";
    const now = Date.now();
    const fails = (this.loginFailures.get(from) || []).filter((t) => t > now - 60000);
    if (fails.length >= LOGIN_FAILURES_PER_MIN) throw new HttpError(429, "too many failed logins: wait a minute");
    const body = await this._body(req);
    if (!this.actionsOn || !this.password) throw new HttpError(403, "this dashboard has no login (read-only, or token only)");
    if (!sameSecret(body.password, this.password)) {
      fails.push(now);
      this.loginFailures.set(from, fails);
      this.say(JSON.stringify({ at: new Date().toISOString(), event: "login_failed", from }));
      throw new HttpError(401, "wrong password");
    }
    this.loginFailures.delete(from);
    const id = crypto.randomBytes(32).toString("base64url");
    const csrf = crypto.randomBytes(32).toString("base64url");
    const user = "admin";
    this.sessions.set(id, { user, csrf, expires: now + SESSION_MS });
    for (const [k, s] of this.sessions) if (s.expires <= now) this.sessions.delete(k);
    res.setHeader("Set-Cookie", `zlane_session=${id}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${SESSION_MS / 1000}${this.opts.secureCookies ? "; Secure" : ""}`);
    this.say(JSON.stringify({ at: new Date().toISOString(), event: "login", who: user, from }));
    return { user, csrf, actions: true };
  }

  _stream(req, res) {
    if (this.streams.size >= MAX_STREAMS) throw new HttpError(503, "too many live pages open");
    res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-store", Connection: "keep-alive" });
    res.write(`retry: 2000\n\n`);
    res.write(`event: stats\ndata: ${JSON.stringify(this._overview())}\n\n`);
    this.streams.add(res);
    const ping = setInterval(() => res.write(": ping\n\n"), 15000);
    req.on("close", () => {
      clearInterval(ping);
      this.streams.delete(res);
    });
  }

  _broadcast(event, data) {
    if (!this.streams.size) return;
    const frame = `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
    for (const s of this.streams) s.write(frame);
  }

  async _tenants(q) {
    const sortKey = TENANT_SORTS[q.get("sort")] ? q.get("sort") : "ready";
    const desc = q.get("dir") !== "asc";
    const size = Math.min(Math.max(Number(q.get("size")) || 50, 1), 500);
    const page = Math.max(Math.floor(Number(q.get("page")) || 0), 0);
    const g = await this._groupPage({ lane: q.get("lane") || "", tenantContains: q.get("q") || "", sort: TENANT_SORTS[sortKey], ascending: !desc, offset: page * size, limit: size });
    const rows = g.rows.map((r) => ({
      tenant: r.tenant,
      lane: r.lane,
      ready: r.ready,
      delayed: r.delayed,
      inFlight: r.inFlight,
      dlq: r.dlq,
      oldestReadyAgeMs: r.oldestReadyAgeMs,
      submitted: r.submitted,
      acked: r.acked,
      submitRate: r.submitRate,
      ackRate: r.ackRate,
      capped: r.capped,
      throttled: r.throttled,
      paused: r.paused,
    }));
    return { at: g.at, total: g.matched, page, size, sort: sortKey, dir: desc ? "desc" : "asc", rows };
  }

  async _dlqList(q) {
    const f = { all: true };
    if (q.get("lane")) f.lane = q.get("lane");
    if (q.get("tenant")) f.tenant = q.get("tenant");
    if (q.get("error")) f.errorContains = q.get("error");
    if (q.get("from")) f.deadFromMs = Number(q.get("from"));
    if (q.get("to")) f.deadToMs = Number(q.get("to"));
    const limit = Math.min(Math.max(Number(q.get("limit")) || 50, 1), 500);
    const items = await this.admin.dlqList(f, { limit, afterId: q.get("after") || "0" });
    return {
      items: items.map((d) => ({ jobId: d.jobId, lane: d.lane, tenant: d.tenant, error: d.error, deadAtMs: d.deadAtMs, enqueuedAtMs: d.enqueuedAtMs, orderingKey: d.orderingKey })),
      next: items.length === limit ? items[items.length - 1].jobId : null,
    };
  }

  /** A job and its neighbours in a workflow: its parents and children (at most 50 each). */
  async _graph(id) {
    const job = jobRow(await this.admin.jobShow(id));
    const brief = async (ids) => {
      const out = [];
      for (const x of ids.slice(0, 50)) {
        const j = await this.admin.jobShow(x);
        out.push({ jobId: x, found: j.found, state: j.state, outcome: String(j.outcome || "").replace(/^OUTCOME_/, "").toLowerCase(), lane: j.lane });
      }
      return out;
    };
    return { job, parents: await brief(job.parents || []), children: await brief(job.children || []), more: { parents: Math.max(0, (job.parents || []).length - 50), children: Math.max(0, (job.children || []).length - 50) } };
  }

  async _dlqShow(id) {
    const d = await this.admin.dlqShow(id);
    const payload = d.payload || Buffer.alloc(0);
    return {
      jobId: d.jobId,
      lane: d.lane,
      tenant: d.tenant,
      idempotencyKey: d.idempotencyKey,
      orderingKey: d.orderingKey,
      orderingHead: d.orderingHead,
      enqueuedAtMs: d.enqueuedAtMs,
      deadAtMs: d.deadAtMs,
      error: d.error,
      headers: d.headers,
      attempts: d.attempts,
      payload: { size: payload.length, base64: payload.toString("base64"), text: textOf(payload) },
      checkpoint: { size: (d.checkpoint || Buffer.alloc(0)).length, text: textOf(d.checkpoint || Buffer.alloc(0)) },
    };
  }
}

/** The payload as text when it is valid UTF-8 (else null: the page shows hex). */
function textOf(buf) {
  const s = buf.toString("utf8");
  return Buffer.from(s, "utf8").equals(buf) ? s : null;
}

/** A redrive or purge body: {ids: [...]} or {filter: {lane, tenant, error, from, to, all}}. */
function dlqTarget(body) {
  if (Array.isArray(body.ids)) {
    const ids = body.ids.map(String);
    if (!ids.length || ids.length > 1000 || !ids.every((x) => /^\d{1,20}$/.test(x)))
      throw new HttpError(400, "ids: 1 to 1000 job ids");
    return { ids };
  }
  const f = body.filter;
  if (!f || typeof f !== "object") throw new HttpError(400, "say which dead letters: ids or a filter");
  const out = {};
  if (f.lane) out.lane = String(f.lane);
  if (f.tenant) out.tenant = String(f.tenant);
  if (f.error) out.errorContains = String(f.error);
  if (f.from) out.deadFromMs = Number(f.from);
  if (f.to) out.deadToMs = Number(f.to);
  if (f.all === true) out.all = true;
  if (!Object.keys(out).length) throw new HttpError(400, "an empty filter: say all: true to mean every dead letter");
  return out;
}

function scheduleRow(s) {
  return {
    name: s.name,
    cron: s.cron,
    lane: s.lane,
    tenant: s.tenant,
    missed: s.catchUp ? `catch_up:${s.catchUpMax || 10}` : "skip",
    paused: s.paused,
    lastTickMs: s.lastTickMs,
    nextTickMs: s.nextTickMs,
  };
}

function jobRow(j) {
  const result = j.result || Buffer.alloc(0);
  return { ...j, outcome: String(j.outcome || "").replace(/^OUTCOME_/, "").toLowerCase(), result: { size: result.length, base64: result.toString("base64"), text: textOf(result) } };
}

function splitListen(listen) {
  const s = String(listen);
  const i = s.lastIndexOf(":");
  if (i < 0) return ["127.0.0.1", Number(s)];
  const host = s.slice(0, i).replace(/^\[|\]$/g, "") || "127.0.0.1";
  const port = Number(s.slice(i + 1));
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`listen: '${listen}' is not host:port`);
  return [host, port];
}

module.exports = { Dashboard, splitListen, dlqTarget, textOf };
