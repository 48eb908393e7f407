"""The upstream backend against the real API server as it behaves (1.37): it refuses ``minCount: 0``, it
accepts a PodGroup whose parent does not exist (so the grouper checks the tree first), one pod of another
priority blocks a gang (reported), and with its feature gates off it drops ``schedulingConstraints``
silently and serves a version in part (detected, reported, never mixed).

Two control planes: the session's ``sched_cluster`` (gates on), and one of this module with
``TopologyAwareWorkloadScheduling`` and ``CompositePodGroup`` off and PodGroups of ``v1beta1`` switched off
(``--runtime-config=scheduling.k8s.io/v1beta1/podgroups=false``): v1beta1 then serves Workload only."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube import Kube, KubeError, fresh_namespace, wait_until

from devtools.cluster import LocalCluster
from grouper.kube import config as kubeconfig
from grouper.kube.discovery import Discovery
from grouper.kube.transport import KubeClient
from grouper.model.podgroup import OwnerRef, PodGroupMetadata, SubGroup, TopologyConstraint
from grouper.observability.metrics import Metrics
from grouper.writer.events import EventRecorder
from grouper.writer.expectations import WriteExpectations
from grouper.writer.upstream import UpstreamInvalid, UpstreamWriter

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from controller.harness import GrouperThread, label_namespace

REPO = Path(__file__).resolve().parents[2]
CRD_DIRS = (REPO / "deploy" / "crds", REPO / "tests" / "crds")
SCHED = "scheduling.k8s.io/v1beta1"
ZONE = "topology.kubernetes.io/zone"
MIN = "kai.scheduler/batch-min-member"


def run_writer(
    cluster: LocalCluster, body: Any, metrics: Metrics | None = None
) -> Any:
    """Run ``body(writer)`` (a coroutine function) with an UpstreamWriter on a fresh client."""

    async def main() -> Any:
        client = KubeClient(kubeconfig.explicit(cluster.server, token=cluster.admin_token, ca_file=cluster.ca_file))
        try:
            writer = UpstreamWriter(
                client, Discovery(client), expectations=WriteExpectations(),
                metrics=metrics or Metrics(), events=EventRecorder(client),
            )
            return await body(writer)
        finally:
            await client.close()

    return asyncio.run(main())


def suspended_job(kube: Kube, ns: str, name: str) -> OwnerRef:
    """A real owner (so the garbage collector keeps what it owns); suspended: no pods of its own."""
    job = kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"suspend": True, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}},
    })
    return OwnerRef("batch/v1", "Job", name, job["metadata"]["uid"])


def metadata(ns: str, owner: OwnerRef, **kw: Any) -> PodGroupMetadata:
    return PodGroupMetadata(name=f"pg-{owner.name}-{owner.uid}", namespace=ns, owner=owner, **kw)


def warnings_about(kube: Kube, ns: str, uid: str, text: str) -> list[dict[str, Any]]:
    return [
        e for e in kube.list(f"/api/v1/namespaces/{ns}/events")
        if e["involvedObject"].get("uid") == uid and text in e["message"]
    ]


# ------------------------------------------------------------------ gates on (the session's cluster)


def test_min_count_zero_is_refused_by_the_api_and_never_sent(skube: Kube, sns: str, sched_cluster: LocalCluster) -> None:
    owner = suspended_job(skube, sns, "zero")
    md = metadata(sns, owner, min_member=None, sub_groups=[SubGroup("a", min_member=0), SubGroup("b", min_member=0)])
    with pytest.raises(KubeError) as refused:  # the premise: the API server refuses minCount 0
        skube.create(f"/apis/{SCHED}/namespaces/{sns}/podgroups", {
            "apiVersion": SCHED, "kind": "PodGroup", "metadata": {"name": "zero"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 0}}},
        })
    assert refused.value.status == 422

    async def body(w: UpstreamWriter) -> Any:
        return await w.apply(md, [])

    op, objs = run_writer(sched_cluster, body)
    assert op == "created"
    pg = skube.get(f"/apis/{SCHED}/namespaces/{sns}/podgroups/{md.name}")
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 1}}
    assert any("admits 0 pods: written as minCount 1" in n for n in objs.notes), objs.notes


def test_a_broken_tree_is_an_error_and_nothing_is_written(skube: Kube, sns: str, sched_cluster: LocalCluster) -> None:
    # the premise: the API server stores a PodGroup whose parent CompositePodGroup does not exist
    skube.create(f"/apis/{SCHED}/namespaces/{sns}/workloads", {
        "apiVersion": SCHED, "kind": "Workload", "metadata": {"name": "w"},
        "spec": {"podGroupTemplates": [{"name": "main", "schedulingPolicy": {"gang": {"minCount": 1}}}]},
    })
    orphan = skube.create(f"/apis/{SCHED}/namespaces/{sns}/podgroups", {
        "apiVersion": SCHED, "kind": "PodGroup", "metadata": {"name": "orphan"},
        "spec": {"parentCompositePodGroupName": "ghost", "workloadRef": {"workloadName": "w", "templateName": "main"},
                 "schedulingPolicy": {"gang": {"minCount": 1}}},
    })
    assert orphan["spec"]["parentCompositePodGroupName"] == "ghost"

    owner = suspended_job(skube, sns, "tree")
    md = metadata(sns, owner, min_member=None, sub_groups=[
        SubGroup("leader-0", min_member=1, parent="leader"),  # "leader" is missing
        SubGroup("workers", min_sub_group=1),
        SubGroup("workers-0", min_member=2, parent="workers"),
    ])

    async def body(w: UpstreamWriter) -> Any:
        return await w.apply(md, [])

    with pytest.raises(UpstreamInvalid) as err:
        run_writer(sched_cluster, body)
    assert err.value.status == 422
    assert f"PodGroup {sns}/{md.name}: spec.subGroups[0] (leader-0).parent 'leader' names no sub-group" in str(err.value)
    assert not skube.exists(f"/apis/{SCHED}/namespaces/{sns}/workloads/{md.name}")
    assert not skube.exists(f"/apis/{SCHED}/namespaces/{sns}/podgroups/{md.name}")


def test_scheduling_constraints_are_stored_with_the_gate_on(skube: Kube, sns: str, sched_cluster: LocalCluster) -> None:
    owner = suspended_job(skube, sns, "zoned")
    md = metadata(sns, owner, min_member=2, topology=TopologyConstraint(required_level=ZONE))
    metrics = Metrics()

    async def body(w: UpstreamWriter) -> Any:
        return await w.apply(md, [])

    _, objs = run_writer(sched_cluster, body, metrics)
    pg = skube.get(f"/apis/{SCHED}/namespaces/{sns}/podgroups/{md.name}")
    assert pg["spec"]["schedulingConstraints"] == {"topology": [{"key": ZONE}]}
    assert not [n for n in objs.notes if "did not store" in n], objs.notes
    assert metrics.value("podgrouper_upstream_dropped_fields_total",
                         {"kind": "PodGroup", "field": "spec.schedulingConstraints"}) == 0
    # discovery: v1beta1 for both kinds, CompositePodGroup served (v1alpha3, gate on) and only reported
    for kind, version in (("Workload", "v1beta1"), ("PodGroup", "v1beta1"), ("CompositePodGroup", "v1alpha3")):
        assert metrics.value("podgrouper_upstream_api_info", {"kind": kind, "version": version}) == 1
    assert metrics.value("podgrouper_upstream_refused_versions", {"version": "v1alpha3"}) == 0


@pytest.fixture
def scoped(skube: Kube, sns: str) -> str:
    label_namespace(skube, sns)
    return sns


def test_pods_of_one_gang_with_different_priorities_are_reported_once(
    skube: Kube, scoped: str, sched_cluster: LocalCluster
) -> None:
    """A PyTorchJob whose master has another priority than its workers (pods made by hand, as the training
    operator would; no controller of the control plane claims them, unlike a Job's pods, which the Job
    controller releases when they do not match its selector)."""
    ns = scoped
    for name, value in (("gang-low", 100), ("gang-high", 1000)):
        if not skube.exists(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}"):
            skube.create("/apis/scheduling.k8s.io/v1/priorityclasses", {
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                "value": value,
            })

    def replica(cls: str, n: int) -> dict[str, Any]:
        return {"replicas": n, "restartPolicy": "OnFailure", "template": {"spec": {
            "priorityClassName": cls, "containers": [{"name": "pytorch", "image": "busybox"}]}}}

    job = skube.create(f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs", {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "mixed"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica("gang-high", 1), "Worker": replica("gang-low", 2)}},
    })
    uid = job["metadata"]["uid"]
    ref = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "mixed", "uid": uid, "controller": True}
    with GrouperThread(sched_cluster, ns, backend="upstream", scheduler_name="default-scheduler") as g:
        for pod_name, role, cls in (("mixed-worker-0", "worker", "gang-low"), ("mixed-worker-1", "worker", "gang-low"),
                                    ("mixed-master-0", "master", "gang-high")):
            skube.create(f"/api/v1/namespaces/{ns}/pods", {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod_name, "ownerReferences": [ref],
                             "labels": {"training.kubeflow.org/replica-type": role,
                                        "training.kubeflow.org/job-name": "mixed"}},
                "spec": {"priorityClassName": cls, "nodeSelector": {"none": "none"},
                         "containers": [{"name": "pytorch", "image": "busybox"}]},
            })
        name = f"pg-mixed-{uid}"

        def warned() -> bool:
            rec = g.store.pod_group(ns, name)
            return rec is not None and len(rec.pods) == 3 and any("different priorities" in n for n in rec.notes)

        wait_until(warned, 30, what="the mixed-priority warning in the decision record")
        g.wait_idle()
        rec = g.store.pod_group(ns, name)
        (note,) = [n for n in rec.notes if "different priorities" in n]
        assert "gang-low: 2 pod(s) (mixed-worker-0, mixed-worker-1)" in note, note
        assert "gang-high: 1 pod(s) (mixed-master-0)" in note, note
        # reconciled again (a pod changes): the same cause is not reported twice
        skube.patch(f"/api/v1/namespaces/{ns}/pods/mixed-worker-0", {"metadata": {"labels": {"touched": "1"}}})
        g.wait_idle()
        events = warnings_about(skube, ns, uid, "different priorities")
        assert len(events) == 1 and events[0]["type"] == "Warning" and events[0]["count"] == 1, events
        assert "(gang-high, gang-low)" in events[0]["message"]


# ------------------------------------------------------------------ gates off


@pytest.fixture(scope="module")
def gated() -> Iterator[LocalCluster]:
    """The Workload API on, TopologyAwareWorkloadScheduling and CompositePodGroup off, v1beta1 without PodGroups."""
    with LocalCluster(
        crds=CRD_DIRS, workload_api=True,
        apiserver_args=[
            "--feature-gates=TopologyAwareWorkloadScheduling=false,CompositePodGroup=false",
            "--runtime-config=scheduling.k8s.io/v1beta1/podgroups=false",
        ],
        controller_manager_args=["--feature-gates=TopologyAwareWorkloadScheduling=false,CompositePodGroup=false"],
    ) as c:
        yield c


@pytest.fixture(scope="module")
def gkube(gated: LocalCluster) -> Iterator[Kube]:
    with Kube.from_cluster(gated) as k:
        yield k


@pytest.fixture
def gns(gkube: Kube) -> Iterator[str]:
    with fresh_namespace(gkube, "u") as name:
        yield name


def test_a_partly_served_version_is_refused_never_mixed(gkube: Kube, gns: str, gated: LocalCluster) -> None:
    kinds = {r["kind"] for r in gkube.get("/apis/scheduling.k8s.io/v1beta1")["resources"]}
    assert "Workload" in kinds and "PodGroup" not in kinds  # the premise: v1beta1 serves Workload only
    owner = suspended_job(gkube, gns, "partial")
    md = metadata(gns, owner, min_member=2)
    metrics = Metrics()

    async def body(w: UpstreamWriter) -> Any:
        wl_res, pg_res = await w.resources()
        await w.apply(md, [])
        return wl_res.api_version, pg_res.api_version

    wl_version, pg_version = run_writer(gated, body, metrics)
    assert (wl_version, pg_version) == ("scheduling.k8s.io/v1alpha3", "scheduling.k8s.io/v1alpha3")
    assert metrics.value("podgrouper_upstream_refused_versions", {"version": "v1beta1"}) == 1
    assert metrics.value("podgrouper_upstream_api_info", {"kind": "PodGroup", "version": "v1alpha3"}) == 1
    # CompositePodGroup is not served with its gate off
    assert metrics.value("podgrouper_upstream_api_info", {"kind": "CompositePodGroup", "version": "v1alpha3"}) == 0
    pg = gkube.get(f"/apis/scheduling.k8s.io/v1alpha3/namespaces/{gns}/podgroups/{md.name}")
    assert pg["spec"]["workloadRef"] == {"workloadName": md.name, "templateName": "main"}


def test_fields_the_api_server_drops_are_reported(gkube: Kube, gns: str, gated: LocalCluster) -> None:
    owner = suspended_job(gkube, gns, "zoned")
    md = metadata(gns, owner, min_member=2, topology=TopologyConstraint(required_level=ZONE))
    metrics = Metrics()

    async def body(w: UpstreamWriter) -> Any:
        first = await w.apply(md, [])
        second = await w.apply(md, [])  # converged: nothing written, the drop still noted, no second Event
        return first, second

    (op1, objs1), (op2, objs2) = run_writer(gated, body, metrics)
    assert (op1, op2) == ("created", "unchanged")
    pg = gkube.get(f"/apis/scheduling.k8s.io/v1alpha3/namespaces/{gns}/podgroups/{md.name}")
    assert "schedulingConstraints" not in pg["spec"]  # the premise: stored without it, no error
    for objs in (objs1, objs2):
        (note,) = [n for n in objs.notes if "did not store" in n]
        assert f"PodGroup {md.name} spec.schedulingConstraints" in note, note
        assert f"Workload {md.name} spec.podGroupTemplates[0].schedulingConstraints" in note, note
    assert metrics.value("podgrouper_upstream_dropped_fields_total",
                         {"kind": "PodGroup", "field": "spec.schedulingConstraints"}) == 1
    assert metrics.value("podgrouper_upstream_dropped_fields_total",
                         {"kind": "Workload", "field": "spec.podGroupTemplates.schedulingConstraints"}) == 1
    events = warnings_about(gkube, gns, owner.uid, "did not store")
    assert len(events) == 1 and events[0]["count"] == 1, events


def test_no_version_serving_both_kinds_is_an_error_in_the_record_and_nothing_is_written() -> None:
    """v1beta1 serves Workload only and v1alpha3 is off: the grouper refuses to mix, records why for the
    workload's PodGroup, counts the refused version, and writes nothing."""
    with LocalCluster(
        crds=CRD_DIRS, workload_api=True,
        apiserver_args=["--runtime-config=scheduling.k8s.io/v1beta1/podgroups=false,scheduling.k8s.io/v1alpha3=false"],
    ) as c, Kube.from_cluster(c) as k, fresh_namespace(k, "n") as ns:
        label_namespace(k, ns)
        with GrouperThread(c, ns, backend="upstream", scheduler_name="default-scheduler") as g:
            job = k.create(f"/apis/batch/v1/namespaces/{ns}/jobs", {
                "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "annotations": {MIN: "2"}},
                "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
                    "restartPolicy": "Never", "schedulerName": "default-scheduler",
                    "containers": [{"name": "c", "image": "busybox"}]}}},
            })
            name = f"pg-train-{job['metadata']['uid']}"

            def failed() -> dict[str, Any] | None:
                rec = g.store.pod_group(ns, name)
                return rec if rec is not None and rec.last_error else None

            rec = wait_until(failed, 60, what="the PodGroup's error in the decision record")
            assert "scheduling.k8s.io/v1beta1 serves Workload but not PodGroup" in rec.last_error, rec
            assert "refused rather than mixing versions" in rec.last_error, rec
            assert g.metrics.value("podgrouper_upstream_refused_versions", {"version": "v1beta1"}) == 1
            assert k.list(f"/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/workloads") == []


def test_a_workload_group_is_one_flattened_gang_where_composites_are_not_served(
    gkube: Kube, gns: str, gated: LocalCluster
) -> None:
    """``--backend=upstream`` with CompositePodGroup off: the controller writes the flattened gang (one
    PodGroup of the members' minima summed) owned by the WorkloadGroup, the webhook puts every member pod
    in it, and the loss is stated in the WorkloadGroup's status."""
    from test_workload_groups_upstream_live import gpu_job, workload_group
    from webhooks import grouper_with_webhook

    from grouper.core.workload_group import rendered_name
    from grouper.model import workload_group as wg

    v1a3 = "scheduling.k8s.io/v1alpha3"
    label_namespace(gkube, gns)
    with grouper_with_webhook(gated, gkube, gns, backend="upstream", scheduler_name="default-scheduler"):
        gkube.create(f"/apis/{wg.API_VERSION}/namespaces/{gns}/workloadgroups", workload_group("rl", 2))
        for name in ("a", "b"):
            gkube.create(f"/apis/batch/v1/namespaces/{gns}/jobs", gpu_job(name, "none", 2, 1))
        rendered = rendered_name(gns, "rl")
        path = f"/apis/{v1a3}/namespaces/{gns}/podgroups/{rendered}"
        pg = wait_until(lambda: gkube.exists(path) and gkube.get(path), 60, what="the flattened gang")
        assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
        assert [r["kind"] for r in pg["metadata"]["ownerReferences"]] == [wg.KIND]
        assert [p["metadata"]["name"] for p in gkube.list(f"/apis/{v1a3}/namespaces/{gns}/podgroups")] == [rendered]
        pods = gkube.list(f"/api/v1/namespaces/{gns}/pods")
        assert len(pods) == 4 and {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {rendered}

        def rendered_status() -> dict[str, Any] | None:
            status = gkube.get(f"/apis/{wg.API_VERSION}/namespaces/{gns}/workloadgroups/rl").get("status") or {}
            return status if status.get("renderedPodGroupRef") else None

        status = wait_until(rendered_status, 30, what="the group's status")
        assert status["renderedPodGroupRef"] == {"apiVersion": v1a3, "kind": "PodGroup", "name": rendered}
        (cond,) = [c for c in status["conditions"] if c["type"] == "Rendered"]
        assert cond["status"] == "True" and "does not serve CompositePodGroup" in cond["message"]
        assert "one member's extra pods can stand in for another's missing ones" in cond["message"]
