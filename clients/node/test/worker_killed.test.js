"use strict";
// A zlane-node-worker process SIGKILLed in the middle of a job: the broker
// sees the worker gone, the job goes to the other worker process with
// attempt 2 and is acked there, once.
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { Broker, waitFor, run, stopChild, tmpdir, NODE_DIR } = require("../testlib/harness");
const zlane = require("..");

const RUNNER = path.join(NODE_DIR, "bin", "zlane-node-worker.js");
const HANDLER = path.join(NODE_DIR, "testlib", "first_hangs.js");

test("a worker process SIGKILLed mid-job: redelivered with attempt 2 to another worker, acked", { timeout: 60000 }, async (t) => {
  const broker = await new Broker(["--lane", "k", "--durability", "none"]).start();
  const producer = new zlane.Producer({ endpoints: broker.frontend });
  const admin = new zlane.Admin({ endpoints: broker.admin });
  const dir = tmpdir("killed");
  const runner = (name) => {
    const record = path.join(dir, `${name}.record`);
    const child = run(process.execPath, [RUNNER, HANDLER, "--lane", "k", "--broker", broker.backend, "--name", name], {
      errPath: path.join(dir, `${name}.err`),
      env: { ZLANE_TEST_RECORD: record },
    });
    child.record = () => (fs.existsSync(record) ? fs.readFileSync(record, "utf8") : "");
    child.err = () => fs.readFileSync(path.join(dir, `${name}.err`), "utf8");
    return child;
  };
  const a = runner("victim");
  let b = null;
  t.after(async () => {
    await stopChild(a, "SIGKILL");
    if (b) await stopChild(b, "SIGKILL");
    await producer.close();
    await admin.close();
    await broker.stop();
  });
  await waitFor(async () => (await admin.stats()).workers === 1, 10000, "the first runner's Ready");

  const id = await producer.submit({ tenant: "t", lane: "k", payload: "30000", headers: { trace: "k-1" } });
  await waitFor(() => a.record().includes(`start ${id} 1\n`), 10000, "attempt 1 to start in the first runner");
  b = runner("rescuer");
  await waitFor(async () => (await admin.stats()).workers === 2, 10000, "the second runner's Ready");
  // the job is still held by the first runner: the second has nothing
  assert.equal(b.record(), "");

  process.kill(a.pid, "SIGKILL");
  const { signal } = await a.exited;
  assert.equal(signal, "SIGKILL");
  await waitFor(() => b.record().includes(`end ${id} 2\n`), 20000, "attempt 2 to run in the second runner");
  await waitFor(async () => (await admin.stats()).lanes.find((l) => l.lane === "k")?.acked === 1, 10000, "the ack");

  const lane = (await admin.stats()).lanes.find((l) => l.lane === "k");
  assert.equal(lane.inFlight, 0);
  assert.equal(lane.ready, 0);
  assert.equal(lane.dlq, 0);
  assert.equal(b.record(), `start ${id} 2\nend ${id} 2\n`, "attempt 2 only, once, in the second runner");
  assert.ok(!a.record().includes(`end ${id}`), "attempt 1 never finished");
  // the second runner drains and reports the one ack it made
  const r = await stopChild(b, "SIGTERM");
  assert.equal(r.code, 0, b.err());
  assert.match(b.err(), /1 acked, 0 nacked, 1 settled/);
});
