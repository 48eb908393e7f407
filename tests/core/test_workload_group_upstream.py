"""A rendered WorkloadGroup for the upstream backend: a CompositePodGroup with one child PodGroup per member,
or one flattened gang (with the loss stated) where CompositePodGroup is not served."""

from __future__ import annotations

import pytest
from wg_builders import NS, VALUES, flat, group, member, tree

from grouper.core.upstream import UpstreamVersions, min_count, tree_min_count
from grouper.core.workload_group import member_prefix, render_kai, rendered_name
from grouper.core.workload_group_upstream import COMPOSITE_VERSION, render_upstream

V = UpstreamVersions("scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1beta1")


def rendered(n_members: int = 2):  # type: ignore[no-untyped-def]
    ms = [
        member("RayCluster", "rollout", tree("pg-rollout", {"head": ["h"], "workers": ["w0", "w1"]})),
        member("Deployment", "reward", flat("pg-reward", ["r0", "r1"], priority_class_name="inference")),
        member("LeaderWorkerSet", "serve",
               tree("pg-serve-group-0", {"leader": ["s0"], "workers": ["s0-1"]}, min_member=2),
               tree("pg-serve-group-1", {"leader": ["s1"], "workers": ["s1-1"]}, min_member=2)),
    ][:n_members]
    r = render_kai(NS, "rl", group(len(ms), preemption_delay="5m0s"), ms, VALUES)
    assert r.state == "Rendered", r.errors
    return r, ms


def test_composite_with_one_child_podgroup_per_member() -> None:
    r, ms = rendered(3)
    u = render_upstream(r, V, COMPOSITE_VERSION)
    name = rendered_name(NS, "rl")
    owner = [{"apiVersion": "grouper.kai-pod-grouper.io/v1alpha1", "kind": "WorkloadGroup", "name": "rl",
              "uid": "uid-group"}]
    assert u.composite == {
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": {"name": name, "namespace": NS, "ownerReferences": owner},
        "spec": {"workloadRef": {"workloadName": name, "templateName": "group"},
                 "schedulingPolicy": {"gang": {"minGroupCount": 3}}, "priorityClassName": "train"},
    }
    prefixes = [member_prefix("rl", m.ref) for m in sorted(ms, key=lambda m: m.sort_key)]
    templates = u.workload["spec"]["compositePodGroupTemplates"]
    assert [t["name"] for t in templates[0]["podGroupTemplates"]] == prefixes
    assert templates[0]["schedulingPolicy"] == {"gang": {"minGroupCount": 3}}
    assert u.workload["spec"]["controllerRef"] == {"apiGroup": "grouper.kai-pod-grouper.io", "kind": "WorkloadGroup",
                                                   "name": "rl"}
    counts = {pg["spec"]["workloadRef"]["templateName"]: min_count(pg) for pg in u.pod_groups}
    deployment, serve, rollout = prefixes  # same API group: by kind (Deployment, LeaderWorkerSet, RayCluster)
    assert counts == {deployment: 2, rollout: 3, serve: 4}  # flat 2; head 1 + workers 2; two LWS groups of 2
    for pg in u.pod_groups:
        assert pg["spec"]["parentCompositePodGroupName"] == name
        assert pg["metadata"]["name"] == f"{name}-{pg['spec']['workloadRef']['templateName']}"
        assert pg["metadata"]["ownerReferences"] == owner
        assert pg["spec"]["priorityClassName"] == "train"  # one priority for every pod of the gang
    assert u.placement == {
        "r0": f"{name}-{deployment}", "r1": f"{name}-{deployment}",
        "h": f"{name}-{rollout}", "w0": f"{name}-{rollout}", "w1": f"{name}-{rollout}",
        "s0": f"{name}-{serve}", "s0-1": f"{name}-{serve}", "s1": f"{name}-{serve}", "s1-1": f"{name}-{serve}",
    }
    assert any("queue 'q' not carried" in n for n in u.notes)
    assert any("preemptionDelay 5m0s not carried" in n for n in u.notes)
    assert any(n.startswith(f"member {serve}: ") and "sub-groups not carried" in n for n in u.notes)


def test_flattened_where_composite_is_not_served_with_the_loss_stated() -> None:
    r, _ = rendered(3)
    u = render_upstream(r, V, None)
    assert u.composite is None
    (pg,) = u.pod_groups
    assert r.pod_group is not None
    assert min_count(pg) == tree_min_count(r.pod_group) == 9
    assert pg["metadata"]["name"] == u.workload["metadata"]["name"] == rendered_name(NS, "rl")
    assert "does not serve CompositePodGroup" in u.notes[0] and "minCount 9" in u.notes[0]
    assert set(u.placement.values()) == {rendered_name(NS, "rl")} and len(u.placement) == 9


def test_more_members_than_templates_flatten_too() -> None:
    ms = [member("Job", f"j{i}", flat(f"pg-j{i}", [f"j{i}-0"])) for i in range(9)]
    r = render_kai(NS, "rl", group(9), ms, VALUES)
    u = render_upstream(r, V, COMPOSITE_VERSION)
    assert u.composite is None and "9 members exceed the 8 templates" in u.notes[0]
    assert min_count(u.pod_groups[0]) == 9


def test_only_a_rendered_group_has_upstream_objects() -> None:
    ms = [member("Job", "j", flat("pg-j", ["j0"]))]
    pending = render_kai(NS, "rl", group(2), ms, VALUES)
    with pytest.raises(ValueError, match="not rendered"):
        render_upstream(pending, V)


def test_a_missing_priority_class_is_left_out_and_noted() -> None:
    r, _ = rendered(2)
    u = render_upstream(r, V, COMPOSITE_VERSION, priority_class_exists=False)
    assert all("priorityClassName" not in pg["spec"] for pg in u.pod_groups)
    assert u.composite is not None and "priorityClassName" not in u.composite["spec"]
    assert any("priorityClassName 'train' not carried" in n for n in u.notes)


def test_stray_pods_and_the_status_of_stored_objects() -> None:
    """What the controller's upstream pass derives from the rendered objects: member pods that joined another
    group at creation (they cannot move), and the status that names what is stored."""
    from grouper.core.workload_group_upstream import stored_status, stray_pods

    r, _ = rendered(2)
    u = render_upstream(r, V, COMPOSITE_VERSION)
    name = rendered_name(NS, "rl")
    pods = {p: {"metadata": {"name": p}, "spec": {"schedulingGroup": {"podGroupName": want}}}
            for p, want in u.placement.items()}
    pods["r1"]["spec"]["schedulingGroup"] = {"podGroupName": "another"}
    del pods["h"]["spec"]["schedulingGroup"]
    assert stray_pods(u, pods.get) == ["h", "r1"]
    status = r.status()
    stored_status(status, u, name)
    assert status["renderedPodGroupRef"] == {"apiVersion": COMPOSITE_VERSION, "kind": "CompositePodGroup", "name": name}
    flattened = render_upstream(r, V, None)
    status = r.status()
    stored_status(status, flattened, name)
    assert status["renderedPodGroupRef"]["kind"] == "PodGroup"
    assert status["conditions"][1]["message"].endswith(f"; {flattened.notes[0]}"), "the loss is stated"


def test_a_pod_left_behind_by_its_group() -> None:
    """A pod of a workload that left the group and still names one of its PodGroups: recreated by its
    controller when not bound yet; a bare pod is only said; finished, bound or elsewhere: nothing to do."""
    from grouper.core.workload_group_upstream import left_behind

    rendered = rendered_name(NS, "rl")
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}]

    def pod(group: str, *, owners: list[dict[str, object]] = owner, node: str = "", phase: str = "Pending"
            ) -> dict[str, object]:
        return {"metadata": {"name": "p", "ownerReferences": owners},
                "spec": {"schedulingGroup": {"podGroupName": group}, **({"nodeName": node} if node else {})},
                "status": {"phase": phase}}

    assert left_behind(pod(f"{rendered}-trainer"), rendered) == "recreate"
    assert left_behind(pod(f"{rendered}-trainer", owners=[]), rendered) == "bare"
    assert left_behind(pod(f"{rendered}-trainer", node="n1"), rendered) is None, "bound: it keeps running"
    assert left_behind(pod(f"{rendered}-trainer", phase="Succeeded"), rendered) is None
    assert left_behind(pod("pg-own"), rendered) is None
