"""What the producer, the worker and the admin client share: the broker list
(one broker at a time, NOT_LEADER followed), full-jitter backoff, the wake-up
descriptor."""

from __future__ import annotations

import os
import random
import time



def now() -> float:
    """Monotonic seconds."""
    return time.monotonic()


class EndpointList:
    """Every broker endpoint given, and the one in use. A client talks to one broker
    at a time: the first, then the next (round robin) when it goes silent, or the
    leader a standby names (NOT_LEADER): the first named endpoint that is in the
    list, else the first as given, used until it goes silent (then the list
    resumes after the entry used last)."""

    def __init__(self, endpoints: list[str]):
        self.endpoints = list(endpoints)
        self.index = 0
        self.foreign: str | None = None

    @property
    def current(self) -> str:
        return self.foreign or self.endpoints[self.index]

    @property
    def roams(self) -> bool:
        """True with several brokers (moving between them on silence)."""
        return len(self.endpoints) > 1

    def next(self) -> str:
        if self.foreign:
            self.foreign = None
        self.index = (self.index + 1) % len(self.endpoints)
        return self.current

    def follow(self, named) -> bool:
        """Move to the leader of `named` (Error.leader_endpoints); the next broker when
        none is named. Returns True if a leader was named."""
        named = [e for e in named if e]
        for ep in named:
            if ep in self.endpoints:
                self.foreign = None
                self.index = self.endpoints.index(ep)
                return True
        if named:
            self.foreign = named[0]
            return True
        self.next()
        return False

    def __str__(self):
        return ",".join(self.endpoints)


class Backoff:
    """Full-jitter backoff: each delay is random(0, bound); the bound doubles up to
    `cap` and starts again at `base` once a broker serves (reset)."""

    def __init__(self, base: float, cap: float):
        self.base = base
        self.cap = cap
        self.bound = base

    def delay(self) -> float:
        d = random.uniform(0, self.bound)
        self.bound = min(self.cap, self.bound * 2)
        return d

    def reset(self) -> None:
        self.bound = self.base


class Waker:
    """An eventfd other threads write to wake a thread blocked in zmq.Poller."""

    def __init__(self):
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def wake(self) -> None:
        try:
            os.eventfd_write(self.fd, 1)
        except OSError:
            pass  # closed, or the counter is full: the reader wakes either way

    def drain(self) -> None:
        try:
            os.eventfd_read(self.fd)
        except OSError:
            pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
