"""Workloads for the API integration tests, built from the repository's examples, created in one namespace.

- JobSet ``demo`` and its two Jobs: kube-controller-manager's Job controller creates the three pods (the
  JobSet controller itself is not running, so the Jobs are created here, owned by the JobSet);
- PyTorchJob ``llama-finetune`` with its five pods (owned by the job, as the training operator makes them);
- Batchling ``sim-sweep`` (Karta-only kind) with its Karta and four pods;
- SparkApplication ``etl`` with an invalid Karta and two pods, which fall back to the default grouper;
- batch Job ``bad-min-member`` whose ``kai.scheduler/batch-min-member`` is not an integer: its pod (made by
  the Job controller) cannot be grouped, so the Job has no PodGroup and is listed in ``/podgroups`` ``errors``.

Cluster-scoped Kartas get a per-namespace name so tests do not see each other's definitions.
"""

from __future__ import annotations

import copy
from typing import Any

from grouper.manifests import load_manifests

from .fixtures import EXAMPLES, invalid_spark_karta, spark_objects

Obj = dict[str, Any]
VOLATILE = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")


def _examples(*files: str) -> list[Obj]:
    return [m.obj for m in load_manifests([EXAMPLES / f for f in files])]


def _clean(obj: Obj, namespace: str | None) -> Obj:
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    for k in VOLATILE:
        meta.pop(k, None)
    if namespace is not None:
        meta["namespace"] = namespace
    obj.pop("status", None)
    return obj


def _create_family(kube: Any, namespace: str, objs: list[Obj]) -> dict[str, Obj]:
    """Create objects in order (owners first), rewriting ownerReference UIDs to the created owners'."""
    created: dict[str, Obj] = {}
    for raw in objs:
        obj = _clean(raw, namespace)
        for ref in obj["metadata"].get("ownerReferences") or []:
            owner = created.get(f"{ref['kind']}/{ref['name']}")
            if owner is not None:
                ref["uid"] = owner["metadata"]["uid"]
        path = kube.path_for(obj["apiVersion"], obj["kind"], namespace)
        created[f"{obj['kind']}/{obj['metadata']['name']}"] = kube.create(path, obj)
    return created


def karta_name(base: str, namespace: str) -> str:
    return f"{base}-{namespace}"


def create_jobset(kube: Any, namespace: str) -> dict[str, Obj]:
    objs = [o for o in _examples("jobset-demo.yaml") if o["kind"] in ("JobSet", "Job")]
    return _create_family(kube, namespace, objs)


def create_pytorchjob(kube: Any, namespace: str) -> dict[str, Obj]:
    return _create_family(kube, namespace, _examples("pytorchjob.yaml"))


def batchling_karta(namespace: str) -> Obj:
    karta = _examples("batchling-karta.yaml")[0]
    karta = _clean(karta, None)
    karta["metadata"]["name"] = karta_name("batchling", namespace)
    return karta


def create_batchling(kube: Any, namespace: str) -> dict[str, Obj]:
    return _create_family(kube, namespace, _examples("custom-batchling.yaml"))


def spark_karta(namespace: str) -> Obj:
    karta = invalid_spark_karta()
    karta["metadata"] = {"name": karta_name("spark-broken", namespace)}
    return karta


def create_spark(kube: Any, namespace: str) -> dict[str, Obj]:
    objs = spark_objects()
    for o in objs:
        o["metadata"]["annotations"] = {k: v for k, v in (o["metadata"].get("annotations") or {}).items()
                                        if k != "note"}
    return _create_family(kube, namespace, objs)


BAD_JOB = "bad-min-member"


def create_bad_job(kube: Any, namespace: str) -> Obj:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": BAD_JOB, "annotations": {"kai.scheduler/batch-min-member": "abc"}},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "template": {"spec": {"schedulerName": "kai-scheduler", "restartPolicy": "Never",
                                  "containers": [{"name": "c", "image": "registry.example.com/train:1"}]}},
        },
    }
    return kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)  # type: ignore[no-any-return]


def create_karta(kube: Any, karta: Obj) -> Obj:
    return kube.create("/apis/run.ai/v1alpha1/kartas", karta)  # type: ignore[no-any-return]


def delete_karta(kube: Any, name: str) -> None:
    kube.delete(f"/apis/run.ai/v1alpha1/kartas/{name}", ignore_missing=True)


def pg_list(kube: Any, namespace: str) -> list[Obj]:
    return kube.list(f"/apis/scheduling.run.ai/v2alpha2/namespaces/{namespace}/podgroups")  # type: ignore[no-any-return]


def pods(kube: Any, namespace: str) -> list[Obj]:
    return kube.list(f"/api/v1/namespaces/{namespace}/pods")  # type: ignore[no-any-return]


__all__ = [
    "BAD_JOB",
    "batchling_karta",
    "create_bad_job",
    "create_batchling",
    "create_jobset",
    "create_karta",
    "create_pytorchjob",
    "create_spark",
    "delete_karta",
    "karta_name",
    "pg_list",
    "pods",
    "spark_karta",
]
