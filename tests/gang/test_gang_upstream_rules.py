"""The rules of the upstream backend for how the scheduling.k8s.io API really behaves (pure parts of
grouper.core.upstream): versions from discovery, never minCount 0, the tree checked by us, mixed priorities,
fields the API server dropped, the admission condition under its old and new names."""

from __future__ import annotations

from typing import Any

from grouper.core.upstream import (
    UpstreamObjects,
    UpstreamVersions,
    choose_versions,
    dropped_fields,
    field_label,
    initially_scheduled,
    min_count,
    priority_warning,
    to_upstream,
    tree_errors,
)
from grouper.model.podgroup import OwnerRef, PodGroupMetadata, SubGroup, TopologyConstraint

V = UpstreamVersions("scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1beta1")
OWNER = OwnerRef("batch/v1", "Job", "train", "uid-1")
WL, PG, CPG = "Workload", "PodGroup", "CompositePodGroup"


def md(**kw: Any) -> PodGroupMetadata:
    return PodGroupMetadata(name="pg-train-uid-1", namespace="ns", owner=OWNER, **kw)


# ------------------------------------------------------------------ versions


def test_the_newest_version_serving_both_kinds_is_chosen() -> None:
    served = {"v1": {"PriorityClass"}, "v1beta1": {WL, PG}, "v1alpha3": {WL, PG, CPG}}
    choice = choose_versions(served)
    assert choice.versions == UpstreamVersions(
        "scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha3"
    )
    assert choice.partial == {} and choice.problem() is None
    ga = choose_versions({**served, "v1": {"PriorityClass", WL, PG}})
    assert ga.versions is not None and ga.versions.workload == ga.versions.pod_group == "scheduling.k8s.io/v1"


def test_a_partly_served_version_is_refused_never_mixed() -> None:
    # v1 serves Workload but not PodGroup: Workload v1 + PodGroup v1beta1 would be two versions
    choice = choose_versions({"v1": {WL}, "v1beta1": {WL, PG}})
    assert choice.versions == UpstreamVersions("scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1beta1")
    assert choice.partial == {"v1": WL}
    assert choice.partial_messages() == ["scheduling.k8s.io/v1 serves Workload but not PodGroup"]
    # only partly served versions: nothing is used, and the problem says why
    none = choose_versions({"v1": {WL}, "v1beta1": {PG}})
    assert none.versions is None
    problem = none.problem() or ""
    assert "v1 serves Workload but not PodGroup" in problem and "v1beta1 serves PodGroup but not Workload" in problem
    assert "refused rather than mixing" in problem


def test_no_workload_api_at_all_names_the_feature_gate() -> None:
    choice = choose_versions({"v1": {"PriorityClass"}})
    assert choice.versions is None and "GenericWorkload" in (choice.problem() or "")


def test_v1alpha2_of_1_36_names_the_template_with_pod_group_template_ref() -> None:
    old = UpstreamVersions("scheduling.k8s.io/v1alpha2", "scheduling.k8s.io/v1alpha2")
    choice = choose_versions({"v1alpha2": {WL, PG}})
    assert choice.versions == old
    out = to_upstream(md(min_member=2), old)
    (pg,) = out.pod_groups
    assert pg["spec"]["podGroupTemplateRef"] == {
        "workload": {"workloadName": "pg-train-uid-1", "podGroupTemplateName": "main"}
    }
    assert "workloadRef" not in pg["spec"] and out.errors == []


# ------------------------------------------------------------------ minCount never 0


def test_a_tree_that_admits_zero_pods_is_written_as_min_count_one_and_noted() -> None:
    subs = [SubGroup("a", min_member=0), SubGroup("b", min_member=0)]  # both replicatedJobs scaled to zero
    out = to_upstream(md(min_member=None, sub_groups=subs), V)
    assert min_count(out.pod_groups[0]) == 1
    assert out.workload["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {"gang": {"minCount": 1}}
    assert any("admits 0 pods: written as minCount 1" in n and "refuses minCount 0" in n for n in out.notes)


def test_min_member_zero_without_sub_groups_is_noted() -> None:
    out = to_upstream(md(min_member=0), V)
    assert min_count(out.pod_groups[0]) == 1
    assert any("minMember 0 written as minCount 1" in n for n in out.notes)


# ------------------------------------------------------------------ the tree, checked by us


def test_a_sub_group_with_a_missing_parent_is_an_error_naming_the_field() -> None:
    subs = [SubGroup("workers", min_member=2, parent="leader")]  # "leader" does not exist
    out = to_upstream(md(min_member=None, sub_groups=subs), V)
    assert out.errors == [
        "PodGroup ns/pg-train-uid-1: spec.subGroups[0] (workers).parent 'leader' names no sub-group"
    ]


def test_a_parent_cycle_is_an_error() -> None:
    subs = [SubGroup("a", min_sub_group=1, parent="b"), SubGroup("b", min_sub_group=1, parent="a")]
    out = to_upstream(md(min_member=None, sub_groups=subs), V)
    assert any("spec.subGroups[0] (a).parent: a parent cycle" in e for e in out.errors)


def _objs(pod_groups: list[dict[str, Any]], composites: list[dict[str, Any]] | None = None) -> UpstreamObjects:
    wl = {"kind": WL, "metadata": {"name": "w"},
          "spec": {"podGroupTemplates": [{"name": "main", "schedulingPolicy": {"gang": {"minCount": 1}}}]}}
    return UpstreamObjects(wl, pod_groups, {}, composite_pod_groups=composites or [])


def _pg(name: str, parent: str | None = None, count: int = 1, template: str = "main") -> dict[str, Any]:
    spec: dict[str, Any] = {"workloadRef": {"workloadName": "w", "templateName": template},
                            "schedulingPolicy": {"gang": {"minCount": count}}}
    if parent:
        spec["parentCompositePodGroupName"] = parent
    return {"kind": PG, "metadata": {"name": name}, "spec": spec}


def _cpg(name: str, parent: str | None = None) -> dict[str, Any]:
    spec = {"parentCompositePodGroupName": parent} if parent else {}
    return {"kind": CPG, "metadata": {"name": name}, "spec": spec}


def test_tree_errors_name_the_object_and_the_field() -> None:
    assert tree_errors(_objs([_pg("leaf", "root")], [_cpg("root")])) == []
    assert tree_errors(_objs([_pg("leaf", "gone")])) == [
        "PodGroup leaf: spec.parentCompositePodGroupName 'gone' names no CompositePodGroup of this workload"
    ]
    assert tree_errors(_objs([_pg("leaf", count=0)])) == [
        "PodGroup leaf: spec.schedulingPolicy.gang.minCount 0 must be at least 1"
    ]
    assert tree_errors(_objs([_pg("leaf", template="other")])) == [
        "PodGroup leaf: spec.workloadRef template 'other' is not a template of Workload w"
    ]
    cycle = tree_errors(_objs([], [_cpg("a", "b"), _cpg("b", "a")]))
    assert "CompositePodGroup a: spec.parentCompositePodGroupName: a parent cycle through 'a'" in cycle
    deep = _objs([_pg("leaf", "c3")], [_cpg("c0"), _cpg("c1", "c0"), _cpg("c2", "c1"), _cpg("c3", "c2")])
    assert tree_errors(deep) == ["PodGroup leaf: spec.parentCompositePodGroupName: 5 levels deep, at most 4"]


# ------------------------------------------------------------------ priorities


def _pod(name: str, cls: str = "", priority: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"priorityClassName": cls} if cls else {}
    if priority is not None:
        spec["priority"] = priority
    return {"metadata": {"name": name}, "spec": spec}


def test_pods_of_one_gang_with_different_priorities_are_a_warning() -> None:
    assert priority_warning("g", [_pod("a", "train"), _pod("b", "train")]) is None
    w, event = priority_warning("g", [_pod("a", "train"), _pod("b", "train"), _pod("c", "urgent")]) or ("", "")
    assert w.startswith("Warning: the pods of PodGroup g have 2 different priorities")
    assert "train: 2 pod(s) (a, b)" in w and "urgent: 1 pod(s) (c)" in w and "none of them is placed" in w
    # the Event's message names the priorities only: the same while pods of them come and go (one Event)
    assert event == priority_warning("g", [_pod("x", "urgent"), _pod("y", "train")])[1]  # type: ignore[index]
    assert "(train, urgent)" in event and "pod(s)" not in event
    # the same class name with a different resolved value (the class was recreated) differs too
    assert priority_warning("g", [_pod("a", "train", 100), _pod("b", "train", 200)]) is not None
    assert priority_warning("g", [_pod("a"), _pod("b", "train")]) is not None


# ------------------------------------------------------------------ dropped fields


def test_dropped_fields_are_what_was_sent_and_not_stored() -> None:
    sent = {"metadata": {"name": "x"}, "spec": {
        "schedulingPolicy": {"gang": {"minCount": 2}},
        "schedulingConstraints": {"topology": [{"key": "rack"}]},
        "controllerRef": {"apiGroup": "", "kind": "Pod"},
        "templates": [{"name": "main", "schedulingConstraints": {"topology": [{"key": "rack"}]}}],
    }}
    stored = {"metadata": {"name": "x", "uid": "u"}, "spec": {
        "schedulingPolicy": {"gang": {"minCount": 2}},
        "controllerRef": {"kind": "Pod"},  # an empty apiGroup omitted is not a drop
        "disruptionMode": {"single": {}},  # defaulted by the server: not a drop either
        "templates": [{"name": "main", "schedulingConstraints": None}],
    }}
    assert dropped_fields(sent, stored) == ["spec.schedulingConstraints", "spec.templates[0].schedulingConstraints"]
    assert dropped_fields(sent, sent) == []
    assert field_label("spec.templates[0].schedulingConstraints") == "spec.templates.schedulingConstraints"


def test_required_topology_level_is_sent_as_scheduling_constraints() -> None:
    out = to_upstream(md(min_member=2, topology=TopologyConstraint("default", "rack", "host")), V)
    assert out.pod_groups[0]["spec"]["schedulingConstraints"] == {"topology": [{"key": "rack"}]}
    assert out.workload["spec"]["podGroupTemplates"][0]["schedulingConstraints"] == {"topology": [{"key": "rack"}]}
    (note,) = [n for n in out.notes if "topologyConstraint" in n]
    assert "preferredTopologyLevel" in note and "requiredTopologyLevel 'rack' is carried" in note


# ------------------------------------------------------------------ the admission condition


def test_initially_scheduled_is_the_admission_signal_and_the_old_name_is_read_for_1_36() -> None:
    def pg(*conds: tuple[str, str, str]) -> dict[str, Any]:
        return {"status": {"conditions": [{"type": t, "status": s, "reason": r} for t, s, r in conds]}}

    assert initially_scheduled(pg()) == ("", "")
    assert initially_scheduled(pg(("PodGroupInitiallyScheduled", "True", "Scheduled"))) == ("True", "Scheduled")
    assert initially_scheduled(pg(("PodGroupScheduled", "False", "Unschedulable"))) == ("False", "Unschedulable")
    both = pg(("PodGroupScheduled", "False", "Unschedulable"), ("PodGroupInitiallyScheduled", "True", "Scheduled"))
    assert initially_scheduled(both) == ("True", "Scheduled")  # the new name wins
    assert initially_scheduled(pg(("DisruptionTarget", "True", "PreemptionByScheduler"))) == ("", "")
