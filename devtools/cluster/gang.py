"""What the local control plane needs for gang scheduling: feature gates, API versions, simulated nodes.

Names as Kubernetes 1.37 spells them (``pkg/features/kube_features.go``, ``pkg/scheduler/apis/config/v1/
default_plugins.go``):

- ``GenericWorkload`` (beta in 1.37, off by default) serves ``scheduling.k8s.io`` Workload and PodGroup
  and ``spec.schedulingGroup`` on pods; with it on, the scheduler's default profile adds the
  ``GangScheduling`` plugin (no scheduler configuration needed).
- ``CompositePodGroup`` (alpha) serves CompositePodGroup (``scheduling.k8s.io/v1alpha3`` only) and the
  Workload's ``compositePodGroupTemplates``; it depends on ``TopologyAwareWorkloadScheduling`` (alpha).
- The API versions are off by default too: ``--runtime-config`` turns on ``v1beta1`` and ``v1alpha3``.

Nodes are plain Node objects carrying kwok's annotation; the kwok controller (started with a selector on
that annotation) makes them Ready and plays the lifecycle of the pods bound to them.
"""

from __future__ import annotations

from typing import Any

GANG_FEATURE_GATES = ("GenericWorkload", "TopologyAwareWorkloadScheduling", "CompositePodGroup")
GANG_RUNTIME_CONFIG = ("scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha3")
GPU_RESOURCE = "nvidia.com/gpu"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
NODE_LABEL = "devcluster.kai-pod-grouper.io/simulated"


def feature_gates_flag(gates: tuple[str, ...] = GANG_FEATURE_GATES) -> str:
    return "--feature-gates=" + ",".join(f"{g}=true" for g in gates)


def runtime_config_flag(versions: tuple[str, ...] = GANG_RUNTIME_CONFIG) -> str:
    return "--runtime-config=" + ",".join(f"{v}=true" for v in versions)


def scheduler_config(kubeconfig: str, qps: int, burst: int) -> dict[str, Any]:
    """A KubeSchedulerConfiguration: the default profile, no leader election, a fast client."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"kubeconfig": kubeconfig, "qps": qps, "burst": burst},
    }


def node_manifest(
    name: str,
    *,
    gpus: int = 4,
    cpu: str = "32",
    memory: str = "256Gi",
    ephemeral_storage: str = "500Gi",
    pods: int = 110,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A simulated node with ``gpus`` GPUs (extended resource ``nvidia.com/gpu``) and, as a kubelet reports,
    ephemeral storage (the training-operator's MPIJob launcher asks for 5Gi in its init container).

    Capacity is given in the Node's status at creation (the API server keeps a Node's status on create);
    kwok's node-initialize stage keeps it and adds the Ready condition.
    """
    resources = {
        "cpu": cpu, "memory": memory, "ephemeral-storage": ephemeral_storage, "pods": str(pods), GPU_RESOURCE: str(gpus),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE},
            "labels": {
                NODE_LABEL: "true",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "type": "kwok",
                **(labels or {}),
            },
        },
        "spec": {},
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def node_ready(node: dict[str, Any]) -> bool:
    conds = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)
