"""What the two Kubeflow Trainer v2 test modules share: the stock ``torch-distributed`` runtime from the
module's own manifests, a TrainJob of it, and the live objects of a namespace (TrainJob → JobSet → Job →
pods)."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from kube import Kube

from devtools.cluster import operators as ops
from operators.opkit import typed

OPERATORS = ["jobset", "trainer"]  # Trainer writes JobSets: the JobSet controller runs beside it
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
TRAINJOBS = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs"
RUNTIMES = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainingruntimes"
CLUSTER_RUNTIMES = "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
# the scheduler-plugins PodGroup Trainer's coscheduling podGroupPolicy writes, and the label it puts on pods
COSCHED_PODGROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"
COSCHED_LABEL = "scheduling.x-k8s.io/pod-group"
RUNTIME_FILE = "manifests/base/runtimes/torch_distributed.yaml"


def torch_distributed(
    *, kind: str = "ClusterTrainingRuntime", scheduler_name: str | None = None,
    pod_group_policy: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The module's ``torch-distributed`` ClusterTrainingRuntime (or the same as a namespaced
    TrainingRuntime), with the few fields a test sets: the pods' scheduler (a KAI user's runtime names
    ``kai-scheduler``) and a ``podGroupPolicy`` (Trainer's own gang)."""
    src = ops.module_source(ops.operator("trainer")) / RUNTIME_FILE
    (runtime,) = [d for d in yaml.safe_load_all(src.read_text()) if d]
    runtime = copy.deepcopy(runtime)
    runtime["kind"] = kind
    (node,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    if scheduler_name is not None:
        node["template"]["spec"]["template"]["spec"]["schedulerName"] = scheduler_name
    if pod_group_policy is not None:
        runtime["spec"]["podGroupPolicy"] = pod_group_policy
    return runtime


def trainjob(
    name: str, *, runtime: str = "torch-distributed", runtime_kind: str = "ClusterTrainingRuntime",
    num_nodes: int = 2, resources: dict[str, Any] | None = None, node_selector: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    tj: dict[str, Any] = {
        "apiVersion": TRAINER_API,
        "kind": "TrainJob",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": runtime_kind, "name": runtime},
            "trainer": {"image": "busybox", "command": ["torchrun", "train.py"], "numNodes": num_nodes},
        },
    }
    if resources is not None:
        tj["spec"]["trainer"]["resourcesPerNode"] = resources
    if node_selector is not None:
        tj["spec"]["podTemplateOverrides"] = [{"targetJobs": [{"name": "node"}], "spec": {"nodeSelector": node_selector}}]
    return tj


def live(kube: Kube, ns: str) -> dict[str, list[dict[str, Any]]]:
    """TrainJobs, JobSets, Jobs and pods of the namespace, as typed objects (list items carry no kind)."""
    return {
        "TrainJob": typed(kube.list(TRAINJOBS.format(ns=ns)), TRAINER_API, "TrainJob"),
        "JobSet": typed(kube.list(JOBSETS.format(ns=ns)), JOBSET_API, "JobSet"),
        "Job": typed(kube.list(f"/apis/batch/v1/namespaces/{ns}/jobs"), "batch/v1", "Job"),
        "Pod": typed(kube.list(f"/api/v1/namespaces/{ns}/pods"), "v1", "Pod"),
    }
