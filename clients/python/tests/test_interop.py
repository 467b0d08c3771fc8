"""The Python client against the C clients, and against a standby that says
NOT_LEADER; a worker process SIGKILLed mid-job."""

import os
import signal
import subprocess
import sys
import threading

import zmq

import zlane
from zlane._proto import decode, pb
from conftest import BIN_DIR, py_env, wait_for
from test_worker import run_worker, stop_worker


def test_python_producer_feeds_c_worker(broker, procs, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    cmd = ('printf "%s\\n%s\\n" "$ZLANE_HEADER_TRACE" "$ZLANE_IDEMPOTENCY_KEY" > '
           f'{out}/$ZLANE_JOB_ID.meta; cat > {out}/$ZLANE_JOB_ID.payload')
    procs([os.path.join(BIN_DIR, "zlane-worker"), "--broker", broker.backend, "--lanes", "a",
           "--heartbeat", "200ms", "--concurrency", "4", "--exec", cmd])
    with zlane.Producer(broker.frontend) as p:
        ids = p.submit_many([{"tenant": "acme", "lane": "a", "payload": b"py\x00%d\xff" % i,
                              "headers": {"trace": f"t{i}"}, "key": f"k-{i}"}
                             for i in range(50)])
    broker.wait_counter("jobs_acked", 50)
    assert broker.counter("jobs_nacked") == 0
    for i, job_id in enumerate(ids):
        assert (out / f"{job_id}.payload").read_bytes() == b"py\x00%d\xff" % i
        assert (out / f"{job_id}.meta").read_text() == f"t{i}\nk-{i}\n"


def test_c_producer_feeds_python_worker(broker):
    seen = {}
    w, t = run_worker(broker.backend, {"a": lambda job: seen.__setitem__(job.payload, job)})
    try:
        lines = "".join(f"line {i} é\n" for i in range(100)).encode()
        r = subprocess.run([os.path.join(BIN_DIR, "zlane-submit"), "--broker", broker.frontend,
                            "--tenant", "acme", "--lane", "a", "--lines", "--header", "src=c",
                            "--key-prefix", "c-", "-"], input=lines, capture_output=True,
                           timeout=30)
        assert r.returncode == 0, r.stderr
        ids = [int(x) for x in r.stdout.split()]
        wait_for(lambda: len(seen) == 100, 20, "100 jobs from zlane-submit")
        for i in range(100):
            job = seen[f"line {i} é".encode()]
            assert job.id == ids[i] and job.headers == {"src": "c"}
            assert job.idempotency_key == f"c-{i + 1}"
        broker.wait_counter("jobs_acked", 100)
    finally:
        stop_worker(w, t)


class Standby:
    """A ROUTER that answers everything Error{NOT_LEADER, leader_endpoints}."""

    def __init__(self, leader):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.linger = 0
        self.sock.bind("tcp://127.0.0.1:*")
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.answered = []
        self.stop = threading.Event()
        reply = pb.Envelope(version=1, error=pb.Error(
            code=pb.ERROR_NOT_LEADER, message="standby", leader_endpoints=[leader]))
        self.reply = reply.SerializeToString()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            if not self.sock.poll(50):
                continue
            ident, frame = self.sock.recv_multipart()
            self.answered.append(decode(frame)[0])
            self.sock.send_multipart([ident, self.reply])

    def close(self):
        self.stop.set()
        self.thread.join()
        self.sock.close()
        self.ctx.term()


def test_not_leader_is_followed(broker):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    s.close()
    fs, bs = Standby(broker.frontend), Standby(broker.backend)
    seen = []
    try:
        # the leader is last in each list, after a dead endpoint: NOT_LEADER leads there
        w, t = run_worker([bs.endpoint, dead, broker.backend],
                          {"a": lambda job: seen.append(job.payload)})
        try:
            with zlane.Producer([fs.endpoint, dead, broker.frontend]) as p:
                ids = p.submit_many([("acme", "a", b"%d" % i) for i in range(20)], timeout=20)
                assert p.endpoint == broker.frontend and p.stats["moves"] == 1
            assert len(set(ids)) == 20
            wait_for(lambda: len(seen) == 20, 20, "20 jobs via the leader")
        finally:
            stop_worker(w, t)
        assert fs.answered[:1] == ["hello"] and bs.answered[:1] == ["ready"]
    finally:
        fs.close()
        bs.close()


def test_worker_killed_mid_job_is_redelivered(broker, procs, tmp_path):
    log = str(tmp_path / "jobs.log")
    env = dict(py_env(), ZLANE_TEST_LOG=log)
    argv = [sys.executable, "-m", "zlane.worker", "handlers:slow", "--lane", "a", "--broker",
            broker.backend, "--heartbeat", "200ms"]
    with zlane.Producer(broker.frontend) as p:
        job_id = p.submit("acme", "a", b"30")
    w = procs(argv, env=env)
    wait_for(lambda: os.path.exists(log) and f"start {job_id}" in open(log).read(), 15,
             "the job to start")
    w.proc.send_signal(signal.SIGKILL)
    w.proc.wait(10)
    broker.wait_counter("workers_dead", 1, timeout=10)  # liveness x heartbeat
    seen = []
    w2, t2 = run_worker(broker.backend, {"a": lambda job: seen.append((job.id, job.attempt))})
    try:
        wait_for(lambda: seen, 15, "the redelivery")
        assert seen == [(job_id, 2)]
    finally:
        stop_worker(w2, t2)
