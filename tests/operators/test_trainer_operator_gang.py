"""The real Kubeflow Trainer v2 controller under real gang scheduling (upstream backend): only a TrainJob is
submitted (3 nodes x 1 GPU, the module's ``torch-distributed`` runtime); Trainer creates the JobSet, the
JobSet controller the Job, the Job controller the pods, and the grouper's webhook puts each pod in the
gang of the JobSet (skip-top-owner). kube-scheduler binds nothing while the gang does not fit and all three
at once when a node is added — also when the runtime asks for Trainer's own gang
(``podGroupPolicy.coscheduling``), which kube-scheduler does not read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from clusters import DEPLOY_CRDS, cluster_fixture
from controller.harness import GrouperThread
from gang.gangkit import GPU, POOL_LABEL, bound, pod_group_condition
from kube import Kube, wait_until

from devtools.cluster import LocalCluster
from operators.trainerkit import (
    CLUSTER_RUNTIMES,
    COSCHED_LABEL,
    COSCHED_PODGROUPS,
    OPERATORS,
    RUNTIMES,
    TRAINJOBS,
    live,
    torch_distributed,
    trainjob,
)

# its own control plane with the JobSet and Trainer controllers, kube-scheduler and kwok (tests/clusters.py)
op_sched_cluster = cluster_fixture("op_sched_cluster", shared=False, crds=DEPLOY_CRDS, operators=OPERATORS,
                                   scheduler=True)
SCHED = "scheduling.k8s.io/v1beta1"
ONE_GPU = {"requests": {GPU: "1"}, "limits": {GPU: "1"}}


@pytest.fixture(scope="module")
def stock_runtime(op_sched_cluster: LocalCluster) -> Iterator[None]:
    """The module's ``torch-distributed`` ClusterTrainingRuntime as it is (its pods: the default scheduler)."""
    with Kube.from_cluster(op_sched_cluster) as kube:
        kube.create(CLUSTER_RUNTIMES, torch_distributed())
        yield


def _gang_binds_only_when_it_fits(
    cluster: LocalCluster, kube: Kube, ns: str, name: str, pool: str, **tj: Any
) -> list[dict[str, Any]]:
    """Submit a TrainJob of 3 one-GPU nodes with 2 GPUs free: its pods are in the JobSet's gang
    (minCount 3) and none binds; a second node: all three bind. Returns the pods."""
    cluster.add_nodes(1, gpus=2, labels={POOL_LABEL: pool})  # 2 GPUs free, the gang needs 3
    kube.create(TRAINJOBS.format(ns=ns), trainjob(name, num_nodes=3, resources=ONE_GPU, node_selector={POOL_LABEL: pool}, **tj))

    def pods() -> list[dict[str, Any]] | None:
        items = kube.list(f"/api/v1/namespaces/{ns}/pods", label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")
        return items if len(items) == 3 else None

    created = wait_until(pods, 90, what="the 3 pods Trainer's JobSet's Job creates")
    (js,) = [j for j in live(kube, ns)["JobSet"] if j["metadata"]["name"] == name]
    group = f"pg-{name}-{js['metadata']['uid']}"  # the JobSet's gang: the TrainJob is skipped
    path = f"/apis/{SCHED}/namespaces/{ns}/podgroups/{group}"
    for pod in created:
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": group}, pod["metadata"]["name"]
    wait_until(lambda: kube.exists(path) and kube.get(path)["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3,
               60, what="PodGroup minCount 3")
    wait_until(lambda: pod_group_condition(kube, path) == ("False", "Unschedulable"), 90,
               what="the scheduler found the gang unschedulable")
    names = [p["metadata"]["name"] for p in created]
    assert bound(kube, ns, names) == {}, "no partial placement: 2 of 3 would fit"

    cluster.add_nodes(1, gpus=2, labels={POOL_LABEL: pool})
    placed = wait_until(lambda: len(b := bound(kube, ns, names)) == 3 and b, 90, what="the gang bound")
    assert set(placed.values()) <= set(cluster.nodes)
    return created


def test_a_real_trainjobs_gang_binds_only_when_it_fits_and_all_at_once(
    op_sched_cluster: LocalCluster, skube: Kube, upstream: tuple[str, GrouperThread], stock_runtime: None
) -> None:
    """The stock runtime; then one with ``podGroupPolicy.coscheduling``: Trainer writes a scheduler-plugins
    PodGroup and labels the pods, which kube-scheduler reads neither of (only scheduler-plugins' own
    scheduler does, under its own scheduler name, whose pods the grouper does not handle). No step-aside
    rule applies (no ``spec.scheduling``, no foreign ``spec.schedulingGroup``): the grouper's upstream gang
    is the one that holds them. (One test: the ``upstream`` fixture's namespace is the module's own.)"""
    ns, _ = upstream
    _gang_binds_only_when_it_fits(op_sched_cluster, skube, ns, "ft", "real-trainer")

    skube.create(RUNTIMES.format(ns=ns), {
        **torch_distributed(kind="TrainingRuntime", pod_group_policy={"coscheduling": {"scheduleTimeoutSeconds": 120}}),
        "metadata": {"name": "torch-cosched"},
    })
    created = _gang_binds_only_when_it_fits(
        op_sched_cluster, skube, ns, "co", "real-trainer-cosched", runtime="torch-cosched", runtime_kind="TrainingRuntime"
    )
    assert {p["metadata"]["labels"][COSCHED_LABEL] for p in created} == {"co"}
    (native,) = skube.list(COSCHED_PODGROUPS.format(ns=ns))
    assert native["metadata"]["name"] == "co" and native["spec"]["minMember"] == 3
