"""CronJob grouper (KAI ``cronjob_grouper_test.go``): the Job run is the PodGroup's top owner."""

from __future__ import annotations

import pytest
from builders import context, obj, owner, pod

from grouper.model.errors import InvalidWorkload, OwnerNotFound
from grouper.model.podgroup import OwnerRef
from grouper.plugins.cronjob import CronJobGrouper


def chain() -> tuple[dict, dict]:
    cron = owner("CronJob", "batch/v1", "nightly", uid="c-1", labels={"project": "team"})
    job = obj("batch/v1", "Job", "nightly-2900", namespace="test_namespace", uid="j-1", owner=cron,
              labels={"job-label": "x"}, annotations={"kai.scheduler/batch-min-member": "2"})
    return cron, job


def test_GetPodGroupMetadata() -> None:
    cron, job = chain()
    ctx = context(pod("nightly-2900-abc", owner=job), cron, owners=[job, cron], objects=[job])
    md = CronJobGrouper().metadata(ctx)
    assert md is not None
    assert md.name == "pg-nightly-2900-j-1"
    assert md.owner == OwnerRef("batch/v1", "Job", "nightly-2900", "j-1")
    assert md.labels == {"job-label": "x"}
    assert md.queue == "default-queue"  # queue labels are read from the top owner (the Job) and the pod
    assert md.min_member == 2  # KAI v0.18: the default grouper honours batch-min-member on its top owner (the Job)
    assert md.priority_class_name == "train"


def test_GetPodGroupMetadataJobOwnerNotFound() -> None:
    cron, _ = chain()
    with pytest.raises(InvalidWorkload) as err:
        CronJobGrouper().metadata(context(pod("p", owner=cron), cron))
    assert str(err.value) == ("Pod test_namespace/p: field metadata.ownerReferences: no owner reference of kind Job "
                              "(a CronJob's pods are owned by its Jobs)")


def test_GetPodGroupMetadataJobNotExists() -> None:
    cron, job = chain()
    with pytest.raises(OwnerNotFound, match=r"Job test_namespace/nightly-2900 .* not found"):
        CronJobGrouper().metadata(context(pod("p", owner=job), cron, owners=[job, cron]))


def test_job_gone_while_pod_is_deleted_leaves_pod_alone() -> None:
    cron, job = chain()
    assert CronJobGrouper().metadata(context(pod("p", owner=job, deleting=True), cron, owners=[job, cron])) is None


def test_CronJobLabelsAndAnnotationsAreNotRead() -> None:
    """As KAI: only the Job is an owner, so the CronJob's priority label and delay annotation do not count."""
    from builders import priority_class

    cron = owner("CronJob", "batch/v1", "nightly", uid="c-1", labels={"priorityClassName": "batch-low"},
                 annotations={"kai.scheduler/preemption-delay": "5m"})
    job = obj("batch/v1", "Job", "nightly-1", namespace="test_namespace", uid="j-1", owner=cron)
    ctx = context(pod("p", owner=job), cron, owners=[job, cron], objects=[job, priority_class("batch-low")])
    md = CronJobGrouper().metadata(ctx)
    assert md is not None
    assert (md.priority_class_name, md.preemption_delay, md.min_member) == ("train", None, 1)


def test_JobTemplateMetadataCounts() -> None:
    """What users set in spec.jobTemplate.metadata arrives on every Job and is honoured there."""
    from builders import priority_class

    cron = owner("CronJob", "batch/v1", "nightly", uid="c-1")
    job = obj("batch/v1", "Job", "nightly-1", namespace="test_namespace", uid="j-1", owner=cron,
              labels={"priorityClassName": "batch-low"}, annotations={"kai.scheduler/preemption-delay": "5m"})
    ctx = context(pod("p", owner=job), cron, owners=[job, cron], objects=[job, priority_class("batch-low")])
    md = CronJobGrouper().metadata(ctx)
    assert md is not None
    assert (md.priority_class_name, md.preemption_delay) == ("batch-low", "5m0s")


def test_JobBatchMinMemberBelowOneIsAnError() -> None:
    cron = owner("CronJob", "batch/v1", "nightly", uid="c-1")
    job = obj("batch/v1", "Job", "nightly-1", namespace="test_namespace", uid="j-1", owner=cron,
              annotations={"kai.scheduler/batch-min-member": "0"})
    with pytest.raises(InvalidWorkload, match=r"Job test_namespace/nightly-1: .*batch-min-member.* must be >= 1"):
        CronJobGrouper().metadata(context(pod("p", owner=job), cron, owners=[job, cron], objects=[job]))
