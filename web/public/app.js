"use strict";
// The dashboard's page. Every view is one entry of VIEWS (a route, a nav
// title, render and, when it shows live figures, onStats); adding an object
// of the job model is one more entry. Text from the broker (names, payloads,
// errors) only ever goes into the page as text nodes (h() below sets
// textContent, never HTML), and the server's Content-Security-Policy allows
// no inline script.
(() => {
  // ------------------------------------------------------------ helpers
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "text") el.textContent = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k === "dataset") Object.assign(el.dataset, v);
      else if (k === "style")
        // through the CSSOM: the Content-Security-Policy refuses style attributes
        for (const decl of String(v).split(";")) {
          const i = decl.indexOf(":");
          if (i > 0) el.style.setProperty(decl.slice(0, i).trim(), decl.slice(i + 1).trim());
        }
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return el;
  }
  const $ = (sel) => document.querySelector(sel);
  /*  Make the live node `a` look like the fresh `b`, changing only what
      differs: a refresh does not replace the table a user is clicking in.
      (Listeners are not compared: rows redrawn this way take their clicks
      through a listener on the table that reads the row's data.) */
  function morph(a, b) {
    if (a.nodeType !== b.nodeType || a.nodeName !== b.nodeName) return a.replaceWith(b);
    if (a.nodeType === Node.TEXT_NODE) {
      if (a.data !== b.data) a.data = b.data;
      return;
    }
    for (const { name } of [...a.attributes]) if (!b.hasAttribute(name)) a.removeAttribute(name);
    for (const { name, value } of [...b.attributes]) if (a.getAttribute(name) !== value) a.setAttribute(name, value);
    if (a.nodeName === "INPUT" || a.nodeName === "SELECT" || a.nodeName === "CANVAS") return;
    const ak = [...a.childNodes], bk = [...b.childNodes];
    bk.forEach((n, i) => (i < ak.length ? morph(ak[i], n) : a.append(n)));
    for (let i = bk.length; i < ak.length; i++) ak[i].remove();
  }
  const fmtN = (n) => (typeof n === "number" ? n.toLocaleString("en-US") : String(n ?? ""));
  const fmtRate = (r) => (r >= 100 ? Math.round(r).toLocaleString("en-US") : (Math.round(r * 10) / 10).toString());
  function fmtAge(ms) {
    if (!ms) return "-";
    const s = ms / 1000;
    if (s < 1) return `${Math.round(ms)} ms`;
    if (s < 60) return `${s.toFixed(1)} s`;
    if (s < 3600) return `${Math.floor(s / 60)}m ${Math.round(s % 60)}s`;
    if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.round((s % 3600) / 60)}m`;
    return `${Math.floor(s / 86400)}d ${Math.round((s % 86400) / 3600)}h`;
  }
  const fmtTime = (ms) => (ms ? new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "-");

  const state = { session: { user: null, actions: false, csrf: null }, overview: null, view: null };

  async function api(path, { method = "GET", body } = {}) {
    const opts = { method, headers: {} };
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    if (method !== "GET" && state.session.csrf) opts.headers["X-CSRF-Token"] = state.session.csrf;
    const res = await fetch(path, opts);
    let data = null;
    try {
      data = await res.json();
    } catch {}
    if (!res.ok) throw new Error((data && data.error) || `${res.status} ${res.statusText}`);
    return data;
  }

  function banner(text) {
    const b = $("#banner");
    b.textContent = text || "";
    b.hidden = !text;
  }

  // A modal: resolves true on OK, false on Cancel. `body` is a node.
  function modal(title, body, okText = "OK") {
    return new Promise((resolve) => {
      $("#modal-title").textContent = title;
      $("#modal-body").replaceChildren(body);
      $("#modal-ok").textContent = okText;
      $("#modal").hidden = false;
      const done = (v) => {
        $("#modal").hidden = true;
        $("#modal-ok").onclick = $("#modal-cancel").onclick = null;
        resolve(v);
      };
      $("#modal-ok").onclick = () => done(true);
      $("#modal-cancel").onclick = () => done(false);
      const input = $("#modal-body input");
      if (input) input.focus();
    });
  }
  const confirmAction = (title, text, okText) => modal(title, h("p", { text }), okText);
  const canAct = () => !!(state.session.user && state.session.actions);
  const actTitle = () => (canAct() ? null : state.session.actions ? "log in to do this" : "this dashboard is read-only");

  // ------------------------------------------------------------ session
  async function loadSession() {
    state.session = await api("/api/session");
    renderAuth();
  }
  function renderAuth() {
    const s = state.session;
    const el = $("#auth");
    if (s.user) el.replaceChildren(h("span", { text: `${s.user}` }), h("button", { id: "logout", onclick: logout, text: "Log out" }));
    else if (s.login) el.replaceChildren(h("button", { id: "login", onclick: login, text: "Log in" }));
    else el.replaceChildren(h("span", { class: "badge ro", text: "read-only" }));
  }
  async function login() {
    const input = h("input", { type: "password", id: "password", autocomplete: "current-password", placeholder: "password" });
    const err = h("p", { class: "muted", id: "login-error" });
    const body = h("div", {}, h("label", {}, "Password ", input), err);
    for (;;) {
      if (!(await modal("Log in", body, "Log in"))) return;
      try {
        const r = await api("/api/login", { method: "POST", body: { password: input.value } });
        state.session = { ...state.session, user: r.user, csrf: r.csrf };
        renderAuth();
        route();
        return;
      } catch (e) {
        err.textContent = e.message;
      }
    }
  }
  async function logout() {
    await api("/api/logout", { method: "POST", body: {} });
    await loadSession();
    route();
  }

  // ------------------------------------------------------------ charts
  const COLORS = ["#2858c5", "#f79009", "#12b76a", "#d92d20", "#7a5af8"];
  // A line chart on a canvas: series [{name, values}], x = times (ms).
  function drawChart(canvas, t, series, fmt) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || 320, hgt = canvas.clientHeight || 170;
    canvas.width = w * dpr;
    canvas.height = hgt * dpr;
    const g = canvas.getContext("2d");
    g.scale(dpr, dpr);
    g.clearRect(0, 0, w, hgt);
    const pad = { l: 52, r: 8, t: 8, b: 20 };
    let max = 0;
    for (const s of series) for (const v of s.values) if (v > max) max = v;
    max = max > 0 ? max * 1.1 : 1;
    const t0 = t.length ? t[0] : 0, t1 = t.length ? t[t.length - 1] : 1;
    const x = (v) => pad.l + ((v - t0) / Math.max(1, t1 - t0)) * (w - pad.l - pad.r);
    const y = (v) => hgt - pad.b - (v / max) * (hgt - pad.t - pad.b);
    g.strokeStyle = "#eaecf0";
    g.fillStyle = "#667085";
    g.font = "11px system-ui, sans-serif";
    g.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const v = (max * i) / 4;
      g.beginPath();
      g.moveTo(pad.l, y(v));
      g.lineTo(w - pad.r, y(v));
      g.stroke();
      g.fillText(fmt(v), 4, y(v) + 4);
    }
    if (t.length > 1) {
      g.fillText(new Date(t0).toISOString().slice(11, 19), pad.l, hgt - 5);
      const end = new Date(t1).toISOString().slice(11, 19);
      g.fillText(end, w - pad.r - g.measureText(end).width, hgt - 5);
    }
    series.forEach((s, k) => {
      g.strokeStyle = COLORS[k % COLORS.length];
      g.lineWidth = 1.6;
      g.beginPath();
      s.values.forEach((v, i) => (i ? g.lineTo(x(t[i]), y(v)) : g.moveTo(x(t[i]), y(v))));
      g.stroke();
    });
  }
  function chartBox(title, names) {
    const canvas = h("canvas");
    const legend = h("div", { class: "legend" }, names.map((n, k) => h("span", {}, h("i", { style: `background:${COLORS[k % COLORS.length]}` }), n)));
    return { el: h("div", { class: "chart" }, h("h2", { text: title }), legend, canvas), canvas };
  }

  // ------------------------------------------------------------ views
  const VIEWS = {};

  VIEWS.overview = {
    title: "Overview",
    async render(main) {
      this.lane = this.lane || "";
      this.series = null;
      const cards = h("div", { class: "cards", id: "cards" });
      const table = h("table", { id: "lanes" });
      // one listener for every row's Pause/Resume (rows are redrawn in place)
      table.addEventListener("click", (e) => {
        const b = e.target.closest("button.lane-toggle");
        if (b && !b.disabled) laneToggle(b.dataset.lane, b.dataset.pause === "1");
      });
      const select = h("select", { id: "chart-lane", onchange: () => ((this.lane = select.value), this.loadHistory()) });
      this.charts = {
        depth: chartBox("Depth", ["ready", "delayed", "in flight", "DLQ"]),
        age: chartBox("Oldest ready job", ["age"]),
        rate: chartBox("Throughput (jobs/s)", ["submitted", "acked"]),
      };
      main.replaceChildren(
        h("h1", { text: "Overview" }),
        cards,
        h("h2", { text: "Lanes" }),
        table,
        h("div", { class: "toolbar" }, h("h2", { text: "Last hour" }), select),
        h("div", { class: "charts" }, this.charts.depth.el, this.charts.age.el, this.charts.rate.el),
      );
      this.els = { cards, table, select };
      const ov = state.overview || (await api("/api/overview"));
      this.onStats(ov);
      await this.loadHistory();
      main.dataset.ready = "overview";
    },
    async loadHistory() {
      const r = await api(`/api/history?lane=${encodeURIComponent(this.lane)}`);
      this.series = r.series || { t: [], ready: [], delayed: [], inFlight: [], dlq: [], oldestReadyAgeMs: [], submitRate: [], ackRate: [] };
      this.drawCharts();
    },
    drawCharts() {
      const s = this.series;
      if (!s) return;
      drawChart(this.charts.depth.canvas, s.t, [{ values: s.ready }, { values: s.delayed }, { values: s.inFlight }, { values: s.dlq }], (v) => fmtN(Math.round(v)));
      drawChart(this.charts.age.canvas, s.t, [{ values: s.oldestReadyAgeMs }], fmtAge);
      drawChart(this.charts.rate.canvas, s.t, [{ values: s.submitRate }, { values: s.ackRate }], fmtRate);
    },
    onStats(ov) {
      const { cards, table, select } = this.els;
      const b = ov.broker;
      morph(cards, h(
        "div",
        { class: "cards", id: "cards" },
        ...(b
          ? [
              ["role", b.role],
              ["store", b.store],
              ["workers", fmtN(b.workers)],
              ["producers", fmtN(b.producers)],
              ["tenants", fmtN(b.tenants)],
              ["ready", fmtN(ov.lanes.reduce((a, l) => a + l.ready, 0))],
              ["dead letters", fmtN(ov.lanes.reduce((a, l) => a + l.dlq, 0))],
              ["uptime", fmtAge(b.uptimeMs)],
            ]
          : [["broker", "not answering"]]
        ).map(([k, v]) => h("div", { class: "card" }, h("div", { class: "k", text: k }), h("div", { class: "v", text: v }))),
      ));
      const head = h("tr", {}, ["lane", "ready", "delayed", "in flight", "DLQ", "oldest ready", "submitted/s", "acked/s", "state", ""].map((c, i) => h("th", { class: i && i < 8 ? "num" : null, text: c })));
      const rows = ov.lanes.map((l) =>
        h(
          "tr",
          { dataset: { lane: l.lane } },
          h("td", {}, h("a", { href: `#/tenants?lane=${encodeURIComponent(l.lane)}`, text: l.lane })),
          h("td", { class: "num", dataset: { f: "ready" }, text: fmtN(l.ready) }),
          h("td", { class: "num", dataset: { f: "delayed" }, text: fmtN(l.delayed) }),
          h("td", { class: "num", dataset: { f: "inFlight" }, text: fmtN(l.inFlight) }),
          h("td", { class: "num", dataset: { f: "dlq" } }, l.dlq ? h("a", { href: `#/dlq?lane=${encodeURIComponent(l.lane)}`, text: fmtN(l.dlq) }) : "0"),
          h("td", { class: "num", text: fmtAge(l.oldestReadyAgeMs) }),
          h("td", { class: "num", text: fmtRate(l.submitRate) }),
          h("td", { class: "num", text: fmtRate(l.ackRate) }),
          h("td", { dataset: { f: "state" } }, l.paused ? h("span", { class: "badge paused", text: "paused" }) : "running", l.breaker && l.breaker !== "closed" ? h("span", { class: `badge ${l.breaker}`, text: ` breaker ${l.breaker}` }) : null),
          h(
            "td",
            {},
            h("button", {
              class: "lane-toggle",
              disabled: !canAct(),
              title: actTitle(),
              text: l.paused ? "Resume" : "Pause",
              dataset: { lane: l.lane, pause: l.paused ? "0" : "1" },
            }),
          ),
        ),
      );
      morph(table, h("table", { id: "lanes" }, h("thead", {}, head), h("tbody", {}, rows)));
      const lanes = ["", ...ov.lanes.map((l) => l.lane)];
      if (select.options.length !== lanes.length || [...select.options].some((o, i) => o.value !== lanes[i])) {
        select.replaceChildren(...lanes.map((l) => h("option", { value: l, text: l || "all lanes" })));
        select.value = this.lane;
      }
      // the charts follow the live figures between history reloads
      const s = this.series;
      if (s && ov.at && (!s.t.length || ov.at > s.t[s.t.length - 1])) {
        const rowsFor = this.lane ? ov.lanes.filter((l) => l.lane === this.lane) : ov.lanes;
        const sum = (f) => rowsFor.reduce((a, l) => a + (l[f] || 0), 0);
        s.t.push(ov.at);
        for (const f of ["ready", "delayed", "inFlight", "dlq", "submitRate", "ackRate"]) s[f].push(sum(f));
        s.oldestReadyAgeMs.push(rowsFor.reduce((a, l) => Math.max(a, l.oldestReadyAgeMs || 0), 0));
        const keep = 1800;
        if (s.t.length > keep) for (const k of Object.keys(s)) s[k].splice(0, s[k].length - keep);
        this.drawCharts();
      }
    },
  };

  async function laneToggle(lane, pause) {
    if (!(await confirmAction(pause ? "Pause lane" : "Resume lane", pause ? `Pause lane '${lane}'? Nothing of it is dispatched until it is resumed; jobs already running finish.` : `Resume lane '${lane}'?`, pause ? "Pause" : "Resume"))) return;
    try {
      await api(`/api/lanes/${encodeURIComponent(lane)}/${pause ? "pause" : "resume"}`, { method: "POST", body: {} });
      banner("");
    } catch (e) {
      banner(`${pause ? "pause" : "resume"} ${lane}: ${e.message}`);
    }
  }

  VIEWS.tenants = {
    title: "Tenants",
    async render(main, params) {
      this.q = params.get("q") || "";
      this.lane = params.get("lane") || "";
      this.sort = params.get("sort") || "ready";
      this.dir = params.get("dir") || "desc";
      this.page = Number(params.get("page") || 0);
      const search = h("input", { id: "tenant-search", type: "search", placeholder: "tenant contains", value: this.q });
      const ov = state.overview || (await api("/api/overview"));
      const lane = h("select", { id: "tenant-lane" }, h("option", { value: "", text: "every lane" }), ov.lanes.map((l) => h("option", { value: l.lane, text: l.lane })));
      lane.value = this.lane;
      let timer = null;
      search.addEventListener("input", () => {
        clearTimeout(timer);
        timer = setTimeout(() => ((this.q = search.value), (this.page = 0), this.load()), 200);
      });
      lane.addEventListener("change", () => ((this.lane = lane.value), (this.page = 0), this.load()));
      this.els = { table: h("table", { id: "tenants" }), info: h("span", { class: "muted", id: "tenant-count" }), pager: h("span") };
      main.replaceChildren(h("h1", { text: "Tenants" }), h("form", { class: "filters", onsubmit: (e) => e.preventDefault() }, h("label", {}, "Search", search), h("label", {}, "Lane", lane)), h("div", { class: "toolbar" }, this.els.info, this.els.pager), this.els.table);
      await this.load();
      main.dataset.ready = "tenants";
    },
    async load() {
      const qs = new URLSearchParams({ q: this.q, lane: this.lane, sort: this.sort, dir: this.dir, page: String(this.page), size: "50" });
      const r = await api(`/api/tenants?${qs}`);
      const cols = [
        ["tenant", "tenant"],
        ["lane", "lane"],
        ["ready", "ready"],
        ["delayed", "delayed"],
        ["inFlight", "in flight"],
        ["dlq", "DLQ"],
        ["oldestReadyAgeMs", "oldest ready"],
        ["submitRate", "submitted/s", false], // a rate between two looks: not sorted by
        ["ackRate", "acked/s", false],
        ["capped", "capped"],
        ["throttled", "throttled"],
      ];
      const head = h(
        "tr",
        {},
        cols.map(([k, label, sortable = true], i) =>
          h("th", {
            class: `${sortable ? "sortable" : ""} ${i > 1 ? "num" : ""} ${this.sort === k ? "sorted" : ""} ${this.sort === k && this.dir === "asc" ? "asc" : ""}`,
            dataset: sortable ? { sort: k } : {},
            text: label,
            onclick: sortable
              ? () => {
                  if (this.sort === k) this.dir = this.dir === "asc" ? "desc" : "asc";
                  else (this.sort = k), (this.dir = i > 1 ? "desc" : "asc");
                  this.page = 0;
                  this.load();
                }
              : null,
          }),
        ),
      );
      const rows = r.rows.map((t) =>
        h(
          "tr",
          { dataset: { tenant: t.tenant, lane: t.lane } },
          h("td", { text: t.tenant }),
          h("td", { text: t.lane }),
          ...["ready", "delayed", "inFlight", "dlq"].map((f) => h("td", { class: "num", text: fmtN(t[f]) })),
          h("td", { class: "num", text: fmtAge(t.oldestReadyAgeMs) }),
          h("td", { class: "num", text: t.submitRate === null ? "…" : fmtRate(t.submitRate) }),
          h("td", { class: "num", text: t.ackRate === null ? "…" : fmtRate(t.ackRate) }),
          h("td", { class: "num", text: fmtN(t.capped) }),
          h("td", { class: "num", text: fmtN(t.throttled) }),
        ),
      );
      // in place: the listeners kept are the first ones, which read the view's state
      morph(this.els.table, h("table", { id: "tenants" }, h("thead", {}, head), h("tbody", {}, rows)));
      const pages = Math.max(1, Math.ceil(r.total / r.size));
      this.els.info.textContent = `${fmtN(r.total)} tenant-lane groups, page ${r.page + 1} of ${pages}`;
      morph(
        this.els.pager,
        h(
          "span",
          {},
          h("button", { id: "prev", disabled: r.page === 0, text: "Previous", onclick: () => (this.page--, this.load()) }),
          h("button", { id: "next", disabled: r.page + 1 >= pages, text: "Next", onclick: () => (this.page++, this.load()) }),
        ),
      );
    },
    onStats() {
      // live: the page shown, refreshed at each poll (one fetch at a time)
      if (this.loading) return;
      this.loading = this.load()
        .catch(() => {})
        .finally(() => (this.loading = null));
    },
  };

  VIEWS.workers = {
    title: "Workers",
    async render(main) {
      this.table = h("table", { id: "workers" });
      main.replaceChildren(h("h1", { text: "Workers" }), this.table);
      await this.load();
      main.dataset.ready = "workers";
    },
    async load() {
      const r = await api("/api/workers");
      const head = h("tr", {}, ["name", "host", "lanes", "capacity", "in flight", "heartbeat every", "last heartbeat"].map((c, i) => h("th", { class: i >= 3 ? "num" : null, text: c })));
      const rows = r.workers.map((w) =>
        h(
          "tr",
          { dataset: { worker: w.name } },
          h("td", { text: w.name }),
          h("td", { text: w.host || "-" }),
          h("td", { text: w.lanes.join(", ") }),
          h("td", { class: "num", text: w.capacity ? fmtN(w.capacity) : "draining" }),
          h("td", { class: "num", text: fmtN(w.inFlight) }),
          h("td", { class: "num", text: fmtAge(w.heartbeatMs) }), // its own pace ("-": not reported)
          h("td", { class: "num", text: `${fmtAge(w.lastSeenAgeMs) === "-" ? "0 ms" : fmtAge(w.lastSeenAgeMs)} ago` }),
        ),
      );
      morph(this.table, h("table", { id: "workers" }, h("thead", {}, head), h("tbody", {}, rows.length ? rows : [h("tr", {}, h("td", { colspan: 7, class: "muted", text: "no worker is connected" }))])));
    },
    onStats() {
      this.load().catch(() => {});
    },
  };

  VIEWS.dlq = {
    title: "Dead letters",
    async render(main, params) {
      this.f = { lane: params.get("lane") || "", tenant: params.get("tenant") || "", error: params.get("error") || "", from: params.get("from") || "", to: params.get("to") || "" };
      this.items = [];
      this.next = null;
      this.selected = new Set();
      this.arrived = 0;
      const lanes = (state.overview || (await api("/api/overview"))).lanes;
      const laneSel = h("select", { name: "lane", id: "dlq-lane" }, h("option", { value: "", text: "any" }), lanes.map((l) => h("option", { value: l.lane, text: l.lane })));
      laneSel.value = this.f.lane;
      const tenant = h("input", { name: "tenant", id: "dlq-tenant", value: this.f.tenant });
      const error = h("input", { name: "error", id: "dlq-error", value: this.f.error, placeholder: "text in the error" });
      const toLocal = (ms) => (ms ? new Date(Number(ms) - new Date().getTimezoneOffset() * 60000).toISOString().slice(0, 16) : "");
      const from = h("input", { type: "datetime-local", name: "from", id: "dlq-from", value: toLocal(this.f.from) });
      const to = h("input", { type: "datetime-local", name: "to", id: "dlq-to", value: toLocal(this.f.to) });
      const form = h(
        "form",
        {
          class: "filters",
          id: "dlq-filters",
          onsubmit: (e) => {
            e.preventDefault();
            const p = new URLSearchParams();
            const ms = (v) => (v ? String(new Date(v).getTime()) : "");
            for (const [k, v] of Object.entries({ lane: laneSel.value, tenant: tenant.value, error: error.value, from: ms(from.value), to: ms(to.value) })) if (v) p.set(k, v);
            location.hash = `#/dlq?${p}`;
          },
        },
        h("label", {}, "Lane", laneSel),
        h("label", {}, "Tenant", tenant),
        h("label", {}, "Error contains", error),
        h("label", {}, "Died after", from),
        h("label", {}, "Died before", to),
        h("button", { type: "submit", id: "dlq-apply", text: "Filter" }),
      );
      const act = (verb, which) => this.act(verb, which);
      this.els = {
        table: h("table", { id: "dlq" }),
        more: h("button", { id: "dlq-more", text: "Load more", onclick: () => this.load(true) }),
        live: h("span", { class: "live", id: "dlq-live" }),
        count: h("span", { class: "muted", id: "dlq-count" }),
      };
      const off = !canAct();
      main.replaceChildren(
        h("h1", { text: "Dead letters" }),
        form,
        h(
          "div",
          { class: "toolbar" },
          h("button", { id: "redrive-selected", disabled: off, title: actTitle(), text: "Redrive selected", onclick: () => act("redrive", "selected") }),
          h("button", { id: "purge-selected", class: "danger", disabled: off, title: actTitle(), text: "Purge selected", onclick: () => act("purge", "selected") }),
          h("button", { id: "redrive-matching", disabled: off, title: actTitle(), text: "Redrive all matching", onclick: () => act("redrive", "matching") }),
          h("button", { id: "purge-matching", class: "danger", disabled: off, title: actTitle(), text: "Purge all matching", onclick: () => act("purge", "matching") }),
          this.els.count,
          this.els.live,
        ),
        this.els.table,
        h("div", { class: "toolbar" }, this.els.more),
      );
      await this.load(false);
      main.dataset.ready = "dlq";
    },
    query(after) {
      const p = new URLSearchParams({ limit: "50" });
      for (const [k, v] of Object.entries(this.f)) if (v) p.set(k, v);
      if (after) p.set("after", after);
      return p;
    },
    async load(more) {
      const r = await api(`/api/dlq?${this.query(more ? this.next : null)}`);
      if (!more) this.items = [];
      this.items.push(...r.items);
      this.next = r.next;
      this.draw();
    },
    draw() {
      const all = h("input", {
        type: "checkbox",
        id: "dlq-all",
        onchange: () => {
          for (const d of this.items) all.checked ? this.selected.add(d.jobId) : this.selected.delete(d.jobId);
          this.draw();
        },
      });
      all.checked = this.items.length > 0 && this.items.every((d) => this.selected.has(d.jobId));
      const head = h("tr", {}, h("th", {}, all), ...["job", "lane", "tenant", "died", "error"].map((c) => h("th", { text: c })));
      const rows = this.items.map((d) => {
        const box = h("input", { type: "checkbox", class: "pick", dataset: { id: d.jobId }, onchange: () => (box.checked ? this.selected.add(d.jobId) : this.selected.delete(d.jobId), this.count()) });
        box.checked = this.selected.has(d.jobId);
        return h(
          "tr",
          { class: d.live ? "new" : null, dataset: { job: d.jobId } },
          h("td", {}, box),
          h("td", {}, h("a", { href: `#/dlq/${d.jobId}`, text: d.jobId })),
          h("td", { text: d.lane }),
          h("td", { text: d.tenant }),
          h("td", { text: fmtTime(d.deadAtMs) }),
          h("td", { class: "err", text: d.error }),
        );
      });
      this.els.table.replaceChildren(h("thead", {}, head), h("tbody", {}, rows.length ? rows : [h("tr", {}, h("td", { colspan: 6, class: "muted", text: "no dead letter matches" }))]));
      this.els.more.hidden = !this.next;
      this.count();
    },
    count() {
      this.els.count.textContent = `${fmtN(this.items.length)} shown${this.next ? " (more below)" : ""}, ${fmtN(this.selected.size)} selected`;
    },
    matches(d) {
      const f = this.f;
      if (f.lane && d.lane !== f.lane) return false;
      if (f.tenant && d.tenant !== f.tenant) return false;
      if (f.error && !String(d.error).toLowerCase().includes(f.error.toLowerCase())) return false;
      if (f.from && d.deadAtMs < Number(f.from)) return false;
      if (f.to && d.deadAtMs >= Number(f.to)) return false;
      return true;
    },
    onDead(d) {
      if (!this.matches(d) || this.items.some((x) => x.jobId === d.jobId)) return;
      this.items.push({ ...d, live: true });
      this.arrived++;
      this.els.live.textContent = `${this.arrived} arrived live`;
      this.draw();
    },
    async act(verb, which) {
      let body, text;
      if (which === "selected") {
        const ids = [...this.selected];
        if (!ids.length) return banner("select dead letters first");
        body = { ids };
        text = `${verb === "redrive" ? "Redrive" : "Purge"} ${ids.length} selected dead letter(s)?`;
      } else {
        const f = {};
        for (const [k, v] of Object.entries(this.f)) if (v) f[k] = v;
        if (!Object.keys(f).length) f.all = true;
        body = { filter: f };
        const said = Object.entries(f).map(([k, v]) => (k === "all" ? "every dead letter" : `${k} ${k === "from" || k === "to" ? fmtTime(Number(v)) : `'${v}'`}`));
        text = `${verb === "redrive" ? "Redrive" : "Purge"} all dead letters matching ${said.join(", ")}? This is not limited to the rows shown.`;
      }
      if (verb === "purge") text += " Purged jobs are deleted for good.";
      if (!(await confirmAction(verb === "redrive" ? "Redrive" : "Purge", text, verb === "redrive" ? "Redrive" : "Purge"))) return;
      try {
        const r = await api(`/api/dlq/${verb}`, { method: "POST", body });
        banner("");
        this.selected.clear();
        this.els.live.textContent = `${verb === "redrive" ? "redrove" : "purged"} ${r.count}`;
        await this.load(false);
      } catch (e) {
        banner(`${verb}: ${e.message}`);
      }
    },
  };

  function hexDump(bytes) {
    const lines = [];
    for (let i = 0; i < bytes.length; i += 16) {
      const row = bytes.subarray(i, i + 16);
      const hex = [...row].map((b) => b.toString(16).padStart(2, "0")).join(" ");
      const ascii = [...row].map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
      lines.push(`${i.toString(16).padStart(8, "0")}  ${hex.padEnd(47)}  ${ascii}`);
    }
    return lines.join("\n");
  }
  const fromB64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));

  VIEWS.deadLetter = {
    title: null, // reached from the DLQ list: #/dlq/ID
    async render(main, params, id) {
      const d = await api(`/api/dlq/${id}`);
      const bytes = fromB64(d.payload.base64);
      const textView = h("pre", { id: "payload-text" }, d.payload.text === null ? "(not UTF-8 text: see the hex view)" : d.payload.text);
      const hexView = h("pre", { class: "hex", id: "payload-hex", hidden: true }, hexDump(bytes));
      const tab = (name, show) => h("button", { class: show ? "on" : null, id: `tab-${name}`, text: name, onclick: (e) => {
        textView.hidden = name !== "text";
        hexView.hidden = name !== "hex";
        for (const b of e.target.parentNode.children) b.classList.toggle("on", b === e.target);
      } });
      const isText = d.payload.text !== null;
      textView.hidden = !isText;
      hexView.hidden = isText;
      const off = !canAct();
      const act = async (verb) => {
        if (!(await confirmAction(verb === "redrive" ? "Redrive" : "Purge", `${verb === "redrive" ? "Redrive" : "Purge"} dead letter ${d.jobId}${verb === "purge" ? " (deleted for good)" : ""}?`, verb === "redrive" ? "Redrive" : "Purge"))) return;
        try {
          const r = await api(`/api/dlq/${verb}`, { method: "POST", body: { ids: [d.jobId] } });
          banner("");
          main.replaceChildren(h("h1", { text: `Dead letter ${d.jobId}` }), h("p", { id: "acted", text: `${verb === "redrive" ? "Redriven" : "Purged"} (${r.count}).` }), h("a", { href: "#/dlq", text: "Back to the dead letters" }));
        } catch (e) {
          banner(`${verb}: ${e.message}`);
        }
      };
      const kv = (pairs) => h("dl", { class: "kv" }, pairs.flatMap(([k, v]) => [h("dt", { text: k }), h("dd", { dataset: { k }, text: v })]));
      main.replaceChildren(
        h("h1", { text: `Dead letter ${d.jobId}` }),
        h(
          "div",
          { class: "toolbar" },
          h("button", { id: "redrive-one", class: "primary", disabled: off, title: actTitle(), text: "Redrive", onclick: () => act("redrive") }),
          h("button", { id: "purge-one", class: "danger", disabled: off, title: actTitle(), text: "Purge", onclick: () => act("purge") }),
          h("a", { href: "#/dlq", text: "all dead letters" }),
        ),
        kv([
          ["lane", d.lane],
          ["tenant", d.tenant],
          ["final error", d.error],
          ["enqueued", fmtTime(d.enqueuedAtMs)],
          ["died", fmtTime(d.deadAtMs)],
          ["idempotency key", d.idempotencyKey || "-"],
          ["ordering key", d.orderingKey ? `${d.orderingKey}${d.orderingHead ? " (died at the head)" : ""}` : "-"],
          ["checkpoint", d.checkpoint.size ? `${d.checkpoint.size} bytes` : "-"],
        ]),
        h("h2", { text: `Payload (${fmtN(d.payload.size)} bytes)` }),
        h("div", { class: "tabs" }, tab("text", isText), tab("hex", !isText)),
        textView,
        hexView,
        h("h2", { text: "Headers" }),
        Object.keys(d.headers).length ? kv(Object.entries(d.headers)) : h("p", { class: "muted", text: "none" }),
        h("h2", { text: `Attempts (${d.attempts.length})` }),
        h(
          "table",
          { id: "attempts" },
          h("thead", {}, h("tr", {}, ["#", "worker", "started", "ran", "outcome", "error"].map((c) => h("th", { text: c })))),
          h(
            "tbody",
            {},
            d.attempts.map((a) =>
              h("tr", {}, h("td", { text: a.attempt }), h("td", { text: a.worker }), h("td", { text: fmtTime(a.startedAtMs) }), h("td", { text: fmtAge(a.endedAtMs - a.startedAtMs) }), h("td", { text: a.outcome }), h("td", { class: "err", text: a.error })),
            ),
          ),
        ),
      );
      main.dataset.ready = "deadLetter";
    },
  };

  VIEWS.schedules = {
    title: "Schedules",
    async render(main) {
      this.table = h("table", { id: "schedules" });
      main.replaceChildren(h("h1", { text: "Cron schedules" }), this.table);
      await this.load();
      main.dataset.ready = "schedules";
    },
    async load() {
      const r = await api("/api/schedules");
      const head = h("tr", {}, ["name", "cron (UTC)", "lane", "tenant", "missed ticks", "last tick", "next tick", "state", ""].map((c) => h("th", { text: c })));
      const rows = r.schedules.map((s) =>
        h(
          "tr",
          { dataset: { schedule: s.name } },
          h("td", { text: s.name }),
          h("td", { text: s.cron }),
          h("td", { text: s.lane }),
          h("td", { text: s.tenant }),
          h("td", { text: s.missed }),
          h("td", { text: fmtTime(s.lastTickMs) }),
          h("td", { text: s.paused ? "-" : fmtTime(s.nextTickMs) }),
          h("td", {}, s.paused ? h("span", { class: "badge paused", text: "paused" }) : "running"),
          h("td", {}, h("button", { disabled: !canAct(), title: actTitle(), text: s.paused ? "Resume" : "Pause", onclick: async () => {
            try {
              await api(`/api/schedules/${encodeURIComponent(s.name)}/${s.paused ? "resume" : "pause"}`, { method: "POST", body: {} });
              await this.load();
            } catch (e) {
              banner(e.message);
            }
          } })),
        ),
      );
      this.table.replaceChildren(h("thead", {}, head), h("tbody", {}, rows.length ? rows : [h("tr", {}, h("td", { colspan: 9, class: "muted", text: "no schedule" }))]));
    },
  };

  VIEWS.lookup = {
    title: "Jobs & batches",
    async render(main, params) {
      const out = h("div", { id: "lookup-out" });
      const job = h("input", { id: "job-id", placeholder: "job id", value: params.get("job") || "" });
      const batch = h("input", { id: "batch-id", placeholder: "batch id", value: params.get("batch") || "" });
      const kv = (pairs) => h("dl", { class: "kv" }, pairs.flatMap(([k, v]) => [h("dt", { text: k }), h("dd", { dataset: { k }, text: String(v) })]));
      const node = (n, self) =>
        h(
          "a",
          { class: `node ${n.found ? n.state : "gone"} ${self ? "self" : ""}`, href: `#/lookup?job=${n.jobId}`, dataset: { node: n.jobId } },
          h("b", { text: n.jobId }),
          h("span", { text: n.found ? `${n.state}${n.outcome && n.outcome !== "unspecified" ? ` · ${n.outcome}` : ""}` : "not kept" }),
        );
      const graphOf = (g) =>
        !g.parents.length && !g.children.length
          ? h("p", { class: "muted", text: "no parents or children in the broker's graph" })
          : h(
              "div",
              { class: "graph", id: "job-graph" },
              h("div", { class: "row" }, h("span", { class: "muted", text: "parents" }), g.parents.length ? g.parents.map((n) => node(n)) : h("span", { class: "muted", text: "none" }), g.more.parents ? h("span", { text: `+${g.more.parents} more` }) : null),
              h("div", { class: "row" }, h("span", { class: "muted", text: "job" }), node({ jobId: g.job.jobId, found: true, state: g.job.state, outcome: g.job.outcome }, true)),
              h("div", { class: "row" }, h("span", { class: "muted", text: "children" }), g.children.length ? g.children.map((n) => node(n)) : h("span", { class: "muted", text: "none" }), g.more.children ? h("span", { text: `+${g.more.children} more` }) : null),
            );
      const showJob = async () => {
        try {
          const g = await api(`/api/jobs/${encodeURIComponent(job.value.trim())}/graph`);
          const j = g.job;
          if (!j.found) return out.replaceChildren(h("p", { text: `job ${job.value}: not found (never issued, or finished and no longer kept)` }));
          out.replaceChildren(
            h("h2", { text: `Job ${j.jobId}` }),
            h("h2", { text: "Workflow" }),
            graphOf(g),
            kv([["state", j.state], ["final", j.final ? "yes" : "no"], ["outcome", j.outcome || "-"], ["lane", j.lane], ["tenant", j.tenant], ["attempts", j.attempts], ["finished", fmtTime(j.finishedAtMs)], ["error", j.error || "-"], ["failed parent", j.failedParent !== "0" ? j.failedParent : "-"]]),
            h("h2", { text: `Result (${j.result.size} bytes)` }),
            h("pre", {}, j.result.text === null ? hexDump(fromB64(j.result.base64)) : j.result.text),
          );
        } catch (e) {
          out.replaceChildren(h("p", { text: e.message }));
        }
      };
      const showBatch = async () => {
        try {
          const b = await api(`/api/batches/${encodeURIComponent(batch.value.trim())}`);
          if (!b.found) return out.replaceChildren(h("p", { text: `batch ${batch.value}: not known to the broker` }));
          const total = Math.max(1, b.jobs);
          const bar = h("div", { class: "progress", id: "batch-progress" }, h("span", { style: `width:${(100 * b.acked) / total}%;background:#12b76a` }), h("span", { style: `width:${(100 * b.dead) / total}%;background:#d92d20` }), h("span", { style: `width:${(100 * (b.cancelledJobs || 0)) / total}%;background:#98a2b3` }));
          out.replaceChildren(h("h2", { text: `Batch ${batch.value}` }), bar, kv(Object.entries(b).filter(([, v]) => typeof v !== "object")));
        } catch (e) {
          out.replaceChildren(h("p", { text: e.message }));
        }
      };
      main.replaceChildren(
        h("h1", { text: "Jobs & batches" }),
        h("form", { class: "filters", onsubmit: (e) => (e.preventDefault(), showJob()) }, h("label", {}, "Job", job), h("button", { type: "submit", text: "Show job" })),
        h("form", { class: "filters", onsubmit: (e) => (e.preventDefault(), showBatch()) }, h("label", {}, "Batch", batch), h("button", { type: "submit", text: "Show batch" })),
        out,
      );
      if (job.value) await showJob();
      else if (batch.value) await showBatch();
      main.dataset.ready = "lookup";
    },
  };

  const ROUTES = [
    [/^\/dlq\/(\d+)$/, "deadLetter"],
    [/^\/dlq$/, "dlq"],
    [/^\/tenants$/, "tenants"],
    [/^\/workers$/, "workers"],
    [/^\/schedules$/, "schedules"],
    [/^\/lookup$/, "lookup"],
    [/^\/(overview)?$/, "overview"],
  ];

  function renderNav(active) {
    $("#nav").replaceChildren(
      ...Object.entries(VIEWS)
        .filter(([, v]) => v.title)
        .map(([name, v]) => h("a", { href: `#/${name}`, class: name === active || (active === "deadLetter" && name === "dlq") ? "active" : null, text: v.title })),
    );
  }

  let routing = 0;
  async function route() {
    const raw = location.hash.replace(/^#/, "") || "/overview";
    const [pathPart, query] = raw.split("?");
    const params = new URLSearchParams(query || "");
    let name = "overview", arg;
    for (const [re, n] of ROUTES) {
      const m = pathPart.match(re);
      if (m) {
        name = n;
        arg = m[1];
        break;
      }
    }
    const main = $("#main");
    delete main.dataset.ready;
    state.view = VIEWS[name];
    renderNav(name);
    const mine = ++routing;
    try {
      await state.view.render(main, params, arg);
    } catch (e) {
      if (mine === routing) main.replaceChildren(h("h1", { text: "Not available" }), h("p", { id: "view-error", text: e.message }));
      main.dataset.ready = "error";
    }
  }

  function live() {
    const es = new EventSource("/api/stream");
    es.addEventListener("stats", (e) => {
      const ov = JSON.parse(e.data);
      state.overview = ov;
      const b = ov.broker;
      $("#broker").textContent = b ? `${b.role} · ${b.store}${b.epoch ? ` · epoch ${b.epoch}` : ""} · updated ${new Date(ov.at).toISOString().slice(11, 19)}Z` : "";
      banner(ov.error ? `the broker does not answer: ${ov.error}` : "");
      if (state.view && state.view.onStats && $("#main").dataset.ready) state.view.onStats(ov);
    });
    es.addEventListener("dead", (e) => {
      if (state.view && state.view.onDead && $("#main").dataset.ready) state.view.onDead(JSON.parse(e.data));
    });
  }

  window.addEventListener("hashchange", route);
  window.addEventListener("DOMContentLoaded", async () => {
    try {
      await loadSession();
    } catch (e) {
      banner(`the dashboard does not answer: ${e.message}`);
    }
    live();
    route();
  });
})();
