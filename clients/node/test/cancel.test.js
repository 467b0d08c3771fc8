"use strict";
// Cancellation through the Node client: Admin.cancel of a running job aborts
// its handler's job.signal with "cancelled by the broker" and the worker
// settles nothing for it (no refused settlement, nothing acked); a ready
// job is cancelled before any worker runs it; unknown ids are said so.
const test = require("node:test");
const assert = require("node:assert/strict");
const { Broker, waitFor } = require("../testlib/harness");
const zlane = require("..");

test("cancel a running job and a ready one", { timeout: 60000 }, async (t) => {
  const broker = await new Broker(["--lane", "a", "--lane", "b", "--durability", "none"]).start();
  const producer = new zlane.Producer({ endpoints: broker.frontend });
  const admin = new zlane.Admin({ endpoints: broker.admin });
  const started = [];
  let aborted = null;
  const worker = new zlane.Worker({
    endpoints: broker.backend,
    lanes: ["a"],
    concurrency: 1,
    handlers: {
      a: (job) =>
        new Promise((resolve, reject) => {
          started.push(job.id);
          job.signal.addEventListener("abort", () => {
            aborted = job.signal.reason;
            reject(job.signal.reason);
          });
        }),
    },
  }).start();
  t.after(async () => {
    await worker.stop();
    await producer.close();
    await admin.close();
    await broker.stop();
  });

  const running = await producer.submit({ tenant: "t", lane: "a", payload: "long" });
  const ready = await producer.submit({ tenant: "t", lane: "b", payload: "never run" }); // no worker serves b
  await waitFor(() => started.includes(running), 10000, "the job to start");

  const answers = await admin.cancel(running, ready, "987654321");
  assert.deepEqual(answers.map((a) => [a.jobId, a.outcome, a.state]), [
    [running, "cancelled", "leased"],
    [ready, "cancelled", "ready"],
    ["987654321", "unknown", ""],
  ]);
  await waitFor(() => aborted !== null, 10000, "the handler's signal to abort");
  assert.equal(aborted.name, "JobCancelledError");
  assert.match(aborted.message, /cancelled by the broker/);
  await waitFor(() => worker.stats.cancelled === 1, 10000, "the worker to count the cancel");

  const again = await admin.cancel(running);
  assert.equal(again[0].outcome, "already_cancelled");
  const st = await admin.stats();
  assert.equal(st.counters.jobs_cancelled, 2);
  assert.equal(st.counters.jobs_acked || 0, 0);
  assert.equal(st.counters.err_cancelled || 0, 0); // the worker sent no late settlement
  assert.equal(worker.stats.refused, 0);
  assert.equal(worker.stats.acked + worker.stats.nacked, 0);
});
