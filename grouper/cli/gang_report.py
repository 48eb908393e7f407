"""A workload's gangs in words and as data, for ``grouper why`` and ``grouper get workloads`` (pure, no I/O).

The facts come from :mod:`grouper.core.gang_state` (one derivation for the controller and the CLI); this
module only finds which pods belong to which PodGroup, turns a :class:`GangState` into the API's
``GangView`` shape (grouper/api/models.py: the same field names, so the CLI and ``/workloads`` agree) and
renders it. Every time is relative to the ``now`` the caller passes (the command's clock).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from grouper.core.gang_state import (
    GangSpec,
    GangSpecError,
    GangState,
    MemberPod,
    State,
    gang_of,
    gang_state,
    member,
    parse_time,
)
from grouper.core.gang_state import worst as worst_state
from grouper.core.upstream import scheduling_group
from grouper.describe.resources import pod_request
from grouper.model import objects as o
from grouper.model.podgroup import POD_GROUP_ANNOTATION

# The workload's state is the worst of its gangs' (the order of GangStateName's description in the API).
MEANING = {
    State.GROUPING: "its pods are still arriving, or the grouper has not written its PodGroup yet",
    State.WAITING: "every pod the gang needs is there, but the scheduler has not placed enough of them",
    State.ADMITTED: "the scheduler placed every pod its minimums need",
    State.DEGRADED: "it was admitted, and is now below a minimum (a pod deleted or evicted, a node gone)",
    State.ERROR: "grouping it failed",
}
REASON_WIDTH = 60  # the REASON column of `get workloads -o wide`


def rfc3339(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if moment is not None else None


def duration(seconds: float | None) -> str:
    """kubectl-style (``45s``, ``12m``, ``5h``, ``3d``, as ``AGE``), with the next unit for short spans
    (``1m30s``, ``2h5m``) so a time to admission reads precisely; ``-`` when unknown."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 600:
        return f"{s // 60}m{s % 60}s" if s % 60 else f"{s // 60}m"
    minutes = s // 60
    if minutes < 120:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 10:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    return f"{hours // 24}d"


def since_known(gs: GangState) -> bool:
    """Whether the cluster holds evidence of when the state began: read once, without the state before,
    :func:`gang_state` has none for Degraded (when the pod went) or Error, and says ``now``."""
    return gs.state not in (State.DEGRADED, State.ERROR)


def worst(states: Iterable[str | None]) -> str | None:
    """The workload's state from its gangs' (None without any): grouper.core.gang_state's order."""
    state = worst_state(states)
    return state.value if state is not None else None


def shown_names(names: Sequence[str], limit: int) -> str:
    """``a, b, c and 4 more`` (``limit`` 0: all)."""
    if limit <= 0 or len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f" and {len(names) - limit} more"


# ------------------------------------------------------------------------------------------ membership


def kai_members(pods: Iterable[dict[str, Any]], pod_group: str) -> list[dict[str, Any]]:
    """The pods KAI's scheduler counts in a PodGroup: those whose ``pod-group-name`` annotation names it."""
    return [p for p in pods if o.annotations(p).get(POD_GROUP_ANNOTATION) == pod_group]


def upstream_members(pods: Iterable[dict[str, Any]], pod_group: str) -> list[dict[str, Any]]:
    """The pods kube-scheduler counts in an upstream PodGroup: ``spec.schedulingGroup.podGroupName``."""
    return [p for p in pods if scheduling_group(p) == pod_group]


def members_of(pod_group: dict[str, Any], pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    group = str(pod_group.get("apiVersion") or "").partition("/")[0]
    pick = upstream_members if group == "scheduling.k8s.io" else kai_members
    return pick(pods, o.name(pod_group))


def member_pods(pods: Iterable[dict[str, Any]]) -> list[MemberPod]:
    return [member(p, gpus=pod_request(p.get("spec") or {}).gpus) for p in pods]


# ------------------------------------------------------------------------------------------ one gang


@dataclass(frozen=True)
class Gang:
    """One PodGroup of the workload (None: planned, not written yet) with its state now."""

    name: str
    api_version: str  # "" while the PodGroup does not exist
    state: GangState
    spec: GangSpec | None = None
    pods: tuple[str, ...] = ()  # the pods the scheduler counts in it


def gang_now(pod_group: dict[str, Any], pods: Iterable[dict[str, Any]], *, now: datetime, queue: str = "",
             members: list[dict[str, Any]] | None = None) -> Gang:
    """The gang of a stored PodGroup and the pods the scheduler counts in it, as of ``now`` (no previous
    state: the times come from the scheduler's records and the pods, see gang_state). ``members``: its
    member pods when the caller indexed them already (else they are picked from ``pods``)."""
    mine = members if members is not None else members_of(pod_group, pods)
    try:
        spec: GangSpec | None = gang_of(pod_group, queue=queue)
        state = gang_state(spec, member_pods(mine), None, now=now)
    except GangSpecError as e:
        spec, state = None, gang_state(None, member_pods(mine), None, now=now, error=str(e))
    return Gang(o.name(pod_group), str(pod_group.get("apiVersion") or ""), state, spec,
                tuple(sorted(o.name(p) for p in mine)))


def planned_gang(planned: dict[str, Any], pods: Iterable[dict[str, Any]], places: Mapping[str, str | None], *,
                 now: datetime) -> Gang:
    """A PodGroup the plan names that is not in the cluster: Grouping (the grouper has not written it), with
    what it will need and what its pods are (``planned``: the PodGroup as the grouper would create it;
    ``places``: pod name -> its planned sub-group, since the pods do not carry their label yet)."""
    from dataclasses import replace

    mine = [m._replace(sub_group=places.get(m.name)) for m in member_pods(pods)]
    state = gang_state(None, mine, None, now=now)
    try:
        spec: GangSpec | None = gang_of(planned)
        needs = gang_state(spec, mine, None, now=now)
        state = replace(state, counts=needs.counts, sub_groups=needs.sub_groups, queue=needs.queue)
    except GangSpecError:  # the plan's own object: cannot happen; keep the counts without the spec
        spec = None
    return Gang(o.name(planned), "", state, spec, tuple(sorted(m.name for m in mine)))


def gang_view(name: str, gs: GangState, now: datetime) -> dict[str, Any]:
    """The HTTP API's ``GangView`` of a gang state (the API's own converter: CLI and API agree by construction)."""
    from grouper.api.views import gang_view as api_gang_view

    return api_gang_view(name, gs, now).model_dump()


# ------------------------------------------------------------------------------------------ the report


@dataclass
class WhyReport:
    """What ``grouper why`` says about one workload."""

    api_version: str
    kind: str
    namespace: str
    name: str
    gangs: list[Gang]
    plugin: str | None = None
    planned: list[str] = field(default_factory=list)  # the PodGroups the grouper's plan names
    pods: int = 0  # the workload's live pods
    notes: list[str] = field(default_factory=list)  # why it is not grouped (yet), plan warnings
    source: str = ""
    error: str = ""  # grouping failed and no PodGroup exists: the decision's message (names object and field)
    workload_group: dict[str, Any] | None = None  # the API's WorkloadGroupView of the group it is a member of

    @property
    def state(self) -> str:
        if self.error:
            return State.ERROR.value
        return worst(g.state.state.value for g in self.gangs) or State.GROUPING.value

    @property
    def written(self) -> list[Gang]:
        return [g for g in self.gangs if g.api_version]

    def to_dict(self, now: datetime) -> dict[str, Any]:
        return {
            "workload": {"apiVersion": self.api_version, "kind": self.kind, "name": self.name},
            "namespace": self.namespace,
            "state": self.state,
            "plugin": self.plugin,
            "plannedPodGroups": list(self.planned),
            "pods": self.pods,
            "gangs": [gang_view(g.name, g.state, now) for g in self.gangs],
            "podGroups": [{"name": g.name, "apiVersion": g.api_version or None, "pods": list(g.pods)}
                          for g in self.gangs],
            "notes": list(self.notes),
            "error": self.error,
            "workloadGroup": self.workload_group,
            "source": self.source,
        }


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _needs(g: Gang) -> str:
    """What the gang needs, in words: the required count and where it comes from."""
    spec, c = g.spec, g.state.counts
    if spec is None:
        return f"{_plural(c.required, 'scheduled pod')}"
    if spec.backend == "upstream":
        source = "spec.schedulingPolicy.gang.minCount" if spec.min_member else "no gang policy"
        return f"{_plural(c.required, 'scheduled pod')} ({source} {spec.min_member})" if spec.min_member else \
            f"{_plural(c.required, 'scheduled pod')} ({source})"
    parts = []
    if spec.min_member is not None:
        parts.append(f"minMember {spec.min_member}")
    if spec.sub_groups:
        n = len([s for s in spec.sub_groups if not s.parent])
        if spec.min_sub_group is None:
            parts.append(f"all {_plural(n, 'top-level sub-group')}" if n != 1 else "its top-level sub-group")
        else:
            parts.append(f"{spec.min_sub_group} of its {_plural(n, 'top-level sub-group')} (minSubGroup)")
    return f"{_plural(c.required, 'scheduled pod')}" + (f" ({', '.join(parts)})" if parts else "")


def _reason_lines(g: Gang, limit: int) -> list[str]:
    out: list[str] = []
    group_reasons = [r for r in g.state.reasons if r.source == "PodGroup"]
    pod_reasons = [r for r in g.state.reasons if r.source == "Pod"]
    for r in group_reasons:
        where = r.type + (f" on node pool {r.node_pool}" if r.node_pool else "")
        when = f", since {rfc3339(r.since)}" if r.since else ""
        out.append(f"    PodGroup {where}{when}: {r.reason}: {r.message}" if r.reason else
                   f"    PodGroup {where}{when}: {r.message}")
    shown = pod_reasons if limit <= 0 else pod_reasons[:limit]
    for r in shown:
        out.append(f"    {_plural(len(r.pods), 'pod')} PodScheduled=False ({shown_names(list(r.pods), limit)}): "
                   f"{r.reason}: {r.message}" if r.reason else
                   f"    {_plural(len(r.pods), 'pod')} PodScheduled=False ({shown_names(list(r.pods), limit)}): "
                   f"{r.message}")
    if len(shown) < len(pod_reasons):
        rest = pod_reasons[len(shown):]
        out.append(f"    ... and {len(rest)} more pod message{'s' if len(rest) != 1 else ''} "
                   f"({_plural(sum(len(r.pods) for r in rest), 'pod')})")
    return out


def gang_lines(g: Gang, now: datetime, limit: int) -> list[str]:
    gs = g.state
    backend = {"kai": "KAI", "upstream": "upstream"}.get(g.spec.backend if g.spec else "", "")
    head = f"PodGroup {g.name}"
    if g.api_version:
        head += f" ({g.api_version}" + (f", queue {gs.queue}" if gs.queue else "") + ")"
    else:
        head += " (planned; not in the cluster yet)"
    lines = [head]
    if since_known(gs):
        lines.append(f"  State: {gs.state.value} for {duration(gs.seconds_in_state(now))} (since {rfc3339(gs.since)}): "
                     f"{MEANING[gs.state]}.")
    else:
        lines.append(f"  State: {gs.state.value} (since when, the cluster does not record; a running grouper's "
                     f"/workloads says): {MEANING[gs.state]}.")
    if gs.error:
        lines.append(f"  Error: {gs.error}")
        return lines
    c = gs.counts
    lines.append(f"  Needs: {_needs(g)}.")
    lines.append(f"  Has: {c.present} present, {c.scheduled} scheduled"
                 + (f" ({gs.requested_gpus:g} GPUs requested)" if gs.requested_gpus else "") + ".")
    if gs.sub_groups:
        lines.append("  Sub-groups (needs / present / scheduled):")
        depth: dict[str, int] = {}
        for s in gs.sub_groups:
            depth[s.name] = depth.get(s.parent or "", -1) + 1 if s.parent else 0
        for s in gs.sub_groups:
            mark = "met" if s.satisfied else "not met"
            lines.append(f"    {'  ' * depth[s.name]}{s.name}: {s.counts.required} / {s.counts.present} / "
                         f"{s.counts.scheduled} ({mark})")
    if gs.admitted_at is not None:
        tta = gs.time_to_admission
        after = f" after {duration(tta)} (from the first pod's creation)" if tta is not None else ""
        lines.append(f"  Admitted at {rfc3339(gs.admitted_at)}{after}.")
    if gs.reasons:
        lines.append("  The scheduler said:")
        lines += _reason_lines(g, limit)
    elif gs.state in (State.WAITING, State.DEGRADED):
        lines.append("  The scheduler has said nothing about it yet (no scheduling condition, no PodScheduled=False "
                     "pod): it may not have tried, or it is not the scheduler these pods name.")
    if backend == "KAI" and g.spec and g.spec.resources_status:
        res = "; ".join(f"{k}: " + ", ".join(f"{rk}={rv}" for rk, rv in sorted(v.items()))
                        for k, v in sorted(g.spec.resources_status.items()))
        lines.append(f"  Resources (status.resourcesStatus): {res}")
    return lines


def render_why(report: WhyReport, now: datetime, *, limit: int = 5) -> str:
    """The report in words (no trailing newline)."""
    who = f"{report.kind} {report.namespace}/{report.name}"
    written = report.written
    lines: list[str] = []
    if written:
        lines.append(f"{who} is {report.state}: "
                     + (f"its {_plural(len(written), 'PodGroup')}' worst state." if len(written) > 1
                        else MEANING[State(report.state)] + "."))
    elif report.error:
        lines.append(f"{who} is {report.state}: grouping it failed: {report.error}")
    elif report.workload_group is not None:
        lines.append(f"{who} is {report.state}: its WorkloadGroup {report.workload_group.get('name')} is not "
                     "rendered, so its pods wait on the gate.")
    else:
        lines.append(f"{who} is {report.state}: the grouper has not grouped it yet (no PodGroup in the cluster).")
    if report.workload_group is not None:
        from grouper.api.models import WorkloadGroupView
        from grouper.api.workload_group import summary

        group = WorkloadGroupView.model_validate(report.workload_group)
        lines.append(f"It is a {summary(group)}.")
        members = ", ".join(f"{m.kind}/{m.name}" for m in group.members) or "none yet"
        lines.append(f"The group's members: {members}"
                     + (f" ({len(group.members)} of {group.expectedWorkloads} expected)."
                        if group.expectedWorkloads is not None else "."))
    if report.workload_group is not None:
        lines.append(f"The grouper's plan ({report.plugin or 'no plugin'}, {_plural(report.pods, 'pod')}): its pods "
                     f"are in WorkloadGroup {report.workload_group.get('name')}'s PodGroup "
                     f"{report.workload_group.get('podGroup')}.")
    elif report.plugin or report.planned:
        planned = ", ".join(report.planned) if report.planned else "no PodGroup"
        lines.append(f"The grouper's plan ({report.plugin or 'no plugin'}, {_plural(report.pods, 'pod')}): "
                     f"{planned}.")
    if report.notes:
        lines.append("Why:" if not written else "Notes:")
        lines += [f"  - {n}" for n in report.notes]
    for g in report.gangs:
        lines.append("")
        lines += gang_lines(g, now, limit)
    if report.source:
        lines.append("")
        lines.append(f"(source: {report.source})")
    return "\n".join(lines)


def decision_notes(decisions: Iterable[Any], limit: int) -> list[str]:
    """The plan's decisions that did not group a pod, one line per (outcome, reason, message) with the
    pods named (bounded): why the grouper has not grouped the workload, as ``explain`` says it per pod."""
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for d in decisions:
        if d.outcome == "grouped":
            continue
        grouped.setdefault((d.outcome, d.reason, d.message), []).append(d.pod_name)
    out = []
    items = sorted(grouped.items())
    if limit > 0 and len(items) > limit:  # messages that name their pod make one group each: bounded too
        rest = items[limit:]
        items = items[:limit]
        tail = [f"... and {len(rest)} more ({_plural(sum(len(n) for _, n in rest), 'pod')})"]
    else:
        tail = []
    for (outcome, reason, message), names in items:
        verb = "could not be grouped" if outcome in ("error", "failed") else \
            "is not grouped" if len(names) == 1 else "are not grouped"
        subject = f"pod {names[0]}" if len(names) == 1 else f"{len(names)} pods ({shown_names(sorted(names), limit)})"
        out.append(f"{subject} {verb} ({reason}): {message}".rstrip(": "))
    return out + tail


# ------------------------------------------------------------------------------------------ get workloads


def row_facts(gangs: Sequence[Mapping[str, Any]], now: datetime, *, live: bool = False) -> tuple[str, str, str]:
    """(QUEUE, WAITING, REASON) of ``get workloads -o wide`` from the workload's ``GangView`` dicts: the worst
    gang's queue, its time in state when not Admitted, and its first scheduler reason, truncated. ``live``:
    the gangs were derived from the cluster just now (no state before: see :func:`since_known`)."""
    if not gangs:
        return "-", "-", "-"
    state = worst(str(g.get("state") or "") for g in gangs)
    g = next((g for g in gangs if g.get("state") == state), gangs[0])
    queue = next((str(x.get("queue")) for x in [g, *gangs] if x.get("queue")), "-")
    waiting = "-"
    if live and state in (State.DEGRADED.value, State.ERROR.value):
        waiting = "?"  # derived once from the cluster: when it began is not recorded there
    elif state and state != State.ADMITTED.value:
        since = parse_time(g.get("since"))
        seconds = (now - since).total_seconds() if since is not None else g.get("secondsInState")
        waiting = duration(seconds if isinstance(seconds, int | float) else None)
    reasons = g.get("reasons") or []
    reason = "-"
    if g.get("error"):
        reason = str(g["error"])
    elif reasons:
        r = reasons[0]
        reason = f"{r.get('reason')}: {r.get('message')}" if r.get("reason") else str(r.get("message") or "-")
    reason = " ".join(reason.split())  # one line
    if len(reason) > REASON_WIDTH:
        reason = reason[: REASON_WIDTH - 3] + "..."
    return queue, waiting, reason


def render_workload_rows(rows: Sequence[tuple[Any, str | None, Sequence[Mapping[str, Any]]]], *, wide: bool,
                         now: datetime, live: bool = False) -> str:
    """``get workloads``: NAMESPACE NAME KIND PHASE STATE COMPONENTS GPU AGE (+ QUEUE WAITING REASON with
    ``wide``), one row per (WorkloadSummary, state, GangView dicts); no trailing newline."""
    from grouper.describe.render import age

    header = ["NAMESPACE", "NAME", "KIND", "PHASE", "STATE", "COMPONENTS", "GPU", "AGE"]
    if wide:
        header += ["QUEUE", "WAITING", "REASON"]
    table = [header]
    for s, state, gangs in rows:
        row = [s.namespace or "<none>", s.name, s.kind, s.phase, state or "-", s.components_text, str(s.gpus),
               age(s.created_at, now) or "<unknown>"]
        if wide:
            row += list(row_facts(gangs, now, live=live))
        table.append(row)
    widths = [max(len(r[c]) for r in table) for c in range(len(header))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in table)


def workload_gangs(pod_groups: Iterable[dict[str, Any]], pods: Sequence[dict[str, Any]], now: datetime
                   ) -> dict[tuple[str, str, str], list[Gang]]:
    """The gangs of the PodGroups by the workload that owns them ((namespace, kind, name) of the owner
    reference the grouper writes: the top owner)."""
    kai: dict[tuple[str, str], list[dict[str, Any]]] = {}  # one pass over the pods, not one per PodGroup
    upstream: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in pods:
        if name := o.annotations(p).get(POD_GROUP_ANNOTATION):
            kai.setdefault((o.namespace(p), name), []).append(p)
        if name := scheduling_group(p):
            upstream.setdefault((o.namespace(p), name), []).append(p)
    out: dict[tuple[str, str, str], list[Gang]] = {}
    for pg in pod_groups:
        refs = [r for r in o.owner_references(pg) if isinstance(r, dict)]
        if not refs:
            continue
        owner = next((r for r in refs if r.get("controller")), refs[0])
        key = (o.namespace(pg), str(owner.get("kind") or ""), str(owner.get("name") or ""))
        index = upstream if str(pg.get("apiVersion") or "").startswith("scheduling.k8s.io/") else kai
        members = index.get((o.namespace(pg), o.name(pg)), [])
        out.setdefault(key, []).append(gang_now(pg, (), now=now, members=members))
    return out


__all__ = [
    "Gang",
    "WhyReport",
    "decision_notes",
    "duration",
    "gang_now",
    "gang_view",
    "render_why",
    "render_workload_rows",
    "row_facts",
    "workload_gangs",
    "worst",
]
