"""Reconcile one workload: decide every live pod, merge per PodGroup, validate, write, patch pods,
and delete the PodGroups of this workload that nothing names any more.

Level-triggered: the input is a key, the state is read from the caches, the output converges the
cluster; running it twice in a row writes nothing the second time. Failures stay with their
workload — a PodGroup the API server rejects, a pod whose decision failed — and are reported as
warning Events (on the pod and on the workload) and in the decision store. Transient failures back
off and retry; a decision error no retry can fix (an owner cycle, a malformed workload) is reported
once and waits for the next change of an object the decision read (the event handlers re-queue it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from grouper.controller.cache import POD, PODGROUP, CacheLookups, ClusterCache
from grouper.controller.decisions import DecisionStore
from grouper.controller.workloads import DeletedOwners, WorkloadIndex, WorkloadKey
from grouper.core.decision import Decision
from grouper.core.grouping import Grouper
from grouper.core.merge import merge_pod_groups
from grouper.core.validation import validate_pod_group
from grouper.kube.transport import ApiError
from grouper.model import objects as o
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import POD_GROUP_ANNOTATION, OwnerRef
from grouper.observability.logging import log_context
from grouper.observability.metrics import Metrics
from grouper.writer.events import EventRecorder, InvolvedObject
from grouper.writer.podgroups import NotLeader, PodGroupWriter
from grouper.writer.pods import PodPatcher

log = logging.getLogger(__name__)

TERMINAL_PHASES = ("Succeeded", "Failed")
# ok | error (retried with back-off) | failed (reported; waits for a change) | requeue | later | not_leader
Status = Literal["ok", "error", "failed", "requeue", "later", "not_leader"]
OWNER_GONE_REASONS = ("OwnerNotFound", "OwnerUidMismatch")
AWAIT_GC_SECONDS = 5.0
# A pod seconds old whose owner is not in the cache yet: the owner's watch event is usually just behind
# the pod's (two streams). Wait for it quietly instead of reporting a missing owner.
YOUNG_POD_SECONDS = 10.0
AWAIT_CACHE_SECONDS = 1.0
PODGROUP_OWNER_INDEX = "owner-uid"
POD_PODGROUP_INDEX = "pod-group"


def podgroup_owner_uids(pg: Obj) -> list[str]:
    return [str(r.get("uid")) for r in o.owner_references(pg) if r.get("uid")]


def pod_group_names(pod: Obj) -> list[str]:
    """Index values of a pod: ``<namespace>/<PodGroup it names>``."""
    name = o.annotations(pod).get(POD_GROUP_ANNOTATION)
    return [f"{o.namespace(pod)}/{name}"] if name else []


@dataclass
class Writers:
    """Everything a reconcile writes through (each gated on leadership)."""

    pod_groups: PodGroupWriter
    pods: PodPatcher
    events: EventRecorder


@dataclass
class Result:
    status: Status
    errors: list[str] = field(default_factory=list)
    plugin: str = "none"
    written: int = 0  # requests that changed something (PodGroups created/updated + pods patched)
    retry_after: float = 0.0  # for "later"


def is_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def _age(pod: Obj) -> float:
    """Seconds since the pod was created (large when unknown, so nothing waits on a bad timestamp)."""
    ts = str(o.meta(pod).get("creationTimestamp") or "")
    try:
        created = datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return float("inf")
    return time.time() - created


def workload_of_decision(d: Decision, fallback: WorkloadKey) -> WorkloadKey:
    """The workload a decision belongs to: its top owner, else (no owner walk happened) ``fallback``."""
    if d.top_owner is None:
        return fallback
    return WorkloadKey.of_ref(d.top_owner, d.pod_namespace)


def _involved(ref: OwnerRef, namespace: str) -> InvolvedObject:
    return InvolvedObject(ref.api_version, ref.kind, namespace, ref.name, ref.uid)


def _pod_involved(pod: Obj) -> InvolvedObject:
    return InvolvedObject("v1", "Pod", o.namespace(pod), o.name(pod), o.uid(pod))


class Reconciler:
    def __init__(
        self,
        *,
        cache: ClusterCache,
        index: WorkloadIndex,
        grouper: Grouper,
        writers: Writers,
        store: DecisionStore,
        metrics: Metrics,
        enqueue: Callable[[WorkloadKey], None],
        deleted: DeletedOwners,
        pod_patch_concurrency: int = 16,
    ) -> None:
        self.cache, self.index, self.grouper = cache, index, grouper
        self.writer, self.patcher, self.recorder = writers.pod_groups, writers.pods, writers.events
        self.store, self.metrics = store, metrics
        self.enqueue = enqueue
        self.deleted = deleted
        self._patch_sem = asyncio.Semaphore(pod_patch_concurrency)

    async def reconcile(self, wl: WorkloadKey) -> Result:
        t0 = time.monotonic()
        try:
            result = await self._reconcile(wl)
        except NotLeader:
            result = Result("not_leader")
        if result.status != "not_leader":
            self.metrics.reconciles.labels(result=result.status, plugin=result.plugin).inc()
            self.metrics.reconcile_duration.observe(time.monotonic() - t0)
        return result

    # ------------------------------------------------------------------ the steps

    def _live_pods(self, wl: WorkloadKey) -> tuple[list[Obj], int] | None:
        """Pods to decide (sorted by name) and how many terminal ones were skipped; None if none are left."""
        pods_inf = self.cache.informer(POD)
        assert pods_inf is not None
        live: list[Obj] = []
        terminal = 0
        keys = self.index.pods_of(wl)
        for key in keys:
            pod = pods_inf.get(*key)
            if pod is None:
                self.index.remove_pod(key)
                self.store.forget_pod(*key)
            elif is_terminal(pod):
                terminal += 1
            elif self.cache.namespace_allowed(key[0]):
                live.append(pod)
        if not live and not terminal:
            return None
        return sorted(live, key=o.name), terminal

    async def _decide(self, wl: WorkloadKey, pods: list[Obj]) -> tuple[list[tuple[Obj, Decision]], CacheLookups]:
        lookups = self.cache.lookups()
        if self._sandboxed(wl):
            # A cluster Karta runs in a worker process that may take up to its query timeout on a
            # hostile definition: wait for it off the event loop so no other workload, watch or probe
            # stalls. Cache reads from the thread are plain dict lookups, safe under the GIL.
            decided = await asyncio.to_thread(lambda: [(pod, self.grouper.decide(pod, lookups)) for pod in pods])
            return decided, lookups
        out = []
        for i, pod in enumerate(pods):
            out.append((pod, self.grouper.decide(pod, lookups)))
            if i % 64 == 63:
                await asyncio.sleep(0)  # a huge workload must not starve the other workers and the watches
        return out, lookups

    def _sandboxed(self, wl: WorkloadKey) -> bool:
        """Whether the workload's kind is described by a cluster Karta (evaluated in the sandbox)."""
        reg = self.grouper.definitions
        if reg is None or not self.grouper.config.generic_karta_fallback:
            return False
        return any(
            ld.definition.origin.startswith("cluster:")
            and (ld.definition.gvk.group, ld.definition.gvk.kind) == (wl.group, wl.kind)
            for ld in reg.all()
        )

    async def _ensure_kinds(self, kinds: set[GVK]) -> bool:
        """Start informers for kinds grouping asked for; True when every one reached a final state."""
        results = await asyncio.gather(*(self.cache.ensure(gvk) for gvk in sorted(kinds)))
        for gvk, res in zip(sorted(kinds), results, strict=True):
            log.info("informer for %s: %s", gvk, res, extra={"kind": str(gvk)})
        return all(r != "error" for r in results)

    async def _reconcile(self, wl: WorkloadKey) -> Result:
        found = self._live_pods(wl)
        if found is None:
            self.index.forget(wl)
            self.store.forget_workload(str(wl))
            return Result("ok")
        pods, terminal = found
        decided, lookups = await self._decide(wl, pods)
        if lookups.misses:
            return Result(
                "requeue" if await self._ensure_kinds(lookups.misses) else "error",
                [f"cannot watch {', '.join(map(str, sorted(lookups.misses)))}"],
            )

        mine: list[tuple[Obj, Decision]] = []
        deps: set[str] = set(lookups.reads)
        for pod, d in decided:
            actual = workload_of_decision(d, wl)
            if actual != wl:  # the owner chain changed since the pod was indexed
                self.index.set_pod((o.namespace(pod), o.name(pod)), actual)
                self.enqueue(actual)
                continue
            mine.append((pod, d))
            deps.add(o.uid(pod))
            deps.update(str(r.get("uid") or "") for r in o.owner_references(pod))
            deps.update(ref.uid for ref in d.owner_chain)
        self.index.set_dependencies(wl, deps)
        plugin = next((d.plugin for _, d in mine if d.plugin), None) or "none"
        result = Result("ok", plugin=plugin)
        if not mine:
            return result

        workload_ref = next((d.top_owner for _, d in mine if d.top_owner is not None), None)
        workload_obj = (
            _involved(workload_ref, wl.namespace) if workload_ref is not None else _pod_involved(mine[0][0])
        )
        pods_by_name = {o.name(p): p for p, _ in mine}

        # 1. decision errors
        awaiting_gc = 0
        transient_errors = 0
        awaiting_cache = 0
        for pod, d in mine:
            if d.outcome == "error" and d.reason in OWNER_GONE_REASONS and _age(pod) < YOUNG_POD_SECONDS:
                awaiting_cache += 1
                continue
            self.store.record_decision(d, str(wl))
            if (
                d.outcome == "error"
                and d.reason in OWNER_GONE_REASONS
                and self._owner_was_deleted(pod, lookups)
            ):
                awaiting_gc += 1  # its owner was just deleted: the garbage collector removes the pod next
                continue
            if d.outcome == "error":
                log.warning(
                    "pod not grouped: %s",
                    d.message,
                    extra={"pod": d.pod_key, "plugin": d.plugin, "reason": d.reason},
                )
                self.metrics.decision_errors.labels(reason=d.reason).inc()
                result.errors.append(d.message)
                if d.retryable:  # else: a pure function of objects it read; their next change re-queues it
                    transient_errors += 1
                await self._warn(pod, workload_obj, d.message)

        # 2. PodGroups
        grouped = [d for _, d in mine if d.outcome == "grouped" and d.pod_group is not None]
        creation = {
            d.pod_key: str(o.meta(pods_by_name[d.pod_name]).get("creationTimestamp") or "") for d in grouped
        }
        merged = merge_pod_groups(grouped, creation)
        ok_groups: set[str] = set()
        for m in merged:
            md = m.metadata
            with log_context(podgroup=md.name):
                op: str | None = None
                error: str | None = None
                problems = validate_pod_group(md)
                if problems:
                    error = f"PodGroup {md.namespace}/{md.name} not written, it breaks the PodGroup rules: {'; '.join(problems)}"
                    self.metrics.decision_errors.labels(reason="InvalidPodGroup").inc()
                else:
                    try:
                        op = await self.writer.apply(md)
                    except ApiError as e:
                        error = (
                            f"PodGroup {md.namespace}/{md.name}: write failed: {e.status} {e.reason}: {e.message}"
                        )
                self.store.record_pod_group(
                    md.namespace,
                    md.name,
                    workload=str(wl),
                    desired=md.to_object(),
                    operation=op,
                    pods=[d.pod_name for d in m.decisions],
                    notes=m.notes,
                    error=error,
                )
                if error is not None:
                    result.errors.append(error)
                    if op is None and not problems:
                        transient_errors += 1  # the API server refused the write
                    await self.recorder.warn(workload_obj, error)
                    continue
            if op != "unchanged":
                result.written += 1
                log.info("PodGroup %s %s", md.name, op, extra={"podgroup": md.name, "plugin": plugin})
                for warning in md.warnings:  # e.g. semi-preemptible with segments: written, but said
                    await self.recorder.warn(workload_obj, f"PodGroup {md.namespace}/{md.name}: {warning}")
            ok_groups.add(md.name)
        for ns, name in self.index.set_pod_groups(wl, [(m.metadata.namespace, m.metadata.name) for m in merged]):
            self.store.forget_pod_group(ns, name)  # no longer this workload's: not listed as managed

        # 3. pods, concurrently (bounded); only for PodGroups that exist as decided
        todo = [
            (pods_by_name[d.pod_name], d) for d in grouped if d.pod_group and d.pod_group.name in ok_groups
        ]
        outcomes = await asyncio.gather(*(self._patch(pod, d) for pod, d in todo), return_exceptions=True)
        for (pod, _), out in zip(todo, outcomes, strict=True):
            if isinstance(out, NotLeader):
                raise out
            if isinstance(out, BaseException) and not isinstance(out, ApiError):
                raise out
            if isinstance(out, ApiError):
                msg = f"Pod {o.namespace(pod)}/{o.name(pod)}: cannot set its PodGroup: {out.status} {out.reason}: {out.message}"
                self.store.record_pod_error(o.namespace(pod), o.name(pod), msg)
                result.errors.append(msg)
                transient_errors += 1
                await self._warn(pod, workload_obj, msg)
            elif out == "patched":
                result.written += 1

        # 4. PodGroups of this workload that it no longer wants and no pod names (its name changed)
        if not result.errors and workload_ref is not None and not awaiting_gc and not awaiting_cache:
            owners = {workload_ref.uid} | {o.uid(p) for p, _ in mine}  # per-pod PodGroups are owned by pods
            result.written += await self._delete_replaced(wl, owners, {m.metadata.name for m in merged})

        if result.errors:
            result.status = "error" if transient_errors else "failed"
        elif awaiting_cache:
            result.status, result.retry_after = "later", AWAIT_CACHE_SECONDS
        elif awaiting_gc:
            result.status, result.retry_after = "later", AWAIT_GC_SECONDS
        self.store.record_workload(
            str(wl),
            pods=len(mine),
            terminalPods=terminal,
            podGroups=sorted(ok_groups),
            plugin=plugin,
            result=result.status,
            error="; ".join(result.errors[:3]) if result.errors else None,
        )
        return result

    def _owner_was_deleted(self, pod: Obj, lookups: CacheLookups) -> bool:
        """Whether an owner on the pod's chain was deleted moments ago (seen as a DELETED watch event)."""
        cur: Obj | None = pod
        for _ in range(32):
            if cur is None:
                return False
            refs = o.owner_references(cur)
            if any(self.deleted.recently(str(r.get("uid") or "")) for r in refs):
                return True
            ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
            if ref is None:
                return False
            try:
                cur = lookups.get(
                    str(ref.get("apiVersion")), str(ref.get("kind")), o.namespace(pod), str(ref.get("name"))
                )
            except Exception:  # forbidden / not cached: nothing more to learn
                return False
        return False

    async def _delete_replaced(self, wl: WorkloadKey, owners: set[str], wanted: set[str]) -> int:
        """Delete PodGroups owned by the workload (or by one of its pods: the per-pod PodGroup of a pod
        that now belongs to a gang), not wanted by it and named by no pod (all from the caches' indexes)."""
        pgs = self.cache.informer(PODGROUP)
        pods = self.cache.informer(POD)
        if pgs is None or pods is None:
            return 0
        deleted = 0
        candidates = {o.name(pg): pg for uid in owners if uid for pg in pgs.by_index(PODGROUP_OWNER_INDEX, uid)}
        for pg in candidates.values():
            name = o.name(pg)
            if name in wanted or o.namespace(pg) != wl.namespace or self._named_by_a_pod(pods, wl.namespace, name):
                continue
            if self.writer.current(wl.namespace, name) is None:
                continue  # deleted already (our delete not seen yet)
            if await self.writer.delete(wl.namespace, name, o.uid(pg)):
                deleted += 1
                self.store.forget_pod_group(wl.namespace, name)
                log.info("PodGroup %s deleted: replaced", name, extra={"podgroup": name, "workload": str(wl)})
        return deleted

    def _named_by_a_pod(self, pods: Any, namespace: str, pod_group: str) -> bool:
        """Whether any pod names the PodGroup, counting our own patches the cache has not shown yet."""
        for pod in pods.by_index(POD_PODGROUP_INDEX, f"{namespace}/{pod_group}"):
            now = self.patcher.expectations.current("Pod", namespace, o.name(pod), pod) or pod
            if o.annotations(now).get(POD_GROUP_ANNOTATION) == pod_group:
                return True
        return False

    async def _patch(self, pod: Obj, d: Decision) -> Any:
        assert d.pod_group is not None
        async with self._patch_sem:
            res = await self.patcher.ensure(pod, d.pod_group.name, d.sub_group)
        self.store.record_pod_patched(d.pod_namespace, d.pod_name, res)
        return res

    async def _warn(self, pod: Obj, workload: InvolvedObject, message: str) -> None:
        await self.recorder.warn(_pod_involved(pod), message)
        if workload.uid != o.uid(pod):
            await self.recorder.warn(workload, message)
