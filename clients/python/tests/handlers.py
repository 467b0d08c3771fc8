"""Handlers for zlane-py-worker in the tests (MODULE:FUNCTION targets).

Each appends a line to $ZLANE_TEST_LOG: "start ID" when it begins and "done ID"
when it ends, so a test can see where a worker process is."""

import os
import time


def _log(line):
    with open(os.environ["ZLANE_TEST_LOG"], "a") as f:
        f.write(line + "\n")
        f.flush()


def slow(job):
    """Run for the payload's number of seconds."""
    _log(f"start {job.id}")
    time.sleep(float(job.payload or b"0"))  # the job's work
    _log(f"done {job.id}")


async def aslow(job):
    import asyncio
    _log(f"start {job.id}")
    await asyncio.sleep(float(job.payload or b"0"))
    _log(f"done {job.id}")
