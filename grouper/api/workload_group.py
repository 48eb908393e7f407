"""A member workload's WorkloadGroup as the API, the web view and the CLI show it (docs/workload-groups.md).

A workload in a WorkloadGroup has no gang of its own: the group's rendered PodGroup (owned by the
WorkloadGroup) is its gang, and until the group is complete and valid its pods wait on the gate (they name
the rendered PodGroup, which does not exist). These pure functions read the membership annotation of the
workload (its top owner) and the WorkloadGroup object (its ``status``, written by the controller) and say
so in one small shape (:class:`grouper.api.models.WorkloadGroupView`); the caller finds the objects (the
caches for the API, the API server for the CLI). No I/O.

The annotation is honoured only while the WorkloadGroup exists (the controller's rule): without the
object the workload is grouped alone, and nothing here names a group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from grouper.api.models import GangView, WorkloadGroupCondition, WorkloadGroupView, WorkloadRef
from grouper.core.gang_state import worst
from grouper.core.workload_group import rendered_name
from grouper.model import objects as o
from grouper.model import workload_group as wg
from grouper.model.objects import Obj

# InputsResolved's reasons (grouper.core.workload_group.GroupRender.status) -> the group's state
_STATES = {"AllInputsResolved": "Rendered", "WaitingForInputs": "Pending", "InvalidInputs": "Invalid"}


def group_name(workload: Obj | None) -> str | None:
    """The WorkloadGroup a workload (its top owner) names, None without the annotation or with a value that
    cannot name one (the workload is then grouped alone; the plan's notes say why)."""
    if workload is None:
        return None
    try:
        return wg.membership(workload)
    except wg.InvalidWorkloadGroup:
        return None


def _conditions(status: dict[str, Any]) -> list[WorkloadGroupCondition]:
    out = []
    for c in status.get("conditions") or ():
        if isinstance(c, dict) and c.get("type"):
            out.append(WorkloadGroupCondition(type=str(c["type"]), status=str(c.get("status") or "Unknown"),
                                              reason=str(c.get("reason") or ""), message=str(c.get("message") or "")))
    return out


def group_view(group: Obj, gangs: Iterable[GangView] = ()) -> WorkloadGroupView:
    """What a member shows of its group: the stored status (conditions, observed members, the rendered
    PodGroup) and the rendered gang's states ``gangs`` (the PodGroups the WorkloadGroup owns, when known)."""
    ns, name = o.namespace(group), o.name(group)
    raw_status, raw_spec = group.get("status"), group.get("spec")
    status: dict[str, Any] = raw_status if isinstance(raw_status, dict) else {}
    spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
    conditions = _conditions(status)
    by_type = {c.type: c for c in conditions}
    resolved = by_type.get("InputsResolved")
    state = _STATES.get(resolved.reason, "Unknown") if resolved is not None else "Unknown"
    members = [WorkloadRef(apiVersion=str(m.get("apiVersion") or ""), kind=str(m.get("kind") or ""),
                           name=str(m.get("name") or ""))
               for m in status.get("observedMembers") or () if isinstance(m, dict)]
    ref = status.get("renderedPodGroupRef")
    done = by_type.get("Rendered") is not None and by_type["Rendered"].status == "True"
    rendered = str(ref.get("name")) if done and isinstance(ref, dict) and ref.get("name") else None
    expected = spec.get("expectedWorkloads")
    gang_list = list(gangs)
    if state == "Invalid":
        gang_state: str | None = "Error"
    elif rendered and gang_list:
        s = worst(g.state for g in gang_list)
        gang_state = s.value if s is not None else None
    else:  # not rendered yet (members or their pods still arriving), or no gang state derived yet
        gang_state = "Grouping"
    message = ""
    if state != "Rendered":
        message = resolved.message if resolved is not None else "the controller has not written the group's status yet"
    return WorkloadGroupView(
        name=name,
        expectedWorkloads=expected if isinstance(expected, int) and not isinstance(expected, bool) else None,
        members=members,
        state=state,  # type: ignore[arg-type]
        gangState=gang_state,  # type: ignore[arg-type]
        podGroup=rendered or rendered_name(ns, name),
        rendered=rendered is not None,
        message=message,
        conditions=conditions,
    )


def member_group(workload: Obj | None, namespace: str, read: Callable[[str, str], Obj | None],
                 gangs: Callable[[Obj], Iterable[GangView]] = lambda _: ()
                 ) -> tuple[WorkloadGroupView, list[GangView]] | None:
    """The group of a member workload and the rendered gang's states: ``read(namespace, name)`` returns the
    WorkloadGroup (None when it does not exist); ``gangs(group)`` the gang states of the PodGroups it owns.
    None when the workload is in no existing group."""
    name = group_name(workload)
    if name is None:
        return None
    group = read(namespace, name)
    if group is None or o.meta(group).get("deletionTimestamp"):
        return None
    found = list(gangs(group))
    return group_view(group, found), found


def summary(g: WorkloadGroupView) -> str:
    """One sentence: ``member of WorkloadGroup X (2 of 3 workloads); ...``."""
    of = f"{len(g.members)} of {g.expectedWorkloads}" if g.expectedWorkloads is not None else f"{len(g.members)}"
    head = f"member of WorkloadGroup {g.name} ({of} workloads)"
    if g.rendered:
        return f"{head}: its gang is the group's PodGroup {g.podGroup}"
    why = f": {g.message}" if g.message else ""
    if g.state == "Invalid":
        return (f"{head}: the group is invalid{why}; its pods wait on the gate (they name the group's PodGroup "
                f"{g.podGroup}, which is not written while the group is invalid)")
    return (f"{head}: the group is not rendered yet{why}; its pods wait on the gate (they name the group's "
            f"PodGroup {g.podGroup}, which is not written until every workload is there)")


__all__ = ["group_name", "group_view", "member_group", "summary"]
