"""Helpers shared by the gang tests: GPU pods on a test's own node pool, who is bound where."""

from __future__ import annotations

from typing import Any

from kube import Kube

from grouper.core.upstream import initially_scheduled

POOL_LABEL = "test.kai-pod-grouper.io/pool"
GPU = "nvidia.com/gpu"


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


def pod_group_condition(kube: Kube, path: str) -> tuple[str, str]:
    """(status, reason) of the upstream PodGroup's admission condition (``PodGroupInitiallyScheduled``, or
    ``PodGroupScheduled`` of a 1.36 server), ("", "") if none: what the grouper reads."""
    return initially_scheduled(kube.get(path))
