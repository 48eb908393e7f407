"""``grouper get workloads`` against the real API server: live through the kubeconfig, and from a
running grouper's ``GET /workloads`` (``--server``). A JobSet shaped like the Workload Map article's
(leader 1, workers 2, 4 GPUs per pod: 12 GPUs), a Deployment and a bare pod; the pods are created by the
real Job / ReplicaSet controllers (no scheduler runs, they stay Pending)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from controller.harness import GrouperThread, annotated, label_namespace
from kube import Kube, wait_until

from devtools.cluster import LocalCluster
from grouper.cli.main import main

pytestmark = pytest.mark.cluster

JOBSET = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"


def template(labels: dict[str, str], gpu: int) -> dict[str, Any]:
    requests = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpu}
    return {"metadata": {"labels": labels}, "spec": {
        "schedulerName": "kai-scheduler", "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": requests, "limits": requests}}]}}


def create_demo(kube: Kube, ns: str) -> dict[str, Any]:
    rjobs = [("leader", 1), ("worker", 2)]
    js = kube.create(JOBSET.format(ns=ns), {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "demo"},
        "spec": {"replicatedJobs": [{"name": rj, "replicas": n, "template": {"spec": {
            "parallelism": 1, "completions": 1, "template": template({}, 4)}}} for rj, n in rjobs]}})
    owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "demo",
             "uid": js["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    for rj, n in rjobs:
        for i in range(n):  # as the JobSet controller would
            labels = {"jobset.sigs.k8s.io/jobset-name": "demo", "jobset.sigs.k8s.io/replicatedjob-name": rj,
                      "jobset.sigs.k8s.io/job-index": str(i)}
            kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", {
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": f"demo-{rj}-{i}", "labels": labels, "ownerReferences": [owner]},
                "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": template(labels, 4)}})
    kube.create(f"/apis/apps/v1/namespaces/{ns}/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {**template({"app": "web"}, 1), "spec": {**template({}, 1)["spec"], "restartPolicy": "Always"}}}})
    kube.create(f"/api/v1/namespaces/{ns}/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "shell"},
                                                  "spec": template({}, 0)["spec"]})
    wait_until(lambda: len(kube.list(f"/api/v1/namespaces/{ns}/pods")) == 6, 60, what="6 pods")
    return js


def get(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["get", "workloads", *argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_get_workloads_live_through_the_kubeconfig(
    cluster: LocalCluster, kube: Kube, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    create_demo(kube, namespace)
    code, out, err = get(capsys, "-n", namespace, "--kubeconfig", cluster.kubeconfig_path)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "KIND", "PHASE", "STATE", "COMPONENTS", "GPU", "AGE"]
    rows = {line.split()[1]: line for line in lines[1:]}
    assert set(rows) == {"demo", "web", "shell"}  # the JobSet's Jobs and the Deployment's pods are not rows
    demo = rows["demo"].split("   ")
    assert [c.strip() for c in demo if c.strip()][:7] == [namespace, "demo", "JobSet", "Initializing", "-",
                                                          "leader(1), worker(2)", "12"]  # no PodGroup: no state
    code, out, err = get(capsys, "-n", namespace, "--kubeconfig", cluster.kubeconfig_path, "-o", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["count"] == 3
    by_name = {i["name"]: i for i in data["items"]}
    assert by_name["demo"]["components"] == [{"name": "leader", "replicas": 1}, {"name": "worker", "replicas": 2}]
    assert (by_name["demo"]["gpus"], by_name["demo"]["pods"]) == (12, 3)
    assert (by_name["web"]["kind"], by_name["web"]["gpus"], by_name["web"]["pods"]) == ("Deployment", 2, 2)
    assert (by_name["shell"]["kind"], by_name["shell"]["phases"]) == ("Pod", ["Initializing"])


def test_get_workloads_all_namespaces_and_empty(
    cluster: LocalCluster, kube: Kube, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    create_demo(kube, namespace)
    code, out, err = get(capsys, "-A", "--kubeconfig", cluster.kubeconfig_path, "-o", "json")
    assert code == 0, err
    assert {(i["namespace"], i["name"]) for i in json.loads(out)["items"]} >= {(namespace, "demo"), (namespace, "web")}
    code, out, err = get(capsys, "-n", "kube-public", "--kubeconfig", cluster.kubeconfig_path)
    assert (code, out) == (0, "") and "No workloads found in namespace kube-public." in err


def test_get_workloads_from_a_running_grouper(
    cluster: LocalCluster, kube: Kube, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    label_namespace(kube, namespace)
    with GrouperThread(cluster, namespace) as g:
        create_demo(kube, namespace)
        wait_until(lambda: annotated(kube, namespace, 6), 60, what="6 grouped pods")
        g.wait_idle(30)
        server = f"http://127.0.0.1:{g.service.http_port}"
        code, out, err = get(capsys, "-n", namespace, "--server", server, "-o", "json")
        assert code == 0, err
        by_name = {i["name"]: i for i in json.loads(out)["items"]}
        assert set(by_name) == {"demo", "web", "shell"}
        assert by_name["demo"]["components"] == [{"name": "leader", "replicas": 1}, {"name": "worker", "replicas": 2}]
        assert by_name["demo"]["gpus"] == 12 and by_name["demo"]["pods"] == 3
        assert by_name["web"]["pods"] == 2
        code, out, err = get(capsys, "-n", namespace, "--server", server)
        assert code == 0, err
        assert any(line.split()[:3] == [namespace, "demo", "JobSet"] and "leader(1), worker(2)" in line
                   for line in out.splitlines())
