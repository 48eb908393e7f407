"""A hand-driven clock for code that takes ``clock`` and ``sleep`` (e.g. :class:`grouper.kube.leader.LeaderElector`).

Time stands still until the test moves it: :meth:`ManualClock.advance` wakes the sleepers whose time has
come, in order, and lets each run (its real I/O included) until every task is parked in a sleep again. Tests
then assert what happened *by* a moment on this clock, never how long something took on the wall clock.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools


class ManualClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self.now

    @property
    def sleepers(self) -> int:
        """Tasks parked in :meth:`sleep` right now."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def sleep(self, seconds: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + max(0.0, seconds), next(self._seq), fut))
        await fut

    async def parked(self, tasks: int, timeout: float = 10.0) -> None:
        """Wait (real time, a hang guard) until ``tasks`` sleepers are parked: everything that could run has."""
        async with asyncio.timeout(timeout):
            while self.sleepers < tasks:
                await asyncio.sleep(0.005)

    async def advance(self, seconds: float, *, tasks: int = 1) -> None:
        """Move time on by ``seconds``, waking each due sleeper in deadline order; after each wake-up wait until
        ``tasks`` sleepers are parked again (the woken one ran up to its next sleep). ``tasks=0``: only let the
        woken ones start (for a wake-up after which a task waits on something else than this clock)."""
        target = self.now + seconds
        while True:
            while self._sleepers and self._sleepers[0][2].done():
                heapq.heappop(self._sleepers)  # cancelled
            if not self._sleepers or self._sleepers[0][0] > target:
                break
            at, _, fut = heapq.heappop(self._sleepers)
            self.now = max(self.now, at)
            fut.set_result(None)
            if tasks:
                await self.parked(tasks)
            else:
                for _ in range(5):
                    await asyncio.sleep(0)
        self.now = target
