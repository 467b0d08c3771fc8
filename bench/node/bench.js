#!/usr/bin/env node
"use strict";
// bench/node/bench.js: zlane's Node.js client (clients/node) against the real
// broker, side by side with BullMQ on Redis, on one workload: 100-byte jobs,
// one producer process submitting in batches, one worker process with a
// no-op handler. Every measured side is its own `node` process (this file
// run with a role); this process only orchestrates: it starts the broker
// (build/bin/zlane-broker --durability none, ephemeral loopback ports) and
// redis-server (a free loopback port, its own directory, --save ''), and
// stops every process it started by PID. Bounded in time: every wait has a
// deadline (BENCH_TIMEOUT_S per phase).
//
//   node bench/node/bench.js [--jobs N] [--runs R] [--batch B] [--window W]
//        [--concurrency C] [--prefetch P] [--bull-jobs N] [--bull-batch B]
//        [--bull-window W] [--bull-concurrency C] [--no-bullmq]
//
// Defaults: 200,000 zlane jobs, submitMany batches of 1,000 with 16 batches
// in flight, a worker of concurrency 64 with prefetch 1,024 (as zlane-bench's
// C worker); 50,000 BullMQ jobs, addBulk batches of 100 with 16 in flight,
// a Worker of concurrency 50: the settings that gave BullMQ its best rates
// here (batches of 50 to 5,000, 1 to 64 in flight; concurrency 10 to 1,000).
//
// Prints one line per measure ("... NNN jobs/s") and the ratios
// zlane / BullMQ for the producer and the worker, per run and as ranges.
const fs = require("node:fs");
const os = require("node:os");
const net = require("node:net");
const path = require("node:path");
const { spawn, execFileSync } = require("node:child_process");

const HERE = __dirname;
const REPO = path.resolve(HERE, "..", "..");
const BIN = process.env.ZLANE_BIN || path.join(REPO, "build", "bin");
// $ZLANE_NODE_CLIENT: another copy of clients/node (an older build, side by side)
const CLIENT = process.env.ZLANE_NODE_CLIENT || path.join(REPO, "clients", "node");
const PAYLOAD_BYTES = 100;
const PHASE_TIMEOUT_MS = Number(process.env.BENCH_TIMEOUT_S || 120) * 1000;

// ------------------------------------------------------------ roles (children)

function arg(name, def) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
}
const flag = (name) => process.argv.includes(`--${name}`);
// the report of a measured side: its rate, and its own CPU time (user + system,
// this process only) per job, which a shared machine disturbs less than the rate
let cpu0 = process.cpuUsage();
const cpuStart = () => (cpu0 = process.cpuUsage());
const report = (o) => {
  const c = process.cpuUsage(cpu0);
  o.cpuSeconds = (c.user + c.system) / 1e6;
  o.cpuRate = o.jobs / o.cpuSeconds;
  process.stdout.write(JSON.stringify(o) + "\n");
};
const payload = () => Buffer.alloc(PAYLOAD_BYTES, 0x61);

async function zlaneProducer() {
  const zlane = require(CLIENT);
  const jobs = Number(arg("jobs"));
  const batch = Number(arg("batch", 1000));
  const window = Number(arg("window", 16)); // batches in flight
  const lane = arg("lane", "bench");
  const producer = new zlane.Producer({ endpoints: arg("endpoint"), deadlineMs: PHASE_TIMEOUT_MS });
  await producer.ready(10000);
  const body = payload();
  cpuStart();
  const t0 = process.hrtime.bigint();
  let next = 0;
  const inflight = new Set();
  while (next < jobs || inflight.size) {
    while (next < jobs && inflight.size < window) {
      const n = Math.min(batch, jobs - next);
      const specs = new Array(n);
      for (let i = 0; i < n; i++) specs[i] = { tenant: `t${(next + i) % 4}`, lane, payload: body };
      next += n;
      const p = producer.submitMany(specs).then(() => inflight.delete(p));
      inflight.add(p);
    }
    await Promise.race(inflight);
  }
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  report({ jobs, seconds: s, rate: jobs / s, stats: producer.stats });
  await producer.close();
}

async function zlaneWorker() {
  const zlane = require(CLIENT);
  const jobs = Number(arg("jobs"));
  const concurrency = Number(arg("concurrency", 64));
  let t0 = 0n;
  let handled = 0;
  const worker = new zlane.Worker({
    endpoints: arg("endpoint"),
    concurrency,
    prefetch: Number(arg("prefetch", concurrency)),
    handlers: {
      [arg("lane", "bench")]: async () => {
        if (handled++ === 0) {
          cpuStart();
          t0 = process.hrtime.bigint();
        }
      },
    },
  });
  worker.start();
  const deadline = Date.now() + PHASE_TIMEOUT_MS;
  await new Promise((resolve, reject) => {
    const check = () => {
      if (worker.stats.settled >= jobs) return resolve();
      if (Date.now() > deadline) return reject(new Error(`worker: ${worker.stats.settled} of ${jobs} settled by the deadline`));
      setTimeout(check, 2);
    };
    check();
  });
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  report({ jobs, seconds: s, rate: jobs / s, stats: worker.stats });
  await worker.stop();
}

function bullConnection() {
  return { host: "127.0.0.1", port: Number(arg("redis-port")), maxRetriesPerRequest: null };
}

async function bullProducer() {
  const { Queue } = require("bullmq");
  const jobs = Number(arg("jobs"));
  const batch = Number(arg("batch", 1000));
  const window = Number(arg("window", 4));
  const queue = new Queue(arg("queue", "bench"), { connection: bullConnection() });
  await queue.waitUntilReady();
  const body = payload().toString("latin1"); // BullMQ stores job data as JSON: a 100-character string
  const opts = { removeOnComplete: true, removeOnFail: true };
  cpuStart();
  const t0 = process.hrtime.bigint();
  let next = 0;
  const inflight = new Set();
  while (next < jobs || inflight.size) {
    while (next < jobs && inflight.size < window) {
      const n = Math.min(batch, jobs - next);
      const list = new Array(n);
      for (let i = 0; i < n; i++) list[i] = { name: "j", data: body, opts };
      next += n;
      const p = queue.addBulk(list).then(() => inflight.delete(p));
      inflight.add(p);
    }
    await Promise.race(inflight);
  }
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  report({ jobs, seconds: s, rate: jobs / s });
  await queue.close();
}

async function bullWorker() {
  const { Worker } = require("bullmq");
  const jobs = Number(arg("jobs"));
  let t0 = 0n;
  let done = 0;
  let finish;
  const finished = new Promise((r) => (finish = r));
  const worker = new Worker(
    arg("queue", "bench"),
    async () => {
      if (t0 === 0n) {
        cpuStart();
        t0 = process.hrtime.bigint();
      }
    },
    { connection: bullConnection(), concurrency: Number(arg("concurrency", 100)), autorun: true },
  );
  worker.on("completed", () => {
    if (++done >= jobs) finish();
  });
  const timer = setTimeout(() => {
    process.stderr.write(`bullmq worker: ${done} of ${jobs} completed by the deadline\n`);
    process.exit(1);
  }, PHASE_TIMEOUT_MS);
  await finished;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  clearTimeout(timer);
  report({ jobs, seconds: s, rate: jobs / s });
  await worker.close(true);
}

// ------------------------------------------------------------ orchestration

const started = new Set();
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "zlane-nodebench-"));
function cleanup() {
  for (const c of started) {
    try {
      process.kill(c.pid, "SIGKILL");
    } catch {}
  }
  if (!process.env.BENCH_KEEP) fs.rmSync(tmp, { recursive: true, force: true });
}

function start(cmd, args, logName) {
  const log = fs.openSync(path.join(tmp, logName), "a");
  const child = spawn(cmd, args, { stdio: ["ignore", "pipe", log] });
  fs.closeSync(log);
  started.add(child);
  child.out = "";
  child.stdout.on("data", (d) => (child.out += d));
  child.exited = new Promise((resolve) =>
    child.on("exit", (code, signal) => {
      started.delete(child);
      resolve({ code, signal });
    }),
  );
  return child;
}

async function stop(child, timeoutMs = 5000) {
  if (!started.has(child)) return;
  try {
    process.kill(child.pid, "SIGTERM");
  } catch {}
  const t = setTimeout(() => {
    try {
      process.kill(child.pid, "SIGKILL");
    } catch {}
  }, timeoutMs);
  await child.exited;
  clearTimeout(t);
}

async function waitFor(cond, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Run this file as `role` in its own node process; resolve with its JSON report. */
async function phase(role, args, name) {
  const child = start(process.execPath, [__filename, "--role", role, ...args], `${name}.err`);
  const t = setTimeout(() => {
    try {
      process.kill(child.pid, "SIGKILL");
    } catch {}
  }, PHASE_TIMEOUT_MS + 15000);
  const { code, signal } = await child.exited;
  clearTimeout(t);
  const line = child.out.trim().split("\n").pop();
  if (code !== 0 || !line) {
    const err = fs.readFileSync(path.join(tmp, `${name}.err`), "utf8");
    throw new Error(`${role} failed (${code ?? signal}):\n${err.slice(-2000)}`);
  }
  return JSON.parse(line);
}

async function startBroker(tag) {
  const dir = path.join(tmp, tag);
  fs.mkdirSync(dir);
  const ports = path.join(dir, "ports");
  const argv = [];
  for (const n of ["frontend", "backend", "events", "admin"]) argv.push(`--${n}`, "tcp://127.0.0.1:*");
  argv.push("--ports-file", ports, "--data", path.join(dir, "data"), "--durability", "none", "--lane", "bench");
  const proc = start(path.join(BIN, "zlane-broker"), argv, `${tag}.broker.err`);
  const eps = await waitFor(() => {
    if (!started.has(proc)) throw new Error(`the broker exited: ${fs.readFileSync(path.join(tmp, `${tag}.broker.err`), "utf8").slice(-1000)}`);
    try {
      const o = {};
      for (const l of fs.readFileSync(ports, "utf8").split("\n")) {
        const i = l.indexOf("=");
        if (i > 0) o[l.slice(0, i)] = l.slice(i + 1);
      }
      return o.frontend && o.backend && o.admin ? o : null;
    } catch {
      return null;
    }
  }, 10000, "the broker's ports file");
  return { proc, eps };
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
}

function which(cmd) {
  try {
    return execFileSync("sh", ["-c", `command -v ${cmd}`], { encoding: "utf8" }).trim();
  } catch {
    return "";
  }
}

async function startRedis() {
  const server = process.env.REDIS_SERVER || which("redis-server");
  if (!server) return null;
  const port = await freePort();
  const dir = path.join(tmp, `redis-${port}`);
  fs.mkdirSync(dir);
  const proc = start(server, ["--port", String(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no", "--daemonize", "no"], `redis-${port}.err`);
  await waitFor(
    () =>
      new Promise((resolve) => {
        if (!started.has(proc)) return resolve(null);
        const c = net.connect(port, "127.0.0.1");
        c.on("connect", () => {
          c.write("PING\r\n");
        });
        c.on("data", (d) => {
          c.destroy();
          resolve(String(d).startsWith("+PONG"));
        });
        c.on("error", () => resolve(false));
      }),
    10000,
    "redis-server to answer PING",
  );
  return { proc, port };
}

function haveBullmq() {
  try {
    require.resolve("bullmq");
    return true;
  } catch {
    return false;
  }
}

const fmt = (x) => Math.round(x).toLocaleString("en-US");
const range = (xs) => (xs.length ? `${fmt(Math.min(...xs))}-${fmt(Math.max(...xs))}` : "n/a");

async function main() {
  const jobs = Number(arg("jobs", 200000));
  const bullJobs = Number(arg("bull-jobs", 50000));
  const runs = Number(arg("runs", 3));
  const batch = arg("batch", "1000");
  const window = arg("window", "16");
  const zConc = arg("concurrency", "64");
  const prefetch = arg("prefetch", "1024");
  const bullBatch = arg("bull-batch", "100");
  const bullWindow = arg("bull-window", "16");
  const bullConc = arg("bull-concurrency", "50");
  let bull = !flag("no-bullmq") && haveBullmq();
  if (!flag("no-bullmq") && !bull) console.log("bullmq not installed (npm install in bench/node): BullMQ skipped");
  const res = { zp: [], zw: [], bp: [], bw: [] };
  console.log(`node ${process.version}, ${os.cpus().length} CPUs, load ${os.loadavg().map((x) => x.toFixed(2)).join(" ")}`);
  console.log(`zlane: ${fmt(jobs)} jobs of ${PAYLOAD_BYTES} bytes, submitMany batches of ${batch} (${window} in flight); worker concurrency ${zConc}, prefetch ${prefetch}; broker --durability none`);
  if (bull) console.log(`BullMQ: ${fmt(bullJobs)} jobs of ${PAYLOAD_BYTES} bytes, addBulk batches of ${bullBatch} (${bullWindow} in flight); Worker concurrency ${bullConc}; redis-server --save ''`);
  if (!flag("no-c") && fs.existsSync(path.join(BIN, "zlane-bench"))) {
    // for context: the C libraries on the same broker, submit to ack with one producer and one worker
    const c = start(path.join(BIN, "zlane-bench"), ["throughput", "--jobs", String(jobs), "--workers", "1", "--producers", "1", "--payload", String(PAYLOAD_BYTES), "--durability", "none"], "c-bench.err");
    const t = setTimeout(() => stop(c), PHASE_TIMEOUT_MS);
    await c.exited;
    clearTimeout(t);
    console.log(`C libraries (zlane-bench throughput --workers 1, submit to ack): ${c.out.trim() || "failed"}`);
  }
  for (let r = 1; r <= runs; r++) {
    // zlane: the producer alone on a fresh broker, then the worker alone on
    // the N jobs that producer left queued
    const b = await startBroker(`broker-${r}`);
    const zp = await phase("zlane-producer", ["--endpoint", b.eps.frontend, "--jobs", String(jobs), "--batch", batch, "--window", window], `zp-${r}`);
    const zw = await phase("zlane-worker", ["--endpoint", b.eps.backend, "--jobs", String(jobs), "--concurrency", zConc, "--prefetch", prefetch], `zw-${r}`);
    await stop(b.proc);
    res.zp.push(zp.rate);
    res.zw.push(zw.rate);
    const cpu = (o) => `(${fmt(o.cpuRate)} per CPU-s)`;
    let line = `run ${r}: zlane producer ${fmt(zp.rate)} jobs/s ${cpu(zp)}, zlane worker ${fmt(zw.rate)} jobs/s ${cpu(zw)}`;
    if (bull) {
      const redis = await startRedis();
      if (!redis) {
        console.log("redis-server not found: BullMQ skipped");
        bull = false;
      } else {
        const q = `bench${r}`;
        const common = ["--redis-port", String(redis.port), "--queue", q, "--jobs", String(bullJobs)];
        const bp = await phase("bull-producer", [...common, "--batch", bullBatch, "--window", bullWindow], `bp-${r}`);
        const bw = await phase("bull-worker", [...common, "--concurrency", bullConc], `bw-${r}`);
        await stop(redis.proc);
        res.bp.push(bp.rate);
        res.bw.push(bw.rate);
        line += `; BullMQ producer ${fmt(bp.rate)} jobs/s ${cpu(bp)}, BullMQ worker ${fmt(bw.rate)} jobs/s ${cpu(bw)}; ratio zlane/BullMQ producer ${(zp.rate / bp.rate).toFixed(1)}x, worker ${(zw.rate / bw.rate).toFixed(1)}x`;
      }
    }
    console.log(line);
  }
  console.log(`zlane producer: ${range(res.zp)} jobs/s (target >= 100,000)`);
  console.log(`zlane worker:   ${range(res.zw)} jobs/s (target >= 20,000)`);
  if (res.bp.length) {
    console.log(`BullMQ producer: ${range(res.bp)} jobs/s; BullMQ worker: ${range(res.bw)} jobs/s`);
    const rp = res.zp.slice(0, res.bp.length).map((z, i) => z / res.bp[i]);
    const rw = res.zw.slice(0, res.bw.length).map((z, i) => z / res.bw[i]);
    console.log(`ratio zlane/BullMQ (same run): producer ${Math.min(...rp).toFixed(1)}-${Math.max(...rp).toFixed(1)}x, worker ${Math.min(...rw).toFixed(1)}-${Math.max(...rw).toFixed(1)}x`);
  }
}

const role = arg("role");
const roles = { "zlane-producer": zlaneProducer, "zlane-worker": zlaneWorker, "bull-producer": bullProducer, "bull-worker": bullWorker };
if (role) {
  roles[role]().catch((e) => {
    process.stderr.write(`${role}: ${e.stack || e}\n`);
    process.exit(1);
  });
} else {
  process.on("exit", cleanup);
  for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => process.exit(130));
  const all = setTimeout(() => {
    console.error("bench: over its overall time bound, stopping");
    process.exit(1);
  }, Number(process.env.BENCH_TOTAL_S || 900) * 1000);
  all.unref();
  main().then(
    () => process.exit(0),
    (e) => {
      console.error(`bench: ${e.stack || e}`);
      process.exit(1);
    },
  );
}
