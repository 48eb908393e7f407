"""Gangs that can never be satisfied, found in a computed plan (warnings, never errors).

A PodGroup is accepted by the API server however big its minimum, and the scheduler then waits for
it forever: a sub-group minMember of 1,000,000, a ``worker`` sub-group that needs 3 pods while its
selector lets every pod fall into ``coordinator`` (0 of 3), pods in no sub-group of a PodGroup that has
sub-groups (they count toward no minimum). ``unsatisfiable_reasons`` says why, in sentences, from the
PodGroup and the pods decided into it. Pure: ``grouper plan`` and ``grouper explain`` print its reasons,
the controller can emit them as an Event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from grouper.core.workload_plan import PlannedGroup
from grouper.model.errors import shown
from grouper.model.podgroup import MAX_GANG_PODS, PodGroupMetadata


def unsatisfiable_reasons(
    md: PodGroupMetadata, members: Mapping[str | None, Sequence[str]], *, complete: bool = True
) -> list[str]:
    """Why the PodGroup ``md`` can never be scheduled as a whole; empty when nothing is known to be wrong.

    ``members``: sub-group name (None: in no sub-group) -> the names of the pods decided into it;
    ``complete``: whether that is every pod of the workload (a plan, the controller's pass) — if not (one
    pod explained before the grouper annotated its siblings), an empty sub-group proves nothing.
    Rules: a minimum above ``MAX_GANG_PODS``; a leaf sub-group that needs pods while none of the
    PodGroup's pods falls into it (its selector matches none, or another component's takes them all);
    pods in no sub-group of a PodGroup with sub-groups. A sub-group that has some of its pods but not
    all is not reported: the rest may not be created yet.
    """
    where = f"PodGroup {md.namespace}/{md.name}"
    out: list[str] = []
    if md.min_member is not None and md.min_member > MAX_GANG_PODS:
        out.append(f"{where}: minMember {shown(md.min_member)} is above {MAX_GANG_PODS:,} pods, more than any "
                   "cluster can run at once (Kubernetes' envelope is 150,000 pods): the gang can never be scheduled")
    total = sum(len(p) for p in members.values())
    parents = {sg.parent for sg in md.sub_groups if sg.parent}
    for sg in md.sub_groups:
        if sg.name in parents or not sg.min_member:
            continue
        have = len(members.get(sg.name, ()))
        if sg.min_member > MAX_GANG_PODS:
            out.append(f"{where}: sub-group {sg.name} needs {shown(sg.min_member)} pods (minMember), above "
                       f"{MAX_GANG_PODS:,}: the gang can never be scheduled")
        elif have == 0 and total > 0 and complete:
            elsewhere = ", ".join(f"{n or '(no sub-group)'}: {len(p)}" for n, p in sorted(
                members.items(), key=lambda kv: kv[0] or "") if p)
            out.append(f"{where}: sub-group {sg.name} needs {sg.min_member} pod{'s' if sg.min_member != 1 else ''} "
                       f"(minMember) but none of the PodGroup's {total} pods is in it ({elsewhere}): its component's "
                       "selector matches none of them, or another component's takes them")
    loose = members.get(None, ())
    if md.sub_groups and loose:
        names = ", ".join(sorted(loose)[:5]) + (f" and {len(loose) - 5} more" if len(loose) > 5 else "")
        out.append(f"{where}: pod{'s' if len(loose) != 1 else ''} {names} {'are' if len(loose) != 1 else 'is'} in no "
                   "sub-group (no component matches, or the pod was relabelled out of its component): "
                   f"{'they count' if len(loose) != 1 else 'it counts'} toward no sub-group's minimum")
    return out


def plan_reasons(pod_group: PlannedGroup, *, filling: bool = False) -> list[str]:
    """``unsatisfiable_reasons`` of a planned PodGroup (``grouper plan``, the controller's desired state).
    ``filling``: its workload's pods may still be being created (the controller's view), so an empty sub-group
    counts only once the PodGroup has as many pods as its leaf minimums add up to."""
    md = pod_group.metadata
    parents = {sg.parent for sg in md.sub_groups if sg.parent}
    need = sum(sg.min_member or 0 for sg in md.sub_groups if sg.name not in parents) if filling else 0
    return unsatisfiable_reasons(md, pod_group.members(), complete=len(pod_group.pods) >= need)
