"""Who belongs to which WorkloadGroup, from the grouper's own plans. Pure: reads only through ``Lookups``.

A workload joins group ``G`` when its **top owner** (the owner the grouper's decision walked up to) has the
annotation ``kai.scheduler/workload-group: G``; the group lives in the workload's namespace. The same
annotation with another value on an owner between the pods and the top owner (a RayCluster created by an
annotated RayJob, say) is a second claim, reported as an error rather than resolved by guessing.

Members are found from decisions (a member with pods) and from ``annotated`` — the annotated top-level
objects the caller knows of, so a workload whose pods do not exist yet still counts towards completeness.
A member whose pods the grouper skips (another scheduler, an externally grouped workload, a kind it does not
handle) is kept with ``not_handled`` set, so the group can say that it cannot join.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from grouper.core.decision import Decision
from grouper.core.lookups import Lookups
from grouper.core.owner_chain import resolve_owners
from grouper.core.workload_group import Member
from grouper.core.workload_plan import PlannedGroup
from grouper.model import objects as o
from grouper.model.errors import GroupingError, LookupForbidden
from grouper.model.objects import Obj
from grouper.model.podgroup import OwnerRef
from grouper.model.workload_group import InvalidWorkloadGroup, membership

GroupKey = tuple[str, str]  # (namespace, group name)


@dataclass
class Membership:
    members: dict[GroupKey, list[Member]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # annotations that name no valid group


def _annotation(lookups: Lookups, ns: str, ref: OwnerRef, errors: list[str]) -> str | None:
    try:
        obj = lookups.get(ref.api_version, ref.kind, ns, ref.name)
    except LookupForbidden:
        return None
    if obj is None or (ref.uid and o.uid(obj) and o.uid(obj) != ref.uid):
        return None
    try:
        return membership(obj)
    except InvalidWorkloadGroup as exc:
        errors.append(str(exc))
        return None


@dataclass
class _Found:
    """What the decisions say of one annotated top owner."""

    ref: OwnerRef
    group: str
    claims: set[str] = field(default_factory=set)
    pgs: dict[str, PlannedGroup] = field(default_factory=dict)
    skipped: str = ""
    failed: set[str] = field(default_factory=set)
    grouped: bool = False


def collect(
    decisions: Iterable[Decision],
    groups: Iterable[PlannedGroup],
    lookups: Lookups,
    annotated: Iterable[Obj] = (),
    pods: Mapping[str, Obj] | None = None,
) -> Membership:
    """Every group's members. ``groups``: the planned PodGroups the decisions' pods are merged into;
    ``pods``: the pods by ``namespace/name``, to find the workload of a pod skipped before its owners were
    read (another scheduler: its workload cannot join, which the group must say)."""
    out = Membership()
    by_pg = {(g.metadata.namespace, g.metadata.name): g for g in groups}
    found: dict[tuple[str, str], _Found] = {}  # (namespace, top owner uid) -> what its pods say
    annotation_of: dict[tuple[str, str, str, str], str | None] = {}  # each owner read once

    def group_on(ns: str, ref: OwnerRef) -> str | None:
        key = (ns, ref.kind, ref.name, ref.uid)
        if key not in annotation_of:
            annotation_of[key] = _annotation(lookups, ns, ref, out.errors)
        return annotation_of[key]

    for d in decisions:
        top, chain = d.top_owner, d.owner_chain
        if top is None and d.outcome == "skipped" and pods and d.pod_key in pods:
            try:
                resolved = resolve_owners(pods[d.pod_key], lookups)
            except (GroupingError, LookupForbidden):
                continue
            top = OwnerRef.of(resolved.top_owner)
            chain = [OwnerRef.of(x) for x in resolved.owners]
        if top is None:
            continue
        ns = d.pod_namespace
        name = group_on(ns, top)
        if name is None:
            continue
        entry = found.setdefault((ns, top.uid or f"{top.kind}/{top.name}"), _Found(top, name))
        for ref in chain[:-1]:
            other = group_on(ns, ref)
            if other is not None and other != name:
                entry.claims.add(other)
        if d.outcome == "grouped" and d.pod_group is not None:
            entry.grouped = True
            planned = by_pg.get((ns, d.pod_group.name))
            if planned is not None:
                entry.pgs[planned.metadata.name] = planned
        elif d.outcome == "skipped" and not entry.skipped:
            entry.skipped = f"its pods are not grouped by this grouper ({d.reason}: {d.message})"
        elif d.outcome == "error":
            entry.failed.add(d.pod_name)
    seen: set[tuple[str, str]] = set()
    for (ns, _), e in sorted(found.items()):
        seen.add((ns, e.ref.uid))
        member = Member(
            ref=e.ref,
            namespace=ns,
            groups=tuple(e.pgs[k] for k in sorted(e.pgs)),
            claims=frozenset(e.claims),
            not_handled="" if e.grouped else e.skipped,
            failed_pods=tuple(sorted(e.failed)),
        )
        out.members.setdefault((ns, e.group), []).append(member)
    for obj in annotated:  # annotated workloads without pods yet
        ns, ref = o.namespace(obj), OwnerRef.of(obj)
        if (ns, ref.uid) in seen or o.owner_references(obj):
            continue
        try:
            name = membership(obj)
        except InvalidWorkloadGroup as exc:
            if str(exc) not in out.errors:
                out.errors.append(str(exc))
            continue
        if name is not None:
            seen.add((ns, ref.uid))
            out.members.setdefault((ns, name), []).append(Member(ref=ref, namespace=ns))
    out.errors = list(dict.fromkeys(out.errors))
    return out


__all__ = ["GroupKey", "Membership", "collect"]
