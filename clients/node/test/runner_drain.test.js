"use strict";
// zlane-node-worker: SIGTERM drains it (Ready with capacity 0, the running
// job finishes and is settled, the process exits 0, nothing new is taken).
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { Broker, waitFor, run, tmpdir, NODE_DIR } = require("../testlib/harness");
const zlane = require("..");

const RUNNER = path.join(NODE_DIR, "bin", "zlane-node-worker.js");

test("zlane-node-worker drains on SIGTERM and exits 0", { timeout: 60000 }, async (t) => {
  const broker = await new Broker(["--lane", "slow", "--durability", "none"]).start();
  const producer = new zlane.Producer({ endpoints: broker.frontend });
  const admin = new zlane.Admin({ endpoints: broker.admin });
  const dir = tmpdir("runner");
  const record = path.join(dir, "record");
  const errPath = path.join(dir, "runner.err");
  const child = run(process.execPath, [RUNNER, path.join(NODE_DIR, "testlib", "sleepy.js"), "--lane", "slow", "--broker", broker.backend, "--concurrency", "2"], {
    errPath,
    env: { ZLANE_TEST_RECORD: record },
  });
  t.after(async () => {
    try {
      process.kill(child.pid, "SIGKILL");
    } catch {}
    await producer.close();
    await admin.close();
    await broker.stop();
  });
  const read = () => (fs.existsSync(record) ? fs.readFileSync(record, "utf8") : "");
  await waitFor(async () => (await admin.stats()).workers === 1, 10000, "the runner's Ready");

  const id = await producer.submit({ tenant: "t", lane: "slow", payload: "1200" });
  await waitFor(() => read().includes(`start ${id} 1`), 10000, "the job to start");
  process.kill(child.pid, "SIGTERM");
  // draining: the broker sends nothing new; a job submitted now stays ready
  await waitFor(() => fs.existsSync(errPath) && fs.readFileSync(errPath, "utf8").includes("draining"), 5000, "the drain to begin");
  const later = await producer.submit({ tenant: "t", lane: "slow", payload: "0" });
  const { code, signal } = await child.exited;
  const err = fs.readFileSync(errPath, "utf8");
  assert.equal(signal, null, err);
  assert.equal(code, 0, err);
  assert.ok(read().includes(`end ${id} 1`), "the running job finished");
  assert.ok(!read().includes(`start ${later} `), "nothing new was taken while draining");
  const g = (await admin.stats()).lanes.find((l) => l.lane === "slow");
  assert.equal(g.acked, 1, `the running job was acked: ${JSON.stringify(g)}\n${err}`);
  assert.equal(g.ready, 1, "the later job waits for another worker");
  assert.equal(g.inFlight, 0);
  assert.match(err, /1 acked, 0 nacked, 1 settled/);
});
