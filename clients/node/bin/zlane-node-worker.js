#!/usr/bin/env node
"use strict";
// zlane-node-worker MODULE [--lane L]... [--broker EP] [--concurrency N]
//                   [--prefetch N] [--name NAME] [--curve-server FILE --cert FILE] [--drain DUR]
//
// Loads MODULE (a CommonJS or ES module) and serves its handlers:
//   module.exports = async (job) => {...}            one handler for every --lane
//   module.exports = { emails: async (job) => {...} } a handler per lane (the
//                                                    lanes are its keys unless --lane says)
//   (an ES module: the default export, or named exports, the same way)
// SIGTERM or SIGINT drains it (Ready with capacity 0, running jobs finish,
// their settlements are confirmed) and it exits 0; a second signal cancels
// the running jobs.
const path = require("node:path");
const { pathToFileURL } = require("node:url");
const { Worker } = require("../lib");

function usage(code) {
  (code ? process.stderr : process.stdout).write(
    "usage: zlane-node-worker MODULE [--lane L]... [--broker EP[,EP...]] [--concurrency N]\n" +
      "                         [--prefetch N] [--name NAME] [--curve-server FILE --cert FILE] [--drain MS]\n" +
      "  --broker defaults to $ZLANE_BROKER or tcp://127.0.0.1:5571; --lanes a,b also works\n",
  );
  process.exit(code);
}

function parse(argv) {
  const o = { lanes: [], broker: process.env.ZLANE_BROKER || "tcp://127.0.0.1:5571", concurrency: 1 };
  o.curveServer = process.env.ZLANE_CURVE_SERVER;
  o.cert = process.env.ZLANE_CERT;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) usage(2);
      return argv[++i];
    };
    if (a === "-h" || a === "--help") usage(0);
    else if (a === "--lane" || a === "--lanes") o.lanes.push(...val().split(",").map((s) => s.trim()).filter(Boolean));
    else if (a === "--broker") o.broker = val();
    else if (a === "--concurrency") o.concurrency = parseInt(val(), 10);
    else if (a === "--prefetch") o.prefetch = parseInt(val(), 10);
    else if (a === "--name") o.name = val();
    else if (a === "--curve-server") o.curveServer = val();
    else if (a === "--cert") o.cert = val();
    else if (a === "--drain") o.drainMs = parseInt(val(), 10);
    else if (a.startsWith("-")) {
      process.stderr.write(`zlane-node-worker: unknown option ${a}\n`);
      usage(2);
    } else if (!o.module) o.module = a;
    else usage(2);
  }
  if (!o.module) usage(2);
  return o;
}

async function load(modPath) {
  const abs = path.resolve(modPath);
  let m;
  try {
    m = require(abs);
  } catch (e) {
    if (e.code !== "ERR_REQUIRE_ESM") throw e;
    m = await import(pathToFileURL(abs).href);
  }
  return m;
}

async function main() {
  const o = parse(process.argv.slice(2));
  const mod = await load(o.module);
  const handlers = {};
  let fallback = null;
  if (typeof mod === "function") fallback = mod;
  else if (mod && typeof mod === "object") {
    if (typeof mod.default === "function") fallback = mod.default;
    for (const [k, v] of Object.entries(mod)) if (typeof v === "function" && k !== "default") handlers[k] = v;
  }
  const lanes = o.lanes.length ? o.lanes : Object.keys(handlers);
  if (!lanes.length) {
    process.stderr.write("zlane-node-worker: no lanes (give --lane, or export a handler per lane)\n");
    process.exit(2);
  }
  const chosen = {};
  for (const lane of lanes) {
    const fn = handlers[lane] || fallback;
    if (!fn) {
      process.stderr.write(`zlane-node-worker: ${o.module} has no handler for lane '${lane}'\n`);
      process.exit(2);
    }
    chosen[lane] = fn;
  }
  const curve = o.curveServer || o.cert ? { serverCert: o.curveServer, clientCert: o.cert } : undefined;
  const worker = new Worker({
    endpoints: o.broker,
    name: o.name,
    concurrency: o.concurrency,
    prefetch: o.prefetch,
    handlers: chosen,
    curve,
    drainMs: o.drainMs,
    stopSignals: ["SIGTERM", "SIGINT"],
  });
  const log = (s) => process.stderr.write(`zlane-node-worker: ${s}\n`);
  worker.on("warning", (w) => log(w));
  worker.on("connecting", (ep) => log(`${worker.name} connecting to ${ep}, lanes ${lanes.join(",")}`));
  worker.on("draining", ({ held }) => log(`stopping: ${held} jobs held, draining`));
  worker.on("disconnect", (d) => log(`broker ${d.endpoint} ${d.why}; trying ${d.next} in ${d.delayMs} ms`));
  worker.start();
  await worker.closed;
  log(`stopped (${worker.stats.acked} acked, ${worker.stats.nacked} nacked, ${worker.stats.settled} settled)`);
  process.exit(0);
}

main().catch((e) => {
  process.stderr.write(`zlane-node-worker: ${e.stack || e}\n`);
  process.exit(1);
});
