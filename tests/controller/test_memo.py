"""The decision memo's pure parts: what counts as a change of a pod, and the merge rule for a new view."""

from __future__ import annotations

import copy
from typing import Any

from grouper.controller.memo import DecisionMemo, Group, Member, WorkloadMemo, decision_signature
from grouper.controller.workloads import WorkloadKey
from grouper.model.podgroup import POD_GROUP_ANNOTATION, SUBGROUP_LABEL, OwnerRef, PodGroupMetadata


def pod(**labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": dict(labels), "resourceVersion": "1",
                     "creationTimestamp": "2026-12-01T10:00:00Z"},
        "spec": {"schedulerName": "kai-scheduler"},
        "status": {"phase": "Pending"},
    }


def test_the_grouper_own_marks_and_the_resource_version_are_not_a_change() -> None:
    before = pod(app="a")
    before["metadata"].pop("labels")  # a pod without labels or annotations gains both maps when marked
    after = copy.deepcopy(before)
    after["metadata"]["annotations"] = {POD_GROUP_ANNOTATION: "pg-x"}
    after["metadata"]["labels"] = {SUBGROUP_LABEL: "workers"}
    after["metadata"]["resourceVersion"] = "2"
    assert decision_signature(before) == decision_signature(after)


def test_what_a_decision_reads_of_the_pod_is_a_change() -> None:
    base = decision_signature(pod(app="a"))
    assert decision_signature(pod(app="b")) != base
    bound = pod(app="a")
    bound["spec"]["nodeName"] = "n1"
    assert decision_signature(bound) != base
    running = pod(app="a")
    running["status"]["phase"] = "Running"
    assert decision_signature(running) != base
    deleting = pod(app="a")
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T10:05:00Z"
    assert decision_signature(deleting) != base


def metadata(min_member: int) -> PodGroupMetadata:
    return PodGroupMetadata("pg", "ns", OwnerRef("batch/v1", "Job", "j", "u"), min_member=min_member)


def test_a_newer_view_wins_and_a_different_spec_is_noted() -> None:
    g = Group(metadata(2), ("2026-12-01T10:00:00Z", "a"))
    g.offer(metadata(2), ("2026-12-01T10:00:00Z", "b"))
    assert (g.newest[1], g.disagree) == ("b", False)
    g.offer(metadata(3), ("2026-12-01T09:00:00Z", "old"))  # older pod, other view: noted, not used
    assert (g.newest[1], g.metadata.min_member, g.disagree) == ("b", 2, True)
    g.offer(metadata(4), ("2026-12-01T11:00:00Z", "c"))
    assert (g.newest[1], g.metadata.min_member) == ("c", 4)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _wl(name: str) -> WorkloadKey:
    return WorkloadKey("ns", "jobset.x-k8s.io", "JobSet", name)


def test_a_memo_idle_for_the_idle_time_is_dropped_and_one_in_use_is_kept() -> None:
    clock = _Clock()
    memos = DecisionMemo(idle_seconds=120.0, clock=clock)
    a, b = WorkloadMemo("jobset", None), WorkloadMemo("jobset", None)
    memos.put(_wl("a"), a)
    clock.now += 60
    memos.put(_wl("b"), b)
    clock.now += 59
    assert memos.get(_wl("a")) is a  # used: its idle time starts again
    clock.now += 61  # b idle 120 s, a 61 s
    assert memos.expire() == 1
    assert memos.get(_wl("b")) is None and memos.get(_wl("a")) is a and len(memos) == 1
    clock.now += 121
    assert memos.get(_wl("c")) is None  # a miss drops nothing by itself
    memos.put(_wl("c"), WorkloadMemo("jobset", None))  # any use drops what is idle
    assert memos.get(_wl("a")) is None and len(memos) == 1


def test_an_invalidated_memo_leaves_no_entry_behind() -> None:
    clock = _Clock()
    memos = DecisionMemo(idle_seconds=10.0, clock=clock)
    for i in range(1000):
        memos.put(_wl(f"w{i}"), WorkloadMemo("jobset", None))
        memos.invalidate(_wl(f"w{i}"))
    assert len(memos) == 0 and not memos._memos
    memos.put(_wl("kept"), WorkloadMemo("jobset", None))
    clock.now += 11
    assert memos.expire() == 1 and len(memos) == 0


def test_a_pod_event_marks_the_pod_for_the_next_pass_only_when_a_memo_is_kept() -> None:
    memos = DecisionMemo()
    memos.touch(_wl("a"), "p0")  # nothing kept: the next pass decides every pod anyway
    memo = WorkloadMemo("jobset", None)
    memos.put(_wl("a"), memo)
    memos.touch(_wl("a"), "p1")
    memos.touch(_wl("b"), "p2")
    assert memo.dirty == {"p1"} and len(memos) == 1


def test_placing_a_pod_keeps_the_member_sets_of_its_podgroups() -> None:
    memo = WorkloadMemo("jobset", None)
    memo.groups["pg-a"] = Group(metadata(1), ("t", "x"))
    memo.groups["pg-b"] = Group(metadata(1), ("t", "y"))
    memo.place("x", Member(1, "pg-a", None))
    memo.place("y", Member(2, "pg-a", None))
    memo.place("y", Member(3, "pg-b", None))  # decided again into another PodGroup
    memo.place("z", Member(4, None, None))  # not grouped
    assert (memo.groups["pg-a"].members, memo.groups["pg-b"].members) == ({"x"}, {"y"})
    assert memo.unplace("x") == Member(1, "pg-a", None) and memo.unplace("gone") is None
    assert memo.groups["pg-a"].members == set() and set(memo.members) == {"y", "z"}


def test_a_podgroup_made_by_the_kept_decisions_is_told_apart_from_any_other() -> None:
    memos = DecisionMemo()
    memo = WorkloadMemo("jobset", OwnerRef("jobset.x-k8s.io/v1alpha2", "JobSet", "a", "uid-a"))
    memo.groups["pg-a-uid-a"] = Group(metadata(1), ("t", "x"))
    memos.put(_wl("a"), memo)
    assert memos.made(_wl("a"), "pg-a-uid-a", {"uid-a"})
    assert not memos.made(_wl("a"), "pg-a-uid-a-flat", {"uid-a"}), "not one it decided"
    assert not memos.made(_wl("a"), "pg-a-uid-a", {"uid-other"}), "owned by another object"
    assert not memos.made(_wl("b"), "pg-a-uid-a", {"uid-a"}), "no memo"
