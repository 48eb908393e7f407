"""Reconcile one workload: decide every live pod, merge per PodGroup, validate, write, patch pods,
and delete the PodGroups of this workload that nothing names any more.

Level-triggered: the input is a key, the state is read from the caches, the output converges the
cluster; running it twice in a row writes nothing the second time. Failures stay with their
workload — a PodGroup the API server rejects, a pod whose decision failed — and are reported as
warning Events (on the pod and on the workload) and in the decision store. Transient failures back
off and retry; a decision error no retry can fix (an owner cycle, a malformed workload), and a write the
API server refuses for good (400/422: :mod:`grouper.writer.failures`), is reported once (one Event per
cause while it stands) and waits for the next change of an object the decision read (the event handlers
re-queue it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from grouper.controller.cache import ABSENT_PREFIX, POD, PODGROUP, CacheLookups, ClusterCache, retry_key
from grouper.controller.decisions import DecisionStore
from grouper.controller.holds import Holds
from grouper.controller.memo import (
    DecisionMemo,
    Group,
    Member,
    WorkloadMemo,
    creation_key,
    decision_signature,
)
from grouper.controller.workloads import DeletedOwners, WorkloadIndex, WorkloadKey
from grouper.core.decision import Decision
from grouper.core.grouping import Grouper, is_terminal  # the one rule for finished pods (plan agrees)
from grouper.core.merge import MergedPodGroup, merge_pod_groups
from grouper.core.owner_chain import SharedChains
from grouper.core.satisfiable import unsatisfiable_reasons
from grouper.core.validation import validate_pod_group
from grouper.kube.transport import ApiError
from grouper.model import objects as o
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import POD_GROUP_ANNOTATION, OwnerRef, PodGroupMetadata
from grouper.observability.logging import log_context
from grouper.observability.metrics import Metrics
from grouper.writer.events import EventRecorder, InvolvedObject
from grouper.writer.failures import failure_message, failure_reason, is_terminal_error
from grouper.writer.podgroups import NotLeader, PodGroupWriter
from grouper.writer.pods import PodPatcher
from grouper.writer.upstream import UpstreamWriter, upstream_desired

log = logging.getLogger(__name__)

# ok | error (retried with back-off) | failed (reported; waits for a change) | requeue | later | not_leader |
# handed_on (its pod patches still in flight, left to the next pass, which is already queued)
Status = Literal["ok", "error", "failed", "requeue", "later", "not_leader", "handed_on"]
OWNER_GONE_REASONS = ("OwnerNotFound", "OwnerUidMismatch")
AWAIT_GC_SECONDS = 5.0
# A pod seconds old whose owner is not in the cache yet: the owner's watch event is usually just behind
# the pod's (two streams). Wait for it quietly instead of reporting a missing owner.
YOUNG_POD_SECONDS = 10.0
AWAIT_CACHE_SECONDS = 1.0
PODGROUP_OWNER_INDEX = "owner-uid"
POD_PODGROUP_INDEX = "pod-group"
PREFETCH_CHUNK = 64  # pods of a Karta workload whose jq goes to the sandbox in one run
# A pass whose workload is queued again (new pods) while its patches are in flight leaves them to the
# next pass once it has run this long: new pods are not held up behind a long pass, and a burst costs a
# pass per this interval at most, not one per pod event (each costs O(pods with an event)).
HAND_ON_AFTER = 0.1


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
    upstream: UpstreamWriter | None = None  # the upstream backend (--backend=upstream) instead of pod_groups


@dataclass
class Result:
    status: Status
    errors: list[str] = field(default_factory=list)
    plugin: str = "none"
    written: int = 0  # requests that changed something (PodGroups created/updated + pods patched)
    retry_after: float = 0.0  # for "later"


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


def _rv(obj: Obj) -> str:
    return str(o.meta(obj).get("resourceVersion") or "")


def decision_dependencies(pod: Obj, d: Decision) -> set[str]:
    """UIDs a decision depends on besides what it read: the pod's owners (also when the walk failed)."""
    deps = {str(r.get("uid") or "") for r in o.owner_references(pod)}
    deps.update(ref.uid for ref in d.owner_chain)
    deps.discard("")
    return deps


def _decides(memo: WorkloadMemo, member: Member, name: str) -> bool:
    """Whether this pod's view is its PodGroup's (the newest pod), or the PodGroup's pods disagree: then
    changing or losing it can change the PodGroup, and only deciding everything again gives the answer."""
    group = memo.groups.get(member.pod_group or "")
    return group is None or group.newest[1] == name or group.disagree


def memo_of(
    plugin: str,
    workload_ref: OwnerRef | None,
    mine: list[tuple[Obj, Decision]],
    merged: list[MergedPodGroup],
    pods: dict[str, Obj],
) -> WorkloadMemo:
    memo = WorkloadMemo(plugin, workload_ref)
    for m in merged:
        newest = m.decisions[-1]  # merge order: creation time, then name
        assert newest.pod_group is not None
        memo.groups[m.metadata.name] = Group(
            newest.pod_group.for_keeping(), creation_key(pods[newest.pod_name]), disagree=bool(m.notes)
        )
    for pod, d in mine:
        if d.outcome == "error":
            memo.dirty.add(d.pod_name)  # decided again on the next pass, like every failed decision
            continue
        grouped = d.outcome == "grouped" and d.pod_group is not None
        memo.place(d.pod_name, Member(
            decision_signature(pod), d.pod_group.name if grouped and d.pod_group else None, d.sub_group, _rv(pod)
        ))
    return memo


@dataclass
class _Flight:
    """A pod patch in flight: started by one pass, collected by the first pass that finds it done."""

    pod: Obj
    pod_group: str
    sub_group: str | None
    task: asyncio.Task[Any]


@dataclass
class _PlannedGroup:
    metadata: PodGroupMetadata  # as it should be written, sub-groups listing their pods
    pods: list[str]
    notes: list[str]
    kept: Group | None = None  # the memo's view of it: skips the write when nothing changed since


@dataclass
class _Plan:
    """What a reconcile writes: the PodGroups, each pod's place, and the decisions made in this pass."""

    plugin: str
    workload_ref: OwnerRef | None
    pods: dict[str, Obj]  # the live pods looked at in this pass, by name (all of them on the full path)
    decided: list[tuple[Obj, Decision]]
    groups: list[_PlannedGroup]
    placement: dict[str, tuple[str, str | None]]  # pod name -> (PodGroup, sub-group), of the pods looked at
    count: int = -1  # the workload's live pods (-1: as many as ``pods``)
    memo: WorkloadMemo | None = None  # kept for the next pass; told what this pass left unsettled

    @property
    def live(self) -> int:
        return len(self.pods) if self.count < 0 else self.count


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
        memo: DecisionMemo | None = None,
        pod_patch_concurrency: int = 16,
        readded: Callable[[WorkloadKey], asyncio.Future[None]] | None = None,
    ) -> None:
        """``readded``: resolves when the workload being reconciled is queued again (the queue's
        :meth:`~grouper.controller.queue.WorkQueue.readded`); without it a pass always waits for its patches."""
        self.cache, self.index, self.grouper = cache, index, grouper
        self.writer, self.patcher, self.recorder = writers.pod_groups, writers.pods, writers.events
        self.upstream = writers.upstream
        self.store, self.metrics = store, metrics
        self.enqueue = enqueue
        self.deleted = deleted
        self.memo = memo if memo is not None else DecisionMemo()
        self._patch_sem = asyncio.Semaphore(pod_patch_concurrency)
        # PodGroup writes have their own budget: a new workload's PodGroup must not queue behind the
        # pod patches of the workloads before it (its own patches wait for it)
        self._group_sem = asyncio.Semaphore(pod_patch_concurrency)
        self.readded = readded
        self._flights: dict[WorkloadKey, dict[str, _Flight]] = {}  # per workload, by pod name
        self.holds = Holds(  # a definition change never silently weakens a running gang (core/hold.py)
            stored_of=self._pod_groups_owned,
            pods_naming=self._pods_naming,
            owner=self._cached_owner,
            definitions=lambda: self.grouper.definitions,
            writer=self.writer,
            recorder=self.recorder,
        )

    async def reconcile(self, wl: WorkloadKey) -> Result:
        t0 = time.monotonic()
        try:
            result = await self._reconcile(wl)
        except NotLeader:
            result = Result("not_leader")
        if result.status != "not_leader":
            self.metrics.child(self.metrics.reconciles, result.status, result.plugin).inc()
            self.metrics.reconcile_duration.observe(time.monotonic() - t0)
        return result

    # ------------------------------------------------------------------ the steps

    def _live_pods(self, wl: WorkloadKey) -> tuple[list[Obj], set[str]] | None:
        """Pods to decide (sorted by name) and the terminal ones skipped; None if none are left."""
        pods_inf = self.cache.informer(POD)
        assert pods_inf is not None
        live: list[Obj] = []
        terminal: set[str] = set()
        keys = self.index.pods_of(wl)
        for key in keys:
            pod = pods_inf.get(*key)
            if pod is None:
                self.index.remove_pod(key)
                self.store.forget_pod(*key)
            elif is_terminal(pod):
                terminal.add(key[1])
            elif self.cache.namespace_allowed(key[0]):
                live.append(pod)
        if not live and not terminal:
            return None
        return sorted(live, key=o.name), terminal

    async def _decide(self, wl: WorkloadKey, pods: list[Obj]) -> tuple[list[tuple[Obj, Decision]], CacheLookups]:
        """Decide each pod; the returned lookups hold what all the decisions read together."""
        seen = self.cache.lookups()
        chains = SharedChains()  # the workload's pods mostly have one owner: walk its chain once
        if self._sandboxed(wl):
            # A Karta's jq runs in a worker process and may take up to its query timeout (a hostile
            # cluster definition, a slow one from --definitions): wait for it off the event loop so no
            # other workload, watch or probe stalls. Cache reads from the thread are plain dict lookups,
            # safe under the GIL. Each chunk's pod expressions go to the sandbox in one run.
            def decide_all() -> list[tuple[Obj, Decision]]:
                out: list[tuple[Obj, Decision]] = []
                for i in range(0, len(pods), PREFETCH_CHUNK):
                    chunk = pods[i : i + PREFETCH_CHUNK]
                    self.grouper.prefetch(chunk, self.cache.lookups())
                    chains.clear()  # the event loop runs on meanwhile: the cache may have changed
                    out.extend((pod, self._decide_one(pod, seen, chains)) for pod in chunk)
                return out

            return await asyncio.to_thread(decide_all), seen
        out = []
        for i, pod in enumerate(pods):
            out.append((pod, self._decide_one(pod, seen, chains)))
            if i % 64 == 63:
                await asyncio.sleep(0)  # a huge workload must not starve the other workers and the watches
                chains.clear()  # (which may have changed the cache meanwhile)
        return out, seen

    def _decide_one(self, pod: Obj, seen: CacheLookups, chains: SharedChains | None = None) -> Decision:
        """One decision, its reads added to ``seen``. An object a *failed* decision looked for and did not
        find (a pod's owner whose watch event is still behind) is recorded as a retry key: its arrival
        re-queues the workload without discarding the decisions its other pods already have."""
        lookups = self.cache.lookups()
        d = self.grouper.decide(pod, lookups, chains)  # a shared chain's reads are the first sibling's, in seen
        seen.misses |= lookups.misses
        seen.refused |= lookups.refused
        seen.listed_pods = seen.listed_pods or lookups.listed_pods
        if d.outcome == "error":
            seen.reads.update(retry_key(r) if r.startswith(ABSENT_PREFIX) else r for r in lookups.reads)
        else:
            seen.reads |= lookups.reads
        return d

    def _sandboxed(self, wl: WorkloadKey) -> bool:
        """Whether a Karta definition decides the workload's kind (its jq is evaluated in the sandbox)."""
        return (wl.group, wl.kind) in self.grouper.hub.karta_kinds()

    async def _ensure_kinds(self, kinds: set[GVK]) -> bool:
        """Start informers for kinds grouping asked for; True when every one reached a final state."""
        results = await asyncio.gather(*(self.cache.ensure(gvk) for gvk in sorted(kinds)))
        for gvk, res in zip(sorted(kinds), results, strict=True):
            log.info("informer for %s: %s", gvk, res, extra={"kind": str(gvk)})
        return all(r != "error" for r in results)

    async def _reconcile(self, wl: WorkloadKey) -> Result:
        memo = self.memo.get(wl)
        plan = await self._plan_incremental(wl, memo) if memo is not None else None
        terminal = len(memo.terminal) if plan is not None and memo is not None else 0
        if plan is None:
            found = self._live_pods(wl)
            if found is None:
                self._flights.pop(wl, None)  # their pods are gone; the tasks end on their own
                self.index.forget(wl)
                self.store.forget_workload(str(wl))
                self.memo.invalidate(wl)
                return Result("ok")
            pods, terminal_pods = found
            full = await self._plan_full(wl, pods, terminal_pods)
            if isinstance(full, Result):
                return full
            plan, terminal = full, len(terminal_pods)
        return await self._apply(wl, plan, terminal)

    async def predecide(self, wl: WorkloadKey) -> int:
        """Decide every live pod of ``wl`` and keep the decisions (memo and records), writing nothing: what a
        replica does while it waits for the lease, so its first pass as leader only compares the cluster
        with them. Every pod is left to look at (its mark is not confirmed), like a pass that wrote nothing.
        The number of pods decided (0: nothing to keep — no pods, or the full path must handle it)."""
        if self.memo.get(wl) is not None:
            return 0
        found = self._live_pods(wl)
        if found is None:
            return 0
        pods, terminal = found
        plan = await self._plan_full(wl, pods, terminal)
        if isinstance(plan, Result) or plan.memo is None:
            return 0
        for _, d in plan.decided:
            if d.outcome != "error":  # a failed one is decided again and reported by the leader's pass
                self.store.record_decision(d, str(wl))
        plan.memo.dirty.update(plan.pods)
        return len(plan.decided)

    # ------------------------------------------------------------------ deciding: all pods, or what changed

    async def _plan_full(self, wl: WorkloadKey, pods: list[Obj], terminal: set[str]) -> _Plan | Result:
        """Decide every live pod of the workload and merge per PodGroup; remember it for the next pass."""
        self.memo.invalidate(wl)
        self.metrics.child(self.metrics.pods_examined, "full").inc(len(pods))
        decided, lookups = await self._decide(wl, pods)
        self.metrics.child(self.metrics.decisions, "full").inc(len(pods))
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
                self.memo.touch(actual, o.name(pod))  # news for the workload it belongs to now
                self.enqueue(actual)
                continue
            mine.append((pod, d))
            deps.update(decision_dependencies(pod, d))
        self.index.set_dependencies(wl, deps)
        plugin = next((d.plugin for _, d in mine if d.plugin), None) or "none"
        if not mine:
            return Result("ok", plugin=plugin)
        workload_ref = next((d.top_owner for _, d in mine if d.top_owner is not None), None)
        pods_by_name = {o.name(p): p for p, _ in mine}
        grouped = [d for _, d in mine if d.outcome == "grouped" and d.pod_group is not None]
        creation = {d.pod_key: creation_key(pods_by_name[d.pod_name])[0] for d in grouped}
        merged = merge_pod_groups(grouped, creation)
        plan = _Plan(
            plugin=plugin,
            workload_ref=workload_ref,
            pods=pods_by_name,
            decided=mine,
            groups=[_PlannedGroup(m.metadata, [d.pod_name for d in m.decisions], m.notes) for m in merged],
            placement={d.pod_name: (d.pod_group.name, d.sub_group) for d in grouped if d.pod_group is not None},
        )
        if wl.kind != "Pod" and not lookups.listed_pods:
            memo = memo_of(plugin, workload_ref, mine, merged, pods_by_name)
            memo.terminal = terminal
            # Pods that arrived or changed while deciding had no memo to note their events in
            pods_inf = self.cache.informer(POD)
            assert pods_inf is not None
            for ns, name in self.index.pods_of(wl):
                member, now = memo.members.get(name), pods_inf.get(ns, name)
                if (now is None or member is None or member.version != _rv(now)) and name not in terminal:
                    memo.dirty.add(name)
            self.memo.put(wl, memo)
            plan.memo = memo
            for g in plan.groups:
                g.kept = memo.groups.get(g.metadata.name)
        return plan

    async def _plan_incremental(self, wl: WorkloadKey, memo: WorkloadMemo) -> _Plan | None:
        """Look only at the pods with an event since the last pass (and those it left unsettled): decide
        the new or changed ones and place them into the PodGroups decided before. None when that cannot
        give the same answer as deciding everything (a PodGroup's deciding pod left or changed, a decision
        moved or read other pods, no pod is left)."""
        pods_inf = self.cache.informer(POD)
        assert pods_inf is not None
        # A safety net under the handlers' bookkeeping: a pod the index puts in this workload that the memo
        # never heard of (no place, not finished, no event noted) means deciding everything again.
        known = len(memo.members) + len(memo.terminal)
        known += sum(1 for n in memo.dirty if n not in memo.members and n not in memo.terminal)
        if self.index.pod_count(wl) > known:
            return self._fall_back(wl)
        dirty, memo.dirty = memo.dirty, set()  # events from here on are the next pass's
        self.metrics.child(self.metrics.pods_examined, "incremental").inc(len(dirty))
        live: dict[str, Obj] = {}
        gone: list[str] = []
        for name in sorted(dirty):
            key = (wl.namespace, name)
            pod = pods_inf.get(*key)
            if pod is None:
                if self.index.workload_of(key) == wl:
                    self.index.remove_pod(key)
                    self.store.forget_pod(*key)
                memo.terminal.discard(name)
                gone.append(name)
            elif self.index.workload_of(key) != wl:
                memo.terminal.discard(name)
                gone.append(name)  # it belongs to another workload now
            elif is_terminal(pod):
                memo.terminal.add(name)
                gone.append(name)
            elif self.cache.namespace_allowed(key[0]):
                live[name] = pod
            else:
                gone.append(name)
        fresh: list[tuple[Obj, int]] = []
        for name, pod in live.items():
            member = memo.members.get(name)
            version = _rv(pod)
            if member is not None and member.version == version:
                continue  # the very object decided last time
            sig = decision_signature(pod)
            if member is not None and member.signature == sig:
                memo.members[name] = member._replace(version=version)  # e.g. our own patch: no change
                continue
            if member is not None and member.pod_group is not None and _decides(memo, member, name):
                return self._fall_back(wl)
            fresh.append((pod, sig))
        for name in gone:
            member = memo.members.get(name)
            if member is not None and member.pod_group is not None and _decides(memo, member, name):
                return self._fall_back(wl)
        decided: list[tuple[Obj, Decision]] = []
        if fresh:
            decided, lookups = await self._decide(wl, [p for p, _ in fresh])
            if self.memo.get(wl) is not memo or lookups.misses or lookups.listed_pods:
                return self._fall_back(wl)  # invalidated while deciding, or the full path must handle it
            if any(workload_of_decision(d, wl) != wl for _, d in decided):
                return self._fall_back(wl)
            self.metrics.child(self.metrics.decisions, "incremental").inc(len(decided))
            deps = set(lookups.reads)
            for pod, d in decided:
                deps.update(decision_dependencies(pod, d))
            self.index.add_dependencies(wl, deps)
        for name in gone:
            memo.unplace(name)
        errors: set[str] = set()
        for (pod, sig), (_, d) in zip(fresh, decided, strict=True):
            name = o.name(pod)
            if d.outcome == "error":
                memo.unplace(name)
                memo.dirty.add(name)  # decided again next time, like every failed decision
                errors.add(name)
                continue
            if d.outcome == "grouped" and d.pod_group is not None:
                group = memo.groups.get(d.pod_group.name)
                if group is None:
                    memo.groups[d.pod_group.name] = Group(d.pod_group.for_keeping(), creation_key(pod))
                else:
                    group.offer(d.pod_group, creation_key(pod))
                memo.place(name, Member(sig, d.pod_group.name, d.sub_group, _rv(pod)))
            else:
                memo.place(name, Member(sig, None, None, _rv(pod)))
            if d.plugin:
                memo.plugin = d.plugin
            if d.top_owner is not None:
                memo.workload_ref = d.top_owner
        if not memo.members:
            # nothing kept is left to place (the pods decided before are gone; new ones, if any, failed): the
            # plugin and workload the memo names came from pods no longer there, so the full path decides
            # (found by the planning property: tests/controller/test_plan_property.py)
            return self._fall_back(wl)
        if memo.workload_ref is None:
            return self._fall_back(wl)
        return self._plan_of_memo(wl, memo, live, decided, errors)

    def _fall_back(self, wl: WorkloadKey) -> _Plan | None:
        """Forget what was kept: the caller decides every pod again."""
        self.memo.invalidate(wl)
        return None

    def _plan_of_memo(
        self,
        wl: WorkloadKey,
        memo: WorkloadMemo,
        live: dict[str, Obj],
        decided: list[tuple[Obj, Decision]],
        errors: set[str],
    ) -> _Plan:
        """The plan of a pass that looked at ``live`` only: every PodGroup of the workload (a member set
        each, kept up to date), placements of the pods looked at."""
        placement: dict[str, tuple[str, str | None]] = {}
        pods: dict[str, Obj] = {}
        for name, pod in live.items():
            m = memo.members.get(name)
            if m is not None or name in errors:
                pods[name] = pod
            if m is not None and m.pod_group is not None:
                placement[name] = (m.pod_group, m.sub_group)
        for pg in [pg for pg, g in memo.groups.items() if not g.members]:
            del memo.groups[pg]  # no pod names it any more
        groups: list[_PlannedGroup] = []
        for pg in sorted(memo.groups):
            g = memo.groups[pg]
            names = sorted(g.members)
            md = g.metadata  # written as it is (no pod lists); the upstream backend needs them filled
            if self.upstream is not None:
                md = md.copy_without_pods()
                by_sg = {sg.name: sg for sg in md.sub_groups}
                for name in names:
                    sub = memo.members[name].sub_group
                    if sub and sub in by_sg:
                        by_sg[sub].pods.append(name)
            notes = (
                [f"pods disagree on the spec; used the view of the newest pod {wl.namespace}/{g.newest[1]}"]
                if g.disagree else []
            )
            groups.append(_PlannedGroup(md, names, notes, g))
        return _Plan(
            memo.plugin, memo.workload_ref, pods, decided, groups, placement,
            count=len(memo.members) + len(errors), memo=memo,
        )

    # ------------------------------------------------------------------ writing what was decided

    async def _apply(self, wl: WorkloadKey, plan: _Plan, terminal: int) -> Result:
        plugin = plan.plugin
        result = Result("ok", plugin=plugin)
        workload_ref = plan.workload_ref
        if workload_ref is not None:
            workload_obj = _involved(workload_ref, wl.namespace)
        elif plan.pods:
            workload_obj = _pod_involved(plan.pods[min(plan.pods)])
        else:
            return result
        lookups = self.cache.lookups()
        held = (
            await self.holds.apply(wl.namespace, workload_ref, plan.groups, plan.placement, plan.pods, plan.decided)
            if workload_ref is not None and self.upstream is None
            else None
        )
        if held is not None and held.names:  # its placement is the hold's, not the memo's: decide all next time
            self.memo.invalidate(wl)
            plan.memo = None

        # 1. decision errors (of the pods decided in this pass; kept decisions never failed)
        awaiting_gc = 0
        transient_errors = 0
        awaiting_cache = 0
        for pod, d in plan.decided:
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

        # 2. PodGroups, concurrently (bounded): a workload of many PodGroups (a LeaderWorkerSet's groups)
        # had them written one after the other, and its pods' patches waited for the last
        ok_groups: set[str] = set()
        writes: list[_PlannedGroup] = []
        for g in plan.groups:
            if g.kept is not None and g.kept.written is not None and g.kept.written == self._stored(g):
                ok_groups.add(g.metadata.name)  # written as decided, untouched since, same members: nothing to do
            else:
                writes.append(g)
        written = await asyncio.gather(*(self._write_group(wl, plan, g) for g in writes))
        for g, (op, error, retryable) in zip(writes, written, strict=True):
            md = g.metadata
            cause = f"PodGroup/{md.name}"
            if error is not None:
                result.errors.append(error)
                transient_errors += retryable
                await self.recorder.report(workload_obj, cause, error)  # once while it stands, not per retry
                continue
            self.recorder.clear(workload_obj, cause)
            if op != "unchanged":
                result.written += 1
                log.info("PodGroup %s %s", md.name, op, extra={"podgroup": md.name, "plugin": plugin})
                for warning in md.warnings:  # e.g. semi-preemptible with segments, metadata not copied: said
                    log.warning("PodGroup %s/%s: %s", md.namespace, md.name, warning, extra={"podgroup": md.name})
                    await self.recorder.warn(workload_obj, f"PodGroup {md.namespace}/{md.name}: {warning}")
            ok_groups.add(md.name)
            if g.kept is not None:
                g.kept.written = self._stored(g)
        touched = {pg for pg, _ in plan.placement.values()} | {g.metadata.name for g in writes}
        for g in plan.groups:
            if g.metadata.name in ok_groups and g.metadata.name in touched:
                await self._say_unsatisfiable(workload_obj, g, plan.memo)
        kept = sorted(held.names) if held is not None else []
        ok_groups.update(kept)  # stored as they are: their pods can be placed
        for name in kept:
            self._record_held(wl, name, held)
        mine = [(g.metadata.namespace, g.metadata.name) for g in plan.groups] + [(wl.namespace, n) for n in kept]
        for ns, name in self.index.set_pod_groups(wl, mine):
            self.store.forget_pod_group(ns, name)  # no longer this workload's: not listed as managed

        # 3. pods, concurrently (bounded); only for PodGroups that exist as decided. The upstream backend
        # patches no pod: a pod joins its group by spec.schedulingGroup, set only at creation (the webhook).
        # Patches an earlier pass handed on are collected first: their failures are this pass's.
        memo = plan.memo
        if memo is not None:  # placed in a PodGroup that is not written as decided: look again next pass
            memo.dirty.update(name for name, (pg, _) in plan.placement.items() if pg not in ok_groups)
        flights = self._flights.setdefault(wl, {})
        failed = self._collect(wl, flights, result)
        started = time.monotonic()
        if self.upstream is None:
            loop = asyncio.get_running_loop()  # once per pass (each lookup is a getpid() call on 3.11)
            for name, (pg, sub) in plan.placement.items():
                if pg not in ok_groups:
                    continue
                flight = flights.get(name)
                if flight is not None and (flight.pod_group, flight.sub_group) == (pg, sub):
                    continue  # on its way: a pass that handed on started it
                if flight is not None:  # on its way to another group (decided again meanwhile): let it land
                    await asyncio.wait([flight.task])
                    failed += self._collect(wl, flights, result)
                pod = plan.pods[name]
                if self.patcher.needed(pod, pg, sub):
                    flights[name] = _Flight(pod, pg, sub, loop.create_task(self._patch(pod, pg, sub)))
                else:
                    self._note_unchanged(pod)
        # Only a kept memo can hand on: it notes what a later failure leaves to do (the pod looked at again)
        if memo is not None and await self._hand_on(wl, flights, started, bool(result.errors or failed)):
            memo.cleanup_owed.update(o.uid(p) for p in plan.pods.values())  # step 4 is the next pass's,
            # as is the record of the workload
            result.status = "handed_on"
            return result
        if flights:
            await asyncio.wait([f.task for f in flights.values()])
        failed += self._collect(wl, flights, result)
        if not flights:
            self._flights.pop(wl, None)
        transient_errors += sum(1 for _, _, retryable in failed if retryable)
        for pod, msg, _ in failed:
            await self.recorder.report(_pod_involved(pod), "PodPatch", msg)
            if workload_obj.uid != o.uid(pod):
                await self.recorder.report(workload_obj, f"Pod/{o.name(pod)}", msg)

        # 4. PodGroups of this workload that it no longer wants and no pod names (its name changed)
        if (
            not result.errors
            and workload_ref is not None
            and not awaiting_gc
            and not awaiting_cache
            and self.upstream is None
        ):
            # per-pod PodGroups are owned by pods: those looked at in this pass, and those of passes that
            # skipped this step (the others were looked at when they were)
            owners = {workload_ref.uid} | {o.uid(p) for p in plan.pods.values()}
            if memo is not None:
                owners |= memo.cleanup_owed
            wanted = {g.metadata.name for g in plan.groups} | set(kept)
            result.written += await self._delete_replaced(wl, owners, wanted)
            if memo is not None:
                memo.cleanup_owed = set()
        elif memo is not None:
            memo.cleanup_owed.update(o.uid(p) for p in plan.pods.values())

        if result.errors:
            result.status = "error" if transient_errors else "failed"
        elif awaiting_cache:
            result.status, result.retry_after = "later", AWAIT_CACHE_SECONDS
        elif awaiting_gc:
            result.status, result.retry_after = "later", AWAIT_GC_SECONDS
        self.store.record_workload(
            str(wl),
            pods=plan.live,
            terminalPods=terminal,
            podGroups=sorted(ok_groups),
            plugin=plugin,
            result=result.status,
            error="; ".join(result.errors[:3]) if result.errors else None,
        )
        return result

    async def _say_unsatisfiable(self, workload_obj: InvolvedObject, g: _PlannedGroup,
                                 memo: WorkloadMemo | None) -> None:
        """A gang that can never be scheduled as it stands (``core/satisfiable.py``, the rules ``grouper
        plan`` and ``explain`` print): one Warning Event on the workload while the reason stands, none once
        it is gone. An empty sub-group counts only when the PodGroup has as many pods as its leaf minimums
        add up to: while a workload's pods are still being created, an empty sub-group proves nothing."""
        md = g.metadata
        members: dict[str | None, list[str]] = {}
        if memo is not None and g.kept is not None:  # the memo's member set: sub-groups list no pods
            for name in g.pods:
                m = memo.members.get(name)
                members.setdefault(m.sub_group if m is not None else None, []).append(name)
        else:
            placed: set[str] = set()
            for sg in md.sub_groups:
                if sg.pods:
                    members.setdefault(sg.name, []).extend(sg.pods)
                    placed.update(sg.pods)
            loose = [n for n in g.pods if n not in placed]
            if loose:
                members[None] = loose
        parents = {sg.parent for sg in md.sub_groups if sg.parent}
        need = sum(sg.min_member or 0 for sg in md.sub_groups if sg.name not in parents)
        reasons = unsatisfiable_reasons(md, members, complete=len(g.pods) >= need)
        cause = f"Unsatisfiable/{md.name}"
        if not reasons:
            self.recorder.clear(workload_obj, cause)
            return
        message = "; ".join(reasons)
        if await self.recorder.report(workload_obj, cause, message):
            log.warning("%s", message, extra={"podgroup": md.name})

    async def _write_group(self, wl: WorkloadKey, plan: _Plan, g: _PlannedGroup) -> tuple[str | None, str | None, bool]:
        """Write one planned PodGroup and record it: (operation, error, whether the error is retryable — the
        API server's answer may change with time: :mod:`grouper.writer.failures`)."""
        md = g.metadata
        with log_context(podgroup=md.name):
            op: str | None = None
            error: str | None = None
            retryable = False  # a PodGroup that breaks the rules waits for a change of its input
            desired, notes = md.to_object(), g.notes
            problems = validate_pod_group(md)
            if problems:
                error = f"PodGroup {md.namespace}/{md.name} not written, it breaks the PodGroup rules: {'; '.join(problems)}"
                self.metrics.decision_errors.labels(reason="InvalidPodGroup").inc()
            else:
                try:
                    async with self._group_sem:
                        if self.upstream is not None:
                            members = self._pods_named(wl, plan, g.pods)
                            op, up = await self.upstream.apply(md, members)
                            desired, notes = upstream_desired(up), [*g.notes, *up.notes]
                        else:
                            op = await self.writer.apply(md)
                except ApiError as e:
                    retryable = not is_terminal_error(e)
                    error = f"PodGroup {md.namespace}/{md.name}: write failed: {failure_message(e)}"
                    self.metrics.child(
                        self.metrics.write_failures, "podgroups", failure_reason(e), "retryable" if retryable else "terminal"
                    ).inc()
                    log.warning("%s", error, extra={"podgroup": md.name, "retrying": retryable})
            self.store.record_pod_group(
                md.namespace, md.name, workload=str(wl), desired=desired, operation=op, pods=g.pods, notes=notes,
                error=error, stored=op is not None or self._stored(g) is not None,
            )
        return op, error, retryable

    def _record_held(self, wl: WorkloadKey, name: str, held: Any) -> None:
        stored = self.writer.current(wl.namespace, name)
        pods = sorted(p for p, h in held.pods.items() if h.pod_group == name)
        message = next((h.message for h in held.pods.values() if h.pod_group == name), "held")
        self.store.record_pod_group(
            wl.namespace, name, workload=str(wl), desired=stored, operation="held", pods=pods, notes=[message]
        )

    def _cached_owner(self, ref: OwnerRef, namespace: str) -> Obj | None:
        try:
            return self.cache.lookups().get(ref.api_version, ref.kind, namespace, ref.name)
        except Exception:  # not cached / not allowed: no generation to compare, nothing is held
            return None

    def _pod_groups_owned(self, namespace: str, uid: str) -> list[Obj]:
        pgs = self.cache.informer(PODGROUP)
        if pgs is None:
            return []
        return [pg for pg in pgs.by_index(PODGROUP_OWNER_INDEX, uid) if o.namespace(pg) == namespace]

    def _pods_naming(self, namespace: str, pod_group: str) -> list[Obj]:
        pods = self.cache.informer(POD)
        return list(pods.by_index(POD_PODGROUP_INDEX, f"{namespace}/{pod_group}")) if pods is not None else []

    def _pods_named(self, wl: WorkloadKey, plan: _Plan, names: list[str]) -> list[Obj]:
        """The named pods: looked at in this pass, else as the cache has them."""
        pods_inf = self.cache.informer(POD)
        out: list[Obj] = []
        for name in names:
            pod = plan.pods.get(name) or (pods_inf.get(wl.namespace, name) if pods_inf is not None else None)
            if pod is not None:
                out.append(pod)
        return out

    def _stored(self, g: _PlannedGroup) -> tuple[str, tuple[str, ...]] | None:
        """(resourceVersion of the PodGroup as it is now, its planned members); None when it is not stored."""
        now = self.writer.current(g.metadata.namespace, g.metadata.name)
        rv = _rv(now) if now is not None else ""
        return (rv, tuple(g.pods)) if rv else None

    def _note_unchanged(self, pod: Obj) -> None:
        """Record "unchanged" once for a pod already marked (e.g. by an earlier run of the grouper)."""
        if self.store.unpatched_record(o.namespace(pod), o.name(pod)):
            self.store.record_pod_patched(o.namespace(pod), o.name(pod), "unchanged")

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

    async def _hand_on(self, wl: WorkloadKey, flights: dict[str, _Flight], started: float, failing: bool) -> bool:
        """Wait for the workload's patches in flight; True when the rest is handed on to the next pass: the
        workload was queued again (new pods) and this pass has run ``HAND_ON_AFTER`` seconds. A failing
        pass waits for everything, so its result counts every failure."""
        remaining = [f.task for f in flights.values() if not f.task.done()]
        if not remaining or self.readded is None or failing:
            return False
        readded = self.readded(wl)
        # one future for all of them: waking on each patch's answer would cost O(patches) every time
        landed: asyncio.Future[Any] = asyncio.gather(*remaining, return_exceptions=True)
        await asyncio.wait([landed, readded], return_when=asyncio.FIRST_COMPLETED)
        if landed.done():
            return False
        left = started + HAND_ON_AFTER - time.monotonic()
        if left > 0:
            await asyncio.wait([landed], timeout=left)
        return not landed.done()

    def _collect(self, wl: WorkloadKey, flights: dict[str, _Flight], result: Result) -> list[tuple[Obj, str, bool]]:
        """Take the finished patches out of ``flights`` into ``result``; returns the failed ones (pod,
        message, retryable), each looked at again by the next pass. Raises ``NotLeader`` when a patch found
        the lease lost."""
        failed: list[tuple[Obj, str, bool]] = []
        for name in [n for n, f in flights.items() if f.task.done()]:
            flight = flights.pop(name)
            if flight.task.cancelled():
                self.memo.touch(wl, name)  # shut down mid-way: whoever reconciles it next patches it
                continue
            out = flight.task.exception()
            if isinstance(out, NotLeader):
                raise out
            if out is not None and not isinstance(out, ApiError):
                raise out
            pod = flight.pod
            if isinstance(out, ApiError):
                self.memo.touch(wl, name)
                msg = f"Pod {o.namespace(pod)}/{o.name(pod)}: cannot set its PodGroup: {failure_message(out)}"
                retryable = not is_terminal_error(out)
                self.metrics.child(
                    self.metrics.write_failures, "pods", failure_reason(out), "retryable" if retryable else "terminal"
                ).inc()
                self.store.record_pod_patch_failed(o.namespace(pod), o.name(pod), msg)
                result.errors.append(msg)
                failed.append((pod, msg, retryable))
            else:
                self.recorder.clear(_pod_involved(pod), "PodPatch")
                if flight.task.result() == "patched":
                    result.written += 1
        return failed

    async def settle(self, timeout: float = 0.0) -> None:
        """Let the patches that passes handed on finish (up to ``timeout`` seconds), then cancel the rest:
        on shutdown and when leadership ends, after the workers stopped."""
        tasks = [f.task for flights in self._flights.values() for f in flights.values() if not f.task.done()]
        self._flights.clear()
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout) if timeout > 0 else (set(), set(tasks))
        for t in pending:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _patch(self, pod: Obj, pod_group: str, sub_group: str | None) -> Any:
        async with self._patch_sem:
            res = await self.patcher.ensure(pod, pod_group, sub_group)
        self.store.record_pod_patched(o.namespace(pod), o.name(pod), res)
        return res

    async def _warn(self, pod: Obj, workload: InvolvedObject, message: str) -> None:
        await self.recorder.warn(_pod_involved(pod), message)
        if workload.uid != o.uid(pod):
            await self.recorder.warn(workload, message)
