"""The workload list (``grouper.describe.workloads``) over the catalog fixtures: one row per top-level
workload, components as the Resources rows (``leader(1), worker(4)``), GPUs, phase; the table layout."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from grouper.describe.workloads import list_workloads, render_workloads, summary_without_definition
from grouper.model.objects import GVK

from .workloads import catalog, evaluator, fixture

NOW = datetime(2026, 11, 20, 9, 19, 3, tzinfo=UTC)


def definitions(gvk: GVK) -> Any:
    defn = catalog().get(gvk)
    return (defn, evaluator(gvk)) if defn is not None else None


def docs(*rels: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    objs = [d for rel in rels for d in fixture(rel).documents]
    pods = [d for d in objs if d["kind"] == "Pod"]
    others = [d for d in objs if d["kind"] != "Pod"]
    return [*others, *pods], pods, others


def test_rows_per_top_level_workload_with_components_gpus_and_phase() -> None:
    candidates, pods, owners = docs("jobset/running.yaml", "leaderworkerset/running.yaml", "pod/running.yaml")
    items = list_workloads(candidates, pods, owners, definitions)
    rows = {(i.kind, i.name): i for i in items}
    # the JobSet's Jobs, the LWS's StatefulSets and every owned pod are parts, not rows
    assert set(rows) == {("JobSet", "trainer"), ("LeaderWorkerSet", "vllm-70b"), ("Pod", "debug-shell")}
    js = rows[("JobSet", "trainer")]
    assert (js.components_text, js.gpus, js.pods, js.phase) == ("leader(1), worker(4)", 4, 5, "Running")
    lws = rows[("LeaderWorkerSet", "vllm-70b")]
    assert (lws.components_text, lws.gpus) == ("leader(2), worker(6)", 64)  # both groups added up
    bare = rows[("Pod", "debug-shell")]
    assert (bare.components_text, bare.gpus, bare.pods) == ("pod(1)", 1, 1)


def test_an_object_served_under_two_versions_counts_once() -> None:
    candidates, pods, owners = docs("llminferenceservice/v1alpha1-running.yaml")
    twin = copy.deepcopy(candidates[0])
    twin["apiVersion"] = "serving.kserve.io/v1alpha2"
    items = list_workloads([candidates[0], twin, *candidates[1:]], pods, owners, definitions)
    assert [(i.kind, i.api_version) for i in items] == [("LLMInferenceService", "serving.kserve.io/v1alpha1")]
    assert items[0].components_text == "main(2), router-scheduler(1)" and items[0].gpus == 2


def test_kinds_without_a_definition_are_not_listed_live_but_can_be_summarized() -> None:
    wl = {"apiVersion": "kubeflow.org/v1", "kind": "XGBoostJob",
          "metadata": {"name": "xgb", "namespace": "ns", "uid": "u", "creationTimestamp": "2026-11-20T09:00:00Z"}}
    assert list_workloads([wl], [], [], definitions) == []
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "xgb-0", "namespace": "ns"},
           "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "2"}}}]}}
    row = summary_without_definition(wl, [pod, pod], "Running")
    assert (row.phase, row.components_text, row.gpus, row.pods) == ("Running", "-", 4, 2)


def test_table_layout() -> None:
    candidates, pods, owners = docs("jobset/running.yaml", "cronjob/pending.yaml")
    text = render_workloads(list_workloads(candidates, pods, owners, definitions), now=NOW)
    lines = text.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "KIND", "PHASE", "COMPONENTS", "GPU", "AGE"]
    cells = [[c.strip() for c in line.split("   ") if c.strip()] for line in lines[1:]]
    assert cells == [
        ["ml-team", "weekly-report", "CronJob", "Initializing", "cronjob(2)", "2", "5m"],
        ["ml-team", "trainer", "JobSet", "Running", "leader(1), worker(4)", "4", "5m"],
    ]
    assert not text.endswith("\n")


def test_a_pod_owned_by_a_non_controller_reference_is_part_of_its_owner_not_a_row() -> None:
    """The owner walk follows the first reference when none controls, so the pod belongs to the JobSet's
    workload; listing it as a bare-pod row too showed one pod as two workloads (hostile testing)."""
    _, pods, owners = docs("jobset/running.yaml", "pod/running.yaml")
    js = next(o for o in owners if o["kind"] == "JobSet")
    adopted = copy.deepcopy(next(p for p in pods if p["metadata"]["name"] == "debug-shell"))
    adopted["metadata"]["ownerReferences"] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                               "name": js["metadata"]["name"], "uid": js["metadata"]["uid"]}]
    items = list_workloads([*owners, adopted], [adopted], owners, definitions)
    assert {(i.kind, i.name) for i in items} == {("JobSet", "trainer")}
