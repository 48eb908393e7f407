"""The composition root's controller half: builds the controller's parts and wires them together
(:func:`build_controller`); ``composition.py`` wires the plugins into the core for every caller, this
module the running service's controller (``grouper run``, and the tests and benchmarks that run one).

Who is told what: the cache tells :func:`_attach` of each informer it starts, which hands it to the
part that watches that kind (the event handlers, the Karta sync, the WorkloadGroups, the gang tracker)
with the indexes those read; writes go through the writers, each gated on leadership (``can_write``);
the handlers, the resyncer and the Karta sync queue work, the workers take it to the reconciler.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from grouper.controller.controller import REQUIRED, Background, Controller, ControllerSettings
from grouper.controller.handlers import EventHandlers
from grouper.controller.karta_sync import KartaSync
from grouper.controller.plans import PlanCache
from grouper.controller.queue import WorkQueue
from grouper.controller.reconciler import Reconciler, Writers
from grouper.controller.resync import Resyncer
from grouper.controller.workers import WorkerPool
from grouper.controller.workload_groups import WORKLOADGROUP, WorkloadGroups
from grouper.controller.workloads import DeletedOwners, WorkloadIndex, WorkloadKey
from grouper.core.grouping import Grouper
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
from grouper.kube.discovery import Discovery
from grouper.kube.informer import Informer
from grouper.kube.leader import LeaderElector
from grouper.kube.transport import KubeClient
from grouper.model.objects import GVK
from grouper.observability.metrics import Metrics
from grouper.records.decisions import DecisionStore
from grouper.runtime.supervisor import Supervisor
from grouper.visibility.gangs import SCHEDULING_GROUP_INDEX, GangTracker, scheduling_group_names
from grouper.writer.events import EventRecorder
from grouper.writer.expectations import WriteExpectations
from grouper.writer.podgroups import PodGroupWriter
from grouper.writer.pods import PodPatcher
from grouper.writer.upstream import UpstreamWriter

# Kinds the controller itself caches, whatever the allow-list says (never ConfigMaps: only the one
# defaults ConfigMap is watched, through its own name-selected informer).
ALWAYS_CACHED: frozenset[tuple[str, str]] = frozenset(
    (g.group, g.kind) for g in (*REQUIRED, NAMESPACE, PRIORITY_CLASS, KARTA, WORKLOADGROUP)
)


def build_controller(
    client: KubeClient,
    settings: ControllerSettings,
    *,
    grouper: Grouper,
    metrics: Metrics,
    supervisor: Supervisor,
    store: DecisionStore | None = None,
    leader: LeaderElector | None = None,
    definitions: DefinitionRegistry | None = None,
) -> Controller:
    store = store or DecisionStore()
    tuning, config, discovery = settings.tuning, grouper.config, Discovery(client)
    can_write: Callable[[], bool] = leader.is_leader if leader is not None else lambda: True
    defaults_cm = None
    if config.default_priorities_configmap_name and config.default_priorities_configmap_namespace:
        defaults_cm = (config.default_priorities_configmap_namespace, config.default_priorities_configmap_name)
    cache = ClusterCache(
        client, discovery, scheduler_name=config.scheduler_name, pod_label_selector=settings.pod_label_selector,
        namespace_label_selector=settings.namespace_label_selector, defaults_configmap=defaults_cm, metrics=metrics,
        supervisor=supervisor, pod_shape=PodShape(),
        policy=KindPolicy(allow_all=True) if settings.allowed_kinds is None
        else KindPolicy(fixed=frozenset(settings.allowed_kinds) | ALWAYS_CACHED),
    )
    if store.pod_exists is None:  # a record is kept only while its pod is cached (a delete seen mid-pass)
        store.pod_exists = lambda namespace, name: cache.get(POD, namespace, name) is not None
    index, background, expectations = WorkloadIndex(), Background(), WriteExpectations()
    queue: WorkQueue[WorkloadKey] = WorkQueue(
        base_delay=tuning.retry_base_seconds, max_delay=tuning.retry_max_seconds, metrics=metrics
    )
    deleted = DeletedOwners(tuning.deleted_owner_seconds)
    recorder = EventRecorder(client, can_write=can_write)
    writers = Writers(
        pod_groups=PodGroupWriter(
            client, existing=functools.partial(cache.get, PODGROUP), expectations=expectations, can_write=can_write,
            nodepool_label_key=config.nodepool_label_key, queue_label_key=config.queue_label_key, metrics=metrics,
        ),
        # twice as many pod patches in flight as PodGroup writes: no pass waits for its patches, so those of
        # every pass meet here, and they are most of a burst's writes (at 1x a five-pod burst ended with ~250
        # queued for a slot; 2x: its time after the last create 0.80 of 1x, CPU 0.99; docs/performance.md)
        pods=PodPatcher(client, expectations=expectations, can_write=can_write, metrics=metrics,
                        cached=functools.partial(cache.get, POD), concurrency=2 * settings.max_concurrent_reconciles),
        events=recorder,
        upstream=UpstreamWriter(client, discovery, expectations=expectations, can_write=can_write, metrics=metrics,
                                events=recorder) if settings.backend == "upstream" else None,
    )
    # the gang state of every PodGroup (issue 39): marked dirty by pod/PodGroup events, computed in its task
    gangs = GangTracker(cache, metrics=metrics, recorder=recorder)
    metrics.add_gang_source(gangs, workload_info=settings.workload_info_metrics)
    plans = PlanCache(tuning.kept_idle_seconds, settle_min_pods=tuning.settle_min_pods)
    reconciler = Reconciler(
        cache=cache, index=index, grouper=grouper, writers=writers, store=store, metrics=metrics, queue=queue,
        deleted=deleted, plans=plans, pod_group_concurrency=settings.max_concurrent_reconciles, tuning=tuning,
    )
    handlers = EventHandlers(
        cache=cache, index=index, queue=queue, store=store, expectations=expectations, spawn=background.spawn,
        deleted=deleted, metrics=metrics, plans=plans, batch_window=settings.batch_window, tuning=tuning,
    )
    # WorkloadGroups (either backend): a group's key is reconciled by them; a member's pass hands over to it
    groups = WorkloadGroups(cache=cache, index=index, reconciler=reconciler, store=store, enqueue=queue.add,
                            routing=handlers.routing)
    reconciler.groups = groups
    # a resync re-decides: what it reacts to (defaults ConfigMap, Karta definitions) may change any
    # decision of the workloads it names; a new leader only checks every workload (its kept decisions
    # stand: the handlers invalidate them on every change, leader or not). In the background lane.
    resync = Resyncer(
        index, functools.partial(handlers.changed, background=True), reroute=handlers.reroute, check=handlers.check,
        debounce=settings.resync_debounce, chunk=tuning.resync_chunk,
    )
    karta_sync = None if definitions is None else KartaSync(
        definitions, cache=cache, recorder=recorder, metrics=metrics, requeue_kinds=resync.request,
        spawn=background.spawn,
    )

    def attach(gvk: GVK, informer: Informer) -> None:
        """An informer the cache started (with its own indexes): to the parts that watch its kind, with the
        indexes only they read."""
        if gvk == KARTA:
            if karta_sync is not None:
                karta_sync.attach(informer)
        elif gvk == WORKLOADGROUP:
            informer.add_handler(groups.on_group)
        elif gvk == CONFIGMAP:  # the defaults ConfigMap: any decision may read it
            informer.add_handler(lambda *_: resync.request() if informer.synced.is_set() else None)
        else:
            if gvk == PODGROUP:
                informer.add_handler(gangs.on_pod_group)
                if karta_sync is not None:  # owners of PodGroups a definition made stay walkable
                    karta_sync.attach_pod_groups(informer)
            elif gvk == POD:
                informer.add_index(POD_PODGROUP_INDEX, pod_group_names)
                if settings.backend == "upstream":
                    informer.add_index(SCHEDULING_GROUP_INDEX, scheduling_group_names)
                informer.add_handler(gangs.on_pod)
            elif gvk.group == UPSTREAM_GROUP and gvk.kind == "PodGroup":
                informer.add_handler(gangs.on_pod_group)
            handlers.attach(gvk, informer)

    cache.on_informer.append(attach)
    return Controller(
        settings=settings, grouper=grouper, metrics=metrics, store=store, discovery=discovery, cache=cache, index=index,
        queue=queue, writers=writers, recorder=recorder, gangs=gangs, plans=plans, reconciler=reconciler,
        handlers=handlers, groups=groups, resync=resync, karta_sync=karta_sync,
        workers=WorkerPool(queue, reconciler, supervisor, settings.max_concurrent_reconciles), background=background,
    )


__all__ = ["ALWAYS_CACHED", "build_controller"]
