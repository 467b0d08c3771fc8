"""Fixtures: a real zlane-broker (build/bin, or $ZLANE_BIN_DIR) on ephemeral
127.0.0.1 ports, read back from its --ports-file, stopped by PID at the end.
Waits poll a condition with a deadline; nothing sleeps in place of one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import shutil

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
BIN_DIR = os.environ.get("ZLANE_BIN_DIR", os.path.join(ROOT, "build", "bin"))
GEN_DIR = os.environ.get("ZLANE_PY_GEN", os.path.join(ROOT, "build", "clients", "python", "gen"))
os.environ.setdefault("ZLANE_PY_GEN", GEN_DIR)
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..")))

import zlane  # noqa: E402

NAMES = ("frontend", "backend", "events", "admin")


def wait_for(cond, timeout: float, what: str, interval: float = 0.01):
    """Poll `cond` until it returns something true; fail the test after `timeout` s."""
    end = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= end:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)  # a bounded poll of a condition, not a synchronisation


class Broker:
    """One zlane-broker process in a temp dir of its own."""

    def __init__(self, args=(), *, curve_dir=None):
        self.dir = tempfile.mkdtemp(prefix="zlane-py-")
        self.args = list(args)
        self.proc = None
        self.endpoints = {n: "tcp://127.0.0.1:*" for n in NAMES}
        self._admin = None
        self.start()

    @property
    def log_path(self):
        return os.path.join(self.dir, "broker.log")

    def start(self, timeout: float = 10.0):
        """Start (again) on the endpoints it bound first (ephemeral the first time),
        retrying while a port of a killed predecessor is not free yet."""
        ports = os.path.join(self.dir, "ports")
        end = time.monotonic() + timeout
        while True:
            if os.path.exists(ports):
                os.unlink(ports)
            argv = [os.path.join(BIN_DIR, "zlane-broker"), "--data", os.path.join(self.dir, "data")]
            for n in NAMES:
                argv += [f"--{n}", self.endpoints[n]]
            argv += ["--ports-file", ports] + self.args
            log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
            log.close()
            while time.monotonic() < end:
                if self.proc.poll() is not None:
                    break
                if os.path.exists(ports):
                    found = dict(line.strip().split("=", 1) for line in open(ports)
                                 if "=" in line)
                    if all(n in found for n in NAMES):
                        self.endpoints.update({n: found[n] for n in NAMES})
                        return
                time.sleep(0.01)  # the broker writes the file once, after binding
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            if time.monotonic() >= end or "Address already in use" not in self.log():
                raise RuntimeError(f"zlane-broker did not start:\n{self.log()[-3000:]}")

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    @property
    def frontend(self):
        return self.endpoints["frontend"]

    @property
    def backend(self):
        return self.endpoints["backend"]

    @property
    def events(self):
        return self.endpoints["events"]

    @property
    def admin_ep(self):
        return self.endpoints["admin"]

    def admin(self, **kw) -> "zlane.Admin":
        if self._admin is None or kw:
            a = zlane.Admin(self.admin_ep, **kw)
            if kw:
                return a
            self._admin = a
        return self._admin

    def counter(self, name: str) -> int:
        return self.admin().counter(name)

    def wait_counter(self, name: str, want: int, timeout: float = 20.0) -> int:
        wait_for(lambda: self.counter(name) >= want, timeout, f"{name} >= {want}",
                 interval=0.02)
        return self.counter(name)

    def kill(self):
        """SIGKILL, as a crash would; reap it."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def stop(self, timeout: float = 10.0):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


FAST = ["--heartbeat", "200ms", "--liveness", "3", "--durability", "none",
        "--backoff-base", "50ms", "--backoff-cap", "200ms"]


@pytest.fixture
def broker_factory():
    made = []

    def make(args=None, lanes=("a", "b")):
        extra = list(FAST if args is None else args)
        for lane in lanes:
            extra += ["--lane", lane]
        b = Broker(extra)
        made.append(b)
        return b
    yield make
    for b in made:
        b.close()


@pytest.fixture
def broker(broker_factory):
    return broker_factory()


class Proc:
    """A child process (zlane-py-worker, a C program), stopped by PID at the end."""

    def __init__(self, argv, env=None, log=None):
        self.log_path = log
        out = open(log, "ab") if log else subprocess.DEVNULL
        self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                     stdin=subprocess.DEVNULL)
        if log:
            out.close()

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def procs():
    made = []

    def spawn(argv, **kw):
        p = Proc(argv, **kw)
        made.append(p)
        return p
    yield spawn
    for p in made:
        p.close()


def py_env():
    """The environment for a child Python that imports zlane from this tree."""
    env = dict(os.environ)
    pkg = os.path.abspath(os.path.join(HERE, ".."))
    env["PYTHONPATH"] = os.pathsep.join([pkg, HERE] + ([env["PYTHONPATH"]]
                                                       if env.get("PYTHONPATH") else []))
    env["ZLANE_PY_GEN"] = GEN_DIR
    return env
