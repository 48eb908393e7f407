"""The native plugin table (reference §2.2; KAI ``hub_test.go`` TestSupportedTypes)."""

from __future__ import annotations

import pytest

from grouper.plugins.registry import native_plugins

EXPECTED = {
    ("apps", "v1", "Deployment"): "Deployment Grouper",
    ("machinelearning.seldon.io", "v1alpha2", "SeldonDeployment"): "Default Grouper",
    ("machinelearning.seldon.io", "v1", "SeldonDeployment"): "Default Grouper",
    ("kubevirt.io", "v1", "VirtualMachineInstance"): "Default Grouper",
    ("kubeflow.org", "v1", "TFJob"): "TensorFlow Grouper",
    ("kubeflow.org", "v1", "PyTorchJob"): "PyTorchJob Grouper",
    ("kubeflow.org", "v1", "XGBoostJob"): "XGBoost Grouper",
    ("kubeflow.org", "v1", "JAXJob"): "JAX Grouper",
    ("kubeflow.org", "v1", "MPIJob"): "MPI Grouper",
    ("kubeflow.org", "v2beta1", "MPIJob"): "MPI Grouper",
    ("kubeflow.org", "v1beta1", "Notebook"): "Kubeflow Notebook Grouper",
    ("batch", "v1", "Job"): "BatchJob Grouper",
    ("apps", "v1", "StatefulSet"): "StatefulSet Grouper",
    ("apps", "v1", "ReplicaSet"): "Default Grouper",
    ("run.ai", "v1", "RunaiJob"): "RunaiJob Grouper",
    ("", "v1", "Pod"): "PodJob Grouper",
    ("amlarc.azureml.com", "v1alpha1", "AmlJob"): "AML Grouper",
    ("serving.knative.dev", "v1", "Service"): "KNative Grouper",
    ("batch", "v1", "CronJob"): "CronJob Grouper",
    ("workspace.devfile.io", "v1alpha2", "DevWorkspace"): "Default Grouper",
    ("ray.io", "v1alpha1", "RayCluster"): "RayCluster Grouper",
    ("ray.io", "v1alpha1", "RayJob"): "RayJob Grouper",
    ("ray.io", "v1alpha1", "RayService"): "RayService Grouper",
    ("ray.io", "v1", "RayCluster"): "RayCluster Grouper",
    ("ray.io", "v1", "RayJob"): "RayJob Grouper",
    ("ray.io", "v1", "RayService"): "RayService Grouper",
    ("kubeflow.org", "v1alpha1", "ScheduledWorkflow"): "Default Grouper",
    ("tekton.dev", "v1", "PipelineRun"): "Default Grouper",
    ("tekton.dev", "v1", "TaskRun"): "Default Grouper",
    ("egx.nvidia.io", "v1", "SPOTRequest"): "SpotRequest Grouper",
    ("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"): "LWS Grouper",
    ("jobset.x-k8s.io", "v1alpha2", "JobSet"): "JobSet Grouper",
    ("grove.io", "v1alpha1", "PodGangSet"): "Grove Grouper",
    ("grove.io", "v1alpha1", "PodCliqueSet"): "Grove Grouper",
    ("argoproj.io", "v1alpha1", "Workflow"): "SkipTopOwner Grouper",
    ("run.ai", "*", "InferenceWorkload"): "SkipTopOwner Grouper",
    ("run.ai", "*", "TrainingWorkload"): "SkipTopOwner Grouper",
    ("run.ai", "*", "DistributedWorkload"): "SkipTopOwner Grouper",
    ("run.ai", "*", "InteractiveWorkload"): "SkipTopOwner Grouper",
    ("run.ai", "*", "DistributedInferenceWorkload"): "SkipTopOwner Grouper",
    ("run.ai", "*", "WorkloadRunner"): "SkipTopOwner Grouper",
    ("trainer.kubeflow.org", "v1alpha1", "TrainJob"): "SkipTopOwner Grouper",
    ("nvidia.com", "*", "DynamoGraphDeployment"): "SkipTopOwner Grouper",
}


def test_SupportedTypes() -> None:
    table = native_plugins()
    assert {key: plugin.name for key, plugin in table.items()} == EXPECTED


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_every_plugin_has_metadata(key: tuple[str, str, str]) -> None:
    assert callable(native_plugins()[key].metadata)


def test_tables_are_independent() -> None:
    a = native_plugins()
    a.clear()
    assert len(native_plugins()) == len(EXPECTED)
