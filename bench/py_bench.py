#!/usr/bin/python3
"""py_bench: the Python client's throughput, side by side with Celery on Redis.

    /usr/bin/python3 bench/py_bench.py [--jobs N] [--celery-jobs N] [--runs R]
                                       [--only zlane|celery] [--profile DIR]

Per run, each measured alone in its own process:

- zlane producer: one process, one thread, submit_many() of N 100-byte jobs in
  batches of --batch, timed from the first call until every job is Accepted;
- zlane worker: N jobs preloaded, then one zlane.Worker process (no-op handler)
  timed from its start until the broker confirmed (Settled) every Ack;
- Celery producer: apply_async() of N tasks with a 100-byte argument, in a
  loop, timed until the last one is in Redis;
- Celery worker: N tasks preloaded, then one `celery worker` process (no-op
  task, the pool and prefetch below), timed until Redis's queue is drained and
  every task was run.

It starts its own zlane-broker (build/bin, --durability none, ephemeral ports
from --ports-file) and its own redis-server (a free loopback port, its own
directory, --save ''), and stops every process it started by PID. Each step is
bounded in time. Output: jobs/s per step and run, then the ranges and zlane's
ratio to Celery in the same run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BIN = os.environ.get("ZLANE_BIN_DIR", os.path.join(ROOT, "build", "bin"))
GEN = os.environ.get("ZLANE_PY_GEN", os.path.join(ROOT, "build", "clients", "python", "gen"))
PY = "/usr/bin/python3"
PAYLOAD = b"x" * 100
NAMES = ("frontend", "backend", "events", "admin")
LANE = "bench"
TENANT = "t"


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "clients", "python"), HERE]
                                        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["ZLANE_PY_GEN"] = GEN
    return env


def run_child(args: list[str], timeout: float, profile: str | None = None,
              env: dict | None = None) -> dict:
    """Run `py_bench.py <role> ...` in a new process; its last stdout line is JSON."""
    argv = [PY, os.path.abspath(__file__)] + args
    if profile:
        argv += ["--profile", profile]
    full = child_env()
    full.update(env or {})
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full,
                         stdin=subprocess.DEVNULL)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise RuntimeError(f"{args[0]} took over {timeout} s:\n{err.decode()[-2000:]}")
    if p.returncode != 0:
        raise RuntimeError(f"{args[0]} exited {p.returncode}:\n{err.decode()[-3000:]}")
    return json.loads(out.decode().strip().splitlines()[-1])


def stop_pid(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


# ---------------------------------------------------------------- zlane

class ZlaneBroker:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="zlane-pybench-")
        ports = os.path.join(self.dir, "ports")
        argv = [os.path.join(BIN, "zlane-broker"), "--data", os.path.join(self.dir, "data"),
                "--durability", "none", "--lane", LANE, "--ports-file", ports]
        for n in NAMES:
            argv += [f"--{n}", "tcp://127.0.0.1:*"]
        self.log = open(os.path.join(self.dir, "broker.log"), "ab")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        end = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("zlane-broker exited: " + open(self.log.name).read()[-2000:])
            if os.path.exists(ports):
                found = dict(line.strip().split("=", 1) for line in open(ports) if "=" in line)
                if all(n in found for n in NAMES):
                    self.ep = found
                    return
            if time.monotonic() > end:
                raise RuntimeError("zlane-broker wrote no ports file in 10 s")
            time.sleep(0.01)

    def cpu(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self):
        stop_pid(self.proc)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _profiled(fn, profile: str | None, name: str):
    if not profile:
        return fn()
    import cProfile
    import pstats
    prof = cProfile.Profile()
    r = prof.runcall(fn)
    path = os.path.join(profile, f"{name}.prof")
    prof.dump_stats(path)
    with open(os.path.join(profile, f"{name}.txt"), "w") as f:
        pstats.Stats(path, stream=f).sort_stats("tottime").print_stats(40)
    return r


def role_zlane_producer(a) -> dict:
    import zlane
    jobs = [(TENANT, LANE, PAYLOAD)] * a.jobs
    with zlane.Producer(a.endpoint, client="py-bench") as p:
        if not p.wait_connected(10):
            raise SystemExit("no credit from the broker in 10 s")

        def go():
            t0 = time.perf_counter()
            ids = []
            for i in range(0, a.jobs, a.batch):
                ids += p.submit_many(jobs[i:i + a.batch])
            return time.perf_counter() - t0, ids
        cpu0 = time.process_time()
        secs, ids = _profiled(go, a.profile, "zlane_producer")
        cpu = time.process_time() - cpu0
        assert len(ids) == a.jobs and len(set(ids)) == a.jobs, "job ids missing or repeated"
        return {"jobs": a.jobs, "secs": secs, "rate": a.jobs / secs, "cpu": cpu,
                "stats": p.stats}


def role_zlane_preload(a) -> dict:
    import zlane
    jobs = [(TENANT, LANE, PAYLOAD)] * a.jobs
    with zlane.Producer(a.endpoint, client="py-bench-preload") as p:
        p.wait_connected(10)
        ids = p.submit_many(jobs)
    return {"jobs": len(ids)}


def role_zlane_worker(a) -> dict:
    import threading
    import zlane
    w = zlane.Worker(a.endpoint, name="py-bench", concurrency=a.concurrency,
                     prefetch=a.prefetch)

    @w.handler(LANE)
    def noop(job):
        pass

    t0 = time.perf_counter()
    marks = {}

    def watch():  # stop once every Ack is confirmed (Settled)
        while w.stats["settled"] < a.jobs:
            if "first" not in marks and w.stats["received"]:
                marks["first"] = time.perf_counter()
            time.sleep(0.002)
        marks["end"] = time.perf_counter()
        w.stop()
    threading.Thread(target=watch, daemon=True).start()
    cpu0 = time.process_time()
    _profiled(lambda: w.run(install_signals=False), a.profile, "zlane_worker")
    cpu = time.process_time() - cpu0
    secs = marks["end"] - t0
    return {"jobs": a.jobs, "secs": secs, "rate": a.jobs / secs, "cpu": cpu,
            "from_first": a.jobs / (marks["end"] - marks.get("first", t0)),
            "stats": w.stats}


# ---------------------------------------------------------------- main

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("role", nargs="?", default="bench")
    ap.add_argument("--jobs", type=int, default=200_000)
    ap.add_argument("--celery-jobs", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=10_000, help="jobs per submit_many call")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--prefetch", type=int, default=1000)
    ap.add_argument("--celery-pool", default="solo", help="celery worker -P (default solo)")
    ap.add_argument("--celery-concurrency", type=int, default=1)
    ap.add_argument("--celery-group", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--celery-prefetch", type=int, default=20,
                    help="celery worker --prefetch-multiplier")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", choices=("zlane", "celery"), default=None)
    ap.add_argument("--endpoint")
    ap.add_argument("--profile", default=None, help="write cProfile output of the zlane "
                    "steps into this directory")
    a = ap.parse_args()
    if a.profile:
        os.makedirs(a.profile, exist_ok=True)
    if a.role != "bench":
        fn = globals().get("role_" + a.role.replace("-", "_"))
        if fn is None:
            ap.error(f"unknown role {a.role}")
        print(json.dumps(fn(a)))
        return 0
    return bench(a)


def ensure_celery() -> None:
    """Celery's side needs Debian's python3-celery, python3-redis and redis-server:
    installed with apt-get when missing and run as root, else a clear exit."""
    missing = [pkg for mod, pkg in (("celery", "python3-celery"), ("redis", "python3-redis"))
               if importlib.util.find_spec(mod) is None]
    if shutil.which("redis-server") is None:
        missing.append("redis-server")
    if not missing:
        return
    if os.geteuid() != 0:
        raise SystemExit(f"py_bench: install {' '.join(missing)} (apt-get), or run with "
                         f"--only zlane")
    print(f"py_bench: apt-get install {' '.join(missing)}", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], env=env, check=False, timeout=300)
    subprocess.run(["apt-get", "install", "-y", "-qq"] + missing, env=env, check=True,
                   timeout=600)
    importlib.invalidate_caches()


def bench(a) -> int:
    if a.only != "zlane":
        ensure_celery()
    results = []
    for run in range(1, a.runs + 1):
        r = {}
        print(f"run {run} (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores):",
              flush=True)
        if a.only != "celery":
            r.update(zlane_run(a))
        if a.only != "zlane":
            r.update(celery_run(a))
        results.append(r)
        print(f"run {run} jobs/s: " + ", ".join(f"{k} {v:,.0f}" for k, v in r.items()),
              flush=True)
    summary(results)
    return 0


def zlane_run(a) -> dict:
    out = {}
    common = ["--jobs", str(a.jobs), "--batch", str(a.batch)]
    b = ZlaneBroker()
    try:
        c0 = b.cpu()
        r = run_child(["zlane_producer", "--endpoint", b.ep["frontend"]] + common, 120,
                      a.profile)
        out["zlane producer"] = r["rate"]
        print(f"  zlane producer: {a.jobs} jobs in {r['secs']:.2f} s, {r['rate']:,.0f} jobs/s "
              f"(cpu: producer {r['cpu']:.2f} s = {r['cpu'] / a.jobs * 1e6:.1f} us/job, broker "
              f"{b.cpu() - c0:.2f} s)", flush=True)
    finally:
        b.close()
    b = ZlaneBroker()
    try:
        run_child(["zlane_preload", "--endpoint", b.ep["frontend"]] + common, 120)
        c0 = b.cpu()
        r = run_child(["zlane_worker", "--endpoint", b.ep["backend"], "--concurrency",
                       str(a.concurrency), "--prefetch", str(a.prefetch)] + common, 120,
                      a.profile)
        out["zlane worker"] = r["rate"]
        print(f"  zlane worker: {a.jobs} jobs in {r['secs']:.2f} s, {r['rate']:,.0f} jobs/s "
              f"(from the first job {r['from_first']:,.0f}/s; cpu: worker {r['cpu']:.2f} s = "
              f"{r['cpu'] / a.jobs * 1e6:.1f} us/job, broker {b.cpu() - c0:.2f} s)", flush=True)
    finally:
        b.close()
    return out


def celery_run(a) -> dict:
    out = {}
    n = a.celery_jobs
    r = RedisServer()
    try:
        env = {"PYBENCH_REDIS": r.url}
        res = run_child(["celery_producer", "--jobs", str(n), "--celery-group", "1"], 600,
                        env=env)
        if res["queued"] != 2 * n:
            raise RuntimeError(f"{res['queued']} tasks in Redis, not {2 * n}")
        out["celery producer"] = res["rate"]
        print(f"  celery producer: {n} tasks by apply_async in a loop {res['loop']:,.0f} "
              f"tasks/s, {n} as one group {res['group']:,.0f} tasks/s (cpu {res['cpu']:.2f} s "
              f"= {res['cpu'] / (2 * n) * 1e6:.0f} us/task; {res['queued']} in Redis)", flush=True)
        r.flush()
        run_child(["celery_producer", "--jobs", str(n)], 300, env=env)  # preload
        res = celery_worker(a, r, n)
        out["celery worker"] = res["rate"]
        print(f"  celery worker (pool {a.celery_pool}, prefetch multiplier "
              f"{a.celery_prefetch}): {n} tasks in {res['secs']:.2f} s from the first, "
              f"{res['rate']:,.0f} tasks/s ({res['wall']:.2f} s from exec; cpu "
              f"{res['cpu']:.2f} s = {res['cpu'] / n * 1e6:.0f} us/task)", flush=True)
    finally:
        r.close()
    return out


class RedisServer:
    """redis-server on a free loopback port, its own directory, no snapshots."""

    def __init__(self):
        import redis
        self.dir = tempfile.mkdtemp(prefix="zlane-pybench-redis-")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = open(os.path.join(self.dir, "redis.log"), "ab")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--save", "", "--appendonly", "no"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.client = redis.Redis(host="127.0.0.1", port=self.port)
        end = time.monotonic() + 10
        while True:
            try:
                if self.client.ping():
                    return
            except redis.exceptions.ConnectionError:
                pass
            if self.proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError("redis-server did not start: "
                                   + open(self.log.name).read()[-2000:])
            time.sleep(0.02)

    def flush(self):
        self.client.flushall()

    def close(self):
        self.client.close()
        stop_pid(self.proc)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def celery_worker(a, r: RedisServer, n: int) -> dict:
    """Start one `celery worker` process on the preloaded queue; wait (bounded) until
    its task ran n times; stop it by PID."""
    done = os.path.join(r.dir, "done.json")
    if os.path.exists(done):
        os.unlink(done)
    env = child_env()
    env.update(PYBENCH_REDIS=r.url, PYBENCH_TARGET=str(n), PYBENCH_DONE=done)
    argv = [PY, "-m", "celery", "-A", "py_celery_app", "worker", "-P", a.celery_pool,
            "-c", str(a.celery_concurrency), "--prefetch-multiplier", str(a.celery_prefetch),
            "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "WARNING",
            "-n", f"py-bench-{os.getpid()}@localhost"]
    log = open(os.path.join(r.dir, "worker.log"), "ab")
    t0 = time.time()
    proc = subprocess.Popen(argv, cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 300
        while not os.path.exists(done):
            if proc.poll() is not None:
                raise RuntimeError("celery worker exited: "
                                   + open(log.name, errors="replace").read()[-3000:])
            if time.monotonic() > end:
                raise RuntimeError(f"celery worker did not run {n} tasks in 300 s")
            time.sleep(0.01)
        with open(done) as f:
            res = json.load(f)
        cpu = proc_cpu(proc.pid)
    finally:
        stop_pid(proc)
        log.close()
    left = r.client.llen("celery")
    if left:
        raise RuntimeError(f"{left} tasks still queued after {n} ran")
    return {"secs": res["from_first"], "rate": n / res["from_first"],
            "wall": res["t_end"] - t0, "cpu": cpu}


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def role_celery_producer(a) -> dict:
    """N tasks sent by apply_async in a loop (one producer connection), then N more
    as one group; the better of the two is Celery's producer number."""
    import redis
    from celery import group
    from py_celery_app import app, noop
    payload = PAYLOAD.decode()
    out = {"jobs": a.jobs}
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    with app.producer_or_acquire() as prod:   # one connection for the loop, as for bulk
        for _ in range(a.jobs):
            noop.apply_async((payload,), producer=prod)
    out["loop"] = a.jobs / (time.perf_counter() - t0)
    if a.celery_group:
        t0 = time.perf_counter()
        group(noop.s(payload) for _ in range(a.jobs)).apply_async()
        out["group"] = a.jobs / (time.perf_counter() - t0)
    out["cpu"] = time.process_time() - cpu0
    out["rate"] = max(out["loop"], out.get("group", 0))
    client = redis.Redis.from_url(os.environ["PYBENCH_REDIS"])
    out["queued"] = client.llen("celery")
    client.close()
    return out


def summary(results: list[dict]) -> None:
    if not results:
        return
    print("\nsummary (jobs/s, min-max over the runs):")
    for k in results[0]:
        vals = [r[k] for r in results if k in r]
        print(f"  {k:18s} {min(vals):>10,.0f} - {max(vals):>10,.0f}")
    for side in ("producer", "worker"):
        z, c = f"zlane {side}", f"celery {side}"
        ratios = [r[z] / r[c] for r in results if z in r and c in r and r[c]]
        if ratios:
            print(f"  zlane/celery {side}: " + ", ".join(f"{x:.1f}x" for x in ratios)
                  + " (same-run ratios)")


if __name__ == "__main__":
    sys.exit(main())
