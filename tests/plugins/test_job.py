"""batch/v1 Job grouper (KAI ``job_grouper_test.go``) and its error paths."""

from __future__ import annotations

from typing import Any

import pytest
from builders import context, owner, pod, podgroup

from grouper.core.config import GroupingConfig
from grouper.model.errors import GroupingError, InvalidWorkload
from grouper.plugins.job import JobGrouper

NO_LEGACY = GroupingConfig(search_legacy_pg=False)


def job(annotations: dict[str, str] | None = None, **kw: Any) -> dict:
    return owner("Job", "batch/v1", "test_job", uid="1234-5678", annotations=annotations, **kw)


def test_MultiPodJobSharesPodGroup() -> None:
    top = owner(uid="1234-5678", labels={"test_label": "v"}, annotations={"test_annotation": "v"},
                spec={"parallelism": 2})
    a = JobGrouper().metadata(context(pod("test_name-4kgrb"), top, config=NO_LEGACY))
    b = JobGrouper().metadata(context(pod("test_name-77t4m"), top, config=NO_LEGACY))
    assert a.name == b.name == "pg-test_name-1234-5678"
    assert (a.owner.kind, a.owner.api_version, a.owner.uid, a.owner.name) == ("test_kind", "test_version",
                                                                              "1234-5678", "test_name")
    assert (len(a.annotations), len(a.labels), a.queue, a.priority_class_name) == (2, 1, "default-queue", "train")


def test_LegacyPodGroup() -> None:
    p = pod("test_job-abc", namespace="test_namespace")
    legacy = podgroup("pg-test_job-abc-1234-5678", namespace="test_namespace")
    md = JobGrouper().metadata(context(p, job({"kai.scheduler/batch-min-member": "3"}), objects=[legacy]))
    assert md.name == "pg-test_job-abc-1234-5678"
    assert md.min_member == 1  # legacy groups keep minMember 1
    assert "legacy" in md.provenance["name"]


def test_LegacyDisabledPodGroup() -> None:
    p = pod("test_job-abc", namespace="test_namespace")
    legacy = podgroup("pg-test_job-abc-1234-5678", namespace="test_namespace")
    md = JobGrouper().metadata(context(p, job(), objects=[legacy], config=NO_LEGACY))
    assert md.name == "pg-test_job-1234-5678"


def test_LegacyNotFound() -> None:
    md = JobGrouper().metadata(context(pod("test_job-abc", namespace="test_namespace"), job()))
    assert md.name == "pg-test_job-1234-5678"


def test_MinMemberOverride() -> None:
    md = JobGrouper().metadata(context(pod("test_job-abc"), job({"kai.scheduler/batch-min-member": "3"})))
    assert md.min_member == 3
    assert md.provenance["minMember"] == "annotation kai.scheduler/batch-min-member on Job test_namespace/test_job"


@pytest.mark.parametrize("value", ["abc", "1.5", "", " 3", "3 ", "1_0", "0x10", "99999999999"])
def test_MinMemberOverrideInvalid(value: str) -> None:
    with pytest.raises(InvalidWorkload) as err:
        JobGrouper().metadata(context(pod("test_job-abc"), job({"kai.scheduler/batch-min-member": value})))
    message = str(err.value)
    assert message.startswith('Job test_namespace/test_job: field metadata.annotations["kai.scheduler/batch-min-member"]: ')


def test_MinMemberOverride_message() -> None:
    with pytest.raises(InvalidWorkload) as err:
        JobGrouper().metadata(context(pod(), job({"kai.scheduler/batch-min-member": "abc"})))
    assert str(err.value) == ('Job test_namespace/test_job: field metadata.annotations["kai.scheduler/batch-min-member"]: '
                              '"abc" is not an integer')


@pytest.mark.parametrize("value", ["-2", "0"])
def test_MinMemberOverrideBelowOneRejected(value: str) -> None:
    """KAI v0.18 ``minmember.Parse``: values below 1 are an error naming the annotated Job."""
    with pytest.raises(InvalidWorkload, match=rf"Job test_namespace/test_job: .*{value} is not valid: it must be >= 1"):
        JobGrouper().metadata(context(pod(), job({"kai.scheduler/batch-min-member": value})))


def test_MinMemberOverrideSigned() -> None:
    assert JobGrouper().metadata(context(pod(), job({"kai.scheduler/batch-min-member": "+4"}))).min_member == 4


def test_MixedUpgradeOnlyOnePodHasLegacy() -> None:
    legacy = podgroup("pg-test_job-aaaaa-1234-5678", namespace="test_namespace")
    a = JobGrouper().metadata(context(pod("test_job-aaaaa"), job(), objects=[legacy]))
    b = JobGrouper().metadata(context(pod("test_job-bbbbb"), job(), objects=[legacy]))
    assert (a.name, b.name) == ("pg-test_job-aaaaa-1234-5678", "pg-test_job-1234-5678")


def test_LegacySearchDisabledIgnoresLegacyPodGroup() -> None:
    legacy = podgroup("pg-test_job-aaaaa-1234-5678", namespace="test_namespace")
    md = JobGrouper().metadata(context(pod("test_job-aaaaa"), job(), objects=[legacy], config=NO_LEGACY))
    assert md.name == "pg-test_job-1234-5678"


def test_RegularPodGroup() -> None:
    md = JobGrouper().metadata(context(pod("test_job-abc"), job()))
    assert (md.name, md.min_member, md.priority_class_name) == ("pg-test_job-1234-5678", 1, "train")


def test_legacy_lookup_forbidden_is_an_error() -> None:
    from builders import lookups

    ctx = context(pod("test_job-abc"), job(), the_lookups=lookups(forbidden=[("scheduling.run.ai", "PodGroup")]))
    with pytest.raises(GroupingError, match="cannot look for legacy PodGroup test_namespace/pg-test_job-abc-1234-5678"):
        JobGrouper().metadata(ctx)
