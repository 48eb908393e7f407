"""The real LeaderWorkerSet controller (sigs.k8s.io/lws, pinned in devtools/cluster/go/lws/go.mod) in the
loop, with its webhooks (LWS defaulting and validation, and the pod webhook that labels every pod of a
group) served with a certificate of the cluster's CA.

Every other test builds an LWS's StatefulSets and pods by hand, "as the operator creates them". Here only
the LeaderWorkerSet is submitted: the LWS controller creates the leader StatefulSet, the StatefulSet
controller the leader pods, the LWS pod controller a worker StatefulSet per leader, the StatefulSet
controller its workers, and

- the hand-written fixture (examples/leaderworkerset.yaml) must carry the labels, annotations, owner
  references, names and requests the real controllers give them;
- a running grouper stores one PodGroup per group equal to what ``grouper plan`` computes from the same
  live objects, follows replicas up and down and a pod the controllers recreate with no duplicate PodGroup
  and no needless write, and the garbage collector removes the PodGroups with the LWS;
- with ``startupPolicy: LeaderReady`` the workers come only once the leader is ready: the group's PodGroup
  asks for the leader alone (minMember 1) until the leader is bound, then for the whole group.

There is no scheduler or kubelet: where LWS waits for a ready leader the test binds it (the binding
subresource, as a scheduler does) and sets its status to Running and Ready (as a kubelet does).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusters import DEPLOY_CRDS, Audit, cluster_fixture
from controller.harness import ANNOTATION, SUBGROUP, GrouperThread, label_namespace
from kube import Kube, wait_until

from devtools.cluster import LocalCluster
from grouper.describe.resources import pod_request
from operators.opkit import differences, grouper_writes, normalize, owner_refs, planned, typed, uids

OPERATORS = ["lws"]
# its own control plane with the lws operator (tests/clusters.py; the conftest's default runs JobSet)
op_cluster = cluster_fixture("op_cluster", shared=False, audit=True, crds=DEPLOY_CRDS, operators=OPERATORS)
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "leaderworkerset.yaml"
LWS_API = "leaderworkerset.x-k8s.io/v1"
LWSS = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets"
PODGROUPS = "/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups"
# pod spec fields the grouper reads (scheduler, priority) or the StatefulSet controller sets
POD_SPEC_FIELDS = ("schedulerName", "priorityClassName", "hostname", "subdomain")


def example_docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]


def example_lws(**spec: Any) -> dict[str, Any]:
    """examples/leaderworkerset.yaml's LWS as a user submits it, with ``spec`` fields overridden."""
    lws = copy.deepcopy(next(d for d in example_docs() if d["kind"] == "LeaderWorkerSet"))
    for key in ("uid", "creationTimestamp", "namespace"):
        lws["metadata"].pop(key, None)
    lws.pop("status", None)
    lws["spec"].update(spec)
    return lws


def live(kube: Kube, ns: str) -> dict[str, list[dict[str, Any]]]:
    return {
        "LeaderWorkerSet": typed(kube.list(LWSS.format(ns=ns)), LWS_API, "LeaderWorkerSet"),
        "StatefulSet": typed(kube.list(f"/apis/apps/v1/namespaces/{ns}/statefulsets"), "apps/v1", "StatefulSet"),
        "Pod": typed(kube.list(f"/api/v1/namespaces/{ns}/pods"), "v1", "Pod"),
    }


def play_scheduler_and_kubelet(kube: Kube, ns: str, pod: dict[str, Any], node: str = "node-a") -> None:
    """Bind the pod (as a scheduler does) and report it Running and Ready (as a kubelet does)."""
    name = pod["metadata"]["name"]
    kube.create(f"/api/v1/namespaces/{ns}/pods/{name}/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    })
    conditions = [{"type": t, "status": "True"} for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]
    kube.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status", {"status": {"phase": "Running", "conditions": conditions}})


# ---------------------------------------------------------------------- fixture truth


def _view(obj: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """What the grouper (plan, describe, get) reads of a StatefulSet or pod the controllers create."""
    meta, spec = obj["metadata"], obj.get("spec") or {}
    view: dict[str, Any] = {
        "name": meta["name"],
        "labels": meta.get("labels") or {},
        "annotations": meta.get("annotations") or {},
        "ownerReferences": owner_refs(meta),
    }
    if obj["kind"] == "StatefulSet":
        view["spec.replicas"] = spec.get("replicas")
    else:
        for key in POD_SPEC_FIELDS:
            view[f"spec.{key}"] = spec.get(key)
        view["request"] = pod_request(spec).to_dict()
    return normalize(view, names)


@pytest.fixture
def team_a(okube: Kube) -> str:
    """The fixture's own namespace (the group-key label hashes it)."""
    if not okube.exists("/api/v1/namespaces/team-a"):
        okube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    wait_until(lambda: okube.exists("/api/v1/namespaces/team-a/serviceaccounts/default"), 30, what="ServiceAccount")
    return "team-a"


def test_lws_fixture_is_what_the_real_controllers_create(op_cluster: LocalCluster, okube: Kube, team_a: str) -> None:
    """examples/leaderworkerset.yaml's StatefulSets and pods equal, in everything the grouper reads, what the
    LWS and StatefulSet controllers (and LWS's pod webhook) create for its LeaderWorkerSet (no grouper runs
    here)."""
    ns = team_a
    fixture = example_docs()
    want = {kind: [d for d in fixture if d["kind"] == kind] for kind in ("StatefulSet", "Pod")}
    okube.create(LWSS.format(ns=ns), example_lws())
    try:
        def created() -> Any:
            objs = live(okube, ns)
            return objs if all(len(objs[k]) == len(v) for k, v in want.items()) else None

        objs = wait_until(created, timeout=90, interval=0.25, what="the StatefulSets and pods of LWS vllm-70b")
        fixture_names, live_names = uids(fixture), uids([o for group in objs.values() for o in group])
        problems = []
        for kind, objects in want.items():
            problems += differences(
                kind,
                {o["metadata"]["name"]: _view(o, fixture_names) for o in objects},
                {o["metadata"]["name"]: _view(o, live_names) for o in objs[kind]},
            )
        assert not problems, "examples/leaderworkerset.yaml differs from what the controllers create:\n" + "\n".join(problems)
    finally:
        okube.delete(f"{LWSS.format(ns=ns)}/vllm-70b", ignore_missing=True)
        wait_until(lambda: not okube.list(f"/api/v1/namespaces/{ns}/pods"), timeout=90, interval=0.25,
                   what="the pods of LWS vllm-70b gone")


# ---------------------------------------------------------------------- the grouper over the real operator


def _grouped(kube: Kube, ns: str, count: int, pred: Any = None) -> dict[str, list[dict[str, Any]]]:
    def check() -> Any:
        objs = live(kube, ns)
        pods = objs["Pod"]
        ok = len(pods) == count and all((p["metadata"].get("annotations") or {}).get(ANNOTATION) for p in pods)
        return objs if ok and (pred is None or pred(objs)) else None

    objs: dict[str, list[dict[str, Any]]] = wait_until(check, timeout=90, interval=0.25,
                                                       what=f"{count} LWS pods created and grouped")
    return objs


def assert_stored_is_planned(kube: Kube, ns: str, objs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The stored PodGroups are those ``grouper plan`` computes from the same live objects (one per group),
    and every pod carries the group and sub-group the plan gives it; returns the stored ones by name."""
    want = planned(*objs.values())
    assert want["errors"] == [], want["errors"]
    stored = {pg["metadata"]["name"]: pg for pg in kube.list(PODGROUPS.format(ns=ns))}
    assert sorted(stored) == sorted(pg["metadata"]["name"] for pg in want["podGroups"])
    for want_pg in want["podGroups"]:
        pg = stored[want_pg["metadata"]["name"]]
        assert pg["spec"] == want_pg["spec"], pg["metadata"]["name"]
        assert pg["metadata"]["ownerReferences"] == want_pg["metadata"]["ownerReferences"]
    decided = {d["name"]: d for d in want["pods"]}
    for pod in objs["Pod"]:
        meta = pod["metadata"]
        assert (meta.get("annotations") or {}).get(ANNOTATION) == decided[meta["name"]]["podGroup"], meta["name"]
        assert (meta.get("labels") or {}).get(SUBGROUP) == decided[meta["name"]]["subGroup"], meta["name"]
    return stored


def pod_uids(objs: dict[str, list[dict[str, Any]]]) -> set[str]:
    return {p["metadata"]["uid"] for p in objs["Pod"]}


def test_grouper_follows_a_real_leaderworkerset(op_cluster: LocalCluster, okube: Kube, ons: str, audit: Audit) -> None:
    """LeaderCreated (the default), ``restartPolicy: None``: 2 groups of 3 → 2 PodGroups
    ``pg-<lws>-<uid>-group-<n>`` (minMember 3, leader 1 + workers 2). Replicas 2 → 3: one new PodGroup and
    its 3 pods written, the others untouched. A deleted worker is recreated by its StatefulSet: one write
    (the new pod), none to the PodGroup. A restarted grouper writes nothing. Deleting the LWS
    garbage-collects the PodGroups."""
    ns = ons
    label_namespace(okube, ns)
    path = f"{LWSS.format(ns=ns)}/vllm-70b"
    lws = example_lws()
    lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "None"

    with GrouperThread(op_cluster, ns) as grouper:
        lws = okube.create(LWSS.format(ns=ns), lws)
        _grouped(okube, ns, 6)
        grouper.wait_idle(timeout=60)
        stored = assert_stored_is_planned(okube, ns, live(okube, ns))
        prefix = f"pg-vllm-70b-{lws['metadata']['uid']}-group-"
        assert sorted(stored) == [f"{prefix}0", f"{prefix}1"]
        for pg in stored.values():
            assert pg["spec"]["minMember"] == 3
            assert [(sg["name"], sg["minMember"]) for sg in pg["spec"]["subGroups"]] == [("leader", 1), ("workers", 2)]
        versions = {name: pg["metadata"]["resourceVersion"] for name, pg in stored.items()}

        # up: a third group, one new PodGroup; the others are not written
        since = len(audit.writes(namespace=ns))
        okube.patch(path, {"spec": {"replicas": 3}})
        objs = _grouped(okube, ns, 9)
        grouper.wait_idle(timeout=60)
        stored = assert_stored_is_planned(okube, ns, live(okube, ns))
        assert sorted(stored) == [f"{prefix}0", f"{prefix}1", f"{prefix}2"]
        assert {n: stored[n]["metadata"]["resourceVersion"] for n in versions} == versions
        assert grouper_writes(audit, ns, since) == {"podgroups": 1, "pods": 3}
        versions = {name: pg["metadata"]["resourceVersion"] for name, pg in stored.items()}

        # a worker deleted: its StatefulSet recreates it; one write (the new pod), none to the PodGroup
        since = len(audit.writes(namespace=ns))
        before = pod_uids(objs)
        victim = "vllm-70b-1-1"
        okube.delete(f"/api/v1/namespaces/{ns}/pods/{victim}")
        objs = _grouped(okube, ns, 9, lambda o: pod_uids(o) - before)
        grouper.wait_idle(timeout=60)
        objs = live(okube, ns)
        assert [p["metadata"]["name"] for p in objs["Pod"] if p["metadata"]["uid"] not in before] == [victim]
        stored = assert_stored_is_planned(okube, ns, objs)
        assert {n: stored[n]["metadata"]["resourceVersion"] for n in versions} == versions
        assert grouper_writes(audit, ns, since) == {"pods": 1}, "one write: the recreated worker"

    # a new grouper over the same objects: nothing to write (level-triggered, no needless write)
    since = len(audit.writes(namespace=ns))
    with GrouperThread(op_cluster, ns) as again:
        again.wait_idle(timeout=60)
        assert grouper_writes(audit, ns, since) == {}, "a restarted grouper rewrote what was right"
        okube.delete(path)
        wait_until(lambda: not okube.list(PODGROUPS.format(ns=ns)), timeout=90, interval=0.25,
                   what="the PodGroups garbage-collected with their LWS")
    assert grouper_writes(audit, ns, since) == {}, "nothing written for a deleted LWS"


def test_leader_ready_groups_the_leader_alone_until_it_is_bound(
    op_cluster: LocalCluster, okube: Kube, ons: str, audit: Audit
) -> None:
    """``startupPolicy: LeaderReady``, 1 group of 3: the LWS controller creates the leader only; its
    PodGroup asks for 1 pod (KAI's rule for an unbound LeaderReady leader). The leader is bound and becomes
    ready: LWS creates the workers and the PodGroup asks for the whole group (3), written once more."""
    ns = ons
    label_namespace(okube, ns)
    with GrouperThread(op_cluster, ns) as grouper:
        since = len(audit.writes(namespace=ns))
        lws = okube.create(LWSS.format(ns=ns), example_lws(replicas=1, startupPolicy="LeaderReady"))
        objs = _grouped(okube, ns, 1)
        grouper.wait_idle(timeout=60)
        stored = assert_stored_is_planned(okube, ns, live(okube, ns))
        name = f"pg-vllm-70b-{lws['metadata']['uid']}-group-0"
        assert list(stored) == [name]
        assert stored[name]["spec"]["minMember"] == 1
        assert [(sg["name"], sg["minMember"]) for sg in stored[name]["spec"]["subGroups"]] == [("leader", 1)]
        assert not [s for s in objs["StatefulSet"] if s["metadata"]["name"] != "vllm-70b"], "workers before a ready leader"

        (leader,) = objs["Pod"]
        play_scheduler_and_kubelet(okube, ns, leader)
        objs = _grouped(okube, ns, 3)
        grouper.wait_idle(timeout=60)
        stored = assert_stored_is_planned(okube, ns, live(okube, ns))
        assert stored[name]["spec"]["minMember"] == 3
        assert [(sg["name"], sg["minMember"]) for sg in stored[name]["spec"]["subGroups"]] == [("leader", 1), ("workers", 2)]
        writes = grouper_writes(audit, ns, since)
        assert writes.get("pods") == 3, writes
        assert writes.get("podgroups") == 2, f"created for the leader, updated once for the group: {writes}"
