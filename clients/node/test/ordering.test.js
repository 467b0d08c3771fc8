"use strict";
// Ordering keys: the jobs of a tenant and lane with the same key run one at a
// time, in the order accepted, on a worker with many slots; a failing job
// holds the ones after it until its retry succeeds.
const test = require("node:test");
const assert = require("node:assert/strict");
const { Broker, waitFor } = require("../testlib/harness");
const zlane = require("..");

const FAST = ["--durability", "none", "--heartbeat", "200ms", "--backoff-base", "30ms", "--backoff-cap", "60ms"];

test("the same ordering key runs one at a time, in order, a retry in place", { timeout: 30000 }, async (t) => {
  const broker = await new Broker(["--lane", "a", ...FAST]).start();
  const running = new Map(), order = new Map(), failed = new Set(), overlaps = [];
  const worker = new zlane.Worker({
    endpoints: broker.backend,
    heartbeatMs: 200, // as the broker's (FAST)
    concurrency: 8,
    handlers: {
      a: async (job) => {
        const k = job.orderingKey, p = job.payload.toString();
        if (running.get(k)) overlaps.push([running.get(k), p]);
        running.set(k, p);
        if (!order.has(k)) order.set(k, []);
        order.get(k).push(p);
        await new Promise((r) => setTimeout(r, 2)); // others could start meanwhile
        running.set(k, null);
        if (p.endsWith("-2") && !failed.has(p)) {
          failed.add(p);
          throw new Error("the downstream blinked"); // transient: retried in place
        }
      },
    },
  }).start();
  const producer = new zlane.Producer({ endpoints: broker.frontend });
  const admin = new zlane.Admin({ endpoints: broker.admin });
  t.after(async () => {
    await worker.stop();
    await producer.close();
    await admin.close();
    await broker.stop();
  });
  const specs = [];
  for (let i = 0; i < 6; i++)
    for (const k of ["red", "blue"]) specs.push({ tenant: "acme", lane: "a", payload: `${k}-${i}`, orderingKey: k });
  await producer.submitMany(specs);
  await waitFor(async () => (await admin.stats()).counters.jobs_acked === 12, 20000, "12 jobs acked");
  assert.deepEqual(overlaps, []);
  for (const k of ["red", "blue"]) {
    const want = [0, 1, 2, 2, 3, 4, 5].map((i) => `${k}-${i}`);
    assert.deepEqual(order.get(k), want);
  }
  assert.equal((await admin.stats()).counters.jobs_ordering_held, 0);
  await assert.rejects(producer.submit({ tenant: "acme", lane: "a", orderingKey: 7 }), TypeError);
});
