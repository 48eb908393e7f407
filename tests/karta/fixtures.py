"""Definitions and objects shared by the Karta tests (catalog-shaped, karta.md §4 and §3.7)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from grouper.karta import KartaDefinition, from_object
from grouper.model.podgroup import OwnerRef, PodGroupMetadata

Obj = dict[str, Any]

DATA = Path(__file__).parent / "data"  # catalog-shaped definitions (karta.md §4)
PYFLOW_UID = "a1b2c3d4-e5f6-7890-abcd-ef1234567890"


def karta(name: str, root: Obj, children: list[Obj] | None = None, gang: Obj | None = None) -> Obj:
    spec: Obj = {"structureDefinition": {"rootComponent": root}}
    if children is not None:
        spec["structureDefinition"]["childComponents"] = children
    if gang is not None:
        spec["optimizationInstructions"] = {"gangScheduling": gang}
    return {"apiVersion": "run.ai/v1alpha1", "kind": "Karta", "metadata": {"name": name}, "spec": spec}


def defn(obj: Obj, origin: str = "test:inline") -> KartaDefinition:
    return from_object(obj, origin)


# ---------------------------------------------------------------- PyFlow (KAI grouper_test.go)


def pyflow_karta(gang: Obj | None = None, *, with_spec: bool = True) -> Obj:
    def child(role: str) -> Obj:
        c: Obj = {
            "name": role,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "ownerRef": "pyflow",
            "scaleDefinition": {"replicasPath": f".spec.{role}.replicas"},
            "podSelector": {"componentTypeSelector": {"keyPath": ".metadata.labels.role", "value": role}},
        }
        if with_spec:
            c["specDefinition"] = {"podTemplateSpecPath": f".spec.{role}.template"}
        return c

    return karta(
        "pyflow",
        {
            "name": "pyflow",
            "kind": {"group": "jobs.example.com", "version": "v1", "kind": "PyFlow"},
            "statusDefinition": {"statusMappings": {}},
        },
        [child("master"), child("worker")],
        gang,
    )


def pyflow_object(master: int = 1, worker: int = 2) -> Obj:
    return {
        "apiVersion": "jobs.example.com/v1",
        "kind": "PyFlow",
        "metadata": {"name": "pyflow-example", "namespace": "test-ns", "uid": PYFLOW_UID},
        "spec": {
            "master": {
                "replicas": master,
                "template": {"spec": {"containers": [{"name": "m", "image": "x"}]}},
            },
            "worker": {
                "replicas": worker,
                "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
            },
        },
    }


def pyflow_pod(role: str, job_name: str = "pyflow-example") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "pyflow-pod",
            "namespace": "test-ns",
            "uid": f"pod-{role}",
            "labels": {"kai.scheduler/queue": "test-queue", "role": role, "job-name": job_name},
        },
        "spec": {"schedulerName": "kai-scheduler"},
    }


def base_metadata(top_owner: Obj) -> PodGroupMetadata:
    """What a default grouper would produce (name pg-<name>-<uid>, minMember 1)."""
    meta = top_owner["metadata"]
    return PodGroupMetadata(
        name=f"pg-{meta['name']}-{meta['uid']}",
        namespace=meta.get("namespace", ""),
        owner=OwnerRef.of(top_owner),
        queue="test-queue",
        priority_class_name="train",
        min_member=1,
        provenance={"minMember": "default grouper"},
    )


def clone(o: Obj) -> Obj:
    return copy.deepcopy(o)
