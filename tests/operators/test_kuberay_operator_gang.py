"""The real KubeRay operator under real gang scheduling (upstream backend): only a RayCluster is submitted
(head 1 GPU, a worker group of 2 workers with 2 GPUs each: minMember 3, 5 GPUs); the grouper's webhook
puts each pod KubeRay creates in its gang; kube-scheduler binds nothing while the gang does not fit (one
node of 4 GPUs would take the head and one worker) and all three at once when a node is added."""

from __future__ import annotations

from typing import Any

from clusters import DEPLOY_CRDS, cluster_fixture
from controller.harness import GrouperThread
from gang.gangkit import GPU, POOL_LABEL, bound, pod_group_condition
from kube import Kube, wait_until

from devtools.cluster import LocalCluster

OPERATORS = ["kuberay"]
# its own control plane with the kuberay operator, kube-scheduler and kwok (tests/clusters.py)
op_sched_cluster = cluster_fixture("op_sched_cluster", shared=False, crds=DEPLOY_CRDS, operators=OPERATORS,
                                   scheduler=True)
SCHED = "scheduling.k8s.io/v1beta1"


def raycluster(name: str, pool: str) -> dict[str, Any]:
    def template(container: str, gpus: int) -> dict[str, Any]:
        return {"spec": {
            "nodeSelector": {POOL_LABEL: pool},
            "containers": [{"name": container, "image": "rayproject/ray:2.48.0",
                            "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}],
        }}

    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": template("ray-head", 1)},
            "workerGroupSpecs": [{"groupName": "workers", "replicas": 2, "minReplicas": 2, "maxReplicas": 2,
                                  "rayStartParams": {}, "template": template("ray-worker", 2)}],
        },
    }




def test_the_real_rayclusters_gang_binds_only_when_it_fits_and_all_at_once(
    op_sched_cluster: LocalCluster, skube: Kube, upstream: tuple[str, GrouperThread]
) -> None:
    ns, _ = upstream
    pool = "real-raycluster"
    op_sched_cluster.add_nodes(1, gpus=4, labels={POOL_LABEL: pool})  # 4 GPUs free, the gang needs 5
    rc = skube.create(f"/apis/ray.io/v1/namespaces/{ns}/rayclusters", raycluster("ray", pool))
    name = f"pg-ray-{rc['metadata']['uid']}"
    path = f"/apis/{SCHED}/namespaces/{ns}/podgroups/{name}"

    def pods() -> list[str] | None:
        items = skube.list(f"/api/v1/namespaces/{ns}/pods", label_selector="ray.io/cluster=ray")
        return sorted(p["metadata"]["name"] for p in items) if len(items) == 3 else None

    names = wait_until(pods, 90, what="the head and 2 workers KubeRay creates")
    for n in names:
        assert skube.get(f"/api/v1/namespaces/{ns}/pods/{n}")["spec"]["schedulingGroup"] == {"podGroupName": name}
    wait_until(lambda: skube.exists(path) and skube.get(path)["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3,
               60, what="PodGroup minCount 3")
    wait_until(lambda: pod_group_condition(skube, path) == ("False", "Unschedulable"), 90,
               what="the scheduler found the gang unschedulable")
    assert bound(skube, ns, names) == {}, "no partial placement: the head and a worker would fit"

    op_sched_cluster.add_nodes(1, gpus=4, labels={POOL_LABEL: pool})
    placed = wait_until(lambda: len(b := bound(skube, ns, names)) == 3 and b, 90, what="the gang bound")
    assert set(placed.values()) <= set(op_sched_cluster.nodes)
