"""The real JobSet controller under real gang scheduling (upstream backend): only a JobSet is submitted
(leader 1 x 1 pod, workers 2 x 2 pods, 1 GPU each: KAI's tree admits no fewer than 5 pods); the grouper's
webhook puts each pod the Job controller creates in its gang; kube-scheduler binds nothing while the gang
does not fit and all five at once when a node is added."""

from __future__ import annotations

from typing import Any

from controller.harness import GrouperThread
from gang.gangkit import GPU, POOL_LABEL, bound, pod_group_condition
from kube import Kube, wait_until

from devtools.cluster import LocalCluster

SCHED = "scheduling.k8s.io/v1beta1"


def jobset(name: str, pool: str) -> dict[str, Any]:
    pod = {
        "restartPolicy": "Never",
        "nodeSelector": {POOL_LABEL: pool},
        "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {GPU: "1"}}}],
    }

    def rj(rj_name: str, replicas: int, parallelism: int) -> dict[str, Any]:
        job = {"parallelism": parallelism, "completions": parallelism, "template": {"spec": pod}}
        return {"name": rj_name, "replicas": replicas, "template": {"spec": job}}

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"replicatedJobs": [rj("leader", 1, 1), rj("workers", 2, 2)]},
    }




def test_the_real_jobsets_gang_binds_only_when_it_fits_and_all_at_once(
    op_sched_cluster: LocalCluster, skube: Kube, upstream: tuple[str, GrouperThread]
) -> None:
    ns, _ = upstream
    pool = "real-jobset"
    op_sched_cluster.add_nodes(1, gpus=4, labels={POOL_LABEL: pool})  # 4 GPUs free, the gang needs 5
    js = skube.create(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", jobset("big", pool))
    name = f"pg-big-{js['metadata']['uid']}"
    path = f"/apis/{SCHED}/namespaces/{ns}/podgroups/{name}"

    def pods() -> list[str] | None:
        items = skube.list(f"/api/v1/namespaces/{ns}/pods", label_selector="jobset.sigs.k8s.io/jobset-name=big")
        return sorted(p["metadata"]["name"] for p in items) if len(items) == 5 else None

    names = wait_until(pods, 90, what="the 5 pods the JobSet and Job controllers create")
    for n in names:
        assert skube.get(f"/api/v1/namespaces/{ns}/pods/{n}")["spec"]["schedulingGroup"] == {"podGroupName": name}
    wait_until(lambda: skube.exists(path) and skube.get(path)["spec"]["schedulingPolicy"]["gang"]["minCount"] == 5,
               60, what="PodGroup minCount 5")
    wait_until(lambda: pod_group_condition(skube, path) == ("False", "Unschedulable"), 90,
               what="the scheduler found the gang unschedulable")
    assert bound(skube, ns, names) == {}, "no partial placement: 4 of 5 would fit"

    op_sched_cluster.add_nodes(1, gpus=4, labels={POOL_LABEL: pool})
    placed = wait_until(lambda: len(b := bound(skube, ns, names)) == 5 and b, 90, what="the gang bound")
    assert set(placed.values()) <= set(op_sched_cluster.nodes)
