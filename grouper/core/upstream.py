"""Translate a KAI PodGroup decision into upstream Kubernetes gang-scheduling objects (pure, no I/O).

Kubernetes 1.37 (``scheduling.k8s.io/v1beta1``, feature gate ``GenericWorkload``): a **Workload** lists
``podGroupTemplates`` (at most 8, fixed after creation), each a ``schedulingPolicy`` (``gang.minCount``
or ``basic``); a **PodGroup** is the runtime instance a pod joins through ``spec.schedulingGroup.
podGroupName`` (set at creation, immutable). ``gang.minCount`` (>= 1) is mutable; the policy kind is not.

Mapping of one KAI PodGroup ``N``: a Workload ``N`` with one template ``main`` and one PodGroup ``N``,
both owned like the KAI PodGroup, ``gang.minCount``:

- no sub-groups: ``minMember``;
- sub-groups: the fewest pods KAI's tree admits (a node with ``minSubGroup k`` needs its k cheapest
  children, a leaf its ``minMember``; the root also at least its own ``minMember``). Upstream PodGroups
  do not nest without CompositePodGroup (alpha, ``v1alpha3`` only, not written by this backend), and
  separate PodGroups per sub-group would let one sub-group be placed without the others: one gang over
  the whole tree keeps KAI's all-or-nothing for the workload. The sub-group identities and per-sub-group
  minimums are lost, and reported.

Always gang (``minCount`` 1 when KAI asks for 1): the policy cannot change after creation and a
workload scaled later must be able to raise ``minCount``. Never ``minCount: 0`` (the API server refuses
it): a decision that admits zero pods is written as 1 and noted. Everything the upstream objects cannot
carry is returned in ``notes`` (see :data:`NOT_CARRIED`), never dropped silently.

How the API behaves, and what this module checks because the API server does not (measured on 1.37):

- **Versions** come from discovery (:func:`choose_versions`): the newest version serving *both* Workload
  and PodGroup; a version serving only one of them is refused (never a Workload of one version with
  PodGroups of another). v1alpha2 (1.36) names the template ``podGroupTemplateRef.workload``.
- **The tree** (:func:`tree_errors`): the API server accepts a PodGroup whose parent does not exist and
  then binds nothing; the objects are checked before anything is written.
- **Priorities** (:func:`priority_warning`): pods of one gang with different priorities block the gang.
- **The admission signal** (:func:`initially_scheduled`): ``PodGroupInitiallyScheduled`` (1.37, terminal;
  ``PodGroupScheduled`` on 1.36 servers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grouper.model.podgroup import PodGroupMetadata, SubGroup

GROUP = "scheduling.k8s.io"
WORKLOAD_KIND = "Workload"
PODGROUP_KIND = "PodGroup"
MAIN_TEMPLATE = "main"
# KAI PodGroup fields with no upstream counterpart (reported per PodGroup when set).
NOT_CARRIED = (
    "queue",
    "preemptibility",
    "preemptionDelay",
    "stalenessGracePeriod",
    "topologyConstraint",
    "subGroups (names, parents, per-sub-group minMember/minSubGroup, topologyConstraint)",
    "minMember 0 (upstream minCount is at least 1)",
    "topology (the KAI Topology name) and preferredTopologyLevel",
    "pod membership of a sub-group (the kai.scheduler/subgroup-name label)",
)


# Newest first. Workload and PodGroup: v1 (GA, 1.38 or 1.39), v1beta1 and v1alpha3 (1.37), v1alpha2 (1.36);
# CompositePodGroup: v1alpha3 (1.37, alpha), later v1beta1 / v1.
WORKLOAD_VERSIONS = ("v1", "v1beta1", "v1alpha3", "v1alpha2")
COMPOSITE_VERSIONS = ("v1", "v1beta1", "v1alpha3")
COMPOSITE_KIND = "CompositePodGroup"
# the PodGroup condition that says the gang was admitted: 1.37 renamed it (k/k #139743); 1.36 servers
# (v1alpha2) still write the old name, which is read when the new one is absent
SCHEDULED_CONDITION = "PodGroupInitiallyScheduled"
OLD_SCHEDULED_CONDITION = "PodGroupScheduled"
MAX_TEMPLATES = 8  # per Workload (API validation)
MAX_DEPTH = 4  # CompositePodGroup nesting


@dataclass(frozen=True)
class UpstreamVersions:
    """API versions served for the kinds (from discovery), e.g. ``scheduling.k8s.io/v1beta1``; always one
    version for Workload and PodGroup. ``composite_pod_group``: where CompositePodGroup is served (None:
    not served; this backend does not write it)."""

    workload: str
    pod_group: str
    composite_pod_group: str | None = None


@dataclass
class VersionChoice:
    """What discovery found: the versions to use (None: no version serves both kinds), and the versions
    refused because they serve only one of Workload / PodGroup (``partial``: version -> the kind served)."""

    versions: UpstreamVersions | None
    partial: dict[str, str] = field(default_factory=dict)

    def problem(self) -> str | None:
        """Why nothing can be written (None when ``versions`` is set)."""
        if self.versions is not None:
            return None
        if self.partial:
            return (
                f"no version of {GROUP} serves both {WORKLOAD_KIND} and {PODGROUP_KIND}: "
                + "; ".join(self.partial_messages())
                + " (refused rather than mixing versions)"
            )
        return (
            f"the API server serves no {WORKLOAD_KIND}/{PODGROUP_KIND}.{GROUP} in {', '.join(WORKLOAD_VERSIONS)} "
            "(kube-apiserver needs --feature-gates=GenericWorkload=true and "
            "--runtime-config=scheduling.k8s.io/v1beta1=true)"
        )

    def partial_messages(self) -> list[str]:
        return [
            f"{GROUP}/{v} serves {kind} but not {PODGROUP_KIND if kind == WORKLOAD_KIND else WORKLOAD_KIND}"
            for v, kind in self.partial.items()
        ]


def choose_versions(served: dict[str, set[str]]) -> VersionChoice:
    """Pick versions from discovery: ``served`` maps a version of ``scheduling.k8s.io`` to the kinds it
    serves. Workload and PodGroup come from the newest version serving both; a newer version serving only
    one of them is refused (reported in ``partial``), never mixed with another version's other kind."""
    partial: dict[str, str] = {}
    chosen: str | None = None
    for v in WORKLOAD_VERSIONS:
        kinds = served.get(v) or set()
        has_wl, has_pg = WORKLOAD_KIND in kinds, PODGROUP_KIND in kinds
        if has_wl and has_pg:
            chosen = v
            break
        if has_wl or has_pg:
            partial[v] = WORKLOAD_KIND if has_wl else PODGROUP_KIND
    composite = next((v for v in COMPOSITE_VERSIONS if COMPOSITE_KIND in (served.get(v) or set())), None)
    if chosen is None:
        return VersionChoice(None, partial)
    av = f"{GROUP}/{chosen}"
    return VersionChoice(UpstreamVersions(av, av, f"{GROUP}/{composite}" if composite else None), partial)


@dataclass
class UpstreamObjects:
    workload: dict[str, Any]
    pod_groups: list[dict[str, Any]]
    group_of: dict[str, str]  # KAI sub-group name ("" = any) -> upstream PodGroup name
    notes: list[str] = field(default_factory=list)
    # CompositePodGroups of the tree (none written by this backend yet; checked by tree_errors all the same)
    composite_pod_groups: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # a broken tree: nothing may be written

    def pod_group_for(self, sub_group: str | None) -> str | None:
        """The upstream PodGroup a pod of ``sub_group`` joins (every sub-group joins the one gang)."""
        return self.group_of.get(sub_group or "", self.group_of.get(""))


def _need(sg: SubGroup | None, children: dict[str | None, list[SubGroup]], md: PodGroupMetadata) -> int:
    """The fewest pods that satisfy ``sg`` (None = the root) in KAI's sub-group tree."""
    kids = children.get(sg.name if sg else None, [])
    min_sub_group = sg.min_sub_group if sg else md.min_sub_group
    min_member = sg.min_member if sg else md.min_member
    needs = sorted(_need(k, children, md) for k in kids)
    if min_sub_group is not None:
        total = sum(needs[: max(min_sub_group, 0)])
    elif kids:
        total = sum(needs)
    else:
        total = 0
    return max(total, min_member if min_member is not None else (0 if kids else 1))


def tree_need(md: PodGroupMetadata) -> int:
    """The fewest pods KAI's tree admits (0 when every leaf asks for none; a sub-group whose parent is
    missing counts as a root here: :func:`source_tree_errors` refuses such a tree before writing)."""
    children: dict[str | None, list[SubGroup]] = {}
    names = {sg.name for sg in md.sub_groups}
    for sg in md.sub_groups:
        parent = sg.parent if sg.parent in names else None
        children.setdefault(parent, []).append(sg)
    return _need(None, children, md)


def tree_min_count(md: PodGroupMetadata) -> int:
    """``minCount`` of the one upstream gang that stands for ``md``: never 0 (the API refuses it)."""
    return max(tree_need(md), 1)


def _describe(sg: SubGroup) -> str:
    parent = f" under {sg.parent}" if sg.parent else ""
    if sg.min_sub_group is not None:
        return f"{sg.name}{parent} minSubGroup {sg.min_sub_group}"
    return f"{sg.name}{parent} minMember {sg.min_member if sg.min_member is not None else 1}"


def _not_carried(md: PodGroupMetadata) -> list[str]:
    notes = []
    if md.queue:
        notes.append(f"queue {md.queue!r} not carried: the upstream API has no queues")
    if md.preemptibility:
        notes.append(f"preemptibility {md.preemptibility!r} not carried: no upstream field")
    if md.preemption_delay:
        notes.append(f"preemptionDelay {md.preemption_delay} not carried: no upstream field")
    if md.staleness_grace_period:
        notes.append(f"stalenessGracePeriod {md.staleness_grace_period} not carried: no upstream field")
    rest = {k: v for k, v in md.topology.to_dict().items() if k != "requiredTopologyLevel"}
    if rest:
        notes.append(
            f"topologyConstraint {rest} not carried: upstream has no Topology objects nor preferred levels"
            + (
                f" (requiredTopologyLevel {md.topology.required_level!r} is carried)"
                if md.topology.required_level else ""
            )
        )
    for sg in md.sub_groups:
        if sg.topology is not None and not sg.topology.is_empty():
            notes.append(f"sub-group {sg.name}: topologyConstraint not carried")
    return notes


def _constraints(md: PodGroupMetadata) -> dict[str, Any] | None:
    """``schedulingConstraints``: KAI's requiredTopologyLevel (a node label key: every pod in one domain
    of it) is upstream's topology key (alpha, gate ``TopologyAwareWorkloadScheduling``; a server with the
    gate off drops it silently, which the writer detects and reports)."""
    if not md.topology.required_level:
        return None
    return {"topology": [{"key": md.topology.required_level}]}


def source_tree_errors(md: PodGroupMetadata) -> list[str]:
    """What in KAI's sub-group tree cannot become one upstream gang: a parent that names no sub-group, a
    parent cycle (:func:`tree_min_count` would otherwise treat the orphan as a root, silently)."""
    where = f"PodGroup {md.namespace}/{md.name}"
    by_name = {sg.name: sg for sg in md.sub_groups}
    errors = []
    for i, sg in enumerate(md.sub_groups):
        if sg.parent is not None and sg.parent not in by_name:
            errors.append(f"{where}: spec.subGroups[{i}] ({sg.name}).parent {sg.parent!r} names no sub-group")
        seen, cur = {sg.name}, sg.parent
        while cur is not None and cur in by_name:
            if cur in seen:
                errors.append(f"{where}: spec.subGroups[{i}] ({sg.name}).parent: a parent cycle")
                break
            seen.add(cur)
            cur = by_name[cur].parent
    return errors


def _owner_refs(md: PodGroupMetadata) -> list[dict[str, str]]:
    return [md.owner.to_dict()] if md.owner.uid else []


def _meta(md: PodGroupMetadata, name: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": md.namespace, "ownerReferences": _owner_refs(md)}
    if md.labels:
        meta["labels"] = dict(md.labels)
    if md.annotations:
        meta["annotations"] = dict(md.annotations)
    return meta


def to_upstream(
    md: PodGroupMetadata, versions: UpstreamVersions, *, priority_class_exists: bool = True
) -> UpstreamObjects:
    """The Workload and PodGroup that express ``md`` upstream, and what they cannot carry.

    ``priority_class_exists``: whether ``md.priority_class_name`` names a PriorityClass of the cluster;
    upstream's Priority admission refuses a PodGroup naming one that does not exist (KAI's defaults such as
    ``train`` are classes KAI installs), so it is then left out and reported. ``errors`` of the result
    (a broken tree, see :func:`tree_errors`) mean nothing may be written."""
    notes = _not_carried(md)
    errors = source_tree_errors(md)
    count = tree_min_count(md) if not errors else 1
    if not md.sub_groups:
        if md.min_member is not None and md.min_member < 1:
            notes.append(
                f"minMember {md.min_member} written as minCount 1: the API server refuses minCount 0"
            )
        if md.min_sub_group is not None:
            notes.append(f"minSubGroup {md.min_sub_group} not carried: the PodGroup has no sub-groups")
    else:
        shape = ", ".join(_describe(sg) for sg in md.sub_groups[:6])
        more = f" and {len(md.sub_groups) - 6} more" if len(md.sub_groups) > 6 else ""
        notes.append(
            f"{len(md.sub_groups)} sub-groups not carried ({shape}{more}): upstream PodGroups do not nest "
            f"without CompositePodGroup (alpha); written as one gang of minCount {count}, the fewest pods "
            "the sub-group tree admits"
        )
        if not errors and tree_need(md) < 1:
            notes.append(
                f"the sub-group tree admits {tree_need(md)} pods: written as minCount 1, the API server "
                "refuses minCount 0"
            )
    policy = {"gang": {"minCount": count}}
    if versions.pod_group.endswith("/v1alpha2"):  # 1.36: the template is named by podGroupTemplateRef
        ref: dict[str, Any] = {
            "podGroupTemplateRef": {"workload": {"workloadName": md.name, "podGroupTemplateName": MAIN_TEMPLATE}}
        }
    else:
        ref = {"workloadRef": {"workloadName": md.name, "templateName": MAIN_TEMPLATE}}
    spec: dict[str, Any] = {**ref, "schedulingPolicy": policy}
    constraints = _constraints(md)
    if constraints:
        spec["schedulingConstraints"] = constraints
    if md.priority_class_name and priority_class_exists:
        spec["priorityClassName"] = md.priority_class_name
    elif md.priority_class_name:
        notes.append(
            f"priorityClassName {md.priority_class_name!r} not carried: no such PriorityClass in the cluster, "
            "or it cannot be read (upstream admission refuses a PodGroup naming a missing one)"
        )
    pod_group = {
        "apiVersion": versions.pod_group,
        "kind": PODGROUP_KIND,
        "metadata": _meta(md, md.name),
        "spec": spec,
    }
    template: dict[str, Any] = {"name": MAIN_TEMPLATE, "schedulingPolicy": policy}
    if constraints:
        template["schedulingConstraints"] = constraints
    workload_spec: dict[str, Any] = {"podGroupTemplates": [template]}
    if md.owner.kind and md.owner.name:
        group, _, _version = md.owner.api_version.rpartition("/")
        workload_spec["controllerRef"] = {"apiGroup": group, "kind": md.owner.kind, "name": md.owner.name}
    workload = {
        "apiVersion": versions.workload,
        "kind": WORKLOAD_KIND,
        "metadata": _meta(md, md.name),
        "spec": workload_spec,
    }
    objs = UpstreamObjects(workload, [pod_group], {"": md.name}, notes)
    objs.errors = errors + tree_errors(objs)
    return objs


def tree_errors(objs: UpstreamObjects) -> list[str]:
    """The object tree checked as the API server does not (it accepts a PodGroup whose parent does not
    exist, and then nothing binds): every PodGroup names this Workload and one of its templates, and its
    parent (``parentCompositePodGroupName``) is a CompositePodGroup of the set; every CompositePodGroup's
    parent too, without cycles and at most :data:`MAX_DEPTH` deep; ``minCount`` at least 1; at most
    :data:`MAX_TEMPLATES` templates. Messages name the object and the field."""
    errors: list[str] = []
    wl = objs.workload
    wl_name = (wl.get("metadata") or {}).get("name")
    templates = (wl.get("spec") or {}).get("podGroupTemplates") or []
    names = {t.get("name") for t in templates}
    if len(templates) > MAX_TEMPLATES:
        errors.append(f"Workload {wl_name}: spec.podGroupTemplates has {len(templates)} entries, at most {MAX_TEMPLATES}")
    composites = {(c.get("metadata") or {}).get("name"): c for c in objs.composite_pod_groups}

    def parent_of(obj: dict[str, Any]) -> str | None:
        value = (obj.get("spec") or {}).get("parentCompositePodGroupName")
        return str(value) if value else None

    def chain(kind: str, name: str, parent: str | None) -> None:
        depth, seen = 1, {name}
        while parent is not None:
            if parent not in composites:
                errors.append(
                    f"{kind} {name}: spec.parentCompositePodGroupName {parent!r} names no CompositePodGroup "
                    "of this workload"
                )
                return
            if parent in seen:
                errors.append(f"{kind} {name}: spec.parentCompositePodGroupName: a parent cycle through {parent!r}")
                return
            seen.add(parent)
            depth += 1
            parent = parent_of(composites[parent])
        if depth > MAX_DEPTH:
            errors.append(f"{kind} {name}: spec.parentCompositePodGroupName: {depth} levels deep, at most {MAX_DEPTH}")

    for pg in objs.pod_groups:
        name = str((pg.get("metadata") or {}).get("name"))
        spec = pg.get("spec") or {}
        ref = spec.get("workloadRef") or ((spec.get("podGroupTemplateRef") or {}).get("workload")) or {}
        field_name = "workloadRef" if "workloadRef" in spec else "podGroupTemplateRef.workload"
        template = ref.get("templateName", ref.get("podGroupTemplateName"))
        if ref.get("workloadName") != wl_name:
            errors.append(f"PodGroup {name}: spec.{field_name}.workloadName {ref.get('workloadName')!r} is not {wl_name!r}")
        elif template not in names:
            errors.append(f"PodGroup {name}: spec.{field_name} template {template!r} is not a template of Workload {wl_name}")
        count = min_count(pg)
        if "gang" in (spec.get("schedulingPolicy") or {}) and (count is None or count < 1):
            errors.append(f"PodGroup {name}: spec.schedulingPolicy.gang.minCount {count} must be at least 1")
        chain(PODGROUP_KIND, name, parent_of(pg))
    for cname, c in composites.items():
        chain(COMPOSITE_KIND, str(cname), parent_of(c))
    for t in templates:
        gang = (t.get("schedulingPolicy") or {}).get("gang")
        if gang is not None and not (isinstance(gang.get("minCount"), int) and gang["minCount"] >= 1):
            errors.append(
                f"Workload {wl_name}: spec.podGroupTemplates[{t.get('name')}].schedulingPolicy.gang.minCount "
                f"{gang.get('minCount')} must be at least 1"
            )
    return errors


def min_count(pod_group: dict[str, Any]) -> int | None:
    gang = ((pod_group.get("spec") or {}).get("schedulingPolicy") or {}).get("gang") or {}
    value = gang.get("minCount")
    return int(value) if isinstance(value, int) else None


def scheduling_group(pod: dict[str, Any]) -> str | None:
    """The upstream PodGroup a pod joined at creation (``spec.schedulingGroup.podGroupName``)."""
    group = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    return str(group) if group else None


def membership_notes(
    objs: UpstreamObjects, pods: list[tuple[str, str | None, str | None]]
) -> tuple[bool, list[str]]:
    """Check the pods' own ``spec.schedulingGroup`` against ``objs``; ``pods``: (name, KAI sub-group,
    the PodGroup the pod joined). Returns (skip, notes).

    A pod that already joined a PodGroup that is not ours was placed in it by its own controller (e.g. a
    Job with ``.spec.scheduling``, feature gate ``WorkloadWithJob``, creates its Workload and PodGroup):
    the workload is skipped, never given a second set of objects. A pod that joined none was created
    without the admission webhook; the scheduler places it on its own, which is reported."""
    ours = set(objs.group_of.values())
    foreign = sorted({g for _, _, g in pods if g and g not in ours})
    if foreign:
        return True, [
            f"skipped: its pods already join PodGroup {', '.join(foreign)} (set by their own controller); "
            "no upstream objects written"
        ]
    notes = []
    unjoined = sorted(name for name, _, g in pods if not g)
    if unjoined:
        shown = ", ".join(unjoined[:5]) + (f" and {len(unjoined) - 5} more" if len(unjoined) > 5 else "")
        notes.append(
            f"{len(unjoined)} pod(s) joined no PodGroup ({shown}): spec.schedulingGroup is set only at "
            "creation (by the admission webhook); the scheduler places them one by one"
        )
    wrong = sorted(name for name, sg, g in pods if g and g in ours and g != objs.pod_group_for(sg))
    if wrong:
        notes.append(f"pod(s) {', '.join(wrong[:5])} joined another PodGroup of this workload than decided")
    return False, notes


def _priority_of(pod: dict[str, Any]) -> str:
    spec = pod.get("spec") or {}
    cls = spec.get("priorityClassName") or ""
    value = spec.get("priority")
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{cls or '(no class)'} ({value})"
    return cls or "(no class)"


def priority_warning(pod_group: str, pods: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(note, event message) when the pods of one gang do not share one priority (``spec.priorityClassName``,
    and ``spec.priority`` where the pod carries it): kube-scheduler then admits none of them (measured on
    1.37: one pod of another priority blocks the whole gang). The note names the pods of each priority; the
    Event's message names only the priorities, so it stays the same while pods come and go (one Event per
    cause). None when they agree."""
    by: dict[str, list[str]] = {}
    for p in pods:
        by.setdefault(_priority_of(p), []).append(str((p.get("metadata") or {}).get("name") or ""))
    if len(by) < 2:
        return None
    parts = []
    for prio in sorted(by, key=lambda k: (-len(by[k]), k)):
        names = sorted(by[prio])
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        parts.append(f"{prio}: {len(names)} pod(s) ({shown})")
    tail = (
        "the upstream scheduler does not admit a gang whose pods differ in priority, so none of them is "
        "placed; give them one priorityClassName"
    )
    head = f"Warning: the pods of PodGroup {pod_group} have {len(by)} different priorities"
    return f"{head} ({'; '.join(parts)}): {tail}", f"{head} ({', '.join(sorted(by))}): {tail}"


def initially_scheduled(pod_group: dict[str, Any]) -> tuple[str, str]:
    """(status, reason) of the PodGroup's admission condition, ("", "") when it has none yet:
    ``PodGroupInitiallyScheduled`` (1.37+; terminal, it never reverts), else the old name
    ``PodGroupScheduled`` that 1.36 servers (``v1alpha2``) write."""
    conds = [c for c in ((pod_group.get("status") or {}).get("conditions") or []) if isinstance(c, dict)]
    for wanted in (SCHEDULED_CONDITION, OLD_SCHEDULED_CONDITION):
        for c in conds:
            if c.get("type") == wanted:
                return str(c.get("status") or ""), str(c.get("reason") or "")
    return "", ""


def _meaningful(value: Any) -> bool:
    return value not in (None, "", [], {})


def dropped_fields(sent: Any, stored: Any, path: str = "") -> list[str]:
    """Paths of what was sent (non-empty) and is not in the stored object: fields the API server dropped
    (a feature gate off drops a gated field silently, e.g. ``schedulingConstraints``). Values the server
    changed or defaulted are not drops; list entries are compared by position. ``metadata`` and ``status``
    are not compared."""
    out: list[str] = []
    if isinstance(sent, dict):
        stored_d = stored if isinstance(stored, dict) else {}
        for k, v in sent.items():
            if not path and k in ("metadata", "status", "apiVersion", "kind"):
                continue
            if not _meaningful(v):
                continue
            here = f"{path}.{k}" if path else k
            if not _meaningful(stored_d.get(k)):
                out.append(here)
            else:
                out.extend(dropped_fields(v, stored_d[k], here))
    elif isinstance(sent, list) and isinstance(stored, list):
        for i, v in enumerate(sent[: len(stored)]):
            out.extend(dropped_fields(v, stored[i], f"{path}[{i}]"))
    return out


def field_label(path: str) -> str:
    """A dropped field's path for a metric label: list positions removed (bounded)."""
    out, depth = [], 0
    for ch in path:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)
