"""Turn the controller's records and cached objects into API responses. Pure reads; no I/O.

The decision store returns typed records (``grouper.records.typed``: per pod its decision, last error and
patch; per PodGroup the desired object, the pods assigned and the last write); ``convert.py`` maps them to
the response models, one converter per model. Pods and workloads come from the caches
(pods are cached slim: metadata, ``spec.nodeName``, ``status.phase``). Nothing from a pod spec, no
environment values and no annotation that may carry a whole manifest ever leaves this module.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from grouper.api.convert import decision_record, definition_ref, pod_decision, pod_last_error
from grouper.api.models import (
    ERROR_PODS_LIMIT,
    ERRORS_LIMIT,
    DefinitionIssue,
    DefinitionList,
    DefinitionView,
    GangReasonView,
    GangStateName,
    GangSubGroupView,
    GangView,
    GVKView,
    LastError,
    PodDecision,
    PodGroupDetail,
    PodGroupSummary,
    PodInfo,
    SubGroupView,
    WorkloadError,
    WorkloadGroupView,
    WorkloadRef,
    WorkloadSummaryView,
)
from grouper.api.selectors import Selector
from grouper.api.state import GangSource, ObjectSource, StateReader, safe_get
from grouper.api.workload_group import member_group
from grouper.core.gang_state import worst
from grouper.core.upstream import scheduling_group
from grouper.model import objects as o
from grouper.model import workload_group as wg
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import (
    POD_GROUP_ANNOTATION,
    PODGROUP_API_VERSION,
    PODGROUP_KIND,
    SUBGROUP_LABEL,
    OwnerRef,
)
from grouper.plugins.karta import definition_label_keys
from grouper.plugins.registry import native_plugins
from grouper.records.typed import POD_GROUP_NOT_WRITTEN, PodGroupRecord, PodRecord, timestamp

if TYPE_CHECKING:
    from grouper.core.gang_state import GangState
    from grouper.karta import Evaluator, KartaDefinition

# Annotations that can hold a whole manifest (env values included); shown as a placeholder.
REDACTED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)
REDACTED = "(redacted: may contain the full manifest)"


@runtime_checkable
class _ReadsLabels(Protocol):
    label_keys: frozenset[str]


@functools.cache
def plugin_label_keys() -> frozenset[str]:
    """The pod labels the native plugins declare they read (each plugin's ``label_keys``)."""
    plugins = native_plugins().values()
    return frozenset().union(*(p.label_keys for p in plugins if isinstance(p, _ReadsLabels)))


@dataclass(frozen=True)
class ListFilters:
    namespace: str | None = None
    kind: str | None = None
    plugin: str | None = None
    queue: str | None = None
    selector: Selector = field(default_factory=Selector)


def kind_matches(pattern: str, api_version: str, kind: str) -> bool:
    """``Kind``, ``Kind.group`` or ``Kind.version.group``, case-insensitive (``pod`` matches core Pods)."""
    gvk = GVK.from_api_version(api_version, kind)
    p = pattern.strip().lower()
    candidates = {kind.lower(), f"{kind}.{gvk.group}".lower(), f"{kind}.{gvk.version}.{gvk.group}".lower()}
    return p in candidates


def plugin_matches(pattern: str, plugin: str | None) -> bool:
    """``jobset`` matches ``JobSet Grouper``: case, spaces, dashes and a trailing "grouper" are ignored."""

    def norm(s: str) -> str:
        s = s.lower().replace("-", "").replace("_", "").replace(" ", "")
        return s.removesuffix("grouper") or s

    return plugin is not None and norm(pattern) == norm(plugin)


SCRUBBED_KEYS = frozenset({"env", "envFrom", "containers", "initContainers", "volumes", "template", "annotations",
                           "podSpec", "podTemplate", "spec"})


def scrub(value: Any) -> Any:
    """Drop, at any depth, keys that could carry pod specs, environment values or annotations."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if k not in SCRUBBED_KEYS}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def _sanitize_object(obj: Obj) -> Obj:
    meta = dict(obj.get("metadata") or {})
    ann = meta.get("annotations")
    if isinstance(ann, dict) and any(k in ann for k in REDACTED_ANNOTATIONS):
        meta["annotations"] = {k: (REDACTED if k in REDACTED_ANNOTATIONS else v) for k, v in ann.items()}
    meta.pop("managedFields", None)
    return {**obj, "metadata": meta}


def _desired(rec: PodGroupRecord) -> Obj:
    """The decided PodGroup object of a PodGroup record (an empty shell when the decision failed)."""
    d = rec.desired()
    if isinstance(d, dict) and "spec" in d:
        return d
    spec = d if isinstance(d, dict) else {}
    return {
        "apiVersion": PODGROUP_API_VERSION,
        "kind": PODGROUP_KIND,
        "metadata": {"name": rec.name, "namespace": rec.namespace},
        "spec": spec,
    }


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _rfc3339(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if moment is not None else None


def worst_gang_state(gangs: Iterable[GangView]) -> GangStateName | None:
    """The worst state of these gangs (a workload's state; the web view's workload page shows it too)."""
    state = worst(g.state for g in gangs)
    return state.value if state is not None else None


def gang_view(name: str, st: GangState, now: datetime) -> GangView:
    """A PodGroup's gang state (:mod:`grouper.core.gang_state`) as the API shows it."""
    return GangView(
        podGroup=name,
        state=st.state.value,
        since=_rfc3339(st.since) or "",
        secondsInState=st.seconds_in_state(now),
        required=st.counts.required,
        present=st.counts.present,
        scheduled=st.counts.scheduled,
        queue=st.queue,
        requestedGPUs=st.requested_gpus,
        admittedAt=_rfc3339(st.admitted_at),
        timeToAdmissionSeconds=st.time_to_admission,
        reasons=[GangReasonView(source=r.source, reason=r.reason, message=r.message,  # type: ignore[arg-type]
                                type=r.type, nodePool=r.node_pool, pods=list(r.pods), since=_rfc3339(r.since))
                 for r in st.reasons],
        subGroups=[GangSubGroupView(name=sg.name, parent=sg.parent, required=sg.counts.required,
                                    present=sg.counts.present, scheduled=sg.counts.scheduled, satisfied=sg.satisfied)
                   for sg in st.sub_groups],
        error=st.error,
    )


def _gang(source: GangSource | None, namespace: str, name: str) -> GangView | None:
    st = source.get(namespace, name) if source is not None else None
    return gang_view(name, st, source.clock()) if source is not None and st is not None else None


class Views:
    """Response builders over one :class:`StateReader`. Keeps two small caches (evaluators, statuses)."""

    def __init__(self, state: StateReader, *, cache_size: int = 4096) -> None:
        self.state = state
        self._evaluators: dict[int, tuple[KartaDefinition, Evaluator]] = {}
        self._status: OrderedDict[tuple[str, str, int], str | None] = OrderedDict()
        self._cache_size = cache_size

    # ------------------------------------------------------------------ Karta

    def definition_for(self, api_version: str, kind: str) -> KartaDefinition | None:
        reg = self.state.definition_registry()
        if reg is None:
            return None
        try:
            res = reg.resolve(GVK.from_api_version(api_version, kind))
        except Exception:  # a registry that cannot answer means "no definition"
            return None
        if res.definition is not None or res.error:
            return res.definition
        # A definition without gang instructions (CronJob, Pod, NIMCache in the catalog) does not group,
        # but it still gives the workload's status and describe tree: use the single usable one.
        usable = [c for c in res.candidates if getattr(c, "usable", False)]
        cluster = [c for c in usable if getattr(c, "source", "") == "cluster"]
        pool = cluster or usable
        return pool[0].definition if len(pool) == 1 else None

    def unused_definition_notes(self, api_version: str, kind: str, plugin: Any) -> list[str]:
        """Why Karta definitions for this kind were not used, when the pods fell back to another plugin."""
        reg = self.state.definition_registry()
        if reg is None:
            return []
        gvk = GVK.from_api_version(api_version, kind)
        try:
            res = reg.resolve(gvk)
        except Exception:  # nothing to explain
            return []
        out = [f"Karta {name} for {gvk} was not used: {why}; pods were grouped by {plugin or 'another plugin'}"
               for name, why in sorted(res.skipped.items())]
        if res.error:
            out.append(f"Karta resolution for {gvk} failed: {res.error}; pods were grouped by {plugin}")
        return out

    def evaluator(self, defn: KartaDefinition) -> Evaluator:
        """The registry's evaluator (cluster definitions run jq in its sandbox), else a local one."""
        from grouper.karta import Evaluator

        reg = self.state.definition_registry()
        if reg is not None and hasattr(reg, "evaluator"):
            ev: Evaluator = reg.evaluator(defn)
            return ev
        hit = self._evaluators.get(id(defn))
        if hit is not None and hit[0] is defn:
            return hit[1]
        if len(self._evaluators) > 256:
            self._evaluators.clear()
        ev = Evaluator(defn)
        self._evaluators[id(defn)] = (defn, ev)
        return ev

    def workload_status(self, workload: Obj | None) -> str | None:
        """Primary status via the kind's Karta definition, cached per (uid, resourceVersion, definition)."""
        if workload is None:
            return None
        defn = self.definition_for(str(workload.get("apiVersion") or ""), str(workload.get("kind") or ""))
        if defn is None:
            return None
        key = (o.uid(workload), str(o.meta(workload).get("resourceVersion") or ""), id(defn))
        if key[1] and key in self._status:
            self._status.move_to_end(key)
            return self._status[key]
        try:
            status: str | None = self.evaluator(defn).status(workload).primary
        except Exception:  # a definition that cannot evaluate this object has no status to show
            status = None
        if key[1]:
            self._status[key] = status
            if len(self._status) > self._cache_size:
                self._status.popitem(last=False)
        return status

    # ------------------------------------------------------------------ pods

    def grouping_label_keys(self, defn: KartaDefinition | None = None) -> set[str]:
        """The pod labels grouping reads: the queue and node-pool keys of the configuration, what every
        native plugin declares (``label_keys``) and what ``defn`` (the workload's Karta definition) reads."""
        cfg = self.state.grouping_config()
        keys = {*plugin_label_keys(), cfg.queue_label_key, cfg.nodepool_label_key}
        if defn is not None:
            keys |= definition_label_keys(defn)
        return keys

    def pod_info(self, objects: ObjectSource, namespace: str, name: str, sub_group: str | None,
                 label_keys: set[str]) -> PodInfo:
        pod = safe_get(objects, "v1", "Pod", namespace, name)
        if pod is None:
            return PodInfo(name=name, phase=None, node=None, subGroup=sub_group, labels={})
        labels = {k: v for k, v in o.labels(pod).items() if k in label_keys}
        phase = o.dig(pod, "status", "phase")
        node = o.dig(pod, "spec", "nodeName")
        return PodInfo(
            name=name,
            phase=str(phase) if phase else None,
            node=str(node) if node else None,
            subGroup=sub_group,
            labels=labels,
        )

    # ------------------------------------------------------------------ PodGroups

    def workload_ref(self, rec: PodGroupRecord, desired: Obj) -> WorkloadRef:
        """The PodGroup's workload: its owner reference, else the top owner of its pods' decisions."""
        refs = o.owner_references(desired)
        if refs:
            src = refs[0]
            return WorkloadRef(apiVersion=str(src.get("apiVersion") or ""), kind=str(src.get("kind") or ""),
                               name=str(src.get("name") or ""))
        rep = self.representative(rec)
        top = rep.top_owner if rep is not None else None
        if top is None:
            top = next((r.top_owner for r in self.state.decision_source().pods_of_group(rec.namespace, rec.name)
                        if r.top_owner is not None), None)
        if top is None:
            return WorkloadRef(apiVersion="", kind="", name="")
        return WorkloadRef(apiVersion=top.api_version, kind=top.kind, name=top.name)

    def representative(self, rec: PodGroupRecord) -> PodRecord | None:
        """The record of the pod whose view of the PodGroup was written (the PodGroup's record names it:
        the merge rule of ``core/workload_plan.py`` is not repeated here); else its first grouped pod, else
        its first pod. Renders one pod record, or as few as it takes."""
        decisions = self.state.decision_source()
        if rec.newest:
            newest = decisions.pod(rec.namespace, rec.newest)
            if newest is not None and newest.pod_group == rec.name:
                return newest
        first = None
        for name in decisions.pod_names_of_group(rec.namespace, rec.name):
            pod = decisions.pod(rec.namespace, name)
            if pod is not None and pod.outcome == "grouped":
                return pod
            first = first or pod
        return first

    def matching_podgroups(self, f: ListFilters) -> list[PodGroupRecord]:
        """The record of every managed PodGroup matching ``f``, by (namespace, name). A PodGroup that was
        never written (its create refused) is not listed: it does not exist; its workload is among
        :meth:`workload_errors`.

        Cheap, so that a listing pages before it renders (:meth:`summary`): no pod record is rendered but
        the representative's when ``f.plugin`` asks, and the desired object is decoded only when a filter
        reads it.
        """
        out = []
        for rec in self.state.decision_source().pod_groups(f.namespace):
            if not rec.stored:
                continue
            desired = _desired(rec) if (f.kind or f.queue or f.selector) else {}
            if f.kind:
                wl = self.workload_ref(rec, desired)
                if not kind_matches(f.kind, wl.apiVersion, wl.kind):
                    continue
            if f.plugin:
                rep = self.representative(rec)
                if not plugin_matches(f.plugin, rep.part.plugin if rep is not None and rep.part else None):
                    continue
            if f.queue and (desired.get("spec") or {}).get("queue") != f.queue:
                continue
            if f.selector and not f.selector.matches(o.labels(desired)):
                continue
            out.append(rec)
        return out

    def workload_errors(self, f: ListFilters, listed: Iterable[PodGroupRecord]) -> list[WorkloadError]:
        """Workloads whose latest pod decisions failed and that own none of the ``listed`` PodGroup records,
        and workloads a write of which the API server refused (a PodGroup, listed or not, or a pod's mark).

        Only ``f.namespace`` and ``f.kind`` apply. Pods without a top owner (their owner chain could not be
        resolved) are their own workload, kind Pod. Sorted by namespace, kind, name; at most ``ERRORS_LIMIT``.
        """
        covered = {r.workload for r in listed} - {""}
        # per workload: (time, pod, reason, message) of each failure
        failing: dict[tuple[str, str, str, str], list[tuple[str, str, str, str]]] = {}
        decisions = self.state.decision_source()
        for rec in decisions.pod_groups(f.namespace):
            if rec.ok:
                continue
            refs = o.owner_references(_desired(rec))
            owner = refs[0] if refs else {}
            if f.kind and not kind_matches(f.kind, str(owner.get("apiVersion") or ""), str(owner.get("kind") or "")):
                continue
            key = (rec.namespace, str(owner.get("kind") or ""), str(owner.get("name") or ""),
                   str(owner.get("apiVersion") or ""))
            when = timestamp(rec.error_at) or ""
            failing.setdefault(key, []).extend(  # each pod of it, as the pods' records show it
                (when, pod, POD_GROUP_NOT_WRITTEN, rec.last_error or "") for pod in rec.pods)
        for r in decisions.failing_pods(f.namespace):
            written = r.outcome == "failed"  # a refused write: listed whatever else is
            if r.outcome != "error" and not written:
                continue
            if not written and (r.workload or "") in covered:
                continue
            top = r.top_owner
            ref = (WorkloadRef(apiVersion=top.api_version, kind=top.kind, name=top.name) if top and top.kind
                   else WorkloadRef(apiVersion="v1", kind="Pod", name=r.name))
            if f.kind and not kind_matches(f.kind, ref.apiVersion, ref.kind):
                continue
            when = timestamp(r.last_error_at if r.last_error_at is not None else r.decided_at) or ""
            failing.setdefault((r.namespace, ref.kind, ref.name, ref.apiVersion), []).append(
                (when, r.name, r.reason, r.message))
        out = []
        for (ns, kind, name, api_version), failures in sorted(failing.items())[:ERRORS_LIMIT]:
            when, _, reason, message = max(failures, key=lambda x: (x[0], x[1]))
            pods = sorted({pod for _, pod, _, _ in failures})
            out.append(WorkloadError(
                workload=WorkloadRef(apiVersion=api_version, kind=kind, name=name),
                namespace=ns,
                reason=reason,
                message=message,
                time=when or None,
                pods=pods[:ERROR_PODS_LIMIT],
                podCount=len(pods),
            ))
        return out

    def summary(self, objects: ObjectSource, rec: PodGroupRecord) -> PodGroupSummary:
        """A listed PodGroup (the costly part of a listing: one per page item)."""
        desired = _desired(rec)
        spec = desired.get("spec") or {}
        rep = self.representative(rec)
        part = rep.part if rep is not None else None
        wl = self.workload_ref(rec, desired)
        workload_obj = safe_get(objects, wl.apiVersion, wl.kind, rec.namespace, wl.name) if wl.kind else None
        queue = spec.get("queue")
        return PodGroupSummary(
            name=rec.name,
            namespace=rec.namespace,
            workload=wl,
            plugin=part.plugin if part is not None else None,
            definition=definition_ref(part.definition) if part is not None else None,
            queue=str(queue) if queue else None,
            minMember=_int(spec.get("minMember")),
            minSubGroup=_int(spec.get("minSubGroup")),
            podsAssigned=len(rec.pods),
            workloadStatus=self.workload_status(workload_obj),
            gang=_gang(self.state.gang_source(), rec.namespace, rec.name),
        )

    def podgroup_detail(self, namespace: str, name: str) -> PodGroupDetail | None:
        decisions = self.state.decision_source()
        rec = decisions.pod_group(namespace, name)
        if rec is None:
            return None
        objects = self.state.object_source()
        desired = _sanitize_object(_desired(rec))
        spec = desired.get("spec") or {}
        pod_recs = decisions.pods_of_group(namespace, name)
        rep = self.representative(rec)
        part = rep.part if rep is not None else None
        wl = self.workload_ref(rec, desired)
        workload_obj = safe_get(objects, wl.apiVersion, wl.kind, namespace, wl.name) if wl.kind else None
        defn = self.definition_for(wl.apiVersion, wl.kind) if wl.kind else None
        keys = self.grouping_label_keys(defn)

        # the pods whose latest decision names this PodGroup: never those that moved to another one
        sub_of = {r.name: r.sub_group for r in pod_recs}
        if wl.kind == wg.KIND and wl.apiVersion == wg.API_VERSION:
            # a WorkloadGroup's rendered PodGroup: its members' decisions name their own PodGroups; the group
            # placed the pods the record lists, each in the leaf its label names
            sub_of = {}
            for p in rec.pods:
                cached = safe_get(objects, "v1", "Pod", namespace, p)
                sub_of[p] = o.labels(cached).get(SUBGROUP_LABEL) if cached is not None else None
        pod_names = sorted(sub_of)
        pods = [self.pod_info(objects, namespace, p, sub_of.get(p), keys) for p in pod_names]
        sub_groups = self._sub_groups(spec, pods)

        stored = safe_get(objects, PODGROUP_API_VERSION, PODGROUP_KIND, namespace, name)
        stored_rv = (str(o.meta(stored).get("resourceVersion") or "") or None) if stored is not None else None

        roots = [sg for sg in sub_groups if not sg.parent]
        if _int(spec.get("minSubGroup")) is not None:
            required, unit, present = _int(spec.get("minSubGroup")), "subGroups", sum(1 for sg in roots if sg.present)
        else:
            required, unit, present = _int(spec.get("minMember")), "pods", len(pods)

        notes = list(dict.fromkeys([*(part.notes if part is not None else ()), *rec.notes]))
        if wl.kind and (part is None or part.definition is None):
            notes += self.unused_definition_notes(wl.apiVersion, wl.kind, part.plugin if part is not None else None)
        return PodGroupDetail(
            name=name,
            namespace=namespace,
            workload=wl,
            workloadStatus=self.workload_status(workload_obj),
            podGroup=desired,
            storedResourceVersion=stored_rv,
            required=required,
            requiredUnit=unit,  # type: ignore[arg-type]
            present=present,
            subGroups=sub_groups,
            pods=pods,
            decision=decision_record(part, notes, self._last_error(rec, pod_recs)),
            gang=_gang(self.state.gang_source(), namespace, name),
        )

    def pod_decision(self, namespace: str, name: str) -> PodDecision | None:
        rec = self.state.decision_source().pod(namespace, name)
        if rec is None:
            return None
        part, top = rec.part, rec.top_owner
        defn = self.definition_for(top.api_version, top.kind) if top is not None and top.kind else None
        notes = list(part.notes) if part is not None else []
        if top is not None and top.kind and part is not None and part.definition is None and part.plugin:
            notes += self.unused_definition_notes(top.api_version, top.kind, part.plugin)
        pod_group, sub_group = rec.pod_group, rec.sub_group
        group = None
        if top is not None and top.kind:
            objects = self.state.object_source()
            workload = safe_get(objects, top.api_version, top.kind, namespace, top.name)
            found = self.member_group(namespace, workload)
            group = found[0] if found is not None else None
        if group is not None and rec.outcome == "grouped":
            # held for the group: the pod is in the group's PodGroup (or waits on its name), not the one its
            # workload alone would have
            pod_obj = safe_get(self.state.object_source(), "v1", "Pod", namespace, name)
            carried = (o.annotations(pod_obj).get(POD_GROUP_ANNOTATION) or scheduling_group(pod_obj)
                       if pod_obj is not None else None)
            if pod_group:
                notes.append(f"its workload alone would be in PodGroup {pod_group}; it is not written while the "
                             f"workload is a member of WorkloadGroup {group.name}")
            pod_group = carried if carried and carried.startswith(group.podGroup) else group.podGroup
            sub_group = (o.labels(pod_obj).get(SUBGROUP_LABEL) if pod_obj is not None and group.rendered
                         else None)
        status = self.pod_info(self.state.object_source(), namespace, name, sub_group, self.grouping_label_keys(defn))
        return pod_decision(rec, notes=notes, pod_group=pod_group, sub_group=sub_group, status=status, group=group)

    @staticmethod
    def _last_error(rec: PodGroupRecord, pod_recs: list[PodRecord]) -> LastError | None:
        """The newest error of the PodGroup write or of any of its pods' decisions / patches."""
        candidates: list[tuple[str, str, str]] = []
        if rec.last_error:
            candidates.append((timestamp(rec.error_at) or "", "PodGroupWrite", rec.last_error))
        for r in pod_recs:
            error = pod_last_error(r)
            if error is not None:
                candidates.append((error.time or "", error.reason, f"pod {r.name}: {error.message}"))
        if not candidates:
            return None
        when, reason, message = max(candidates)
        return LastError(reason=reason, message=message, time=when or None)

    @staticmethod
    def _sub_groups(spec: dict[str, Any], pods: list[PodInfo]) -> list[SubGroupView]:
        raw = [sg for sg in spec.get("subGroups") or [] if isinstance(sg, dict)]
        members: dict[str, list[str]] = {}
        for p in pods:
            if p.subGroup:
                members.setdefault(p.subGroup, []).append(p.name)
        children: dict[str, list[str]] = {}
        for sg in raw:
            if sg.get("parent"):
                children.setdefault(str(sg["parent"]), []).append(str(sg.get("name")))

        def has_pods(name: str, seen: frozenset[str] = frozenset()) -> bool:
            if name in seen:
                return False
            return bool(members.get(name)) or any(has_pods(c, seen | {name}) for c in children.get(name, []))

        out: list[SubGroupView] = []
        for sg in raw:
            name = str(sg.get("name") or "")
            kids = children.get(name, [])
            min_member, min_sub = _int(sg.get("minMember")), _int(sg.get("minSubGroup"))
            topo = sg.get("topologyConstraint")
            out.append(
                SubGroupView(
                    name=name,
                    parent=str(sg["parent"]) if sg.get("parent") else None,
                    minMember=min_member,
                    minSubGroup=min_sub,
                    topologyConstraint={str(k): str(v) for k, v in topo.items()} if isinstance(topo, dict) else None,
                    required=min_sub if kids else min_member,
                    present=sum(1 for c in kids if has_pods(c)) if kids else len(members.get(name, [])),
                    pods=sorted(members.get(name, [])),
                )
            )
        return out

    # ------------------------------------------------------------------ workloads

    def member_group(self, namespace: str, workload: Obj | None) -> tuple[WorkloadGroupView, list[GangView]] | None:
        """The WorkloadGroup ``workload`` (a top owner) is a member of, from the caches, and the gang states of
        the PodGroups the group owns (its rendered gang); None when it is in no existing group."""
        objects, gangs = self.state.object_source(), self.state.gang_source()

        def read(ns: str, name: str) -> Obj | None:
            return safe_get(objects, wg.API_VERSION, wg.KIND, ns, name)

        def owned(group: Obj) -> list[GangView]:
            if gangs is None or not o.uid(group):
                return []
            now = gangs.clock()
            return [gang_view(n, st, now) for n, st in gangs.of_workload(o.namespace(group), o.uid(group))]

        return member_group(workload, namespace, read, owned)

    def known_workload_kinds(self, namespace: str) -> list[tuple[str, str]]:
        """(apiVersion, kind) of every top owner seen in ``namespace`` and every definition's root kind."""
        seen: dict[tuple[str, str], None] = {}
        for r in self.state.decision_source().pods(namespace):
            if r.top_owner is not None and r.top_owner.kind:
                seen[(r.top_owner.api_version, r.top_owner.kind)] = None
        for rec in self.state.decision_source().pod_groups(namespace):
            for ref in o.owner_references(_desired(rec)):
                seen[(str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""))] = None
        if self.state.definition_registry() is not None:
            try:
                for ld in self.state.definition_registry().all():
                    g = ld.definition.gvk
                    if g.kind:
                        seen[(g.api_version, g.kind)] = None
            except Exception:  # registry not ready: only what the decisions name
                pass
        return list(seen)

    def workload_pods(self, namespace: str, api_version: str, kind: str, name: str, uid: str) -> list[PodRecord]:
        group = GVK.from_api_version(api_version, kind).group
        out = []
        for r in self.state.decision_source().pods(namespace):
            top = r.top_owner
            if top is None:
                continue
            if (uid and top.uid == uid) or (
                top.kind == kind and top.name == name and GVK.from_api_version(top.api_version, kind).group == group
            ):
                out.append(r)
        return out

    def workload_list(self, namespace: str | None) -> list[WorkloadSummaryView]:
        """Every workload this grouper decided pods for (the top owners of its decision records), one
        summary row each (``grouper.describe.workloads``), from the caches."""
        from grouper.describe import build_describe
        from grouper.describe.workloads import summarize, summary_without_definition

        groups: dict[tuple[str, str], tuple[OwnerRef, list[str]]] = {}
        failing: set[tuple[str, str]] = set()  # workloads with a pod whose grouping failed: state Error
        for r in self.state.decision_source().pods(namespace):
            top = r.top_owner
            if top is None or not top.kind:
                continue
            key = (r.namespace, top.uid or f"{top.api_version}/{top.kind}/{top.name}")
            groups.setdefault(key, (top, []))[1].append(r.name)
            if r.outcome in ("error", "failed"):
                failing.add(key)
        objects = self.state.object_source()
        gangs = self.state.gang_source()
        now = gangs.clock() if gangs is not None else None
        out: list[WorkloadSummaryView] = []
        for key, (top, pod_names) in groups.items():
            ns = key[0]
            av, kind, wname = top.api_version, top.kind, top.name
            workload = safe_get(objects, av, kind, ns, wname) or {
                "apiVersion": av, "kind": kind, "metadata": {"name": wname, "namespace": ns, "uid": top.uid}}
            if not workload.get("apiVersion"):
                workload = {**workload, "apiVersion": av, "kind": kind}
            pods = [p for p in (safe_get(objects, "v1", "Pod", ns, n) for n in sorted(set(pod_names))) if p is not None]
            defn = self.definition_for(av, kind)
            summary = None
            if defn is not None:
                try:
                    summary = summarize(build_describe(defn, self.evaluator(defn), workload, pods,
                                                       file_mode=False, pods_attributed=True))
                except Exception as e:  # the row stays, without the definition's view
                    summary = summary_without_definition(workload, pods)
                    summary.definition, summary.origin = defn.name, defn.origin
                    summary.warnings.append(f"Karta {defn.name}: {e}")
            if summary is None:
                summary = summary_without_definition(workload, pods, self.workload_status(workload))
            summary.pods = max(summary.pods, len(pods))
            view = WorkloadSummaryView.model_validate(summary.to_dict())
            if gangs is not None and now is not None and top.uid:
                views = [gang_view(n, st, now) for n, st in gangs.of_workload(ns, top.uid)]
                if views:
                    view.gangs = views
                    view.state = worst_gang_state(views)
            group = self.member_group(ns, workload)
            if group is not None:  # its gang is the group's rendered one (it has none of its own)
                view.workloadGroup, view.gangs = group
                view.state = group[0].gangState
            if key in failing:  # grouping failed for some of its pods (the errors listing says why)
                view.state = "Error"
            out.append(view)
        return sorted(out, key=lambda s: (s.namespace, s.kind, s.name))

    # ------------------------------------------------------------------ definitions

    def definitions(self) -> DefinitionList:
        """Every definition the registry holds (cluster first), plus documents that failed to load."""
        reg = self.state.definition_registry()
        if reg is None:
            return DefinitionList(items=[])
        items: list[DefinitionView] = []
        resolutions: dict[GVK, Any] = {}
        for ld in reg.all():
            d = ld.definition
            if d.gvk.kind and d.gvk not in resolutions:
                try:
                    resolutions[d.gvk] = reg.resolve(d.gvk)
                except Exception:  # treat as unresolvable
                    resolutions[d.gvk] = None
            res = resolutions.get(d.gvk)
            active = res is not None and res.definition is d
            why: str | None = None
            if not active and res is not None:
                why = res.skipped.get(d.name) or res.error or "another definition is used for this kind"
            elif not active:
                why = "the root component has no kind" if not d.gvk.kind else "not resolvable"
            items.append(
                DefinitionView(
                    name=d.name,
                    origin=ld.origin,
                    gvk=GVKView(group=d.gvk.group, version=d.gvk.version, kind=d.gvk.kind),
                    valid=ld.report.ok,
                    active=active,
                    notUsedReason=why,
                    quarantine=getattr(ld, "quarantine", None),
                    errors=[DefinitionIssue(field=i.field, message=i.message, expression=i.expression)
                            for i in ld.report.errors],
                    warnings=[DefinitionIssue(field=i.field, message=i.message, expression=i.expression)
                              for i in ld.report.warnings],
                    resourceVersion=d.resource_version,
                )
            )
        failed: list[tuple[str, str, Any]] = []
        if hasattr(reg, "cluster_errors"):
            failed += [(name, f"cluster:Karta/{name}", e) for name, e in reg.cluster_errors().items()]
        failed += [(str(getattr(e, "file", "") or ""), str(getattr(e, "file", "") or "builtin"), e)
                   for e in getattr(reg, "load_errors", [])]
        for name, origin, e in failed:
            items.append(
                DefinitionView(
                    name=name,
                    origin=origin,
                    gvk=GVKView(group="", version="", kind=""),
                    valid=False,
                    active=False,
                    notUsedReason="cannot be loaded",
                    quarantine=None,
                    errors=[DefinitionIssue(field=str(getattr(e, "field", "") or ""),
                                            message=str(getattr(e, "message", e)))],
                    warnings=[],
                )
            )
        return DefinitionList(items=items)


__all__ = ["ListFilters", "Views", "kind_matches", "plugin_label_keys"]
