"""Membership from the grouper's own plans (``grouper.core.workload_group_members.collect`` via ``plan``): the
top owner's annotation, a second claim on an owner in between, a member whose pods the grouper does not group,
annotations that name no valid group, and workloads without pods yet."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from grouper.cli.commands.plan import _defaulted
from grouper.core.config import GroupingConfig
from grouper.core.plan import PlanResult, plan
from grouper.karta import DefinitionRegistry
from grouper.runtime.composition import build_grouper

REPO = Path(__file__).resolve().parents[2]
RL = [d for d in yaml.safe_load_all((REPO / "examples/workload-groups/rl-post-training.yaml").read_text()) if d]
GROUPER = build_grouper(GroupingConfig(), DefinitionRegistry(REPO / "definitions"))
ANNOTATION = "kai.scheduler/workload-group"


def run(docs: list[dict[str, Any]]) -> PlanResult:
    return plan([_defaulted(d, "default") for d in docs], GROUPER)


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def test_an_annotation_on_an_owner_in_between_naming_another_group_is_a_second_claim() -> None:
    docs = copy.deepcopy(RL)
    cluster = find(docs, "RayCluster", "ray-batch-infer-raycluster-f7d2k")  # owned by the annotated RayJob
    cluster["metadata"].setdefault("annotations", {})[ANNOTATION] = "other-loop"
    result = run(docs)
    (group,) = result.workload_groups
    assert group.state == "Invalid"
    assert any("RayJob team-a/ray-batch-infer is claimed by two groups: rl-post-training" in e and "other-loop" in e
               for e in group.errors)
    # the same value on the owner in between is no conflict
    cluster["metadata"]["annotations"][ANNOTATION] = "rl-post-training"
    assert run(docs).workload_groups[0].state == "Rendered"


def test_a_member_whose_pods_the_grouper_does_not_group_cannot_join() -> None:
    docs = copy.deepcopy(RL)
    for d in docs:  # the Deployment's pods go to another scheduler: someone else groups them, if anyone
        if d["kind"] == "Pod" and d["metadata"]["name"].startswith("llm-chat"):
            d["spec"]["schedulerName"] = "default-scheduler"
    result = run(docs)
    (group,) = result.workload_groups
    assert group.state == "Invalid"
    assert any("Deployment team-a/llm-chat cannot join: its pods are not grouped by this grouper (OtherScheduler"
               in e for e in group.errors)
    places = {d.pod_name: result.place_of(d) for d in result.decisions}
    assert places["llm-chat-7d9c8b6f5d-2xk9p"] == (None, None), "its pods are left alone"
    assert places["ray-train-head-7kq2x"] == (group.pod_group_name, None), "the others stay gated"


def test_an_annotation_that_names_no_valid_group_is_reported_and_the_workload_planned_alone() -> None:
    docs = [d for d in copy.deepcopy(RL) if d["kind"] != "WorkloadGroup"]
    find(docs, "Deployment", "llm-chat")["metadata"]["annotations"][ANNOTATION] = "Not A Name"
    result = run(docs)
    assert any(e.startswith('Deployment team-a/llm-chat: field metadata.annotations["kai.scheduler/workload-group"]')
               for e in result.membership_errors)
    assert "pg-llm-chat-5c1b2a3e-0000-4000-8000-000000000401" in {g.metadata.name for g in result.pod_groups}
    (group,) = result.workload_groups  # the other two still name rl-post-training
    assert len(group.members) == 2


def test_a_workload_without_pods_counts_towards_the_group_but_keeps_it_pending() -> None:
    docs = [d for d in copy.deepcopy(RL) if not (d["kind"] == "Pod" and d["metadata"]["name"].startswith("llm-chat"))]
    (group,) = run(docs).workload_groups
    assert group.state == "Pending"
    assert group.pending == ["WorkloadGroup team-a/rl-post-training: Deployment team-a/llm-chat has no pods yet "
                             "(its PodGroups are not known)"]
    assert len(group.members) == 3


def test_a_workloadgroup_without_members_is_pending_with_none_present() -> None:
    wg_obj = next(d for d in RL if d["kind"] == "WorkloadGroup")
    result = run([wg_obj])
    (group,) = result.workload_groups
    assert group.state == "Pending" and group.pending == [
        "WorkloadGroup team-a/rl-post-training: 0 of 3 workloads present (none)"]


def test_plans_without_groups_are_unchanged() -> None:
    docs = [d for d in copy.deepcopy(RL) if d["kind"] != "WorkloadGroup"]
    for d in docs:
        d["metadata"].get("annotations", {}).pop(ANNOTATION, None)
    result = run(docs)
    assert result.workload_groups == [] and result.group_placement == {}
    assert "workloadGroups" not in result.to_json()
    assert len(result.pod_groups) == 3
