"""Incremental reconciles against the real API server: a pod that joins an already decided workload is
decided alone (its siblings keep their decisions and the PodGroup is not written), while a change to an
object the decisions read decides every pod again. Observed through
``podgrouper_pod_decisions_total{path}``, the PodGroup and the pods' marks — what an operator sees.

The test plays the training operator: it creates the PyTorchJob and its pods itself (no controller of
that kind runs here), so nothing else touches the pods and the counts are exact."""

from __future__ import annotations

from typing import Any

from controller.harness import (
    ANNOTATION,
    SUBGROUP,
    GrouperThread,
    annotated,
    job_pod_spec,
    pod_groups,
)
from kube import Kube, wait_until

PYTORCH = "/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"
SELECTOR = "training.kubeflow.org/job-name=train"



def decisions(g: GrouperThread, path: str) -> float:
    value = g.metrics.registry.get_sample_value("podgrouper_pod_decisions_total", {"path": path})
    return value or 0.0


def pytorchjob(workers: int) -> dict[str, Any]:
    def replica(n: int) -> dict[str, Any]:
        return {"replicas": n, "template": {"spec": job_pod_spec()}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "train"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}},
    }


def replica_pod(owner: dict[str, Any], rtype: str, index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"train-{rtype}-{index}",
            "labels": {
                "training.kubeflow.org/job-name": "train",
                "training.kubeflow.org/replica-type": rtype,
                "training.kubeflow.org/replica-index": str(index),
            },
            "ownerReferences": [
                {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "train",
                 "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
            ],
        },
        "spec": job_pod_spec(),
    }


def test_a_new_pod_is_decided_alone_and_an_owner_change_decides_all(
    kube: Kube, scoped: str, grouper: GrouperThread
) -> None:
    ns = scoped
    owner = kube.create(PYTORCH.format(ns=ns), pytorchjob(3))
    for rtype, index in (("master", 0), ("worker", 0), ("worker", 1)):
        kube.create(f"/api/v1/namespaces/{ns}/pods", replica_pod(owner, rtype, index))
    name = f"pg-train-{owner['metadata']['uid']}"
    ps = wait_until(lambda: annotated(kube, ns, 3, SELECTOR), 30, what="3 annotated pods")
    assert {p["metadata"]["annotations"][ANNOTATION] for p in ps} == {name}
    grouper.wait_idle()
    full, incremental = decisions(grouper, "full"), decisions(grouper, "incremental")
    assert full + incremental == 3, "each pod decided once while they arrived"
    pg_version = pod_groups(kube, ns)[name]["metadata"]["resourceVersion"]

    # the last worker arrives: it alone is decided, placed into the decided PodGroup, and patched
    kube.create(f"/api/v1/namespaces/{ns}/pods", replica_pod(owner, "worker", 2))
    ps = wait_until(lambda: annotated(kube, ns, 4, SELECTOR), 30, what="the new worker annotated")
    grouper.wait_idle()
    assert (decisions(grouper, "full"), decisions(grouper, "incremental")) == (full, incremental + 1)
    assert pod_groups(kube, ns)[name]["metadata"]["resourceVersion"] == pg_version, "PodGroup not rewritten"
    new = next(p for p in ps if p["metadata"]["name"] == "train-worker-2")
    assert new["metadata"]["annotations"][ANNOTATION] == name
    assert new["metadata"]["labels"].get(SUBGROUP) == next(
        p for p in ps if p["metadata"]["name"] == "train-worker-0")["metadata"]["labels"].get(SUBGROUP)

    # a label on the PyTorchJob (copied to its PodGroup): every decision read it, so all four are redone
    kube.patch(f"{PYTORCH.format(ns=ns)}/train", {"metadata": {"labels": {"team": "vision"}}})
    wait_until(
        lambda: pod_groups(kube, ns)[name]["metadata"].get("labels", {}).get("team") == "vision",
        30,
        what="the owner's new label on its PodGroup",
    )
    grouper.wait_idle()
    assert decisions(grouper, "full") == full + 4
    assert decisions(grouper, "incremental") == incremental + 1
