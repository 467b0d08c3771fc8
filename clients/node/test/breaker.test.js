"use strict";
// A lane's circuit breaker seen through the Node client: the Subscriber
// passes its breaker.<lane> events on (decoded), and Admin.stats() lists it.
const test = require("node:test");
const assert = require("node:assert/strict");
const { Broker, waitFor } = require("../testlib/harness");
const zlane = require("..");

test("circuit breaker: the open event and the stats", { timeout: 60000 }, async (t) => {
  const broker = await new Broker([
    "--lane", "pay", "--durability", "none", "--backoff-base", "50ms", "--backoff-cap", "100ms",
    "--set", "lanes/pay/breaker_failures=2", "--set", "lanes/pay/breaker_cooldown=30s",
  ]).start();
  const sub = new zlane.Subscriber({ endpoints: broker.events, topics: ["breaker.", "batch."] });
  const events = [];
  const pumping = (async () => {
    for await (const ev of sub) events.push(ev);
  })();
  const producer = new zlane.Producer({ endpoints: broker.frontend });
  const admin = new zlane.Admin({ endpoints: broker.admin });
  const worker = new zlane.Worker({
    endpoints: broker.backend,
    handlers: {
      pay: async () => {
        throw new Error("the payment gateway is down");
      },
    },
  }).start();
  t.after(async () => {
    await worker.stop();
    await producer.close();
    await admin.close();
    await sub.close();
    await pumping;
    await broker.stop();
  });
  await sub.connected();
  // The open event is published once: the subscriptions must be in effect
  // before the jobs fail (a moment after the handshake). An empty batch
  // opened with close settles at once and publishes batch.<id>; "breaker."
  // was asked for before "batch." on the same connection.
  let ready = false;
  for (let n = 1; !ready && n <= 15; n++) {
    const probe = await producer.openBatch({ tenant: "acme", lane: "pay", batchId: `probe-${n}`, noCallback: true, close: true });
    ready = await waitFor(() => events.some((e) => e.batchId === probe), 1000, "probe").then(() => true, () => false);
  }
  assert.ok(ready, "no batch.<id> event on the events socket");
  for (let i = 0; i < 3; i++) await producer.submit({ tenant: "acme", lane: "pay", payload: `charge-${i}` });
  await waitFor(() => events.some((e) => e.type === "breaker" && e.state === "BREAKER_OPEN"), 15000, "the breaker.pay open event");
  const ev = events.find((e) => e.type === "breaker" && e.state === "BREAKER_OPEN");
  assert.equal(ev.topic, "breaker.pay");
  assert.equal(ev.lane, "pay");
  assert.ok(ev.failures >= 2, `failures ${ev.failures}`);
  assert.ok(ev.untilMs > Date.now(), "open until a time to come");
  const s = await admin.stats();
  const b = s.breakers.find((x) => x.lane === "pay");
  assert.equal(b.state, "BREAKER_OPEN");
  assert.ok(b.opened >= 1);
});
