"""The compact caches and records (speed issue, item 3): same answers as the plain structures they replace.

- ``grouper.kube.compact``: the multimap behind the indexes (lone member → itself → list → set and back);
- ``PodShape.slim``: equal by value to the plain slim pod, with what repeats shared among pods;
- ``WorkloadIndex`` and the informer's indexes: the same answers for one, a few and many members.

The decision store's are in tests/records/test_decision_store.py.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest

from grouper.controller.workloads import WorkloadIndex, WorkloadKey
from grouper.kube.cache import GPUS_FIELD, PodShape, pod_gpus, slim_owner, slim_pod
from grouper.kube.compact import SMALL, Interner, add_member, discard_member, has_member, members
from grouper.kube.discovery import Resource
from grouper.kube.informer import Informer
from grouper.manifests import load_manifests

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example_objects(*files: str) -> list[dict[str, Any]]:
    return [m.obj for m in load_manifests([EXAMPLES / f for f in files])]


# ---------------------------------------------------------------------- the multimap


def test_multimap_goes_from_one_member_to_a_list_to_a_set_and_back() -> None:
    idx: dict[str, Any] = {}
    add_member(idx, "k", ("ns", "a"))
    assert idx["k"] == ("ns", "a")  # a lone member is stored as itself (here a tuple key)
    assert members(idx, "k") == {("ns", "a")}
    add_member(idx, "k", ("ns", "a"))  # idempotent
    assert idx["k"] == ("ns", "a")
    assert has_member(idx, "k", ("ns", "a")) and not has_member(idx, "k", ("ns", "p0"))
    for i in range(SMALL + 3):
        add_member(idx, "k", ("ns", f"p{i}"))
        assert len(members(idx, "k")) == i + 2
        assert has_member(idx, "k", ("ns", f"p{i}")) and has_member(idx, "k", ("ns", "a"))  # a list, then a set
    assert isinstance(idx["k"], set) and not has_member(idx, "k", ("ns", "other"))
    for i in range(SMALL + 3):
        discard_member(idx, "k", ("ns", f"p{i}"))
    assert idx["k"] == ("ns", "a")
    discard_member(idx, "k", ("ns", "other"))  # not a member: nothing changes
    assert idx["k"] == ("ns", "a")
    discard_member(idx, "k", ("ns", "a"))
    assert "k" not in idx and members(idx, "k") == frozenset() and not has_member(idx, "k", ("ns", "a"))


def test_members_is_a_copy_callers_may_keep_while_the_index_changes() -> None:
    idx: dict[str, Any] = {}
    for m in ("a", "b", "c"):
        add_member(idx, "k", m)
    got = members(idx, "k")
    discard_member(idx, "k", "a")
    assert got == {"a", "b", "c"} and members(idx, "k") == {"b", "c"}


def test_interner_shares_equal_values_and_stays_bounded() -> None:
    intern = Interner(max_entries=4)
    a = intern("team-" + "a")
    assert intern("".join(["team-", "a"])) is a
    for i in range(10):
        intern(f"v{i}")
    assert len(intern) <= 4


# ---------------------------------------------------------------------- the cached pod


def _plain_slim(shape: PodShape, pod: dict[str, Any]) -> dict[str, Any]:
    """What the cache kept before any sharing: the same fields, fresh dicts."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    keep = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "labels",
            "annotations", "ownerReferences", "generateName")
    out: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {k: copy.deepcopy(meta[k]) for k in keep if k in meta},
        "spec": {k: copy.deepcopy(spec[k]) for k in shape.spec if k in spec},
    }
    if pod_gpus(spec):  # the GPU request, for the gang state
        out["spec"][GPUS_FIELD] = pod_gpus(spec)
    status = {k: v for k, v in (pod.get("status") or {}).items() if k in shape.status}
    unbound = (pod.get("status") or {}).get("phase") in (None, "Pending")  # only an unbound pod can be held
    held = [{k: c[k] for k in ("type", "status", "reason", "message", "lastTransitionTime") if k in c}
            for c in (pod.get("status") or {}).get("conditions") or []
            if unbound and c.get("type") == "PodScheduled" and c.get("status") == "False"]
    if held:  # the scheduler's reason while it holds the pod
        status["conditions"] = held
    if status:
        out["status"] = status
    return out


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.stem)
def test_slim_pod_equals_the_plain_slim_pod_for_every_example(path: Path) -> None:
    shape = PodShape()
    for pod in (obj for obj in example_objects(path.name) if obj.get("kind") == "Pod"):
        assert shape.slim(copy.deepcopy(pod)) == _plain_slim(shape, pod)


def _pod(name: str, *, node: str = "n1", owner_uid: str = "job-uid", index: str = "0") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "creationTimestamp": "2026-12-01T08:00:00Z",
            "generateName": "train-0-",
            "labels": {"job-name": "train-0", "controller-uid": owner_uid, "app": "x"},
            "annotations": {"batch.kubernetes.io/job-completion-index": index},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train-0", "uid": owner_uid,
                                 "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [{"manager": "kcm"}],
        },
        "spec": {"schedulerName": "kai-scheduler", "nodeName": node, "containers": [{"name": "c"}]},
        "status": {"phase": "Running", "podIP": f"10.0.0.{len(name)}"},
    }


@pytest.mark.parametrize("phase", [None, "Pending", "Running", "Failed"])
def test_a_pod_is_kept_held_only_while_unbound(phase: str | None) -> None:
    pod = _pod("train-0-0")
    pod["status"] = {"conditions": [{"type": "Initialized", "status": "True"},
                                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                     "message": "0/8 nodes are available"}]}
    if phase is not None:
        pod["status"]["phase"] = phase
    shape = PodShape()
    slim = shape.slim(copy.deepcopy(pod))
    assert slim == _plain_slim(shape, pod)
    held = (slim.get("status") or {}).get("conditions")
    assert held == ([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                      "message": "0/8 nodes are available"}] if phase in (None, "Pending") else None)


def test_a_widened_shape_keeps_the_new_field_from_the_next_pod_on() -> None:
    shape = PodShape()
    pod = _pod("train-0-0")
    pod["spec"]["runtimeClassName"] = "nvidia"
    assert "runtimeClassName" not in shape.slim(copy.deepcopy(pod))["spec"]
    assert shape.widen([".spec.runtimeClassName"])
    assert shape.slim(copy.deepcopy(pod))["spec"]["runtimeClassName"] == "nvidia"
    assert shape.slim(copy.deepcopy(pod)) == _plain_slim(shape, pod)


def test_sibling_pods_share_what_they_have_in_common() -> None:
    shape = PodShape()
    a, b = shape.slim(_pod("a", index="0")), shape.slim(_pod("b", index="1"))
    c = shape.slim(_pod("c", node="n2", index="0"))
    # same owner, same labels: one labels dict, one ownerReferences list
    assert a["metadata"]["labels"] is b["metadata"]["labels"]
    assert a["metadata"]["ownerReferences"] is b["metadata"]["ownerReferences"]
    # annotations differ (completion index): separate dicts, shared strings
    assert a["metadata"]["annotations"] is not b["metadata"]["annotations"]
    assert a["metadata"]["annotations"] == {"batch.kubernetes.io/job-completion-index": "0"}
    assert b["metadata"]["annotations"] == {"batch.kubernetes.io/job-completion-index": "1"}
    # spec and status as kept: one dict per distinct content
    assert a["spec"] is b["spec"] and a["status"] is b["status"]
    assert c["spec"] is not a["spec"] and c["spec"] == {"schedulerName": "kai-scheduler", "nodeName": "n2"}
    assert a["metadata"]["generateName"] is c["metadata"]["generateName"]
    # what is per pod stays per pod
    assert [p["metadata"]["name"] for p in (a, b, c)] == ["a", "b", "c"]
    assert "managedFields" not in a["metadata"] and "containers" not in a["spec"]


def test_a_pod_of_another_owner_gets_its_own_parts() -> None:
    shape = PodShape()
    a = shape.slim(_pod("a", owner_uid="job-1"))
    b = shape.slim(_pod("b", owner_uid="job-2"))
    assert a["metadata"]["labels"] is not b["metadata"]["labels"]
    assert b["metadata"]["labels"]["controller-uid"] == "job-2"
    assert b["metadata"]["ownerReferences"][0]["uid"] == "job-2"


def test_a_widened_shape_keeps_structured_fields_as_they_are() -> None:
    shape = PodShape()
    assert shape.widen([".spec.affinity.nodeAffinity", '.status["conditions"]'])
    pod = _pod("a")
    pod["spec"]["affinity"] = {"nodeAffinity": {"required": ["x"]}}
    pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    slim = shape.slim(pod)
    assert slim["spec"]["affinity"] == {"nodeAffinity": {"required": ["x"]}}
    assert slim["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    assert slim_pod(pod)["spec"] == {"schedulerName": "kai-scheduler", "nodeName": "n1"}  # the default shape


# ---------------------------------------------------------------------- the workload index


def test_workload_index_with_one_few_and_many_pods() -> None:
    idx = WorkloadIndex()
    wl = WorkloadKey("ns", "batch", "Job", "train")
    for i in range(40):
        assert idx.set_pod(("ns", f"p{i}"), WorkloadKey("ns", "batch", "Job", "train")) is None
    assert idx.pods_of(wl) == {("ns", f"p{i}") for i in range(40)}
    other = WorkloadKey("ns", "", "Pod", "p0")
    assert idx.set_pod(("ns", "p0"), other) == wl  # moved: the previous workload is returned
    assert idx.workload_of(("ns", "p0")) == other and ("ns", "p0") not in idx.pods_of(wl)
    for i in range(1, 40):
        assert idx.remove_pod(("ns", f"p{i}")) == wl
    assert idx.pods_of(wl) == set() and idx.sizes()["pods"] == 1
    # a pod in another namespace than its workload's (not made by the controller, but kept apart)
    idx.set_pod(("elsewhere", "x"), wl)
    assert idx.pods_of(wl) == {("elsewhere", "x")} and idx.workload_of(("elsewhere", "x")) == wl
    idx.forget(wl)
    assert idx.workload_of(("elsewhere", "x")) is None and idx.pods_of(wl) == set()


def test_workload_index_dependencies_and_pod_groups() -> None:
    idx = WorkloadIndex()
    a, b = WorkloadKey("ns", "batch", "Job", "a"), WorkloadKey("ns", "batch", "Job", "b")
    idx.set_dependencies(a, ["u1", "u2", ""])
    idx.set_dependencies(b, ["u2"])
    assert idx.workloads_reading("u1") == {a} and idx.workloads_reading("u2") == {a, b}
    idx.set_dependencies(a, ["u3"])
    assert idx.workloads_reading("u1") == set() and idx.workloads_reading("u2") == {b}
    assert idx.workloads_reading("u3") == {a}
    assert idx.set_pod_groups(a, [("ns", "pg-1"), ("ns", "pg-2")]) == set()
    assert idx.set_pod_groups(a, [("ns", "pg-2")]) == {("ns", "pg-1")}
    assert idx.workload_of_pod_group(("ns", "pg-2")) == a and idx.workload_of_pod_group(("ns", "pg-1")) is None
    idx.forget(a)
    assert idx.workloads_reading("u3") == set() and idx.workload_of_pod_group(("ns", "pg-2")) is None
    assert idx.sizes()["dependencies"] == 1


# ---------------------------------------------------------------------- the informer's indexes


def test_informer_index_with_one_few_and_many_objects_per_value() -> None:
    inf = Informer(None, Resource("", "v1", "Pod", "pods", True))  # type: ignore[arg-type]
    objs = {(f"ns{i % 2}", f"p{i}"): {"metadata": {"namespace": f"ns{i % 2}", "name": f"p{i}",
                                                    "labels": {"g": "big" if i < 30 else f"own-{i}"}}}
            for i in range(34)}
    inf._replace_store(dict(objs))
    inf.add_index("by-g", lambda obj: [obj["metadata"]["labels"]["g"]])
    assert [o_["metadata"]["name"] for o_ in inf.by_index("by-g", "own-31")] == ["p31"]
    big = inf.by_index("by-g", "big")
    assert len(big) == 30 and big == sorted(big, key=lambda x: (x["metadata"]["namespace"], x["metadata"]["name"]))
    for i in range(3, 30):
        inf._index_remove((f"ns{i % 2}", f"p{i}"), objs[(f"ns{i % 2}", f"p{i}")])
    assert sorted(x["metadata"]["name"] for x in inf.by_index("by-g", "big")) == ["p0", "p1", "p2"]
    assert inf.by_index("by-g", "nothing") == []


# ---------------------------------------------------------------------- owners


def _job(name: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "managedFields": [{"manager": "x"}],
                     "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "keep": "me"}},
        "spec": {"parallelism": 2, "template": {"metadata": {"labels": {"job-name": name}},
                                                "spec": {"containers": [{"name": "c", "image": image}],
                                                         "restartPolicy": "Never"}}},
        "status": {"active": 2},
    }


def test_owners_with_the_same_pod_template_spec_share_it_and_keep_everything_else() -> None:
    a, b, c = slim_owner(_job("a", "img:1")), slim_owner(_job("b", "img:1")), slim_owner(_job("c", "img:2"))
    assert a["spec"]["template"]["spec"] is b["spec"]["template"]["spec"]
    assert c["spec"]["template"]["spec"] is not a["spec"]["template"]["spec"]
    assert c["spec"]["template"]["spec"]["containers"][0]["image"] == "img:2"
    want = _job("b", "img:1")
    del want["metadata"]["managedFields"]
    want["metadata"]["annotations"] = {"keep": "me"}
    assert b == want  # only managedFields and the last-applied copy are gone
    assert b["spec"]["template"]["metadata"] == {"labels": {"job-name": "b"}}


def test_nested_pod_templates_are_shared_too() -> None:
    def jobset(name: str) -> dict[str, Any]:
        return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
                "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": _job("x", "img:1")["spec"]}}]}}

    a, b = slim_owner(jobset("a")), slim_owner(jobset("b"))
    inner = [js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"] for js in (a, b)]
    assert inner[0] is inner[1] and inner[0]["containers"] == [{"name": "c", "image": "img:1"}]


class _Feed:
    """Stands in for the client in ``Informer._watch``: serves these watch lines, decoded as the transport does."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.lines = [orjson.dumps(e) for e in events]

    async def watch(self, path: str, params: Any, *, timeout: float, on_open: Any = None) -> Any:
        if on_open is not None:
            on_open()
        for line in self.lines:
            yield orjson.loads(line)


async def test_an_update_takes_over_the_cached_strings_so_no_copies_pile_up() -> None:
    shape = PodShape()
    inf = Informer(None, Resource("", "v1", "Pod", "pods", True), transform=shape.slim)  # type: ignore[arg-type]
    inf.add_index("pg", lambda p: [p["metadata"]["annotations"].get("pod-group-name", "")])
    first = _pod("a")
    first["metadata"]["annotations"]["pod-group-name"] = "pg-1"
    inf.client = _Feed([{"type": "ADDED", "object": first}])  # type: ignore[assignment]
    await inf._watch()
    cached = inf.get("team-a", "a")
    assert cached is not None
    name, uid = cached["metadata"]["name"], cached["metadata"]["uid"]
    second = copy.deepcopy(first)
    second["metadata"]["resourceVersion"] = "2"
    second["metadata"]["annotations"]["pod-group-name"] = "pg-2"
    inf.client = _Feed([{"type": "MODIFIED", "object": second}])  # type: ignore[assignment]
    await inf._watch()
    now = inf.get("team-a", "a")
    assert now is not None and now["metadata"]["resourceVersion"] == "2"
    assert now["metadata"]["name"] is name and now["metadata"]["uid"] is uid
    (key,) = inf.keys()
    assert key[1] is name
    assert inf.by_index("pg", "pg-1") == [] and inf.by_index("pg", "pg-2") == [now] and len(inf) == 1


def test_the_sibling_table_stays_small() -> None:
    shape = PodShape()
    for i in range(shape.sharing.max_owners + 50):
        shape.slim(_pod(f"p{i}", owner_uid=f"job-{i}"))
    assert len(shape.sharing.siblings) <= shape.sharing.max_owners


def test_informer_index_holds_names_for_namespace_keyed_values_and_keys_otherwise() -> None:
    inf = Informer(None, Resource("", "v1", "Pod", "pods", True))  # type: ignore[arg-type]

    def pod(ns: str, name: str, values: list[str]) -> dict[str, Any]:
        return {"metadata": {"namespace": ns, "name": name, "labels": {"v": ",".join(values)}}}

    objs = {
        ("a", "p1"): pod("a", "p1", ["a/g", "shared"]),
        ("a", "p2"): pod("a", "p2", ["a/g", "ab/g"]),  # "ab/g" starts with "a" but is not namespace "a"
        ("ab", "p1"): pod("ab", "p1", ["ab/g", "shared"]),
    }
    inf._replace_store(dict(objs))
    inf.add_index("v", lambda obj: obj["metadata"]["labels"]["v"].split(","))
    idx = inf._indexes["v"]
    assert sorted(idx["a/g"]) == ["p1", "p2"]  # names: the cached strings, no tuple per object
    assert sorted(idx["ab/g"], key=str) == [("a", "p2"), "p1"]
    assert sorted(idx["shared"]) == [("a", "p1"), ("ab", "p1")]
    names = lambda value: [(x["metadata"]["namespace"], x["metadata"]["name"]) for x in inf.by_index("v", value)]  # noqa: E731
    assert names("a/g") == [("a", "p1"), ("a", "p2")]
    assert names("ab/g") == [("a", "p2"), ("ab", "p1")]
    assert names("shared") == [("a", "p1"), ("ab", "p1")]
    inf._index_remove(("a", "p2"), objs[("a", "p2")])
    assert names("a/g") == [("a", "p1")] and names("ab/g") == [("ab", "p1")]
