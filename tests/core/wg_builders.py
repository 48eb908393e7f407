"""Builders of member workloads and their planned PodGroups for the workload-group render tests."""

from __future__ import annotations

from typing import Any

from grouper.core.workload_group import Member
from grouper.core.workload_plan import PlannedGroup
from grouper.model.podgroup import OwnerRef, PodGroupMetadata, SubGroup, TopologyConstraint
from grouper.model.workload_group import WorkloadGroup

NS = "team-a"
VALUES = {"train": 50, "build": 100, "inference": 125}


def owner(kind: str, name: str, api_version: str = "example.com/v1") -> OwnerRef:
    return OwnerRef(api_version, kind, name, f"uid-{kind.lower()}-{name}")


def flat(name: str, pods: list[str], *, min_member: int | None = None, **policy: Any) -> PlannedGroup:
    """A PodGroup without sub-groups (``policy``: PodGroupMetadata fields such as queue, priority_class_name)."""
    policy.setdefault("queue", "q")
    policy.setdefault("priority_class_name", "train")
    md = PodGroupMetadata(name=name, namespace=policy.pop("namespace", NS), owner=owner("X", name),
                          min_member=len(pods) if min_member is None else min_member, **policy)
    return PlannedGroup(md, sorted(pods))


def tree(name: str, leaves: dict[str, list[str]], *, parents: dict[str, str] | None = None,
         min_member: int | None = None, min_sub_group: int | None = None,
         topology: TopologyConstraint | None = None, leaf_topology: dict[str, TopologyConstraint] | None = None,
         **policy: Any) -> PlannedGroup:
    """A PodGroup with sub-groups: ``leaves`` name -> pods (minMember = its pod count); ``parents``: sub-group ->
    parent (parents not in ``leaves`` become mid-level sub-groups requiring all their children)."""
    policy.setdefault("queue", "q")
    policy.setdefault("priority_class_name", "train")
    parents = parents or {}
    mids = sorted({p for p in parents.values() if p not in leaves})
    subs = [SubGroup(m, min_sub_group=sum(1 for v in parents.values() if v == m), parent=parents.get(m)) for m in mids]
    subs += [SubGroup(n, min_member=len(p), parent=parents.get(n), pods=sorted(p),
                      topology=(leaf_topology or {}).get(n)) for n, p in leaves.items()]
    roots = [s for s in subs if s.parent is None]
    md = PodGroupMetadata(
        name=name, namespace=policy.pop("namespace", NS), owner=owner("X", name),
        min_member=min_member, min_sub_group=min_sub_group if min_sub_group is not None or min_member is not None
        else len(roots), sub_groups=subs, topology=topology or TopologyConstraint(), **policy,
    )
    return PlannedGroup(md, sorted(p for pods in leaves.values() for p in pods))


def member(kind: str, name: str, *groups: PlannedGroup, namespace: str = NS, **kw: Any) -> Member:
    return Member(owner(kind, name), namespace, tuple(groups), **kw)


def group(expected: int = 2, name: str = "rl", **kw: Any) -> WorkloadGroup:
    return WorkloadGroup(NS, name, "uid-group", expected, **kw)
