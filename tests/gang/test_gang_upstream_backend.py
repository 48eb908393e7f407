"""``grouper run --backend=upstream`` against the real API server with the Workload API on: decisions are
written as scheduling.k8s.io Workload + PodGroup (minCount from minMember), what they cannot carry is in
the decision record, pods are not patched, and a workload whose pods already joined a PodGroup of their
own controller is skipped."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube import Kube, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from controller.harness import GrouperThread, label_namespace

SCHED = "scheduling.k8s.io/v1beta1"
MIN = "kai.scheduler/batch-min-member"


def upstream_job(name: str, parallelism: int, min_member: int, *, suspend: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "annotations": {MIN: str(min_member)}},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "suspend": suspend,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}],
                }
            },
        },
    }


@pytest.fixture
def scoped(skube: Kube, sns: str) -> str:
    label_namespace(skube, sns)
    return sns


@pytest.fixture
def upstream(sched_cluster: Any, scoped: str) -> Iterator[GrouperThread]:
    with GrouperThread(sched_cluster, scoped, backend="upstream", scheduler_name="default-scheduler") as g:
        yield g


def workload_objects(kube: Kube, ns: str, name: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    if not kube.exists(f"/apis/{SCHED}/namespaces/{ns}/podgroups/{name}"):
        return None
    return (
        kube.get(f"/apis/{SCHED}/namespaces/{ns}/workloads/{name}"),
        kube.get(f"/apis/{SCHED}/namespaces/{ns}/podgroups/{name}"),
    )


def test_a_job_becomes_a_workload_and_a_gang_pod_group(
    skube: Kube, scoped: str, upstream: GrouperThread
) -> None:
    ns = scoped
    job = skube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", upstream_job("train", 3, 3))
    uid = job["metadata"]["uid"]
    name = f"pg-train-{uid}"
    wl, pg = wait_until(lambda: workload_objects(skube, ns, name), 30, what="Workload + PodGroup")
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": uid}]
    assert wl["metadata"]["ownerReferences"] == owner and pg["metadata"]["ownerReferences"] == owner
    assert wl["spec"]["controllerRef"] == {"apiGroup": "batch", "kind": "Job", "name": "train"}
    (template,) = wl["spec"]["podGroupTemplates"]  # (the server adds schedulingConstraints: null)
    assert (template["name"], template["schedulingPolicy"]) == ("main", {"gang": {"minCount": 3}})
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert pg["spec"]["workloadRef"] == {"workloadName": name, "templateName": "main"}

    upstream.wait_idle()
    assert skube.list(f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups") == []  # no KAI PodGroup
    assert upstream.requests("patch", "pods") == 0  # pods join at admission, never patched
    rec = upstream.store.pod_group(ns, name)
    assert rec is not None and rec.ok
    notes = "\n".join(rec.notes)
    assert "queue" in notes and "not carried" in notes  # KAI's default queue has no upstream field
    assert "3 pod(s) joined no PodGroup" in notes  # created without the webhook


def test_changing_the_minimum_updates_min_count_in_place(
    skube: Kube, scoped: str, upstream: GrouperThread
) -> None:
    ns = scoped
    job = skube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", upstream_job("scale", 3, 3))
    name = f"pg-scale-{job['metadata']['uid']}"
    _, pg = wait_until(lambda: workload_objects(skube, ns, name), 30, what="PodGroup")
    skube.patch(f"/apis/batch/v1/namespaces/{ns}/jobs/scale", {"metadata": {"annotations": {MIN: "2"}}})

    def min_count() -> bool:
        got = workload_objects(skube, ns, name)
        return got is not None and got[1]["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2

    wait_until(min_count, 30, what="minCount 2")
    wl, pg2 = workload_objects(skube, ns, name) or ({}, {})
    assert wl["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert pg2["metadata"]["uid"] == pg["metadata"]["uid"]  # updated, not replaced


def test_pods_already_in_their_controllers_pod_group_are_left_alone(
    skube: Kube, scoped: str, upstream: GrouperThread
) -> None:
    ns = scoped
    job = skube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", upstream_job("own", 2, 2, suspend=True))
    ref = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "own",
        "uid": job["metadata"]["uid"],
        "controller": True,
    }
    for i in range(2):  # what a Workload-aware Job controller creates: pods that join its own PodGroup
        skube.create(
            f"/api/v1/namespaces/{ns}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"own-{i}", "ownerReferences": [ref], "labels": {"job-name": "own"}},
                "spec": {
                    "schedulingGroup": {"podGroupName": "theirs"},
                    "containers": [{"name": "c", "image": "busybox"}],
                },
            },
        )
    wait_until(lambda: upstream.store.pod(ns, "own-1"), 30, what="decision record")
    upstream.wait_idle()
    for i in range(2):  # each pod's decision steps aside (grouper.core.step_aside), naming the field
        rec = upstream.store.pod(ns, f"own-{i}")
        assert rec is not None and (rec.outcome, rec.reason) == ("skipped", "GroupedByController")
        assert "spec.schedulingGroup.podGroupName=theirs" in rec.message
    assert skube.list(f"/apis/{SCHED}/namespaces/{ns}/workloads") == []
    assert skube.list(f"/apis/{SCHED}/namespaces/{ns}/podgroups") == []
