"use strict";
// NotYetError: "what the job needs has not arrived yet" (Nack NOT_YET), retried
// by the broker without spending an attempt, dead-lettered past the lane's
// max_not_yet.
const test = require("node:test");
const assert = require("node:assert/strict");
const { Broker, waitFor } = require("../testlib/harness");
const zlane = require("..");

const FAST = ["--durability", "none", "--heartbeat", "200ms", "--backoff-base", "50ms", "--backoff-cap", "100ms"];

/** A broker with `args`, a worker of `handler` on lane a, a producer and an admin; all closed at the end. */
async function setUp(t, args, handler) {
  const broker = await new Broker(["--lane", "a", ...FAST, ...args]).start();
  const producer = new zlane.Producer({ endpoints: broker.frontend });
  const admin = new zlane.Admin({ endpoints: broker.admin });
  const worker = new zlane.Worker({ endpoints: broker.backend, heartbeatMs: 200, concurrency: 1, handlers: { a: handler } }).start();
  t.after(async () => {
    await worker.stop();
    await producer.close();
    await admin.close();
    await broker.stop();
  });
  return { broker, producer, admin, worker };
}

test("NotYetError carries its delay", () => {
  const e = new zlane.NotYetError("row 7 not there", 50);
  assert.ok(e instanceof zlane.ZlaneError);
  assert.equal(e.code, "FAILURE_NOT_YET");
  assert.equal(e.retryAfterMs, 50);
  assert.equal(e.message, "row 7 not there");
  assert.equal(new zlane.NotYetError().retryAfterMs, 0); // the broker's default
  assert.throws(() => new zlane.NotYetError("x", -1), RangeError);
});

test("NotYetError: retried without spending an attempt, then acked", { timeout: 30000 }, async (t) => {
  const attempts = [];
  const { producer, admin } = await setUp(t, [], async (job) => {
    attempts.push(job.attempt);
    if (attempts.length <= 2) throw new zlane.NotYetError("the row has not arrived", 50);
  });
  const id = await producer.submit({ tenant: "acme", lane: "a", payload: "needs-a-row", maxAttempts: 2 });
  await waitFor(async () => (await admin.stats()).counters.jobs_acked === 1, 15000, "the job acked");
  assert.deepEqual(attempts, [1, 1, 1]); // ran 3 times, every delivery attempt 1
  const s = await admin.stats();
  assert.equal(s.counters.jobs_not_yet, 2);
  assert.equal(s.counters.jobs_not_yet_exhausted ?? 0, 0);
  assert.equal(s.counters.jobs_dead_lettered ?? 0, 0);
  assert.deepEqual(await admin.dlqList({ all: true }), []); // nothing dead-lettered
  await assert.rejects(admin.dlqShow(id), zlane.AdminError);
});

test("NotYetError past the lane's max_not_yet: dead-lettered", { timeout: 30000 }, async (t) => {
  const attempts = [];
  const { producer, admin } = await setUp(t, ["--set", "lanes/a/max_not_yet=2"], async (job) => {
    attempts.push(job.attempt);
    throw new zlane.NotYetError("still nothing", 50);
  });
  const id = await producer.submit({ tenant: "acme", lane: "a", payload: "never-arrives" });
  const dead = await waitFor(async () => {
    const l = await admin.dlqList({ all: true });
    return l.length ? l : null;
  }, 15000, "the job in the DLQ");
  assert.deepEqual(dead.map((d) => d.jobId), [id]);
  const shown = await admin.dlqShow(id);
  assert.match(shown.error, /past the lane's max_not_yet \(2\)/);
  assert.match(shown.error, /still nothing/);
  assert.deepEqual(shown.attempts.map((a) => a.outcome), ["not_yet", "not_yet", "not_yet"]);
  assert.deepEqual(attempts, [1, 1, 1]); // 2 allowed, the third dead-letters it
  assert.equal((await admin.stats()).counters.jobs_not_yet_exhausted, 1);
});
