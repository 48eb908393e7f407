"""Gang state (grouper/core/gang_state.py) from PodGroups whose status is written as KAI's scheduler writes it
(tests/kai_status.py) or as upstream's, and member pods: states, verbatim reasons, counts, times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kai_status import (
    NOT_ENOUGH_RESOURCES,
    FitError,
    clear_scheduling_conditions,
    fit_errors_message,
    mark_unschedulable,
    pod_unschedulable,
    rfc3339,
    set_last_start,
    set_resources_status,
    set_scheduling_condition,
)

from grouper.core.gang_state import (
    GangSpecError,
    GangState,
    MemberPod,
    State,
    gang_of,
    gang_state,
    kai_gang,
    member,
    upstream_gang,
)
from grouper.describe.resources import pod_request
from grouper.model.podgroup import SUBGROUP_LABEL

T0 = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)
GPU_MESSAGE = "2 node(s) didn't have enough resources: GPUs"


def kai_pg(name: str = "pg-train", min_member: int | None = 3, sub_groups: list[dict[str, Any]] | None = None,
           min_sub_group: int | None = None, queue: str = "team-a") -> dict[str, Any]:
    spec: dict[str, Any] = {"queue": queue}
    if min_member is not None:
        spec["minMember"] = min_member
    if min_sub_group is not None:
        spec["minSubGroup"] = min_sub_group
    if sub_groups:
        spec["subGroups"] = sub_groups
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ml", "creationTimestamp": rfc3339(T0)}, "spec": spec}


def pod(name: str, *, node: str | None = None, gpus: int = 0, created: datetime = T0, sub_group: str | None = None,
        deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "creationTimestamp": rfc3339(created)}
    if sub_group:
        meta["labels"] = {SUBGROUP_LABEL: sub_group}
    if deleting:
        meta["deletionTimestamp"] = rfc3339(created + timedelta(minutes=1))
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Pending"}}


def members(*pods: dict[str, Any]) -> list[MemberPod]:
    return [member(p, gpus=pod_request(p["spec"]).gpus) for p in pods]


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


# ------------------------------------------------------------------------------------------ KAI, flat


def test_kai_gang_goes_grouping_waiting_admitted_with_the_schedulers_reasons_verbatim() -> None:
    pg = kai_pg(min_member=3)
    two = members(pod("w-0", gpus=2, created=at(0)), pod("w-1", gpus=2, created=at(1)))
    s1 = gang_state(kai_gang(pg), two, None, now=at(1))
    assert (s1.state, s1.counts.required, s1.counts.present, s1.counts.scheduled) == (State.GROUPING, 3, 2, 0)
    assert s1.since == at(0)  # the first pod's creation: grouping began then

    # the third pod arrives; KAI holds the gang and says why (status + each pod's PodScheduled=False)
    assert mark_unschedulable(pg, [FitError(NOT_ENOUGH_RESOURCES, [GPU_MESSAGE])], now=at(2))
    message = fit_errors_message([FitError(NOT_ENOUGH_RESOURCES, [GPU_MESSAGE])])
    assert message == f"{NOT_ENOUGH_RESOURCES}: {GPU_MESSAGE}."
    held = [pod_unschedulable(pod(f"w-{i}", gpus=2, created=at(i)), message, now=at(2)) for i in range(3)]
    s2 = gang_state(kai_gang(pg), members(*held), s1, now=at(2))
    assert (s2.state, s2.since, s2.counts.present, s2.requested_gpus) == (State.WAITING, at(2), 3, 6)
    pg_reason, pod_reason = s2.reasons
    assert (pg_reason.source, pg_reason.type, pg_reason.node_pool, pg_reason.reason, pg_reason.message) == (
        "PodGroup", "UnschedulableOnNodePool", "default", NOT_ENOUGH_RESOURCES, GPU_MESSAGE)
    assert pg_reason.since == at(2)
    assert (pod_reason.source, pod_reason.reason, pod_reason.message, pod_reason.pods) == (
        "Pod", "Unschedulable", message, ("w-0", "w-1", "w-2"))

    # still waiting a minute later: the state and its start are kept
    s3 = gang_state(kai_gang(pg), members(*held), s2, now=at(3))
    assert (s3.state, s3.since, s3.seconds_in_state(at(3))) == (State.WAITING, at(2), 60.0)

    # bound: admitted, the time to admission counted from the first pod's creation
    clear_scheduling_conditions(pg)
    set_last_start(pg, at(5))
    bound = members(*(pod(f"w-{i}", node=f"n{i}", gpus=2, created=at(i)) for i in range(3)))
    s4 = gang_state(kai_gang(pg), bound, s3, now=at(5))
    assert (s4.state, s4.since, s4.admitted_at, s4.time_to_admission, s4.reasons) == (
        State.ADMITTED, at(5), at(5), 300.0, ())
    assert (s4.counts.scheduled, s4.queue, s4.ever_admitted) == (3, "team-a", True)


def test_degraded_after_a_member_is_lost_and_admitted_again_when_replaced() -> None:
    pg = kai_pg(min_member=2)
    both = members(pod("a", node="n1"), pod("b", node="n2"))
    admitted = gang_state(kai_gang(pg), both, None, now=at(1))
    assert admitted.state is State.ADMITTED and admitted.admitted_at == at(1)
    one = members(pod("a", node="n1"), pod("b", node="n2", deleting=True))  # its node deleted: the pod goes
    degraded = gang_state(kai_gang(pg), one, admitted, now=at(4))
    assert (degraded.state, degraded.since, degraded.counts.present, degraded.counts.scheduled) == (
        State.DEGRADED, at(4), 1, 1)
    replacement = members(pod("a", node="n1"), pod("c", created=at(4)))  # replacement not bound yet
    still = gang_state(kai_gang(pg), replacement, degraded, now=at(5))
    assert (still.state, still.since) == (State.DEGRADED, at(4))  # never back to Waiting/Grouping
    recovered = gang_state(kai_gang(pg), members(pod("a", node="n1"), pod("c", node="n3")), still, now=at(6))
    # recovered: Admitted since now, the first admission (and time to admission) kept
    assert (recovered.state, recovered.since, recovered.admitted_at, recovered.time_to_admission) == (
        State.ADMITTED, at(6), at(1), 60.0)


def test_after_a_restart_the_schedulers_record_says_the_gang_was_admitted() -> None:
    pg = kai_pg(min_member=2)
    one_bound = members(pod("a", node="n1"), pod("b"))
    assert gang_state(kai_gang(pg), one_bound, None, now=at(9)).state is State.WAITING
    set_last_start(pg, at(2))  # KAI's scheduler started the gang at 12:02
    s = gang_state(kai_gang(pg), one_bound, None, now=at(9))
    assert (s.state, s.admitted_at, s.since) == (State.DEGRADED, at(2), at(9))
    full = gang_state(kai_gang(pg), members(pod("a", node="n1"), pod("b", node="n2")), None, now=at(9))
    assert (full.state, full.since, full.admitted_at) == (State.ADMITTED, at(2), at(2))


def test_waiting_since_the_pod_that_completed_the_gang_when_there_is_no_previous_state() -> None:
    pg = kai_pg(min_member=2)
    s = gang_state(kai_gang(pg), members(pod("a", created=at(1)), pod("b", created=at(4)), pod("c", created=at(6))),
                   None, now=at(30))
    assert (s.state, s.since, s.first_pod_created) == (State.WAITING, at(4), at(1))


def test_deprecated_condition_fields_when_a_condition_has_no_reasons_and_resources_status_verbatim() -> None:
    pg = kai_pg(min_member=2)
    pg.setdefault("metadata", {})["labels"] = {"kai.scheduler/node-pool": "pool-a"}
    assert mark_unschedulable(pg, [], now=at(1))  # no fit errors: KAI's default message, no reasons[]
    set_resources_status(pg, requested={"nvidia.com/gpu": "4", "cpu": "8"}, allocated={"nvidia.com/gpu": "0"})
    spec = kai_gang(pg)
    (r,) = spec.reasons
    assert (r.reason, r.message, r.node_pool) == ("Unschedulable", "Unable to schedule podgroup", "pool-a")
    assert spec.resources_status == {"allocated": {"nvidia.com/gpu": "0"},
                                     "requested": {"nvidia.com/gpu": "4", "cpu": "8"}}


def test_no_podgroup_yet_is_grouping_and_a_grouping_error_is_error() -> None:
    s = gang_state(None, members(pod("a", created=at(3))), None, now=at(5))
    assert (s.state, s.since, s.counts.present) == (State.GROUPING, at(3), 1)
    err = "Pod ml/a: field metadata.labels: replicas 'abc' is not a number (expression '.spec.replicas')"
    e = gang_state(None, members(pod("a")), s, now=at(6))
    e = gang_state(kai_gang(kai_pg()), members(pod("a")), e, now=at(7), error=err)
    assert (e.state, e.error, e.since) == (State.ERROR, err, at(7))


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"minMember": "three"}, "field spec.minMember: expected a count (an integer >= 0), got 'three'"),
        ({"minMember": -1}, "field spec.minMember: expected a count"),
        ({"subGroups": [{"name": "a", "minMember": True}]}, "field spec.subGroups[0].minMember"),
        ({"subGroups": [{"minMember": 1}]}, "field spec.subGroups[0].name"),
        ({"subGroups": [{"name": "a", "parent": "b", "minSubGroup": 1}, {"name": "b", "parent": "a", "minSubGroup": 1}]},
         "field spec.subGroups[0].parent: the parents of sub-group a form a cycle through"),
    ],
)
def test_unreadable_podgroup_fields_are_named(patch: dict[str, Any], message: str) -> None:
    pg = kai_pg()
    pg["spec"].update(patch)
    with pytest.raises(GangSpecError) as exc:
        kai_gang(pg)
    assert "PodGroup ml/pg-train: " in str(exc.value) and message in str(exc.value)


# ------------------------------------------------------------------------------------------ sub-groups


def jobset_pg(min_sub_group: int | None = None) -> dict[str, Any]:
    """leader (1 replica of 1 pod) and worker (2 replicas of 2 pods), as the grouper writes a JobSet."""
    subs = [
        {"name": "leader", "minSubGroup": 1},
        {"name": "leader-0", "parent": "leader", "minMember": 1},
        {"name": "worker", "minSubGroup": 2},
        {"name": "worker-0", "parent": "worker", "minMember": 2},
        {"name": "worker-1", "parent": "worker", "minMember": 2},
    ]
    return kai_pg(min_member=None, min_sub_group=min_sub_group if min_sub_group is not None else 2, sub_groups=subs)


def test_sub_group_counts_and_a_missing_leaf_keeps_the_gang_grouping() -> None:
    pods = [pod("l", sub_group="leader-0"), pod("w00", sub_group="worker-0"), pod("w01", sub_group="worker-0"),
            pod("w10", sub_group="worker-1")]
    s = gang_state(kai_gang(jobset_pg()), members(*pods), None, now=at(1))
    assert s.state is State.GROUPING  # worker-1 needs 2 pods, has 1
    assert s.counts.required == 5
    by = {sg.name: sg for sg in s.sub_groups}
    assert (by["worker-1"].counts.required, by["worker-1"].counts.present) == (2, 1)
    assert (by["worker"].counts.required, by["worker"].counts.present, by["worker"].children) == (
        4, 3, ("worker-0", "worker-1"))
    pods.append(pod("w11", sub_group="worker-1"))
    assert gang_state(kai_gang(jobset_pg()), members(*pods), None, now=at(1)).state is State.WAITING


def test_every_sub_groups_minimum_must_be_scheduled_for_admission() -> None:
    names = {"l": "leader-0", "w00": "worker-0", "w01": "worker-0", "w10": "worker-1", "w11": "worker-1"}
    # six pods bound (more than the 5 required) but worker-1 has only one of its two: not admitted
    pods = [pod(n, sub_group=g, node="n" if n != "w11" else None) for n, g in names.items()]
    pods.append(pod("w02", sub_group="worker-0", node="n"))
    s = gang_state(kai_gang(jobset_pg()), members(*pods), None, now=at(1))
    assert (s.state, s.counts.scheduled, s.counts.required) == (State.WAITING, 5, 5)
    assert not {sg.name: sg for sg in s.sub_groups}["worker-1"].satisfied
    pods = [pod(n, sub_group=g, node="n") for n, g in names.items()]
    s = gang_state(kai_gang(jobset_pg()), members(*pods), s, now=at(2))
    assert s.state is State.ADMITTED and all(sg.satisfied for sg in s.sub_groups)


def test_min_sub_group_below_the_children_lets_the_gang_start_without_one() -> None:
    subs = [{"name": "a", "minMember": 2}, {"name": "b", "minMember": 1}, {"name": "c", "minMember": 3}]
    pg = kai_pg(min_member=None, min_sub_group=2, sub_groups=subs)
    s = gang_state(kai_gang(pg), members(pod("b0", sub_group="b", node="n"), pod("a0", sub_group="a", node="n"),
                                         pod("a1", sub_group="a", node="n")), None, now=at(1))
    assert (s.state, s.counts.required) == (State.ADMITTED, 3)  # the two cheapest: b (1) + a (2)


def test_pods_being_deleted_and_pods_in_unknown_sub_groups() -> None:
    pg = kai_pg(min_member=2)
    s = gang_state(kai_gang(pg), members(pod("a", node="n", gpus=1), pod("b", node="n", gpus=1, deleting=True),
                                         pod("c", node="n", gpus=1, sub_group="no-such")), None, now=at(1))
    assert (s.state, s.counts.present, s.counts.scheduled, s.requested_gpus) == (State.ADMITTED, 2, 2, 2)


def test_pod_scheduled_true_counts_as_bound_before_node_name_is_seen() -> None:
    p = pod("a")
    p["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    assert member(p).bound


# ------------------------------------------------------------------------------------------ upstream


def upstream_pg(min_count: int = 2, conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    pg: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "pg-train", "namespace": "ml", "creationTimestamp": rfc3339(T0)},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }
    if conditions is not None:
        pg["status"] = {"conditions": conditions}
    return pg


def test_upstream_waiting_reasons_and_initially_scheduled_as_admission_record() -> None:
    cond = {"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", "lastTransitionTime": rfc3339(at(1))}
    spec = gang_of(upstream_pg(conditions=[cond]), queue="team-a")
    assert (spec.backend, spec.min_member, spec.queue) == ("upstream", 2, "team-a")
    s = gang_state(spec, members(pod("a"), pod("b")), None, now=at(2))
    assert s.state is State.WAITING
    assert [(r.type, r.reason, r.message) for r in s.reasons] == [
        ("PodGroupInitiallyScheduled", "Unschedulable", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")]
    done = dict(cond, status="True", reason="Scheduled", message="", lastTransitionTime=rfc3339(at(3)))
    a = gang_state(upstream_gang(upstream_pg(conditions=[done])), members(pod("a", node="n"), pod("b", node="n")),
                   None, now=at(8))
    assert (a.state, a.admitted_at, a.since, a.time_to_admission) == (State.ADMITTED, at(3), at(3), 180.0)
    # the condition never reverts: a lost member after a restart is Degraded, not Waiting
    d = gang_state(upstream_gang(upstream_pg(conditions=[done])), members(pod("a", node="n")), None, now=at(9))
    assert d.state is State.DEGRADED


def test_upstream_136_servers_old_condition_name_is_the_admission_record_too() -> None:
    """1.36 servers (v1alpha2) write ``PodGroupScheduled``: without it a restarted grouper would never see
    the gang admitted, so a lost member would read as Waiting instead of Degraded."""
    done = {"type": "PodGroupScheduled", "status": "True", "reason": "Scheduled", "message": "",
            "lastTransitionTime": rfc3339(at(3))}
    a = gang_state(upstream_gang(upstream_pg(conditions=[done])), members(pod("a", node="n"), pod("b", node="n")),
                   None, now=at(8))
    assert (a.state, a.admitted_at) == (State.ADMITTED, at(3))
    d = gang_state(upstream_gang(upstream_pg(conditions=[done])), members(pod("a", node="n")), None, now=at(9))
    assert d.state is State.DEGRADED


def test_gang_of_refuses_other_kinds() -> None:
    with pytest.raises(GangSpecError, match="field apiVersion"):
        gang_of({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup"})


# ------------------------------------------------------------------------------------------ the helper


def test_kai_helper_transition_ids_squash_and_identical_conditions() -> None:
    pg = kai_pg()
    errs = [FitError(NOT_ENOUGH_RESOURCES, [GPU_MESSAGE])]
    assert mark_unschedulable(pg, errs, now=at(1))
    assert not mark_unschedulable(pg, errs, now=at(2))  # identical: KAI leaves it (and its time) alone
    assert pg["status"]["schedulingConditions"][0]["transitionID"] == "1"
    assert pg["status"]["schedulingConditions"][0]["lastTransitionTime"] == rfc3339(at(1))
    other = [FitError("OverLimit", ["queue team-a is over its limit"], {"queueDetails": {"name": "team-a"}})]
    assert mark_unschedulable(pg, other, now=at(3))
    (c,) = pg["status"]["schedulingConditions"]  # same node pool and type: squashed, one left
    assert (c["transitionID"], c["message"], c["reasons"]) == (
        "2", "OverLimit: queue team-a is over its limit.",
        [{"reason": "OverLimit", "message": "queue team-a is over its limit", "details": {"queueDetails": {"name": "team-a"}}}])
    assert set_scheduling_condition(pg, {"type": "UnschedulableOnNodePool", "nodePool": "other", "reason": "x",
                                         "message": "y", "status": "True"}, now=at(4))
    assert [x["transitionID"] for x in pg["status"]["schedulingConditions"]] == ["2", "3"]
    assert not mark_unschedulable(pg, errs, now=at(5), any_allocated=True)


def test_kai_message_histogram() -> None:
    errs = [FitError("A", ["x", "y"]), FitError("B", ["x"])]
    assert fit_errors_message(errs) == "Unable to schedule podgroup: 2 x. \ny."


# ------------------------------------------------------------------------------------------ properties


@st.composite
def flat_case(draw: st.DrawFn) -> tuple[int, list[tuple[bool, bool]]]:
    min_member = draw(st.integers(0, 6))
    pods = draw(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=8))  # (bound, deleting)
    return min_member, pods


def flat_members(pods: list[tuple[bool, bool]]) -> list[MemberPod]:
    return [MemberPod(f"p{i}", bound=b, present=not d, created=at(i)) for i, (b, d) in enumerate(pods)]


@settings(max_examples=300, deadline=None)
@given(flat_case())
def test_flat_admitted_iff_the_minimum_is_scheduled(case: tuple[int, list[tuple[bool, bool]]]) -> None:
    min_member, pods = case
    s = gang_state(kai_gang(kai_pg(min_member=min_member)), flat_members(pods), None, now=at(20))
    scheduled = sum(1 for b, d in pods if b and not d)
    present = sum(1 for _, d in pods if not d)
    assert (s.state is State.ADMITTED) == (scheduled >= min_member)
    if s.state is not State.ADMITTED:  # no previous state, no scheduler record: never Degraded
        assert s.state is (State.GROUPING if present < min_member else State.WAITING)
        assert s.since <= at(20)


@st.composite
def tree_case(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[MemberPod]]:
    """Two levels, every minimum required (no minSubGroup): a random forest of leaves with minMember."""
    n_parents = draw(st.integers(0, 2))
    subs: list[dict[str, Any]] = [{"name": f"p{i}"} for i in range(n_parents)]
    leaves = draw(st.lists(st.tuples(st.integers(0, max(n_parents, 1) - 1), st.integers(1, 3)), min_size=1, max_size=4))
    for j, (parent, mm) in enumerate(leaves):
        leaf: dict[str, Any] = {"name": f"l{j}", "minMember": mm}
        if n_parents:
            leaf["parent"] = f"p{parent}"
        subs.append(leaf)
    used = {leaf.get("parent") for leaf in subs if leaf.get("parent")}
    subs = [sg for sg in subs if sg["name"].startswith("l") or sg["name"] in used]
    pods = draw(st.lists(st.tuples(st.integers(0, len(leaves) - 1), st.booleans()), max_size=10))
    ms = [MemberPod(f"x{i}", sub_group=f"l{leaf}", bound=b, created=at(i)) for i, (leaf, b) in enumerate(pods)]
    return subs, ms


@settings(max_examples=300, deadline=None)
@given(tree_case())
def test_tree_admitted_iff_every_leaf_minimum_is_scheduled(case: tuple[list[dict[str, Any]], list[MemberPod]]) -> None:
    subs, ms = case
    s = gang_state(kai_gang(kai_pg(min_member=None, sub_groups=subs)), ms, None, now=at(30))
    every = all(sum(1 for m in ms if m.sub_group == sg["name"] and m.bound) >= sg["minMember"]
                for sg in subs if "minMember" in sg)
    assert (s.state is State.ADMITTED) == every
    assert s.counts.required == sum(sg["minMember"] for sg in subs if "minMember" in sg)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.lists(flat_case().map(lambda c: c[1]), min_size=1, max_size=8))
def test_transitions_degraded_only_after_admitted_and_deterministic(
    min_member: int, steps: list[list[tuple[bool, bool]]]
) -> None:
    spec = kai_gang(kai_pg(min_member=min_member))

    def run() -> list[GangState]:
        out: list[GangState] = []
        prev = None
        for i, pods in enumerate(steps):
            prev = gang_state(spec, flat_members(pods), prev, now=at(100 + i))
            out.append(prev)
        return out

    first, second = run(), run()
    assert first == second
    seen_admitted = False
    for i, s in enumerate(first):
        if s.state is State.DEGRADED:
            assert seen_admitted
        seen_admitted = seen_admitted or s.state is State.ADMITTED
        assert s.ever_admitted == seen_admitted
        if s.state is State.ADMITTED:
            assert s.reasons == () and s.admitted_at is not None
        if i:  # since moves on a change of state, and only then
            assert (s.since == first[i - 1].since) == (s.state == first[i - 1].state)


def test_upstream_basic_policy_has_no_minimum_and_min_sub_group_above_the_children_never_admits() -> None:
    basic = upstream_pg()
    basic["spec"]["schedulingPolicy"] = {"basic": {}}
    assert gang_state(upstream_gang(basic), members(pod("a")), None, now=at(1)).state is State.ADMITTED
    subs = [{"name": "a", "minMember": 1}, {"name": "b", "minMember": 1}]
    pg = kai_pg(min_member=None, min_sub_group=3, sub_groups=subs)  # KAI's webhook only warns
    s = gang_state(kai_gang(pg), members(pod("a0", sub_group="a", node="n"), pod("b0", sub_group="b", node="n")),
                   None, now=at(1))
    assert s.state is State.GROUPING and s.counts.scheduled == 2


@st.composite
def nested_case(draw: st.DrawFn) -> tuple[dict[str, Any], list[MemberPod]]:
    """A root with minSubGroup over parents with minSubGroup over leaves with minMember (KAI's JobSet shape)."""
    parents = draw(st.integers(1, 3))
    subs: list[dict[str, Any]] = []
    leaves: list[str] = []
    for p in range(parents):
        n_leaves = draw(st.integers(1, 3))
        subs.append({"name": f"p{p}", "minSubGroup": draw(st.integers(0, n_leaves))})
        for j in range(n_leaves):
            subs.append({"name": f"p{p}-l{j}", "parent": f"p{p}", "minMember": draw(st.integers(1, 2))})
            leaves.append(f"p{p}-l{j}")
    pg = kai_pg(min_member=None, min_sub_group=draw(st.integers(0, parents)), sub_groups=subs)
    pods = draw(st.lists(st.tuples(st.sampled_from(leaves), st.booleans()), max_size=12))
    return pg, [MemberPod(f"x{i}", sub_group=leaf, bound=b, created=at(i)) for i, (leaf, b) in enumerate(pods)]


def _kai_satisfied(pg: dict[str, Any], ms: list[MemberPod]) -> bool:
    """KAI's rule, written out: a leaf needs minMember bound pods; a node needs minSubGroup satisfied children."""
    subs = pg["spec"]["subGroups"]

    def ok(name: str | None) -> bool:
        kids = [sg["name"] for sg in subs if sg.get("parent") == name]
        node = next((sg for sg in subs if sg["name"] == name), pg["spec"])
        if not kids:
            return sum(1 for m in ms if m.sub_group == name and m.bound) >= node["minMember"]
        return sum(1 for k in kids if ok(k)) >= node["minSubGroup"]

    return ok(None)


@settings(max_examples=300, deadline=None)
@given(nested_case())
def test_nested_admitted_iff_kais_rule_and_binding_more_never_unadmits(
    case: tuple[dict[str, Any], list[MemberPod]]
) -> None:
    pg, ms = case
    s = gang_state(kai_gang(pg), ms, None, now=at(50))
    assert (s.state is State.ADMITTED) == _kai_satisfied(pg, ms)
    if s.state is State.ADMITTED:
        more = [MemberPod(m.name, m.sub_group, True, created=m.created) for m in ms]
        assert gang_state(kai_gang(pg), more, s, now=at(51)).state is State.ADMITTED
