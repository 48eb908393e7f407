"""A gang's state from its PodGroup, its member pods and the state before (pure, no I/O).

States (issue 39):

- ``Grouping``: no PodGroup yet, or fewer pods present than the gang's minimums need (pods still arriving).
- ``Waiting``: the gang is formed (enough pods present) but not every minimum is met by *scheduled* pods;
  ``reasons`` holds what the scheduler said, verbatim: KAI's ``status.schedulingConditions[].reasons[]``
  (the deprecated ``reason``/``message`` when a condition has no ``reasons``), upstream's PodGroup
  conditions that are ``False``, and each held pod's ``PodScheduled=False`` reason and message.
- ``Admitted``: the root's minimum and every required sub-group's minimum are met by scheduled pods.
- ``Degraded``: was admitted, now below a minimum (a pod deleted, a node gone). Back to ``Admitted`` when
  the minimums are met again. "Was admitted" comes from the previous state or, after a restart (no previous
  state), from the scheduler's own record: upstream's ``PodGroupInitiallyScheduled=True`` (it never
  reverts) or KAI's ``kai.scheduler/last-start-timestamp`` annotation.
- ``Error``: grouping failed (the message names the object and the field) or the PodGroup's own fields
  cannot be read (the message names the field and the value).

Counting: a pod is *present* unless it is being deleted (``metadata.deletionTimestamp``); it is *scheduled*
when bound (``spec.nodeName`` set, or its ``PodScheduled`` condition is ``True``). A pod is in the
sub-group its ``kai.scheduler/subgroup-name`` label names (a name the PodGroup does not have counts only
toward the root). ``required`` is the fewest pods that satisfy a node of KAI's sub-group tree (a leaf:
its ``minMember``, default 1; a node: its ``minSubGroup`` cheapest children, all of them when unset; at least
its own ``minMember``) - the rule :func:`grouper.core.upstream.tree_min_count` uses.

Times come from ``now`` (the caller's clock): ``since`` is when the current state began (kept from the
previous state while the state holds); without a previous state the best evidence is used - admission:
the scheduler's timestamp; waiting: the creation of the pod that completed the gang; grouping: the first
pod's (or the PodGroup's) creation. ``time_to_admission`` = first admission - first pod's creation.
GPUs: the members' ``nvidia.com/gpu`` requests (the caller computes them: :func:`member` takes
``gpus``; KAI's gpu-fraction annotations are not read anywhere in the grouper, so not here either).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, NamedTuple

from grouper.core.upstream import OLD_SCHEDULED_CONDITION, SCHEDULED_CONDITION
from grouper.model.bounded import BoundedMemo
from grouper.model.errors import shown
from grouper.model.podgroup import SUBGROUP_LABEL

KAI_API_GROUP = "scheduling.run.ai"
UPSTREAM_API_GROUP = "scheduling.k8s.io"
LAST_START_ANNOTATION = "kai.scheduler/last-start-timestamp"


class State(StrEnum):
    GROUPING = "Grouping"
    WAITING = "Waiting"
    ADMITTED = "Admitted"
    DEGRADED = "Degraded"
    ERROR = "Error"


@dataclass(frozen=True)
class SchedulerReason:
    """One thing the scheduler said, verbatim. ``source``: ``PodGroup`` (a scheduling condition or an
    upstream condition) or ``Pod`` (a ``PodScheduled=False`` condition; ``pods`` lists every pod that
    carries the same reason and message)."""

    source: str
    reason: str
    message: str
    type: str = ""  # the condition type (UnschedulableOnNodePool, PodGroupInitiallyScheduled, PodScheduled)
    node_pool: str = ""
    pods: tuple[str, ...] = ()
    since: datetime | None = None  # the condition's lastTransitionTime


@dataclass(frozen=True)
class SubGroupSpec:
    name: str
    parent: str | None = None
    min_member: int | None = None
    min_sub_group: int | None = None


@dataclass(frozen=True)
class GangSpec:
    """What a PodGroup says about its gang: its minimums and the scheduler's record of it."""

    backend: str  # "kai" or "upstream"
    namespace: str
    name: str
    queue: str = ""
    min_member: int | None = None
    min_sub_group: int | None = None
    sub_groups: tuple[SubGroupSpec, ...] = ()
    created: datetime | None = None
    reasons: tuple[SchedulerReason, ...] = ()
    scheduler_admitted: bool = False  # the scheduler's record that the gang started (survives our restarts)
    admitted_at: datetime | None = None  # ... and when, where the record says
    resources_status: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # KAI, verbatim


class MemberPod(NamedTuple):
    """A tuple, not a frozen dataclass: one is made per member pod of every gang recomputed (a frozen
    dataclass's constructor sets each field through ``object.__setattr__``)."""

    name: str
    sub_group: str | None = None
    bound: bool = False
    present: bool = True  # False while the pod is being deleted
    gpus: float = 0
    created: datetime | None = None
    unschedulable: SchedulerReason | None = None  # its PodScheduled=False condition


@dataclass(frozen=True)
class Counts:
    required: int
    present: int
    scheduled: int


@dataclass(frozen=True)
class SubGroupState:
    name: str
    parent: str | None
    min_member: int | None
    min_sub_group: int | None
    counts: Counts
    satisfied: bool
    children: tuple[str, ...] = ()


@dataclass(frozen=True)
class GangState:
    state: State
    since: datetime
    counts: Counts
    sub_groups: tuple[SubGroupState, ...] = ()
    reasons: tuple[SchedulerReason, ...] = ()
    requested_gpus: float = 0
    queue: str = ""
    first_pod_created: datetime | None = None
    admitted_at: datetime | None = None  # the first admission (kept through Degraded and back)
    ever_admitted: bool = False
    error: str = ""

    @property
    def time_to_admission(self) -> float | None:
        """Seconds from the first pod's creation to the first admission; None until admitted, and None when
        the first pod known was created after the admission (beyond clock skew): the admitted pods are all
        gone (a node lost) and only replacements are left to read from (``grouper why``, a restart)."""
        if self.admitted_at is None or self.first_pod_created is None:
            return None
        span = (self.admitted_at - self.first_pod_created).total_seconds()
        return None if span < -CLOCK_SKEW_SECONDS else max(0.0, span)

    def seconds_in_state(self, now: datetime) -> float:
        return max(0.0, (now - self.since).total_seconds())


# Worst first: a workload's state is the worst of its gangs' (the API, the controller's metrics and Events,
# and `grouper why` / `get workloads` all use this order).
WORST_FIRST = (State.ERROR, State.DEGRADED, State.WAITING, State.GROUPING, State.ADMITTED)


def worst(states: Iterable[State | str | None]) -> State | None:
    """The worst of these states (None without any); states may be given by their names."""
    present = {State(s) for s in states if s}
    return next((s for s in WORST_FIRST if s in present), None)


# The scheduler's admission time and the pods' creation times come from different clocks (the scheduler's,
# the API server's): a pod created up to this long after the admission still counts as one admitted.
CLOCK_SKEW_SECONDS = 5.0


class GangSpecError(ValueError):
    """A PodGroup field that cannot be read; the message names the PodGroup, the field and the value."""


# ------------------------------------------------------------------------------------------- parsing


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp as Kubernetes writes it (``2026-12-05T13:00:00Z``); None when absent or bad.
    Memoized: the pods of a burst share their creation seconds."""
    if not isinstance(value, str) or not value:
        return None
    moment = _TIMES.get(value)
    if moment is None:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        moment = _TIMES.put(value, moment if moment.tzinfo else moment.replace(tzinfo=UTC))
    return moment


_TIMES: BoundedMemo[str, datetime] = BoundedMemo(1024)  # keyed by the second: only the recent ones repeat


def _count(value: Any, where: str, fld: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GangSpecError(f"{where}: field {fld}: expected a count (an integer >= 0), got {shown(repr(value))}")
    return value


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _kai_reasons(status: dict[str, Any]) -> tuple[SchedulerReason, ...]:
    out: list[SchedulerReason] = []
    for cond in _list(status.get("schedulingConditions")):
        if not isinstance(cond, dict) or str(cond.get("status", "True")) != "True":
            continue
        ctype, pool, since = str(cond.get("type") or ""), str(cond.get("nodePool") or ""), parse_time(
            cond.get("lastTransitionTime"))
        items = [r for r in _list(cond.get("reasons")) if isinstance(r, dict)]
        if items:
            out.extend(SchedulerReason("PodGroup", str(r.get("reason") or ""), str(r.get("message") or ""),
                                       ctype, pool, (), since) for r in items)
        elif cond.get("reason") or cond.get("message"):  # before KAI had reasons[] (deprecated fields)
            out.append(SchedulerReason("PodGroup", str(cond.get("reason") or ""), str(cond.get("message") or ""),
                                       ctype, pool, (), since))
    return tuple(out)


def kai_gang(pod_group: dict[str, Any]) -> GangSpec:
    """The gang of a KAI ``scheduling.run.ai/v2alpha2`` PodGroup (spec and status as KAI writes them)."""
    meta, spec, status = _dict(pod_group.get("metadata")), _dict(pod_group.get("spec")), _dict(pod_group.get("status"))
    where = f"PodGroup {meta.get('namespace', '')}/{meta.get('name', '')}"
    subs: list[SubGroupSpec] = []
    for i, sg in enumerate(_list(spec.get("subGroups"))):
        if not isinstance(sg, dict) or not isinstance(sg.get("name"), str) or not sg["name"]:
            raise GangSpecError(f"{where}: field spec.subGroups[{i}].name: expected a name, got {shown(repr(sg))}")
        parent = sg.get("parent")
        subs.append(SubGroupSpec(
            sg["name"], str(parent) if parent else None,
            _count(sg.get("minMember"), where, f"spec.subGroups[{i}].minMember"),
            _count(sg.get("minSubGroup"), where, f"spec.subGroups[{i}].minSubGroup"),
        ))
    _no_cycle(subs, where)
    resources = {k: {str(rk): str(rv) for rk, rv in v.items()}
                 for k, v in _dict(status.get("resourcesStatus")).items() if isinstance(v, dict)}
    return GangSpec(
        backend="kai",
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        queue=str(spec.get("queue") or ""),
        min_member=_count(spec.get("minMember"), where, "spec.minMember"),
        min_sub_group=_count(spec.get("minSubGroup"), where, "spec.minSubGroup"),
        sub_groups=tuple(subs),
        created=parse_time(meta.get("creationTimestamp")),
        reasons=_kai_reasons(status),
        scheduler_admitted=bool(_dict(meta.get("annotations")).get(LAST_START_ANNOTATION)),
        admitted_at=parse_time(_dict(meta.get("annotations")).get(LAST_START_ANNOTATION)),
        resources_status=resources,
    )


def _no_cycle(subs: Sequence[SubGroupSpec], where: str) -> None:
    """KAI's webhook refuses a cycle in the parent graph; a PodGroup written without it must not loop here."""
    parent = {sg.name: sg.parent for sg in subs}
    for i, sg in enumerate(subs):
        seen, at = {sg.name}, sg.parent
        while at is not None and at in parent:
            if at in seen:
                raise GangSpecError(f"{where}: field spec.subGroups[{i}].parent: the parents of sub-group "
                                    f"{shown(sg.name)} form a cycle through {shown(at)}")
            seen.add(at)
            at = parent[at]


def upstream_gang(pod_group: dict[str, Any], *, queue: str = "") -> GangSpec:
    """The gang of an upstream ``scheduling.k8s.io`` PodGroup: ``spec.schedulingPolicy.gang.minCount``
    (a ``basic`` policy: no minimum), its ``False`` conditions as reasons, ``PodGroupInitiallyScheduled=True``
    (``PodGroupScheduled=True`` on 1.36 servers) as the admission record. Upstream has no queue: the caller passes the one the grouper decided."""
    meta, spec, status = _dict(pod_group.get("metadata")), _dict(pod_group.get("spec")), _dict(pod_group.get("status"))
    where = f"PodGroup {meta.get('namespace', '')}/{meta.get('name', '')}"
    policy = _dict(spec.get("schedulingPolicy"))
    min_member = _count(_dict(policy.get("gang")).get("minCount"), where, "spec.schedulingPolicy.gang.minCount")
    if "gang" not in policy and "basic" in policy:
        min_member = 0
    reasons: list[SchedulerReason] = []
    admitted, admitted_at = False, None
    for cond in _list(status.get("conditions")):
        if not isinstance(cond, dict):
            continue
        ctype, cstatus, since = str(cond.get("type") or ""), str(cond.get("status") or ""), parse_time(
            cond.get("lastTransitionTime"))
        if ctype in (SCHEDULED_CONDITION, OLD_SCHEDULED_CONDITION) and cstatus == "True":  # 1.37+, 1.36
            admitted, admitted_at = True, since
        elif cstatus == "False":
            reasons.append(SchedulerReason("PodGroup", str(cond.get("reason") or ""), str(cond.get("message") or ""),
                                           ctype, "", (), since))
    return GangSpec(
        backend="upstream",
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        queue=queue,
        min_member=min_member,
        created=parse_time(meta.get("creationTimestamp")),
        reasons=tuple(reasons),
        scheduler_admitted=admitted,
        admitted_at=admitted_at,
    )


def gang_of(pod_group: dict[str, Any], *, queue: str = "") -> GangSpec:
    """:func:`kai_gang` or :func:`upstream_gang` by the object's API group."""
    group = str(pod_group.get("apiVersion") or "").partition("/")[0]
    if group == UPSTREAM_API_GROUP:
        return upstream_gang(pod_group, queue=queue)
    if group != KAI_API_GROUP:
        raise GangSpecError(f"field apiVersion: not a PodGroup of {KAI_API_GROUP} or {UPSTREAM_API_GROUP}: "
                            f"{shown(pod_group.get('apiVersion'))}")
    return kai_gang(pod_group)


def member(pod: dict[str, Any], *, gpus: float = 0) -> MemberPod:
    """A member pod as the gang state counts it. ``gpus``: the pod's ``nvidia.com/gpu`` request
    (``grouper.describe.resources.pod_request(spec).gpus`` where the caller may use it)."""
    meta, spec, status = _dict(pod.get("metadata")), _dict(pod.get("spec")), _dict(pod.get("status"))
    name = str(meta.get("name") or "")
    scheduled_cond = next((c for c in _list(status.get("conditions"))
                           if isinstance(c, dict) and c.get("type") == "PodScheduled"), None)
    bound = bool(spec.get("nodeName")) or (scheduled_cond is not None and scheduled_cond.get("status") == "True")
    unschedulable = None
    if not bound and scheduled_cond is not None and scheduled_cond.get("status") == "False":
        unschedulable = SchedulerReason("Pod", str(scheduled_cond.get("reason") or ""),
                                        str(scheduled_cond.get("message") or ""), "PodScheduled", "", (name,),
                                        parse_time(scheduled_cond.get("lastTransitionTime")))
    label = _dict(meta.get("labels")).get(SUBGROUP_LABEL)
    return MemberPod(
        name=name,
        sub_group=str(label) if label else None,
        bound=bound,
        present=not meta.get("deletionTimestamp"),
        gpus=gpus,
        created=parse_time(meta.get("creationTimestamp")),
        unschedulable=unschedulable,
    )


# ------------------------------------------------------------------------------------------- counting


@dataclass
class _Node:
    spec: SubGroupSpec | None  # None = the root
    children: list[_Node] = field(default_factory=list)
    own_present: int = 0
    own_scheduled: int = 0
    required: int = 0
    present: int = 0
    scheduled: int = 0
    satisfied: bool = False  # every minimum met by scheduled pods
    formed: bool = False  # every minimum met by present pods (the gang's pods have arrived)


def _evaluate(node: _Node, gang: GangSpec) -> None:
    """Fill ``required``/``present``/``scheduled``/``satisfied``/``formed`` bottom-up (KAI's tree rules)."""
    for child in node.children:
        _evaluate(child, gang)
    min_member = node.spec.min_member if node.spec else gang.min_member
    min_sub_group = node.spec.min_sub_group if node.spec else gang.min_sub_group
    kids = node.children
    node.present = node.own_present + sum(k.present for k in kids)
    node.scheduled = node.own_scheduled + sum(k.scheduled for k in kids)
    wanted = len(kids) if min_sub_group is None else max(min_sub_group, 0)  # above len(kids): never met
    needed_kids = sum(sorted(k.required for k in kids)[:wanted])
    floor = min_member if min_member is not None else (0 if kids else 1)
    node.required = max(needed_kids, floor)
    node.satisfied = sum(1 for k in kids if k.satisfied) >= wanted and node.scheduled >= floor
    node.formed = sum(1 for k in kids if k.formed) >= wanted and node.present >= floor


def _tree(gang: GangSpec, members: Sequence[MemberPod]) -> tuple[_Node, dict[str, _Node]]:
    by_name: dict[str, _Node] = {}
    for sg in gang.sub_groups:
        by_name.setdefault(sg.name, _Node(sg))
    root = _Node(None)
    for node in by_name.values():
        parent = by_name.get(node.spec.parent) if node.spec and node.spec.parent else None
        (parent or root).children.append(node)
    for m in members:
        if not m.present:
            continue
        target = (by_name.get(m.sub_group) if m.sub_group else None) or root
        target.own_present += 1
        target.own_scheduled += int(m.bound)
    _evaluate(root, gang)
    return root, by_name


def _sub_group_states(gang: GangSpec, by_name: dict[str, _Node]) -> tuple[SubGroupState, ...]:
    out = []
    for sg in gang.sub_groups:
        n = by_name[sg.name]
        if n.spec is not sg:  # a duplicate name: KAI's webhook refuses it; the first one counts
            continue
        out.append(SubGroupState(sg.name, sg.parent, sg.min_member, sg.min_sub_group,
                                 Counts(n.required, n.present, n.scheduled), n.satisfied,
                                 tuple(k.spec.name for k in n.children if k.spec)))
    return tuple(out)


def _pod_reasons(members: Iterable[MemberPod]) -> list[SchedulerReason]:
    """The held pods' PodScheduled=False conditions, one per distinct (reason, message), pods listed."""
    grouped: dict[tuple[str, str], list[MemberPod]] = {}
    for m in members:
        if m.present and m.unschedulable is not None:
            grouped.setdefault((m.unschedulable.reason, m.unschedulable.message), []).append(m)
    out = []
    for (reason, message), ms in grouped.items():
        times = [m.unschedulable.since for m in ms if m.unschedulable and m.unschedulable.since]
        out.append(SchedulerReason("Pod", reason, message, "PodScheduled", "",
                                   tuple(sorted(m.name for m in ms)), min(times) if times else None))
    return sorted(out, key=lambda r: (r.pods[0] if r.pods else "", r.reason, r.message))


def _min_time(*values: datetime | None) -> datetime | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


# ------------------------------------------------------------------------------------------- the state


def gang_state(
    gang: GangSpec | None,
    members: Sequence[MemberPod],
    previous: GangState | None,
    *,
    now: datetime,
    error: str = "",
) -> GangState:
    """The gang's state now (see the module docstring). Deterministic: the same inputs give the same state."""
    present = [m for m in members if m.present]
    first_created = _min_time(previous.first_pod_created if previous else None, *(m.created for m in present))
    gpus = sum(m.gpus for m in present)
    ever = bool(previous and previous.ever_admitted)
    admitted_at = previous.admitted_at if previous else None
    queue = gang.queue if gang else (previous.queue if previous else "")

    def since(state: State, evidence: datetime | None) -> datetime:
        if previous is not None and previous.state == state:
            return previous.since
        if previous is None and evidence is not None:
            return min(evidence, now)
        return now

    if error:
        counts = previous.counts if previous else Counts(0, len(present), sum(m.bound for m in present))
        return GangState(State.ERROR, since(State.ERROR, None), counts, (), (), gpus, queue, first_created,
                         admitted_at, ever, error)
    if gang is None:
        counts = Counts(0, len(present), sum(m.bound for m in present))
        return GangState(State.GROUPING, since(State.GROUPING, first_created), counts, (),
                         tuple(_pod_reasons(present)), gpus, queue, first_created, admitted_at, ever)

    root, by_name = _tree(gang, members)
    counts = Counts(root.required, root.present, root.scheduled)
    subs = _sub_group_states(gang, by_name)
    reasons = (*gang.reasons, *_pod_reasons(present))
    if gang.scheduler_admitted:  # the scheduler's record survives our restarts
        ever = True
        admitted_at = admitted_at or gang.admitted_at
    if root.satisfied:
        if admitted_at is None:
            admitted_at = gang.admitted_at or now
        return GangState(State.ADMITTED, since(State.ADMITTED, admitted_at), counts, subs, (), gpus, queue,
                         first_created, admitted_at, True)
    if ever:
        return GangState(State.DEGRADED, since(State.DEGRADED, None), counts, subs, reasons, gpus, queue,
                         first_created, admitted_at, True)
    if not root.formed:
        return GangState(State.GROUPING, since(State.GROUPING, _min_time(first_created, gang.created)), counts,
                         subs, reasons, gpus, queue, first_created, admitted_at, False)
    return GangState(State.WAITING, since(State.WAITING, _completed_at(present, root.required)), counts, subs,
                     reasons, gpus, queue, first_created, admitted_at, False)


def _completed_at(present: Sequence[MemberPod], required: int) -> datetime | None:
    """When the gang formed: the creation of the ``required``-th pod (None when unknown)."""
    times = sorted(m.created for m in present if m.created is not None)
    if not times or required <= 0:
        return None
    return times[min(required, len(times)) - 1]
