"""``grouper describe KIND/NAME`` and ``grouper definitions --cluster`` against the local API server.

Pods are created by the real Job / ReplicaSet controllers (kube-controller-manager) and stay
Pending (no scheduler runs); the workload operators themselves (JobSet, ...) are not running, so
the test creates their child objects the way they would.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kube import Kube, KubeError, wait_until

from devtools.cluster import LocalCluster
from grouper.cli.main import main

pytestmark = pytest.mark.cluster


def pod_template(labels: dict[str, str], cpu: str = "100m", gpu: int = 0) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": cpu, "memory": "64Mi"}
    if gpu:
        requests["nvidia.com/gpu"] = gpu
    return {
        "metadata": {"labels": labels},
        "spec": {
            "schedulerName": "kai-scheduler",
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": requests, "limits": requests}}],
        },
    }


def describe(cluster: LocalCluster, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["describe", *argv, "--kubeconfig", cluster.kubeconfig_path])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_jobset_with_controller_created_pods(
    cluster: LocalCluster, kube: Kube, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ns = namespace
    js = kube.create(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "trainer"},
        "spec": {"replicatedJobs": [{"name": "worker", "replicas": 2, "template": {"spec": {
            "parallelism": 1, "completions": 1, "template": pod_template({}, gpu=1)}}}]},
    })
    owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "trainer",
             "uid": js["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    for i in range(2):  # what the JobSet controller would create
        labels = {"jobset.sigs.k8s.io/jobset-name": "trainer", "jobset.sigs.k8s.io/replicatedjob-name": "worker",
                  "jobset.sigs.k8s.io/job-index": str(i)}
        kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"trainer-worker-{i}", "labels": labels, "ownerReferences": [owner]},
            "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                     "template": pod_template(labels, gpu=1)},
        })
    # an unrelated pod in the same namespace is not attributed
    kube.create(f"/api/v1/namespaces/{ns}/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stray"},
                                                  "spec": pod_template({})["spec"]})
    wait_until(lambda: len(kube.list(f"/api/v1/namespaces/{ns}/pods", label_selector="jobset.sigs.k8s.io/jobset-name=trainer")) == 2,
               timeout=60, what="Job pods")

    code, out, err = describe(cluster, capsys, "jobset/trainer", "-n", ns, "-o", "json")
    assert code == 0, err
    data = json.loads(out)
    assert (data["kind"], data["name"], data["namespace"], data["fileMode"]) == ("JobSet", "trainer", ns, False)
    assert data["definition"] == "jobset-x-k8s-io-jobset-v1alpha2"
    assert data["phases"] == ["Initializing"]
    (rj,) = data["components"]
    assert rj["replicas"] == {"desired": 2, "current": 2, "ready": 0}
    (worker,) = rj["children"]
    assert worker["label"] == "worker" and len(worker["pods"]) == 2
    assert {(p["phase"], p["node"], p["ready"]) for p in worker["pods"]} == {("Pending", None, False)}
    assert data["resources"] == {"gpus": 2, "cpuMillis": 200, "memoryBytes": 2 * 64 * 2**20}
    assert "stray" not in out

    # lenient kind names, KIND NAME form, table output
    for kind in ("jobsets", "JobSet", "jobset.jobset.x-k8s.io", "jobsets.v1alpha2.jobset.x-k8s.io"):
        code, out, err = describe(cluster, capsys, kind, "trainer", "-n", ns)
        assert code == 0, (kind, err)
        assert out.startswith(f"JobSet/trainer   namespace: {ns}   definition: jobset-x-k8s-io-jobset-v1alpha2 ")
        assert "age: " in out.splitlines()[0] and "Phase: Initializing" in out


def test_deployment_pods_through_replicasets(
    cluster: LocalCluster, kube: Kube, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ns = namespace
    kube.create(f"/apis/apps/v1/namespaces/{ns}/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {**pod_template({"app": "web"}, cpu="250m"),
                              "spec": {**pod_template({})["spec"], "restartPolicy": "Always"}}},
    })
    wait_until(lambda: len(kube.list(f"/api/v1/namespaces/{ns}/pods", label_selector="app=web")) == 2,
               timeout=60, what="Deployment pods")
    code, out, err = describe(cluster, capsys, "deploy/web", "-n", ns, "-o", "json")
    assert code == 0, err
    data = json.loads(out)
    (row,) = data["components"]
    assert row["replicas"]["desired"] == 2 and row["replicas"]["current"] == 2 and len(row["pods"]) == 2


def test_describe_errors(cluster: LocalCluster, namespace: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = describe(cluster, capsys, "jobset/missing", "-n", namespace)
    assert code == 4 and f"JobSet {namespace}/missing not found" in err
    code, _, err = describe(cluster, capsys, "configmap/x", "-n", namespace)
    assert code == 3 and "no Karta definition covers" in err
    code, _, _ = describe(cluster, capsys, "dgd/nothing-here", "-n", namespace)  # two versions: preferred one
    assert code == 4


def karta(name: str, expr: str) -> dict[str, Any]:
    return {
        "apiVersion": "run.ai/v1alpha1", "kind": "Karta", "metadata": {"name": name},
        "spec": {"structureDefinition": {"rootComponent": {
            "name": "gizmo", "kind": {"group": "describe-test.example.com", "version": "v1", "kind": "Gizmo"},
            "statusDefinition": {"statusMappings": {}},
            "specDefinition": {"podTemplateSpecPath": ".spec.template"},
            "scaleDefinition": {"replicasPath": expr}}},
            "optimizationInstructions": {"gangScheduling": {"podGroup": {"name": "gizmo"}}}},
    }


@pytest.fixture
def cluster_kartas(kube: Kube) -> Iterator[tuple[str, str]]:
    good, bad = f"gizmo-{uuid.uuid4().hex[:8]}", f"gizmo-bad-{uuid.uuid4().hex[:8]}"
    kube.create("/apis/run.ai/v1alpha1/kartas", karta(good, ".spec.replicas // 1"))
    kube.create("/apis/run.ai/v1alpha1/kartas", karta(bad, ".spec.replicas |= 2"))
    yield good, bad
    for n in (good, bad):
        with contextlib.suppress(KubeError):
            kube.delete(f"/apis/run.ai/v1alpha1/kartas/{n}", ignore_missing=True)


def test_definitions_from_the_cluster(
    cluster: LocalCluster, cluster_kartas: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = cluster_kartas
    kc = ["--kubeconfig", cluster.kubeconfig_path]
    assert main(["definitions", "list", "--cluster", *kc, "-o", "json"]) == 0
    items = {i["name"]: i for i in json.loads(capsys.readouterr().out)["items"]}
    assert items[good]["origin"] == f"cluster:Karta/{good}" and items[good]["valid"] is True
    assert items[bad]["valid"] is False and items[bad]["source"] == "cluster"
    assert "jobset-x-k8s-io-jobset-v1alpha2" in items
    assert main(["definitions", "validate", "--cluster", *kc]) == 1
    out = capsys.readouterr().out
    assert f"OK: {good} (cluster:Karta/{good}) is a valid Karta definition" in out
    assert f"INVALID: {bad} (cluster:Karta/{bad}): " in out and "'.spec.replicas |= 2'" in out
