"""Rendering a WorkloadGroup into one KAI PodGroup: the tree, every merge rule, the gate and every error."""

from __future__ import annotations

from dataclasses import replace

import pytest
from wg_builders import NS, VALUES, flat, group, member, owner, tree

from grouper.core.naming import is_subdomain
from grouper.core.validation import validate_pod_group
from grouper.core.workload_group import member_prefix, render_kai, rendered_name
from grouper.model.podgroup import TopologyConstraint

GPU = TopologyConstraint(topology="gpu", required_level="rack")


def render(members, spec=None, values=VALUES, **kw):  # type: ignore[no-untyped-def]
    return render_kai(NS, "rl", group(len(members)) if spec is None else spec, members, values, **kw)


def two_members():  # type: ignore[no-untyped-def]
    trainer = member("RayJob", "trainer", tree("pg-trainer", {"head": ["t-head"], "workers": ["t-w0", "t-w1"]},
                                              min_member=3, topology=GPU))
    reward = member("Deployment", "reward", flat("pg-reward", ["r-0", "r-1"], labels={"app": "r"},
                                                annotations={"note": "x"}), )
    return trainer, reward


def test_the_rendered_podgroup_wraps_each_members_tree_below_a_prefixed_sub_group() -> None:
    trainer, reward = two_members()
    r = render([trainer, reward])
    assert r.state == "Rendered", r.errors + r.pending
    md = r.pod_group
    assert md is not None
    t, w = member_prefix("rl", trainer.ref), member_prefix("rl", reward.ref)
    assert md.to_object() == {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {
            "name": rendered_name(NS, "rl"),
            "namespace": NS,
            "ownerReferences": [{"apiVersion": "grouper.kai-pod-grouper.io/v1alpha1", "kind": "WorkloadGroup",
                                 "name": "rl", "uid": "uid-group"}],
        },  # no labels or annotations inherited from the members
        "spec": {
            "minSubGroup": 2,
            "queue": "q",
            "priorityClassName": "train",
            "topologyConstraint": {},  # no root topology unless the group sets one
            "subGroups": [  # members by identity: Deployment (example.com, Deployment) before RayJob
                {"name": w, "minMember": 2},
                {"name": t, "minSubGroup": 2, "topologyConstraint": GPU.to_dict()},  # the member's root topology
                {"name": f"{t}-head", "minMember": 1, "parent": t},
                {"name": f"{t}-workers", "minMember": 2, "parent": t},
            ],
        },
    }
    assert r.placement == {
        "r-0": (md.name, w), "r-1": (md.name, w),
        "t-head": (md.name, f"{t}-head"), "t-w0": (md.name, f"{t}-workers"), "t-w1": (md.name, f"{t}-workers"),
    }
    assert validate_pod_group(md) == []
    assert [(m.ref.name, m.pod_groups, m.root_sub_group) for m in r.members] == [
        ("reward", ["pg-reward"], w), ("trainer", ["pg-trainer"], t),
    ]
    status = r.status()
    assert status["renderedPodGroupRef"]["name"] == md.name
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [("InputsResolved", "True"), ("Rendered", "True")]


def test_nested_sub_groups_keep_parents_minima_and_topology() -> None:
    js = member("JobSet", "js", tree(
        "pg-js", {"leader-0": ["l0"], "worker-0": ["w0"], "worker-1": ["w1"]},
        parents={"leader-0": "leader", "worker-0": "worker", "worker-1": "worker"},
        leaf_topology={"worker-0": GPU},
    ))
    other = member("Job", "prep", flat("pg-prep", ["p0"]))
    r = render([js, other])
    assert r.pod_group is not None
    p = member_prefix("rl", js.ref)
    by_name = {sg.name: sg for sg in r.pod_group.sub_groups}
    assert by_name[f"{p}-leader"].parent == p and by_name[f"{p}-leader"].min_sub_group == 1
    assert by_name[f"{p}-leader-0"].parent == f"{p}-leader"
    assert by_name[f"{p}-worker"].min_sub_group == 2
    assert by_name[f"{p}-worker-0"].topology == GPU and by_name[f"{p}-worker-1"].topology is None
    assert by_name[p].min_sub_group == 2  # the member's own root minSubGroup
    assert validate_pod_group(r.pod_group) == []


def test_a_member_with_several_podgroups_gets_one_wrapper_each_and_requires_all() -> None:
    lws = member("LeaderWorkerSet", "serve",
                 tree("pg-serve-group-1", {"leader": ["s-1"], "workers": ["s-1-1"]}, min_member=2),
                 tree("pg-serve-group-0", {"leader": ["s-0"], "workers": ["s-0-1"]}, min_member=2))
    job = member("PyTorchJob", "train", flat("pg-train", ["m0", "w0"]))
    r = render([lws, job])
    md = r.pod_group
    assert md is not None and md.min_sub_group == 2
    p = member_prefix("rl", lws.ref)
    by_name = {sg.name: sg for sg in md.sub_groups}
    assert by_name[p].min_sub_group == 2 and by_name[p].parent is None
    assert by_name[f"{p}-pg0"].parent == p and by_name[f"{p}-pg1"].parent == p  # by PodGroup name: group-0 first
    assert r.placement["s-0"] == (md.name, f"{p}-pg0-leader")
    assert r.placement["s-1-1"] == (md.name, f"{p}-pg1-workers")
    assert any("2 PodGroups" in n for n in r.notes)
    assert validate_pod_group(md) == []


def test_a_root_min_member_above_what_the_tree_needs_is_noted_as_not_carried() -> None:
    m = member("RayCluster", "rc", tree("pg-rc", {"head": ["h"], "workers": ["w0"]}, min_member=4))
    r = render([m, member("Job", "j", flat("pg-j", ["j0"]))])
    assert r.state == "Rendered"
    assert any("root minMember 4 not carried" in n and "needs 2 pods" in n for n in r.notes)


def test_long_member_and_sub_group_names_are_shortened_to_valid_labels_deterministically() -> None:
    long_leaf = "w" * 60
    m = member("RayCluster", "x" * 200, tree("pg-long", {long_leaf: ["p0"], "head": ["h"]}))
    r = render([m, member("Job", "j", flat("pg-j", ["j0"]))])
    assert r.state == "Rendered", r.errors
    assert r.pod_group is not None
    assert all(len(sg.name) <= 63 for sg in r.pod_group.sub_groups)
    assert validate_pod_group(r.pod_group) == []
    again = render([member("Job", "j", flat("pg-j", ["j0"])), m])
    assert again.pod_group is not None and again.pod_group.to_object() == r.pod_group.to_object()


def test_rendered_name_is_known_before_the_group_object_and_distinct_across_namespaces() -> None:
    name = rendered_name("team-a", "rl")
    assert name.startswith("wg-rl-") and is_subdomain(name)
    assert rendered_name("team-b", "rl") != name
    assert rendered_name("team-a", "rl") == name  # no uid involved: recreating the object keeps it
    assert is_subdomain(rendered_name("a" * 63, "b" * 63))


# ---------------------------------------------------------------- merge rules


def test_queues_must_agree_else_an_error_names_the_members() -> None:
    a = member("RayJob", "a", flat("pg-a", ["a0"], queue="team-a"))
    b = member("Deployment", "b", flat("pg-b", ["b0"], queue="team-b"))
    r = render([a, b])
    assert r.state == "Invalid" and r.pod_group is None
    (err,) = r.errors
    assert "different queues" in err and "RayJob team-a/a queue team-a" in err and "Deployment team-a/b queue team-b" in err


def test_priority_is_the_lowest_of_the_members_by_value() -> None:
    a = member("RayJob", "a", flat("pg-a", ["a0"], priority_class_name="inference"))
    b = member("Deployment", "b", flat("pg-b", ["b0"], priority_class_name="build"))
    r = render([a, b], spec=group(2, preemptibility="preemptible"))
    assert r.pod_group is not None and r.pod_group.priority_class_name == "build"
    assert "build=100" in r.pod_group.provenance["priorityClassName"]


def test_priority_set_on_the_group_wins() -> None:
    a = member("RayJob", "a", flat("pg-a", ["a0"], priority_class_name="inference"))
    b = member("Deployment", "b", flat("pg-b", ["b0"], priority_class_name="train"))
    r = render([a, b], spec=group(2, priority_class_name="inference"))
    assert r.pod_group is not None and r.pod_group.priority_class_name == "inference"


def test_differing_priorities_of_unknown_value_are_an_error_the_same_unknown_one_is_not() -> None:
    a = member("RayJob", "a", flat("pg-a", ["a0"], priority_class_name="gold"))
    b = member("Deployment", "b", flat("pg-b", ["b0"], priority_class_name="train"))
    r = render([a, b])
    assert r.state == "Invalid" and any("'gold' has no known value" in e for e in r.errors)
    same = render([a, member("Deployment", "b", flat("pg-b", ["b0"], priority_class_name="gold"))])
    assert same.state == "Rendered" and same.pod_group is not None and same.pod_group.priority_class_name == "gold"


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        (("", "train"), ("", "train"), ""),  # all derive it from priority: so does the group
        (("preemptible", "train"), ("", "train"), "preemptible"),
        (("preemptible", "train"), ("non-preemptible", "train"), "non-preemptible"),
        (("", "train"), ("", "inference"), "non-preemptible"),  # inference (125) is non-preemptible by priority
        (("semi-preemptible", "train"), ("preemptible", "train"), "semi-preemptible"),
        (("semi-preemptible", "train"), ("", "build"), "non-preemptible"),
    ],
)
def test_preemptibility_is_the_strictest_of_the_members(
    first: tuple[str, str], second: tuple[str, str], expected: str
) -> None:
    a = member("RayJob", "a", flat("pg-a", ["a0"], preemptibility=first[0], priority_class_name=first[1]))
    b = member("Deployment", "b", flat("pg-b", ["b0"], preemptibility=second[0], priority_class_name=second[1]))
    r = render([a, b])
    assert r.pod_group is not None, r.errors
    assert r.pod_group.preemptibility == expected


def test_preemptibility_set_on_the_group_wins_and_an_unknowable_strictest_is_an_error() -> None:
    a = member("RayJob", "a", flat("pg-a", ["a0"], preemptibility="non-preemptible"))
    b = member("Deployment", "b", flat("pg-b", ["b0"]))
    r = render([a, b], spec=group(2, preemptibility="preemptible"))
    assert r.pod_group is not None and r.pod_group.preemptibility == "preemptible"
    c = member("RayJob", "c", flat("pg-c", ["c0"], preemptibility="preemptible", priority_class_name="gold"))
    d = member("Deployment", "d", flat("pg-d", ["d0"], priority_class_name="gold"))
    bad = render([c, d])
    assert bad.state == "Invalid" and any("strictest preemptibility" in e for e in bad.errors)


def test_preemption_delay_is_the_minimum_and_staleness_grace_the_maximum_of_those_set() -> None:
    a = member("RayJob", "a", flat("pg-a", ["a0"], preemption_delay="5m0s", staleness_grace_period="1m0s"))
    b = member("Deployment", "b", flat("pg-b", ["b0"], preemption_delay="1m30s", staleness_grace_period="10m0s"))
    c = member("Job", "c", flat("pg-c", ["c0"]))
    r = render([a, b, c])
    assert r.pod_group is not None
    assert (r.pod_group.preemption_delay, r.pod_group.staleness_grace_period) == ("1m30s", "10m0s")


def test_a_negative_staleness_grace_disables_stale_eviction_for_the_group() -> None:
    a = member("RayJob", "a", flat("pg-a", ["a0"], staleness_grace_period="-1s"))
    b = member("Deployment", "b", flat("pg-b", ["b0"], staleness_grace_period="1h0m0s"))
    r = render([a, b])
    assert r.pod_group is not None and r.pod_group.staleness_grace_period == "-1s"


def test_delays_and_topology_set_on_the_group_win() -> None:
    a = member("RayJob", "a", flat("pg-a", ["a0"], preemption_delay="5m0s", staleness_grace_period="1m0s"))
    b = member("Deployment", "b", flat("pg-b", ["b0"]))
    zone = TopologyConstraint(topology="gpu", preferred_level="zone")
    r = render([a, b], spec=group(2, preemption_delay="10m0s", staleness_grace_period="2m0s", topology=zone))
    assert r.pod_group is not None
    assert (r.pod_group.preemption_delay, r.pod_group.staleness_grace_period) == ("10m0s", "2m0s")
    assert r.pod_group.spec()["topologyConstraint"] == zone.to_dict()


# ---------------------------------------------------------------- the gate and the errors


def test_until_complete_nothing_is_rendered_and_member_pods_name_the_unwritten_podgroup() -> None:
    trainer, reward = two_members()
    r = render([trainer, reward], spec=group(3))
    assert r.state == "Pending" and r.pod_group is None and r.errors == []
    assert r.pending == [f"WorkloadGroup {NS}/rl: 2 of 3 workloads present (Deployment {NS}/reward, RayJob {NS}/trainer)"]
    name = rendered_name(NS, "rl")
    assert r.placement == {p: (name, None) for p in ("r-0", "r-1", "t-head", "t-w0", "t-w1")}
    assert name in r.gate
    status = r.status()
    assert "renderedPodGroupRef" not in status
    assert status["conditions"][0]["reason"] == "WaitingForInputs"


def test_without_the_group_object_members_are_gated_by_the_same_name() -> None:
    trainer, reward = two_members()
    r = render_kai(NS, "rl", None, [trainer, reward], VALUES)
    assert r.state == "Pending" and "does not exist (yet)" in r.pending[0]
    assert set(r.placement.values()) == {(rendered_name(NS, "rl"), None)}


def test_a_member_without_pods_counts_but_keeps_the_group_pending() -> None:
    trainer, _ = two_members()
    empty = member("Deployment", "reward")
    r = render([trainer, empty])
    assert r.state == "Pending"
    assert r.pending == [f"WorkloadGroup {NS}/rl: Deployment {NS}/reward has no pods yet (its PodGroups are not known)"]


def test_more_workloads_than_expected_is_an_error_listing_them() -> None:
    trainer, reward = two_members()
    r = render([trainer, reward], spec=group(1))
    assert r.state == "Invalid"
    assert r.errors == [f"WorkloadGroup {NS}/rl: 2 workloads carry the annotation but spec.expectedWorkloads is 1: "
                        f"Deployment {NS}/reward, RayJob {NS}/trainer"]
    assert set(r.placement.values()) == {(rendered_name(NS, "rl"), None)}  # still gated


def test_a_member_claimed_by_two_groups_is_an_error() -> None:
    trainer, reward = two_members()
    r = render([replace(trainer, claims=frozenset({"other"})), reward])
    assert r.state == "Invalid"
    (err,) = r.errors
    assert f"RayJob {NS}/trainer is claimed by two groups: rl" in err and "other" in err


def test_a_member_the_grouper_does_not_handle_cannot_join() -> None:
    trainer, _ = two_members()
    grove = member("PodCliqueSet", "disagg", not_handled="its pods are not grouped by this grouper (SkipPodGrouper: x)")
    r = render([trainer, grove])
    assert r.state == "Invalid"
    assert any(f"PodCliqueSet {NS}/disagg cannot join" in e for e in r.errors)
    assert all(not p.startswith("disagg") for p in r.placement)  # its pods are left to whoever groups them


def test_failed_member_pods_and_other_namespaces_and_bad_group_objects_are_errors() -> None:
    trainer, reward = two_members()
    r = render([replace(trainer, failed_pods=("t-w2",)), reward])
    assert any("pod(s) t-w2 failed" in e for e in r.errors)
    other_ns = member("Job", "j", flat("pg-j", ["j0"], namespace="elsewhere"), namespace="elsewhere")
    r2 = render([trainer, other_ns])
    assert any("Job elsewhere/j is in another namespace" in e for e in r2.errors)
    r3 = render_kai(NS, "rl", None, [trainer, reward], VALUES, spec_error="WorkloadGroup team-a/rl: field spec: x")
    assert r3.state == "Invalid" and r3.errors == ["WorkloadGroup team-a/rl: field spec: x"] and r3.pending == []


def test_pods_outside_any_sub_group_of_a_tree_are_an_error_not_silently_dropped() -> None:
    pg = tree("pg-rc", {"head": ["h"], "workers": ["w0"]})
    pg.pods.append("stray")
    r = render([member("RayCluster", "rc", pg), member("Job", "j", flat("pg-j", ["j0"]))])
    assert r.state == "Invalid" and any("stray" in e and "no sub-group" in e for e in r.errors)


def test_the_same_member_given_twice_counts_once() -> None:
    trainer, reward = two_members()
    r = render([trainer, reward, trainer], spec=group(2))
    assert r.state == "Rendered" and len(r.members) == 2


def test_member_prefix_is_stable_whoever_else_joins() -> None:
    ref = owner("RayJob", "trainer")
    assert member_prefix("rl", ref) == member_prefix("rl", ref)
    assert member_prefix("rl", ref) != member_prefix("rl", owner("RayCluster", "trainer"))
    assert member_prefix("rl", ref).startswith("trainer-")


def test_priority_values_of_the_cached_priority_classes() -> None:
    from grouper.core.workload_group import priority_values

    classes = [{"metadata": {"name": "train"}, "value": 100}, {"metadata": {"name": "odd"}, "value": "high"},
               {"metadata": {"name": "flag"}, "value": True}, {"metadata": {"name": "none"}}]
    assert priority_values(classes) == {"train": 100}, "only integer values count (a bool is no priority)"
