"""The reconcile workers: take a workload key from the queue, reconcile it, decide when it comes back.

``max_concurrent_reconciles`` workers share the queue; one key is never processed by two at once (the
queue guarantees it). Results map to the queue: ``ok`` forgets the key's back-off, ``error`` re-queues
it with back-off, a terminal error (a decision error no retry can fix, a write the API server refused for
good) waits for the next change of an object it read, ``requeue_after`` comes back after that delay (a
pass that found the lease lost: after a second). A reconcile cancelled
half-way (lease lost, shutdown) is put back for whoever leads next.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time

from grouper.controller.queue import ShutDown, WorkQueue
from grouper.controller.reconciler import Reconciler, Result
from grouper.controller.workloads import WorkloadKey
from grouper.kube.informer import Spawner
from grouper.observability.logging import log_context

log = logging.getLogger(__name__)


class WorkerPool:
    def __init__(self, queue: WorkQueue[WorkloadKey], reconciler: Reconciler, supervisor: Spawner, size: int) -> None:
        """``supervisor``: runs each worker, restarted when it crashes (``grouper.runtime.supervisor``)."""
        self.queue = queue
        self.reconciler = reconciler
        self.supervisor = supervisor
        self.size = max(1, size)
        self.tasks: list[asyncio.Task[None]] = []
        self.last_progress: float | None = None  # monotonic time the last reconcile finished (liveness)

    @property
    def running(self) -> bool:
        return bool(self.tasks)

    def start(self) -> None:
        if self.tasks:
            return
        self.tasks = [self.supervisor.spawn(f"reconcile-worker-{i}", functools.partial(self._work, i))
                      for i in range(self.size)]

    async def stop(self, *, drain: float = 0.0) -> None:
        """Stop the workers: wait up to ``drain`` seconds for in-flight reconciles, then cancel."""
        tasks, self.tasks = self.tasks, []
        if not tasks:
            return
        if drain > 0:
            _, pending = await asyncio.wait(tasks, timeout=drain)
        else:
            pending = set(tasks)
        for t in pending:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _work(self, n: int) -> None:
        while True:
            try:
                wl = await self.queue.get()
            except ShutDown:
                return
            result: Result | None = None
            try:
                with log_context(workload=str(wl), worker=n):
                    result = await self.reconciler.reconcile(wl)
                    _log_result(wl, result, self.queue.num_requeues(wl))
            except asyncio.CancelledError:
                self.queue.done(wl)
                self.queue.add(wl)  # cancelled mid-way (lost leadership / shutdown): do it again later
                raise
            except Exception:
                log.exception("reconcile of %s crashed", wl, extra={"workload": str(wl)})
                result = Result(["internal error"])
            self.queue.done(wl)
            self.last_progress = time.monotonic()
            self._requeue(wl, result)
            # A reconcile that writes nothing (the re-checks after a restart) never suspends, and get()
            # returns at once while keys wait: without this, the workers would run the whole queue in one
            # go — 20,000 re-checks, 23 s with watches, probes and the Lease renewals waiting.
            await asyncio.sleep(0)

    def _requeue(self, wl: WorkloadKey, result: Result) -> None:
        """controller-runtime's rules: an error backs off (its count grows until a pass succeeds), a terminal
        error waits for a change of an input, ``requeue_after`` comes back after that delay."""
        if result.errors and not result.terminal:
            self.queue.add_after(wl, self.queue.backoff(wl))
            return
        self.queue.forget(wl)
        if result.requeue_after is not None:
            self.queue.add_after(wl, result.requeue_after)


def _log_result(wl: WorkloadKey, r: Result, retries: int) -> None:
    if r.status in ("error", "failed"):
        log.warning(
            "reconcile failed: %s",
            "; ".join(r.errors[:3]),
            extra={"plugin": r.plugin, "retries": retries, "retrying": r.status == "error"},
        )
    else:  # per reconcile, like controller-runtime's; the writes themselves are logged at info
        log.debug("reconciled", extra={"plugin": r.plugin, "writes": r.written})


__all__ = ["WorkerPool"]
