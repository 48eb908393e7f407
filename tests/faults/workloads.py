"""Workloads for the fault tests: PyTorchJobs whose pods the test creates as the training operator would
(no operator runs here), in bulk and in parallel."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kube import Kube

PTJ = "/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"
PODS = "/api/v1/namespaces/{ns}/pods"
PGS = "/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups"
ANNOTATION = "pod-group-name"
SUBGROUP = "kai.scheduler/subgroup-name"


def pytorchjob(name: str, workers: int) -> dict[str, Any]:
    def replica(n: int) -> dict[str, Any]:
        return {"replicas": n, "template": {"spec": {"schedulerName": "kai-scheduler",
                                                     "containers": [{"name": "pytorch", "image": "x"}]}}}

    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}}}


def pods_of(job: dict[str, Any]) -> list[dict[str, Any]]:
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    workers = job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    out = []
    for rtype, count in (("master", 1), ("worker", workers)):
        for i in range(count):
            out.append({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{rtype}-{i}",
                    "labels": {"training.kubeflow.org/job-name": name,
                               "training.kubeflow.org/replica-type": rtype,
                               "training.kubeflow.org/replica-index": str(i)},
                    "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": name,
                                         "uid": uid, "controller": True, "blockOwnerDeletion": True}],
                },
                "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "pytorch", "image": "x"}]},
            })
    return out


def create_jobs(kube: Kube, ns: str, names: list[str], workers: int, threads: int = 16) -> list[dict[str, Any]]:
    with ThreadPoolExecutor(threads) as ex:
        return list(ex.map(lambda n: kube.create(PTJ.format(ns=ns), pytorchjob(n, workers)), names))


def create_pods(kube: Kube, ns: str, pods: list[dict[str, Any]], threads: int = 16) -> None:
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(lambda p: kube.create(PODS.format(ns=ns), p), pods))


def pod_groups(kube: Kube, ns: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in kube.list(PGS.format(ns=ns))}


def pods(kube: Kube, ns: str) -> list[dict[str, Any]]:
    return kube.list(PODS.format(ns=ns))


def marks(pod: dict[str, Any]) -> tuple[str | None, str | None]:
    m = pod["metadata"]
    return (m.get("annotations") or {}).get(ANNOTATION), (m.get("labels") or {}).get(SUBGROUP)


def resource_versions(kube: Kube, ns: str) -> dict[str, str]:
    """kind/name -> resourceVersion of every pod and PodGroup in the namespace (the server's write count)."""
    out = {f"pod/{p['metadata']['name']}": p["metadata"]["resourceVersion"] for p in pods(kube, ns)}
    out.update({f"pg/{n}": pg["metadata"]["resourceVersion"] for n, pg in pod_groups(kube, ns).items()})
    return out
