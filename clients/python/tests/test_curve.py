"""CURVE end to end with certificates made by zlane-ctl keygen."""

import os
import shutil
import subprocess
import time

import pytest

import zlane
from conftest import BIN_DIR, FAST, Broker, wait_for
from test_worker import run_worker, stop_worker


def keygen(d, name, *args):
    subprocess.run([os.path.join(BIN_DIR, "zlane-ctl"), "keygen", name, "--dir", d, *args],
                   check=True, stdout=subprocess.DEVNULL)
    return os.path.join(d, name), os.path.join(d, name + "_secret")


@pytest.fixture
def curve_broker(tmp_path):
    keys = str(tmp_path / "keys")
    clients = str(tmp_path / "clients")
    os.makedirs(keys)
    os.makedirs(clients)
    broker_pub, broker_sec = keygen(keys, "broker")
    certs = {"broker": broker_pub}
    for name, args in (("web", ["--role", "producer", "--tenants", "acme"]),
                       ("w1", ["--role", "worker", "--lanes", "a"]),
                       ("ops", ["--role", "admin"]),
                       ("dash", ["--role", "subscriber"]),
                       ("stranger", ["--role", "producer", "--tenants", "*"])):
        pub, sec = keygen(keys, name, *args)
        certs[name] = sec
        certs[name + "_public"] = pub
        if name != "stranger":
            shutil.copy(pub, clients)
    b = Broker(FAST + ["--lane", "a", "--curve", "--cert", broker_sec, "--clients", clients])
    yield b, certs
    b.close()


def test_curve_end_to_end(curve_broker):
    b, certs = curve_broker
    server = certs["broker"]
    seen = []
    w, t = run_worker(b.backend, {"a": lambda job: seen.append(job.payload)},
                      curve=(server, certs["w1"]))
    try:
        with zlane.Producer(b.frontend, curve=zlane.Curve.load(server, certs["web"])) as p:
            ids = p.submit_many([("acme", "a", b"secret-%d" % i) for i in range(50)])
            assert len(set(ids)) == 50
            with pytest.raises(zlane.Unauthorized):  # the key is bound to tenant acme
                p.submit("globex", "a", b"x")
        wait_for(lambda: len(seen) == 50, 15, "50 jobs over CURVE")
        with zlane.Admin(b.admin_ep, curve=(server, certs["ops"])) as admin:
            # (a handler's return comes before its Ack reaches the broker)
            wait_for(lambda: admin.stats().counters["jobs_acked"] == 50, 10, "50 acks")
        sub = zlane.Subscriber(b.events, curve={"server_cert": server, "cert": certs["dash"]})
        try:
            assert sub.wait_connected(10)
        finally:
            sub.close()
    finally:
        stop_worker(w, t)


def test_curve_refusals_are_clear(curve_broker):
    b, certs = curve_broker
    server = certs["broker"]
    with zlane.Producer(b.frontend, curve=(server, certs["stranger"])) as p:
        t0 = time.monotonic()
        with pytest.raises(zlane.Timeout) as e:
            p.submit("acme", "a", b"x", timeout=2)
        assert time.monotonic() - t0 < 4
        assert "refused this client's CURVE key" in str(e.value)
    with zlane.Producer(b.frontend) as p:  # plaintext to a CURVE broker
        with pytest.raises(zlane.Timeout) as e:
            p.submit("acme", "a", b"x", timeout=2)
        assert "CURVE" in str(e.value)
    # a worker's key may not read the events socket; a producer's may not ask stats
    sub = zlane.Subscriber(b.events, curve=(server, certs["w1"]))
    try:
        with pytest.raises(zlane.ZlaneError):
            sub.wait_connected(5)
    finally:
        sub.close()
    with zlane.Admin(b.admin_ep, curve=(server, certs["web"]), timeout=2) as admin:
        with pytest.raises(zlane.BrokerError) as e:
            admin.stats()
        assert e.value.code_name == "ERROR_UNAUTHORIZED"
    with pytest.raises(zlane.CurveError, match="no secret key"):
        zlane.Curve.load(server, certs["web_public"])
    with pytest.raises(zlane.CurveError, match="cannot read"):
        zlane.Curve.load(server, "/nonexistent/cert_secret")
