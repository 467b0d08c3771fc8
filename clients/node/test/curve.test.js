"use strict";
// CURVE end to end with certificates from zlane-ctl keygen: producer,
// worker, admin and subscriber keys on a --curve broker; an unknown key is
// refused with a clear error within the deadline.
const test = require("node:test");
const assert = require("node:assert/strict");
const path = require("node:path");
const fs = require("node:fs");
const { Broker, waitFor, tmpdir, keygen } = require("../testlib/harness");
const zlane = require("..");

test("CURVE with keygen'd certificates", { timeout: 60000 }, async (t) => {
  const keys = tmpdir("keys");
  const clients = path.join(keys, "clients");
  fs.mkdirSync(clients);
  const mine = tmpdir("mykeys");
  const server = keygen(keys, "broker");
  const cert = (name, ...args) => {
    const k = keygen(mine, name, ...args);
    fs.copyFileSync(k.public, path.join(clients, name));
    return k;
  };
  const web = cert("web-1", "--role", "producer", "--tenants", "acme");
  const wrk = cert("worker-1", "--role", "worker", "--lanes", "a");
  const ops = cert("alice", "--role", "admin");
  const dash = cert("dashboard", "--role", "subscriber");
  const stranger = keygen(tmpdir("stranger"), "stranger", "--role", "producer", "--tenants", "acme");

  const broker = await new Broker(["--lane", "a", "--durability", "none", "--curve", "--cert", server.secret, "--clients", clients]).start();
  const curve = (k) => ({ serverCert: server.public, clientCert: k.secret });
  const producer = new zlane.Producer({ endpoints: broker.frontend, curve: curve(web) });
  const got = [];
  const worker = new zlane.Worker({ endpoints: broker.backend, curve: curve(wrk), handlers: { a: async (j) => got.push(j) } }).start();
  const admin = new zlane.Admin({ endpoints: broker.admin, curve: curve(ops) });
  const sub = new zlane.Subscriber({ endpoints: broker.events, curve: curve(dash) });
  t.after(async () => {
    await worker.stop();
    await producer.close();
    await admin.close();
    await sub.close();
    await broker.stop();
  });

  const id = await producer.submit({ tenant: "acme", lane: "a", payload: "secret stuff" });
  await waitFor(() => got.some((j) => j.id === id), 10000, "the job over CURVE");
  assert.equal(got[0].payload.toString(), "secret stuff");
  // bindings hold: web-1 may submit for acme only
  await assert.rejects(producer.submit({ tenant: "globex", lane: "a", payload: "x" }), zlane.UnauthorizedError);
  const s = await admin.stats();
  assert.equal(s.counters.err_auth_failed, 0);
  assert.ok(s.counters.jobs_acked >= 1 || (await waitFor(async () => (await admin.stats()).counters.jobs_acked >= 1, 5000, "the ack")));
  await sub.connected(5000);

  // a key the broker does not know: refused, said so, within the deadline
  const bad = new zlane.Producer({ endpoints: broker.frontend, curve: curve(stranger), deadlineMs: 1500 });
  const t0 = Date.now();
  await assert.rejects(bad.submit({ tenant: "acme", lane: "a", payload: "x" }), (e) => {
    assert.ok(e instanceof zlane.TimeoutError, e.stack);
    assert.match(e.message, /refused this client's CURVE key|handshake/);
    return true;
  });
  assert.ok(Date.now() - t0 < 4000);
  await bad.close();
  // plaintext to a CURVE broker: a clear error too
  const plain = new zlane.Producer({ endpoints: broker.frontend, deadlineMs: 1500 });
  await assert.rejects(plain.submit({ tenant: "acme", lane: "a", payload: "x" }), zlane.TimeoutError);
  await plain.close();
  // a certificate file that is not one
  assert.throws(() => new zlane.Producer({ endpoints: broker.frontend, curve: { serverCert: server.public, clientCert: web.public } }), zlane.ConfigError);
  assert.ok((await admin.stats()).counters.err_auth_failed >= 1);
});
