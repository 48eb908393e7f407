"""The real LeaderWorkerSet controller under real gang scheduling (upstream backend): only a LeaderWorkerSet
is submitted (2 groups of a leader and a worker, 2 GPUs each); LWS's pod webhook labels each pod with its
group and worker index and the grouper's webhook puts it in its group's gang (one PodGroup per group,
minCount 2). With 6 GPUs free, one group binds and the other waits whole (it would fit half); a node added,
it binds at once."""

from __future__ import annotations

from typing import Any

from clusters import DEPLOY_CRDS, cluster_fixture
from controller.harness import GrouperThread
from gang.gangkit import GPU, POOL_LABEL, bound, pod_group_condition
from kube import Kube, wait_until

from devtools.cluster import LocalCluster

OPERATORS = ["lws"]
# its own control plane with the lws operator, kube-scheduler and kwok (tests/clusters.py)
op_sched_cluster = cluster_fixture("op_sched_cluster", shared=False, crds=DEPLOY_CRDS, operators=OPERATORS,
                                   scheduler=True)
SCHED = "scheduling.k8s.io/v1beta1"
GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"


def leaderworkerset(name: str, pool: str) -> dict[str, Any]:
    template = {"spec": {
        "nodeSelector": {POOL_LABEL: pool},
        "containers": [{"name": "c", "image": "vllm/vllm-openai:v0.10.1",
                        "resources": {"requests": {GPU: "2"}, "limits": {GPU: "2"}}}],
    }}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2, "leaderTemplate": template, "workerTemplate": template}},
    }




def test_each_real_lws_group_is_a_gang_that_binds_whole(
    op_sched_cluster: LocalCluster, skube: Kube, upstream: tuple[str, GrouperThread]
) -> None:
    ns, _ = upstream
    pool = "real-lws"
    op_sched_cluster.add_nodes(1, gpus=6, labels={POOL_LABEL: pool})  # one group (4 GPUs) fits, not two
    lws = skube.create(f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets", leaderworkerset("serve", pool))
    prefix = f"pg-serve-{lws['metadata']['uid']}-group-"

    def pods() -> dict[str, dict[str, Any]] | None:
        items = skube.list(f"/api/v1/namespaces/{ns}/pods", label_selector="leaderworkerset.sigs.k8s.io/name=serve")
        return {p["metadata"]["name"]: p for p in items} if len(items) == 4 else None

    # LWS creates a group's worker once its leader exists; a group whose leader waits still gets its worker
    created = wait_until(pods, 90, what="the 2 leaders and 2 workers LWS creates")
    for name, pod in created.items():
        group = pod["metadata"]["labels"][GROUP_INDEX]
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": f"{prefix}{group}"}, name
    paths = [f"/apis/{SCHED}/namespaces/{ns}/podgroups/{prefix}{i}" for i in (0, 1)]
    for path in paths:
        wait_until(lambda p=path: skube.exists(p) and skube.get(p)["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2,
                   60, what="PodGroup minCount 2")
    names = sorted(created)
    placed = wait_until(lambda: len(b := bound(skube, ns, names)) == 2 and b, 90, what="one group bound")
    groups = {created[n]["metadata"]["labels"][GROUP_INDEX] for n in placed}
    assert len(groups) == 1, f"no partial group: {placed}"
    (waiting,) = {"0", "1"} - groups
    wait_until(lambda: pod_group_condition(skube, f"{paths[0][:-1]}{waiting}") == ("False", "Unschedulable"), 90,
               what="the other group found unschedulable")
    assert len(bound(skube, ns, names)) == 2, "half a group bound"

    op_sched_cluster.add_nodes(1, gpus=4, labels={POOL_LABEL: pool})
    placed = wait_until(lambda: len(b := bound(skube, ns, names)) == 4 and b, 90, what="the second group bound")
    assert set(placed.values()) <= set(op_sched_cluster.nodes)
