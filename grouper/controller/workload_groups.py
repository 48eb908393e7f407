"""WorkloadGroups in the controller: several workloads admitted as one KAI PodGroup (docs/workload-groups.md).

A group is reconciled under its own queue key (:func:`group_key`: a ``WorkloadKey`` of kind
``WorkloadGroup``), level-triggered from the caches:

1. **Members**: the workloads of the group's namespace (the workload index) whose top owner carries
   ``kai.scheduler/workload-group: <group>``. Each is planned on the one planning path
   (:meth:`Reconciler.plan`, every pod decided afresh so the membership rules see every decision) and
   :func:`grouper.core.workload_group_members.collect` applies the membership rules (a second claim on an
   owner in between, a member whose pods the grouper does not group).
2. **Render** (:func:`grouper.core.workload_group.render_kai`): complete and valid, one PodGroup owned by
   the WorkloadGroup, written through the PodGroup writer; otherwise nothing is written (a stored one is
   deleted) and every member pod names the rendered PodGroup's name with no sub-group — the gate.
3. **Pods**: patched through the pod patcher (fire and track); the members' own PodGroups that no pod
   names any more are deleted once the patches moving their pods have landed (the last one re-queues).
4. **Status** (``observedMembers``, ``renderedPodGroupRef``, ``InputsResolved``, ``Rendered``, ``Active``),
   written through the status subresource only when it changed; an invalid group is a Warning Event on the
   group and on each member, and an error on the PodGroup record (``/podgroups``).

A member workload's own pass hands it over (:meth:`WorkloadGroups.claim`, the reconciler's hook): while
its group object exists it writes no PodGroup and patches no pod of its own. **Without the object** (never
created, deleted, or the CRD not served) the annotation is not honoured: each workload is grouped alone —
a deleted group must release its members, and a level-triggered controller cannot tell "deleted" from
"not created yet". Create the WorkloadGroup before (or in the same apply as) its workloads.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from grouper.controller.reconciler import (
    Reconciler,
    Result,
)
from grouper.controller.workloads import WorkloadIndex, WorkloadKey
from grouper.core.decision import Decision
from grouper.core.grouping import is_terminal
from grouper.core.reads import same_reads
from grouper.core.upstream import scheduling_group
from grouper.core.workload_group import GroupRender, priority_values, render_kai, rendered_name
from grouper.core.workload_group_members import collect
from grouper.core.workload_group_status import active_condition, same_status, status_patch
from grouper.core.workload_group_upstream import (
    MAX_TEMPLATES,
    UpstreamGroupObjects,
    left_behind,
    member_pod_group,
    render_upstream,
    stored_status,
    stray_pods,
)
from grouper.core.workload_plan import PlannedGroup, WorkloadPlan
from grouper.kube.cache import POD, PRIORITY_CLASS, ClusterCache
from grouper.kube.informer import MODIFIED
from grouper.kube.transport import ApiError
from grouper.model import objects as o
from grouper.model import workload_group as wg
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import OwnerRef
from grouper.records.decisions import DecisionStore
from grouper.writer.events import InvolvedObject
from grouper.writer.failures import failure_message, is_terminal_error
from grouper.writer.podgroups import NotLeader

log = logging.getLogger(__name__)

WORKLOADGROUP = GVK(wg.GROUP, wg.VERSION, wg.KIND)
CAUSE = "WorkloadGroup"


def group_key(namespace: str, name: str) -> WorkloadKey:
    return WorkloadKey(namespace, wg.GROUP, wg.KIND, name)


def is_group_key(wl: WorkloadKey) -> bool:
    return wl.kind == wg.KIND and wl.group == wg.GROUP



@dataclass
class _Members:
    """What the group pass planned: each member workload's plan, and every decision among them."""

    plans: dict[WorkloadKey, WorkloadPlan] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)
    groups: list[PlannedGroup] = field(default_factory=list)
    pods: dict[str, Obj] = field(default_factory=dict)  # "namespace/name" -> pod


@dataclass
class _Written:
    """What one backend's part of a group pass wrote: the inputs of the pass's records and status."""

    op: str | None = None
    error: str | None = None
    stored: bool = False  # the rendered objects are stored
    desired: Obj | None = None
    pod_groups: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unplaced: int = 0  # member pods that do not name their place yet (Active)
    upstream: UpstreamGroupObjects | None = None


class WorkloadGroups:
    def __init__(
        self,
        *,
        cache: ClusterCache,
        index: WorkloadIndex,
        reconciler: Reconciler,
        store: DecisionStore,
        enqueue: Callable[[WorkloadKey], None],
        routing: Callable[[], bool] = lambda: False,
    ) -> None:
        """``routing``: whether pods are still being routed to workloads (after a start): a group pass
        then waits, so it never renders from a half-filled index and writes what the next pass undoes."""
        self.cache, self.index, self.reconciler, self.store = cache, index, reconciler, store
        self.writer, self.patcher, self.recorder = reconciler.writer, reconciler.patcher, reconciler.recorder
        self.enqueue, self.routing = enqueue, routing
        self.upstream = reconciler.upstream  # --backend=upstream: CompositePodGroup + child PodGroups instead
        self._member_of: dict[WorkloadKey, WorkloadKey] = {}  # member workload -> the group its last pass joined

    # ------------------------------------------------------------------ events

    def on_group(self, etype: str, obj: Obj, old: Obj | None) -> None:
        # our own status writes change nothing a pass reads
        if etype == MODIFIED and old is not None and same_reads(old, obj):
            return
        self.enqueue(group_key(o.namespace(obj), o.name(obj)))

    def handles(self, wl: WorkloadKey) -> bool:
        return is_group_key(wl)

    def _group_object(self, namespace: str, name: str) -> Obj | None:
        """The WorkloadGroup as cached; None when absent, being deleted, or the CRD not served."""
        inf = self.cache.informer(WORKLOADGROUP)
        obj = inf.get(namespace, name) if inf is not None and inf.synced.is_set() else None
        return None if obj is None or o.meta(obj).get("deletionTimestamp") else obj

    # ------------------------------------------------------------------ the member's own pass (hooks)

    def claim(self, wl: WorkloadKey, plan: WorkloadPlan) -> bool:
        """A workload's own pass planned ``plan``: True when its group writes for it (it is a member of a
        WorkloadGroup that exists), so the pass writes nothing of its own. A group it left is queued."""
        name = self._annotated(wl, plan.workload_ref)
        key = group_key(wl.namespace, name) if name and self._group_object(wl.namespace, name) is not None else None
        before = self._member_of.get(wl)
        if before is not None and before != key:
            self.enqueue(before)
        if key is None:
            self._member_of.pop(wl, None)
            return False
        self._member_of[wl] = key
        self.enqueue(key)
        return True

    def gone(self, wl: WorkloadKey) -> None:
        """A workload has no pods left: its group (if any) looks again."""
        before = self._member_of.pop(wl, None)
        if before is not None:
            self.enqueue(before)

    async def member_pod_group(self, decision: Decision) -> str | None:
        """Upstream backend, at admission: the PodGroup a new pod of a member workload joins (its child of
        the group's composite, or the flattened gang), None when its workload is in no existing group.
        Named before the group is rendered: a pod joins a PodGroup only at creation, and one that names a
        PodGroup not yet written waits (the gate)."""
        if self.upstream is None or decision.top_owner is None or decision.outcome != "grouped":
            return None
        ref, ns = decision.top_owner, decision.pod_namespace
        name = self._annotated(WorkloadKey.of_ref(ref, ns), ref)
        obj = self._group_object(ns, name) if name else None
        if not name or obj is None:
            return None
        await self.upstream.resources()
        served = self.upstream.versions is not None and self.upstream.versions.composite_pod_group is not None
        # a complete group has expectedWorkloads members: more than a composite's templates are flattened
        expected = (obj.get("spec") or {}).get("expectedWorkloads")
        composite = served and isinstance(expected, int) and expected <= MAX_TEMPLATES
        return member_pod_group(ns, name, ref, composite=composite)

    def _annotated(self, wl: WorkloadKey, ref: OwnerRef | None) -> str | None:
        obj = self._top_owner(wl, ref)
        if obj is None:
            return None
        try:
            return wg.membership(obj)
        except wg.InvalidWorkloadGroup:
            return None  # grouped alone; the plan (grouper plan) and the membership errors say why

    def _top_owner(self, wl: WorkloadKey, ref: OwnerRef | None = None) -> Obj | None:
        if ref is not None:
            return self.reconciler.cached_owner(ref, wl.namespace)
        for gvk in list(self.cache.kinds):
            if gvk.group == wl.group and gvk.kind == wl.kind:
                inf = self.cache.informer(gvk)
                obj = inf.get(wl.namespace, wl.name) if inf is not None else None
                if obj is not None:
                    return obj
        return None

    def _candidates(self, namespace: str, name: str) -> list[WorkloadKey]:
        """Workloads of the namespace whose top owner names the group (a scan of the namespace's
        workloads: membership lives on the owners, which the pods' index does not key)."""
        return sorted(wl for wl in self.index.workloads()
                      if wl.namespace == namespace and not is_group_key(wl) and self._annotated(wl, None) == name)

    # ------------------------------------------------------------------ the group's pass

    async def reconcile(self, key: WorkloadKey) -> Result:
        if self.routing():
            return Result(requeue_after=self.reconciler.tuning.routing_retry_seconds)
        ns, name = key.namespace, key.name
        obj = self._group_object(ns, name)
        candidates = self._candidates(ns, name)
        involved = InvolvedObject(wg.API_VERSION, wg.KIND, ns, name, o.uid(obj) if obj is not None else "")
        if obj is None:
            return await self._release(key, candidates)

        spec: wg.WorkloadGroup | None = None
        spec_error: str | None = None
        try:
            spec = wg.parse(obj)
        except wg.InvalidWorkloadGroup as exc:
            spec_error = str(exc)
        found = await self._plan_members(candidates)
        if not isinstance(found, _Members):
            return found
        membership = collect(found.decisions, found.groups, self.cache.lookups(), (), found.pods)
        members = membership.members.get((ns, name), [])
        render = render_kai(ns, name, spec, members, self._priority_values(), spec_error=spec_error)
        for wl, plan in found.plans.items():
            self._member_of[wl] = key
            for _, d in plan.decided:
                self.store.record_decision(d, str(wl))
        result = Result(plugin="workload-group")
        if self.upstream is not None:
            out = await self._write_upstream(key, obj, render, found, result)
        else:
            out = await self._write_kai(key, involved, render, found, result)
        await self._report(involved, render, found)
        self.store.record_pod_group(
            ns, render.pod_group_name, workload=str(key), desired=out.desired, operation=out.op,
            pods=sorted(render.placement), notes=[*render.notes, *render.pending, *out.notes],
            error=out.error or ("; ".join(render.errors) if render.errors else None), stored=out.stored,
        )
        self.store.record_workload(
            str(key), pods=len(render.placement), podGroups=out.pod_groups if out.stored else [],
            plugin="workload-group", result="failed" if render.errors else "ok",
            error="; ".join(render.errors[:3]) or None,
        )
        status = render.status()
        if out.upstream is not None and out.stored:
            stored_status(status, out.upstream, render.pod_group_name)
        status["conditions"].append(active_condition(render.pod_group is not None, out.stored, out.unplaced))
        try:
            result.written += await self._write_status(obj, status)
        except ApiError as e:
            result.errors.append(f"WorkloadGroup {ns}/{name}: status not written: {failure_message(e)}")
            result.terminal = result.terminal or is_terminal_error(e)
        if render.errors and not result.errors:  # invalid: terminal, it waits for a change of the group or a member
            result.errors.extend(render.errors)
            result.terminal = True
        return result

    async def _plan_members(self, candidates: list[WorkloadKey]) -> _Members | Result:
        out = _Members()
        pods_inf = self.cache.informer(POD)
        assert pods_inf is not None
        for wl in candidates:
            pods = [p for k in sorted(self.index.pods_of(wl)) if (p := pods_inf.get(*k)) is not None
                    and not is_terminal(p)]
            if not pods:
                continue
            # every pod decided afresh: the membership rules read each decision's owner chain and outcome
            self.reconciler.plans.invalidate(wl)
            plan = await self.reconciler.plan(wl, pods)
            if not isinstance(plan, WorkloadPlan):
                if plan.errors or plan.requeue_after is not None:
                    return Result(list(plan.errors), requeue_after=plan.requeue_after)
                continue
            if any(self.reconciler.owner_behind(pod, d) for pod, d in plan.decided):
                # a new pod whose owner's watch event is just behind (as the workload's own pass does): wait
                # quietly rather than report the group invalid for a moment
                return Result(requeue_after=self.reconciler.tuning.await_cache_seconds)
            out.plans[wl] = plan
            out.decisions.extend(d for _, d in plan.decided)
            out.groups.extend(plan.groups)
            out.pods.update({f"{wl.namespace}/{n}": p for n, p in plan.pods.items()})
        return out

    def _priority_values(self) -> dict[str, int]:
        inf = self.cache.informer(PRIORITY_CLASS)
        return priority_values(inf.list() if inf is not None else ())

    async def _write(self, key: WorkloadKey, result: Result, what: str, failed: str,
                     write: Callable[[], Awaitable[str | None]]) -> tuple[str | None, str | None]:
        """One write of the group's objects (``what``: the rendered PodGroup, or the upstream objects), counted
        in ``result``: (operation, error — ``failed`` and the API server's answer)."""
        try:
            op = await write()
        except ApiError as e:
            result.errors.append(f"{failed}: {failure_message(e)}")
            result.terminal = is_terminal_error(e)
            return None, result.errors[-1]
        if op in ("created", "updated"):
            result.written += 1
            log.info("%s %s", what, op, extra={"workload": str(key)})
        return op, None

    async def _write_kai(self, key: WorkloadKey, involved: InvolvedObject, render: GroupRender, found: _Members,
                         result: Result) -> _Written:
        """The KAI backend: the rendered PodGroup (not rendered: none, a stored one is deleted), the member
        pods placed in it (or, until it is, gated on its name), and the members' own PodGroups no pod names
        any more deleted (once the patches moving their pods landed)."""
        ns, name, md = key.namespace, render.pod_group_name, render.pod_group
        out = _Written(desired=md.to_object() if md is not None else None, pod_groups=[name])
        if md is not None:
            out.op, out.error = await self._write(key, result, f"PodGroup {name} of WorkloadGroup {key.name}",
                                                  f"PodGroup {ns}/{name}: write failed", lambda: self.writer.apply(md))
            self.index.set_pod_groups(key, [(ns, name)])  # changed by someone else: this key puts it right
            out.stored = out.error is None and (out.op is not None or self.writer.current(ns, name) is not None)
        else:
            self.index.set_pod_groups(key, ())
            result.written += await self._delete_rendered(key, name)
        # member pods: placed in the rendered PodGroup (or, until it is, gated on its name)
        stored_or_gate = md is None or out.stored
        out.unplaced = self._place(key, involved, render, found, result) if stored_or_gate else len(render.placement)
        if not result.errors:
            result.written += await self._delete_own(ns, found)
        return out

    def _place(self, key: WorkloadKey, involved: InvolvedObject, render: GroupRender, found: _Members,
               result: Result) -> int:
        """Send the patches that place the member pods as ``render`` says; how many pods do not name their
        place yet."""
        ns, unplaced, landed = key.namespace, 0, self.reconciler.landing(key, involved)
        for ref, (pg, sub) in sorted(render.placement.items()):
            pod = found.pods.get(f"{ns}/{ref}")
            if pod is None:
                continue
            heading = self.patcher.heading(ns, ref)
            if heading is not None:
                unplaced += heading != (pg, sub)
                continue
            if not self.patcher.needed(pod, pg, sub):
                continue
            unplaced += 1
            # once they all landed, the group looks again: Active, the members' own PodGroups no pod names
            self.reconciler.send(key, pod, (pg, sub), landed, again=True)
            result.written += 1
        return unplaced

    async def _write_upstream(self, key: WorkloadKey, obj: Obj, render: GroupRender, found: _Members,
                              result: Result) -> _Written:
        """The upstream backend: the CompositePodGroup and one child PodGroup per member (or one flattened
        gang where CompositePodGroup is not served), owned by the WorkloadGroup. Pods are never patched
        (a pod joins a PodGroup only at creation: the webhook names the member's child,
        :meth:`member_pod_group`); until the group is rendered none of its PodGroups exists, so no member
        pod binds. A member that left the group gets its unscheduled pods recreated by their controller
        (:meth:`_free_pods`)."""
        upstream, ns, out = self.upstream, key.namespace, _Written()
        assert upstream is not None

        async def write() -> str | None:
            if render.pod_group is not None:
                await upstream.resources()
                assert upstream.versions is not None
                pc = render.pod_group.priority_class_name
                out.upstream = render_upstream(
                    render, upstream.versions, upstream.versions.composite_pod_group,
                    priority_class_exists=not pc or pc in self._priority_values(),
                )
            return await upstream.apply_group(out.upstream, ns, o.uid(obj))

        out.op, out.error = await self._write(key, result, f"upstream objects of WorkloadGroup {key.name}",
                                              f"WorkloadGroup {ns}/{key.name}: upstream objects not written", write)
        objs = out.upstream
        if objs is not None:
            out.stored = out.error is None
            out.desired = {"workload": objs.workload, "compositePodGroup": objs.composite, "podGroups": objs.pod_groups}
            out.pod_groups, out.notes = [o.name(p) for p in objs.pod_groups], list(objs.notes)
            # member pods joined at creation: one that names another PodGroup joined before the group existed
            out.unplaced = len(stray_pods(objs, lambda name: found.pods.get(f"{ns}/{name}")))
            if out.unplaced:
                out.notes.append(f"{out.unplaced} member pod(s) joined another PodGroup (or none) before the group "
                                 "existed: a pod's scheduling group is fixed at creation, so they are placed without "
                                 "the group")
        result.written += await self._free_pods(key, set(self._candidates(ns, key.name)))
        return out

    async def _free_pods(self, key: WorkloadKey, members: set[WorkloadKey], *, gone: bool = False) -> int:
        """Upstream backend: pods of the namespace's workloads but ``members`` that still name one of its
        PodGroups cannot move (``spec.schedulingGroup`` is fixed at creation) and would never bind once the
        group no longer counts them. Those not yet scheduled and managed by a controller are deleted, so
        their controller creates them anew and the webhook places them in their own PodGroup; a bound pod
        keeps running, a bare pod (nobody recreates it) is left and reported. Level-triggered: every
        workload of the namespace is looked at, whoever saw it leave (a restart in between included)."""
        pods_inf = self.cache.informer(POD)
        if pods_inf is None:
            return 0
        prefix = rendered_name(key.namespace, key.name)
        deleted = 0
        workloads = [wl for wl in self.index.workloads()
                     if wl.namespace == key.namespace and not is_group_key(wl) and wl not in members]
        for wl in sorted(workloads):
            top = self._top_owner(wl)
            try:
                if top is None or (not gone and wg.membership(top) == key.name):
                    continue  # not cached (cannot tell), or still a member (the group waits for its pods)
            except wg.InvalidWorkloadGroup:
                pass
            for k in sorted(self.index.pods_of(wl)):
                pod = pods_inf.get(*k)
                fate = left_behind(pod, prefix) if pod is not None else None
                if pod is None or fate is None:
                    continue
                group = scheduling_group(pod)
                if fate == "bare":
                    log.warning("Pod %s/%s names PodGroup %s of WorkloadGroup %s it left; not recreated (no "
                                "controller): delete it to schedule it alone", k[0], k[1], group, key.name)
                    continue
                if not self.writer.can_write():
                    raise NotLeader()
                body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": o.uid(pod)}}
                try:
                    await self.writer.client.request("DELETE", f"/api/v1/namespaces/{k[0]}/pods/{k[1]}", body=body)
                except ApiError as e:
                    if not (e.not_found or e.conflict):
                        raise
                    continue
                deleted += 1
                log.info("Pod %s/%s deleted: it names PodGroup %s of WorkloadGroup %s, which its workload left "
                         "(its controller creates it anew in its own PodGroup)", k[0], k[1], group, key.name,
                         extra={"pod": f"{k[0]}/{k[1]}"})
        return deleted

    async def _release(self, key: WorkloadKey, candidates: list[WorkloadKey]) -> Result:
        """The group object is gone (or never was): its members are grouped alone again, the rendered
        PodGroup goes (the garbage collector removes it too: it is owned by the group)."""
        for wl in candidates:
            if self._member_of.get(wl) == key:
                self.enqueue(wl)
        for wl, k in list(self._member_of.items()):
            if k == key and wl not in candidates:
                self.enqueue(wl)
        if self.upstream is not None:  # the owner's deletion takes the upstream objects (garbage collector)
            self._member_of = {wl: k for wl, k in self._member_of.items() if k != key}
            written = await self._free_pods(key, set(), gone=True)
        else:
            self.index.set_pod_groups(key, ())
            written = await self._delete_rendered(key, rendered_name(key.namespace, key.name))
        self.store.forget_pod_group(key.namespace, rendered_name(key.namespace, key.name))
        self.store.forget_workload(str(key))
        return Result(plugin="workload-group", written=written)

    async def _delete_rendered(self, key: WorkloadKey, name: str) -> int:
        stored = self.writer.current(key.namespace, name)
        if stored is None or not any(r.get("kind") == wg.KIND and str(r.get("apiVersion") or "").startswith(wg.GROUP)
                                     for r in o.owner_references(stored)):
            return 0  # not there, or not ours to delete
        return await self.reconciler.delete_replaced(key, [stored], "its WorkloadGroup is not rendered")

    async def _delete_own(self, namespace: str, found: _Members) -> int:
        """Delete the PodGroups owned by the members' top owners that no pod names any more: the group's
        replaced them (one named by a pod whose patch moves it away goes once that patch has landed)."""
        pods = self.cache.informer(POD)
        deleted = 0
        for wl, plan in found.plans.items():
            if pods is None or plan.workload_ref is None or not plan.workload_ref.uid:
                continue
            own = [pg for pg in self.reconciler.pod_groups_owned(namespace, plan.workload_ref.uid)
                   if self.writer.current(namespace, o.name(pg)) is not None
                   and not self.reconciler.namers(pods, namespace, o.name(pg))]
            deleted += await self.reconciler.delete_replaced(wl, own, "its workload is in a WorkloadGroup")
        return deleted

    async def _report(self, involved: InvolvedObject, render: GroupRender, found: _Members) -> None:
        members = [InvolvedObject.of_owner(p.workload_ref, involved.namespace) for p in found.plans.values()
                   if p.workload_ref is not None]
        cause = f"{CAUSE}/{involved.name}"
        if not render.errors:
            self.recorder.clear(involved, CAUSE)
            for m in members:
                self.recorder.clear(m, cause)
            return
        message = "; ".join(render.errors)
        if await self.recorder.report(involved, CAUSE, message):
            log.warning("%s", message, extra={"workload": f"{wg.KIND} {involved.namespace}/{involved.name}"})
        for m in members:
            await self.recorder.report(m, cause, message)

    async def _write_status(self, obj: Obj, status: dict[str, Any]) -> int:
        stored = obj.get("status") if isinstance(obj.get("status"), dict) else None
        if same_status(status, stored):
            return 0
        if not self.writer.can_write():
            raise NotLeader()
        res = await self.cache.discovery.resolve(WORKLOADGROUP)
        if res is None:
            return 0
        body = {"status": status_patch(status, stored, datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))}
        try:
            await self.writer.client.merge_patch(res.path(o.namespace(obj), o.name(obj), "status"), body)
        except ApiError as e:
            if e.not_found:
                return 0
            raise
        return 1


__all__ = ["WORKLOADGROUP", "WorkloadGroups", "group_key", "is_group_key"]
