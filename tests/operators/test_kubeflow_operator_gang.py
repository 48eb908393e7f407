"""The real Kubeflow training-operator under real gang scheduling (upstream backend): only the job is
submitted, a PyTorchJob (Master 1 GPU + 2 Workers of 2 GPUs) or an MPIJob (Launcher 1 GPU + 2 Workers of 2
GPUs), each a gang of 3 pods needing 5 GPUs; the grouper's webhook puts each pod the operator creates in
its gang; kube-scheduler binds nothing while the gang does not fit (one node of 4 GPUs would take the first
pod and a worker) and all three at once when a node is added."""

from __future__ import annotations

from typing import Any

from clusters import DEPLOY_CRDS, cluster_fixture
from controller.harness import GrouperThread
from gang.gangkit import GPU, POOL_LABEL, bound, pod_group_condition
from kube import Kube, wait_until

from devtools.cluster import LocalCluster

OPERATORS = ["kubeflow"]
# its own control plane with the training-operator, kube-scheduler and kwok (tests/clusters.py)
op_sched_cluster = cluster_fixture("op_sched_cluster", shared=False, crds=DEPLOY_CRDS, operators=OPERATORS,
                                   scheduler=True)
SCHED = "scheduling.k8s.io/v1beta1"
JOB_NAME = "training.kubeflow.org/job-name"


def job(kind: str, name: str, pool: str) -> dict[str, Any]:
    container = "pytorch" if kind == "PyTorchJob" else "mpi"  # the PyTorchJob webhook wants `pytorch`

    def spec(gpus: int, replicas: int) -> dict[str, Any]:
        return {"replicas": replicas, "restartPolicy": "OnFailure", "template": {"spec": {
            "nodeSelector": {POOL_LABEL: pool},
            "containers": [{"name": container, "image": "registry.example.com/train:1",
                            "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}],
        }}}

    first, field = ("Master", "pytorchReplicaSpecs") if kind == "PyTorchJob" else ("Launcher", "mpiReplicaSpecs")
    return {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": name},
            "spec": {field: {first: spec(1, 1), "Worker": spec(2, 2)}}}


def test_the_real_jobs_gangs_bind_only_when_they_fit_and_all_at_once(
    op_sched_cluster: LocalCluster, skube: Kube, upstream: tuple[str, GrouperThread]
) -> None:
    """A PyTorchJob, then an MPIJob, in the module's one gang namespace (each on a node pool of its own)."""
    ns, _ = upstream
    for kind in ("PyTorchJob", "MPIJob"):
        gang_binds_only_when_it_fits(op_sched_cluster, skube, ns, kind)


def gang_binds_only_when_it_fits(op_sched_cluster: LocalCluster, skube: Kube, ns: str, kind: str) -> None:
    name = kind.lower()
    pool = f"real-{name}"
    op_sched_cluster.add_nodes(1, gpus=4, labels={POOL_LABEL: pool})  # 4 GPUs free, the gang needs 5
    created = skube.create(f"/apis/kubeflow.org/v1/namespaces/{ns}/{name}s", job(kind, name, pool))
    group = f"pg-{name}-{created['metadata']['uid']}"
    path = f"/apis/{SCHED}/namespaces/{ns}/podgroups/{group}"

    def pods() -> list[str] | None:
        items = skube.list(f"/api/v1/namespaces/{ns}/pods", label_selector=f"{JOB_NAME}={name}")
        return sorted(p["metadata"]["name"] for p in items) if len(items) == 3 else None

    names = wait_until(pods, 90, what=f"the 3 pods the training-operator creates for its {kind}")
    for n in names:
        assert skube.get(f"/api/v1/namespaces/{ns}/pods/{n}")["spec"]["schedulingGroup"] == {"podGroupName": group}
    wait_until(lambda: skube.exists(path) and skube.get(path)["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3,
               60, what=f"{kind}: PodGroup minCount 3")
    wait_until(lambda: pod_group_condition(skube, path) == ("False", "Unschedulable"), 90,
               what=f"{kind}: the scheduler found the gang unschedulable")
    assert bound(skube, ns, names) == {}, f"{kind}: no partial placement: the first pod and a worker would fit"

    op_sched_cluster.add_nodes(1, gpus=4, labels={POOL_LABEL: pool})
    placed = wait_until(lambda: len(b := bound(skube, ns, names)) == 3 and b, 90, what=f"{kind}: the gang bound")
    assert set(placed.values()) <= set(op_sched_cluster.nodes)
