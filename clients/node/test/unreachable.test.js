"use strict";
// Clear errors within the client's timeout: a broker that is not there (a
// closed port), a broker whose server key is not the one the client was
// given (CURVE), and no credit while blocking (the deadline) or with
// block: false set on the producer.
const test = require("node:test");
const assert = require("node:assert/strict");
const net = require("node:net");
const path = require("node:path");
const fs = require("node:fs");
const { Broker, waitFor, tmpdir, keygen } = require("../testlib/harness");
const zlane = require("..");

// a port nothing listens on: bind one, then close it
const closedPort = () =>
  new Promise((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const port = s.address().port;
      s.close(() => resolve(`tcp://127.0.0.1:${port}`));
    });
  });

/** Assert that `p` rejects with `cls` whose message matches `re`, within `withinMs` of now. */
async function rejectsWithin(p, cls, re, withinMs) {
  const t0 = Date.now();
  let err = null;
  try {
    await p;
  } catch (e) {
    err = e;
  }
  const took = Date.now() - t0;
  assert.ok(err, "it should have failed");
  assert.ok(err instanceof cls, `${cls.name} expected, got ${err.stack}`);
  assert.match(err.message, re);
  assert.ok(took <= withinMs, `failed after ${took} ms, more than ${withinMs} ms`);
  return err;
}

test("an unreachable broker: TimeoutError that says so, within the deadline", { timeout: 30000 }, async (t) => {
  const ep = await closedPort();
  const producer = new zlane.Producer({ endpoints: ep, deadlineMs: 1000 });
  const admin = new zlane.Admin({ endpoints: ep, timeoutMs: 1000 });
  t.after(async () => {
    await producer.close();
    await admin.close();
  });
  const e = await rejectsWithin(producer.submit({ tenant: "t", lane: "a", payload: "x" }), zlane.TimeoutError, /unreachable at tcp:\/\/127\.0\.0\.1:\d+/, 2000);
  assert.equal(e.code, "TIMEOUT");
  assert.equal(e.sent, false, "nothing went on the wire");
  assert.match(e.idempotencyKey, /^[0-9a-f]{16}-\d+$/);
  const many = await rejectsWithin(
    producer.submitMany([1, 2, 3].map((i) => ({ tenant: "t", lane: "a", payload: String(i) }))),
    zlane.TimeoutError,
    /unreachable/,
    2000,
  );
  assert.equal(many.results.length, 3);
  assert.ok(many.results.every((r) => r.error instanceof zlane.TimeoutError));
  await rejectsWithin(producer.ready(500), zlane.TimeoutError, /no credit from a broker within 500 ms: broker unreachable/, 1500);
  assert.equal(producer.connected, false);
  assert.equal(producer.stats.timedOut, 4);
  // block: false fails at once instead
  await rejectsWithin(producer.submit({ tenant: "t", lane: "a" }, { block: false }), zlane.QueueFullError, /unreachable/, 100);
  await rejectsWithin(admin.stats(), zlane.TimeoutError, /no admin reply from tcp:\/\/127\.0\.0\.1:\d+ within 1000 ms/, 2000);
});

test("a wrong server key (CURVE): TimeoutError naming the handshake, within the deadline", { timeout: 30000 }, async (t) => {
  const keys = tmpdir("keys");
  const clients = path.join(keys, "clients");
  fs.mkdirSync(clients);
  const server = keygen(keys, "broker");
  const impostor = keygen(tmpdir("impostor"), "not-the-broker");
  const mine = tmpdir("mykeys");
  const web = keygen(mine, "web-1", "--role", "producer", "--tenants", "acme");
  const ops = keygen(mine, "alice", "--role", "admin");
  for (const k of [web, ops]) fs.copyFileSync(k.public, path.join(clients, path.basename(k.public)));
  const broker = await new Broker(["--lane", "a", "--durability", "none", "--curve", "--cert", server.secret, "--clients", clients]).start();
  const wrong = (k) => ({ serverCert: impostor.public, clientCert: k.secret });
  const producer = new zlane.Producer({ endpoints: broker.frontend, curve: wrong(web), deadlineMs: 1500 });
  const admin = new zlane.Admin({ endpoints: broker.admin, curve: wrong(ops), timeoutMs: 1000 });
  const good = new zlane.Producer({ endpoints: broker.frontend, curve: { serverCert: server.public, clientCert: web.secret } });
  t.after(async () => {
    await producer.close();
    await admin.close();
    await good.close();
    await broker.stop();
  });
  const e = await rejectsWithin(producer.submit({ tenant: "acme", lane: "a", payload: "x" }), zlane.TimeoutError, /the CURVE handshake failed.*is the server certificate the broker.s\?/, 3000);
  assert.equal(e.sent, false);
  assert.equal(producer.connected, false);
  await rejectsWithin(admin.stats(), zlane.TimeoutError, /no admin reply/, 2000);
  // the same client key with the right server key gets in
  assert.match(await good.submit({ tenant: "acme", lane: "a", payload: "x" }), /^\d+$/);
});

test("out of credit: block: false on the producer raises at once; a blocking submit waits, to its deadline", { timeout: 30000 }, async (t) => {
  const broker = await new Broker(["--lane", "a", "--durability", "none", "--max-depth", "3"]).start();
  const failFast = new zlane.Producer({ endpoints: broker.frontend, block: false });
  let blocking = null;
  t.after(async () => {
    await failFast.close();
    if (blocking) await blocking.close();
    await broker.stop();
  });
  await failFast.ready(5000);
  // fill the queue to max_depth; nothing consumes it
  let taken = 0;
  for (; taken < 10; taken++) {
    try {
      await failFast.submit({ tenant: "t", lane: "a", payload: String(taken) });
    } catch (e) {
      assert.ok(e instanceof zlane.QueueFullError, e.stack);
      break;
    }
  }
  assert.equal(taken, 3, "max_depth jobs were taken, then QueueFullError");
  await waitFor(() => failFast.creditAvailable === 0, 5000, "the credit to run out");
  const q = await rejectsWithin(failFast.submit({ tenant: "t", lane: "a", payload: "x" }), zlane.QueueFullError, /no credit/, 100);
  assert.equal(q.code, "NO_CREDIT");
  assert.ok(q.retryAfterMs > 0);

  // a blocking producer waits for room until the job's deadline, then says why
  blocking = new zlane.Producer({ endpoints: broker.frontend, deadlineMs: 800 });
  const e = await rejectsWithin(blocking.submit({ tenant: "t", lane: "a", payload: "y" }), zlane.TimeoutError, /no credit from broker at .*queue full|QUEUE_FULL/, 1800);
  assert.equal(e.code, "TIMEOUT");
  // per call, block: true overrides the producer's default: it waits instead of raising
  const waiting = failFast.submit({ tenant: "t", lane: "a", payload: "z" }, { block: true });
  assert.equal(failFast.outstanding, 1);
  await failFast.close();
  await assert.rejects(waiting, zlane.ClosedError);
});
