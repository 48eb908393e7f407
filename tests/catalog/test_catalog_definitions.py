"""The built-in catalog as a whole: every definition loads, validates and is documented."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grouper.karta import load_file, validate
from grouper.model.objects import GVK

from .workloads import DEFINITIONS, catalog

FILES = sorted(DEFINITIONS.glob("*.yaml"))

EXPECTED_KINDS = {
    GVK("jobset.x-k8s.io", "v1alpha2", "JobSet"),
    GVK("kubeflow.org", "v1", "PyTorchJob"),
    GVK("kubeflow.org", "v1", "TFJob"),
    GVK("kubeflow.org", "v2beta1", "MPIJob"),
    GVK("ray.io", "v1", "RayCluster"),
    GVK("ray.io", "v1", "RayJob"),
    GVK("ray.io", "v1", "RayService"),
    GVK("serving.kserve.io", "v1beta1", "InferenceService"),
    GVK("serving.knative.dev", "v1", "Service"),
    GVK("apps.nvidia.com", "v1alpha1", "NIMService"),
    GVK("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"),
    GVK("milvus.io", "v1beta1", "Milvus"),
    GVK("grove.io", "v1alpha1", "PodCliqueSet"),
    GVK("nvidia.com", "v1alpha1", "DynamoGraphDeployment"),
    GVK("nvidia.com", "v1beta1", "DynamoGraphDeployment"),
    GVK("batch", "v1", "Job"),
    GVK("apps", "v1", "Deployment"),
    GVK("apps", "v1", "StatefulSet"),
    # Workload Map v0.2.9 entries
    GVK("batch", "v1", "CronJob"),
    GVK("", "v1", "Pod"),
    GVK("apps.nvidia.com", "v1alpha1", "NIMCache"),
    GVK("serving.kserve.io", "v1alpha1", "LLMInferenceService"),
    GVK("serving.kserve.io", "v1alpha2", "LLMInferenceService"),
    GVK("agents.x-k8s.io", "v1beta1", "Sandbox"),
}


def test_catalog_covers_exactly_the_expected_kinds() -> None:
    assert set(catalog()) == EXPECTED_KINDS
    assert len(FILES) == len(EXPECTED_KINDS)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_definition_validates_without_errors_or_warnings(path: Path) -> None:
    (defn,) = load_file(path)
    report = validate(defn)
    assert report.errors == [], "\n".join(map(str, report.errors))
    assert report.warnings == [], "\n".join(map(str, report.warnings))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_definition_is_named_after_its_file_and_documented(path: Path) -> None:
    (defn,) = load_file(path)
    assert defn.name == path.stem
    assert defn.api_version == "run.ai/v1alpha1" and defn.raw["kind"] == "Karta"
    gvk = defn.gvk
    group = gvk.group.replace(".", "-") or "core"  # upstream's name for the core group: core-pod-v1
    assert path.stem == "-".join((group, gvk.kind.lower(), gvk.version))
    header = path.read_text().split("apiVersion:", 1)[0]
    assert header.startswith("# ") and len(header.splitlines()) >= 5, "each file starts with a comment header"
    assert "upstream" in header.lower() or "NEW" in header, "the header says how it relates to upstream"


# As Workload Map v0.2.9: these entries carry no gang instructions. CronJob and Pod are grouped by
# the native plugins; NIMCache (no native plugin) by the default grouper (KAI v0.18's Karta hub).
WITHOUT_GANG = {"batch-cronjob-v1", "core-pod-v1", "apps-nvidia-com-nimcache-v1alpha1"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_definition_has_gang_instructions_and_explicit_condition_fields(path: Path) -> None:
    (defn,) = load_file(path)
    has_gang = defn.gang is not None and defn.gang.has_instructions
    assert has_gang is (path.stem not in WITHOUT_GANG)
    raw = yaml.safe_load(path.read_text())
    cond = raw["spec"]["structureDefinition"]["rootComponent"]["statusDefinition"].get("conditionsDefinition")
    if cond is not None:  # CRD defaults are server-side only (karta.md §1.3): files set them
        assert cond["typeFieldName"] == "type" and cond["statusFieldName"] == "status"


def test_optional_iterations_are_null_safe() -> None:
    """karta.md §7.9: `.x[]` over a missing field aborts the extraction; the catalog uses `[]?`
    wherever the iterated list is optional."""
    text = {
        p.stem: "\n".join(line for line in p.read_text().splitlines() if not line.lstrip().startswith("#"))
        for p in FILES
    }
    assert ".workerGroupSpecs[]?" in text["ray-io-raycluster-v1"]
    assert ".workerGroupSpecs[].replicas" not in text["ray-io-raycluster-v1"]
    assert ".podCliqueScalingGroups[]?" in text["grove-io-podcliqueset-v1alpha1"]
    assert "(.template.spec.parallelism // 1)" in text["jobset-x-k8s-io-jobset-v1alpha2"]
