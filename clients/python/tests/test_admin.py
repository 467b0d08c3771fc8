"""Admin (stats, DLQ, pause/resume) and Subscriber (the events socket)."""

import time

import pytest

import zlane
from conftest import wait_for
from test_worker import run_worker, stop_worker


def test_subscriber_receives_dead_letters_and_alerts(broker_factory):
    b = broker_factory(args=["--heartbeat", "200ms", "--durability", "none",
                             "--dlq-alert", "300ms"])

    def handler(job):
        raise zlane.Permanent(f"refused {job.payload.decode()}")
    w, t = run_worker(b.backend, {"a": handler})
    sub = zlane.Subscriber(b.events, topics=["dlq."])
    alerts = zlane.Subscriber(b.events, topics=["alert.dlq"])
    try:
        assert sub.wait_connected(10)
        dead = None
        with zlane.Producer(b.frontend) as p:
            end = time.monotonic() + 15
            while dead is None and time.monotonic() < end:
                # a subscription takes effect a moment after the handshake: try again
                p.submit("acme", "a", b"poison", headers={"h": "v"})
                dead = sub.recv(timeout=2)
        assert isinstance(dead, zlane.DeadLetter), "no DeadLetter on the events socket"
        assert dead.topic == "dlq.a.acme"
        assert (dead.tenant, dead.lane, dead.payload) == ("acme", "a", b"poison")
        assert dead.error == "refused poison" and dead.headers == {"h": "v"}
        assert dead.attempts[0].outcome == "OUTCOME_PERMANENT"
        alert = alerts.recv(timeout=10)
        assert isinstance(alert, zlane.DlqAlert) and alert.depth >= 1
        assert alert.topic == "alert.dlq"
    finally:
        sub.close()
        alerts.close()
        stop_worker(w, t)


def test_admin_dlq_and_pause(broker):
    fail = {"on": True}

    def handler(job):
        if fail["on"]:
            raise zlane.Permanent("no")
    w, t = run_worker(broker.backend, {"a": handler, "b": handler})
    admin = zlane.Admin(broker.admin_ep, timeout=5)
    try:
        with zlane.Producer(broker.frontend) as p:
            ids = [p.submit("acme", "a", b"1"), p.submit("globex", "b", b"2"),
                   p.submit("globex", "a", b"3")]
        wait_for(lambda: len(admin.dlq_list()) == 3, 10, "three dead letters")
        assert {d.job_id for d in admin.dlq_list(lane="a")} == {ids[0], ids[2]}
        assert [d.job_id for d in admin.dlq_list(tenant="globex", lane="b")] == [ids[1]]
        assert [d.job_id for d in admin.dlq_list(limit=1, after_id=ids[0])] == [ids[1]]
        # by the error's text (any case) and the time they died
        assert {d.job_id for d in admin.dlq_list(error_contains="NO")} == set(ids)
        assert admin.dlq_list(error_contains="refused") == []
        now_ms = int(time.time() * 1000)
        assert len(admin.dlq_list(dead_to_ms=now_ms + 60000)) == 3
        assert admin.dlq_list(dead_from_ms=now_ms + 60000) == []
        # the workers, and stats without the per-tenant rows
        [wk] = admin.workers()
        assert sorted(wk.lanes) == ["a", "b"] and wk.host == "127.0.0.1" and wk.capacity >= 1
        light = admin.stats(lanes_only=True)
        assert light.tenants == [] and light.groups == [] and light.tenants_known == 2
        assert {g.lane: g.dlq for g in light.lanes} == {"a": 2, "b": 1}
        shown = admin.dlq_show(ids[1])
        assert shown.payload == b"2" and shown.error == "no" and len(shown.attempts) == 1
        with pytest.raises(zlane.AdminRefused):
            admin.dlq_show(999999)

        admin.pause("a")
        lane = {g.lane: g for g in admin.stats().lanes}["a"]
        assert lane.paused and lane.dlq == 2
        fail["on"] = False
        assert admin.dlq_redrive(lane="a") == 2
        lane = {g.lane: g for g in admin.stats().lanes}["a"]
        assert lane.ready == 2  # paused: nothing dispatched
        admin.resume("a")
        wait_for(lambda: admin.counter("jobs_acked") == 2, 10, "the redriven jobs acked")
        assert admin.dlq_purge(all=True) == 1
        assert admin.dlq_list() == []
        st = admin.stats()
        assert st.role == "leader" and st.store_backend == "lmdb" and st.workers >= 1
        with pytest.raises(ValueError):
            admin.dlq_purge()
        with pytest.raises(zlane.AdminRefused):
            admin.pause("no-such-lane")
    finally:
        admin.close()
        stop_worker(w, t)


def test_admin_unreachable_times_out():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with zlane.Admin(f"tcp://127.0.0.1:{port}", timeout=0.5) as admin:
        t0 = time.monotonic()
        with pytest.raises(zlane.Timeout):
            admin.stats()
        assert time.monotonic() - t0 < 2
