"""A rendered WorkloadGroup for the upstream backend (``scheduling.k8s.io``). Pure: no I/O.

With CompositePodGroup served (alpha in 1.37, ``scheduling.k8s.io/v1alpha3``, feature gate
``CompositePodGroup``): one Workload named like the rendered KAI PodGroup whose single composite template
``group`` (gang, ``minGroupCount`` = members) lists one PodGroup template per member (named like the
member's wrapper sub-group); one CompositePodGroup of that name; and one child PodGroup per member
(``<rendered>-<wrapper>``, ``parentCompositePodGroupName`` = the composite) whose ``gang.minCount`` is the
fewest pods the member's KAI tree admits (:func:`grouper.core.upstream.tree_min_count`) — each member
stays a gang of its own, and the composite admits them only together. A member's own sub-groups (and a
member's several PodGroups) are flattened into its child as the backend does for any tree; each such
loss is noted. All objects are owned by the WorkloadGroup.

Without CompositePodGroup (not served, or more members than the 8 templates a Workload may hold): the
rendered PodGroup is translated as the backend translates any tree (:func:`grouper.core.upstream.to_upstream`):
one gang of the sum of the members' minima. The loss is stated: the scheduler then counts pods of the
whole group, so one member's extra pods can stand in for another member's missing ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from grouper.core.grouping import is_terminal
from grouper.core.naming import shorten_name
from grouper.core.upstream import UpstreamVersions, scheduling_group, to_upstream, tree_min_count
from grouper.core.workload_group import GroupRender, member_prefix, rendered_name
from grouper.model import objects as o
from grouper.model.objects import Obj
from grouper.model.podgroup import OwnerRef, PodGroupMetadata, SubGroup

COMPOSITE_KIND = "CompositePodGroup"
COMPOSITE_VERSION = "scheduling.k8s.io/v1alpha3"  # the only version serving it (1.37)
COMPOSITE_TEMPLATE = "group"
MAX_TEMPLATES = 8  # WorkloadMaxPodGroupTemplates: children templates of one composite template


@dataclass
class UpstreamGroupObjects:
    workload: dict[str, Any]
    composite: dict[str, Any] | None  # None: flattened into one gang
    pod_groups: list[dict[str, Any]]
    placement: dict[str, str]  # member pod name -> the upstream PodGroup it joins
    notes: list[str] = field(default_factory=list)

    def objects(self) -> list[dict[str, Any]]:
        return [self.workload, *([self.composite] if self.composite else []), *self.pod_groups]


def stray_pods(objs: UpstreamGroupObjects, pod: Callable[[str], Obj | None]) -> list[str]:
    """Member pods that joined another PodGroup (or none) than the one ``objs`` place them in: a pod's
    scheduling group is fixed at creation, so those created before the group existed stay apart.
    ``pod(name)``: the member pod as cached."""
    out = []
    for name, want in sorted(objs.placement.items()):
        p = pod(name)
        if p is not None and scheduling_group(p) != want:
            out.append(name)
    return out


def left_behind(pod: Obj, rendered: str) -> str | None:
    """What becomes of a pod of a workload that is no longer a member of the group rendered as ``rendered``
    (or whose group is gone) and still names one of its PodGroups, which it cannot leave (a pod's scheduling
    group is fixed at creation) and which no longer counts it: ``"recreate"`` (not bound yet, and a
    controller recreates it in its own PodGroup once it is deleted), ``"bare"`` (no controller would: left,
    and said); None when none of this applies (another PodGroup, finished, or bound: it keeps running)."""
    group = scheduling_group(pod)
    if not group or not group.startswith(rendered) or is_terminal(pod) or (pod.get("spec") or {}).get("nodeName"):
        return None
    return "recreate" if any(r.get("controller") for r in o.owner_references(pod)) else "bare"


def stored_status(status: dict[str, Any], objs: UpstreamGroupObjects, name: str) -> None:
    """The WorkloadGroup status (:meth:`GroupRender.status`) of a group whose upstream objects are stored:
    its ref names the CompositePodGroup (or the one flattened PodGroup), and a flattened gang's loss is
    stated where the user looks (``Rendered``)."""
    kind = COMPOSITE_KIND if objs.composite is not None else "PodGroup"
    version = (objs.composite or objs.pod_groups[0])["apiVersion"]
    status["renderedPodGroupRef"] = {"apiVersion": version, "kind": kind, "name": name}
    if objs.composite is None:
        status["conditions"][1]["message"] += f"; {objs.notes[0]}"


def member_pod_group(namespace: str, group: str, member: OwnerRef, *, composite: bool = True) -> str:
    """The upstream PodGroup a member workload's pods join, known from the group's name and the workload
    alone (so the admission webhook can name it before it exists): the member's child of the composite,
    or the one flattened gang."""
    rendered = rendered_name(namespace, group)
    return shorten_name(f"{rendered}-{member_prefix(group, member)}") if composite else rendered


def _subtree(md: PodGroupMetadata, root: SubGroup) -> PodGroupMetadata:
    """The member below wrapper ``root`` as a PodGroup of its own (its tree, its pods, no policy)."""
    below = {root.name}
    grown = True
    while grown:  # the descendants of root, whatever order the tree lists them in
        grown = False
        for sg in md.sub_groups:
            if sg.parent in below and sg.name not in below:
                below.add(sg.name)
                grown = True
    keep = [replace(sg, parent=None if sg.parent == root.name else sg.parent, pods=list(sg.pods))
            for sg in md.sub_groups if sg.name in below and sg.name != root.name]
    shell = PodGroupMetadata(name=root.name, namespace=md.namespace, owner=md.owner, topology=md.topology)
    if not keep:
        return replace(shell, min_member=root.min_member, sub_groups=[], topology=root.topology or shell.topology)
    return replace(shell, min_member=None, min_sub_group=root.min_sub_group, sub_groups=keep,
                   topology=root.topology or shell.topology)


def _pods(sub: PodGroupMetadata, root: SubGroup) -> list[str]:
    return sorted({*root.pods, *(p for sg in sub.sub_groups for p in sg.pods)})


def render_upstream(
    render: GroupRender,
    versions: UpstreamVersions,
    composite_version: str | None = COMPOSITE_VERSION,
    *,
    priority_class_exists: bool = True,
) -> UpstreamGroupObjects:
    """The upstream objects of a rendered group; ``composite_version``: the served CompositePodGroup
    version, None when the API server does not serve it (then one flattened gang)."""
    md = render.pod_group
    if render.state != "Rendered" or md is None:
        raise ValueError(f"WorkloadGroup {render.key} is not rendered ({render.state})")
    roots = [sg for sg in md.sub_groups if sg.parent is None]
    if composite_version is None or len(roots) > MAX_TEMPLATES:
        flat = to_upstream(md, versions, priority_class_exists=priority_class_exists)
        why = ("the API server does not serve CompositePodGroup (feature gate CompositePodGroup, "
               f"{COMPOSITE_VERSION})" if composite_version is None
               else f"{len(roots)} members exceed the {MAX_TEMPLATES} templates of a composite")
        notes = [
            f"{why}: the group is one gang of minCount {tree_min_count(md)} (the members' minima summed); the "
            "scheduler counts pods of the whole group, so one member's extra pods can stand in for another's "
            "missing ones", *flat.notes,
        ]
        pods = sorted({p for sg in md.sub_groups for p in sg.pods})
        return UpstreamGroupObjects(flat.workload, None, flat.pod_groups, {p: md.name for p in pods}, notes)

    # Group-level notes (queue, preemptibility, delays, topology, priority) from the shared translation.
    shell = replace(md, sub_groups=[], min_member=1, min_sub_group=None)
    notes = list(to_upstream(shell, versions, priority_class_exists=priority_class_exists).notes)
    priority = md.priority_class_name if md.priority_class_name and priority_class_exists else ""
    meta = {"namespace": md.namespace, "ownerReferences": [md.owner.to_dict()] if md.owner.uid else []}
    with_priority: dict[str, Any] = {"priorityClassName": priority} if priority else {}
    templates: list[dict[str, Any]] = []
    children: list[dict[str, Any]] = []
    placement: dict[str, str] = {}
    for root in roots:
        sub = _subtree(md, root)
        count = tree_min_count(sub)
        member_notes = to_upstream(sub, versions).notes
        notes.extend(f"member {root.name}: {n}" for n in member_notes)
        child = shorten_name(f"{md.name}-{root.name}")
        policy = {"gang": {"minCount": count}}
        templates.append({"name": root.name, "schedulingPolicy": policy, **with_priority})
        children.append({
            "apiVersion": versions.pod_group,
            "kind": "PodGroup",
            "metadata": {"name": child, **meta},
            "spec": {
                "parentCompositePodGroupName": md.name,
                "workloadRef": {"workloadName": md.name, "templateName": root.name},
                "schedulingPolicy": policy,
                **with_priority,
            },
        })
        placement.update({p: child for p in _pods(sub, root)})
    group_policy = {"gang": {"minGroupCount": len(roots)}}
    group, _, _version = md.owner.api_version.rpartition("/")
    workload = {
        "apiVersion": versions.workload,
        "kind": "Workload",
        "metadata": {"name": md.name, **meta},
        "spec": {
            "controllerRef": {"apiGroup": group, "kind": md.owner.kind, "name": md.owner.name},
            "compositePodGroupTemplates": [{
                "name": COMPOSITE_TEMPLATE,
                "schedulingPolicy": group_policy,
                "podGroupTemplates": templates,
                **with_priority,
            }],
        },
    }
    composite = {
        "apiVersion": composite_version,
        "kind": COMPOSITE_KIND,
        "metadata": {"name": md.name, **meta},
        "spec": {
            "workloadRef": {"workloadName": md.name, "templateName": COMPOSITE_TEMPLATE},
            "schedulingPolicy": group_policy,
            **with_priority,
        },
    }
    return UpstreamGroupObjects(workload, composite, children, placement, notes)


__all__ = [
    "COMPOSITE_VERSION", "MAX_TEMPLATES", "UpstreamGroupObjects", "left_behind", "member_pod_group", "render_upstream", "stored_status",
    "stray_pods",
]
