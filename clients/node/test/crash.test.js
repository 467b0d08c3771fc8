"use strict";
// The broker SIGKILLed and restarted (LMDB, --durability fsync) while a
// producer submits and a worker runs: every job accepted exactly once (the
// library resends what was not Accepted under the same keys), every job
// run, lost = 0.
const test = require("node:test");
const assert = require("node:assert/strict");
const { Broker, waitFor } = require("../testlib/harness");
const zlane = require("..");

test("broker SIGKILL + restart mid-stream: lost = 0, no job enqueued twice", { timeout: 90000 }, async (t) => {
  const broker = await new Broker(["--lane", "a", "--durability", "fsync", "--heartbeat", "200ms"]).start();
  const producer = new zlane.Producer({ endpoints: broker.frontend, deadlineMs: 60000, maxBatch: 64 });
  const seen = new Map(); // job id -> runs
  const worker = new zlane.Worker({
    endpoints: broker.backend,
    concurrency: 8,
    heartbeatMs: 200,
    handlers: { a: async (job) => seen.set(job.id, (seen.get(job.id) || 0) + 1) },
  }).start();
  const admin = new zlane.Admin({ endpoints: broker.admin });
  t.after(async () => {
    await worker.stop();
    await producer.close();
    await admin.close();
    await broker.stop();
  });

  const N = 6000;
  const KILLS = 2;
  const all = [];
  // submit in waves; right after waves 4 and 8 went on the wire (their
  // Accepted not yet back), SIGKILL the broker and start it again
  let inFlightAtKills = 0;
  // the kills must find the producer connected (a loaded machine dials late)
  await waitFor(() => producer.stats.connects >= 1, 20000, "the producer to connect");
  for (let w = 0; w < 12; w++) {
    const specs = Array.from({ length: N / 12 }, (_, i) => ({ tenant: `t${i % 3}`, lane: "a", payload: `w${w} j${i}` }));
    all.push(producer.submitMany(specs));
    await new Promise((r) => setImmediate(r)); // the pump sends them
    await new Promise((r) => setImmediate(r));
    if (w % 4 === 3 && w < 4 * KILLS) {
      inFlightAtKills += producer.stats.specsSent - producer.stats.accepted - producer.stats.rejected;
      const connects = producer.stats.connects;
      await broker.kill();
      await broker.restart();
      await waitFor(() => producer.stats.connects > connects, 20000, "the producer to reconnect");
    }
    await new Promise((r) => setTimeout(r, 30));
  }
  const ids = (await Promise.all(all)).flat();
  assert.equal(ids.length, N);
  assert.equal(new Set(ids).size, N, "every job has its own id");
  assert.ok(inFlightAtKills > 0, `jobs were on the wire at the kills (${inFlightAtKills})`);
  assert.ok(producer.stats.disconnects >= KILLS, `the crashes were seen (${producer.stats.disconnects} disconnects)`);
  await waitFor(() => ids.every((id) => seen.has(id)), 60000, "every job to run", 100);
  // nothing more than the N jobs was enqueued: the queue is empty and the
  // worker saw exactly the N ids
  await waitFor(async () => {
    const l = (await admin.stats()).lanes.find((x) => x.lane === "a");
    return l.ready + l.inFlight + l.delayed === 0;
  }, 20000, "the queue to drain");
  assert.equal(seen.size, N, "no job beyond those submitted");
  const lost = ids.filter((id) => !seen.has(id)).length;
  const dupRuns = [...seen.values()].reduce((a, n) => a + n - 1, 0);
  assert.equal(lost, 0);
  t.diagnostic(`${N} jobs, ${KILLS} kills (${inFlightAtKills} specs unanswered at the kills): lost 0, resent ${producer.stats.resent}, duplicate runs ${dupRuns} (jobs in flight at a kill), worker reconnects ${worker.stats.reconnects}`);
});
