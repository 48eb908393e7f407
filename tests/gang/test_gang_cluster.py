"""The local control plane with a real kube-scheduler and simulated nodes (devtools.cluster).

Checks the harness itself and the upstream gang scheduler it runs, before any grouper is involved:
a pod is bound to a kwok node and runs; a gang (upstream Workload + PodGroup, minCount 3) that does not
fit stays entirely unbound until a node is added, then binds at once.
"""

from __future__ import annotations

from gangkit import GPU, POOL_LABEL, bound, gpu_pod, pod_group_condition
from kube import Kube, wait_until

from devtools.cluster import LocalCluster

SCHED = "scheduling.k8s.io/v1beta1"


def test_nodes_have_the_asked_gpus_and_are_ready(sched_cluster: LocalCluster, skube: Kube, pool: str) -> None:
    (name,) = sched_cluster.add_nodes(1, gpus=4, labels={POOL_LABEL: pool})
    node = skube.get(f"/api/v1/nodes/{name}")
    assert node["status"]["allocatable"][GPU] == "4"
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])


def test_a_pod_is_bound_by_the_scheduler_and_runs(
    sched_cluster: LocalCluster, skube: Kube, sns: str, pool: str
) -> None:
    (node,) = sched_cluster.add_nodes(1, gpus=4, labels={POOL_LABEL: pool})
    skube.create(f"/api/v1/namespaces/{sns}/pods", gpu_pod("p", pool, 2))
    pod = wait_until(
        lambda: (
            (p := skube.get(f"/api/v1/namespaces/{sns}/pods/p"))["status"].get("phase") == "Running" and p
        ),
        timeout=60,
        what="pod p Running",
    )
    assert pod["spec"]["nodeName"] == node
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"]["conditions"])


def test_a_pod_bigger_than_any_node_is_unschedulable(
    sched_cluster: LocalCluster, skube: Kube, sns: str, pool: str
) -> None:
    sched_cluster.add_nodes(1, gpus=4, labels={POOL_LABEL: pool})
    skube.create(f"/api/v1/namespaces/{sns}/pods", gpu_pod("big", pool, 5))

    def unschedulable() -> bool:
        conds = skube.get(f"/api/v1/namespaces/{sns}/pods/big")["status"].get("conditions") or []
        return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conds)

    wait_until(unschedulable, timeout=60, what="pod big Unschedulable")
    assert not skube.get(f"/api/v1/namespaces/{sns}/pods/big")["spec"].get("nodeName")


def test_upstream_gang_binds_all_or_nothing(
    sched_cluster: LocalCluster, skube: Kube, sns: str, pool: str
) -> None:
    sched_cluster.add_nodes(1, gpus=4, labels={POOL_LABEL: pool})
    gang = {"gang": {"minCount": 3}}
    skube.create(
        f"/apis/{SCHED}/namespaces/{sns}/workloads",
        {
            "apiVersion": SCHED,
            "kind": "Workload",
            "metadata": {"name": "w"},
            "spec": {"podGroupTemplates": [{"name": "main", "schedulingPolicy": gang}]},
        },
    )
    skube.create(
        f"/apis/{SCHED}/namespaces/{sns}/podgroups",
        {
            "apiVersion": SCHED,
            "kind": "PodGroup",
            "metadata": {"name": "w"},
            "spec": {"workloadRef": {"workloadName": "w", "templateName": "main"}, "schedulingPolicy": gang},
        },
    )
    names = ["a", "b", "c"]
    for n in names:  # 3 x 2 GPUs on one 4-GPU node: two would fit, the gang does not
        skube.create(f"/api/v1/namespaces/{sns}/pods", gpu_pod(n, pool, 2, group="w"))
    path = f"/apis/{SCHED}/namespaces/{sns}/podgroups/w"
    wait_until(
        lambda: pod_group_condition(skube, path) == ("False", "Unschedulable"), 60, what="gang unschedulable"
    )
    assert bound(skube, sns, names) == {}, "no partial placement"

    sched_cluster.add_nodes(1, gpus=4, labels={POOL_LABEL: pool})
    placed = wait_until(lambda: len(b := bound(skube, sns, names)) == 3 and b, timeout=90, what="gang bound")
    assert set(placed) == set(names)
