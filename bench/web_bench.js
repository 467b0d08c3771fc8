"use strict";
// The dashboard at scale (issue 17's benchmark): a broker holding 10,000
// tenants' jobs and 100,000 dead letters, zlane-web polling it every 2 s,
// Chromium loading its pages. Prints
//   - time to first render of the overview, tenants and DLQ pages (navigation
//     start to the view's data-ready mark), median of --runs;
//   - the broker's CPU per second of wall time with the dashboard polling,
//     against the same broker idle just before (the dashboard's share of the
//     broker's loop), and one Stats request's round trip and size;
//   - zlane-web's own CPU and RSS.
// Every process on 127.0.0.1 ephemeral ports, stopped by PID.
//
//   node bench/web_bench.js [--tenants 10000] [--dead 100000] [--window 30] [--runs 3]
//                           [--screenshots DIR]   (the README's pictures)
const fs = require("node:fs");
const path = require("node:path");
const root = path.resolve(__dirname, "..");
const { Broker, waitFor, run, stopChild, tmpdir } = require(path.join(root, "clients/node/testlib/harness"));
const zlane = require(path.join(root, "clients/node"));
let puppeteer;
try {
  puppeteer = require(path.join(root, "web/node_modules/puppeteer-core"));
} catch {
  console.error("web_bench: puppeteer-core is missing: (cd web && npm ci)");
  process.exit(2);
}

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
}
const TENANTS = arg("tenants", 10000);
const DEAD = arg("dead", 100000);
const WINDOW_S = arg("window", 30);
const RUNS = arg("runs", 3);
const CHROMIUM = process.env.ZLANE_CHROMIUM || "/usr/bin/chromium";
const TICK = 100; // /proc's clock ticks per second (Linux, x86_64)

function cpuSeconds(pid) {
  const f = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  const v = f.slice(f.lastIndexOf(")") + 2).split(" ");
  return (Number(v[11]) + Number(v[12])) / TICK; // utime + stime
}
function rssMiB(pid) {
  const m = fs.readFileSync(`/proc/${pid}/status`, "utf8").match(/VmRSS:\s+(\d+)/);
  return m ? Number(m[1]) / 1024 : 0;
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** The broker's CPU per wall second over `seconds`. */
async function cpuRate(pid, seconds) {
  const c0 = cpuSeconds(pid), t0 = Date.now();
  await new Promise((r) => setTimeout(r, seconds * 1000));
  return (cpuSeconds(pid) - c0) / ((Date.now() - t0) / 1000);
}

async function main() {
  const dir = tmpdir("web-bench");
  const broker = await new Broker(["--lane", "emails", "--lane", "images", "--durability", "none", "--set", "lanes/emails/max_attempts=1", "--set", `max_tenants=${TENANTS * 2}`]).start();
  const producer = new zlane.Producer({ endpoints: broker.frontend });
  const admin = new zlane.Admin({ endpoints: broker.admin, timeoutMs: 30000 });
  const procs = [];
  let browser;
  try {
    // fill: DEAD dead letters over TENANTS tenants (lane emails, a worker
    // failing every job), and one ready job per tenant in lane images
    const t0 = Date.now();
    const worker = new zlane.Worker({
      endpoints: broker.backend,
      concurrency: 1,
      prefetch: 1024,
      handlers: {
        emails: async (job) => {
          throw new zlane.PermanentError(`smtp 550: mailbox unavailable for ${job.tenant}`);
        },
      },
    }).start();
    const batch = 10000;
    for (let i = 0; i < DEAD; i += batch) {
      const specs = [];
      for (let k = i; k < Math.min(DEAD, i + batch); k++) specs.push({ tenant: `t${String(k % TENANTS).padStart(5, "0")}`, lane: "emails", payload: `{"to":"user${k}@example.com","template":"welcome"}` });
      await producer.submitMany(specs);
    }
    for (let i = 0; i < TENANTS; i += batch) {
      const specs = [];
      for (let k = i; k < Math.min(TENANTS, i + batch); k++) specs.push({ tenant: `t${String(k).padStart(5, "0")}`, lane: "images", payload: "resize" });
      await producer.submitMany(specs);
    }
    await waitFor(async () => (await admin.stats()).lanes.find((l) => l.lane === "emails").dlq >= DEAD, 300000, "the dead letters", 500);
    await worker.stop();
    const filled = (Date.now() - t0) / 1000;
    const st = await admin.stats();
    console.log(`web bench: ${st.tenants.length} tenants, ${st.groups.length} tenant x lane groups, ${st.lanes.find((l) => l.lane === "emails").dlq} dead letters, ${st.lanes.find((l) => l.lane === "images").ready} ready (filled in ${filled.toFixed(1)} s); broker RSS ${rssMiB(broker.proc.pid).toFixed(0)} MiB`);

    // one Stats request, from a client: round trip and reply size
    const trips = [];
    for (let i = 0; i < 5; i++) {
      const a = process.hrtime.bigint();
      await admin.stats();
      trips.push(Number(process.hrtime.bigint() - a) / 1e6);
    }
    const bcpu0 = cpuSeconds(broker.proc.pid);
    for (let i = 0; i < 20; i++) await admin.stats();
    const statsCpuMs = ((cpuSeconds(broker.proc.pid) - bcpu0) / 20) * 1000;
    const gc0 = cpuSeconds(broker.proc.pid);
    for (let i = 0; i < 20; i++) await admin.stats({ groups: { sort: "dlq", limit: 50, offset: 5000 } });
    const pageCpuMs = ((cpuSeconds(broker.proc.pid) - gc0) / 20) * 1000;
    const oc0 = cpuSeconds(broker.proc.pid);
    for (let i = 0; i < 20; i++) await admin.stats({ lanesOnly: true });
    const lanesCpuMs = ((cpuSeconds(broker.proc.pid) - oc0) / 20) * 1000;
    const wc0 = cpuSeconds(broker.proc.pid);
    for (let i = 0; i < 20; i++) await admin.workers();
    const workersCpuMs = ((cpuSeconds(broker.proc.pid) - wc0) / 20) * 1000;
    const lc0 = cpuSeconds(broker.proc.pid);
    for (let i = 0; i < 20; i++) await admin.dlqList({ all: true }, { limit: 50 });
    const listCpuMs = ((cpuSeconds(broker.proc.pid) - lc0) / 20) * 1000;

    await producer.close();
    const idle = await cpuRate(broker.proc.pid, WINDOW_S / 3);

    // the dashboard, polling every 2 s
    const urlFile = path.join(dir, "url");
    const web = run(process.execPath, [path.join(root, "web/bin/zlane-web.js"), "--admin", broker.admin, "--events", broker.events, "--listen", "127.0.0.1:0", "--url-file", urlFile, "--refresh", "2s"], { errPath: path.join(dir, "web.err") });
    procs.push(web);
    await waitFor(() => fs.existsSync(urlFile) && fs.readFileSync(urlFile, "utf8").trim(), 30000, "zlane-web");
    const url = fs.readFileSync(urlFile, "utf8").trim();
    const wcpu0 = cpuSeconds(web.pid);
    const busy = await cpuRate(broker.proc.pid, WINDOW_S);
    const webCpu = (cpuSeconds(web.pid) - wcpu0) / WINDOW_S;

    browser = await puppeteer.launch({ executablePath: CHROMIUM, headless: true, userDataDir: path.join(dir, "chromium"), args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking"], defaultViewport: { width: 1280, height: 900 } });
    const renders = { overview: [], tenants: [], dlq: [] };
    for (let r = 0; r < RUNS; r++)
      for (const view of Object.keys(renders)) {
        const page = await browser.newPage();
        await page.goto(`${url}#/${view}`, { waitUntil: "domcontentloaded" });
        await page.waitForSelector(`#main[data-ready="${view}"]`, { timeout: 60000 });
        renders[view].push(await page.evaluate(() => performance.now()));
        await page.close();
      }
    // pages open and live: the overview's SSE stream adds no broker work; a
    // tenants page asks for its 50 rows at each refresh
    const page = await browser.newPage();
    await page.goto(`${url}#/overview`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector(`#main[data-ready="overview"]`, { timeout: 60000 });
    const withPage = await cpuRate(broker.proc.pid, WINDOW_S / 2);
    await page.goto(`${url}#/tenants?sort=dlq`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector(`#main[data-ready="tenants"]`, { timeout: 60000 });
    const withTenants = await cpuRate(broker.proc.pid, WINDOW_S / 2);

    const shots = process.argv.indexOf("--screenshots");
    if (shots > 0) {
      const out = process.argv[shots + 1];
      fs.mkdirSync(out, { recursive: true });
      // 40 s of traffic for the charts: the images backlog worked off at
      // about 400 jobs/s, emails arriving at 100/s and failing
      const busyProducer = new zlane.Producer({ endpoints: broker.frontend });
      const w1 = new zlane.Worker({ endpoints: broker.backend, concurrency: 1, prefetch: 8, handlers: { images: () => new Promise((r) => setTimeout(r, 2)) } }).start();
      const w2 = new zlane.Worker({ endpoints: broker.backend, concurrency: 1, handlers: { emails: async (job) => { throw new zlane.PermanentError(`smtp 550: mailbox unavailable for ${job.tenant}`); } } }).start();
      const until = Date.now() + 40000;
      let k = 0;
      while (Date.now() < until) {
        const specs = [];
        for (let i = 0; i < 10; i++, k++) specs.push({ tenant: `t${String(k % TENANTS).padStart(5, "0")}`, lane: "emails", payload: `{"to":"late${k}@example.com"}` });
        await busyProducer.submitMany(specs);
        await new Promise((r) => setTimeout(r, 100));
      }
      await w1.stop();
      await w2.stop();
      await busyProducer.close();
      const p = await browser.newPage();
      await p.goto(`${url}#/overview`, { waitUntil: "domcontentloaded" });
      await p.waitForSelector(`#main[data-ready="overview"]`, { timeout: 60000 });
      await p.screenshot({ path: path.join(out, "dashboard-overview.png"), fullPage: true });
      await p.goto(`${url}#/dlq`, { waitUntil: "domcontentloaded" });
      await p.waitForSelector(`#main[data-ready="dlq"]`, { timeout: 60000 });
      await p.screenshot({ path: path.join(out, "dashboard-dlq.png") });
      const first = await p.$eval("#dlq tbody tr[data-job]", (tr) => tr.dataset.job);
      await p.goto(`${url}#/dlq/${first}`, { waitUntil: "domcontentloaded" });
      await p.waitForSelector(`#main[data-ready="deadLetter"]`, { timeout: 60000 });
      await p.screenshot({ path: path.join(out, "dashboard-dead-letter.png"), fullPage: true });
      await p.goto(`${url}#/tenants?sort=dlq`, { waitUntil: "domcontentloaded" });
      await p.waitForSelector(`#main[data-ready="tenants"]`, { timeout: 60000 });
      await p.screenshot({ path: path.join(out, "dashboard-tenants.png") });
      await p.close();
    }
    const share = busy - idle;
    console.log(`web bench: first render (ms, median of ${RUNS}): overview ${median(renders.overview).toFixed(0)}, tenants ${median(renders.tenants).toFixed(0)}, dlq ${median(renders.dlq).toFixed(0)}  (all: ${JSON.stringify(Object.fromEntries(Object.entries(renders).map(([k, v]) => [k, v.map((x) => Math.round(x))])))})`);
    console.log(`web bench: broker CPU per wall second: idle ${(idle * 1000).toFixed(2)} ms/s, with zlane-web polling every 2 s ${(busy * 1000).toFixed(2)} ms/s, with a live overview open ${(withPage * 1000).toFixed(2)} ms/s, with a live tenants page open ${(withTenants * 1000).toFixed(2)} ms/s: the dashboard's share ${(share * 100).toFixed(3)} % of one core polling, ${((withTenants - idle) * 100).toFixed(3)} % with the tenants page (target < 1 %)`);
    console.log(`web bench: broker CPU per request: Stats lanes only ${lanesCpuMs.toFixed(2)} ms, a page of 50 lane x tenant rows sorted by DLQ ${pageCpuMs.toFixed(2)} ms, full Stats (every row) ${statsCpuMs.toFixed(2)} ms (round trip median ${median(trips).toFixed(1)} ms), workers ${workersCpuMs.toFixed(2)} ms, a DLQ page of 50 ${listCpuMs.toFixed(2)} ms (resolution: 10 ms ticks over 20 requests)`);
    console.log(`web bench: zlane-web CPU ${(webCpu * 1000).toFixed(1)} ms/s, RSS ${rssMiB(web.pid).toFixed(0)} MiB`);
  } finally {
    if (browser) await browser.close().catch(() => {});
    for (const p of procs) await stopChild(p, "SIGTERM");
    await admin.close();
    await broker.stop();
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e.stack || String(e));
    process.exit(1);
  },
);
