"""An in-memory grouper state for API tests: real objects, real decisions, a real DecisionStore.

The objects are the repository's examples (a JobSet with its Jobs and pods, a PyTorchJob, a Karta-only
Batchling) plus a SparkApplication whose cluster Karta is invalid, so its pods fall back to the default
grouper. Every pod is decided by ``Grouper.decide`` over ``InMemoryLookups`` and recorded in the
controller's ``DecisionStore`` the way the reconciler records it.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from grouper.api.state import AppState, HealthSnapshot
from grouper.controller.workloads import WorkloadKey
from grouper.core.config import GroupingConfig
from grouper.core.decision import Decision
from grouper.core.lookups import InMemoryLookups
from grouper.core.plan import plan
from grouper.core.workload_plan import PlannedGroup, merge_decisions
from grouper.karta import DefinitionRegistry
from grouper.manifests import load_manifests
from grouper.model import objects as o
from grouper.observability.metrics import Metrics
from grouper.records.decisions import DecisionStore
from grouper.runtime.composition import build_grouper

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
DEFINITIONS = REPO / "definitions"

SECRET_ENV_VALUE = "s3cr3t-env-value-never-shown"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

SPARK_NS = "team-b"
SPARK_UID = "5c1b2a3e-0000-4000-8000-00000000a001"


def spark_objects() -> list[dict[str, Any]]:
    """A SparkApplication (no native plugin, no built-in definition) and its driver + executor pods."""
    app = {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {
            "name": "etl",
            "namespace": SPARK_NS,
            "uid": SPARK_UID,
            "resourceVersion": "71",
            "creationTimestamp": "2026-08-12T10:00:00Z",
            "labels": {"kai.scheduler/queue": "team-b", "tier": "batch"},
            "annotations": {LAST_APPLIED: '{"spec":{"driver":{"env":[{"name":"PASSWORD","value":"'
                            + SECRET_ENV_VALUE + '"}]}}}'},
        },
        "spec": {"driver": {"env": [{"name": "PASSWORD", "value": SECRET_ENV_VALUE}]}},
    }
    pods = []
    for i, role in enumerate(("driver", "exec-1")):
        pods.append({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"etl-{role}",
                "namespace": SPARK_NS,
                "uid": f"5c1b2a3e-0000-4000-8000-00000000a01{i}",
                "creationTimestamp": "2026-08-12T10:00:01Z",
                "labels": {"spark-role": role, "spark-app-name": "etl", "secret-ish": "not-for-api"},
                "annotations": {"note": "annotations never leave the API"},
                "ownerReferences": [{"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
                                     "name": "etl", "uid": SPARK_UID, "controller": True}],
            },
            "spec": {"schedulerName": "kai-scheduler", "nodeName": f"node-{i}",
                     "containers": [{"name": "spark", "image": "spark:3",
                                     "env": [{"name": "PASSWORD", "value": SECRET_ENV_VALUE}]}]},
            "status": {"phase": "Running"},
        })
    return [app, *pods]


def invalid_spark_karta() -> dict[str, Any]:
    """A Karta for SparkApplication that the validator rejects (recursive descent ``..`` in a jq path)."""
    return {
        "apiVersion": "run.ai/v1alpha1",
        "kind": "Karta",
        "metadata": {"name": "spark-broken", "resourceVersion": "5"},
        "spec": {
            "structureDefinition": {
                "rootComponent": {
                    "name": "app",
                    "kind": {"group": "sparkoperator.k8s.io", "version": "v1beta2", "kind": "SparkApplication"},
                    "statusDefinition": {"statusMappings": {}},
                    "specDefinition": {"podTemplateSpecPath": ".spec | .."},
                    "scaleDefinition": {"replicasPath": "1"},
                },
            },
            "optimizationInstructions": {"gangScheduling": {"podGroup": {"name": "app"}}},
        },
    }


def unloadable_karta() -> dict[str, Any]:
    """A Karta document the loader cannot parse (a list where an object belongs)."""
    return {"apiVersion": "run.ai/v1alpha1", "kind": "Karta", "metadata": {"name": "not-a-karta"},
            "spec": {"structureDefinition": []}}


@dataclass
class FakeHealth:
    """A settable health source (the running controller's is ``Controller.health_snapshot``). The API
    server counts as just reached on every call unless a test sets ``last_api_contact`` itself."""

    snapshot: HealthSnapshot = field(default_factory=lambda: HealthSnapshot(
        role="single", informers={"Pod.v1": True, "PodGroup.v2alpha2.scheduling.run.ai": True},
        last_api_contact=time.monotonic()))
    fresh_contact: bool = True

    def set(self, **changes: Any) -> None:
        if "last_api_contact" in changes:
            self.fresh_contact = False
        self.snapshot = replace(self.snapshot, now=time.monotonic(), **changes)

    def __call__(self) -> HealthSnapshot:
        now = time.monotonic()
        if self.fresh_contact:
            return replace(self.snapshot, now=now, last_api_contact=now)
        return replace(self.snapshot, now=now)


@dataclass
class World:
    state: AppState
    store: DecisionStore
    lookups: InMemoryLookups
    registry: DefinitionRegistry
    health: FakeHealth
    objects: list[dict[str, Any]]

    def pod_group_names(self) -> dict[str, tuple[str, str]]:
        """Workload kind -> (namespace, PodGroup name)."""
        out = {}
        for rec in self.store.pod_groups():
            owner = rec.desired()["metadata"]["ownerReferences"][0]
            out[owner["kind"]] = (rec.namespace, rec.name)
        return out


def example_objects() -> list[dict[str, Any]]:
    files = ["jobset-demo.yaml", "jobset-demo-pods.yaml", "pytorchjob.yaml", "custom-batchling.yaml"]
    objs = [m.obj for m in load_manifests([EXAMPLES / f for f in files])]
    for obj in objs:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("resourceVersion", "100")
        if obj["kind"] == "Batchling":
            obj["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
        if obj["kind"] == "Pod":
            obj.setdefault("status", {"phase": "Pending"})
            if meta["name"].endswith("worker-0"):
                obj["status"] = {"phase": "Running"}
                obj["spec"]["nodeName"] = "gpu-node-7"
    return objs


def record(store: DecisionStore, decisions: list[Decision],
           merged: list[PlannedGroup] | None = None) -> list[dict[str, Any]]:
    """Record decisions and their merged PodGroups like the reconciler does; returns the PodGroups as stored."""
    for d in decisions:
        wl = WorkloadKey.of_ref(d.top_owner, d.pod_namespace) if d.top_owner else WorkloadKey.of_pod(
            d.pod_namespace, d.pod_name)
        store.record_decision(d, str(wl))
        if d.outcome == "grouped":
            store.record_pod_patched(d.pod_namespace, d.pod_name, "patched")
    stored = []
    for i, m in enumerate(merge_decisions(decisions) if merged is None else merged):
        md = m.metadata
        wl = WorkloadKey.of_ref(md.owner, md.namespace)
        store.record_pod_group(md.namespace, md.name, workload=str(wl), desired=md.to_object(),
                               operation="created", pods=list(m.pods), notes=m.notes, newest=m.newest)
        pg = md.to_object()
        pg["metadata"]["resourceVersion"] = str(1000 + i)
        stored.append(pg)
    return stored


def build_world(*, with_spark: bool = True, config: GroupingConfig | None = None) -> World:
    """Decide every example pod and record the outcome like the reconciler does."""
    registry = DefinitionRegistry(DEFINITIONS)
    karta_docs = [m.obj for m in load_manifests([EXAMPLES / "batchling-karta.yaml"])]
    for k in karta_docs:
        k["metadata"]["resourceVersion"] = "9"
        registry.upsert_cluster_object(k)
    objects = example_objects()
    if with_spark:
        registry.upsert_cluster_object(invalid_spark_karta())
        registry.upsert_cluster_object(unloadable_karta())
        objects += spark_objects()
    grouper = build_grouper(config or GroupingConfig(), registry)
    result = plan(copy.deepcopy(objects), grouper)

    store = DecisionStore()
    stored = record(store, result.decisions, result.pod_groups)
    lookups = InMemoryLookups([*objects, *stored])
    health = FakeHealth()
    state = AppState(metrics=Metrics(), store=store, grouper=grouper, definitions=registry, objects=lookups,
                     health=health)
    return World(state, store, lookups, registry, health, objects)


def pod_names(world: World, kind: str) -> list[str]:
    return sorted(o.name(x) for x in world.objects if x["kind"] == "Pod"
                  and any(r["kind"] == kind for r in o.owner_references(x)))


def batch_objects() -> list[dict[str, Any]]:
    """Job ``broken`` (bad batch-min-member, 23 pods), Job ``fine`` (2 pods) and a pod whose Job is gone."""
    def job(name: str, min_member: str) -> dict[str, Any]:
        return {"apiVersion": "batch/v1", "kind": "Job", "spec": {},
                "metadata": {"name": name, "namespace": "batch", "uid": f"uid-{name}",
                             "annotations": {"kai.scheduler/batch-min-member": min_member}}}

    def pod(name: str, owner: str) -> dict[str, Any]:
        ref = {"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": f"uid-{owner}", "controller": True}
        return {"apiVersion": "v1", "kind": "Pod", "spec": {"schedulerName": "kai-scheduler"},
                "metadata": {"name": name, "namespace": "batch", "uid": f"uid-{name}", "ownerReferences": [ref]}}

    return [job("broken", "abc"), *(pod(f"broken-{i:02}", "broken") for i in range(23)),
            job("fine", "2"), pod("fine-0", "fine"), pod("fine-1", "fine"), pod("orphan", "gone")]
