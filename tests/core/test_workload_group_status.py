"""The WorkloadGroup status the controller writes (grouper/core/workload_group_status.py): transition
times kept while a condition stands, and no write when only they would change."""

from __future__ import annotations

from grouper.core.workload_group_status import active_condition, same_status, with_times


def status(**conds: str) -> dict:
    return {"observedMembers": [], "conditions": [{"type": t, "status": s, "reason": "r", "message": "m"}
                                                  for t, s in conds.items()]}


def test_times_are_kept_while_a_condition_stands_and_set_when_it_changes() -> None:
    stored = with_times(status(Rendered="False", Active="False"), None, "2026-01-01T00:00:00Z")
    assert [c["lastTransitionTime"] for c in stored["conditions"]] == ["2026-01-01T00:00:00Z"] * 2
    later = with_times(status(Rendered="True", Active="False"), stored, "2026-01-02T00:00:00Z")
    assert {c["type"]: c["lastTransitionTime"] for c in later["conditions"]} == {
        "Rendered": "2026-01-02T00:00:00Z", "Active": "2026-01-01T00:00:00Z"}


def test_a_status_differing_only_in_transition_times_is_the_same() -> None:
    stored = with_times(status(Rendered="True"), None, "2026-01-01T00:00:00Z")
    assert same_status(status(Rendered="True"), stored)
    assert not same_status(status(Rendered="False"), stored)
    assert not same_status(status(Rendered="True"), None)
    changed = status(Rendered="True")
    changed["observedMembers"] = [{"name": "a"}]
    assert not same_status(changed, stored)


def test_active_needs_the_stored_podgroup_and_every_pod_placed() -> None:
    assert active_condition(False, False, 0)["status"] == "False"
    assert active_condition(True, False, 0)["reason"] == "PodGroupNotStored"
    assert active_condition(True, True, 3)["reason"] == "PlacingPods" and "3" in active_condition(True, True, 3)["message"]
    assert active_condition(True, True, 0) == {"type": "Active", "status": "True", "reason": "PodGroupActive",
                                               "message": active_condition(True, True, 0)["message"]}


def test_the_status_patch_nulls_what_the_status_no_longer_has() -> None:
    from grouper.core.workload_group_status import status_patch

    stored = {"renderedPodGroupRef": {"name": "pg"}, "conditions": []}
    patch = status_patch({"conditions": []}, stored, "2026-12-05T00:00:00Z")
    assert patch == {"conditions": [], "renderedPodGroupRef": None}, "a merge patch keeps what it does not name"
    assert status_patch({"conditions": []}, None, "2026-12-05T00:00:00Z") == {"conditions": []}
