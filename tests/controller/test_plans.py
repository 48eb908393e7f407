"""The plan cache and the pure parts of the one planning path: what counts as a change of a pod, which
kept decision may be used again, the merge rule (newest pod's view wins), idle expiry."""

from __future__ import annotations

import copy
from typing import Any

from devtools.clock import ManualClock
from grouper.controller.plans import PlanCache
from grouper.controller.workloads import WorkloadKey
from grouper.core.decision import Decision
from grouper.core.workload_plan import (
    Kept,
    assemble,
    decision_signature,
    merge,
    plan_workload,
    reusable,
    to_decide,
    update,
)
from grouper.model.podgroup import POD_GROUP_ANNOTATION, SUBGROUP_LABEL, OwnerRef, PodGroupMetadata, SubGroup

OWNER = OwnerRef("batch/v1", "Job", "j", "u")


def pod(name: str = "p", *, created: str = "2026-12-01T10:00:00Z", rv: str = "1", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": dict(labels),
                     "resourceVersion": rv, "creationTimestamp": created},
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


def metadata(min_member: int, name: str = "pg") -> PodGroupMetadata:
    return PodGroupMetadata(name, "ns", OWNER, min_member=min_member,
                            sub_groups=[SubGroup("workers", min_member=min_member)])


def kept_of(p: dict[str, Any], view: PodGroupMetadata | None, sub: str | None = None) -> Kept:
    return Kept(p["metadata"]["uid"], p["metadata"]["resourceVersion"], decision_signature(p),
                p["metadata"]["creationTimestamp"], view, sub, "batch", OWNER)


def test_a_kept_decision_is_used_only_for_the_same_unchanged_pod() -> None:
    p = pod(app="a")
    k = kept_of(p, metadata(2))
    assert reusable(k, p) is k
    marked = copy.deepcopy(p)
    marked["metadata"]["annotations"] = {POD_GROUP_ANNOTATION: "pg"}
    marked["metadata"]["resourceVersion"] = "2"
    again = reusable(k, marked)
    assert again is not None and again.version == "2" and again.view is k.view  # our own patch: no change
    relabelled = copy.deepcopy(p)
    relabelled["metadata"]["labels"]["app"] = "b"
    relabelled["metadata"]["resourceVersion"] = "3"
    assert reusable(k, relabelled) is None
    replaced = pod(app="a")
    replaced["metadata"]["uid"] = "uid-other"  # same name, same version string, another pod
    assert reusable(k, replaced) is None
    assert reusable(None, p) is None


def test_the_newest_pod_view_wins_and_a_different_spec_is_noted() -> None:
    a, b, old = pod("a"), pod("b"), pod("old", created="2026-12-01T09:00:00Z")
    two, three = metadata(2), metadata(3)
    groups, placement = merge("ns", [("a", kept_of(a, two, "workers")), ("b", kept_of(b, two, "workers")),
                                     ("old", kept_of(old, three, "workers"))])
    (g,) = groups
    assert g.newest == "b" and g.metadata.min_member == 2  # same time: the name decides
    assert g.notes == ["pods disagree on the spec; used the view of the newest pod ns/b"]
    assert g.pods == ["a", "b", "old"] and g.metadata.sub_groups[0].pods == ["a", "b", "old"]
    assert placement == {"a": ("pg", "workers"), "b": ("pg", "workers"), "old": ("pg", "workers")}
    newer = pod("c", created="2026-12-01T11:00:00Z")
    (g,) = merge("ns", [("a", kept_of(a, two)), ("c", kept_of(newer, metadata(4)))])[0]
    assert g.newest == "c" and g.metadata.min_member == 4


def decide_as(views: dict[str, PodGroupMetadata]) -> Any:
    calls: list[str] = []

    def decide(p: dict[str, Any]) -> Decision:
        name = p["metadata"]["name"]
        calls.append(name)
        md = copy.deepcopy(views[name])
        md.sub_groups[0].pods.append(name)
        return Decision("ns", name, p["metadata"]["uid"], "grouped", "Grouped", pod_group=md,
                        sub_group="workers", plugin="batch", top_owner=OWNER)

    return decide, calls


def test_a_plan_with_kept_decisions_equals_a_fresh_plan_and_decides_only_what_changed() -> None:
    pods = [pod(f"p{i}") for i in range(5)]
    decide, calls = decide_as({f"p{i}": metadata(5) for i in range(6)})
    first = plan_workload(pods, decide)
    assert calls == [f"p{i}" for i in range(5)] and len(first.kept) == 5
    views = {id(k.view) for k in first.kept.values()}
    assert len(views) == 1, "equal views are one object"
    calls.clear()
    pods.append(pod("p5", created="2026-12-01T10:00:01Z"))
    second = plan_workload(pods, decide, first.kept)
    assert calls == ["p5"]
    fresh = plan_workload(pods, decide_as({f"p{i}": metadata(5) for i in range(6)})[0])
    assert [(g.metadata, g.pods, g.notes, g.newest) for g in second.groups] == \
        [(g.metadata, g.pods, g.notes, g.newest) for g in fresh.groups]
    assert second.placement == fresh.placement and second.plugin == fresh.plugin == "batch"


def _same(a: Any, b: Any) -> None:
    assert [(g.metadata, g.pods, g.notes, g.newest) for g in a.groups] == \
        [(g.metadata, g.pods, g.notes, g.newest) for g in b.groups]
    assert (a.placement, a.failed, a.plugin, a.workload_ref, sorted(a.pods), a.kept) == \
        (b.placement, b.failed, b.plugin, b.workload_ref, sorted(b.pods), b.kept)


def test_a_plan_updated_with_the_pods_that_changed_equals_the_plan_of_every_pod() -> None:
    """``update``: pods join (one newer than all: its view wins, the same view), leave, change their view
    (the PodGroup then merged again: a note) or move to another PodGroup — each step equal to assembling
    every pod afresh."""
    views = {f"p{i}": metadata(3) for i in range(9)}
    views["p7"] = metadata(2, "pg-other")
    pods = {f"p{i}": pod(f"p{i}") for i in range(4)}
    last = plan_workload(pods.values(), decide_as(views)[0])
    steps: list[tuple[dict[str, dict[str, Any]], set[str]]] = [
        ({"p4": pod("p4", created="2026-12-01T11:00:00Z"), "p5": pod("p5")}, set()),  # join; p4 newest
        ({}, {"p1"}),  # leaves
        ({"p2": pod("p2", rv="2", app="x")}, set()),  # decided again: a view that disagrees (note)
        ({"p7": pod("p7"), "p3": pod("p3", rv="2", app="y")}, {"p4"}),  # another PodGroup; the newest leaves
        ({"p8": pod("p8")}, set()),  # joins a PodGroup with a note: merged again
    ]
    for i, (changed, gone) in enumerate(steps):
        if "p2" in changed:
            views["p2"] = metadata(4)
        if "p3" in changed:
            views["p3"] = metadata(2, "pg-other")
        pods.update(changed)
        for name in gone:
            pods.pop(name)
        decide, calls = decide_as(views)
        fresh, held = to_decide(changed.values(), last.kept)
        got = update(last, changed.values(), gone, held, [(p, decide(p)) for p in fresh])
        assert sorted(calls) == sorted(p["metadata"]["name"] for p in fresh), "only the pods looked at"
        want = plan_workload(pods.values(), decide_as(views)[0])
        _same(got, want)
        assert got.looked_at == set(changed) | gone, i
        last = got


def test_a_failed_decision_is_never_kept_and_a_plan_that_read_other_pods_keeps_nothing() -> None:
    p, q = pod("p"), pod("q")
    failed = Decision("ns", "q", "uid-q", "error", "OwnerNotFound", "owner gone")
    decide, _ = decide_as({"p": metadata(1)})
    ok = decide(p)
    plan = assemble("ns", [p, q], {}, [(p, ok), (q, failed)])
    assert set(plan.kept) == {"p"} and plan.failed == {"q"} and plan.place("q") == "failed"
    assert plan.live == 2
    assert assemble("ns", [p], {}, [(p, ok)], keep_decisions=False).kept == {}


def _wl(name: str) -> WorkloadKey:
    return WorkloadKey("ns", "jobset.x-k8s.io", "JobSet", name)


def _some() -> dict[str, Kept]:
    return {"p": kept_of(pod(), metadata(1, "pg-a-uid-a"))}


def test_kept_decisions_idle_for_the_idle_time_are_dropped_and_those_in_use_are_kept() -> None:
    clock = ManualClock()
    plans = PlanCache(idle_seconds=120.0, clock=clock)
    a, b = _some(), _some()
    plans.put(_wl("a"), a)
    clock.now += 60
    plans.put(_wl("b"), b)
    clock.now += 59
    plans.put(_wl("a"), a)  # used again: its idle time starts again
    clock.now += 61  # b idle 120 s, a 61 s
    assert plans.expire() == 1
    assert plans.get(_wl("b")) is None and plans.get(_wl("a")) is a and len(plans) == 1
    clock.now += 121
    assert plans.get(_wl("c")) is None  # a miss drops nothing by itself
    plans.put(_wl("c"), _some())  # any use drops what is idle
    assert plans.get(_wl("a")) is None and len(plans) == 1


def test_invalidated_or_empty_entries_leave_nothing_behind() -> None:
    clock = ManualClock()
    plans = PlanCache(idle_seconds=10.0, clock=clock)
    for i in range(1000):
        plans.put(_wl(f"w{i}"), _some())
        plans.invalidate(_wl(f"w{i}"))
    plans.put(_wl("empty"), {})
    assert len(plans) == 0
    plans.put(_wl("kept"), _some())
    clock.now += 11
    assert plans.expire() == 1 and len(plans) == 0


def test_a_podgroup_made_by_the_kept_decisions_is_told_apart_from_any_other() -> None:
    plans = PlanCache()
    k = Kept("u", "1", 0, "t", metadata(1, "pg-a-uid-a"), None, "jobset",
             OwnerRef("jobset.x-k8s.io/v1alpha2", "JobSet", "a", "uid-a"))
    plans.put(_wl("a"), {"x": k})
    assert plans.made(_wl("a"), "pg-a-uid-a", {"uid-a"})
    assert not plans.made(_wl("a"), "pg-a-uid-a-flat", {"uid-a"}), "not one it decided"
    assert not plans.made(_wl("a"), "pg-a-uid-a", {"uid-other"}), "owned by another object"
    assert not plans.made(_wl("b"), "pg-a-uid-a", {"uid-a"}), "nothing kept"


def test_the_last_plan_carried_out_is_taken_once_and_goes_with_the_decisions() -> None:
    cache, wl = PlanCache(settle_min_pods=1), _wl("a")
    decide, _ = decide_as({"p": metadata(1)})
    plan = plan_workload([pod("p")], decide)
    cache.settle(wl, plan, frozenset())  # no entry: nothing to start from
    assert cache.take_last(wl) is None
    cache.put(wl, plan.kept)
    cache.settle(wl, plan, frozenset({"done"}))
    last = cache.take_last(wl)
    assert last is not None and last[1] == {"done"} and last[0].groups == plan.groups and last[0].decided == []
    assert cache.take_last(wl) is None, "taken: a pass cut short leaves the next to plan every pod"
    cache.settle(wl, plan, frozenset())
    cache.unsettle(wl)  # a PodGroup changed by someone else, a resync's check
    assert cache.take_last(wl) is None and cache.get(wl) is plan.kept
    cache.settle(wl, plan, frozenset())
    cache.put(wl, dict(plan.kept))  # a new plan's decisions: the settled plan was not theirs
    cache.settle(wl, plan, frozenset())
    assert cache.take_last(wl) is None
    small = PlanCache(settle_min_pods=2)  # a workload too small to be worth keeping its plan
    small.put(wl, plan.kept)
    small.settle(wl, plan, frozenset())
    assert small.take_last(wl) is None


def _members_by_walking(g: Any) -> dict[str | None, list[str]]:
    """``PlannedGroup.members`` as first written: every sub-group's pods, then every pod looked for."""
    out: dict[str | None, list[str]] = {sg.name: list(sg.pods) for sg in g.metadata.sub_groups if sg.pods}
    placed = {p for sg in g.metadata.sub_groups for p in sg.pods}
    loose = [p for p in g.pods if p not in placed]
    if loose:
        out[None] = loose
    return out


def test_the_members_of_a_merged_podgroup_are_those_of_walking_every_pod() -> None:
    """``members`` counts instead of walking the pods (a pass asks it of each PodGroup that gained pods): the
    same answer for pods in sub-groups, in a sub-group the PodGroup does not have, in none, and with none."""
    subs = [SubGroup("leader", min_member=1), SubGroup("workers", min_member=2), SubGroup("spare")]
    view = PodGroupMetadata("pg", "ns", OWNER, min_member=None, min_sub_group=2, sub_groups=subs)
    plain = PodGroupMetadata("pg-plain", "ns", OWNER, min_member=3)
    cases: list[list[tuple[str, PodGroupMetadata, str | None]]] = [
        [("a", view, "leader"), ("b", view, "workers"), ("c", view, "workers")],  # all placed
        [("a", view, "leader"), ("b", view, None), ("c", view, "workers"), ("d", view, "gone")],  # two loose
        [("a", view, None), ("b", view, None)],  # sub-groups, every pod loose
        [("a", plain, None), ("b", plain, None), ("c", plain, None)],  # no sub-groups
    ]
    for entries in cases:
        kept = [(n, kept_of(pod(n), v, sub)) for n, v, sub in entries]
        groups, _ = merge("ns", kept)
        for g in groups:
            assert {k: list(v) for k, v in g.members().items()} == _members_by_walking(g), entries
    plan = plan_workload([pod(f"p{i}") for i in range(4)], decide_as({f"p{i}": metadata(4) for i in range(4)})[0])
    assert {k: list(v) for k, v in plan.groups[0].members().items()} == {"workers": ["p0", "p1", "p2", "p3"]}


def test_pods_joining_some_sub_groups_leave_the_others_as_the_last_plan_made_them() -> None:
    """``update`` over a PodGroup with a sub-group per replica (a JobSet's): pods joining two of them give the
    plan of every pod, and each sub-group no pod joined is the last plan's very object (a pass costs the
    sub-groups joined, not all of them); a sub-group name the PodGroup lacks leaves the pod in none."""
    subs = [SubGroup(f"r-{i}", min_member=2) for i in range(6)]
    view = PodGroupMetadata("pg", "ns", OWNER, min_member=None, min_sub_group=6, sub_groups=subs)
    where = {f"p{i}": f"r-{i % 6}" for i in range(12)}
    where["p11"] = "r-missing"

    def decide(p: dict[str, Any]) -> Decision:
        name = p["metadata"]["name"]
        md = copy.deepcopy(view)
        for sg in md.sub_groups:
            if sg.name == where[name]:
                sg.pods.append(name)
        return Decision("ns", name, p["metadata"]["uid"], "grouped", "Grouped", pod_group=md,
                        sub_group=where[name], plugin="jobset", top_owner=OWNER)

    pods = {f"p{i:02d}": pod(f"p{i:02d}") for i in range(8)}
    where.update({f"p{i:02d}": where.pop(f"p{i}") for i in range(12)})
    last = plan_workload(pods.values(), decide)
    joining = {n: pod(n) for n in ("p08", "p09", "p11")}  # into r-2, r-3 and a sub-group it lacks
    fresh, held = to_decide(joining.values(), last.kept)
    got = update(last, joining.values(), set(), held, [(p, decide(p)) for p in fresh])
    pods.update(joining)
    _same(got, plan_workload(pods.values(), decide))
    assert got.rewritten == frozenset(), "only joined: the PodGroup stands as written"
    before = {sg.name: sg for sg in last.groups[0].metadata.sub_groups}
    after = {sg.name: sg for sg in got.groups[0].metadata.sub_groups}
    assert [n for n in after if after[n] is not before[n]] == ["r-2", "r-3"]
    assert after["r-2"].pods == ["p02", "p08"] and "p11" in got.groups[0].pods
