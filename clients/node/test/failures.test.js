"use strict";
// Handler outcomes: PermanentError dead-letters at once (seen by Admin and by
// a Subscriber), ThrottledError delays as asked, a thrown Error retries with
// its stack as the error text; a lease extended while a long handler runs.
const test = require("node:test");
const assert = require("node:assert/strict");
const { Broker, waitFor } = require("../testlib/harness");
const zlane = require("..");

test("failures, the DLQ and leases", { timeout: 60000 }, async (t) => {
  const broker = await new Broker([
    "--lane", "a", "--durability", "none",
    "--backoff-base", "50ms", "--backoff-cap", "100ms", "--dlq-alert", "500ms",
  ]).start();
  const producer = new zlane.Producer({ endpoints: broker.frontend });
  const admin = new zlane.Admin({ endpoints: broker.admin });
  const runs = new Map(); // job id -> [{attempt, at}]
  const behaviour = new Map(); // payload -> async (job) => ...
  const worker = new zlane.Worker({
    endpoints: broker.backend,
    concurrency: 4,
    handlers: {
      a: async (job) => {
        runs.set(job.id, (runs.get(job.id) || []).concat([{ attempt: job.attempt, at: Date.now(), job }]));
        const fn = behaviour.get(job.text());
        if (fn) await fn(job);
      },
    },
  }).start();
  const sub = new zlane.Subscriber({ endpoints: broker.events });
  const events = [];
  const pumping = (async () => {
    for await (const ev of sub) events.push(ev);
  })();
  t.after(async () => {
    await worker.stop();
    await producer.close();
    await admin.close();
    await sub.close();
    await pumping;
    await broker.stop();
  });
  await sub.connected();

  await t.test("PermanentError: dead-lettered after one attempt; Admin and Subscriber see it", async () => {
    behaviour.set("poison", async () => {
      throw new zlane.PermanentError("bad address: nobody@");
    });
    // the subscription may take a moment to reach the broker: the DLQ alert repeats,
    // so wait for one before the dead letter we look for
    behaviour.set("warm-up-poison", async () => {
      throw new zlane.PermanentError("warm up");
    });
    await producer.submit({ tenant: "acme", lane: "a", payload: "warm-up-poison" });
    await waitFor(() => events.some((e) => e.type === "dlqAlert" || e.type === "deadLetter"), 10000, "a first event");
    const id = await producer.submit({ tenant: "acme", lane: "a", payload: "poison", headers: { h: "v" }, maxAttempts: 5 });
    await waitFor(() => events.some((e) => e.type === "deadLetter" && e.jobId === id), 10000, "the DeadLetter event");
    const ev = events.find((e) => e.type === "deadLetter" && e.jobId === id);
    assert.equal(ev.topic, "dlq.a.acme");
    assert.equal(ev.tenant, "acme");
    assert.equal(ev.payload.toString(), "poison");
    assert.equal(ev.error, "bad address: nobody@");
    assert.deepEqual(ev.headers, { h: "v" });
    assert.equal(runs.get(id).length, 1, "one attempt only");

    const list = await admin.dlqList({ lane: "a" });
    assert.ok(list.some((d) => d.jobId === id));
    const shown = await admin.dlqShow(id);
    assert.equal(shown.payload.toString(), "poison");
    assert.equal(shown.attempts.length, 1);
    assert.equal(shown.attempts[0].outcome, "permanent");
    assert.equal(shown.attempts[0].error, "bad address: nobody@");
    assert.equal(shown.attempts[0].worker, worker.name);
    const s = await admin.stats();
    assert.ok(s.counters.jobs_dead_lettered >= 2);
    await waitFor(() => events.some((e) => e.type === "dlqAlert" && e.depth >= 1), 5000, "a DlqAlert (every 500 ms)");

    // redrive it: it runs again (attempt 1 of a fresh count) and now succeeds
    behaviour.delete("poison");
    assert.equal(await admin.dlqRedrive([id]), 1);
    await waitFor(() => runs.get(id).length === 2, 10000, "the redriven job to run");
    assert.equal(runs.get(id)[1].attempt, 1);
    assert.equal(await admin.dlqPurge({ all: true }), 1); // the warm-up one
    await assert.rejects(admin.dlqShow(id), zlane.AdminError);
  });

  await t.test("ThrottledError: retried after the delay asked for", async () => {
    behaviour.set("throttle", async (job) => {
      if (job.attempt === 1) throw new zlane.ThrottledError("rate limited upstream", 400);
    });
    const id = await producer.submit({ tenant: "globex", lane: "a", payload: "throttle" });
    await waitFor(() => runs.get(id)?.length === 2, 10000, "the retry");
    const [first, second] = runs.get(id);
    assert.equal(second.attempt, 2);
    assert.ok(second.at - first.at >= 380, `retried after ${second.at - first.at} ms`);
    const g = (await admin.stats()).groups.find((x) => x.lane === "a" && x.tenant === "globex");
    assert.equal(g.nackedThrottled, 1);
  });

  await t.test("a thrown Error is TRANSIENT: retried with backoff, its stack is the error text", async () => {
    behaviour.set("flaky", async (job) => {
      if (job.attempt < 3) throw new Error(`flaky attempt ${job.attempt}`);
    });
    const id = await producer.submit({ tenant: "t", lane: "a", payload: "flaky" });
    await waitFor(() => runs.get(id)?.length === 3, 10000, "three attempts");
    assert.deepEqual(runs.get(id).map((r) => r.attempt), [1, 2, 3]);

    behaviour.set("doomed", async () => {
      throw new TypeError("cannot read properties of undefined \u0000 (NUL inside)");
    });
    const id2 = await producer.submit({ tenant: "t", lane: "a", payload: "doomed", maxAttempts: 2 });
    await waitFor(async () => (await admin.dlqList({ tenant: "t" })).some((d) => d.jobId === id2), 10000, "the job in the DLQ");
    const d = await admin.dlqShow(id2);
    assert.equal(d.attempts.length, 2);
    assert.equal(d.attempts[0].outcome, "transient");
    assert.match(d.error, /^TypeError: cannot read properties of undefined/);
    assert.match(d.error, /\n\s+at /, "the stack is in the error text");
    assert.ok(!d.error.includes("\u0000"));
  });

  await t.test("a handler longer than its lease keeps it: extended, delivered once", async () => {
    behaviour.set("slow", async (job) => {
      await new Promise((r) => setTimeout(r, 2500)); // (each Extend has ~half a 1 s lease to arrive)
      assert.equal(job.signal.aborted, false);
    });
    const before = (await admin.stats()).counters.leases_extended;
    const id = await producer.submit({ tenant: "t2", lane: "a", payload: "slow", leaseMs: 1000 });
    await waitFor(async () => (await admin.stats()).groups.find((x) => x.lane === "a" && x.tenant === "t2")?.acked === 1, 10000, "the ack");
    assert.equal(runs.get(id).length, 1, "one delivery");
    assert.equal(runs.get(id)[0].job.leaseMs, 1000);
    const s = await admin.stats();
    assert.ok(s.counters.leases_extended - before >= 3, `extended ${s.counters.leases_extended - before} times`);
    assert.equal(s.groups.find((x) => x.tenant === "t2").leaseExpired, 0);
  });

  await t.test("run_us reported: the lane is charged the handler's time", async () => {
    const g = (await admin.stats()).groups.find((x) => x.lane === "a" && x.tenant === "t2");
    assert.ok(g.runUs >= 2400000, `charged ${g.runUs} us`);
  });
});
