"""End to end with a real kube-scheduler (GangScheduling plugin) and simulated nodes, upstream backend:
the grouper's webhook puts each pod in its gang at creation, the reconciler writes the Workload and
PodGroup, the scheduler places the gang all at once or not at all.

A JobSet-shaped workload (the test plays the JobSet operator: JobSet + child Jobs; the real Job controller
creates the pods): leader 1 x 1 pod, workers 2 x 2 pods; KAI's tree (root all replicatedJobs, each
replicatedJob all replicas) admits no fewer than 5 pods, the upstream gang's minCount.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest
from controller.harness import GrouperThread, child_jobs, label_namespace
from gangkit import GPU, POOL_LABEL, bound, pod_group_condition
from kube import Kube, wait_until
from webhooks import grouper_with_webhook

from devtools.cluster import LocalCluster

SCHED = "scheduling.k8s.io/v1beta1"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"


def pod_spec(pool: str, gpus: int = 1) -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "nodeSelector": {POOL_LABEL: pool},
        "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {GPU: str(gpus)}}}],
    }


def gang_jobset(name: str, pool: str, workers: int = 2) -> dict[str, Any]:
    def rj(rj_name: str, replicas: int, parallelism: int) -> dict[str, Any]:
        job = {"parallelism": parallelism, "completions": parallelism, "template": {"spec": pod_spec(pool)}}
        return {"name": rj_name, "replicas": replicas, "template": {"spec": job}}

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"replicatedJobs": [rj("leader", 1, 1), rj("workers", workers, 2)]},
    }


def submit(kube: Kube, ns: str, js: dict[str, Any]) -> dict[str, Any]:
    created = kube.create(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", js)
    for j in child_jobs(created):
        kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", j)
    return created


def pod_names(kube: Kube, ns: str, count: int, selector: str) -> list[str] | None:
    ps = kube.list(f"/api/v1/namespaces/{ns}/pods", label_selector=selector)
    return sorted(p["metadata"]["name"] for p in ps) if len(ps) == count else None


def min_count(kube: Kube, ns: str, name: str) -> int | None:
    path = f"/apis/{SCHED}/namespaces/{ns}/podgroups/{name}"
    if not kube.exists(path):
        return None
    return int(kube.get(path)["spec"]["schedulingPolicy"]["gang"]["minCount"])


def gang_unschedulable(kube: Kube, ns: str, name: str) -> bool:
    """The scheduler tried the whole gang and could not place it (its PodGroup's condition says so)."""
    return pod_group_condition(kube, f"/apis/{SCHED}/namespaces/{ns}/podgroups/{name}") == (
        "False",
        "Unschedulable",
    )


@pytest.fixture
def upstream(sched_cluster: LocalCluster, skube: Kube, sns: str) -> Iterator[GrouperThread]:
    label_namespace(skube, sns)
    with grouper_with_webhook(
        sched_cluster, skube, sns, backend="upstream", scheduler_name="default-scheduler"
    ) as g:
        yield g


def test_a_gang_that_fits_is_bound_all_at_once(
    sched_cluster: LocalCluster, skube: Kube, sns: str, pool: str, upstream: GrouperThread
) -> None:
    sched_cluster.add_nodes(2, gpus=4, labels={POOL_LABEL: pool})
    js = submit(skube, sns, gang_jobset("fit", pool))
    name = f"pg-fit-{js['metadata']['uid']}"
    names = wait_until(lambda: pod_names(skube, sns, 5, f"{JOBSET_LABEL}=fit"), 30, what="5 pods")
    for n in names:
        assert skube.get(f"/api/v1/namespaces/{sns}/pods/{n}")["spec"]["schedulingGroup"] == {
            "podGroupName": name
        }
    placed = wait_until(lambda: len(b := bound(skube, sns, names)) == 5 and b, 60, what="5 pods bound")
    assert set(placed.values()) <= set(sched_cluster.nodes)
    assert min_count(skube, sns, name) == 5


def test_a_gang_one_pod_too_big_stays_pending_until_a_node_is_added(
    sched_cluster: LocalCluster, skube: Kube, sns: str, pool: str, upstream: GrouperThread
) -> None:
    sched_cluster.add_nodes(1, gpus=4, labels={POOL_LABEL: pool})  # 4 GPUs free, the gang needs 5
    js = submit(skube, sns, gang_jobset("big", pool))
    name = f"pg-big-{js['metadata']['uid']}"
    names = wait_until(lambda: pod_names(skube, sns, 5, f"{JOBSET_LABEL}=big"), 30, what="5 pods")
    wait_until(lambda: min_count(skube, sns, name) == 5, 30, what="PodGroup minCount 5")
    wait_until(
        lambda: gang_unschedulable(skube, sns, name), 60, what="the scheduler found the gang unschedulable"
    )
    assert bound(skube, sns, names) == {}, "no partial placement: 4 of 5 would fit"

    sched_cluster.add_nodes(1, gpus=4, labels={POOL_LABEL: pool})
    placed = wait_until(lambda: len(b := bound(skube, sns, names)) == 5 and b, 90, what="gang bound")
    assert len(placed) == 5
    path = f"/apis/{SCHED}/namespaces/{sns}/podgroups/{name}"
    wait_until(lambda: pod_group_condition(skube, path)[0] == "True", 30, what="PodGroupInitiallyScheduled")


def test_scaling_the_workload_raises_min_count_and_the_larger_gang_binds(
    sched_cluster: LocalCluster, skube: Kube, sns: str, pool: str, upstream: GrouperThread
) -> None:
    sched_cluster.add_nodes(2, gpus=4, labels={POOL_LABEL: pool})
    js = submit(skube, sns, gang_jobset("grow", pool))
    name = f"pg-grow-{js['metadata']['uid']}"
    wait_until(lambda: min_count(skube, sns, name) == 5, 30, what="minCount 5")
    # the operator scales workers 2 -> 3 replicas: the JobSet changes, then the new child Job appears
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{sns}/jobsets/grow"
    grown = copy.deepcopy(skube.get(path))
    grown["spec"]["replicatedJobs"][1]["replicas"] = 3
    grown = skube.replace(path, grown)
    wait_until(lambda: min_count(skube, sns, name) == 7, 30, what="minCount 7 after scaling")
    new = [j for j in child_jobs(grown) if j["metadata"]["name"].endswith("workers-2")]
    skube.create(f"/apis/batch/v1/namespaces/{sns}/jobs", new[0])
    names = wait_until(lambda: pod_names(skube, sns, 7, f"{JOBSET_LABEL}=grow"), 30, what="7 pods")
    wait_until(lambda: len(bound(skube, sns, names)) == 7, 60, what="7 pods bound")


@pytest.mark.parametrize("size", [3, 100])
def test_time_from_submission_to_all_pods_bound(
    sched_cluster: LocalCluster, skube: Kube, sns: str, pool: str, upstream: GrouperThread, size: int
) -> None:
    sched_cluster.add_nodes(-(-size // 4), gpus=4, labels={POOL_LABEL: pool})
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "annotations": {"kai.scheduler/batch-min-member": str(size)}},
        "spec": {"parallelism": size, "completions": size, "template": {"spec": pod_spec(pool)}},
    }
    t0 = time.monotonic()
    skube.create(f"/apis/batch/v1/namespaces/{sns}/jobs", job)
    names = wait_until(lambda: pod_names(skube, sns, size, "job-name=train"), 60, what=f"{size} pods")
    wait_until(lambda: len(bound(skube, sns, names)) == size, 120, interval=0.05, what=f"{size} pods bound")
    elapsed = time.monotonic() - t0
    pods = skube.list(f"/api/v1/namespaces/{sns}/pods", label_selector="job-name=train")
    assert all(p["spec"].get("schedulingGroup") for p in pods)
    print(
        f"\n[measure] upstream backend: {size}-pod gang, submission to all {size} pods bound: {elapsed:.2f}s"
    )
