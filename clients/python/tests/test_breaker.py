"""A lane's circuit breaker seen through the Python client: the Subscriber
passes its breaker.<lane> events on as Breaker records, and Admin.stats()
lists the breaker."""

import time

import zlane
from conftest import FAST, wait_for
from test_batch import subscribe_batches
from test_worker import run_worker, stop_worker


def test_breaker_open_event_and_stats(broker_factory):
    b = broker_factory(args=FAST + ["--set", "lanes/pay/breaker_failures=2",
                                    "--set", "lanes/pay/breaker_cooldown=30s"],
                       lanes=("pay",))

    def handler(job):
        raise RuntimeError("the payment gateway is down")
    w, t = run_worker(b.backend, {"pay": handler})
    admin = zlane.Admin(b.admin_ep, timeout=5)
    sub = None
    try:
        with zlane.Producer(b.frontend) as p:
            # the event is published once: subscribed before the jobs fail
            sub = subscribe_batches(b, p, topics=("breaker.", "batch."), lane="pay")
            for i in range(3):
                p.submit("acme", "pay", f"charge-{i}".encode())
        ev = None
        end = time.monotonic() + 15
        while time.monotonic() < end:
            got = sub.recv(timeout=1)
            if got is not None and got.state == "BREAKER_OPEN":
                ev = got
                break
        assert ev is not None, "no breaker.pay open event"
        assert ev.topic == "breaker.pay" and ev.lane == "pay" and ev.failures >= 2
        assert ev.until_ms > time.time() * 1000
        wait_for(lambda: any(x.lane == "pay" and x.state == "BREAKER_OPEN"
                             for x in admin.stats().breakers), 5, "the breaker in stats")
    finally:
        admin.close()
        if sub is not None:
            sub.close()
        stop_worker(w, t)
