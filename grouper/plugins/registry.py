"""The native plugin table (KAI ``hub.go``, reference §2.2): (group, version, kind) → plugin.

Version ``"*"`` marks entries that match any version of the group/kind (run.ai workloads,
DynamoGraphDeployment); the hub tries the exact GVK first, then the wildcard.
Adding a kind means adding one module and one line here.
"""

from __future__ import annotations

from grouper.core.context import Plugin
from grouper.plugins.aml import AmlGrouper
from grouper.plugins.cronjob import CronJobGrouper
from grouper.plugins.default import DefaultGrouper
from grouper.plugins.deployment import DeploymentGrouper
from grouper.plugins.grove import GroveGrouper
from grouper.plugins.job import JobGrouper
from grouper.plugins.jobset import JobSetGrouper
from grouper.plugins.knative import KnativeGrouper
from grouper.plugins.kubeflow import jax_grouper, tensorflow_grouper, xgboost_grouper
from grouper.plugins.lws import LWSGrouper
from grouper.plugins.mpi import MPIGrouper
from grouper.plugins.notebook import NotebookGrouper
from grouper.plugins.podjob import PodJobGrouper
from grouper.plugins.pytorch import PyTorchGrouper
from grouper.plugins.ray import RayGrouper
from grouper.plugins.runaijob import RunaiJobGrouper
from grouper.plugins.skip_top_owner import SkipTopOwnerGrouper
from grouper.plugins.spotrequest import SpotRequestGrouper
from grouper.plugins.statefulset import StatefulSetGrouper

WILDCARD = "*"

RUNAI_SKIPPED_KINDS = (
    "InferenceWorkload",
    "TrainingWorkload",
    "DistributedWorkload",
    "InteractiveWorkload",
    "DistributedInferenceWorkload",
    "WorkloadRunner",  # KAI v0.18 (PR #2067)
)


# Kinds that sit between a pod and its top owner for the native plugins (or that they read), beyond the
# table's own kinds: the owner walk must be able to cache them.
INTERMEDIATE_KINDS: frozenset[tuple[str, str]] = frozenset({
    ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"),
    ("apps", "Deployment"),
    ("batch", "Job"),
    ("serving.knative.dev", "Revision"),
    ("serving.knative.dev", "Configuration"),
    ("grove.io", "PodClique"),
    ("grove.io", "PodCliqueScalingGroup"),
    ("scheduler.grove.io", "PodGang"),
    ("ray.io", "RayCluster"),
    ("jobset.x-k8s.io", "JobSet"),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
    ("nvidia.com", "DynamoComponentDeployment"),
    ("kubevirt.io", "VirtualMachine"),
})


def native_plugins() -> dict[tuple[str, str, str], Plugin]:
    """A fresh table (plugins hold no state between decisions, but callers may extend the dict)."""
    default = DefaultGrouper()
    mpi = MPIGrouper()
    grove = GroveGrouper()
    skip = SkipTopOwnerGrouper()
    ray = {kind: RayGrouper(kind) for kind in ("RayCluster", "RayJob", "RayService")}
    table: dict[tuple[str, str, str], Plugin] = {
        ("apps", "v1", "Deployment"): DeploymentGrouper(),
        ("machinelearning.seldon.io", "v1alpha2", "SeldonDeployment"): default,
        ("machinelearning.seldon.io", "v1", "SeldonDeployment"): default,
        ("kubevirt.io", "v1", "VirtualMachineInstance"): default,
        ("kubeflow.org", "v1", "TFJob"): tensorflow_grouper(),
        ("kubeflow.org", "v1", "PyTorchJob"): PyTorchGrouper(),
        ("kubeflow.org", "v1", "XGBoostJob"): xgboost_grouper(),
        ("kubeflow.org", "v1", "JAXJob"): jax_grouper(),
        ("kubeflow.org", "v1", "MPIJob"): mpi,
        ("kubeflow.org", "v2beta1", "MPIJob"): mpi,
        ("kubeflow.org", "v1beta1", "Notebook"): NotebookGrouper(),
        ("batch", "v1", "Job"): JobGrouper(),
        ("apps", "v1", "StatefulSet"): StatefulSetGrouper(),
        ("apps", "v1", "ReplicaSet"): default,
        ("run.ai", "v1", "RunaiJob"): RunaiJobGrouper(),
        ("", "v1", "Pod"): PodJobGrouper(),
        ("amlarc.azureml.com", "v1alpha1", "AmlJob"): AmlGrouper(),
        ("serving.knative.dev", "v1", "Service"): KnativeGrouper(),
        ("batch", "v1", "CronJob"): CronJobGrouper(),
        ("workspace.devfile.io", "v1alpha2", "DevWorkspace"): default,
        ("kubeflow.org", "v1alpha1", "ScheduledWorkflow"): default,
        ("tekton.dev", "v1", "PipelineRun"): default,
        ("tekton.dev", "v1", "TaskRun"): default,
        ("egx.nvidia.io", "v1", "SPOTRequest"): SpotRequestGrouper(),
        ("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"): LWSGrouper(),
        ("jobset.x-k8s.io", "v1alpha2", "JobSet"): JobSetGrouper(),
        ("grove.io", "v1alpha1", "PodGangSet"): grove,
        ("grove.io", "v1alpha1", "PodCliqueSet"): grove,
        ("argoproj.io", "v1alpha1", "Workflow"): skip,
        ("trainer.kubeflow.org", "v1alpha1", "TrainJob"): skip,
        ("nvidia.com", WILDCARD, "DynamoGraphDeployment"): skip,
    }
    for version in ("v1alpha1", "v1"):
        for kind, plugin in ray.items():
            table[("ray.io", version, kind)] = plugin
    for kind in RUNAI_SKIPPED_KINDS:
        table[("run.ai", WILDCARD, kind)] = skip
    return table


def native_kinds(table: dict[tuple[str, str, str], Plugin]) -> frozenset[tuple[str, str]]:
    """(group, kind) of every native plugin entry and of the kinds the plugins walk through or read."""
    return frozenset((g, k) for g, _, k in table) | INTERMEDIATE_KINDS


__all__ = ["INTERMEDIATE_KINDS", "RUNAI_SKIPPED_KINDS", "WILDCARD", "native_kinds", "native_plugins"]
