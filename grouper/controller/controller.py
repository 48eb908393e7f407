"""The controller: informers → event handlers → work queue (keyed by workload) → reconcile workers.

Event handlers only compute keys and enqueue (cheap, synchronous, in the loop):

- **pods** (field-selected by scheduler name): owner walk on the cache → the workload key. A pod whose
  owner kind is not watched yet is parked while that informer starts, then dispatched again.
- **owner kinds and everything else grouping read** (started on demand): object UID → the workloads
  that read it, so scaling a RayCluster or annotating a JobSet re-evaluates its PodGroups with no pod event.
- **PodGroups**: a PodGroup changed or deleted by someone else → its workload.
- **Kartas, the defaults ConfigMap, new PriorityClasses**: these can change any decision → every workload
  is re-queued (de-duplicated, debounced).

Events that change nothing grouping reads (status-only updates, the echo of our own writes) are dropped.
With leader election, a standby runs the informers (warm caches) but no workers; on becoming leader it
starts the workers and re-queues every workload; on losing the lease the workers are cancelled at once
and every write checks the lease first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grouper.controller.cache import (
    CONFIGMAP,
    KARTA,
    NAMESPACE,
    POD,
    PODGROUP,
    PRIORITY_CLASS,
    ClusterCache,
    NotCached,
)
from grouper.controller.decisions import DecisionStore
from grouper.controller.leader import LeaderElector
from grouper.controller.queue import ShutDown, WorkQueue
from grouper.controller.reconciler import Reconciler, Result, is_terminal
from grouper.controller.workloads import WorkloadIndex, WorkloadKey
from grouper.core.grouping import Grouper
from grouper.core.owner_chain import resolve_owners
from grouper.karta import DefinitionRegistry, LoadedDefinition
from grouper.kube.discovery import Discovery
from grouper.kube.informer import ADDED, DELETED, MODIFIED, Informer
from grouper.kube.transport import KubeClient
from grouper.model import objects as o
from grouper.model.errors import GroupingError
from grouper.model.objects import GVK, Obj
from grouper.observability.logging import log_context
from grouper.observability.metrics import Metrics
from grouper.writer.events import EventRecorder, InvolvedObject
from grouper.writer.podgroups import PodGroupWriter
from grouper.writer.pods import PodPatcher

log = logging.getLogger(__name__)
INVALID_KARTA_REASON = "InvalidKarta"

# Kinds whose plugins read ``status`` (RayJob/RayService cluster names); other status-only updates are noise.
STATUS_READING_GROUPS = frozenset({"ray.io"})
# How long a deleted owner explains its orphaned pods (the garbage collector removes them within seconds).
DELETED_MEMORY = 120.0


@dataclass
class ControllerSettings:
    """What the controller needs beyond the grouping flags (those it reads from ``grouper.config``)."""

    pod_label_selector: str = ""
    namespace_label_selector: str = ""
    max_concurrent_reconciles: int = 10
    watch_kartas: bool = True
    resync_debounce: float = 0.5
    sync_timeout: float = 120.0


def _strip_volatile(obj: Obj, keep_status: bool) -> Obj:
    meta = {
        k: v
        for k, v in (obj.get("metadata") or {}).items()
        if k not in ("resourceVersion", "managedFields", "generation")
    }
    out = {k: v for k, v in obj.items() if k != "metadata" and (keep_status or k != "status")}
    out["metadata"] = meta
    return out


def _pod_signature(pod: Obj) -> tuple[Any, ...]:
    m = o.meta(pod)
    return (
        m.get("labels"),
        m.get("annotations"),
        m.get("ownerReferences"),
        pod.get("spec"),
        bool(m.get("deletionTimestamp")),
        is_terminal(pod),
    )


class Controller:
    def __init__(
        self,
        client: KubeClient,
        settings: ControllerSettings,
        *,
        grouper: Grouper,
        metrics: Metrics,
        store: DecisionStore | None = None,
        leader: LeaderElector | None = None,
        definitions: DefinitionRegistry | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.grouper = grouper
        self.metrics = metrics
        self.store = store or DecisionStore()
        self.leader = leader
        self.definitions = definitions
        self.discovery = Discovery(client)
        config = grouper.config
        defaults_cm = None
        if config.default_priorities_configmap_name and config.default_priorities_configmap_namespace:
            defaults_cm = (
                config.default_priorities_configmap_namespace,
                config.default_priorities_configmap_name,
            )
        self.cache = ClusterCache(
            client,
            self.discovery,
            scheduler_name=config.scheduler_name,
            pod_label_selector=settings.pod_label_selector,
            namespace_label_selector=settings.namespace_label_selector,
            defaults_configmap=defaults_cm,
            metrics=metrics,
        )
        self.cache.on_informer.append(self._attach)
        self.index = WorkloadIndex()
        self.queue: WorkQueue[WorkloadKey] = WorkQueue(metrics=metrics)
        self.writer = PodGroupWriter(
            client,
            existing=self._cached_pod_group,
            can_write=self.can_write,
            nodepool_label_key=config.nodepool_label_key,
            queue_label_key=config.queue_label_key,
            metrics=metrics,
            on_written=self._remember_write,
        )
        self.patcher = PodPatcher(
            client, can_write=self.can_write, metrics=metrics, on_written=self._remember_write
        )
        self.recorder = EventRecorder(client, can_write=self.can_write)
        self.reconciler = Reconciler(
            cache=self.cache,
            index=self.index,
            grouper=grouper,
            writer=self.writer,
            patcher=self.patcher,
            recorder=self.recorder,
            store=self.store,
            metrics=metrics,
            enqueue=self.queue.add,
            namespace_allowed=self.namespace_allowed,
            owner_deleted=self._recently_deleted,
        )
        # (kind, ns, name) -> resourceVersion our last write produced: its watch event is an echo, not news
        self._own_writes: dict[tuple[str, str, str], str] = {}
        self._deleted: dict[str, float] = {}  # uid -> monotonic time its DELETED event arrived (owner kinds)
        self._parked: dict[GVK, set[tuple[str, str]]] = {}  # owner kind being started -> pods waiting for it
        self._workers: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[Any]] = set()
        self._resync_handle: asyncio.TimerHandle | None = None
        self._started = False
        self.started_at = 0.0
        self.last_progress: float | None = None  # monotonic time the last reconcile finished (liveness)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start and sync the informers grouping always needs. Workers start separately (leadership)."""
        loop_start = time.monotonic()
        required = [POD, PODGROUP]
        if self.settings.namespace_label_selector:
            required.append(NAMESPACE)
        results = await asyncio.gather(
            *(self.cache.ensure(gvk, timeout=self.settings.sync_timeout) for gvk in required)
        )
        for gvk, res in zip(required, results, strict=True):
            if res != "ready":
                raise RuntimeError(f"cannot watch {gvk}: {res}")
        optional = [PRIORITY_CLASS] + (
            [KARTA] if self.settings.watch_kartas and self.definitions is not None else []
        )
        for gvk, res in zip(
            optional, await asyncio.gather(*(self.cache.ensure(gvk) for gvk in optional)), strict=True
        ):
            if res != "ready":
                log.warning("not watching %s (%s); grouping continues without it", gvk, res)
                if gvk == KARTA and res == "absent":
                    self._spawn(self._retry_kind(KARTA, 60.0))
        await self.cache.start_defaults_configmap()
        self._started = True
        self.started_at = time.monotonic()
        log.info(
            "caches synced in %.2fs",
            self.started_at - loop_start,
            extra={"pods": len(self.cache.informer(POD) or ()), **self.index.sizes()},
        )

    async def _retry_kind(self, gvk: GVK, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            if await self.cache.ensure(gvk) == "ready":
                log.info("now watching %s", gvk)
                self.resync_all()
                return

    def start_workers(self) -> None:
        if self._workers:
            return
        self._workers = [
            asyncio.create_task(self._worker(i), name=f"reconcile-worker-{i}")
            for i in range(max(1, self.settings.max_concurrent_reconciles))
        ]
        self.resync_all(debounce=False)

    async def stop_workers(self, *, drain: float = 0.0) -> None:
        """Stop the workers: wait up to ``drain`` seconds for in-flight reconciles, then cancel."""
        workers, self._workers = self._workers, []
        if not workers:
            return
        if drain > 0:
            _, pending = await asyncio.wait(workers, timeout=drain)
        else:
            pending = set(workers)
        for w in pending:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)

    async def shutdown(self, *, drain: float = 10.0) -> None:
        """Clean stop: no new work, drain in-flight reconciles, stop informers."""
        self.queue.shutdown()
        await self.stop_workers(drain=drain)
        for t in list(self._background):
            t.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._resync_handle is not None:
            self._resync_handle.cancel()
        await self.cache.stop()

    def can_write(self) -> bool:
        return self.leader is None or self.leader.is_leader()

    @property
    def workers_running(self) -> bool:
        return bool(self._workers)

    def ready(self) -> tuple[bool, dict[str, Any]]:
        """Ready = core caches synced and their informers alive (a standby is ready too)."""
        detail: dict[str, Any] = {"started": self._started}
        ok = self._started
        for gvk in (POD, PODGROUP):
            inf = self.cache.informer(gvk)
            alive = inf is not None and inf.synced.is_set() and inf.running
            detail[str(gvk)] = "synced" if alive else "not synced"
            ok = ok and alive
        detail["leader"] = None if self.leader is None else self.leader.is_leader()
        detail["queue"] = len(self.queue)
        return ok, detail

    # ------------------------------------------------------------------ workers

    async def _worker(self, n: int) -> None:
        while True:
            try:
                wl = await self.queue.get()
            except ShutDown:
                return
            result: Result | None = None
            try:
                with log_context(workload=str(wl), worker=n):
                    result = await self.reconciler.reconcile(wl)
                    self._log_result(wl, result)
            except asyncio.CancelledError:
                self.queue.done(wl)
                self.queue.add(wl)  # cancelled mid-way (lost leadership / shutdown): do it again later
                raise
            except Exception:
                log.exception("reconcile of %s crashed", wl, extra={"workload": str(wl)})
                result = Result("error", ["internal error"])
            self.queue.done(wl)
            self.last_progress = time.monotonic()
            self._requeue(wl, result)

    def _requeue(self, wl: WorkloadKey, result: Result) -> None:
        if result.status == "ok":
            self.queue.forget(wl)
        elif result.status == "requeue":
            self.queue.add(wl)
        elif result.status == "error":
            self.queue.add_rate_limited(wl)
        # not_leader: the new leader re-queues everything; we keep the key for when we lead again
        elif result.status == "later":
            self.queue.forget(wl)
            self.queue.add_after(wl, result.retry_after)
        elif result.status == "not_leader":
            self.queue.add_after(wl, 1.0)

    def _log_result(self, wl: WorkloadKey, r: Result) -> None:
        if r.status == "error":
            log.warning(
                "reconcile failed: %s",
                "; ".join(r.errors[:3]),
                extra={"plugin": r.plugin, "retries": self.queue.num_requeues(wl)},
            )
        elif r.written:
            log.info("reconciled", extra={"plugin": r.plugin, "writes": r.written})
        else:
            log.debug("reconciled, nothing to write", extra={"plugin": r.plugin})

    # ------------------------------------------------------------------ event handlers

    def _attach(self, gvk: GVK, informer: Informer) -> None:
        if gvk == POD:
            informer.add_handler(self._on_pod)
        elif gvk == PODGROUP:
            informer.add_handler(self._on_pod_group)
        elif gvk == NAMESPACE:
            informer.add_handler(self._on_namespace)
        elif gvk == KARTA:
            informer.add_handler(lambda t, obj, old: self._on_karta(t, obj, old, informer.synced.is_set()))
        elif gvk == CONFIGMAP:
            informer.add_handler(lambda *_: self.resync_all() if informer.synced.is_set() else None)
        elif gvk == PRIORITY_CLASS:
            informer.add_handler(
                lambda t, obj, old: self._on_priority_class(t, obj, old, informer.synced.is_set())
            )
        else:
            informer.add_handler(self._object_handler(gvk))

    def _remember_write(self, obj: Obj) -> None:
        if len(self._own_writes) > 65536:
            self._own_writes.clear()
        self._own_writes[(str(obj.get("kind")), o.namespace(obj), o.name(obj))] = str(
            o.meta(obj).get("resourceVersion") or ""
        )

    def _is_own_write(self, obj: Obj) -> bool:
        key = (str(obj.get("kind")), o.namespace(obj), o.name(obj))
        rv = self._own_writes.get(key)
        if rv is not None and rv == str(o.meta(obj).get("resourceVersion") or ""):
            del self._own_writes[key]
            return True
        return False

    def namespace_allowed(self, namespace: str) -> bool:
        if not self.settings.namespace_label_selector:
            return True
        inf = self.cache.informer(NAMESPACE)
        return inf is not None and inf.get(None, namespace) is not None

    def _on_pod(self, etype: str, pod: Obj, old: Obj | None) -> None:
        key = (o.namespace(pod), o.name(pod))
        if etype == DELETED:
            wl = self.index.remove_pod(key)
            self.store.forget_pod(*key)
            if wl is not None:
                self.queue.add(wl)
            return
        if self._is_own_write(pod):
            return
        if etype == MODIFIED and old is not None and _pod_signature(old) == _pod_signature(pod):
            return
        self._dispatch_pod(pod)

    def _dispatch_pod(self, pod: Obj) -> None:
        key = (o.namespace(pod), o.name(pod))
        if not self.namespace_allowed(key[0]):
            return
        wl = self._workload_of(pod)
        if wl is None:
            return  # parked until the owner kind's informer is up
        prev = self.index.set_pod(key, wl)
        if prev is not None:
            self.queue.add(prev)
        self.queue.add(wl)

    def _workload_of(self, pod: Obj) -> WorkloadKey | None:
        """Top owner on the cache (the same walk the decision makes), or the pod itself when the walk fails."""
        lookups = self.cache.lookups()
        try:
            chain = resolve_owners(pod, lookups)
        except NotCached as e:
            self._park(e.gvk, pod)
            return None
        except GroupingError:
            # owner missing / mismatched: the pod is its own workload until the owner shows up
            # (the owner reference's UID is a dependency, so the owner's arrival re-evaluates it)
            wl = WorkloadKey.of_pod(o.namespace(pod), o.name(pod))
            self.index.set_dependencies(wl, [str(r.get("uid") or "") for r in o.owner_references(pod)])
            return wl
        if lookups.misses:  # resolve_owners swallowed nothing, but be safe
            self._park(next(iter(lookups.misses)), pod)
            return None
        top = chain.top_owner
        if top is pod or (top.get("kind") == "Pod" and o.uid(top) == o.uid(pod)):
            return WorkloadKey.of_pod(o.namespace(pod), o.name(pod))
        return WorkloadKey(o.namespace(pod), GVK.of(top).group, str(top.get("kind")), o.name(top))

    def _park(self, gvk: GVK, pod: Obj) -> None:
        waiting = self._parked.get(gvk)
        if waiting is None:
            waiting = self._parked[gvk] = set()
            self._spawn(self._start_kind(gvk))
        waiting.add((o.namespace(pod), o.name(pod)))

    async def _start_kind(self, gvk: GVK) -> None:
        delay = 1.0
        while True:
            res = await self.cache.ensure(gvk)
            log.info("informer for %s: %s", gvk, res, extra={"kind": str(gvk)})
            if res != "error":
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, 60.0)
        pods_inf = self.cache.informer(POD)
        for ns, name in self._parked.pop(gvk, set()):
            pod = pods_inf.get(ns, name) if pods_inf is not None else None
            if pod is not None:
                self._dispatch_pod(pod)

    def _object_handler(self, gvk: GVK) -> Callable[[str, Obj, Obj | None], None]:
        keep_status = gvk.group in STATUS_READING_GROUPS

        def handler(etype: str, obj: Obj, old: Obj | None) -> None:
            if etype == DELETED:
                self._note_deleted(o.uid(obj))
            if (
                etype == MODIFIED
                and old is not None
                and _strip_volatile(old, keep_status) == _strip_volatile(obj, keep_status)
            ):
                return
            for wl in self.index.workloads_reading(o.uid(obj)):
                self.queue.add(wl)

        return handler

    def _note_deleted(self, uid: str) -> None:
        now = time.monotonic()
        if len(self._deleted) > 4096:
            self._deleted = {u: t for u, t in self._deleted.items() if now - t < DELETED_MEMORY}
        self._deleted[uid] = now

    def _recently_deleted(self, uid: str) -> bool:
        t = self._deleted.get(uid)
        return t is not None and time.monotonic() - t < DELETED_MEMORY

    def _on_pod_group(self, etype: str, pg: Obj, old: Obj | None) -> None:
        if self._is_own_write(pg):
            return
        if (
            etype == MODIFIED
            and old is not None
            and _strip_volatile(old, False) == _strip_volatile(pg, False)
        ):
            return
        wl = self.index.workload_of_pod_group((o.namespace(pg), o.name(pg)))
        if wl is not None:
            self.queue.add(wl)
        for wl in self.index.workloads_reading(o.uid(pg)):
            self.queue.add(wl)

    def _on_namespace(self, etype: str, ns: Obj, old: Obj | None) -> None:
        if etype != ADDED:
            return
        pods = self.cache.informer(POD)
        for pod in pods.list(o.name(ns)) if pods is not None else ():
            self._dispatch_pod(pod)

    def _on_priority_class(self, etype: str, pc: Obj, old: Obj | None, synced: bool) -> None:
        """``synced`` is False for the events of an informer's first LIST (nothing is decided yet)."""
        if etype == ADDED and synced:
            self.resync_all()  # a workload may name a class that did not exist when it was decided
        else:
            for wl in self.index.workloads_reading(o.uid(pc)):
                self.queue.add(wl)

    def _on_karta(self, etype: str, obj: Obj, old: Obj | None, synced: bool) -> None:
        reg = self.definitions
        if reg is None:
            return
        if (
            etype == MODIFIED
            and old is not None
            and _strip_volatile(old, False) == _strip_volatile(obj, False)
        ):
            return
        try:
            if etype == DELETED:
                reg.remove_cluster_object(o.name(obj))
            else:
                self._report_invalid_karta(obj, reg.upsert_cluster_object(obj), reg)
        except Exception:
            log.exception("cannot load Karta %s", o.name(obj))
        self.update_karta_metrics()
        if synced:
            self.resync_all()

    def _report_invalid_karta(self, obj: Obj, loaded: LoadedDefinition | None, reg: DefinitionRegistry) -> None:
        """An unusable cluster Karta is never fatal: its kind falls back to the default grouper. Say so
        in the log and as a Warning Event on the Karta (the metric and /definitions show it too)."""
        name = o.name(obj)
        if loaded is None:
            problem = str(reg.cluster_errors().get(name, "cannot be parsed"))
        elif not loaded.report.ok:
            problem = "; ".join(str(issue) for issue in loaded.report.errors)
        else:
            return
        message = f"Karta {name} is invalid and is not used: {problem}"
        log.warning(message, extra={"karta": name})
        involved = InvolvedObject("run.ai/v1alpha1", "Karta", "", name, o.uid(obj))
        self._spawn(self.recorder.warn(involved, message, reason=INVALID_KARTA_REASON))

    def update_karta_metrics(self) -> None:
        """``podgrouper_karta_definitions{origin,state}``; cluster Kartas that failed to load count as invalid."""
        reg = self.definitions
        if reg is None:
            return
        counts = {(origin, state): 0 for origin in ("builtin", "cluster") for state in ("valid", "invalid")}
        for ld in reg.all():
            counts[(ld.source, "valid" if ld.report.ok else "invalid")] += 1
        counts[("cluster", "invalid")] += len(reg.cluster_errors())
        for (origin, state), n in counts.items():
            self.metrics.karta_definitions.labels(origin=origin, state=state).set(n)

    # ------------------------------------------------------------------ resync

    def resync_all(self, debounce: bool = True) -> None:
        """Re-queue every workload (and re-map every pod). Debounced: bursts of triggers cost one pass."""
        if debounce and self.settings.resync_debounce > 0:
            if self._resync_handle is None:
                self._resync_handle = asyncio.get_running_loop().call_later(
                    self.settings.resync_debounce, self._resync_now
                )
            return
        self._resync_now()

    def _resync_now(self) -> None:
        self._resync_handle = None
        pods = self.cache.informer(POD)
        for pod in pods.list() if pods is not None else ():
            self._dispatch_pod(pod)
        for wl in self.index.workloads():
            self.queue.add(wl)

    # ------------------------------------------------------------------ helpers

    def _cached_pod_group(self, namespace: str, name: str) -> Obj | None:
        inf = self.cache.informer(PODGROUP)
        return inf.get(namespace, name) if inf is not None else None

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
