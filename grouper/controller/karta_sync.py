"""Keeps the Karta definition registry in step with the cluster's ``Karta`` objects.

Each watch event of a Karta is applied to the registry in order, off the event loop (parsing and
validating a large definition takes long; a worker thread keeps probes, watches and the Lease renewals
answering meanwhile). Then, scoped to what the change can affect:

- the workloads of the kinds the old and new definition describe are re-queued (chunked, so the loop
  yields) — not every workload of the cluster;
- the owner-kind allow-list and the cached pod shape follow the loaded definitions (a pod selector
  reading ``.spec.hostname`` makes the pod cache keep that field; the pod informer re-lists once);
- an unusable definition is never fatal: its kind falls back to the default grouper, and it shows up as
  a Warning Event on the Karta (reason ``InvalidKarta``), a log line, ``/definitions`` and the metric
  ``podgrouper_karta_definitions{state="invalid"}``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from grouper.core.hold import made_by_definition
from grouper.karta import DefinitionRegistry, LoadedDefinition
from grouper.kube.cache import POD, ClusterCache
from grouper.kube.informer import DELETED, MODIFIED, Informer
from grouper.model import objects as o
from grouper.model.objects import Obj
from grouper.observability.metrics import Metrics
from grouper.writer.events import EventRecorder, InvolvedObject

log = logging.getLogger(__name__)
INVALID_KARTA_REASON = "InvalidKarta"
Kinds = set[tuple[str, str]]  # (group, kind)


class KartaSync:
    def __init__(
        self,
        registry: DefinitionRegistry,
        *,
        cache: ClusterCache,
        recorder: EventRecorder,
        metrics: Metrics,
        requeue_kinds: Callable[[Kinds], None],
        spawn: Callable[[Any], None],
    ) -> None:
        self.registry = registry
        self.cache = cache
        self.recorder = recorder
        self.metrics = metrics
        self.requeue_kinds = requeue_kinds
        self.spawn = spawn
        self._events: asyncio.Queue[tuple[str, Obj, bool]] = asyncio.Queue()
        self._consumer: asyncio.Task[None] | None = None
        # PodGroup uid -> (group, kind) of its owner, for PodGroups that record the definition which made them
        self._sourced: dict[str, tuple[str, str]] = {}
        self.refresh_policy()
        self.update_metrics()

    def attach(self, informer: Informer) -> None:
        def handler(etype: str, obj: Obj, old: Obj | None) -> None:
            if etype == MODIFIED and old is not None and _spec_of(old) == _spec_of(obj):
                return
            self._events.put_nowait((etype, obj, informer.synced.is_set()))
            if self._consumer is None or self._consumer.done():
                self._consumer = asyncio.get_running_loop().create_task(self._drain(), name="karta-sync")

        informer.add_handler(handler)

    def attach_pod_groups(self, informer: Informer) -> None:
        """Keep the owner kinds of PodGroups a definition produced walkable after the definition is gone
        (deleted while the grouper was down): the hold rule (grouper/core/hold.py) must find the workload
        again after a restart, and what it compares is all in the cluster — the PodGroup included."""

        def handler(etype: str, obj: Obj, old: Obj | None) -> None:
            uid = o.uid(obj)
            kind = None if etype == DELETED else made_by_definition(obj)
            if self._sourced.get(uid) == kind:
                return
            before = set(self._sourced.values())
            if kind is None:
                self._sourced.pop(uid, None)
            else:
                self._sourced[uid] = kind
            if set(self._sourced.values()) != before:
                self.refresh_policy()

        informer.add_handler(handler)

    async def wait_idle(self) -> None:
        """Until every event received so far is applied."""
        while self._consumer is not None and not self._consumer.done():
            await asyncio.shield(self._consumer)

    async def _drain(self) -> None:
        while not self._events.empty():
            etype, obj, synced = self._events.get_nowait()
            try:
                await self._apply(etype, obj, synced)
            except Exception:
                log.exception("cannot apply Karta %s", o.name(obj), extra={"karta": o.name(obj)})

    async def _apply(self, etype: str, obj: Obj, synced: bool) -> None:
        name = o.name(obj)
        before = self.registry.get(name)
        affected: Kinds = set()
        if before is not None and before.source == "cluster":
            affected = before.definition.owner_kinds()
        if etype == DELETED:
            self.registry.remove_cluster_object(name)
        else:
            # parsing + validating (compiling in the definition's sandbox lane) runs off the loop
            loaded = await self.registry.upsert_cluster_object_async(obj)
            self._report_invalid(obj, loaded)
            if loaded is not None:
                affected |= loaded.definition.owner_kinds()
        self.update_metrics()
        self.refresh_policy()
        if synced and affected:
            self.requeue_kinds(affected)

    def refresh_policy(self) -> None:
        """Allow-list and pod shape from every loaded definition."""
        kinds: Kinds = set()
        paths: list[str] = []
        for ld in self.registry.all():
            kinds |= ld.definition.owner_kinds()
            paths.extend(ld.definition.pod_paths())
        self.cache.policy.karta = frozenset(kinds | set(self._sourced.values()))
        if self.cache.pod_shape.widen(paths):
            pods = self.cache.informer(POD)
            if pods is not None:
                log.info("a Karta pod selector reads more pod fields; re-listing pods to cache them")
                pods.request_relist()

    def _report_invalid(self, obj: Obj, loaded: LoadedDefinition | None) -> None:
        name = o.name(obj)
        if loaded is None:
            problem = str(self.registry.cluster_errors().get(name, "cannot be parsed"))
        elif not loaded.report.ok:
            problem = "; ".join(str(issue) for issue in loaded.report.errors)
        else:
            return
        message = f"Karta {name} is invalid and is not used: {problem}"
        log.warning(message, extra={"karta": name})
        involved = InvolvedObject("run.ai/v1alpha1", "Karta", "", name, o.uid(obj))
        self.spawn(self.recorder.warn(involved, message, reason=INVALID_KARTA_REASON))

    def update_metrics(self) -> None:
        """``podgrouper_karta_definitions{origin,state}`` (:meth:`DefinitionRegistry.state_counts`)."""
        for (origin, state), n in self.registry.state_counts().items():
            self.metrics.karta_definitions.labels(origin=origin, state=state).set(n)


def _spec_of(obj: Obj) -> Any:
    return (obj.get("spec"), o.labels(obj), bool(o.meta(obj).get("deletionTimestamp")))


__all__ = ["INVALID_KARTA_REASON", "KartaSync"]
