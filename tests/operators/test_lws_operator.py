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
- with LWS's default ``RecreateGroupOnPodRestart``, a failed worker (deleted, or its container restarted)
  makes LWS recreate its whole group: the group's PodGroup is kept through the moment the group has no pod
  and only the new pods are written; a group scaled away keeps its PodGroup until the LWS goes (as KAI);
- with ``startupPolicy: LeaderReady`` the workers come only once the leader is ready: the group's PodGroup
  asks for the leader alone (minMember 1) until the leader is bound, then for the whole group.

There is no scheduler or kubelet: where LWS waits for a ready leader the test binds it (the binding
subresource, as a scheduler does) and sets its status to Running and Ready (as a kubelet does).
"""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusters import DEPLOY_CRDS, Audit, cluster_fixture
from controller.harness import GrouperThread, label_namespace
from kube import Kube, wait_until

from devtools.cluster import LocalCluster
from grouper.describe.resources import pod_request
from operators.opkit import (
    PODGROUPS,
    assert_stored_are_planned,
    differences,
    grouper_writes,
    normalize,
    owner_refs,
    restart_then_delete,
    typed,
    uids,
    wait_grouped,
)

OPERATORS = ["lws"]
# its own control plane with the lws operator (tests/clusters.py; the conftest's default runs JobSet)
op_cluster = cluster_fixture("op_cluster", shared=False, audit=True, crds=DEPLOY_CRDS, operators=OPERATORS)
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "leaderworkerset.yaml"
LWS_API = "leaderworkerset.x-k8s.io/v1"
LWSS = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets"
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
    return wait_grouped(lambda: live(kube, ns), count, "LWS pods", pred=pred)

def pod_uids(objs: dict[str, list[dict[str, Any]]]) -> set[str]:
    return {p["metadata"]["uid"] for p in objs["Pod"]}


def test_grouper_follows_a_real_leaderworkerset(op_cluster: LocalCluster, okube: Kube, ons: str, audit: Audit) -> None:
    """LeaderCreated (the default), ``restartPolicy: None``: 2 groups of 3 → 2 PodGroups
    ``pg-<lws>-<uid>-group-<n>`` (minMember 3, leader 1 + workers 2). Replicas 2 → 3: one new PodGroup and
    its 3 pods written, the others untouched. A deleted worker is recreated by its StatefulSet alone (what
    ``None`` is for here: under the default ``RecreateGroupOnPodRestart`` LWS recreates the whole group,
    ``test_a_group_lws_recreates_keeps_its_podgroup``): one write (the new pod), none to the PodGroup. A restarted grouper writes nothing. Deleting the LWS
    garbage-collects the PodGroups."""
    ns = ons
    label_namespace(okube, ns)
    path = f"{LWSS.format(ns=ns)}/vllm-70b"
    lws = example_lws()
    lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "None"  # the worker replaced alone, see above

    with GrouperThread(op_cluster, ns) as grouper:
        lws = okube.create(LWSS.format(ns=ns), lws)
        _grouped(okube, ns, 6)
        grouper.wait_idle(timeout=60)
        stored = assert_stored_are_planned(okube, ns, live(okube, ns))
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
        stored = assert_stored_are_planned(okube, ns, live(okube, ns))
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
        stored = assert_stored_are_planned(okube, ns, objs)
        assert {n: stored[n]["metadata"]["resourceVersion"] for n in versions} == versions
        assert grouper_writes(audit, ns, since) == {"pods": 1}, "one write: the recreated worker"

    restart_then_delete(op_cluster, okube, audit, ns, path, "their LWS")


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
        stored = assert_stored_are_planned(okube, ns, live(okube, ns))
        name = f"pg-vllm-70b-{lws['metadata']['uid']}-group-0"
        assert list(stored) == [name]
        assert stored[name]["spec"]["minMember"] == 1
        assert [(sg["name"], sg["minMember"]) for sg in stored[name]["spec"]["subGroups"]] == [("leader", 1)]
        assert not [s for s in objs["StatefulSet"] if s["metadata"]["name"] != "vllm-70b"], "workers before a ready leader"

        (leader,) = objs["Pod"]
        play_scheduler_and_kubelet(okube, ns, leader)
        objs = _grouped(okube, ns, 3)
        grouper.wait_idle(timeout=60)
        stored = assert_stored_are_planned(okube, ns, live(okube, ns))
        assert stored[name]["spec"]["minMember"] == 3
        assert [(sg["name"], sg["minMember"]) for sg in stored[name]["spec"]["subGroups"]] == [("leader", 1), ("workers", 2)]
        writes = grouper_writes(audit, ns, since)
        assert writes.get("pods") == 3, writes
        assert writes.get("podgroups") == 2, f"created for the leader, updated once for the group: {writes}"


# ---------------------------------------------------------------------- groups recreated and removed by LWS

GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
HOLD = "test.grouper/hold"  # a finalizer: the pod terminates gracefully, as a kubelet would end it


def _group_pods(objs: dict[str, list[dict[str, Any]]], group: str) -> list[dict[str, Any]]:
    return [p for p in objs["Pod"] if (p["metadata"].get("labels") or {}).get(GROUP_INDEX) == group]


def _podgroup_writes(audit: Audit, ns: str, since: int) -> list[tuple[str, str]]:
    """(verb, name) of every PodGroup write the grouper made in ``ns`` after the first ``since``."""
    return [(ev["verb"], ev["objectRef"].get("name", "")) for ev in audit.writes(namespace=ns)[since:]
            if ev["objectRef"]["resource"] == "podgroups"]


def _writes(audit: Audit, ns: str, since: int) -> list[tuple[str, str, str, int]]:
    """(verb, resource, name, response code) of the grouper's writes in ``ns`` after the first ``since``."""
    return [(ev["verb"], ev["objectRef"]["resource"], ev["objectRef"].get("name", ""),
             int((ev.get("responseStatus") or {}).get("code") or 0))
            for ev in audit.writes(namespace=ns)[since:]]


def _created_pods(audit: Audit, ns: str, since: int) -> Counter[str]:
    """The pods anyone (the StatefulSet controller) created in ``ns`` after the first ``since`` writes, by name."""
    return Counter(ev["objectRef"].get("name") or (ev.get("responseObject") or {}).get("metadata", {}).get("name", "?")
                   for ev in audit.writes(user_agent_contains="", namespace=ns)[since:]
                   if ev["verb"] == "create" and ev["objectRef"]["resource"] == "pods"
                   and not ev["objectRef"].get("subresource"))


def _fail_worker(kube: Kube, ns: str, pod: dict[str, Any], how: str) -> None:
    """A worker fails as on a node: its container restarts (the kubelet reports restartCount 1), or it is
    deleted and terminates gracefully (held by a finalizer until LWS has reacted, then let go)."""
    name = pod["metadata"]["name"]
    path = f"/api/v1/namespaces/{ns}/pods/{name}"
    if how == "restart":
        container = pod["spec"]["containers"][0]
        kube.patch(f"{path}/status", {"status": {"phase": "Running", "containerStatuses": [{
            "name": container["name"], "image": container["image"], "imageID": "", "ready": False,
            "restartCount": 1, "state": {"running": {}}, "lastState": {}}]}})
        return
    kube.patch(path, {"metadata": {"finalizers": [HOLD]}})
    leader = f"/api/v1/namespaces/{ns}/pods/{name.rsplit('-', 1)[0]}"
    leader_uid = kube.get(leader)["metadata"]["uid"]
    kube.delete(path)

    def leader_going() -> bool:
        cur = kube.get(leader) if kube.exists(leader) else None
        return cur is None or cur["metadata"]["uid"] != leader_uid or bool(cur["metadata"].get("deletionTimestamp"))

    wait_until(leader_going, timeout=90, interval=0.25, what=f"LWS deleting the leader of {name}'s group")
    kube.patch(path, {"metadata": {"finalizers": None}})


@pytest.mark.parametrize("how", ["deleted", "restart"])
def test_a_group_lws_recreates_keeps_its_podgroup(
    op_cluster: LocalCluster, okube: Kube, ons: str, audit: Audit, how: str
) -> None:
    """``restartPolicy: RecreateGroupOnPodRestart`` (LWS's default), 2 groups of 3: a worker fails (deleted, or
    its container restarts); LWS deletes the group's leader (foreground: the worker StatefulSet and its pods
    go first) and the leader StatefulSet and LWS create the whole group anew. For a moment the group has no
    pod at all: its PodGroup is still the one the group's new pods need (same name, same spec), so the
    grouper writes the 3 new pods' marks and nothing else — no PodGroup deleted, created or updated. Three
    times over, and a restarted grouper writes nothing."""
    ns = ons
    label_namespace(okube, ns)
    with GrouperThread(op_cluster, ns) as grouper:
        lws = okube.create(LWSS.format(ns=ns), example_lws())
        assert "restartPolicy" not in lws["spec"]["leaderWorkerTemplate"] or \
            lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
        objs = _grouped(okube, ns, 6)
        grouper.wait_idle(timeout=60)
        stored = assert_stored_are_planned(okube, ns, live(okube, ns))
        versions = {name: pg["metadata"]["resourceVersion"] for name, pg in stored.items()}
        for round_ in range(3):
            since, since_all = len(audit.writes(namespace=ns)), len(audit.writes(user_agent_contains="", namespace=ns))
            old = {p["metadata"]["uid"] for p in _group_pods(objs, "1")}
            victim = next(p for p in objs["Pod"] if p["metadata"]["name"] == "vllm-70b-1-2")
            _fail_worker(okube, ns, victim, how)
            objs = _grouped(okube, ns, 6, lambda o, old=old: len(_group_pods(o, "1")) == 3
                            and not {p["metadata"]["uid"] for p in _group_pods(o, "1")} & old)
            grouper.wait_idle(timeout=60)
            objs = live(okube, ns)
            stored = assert_stored_are_planned(okube, ns, objs)
            assert _podgroup_writes(audit, ns, since) == [], f"round {round_}: the recreated group's PodGroup rewritten"
            assert {n: stored[n]["metadata"]["resourceVersion"] for n in versions} == versions, f"round {round_}"
            # each pod the controllers created is marked once: the group's 3 new pods, and in the deleted case
            # sometimes a worker the old StatefulSet recreated while the group was going (gone again at once)
            # (a pod deleted before the grouper saw it is not)
            writes = _writes(audit, ns, since)
            patched = Counter(w[2] for w in writes if w[:2] == ("patch", "pods"))
            created = _created_pods(audit, ns, since_all)
            assert grouper_writes(audit, ns, since) == {"pods": sum(patched.values())}, f"round {round_}: {writes}"
            assert sorted(patched) == sorted(p["metadata"]["name"] for p in _group_pods(objs, "1")), writes
            assert all(patched[n] <= created[n] for n in patched), f"round {round_}: {writes}, created {created}"

    since = len(audit.writes(namespace=ns))
    with GrouperThread(op_cluster, ns) as again:
        again.wait_idle(timeout=60)
        assert grouper_writes(audit, ns, since) == {}, "a restarted grouper rewrote what was right"


def test_a_removed_group_keeps_its_podgroup_until_the_lws_goes(
    op_cluster: LocalCluster, okube: Kube, ons: str, audit: Audit
) -> None:
    """Replicas 3 → 2 → 1: LWS removes the last group (its leader, its worker StatefulSet and their pods). The
    removed group's PodGroup is not deleted by the grouper — every time, as KAI's podgrouper does: it stays,
    owned by the LWS, and goes with it (garbage collection); only a PodGroup whose pods the grouper moved to
    another is deleted (a replaced one). Scaling back up to 3 finds the PodGroups as the new groups need
    them: only the new pods are written. A restarted grouper writes nothing; deleting the LWS removes all."""
    ns = ons
    label_namespace(okube, ns)
    path = f"{LWSS.format(ns=ns)}/vllm-70b"
    with GrouperThread(op_cluster, ns) as grouper:
        lws = okube.create(LWSS.format(ns=ns), example_lws(replicas=3))
        _grouped(okube, ns, 9)
        grouper.wait_idle(timeout=60)
        stored = assert_stored_are_planned(okube, ns, live(okube, ns))
        prefix = f"pg-vllm-70b-{lws['metadata']['uid']}-group-"
        assert sorted(stored) == [f"{prefix}{i}" for i in range(3)]
        versions = {name: pg["metadata"]["resourceVersion"] for name, pg in stored.items()}
        for replicas in (2, 1):
            since = len(audit.writes(namespace=ns))
            okube.patch(path, {"spec": {"replicas": replicas}})
            objs = _grouped(okube, ns, 3 * replicas, lambda o, r=replicas: len(o["StatefulSet"]) == 1 + r)
            grouper.wait_idle(timeout=60)
            objs = live(okube, ns)
            assert not _group_pods(objs, str(replicas))
            stored = {pg["metadata"]["name"]: pg for pg in okube.list(PODGROUPS.format(ns=ns))}
            assert sorted(stored) == sorted(versions), f"replicas {replicas}: a removed group's PodGroup deleted"
            assert {n: pg["metadata"]["resourceVersion"] for n, pg in stored.items()} == versions
            assert grouper_writes(audit, ns, since) == {}, f"replicas {replicas}: nothing to write"

    def scale_back_up(again: GrouperThread) -> None:
        okube.patch(path, {"spec": {"replicas": 3}})
        _grouped(okube, ns, 9)
        again.wait_idle(timeout=60)
        stored = assert_stored_are_planned(okube, ns, live(okube, ns))
        assert {n: pg["metadata"]["resourceVersion"] for n, pg in stored.items()} == versions
        assert grouper_writes(audit, ns, since) == {"pods": 6}, "the new groups' pods, no PodGroup"

    # before the restart, as the helper's own first count (which must find nothing): the 6 are scale_back_up's
    since = len(audit.writes(namespace=ns))
    restart_then_delete(op_cluster, okube, audit, ns, path, "their LWS", meanwhile=scale_back_up)
