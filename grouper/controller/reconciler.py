"""Reconcile one workload: plan it (every live pod's decision, kept or new, merged per PodGroup), write
its PodGroups, send its pods' patches on their way, and delete the PodGroups of this workload that
nothing names any more.

Level-triggered: the input is a key, the state is read from the caches; running it twice in a row writes
nothing the second time. The plan comes from the one planning path (:mod:`grouper.core.workload_plan`), with
the decisions the last plan kept (:mod:`.plans`). Pod patches are fire-and-track: a pass never waits for one;
a workload's last patch landing queues it again for what the pass left owed (a replaced PodGroup, a pod decided
again while its patch flew, a pass put off meanwhile: :meth:`Reconciler._coalesce`). Failures stay with their
workload, reported as warning Events and in the decision store: transient ones back off; one no retry can fix
(an owner cycle, a write refused for good: :mod:`grouper.writer.failures`) waits for a change of its inputs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from grouper.controller.holds import Holds
from grouper.controller.plans import PlanCache
from grouper.controller.queue import WorkQueue
from grouper.controller.tuning import DEFAULT_TUNING, Tuning
from grouper.controller.workloads import DeletedOwners, WorkloadIndex, WorkloadKey
from grouper.core.decision import Decision
from grouper.core.gang_state import parse_time
from grouper.core.grouping import Grouper, is_terminal  # the one rule for finished pods (plan agrees)
from grouper.core.hold import Held
from grouper.core.owner_chain import OWNER_GONE_REASONS, deleted_on_chain
from grouper.core.satisfiable import plan_reasons
from grouper.core.step_aside import STEP_ASIDE_REASONS
from grouper.core.validation import validate_pod_group
from grouper.core.workload_context import WorkloadContext
from grouper.core.workload_plan import PlannedGroup, WorkloadPlan, assemble, to_decide, update
from grouper.kube.cache import (
    POD,
    POD_OWNED_INDEX,
    POD_PODGROUP_INDEX,
    PODGROUP,
    PODGROUP_DEFINED_INDEX,
    PODGROUP_OWNER_INDEX,
    Absent,
    CacheLookups,
    ClusterCache,
    Dependency,
)
from grouper.kube.cooperative import Cooperative
from grouper.kube.lookup_snapshot import Hints, LookupSnapshot, decide_off_loop
from grouper.kube.transport import ApiError
from grouper.model import objects as o
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import POD_GROUP_ANNOTATION, OwnerRef
from grouper.observability.logging import log_context
from grouper.observability.metrics import Metrics
from grouper.records.decisions import DecisionStore
from grouper.writer.events import EventRecorder, InvolvedObject
from grouper.writer.failures import failure_message, failure_reason, is_terminal_error
from grouper.writer.podgroups import NotLeader, PodGroupWriter
from grouper.writer.pods import Landed, PatchResult, PodPatcher
from grouper.writer.upstream import UpstreamWriter, upstream_desired

log = logging.getLogger(__name__)

# what a Result is called in metrics and logs: ok | error (retried with back-off) | failed (terminal: waits
# for a change) | requeue (again at once or after a delay, no error) | not_leader (not counted)
Status = Literal["ok", "error", "failed", "requeue", "not_leader"]


@dataclass
class Writers:
    """Everything a reconcile writes through (each gated on leadership)."""

    pod_groups: PodGroupWriter
    pods: PodPatcher
    events: EventRecorder
    upstream: UpstreamWriter | None = None  # the upstream backend (--backend=upstream) instead of pod_groups


@dataclass
class Result:
    """controller-runtime's ``reconcile.Result`` and its error, in one. ``errors``: what failed, retried
    with back-off unless ``terminal`` (controller-runtime's ``TerminalError``: retried only when an input
    changes); ``requeue_after``: queue the workload again after this many seconds (0: at once; None: not
    by this result)."""

    errors: list[str] = field(default_factory=list)
    terminal: bool = False
    requeue_after: float | None = None
    plugin: str = "none"
    written: int = 0  # requests that changed something (PodGroups created/updated/deleted + patches sent)
    deferred: bool = False  # replaced PodGroups are deleted once the workload's patches in flight land
    not_leader: bool = False  # a write found the lease lost: whoever leads next does it

    @property
    def status(self) -> Status:
        if self.not_leader:
            return "not_leader"
        if self.errors:
            return "failed" if self.terminal else "error"
        return "ok" if self.requeue_after is None else "requeue"


def _rv(obj: Obj) -> str:
    return str(o.meta(obj).get("resourceVersion") or "")


def decision_dependencies(pod: Obj, d: Decision) -> set[str]:
    """UIDs a decision depends on besides what it read: the pod's owners (also when the walk failed)."""
    deps = {str(r.get("uid") or "") for r in o.owner_references(pod)}
    deps.update(ref.uid for ref in d.owner_chain)
    deps.discard("")
    return deps


class Groups(Protocol):
    """What a pass asks of the WorkloadGroups (``controller/workload_groups.py``)."""

    def handles(self, wl: WorkloadKey) -> bool:
        """Whether ``wl`` is a WorkloadGroup's own key (reconciled there, not here)."""
        ...

    async def reconcile(self, wl: WorkloadKey) -> Result: ...

    def claim(self, wl: WorkloadKey, plan: WorkloadPlan) -> bool:
        """Whether a member workload's group writes for it (its pass then writes nothing of its own)."""
        ...

    def gone(self, wl: WorkloadKey) -> None:
        """``wl`` has no pods left: its group (if any) looks again."""
        ...


@dataclass
class _PatchFailure:
    message: str
    retryable: bool


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
        queue: WorkQueue[WorkloadKey],
        deleted: DeletedOwners,
        plans: PlanCache | None = None,
        pod_group_concurrency: int = 16,
        incremental: bool = True,
        tuning: Tuning = DEFAULT_TUNING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``queue``: where a pass queues other workloads (a pod moved to another, the last patch of a workload
        landed) and, with back-off, a workload whose pod patch failed after its pass ended. ``incremental``:
        a pass starts from the last plan carried out and looks again only at the pods touched since
        (False: every pass plans every pod — the definition the planning property test holds it to)."""
        self.cache, self.index, self.grouper = cache, index, grouper
        self.writer, self.patcher, self.recorder = writers.pod_groups, writers.pods, writers.events
        self.upstream = writers.upstream
        self.store, self.metrics, self.queue, self.deleted = store, metrics, queue, deleted
        self.plans = plans if plans is not None else PlanCache()
        self.incremental, self.tuning, self._clock = incremental, tuning, clock
        # PodGroup writes have their own budget: a new workload's PodGroup must not queue behind the
        # pod patches of the workloads before it (its own patches wait for it)
        self._group_sem = asyncio.Semaphore(pod_group_concurrency)
        self._in_flight: dict[WorkloadKey, int] = {}  # pod patches on their way, per workload
        self._owed: set[WorkloadKey] = set()  # queue again when their last patch lands (deletes deferred)
        self._put_off: dict[WorkloadKey, float] = {}  # passes put off while patches fly (owed): since when
        self.passes = 0  # passes run since start (put-off ones are none): the heap keeper's measure of work
        self._owed_pods: dict[tuple[str, str], WorkloadKey] = {}  # pod decided again while its patch flew
        # PodGroups each workload's passes moved pods away from (replaced): deleted once no pod names them
        self._moving: dict[WorkloadKey, set[str]] = {}
        self._patch_failures: dict[WorkloadKey, dict[str, _PatchFailure]] = {}  # pod name -> its last failure
        self._snapshot_hints = Hints()  # what a Karta kind's passes asked of the loop from their thread
        self.holds = Holds(  # a definition change never silently weakens a running gang (core/hold.py)
            stored_of=lambda namespace, uid: self.pod_groups_owned(namespace, uid, PODGROUP_DEFINED_INDEX),
            pods_naming=self._pods_naming, owner=self.cached_owner, definitions=lambda: self.grouper.definitions,
            writer=self.writer, recorder=self.recorder,
        )
        # the WorkloadGroups, set by the wiring (they plan through this reconciler): a group's key is reconciled
        # there, and a member workload's pass hands it over instead of writing its own PodGroups
        self.groups: Groups | None = None

    async def reconcile(self, wl: WorkloadKey) -> Result:
        wait = self._coalesce(wl)
        if wait is not None:  # not a pass: nothing looked at, none counted
            return Result(requeue_after=wait)
        self.passes += 1
        t0 = time.monotonic()
        try:
            result = await self._reconcile(wl)
        except NotLeader:
            result = Result(requeue_after=self.tuning.not_leader_retry_seconds, not_leader=True)
        if result.status != "not_leader":
            self.metrics.child(self.metrics.reconciles, result.status, result.plugin).inc()
            self.metrics.reconcile_duration.observe(time.monotonic() - t0)
        return result

    def _coalesce(self, wl: WorkloadKey) -> float | None:
        """Seconds to put ``wl``'s pass off, None to pass now (client-go's expectations, bounded): while its patches
        fly, the pods its events bring wait for the last to land (it queues ``wl``) or ``coalesce_seconds`` from the
        first pass put off, whichever is first: they share one pass, not one each (docs/performance.md). A pass
        run at the bound is the one they waited for: the landing then queues none for them."""
        now = self._clock()
        left = self._put_off.setdefault(wl, now) + self.tuning.coalesce_seconds - now if self._in_flight.get(wl) else 0
        if left <= 0:
            self._put_off.pop(wl, None)  # the pass they waited for: the landing owes none for them
            return None
        return left

    async def _reconcile(self, wl: WorkloadKey) -> Result:
        if self.groups is not None and self.groups.handles(wl):
            return await self.groups.reconcile(wl)
        touched = self.index.take_touched(wl)
        last = self.plans.take_last(wl) if self.incremental and self.upstream is None else None
        # (touched None: too many to list, or the workload had no pods left: the full path)
        if last is not None and touched is not None and all(ns == wl.namespace for ns, _ in touched):
            live, gone, terminal = self._touched_pods(wl, last, touched)
            if live or terminal or not last[0].pods.keys() <= gone:
                plan = await self.plan(wl, live, (last[0], gone))
                return plan if isinstance(plan, Result) else await self._carry_out(wl, plan, terminal)
            found = None
        else:
            found = self._live_pods(wl)
        if found is None:
            self.index.forget(wl)
            self.store.forget_workload(str(wl))
            self.plans.invalidate(wl)
            self._patch_failures.pop(wl, None)
            self._moving.pop(wl, None)
            if self.groups is not None:
                self.groups.gone(wl)
            return Result()
        pods, terminal = found
        plan = await self.plan(wl, pods)
        if isinstance(plan, Result):
            return plan
        return await self._carry_out(wl, plan, terminal)

    async def _carry_out(self, wl: WorkloadKey, plan: WorkloadPlan, terminal: set[str]) -> Result:
        if self.groups is not None and self.groups.claim(wl, plan):
            return Result(plugin=plan.plugin)  # a member of a WorkloadGroup: the group writes for it
        return await self._apply(wl, plan, terminal)

    async def predecide(self, wl: WorkloadKey) -> int:
        """Plan ``wl`` and keep the decisions (plan cache and records), writing nothing: what a replica does
        while it waits for the lease, so its first pass as leader only compares the cluster with them.
        The number of pods decided (0: nothing to keep)."""
        if self.plans.get(wl) is not None:
            return 0
        found = self._live_pods(wl)
        if found is None:
            return 0
        plan = await self.plan(wl, found[0])
        if isinstance(plan, Result) or not plan.kept:
            return 0
        for _, d in plan.decided:
            if d.outcome != "error":  # a failed one is decided again and reported by the leader's pass
                self.store.record_decision(d, str(wl))
        return len(plan.decided)

    # ------------------------------------------------------------------ planning

    def _live_pods(self, wl: WorkloadKey) -> tuple[list[Obj], set[str]] | None:
        """Pods to decide (sorted by name) and the terminal ones skipped; None if none are left."""
        pods_inf = self.cache.informer(POD)
        assert pods_inf is not None
        live: list[Obj] = []
        terminal: set[str] = set()
        allowed = self.cache.namespace_allowed
        for key in sorted(self.index.pods_of(wl)):  # (namespace, name): the pods' name order
            pod = pods_inf.get(*key)
            if pod is None:
                self.index.remove_pod(key)
                self.store.forget_pod(*key)
            elif is_terminal(pod):
                terminal.add(key[1])
            elif allowed(key[0]):
                live.append(pod)
        return (live, terminal) if live or terminal else None

    def _touched_pods(
        self, wl: WorkloadKey, last: tuple[WorkloadPlan, frozenset[str]], touched: set[tuple[str, str]]
    ) -> tuple[list[Obj], set[str], set[str]]:
        """The pods to look at again after ``last``: those touched, those whose decision failed and those
        whose patch failed. Returns the live ones (by name), the names no longer live pods of the workload,
        and the workload's terminal pods now."""
        plan, terminal_before = last
        names = {n for _, n in touched} | plan.failed | self._patch_failures.get(wl, {}).keys()
        pods_inf = self.cache.informer(POD)
        assert pods_inf is not None
        allowed = self.cache.namespace_allowed
        live: list[Obj] = []
        gone: set[str] = set()
        terminal = set(terminal_before)
        for name in sorted(names):
            key = (wl.namespace, name)
            mine = self.index.workload_of(key) == wl
            pod = pods_inf.get(*key) if mine else None
            if pod is not None and not is_terminal(pod) and allowed(key[0]):
                live.append(pod)
                terminal.discard(name)
                continue
            gone.add(name)
            if pod is not None and is_terminal(pod):
                terminal.add(name)
            else:
                terminal.discard(name)
                if mine and pod is None:  # as _live_pods: left the cache, its delete not seen
                    self.index.remove_pod(key)
                    self.store.forget_pod(*key)
        return live, gone, terminal

    async def plan(
        self, wl: WorkloadKey, pods: list[Obj], last: tuple[WorkloadPlan, set[str]] | None = None
    ) -> WorkloadPlan | Result:
        """The workload's plan on the one planning path: the pods without a usable kept decision are
        decided, the rest keep theirs, all are merged. A pod whose decision puts it in another workload (its
        owner chain changed) is handed to that one. ``last``: the last plan carried out and the names of
        pods no longer live: ``pods`` are then only those looked at again (:func:`update`)."""
        previous = self.plans.get(wl)
        fresh, held = to_decide(pods, previous)
        kept_context = self.plans.context(wl) if previous is not None else None
        decided, lookups, context = await self._decide(wl, fresh, kept_context)
        self.metrics.child(self.metrics.decisions, "kept").inc(len(held))
        self.metrics.child(self.metrics.decisions, "decided").inc(len(fresh))
        if lookups.misses:
            self.plans.invalidate(wl)
            if await self._ensure_kinds(lookups.misses):
                return Result(requeue_after=0.0)  # the kinds are watched now: decide again at once
            return Result([f"cannot watch {', '.join(map(str, sorted(lookups.misses)))}"])
        mine: list[tuple[Obj, Decision]] = []
        moved: set[str] = set()
        deps: set[Dependency] = set(lookups.reads)
        for pod, d in decided:
            actual = WorkloadKey.of_ref(d.top_owner, d.pod_namespace) if d.top_owner is not None else wl
            if actual != wl:  # the owner chain changed since the pod was indexed
                self.index.set_pod((o.namespace(pod), o.name(pod)), actual)
                self.queue.add(actual)
                moved.add(o.name(pod))
                continue
            mine.append((pod, d))
            deps.update(decision_dependencies(pod, d))
        if previous is None:
            self.index.set_dependencies(wl, deps)
        else:  # the kept decisions' dependencies stand (a change of any of them dropped them)
            self.index.add_dependencies(wl, deps)
        keep = wl.kind != "Pod" and not lookups.listed_pods  # see workload_plan: what may be kept
        staying = [p for p in pods if o.name(p) not in moved] if moved else pods
        if last is not None:
            plan = update(last[0], staying, last[1] | moved, held, mine, keep_decisions=keep)
        else:
            plan = assemble(wl.namespace, staying, held, mine, keep_decisions=keep)
        self.plans.put(wl, plan.kept, context)
        plan.context = context
        if not plan.pods:
            return Result(plugin=plan.plugin)
        return plan

    async def _decide(
        self, wl: WorkloadKey, pods: list[Obj], kept: WorkloadContext | None = None
    ) -> tuple[list[tuple[Obj, Decision]], CacheLookups, WorkloadContext | None]:
        """Decide each pod in one workload context (:mod:`grouper.core.workload_context`), from ``kept`` (the
        plan cache's, kept with the decisions), a new one after each yield to the loop; the returned lookups
        hold what all the decisions read, and the context is returned if the cache is as it saw it."""
        seen = self.cache.lookups()
        step = self.tuning.decide_chunk
        if pods and self._sandboxed(wl):
            # A Karta's jq runs in a worker process, up to its query timeout: decided off the event loop over a
            # snapshot (kube/lookup_snapshot.py); each chunk's pod expressions go to the sandbox in one run.
            def decide_all(snapshot: LookupSnapshot) -> list[tuple[Obj, Decision]]:
                out: list[tuple[Obj, Decision]] = []
                for i in range(0, len(pods), step):
                    chunk = pods[i : i + step]
                    workload = WorkloadContext(chunk)
                    out.extend((pod, self._decide_one(pod, seen, workload, snapshot.lookups())) for pod in chunk)
                return out

            decided, moved = await decide_off_loop(self.cache, self._snapshot_hints, (wl.group, wl.kind), pods, decide_all)
            if moved:  # decided over a view the cluster left meanwhile: look again
                self.queue.add(wl)
            return decided, seen, None  # (its context is not kept: the loop ran on meanwhile)
        out = []
        workload = kept if kept is not None else WorkloadContext()
        coop = Cooperative(step)  # a huge workload must not starve the workers and watches
        for pod in pods:
            out.append((pod, self._decide_one(pod, seen, workload, self.cache.lookups())))
            if await coop.tick():  # yielded: the watches may have changed the cache meanwhile
                workload = WorkloadContext()
        return out, seen, workload

    def _decide_one(self, pod: Obj, seen: CacheLookups, workload: WorkloadContext, lookups: CacheLookups) -> Decision:
        """One decision over ``lookups`` (fresh: the cache's, or a snapshot's), its reads added to ``seen``. An
        object a *failed* decision looked for and did not find (a pod's owner whose watch event is still
        behind) is recorded as a retry key: its arrival re-queues the workload without discarding the
        decisions its other pods already have (``Absent.retry``)."""
        d = self.grouper.decide(pod, lookups, workload)  # a shared chain's reads are the first sibling's, in seen
        seen.misses |= lookups.misses
        seen.refused |= lookups.refused
        seen.listed_pods = seen.listed_pods or lookups.listed_pods
        if d.outcome == "error":
            seen.reads.update(r.as_retry() if isinstance(r, Absent) else r for r in lookups.reads)
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

    # ------------------------------------------------------------------ writing what was planned

    async def _apply(self, wl: WorkloadKey, plan: WorkloadPlan, terminal: set[str]) -> Result:
        result = Result(plugin=plan.plugin)
        workload_ref = plan.workload_ref
        if workload_ref is not None:
            workload_obj = InvolvedObject.of_owner(workload_ref, wl.namespace)
        else:
            first = min(plan.pods)
            workload_obj = InvolvedObject.of_pod(next(iter(self._pods_named(wl, plan, [first])), plan.pods[first]))
        lookups = self.cache.lookups()
        groups, placement, held = plan.groups, plan.placement, Held()
        stored = self.holds.to_check(wl.namespace, workload_ref, groups) \
            if workload_ref is not None and self.upstream is None else []
        if stored and workload_ref is not None:  # the plan's own lists stay as planned (a hold changes copies)
            groups, placement = list(groups), dict(placement)
            held = await self.holds.apply(wl.namespace, workload_ref, stored, groups, placement,
                                          lambda name: next(iter(self._pods_named(wl, plan, [name])), None), plan.decided)
        holding = bool(held.names)
        if holding:  # its placement is the hold's: decide all next time
            self.plans.invalidate(wl)
        # a plan updated from the last one carried out: only its PodGroups merged again are written and only
        # its pods looked at again patched (the others are as that pass left them)
        rewritten = plan.rewritten if not holding else None
        looked_at = plan.looked_at if not holding else None

        # 1. decision errors (of the pods decided in this pass; kept decisions never failed)
        awaiting_gc = awaiting_cache = transient_errors = 0
        for pod, d in plan.decided:
            if self.owner_behind(pod, d):
                awaiting_cache += 1
                continue
            self.store.record_decision(d, str(wl))
            if d.outcome == "skipped" and d.reason in STEP_ASIDE_REASONS:
                self.metrics.stepped_aside.labels(reason=d.reason).inc()
            if d.outcome != "error":
                continue
            if d.reason in OWNER_GONE_REASONS and deleted_on_chain(pod, lookups, self.deleted.recently):
                awaiting_gc += 1  # its owner was just deleted: the garbage collector removes the pod next
                continue
            log.warning("pod not grouped: %s", d.message, extra={"pod": d.pod_key, "plugin": d.plugin, "reason": d.reason})
            self.metrics.decision_errors.labels(reason=d.reason).inc()
            result.errors.append(d.message)
            if d.retryable:  # else: a pure function of objects it read; their next change re-queues it
                transient_errors += 1
            await self._warn(pod, workload_obj, d.message)

        # 2. PodGroups, concurrently (bounded): a workload of many PodGroups (a LeaderWorkerSet's groups)
        # had them written one after the other, and its pods' patches waited for the last. A plan updated
        # from the last one carried out writes only the PodGroups it may have changed; one that only gained
        # pods is the very object that pass wrote (a change by anyone else makes the next pass compare all)
        to_write = groups if rewritten is None else [g for g in groups if g.metadata.name in rewritten]
        ok_groups = set() if rewritten is None else {g.metadata.name for g in groups} - rewritten
        joined = plan.merged - rewritten if plan.merged is not None and rewritten is not None else frozenset()
        for g in (g for g in groups if g.metadata.name in joined):  # only gained pods: their records list them
            self.store.record_pod_group_members(g.metadata.namespace, g.metadata.name, g.pods, g.newest)
            await self._say_unsatisfiable(workload_obj, g)
        written = await asyncio.gather(*(self._write_group(wl, plan, g) for g in to_write))
        for g, (op, error, retryable) in zip(to_write, written, strict=True):
            md = g.metadata
            cause = f"PodGroup/{md.name}"
            if error is not None:
                result.errors.append(error)
                transient_errors += retryable
                await self.recorder.report(workload_obj, cause, error)  # once while it stands, not per retry
                continue
            self.recorder.clear(workload_obj, cause)
            ok_groups.add(md.name)
            if op in ("created", "updated"):
                result.written += 1
                log.info("PodGroup %s %s", md.name, op, extra={"podgroup": md.name, "plugin": plan.plugin})
                for warning in md.warnings:  # e.g. semi-preemptible with segments, metadata not copied: said
                    log.warning("PodGroup %s/%s: %s", md.namespace, md.name, warning, extra={"podgroup": md.name})
                    await self.recorder.warn(workload_obj, f"PodGroup {md.namespace}/{md.name}: {warning}")
            await self._say_unsatisfiable(workload_obj, g)
        held_names = sorted(held.names)
        ok_groups.update(held_names)  # stored as they are: their pods can be placed
        for name in held_names:
            self._record_held(wl, name, held)
        mine = [(g.metadata.namespace, g.metadata.name) for g in groups] + [(wl.namespace, n) for n in held_names]
        for ns, name in self.index.set_pod_groups(wl, mine):
            self.store.forget_pod_group(ns, name)  # no longer this workload's: not listed as managed

        # 3. pods: patches sent on their way, only for PodGroups that exist as planned. The upstream backend
        # patches no pod: a pod joins its group by spec.schedulingGroup, set only at creation (the webhook).
        failures = self._patch_failures.get(wl, {})
        if self.upstream is None:
            kept = plan.kept
            landed = self.landing(wl, workload_obj)  # one callback for the pass's patches
            places = placement.items() if looked_at is None else [
                (n, placement[n]) for n in sorted(looked_at) if n in placement
            ]
            for name, (pg, sub) in places:
                if pg not in ok_groups:
                    continue
                found = [plan.pods[name]] if plan.pods[name] else self._pods_named(wl, plan, [name])  # UNSEEN: held
                if not found:
                    continue  # gone meanwhile: its delete queued the workload
                pod = found[0]
                k = kept.get(name)
                if k is not None and k.marked and name not in failures and k.version == _rv(pod) \
                        and (k.view is not None and k.view.name, k.sub_group) == (pg, sub):
                    continue  # this very pod was found marked as planned by an earlier pass
                heading = self.patcher.heading(wl.namespace, name)
                if heading is not None:
                    if heading != (pg, sub):  # decided again while its patch flies: look again once it lands
                        self._owed_pods[(wl.namespace, name)] = wl  # (its workload may be another by now)
                    continue
                if not self.patcher.needed(pod, pg, sub):
                    self._note_unchanged(pod)
                    if k is not None and k.version == _rv(pod):
                        kept[name] = k._replace(marked=True)
                    continue
                failure = failures.get(name)
                if failure is not None:  # sent again: its last failure is this pass's
                    result.errors.append(failure.message)
                    transient_errors += failure.retryable
                was = o.annotations(pod).get(POD_GROUP_ANNOTATION)
                if was and was != pg:  # moved away from it: that PodGroup is replaced (step 4)
                    self._moving.setdefault(wl, set()).add(was)
                self.send(wl, pod, (pg, sub), landed)
                result.written += 1

        # 4. PodGroups of this workload that it no longer wants and no pod names (its name changed): at once,
        # or once the patches moving the pods that name one away have landed (the last one queues it again)
        if not result.errors and workload_ref is not None and not awaiting_gc and not awaiting_cache \
                and self.upstream is None:
            replaced, later = self._replaced(wl, workload_ref.uid, {g.metadata.name for g in groups} | set(held_names))
            if replaced:
                result.written += await self.delete_replaced(wl, replaced)
            if later:
                self._owed.add(wl)
                result.deferred = True

        if result.errors:
            result.terminal = not transient_errors
        elif awaiting_cache:
            result.requeue_after = self.tuning.await_cache_seconds
        elif awaiting_gc:
            result.requeue_after = self.tuning.await_gc_seconds
        self.store.record_workload(
            str(wl),
            pods=plan.live,
            terminalPods=len(terminal),
            podGroups=sorted(ok_groups),
            plugin=plan.plugin,
            result=result.status,
            error="; ".join(result.errors[:3]) if result.errors else None,
        )
        if self.incremental and not (result.errors or awaiting_gc or awaiting_cache or holding or self.upstream):
            self.plans.settle(wl, plan, frozenset(terminal))
        return result

    def send(self, wl: WorkloadKey, pod: Obj, place: tuple[str, str | None], landed: Landed, *,
             again: bool = False) -> None:
        """Send the pod's patch on its way for ``wl``'s pass (a workload's, or a WorkloadGroup's), counted: when
        the last of ``wl``'s lands, ``wl`` is queued again if something is owed (``again``: a look at what the
        patches changed is)."""
        self._in_flight[wl] = self._in_flight.get(wl, 0) + 1
        if again:
            self._owed.add(wl)
        self.patcher.start(pod, *place, landed)

    def landing(self, wl: WorkloadKey, workload_obj: InvolvedObject) -> Landed:
        """The callback of ``wl``'s pod patches: each outcome recorded and reported (:meth:`_landed`)."""
        async def landed(pod: Obj, outcome: PatchResult | Exception) -> None:
            try:
                await self._landed(wl, workload_obj, pod, outcome)
            finally:
                key = (o.namespace(pod), o.name(pod))
                owing = self._owed_pods.pop(key, None)
                if owing is not None:
                    self.index.touch(owing, key)  # its next pass looks at it again
                    self.queue.add(owing)
                left = self._in_flight.get(wl, 1) - 1
                if left > 0:
                    self._in_flight[wl] = left
                else:
                    self._in_flight.pop(wl, None)
                    if wl in self._owed or wl in self._put_off:
                        self._owed.discard(wl)
                        self.queue.add(wl)

        return landed

    async def _landed(self, wl: WorkloadKey, workload_obj: InvolvedObject, pod: Obj,
                      outcome: PatchResult | Exception) -> None:
        """A pod patch landed: record it; a failure is reported once per cause and retried with back-off
        (a terminal one waits for a change). The first failure queues the workload; a patch that failed
        before was sent again by a pass that reported it (its status queued the next try)."""
        ns, name = o.namespace(pod), o.name(pod)
        if isinstance(outcome, NotLeader):
            return  # the next leader patches it
        failures = self._patch_failures.setdefault(wl, {})
        if not isinstance(outcome, Exception):
            self.store.record_pod_patched(ns, name, outcome)
            self.recorder.clear(InvolvedObject.of_pod(pod), "PodPatch")
            if failures.pop(name, None) is not None and not failures:
                del self._patch_failures[wl]
            return
        assert isinstance(outcome, ApiError)
        msg = f"Pod {ns}/{name}: cannot set its PodGroup: {failure_message(outcome)}"
        retryable = not is_terminal_error(outcome)
        self.metrics.child(
            self.metrics.write_failures, "pods", failure_reason(outcome), "retryable" if retryable else "terminal"
        ).inc()
        self.store.record_pod_patch_failed(ns, name, msg)
        first = name not in failures
        failures[name] = _PatchFailure(msg, retryable)
        self.store.record_workload(str(wl), result="error" if retryable else "failed", error=msg)
        log.warning("%s", msg, extra={"pod": f"{ns}/{name}", "retrying": retryable})
        await self.recorder.report(InvolvedObject.of_pod(pod), "PodPatch", msg)
        if workload_obj.uid != o.uid(pod):
            await self.recorder.report(workload_obj, f"Pod/{name}", msg)
        if first and retryable:
            self.queue.add_after(wl, self.queue.backoff(wl))

    async def settle(self, timeout: float = 0.0) -> None:
        """Let the pod patches on their way land (up to ``timeout`` seconds), then cancel the rest: on
        shutdown and when leadership ends, after the workers stopped."""
        await self.patcher.settle(timeout)
        self._in_flight.clear()
        self._owed.clear()
        self._put_off.clear()
        self._owed_pods.clear()
        self._moving.clear()

    async def _say_unsatisfiable(self, workload_obj: InvolvedObject, g: PlannedGroup) -> None:
        """A gang that can never be scheduled as it stands (``core/satisfiable.py``, the rules ``grouper
        plan`` and ``explain`` print, judged as its pods are still being created): one Warning Event on the
        workload while the reason stands, none once it is gone."""
        md = g.metadata
        reasons = plan_reasons(g, filling=True)
        cause = f"Unsatisfiable/{md.name}"
        if not reasons:
            self.recorder.clear(workload_obj, cause)
        elif await self.recorder.report(workload_obj, cause, message := "; ".join(reasons)):
            log.warning("%s", message, extra={"podgroup": md.name})

    async def _write_group(self, wl: WorkloadKey, plan: WorkloadPlan, g: PlannedGroup) -> tuple[str | None, str | None, bool]:
        """Write one planned PodGroup and record it: (operation, error, whether the error is retryable — the
        API server's answer may change with time: :mod:`grouper.writer.failures`)."""
        md = g.metadata
        with log_context(podgroup=md.name):
            op: str | None = None
            error: str | None = None
            retryable = False  # a PodGroup that breaks the rules waits for a change of its input
            desired, notes = md.to_object(), g.notes
            problems = plan.context.validate(md) if plan.context is not None else validate_pod_group(md)
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
                    how = "retryable" if retryable else "terminal"
                    self.metrics.child(self.metrics.write_failures, "podgroups", failure_reason(e), how).inc()
                    log.warning("%s", error, extra={"podgroup": md.name, "retrying": retryable})
            self.store.record_pod_group(
                md.namespace, md.name, workload=str(wl), desired=desired, operation=op, pods=g.pods, notes=notes,
                error=error, stored=op is not None or self.writer.current(md.namespace, md.name) is not None,
                newest=g.newest,
            )
        return op, error, retryable

    def _record_held(self, wl: WorkloadKey, name: str, held: Held) -> None:
        stored = self.writer.current(wl.namespace, name)
        pods = sorted(p for p, h in held.pods.items() if h.pod_group == name)
        message = next((h.message for h in held.pods.values() if h.pod_group == name), "held")
        self.store.record_pod_group(wl.namespace, name, workload=str(wl), desired=stored, operation="held",
                                    pods=pods, notes=[message])

    def owner_behind(self, pod: Obj, d: Decision) -> bool:
        """Whether the decision failed for a missing owner of a pod so young that the owner's watch event is
        likely just behind the pod's (two streams): the pass then waits quietly instead of reporting it."""
        if d.outcome != "error" or d.reason not in OWNER_GONE_REASONS:
            return False
        created = parse_time(o.meta(pod).get("creationTimestamp"))  # unknown: old, nothing waits on a bad one
        return created is not None and time.time() - created.timestamp() < self.tuning.young_pod_seconds

    def cached_owner(self, ref: OwnerRef, namespace: str) -> Obj | None:
        try:
            return self.cache.lookups().get(ref.api_version, ref.kind, namespace, ref.name)
        except Exception:  # not cached / not allowed: no generation to compare, nothing is held
            return None

    def pod_groups_owned(self, namespace: str, uid: str, index: str = PODGROUP_OWNER_INDEX) -> list[Obj]:
        """The cached PodGroups ``uid`` owns (``PODGROUP_DEFINED_INDEX``: those a definition produced)."""
        pgs = self.cache.informer(PODGROUP)
        return [pg for pg in pgs.by_index(index, uid) if o.namespace(pg) == namespace] if pgs is not None else []

    def _pods_naming(self, namespace: str, pod_group: str) -> list[Obj]:
        pods = self.cache.informer(POD)
        return list(pods.by_index(POD_PODGROUP_INDEX, f"{namespace}/{pod_group}")) if pods is not None else []

    def _pods_named(self, wl: WorkloadKey, plan: WorkloadPlan, names: list[str]) -> list[Obj]:
        """The named pods: looked at in this pass, else (not planned, or not looked at since the last plan
        carried out: ``plans.UNSEEN``) as the cache has them."""
        pods_inf = self.cache.informer(POD)
        found = (plan.pods.get(n) or (pods_inf.get(wl.namespace, n) if pods_inf is not None else None) for n in names)
        return [pod for pod in found if pod is not None]

    def _note_unchanged(self, pod: Obj) -> None:
        """Record "unchanged" once for a pod already marked (e.g. by an earlier run of the grouper)."""
        if self.store.unpatched_record(o.namespace(pod), o.name(pod)):
            self.store.record_pod_patched(o.namespace(pod), o.name(pod), "unchanged")

    def _replaced(self, wl: WorkloadKey, owner: str, wanted: set[str]) -> tuple[list[Obj], bool]:
        """PodGroups owned by the workload (``owner``: its uid) or by one of its pods (a per-pod PodGroup whose
        pod now belongs to a gang), not wanted by it, *replaced* — its pods moved to another PodGroup by this
        workload's passes, or its owner pod lives on naming another — and named by no pod any more (from the
        caches' indexes); and whether more will be once the patches on their way land. One whose pods are
        merely gone is left to the garbage collector (docs/architecture.md, "Replaced PodGroups")."""
        pgs = self.cache.informer(PODGROUP)
        pods = self.cache.informer(POD)
        if pgs is None or pods is None:
            return [], False
        candidates = {o.name(pg): pg for pg in pgs.by_index(PODGROUP_OWNER_INDEX, owner)}
        pod_owned: set[str] = set()
        for pg in pgs.by_index(POD_OWNED_INDEX, wl.namespace):
            for ref in o.owner_references(pg):
                key = (wl.namespace, str(ref.get("name") or ""))
                pod = pods.get(*key) if ref.get("kind") == "Pod" else None
                if pod is not None and o.uid(pod) == ref.get("uid") and self.index.workload_of(key) == wl:
                    candidates[o.name(pg)] = pg
                    pod_owned.add(o.name(pg))  # its pod lives on and names another: replaced for certain
        moving = self._moving.get(wl, set())
        now: list[Obj] = []
        later = False
        for name, pg in sorted(candidates.items()):
            if name in wanted or o.namespace(pg) != wl.namespace or self.writer.current(wl.namespace, name) is None:
                moving.discard(name)
                continue  # wanted, elsewhere, or deleted already (not seen yet)
            namers = self.namers(pods, wl.namespace, name)
            if not namers:
                if name in moving or name in pod_owned:
                    now.append(pg)
                continue
            headings = [self.patcher.heading(wl.namespace, n) for n in namers]
            away = [h is not None and h[0] != name for h in headings]
            if any(away):
                moving.add(name)  # this workload's pods are leaving it: replaced
                later = later or all(away)
        if moving:
            self._moving[wl] = moving
        else:
            self._moving.pop(wl, None)
        return now, later

    async def delete_replaced(self, wl: WorkloadKey, replaced: list[Obj], why: str = "replaced") -> int:
        deleted = 0
        for pg in replaced:
            name = o.name(pg)
            self._moving.get(wl, set()).discard(name)
            if await self.writer.delete(wl.namespace, name, o.uid(pg)):
                deleted += 1
                self.store.forget_pod_group(wl.namespace, name)
                log.info("PodGroup %s deleted: %s", name, why, extra={"podgroup": name, "workload": str(wl)})
        return deleted

    def namers(self, pods: Any, namespace: str, pod_group: str) -> list[str]:
        """The pods that name the PodGroup, counting our own patches the cache has not shown yet."""
        out = []
        for pod in pods.by_index(POD_PODGROUP_INDEX, f"{namespace}/{pod_group}"):
            now = self.patcher.expectations.current("Pod", namespace, o.name(pod), pod) or pod
            if o.annotations(now).get(POD_GROUP_ANNOTATION) == pod_group:
                out.append(o.name(pod))
        return out

    async def _warn(self, pod: Obj, workload: InvolvedObject, message: str) -> None:
        await self.recorder.warn(InvolvedObject.of_pod(pod), message)
        if workload.uid != o.uid(pod):
            await self.recorder.warn(workload, message)
