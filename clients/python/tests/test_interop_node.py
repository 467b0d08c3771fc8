"""The interop matrix's Node.js half: a Node producer (clients/node) feeding a
Python worker, and a Python producer feeding a Node worker. Every job is run
exactly once with its payload bytes, headers and idempotency key intact, and
acked (the broker's counters say so)."""

import json
import os
import shutil
import subprocess

import pytest

import zlane
from conftest import ROOT, wait_for
from test_worker import run_worker, stop_worker

NODE = shutil.which("node")
NODE_CLIENT = os.path.join(ROOT, "clients", "node")
N = 200

pytestmark = pytest.mark.skipif(
    not NODE or not os.path.isdir(os.path.join(NODE_CLIENT, "node_modules")),
    reason="node or clients/node/node_modules missing (scripts/deps.sh --test installs them)")

# Submits N jobs: a binary payload (a NUL, a 0xff, UTF-8 text), headers and
# a key per job; prints the ids as a JSON array.
PRODUCER_JS = r"""
const { Producer } = require(process.argv[2]);
(async () => {
  const p = new Producer({ endpoints: process.argv[3], client: "interop-node" });
  const specs = [];
  for (let i = 0; i < %(n)d; i++)
    specs.push({ tenant: "acme", lane: "a", key: `node-${i}`,
                 payload: Buffer.concat([Buffer.from([0, 255]), Buffer.from(`node ${i} é`)]),
                 headers: { src: "node", n: String(i) } });
  const ids = await p.submitMany(specs);
  process.stdout.write(JSON.stringify(ids) + "\n");
  await p.close();
})().catch((e) => { console.error(e); process.exit(1); });
""" % {"n": N}

# Serves lane a; appends one JSON line per execution to argv[4]; stops on SIGTERM.
WORKER_JS = r"""
const fs = require("fs");
const { Worker } = require(process.argv[2]);
const out = fs.openSync(process.argv[4], "a");
const w = new Worker({ endpoints: process.argv[3], name: "interop-node", concurrency: 4,
                       heartbeatMs: 200, stopSignals: ["SIGTERM"] });  // the broker's (FAST)
w.handle("a", async (job) => {
  fs.writeSync(out, JSON.stringify({ id: job.id, attempt: job.attempt, key: job.idempotencyKey,
    headers: job.headers, payload: job.payload.toString("hex") }) + "\n");
});
w.start();
w.closed.then(() => process.exit(0));
"""


def _payload(i):
    return b"\x00\xff" + f"node {i} é".encode()


def test_node_producer_feeds_python_worker(broker, tmp_path):
    seen = {}

    def handler(job):
        seen.setdefault(job.id, []).append(job)

    w, t = run_worker(broker.backend, {"a": handler}, concurrency=4)
    try:
        script = tmp_path / "produce.js"
        script.write_text(PRODUCER_JS)
        r = subprocess.run([NODE, str(script), NODE_CLIENT, broker.frontend],
                           capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        ids = [int(x) for x in json.loads(r.stdout)]
        assert len(set(ids)) == N
        broker.wait_counter("jobs_acked", N)
        wait_for(lambda: len(seen) == N, 20, f"{N} jobs run by the Python worker")
    finally:
        stop_worker(w, t)
    for i, job_id in enumerate(ids):
        runs = seen[job_id]
        assert len(runs) == 1, f"job {job_id} ran {len(runs)} times"
        job = runs[0]
        assert job.payload == _payload(i)
        assert job.headers == {"src": "node", "n": str(i)}
        assert job.idempotency_key == f"node-{i}"
        assert job.attempt == 1
    assert broker.counter("jobs_acked") == N
    assert broker.counter("jobs_nacked") == 0


def test_python_producer_feeds_node_worker(broker, procs, tmp_path):
    record = tmp_path / "record.jsonl"
    script = tmp_path / "work.js"
    script.write_text(WORKER_JS)
    worker = procs([NODE, str(script), NODE_CLIENT, broker.backend, str(record)])
    with zlane.Producer(broker.frontend) as p:
        ids = p.submit_many([{"tenant": "acme", "lane": "a",
                              "payload": b"py\x00%d\xff\n" % i,
                              "headers": {"src": "python", "n": str(i)}, "key": f"py-{i}"}
                             for i in range(N)])
    assert len(set(ids)) == N
    broker.wait_counter("jobs_acked", N)
    worker.proc.send_signal(15)
    assert worker.proc.wait(20) == 0
    lines = [json.loads(x) for x in record.read_text().splitlines()]
    by_id = {}
    for x in lines:
        by_id.setdefault(int(x["id"]), []).append(x)
    assert sorted(by_id) == sorted(ids)
    for i, job_id in enumerate(ids):
        runs = by_id[job_id]
        assert len(runs) == 1, f"job {job_id} ran {len(runs)} times"
        assert bytes.fromhex(runs[0]["payload"]) == b"py\x00%d\xff\n" % i
        assert runs[0]["headers"] == {"src": "python", "n": str(i)}
        assert runs[0]["key"] == f"py-{i}"
        assert runs[0]["attempt"] == 1
    assert broker.counter("jobs_acked") == N
    assert broker.counter("jobs_nacked") == 0
