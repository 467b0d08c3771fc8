"use strict";
// The dashboard in a real browser: Debian's Chromium (headless, driven over
// the DevTools protocol by puppeteer-core), zlane-web as its own process, a
// real broker, and a Node worker and producer from the client library; all
// on 127.0.0.1 ephemeral ports, every process stopped by PID. Screenshots go
// to $ZLANE_ARTIFACTS (build/artifacts by default).
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const puppeteer = require("puppeteer-core");
const { execFileSync } = require("node:child_process");
const { Broker, waitFor, run, stopChild, tmpdir, bin } = require("../../clients/node/testlib/harness");
const zlane = require("../../clients/node");

const CHROMIUM = process.env.ZLANE_CHROMIUM || "/usr/bin/chromium";
const ARTIFACTS = process.env.ZLANE_ARTIFACTS || path.resolve(__dirname, "..", "..", "build", "artifacts");
const PASSWORD = "correct horse battery staple";
const SCRIPT_PAYLOAD = `<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"><b>bold?</b>`;

/** Start zlane-web on a free port; resolves {proc, url, outPath}. */
async function startDashboard(broker, dir, extra = []) {
  const urlFile = path.join(dir, "url");
  const pw = path.join(dir, "password");
  fs.writeFileSync(pw, PASSWORD + "\n");
  const outPath = path.join(dir, "web.out");
  const errPath = path.join(dir, "web.err");
  const proc = run(process.execPath, [path.join(__dirname, "..", "bin", "zlane-web.js"), "--admin", broker.admin, "--events", broker.events, "--listen", "127.0.0.1:0", "--password-file", pw, "--url-file", urlFile, "--refresh", "300ms", ...extra], { outPath, errPath });
  let exited = false;
  proc.exited.then(() => (exited = true));
  await waitFor(() => exited || (fs.existsSync(urlFile) && fs.readFileSync(urlFile, "utf8").trim()), 10000, "zlane-web's URL");
  if (exited) throw new Error(`zlane-web exited:\n${fs.readFileSync(errPath, "utf8")}`);
  return { proc, url: fs.readFileSync(urlFile, "utf8").trim(), outPath };
}

async function launchBrowser(dir) {
  const browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    userDataDir: path.join(dir, "chromium"),
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking", "--disable-extensions", "--window-size=1280,900"],
    defaultViewport: { width: 1280, height: 900 },
  });
  const pid = browser.process()?.pid;
  process.on("exit", () => {
    try {
      if (pid) process.kill(pid, "SIGKILL");
    } catch {}
  });
  return { browser, pid };
}

/** The text of `sel` once `pred` holds for it. */
async function textOf(page, sel, pred, timeoutMs = 10000, what = sel) {
  return waitFor(async () => {
    const t = await page.$eval(sel, (el) => el.textContent).catch(() => null);
    return t !== null && pred(t) ? t : null;
  }, timeoutMs, what);
}

async function gotoView(page, url, hash, ready) {
  await page.goto(`${url}#${hash}`, { waitUntil: "domcontentloaded" });
  await page.waitForSelector(`#main[data-ready="${ready}"]`, { timeout: 10000 });
}

// Click OK (or Cancel) in the page's confirmation dialog once it shows.
async function answerModal(page, ok = true) {
  await page.waitForSelector("#modal:not([hidden])", { timeout: 5000 });
  const title = await page.$eval("#modal-title", (el) => el.textContent);
  const body = await page.$eval("#modal-body", (el) => el.textContent);
  await page.click(ok ? "#modal-ok" : "#modal-cancel");
  await page.waitForSelector("#modal[hidden]", { hidden: false, timeout: 5000 }).catch(() => {});
  return { title, body };
}

test("the dashboard in Chromium", { timeout: 150000 }, async (t) => {
  const dir = tmpdir("web");
  const broker = await new Broker(["--lane", "emails", "--lane", "images", "--durability", "none", "--backoff-base", "50ms", "--backoff-cap", "100ms", "--set", "lanes/emails/max_attempts=3"]).start();
  const dash = await startDashboard(broker, dir);
  const { browser, pid } = await launchBrowser(dir);
  const producer = new zlane.Producer({ endpoints: broker.frontend });
  const admin = new zlane.Admin({ endpoints: broker.admin });
  const handled = []; // payloads the worker ran, in order
  let poisonHeals = false;
  const worker = new zlane.Worker({
    endpoints: broker.backend,
    name: "mail-1",
    concurrency: 2,
    heartbeatMs: 1500, // shown on the workers page
    handlers: {
      emails: async (job) => {
        const text = job.text();
        handled.push(text);
        if (text === "poison" && !poisonHeals) throw new Error("smtp: connection refused by mx.example");
        if (text === SCRIPT_PAYLOAD) throw new zlane.PermanentError("template <b>broken</b> & <script>alert(1)</script>");
      },
    },
  }).start();
  const page = await browser.newPage();
  const origin = new URL(dash.url).origin;
  const foreign = [];
  page.on("request", (r) => {
    const u = r.url();
    if (!u.startsWith(origin) && !u.startsWith("data:")) foreign.push(u);
  });
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  t.after(async () => {
    await browser.close().catch(() => {});
    try {
      if (pid) process.kill(pid, "SIGKILL");
    } catch {}
    await worker.stop();
    await producer.close();
    await admin.close();
    await stopChild(dash.proc, "SIGTERM");
    await broker.stop();
  });

  await t.test("the overview shows a lane's depth after jobs are submitted", async () => {
    await gotoView(page, dash.url, "/overview", "overview");
    for (let i = 0; i < 7; i++) await producer.submit({ tenant: "acme", lane: "images", payload: `img-${i}` });
    await textOf(page, 'tr[data-lane="images"] td[data-f="ready"]', (x) => x === "7", 10000, "images ready = 7");
    await textOf(page, 'tr[data-lane="emails"] td[data-f="ready"]', (x) => x === "0");
    await page.screenshot({ path: path.join(ARTIFACTS, "dashboard-overview.png"), fullPage: true });
  });

  let poisonId;
  await t.test("a poison job appears in the DLQ page with every attempt", async () => {
    await gotoView(page, dash.url, "/dlq", "dlq");
    poisonId = await producer.submit({ tenant: "acme", lane: "emails", payload: "poison", headers: { template: "welcome" } });
    // it arrives live (the events socket), without a reload
    await page.waitForSelector(`tr[data-job="${poisonId}"]`, { timeout: 15000 });
    const err = await page.$eval(`tr[data-job="${poisonId}"] td.err`, (el) => el.textContent);
    assert.match(err, /connection refused/);
    await gotoView(page, dash.url, `/dlq/${poisonId}`, "deadLetter");
    const rows = await page.$$eval("#attempts tbody tr", (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent)));
    assert.equal(rows.length, 3);
    assert.deepEqual(rows.map((r) => r[0]), ["1", "2", "3"]);
    for (const r of rows) assert.match(r[5], /connection refused/);
    assert.equal(await page.$eval("#payload-text", (el) => el.textContent), "poison");
    assert.equal(await page.$eval('dd[data-k="template"]', (el) => el.textContent), "welcome");
  });

  await t.test("the DLQ filters by error text", async () => {
    const otherId = await producer.submit({ tenant: "beta", lane: "emails", payload: SCRIPT_PAYLOAD });
    await waitFor(async () => (await admin.dlqList({ all: true })).some((d) => d.jobId === otherId), 10000, "the second dead letter");
    await gotoView(page, dash.url, "/dlq", "dlq");
    await page.waitForSelector(`tr[data-job="${otherId}"]`);
    await page.type("#dlq-error", "REFUSED");
    await page.click("#dlq-apply");
    await page.waitForFunction((id) => !document.querySelector(`tr[data-job="${id}"]`), {}, otherId);
    const ids = await page.$$eval("#dlq tbody tr[data-job]", (trs) => trs.map((tr) => tr.dataset.job));
    assert.deepEqual(ids, [poisonId]);
  });

  await t.test("a <script> payload and error are shown as text and run nothing", async () => {
    const d = (await admin.dlqList({ all: true })).find((x) => x.tenant === "beta");
    await gotoView(page, dash.url, `/dlq/${d.jobId}`, "deadLetter");
    assert.equal(await page.$eval("#payload-text", (el) => el.textContent), SCRIPT_PAYLOAD);
    assert.equal(await page.$eval('dd[data-k="final error"]', (el) => el.textContent), "template <b>broken</b> & <script>alert(1)</script>");
    assert.equal(await page.$$eval("#main script, #main img, #main b", (els) => els.length), 0);
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
    await page.click("#tab-hex");
    const hex = await page.$eval("#payload-hex", (el) => el.textContent);
    assert.match(hex, /^00000000  3c 73 63 72 69 70 74 3e/); // "<script>"
    await page.click("#tab-text");
    await page.screenshot({ path: path.join(ARTIFACTS, "dashboard-dead-letter.png"), fullPage: true });
  });

  await t.test("an anonymous user cannot redrive", async () => {
    await gotoView(page, dash.url, `/dlq/${poisonId}`, "deadLetter");
    assert.equal(await page.$eval("#redrive-one", (b) => b.disabled), true);
    // nor by calling the API behind the page's back
    const status = await page.evaluate(async (id) => {
      const r = await fetch("/api/dlq/redrive", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ ids: [id] }) });
      return r.status;
    }, poisonId);
    assert.equal(status, 401);
    assert.ok((await admin.dlqList({ all: true })).some((d) => d.jobId === poisonId), "still dead");
  });

  await t.test("a wrong password is refused; the right one logs in", async () => {
    await page.click("#login");
    await page.waitForSelector("#modal:not([hidden]) #password");
    await page.type("#password", "wrong");
    await page.click("#modal-ok");
    await textOf(page, "#login-error", (x) => /wrong password/.test(x));
    await page.$eval("#password", (el) => (el.value = ""));
    await page.type("#password", PASSWORD);
    await page.click("#modal-ok");
    await page.waitForSelector("#logout", { timeout: 5000 });
    // a logged-in session still needs the CSRF header: a bare POST is refused
    const status = await page.evaluate(async () => (await fetch("/api/dlq/purge", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ filter: { all: true } }) })).status);
    assert.equal(status, 403);
  });

  await t.test("redrive after login and confirmation; the broker's stats agree", async () => {
    const before = await admin.stats();
    await gotoView(page, dash.url, `/dlq/${poisonId}`, "deadLetter");
    assert.equal(await page.$eval("#redrive-one", (b) => b.disabled), false);
    // Cancel changes nothing
    await page.click("#redrive-one");
    await answerModal(page, false);
    assert.ok((await admin.dlqList({ all: true })).some((d) => d.jobId === poisonId));
    poisonHeals = true;
    await page.click("#redrive-one");
    const m = await answerModal(page, true);
    assert.match(m.body, new RegExp(`Redrive dead letter ${poisonId}`));
    await page.waitForSelector("#acted");
    await waitFor(() => handled.filter((x) => x === "poison").length === 4, 10000, "the redriven job run again");
    await waitFor(async () => {
      const s = await admin.stats();
      const lane = s.lanes.find((l) => l.lane === "emails");
      return s.counters.jobs_redriven === before.counters.jobs_redriven + 1 && lane.dlq === 1 && lane.acked >= 1;
    }, 10000, "stats: one redriven, one dead letter left, the job acked");
    assert.ok(!(await admin.dlqList({ all: true })).some((d) => d.jobId === poisonId));
  });

  await t.test("pause and resume from the page stop and restart dispatch", async () => {
    await gotoView(page, dash.url, "/overview", "overview");
    await page.click('tr[data-lane="emails"] button.lane-toggle');
    await answerModal(page, true);
    await textOf(page, 'tr[data-lane="emails"] td[data-f="state"]', (x) => /paused/.test(x));
    const ran = handled.length;
    const ids = await producer.submitMany(Array.from({ length: 5 }, (_, i) => ({ tenant: "acme", lane: "emails", payload: `held-${i}` })));
    assert.equal(ids.length, 5);
    // accepted, and not dispatched, over several of the broker's turns and the dashboard's polls
    for (let k = 0; k < 3; k++) {
      const polls = await textOf(page, "#broker", (x) => /updated/.test(x));
      await textOf(page, "#broker", (x) => x !== polls, 5000, "the next poll");
      const s = await admin.stats();
      const lane = s.lanes.find((l) => l.lane === "emails");
      assert.equal(lane.ready, 5);
      assert.equal(lane.inFlight, 0);
    }
    assert.equal(handled.length, ran);
    await textOf(page, 'tr[data-lane="emails"] td[data-f="ready"]', (x) => x === "5");
    await page.click('tr[data-lane="emails"] button.lane-toggle');
    await answerModal(page, true);
    await waitFor(() => handled.filter((x) => x.startsWith("held-")).length === 5, 10000, "the held jobs run after resume");
    await textOf(page, 'tr[data-lane="emails"] td[data-f="state"]', (x) => !/paused/.test(x));
  });

  await t.test("a workflow's graph: a job's parents and children, each a link", async () => {
    const submit = (...args) => execFileSync(bin("zlane-submit"), ["--broker", broker.frontend, "--tenant", "acme", ...args], { encoding: "utf8" }).trim();
    const parent = submit("--lane", "images", "resize-first"); // no worker takes images: it stays ready
    const child = submit("--lane", "emails", "--after", parent, "send-after");
    await gotoView(page, dash.url, `/lookup?job=${child}`, "lookup");
    await page.waitForSelector("#job-graph");
    assert.equal(await page.$eval(`#job-graph a.self`, (a) => a.dataset.node), child);
    assert.match(await page.$eval(`#job-graph a.self`, (a) => a.textContent), /waiting/);
    assert.match(await page.$eval(`#job-graph a[data-node="${parent}"]`, (a) => a.textContent), /ready/);
    await page.click(`#job-graph a[data-node="${parent}"]`);
    await page.waitForFunction((id) => document.querySelector("#job-graph a.self")?.dataset.node === id, { timeout: 10000 }, parent);
    assert.ok(await page.$(`#job-graph a[data-node="${child}"]`), "the parent's page names its child");
  });

  await t.test("a batch's progress", async () => {
    const submit = (...args) => execFileSync(bin("zlane-submit"), ["--broker", broker.frontend, "--tenant", "acme", ...args], { encoding: "utf8" }).trim();
    submit("--lane", "images", "--open-batch", "nightly-report", "--no-callback", "open");
    for (let i = 0; i < 3; i++) submit("--lane", "images", "--batch", "nightly-report", `part-${i}`);
    await gotoView(page, dash.url, "/lookup?batch=nightly-report", "lookup");
    await page.waitForSelector("#batch-progress");
    const kv = await page.$$eval("#lookup-out dd", (dds) => Object.fromEntries(dds.map((dd) => [dd.dataset.k, dd.textContent])));
    assert.equal(kv.jobs, "3");
    assert.equal(kv.pending, "3");
    assert.equal(kv.closed, "false");
  });

  await t.test("cron schedules: listed, paused from the page", async () => {
    execFileSync(bin("zlane-ctl"), ["--admin", broker.admin, "schedule", "add", "nightly-digest", "--cron", "0 3 * * *", "--lane", "images", "--tenant", "acme", "digest"], { stdio: "ignore" });
    await gotoView(page, dash.url, "/schedules", "schedules");
    const row = 'tr[data-schedule="nightly-digest"]';
    await page.waitForSelector(row);
    assert.match(await page.$eval(row, (tr) => tr.textContent), /0 3 \* \* \*.*images.*acme.*running/);
    await page.click(`${row} button`);
    await textOf(page, row, (x) => /paused/.test(x));
    assert.equal((await admin.scheduleList()).find((s) => s.name === "nightly-digest").paused, true);
  });

  await t.test("every action is logged with who and what; nothing came from another host", async () => {
    await waitFor(() => {
      const lines = fs.readFileSync(dash.outPath, "utf8").trim().split("\n").filter(Boolean).map((l) => JSON.parse(l));
      const acts = lines.filter((l) => l.event === "action" && l.ok);
      return acts.some((a) => a.who === "admin" && a.action === "dlq.redrive" && a.what.ids[0] === poisonId) && acts.some((a) => a.action === "lane.pause" && a.what.lane === "emails") && acts.some((a) => a.action === "lane.resume") && lines.some((l) => l.event === "login_failed");
    }, 5000, "the action log");
    assert.deepEqual(foreign, []);
    assert.deepEqual(pageErrors, []);
  });

  await t.test("workers and tenants pages", async () => {
    await gotoView(page, dash.url, "/workers", "workers");
    await page.waitForSelector('tr[data-worker="mail-1"]');
    const cells = await page.$$eval('tr[data-worker="mail-1"] td', (tds) => tds.map((td) => td.textContent));
    assert.equal(cells[1], "127.0.0.1");
    assert.equal(cells[2], "emails");
    assert.equal(cells[5], "1.5 s"); // the worker's heartbeat pace, as it reported it
    await gotoView(page, dash.url, "/tenants?q=bet", "tenants");
    const tenants = await page.$$eval("#tenants tbody tr", (trs) => trs.map((tr) => tr.dataset.tenant));
    assert.deepEqual([...new Set(tenants)], ["beta"]);
    // 60 more tenants: sorted by name, 50 a page, the next page from the button
    await producer.submitMany(Array.from({ length: 60 }, (_, i) => ({ tenant: `t-${String(i).padStart(3, "0")}`, lane: "images", payload: "x" })));
    await gotoView(page, dash.url, "/tenants?q=t-&sort=tenant&dir=asc&lane=images", "tenants");
    await textOf(page, "#tenant-count", (x) => /^60 tenant-lane groups, page 1 of 2$/.test(x));
    const first = await page.$$eval("#tenants tbody tr", (trs) => trs.map((tr) => tr.dataset.tenant));
    assert.equal(first.length, 50);
    assert.equal(first[0], "t-000");
    await page.click("#next");
    await textOf(page, "#tenant-count", (x) => /page 2 of 2/.test(x));
    const second = await page.$$eval("#tenants tbody tr", (trs) => trs.map((tr) => tr.dataset.tenant));
    assert.deepEqual(second, Array.from({ length: 10 }, (_, i) => `t-${String(50 + i).padStart(3, "0")}`));
    // sorted the other way by a click on the header
    await page.click('th[data-sort="tenant"]');
    await page.waitForFunction(() => document.querySelector("#tenants tbody tr")?.dataset.tenant === "t-059", { timeout: 10000 });
  });
});

test("a read-only dashboard has no login and refuses actions", { timeout: 30000 }, async (t) => {
  const dir = tmpdir("web-ro");
  const broker = await new Broker(["--lane", "a", "--durability", "none"]).start();
  const dash = await startDashboard(broker, dir, ["--read-only"]);
  t.after(async () => {
    await stopChild(dash.proc, "SIGTERM");
    await broker.stop();
  });
  // a page of another host name (DNS rebinding onto 127.0.0.1) is refused
  const http = require("node:http");
  const port = new URL(dash.url).port;
  const status = await new Promise((resolve, reject) =>
    http.get({ host: "127.0.0.1", port, path: "/api/overview", headers: { Host: `evil.example:${port}` } }, (r) => {
      r.resume();
      resolve(r.statusCode);
    }).on("error", reject),
  );
  assert.equal(status, 421);
  const s = await (await fetch(`${dash.url}api/session`)).json();
  assert.equal(s.actions, false);
  assert.equal(s.login, false);
  const login = await fetch(`${dash.url}api/login`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ password: PASSWORD }) });
  assert.equal(login.status, 403);
  const pause = await fetch(`${dash.url}api/lanes/a/pause`, { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
  assert.equal(pause.status, 403);
  const admin = new zlane.Admin({ endpoints: broker.admin });
  assert.equal((await admin.stats()).lanes[0].paused, false);
  await admin.close();
});

test("with CURVE: a subscriber key reads, the broker refuses its actions; an admin key acts", { timeout: 60000 }, async (t) => {
  const { keygen } = require("../../clients/node/testlib/harness");
  const keys = tmpdir("web-keys");
  const clients = path.join(keys, "clients");
  fs.mkdirSync(clients);
  const mine = tmpdir("web-mykeys");
  const server = keygen(keys, "broker");
  const cert = (name, ...args) => {
    const k = keygen(mine, name, ...args);
    fs.copyFileSync(k.public, path.join(clients, name));
    return k;
  };
  const board = cert("board", "--role", "subscriber");
  const ops = cert("ops-web", "--role", "admin");
  const broker = await new Broker(["--lane", "a", "--durability", "none", "--curve", "--cert", server.secret, "--clients", clients]).start();
  const dirA = tmpdir("web-curve-a");
  const dirB = tmpdir("web-curve-b");
  const ro = await startDashboard(broker, dirA, ["--curve-server", server.public, "--cert", board.secret]);
  const rw = await startDashboard(broker, dirB, ["--curve-server", server.public, "--cert", ops.secret]);
  t.after(async () => {
    await stopChild(ro.proc, "SIGTERM");
    await stopChild(rw.proc, "SIGTERM");
    await broker.stop();
  });
  const login = async (url) => {
    const r = await fetch(`${url}api/login`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ password: PASSWORD }) });
    assert.equal(r.status, 200);
    return { cookie: r.headers.get("set-cookie").split(";")[0], csrf: (await r.json()).csrf };
  };
  const pause = async (url, s) => fetch(`${url}api/lanes/a/pause`, { method: "POST", headers: { "Content-Type": "application/json", Cookie: s.cookie, "X-CSRF-Token": s.csrf }, body: "{}" });
  for (const d of [ro, rw]) {
    const ov = await waitFor(async () => {
      const o = await (await fetch(`${d.url}api/overview`)).json();
      return o.broker ? o : null;
    }, 10000, "figures over CURVE");
    assert.deepEqual(ov.lanes.map((l) => l.lane), ["a"]);
  }
  const r1 = await pause(ro.url, await login(ro.url));
  assert.equal(r1.status, 409);
  assert.match((await r1.json()).error, /role|UNAUTHORIZED/i);
  const r2 = await pause(rw.url, await login(rw.url));
  assert.equal(r2.status, 200);
  const o = await waitFor(async () => {
    const x = await (await fetch(`${rw.url}api/overview`)).json();
    return x.lanes[0].paused ? x : null;
  }, 10000, "lane a paused");
  assert.equal(o.lanes[0].paused, true);
});
