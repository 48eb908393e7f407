"""WorkloadGroups with ``--backend=upstream`` and the real kube-scheduler (CompositePodGroup gate on, kwok
nodes): two Jobs in one group are one CompositePodGroup with a child PodGroup each; the webhook puts each
new pod in its workload's child. No pod binds while the group's total does not fit (each Job alone would);
a node more and all bind; a Job whose annotation goes is scheduled on its own again (its pending pods,
whose PodGroup is fixed at creation, are recreated by the Job controller into its own PodGroup) while the
other stays gated; a restart writes nothing. Where CompositePodGroup is not served: the flattened gang
(tests/gang/test_gang_upstream_api.py). docs/workload-groups.md, *Upstream backend*."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from controller.harness import GrouperThread, label_namespace
from gangkit import GPU, POOL_LABEL
from kube import Kube, wait_until
from webhooks import grouper_with_webhook

from devtools.cluster import LocalCluster
from grouper.core.workload_group import rendered_name
from grouper.core.workload_group_upstream import member_pod_group
from grouper.model import workload_group as wg
from grouper.model.podgroup import OwnerRef

SCHED = "scheduling.k8s.io/v1beta1"
COMPOSITE = "scheduling.k8s.io/v1alpha3"
GROUP = "rl"


def gpu_job(name: str, pool: str, pods: int, gpus: int, *, group: str | None = GROUP) -> dict[str, Any]:
    annotations = {"kai.scheduler/batch-min-member": str(pods)}
    if group:
        annotations[wg.WORKLOAD_GROUP_ANNOTATION] = group
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {POOL_LABEL: pool},
                    "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {GPU: str(gpus)}}}],
                }
            },
        },
    }


def workload_group(name: str, expected: int) -> dict[str, Any]:
    return {"apiVersion": wg.API_VERSION, "kind": wg.KIND, "metadata": {"name": name},
            "spec": {"expectedWorkloads": expected}}


def pods_of(kube: Kube, ns: str, job: str) -> list[dict[str, Any]]:
    return [p for p in kube.list(f"/api/v1/namespaces/{ns}/pods", label_selector=f"job-name={job}")
            if not p["metadata"].get("deletionTimestamp")]


def unschedulable(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
               for c in (pod.get("status") or {}).get("conditions") or [])


def child(kube: Kube, ns: str, job: dict[str, Any]) -> str:
    ref = OwnerRef("batch/v1", "Job", job["metadata"]["name"], job["metadata"]["uid"])
    return member_pod_group(ns, GROUP, ref)


def two_members_waiting(cluster: LocalCluster, kube: Kube, ns: str, pool: str, names: tuple[str, str]) -> list[Any]:
    """One 4-GPU node, the WorkloadGroup of two and its two Jobs of 2 pods of 2 GPUs (each alone fits the
    node, together they do not): the Jobs as created, once the CompositePodGroup exists and the scheduler
    has found every member pod unschedulable."""
    cluster.add_nodes(1, gpus=4, labels={POOL_LABEL: pool})
    kube.create(f"/apis/{wg.API_VERSION}/namespaces/{ns}/workloadgroups", workload_group(GROUP, 2))
    jobs = [kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", gpu_job(name, pool, 2, 2)) for name in names]
    wait_until(lambda: kube.exists(f"/apis/{COMPOSITE}/namespaces/{ns}/compositepodgroups/{rendered_name(ns, GROUP)}"),
               60, what="the CompositePodGroup")
    wait_until(lambda: all(unschedulable(p) for j in names for p in pods_of(kube, ns, j)), 60,
               what="every member pod unschedulable")
    return jobs


@pytest.fixture
def grouper(sched_cluster: LocalCluster, skube: Kube, sns: str) -> Iterator[GrouperThread]:
    label_namespace(skube, sns)
    with grouper_with_webhook(sched_cluster, skube, sns, backend="upstream", scheduler_name="default-scheduler") as g:
        yield g


def test_members_bind_only_together_and_a_member_removed_is_scheduled_alone(
    sched_cluster: LocalCluster, skube: Kube, sns: str, pool: str, grouper: GrouperThread
) -> None:
    ns = sns
    # the scheduler looked at every pod and bound none: the group's 8 GPUs do not fit
    trainer, rollout = two_members_waiting(sched_cluster, skube, ns, pool, ("trainer", "rollout"))
    rendered = rendered_name(ns, GROUP)
    children = {"trainer": child(skube, ns, trainer), "rollout": child(skube, ns, rollout)}

    # the objects: one composite (both members required), a child PodGroup per Job, all owned by the group
    cpg = skube.get(f"/apis/{COMPOSITE}/namespaces/{ns}/compositepodgroups/{rendered}")
    assert cpg["spec"]["schedulingPolicy"] == {"gang": {"minGroupCount": 2}}
    assert [r["kind"] for r in cpg["metadata"]["ownerReferences"]] == [wg.KIND]
    for job, name in children.items():
        pg = skube.get(f"/apis/{SCHED}/namespaces/{ns}/podgroups/{name}")
        assert pg["spec"]["parentCompositePodGroupName"] == rendered, job
        assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}, job
        # every pod joined its Job's child at creation (the webhook), none is patched
        pods = pods_of(skube, ns, job)
        assert len(pods) == 2 and {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {name}
    assert not [p for j in children for p in pods_of(skube, ns, j) if p["spec"].get("nodeName")]
    assert grouper.requests("patch", "pods") == 0
    members_see_the_group(sched_cluster, ns, grouper, children)

    # capacity arrives: all four bind
    sched_cluster.add_nodes(1, gpus=4, labels={POOL_LABEL: pool})
    wait_until(lambda: all(p["spec"].get("nodeName") for j in children for p in pods_of(skube, ns, j)), 60,
               what="all member pods bound")
    status = skube.get(f"/apis/{wg.API_VERSION}/namespaces/{ns}/workloadgroups/{GROUP}")["status"]
    assert status["renderedPodGroupRef"] == {"apiVersion": COMPOSITE, "kind": "CompositePodGroup", "name": rendered}
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "InputsResolved": "True", "Rendered": "True", "Active": "True"}

    # a restart converges with no write (the group's objects, pods, Events, its status)
    grouper.wait_idle()
    group_rv = skube.get(f"/apis/{wg.API_VERSION}/namespaces/{ns}/workloadgroups/{GROUP}")["metadata"]["resourceVersion"]
    with GrouperThread(sched_cluster, ns, backend="upstream", scheduler_name="default-scheduler") as again:
        again.wait_idle(settle=1.5)
        writes = again.writes(("podgroups", "compositepodgroups", "workloads", "pods", "events",
                                "workloadgroups/status"))
    assert writes == 0
    assert skube.get(f"/apis/{wg.API_VERSION}/namespaces/{ns}/workloadgroups/{GROUP}")["metadata"][
        "resourceVersion"] == group_rv


def test_a_member_removed_from_the_group_is_scheduled_on_its_own(
    sched_cluster: LocalCluster, skube: Kube, sns: str, pool: str, grouper: GrouperThread
) -> None:
    ns = sns
    a, b = two_members_waiting(sched_cluster, skube, ns, pool, ("a", "b"))
    rendered = rendered_name(ns, GROUP)
    old = {p["metadata"]["uid"] for p in pods_of(skube, ns, "b")}

    # b leaves: its pending pods (PodGroup fixed at creation) are recreated into b's own PodGroup and bind
    skube.patch(f"/apis/batch/v1/namespaces/{ns}/jobs/b",
                {"metadata": {"annotations": {wg.WORKLOAD_GROUP_ANNOTATION: None}}})
    own = f"pg-b-{b['metadata']['uid']}"

    def b_alone() -> bool:
        pods = pods_of(skube, ns, "b")
        return (len(pods) == 2 and not {p["metadata"]["uid"] for p in pods} & old
                and all(p["spec"].get("nodeName") for p in pods)
                and {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {own})

    wait_until(b_alone, 90, what="b's new pods bound in b's own PodGroup")
    assert skube.exists(f"/apis/{SCHED}/namespaces/{ns}/podgroups/{own}")
    # the group is one short: nothing of it is written, a stays gated on its child that does not exist
    wait_until(lambda: not skube.exists(f"/apis/{COMPOSITE}/namespaces/{ns}/compositepodgroups/{rendered}"), 30,
               what="the composite deleted")
    a_child = child(skube, ns, a)
    path = f"/apis/{SCHED}/namespaces/{ns}/podgroups/{a_child}"
    # deleted (a PodGroup its pods name is kept by a finalizer until they go, but is terminating)
    assert not skube.exists(path) or skube.get(path)["metadata"].get("deletionTimestamp")
    pods = pods_of(skube, ns, "a")
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {a_child}
    assert not [p for p in pods if p["spec"].get("nodeName")]


def members_see_the_group(cluster: LocalCluster, ns: str, grouper: GrouperThread, children: dict[str, str]) -> None:
    """Where people look: the trainer's ``/workloads`` row carries the group's gangs (every member's child
    PodGroup of the composite, Waiting with kube-scheduler's reason) and names the group; ``grouper why`` on
    it says it is a member and prints the children's state and the scheduler's reason."""
    import contextlib
    import io

    from grouper.cli.commands.get import server_get
    from grouper.cli.main import main

    server = f"http://127.0.0.1:{grouper.service.http_port}"

    def row() -> dict[str, Any]:
        items = server_get(server, "/workloads", {"namespace": ns})["items"]
        return next(i for i in items if i["kind"] == "Job" and i["name"] == "trainer")

    wait_until(lambda: row()["state"] == "Waiting" and all(g["reasons"] for g in row()["gangs"]), 60,
               interval=0.25, what="the trainer's row: the group's gangs waiting, with the scheduler's reasons")
    r = row()
    assert sorted(g["podGroup"] for g in r["gangs"]) == sorted(children.values()), r["gangs"]
    assert r["workloadGroup"]["name"] == GROUP and r["workloadGroup"]["rendered"]
    assert r["workloadGroup"]["podGroup"] == rendered_name(ns, GROUP)  # the CompositePodGroup
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["why", "job/trainer", "-n", ns, "--kubeconfig", str(cluster.kubeconfig_path),
                     "--backend", "upstream", "--scheduler-name", "default-scheduler"])
    text = out.getvalue()
    assert code == 0, text
    assert text.startswith(f"Job {ns}/trainer is Waiting: its 2 PodGroups' worst state."), text
    assert f"It is a member of WorkloadGroup {GROUP} (2 of 2 workloads)" in text
    for name in children.values():
        assert f"PodGroup {name} ({SCHED})" in text, text
    assert "PodScheduled=False" in text and "minCount" in text, text
