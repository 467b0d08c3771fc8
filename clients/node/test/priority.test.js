"use strict";
// Job priority (JobSpec.priority, 0..9, absent = the broker's 5): dispatch
// order within one flow (lane x tenant) against a real broker, and the
// client-side refusal of a priority outside 0..9.
const test = require("node:test");
const assert = require("node:assert/strict");
const { Broker, waitFor } = require("../testlib/harness");
const zlane = require("..");

// [payload, priority]: undefined sends none (the broker's default 5)
const JOBS = [
  ["p1", 1],
  ["p9-first", 9],
  ["p-absent", undefined],
  ["p9-second", 9],
  ["p0", 0],
];
// higher first, submit order within a priority, absent as 5, 0 told apart from absent
const EXPECTED = ["p9-first", "p9-second", "p-absent", "p1", "p0"];

function spec(payload, priority) {
  const s = { tenant: "acme", lane: "a", payload };
  if (priority !== undefined) s.priority = priority;
  return s;
}

const WAYS = {
  // one at a time: each Accepted before the next is sent
  submit: async (producer) => {
    const ids = [];
    for (const [payload, priority] of JOBS) ids.push(await producer.submit(spec(payload, priority)));
    return ids;
  },
  submitMany: (producer) => producer.submitMany(JOBS.map(([payload, priority]) => spec(payload, priority))),
};

for (const [way, submitAll] of Object.entries(WAYS)) {
  test(`priority orders dispatch within a flow (${way})`, { timeout: 30000 }, async (t) => {
    const broker = await new Broker(["--lane", "a", "--durability", "none", "--heartbeat", "200ms"]).start();
    const producer = new zlane.Producer({ endpoints: broker.frontend });
    const admin = new zlane.Admin({ endpoints: broker.admin });
    let worker = null;
    t.after(async () => {
      if (worker) await worker.stop();
      await producer.close();
      await admin.close();
      await broker.stop();
    });

    // every job Accepted (durably queued) before any worker connects
    const ids = await submitAll(producer);
    assert.equal(new Set(ids).size, JOBS.length);
    const before = (await admin.stats()).counters;
    assert.equal(before.jobs_accepted, JOBS.length);
    assert.equal(before.jobs_dispatched, 0);

    // concurrency 1, no prefetch: one job at a time, so the dispatch order is observable
    const seen = [];
    worker = new zlane.Worker({
      endpoints: broker.backend,
      concurrency: 1,
      heartbeatMs: 200,
      handlers: { a: async (job) => seen.push(job.text()) },
    }).start();
    await waitFor(() => seen.length === JOBS.length, 15000, "the handler to see every job");
    await waitFor(async () => (await admin.stats()).counters.jobs_acked >= JOBS.length, 10000, "the acks");
    assert.deepEqual(seen, EXPECTED);
  });
}

test("priority outside 0..9 is refused client-side", { timeout: 30000 }, async (t) => {
  const broker = await new Broker(["--lane", "a", "--durability", "none"]).start();
  const producer = new zlane.Producer({ endpoints: broker.frontend });
  const admin = new zlane.Admin({ endpoints: broker.admin });
  t.after(async () => {
    await producer.close();
    await admin.close();
    await broker.stop();
  });
  await producer.ready(5000);
  const range = (e) => e instanceof RangeError && /priority must be an integer from 0 \(lowest\) to 9 \(highest\)/.test(e.message);
  for (const bad of [10, -1, 255, 1.5, NaN]) {
    await assert.rejects(producer.submit(spec("x", bad)), range, `priority ${bad}`);
    await assert.rejects(producer.submit(spec("x", bad), { block: false }), range, `priority ${bad}, block: false`);
  }
  for (const bad of ["9", true]) await assert.rejects(producer.submit(spec("x", bad)), TypeError, `priority ${JSON.stringify(bad)}`);
  await assert.rejects(producer.submitMany([spec("bad", 10)]), range);
  assert.equal(producer.stats.specsSent, 0, "nothing went out");
  // null is the same as absent; 0 and 9 are taken
  const ids = await producer.submitMany([spec("null", null), spec("zero", 0), spec("nine", 9)]);
  assert.equal(ids.length, 3);
  assert.equal((await admin.stats()).counters.jobs_accepted, 3);
});
