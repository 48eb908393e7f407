"""RunaiJob grouper (KAI ``runaijob_grouper_test.go``): legacy-aware PodGroup names."""

from __future__ import annotations

from builders import context, owner, pod, podgroup

from grouper.core.config import GroupingConfig
from grouper.plugins.runaijob import RunaiJobGrouper


def rjob(parallelism: int | None = None) -> dict:
    spec = {} if parallelism is None else {"parallelism": parallelism}
    return owner("RunaiJob", "run.ai/v1", "test_name", uid="1234-5678", spec=spec)


def test_Hpo() -> None:
    # parallelism > 1: legacy name is per pod; without a legacy group the new name drops the pod suffix
    md = RunaiJobGrouper().metadata(context(pod("test_name-4kgrb"), rjob(2)))
    assert md.name == "pg-test_name-1234-5678"
    legacy = podgroup("pg-test_name-4kgrb-1234-5678", namespace="test_namespace")
    md = RunaiJobGrouper().metadata(context(pod("test_name-4kgrb"), rjob(2), objects=[legacy]))
    assert md.name == "pg-test_name-4kgrb-1234-5678"


def test_LegacyPodGroup() -> None:
    legacy = podgroup("pg-test_name-1234-5678", namespace="test_namespace")
    md = RunaiJobGrouper().metadata(context(pod("some-pod-name-0"), rjob(), objects=[legacy]))
    assert md.name == "pg-test_name-1234-5678"
    assert "legacy" in md.provenance["name"]


def test_LegacyDisabledPodGroup() -> None:
    legacy = podgroup("pg-test_name-4kgrb-1234-5678", namespace="test_namespace")
    ctx = context(pod("test_name-4kgrb"), rjob(2), objects=[legacy], config=GroupingConfig(search_legacy_pg=False))
    assert RunaiJobGrouper().metadata(ctx).name == "pg-test_name-1234-5678"


def test_LegacyNotFound() -> None:
    assert RunaiJobGrouper().metadata(context(pod("job-a-b-c"), rjob())).name == "pg-job-a-b-1234-5678"


def test_RegularPodGroup() -> None:
    md = RunaiJobGrouper().metadata(context(pod("nodash"), rjob()))
    assert (md.name, md.min_member, md.priority_class_name) == ("pg-nodash-1234-5678", 1, "train")
