"""The controller's lifecycle: starts and stops its parts (wired by the composition root,
:func:`grouper.runtime.wiring.build_controller`; what the API reads of it, with the service's clients and
probe: :class:`grouper.runtime.status.ServiceStatus`).

Pieces, each in its own module: :mod:`.cache` (informers and lookups), :mod:`.handlers` (events →
workload keys), :mod:`.karta_sync` (cluster Kartas → registry), :mod:`.resync` (scoped, chunked
re-queues), :mod:`.reconciler` (one workload → writes), :mod:`.workers` (the queue's consumers),
``grouper.runtime.supervisor`` (crash → restart, or fatal) and ``grouper.writer.expectations`` (our writes the cache
has not shown yet).

With leader election, a standby runs the informers and handlers (warm caches and indexes) but no
workers; on becoming leader it starts the workers and re-queues every workload once; on losing the
lease the workers are cancelled at once and every write checks the lease first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from grouper.controller.handlers import EventHandlers
from grouper.controller.karta_sync import KartaSync
from grouper.controller.plans import PlanCache
from grouper.controller.queue import WorkQueue
from grouper.controller.reconciler import Reconciler, Writers
from grouper.controller.resync import Resyncer
from grouper.controller.tuning import DEFAULT_TUNING, Tuning
from grouper.controller.workers import WorkerPool
from grouper.controller.workload_groups import WORKLOADGROUP, WorkloadGroups
from grouper.controller.workloads import WorkloadIndex, WorkloadKey
from grouper.core.grouping import Grouper
from grouper.kube.cache import KARTA, NAMESPACE, POD, PODGROUP, PRIORITY_CLASS, ClusterCache
from grouper.kube.cooperative import Cooperative
from grouper.kube.discovery import Discovery
from grouper.model.objects import GVK
from grouper.observability.metrics import Metrics
from grouper.records.decisions import DecisionStore
from grouper.visibility.gangs import GangTracker
from grouper.writer.events import EventRecorder

log = logging.getLogger(__name__)
REQUIRED = (POD, PODGROUP)


@dataclass
class ControllerSettings:
    """What the controller needs beyond the grouping flags (those it reads from ``grouper.config``)."""

    pod_label_selector: str = ""
    namespace_label_selector: str = ""
    max_concurrent_reconciles: int = 10
    batch_window: float = 0.0  # seconds a new pod's workload waits for its siblings (see EventHandlers)
    watch_kartas: bool = True
    resync_debounce: float = 0.5
    sync_timeout: float = 120.0
    allowed_kinds: frozenset[tuple[str, str]] | None = None  # (group, kind) owners/objects to cache; None: any
    backend: str = "kai"  # "upstream": write scheduling.k8s.io Workload + PodGroups instead of KAI's
    workload_info_metrics: bool = False  # podgrouper_workload_info: one series per workload
    tuning: Tuning = DEFAULT_TUNING  # the knobs that are not flags (controller/tuning.py)


class Background:
    """The controller's own background tasks (an informer started for parked pods, a Karta's Event, its
    timers): kept until done, cancelled on shutdown."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def cancel(self) -> None:
        for t in list(self.tasks):
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


@dataclass(eq=False)
class Controller:
    """The running controller: its parts, as :func:`~grouper.runtime.wiring.build_controller` wired them."""

    settings: ControllerSettings
    grouper: Grouper
    metrics: Metrics
    store: DecisionStore
    discovery: Discovery
    cache: ClusterCache
    index: WorkloadIndex
    queue: WorkQueue[WorkloadKey]
    writers: Writers
    recorder: EventRecorder  # the API shows the Events it sent (ui)
    gangs: GangTracker
    plans: PlanCache
    reconciler: Reconciler
    handlers: EventHandlers
    groups: WorkloadGroups  # a group's key is reconciled by them; a member's pass hands over to it
    resync: Resyncer
    karta_sync: KartaSync | None
    workers: WorkerPool
    background: Background
    started: bool = field(default=False, init=False)
    _warming: bool = field(default=False, init=False)
    started_at: float = field(default=0.0, init=False)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start and sync the informers grouping always needs. Workers start separately (leadership).

        The cluster's Kartas come first and are applied before any pod is routed: they decide which
        owner kinds may be followed, and a pod decided before its kind's definition is known would be
        grouped wrongly once (and written twice)."""
        loop_start = time.monotonic()
        if self.settings.watch_kartas and self.karta_sync is not None:
            res = await self.cache.ensure(KARTA)
            if res != "ready":
                log.warning("not watching %s (%s); grouping continues without cluster Kartas", KARTA, res)
                if res == "absent":
                    self.background.spawn(self._retry_kind(KARTA, 60.0))
            await self.karta_sync.wait_idle()
        required = list(REQUIRED)
        if self.settings.namespace_label_selector:
            required.append(NAMESPACE)
        results = await asyncio.gather(
            *(self.cache.ensure(gvk, timeout=self.settings.sync_timeout) for gvk in [*required, PRIORITY_CLASS])
        )
        for gvk, res in zip([*required, PRIORITY_CLASS], results, strict=True):
            if res != "ready" and gvk in required:
                raise RuntimeError(f"cannot watch {gvk}: {res}")
            if res != "ready":
                log.warning("not watching %s (%s); grouping continues without it", gvk, res)
        res = await self.cache.ensure(WORKLOADGROUP)  # optional: without the CRD, workloads are grouped alone
        if res != "ready":
            log.info("not watching %s (%s): workload groups are off until it is served", WORKLOADGROUP, res)
            if res == "absent":
                self.background.spawn(self._retry_kind(WORKLOADGROUP, 60.0))
        await self.cache.start_defaults_configmap()
        self.background.spawn(self._expire_plans())
        self.background.spawn(self.gangs.run())
        if self.settings.backend == "upstream":
            self.background.spawn(self.gangs.track_upstream(self.discovery, self.settings.sync_timeout))
        self.started = True
        self.started_at = time.monotonic()
        log.info(
            "caches synced in %.2fs",
            self.started_at - loop_start,
            extra={"pods": len(self.cache.informer(POD) or ()), **self.index.sizes()},
        )

    async def _expire_plans(self) -> None:
        """Drop idle workloads' kept decisions also when nothing is reconciled (each use drops them too)."""
        while True:
            await asyncio.sleep(self.plans.idle_seconds / 4)
            self.plans.expire()

    async def _retry_kind(self, gvk: GVK, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            if await self.cache.ensure(gvk) == "ready":
                log.info("now watching %s", gvk)
                self.resync.request()
                return

    def start_workers(self) -> None:
        if self.workers.running:
            return
        self._warming = False  # the warm-up ends after the workload it is deciding (see _warm_up)
        self.resync.now()  # a new leader checks every workload once (queued before the workers take any)
        self.workers.start()

    def warm_up(self) -> None:
        """Decide every workload once while this replica waits for the lease with complete caches, writing
        nothing (:meth:`Reconciler.predecide`): a takeover — after a crash, once the dead holder's lease has
        run out — then only compares the cluster with the kept decisions. Ends when this replica leads."""
        if self.workers.running or self._warming:
            return
        self._warming = True
        self.background.spawn(self._warm_up())

    async def _warm_up(self) -> None:
        t0, workloads, pods = time.monotonic(), 0, 0
        while self._warming:  # again while a pass finds more: pods parked for their owner's kind come late
            while self.handlers.routing() and self._warming:
                await asyncio.sleep(0.05)
            found = 0
            coop = Cooperative(self.settings.tuning.warm_up_chunk)  # a native workload's decisions do not yield
            for wl in self.index.workloads():
                # Not cancelled when leading starts: a cancelled pass could stop an informer's start half-way.
                # The workload being decided then may be reconciled meanwhile; both decide from the same caches.
                if not self._warming:
                    break
                try:
                    n = await self.reconciler.predecide(wl)
                except Exception:
                    log.exception("deciding %s ahead of leading failed: its first pass as leader decides it", wl,
                                  extra={"workload": str(wl)})
                    continue
                found, workloads, pods = found + n, workloads + bool(n), pods + n
                await coop.tick()
            if not found and not self.handlers.routing():
                break
        self._warming = False
        log.info("decided %d pods of %d workloads ahead of leading in %.2fs", pods, workloads,
                 time.monotonic() - t0, extra={"workloads": workloads, "pods": pods})

    async def stop_workers(self, *, drain: float = 0.0) -> None:
        """Stop the workers, then the pod patches their passes sent (within the same ``drain``)."""
        t0 = time.monotonic()
        await self.workers.stop(drain=drain)
        await self.reconciler.settle(max(0.0, drain - (time.monotonic() - t0)))

    async def shutdown(self, *, drain: float = 10.0) -> None:
        """Clean stop: no new work, drain in-flight reconciles, stop informers."""
        self.queue.shutdown()
        await self.stop_workers(drain=drain)
        await self.resync.stop()
        await self.background.cancel()
        await self.cache.stop()

    def idle(self) -> bool:
        """Nothing queued, nothing being reconciled."""
        return len(self.queue) == 0 and not self.queue.processing


__all__ = ["Background", "Controller", "ControllerSettings"]
