"use strict";
// Job deadlines (JobSpec.deadline_ms / max_age_ms) from the Node client against
// a real broker with no worker: a job past its maxAgeMs is dead-lettered
// "expired" while one without stays ready; a deadline already past is rejected
// by the broker (InvalidJobError); bad values are refused client-side.
const test = require("node:test");
const assert = require("node:assert/strict");
const { Broker, waitFor } = require("../testlib/harness");
const zlane = require("..");

async function setUp(t) {
  const broker = await new Broker(["--lane", "a", "--durability", "none", "--heartbeat", "200ms"]).start();
  const producer = new zlane.Producer({ endpoints: broker.frontend });
  const admin = new zlane.Admin({ endpoints: broker.admin });
  t.after(async () => {
    await producer.close();
    await admin.close();
    await broker.stop();
  });
  return { producer, admin };
}

const laneA = async (admin) => (await admin.stats()).lanes.find((l) => l.lane === "a");

const WAYS = {
  submit: async (producer) => [
    await producer.submit({ tenant: "acme", lane: "a", payload: "short", maxAgeMs: 300 }),
    await producer.submit({ tenant: "acme", lane: "a", payload: "kept" }),
  ],
  submitMany: (producer) =>
    producer.submitMany([
      { tenant: "acme", lane: "a", payload: "short", maxAgeMs: 300 },
      { tenant: "acme", lane: "a", payload: "kept" },
    ]),
};

for (const [way, submitBoth] of Object.entries(WAYS)) {
  test(`maxAgeMs expires a job, a past deadlineMs is rejected (${way})`, { timeout: 30000 }, async (t) => {
    const { producer, admin } = await setUp(t);
    const [expiring, kept] = await submitBoth(producer);

    await waitFor(
      async () => {
        const dlq = await admin.dlqList({ all: true });
        return dlq.length === 1 && dlq[0].jobId === expiring;
      },
      15000,
      "the job with maxAgeMs 300 in the DLQ",
    );
    const dead = await admin.dlqShow(expiring);
    assert.ok(dead.attempts.length >= 1, "an attempt recorded");
    const last = dead.attempts[dead.attempts.length - 1];
    assert.equal(last.outcome, "expired");
    assert.match(last.error, /deadline passed/);
    assert.match(dead.error, /deadline passed/);
    const lane = await laneA(admin);
    assert.equal(lane.ready, 1, "the job without a deadline is still ready");
    assert.equal(lane.dlq, 1);
    assert.equal((await admin.stats()).counters.jobs_dispatched, 0);
    assert.ok(!(await admin.dlqList({ all: true })).some((d) => d.jobId === kept));

    // already past at submit: the broker's INVALID (it went out), as a number and a Date
    const sentBefore = producer.stats.specsSent;
    const invalid = (e) => e instanceof zlane.InvalidJobError && e.code === "REJECT_INVALID" && /deadline_ms/.test(e.message);
    await assert.rejects(producer.submit({ tenant: "acme", lane: "a", deadlineMs: Date.now() - 60000 }), invalid);
    await assert.rejects(producer.submit({ tenant: "acme", lane: "a", deadlineMs: new Date(Date.now() - 60000) }), invalid);
    await assert.rejects(producer.submitMany([{ tenant: "acme", lane: "a", deadlineMs: 1 }]), invalid);
    assert.equal(producer.stats.specsSent, sentBefore + 3, "rejected by the broker, not here");

    // a deadline ahead is taken: the job waits, ready
    await producer.submit({ tenant: "acme", lane: "a", payload: "later", deadlineMs: new Date(Date.now() + 3600000), maxAgeMs: 3600000 });
    assert.equal((await laneA(admin)).ready, 2);
  });
}

test("bad deadlineMs / maxAgeMs are refused client-side", { timeout: 30000 }, async (t) => {
  const { producer, admin } = await setUp(t);
  await producer.ready(5000);
  const spec = (extra) => ({ tenant: "acme", lane: "a", payload: "x", ...extra });
  for (const bad of [-1, 1.5, NaN, Infinity, 2 ** 60, new Date(NaN)]) {
    await assert.rejects(producer.submit(spec({ deadlineMs: bad })), RangeError, `deadlineMs ${bad}`);
    await assert.rejects(producer.submit(spec({ deadlineMs: bad }), { block: false }), RangeError);
  }
  for (const bad of ["123", true, 10n, {}]) await assert.rejects(producer.submit(spec({ deadlineMs: bad })), TypeError, `deadlineMs ${typeof bad}`);
  for (const bad of [-1, 0.5, NaN, 2 ** 32, 1e12]) await assert.rejects(producer.submit(spec({ maxAgeMs: bad })), RangeError, `maxAgeMs ${bad}`);
  for (const bad of ["300", true, new Date()]) await assert.rejects(producer.submit(spec({ maxAgeMs: bad })), TypeError, `maxAgeMs ${typeof bad}`);
  await assert.rejects(producer.submitMany([spec({ maxAgeMs: -5 })]), RangeError);
  assert.equal(producer.stats.specsSent, 0, "nothing went out");
  // the largest maxAgeMs, null and 0 (none) are taken
  const ids = await producer.submitMany([spec({ maxAgeMs: 2 ** 32 - 1 }), spec({ maxAgeMs: null, deadlineMs: null }), spec({ maxAgeMs: 0, deadlineMs: 0 })]);
  assert.equal(ids.length, 3);
  assert.equal((await admin.stats()).counters.jobs_accepted, 3);
});
