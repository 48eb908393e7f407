"""The local control plane with a real kube-scheduler and simulated nodes (devtools.cluster).

Checks the harness itself and the upstream gang scheduler it runs, before any grouper is involved:
a pod is bound to a kwok node and runs; a gang (upstream Workload + PodGroup, minCount 3) that does not
fit stays entirely unbound until a node is added, then binds at once; a deleted node's pods are deleted by
kube-controller-manager's pod garbage collector, as in a real cluster (only clusters with real nodes run it).
"""

from __future__ import annotations

from gangkit import GPU, POOL_LABEL, bound, gpu_pod, pod_group_condition
from kube import Kube, wait_until

from devtools.cluster import LocalCluster
from devtools.cluster.cluster import NODE_CONTROLLERS

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


def test_the_pod_gc_runs_only_in_clusters_with_real_nodes() -> None:
    """Clusters without nodes bind pods to made-up node names: the pod GC would delete those pods."""
    gc = set(NODE_CONTROLLERS)
    assert not gc & set(LocalCluster().controllers)
    assert gc <= set(LocalCluster(scheduler=True).controllers)
    assert gc <= set(LocalCluster(kwok_nodes=1).controllers)
    assert not gc & set(LocalCluster(scheduler=True, pod_gc=False).controllers)
    assert gc <= set(LocalCluster(pod_gc=True).controllers)


def test_the_pods_of_a_deleted_node_are_deleted_by_the_pod_gc(
    sched_cluster: LocalCluster, skube: Kube, sns: str, pool: str
) -> None:
    nodes = sched_cluster.add_nodes(2, gpus=4, labels={POOL_LABEL: pool})
    for n in ("a", "b"):  # 4 GPUs each: one per node
        skube.create(f"/api/v1/namespaces/{sns}/pods", gpu_pod(n, pool, 4))
    placed = wait_until(lambda: len(b := bound(skube, sns, ["a", "b"])) == 2 and b, 60, what="a and b bound")
    assert set(placed.values()) == set(nodes)
    gone, kept = sorted(placed, key=lambda pod: placed[pod] != nodes[0])  # the pod on nodes[0] goes

    sched_cluster.delete_node(nodes[0])
    # a GC pass every 20 s, the node confirmed missing 40 s after first seen missing: 40-80 s
    wait_until(lambda: not skube.exists(f"/api/v1/namespaces/{sns}/pods/{gone}"), 150, interval=1,
               what=f"pod {gone} of the deleted node deleted")
    log = sched_cluster.log_path("kube-controller-manager").read_text()
    assert f'"Forced deletion of orphaned Pod succeeded" pod="{sns}/{gone}"' in log
    assert skube.exists(f"/api/v1/namespaces/{sns}/pods/{kept}"), "a pod of a node that is still there stays"
