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
workload scaled later must be able to raise ``minCount``. Everything the upstream objects cannot carry
is returned in ``notes`` (see :data:`NOT_CARRIED`), never dropped silently.
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
    "pod membership of a sub-group (the kai.scheduler/subgroup-name label)",
)


@dataclass(frozen=True)
class UpstreamVersions:
    """API versions served for the two kinds (from discovery), e.g. ``scheduling.k8s.io/v1beta1``."""

    workload: str
    pod_group: str


@dataclass
class UpstreamObjects:
    workload: dict[str, Any]
    pod_groups: list[dict[str, Any]]
    group_of: dict[str, str]  # KAI sub-group name ("" = any) -> upstream PodGroup name
    notes: list[str] = field(default_factory=list)

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


def tree_min_count(md: PodGroupMetadata) -> int:
    """``minCount`` of the one upstream gang that stands for ``md`` (at least 1)."""
    children: dict[str | None, list[SubGroup]] = {}
    names = {sg.name for sg in md.sub_groups}
    for sg in md.sub_groups:
        parent = sg.parent if sg.parent in names else None
        children.setdefault(parent, []).append(sg)
    return max(_need(None, children, md), 1)


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
    if not md.topology.is_empty():
        notes.append(
            f"topologyConstraint {md.topology.to_dict()} not carried: KAI Topology levels have no "
            "upstream counterpart the scheduler honours by default"
        )
    for sg in md.sub_groups:
        if sg.topology is not None and not sg.topology.is_empty():
            notes.append(f"sub-group {sg.name}: topologyConstraint not carried")
    return notes


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
    ``train`` are classes KAI installs), so it is then left out and reported."""
    notes = _not_carried(md)
    count = tree_min_count(md)
    if not md.sub_groups:
        if md.min_member is not None and md.min_member < 1:
            notes.append(f"minMember {md.min_member} written as minCount 1: the upstream minimum is 1")
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
    policy = {"gang": {"minCount": count}}
    spec: dict[str, Any] = {
        "workloadRef": {"workloadName": md.name, "templateName": MAIN_TEMPLATE},
        "schedulingPolicy": policy,
    }
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
    workload_spec: dict[str, Any] = {
        "podGroupTemplates": [{"name": MAIN_TEMPLATE, "schedulingPolicy": policy}]
    }
    if md.owner.kind and md.owner.name:
        group, _, _version = md.owner.api_version.rpartition("/")
        workload_spec["controllerRef"] = {"apiGroup": group, "kind": md.owner.kind, "name": md.owner.name}
    workload = {
        "apiVersion": versions.workload,
        "kind": WORKLOAD_KIND,
        "metadata": _meta(md, md.name),
        "spec": workload_spec,
    }
    return UpstreamObjects(workload, [pod_group], {"": md.name}, notes)


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
