"""Watch events → workload keys on the work queue. Handlers are synchronous and cheap (they run in the
event loop between watch lines): an owner walk on the cache at most, never I/O.

- **pods** (field-selected by scheduler name): owner walk on the cache → the workload key. A pod whose
  owner kind is not cached yet is parked while that informer starts, then routed again.
- **owner kinds and everything else grouping read**: object UID → the workloads that read it, and for
  an object that appears, the workloads that looked for it and did not find it (``Absent``).
- **PodGroups**: a PodGroup changed or deleted by anyone but us → its workload (so it is restored).
- **namespaces** (with ``--namespace-label-selector``): a namespace that becomes selected → its pods.

Every event of a pod or PodGroup first clears that object's entry in the shared
:class:`~grouper.writer.expectations.WriteExpectations`; an event that is only the echo of our own write
changes nothing and is dropped, as are updates that change nothing grouping reads. An echo that arrives
before our patch's answer (no version to know it by yet) is known by what the patch on its way sets: the
pod as it was with our marks and nothing else changed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from typing import Any

from grouper.controller.plans import PlanCache
from grouper.controller.queue import WorkQueue
from grouper.controller.tuning import DEFAULT_TUNING, Tuning
from grouper.controller.workloads import DeletedOwners, WorkloadIndex, WorkloadKey
from grouper.core.owner_chain import owner_key, resolve_owners
from grouper.core.reads import STATUS_READING_GROUPS, pod_signature, same_reads
from grouper.kube.cache import (
    NAMESPACE,
    POD,
    PODGROUP,
    Absent,
    ClusterCache,
    NamedPodGroups,
    NotCached,
    podgroup_name_prefixes,
)
from grouper.kube.cooperative import Cooperative
from grouper.kube.informer import ADDED, DELETED, MODIFIED, Informer
from grouper.model import objects as o
from grouper.model.errors import GroupingError
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import POD_GROUP_ANNOTATION, PODGROUP_KIND
from grouper.observability.metrics import Metrics
from grouper.records.decisions import DecisionStore
from grouper.writer.expectations import WriteExpectations
from grouper.writer.pods import with_marks

log = logging.getLogger(__name__)

Spawn = Callable[[Any], None]


def _grouped_before(pod: Obj) -> bool:
    """The pod already names its PodGroup (a grouper put it there before this process saw it)."""
    return bool(o.annotations(pod).get(POD_GROUP_ANNOTATION))


class EventHandlers:
    def __init__(
        self,
        *,
        cache: ClusterCache,
        index: WorkloadIndex,
        queue: WorkQueue[WorkloadKey],
        store: DecisionStore,
        expectations: WriteExpectations,
        spawn: Spawn,
        deleted: DeletedOwners,
        metrics: Metrics | None = None,
        plans: PlanCache | None = None,
        batch_window: float = 0.0,
        tuning: Tuning = DEFAULT_TUNING,
    ) -> None:
        self.cache, self.index, self.queue, self.store = cache, index, queue, store
        self.tuning = tuning
        self.plans = plans if plans is not None else PlanCache()
        self.batch_window = batch_window
        self.expectations = expectations
        self.spawn = spawn
        self.deleted = deleted
        self.metrics = metrics
        self._parked: dict[GVK, set[tuple[str, str]]] = {}  # owner kind being started -> pods waiting
        # (namespace, controlling owner reference) -> workload, for the pods routed in one run of the event
        # loop: the pods of a listed or re-routed batch share owners, and nothing can change the cache before
        # the loop runs something else, when the map is emptied (call_soon). It pays: docs/performance.md.
        self._routes: dict[tuple[str, str, str, str, str], WorkloadKey] = {}
        self._refused: dict[tuple[str, str], set[tuple[str, str]]] = {}  # kind outside the allow-list -> pods

    def attach(self, gvk: GVK, informer: Informer) -> None:
        if gvk == POD:
            informer.add_handler(self.on_pod)
        elif gvk == PODGROUP:
            informer.add_handler(self.on_pod_group)
        elif gvk == NAMESPACE:
            informer.add_handler(self.on_namespace)
        else:
            informer.add_handler(self.object_handler(gvk))

    # ------------------------------------------------------------------ pods

    def on_pod(self, etype: str, pod: Obj, old: Obj | None) -> None:
        key = (o.namespace(pod), o.name(pod))
        echo = self.expectations.observe("Pod", etype, pod)
        if etype == DELETED:
            wl = self.index.remove_pod(key)
            self.store.forget_pod(*key)
            if wl is not None:
                self.queue.add(wl)
            return
        if echo:
            return
        if etype == MODIFIED and old is not None and (
            pod_signature(old) == pod_signature(pod) or self._echo_before_answer(pod, old)
        ):
            return
        self.route_pod(pod, new=etype == ADDED)

    def _echo_before_answer(self, pod: Obj, old: Obj) -> bool:
        """Whether the update is only our pod patch still waiting for its answer: the pod as it was, with
        the marks the patch sets. (Reconciling it would look at the pod again and find it done.)"""
        marks = self.expectations.in_flight("Pod", o.namespace(pod), o.name(pod))
        return marks is not None and pod_signature(with_marks(old, *marks)) == pod_signature(pod)

    def route_pod(self, pod: Obj, *, new: bool = False) -> None:
        """Map the pod to its workload and queue that. A ``new`` pod's workload waits ``batch_window``:
        the pods of a burst (a Job controller creates them in batches) then cost one reconcile, one
        PodGroup write and one concurrent round of patches instead of one reconcile each."""
        key = (o.namespace(pod), o.name(pod))
        if not self.cache.namespace_allowed(key[0]):
            return
        wl = self.workload_of(pod)
        if wl is None:
            return  # parked until the owner kind's informer is up
        prev = self.index.set_pod(key, wl)
        if prev is not None:
            self.queue.add(prev)
        if new and _grouped_before(pod):
            # listed after a restart or a re-list, already in a PodGroup: a re-check, behind new work
            self.queue.add(wl, background=True)
        elif new and self.batch_window > 0:  # (the earliest pending time wins: a queued key stays queued)
            self.queue.add_after(wl, self.batch_window)
        else:
            self.queue.add(wl)

    def workload_of(self, pod: Obj) -> WorkloadKey | None:
        """Top owner on the cache (the same walk the decision makes), or the pod itself when the walk fails.
        Pods with the same controlling owner routed in one run of the loop walk once (``_routes``)."""
        route = owner_key(pod)
        if route is not None:
            hit = self._routes.get(route)
            if hit is not None:
                if self.metrics is not None:
                    self.metrics.child(self.metrics.pod_routes, "shared").inc()
                return hit
        if self.metrics is not None:
            self.metrics.child(self.metrics.pod_routes, "walk").inc()
        lookups = self.cache.lookups()
        try:
            chain = resolve_owners(pod, lookups)
        except NotCached as e:
            self._park(e.gvk, pod)
            return None
        except GroupingError:
            # owner missing / mismatched / a cycle: the pod is its own workload until the owner shows up
            # (the owner reference's UID is a dependency, so the owner's arrival re-evaluates it)
            wl = WorkloadKey.of_pod(o.namespace(pod), o.name(pod))
            self.index.set_dependencies(wl, [str(r.get("uid") or "") for r in o.owner_references(pod)])
            return wl
        if lookups.misses:
            self._park(next(iter(lookups.misses)), pod)
            return None
        for gvk in lookups.refused:
            if (gvk.group, gvk.kind) not in self._refused:
                log.warning(
                    "owner kind %s is not one the grouper reads (no native plugin, no Karta definition, not in "
                    "--extra-owner-kinds): owner walks stop below it and no cache of it is started",
                    gvk,
                    extra={"kind": str(gvk), "pod": f"{o.namespace(pod)}/{o.name(pod)}"},
                )
            pods = self._refused.setdefault((gvk.group, gvk.kind), set())
            if (o.namespace(pod), o.name(pod)) not in pods:
                pods.add((o.namespace(pod), o.name(pod)))
                if self.metrics is not None:
                    self.metrics.owner_kinds_refused.inc()
        top = chain.top_owner
        if top is pod or (top.get("kind") == "Pod" and o.uid(top) == o.uid(pod)):
            return WorkloadKey.of_pod(o.namespace(pod), o.name(pod))
        wl = WorkloadKey(o.namespace(pod), GVK.of(top).group, str(top.get("kind")), o.name(top))
        if route is not None and not lookups.refused and not chain.truncated:
            self._share_route(route, wl)
        return wl

    def _share_route(self, route: tuple[str, str, str, str, str], wl: WorkloadKey) -> None:
        if not self._routes:
            try:
                asyncio.get_running_loop().call_soon(self._routes.clear)
            except RuntimeError:  # no loop runs (a synchronous caller): nothing would empty the map
                return
        self._routes[route] = wl

    def reroute(self, kinds: frozenset[tuple[str, str]]) -> Iterator[None]:
        """Route again the pods whose owner walk a change of these kinds can affect (all when empty): those
        whose walk stopped at one of them (now allowed). Yields after each pod (the resyncer's chunks)."""
        pods_inf = self.cache.informer(POD)
        if pods_inf is None:
            return
        refused = [key for kind in kinds for key in sorted(self._refused.pop(kind, ()))]
        for pod in pods_inf.list() if not kinds else (p for k in refused if (p := pods_inf.get(*k)) is not None):
            self.route_pod(pod)
            yield None

    def routing(self) -> bool:
        """Whether pods wait for their owner kind's cache to be routed (after a start, most of them)."""
        return bool(self._parked)

    def _park(self, gvk: GVK, pod: Obj) -> None:
        waiting = self._parked.get(gvk)
        if waiting is None:
            waiting = self._parked[gvk] = set()
            self.spawn(self._start_kind(gvk))
        waiting.add((o.namespace(pod), o.name(pod)))

    async def _start_kind(self, gvk: GVK) -> None:
        delay = self.tuning.retry_base_seconds
        while True:
            res = await self.cache.ensure(gvk)
            log.info("informer for %s: %s", gvk, res, extra={"kind": str(gvk)})
            if res != "error":
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.tuning.retry_max_seconds)
        pods_inf = self.cache.informer(POD)
        # in name order, so the pods of one owner come together and share its walk; yielding to the loop
        # (after a restart tens of thousands wait for their owners' kind)
        coop = Cooperative(self.tuning.route_chunk)
        for ns, name in sorted(self._parked.pop(gvk, ())):
            pod = pods_inf.get(ns, name) if pods_inf is not None else None
            if pod is not None:
                # first routed now: after a restart these are the listed pods, already grouped ones
                # are re-checks for the background lane
                self.route_pod(pod, new=True)
            await coop.tick()

    # ------------------------------------------------------------------ everything else

    def object_handler(self, gvk: GVK) -> Callable[[str, Obj, Obj | None], None]:
        keep_status = gvk.group in STATUS_READING_GROUPS

        def handler(etype: str, obj: Obj, old: Obj | None) -> None:
            if etype == DELETED:
                self.deleted.note(o.uid(obj))
            if etype == MODIFIED and old is not None and same_reads(old, obj, keep_status=keep_status):
                return
            for wl in self.index.workloads_reading(o.uid(obj)):
                self.changed(wl)
            if etype == ADDED:  # workloads that looked for it before it existed (a PriorityClass, a Job, ...)
                self.arrived(Absent.of(obj))

        return handler

    def arrived(self, key: Absent) -> None:
        """An object some decisions looked for appeared: a decision that used its absence is redone with
        all its workload's pods; one that failed for it (an owner not cached yet) is retried alone."""
        for wl in self.index.workloads_reading(key):
            self.changed(wl)
        for wl in self.index.workloads_reading(key.as_retry()):
            self.queue.add(wl)

    def changed(self, wl: WorkloadKey, *, background: bool = False) -> None:
        """Something ``wl``'s decisions read changed: decide all its pods again (not only new ones).
        ``background``: a re-check of everything (a resync), queued behind new work."""
        self.plans.invalidate(wl)
        self.queue.add(wl, background=background)

    def check(self, wl: WorkloadKey) -> None:
        """Compare ``wl`` with the cluster once, behind new work, keeping its kept decisions: they hold
        until something they read changes (which drops them), leader or not."""
        self.plans.unsettle(wl)  # every pod and PodGroup compared, not only what changed
        self.queue.add(wl, background=True)

    def on_pod_group(self, etype: str, pg: Obj, old: Obj | None) -> None:
        if self.expectations.observe(PODGROUP_KIND, etype, pg):
            return
        if etype == MODIFIED and old is not None and same_reads(old, pg):
            return
        wl = self.index.workload_of_pod_group((o.namespace(pg), o.name(pg)))
        if wl is not None:
            self.plans.unsettle(wl)  # its PodGroups are compared with the plan again
            self.queue.add(wl)  # put right what someone else changed (the decision stands)
        for wl in self.index.workloads_reading(o.uid(pg)):
            self.changed(wl)
        if etype == ADDED:
            self.arrived(Absent.of(pg))
        owners = {str(r.get("uid") or "") for r in o.owner_references(pg)}
        for prefix in podgroup_name_prefixes(pg):  # workloads that asked for PodGroups named like it
            ns, _, base = prefix.partition("/")
            for wl in self.index.workloads_reading(NamedPodGroups(ns, base)):
                # A workload's own new PodGroup is what its decisions made (when its echo beats our
                # create's answer, it is not recognised as one): deciding again would find the same. Changed
                # or deleted by someone else, it is news: a JobSet's decision reads the shape of the PodGroup
                # named after it (flat: the legacy shape), and the kept decisions never read this one (it
                # did not exist when they were made), so its uid is no dependency to invalidate them.
                if etype != ADDED or not self.plans.made(wl, o.name(pg), owners):
                    self.changed(wl)

    def on_namespace(self, etype: str, ns: Obj, old: Obj | None) -> None:
        if etype != ADDED:
            return
        pods = self.cache.informer(POD)
        for pod in pods.list(o.name(ns)) if pods is not None else ():
            self.route_pod(pod, new=True)  # new to this grouper


__all__ = ["EventHandlers"]
