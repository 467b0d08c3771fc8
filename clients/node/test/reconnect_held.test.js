"use strict";
// A worker that leaves a silent broker lists, in the Ready on its new
// connection, every lease it knows of: a job still running and an Ack not
// yet Settled. The broker makes the old connection's other leases (whose
// Dispatch was lost with it) ready again at once, instead of after their
// leases lapse. A fake broker (a ROUTER) plays the broker's part here.
const test = require("node:test");
const assert = require("node:assert/strict");
const zmq = require("zeromq");
const proto = require("../lib/proto");
const zlane = require("..");

/** The next message of `kind` a fake broker's ROUTER gets (others skipped): [peer, body]. */
async function expectFrom(router, kind) {
  for (;;) {
    const [peer, frame] = await router.receive();
    const m = proto.decode(frame);
    if (m.kind === kind) return [peer, m.body];
  }
}

test("the Ready after a reconnect lists the leases the worker knows", { timeout: 30000 }, async (t) => {
  const router = new zmq.Router({ linger: 0 });
  await router.bind("tcp://127.0.0.1:*");
  let release;
  const gate = new Promise((r) => (release = r));
  const worker = new zlane.Worker({
    endpoints: router.lastEndpoint,
    concurrency: 2,
    heartbeatMs: 200,
    liveness: 10, // silent after 2 s: the test's Dispatch arrives before it, however slow the machine
    drainMs: 1000,
    handlers: { a: async (job) => { if (job.text() === "wait") await gate; } },
  });
  worker.on("warning", () => {});
  worker.start();
  t.after(async () => {
    release();
    await worker.stop({ force: true });
    router.close();
  });
  const expect = (kind) => expectFrom(router, kind);
  const refs = (held) => held.map((r) => `${proto.u64String(r.job_id)}:${proto.u64String(r.lease)}`).sort();

  const [peer, ready] = await expect("ready");
  assert.equal(ready.held_listed, true);
  assert.deepEqual(refs(ready.held), []);
  const job = (id, lease, payload) => ({
    job_id: id, lease, attempt: 1, tenant: "t", lane: "a", payload: Buffer.from(payload), lease_ms: 60000,
  });
  await router.send([peer, proto.encode("dispatch", { jobs: [job(1, 11, "wait"), job(2, 22, "ack")] })]);
  const [, ack] = await expect("ack");
  assert.deepEqual(ack.items.map((i) => proto.u64String(i.job_id)), ["2"]);
  // no Settled, no heartbeat: after liveness x heartbeat the worker reconnects
  const [peer2, again] = await expect("ready");
  assert.notDeepEqual(peer2, peer);
  assert.equal(proto.u64String(again.instance), proto.u64String(ready.instance));
  assert.equal(again.held_listed, true);
  assert.deepEqual(refs(again.held), ["1:11", "2:22"]);
  assert.ok(worker.stats.reconnects >= 1);
});

// The fake broker shares the worker's event loop: it is as silent as the worker is deaf
// while the handler holds the loop, and talks again when the worker can listen again. The
// worker counts silence only while it could listen (from its first tick after the block).
test("a worker busy past liveness x heartbeat does not leave a broker that kept talking", { timeout: 30000 }, async (t) => {
  const router = new zmq.Router({ linger: 0 });
  await router.bind("tcp://127.0.0.1:*");
  let quietUntil = 0; // the fake broker's heartbeats wait for this
  const worker = new zlane.Worker({
    endpoints: router.lastEndpoint,
    heartbeatMs: 100,
    liveness: 3,
    drainMs: 1000,
    handlers: {
      a: (job) => {
        const until = Date.now() + 1000; // holds the event loop for 10 heartbeats
        while (Date.now() < until);
        quietUntil = Date.now() + 120; // the broker's next heartbeat is on its way
      },
    },
  });
  worker.on("warning", () => {});
  worker.start();
  let peer = null;
  // every 150 ms, half the worker's 300 ms of patience; the first after the block comes
  // 120-150 ms after it (a worker that judged silence from its last frame before the
  // block would leave at its second tick after it, 25 ms on)
  const beat = setInterval(() => {
    if (peer && Date.now() >= quietUntil) router.send([peer, proto.encode("heartbeat", {})]).catch(() => {});
  }, 150);
  t.after(async () => {
    clearInterval(beat);
    await worker.stop({ force: true });
    router.close();
  });
  const expect = (kind) => expectFrom(router, kind);
  [peer] = await expect("ready");
  await router.send([peer, proto.encode("dispatch", {
    jobs: [{ job_id: 5, lease: 55, attempt: 1, tenant: "t", lane: "a", payload: Buffer.from("x"), lease_ms: 60000 }],
  })]);
  const [from, ack] = await expect("ack");
  assert.deepEqual(from, peer, "the Ack came on the first connection");
  assert.equal(proto.u64String(ack.items[0].job_id), "5");
  // the next 5 frames (its heartbeats, every 100 ms: past the 300 ms a worker that left
  // would have waited) come on the same connection, and no Ready on another
  for (let n = 0; n < 5; n++) {
    const [p, frame] = await router.receive();
    const m = proto.decode(frame);
    assert.deepEqual(p, peer, `frame ${n} (${m.kind}) on the first connection`);
    assert.notEqual(m.kind, "ready");
  }
  assert.equal(worker.stats.reconnects, 0);
});
