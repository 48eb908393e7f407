"""kli v0.3 parity of ``grouper describe`` (Workload Map ``cli/pkg/generator/describe.go`` and its tests):
``--pod-limit N`` shows unhealthy pods first (a completed pod is not unhealthy) and notes
``... and K more (U unhealthy shown)`` / ``(U of T unhealthy shown)`` in the status column; a component's own
pods (and the note) come before its child components; ``Phase:`` names every matched phase; file mode says
``(file mode: no live status)``. Live: against the local API server with pods of a real ReplicaSet."""

from __future__ import annotations

import re
from typing import Any

import pytest
from kube import Kube, wait_until

from devtools.cluster import LocalCluster
from grouper.cli.main import main
from grouper.describe import render_table
from grouper.describe.resources import ZERO
from grouper.describe.view import ComponentNode, DescribeView, PodView, Replicas


def pv(name: str, phase: str = "Running", ready: bool = True, reason: str | None = None) -> PodView:
    return PodView(name, phase, ready, "node-1" if phase != "Pending" else None, reason, ZERO)


def view(**kw: Any) -> DescribeView:
    base: dict[str, Any] = {"name": "w", "namespace": "ns", "kind": "Widget", "api_version": "example.com/v1",
                            "created_at": None, "definition": "widgets", "origin": "cluster:Karta/widgets",
                            "phases": ["Running"], "file_mode": False}
    return DescribeView(**{**base, **kw})


def tree(text: str) -> list[str]:
    lines = text.splitlines()
    return lines[2:lines.index("", 2)]


def test_a_components_own_pods_come_before_its_children_and_the_note_keeps_the_branch_open() -> None:
    mid = ComponentNode("mid", "mid", replicas=Replicas(2, 2, 1),
                        pods=[pv("mid-0"), pv("mid-1", "Pending", False, "Unschedulable"), pv("mid-2")],
                        children=[ComponentNode("leaf", "leaf", replicas=Replicas(1, 1, 1), pods=[pv("leaf-0")])])
    lines = tree(render_table(view(components=[mid]), pod_limit=1))
    assert [re.split(r"(?<=\S)\s{3,}", line)[0] for line in lines] == [
        "`-- mid", "    |-- mid-1", "    |-- ...", "    `-- leaf", "        `-- leaf-0"]
    assert lines[2].split("...", 1)[1].strip() == "and 2 more (1 unhealthy shown)"
    # the note sits in the status column, aligned with the pods' status
    assert lines[2].index("and 2 more") == lines[1].index("Pending (Unschedulable)")


def test_unhealthy_first_completed_pods_are_not_unhealthy_and_the_total_is_named() -> None:
    worker = ComponentNode("worker", "worker", replicas=Replicas(3, 3, 0), pods=[
        pv("worker-0", "Succeeded", False, "PodCompleted"), pv("worker-1", "Succeeded", False, "PodCompleted"),
        pv("worker-2", "Pending", False, "Unschedulable")])
    lines = tree(render_table(view(components=[worker]), pod_limit=1))
    assert "worker-2" in lines[1] and lines[2].endswith("and 2 more (1 unhealthy shown)")
    failing = ComponentNode("worker", "worker", replicas=Replicas(3, 3, 0), pods=[
        pv(f"worker-{i}", "Pending", False, "Unschedulable") for i in range(3)])
    text = render_table(view(components=[failing]), pod_limit=1)
    assert re.search(r"`-- \.\.\. +and 2 more \(1 of 3 unhealthy shown\)$", text, re.M)
    assert "more (" not in render_table(view(components=[failing]), pod_limit=3)
    assert render_table(view(components=[failing]), pod_limit=0) == render_table(view(components=[failing]))


def test_every_matched_phase_and_file_mode() -> None:
    c = [ComponentNode("worker", "worker", replicas=Replicas(4, 0, 0))]
    assert "\nPhase: Running,Degraded\n" in render_table(view(components=c, phases=["Running", "Degraded"]))
    text = render_table(view(components=c, file_mode=True))
    assert text.splitlines()[1] == "(file mode: no live status)"
    assert "Phase:" not in text and "age:" not in text and "replicas: 4" in text


def _deployment(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "busybox"}]}}}}


def _run_ready(kube: Kube, ns: str, pod: str) -> None:
    """What kube-scheduler and a kubelet would do: bind the pod, report it Running and Ready."""
    kube.create(f"/api/v1/namespaces/{ns}/pods/{pod}/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}})
    kube.patch(f"/api/v1/namespaces/{ns}/pods/{pod}/status", {"status": {"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"},
        {"type": "ContainersReady", "status": "True"}]}}, type="strategic")


def test_pod_limit_live(cluster: LocalCluster, kube: Kube, namespace: str,
                        capsys: pytest.CaptureFixture[str]) -> None:
    kube.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", _deployment("web", 4))
    pods_path = f"/api/v1/namespaces/{namespace}/pods"
    wait_until(lambda: len(kube.list(pods_path, label_selector="app=web")) == 4, 60, what="the ReplicaSet's pods")
    names = sorted(p["metadata"]["name"] for p in kube.list(pods_path, label_selector="app=web"))
    for name in names[:2]:
        _run_ready(kube, namespace, name)
    code = main(["describe", "deployment/web", "-n", namespace, "--kubeconfig", cluster.kubeconfig_path,
                 "--pod-limit", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = tree(out)
    pending = [r for r in rows if "Pending" in r]
    assert len(pending) == 1 and pending[0].split()[1] in names[2:]  # an unhealthy pod took the one row
    assert rows[-1].split("...", 1)[1].strip() == "and 3 more (1 of 2 unhealthy shown)"
    assert not any(n in out for n in names[:2])  # the healthy ones are the hidden ones
    assert re.search(r"^Phase: \S+", out, re.M)
