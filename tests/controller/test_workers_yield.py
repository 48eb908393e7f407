"""Reconciles that write nothing never suspend (the re-checks after a restart); the workers must still
give the event loop back after each one, or a queue of 20,000 re-checks holds watches, probes and the
Lease renewals for as long as it takes to run them all."""

from __future__ import annotations

import asyncio
import itertools
from typing import cast

from grouper.controller.queue import WorkQueue
from grouper.controller.reconciler import Reconciler, Result
from grouper.controller.workers import WorkerPool
from grouper.controller.workloads import WorkloadKey
from grouper.runtime.supervisor import Supervisor


class Instant:
    """A reconciler whose reconciles finish without awaiting anything that suspends."""

    def __init__(self) -> None:
        self.done = 0

    async def reconcile(self, wl: WorkloadKey) -> Result:
        self.done += 1
        return Result()


async def test_workers_give_the_loop_back_between_reconciles() -> None:
    queue: WorkQueue[WorkloadKey] = WorkQueue()
    for i in range(2000):
        queue.add(WorkloadKey("ns", "batch", "Job", f"j{i}"))
    rec = Instant()
    pool = WorkerPool(queue, cast(Reconciler, rec), Supervisor(), size=4)
    seen: list[int] = []

    async def other_task() -> None:  # a watch, a probe, the Lease renewal
        while rec.done < 2000:
            seen.append(rec.done)
            await asyncio.sleep(0)

    other = asyncio.ensure_future(other_task())
    pool.start()
    await asyncio.wait_for(other, 10)
    await pool.stop()
    assert rec.done == 2000
    gaps = [b - a for a, b in itertools.pairwise(seen)]
    assert len(seen) > 100 and max(gaps) <= 8, f"reconciles between two turns of another task: max {max(gaps)}"


