"""Re-queueing many workloads at once, without stalling the event loop.

Some changes can affect many workloads: leadership gained (everything must be checked once), the defaults
ConfigMap changed (every decision may read it), a Karta definition changed (the workloads of the kinds it
describes). Requests are debounced (a burst of triggers costs one pass), scoped (only the named kinds
when the trigger allows it) and chunked: the pass yields to the loop every ``chunk`` keys, so watches,
probes and the Lease renewals keep their latency even with 100,000 cached pods.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from grouper.controller.tuning import DEFAULT_TUNING
from grouper.controller.workloads import WorkloadIndex, WorkloadKey
from grouper.kube.cooperative import Cooperative

log = logging.getLogger(__name__)
Kinds = frozenset[tuple[str, str]]  # (group, kind); empty = every workload


class Resyncer:
    def __init__(
        self,
        index: WorkloadIndex,
        enqueue: Callable[[WorkloadKey], None],
        *,
        reroute: Callable[[Kinds], Iterable[None]] | None = None,
        check: Callable[[WorkloadKey], None] | None = None,
        debounce: float = 0.5,
        chunk: int = DEFAULT_TUNING.resync_chunk,
    ) -> None:
        """``enqueue`` queues a workload whose decisions a change may have made stale; ``check`` (default:
        ``enqueue``) one only to be compared with the cluster (:meth:`now`)."""
        self.index = index
        self.enqueue = enqueue
        self.check = check or enqueue
        self.reroute = reroute
        self.debounce = debounce
        self.chunk = chunk
        self._all = False
        self._kinds: set[tuple[str, str]] = set()
        self._task: asyncio.Task[None] | None = None
        self._enqueue_task: asyncio.Task[None] | None = None

    def request(self, kinds: Iterable[tuple[str, str]] | None = None, *, debounce: bool = True) -> None:
        """Re-queue the workloads of ``kinds`` (every workload when None)."""
        if kinds is None:
            self._all = True
        else:
            self._kinds.update(kinds)
        if self._task is None or self._task.done():
            delay = self.debounce if debounce else 0.0
            self._task = asyncio.get_running_loop().create_task(self._run(delay), name="resync")

    def now(self) -> None:
        """Queue every workload to be checked (no re-routing: the handlers keep the index current): at once
        when there are few, so each key is queued before the workers take any; else as a chunked pass."""
        workloads = self.index.workloads()
        if len(workloads) <= self.chunk:
            for wl in workloads:
                self.check(wl)
            return
        self._enqueue_task = asyncio.get_running_loop().create_task(self._each(workloads, self.check), name="resync-all")

    async def _each(self, workloads: list[WorkloadKey], queue: Callable[[WorkloadKey], None],
                    coop: Cooperative | None = None) -> None:
        coop = coop or Cooperative(self.chunk)
        for wl in workloads:
            queue(wl)
            await coop.tick()

    @property
    def pending(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _run(self, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        while self._all or self._kinds:
            scope: Kinds = frozenset() if self._all else frozenset(self._kinds)
            self._all, self._kinds = False, set()
            await self._pass(scope)

    async def _pass(self, scope: Kinds) -> None:
        coop = Cooperative(self.chunk)
        if self.reroute is not None:
            for _ in self.reroute(scope):  # pods whose owner walk the change can affect
                await coop.tick()
        workloads = [wl for wl in self.index.workloads() if not scope or (wl.group, wl.kind) in scope]
        await self._each(workloads, self.enqueue, coop)
        log.debug("resync: %d workloads re-queued", len(workloads), extra={"scope": sorted(scope) or "all"})

    async def stop(self) -> None:
        tasks = [t for t in (self._task, self._enqueue_task) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


__all__ = ["Kinds", "Resyncer"]
