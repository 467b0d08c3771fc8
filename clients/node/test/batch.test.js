"use strict";
// Batches: open one, join 20 jobs to it (one failing for good), close it,
// and the callback runs with the summary; batchShow and the batch.<id> event
// agree; the broker's refusals surface as errors; a close waits out a broker
// restart and is sent in the new session.
const test = require("node:test");
const assert = require("node:assert/strict");
const { Broker, waitFor } = require("../testlib/harness");
const zlane = require("..");

/** next(timeoutMs): the subscriber's next event, or null if none came in time. */
function reader(sub) {
  const it = sub[Symbol.asyncIterator]();
  let pending = null;
  return async (timeoutMs) => {
    pending ??= it.next();
    let timer;
    const r = await Promise.race([pending, new Promise((res) => (timer = setTimeout(() => res(null), timeoutMs)))]);
    clearTimeout(timer);
    if (r === null) return null;
    pending = null;
    return r.done ? null : r.value;
  };
}

/**
 * Wait until the "batch." subscription has taken effect (a moment after the
 * handshake): empty batches opened with close settle at once and publish
 * batch.<id>; open them until one's event arrives.
 */
async function subscribed(next, producer, timeoutMs = 15000) {
  const deadline = Date.now() + timeoutMs;
  for (let n = 1; Date.now() < deadline; n++) {
    const probe = await producer.openBatch({ tenant: "acme", lane: "a", batchId: `probe-${n}`, noCallback: true, close: true });
    for (let ev = await next(1000); ev; ev = await next(1000)) if (ev.batchId === probe) return;
  }
  throw new Error("no batch.<id> event on the events socket");
}

test("a batch: 20 jobs, one dead, the callback gets the summary", { timeout: 60000 }, async (t) => {
  const broker = await new Broker(["--lane", "a", "--lane", "b", "--durability", "none"]).start();
  const producer = new zlane.Producer({ endpoints: broker.frontend });
  const admin = new zlane.Admin({ endpoints: broker.admin });
  const sub = new zlane.Subscriber({ endpoints: broker.events, topics: "batch." });
  let worker = null;
  t.after(async () => {
    if (worker) await worker.stop();
    await producer.close();
    await admin.close();
    await sub.close();
    await broker.stop();
  });
  await sub.connected(10000);
  const next = reader(sub);
  await subscribed(next, producer);

  const id = await producer.openBatch({ tenant: "acme", lane: "b", payload: "callback", batchId: "node-reports.2024:1" });
  assert.equal(id, "node-reports.2024:1");
  const specs = Array.from({ length: 20 }, (_, i) => ({ tenant: "acme", lane: "a", payload: i === 7 ? "fail" : "ok", batch: id }));
  const ids = await producer.submitMany(specs);
  assert.equal(new Set(ids).size, 20);
  await producer.closeBatch(id, { timeoutMs: 10000 });
  await producer.closeBatch(id, { timeoutMs: 10000 }); // closing a closed batch is no error

  let shown = await admin.batchShow(id);
  assert.equal(shown.found, true);
  assert.equal(shown.closed, true);
  assert.equal(shown.settled, false);
  assert.equal(shown.jobs, 20);
  assert.equal(shown.pending, 20);
  // closed: no job joins it now
  await assert.rejects(producer.submit({ tenant: "acme", lane: "a", payload: "late", batch: id }), (e) => {
    assert.ok(e instanceof zlane.BatchClosedError, e.stack);
    assert.equal(e.code, "REJECT_BATCH_CLOSED");
    return true;
  });

  const callbacks = [];
  const plain = [];
  const handler = async (job) => {
    if (job.text() === "fail") throw new zlane.PermanentError("this one fails for good");
    (job.batch ? callbacks : plain).push(job);
  };
  worker = new zlane.Worker({ endpoints: broker.backend, concurrency: 4, handlers: { a: handler, b: handler } }).start();
  await waitFor(() => callbacks.length > 0, 20000, "the batch's callback to run");
  const cb = callbacks[0];
  assert.equal(cb.text(), "callback");
  assert.equal(cb.lane, "b");
  const s = cb.batch;
  assert.equal(s.batchId, id);
  assert.deepEqual([s.jobs, s.acked, s.dead, s.cancelledJobs, s.pending], [20, 19, 1, 0, 0]);
  assert.deepEqual(s.failed, [ids[7]]);
  assert.equal(s.failedMore, 0);
  assert.equal(s.jobId, cb.id);
  assert.ok(s.callback && s.closed && s.settled);
  assert.ok(plain.length >= 19 && plain.every((j) => j.batch === undefined), "other jobs have no batch");

  shown = await admin.batchShow(id);
  assert.equal(shown.settled, true);
  assert.equal(shown.tenant, "acme");
  assert.equal(shown.lane, "b");
  assert.deepEqual([shown.jobs, shown.acked, shown.dead], [20, 19, 1]);
  assert.deepEqual(shown.failed, [ids[7]]);
  assert.ok(shown.settledAtMs >= shown.closedAtMs && shown.closedAtMs >= shown.openedAtMs && shown.openedAtMs > 0);
  assert.equal((await admin.batchShow("no-such-batch")).found, false);

  const ev = await next(10000);
  assert.ok(ev, "no batch.<id> event");
  assert.equal(ev.type, "batchDone");
  assert.equal(ev.topic, `batch.${id}`);
  assert.deepEqual([ev.batchId, ev.jobs, ev.acked, ev.dead], [id, 20, 19, 1]);
  assert.deepEqual(ev.failed, [ids[7]]);
});

test("batch refusals, broker-named batches, a close across a broker restart", { timeout: 60000 }, async (t) => {
  const broker = await new Broker(["--lane", "a", "--durability", "none"]).start();
  const producer = new zlane.Producer({ endpoints: broker.frontend });
  const admin = new zlane.Admin({ endpoints: broker.admin });
  t.after(async () => {
    await producer.close();
    await admin.close();
    await broker.stop();
  });

  await assert.rejects(producer.closeBatch("never-opened", { timeoutMs: 10000 }), (e) => {
    assert.ok(e instanceof zlane.BatchError, e.stack);
    assert.equal(e.batchId, "never-opened");
    assert.ok(e.reason);
    return true;
  });
  await assert.rejects(producer.submit({ tenant: "acme", lane: "a", batch: "never-opened" }), zlane.UnknownBatchError);

  const r = await producer.submit({ tenant: "acme", lane: "a", openBatch: true, noCallback: true }, { detail: true });
  assert.equal(r.batchId, r.jobId); // named by the broker after the job id
  await assert.rejects(producer.submit({ tenant: "globex", lane: "a", batch: r.batchId }), zlane.UnknownBatchError);
  const plain = await producer.submit({ tenant: "acme", lane: "a", batch: r.batchId }, { detail: true });
  assert.equal(plain.batchId, "");
  await producer.submit({ tenant: "acme", lane: "a", openBatch: "node-dup" });
  await assert.rejects(producer.submit({ tenant: "acme", lane: "a", openBatch: "node-dup" }), zlane.BatchExistsError);

  // opened and joined in one submitMany, closed by the opening spec
  const many = await producer.submitMany(
    [{ tenant: "acme", lane: "a", openBatch: "node-one-submit", close: true }].concat(
      Array.from({ length: 3 }, () => ({ tenant: "acme", lane: "a", batch: "node-one-submit" })),
    ),
    { detail: true },
  );
  assert.equal(many[0].batchId, "node-one-submit");
  const one = await admin.batchShow("node-one-submit");
  assert.equal(one.jobs, 3);
  assert.equal(one.closed, true);

  for (const bad of ["123", "has space", "x".repeat(129)])
    await assert.rejects(producer.submit({ tenant: "acme", lane: "a", openBatch: bad }), zlane.InvalidJobError);
  await assert.rejects(producer.submit({ tenant: "acme", lane: "a", close: true }), zlane.InvalidJobError);
  await assert.rejects(producer.closeBatch("has space"), zlane.InvalidJobError);

  // the broker goes away; a close waits for it and goes in the new session
  await broker.stop();
  await waitFor(() => !producer.connected, 10000, "the producer to see the broker gone");
  const closing = producer.closeBatch(r.batchId, { timeoutMs: 20000 });
  await broker.start();
  await closing;
  const shown = await admin.batchShow(r.batchId);
  assert.equal(shown.closed, true);
  assert.equal(shown.jobs, 1);
  assert.equal(shown.callback, false);

  // an unanswered close ends in TimeoutError at its deadline
  await broker.stop();
  await waitFor(() => !producer.connected, 10000, "the producer to see the broker gone");
  await assert.rejects(producer.closeBatch("node-one-submit", { timeoutMs: 300 }), zlane.TimeoutError);
});
