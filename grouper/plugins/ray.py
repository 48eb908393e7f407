"""Ray: RayCluster, RayJob and RayService (ray.io v1alpha1 and v1), after KAI's ``plugins/ray/*.go``.

- The cluster: a RayCluster top owner is its own cluster; a RayJob names it in
  ``status.rayClusterName``, a RayService in ``status.activeServiceStatus.rayClusterName`` then
  ``status.pendingServiceStatus.rayClusterName``. It is read with the top owner's apiVersion. Name,
  owner, labels, queue etc. come from the top owner (default grouper).
- minMember = 1 (head) + the sum over worker groups that are not ``suspended`` and not (replicas = 0 and
  minReplicas = 0) of ``(minReplicas > 0 ? minReplicas : replicas) * numOfHosts`` (numOfHosts default 1);
  ``minReplicas > replicas`` is an error.
- Sub-groups: ``headgroup`` (1) plus one per counted worker group, named ``groupName`` or
  ``worker-group-<index>``, with a topology constraint from the group template's annotations
  (``kai.scheduler/topology`` + ``-required-placement`` / ``-preferred-placement``: emitted only with a
  level, and then the topology name is mandatory). The pod joins the sub-group named by its label
  ``ray.io/group``; a pod without it (or naming no sub-group) joins none, as in KAI.
- Priority: the top-owner label ``ray.io/priority-class-name`` overrides the default grouper's choice.

Legacy shape (reference §8 item 12, kept as upstream): when a PodGroup with the computed name already
exists without sub-groups, no sub-groups are emitted, so workloads created before sub-grouping keep their
shape. Unlike KAI (which always looks), the lookup honours ``config.search_legacy_pg`` like the JobSet
and batch Job paths. A forbidden read counts as "no legacy PodGroup" (KAI: any read error but NotFound).

A RayCluster named by a RayJob/RayService that does not exist is an ``OwnerNotFound`` error, or None
(leave the pod alone) when the pod is being deleted (``common.fetch``, package docstring).

Other choices: a RayService with an empty active cluster name falls through to the pending one (KAI stops
at the empty value and errors); negative replica counts or numOfHosts are errors.
"""

from __future__ import annotations

from typing import Any

from grouper.core.context import GroupingContext
from grouper.core.lookups import Lookups
from grouper.model.errors import InvalidWorkload, LookupForbidden
from grouper.model.objects import Obj, describe, dig, name, namespace
from grouper.model.podgroup import (
    PODGROUP_API_VERSION,
    PODGROUP_KIND,
    PodGroupMetadata,
    SubGroup,
    TopologyConstraint,
)
from grouper.plugins.common import (
    TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
    fetch,
    labels_of,
    spec_field,
)
from grouper.plugins.default import default_metadata
from grouper.plugins.segments import annotations_at, bool_field, int_field, list_field, str_field

RAY_PRIORITY_LABEL = "ray.io/priority-class-name"
RAY_GROUP_LABEL = "ray.io/group"
HEAD_GROUP = "headgroup"

CLUSTER_NAME_PATHS: dict[str, tuple[tuple[str, ...], ...]] = {
    "RayCluster": (),
    "RayJob": (("status", "rayClusterName"),),
    "RayService": (
        ("status", "activeServiceStatus", "rayClusterName"),
        ("status", "pendingServiceStatus", "rayClusterName"),
    ),
}


class RayGrouper:
    """One grouper per Ray kind: ``RayGrouper("RayCluster" | "RayJob" | "RayService")``."""

    label_keys: frozenset[str] = frozenset({RAY_GROUP_LABEL, RAY_PRIORITY_LABEL})  # the pod labels it reads besides DefaultGrouper's

    def __init__(self, kind: str) -> None:
        if kind not in CLUSTER_NAME_PATHS:
            raise ValueError(f"unsupported Ray kind {kind!r}; expected one of {sorted(CLUSTER_NAME_PATHS)}")
        self.kind = kind
        self.name = f"{kind} Grouper"

    def __repr__(self) -> str:
        return f"RayGrouper({self.kind!r})"

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata | None:
        top = ctx.top_owner
        cluster = self._cluster(ctx)
        if cluster is None:  # the pod is being deleted and its RayCluster is gone: nothing to group
            return None
        md = default_metadata(ctx)
        md.min_member, sub_groups = min_member_and_sub_groups(cluster)
        md.provenance["minMember"] = f"1 (head) + worker groups of {describe(cluster)}"
        if not ctx.config.search_legacy_pg or should_use_sub_groups(ctx.lookups, md.namespace, md.name):
            md.sub_groups = sub_groups
            _route_pod(ctx.pod, sub_groups)
            md.provenance["subGroups"] = (
                f"head and worker groups of {describe(cluster)}; pod routed by label {RAY_GROUP_LABEL}"
            )
        else:
            md.provenance["subGroups"] = f"none: PodGroup {md.name} already exists without sub-groups (legacy shape)"
        priority = labels_of(top).get(RAY_PRIORITY_LABEL)
        if priority is not None:
            md.priority_class_name = priority
            md.provenance["priorityClassName"] = f"label {RAY_PRIORITY_LABEL} on {describe(top)}"
        return md

    def _cluster(self, ctx: GroupingContext) -> Obj | None:
        top = ctx.top_owner
        paths = CLUSTER_NAME_PATHS[self.kind]
        if not paths:
            return top
        cluster_name = ""
        for path in paths:
            cluster_name = str_field(top, *path)
            if cluster_name:
                break
        if not cluster_name:
            raise InvalidWorkload(
                "failed to extract the RayCluster name; please make sure that the ray-operator is up and a "
                "RayCluster child object has been created",
                obj=describe(top),
                field=" or ".join(spec_field(*p) for p in paths),
            )
        return fetch(ctx, str(top.get("apiVersion") or ""), "RayCluster", namespace(top), cluster_name,
                     why=f"it runs {describe(top)}")


def should_use_sub_groups(lookups: Lookups, ns: str, pg_name: str) -> bool:
    """False only when PodGroup ``ns/pg_name`` exists without sub-groups (a pre-sub-group workload)."""
    try:
        existing = lookups.get(PODGROUP_API_VERSION, PODGROUP_KIND, ns, pg_name)
    except LookupForbidden:
        return True
    return existing is None or bool(dig(existing, "spec", "subGroups"))


def min_member_and_sub_groups(cluster: Obj) -> tuple[int, list[SubGroup]]:
    """KAI's (KubeRay/Volcano-derived) minMember and the head + worker-group sub-groups."""
    total = 1
    head = SubGroup(HEAD_GROUP, min_member=1, topology=_topology(cluster, ("spec", "headGroupSpec"), "headGroupSpec"))
    subs = [head]
    for i, group in enumerate(list_field(cluster, "spec", "workerGroupSpecs") or []):
        if not isinstance(group, dict):
            raise InvalidWorkload("worker group is not an object", obj=describe(cluster),
                                  field=f"spec.workerGroupSpecs[{i}]")
        group_min = _worker_group_min(cluster, i)
        if group_min is None:
            continue
        total += group_min
        group_name = _group_name(group, i)
        topology = _topology(cluster, ("spec", "workerGroupSpecs", i), f"workerGroupSpecs.{group_name}")
        subs.append(SubGroup(group_name, min_member=group_min, topology=topology))
    return total, subs


def _worker_group_min(cluster: Obj, i: int) -> int | None:
    """The group's share of minMember, or None when it does not count (suspended or empty)."""
    path = ("spec", "workerGroupSpecs", i)
    if bool_field(cluster, *path, "suspended"):
        return None
    replicas = int_field(cluster, *path, "replicas", default=0, minimum=0)
    min_replicas = int_field(cluster, *path, "minReplicas", default=0, minimum=0)
    if min_replicas > replicas:
        raise InvalidWorkload(
            f"replicas of a worker group can't be less than minReplicas: given {replicas} replicas and "
            f"{min_replicas} minReplicas; please fix the replicas field for group number {i}",
            obj=describe(cluster), field=spec_field(*path, "replicas"),
        )
    if replicas == 0 and min_replicas == 0:
        return None
    hosts = int_field(cluster, *path, "numOfHosts", default=1, minimum=0)
    return (min_replicas if min_replicas > 0 else replicas) * hosts


def _group_name(group: dict[str, Any], i: int) -> str:
    value = group.get("groupName")
    return value if isinstance(value, str) and value else f"worker-group-{i}"


def _topology(cluster: Obj, path: tuple[str | int, ...], what: str) -> TopologyConstraint | None:
    ann = annotations_at(cluster, *path, "template", "metadata", "annotations")
    required = ann.get(TOPOLOGY_REQUIRED_ANNOTATION, "")
    preferred = ann.get(TOPOLOGY_PREFERRED_ANNOTATION, "")
    if not required and not preferred:
        return None
    topology = ann.get(TOPOLOGY_ANNOTATION, "")
    if not topology:
        raise InvalidWorkload(
            f'topology annotation "{TOPOLOGY_ANNOTATION}" is required for {what} when topology placement '
            "annotations are set",
            obj=describe(cluster), field=spec_field(*path, "template", "metadata", "annotations"),
        )
    return TopologyConstraint(topology=topology, required_level=required, preferred_level=preferred)


def _route_pod(pod: Obj, sub_groups: list[SubGroup]) -> None:
    group = labels_of(pod).get(RAY_GROUP_LABEL)
    for sg in sub_groups:
        if group is not None and sg.name == group:
            sg.pods.append(name(pod))
            return


__all__ = ["CLUSTER_NAME_PATHS", "RayGrouper", "min_member_and_sub_groups", "should_use_sub_groups"]
