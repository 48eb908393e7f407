"""WorkloadGroups in the running controller, against a real API server (docs/workload-groups.md).

The examples (examples/workload-groups/: RayJob + RayCluster + Deployment, PyTorchJob + LeaderWorkerSet)
are submitted as their operators would have created them (the objects and their pods, hand-made, on a
cluster without the controller manager: a live ReplicaSet controller would add pods of its own) and a
grouper runs in-process. What it stores must equal what ``grouper plan`` renders offline from the same
objects; then the lifecycle: a member whose annotation goes leaves (its own PodGroup again, the others
gated on the not-yet-written rendered PodGroup), comes back, and deleting the WorkloadGroup sends every
member back to its own PodGroup. A restart writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from controller.harness import GrouperThread, label_namespace
from integration.test_examples_live import CRD_DIRS, planned, submit
from kube import Kube, KubeError, wait_until

from devtools.cluster import LocalCluster
from grouper.core.workload_group import rendered_name
from grouper.model import workload_group as wg

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "workload-groups"
ANNOTATION = "pod-group-name"
SUBGROUP = "kai.scheduler/subgroup-name"


@pytest.fixture(scope="module")
def bare() -> Iterator[tuple[LocalCluster, Kube]]:
    with LocalCluster(controller_manager=False, crds=CRD_DIRS) as c, Kube.from_cluster(c) as k:
        wait_until(lambda: served(k), 60, what="the CRDs served (their storage initialized)")
        yield c, k


def served(kube: Kube) -> bool:
    try:
        kube.list("/apis/run.ai/v1alpha1/kartas")
        kube.list(f"/apis/{wg.API_VERSION}/workloadgroups")
    except KubeError:
        return False
    return True


def setup(kube: Kube, name: str, ns: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    label_namespace(kube, ns)
    submitted = submit(kube, [EXAMPLES / f"{name}.yaml"], ns)
    want = planned(kube, submitted)
    assert want["errors"] == [] and [g["state"] for g in want["workloadGroups"]] == ["Rendered"], want
    return want, submitted


def stored(kube: Kube, ns: str) -> tuple[dict[str, Any], dict[str, Any]]:
    pgs = {pg["metadata"]["name"]: pg for pg in kube.list(f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups")}
    pods = {p["metadata"]["name"]: p for p in kube.list(f"/api/v1/namespaces/{ns}/pods")}
    return pgs, pods


def place(pod: dict[str, Any]) -> tuple[str | None, str | None]:
    meta = pod["metadata"]
    return (meta.get("annotations") or {}).get(ANNOTATION), (meta.get("labels") or {}).get(SUBGROUP)


def as_planned(kube: Kube, ns: str, want: dict[str, Any]) -> bool:
    pgs, pods = stored(kube, ns)
    want_pgs = {pg["metadata"]["name"]: pg for pg in want["podGroups"]}
    if set(pgs) != set(want_pgs) or any(pgs[n]["spec"] != want_pgs[n]["spec"] for n in want_pgs):
        return False
    return all(place(pods[p["name"]]) == (p["podGroup"], p["subGroup"]) for p in want["pods"] if p["namespace"] == ns)


def group_path(ns: str, name: str) -> str:
    return f"/apis/{wg.API_VERSION}/namespaces/{ns}/workloadgroups/{name}"


def conditions(kube: Kube, ns: str, name: str) -> dict[str, str]:
    status = kube.get(group_path(ns, name)).get("status") or {}
    return {c["type"]: c["status"] for c in status.get("conditions") or []}


@pytest.mark.parametrize("name", ["rl-post-training", "finetune-and-serve"])
def test_the_rendered_podgroup_is_what_grouper_plan_renders(bare: tuple[LocalCluster, Kube], name: str) -> None:
    cluster, kube = bare
    ns = f"wg-{name}"
    want, _ = setup(kube, name, ns)
    rendered = rendered_name(ns, name)
    assert [pg["metadata"]["name"] for pg in want["podGroups"]] == [rendered]  # one PodGroup, members' own gone
    with GrouperThread(cluster, ns) as g:
        wait_until(lambda: as_planned(kube, ns, want), 60, interval=0.25, what=f"{name}: stored as planned")
        wait_until(lambda: conditions(kube, ns, name).get("Active") == "True", 30, what=f"{name}: Active")
        g.wait_idle(settle=1.0)
    pgs, pods = stored(kube, ns)
    owner = pgs[rendered]["metadata"]["ownerReferences"]
    assert [(r["kind"], r["name"], r["uid"]) for r in owner] == [
        (wg.KIND, name, kube.get(group_path(ns, name))["metadata"]["uid"])]
    members = [p for p in want["pods"] if p["podGroup"]]  # (a RayJob's submitter pod is another scheduler's)
    assert members and all(place(pods[p["name"]]) == (rendered, p["subGroup"]) and p["subGroup"] for p in members)
    status = kube.get(group_path(ns, name))["status"]
    assert conditions(kube, ns, name) == {"InputsResolved": "True", "Rendered": "True", "Active": "True"}
    assert status["renderedPodGroupRef"]["name"] == rendered
    assert [m["name"] for m in status["observedMembers"]] == [
        m["name"] for g in want["workloadGroups"] for m in g["status"]["observedMembers"]]

    # a restart converges with no write at all (PodGroups, pods, Events, the group's status)
    before = {n: pg["metadata"]["resourceVersion"] for n, pg in pgs.items()}
    group_rv = kube.get(group_path(ns, name))["metadata"]["resourceVersion"]
    with GrouperThread(cluster, ns) as g:
        g.wait_idle(settle=1.5)
        writes = g.writes(("podgroups", "pods", "events", "workloadgroups"))
    assert writes == 0
    assert {n: pg["metadata"]["resourceVersion"] for n, pg in stored(kube, ns)[0].items()} == before
    assert kube.get(group_path(ns, name))["metadata"]["resourceVersion"] == group_rv


def test_members_leave_and_come_back_and_the_group_releases_them(bare: tuple[LocalCluster, Kube]) -> None:
    cluster, kube = bare
    name, ns = "rl-post-training", "wg-lifecycle"
    want, submitted = setup(kube, name, ns)
    rendered = rendered_name(ns, name)
    deployment = next(o for o in submitted if o["kind"] == "Deployment")
    dep_path = f"/apis/apps/v1/namespaces/{ns}/deployments/{deployment['metadata']['name']}"
    dep_pods = {o["metadata"]["name"] for o in submitted if o["kind"] == "Pod"
                and o["metadata"]["name"].startswith(deployment["metadata"]["name"])}
    assert len(dep_pods) == 2
    grouped = {p["name"] for p in want["pods"] if p["podGroup"]}  # not the RayJob's submitter (another scheduler)

    def own_podgroups() -> dict[str, str]:
        """PodGroup name -> owner kind, for PodGroups not owned by the WorkloadGroup."""
        return {n: pg["metadata"]["ownerReferences"][0]["kind"] for n, pg in stored(kube, ns)[0].items()
                if n != rendered}

    with GrouperThread(cluster, ns):
        wait_until(lambda: as_planned(kube, ns, want), 60, interval=0.25, what="the group rendered")

        # the Deployment scales up: its new pod joins the rendered PodGroup, in the Deployment's leaf
        sibling = next(o for o in submitted if o["kind"] == "Pod" and o["metadata"]["name"] in dep_pods)
        leaf = next(p["subGroup"] for p in want["pods"] if p["name"] == sibling["metadata"]["name"])
        extra = {"apiVersion": "v1", "kind": "Pod", "spec": sibling["spec"] | {"nodeName": None},
                 "metadata": {"name": "llm-chat-7d9c8b6f5d-extra", "labels": sibling["metadata"]["labels"],
                              "ownerReferences": sibling["metadata"]["ownerReferences"]}}
        kube.create(f"/api/v1/namespaces/{ns}/pods", extra)
        dep_pods.add("llm-chat-7d9c8b6f5d-extra")
        wait_until(lambda: place(stored(kube, ns)[1]["llm-chat-7d9c8b6f5d-extra"]) == (rendered, leaf), 60,
                   interval=0.25, what="the new pod placed in the Deployment's leaf of the rendered PodGroup")
        grouped.add("llm-chat-7d9c8b6f5d-extra")

        # the Deployment leaves: its pods go back to a PodGroup of its own; the group (2 of 3) is incomplete,
        # so nothing is rendered and the others name the unwritten PodGroup with no sub-group (the gate)
        kube.patch(dep_path, {"metadata": {"annotations": {wg.WORKLOAD_GROUP_ANNOTATION: None}}})

        def left() -> bool:
            pgs, pods = stored(kube, ns)
            if rendered in pgs:
                return False
            for pod_name in grouped:
                pg, sub = place(pods[pod_name])
                if pod_name in dep_pods:
                    if pg is None or pg == rendered or pgs.get(pg, {}).get("metadata", {}).get(
                            "ownerReferences", [{}])[0].get("kind") != "Deployment":
                        return False
                elif (pg, sub) != (rendered, None):
                    return False
            return True

        wait_until(left, 60, interval=0.25, what="the Deployment back on its own, the others gated")
        wait_until(lambda: conditions(kube, ns, name).get("Rendered") == "False", 30, what="status: not rendered")
        assert conditions(kube, ns, name)["InputsResolved"] == "False"
        assert set(own_podgroups().values()) == {"Deployment"}

        # it comes back: rendered again as planned, its own PodGroup deleted (no pod names it)
        kube.patch(dep_path, {"metadata": {"annotations": {wg.WORKLOAD_GROUP_ANNOTATION: name}}})
        wait_until(lambda: as_planned(kube, ns, want), 60, interval=0.25, what="rendered again")
        wait_until(lambda: not own_podgroups(), 30, what="the Deployment's own PodGroup deleted")

        # the group object deleted: every member back to its own PodGroup, the rendered one gone
        kube.delete(group_path(ns, name))

        def released() -> bool:
            pgs, pods = stored(kube, ns)
            if rendered in pgs or not pgs:
                return False
            return all(place(pods[p])[0] in pgs and place(pods[p])[0] != rendered for p in grouped)

        wait_until(released, 60, interval=0.25, what="all members back on their own PodGroups")
        assert set(own_podgroups().values()) == {"RayJob", "RayCluster", "Deployment"}


def warnings_on(kube: Kube, ns: str, kind: str, name: str) -> list[str]:
    return [e["message"] for e in kube.list(f"/api/v1/namespaces/{ns}/events")
            if e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name and e["type"] == "Warning"]


def test_an_invalid_group_says_so_and_keeps_its_members_gated(bare: tuple[LocalCluster, Kube]) -> None:
    """Members on different queues, then a member claimed by two groups: the group's status, Warning Events
    on the group and on its members, no rendered PodGroup, every member pod gated on its name."""
    cluster, kube = bare
    name, ns = "rl-post-training", "wg-invalid"
    want, submitted = setup(kube, name, ns)
    rendered = rendered_name(ns, name)
    grouped = {p["name"] for p in want["pods"] if p["podGroup"]}
    dep_path = f"/apis/apps/v1/namespaces/{ns}/deployments/llm-chat"
    inner = next(o for o in submitted if o["kind"] == "RayCluster" and o["metadata"].get("ownerReferences"))
    inner_path = f"/apis/ray.io/v1/namespaces/{ns}/rayclusters/{inner['metadata']['name']}"

    def gated() -> bool:
        pgs, pods = stored(kube, ns)
        return rendered not in pgs and all(place(pods[p]) == (rendered, None) for p in grouped)

    def invalid(reason_text: str) -> bool:
        status = kube.get(group_path(ns, name)).get("status") or {}
        conds = {c["type"]: c for c in status.get("conditions") or []}
        return (conds.get("InputsResolved", {}).get("reason") == "InvalidInputs"
                and reason_text in conds["InputsResolved"]["message"] and conds["Rendered"]["status"] == "False")

    with GrouperThread(cluster, ns) as g:
        wait_until(lambda: as_planned(kube, ns, want), 60, interval=0.25, what="the group rendered")

        kube.patch(dep_path, {"metadata": {"labels": {"kai.scheduler/queue": "team-b"}}})
        wait_until(lambda: invalid("different queues"), 60, interval=0.25, what="status: different queues")
        wait_until(gated, 60, interval=0.25, what="no rendered PodGroup, every member pod gated")
        for kind, member in ((wg.KIND, name), ("Deployment", "llm-chat"), ("RayJob", "ray-batch-infer"),
                             ("RayCluster", "ray-train")):
            wait_until(lambda k=kind, m=member: any("different queues" in w and "llm-chat" in w
                                                   for w in warnings_on(kube, ns, k, m)),
                       30, what=f"a Warning Event on {kind} {member}")
        record = g.store.pod_group(ns, rendered)
        assert record is not None and "different queues" in str(record), record  # what /podgroups shows

        kube.patch(dep_path, {"metadata": {"labels": {"kai.scheduler/queue": "team-a"}}})
        wait_until(lambda: as_planned(kube, ns, want), 60, interval=0.25, what="valid again: rendered")

        # an owner between the RayJob and its pods names another group: two claims, an error
        kube.patch(inner_path, {"metadata": {"annotations": {wg.WORKLOAD_GROUP_ANNOTATION: "another"}}})
        wait_until(lambda: invalid("claimed by two groups"), 60, interval=0.25, what="status: claimed by two groups")
        wait_until(gated, 60, interval=0.25, what="gated again")


def test_a_member_the_grouper_steps_aside_from_cannot_join(bare: tuple[LocalCluster, Kube]) -> None:
    """A member whose pods the grouper leaves alone (``kai.scheduler/skip-podgrouper``: grouped by someone
    else) cannot be merged: the group says so, on itself and on the member, and the others stay gated."""
    cluster, kube = bare
    name, ns = "finetune-and-serve", "wg-stepped-aside"
    want, submitted = setup(kube, name, ns)
    rendered = rendered_name(ns, name)
    job = next(o for o in submitted if o["kind"] == "PyTorchJob")
    lws_pods = [p["name"] for p in want["pods"] if p["podGroup"] and not p["name"].startswith(job["metadata"]["name"])]
    assert lws_pods
    with GrouperThread(cluster, ns):
        wait_until(lambda: as_planned(kube, ns, want), 60, interval=0.25, what="the group rendered")
        kube.patch(f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs/{job['metadata']['name']}",
                   {"metadata": {"annotations": {"kai.scheduler/skip-podgrouper": "true"}}})

        def refused() -> bool:
            status = kube.get(group_path(ns, name)).get("status") or {}
            conds = {c["type"]: c for c in status.get("conditions") or []}
            return "cannot join" in conds.get("InputsResolved", {}).get("message", "")

        wait_until(refused, 60, interval=0.25, what="status: the PyTorchJob cannot join")
        wait_until(lambda: rendered not in stored(kube, ns)[0]
                   and all(place(stored(kube, ns)[1][p]) == (rendered, None) for p in lws_pods),
                   60, interval=0.25, what="no rendered PodGroup, the LeaderWorkerSet's pods gated")
        for kind, member in ((wg.KIND, name), ("PyTorchJob", job["metadata"]["name"])):
            wait_until(lambda k=kind, m=member: any("cannot join" in w for w in warnings_on(kube, ns, k, m)),
                       30, what=f"a Warning Event on {kind} {member}")


def test_a_members_row_why_and_explain_show_the_groups_gang(bare: tuple[LocalCluster, Kube],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Where people look (docs/workload-groups.md): a member's ``/workloads`` row carries the rendered gang's
    state (here Waiting, with KAI's reason as its scheduler writes it) and names the group; ``grouper why``
    on the member prints the group's gang and the scheduler's reason; ``grouper explain`` on a member's pod
    says it is held for the group. With the group invalid: Error, the group's message, the gate."""
    import kai_status

    from grouper.cli.commands.get import server_get
    from grouper.cli.main import main

    cluster, kube = bare
    name, ns = "rl-post-training", "wg-visible"
    want, _ = setup(kube, name, ns)
    rendered = rendered_name(ns, name)
    kc = str(cluster.kubeconfig_path)
    pod = "llm-chat-7d9c8b6f5d-2xk9p"
    message = "node(s) didn't have enough resources: nvidia.com/gpu"
    fit = kai_status.FitError(kai_status.NOT_ENOUGH_RESOURCES, [message])

    def cli(*argv: str) -> tuple[int, str]:
        code = main(list(argv))
        return code, capsys.readouterr().out

    with GrouperThread(cluster, ns) as g:
        wait_until(lambda: as_planned(kube, ns, want), 60, interval=0.25, what="the group rendered")
        wait_until(lambda: conditions(kube, ns, name).get("Active") == "True", 30, what="Active")
        path = f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups/{rendered}"
        stored = kube.get(path)
        assert kai_status.mark_unschedulable(stored, [fit], now=datetime.now(UTC))
        kai_status.write_status(kube, path, stored)
        server = f"http://127.0.0.1:{g.service.http_port}"

        def row() -> dict[str, Any]:
            items = server_get(server, "/workloads", {"namespace": ns})["items"]
            return next(i for i in items if i["kind"] == "Deployment" and i["name"] == "llm-chat")

        wait_until(lambda: any(r["message"] == message for gang in row()["gangs"] for r in gang["reasons"]), 30,
                   interval=0.25, what="the member's row: the group's gang with KAI's reason")
        r = row()
        assert r["state"] == "Waiting" and [gang["podGroup"] for gang in r["gangs"]] == [rendered], r
        assert r["workloadGroup"]["name"] == name and r["workloadGroup"]["rendered"], r["workloadGroup"]
        assert len(r["workloadGroup"]["members"]) == r["workloadGroup"]["expectedWorkloads"] == 3

        code, out = cli("why", "deployment/llm-chat", "-n", ns, "--kubeconfig", kc)
        assert code == 0, out
        assert out.startswith(f"Deployment {ns}/llm-chat is Waiting: "), out
        assert (f"It is a member of WorkloadGroup {name} (3 of 3 workloads): its gang is the group's PodGroup "
                f"{rendered}.") in out
        assert f"PodGroup {rendered} (scheduling.run.ai/v2alpha2, queue team-a)" in out
        assert f"{kai_status.NOT_ENOUGH_RESOURCES}: {message}" in out
        assert "(planned; not in the cluster yet)" not in out  # its own PodGroup is not its gang
        assert (f"The grouper's plan (Deployment Grouper, 2 pods): its pods are in WorkloadGroup {name}'s PodGroup "
                f"{rendered}.") in out

        # grouper get workloads (from the cluster): the member's STATE is its group's gang's
        code, out = cli("get", "workloads", "-n", ns, "--kubeconfig", kc, "-o", "wide")
        assert code == 0, out
        listed = {(line.split()[1], line.split()[2]): line.split() for line in out.splitlines()[1:]}
        assert listed[("llm-chat", "Deployment")][4] == "Waiting" and "team-a" in listed[("llm-chat", "Deployment")]

        code, out = cli("explain", pod, "-n", ns, "--kubeconfig", kc)
        assert code == 0, out
        assert out.startswith(f"Pod {ns}/{pod} belongs to PodGroup {rendered}, sub-group llm-chat-"), out
        assert f"It is held for WorkloadGroup {name}: its workload is a member of WorkloadGroup {name}" in out
        assert "does not exist in the cluster yet" not in out  # its workload's own PodGroup is not its PodGroup
        assert "as decided" in out  # the pod carries the group's PodGroup and its leaf

        # the group made invalid: the member is Error with the group's message; its pods wait on the gate
        kube.patch(f"/apis/apps/v1/namespaces/{ns}/deployments/llm-chat",
                   {"metadata": {"labels": {"kai.scheduler/queue": "team-b"}}})
        wait_until(lambda: "different queues" in row()["workloadGroup"]["message"], 60, interval=0.25,
                   what="the member's row: the group's error")
        wait_until(lambda: not row()["workloadGroup"]["rendered"] and not row()["gangs"], 30, interval=0.25,
                   what="the group not rendered, its PodGroup gone")
        r = row()
        assert r["state"] == "Error" and r["workloadGroup"]["state"] == "Invalid" and r["gangs"] == [], r
        # the status names no rendered PodGroup any more (a merge patch must null what it no longer has)
        wait_until(lambda: conditions(kube, ns, name).get("Rendered") == "False", 30, what="status: not rendered")
        assert "renderedPodGroupRef" not in kube.get(group_path(ns, name))["status"]
        wait_until(lambda: place(stored_pod(kube, ns, pod)) == (rendered, None), 60, interval=0.25,
                   what="the member's pod gated")
        code, out = cli("get", "workloads", "-n", ns, "--kubeconfig", kc)
        assert next(line for line in out.splitlines() if " llm-chat " in f" {line} ").split()[4] == "Error", out
        code, out = cli("why", "deployment/llm-chat", "-n", ns, "--kubeconfig", kc)
        assert code == 5, out
        assert out.startswith(f"Deployment {ns}/llm-chat is Error: grouping it failed: its WorkloadGroup {name} is "
                              "invalid: "), out
        assert "different queues" in out and "InputsResolved=False (InvalidInputs)" in out
        code, out = cli("explain", pod, "-n", ns, "--kubeconfig", kc)
        assert out.startswith(f"Pod {ns}/{pod} is held for WorkloadGroup {name}: it names PodGroup {rendered}, which "
                              "is not written"), out

        # the Deployment leaves: the group is incomplete (2 of 3); why on a member says what is missing
        kube.patch(f"/apis/apps/v1/namespaces/{ns}/deployments/llm-chat",
                   {"metadata": {"annotations": {wg.WORKLOAD_GROUP_ANNOTATION: None}}})
        wait_until(lambda: (kube.get(group_path(ns, name)).get("status") or {}).get("conditions", [{}])[0].get(
            "reason") == "WaitingForInputs", 60, interval=0.25, what="status: waiting for inputs")
        code, out = cli("why", "rayjob/ray-batch-infer", "-n", ns, "--kubeconfig", kc)
        assert code == 5, out
        assert out.startswith(f"RayJob {ns}/ray-batch-infer is Grouping: its WorkloadGroup {name} is not rendered, so "
                              "its pods wait on the gate."), out
        assert f"It is a member of WorkloadGroup {name} (2 of 3 workloads): the group is not rendered yet: " in out
        assert "The group's members: RayCluster/ray-train, RayJob/ray-batch-infer (2 of 3 expected)." in out
        assert "InputsResolved=False (WaitingForInputs)" in out


def stored_pod(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
