"use strict";
// Progress checkpoints: a handler saves its progress (job.saveCheckpoint); an
// attempt that fails hands it to the next one (job.checkpoint).
const test = require("node:test");
const assert = require("node:assert/strict");
const { Broker, waitFor } = require("../testlib/harness");
const zlane = require("..");

test("a failed attempt's checkpoint starts the next one where it was", { timeout: 30000 }, async (t) => {
  const broker = await new Broker(["--lane", "a", "--durability", "none", "--heartbeat", "200ms", "--backoff-base", "20ms", "--backoff-cap", "40ms"]).start();
  const seen = [];
  const worker = new zlane.Worker({
    endpoints: broker.backend,
    heartbeatMs: 200, // as the broker's: silent for 600 ms, a worker is dead to it
    handlers: {
      a: async (job) => {
        const from = job.checkpoint ? Number(job.checkpoint.toString()) : 0;
        const steps = [];
        for (let i = from + 1; i <= 10; i++) {
          steps.push(i);
          job.saveCheckpoint(String(i));
          if (job.attempt === 1 && i === 5) {
            seen.push([job.attempt, job.checkpoint, steps]);
            throw new Error("crashed halfway"); // transient: retried
          }
        }
        seen.push([job.attempt, job.checkpoint && job.checkpoint.toString(), steps]);
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
  await producer.submit({ tenant: "acme", lane: "a", payload: "ten steps", maxAttempts: 3 });
  await waitFor(async () => (await admin.stats()).counters.jobs_acked === 1, 20000, "the job acked");
  assert.deepEqual(seen, [
    [1, null, [1, 2, 3, 4, 5]],
    [2, "5", [6, 7, 8, 9, 10]],
  ]);
  assert.ok((await admin.stats()).counters.checkpoints_saved >= 1);
});
