"""The controller's lifecycle: wires caches, handlers, the work queue and workers; starts and stops them;
answers the API's questions about itself (:class:`~grouper.api.state.ControllerStatus`).

Pieces, each in its own module: :mod:`.cache` (informers and lookups), :mod:`.handlers` (events →
workload keys), :mod:`.karta_sync` (cluster Kartas → registry), :mod:`.resync` (scoped, chunked
re-queues), :mod:`.reconciler` (one workload → writes), :mod:`.workers` (the queue's consumers),
:mod:`.supervisor` (crash → restart, or fatal) and ``grouper.writer.expectations`` (our writes the cache
has not shown yet).

With leader election, a standby runs the informers and handlers (warm caches and indexes) but no
workers; on becoming leader it starts the workers and re-queues every workload once; on losing the
lease the workers are cancelled at once and every write checks the lease first.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from grouper.controller.handlers import EventHandlers
from grouper.controller.karta_sync import KartaSync
from grouper.controller.plans import PlanCache
from grouper.controller.queue import WorkQueue
from grouper.controller.reconciler import (
    POD_OWNED_INDEX,
    PODGROUP_OWNER_INDEX,
    Reconciler,
    Writers,
    pod_owned_namespaces,
    podgroup_owner_uids,
)
from grouper.controller.resync import Kinds, Resyncer
from grouper.controller.supervisor import Supervisor
from grouper.controller.tuning import DEFAULT_TUNING, Tuning
from grouper.controller.workers import WorkerPool
from grouper.controller.workload_groups import WORKLOADGROUP, WorkloadGroups
from grouper.controller.workloads import DeletedOwners, WorkloadIndex, WorkloadKey
from grouper.core.grouping import Grouper
from grouper.core.lookups import Lookups
from grouper.core.upstream import GROUP as UPSTREAM_GROUP
from grouper.karta import DefinitionRegistry
from grouper.kube.cache import (
    CONFIGMAP,
    KARTA,
    NAMESPACE,
    POD,
    POD_PODGROUP_INDEX,
    PODGROUP,
    PRIORITY_CLASS,
    ClusterCache,
    KindPolicy,
    PodShape,
    pod_group_names,
)
from grouper.kube.cooperative import Cooperative
from grouper.kube.discovery import Discovery
from grouper.kube.informer import Informer
from grouper.kube.leader import LeaderElector
from grouper.kube.probe import ApiProbe
from grouper.kube.transport import KubeClient
from grouper.model.objects import GVK, Obj
from grouper.observability.health import HealthSnapshot, Role
from grouper.observability.metrics import Metrics
from grouper.records.decisions import DecisionStore
from grouper.visibility.gangs import SCHEDULING_GROUP_INDEX, GangTracker, scheduling_group_names
from grouper.writer.events import EventRecorder
from grouper.writer.expectations import WriteExpectations
from grouper.writer.podgroups import PodGroupWriter
from grouper.writer.pods import PodPatcher
from grouper.writer.upstream import UpstreamWriter, resolve_resources

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


class Controller:
    def __init__(
        self,
        client: KubeClient,
        settings: ControllerSettings,
        *,
        grouper: Grouper,
        metrics: Metrics,
        supervisor: Supervisor,
        store: DecisionStore | None = None,
        leader: LeaderElector | None = None,
        definitions: DefinitionRegistry | None = None,
        probe: ApiProbe | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.grouper = grouper
        self.metrics = metrics
        self.supervisor = supervisor
        self.store = store or DecisionStore()
        self.leader = leader
        self.definitions = definitions
        self.probe = probe
        self.discovery = Discovery(client)
        config = grouper.config
        defaults_cm = None
        if config.default_priorities_configmap_name and config.default_priorities_configmap_namespace:
            defaults_cm = (
                config.default_priorities_configmap_namespace,
                config.default_priorities_configmap_name,
            )
        policy = (
            KindPolicy(allow_all=True)
            if settings.allowed_kinds is None
            else KindPolicy(fixed=frozenset(settings.allowed_kinds) | _ALWAYS)
        )
        self.cache = ClusterCache(
            client,
            self.discovery,
            scheduler_name=config.scheduler_name,
            pod_label_selector=settings.pod_label_selector,
            namespace_label_selector=settings.namespace_label_selector,
            defaults_configmap=defaults_cm,
            metrics=metrics,
            supervisor=supervisor,
            policy=policy,
            pod_shape=PodShape(),
        )
        self.cache.on_informer.append(self._attach)
        self.index = WorkloadIndex()
        tuning = settings.tuning
        self.queue: WorkQueue[WorkloadKey] = WorkQueue(
            base_delay=tuning.retry_base_seconds, max_delay=tuning.retry_max_seconds, metrics=metrics
        )
        self.expectations = WriteExpectations()
        self.deleted = DeletedOwners(tuning.deleted_owner_seconds)
        self.recorder = EventRecorder(client, can_write=self.can_write)
        self.writers = Writers(
            pod_groups=PodGroupWriter(
                client,
                existing=self._cached_pod_group,
                expectations=self.expectations,
                can_write=self.can_write,
                nodepool_label_key=config.nodepool_label_key,
                queue_label_key=config.queue_label_key,
                metrics=metrics,
            ),
            pods=PodPatcher(
                client,
                expectations=self.expectations,
                can_write=self.can_write,
                metrics=metrics,
                cached=self._cached_pod,
                # as many pod patches in flight as PodGroup writes can be: a 1,000-pod workload is one
                # reconcile, and its patches are most of a burst's writes
                concurrency=settings.max_concurrent_reconciles,
            ),
            events=self.recorder,
            upstream=(
                UpstreamWriter(
                    client, self.discovery, expectations=self.expectations, can_write=self.can_write,
                    metrics=metrics, events=self.recorder,
                )
                if settings.backend == "upstream"
                else None
            ),
        )
        # the gang state of every PodGroup (issue 39): marked dirty by pod/PodGroup events, computed in its task
        self.gangs = GangTracker(self.cache, metrics=metrics, recorder=self.recorder)
        metrics.add_gang_source(self.gangs, workload_info=settings.workload_info_metrics)
        self.plans = PlanCache(tuning.kept_idle_seconds, settle_min_pods=tuning.settle_min_pods)
        self.reconciler = Reconciler(
            cache=self.cache,
            index=self.index,
            grouper=grouper,
            writers=self.writers,
            store=self.store,
            metrics=metrics,
            queue=self.queue,
            deleted=self.deleted,
            plans=self.plans,
            pod_group_concurrency=settings.max_concurrent_reconciles,
            tuning=tuning,
        )
        self.handlers = EventHandlers(
            cache=self.cache,
            index=self.index,
            queue=self.queue,
            store=self.store,
            expectations=self.expectations,
            spawn=self._spawn,
            deleted=self.deleted,
            metrics=metrics,
            plans=self.plans,
            batch_window=settings.batch_window,
            tuning=tuning,
        )
        # WorkloadGroups (either backend): a group's key is reconciled by them; a member's pass hands over to it
        self.groups: WorkloadGroups | None = WorkloadGroups(
            cache=self.cache, index=self.index, reconciler=self.reconciler, store=self.store,
            enqueue=self.queue.add, routing=self.handlers.routing,
        )
        self.reconciler.groups = self.groups
        # a resync re-decides: what it reacts to (defaults ConfigMap, Karta definitions) may change any
        # decision of the workloads it names; a new leader only checks every workload (its kept decisions
        # stand: the handlers invalidate them on every change, leader or not). In the background lane.
        self.resync = Resyncer(
            self.index, functools.partial(self.handlers.changed, background=True), reroute=self._reroute,
            check=self.handlers.check,
            debounce=settings.resync_debounce, chunk=tuning.resync_chunk,
        )
        self.karta_sync: KartaSync | None = None
        if definitions is not None:
            self.karta_sync = KartaSync(
                definitions,
                cache=self.cache,
                recorder=self.recorder,
                metrics=metrics,
                requeue_kinds=lambda kinds: self.resync.request(kinds),
                spawn=self._spawn,
            )
        self.workers = WorkerPool(self.queue, self.reconciler, supervisor, settings.max_concurrent_reconciles)
        self._background: set[asyncio.Task[Any]] = set()
        self._started = False
        self._warming = False
        self.started_at = 0.0

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
                    self._spawn(self._retry_kind(KARTA, 60.0))
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
        if self.groups is not None:  # optional: without the CRD, workloads are grouped alone
            res = await self.cache.ensure(WORKLOADGROUP)
            if res != "ready":
                log.info("not watching %s (%s): workload groups are off until it is served", WORKLOADGROUP, res)
                if res == "absent":
                    self._spawn(self._retry_kind(WORKLOADGROUP, 60.0))
        await self.cache.start_defaults_configmap()
        self._spawn(self._expire_plans())
        self._spawn(self.gangs.run())
        if self.settings.backend == "upstream":
            self._spawn(self._track_upstream_gangs())
        self._started = True
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

    async def _track_upstream_gangs(self) -> None:
        """Watch the upstream backend's PodGroups (the version it writes) for their gang state; without
        them (not served, not readable) no gang state is shown, and grouping goes on."""
        try:
            _, res = await resolve_resources(self.discovery)
        except Exception as e:
            log.warning("gang state of upstream PodGroups not tracked: %s", e)
            return
        self.gangs.use_upstream(res.gvk)
        got = await self.cache.ensure(res.gvk, timeout=self.settings.sync_timeout)
        if got != "ready":
            log.warning("gang state of upstream PodGroups not tracked: cannot watch %s (%s)", res.gvk, got)

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
        self._spawn(self._warm_up())

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
        for t in list(self._background):
            t.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.cache.stop()

    def can_write(self) -> bool:
        return self.leader is None or self.leader.is_leader()

    @property
    def workers_running(self) -> bool:
        return self.workers.running

    def idle(self) -> bool:
        """Nothing queued, nothing being reconciled."""
        return len(self.queue) == 0 and not self.queue.processing

    def reconciles_finished(self) -> int:
        return self.workers.finished

    # ------------------------------------------------------------------ what the API reads

    def ready(self) -> tuple[bool, dict[str, Any]]:
        """Core caches synced and watching (a standby is ready too)."""
        detail: dict[str, Any] = {"started": self._started}
        ok = self._started
        for gvk in REQUIRED:
            inf = self.cache.informer(gvk)
            healthy, why = inf.health() if inf is not None else (False, "not started")
            detail[str(gvk)] = why
            ok = ok and healthy
        detail["leader"] = None if self.leader is None else self.leader.is_leader()
        detail["queue"] = len(self.queue)
        return ok, detail

    def role(self) -> Role:
        if self.leader is None:
            return "single"
        return "leader" if self.leader.is_leader() else "standby"

    def health_snapshot(self) -> HealthSnapshot:
        now = time.monotonic()
        informers: dict[str, bool] = {}
        messages: dict[str, str] = {}
        errors: dict[str, str] = {}
        for gvk in REQUIRED:
            inf = self.cache.informer(gvk)
            healthy, why = inf.health(now) if inf is not None else (False, "not started")
            informers[str(gvk)], messages[str(gvk)] = healthy, why
            if inf is not None and inf.error is not None:
                errors[str(gvk)] = str(inf.error)
        contact = self.probe.last_ok if self.probe is not None else self.client.last_success
        if self.probe is not None and self.client.last_success is not None and self.probe.last_error is None:
            contact = max(contact or 0.0, self.client.last_success)
        return HealthSnapshot(
            role=self.role(),
            started=self._started,
            fatal=self.supervisor.fatal,
            worker_heartbeat=self.workers.last_progress,
            busy_since=self.queue.busy_since,
            queue_depth=len(self.queue),
            processing=len(self.queue.processing),
            informers=informers,
            informer_messages=messages,
            informer_errors=errors,
            last_api_contact=contact,
            api_error=self.probe.last_error if self.probe is not None else None,
            started_at=self.started_at or now,
            now=now,
        )

    def objects(self) -> Lookups:
        return self.cache.lookups()

    async def read_live(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        res = await self.discovery.resolve(GVK.from_api_version(api_version, kind))
        if res is None:
            return None
        return await self.client.get_object(res.path(namespace, name))

    async def resource_of(self, api_version: str, kind: str) -> tuple[str, str] | None:
        res = await self.discovery.resolve(GVK.from_api_version(api_version, kind))
        return (res.group, res.plural) if res is not None else None

    # ------------------------------------------------------------------ wiring

    def _attach(self, gvk: GVK, informer: Informer) -> None:
        if gvk == KARTA:
            if self.karta_sync is not None:
                self.karta_sync.attach(informer)
        elif gvk == WORKLOADGROUP:
            if self.groups is not None:
                self.groups.attach(informer)
        elif gvk == CONFIGMAP:  # the defaults ConfigMap: any decision may read it
            informer.add_handler(lambda *_: self.resync.request() if informer.synced.is_set() else None)
        else:
            if gvk == PODGROUP:
                informer.add_index(PODGROUP_OWNER_INDEX, podgroup_owner_uids)
                informer.add_index(POD_OWNED_INDEX, pod_owned_namespaces)
                informer.add_handler(self.gangs.on_pod_group)
                if self.karta_sync is not None:  # owners of PodGroups a definition made stay walkable
                    self.karta_sync.attach_pod_groups(informer)
            elif gvk == POD:
                informer.add_index(POD_PODGROUP_INDEX, pod_group_names)
                if self.settings.backend == "upstream":
                    informer.add_index(SCHEDULING_GROUP_INDEX, scheduling_group_names)
                informer.add_handler(self.gangs.on_pod)
            elif gvk.group == UPSTREAM_GROUP and gvk.kind == "PodGroup":
                informer.add_handler(self.gangs.on_pod_group)
            self.handlers.attach(gvk, informer)

    def _reroute(self, scope: Kinds) -> Iterator[None]:
        """Route again the pods whose owner walk a change of these kinds can affect (all when empty)."""
        pods = self.cache.informer(POD)
        if pods is None:
            return
        for pod in pods.list() if not scope else self.handlers.pods_refused(scope):
            self.handlers.route_pod(pod)
            yield None

    def _cached_pod_group(self, namespace: str, name: str) -> Obj | None:
        return self._cached(PODGROUP, namespace, name)

    def _cached_pod(self, namespace: str, name: str) -> Obj | None:
        return self._cached(POD, namespace, name)

    def _cached(self, gvk: GVK, namespace: str, name: str) -> Obj | None:
        inf = self.cache.informer(gvk)
        return inf.get(namespace, name) if inf is not None else None

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


# Kinds the controller itself caches, whatever the allow-list says (never ConfigMaps: only the one
# defaults ConfigMap is watched, through its own name-selected informer).
_ALWAYS: frozenset[tuple[str, str]] = frozenset(
    (g.group, g.kind) for g in (POD, PODGROUP, NAMESPACE, PRIORITY_CLASS, KARTA, WORKLOADGROUP)
)

__all__ = ["Controller", "ControllerSettings"]
