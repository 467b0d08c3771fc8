"use strict";
// Each side of a worker's connection judges the other by the longer of the two
// heartbeats (Ready.heartbeat_ms, Heartbeat.interval_ms). Against a broker at
// 400 ms x liveness 3 (1.2 s): a worker that heartbeats every 2 s is not declared
// dead after 1.2 s of its silence, and one at 50 ms does not leave the broker after
// 150 ms of the broker's. Both still serve after the window watched. (Each window
// with the change is 4-8 times the one without.)
const test = require("node:test");
const assert = require("node:assert/strict");
const { setTimeout: delay } = require("node:timers/promises");
const { Broker, waitFor } = require("../testlib/harness");
const zlane = require("..");

test("workers at other heartbeat paces than the broker's stay connected", { timeout: 30000 }, async (t) => {
  const broker = await new Broker(["--lane", "k", "--heartbeat", "400ms", "--liveness", "3",
    "--durability", "none"]).start();
  const admin = new zlane.Admin({ endpoints: broker.admin });
  const producer = new zlane.Producer({ endpoints: broker.frontend });
  const seen = [];
  const left = { slow: 0, fast: 0 };
  const worker = (name, heartbeatMs) => {
    const w = new zlane.Worker({
      endpoints: broker.backend, name, heartbeatMs, liveness: 3,
      handlers: { k: async (job) => { seen.push(job.text()); } },
    });
    w.on("warning", () => {});
    w.on("disconnect", () => left[name]++);
    w.start();
    return w;
  };
  const slow = worker("slow", 2000);
  const fast = worker("fast", 50);
  t.after(async () => {
    await slow.stop({ force: true });
    await fast.stop({ force: true });
    await producer.close();
    await admin.close();
    await broker.stop();
  });
  await waitFor(async () => (await admin.stats()).workers === 2, 10000, "both workers' Ready");
  await delay(3000); // the window watched: 2.5 of the broker's liveness spans, 20 of fast's
  const c = (await admin.stats()).counters;
  assert.equal(c.workers_dead ?? 0, 0, "no worker declared dead");
  assert.equal(c.workers_ready, 2, "nobody came back");
  assert.deepEqual(left, { slow: 0, fast: 0 }, "no worker left the broker");
  // the admin API shows the pace each stated (WorkerInfo.heartbeat_ms)
  const paces = Object.fromEntries((await admin.workers()).map((w) => [w.name, w.heartbeatMs]));
  assert.deepEqual(paces, { slow: 2000, fast: 50 });
  for (let i = 0; i < 4; i++) await producer.submit({ tenant: "t", lane: "k", payload: `j${i}` });
  await waitFor(() => seen.length === 4, 10000, "the jobs");
});
