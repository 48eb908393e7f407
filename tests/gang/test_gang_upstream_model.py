"""Pure translation of a KAI PodGroup decision into upstream Workload + PodGroups (grouper.core.upstream)."""

from __future__ import annotations

from grouper.core.upstream import (
    UpstreamVersions,
    membership_notes,
    min_count,
    scheduling_group,
    to_upstream,
    tree_min_count,
)
from grouper.model.podgroup import OwnerRef, PodGroupMetadata, SubGroup, TopologyConstraint

V = UpstreamVersions("scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1beta1")
OWNER = OwnerRef("jobset.x-k8s.io/v1alpha2", "JobSet", "js", "uid-1")


def md(**kw: object) -> PodGroupMetadata:
    return PodGroupMetadata(name="pg-js-uid-1", namespace="ns", owner=OWNER, **kw)  # type: ignore[arg-type]


def test_a_plain_gang_is_one_workload_and_one_podgroup_with_min_member_as_min_count() -> None:
    out = to_upstream(md(min_member=3), V)
    wl = out.workload
    assert wl["apiVersion"] == "scheduling.k8s.io/v1beta1" and wl["kind"] == "Workload"
    assert wl["metadata"]["name"] == "pg-js-uid-1"
    assert wl["metadata"]["ownerReferences"] == [OWNER.to_dict()]
    assert wl["spec"]["controllerRef"] == {"apiGroup": "jobset.x-k8s.io", "kind": "JobSet", "name": "js"}
    assert wl["spec"]["podGroupTemplates"] == [
        {"name": "main", "schedulingPolicy": {"gang": {"minCount": 3}}}
    ]
    (pg,) = out.pod_groups
    assert pg["kind"] == "PodGroup" and pg["metadata"]["name"] == "pg-js-uid-1"
    assert pg["spec"]["workloadRef"] == {"workloadName": "pg-js-uid-1", "templateName": "main"}
    assert min_count(pg) == 3
    assert out.pod_group_for(None) == "pg-js-uid-1"
    assert out.notes == []


def test_a_single_pod_group_is_still_a_gang_so_scaling_can_raise_min_count() -> None:
    (pg,) = to_upstream(md(min_member=1), V).pod_groups
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 1}}


def test_min_member_zero_becomes_one_and_says_so() -> None:
    out = to_upstream(md(min_member=0), V)
    assert min_count(out.pod_groups[0]) == 1
    assert any("minMember 0" in n for n in out.notes)


def test_core_group_owner_has_an_empty_api_group() -> None:
    wl = to_upstream(
        PodGroupMetadata(name="pg", namespace="ns", owner=OwnerRef("v1", "Pod", "p", "u")), V
    ).workload
    assert wl["spec"]["controllerRef"] == {"apiGroup": "", "kind": "Pod", "name": "p"}


def test_fields_without_an_upstream_counterpart_are_reported_never_dropped() -> None:
    out = to_upstream(
        md(
            min_member=2,
            queue="team-a",
            preemptibility="non-preemptible",
            preemption_delay="5m0s",
            staleness_grace_period="1m0s",
            topology=TopologyConstraint(topology="default", required_level="rack"),
        ),
        V,
    )
    text = "\n".join(out.notes)
    for field in (
        "queue 'team-a'",
        "preemptibility",
        "preemptionDelay",
        "stalenessGracePeriod",
        "topologyConstraint",
    ):
        assert field in text
    assert "queue" not in str(out.workload) and "queue" not in str(out.pod_groups)


def test_priority_class_is_carried_on_the_pod_groups_when_it_exists() -> None:
    (pg,) = to_upstream(md(min_member=2, priority_class_name="train"), V).pod_groups
    assert pg["spec"]["priorityClassName"] == "train"
    out = to_upstream(md(min_member=2, priority_class_name="train"), V, priority_class_exists=False)
    assert "priorityClassName" not in out.pod_groups[0]["spec"]
    assert any("priorityClassName 'train' not carried" in n for n in out.notes)


def jobset_tree() -> list[SubGroup]:
    """KAI's JobSet shape: a parent per replicatedJob (minSubGroup = replicas), a leaf per replica."""
    return [
        SubGroup("leader", min_sub_group=1),
        SubGroup("leader-replica-0", min_member=1, parent="leader", pods=["js-leader-0-0"]),
        SubGroup("workers", min_sub_group=2),
        SubGroup("workers-replica-0", min_member=2, parent="workers", pods=["js-workers-0-0"]),
        SubGroup("workers-replica-1", min_member=2, parent="workers"),
    ]


def test_a_sub_group_tree_is_one_gang_of_the_fewest_pods_it_admits() -> None:
    out = to_upstream(md(min_member=None, min_sub_group=2, sub_groups=jobset_tree()), V)
    (pg,) = out.pod_groups
    assert pg["metadata"]["name"] == "pg-js-uid-1" and min_count(pg) == 5
    assert out.workload["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {"gang": {"minCount": 5}}
    assert out.pod_group_for("workers-replica-1") == "pg-js-uid-1"
    (note,) = out.notes
    assert "5 sub-groups not carried" in note and "minCount 5" in note
    assert "workers-replica-0 under workers minMember 2" in note


def test_tree_minimum_takes_the_cheapest_children_of_a_partial_min_sub_group() -> None:
    # InOrder JobSet: the root needs 1 of its 2 replicatedJobs; the leader (1 pod) is the cheapest
    assert tree_min_count(md(min_member=None, min_sub_group=1, sub_groups=jobset_tree())) == 1
    subs = [SubGroup("a", min_member=1), SubGroup("b", min_member=1)]
    assert tree_min_count(md(min_member=6, sub_groups=subs)) == 6  # a root minMember above wins
    assert tree_min_count(md(min_member=1, sub_groups=subs)) == 2
    zero = [SubGroup("x", min_member=0), SubGroup("y", min_member=3)]  # a replicatedJob scaled to zero
    assert tree_min_count(md(min_member=None, min_sub_group=2, sub_groups=zero)) == 3


def test_pods_already_in_a_foreign_pod_group_skip_the_workload() -> None:
    out = to_upstream(md(min_member=2), V)
    skip, notes = membership_notes(out, [("p0", None, "job-pg"), ("p1", None, "job-pg")])
    assert skip and "job-pg" in notes[0]


def test_pods_that_joined_no_group_are_reported() -> None:
    out = to_upstream(md(min_member=2), V)
    skip, notes = membership_notes(out, [("p0", None, "pg-js-uid-1"), ("p1", None, None)])
    assert not skip and "1 pod(s) joined no PodGroup (p1)" in notes[0]
    assert membership_notes(out, [("p0", None, "pg-js-uid-1")]) == (False, [])


def test_scheduling_group_reads_the_pod_spec() -> None:
    assert scheduling_group({"spec": {"schedulingGroup": {"podGroupName": "g"}}}) == "g"
    assert scheduling_group({"spec": {}}) is None


def test_an_update_changes_min_count_and_keeps_what_others_or_the_server_own() -> None:
    from grouper.writer.upstream import merged_object, needs_update

    desired = to_upstream(md(min_member=4, labels={"team": "a"}), V).pod_groups[0]
    stored = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "pg-js-uid-1",
            "namespace": "ns",
            "resourceVersion": "7",
            "labels": {"other": "x"},
            "ownerReferences": [OWNER.to_dict()],
            "managedFields": [{}],
        },
        "spec": {
            "workloadRef": {"workloadName": "pg-js-uid-1", "templateName": "main"},
            "schedulingPolicy": {"gang": {"minCount": 2}},
        },
        "status": {"conditions": []},
    }
    assert needs_update(desired, stored)
    out = merged_object(desired, stored)
    assert out["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    assert out["metadata"]["labels"] == {"other": "x", "team": "a"}
    assert out["metadata"]["resourceVersion"] == "7" and "managedFields" not in out["metadata"]
    assert "status" not in out
    assert not needs_update(desired, {**out, "status": {"conditions": []}})


def test_a_basic_policy_stored_by_someone_else_is_never_turned_into_a_gang() -> None:
    from grouper.writer.upstream import merged_object

    desired = to_upstream(md(min_member=4), V).pod_groups[0]
    stored = {"metadata": {"name": "pg-js-uid-1"}, "spec": {"schedulingPolicy": {"basic": {}}}}
    assert merged_object(desired, stored)["spec"]["schedulingPolicy"] == {"basic": {}}
