"""The web view's HTML fragments, made from the API's own response models (the JSON routes' view functions
build them; nothing here reads the caches or decides anything). Pure: model in, escaped HTML out."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from grouper.api.models import (
    DecisionRecord,
    DefinitionList,
    EventView,
    GangView,
    PodGroupDetail,
    PodInfo,
    WorkloadError,
    WorkloadGroupView,
    WorkloadSummaryView,
)
from grouper.api.ui.html import Safe, el, join, path_part
from grouper.api.workload import Described
from grouper.describe.render import render_table

NONE = "—"
# The workload's state is the worst of its gangs' (models.WorkloadSummaryView.state); waiting states show
# how long they have been in it.
WAITING_STATES = ("Grouping", "Waiting", "Degraded")
EVENTS_NOTE = ("The Events this grouper sent about the workload (newest first). Others' Events: "
               "kubectl events --for KIND/NAME -n NAMESPACE.")


def duration(seconds: float | None) -> str:
    """``45s``, ``12m``, ``5h``, ``3d`` (kubectl's age style)."""
    if seconds is None:
        return NONE
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    if s < 120 * 60:
        return f"{s // 60}m"
    if s < 48 * 3600:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def kind_ref(api_version: str, kind: str) -> str:
    """``Kind.version.group`` (just ``Kind`` for the core group): what the workload routes accept."""
    group, _, version = api_version.rpartition("/")
    return f"{kind}.{version}.{group}" if group else kind


def workload_link(namespace: str, api_version: str, kind: str, name: str) -> str:
    return "#/workload/" + "/".join(path_part(p) for p in (namespace, kind_ref(api_version, kind), name))


NUMERIC = frozenset({"GPUs", "Pods", "Waiting", "Required", "Present", "Scheduled"})


def _table(headers: Sequence[str], rows: Iterable[Safe], attrs: dict[str, object] | None = None) -> Safe:
    head = el("thead", None, el("tr", None, [
        el("th", {"scope": "col", "class": "num" if h in NUMERIC else None}, h) for h in headers]))
    return el("table", attrs, head, el("tbody", None, list(rows)))


def state_badge(state: str | None) -> Safe:
    if not state:
        return el("span", {"class": "state state-none"}, NONE)
    return el("span", {"class": f"state state-{state.lower()}", "data-state": state}, state)


def empty(text: str) -> Safe:
    return el("p", {"class": "empty"}, text)


# ------------------------------------------------------------------------------------------ workloads


def _waiting(w: WorkloadSummaryView) -> float | None:
    times = [g.secondsInState for g in w.gangs if g.state in WAITING_STATES]
    return max(times) if times else None


def workloads(items: Sequence[WorkloadSummaryView], queues: dict[tuple[str, str, str], set[str]]) -> Safe:
    """The workloads table; each row carries its namespace, kind and state for the filters (app.js)."""
    rows = []
    for w in items:
        gang_queues = {g.queue for g in w.gangs if g.queue}
        queue = ", ".join(sorted(gang_queues or queues.get((w.namespace, w.kind, w.name), set()))) or NONE
        components = ", ".join(f"{c.name}({c.replicas})" for c in w.components) or NONE
        reasons = [r.message or r.reason for g in w.gangs for r in g.reasons]
        if w.workloadGroup is not None and w.workloadGroup.message:  # why its group holds it
            reasons.insert(0, f"WorkloadGroup {w.workloadGroup.name}: {w.workloadGroup.message}")
        rows.append(el(
            "tr", {"data-namespace": w.namespace, "data-kind": w.kind, "data-state": w.state or "",
                   "class": "row"},
            el("td", None, w.namespace),
            el("td", None, w.kind),
            el("td", None, el("a", {"href": workload_link(w.namespace, w.apiVersion, w.kind, w.name)}, w.name)),
            el("td", None, state_badge(w.state)),
            el("td", None, queue),
            el("td", None, components),
            el("td", {"class": "num"}, w.gpus),
            el("td", {"class": "num"}, w.pods),
            el("td", None, ",".join(w.phases) or NONE),
            el("td", {"class": "num"}, duration(_waiting(w))),
            el("td", {"class": "reason"}, reasons[0] if reasons else ""),
        ))
    if not rows:
        return empty("No workloads: this grouper has grouped no pods in the namespaces you may see.")
    return join([
        el("p", {"class": "count"}, el("span", {"id": "shown"}, len(rows)), f" of {len(rows)} workloads"),
        _table(["Namespace", "Kind", "Name", "State", "Queue", "Components", "GPUs", "Pods", "Phase",
                "Waiting", "Scheduler says"], rows, {"id": "workloads", "class": "list"}),
    ])


# ------------------------------------------------------------------------------------------ one workload


def _gang(g: GangView) -> Safe:
    facts = [
        ("State", join([state_badge(g.state), f" for {duration(g.secondsInState)} (since {g.since})"])),
        ("Scheduled / present / required", f"{g.scheduled} / {g.present} / {g.required} pods"),
        ("Queue", g.queue or NONE),
        ("Requested GPUs", f"{g.requestedGPUs:g}"),
    ]
    if g.admittedAt:
        facts.append(("Admitted", f"{g.admittedAt} ({duration(g.timeToAdmissionSeconds)} after the first pod)"))
    if g.error:
        facts.append(("Error", g.error))
    reasons = [
        el("li", {"class": "reason"},
           el("b", None, f"{r.source} {r.reason}"),
           f" ({r.type})" if r.type else "", f" on node pool {r.nodePool}" if r.nodePool else "", ": ",
           el("q", None, r.message),
           f" — pods {', '.join(r.pods)}" if r.pods else "", f" since {r.since}" if r.since else "")
        for r in g.reasons
    ]
    return join([
        el("dl", {"class": "facts gang"}, [[el("dt", None, k), el("dd", None, v)] for k, v in facts]),
        el("h4", None, "What the scheduler said") if reasons else None,
        el("ul", {"class": "reasons"}, reasons) if reasons else None,
    ])


def decision_words(pg: PodGroupDetail) -> list[str]:
    """The decision record as sentences: which plugin, why (the owner chain), where each value came from."""
    d: DecisionRecord = pg.decision
    out = []
    top = d.topOwner
    owner = f"{top.kind} {pg.namespace}/{top.name}" if top else f"{pg.workload.kind} {pg.namespace}/{pg.workload.name}"
    if d.plugin:
        chain = " → ".join(f"{r.kind} {r.name}" for r in d.ownerChain)
        out.append(f"The {d.plugin} plugin grouped these pods because their top owner is {owner}"
                   + (f" (owner chain: {chain})." if chain else "."))
    if d.definition:
        out.append(f"The Karta definition {d.definition.name} ({d.definition.origin}) describes that kind.")
    unit = "sub-groups" if pg.requiredUnit == "subGroups" else "pods"
    need = f"{pg.required} {unit}" if pg.required is not None else "no minimum"
    out.append(f"PodGroup {pg.name} needs {need} ({'minSubGroup' if unit == 'sub-groups' else 'minMember'}); "
               f"{pg.present} {unit} present.")
    for key, source in d.provenance.items():
        out.append(f"{key} came from {source}." if not source.startswith(("none", "not set"))
                   else f"{key}: {source}.")
    out += [f"Note: {n}" for n in d.notes]
    if d.lastError:
        when = f" at {d.lastError.time}" if d.lastError.time else ""
        out.append(f"Last error{when} ({d.lastError.reason}): {d.lastError.message}")
    return out


def podgroup(pg: PodGroupDetail) -> Safe:
    spec = pg.podGroup.get("spec") or {}
    scheduled = {s.name: s for s in (pg.gang.subGroups if pg.gang else [])}
    sub_rows = [
        el("tr", {"data-subgroup": s.name},
           el("td", None, s.name), el("td", None, s.parent or NONE),
           el("td", {"class": "num"}, NONE if s.required is None else s.required),
           el("td", {"class": "num"}, s.present),
           el("td", {"class": "num"}, scheduled[s.name].scheduled if s.name in scheduled else NONE),
           el("td", None, ("yes" if scheduled[s.name].satisfied else "no") if s.name in scheduled else NONE),
           el("td", None, ", ".join(s.pods) or NONE))
        for s in pg.subGroups
    ]
    return el(
        "section", {"class": "podgroup", "data-podgroup": pg.name},
        el("h3", None, f"PodGroup {pg.name}"),
        el("dl", {"class": "facts"},
           el("dt", None, "Queue"), el("dd", None, str(spec.get("queue") or NONE)),
           el("dt", None, "Required"),
           el("dd", None, f"{NONE if pg.required is None else pg.required} {pg.requiredUnit}, {pg.present} present"),
           el("dt", None, "Stored"), el("dd", None, "yes" if pg.storedResourceVersion else "not yet")),
        _gang(pg.gang) if pg.gang else el("p", {"class": "note"}, "No gang state yet."),
        el("h4", None, "Sub-groups") if sub_rows else None,
        _table(["Sub-group", "Parent", "Required", "Present", "Scheduled", "Satisfied", "Pods"], sub_rows,
               {"class": "subgroups"}) if sub_rows else None,
        el("h4", None, "Why (the decision record)"),
        el("ul", {"class": "decision"}, [el("li", None, s) for s in decision_words(pg)]),
    )


def _pods(pods: Sequence[PodInfo]) -> Safe:
    rows = [el("tr", None, el("td", None, p.name), el("td", None, p.phase or NONE), el("td", None, p.node or NONE),
               el("td", None, p.subGroup or NONE),
               el("td", None, ", ".join(f"{k}={v}" for k, v in sorted(p.labels.items())) or NONE))
            for p in pods]
    return _table(["Pod", "Phase", "Node", "Sub-group", "Grouping labels"], rows, {"class": "pods"}) if rows \
        else empty("No pods.")


def members_text(g: WorkloadGroupView) -> str:
    """``2 of 3 members``: the workloads the group found, of those it expects."""
    n = len(g.members)
    return f"{n} of {g.expectedWorkloads} members" if g.expectedWorkloads is not None else \
        f"{n} member{'s' if n != 1 else ''}"


def workload_group(g: WorkloadGroupView, gangs: Sequence[GangView]) -> Safe:
    """A member's group: which, how complete, why it is (not) rendered, and the rendered gang's state."""
    facts = [
        ("Group state", f"{g.state}" + (f": {g.message}" if g.message else "")),
        ("Gang state", state_badge(g.gangState)),
        ("PodGroup", g.podGroup if g.rendered else f"{g.podGroup} (not written: the members' pods wait on it)"),
        ("Members", ", ".join(f"{m.kind}/{m.name}" for m in g.members) or NONE),
    ]
    conditions = [el("li", {"class": "condition", "data-condition": c.type, "data-status": c.status},
                     el("b", None, f"{c.type}={c.status}"), f" ({c.reason})" if c.reason else "",
                     ": " if c.message else "", c.message)
                  for c in g.conditions]
    return el(
        "section", {"class": "workload-group", "data-workload-group": g.name},
        el("h3", None, f"Member of WorkloadGroup {g.name} ({members_text(g)})"),
        el("dl", {"class": "facts"}, [[el("dt", None, k), el("dd", None, v)] for k, v in facts]),
        el("h4", None, "The group's reasons") if conditions else None,
        el("ul", {"class": "conditions"}, conditions) if conditions else None,
        [el("section", {"class": "podgroup", "data-podgroup": x.podGroup}, el("h4", None, f"Gang {x.podGroup}"),
            _gang(x)) for x in gangs],
    )


def workload(described: Described, podgroups: Sequence[PodGroupDetail], state: str | None,
             group: tuple[WorkloadGroupView, Sequence[GangView]] | None = None) -> Safe:
    """``group``: the WorkloadGroup it is a member of and the group's gangs (then ``podgroups`` is empty)."""
    b = described.body
    tree = render_table(described.view) if described.view is not None else None
    facts = [("Namespace", b.namespace), ("Kind", f"{b.workload.kind} ({b.workload.apiVersion})"),
             ("State", state_badge(state)), ("Status", b.status or NONE),
             ("Definition", f"{b.definition.name} ({b.definition.origin})" if b.definition else NONE),
             ("PodGroups", ", ".join(b.podGroups) or NONE)]
    if group is not None:
        facts.append(("WorkloadGroup", f"member of {group[0].name} ({members_text(group[0])})"))
    return el(
        "article", {"class": "workload", "data-workload": b.workload.name},
        el("h2", None, f"{b.workload.kind}/{b.workload.name}"),
        el("dl", {"class": "facts"}, [[el("dt", None, k), el("dd", None, v)] for k, v in facts]),
        el("h3", None, "Components (as grouper describe prints them)"),
        el("pre", {"class": "tree"}, tree) if tree else empty(b.describeError or "No Karta definition maps this "
                                                             "kind: no component tree."),
        workload_group(*group) if group is not None else None,
        [podgroup(pg) for pg in podgroups],
        el("h3", None, "Pods"), _pods(b.pods),
        el("h3", None, "Events"), el("p", {"class": "note"}, EVENTS_NOTE), _events(b.events),
    )


def _events(events: Sequence[EventView]) -> Safe:
    if not events:
        return empty("No Event sent about it by this grouper.")
    return el("table", {"class": "events"}, [
        el("thead", None, el("tr", None, [el("th", None, h) for h in ("Type", "Reason", "Message", "Count", "Last")])),
        el("tbody", None, [el("tr", {"data-reason": e.reason}, [
            el("td", None, e.type), el("td", None, e.reason), el("td", None, e.message), el("td", None, str(e.count)),
            el("td", None, e.lastTime)]) for e in events]),
    ])


# ------------------------------------------------------------------------------------------ definitions, errors


def definitions(body: DefinitionList) -> Safe:
    rows = []
    for d in body.items:
        issues = [el("li", {"class": "error"}, f"{i.field}: {i.message}" + (f" ({i.expression})" if i.expression
                                                                              else "")) for i in d.errors]
        issues += [el("li", {"class": "warning"}, f"warning: {i.field}: {i.message}") for i in d.warnings]
        gvk = "/".join(p for p in (d.gvk.group, d.gvk.version) if p) + (f" {d.gvk.kind}" if d.gvk.kind else "")
        rows.append(el(
            "tr", {"data-valid": "true" if d.valid else "false", "data-origin": d.origin.split(":", 1)[0]},
            el("td", None, d.name), el("td", None, d.origin), el("td", None, gvk.strip() or NONE),
            el("td", None, "valid" if d.valid else "invalid"),
            el("td", None, "active" if d.active else (d.notUsedReason or "not used")),
            el("td", None, el("ul", {"class": "issues"}, issues) if issues else "",
               el("p", None, f"quarantined: {d.quarantine}") if d.quarantine else None)))
    if not rows:
        return empty("No Karta definitions are loaded.")
    return _table(["Name", "Origin", "Kind", "Validity", "Used", "Errors and warnings"], rows,
                  {"id": "definitions", "class": "list"})


def errors(items: Sequence[WorkloadError]) -> Safe:
    rows = [el(
        "tr", {"data-namespace": e.namespace, "data-kind": e.workload.kind},
        el("td", None, e.namespace), el("td", None, e.workload.kind),
        el("td", None, e.workload.name), el("td", None, e.reason), el("td", {"class": "message"}, e.message),
        el("td", None, e.time or NONE),
        el("td", None, f"{e.podCount}: {', '.join(e.pods)}" + (" …" if e.podCount > len(e.pods) else "")))
        for e in items]
    if not rows:
        return empty("No grouping errors in the namespaces you may see.")
    return _table(["Namespace", "Kind", "Workload", "Reason", "Message", "Seen", "Pods"], rows,
                  {"id": "errors", "class": "list"})


__all__ = ["decision_words", "definitions", "duration", "errors", "podgroup", "workload", "workload_group", "workloads"]
