"""Gangs that can never be satisfied: ``core.satisfiable.unsatisfiable_reasons`` over a PodGroup and its pods."""

from __future__ import annotations

from grouper.core.satisfiable import MAX_GANG_PODS, unsatisfiable_reasons
from grouper.model.podgroup import OwnerRef, PodGroupMetadata, SubGroup


def _pg(min_member: int | None = None, subs: list[SubGroup] | None = None) -> PodGroupMetadata:
    md = PodGroupMetadata(name="pg-x", namespace="ns", owner=OwnerRef("v1", "Pod", "x", "u"))
    md.min_member = min_member
    md.sub_groups = subs or []
    return md


def test_a_satisfiable_gang_has_no_reasons() -> None:
    md = _pg(subs=[SubGroup("coordinator", min_member=1), SubGroup("worker", min_member=3)])
    assert unsatisfiable_reasons(md, {"coordinator": ["c"], "worker": ["w0", "w1"]}) == []  # w2 not created yet
    assert unsatisfiable_reasons(_pg(MAX_GANG_PODS), {None: ["p"]}) == []


def test_minimums_beyond_the_bound() -> None:
    (top,) = unsatisfiable_reasons(_pg(61_200_000), {None: ["p"]})
    assert "minMember 61200000 is above 100,000 pods" in top
    md = _pg(subs=[SubGroup("worker", min_member=1_000_000)])
    (sub,) = unsatisfiable_reasons(md, {"worker": ["w0"]})
    assert "sub-group worker needs 1000000 pods (minMember), above 100,000" in sub


def test_a_sub_group_no_pod_falls_into() -> None:
    md = _pg(subs=[SubGroup("coordinator", min_member=1), SubGroup("worker", min_member=3)])
    (reason,) = unsatisfiable_reasons(md, {"coordinator": ["c", "w0", "w1", "w2"]})
    assert "sub-group worker needs 3 pods (minMember) but none of the PodGroup's 4 pods is in it (coordinator: 4)" in reason


def test_pods_in_no_sub_group() -> None:
    md = _pg(subs=[SubGroup("worker", min_member=1)])
    (reason,) = unsatisfiable_reasons(md, {"worker": ["w0"], None: ["w1"]})
    assert "pod w1 is in no sub-group" in reason and "it counts toward no sub-group's minimum" in reason


def test_parents_are_judged_by_their_children() -> None:
    md = _pg(subs=[SubGroup("rack", min_sub_group=1), SubGroup("w", parent="rack", min_member=1)])
    assert unsatisfiable_reasons(md, {"w": ["w0"]}) == []


def test_an_incomplete_membership_proves_no_empty_sub_group() -> None:
    """One pod explained before the grouper annotated its siblings: the others are simply not known."""
    md = _pg(subs=[SubGroup("coordinator", min_member=1), SubGroup("worker", min_member=3)])
    assert unsatisfiable_reasons(md, {"worker": ["w0"]}, complete=False) == []
    assert unsatisfiable_reasons(md, {"worker": ["w0"]}) != []


def test_a_podgroup_still_filling_proves_no_empty_sub_group() -> None:
    """The controller's view (``plan_reasons(filling=True)``): while a workload's pods are still being created,
    an empty sub-group counts only once the PodGroup has as many pods as its leaf minimums add up to."""
    from grouper.core.satisfiable import plan_reasons
    from grouper.core.workload_plan import PlannedGroup

    def planned(pods: list[str]) -> PlannedGroup:
        md = _pg(subs=[SubGroup("coordinator", min_member=1), SubGroup("worker", min_member=3)])
        md.sub_groups[0].pods = list(pods)
        return PlannedGroup(md, pods)

    assert plan_reasons(planned(["c0", "c1"]), filling=True) == [], "2 of the 4 pods the minimums need"
    assert plan_reasons(planned(["c0", "c1"])) != [], "grouper plan judges the plan as complete"
    (reason,) = plan_reasons(planned(["c0", "c1", "c2", "c3"]), filling=True)
    assert "sub-group worker needs 3 pods" in reason
