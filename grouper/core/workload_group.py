"""Render a WorkloadGroup (several workloads, one gang) into one KAI PodGroup. Pure: no I/O.

Input: the group (``WorkloadGroup`` or None when the object does not exist yet) and each member workload
with the PodGroups the grouper planned for it (:class:`grouper.core.workload_plan.PlannedGroup`). Output
(:class:`GroupRender`): one ``scheduling.run.ai/v2alpha2`` PodGroup owned by the WorkloadGroup, and every
member pod's new place (that PodGroup, its leaf sub-group) — so an unmodified KAI scheduler admits all
members together.

**The tree.** Members are ordered by identity (API group, kind, name, uid), never by arrival. Each member
gets a wrapper sub-group named ``<name[:20]>-<6 hex of sha256(group/kind/name)>`` (stable while the member
exists, whoever else joins); below it the member's own tree with every name prefixed by the wrapper's
(``shorten_name`` to 63 characters when longer) and parents rewritten; minima and topology kept; the
member PodGroup's root topology moves onto its wrapper. A flat member PodGroup becomes a leaf wrapper
with its ``minMember``; a hierarchical one a wrapper whose ``minSubGroup`` is the PodGroup's own, or all
its root sub-groups when it has none (with sub-groups KAI's scheduler reads the tree, not the root
``minMember``: a larger root ``minMember`` is noted as not carried). A member with several PodGroups (a
LeaderWorkerSet with 2 replicas) gets one nested wrapper per PodGroup (``<wrapper>-pg<i>``, by PodGroup
name) and its wrapper requires all of them. The root's ``minSubGroup`` is the number of members.

**Merge rules** (KAI's design, PR #2055): same namespace and same queue required, else an error naming
the members; priority = the group's ``priorityClassName`` or the lowest of the members' by PriorityClass
value (ties: the first name); preemptibility = the group's or the strictest (non-preemptible before
semi-preemptible before preemptible; a member without one counts as its priority makes it, KAI's < 100 rule); ``preemptionDelay`` = the group's or the
minimum of the members that set one; ``stalenessGracePeriod`` = the group's or the maximum of the members
that set one (a negative value, "never evict as stale", wins); labels and annotations are not inherited; a
root topology only when the group sets one.

**The gate.** Until the group is complete and valid nothing is rendered, and every member pod is placed
in the *rendered PodGroup's name* with no sub-group: KAI's scheduler does not schedule a pod whose
``pod-group-name`` names a PodGroup that does not exist, so no member runs alone — from its first pod on,
before the WorkloadGroup object exists (the name is derived from namespace and group name, not from the
object's uid, so it is known from the annotation alone).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from grouper.core.naming import shorten_name
from grouper.core.upstream import tree_min_count
from grouper.core.validation import validate_pod_group
from grouper.core.workload_plan import PlannedGroup
from grouper.model import objects as o
from grouper.model.duration import parse_go_duration
from grouper.model.objects import Obj
from grouper.model.podgroup import OwnerRef, PodGroupMetadata, SubGroup, TopologyConstraint
from grouper.model.workload_group import API_VERSION, KIND, PREEMPTIBILITIES, WorkloadGroup

State = Literal["Rendered", "Pending", "Invalid"]
RENDERED_PREFIX = "wg"
SUB_GROUP_MAX = 63  # sub-group names are DNS labels (and label values on the pods)
_NOT_LABEL = re.compile(r"[^a-z0-9-]+")
# KAI derives preemptibility from priority when none is set: below this value the group is preemptible.
PREEMPTIBLE_BELOW = 100
# Built-in PriorityClasses every cluster has (their objects exist too; these serve offline plans).
SYSTEM_PRIORITIES = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}


@dataclass(frozen=True)
class Member:
    """One workload (its top owner) that carries the membership annotation."""

    ref: OwnerRef
    namespace: str
    groups: tuple[PlannedGroup, ...] = ()  # the PodGroups the grouper planned for it (none: no pods yet)
    claims: frozenset[str] = frozenset()  # group names on its owner chain besides its top owner's
    not_handled: str = ""  # why the grouper does not group its pods ("" = it does)
    failed_pods: tuple[str, ...] = ()  # pods whose decision failed

    @property
    def sort_key(self) -> tuple[str, str, str, str]:
        return (self.ref.api_version.rpartition("/")[0], self.ref.kind, self.ref.name, self.ref.uid)

    def describe(self) -> str:
        return f"{self.ref.kind} {self.namespace}/{self.ref.name}"


@dataclass
class MemberView:
    """What the group's status says of one member (KAI's ``observedPodGroups`` entry, per workload)."""

    ref: OwnerRef
    pod_groups: list[str]  # its own PodGroups, as planned alone
    root_sub_group: str  # its wrapper in the rendered PodGroup

    def to_dict(self) -> dict[str, Any]:
        return {**self.ref.to_dict(), "podGroups": list(self.pod_groups), "rootSubGroup": self.root_sub_group}


@dataclass
class GroupRender:
    namespace: str
    name: str
    pod_group_name: str  # the rendered PodGroup's name (written only when Rendered)
    state: State
    pod_group: PodGroupMetadata | None  # the PodGroup to write; None unless Rendered
    placement: dict[str, tuple[str, str | None]]  # member pod name -> (PodGroup, leaf sub-group)
    members: list[MemberView]
    expected: int | None  # spec.expectedWorkloads (None: no valid WorkloadGroup)
    errors: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # why it is not rendered yet (when not invalid)
    notes: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gate(self) -> str:
        if self.state == "Rendered":
            return ""
        return (
            f"member pods name PodGroup {self.pod_group_name}, which is not written until the group is complete "
            "and valid: KAI's scheduler schedules no pod whose PodGroup does not exist, so no member runs alone"
        )

    def status(self) -> dict[str, Any]:
        """The WorkloadGroup ``status`` this render implies (the controller adds transition times and the
        ``Active`` condition, which needs the written PodGroup)."""
        resolved = not self.errors and not self.pending
        message = "; ".join(self.errors or self.pending) or f"all {len(self.members)} workloads present and valid"
        out: dict[str, Any] = {
            "observedMembers": [m.to_dict() for m in self.members],
            "conditions": [
                {"type": "InputsResolved", "status": "True" if resolved else "False",
                 "reason": {"Rendered": "AllInputsResolved", "Pending": "WaitingForInputs",
                            "Invalid": "InvalidInputs"}[self.state], "message": message},
                {"type": "Rendered", "status": "True" if self.state == "Rendered" else "False",
                 "reason": "PodGroupRendered" if self.state == "Rendered" else "NotRendered",
                 "message": f"PodGroup {self.namespace}/{self.pod_group_name}"
                 if self.state == "Rendered" else self.gate},
            ],
        }
        if self.state == "Rendered":
            out["renderedPodGroupRef"] = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                                          "name": self.pod_group_name}
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "state": self.state,
            "podGroup": self.pod_group_name,
            "expectedWorkloads": self.expected,
            "errors": list(self.errors),
            "pending": list(self.pending),
            "gate": self.gate or None,
            "notes": list(self.notes),
            "status": self.status(),
        }


def _digest(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def rendered_name(namespace: str, group: str) -> str:
    """``wg-<group>-<8 hex of sha256(namespace/group)>``: known from the annotation alone (before the
    WorkloadGroup exists) and distinct across namespaces (KAI's scheduler tells PodGroups apart by name)."""
    return f"{RENDERED_PREFIX}-{group}-{_digest(f'{namespace}/{group}', 8)}"


def member_prefix(group: str, ref: OwnerRef) -> str:
    """The member's wrapper sub-group name: readable, and stable whoever else joins."""
    base = _NOT_LABEL.sub("-", ref.name.lower()).strip("-")[:20].strip("-") or "member"
    kind_group = ref.api_version.rpartition("/")[0]
    return f"{base}-{_digest(f'{group}/{kind_group}/{ref.kind}/{ref.name}', 6)}"


def _child(prefix: str, name: str) -> str:
    return shorten_name(f"{prefix}-{name}", SUB_GROUP_MAX)


def _copy_topology(t: TopologyConstraint | None) -> TopologyConstraint | None:
    return None if t is None or t.is_empty() else replace(t)


def priority_values(priority_classes: Iterable[Obj]) -> dict[str, int]:
    """PriorityClass name -> its value (what :func:`render_kai` compares), of those with an integer value."""
    return {o.name(pc): v for pc in priority_classes
            if isinstance(v := pc.get("value"), int) and not isinstance(v, bool)}


def derived_preemptibility(value: int | None) -> str | None:
    """KAI's rule for a PodGroup without ``preemptibility``: from its priority value (None: unknown)."""
    if value is None:
        return None
    return "preemptible" if value < PREEMPTIBLE_BELOW else "non-preemptible"


def render_kai(
    namespace: str,
    name: str,
    spec: WorkloadGroup | None,
    members: Iterable[Member],
    priority_values: Mapping[str, int],
    *,
    spec_error: str | None = None,
) -> GroupRender:
    """The KAI PodGroup of group ``namespace/name`` (see the module doc). ``spec``: the parsed object, or
    None when it does not exist (``spec_error``: it exists but is invalid). ``priority_values``:
    PriorityClass name -> value."""
    by_uid: dict[tuple[str, str, str, str], Member] = {}
    for m in members:
        by_uid.setdefault(m.sort_key, m)
    ordered = [by_uid[k] for k in sorted(by_uid)]
    pg_name = rendered_name(namespace, name)
    views = [
        MemberView(m.ref, sorted(g.metadata.name for g in m.groups), member_prefix(name, m.ref)) for m in ordered
    ]
    errors = _membership_errors(namespace, name, spec, ordered, spec_error)
    pending = _pending(namespace, name, spec, ordered, spec_error)
    joined = [m for m in ordered if m.groups and not m.not_handled]
    render = GroupRender(namespace, name, pg_name, "Pending", None, {}, views,
                         spec.expected_workloads if spec else None, errors, pending)
    policy: dict[str, Any] = {}
    if joined:
        policy = _merge_policy(f"WorkloadGroup {namespace}/{name}", spec, joined, priority_values, errors,
                               render.notes)
    if not errors and not pending and spec is not None:
        md = _build(namespace, name, pg_name, spec, joined, policy, errors, render.notes)
        if md is not None and not errors:
            errors.extend(validate_pod_group(md))
            if not errors:
                render.state, render.pod_group = "Rendered", md
                render.placement = {p: (pg_name, sg.name) for sg in md.sub_groups for p in sg.pods}
                return render
    render.state = "Invalid" if errors else "Pending"
    # The gate: every member pod the grouper handles names the not-yet-written PodGroup.
    render.placement = {p: (pg_name, None) for m in joined for g in m.groups for p in g.pods}
    return render


def _membership_errors(
    namespace: str, name: str, spec: WorkloadGroup | None, ordered: Sequence[Member], spec_error: str | None
) -> list[str]:
    errors = [spec_error] if spec_error else []
    where = f"WorkloadGroup {namespace}/{name}"
    for m in ordered:
        if m.namespace != namespace:
            errors.append(f"{where}: {m.describe()} is in another namespace (a group and its workloads share one)")
        others = sorted(m.claims - {name})
        if others:
            errors.append(
                f"{where}: {m.describe()} is claimed by two groups: {name} (its top owner's annotation) and "
                f"{', '.join(others)} (an owner between it and its pods): remove one annotation"
            )
        if m.not_handled:
            errors.append(
                f"{where}: {m.describe()} cannot join: {m.not_handled} (a workload grouped by someone else cannot "
                "be merged: remove its annotation or let the grouper group it)"
            )
        if m.failed_pods:
            shown_pods = ", ".join(m.failed_pods[:5]) + (" ..." if len(m.failed_pods) > 5 else "")
            errors.append(f"{where}: {m.describe()}: the decision of pod(s) {shown_pods} failed; "
                          "the group is rendered once every member pod is decided")
    if spec is not None and len(ordered) > spec.expected_workloads:
        errors.append(
            f"{where}: {len(ordered)} workloads carry the annotation but spec.expectedWorkloads is "
            f"{spec.expected_workloads}: {', '.join(m.describe() for m in ordered)}"
        )
    return errors


def _pending(
    namespace: str, name: str, spec: WorkloadGroup | None, ordered: Sequence[Member], spec_error: str | None
) -> list[str]:
    out: list[str] = []
    where = f"WorkloadGroup {namespace}/{name}"
    if spec is None and spec_error is None:
        out.append(f"{where} does not exist (yet): {len(ordered)} workload(s) name it")
    elif spec is not None and len(ordered) < spec.expected_workloads:
        present = ", ".join(m.describe() for m in ordered) or "none"
        out.append(f"{where}: {len(ordered)} of {spec.expected_workloads} workloads present ({present})")
    for m in ordered:
        if not m.groups and not m.not_handled:
            out.append(f"{where}: {m.describe()} has no pods yet (its PodGroups are not known)")
    return out


def _merge_policy(
    where: str,
    spec: WorkloadGroup | None,
    joined: Sequence[Member],
    priority_values: Mapping[str, int],
    errors: list[str],
    notes: list[str],
) -> dict[str, Any]:
    """queue, priority, preemptibility and the delays of the rendered PodGroup (errors appended)."""
    values = {**SYSTEM_PRIORITIES, **priority_values}
    entries = [(m, g.metadata) for m in joined for g in sorted(m.groups, key=lambda g: g.metadata.name)]
    out: dict[str, Any] = {"provenance": {}}
    queues = sorted({md.queue for _, md in entries})
    if len(queues) > 1:
        errors.append(f"{where}: members use different queues (" + "; ".join(
            f"{m.describe()} queue {md.queue or '(none)'}" for m, md in entries) + "): all must use one queue")
    out["queue"] = queues[0] if queues else ""
    out["provenance"]["queue"] = "the members' common queue"

    names = sorted({md.priority_class_name for _, md in entries})
    if spec is not None and spec.priority_class_name:
        out["priority"], out["provenance"]["priorityClassName"] = spec.priority_class_name, "spec.priorityClassName"
    elif len(names) == 1:
        out["priority"], out["provenance"]["priorityClassName"] = names[0], "the members' common priority"
    else:
        unknown = [n for n in names if n not in values]
        if unknown:
            errors.append(
                f"{where}: members use different priorities and PriorityClass {', '.join(repr(n) for n in unknown)} "
                "has no known value: set spec.priorityClassName or create the PriorityClass"
            )
            out["priority"] = ""
        else:
            lowest = min(names, key=lambda n: (values[n], n))
            out["priority"] = lowest
            out["provenance"]["priorityClassName"] = "the lowest of the members' (" + ", ".join(
                f"{n}={values[n]}" for n in names) + ")"
            notes.append(f"priorityClassName {lowest}: the lowest of the members' priorities")

    if spec is not None and spec.preemptibility:
        out["preemptibility"], out["provenance"]["preemptibility"] = spec.preemptibility, "spec.preemptibility"
    else:
        explicit = [md.preemptibility for _, md in entries]
        effective = [md.preemptibility or derived_preemptibility(values.get(md.priority_class_name))
                     for _, md in entries]
        rank = {p: i for i, p in enumerate(PREEMPTIBILITIES)}
        strictest = max((e for e in effective if e), key=rank.__getitem__, default=None)
        if strictest is not None and strictest != "preemptible":
            who = next(f"{m.describe()} ({md.preemptibility or 'by its priority ' + md.priority_class_name})"
                       for (m, md), e in zip(entries, effective, strict=True) if e == strictest)
            out["preemptibility"] = strictest
            out["provenance"]["preemptibility"] = f"the strictest of the members': {who} is {strictest}"
            if any(e != strictest for e in effective):
                notes.append(f"preemptibility {strictest}: the strictest of the members' ({who})")
        elif all(not e for e in explicit):
            out["preemptibility"] = ""  # all derive it from priority, as the rendered group will
        elif None in effective:
            errors.append(f"{where}: cannot tell the strictest preemptibility: a member without one has a "
                          "PriorityClass of unknown value: set spec.preemptibility")
            out["preemptibility"] = ""
        else:
            out["preemptibility"] = "preemptible"
            out["provenance"]["preemptibility"] = "the members' (all preemptible)"

    out["preemption_delay"] = _pick_duration(
        spec.preemption_delay if spec else None, [md.preemption_delay for _, md in entries], "min",
        "preemptionDelay", out["provenance"])
    out["staleness_grace_period"] = _pick_duration(
        spec.staleness_grace_period if spec else None, [md.staleness_grace_period for _, md in entries], "max",
        "stalenessGracePeriod", out["provenance"])
    return out


def _pick_duration(explicit: str | None, values: list[str | None], rule: str, fld: str,
                   provenance: dict[str, str]) -> str | None:
    if explicit is not None:
        provenance[fld] = f"spec.{fld}"
        return explicit
    parsed = sorted({(parse_go_duration(v), v) for v in values if v})
    if not parsed:
        return None
    if rule == "min":
        provenance[fld] = "the shortest of the members that set one"
        return parsed[0][1]
    if parsed[0][0] < 0:  # negative: stale eviction disabled, which no finite grace can keep
        provenance[fld] = "a member disables stale eviction (negative)"
        return parsed[0][1]
    provenance[fld] = "the longest of the members that set one"
    return parsed[-1][1]


def _build(
    namespace: str,
    name: str,
    pg_name: str,
    spec: WorkloadGroup,
    joined: Sequence[Member],
    policy: dict[str, Any],
    errors: list[str],
    notes: list[str],
) -> PodGroupMetadata | None:
    sub_groups: list[SubGroup] = []
    for m in joined:
        prefix = member_prefix(name, m.ref)
        pgs = sorted(m.groups, key=lambda g: g.metadata.name)
        if len(pgs) == 1:
            _wrap(m, pgs[0], prefix, None, sub_groups, errors, notes)
            continue
        sub_groups.append(SubGroup(prefix, min_sub_group=len(pgs)))
        notes.append(f"{m.describe()} has {len(pgs)} PodGroups: each is a sub-group of {prefix}, all required")
        for i, g in enumerate(pgs):
            _wrap(m, g, f"{prefix}-pg{i}", prefix, sub_groups, errors, notes)
    if errors:
        return None
    return PodGroupMetadata(
        name=pg_name,
        namespace=namespace,
        owner=OwnerRef(API_VERSION, KIND, name, spec.uid),
        queue=policy["queue"],
        priority_class_name=policy["priority"],
        preemptibility=policy["preemptibility"],
        preemption_delay=policy["preemption_delay"],
        staleness_grace_period=policy["staleness_grace_period"],
        min_member=None,
        min_sub_group=len(joined),
        sub_groups=sub_groups,
        topology=replace(spec.topology) if spec.topology else TopologyConstraint(),
        provenance={**policy["provenance"], "minSubGroup": f"every one of the {len(joined)} workloads"},
    )


def _wrap(m: Member, g: PlannedGroup, wrapper: str, parent: str | None, out: list[SubGroup],
          errors: list[str], notes: list[str]) -> None:
    """Append ``g``'s tree below a wrapper sub-group named ``wrapper`` (a child of ``parent``)."""
    md = g.metadata
    where = f"{m.describe()} PodGroup {md.name}"
    topology = _copy_topology(md.topology)
    if not md.sub_groups:
        if md.min_member is None:
            errors.append(f"{where}: has neither minMember nor sub-groups; cannot be a member")
            return
        out.append(SubGroup(wrapper, min_member=md.min_member, parent=parent, topology=topology,
                            pods=sorted(g.pods)))
        return
    names = {sg.name for sg in md.sub_groups}
    roots = [sg for sg in md.sub_groups if sg.parent not in names]
    min_sub_group = md.min_sub_group if md.min_sub_group is not None else len(roots)
    if md.min_sub_group is None and md.min_member is not None:
        tree = tree_min_count(replace(md, min_member=None))
        if md.min_member > tree:
            notes.append(f"{where}: root minMember {md.min_member} not carried (with sub-groups KAI reads the "
                         f"tree, which needs {tree} pods)")
    out.append(SubGroup(wrapper, min_sub_group=min_sub_group, parent=parent, topology=topology))
    placed: set[str] = set()
    for sg in md.sub_groups:
        out.append(SubGroup(
            _child(wrapper, sg.name),
            min_member=sg.min_member,
            min_sub_group=sg.min_sub_group,
            parent=_child(wrapper, sg.parent) if sg.parent in names else wrapper,
            topology=_copy_topology(sg.topology),
            pods=sorted(sg.pods),
        ))
        placed.update(sg.pods)
    loose = sorted(set(g.pods) - placed)
    if loose:
        errors.append(f"{where}: pod(s) {', '.join(loose[:5])} are in no sub-group of a PodGroup with sub-groups; "
                      "they would have no place in the rendered tree")


__all__ = [
    "GroupRender",
    "Member",
    "MemberView",
    "derived_preemptibility",
    "member_prefix",
    "render_kai",
    "rendered_name",
]
