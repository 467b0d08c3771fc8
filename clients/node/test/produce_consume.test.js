"use strict";
// Submit and ack end to end, submitMany of 20,000 jobs, QueueFull with
// block: false, idempotency keys, a list of brokers with a dead one first.
const test = require("node:test");
const assert = require("node:assert/strict");
const net = require("node:net");
const { Broker, waitFor } = require("../testlib/harness");
const zlane = require("..");

test("producer and worker end to end", { timeout: 60000 }, async (t) => {
  const broker = await new Broker(["--lane", "emails", "--lane", "other", "--durability", "none"]).start();
  const producer = new zlane.Producer({ endpoints: broker.frontend });
  const seen = new Map();
  const worker = new zlane.Worker({ endpoints: broker.backend, concurrency: 4 });
  worker.handle("emails", async (job) => {
    seen.set(job.id, (seen.get(job.id) || []).concat([job]));
  });
  worker.start();
  const admin = new zlane.Admin({ endpoints: broker.admin });
  t.after(async () => {
    await worker.stop();
    await producer.close();
    await admin.close();
    await broker.stop();
  });

  await t.test("one job: payload, headers and key arrive intact", async () => {
    const payload = Buffer.from([0, 1, 2, 255, 0x7b]);
    const id = await producer.submit({
      tenant: "acme",
      lane: "emails",
      payload,
      headers: { "content-type": "application/octet-stream", trace: "héllo" },
      key: "order-42",
    });
    assert.match(id, /^\d+$/);
    await waitFor(() => seen.has(id), 10000, "the job to run");
    const [job] = seen.get(id);
    assert.deepEqual(job.payload, payload);
    assert.deepEqual(job.headers, { "content-type": "application/octet-stream", trace: "héllo" });
    assert.equal(job.idempotencyKey, "order-42");
    assert.equal(job.attempt, 1);
    assert.equal(job.tenant, "acme");
    assert.equal(job.lane, "emails");
    // the same key again: the original id, flagged duplicate, nothing enqueued
    const again = await producer.submit({ tenant: "acme", lane: "emails", payload: "x", key: "order-42" }, { detail: true });
    assert.equal(again.jobId, id);
    assert.equal(again.duplicate, true);
    // a JSON payload
    const id2 = await producer.submit({ tenant: "acme", lane: "emails", payload: { to: "a@b.c" } });
    await waitFor(() => seen.has(id2), 10000, "the JSON job");
    assert.deepEqual(seen.get(id2)[0].json(), { to: "a@b.c" });
  });

  await t.test("final rejections map to error classes", async () => {
    await assert.rejects(producer.submit({ tenant: "acme", lane: "nope", payload: "x" }), zlane.UnknownLaneError);
    await assert.rejects(producer.submit({ tenant: "", lane: "emails" }), zlane.InvalidJobError);
    await assert.rejects(producer.submit({ tenant: "a\u0000b", lane: "emails" }), (e) => e instanceof zlane.InvalidJobError && /NUL/.test(e.message));
  });

  await t.test("submitMany: 20,000 jobs pipelined, every one done, nothing lost", async () => {
    const N = 20000;
    const before = seen.size;
    const t0 = Date.now();
    const specs = Array.from({ length: N }, (_, i) => ({ tenant: `t${i % 7}`, lane: "emails", payload: `job ${i}`, headers: { i: String(i) } }));
    const ids = await producer.submitMany(specs);
    const accepted = Date.now() - t0;
    assert.equal(ids.length, N);
    assert.equal(new Set(ids).size, N, "distinct job ids");
    await waitFor(() => ids.every((id) => seen.has(id)), 60000, "all 20,000 jobs to run", 50);
    const done = Date.now() - t0;
    for (let i = 0; i < N; i += 997) {
      const job = seen.get(ids[i])[0];
      assert.equal(job.text(), `job ${i}`);
      assert.equal(job.headers.i, String(i));
    }
    await waitFor(async () => (await admin.stats()).counters.jobs_acked >= before + N, 10000, "acks counted");
    const s = await admin.stats();
    const lane = s.lanes.find((l) => l.lane === "emails");
    assert.equal(lane.ready + lane.inFlight + lane.delayed, 0);
    assert.equal(seen.size, before + N, "no job beyond those submitted");
    assert.ok(producer.stats.specsSent >= N);
    // plain jobs on LMDB leave for their worker before their turn's commit
    assert.ok(s.counters.jobs_dispatched_before_commit > 0, "jobs_dispatched_before_commit decoded");
    t.diagnostic(`20,000 jobs: accepted in ${accepted} ms, all acked in ${done} ms`);
  });
});

test("QueueFullError with block: false; a blocking submit waits for credit", { timeout: 30000 }, async (t) => {
  const broker = await new Broker(["--lane", "a", "--durability", "none", "--max-depth", "5"]).start();
  const producer = new zlane.Producer({ endpoints: broker.frontend, deadlineMs: 20000 });
  t.after(async () => {
    await producer.close();
    await broker.stop();
  });
  await producer.ready(5000);
  const ids = [];
  for (let i = 0; i < 5; i++) ids.push(await producer.submit({ tenant: "t", lane: "a", payload: String(i) }, { block: false }));
  assert.equal(new Set(ids).size, 5);
  // the queue is at max_depth: no credit left
  await waitFor(() => producer.creditAvailable === 0, 5000, "the credit to run out");
  await assert.rejects(producer.submit({ tenant: "t", lane: "a", payload: "6" }, { block: false }), (e) => {
    assert.ok(e instanceof zlane.QueueFullError, e.stack);
    assert.equal(typeof e.retryAfterMs, "number");
    assert.ok(e.retryAfterMs > 0);
    return true;
  });
  // a blocking submit waits; a worker draining the queue frees credit
  const blocked = producer.submit({ tenant: "t", lane: "a", payload: "7" });
  let settled = false;
  blocked.then(() => (settled = true), () => (settled = true));
  await new Promise((r) => setImmediate(r));
  assert.equal(settled, false);
  const worker = new zlane.Worker({ endpoints: broker.backend, handlers: { a: async () => {} } }).start();
  const id = await blocked;
  assert.match(id, /^\d+$/);
  await worker.stop();
});

test("a list of brokers: a closed port first, the live broker second", { timeout: 30000 }, async (t) => {
  const broker = await new Broker(["--lane", "a", "--durability", "none"]).start();
  // a port nothing listens on: bind one, then close it
  const closed = await new Promise((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const port = s.address().port;
      s.close(() => resolve(`tcp://127.0.0.1:${port}`));
    });
  });
  const producer = new zlane.Producer({ endpoints: `${closed}, ${broker.frontend}` });
  const got = [];
  const worker = new zlane.Worker({
    endpoints: [closed, broker.backend],
    heartbeatMs: 200,
    handlers: { a: async (job) => got.push(job.id) },
  }).start();
  t.after(async () => {
    await worker.stop();
    await producer.close();
    await broker.stop();
  });
  const id = await producer.submit({ tenant: "t", lane: "a", payload: "x" });
  await waitFor(() => got.includes(id), 15000, "the job to run through the second broker");
  assert.equal(producer.endpoint, broker.frontend);
  assert.ok(producer.stats.moves >= 1);
});
