"""``grouper describe`` in kli's layout (Workload Map v0.2.9 ``cli/pkg/generator/describe.go``):
Resources rows per instance, pod reasons only for pods that are not ready (``Running
(ContainersNotReady)``), node lists joined with ``,``, ``namespace: <none>``, the pod-limit note in the
status column."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from grouper.describe import build_describe, render_table
from grouper.describe.build import pod_view
from grouper.model.objects import GVK

from .workloads import catalog, evaluator, fixture

NOW = datetime(2026, 11, 20, 9, 19, 3, tzinfo=UTC)


def _pod(phase: str, conditions: list[dict[str, Any]], **status: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": phase, "conditions": conditions, **status}}


def test_running_not_ready_pod_says_ContainersNotReady() -> None:
    p = _pod("Running", [{"type": "PodScheduled", "status": "True"},
                         {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
             containerStatuses=[{"name": "c", "ready": False, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}])
    v = pod_view(p)
    assert (v.phase, v.reason) == ("Running", "ContainersNotReady")


def test_ready_pod_has_no_reason_and_scheduler_reason_comes_first() -> None:
    assert pod_view(_pod("Running", [{"type": "Ready", "status": "True"}])).reason is None
    pending = _pod("Pending", [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
                               {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}])
    assert pod_view(pending).reason == "Unschedulable"
    evicted = _pod("Failed", [{"type": "Ready", "status": "False", "reason": "PodFailed"}], reason="Evicted")
    assert pod_view(evicted).reason == "Evicted"


def test_container_reason_where_kli_prints_nothing() -> None:
    p = _pod("Pending", [], containerStatuses=[{"name": "c", "state": {"waiting": {"reason": "ErrImagePull"}}}])
    assert pod_view(p).reason == "ErrImagePull"


def _jobset_describe() -> Any:
    """The running JobSet fixture: leader 1 (no GPU), worker 4 pods with 1 GPU each."""
    fx = fixture("jobset/running.yaml")
    js = copy.deepcopy(fx.workload)
    defn = catalog()[GVK.of(js)]
    pods = [d for d in fx.documents[1:] if d["kind"] == "Pod"]
    return build_describe(defn, evaluator(defn.gvk), js, pods, file_mode=False,
                          objects=[d for d in fx.documents[1:] if d["kind"] != "Pod"])


def test_resources_table_has_one_row_per_instance() -> None:
    text = render_table(_jobset_describe(), now=NOW)
    lines = text.splitlines()
    i = lines.index("Resources:")
    assert [line.split()[:3] for line in lines[i + 1:]] == [
        ["COMPONENT", "REPLICAS", "GPU"], ["leader", "1", "0"], ["worker", "4", "4"], ["TOTAL", "5", "4"]]


def test_node_lists_are_joined_with_commas() -> None:
    view = _jobset_describe()
    (rj,) = view.components
    assert len(rj.nodes) > 1
    line = next(line for line in render_table(view, now=NOW).splitlines() if line.startswith("`-- replicatedjob"))
    assert line.endswith(",".join(rj.nodes))


def test_header_names_a_missing_namespace_none() -> None:
    view = _jobset_describe()
    view.namespace = ""
    assert "   namespace: <none>   " in render_table(view, now=NOW).splitlines()[0]


def test_a_bare_pod_describes_itself() -> None:
    fx = fixture("pod/running.yaml")
    defn = catalog()[GVK.of(fx.workload)]
    view = build_describe(defn, evaluator(defn.gvk), fx.workload, [], file_mode=False)
    (row,) = view.components
    assert [p.name for p in row.pods] == ["debug-shell"] and row.replicas.ready == 1
    assert [(r.component, r.replicas, r.resources.gpus) for r in view.resource_table] == [("pod", 1, 1)]
