"""Incremental reconciles against the real API server: a pod that joins an already decided workload is
decided alone (its siblings keep their decisions), while a change to an object the decisions read (the
Job) decides every pod again. Observed through ``podgrouper_pod_decisions_total{path}``, the PodGroup and
the pods' marks — what an operator sees."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from controller.harness import ANNOTATION, GrouperThread, annotated, job, label_namespace, pod_groups, pods
from kube import Kube, wait_until


@pytest.fixture
def scoped(kube: Kube, namespace: str) -> str:
    label_namespace(kube, namespace)
    return namespace


@pytest.fixture
def grouper(cluster: Any, scoped: str) -> Iterator[GrouperThread]:
    with GrouperThread(cluster, scoped) as g:
        yield g


def decisions(g: GrouperThread, path: str) -> float:
    value = g.metrics.registry.get_sample_value("podgrouper_pod_decisions_total", {"path": path})
    return value or 0.0


def creation_order(p: dict[str, Any]) -> tuple[str, str]:
    return p["metadata"]["creationTimestamp"], p["metadata"]["name"]


def test_a_replacement_pod_is_decided_alone_and_an_owner_change_decides_all(
    kube: Kube, scoped: str, grouper: GrouperThread
) -> None:
    ns = scoped
    created = kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job("train", 4))
    ps = wait_until(lambda: annotated(kube, ns, 4, "job-name=train"), 30, what="4 annotated pods")
    name = f"pg-train-{created['metadata']['uid']}"
    assert {p["metadata"]["annotations"][ANNOTATION] for p in ps} == {name}
    grouper.wait_idle()
    full, incremental = decisions(grouper, "full"), decisions(grouper, "incremental")
    assert full + incremental >= 4
    pg_version = pod_groups(kube, ns)[name]["metadata"]["resourceVersion"]

    # the oldest pod goes; the Job controller creates a replacement: one decision, nothing else re-decided
    oldest = min(ps, key=creation_order)["metadata"]["name"]
    kube.delete(f"/api/v1/namespaces/{ns}/pods/{oldest}")
    wait_until(
        lambda: (got := annotated(kube, ns, 4, "job-name=train")) is not None
        and oldest not in {p["metadata"]["name"] for p in got},
        30,
        what="the replacement pod annotated",
    )
    grouper.wait_idle()
    assert decisions(grouper, "full") == full, "no pod but the new one was decided again"
    # the replacement, plus the deleted pod once if a reconcile saw it marked for deletion (the Job
    # controller's finalizer keeps it a moment) before it was gone
    assert incremental + 1 <= decisions(grouper, "incremental") <= incremental + 2
    assert pod_groups(kube, ns)[name]["metadata"]["resourceVersion"] == pg_version, "PodGroup untouched"
    assert {p["metadata"]["annotations"][ANNOTATION] for p in pods(kube, ns, "job-name=train")} == {name}

    # a label on the Job (copied to its PodGroup): every pod's decision read the Job, so all are decided again
    kube.patch(f"/apis/batch/v1/namespaces/{ns}/jobs/train", {"metadata": {"labels": {"team": "vision"}}})
    wait_until(
        lambda: pod_groups(kube, ns)[name]["metadata"].get("labels", {}).get("team") == "vision",
        30,
        what="the Job's new label on its PodGroup",
    )
    grouper.wait_idle()
    assert decisions(grouper, "full") >= full + 4
