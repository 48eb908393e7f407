"""Fixtures for tests against a real kube-scheduler and simulated (kwok) nodes.

One control plane per session with the Workload API and gang scheduling turned on (``sched_cluster``),
separate from the plain ``cluster`` fixture so the other tests keep their speed. Nodes accumulate over
the session: each test adds its own nodes with a pool label (``pool`` fixture) that its pods select, so
no test sees another's capacity. Every test using them is marked ``cluster`` and ``gang``.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.cluster import LocalCluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kube import Kube, wait_until

REPO = Path(__file__).resolve().parents[2]
CRD_DIRS = (REPO / "deploy" / "crds", REPO / "tests" / "crds")
POOL_LABEL = "test.kai-pod-grouper.io/pool"
GPU = "nvidia.com/gpu"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if {"sched_cluster", "skube"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.gang)


@pytest.fixture(scope="session")
def sched_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(crds=CRD_DIRS, scheduler=True) as c:
        print(f"\n[devcluster] scheduler cluster up in {c.started_in:.1f}s {c.timings}", file=sys.stderr)
        yield c


@pytest.fixture(scope="session")
def skube(sched_cluster: LocalCluster) -> Iterator[Kube]:
    with Kube.from_cluster(sched_cluster) as k:
        yield k


@pytest.fixture
def sns(skube: Kube) -> Iterator[str]:
    """A fresh namespace in the scheduler cluster."""
    name = f"g-{uuid.uuid4().hex[:10]}"
    skube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_until(
        lambda: skube.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        timeout=30,
        what=f"ServiceAccount {name}/default",
    )
    yield name
    skube.delete(f"/api/v1/namespaces/{name}", ignore_missing=True)


@pytest.fixture
def pool() -> str:
    """A node-pool label value of this test's own nodes (``sched_cluster.add_nodes(labels=...)``)."""
    return f"p-{uuid.uuid4().hex[:8]}"


def gpu_pod(name: str, pool: str, gpus: int, *, group: str | None = None, **meta: Any) -> dict[str, Any]:
    """A pod asking for ``gpus`` GPUs on the nodes of ``pool``; ``group``: its upstream PodGroup."""
    spec: dict[str, Any] = {
        "nodeSelector": {POOL_LABEL: pool},
        "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {GPU: str(gpus)}}}],
    }
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta}, "spec": spec}


def bound(kube: Kube, namespace: str, names: list[str]) -> dict[str, str]:
    """Pod name -> node it is bound to, for the named pods bound so far."""
    pods = kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in pods
        if p["metadata"]["name"] in names and p["spec"].get("nodeName")
    }
