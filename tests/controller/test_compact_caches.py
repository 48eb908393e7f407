"""The compact caches and records (speed issue, item 3): same answers as the plain structures they replace.

- ``grouper.kube.compact``: the multimap behind the indexes (lone member → itself → list → set and back);
- ``PodShape.slim``: equal by value to the plain slim pod, with what repeats shared among pods;
- ``DecisionStore``: each record renders exactly the dict ``Decision.to_record()`` gives (plus the
  controller's fields), whatever is shared underneath; shared parts are reference-counted away;
- ``WorkloadIndex`` and the informer's indexes: the same answers for one, a few and many members.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from grouper.controller.workloads import WorkloadIndex, WorkloadKey
from grouper.core.decision import Decision
from grouper.core.lookups import InMemoryLookups
from grouper.kube.cache import GPUS_FIELD, PodShape, pod_gpus, slim_owner, slim_pod
from grouper.kube.compact import SMALL, Interner, add_member, discard_member, members
from grouper.kube.discovery import Resource
from grouper.kube.informer import Informer
from grouper.manifests import load_manifests
from grouper.model.podgroup import OwnerRef, PodGroupMetadata
from grouper.records.decisions import DecisionStore
from grouper.runtime.composition import build_grouper

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def example_objects(*files: str) -> list[dict[str, Any]]:
    return [m.obj for m in load_manifests([EXAMPLES / f for f in files])]


def decisions_of(*files: str) -> list[Decision]:
    objs = example_objects(*files)
    lookups = InMemoryLookups(objs)
    grouper = build_grouper()
    return [grouper.decide(p, lookups) for p in objs if p.get("kind") == "Pod"]


def workload_of(d: Decision) -> str:
    top = d.top_owner
    return str(WorkloadKey.of_ref(top, d.pod_namespace) if top else WorkloadKey.of_pod(d.pod_namespace, d.pod_name))


# ---------------------------------------------------------------------- the multimap


def test_multimap_goes_from_one_member_to_a_list_to_a_set_and_back() -> None:
    idx: dict[str, Any] = {}
    add_member(idx, "k", ("ns", "a"))
    assert idx["k"] == ("ns", "a")  # a lone member is stored as itself (here a tuple key)
    assert members(idx, "k") == {("ns", "a")}
    add_member(idx, "k", ("ns", "a"))  # idempotent
    assert idx["k"] == ("ns", "a")
    for i in range(SMALL + 3):
        add_member(idx, "k", ("ns", f"p{i}"))
        assert len(members(idx, "k")) == i + 2
    assert isinstance(idx["k"], set)
    for i in range(SMALL + 3):
        discard_member(idx, "k", ("ns", f"p{i}"))
    assert idx["k"] == ("ns", "a")
    discard_member(idx, "k", ("ns", "other"))  # not a member: nothing changes
    assert idx["k"] == ("ns", "a")
    discard_member(idx, "k", ("ns", "a"))
    assert "k" not in idx and members(idx, "k") == frozenset()


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
    held = [{k: c[k] for k in ("type", "status", "reason", "message", "lastTransitionTime") if k in c}
            for c in (pod.get("status") or {}).get("conditions") or []
            if c.get("type") == "PodScheduled" and c.get("status") == "False"]
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


# ---------------------------------------------------------------------- the decision store


@pytest.mark.parametrize(
    "files",
    [("jobset-demo.yaml", "jobset-demo-pods.yaml"), ("deployment.yaml",), ("pytorchjob.yaml",), ("bare-pod.yaml",),
     ("raycluster.yaml",), ("leaderworkerset.yaml",), ("kserve-inferenceservice.yaml",)],
    ids=lambda f: f[0].removesuffix(".yaml"),
)
def test_a_pod_record_renders_exactly_what_the_decision_records(files: tuple[str, ...]) -> None:
    store = DecisionStore()
    decisions = decisions_of(*files)
    assert decisions
    for d in decisions:
        store.record_decision(d, workload_of(d))
    for d in decisions:
        rec = store.pod(d.pod_namespace, d.pod_name)
        assert rec is not None
        assert TIME.match(rec["decidedAt"])
        want = {**d.to_record(), "workload": workload_of(d), "decidedAt": rec["decidedAt"], "lastError": None,
                "lastErrorTime": None, "patched": None}
        if d.outcome == "error":
            want["lastError"], want["lastErrorTime"] = d.message, rec["decidedAt"]
        assert rec == want
        assert list(rec) == list(want)  # the same key order, so the same JSON
    assert store.pods() == [store.pod(d.pod_namespace, d.pod_name)
                            for d in sorted(decisions, key=lambda d: (d.pod_namespace, d.pod_name))]


def test_pods_of_one_workload_share_one_part_per_distinct_owner_chain_and_release_it() -> None:
    store = DecisionStore()
    decisions = decisions_of("jobset-demo.yaml", "jobset-demo-pods.yaml")
    for d in decisions:
        store.record_decision(d, workload_of(d))
    chains = {tuple(r.uid for r in d.owner_chain) for d in decisions}
    assert store.sizes()["sharedParts"] == len(chains) < len(decisions) + 1
    for d in decisions:
        store.record_decision(d, workload_of(d))  # a second reconcile: the same parts again
        store.record_pod_patched(d.pod_namespace, d.pod_name, "unchanged")
    assert store.sizes()["sharedParts"] == len(chains)
    for d in decisions:
        store.forget_pod(d.pod_namespace, d.pod_name)
    assert store.sizes() == {"pods": 0, "sharedParts": 0, "podGroups": 0, "workloads": 0}


def _decision(name: str, **kw: Any) -> Decision:
    top = OwnerRef("batch/v1", "Job", "train", "job-uid")
    md = PodGroupMetadata(name="pg-train-job-uid", namespace="ns", owner=top)
    md.provenance.update(kw.pop("provenance", {"queue": "label kai.scheduler/queue on Job ns/train"}))
    return Decision(kw.pop("pod_namespace", "ns"), name, f"uid-{name}", kw.pop("outcome", "grouped"),
                    kw.pop("reason", "Grouped"), kw.pop("message", "PodGroup pg-train-job-uid"), pod_group=md,
                    plugin=kw.pop("plugin", "BatchJob"),
                    owner_chain=kw.pop("owner_chain", [top]), top_owner=kw.pop("top_owner", top), **kw)


def test_texts_with_the_placeholder_character_or_per_pod_notes_still_render_as_given() -> None:
    store = DecisionStore()
    odd = _decision("a", provenance={"queue": "label q on Job ns/train \x00 (odd)"}, notes=["note on Job ns/train"])
    other = _decision("b", notes=["note for b only"])
    for d in (odd, other):
        store.record_decision(d, "Job.batch ns/train")
    assert store.pod("ns", "a")["provenance"] == {"queue": "label q on Job ns/train \x00 (odd)"}  # type: ignore[index]
    assert store.pod("ns", "a")["notes"] == ["note on Job ns/train"]  # type: ignore[index]
    assert store.pod("ns", "b")["notes"] == ["note for b only"]  # type: ignore[index]
    assert store.pod("ns", "b")["provenance"] == {"queue": "label kai.scheduler/queue on Job ns/train"}  # type: ignore[index]
    assert store.sizes()["sharedParts"] == 2


def test_each_shared_input_that_differs_from_the_pod_recorded_before_gets_its_own_part() -> None:
    """The store reuses the last pod's part when nothing of it differs; any one difference must not."""
    other_top = OwnerRef("batch/v1", "Job", "eval", "job-uid-2")
    karta = {"definition": "trainjob", "definition_origin": "builtin"}
    variants: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {  # the pod before, this pod
        "same": ({}, {}),
        "provenance": ({}, {"provenance": {"queue": "label kai.scheduler/queue on Pod ns/p"}}),
        "notes": ({}, {"notes": ["owner chain truncated: forbidden"]}),
        "chain": ({}, {"owner_chain": [OwnerRef("v1", "Pod", "x", "x-uid"), OwnerRef("batch/v1", "Job", "train", "job-uid")]}),
        "top": ({}, {"top_owner": other_top}),
        "plugin": ({}, {"plugin": "Default Grouper"}),
        "namespace": ({}, {"pod_namespace": "other"}),
        "definition": ({}, karta),
        "origin": (karta, {**karta, "definition_origin": "cluster"}),
        "definition-name": (karta, {**karta, "definition": "mpijob"}),
    }
    store = DecisionStore()
    for _ in range(2):  # a second pass over the same pods: the parts found again, none left over
        for name, (before, kw) in variants.items():
            base, variant = _decision("a", **before), _decision(name, **kw)
            store.record_decision(base, "Job.batch ns/train")  # the pod recorded just before
            store.record_decision(variant, "Job.batch ns/train")  # differs from it in one input only
            for d in (base, variant):
                want, got = d.to_record(), store.pod(d.pod_namespace, d.pod_name)
                assert got is not None
                assert {k: got[k] for k in want} == want, name
    for name in [*variants, "a"]:
        store.forget_pod("other" if name == "namespace" else "ns", name)
    assert store.sizes()["sharedParts"] == 0
    # a part released with its last pod and then wanted again by an equal decision comes back
    store.record_decision(_decision("p"), "Job.batch ns/train")
    store.forget_pod("ns", "p")
    store.record_decision(_decision("q"), "Job.batch ns/train")
    assert store.sizes()["sharedParts"] == 1
    assert store.pod("ns", "q")["topOwner"]["name"] == "train"  # type: ignore[index]
    store.forget_pod("ns", "q")
    assert store.sizes()["sharedParts"] == 0


def test_errors_patches_and_pods_without_a_decision() -> None:
    store = DecisionStore()
    store.record_pod_error("ns", "early", "cannot set its PodGroup: 409 Conflict")
    rec = store.pod("ns", "early")
    assert rec is not None and rec["pod"] == {"namespace": "ns", "name": "early"}
    assert rec["lastError"] == "cannot set its PodGroup: 409 Conflict" and TIME.match(rec["lastErrorTime"])
    assert set(rec) == {"pod", "lastError", "lastErrorTime"}

    store.record_decision(_decision("p"), "Job.batch ns/train")
    store.record_pod_patched("ns", "p", "patched")
    rec = store.pod("ns", "p")
    assert rec is not None and rec["patched"]["result"] == "patched" and TIME.match(rec["patched"]["at"])
    store.record_pod_error("ns", "p", "boom")
    store.record_decision(_decision("p"), "Job.batch ns/train")  # a later decision keeps error and patch
    rec = store.pod("ns", "p")
    assert rec is not None and rec["lastError"] == "boom" and rec["patched"]["result"] == "patched"
    assert rec["outcome"] == "grouped" and store.failing_pods() == []

    store.record_decision(_decision("p", outcome="error", reason="OwnerNotFound", message="Job ns/x not found"),
                          "Job.batch ns/train")
    failing = store.failing_pods("ns")
    assert [r["pod"]["name"] for r in failing] == ["p"]
    assert failing[0]["lastError"] == "Job ns/x not found" and failing[0]["lastErrorTime"] == failing[0]["decidedAt"]
    assert store.pods_of_group("ns", "pg-train-job-uid") == [store.pod("ns", "p")]
    store.forget_pod("ns", "p")
    assert store.pods_of_group("ns", "pg-train-job-uid") == [] and store.failing_pods() == []


def test_pod_group_records_render_the_desired_object_and_keep_the_last_write() -> None:
    store = DecisionStore()
    desired = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
               "metadata": {"name": "pg", "namespace": "ns", "labels": {"a": "b"}},
               "spec": {"minMember": 2, "queue": "q", "preemptibility": None, "subGroups": [{"name": "s", "minMember": 1}]}}
    store.record_pod_group("ns", "pg", workload="Job.batch ns/train", desired=desired, operation="created",
                           pods=["p1", "p2"], notes=["n"])
    store.record_pod_group("ns", "pg", workload="Job.batch ns/train", desired=desired, operation="unchanged",
                           pods=["p1", "p2"], notes=["n"], error="PodGroup ns/pg: write failed: 500")
    rec = store.pod_group("ns", "pg")
    assert rec is not None
    assert rec["desired"] == desired and rec["pods"] == ["p1", "p2"] and rec["notes"] == ["n"]
    assert rec["lastOperation"] == "unchanged" and TIME.match(rec["lastWriteTime"]) and not rec["ok"]
    assert rec["lastError"] == "PodGroup ns/pg: write failed: 500" and rec["lastErrorTime"] == rec["reconciledAt"]
    assert list(rec) == ["namespace", "name", "workload", "desired", "pods", "notes", "lastOperation",
                         "lastWriteTime", "reconciledAt", "lastError", "lastErrorTime", "ok", "stored", "newestPod"]
    assert store.pod_groups("ns") == [rec]
    store.forget_workload("Job.batch ns/train")
    assert store.pod_groups() == []


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


@pytest.mark.parametrize(
    ("message", "sub_group"),
    [
        ("PodGroup pg-train-job-uid, sub-group worker", "worker"),
        ("PodGroup pg-train-job-uid, sub-group Group", "Group"),  # the sub-group inside the fixed text
        ("PodGroup pg-train-job-uid, sub-group pg-train-job-uid-x", "pg-train-job-uid-x"),
        ("odd \x01 text about pg-train-job-uid", "w"),  # holds a placeholder: kept as it is
        ("", None),
    ],
)
def test_messages_render_as_given_whatever_they_name(message: str, sub_group: str | None) -> None:
    store = DecisionStore()
    store.record_decision(_decision("a", message=message, sub_group=sub_group), "Job.batch ns/train")
    rec = store.pod("ns", "a")
    assert rec is not None and rec["message"] == message and rec["subGroup"] == sub_group


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


def test_a_refused_write_makes_the_pod_records_failed_until_it_succeeds() -> None:
    """A grouped pod whose PodGroup the API server refused, or whose own patch it refused, is not grouped:
    its record says ``failed`` with the server's message (it said ``grouped``, ``lastError: None``)."""
    store = DecisionStore()
    for name in ("p", "q"):
        store.record_decision(_decision(name), "Job.batch ns/train")
    refused = "PodGroup ns/pg-train-job-uid: write failed: 422 Invalid: metadata.annotations: Too long"
    store.record_pod_group("ns", "pg-train-job-uid", workload="Job.batch ns/train", desired={}, operation=None,
                           pods=["p", "q"], notes=[], error=refused, stored=False)
    for rec in (store.pod("ns", "p"), *store.pods("ns"), *store.pods_of_group("ns", "pg-train-job-uid")):
        assert rec is not None and rec["outcome"] == "failed" and rec["reason"] == "PodGroupNotWritten"
        assert rec["message"] == rec["lastError"] == refused and TIME.match(rec["lastErrorTime"])
        assert rec["podGroup"] == "pg-train-job-uid"  # what it would belong to
    pg = store.pod_group("ns", "pg-train-job-uid")
    assert pg is not None and not pg["ok"] and not pg["stored"]
    store.record_pod_group("ns", "pg-train-job-uid", workload="Job.batch ns/train", desired={}, operation="created",
                           pods=["p", "q"], notes=[])
    assert [r["outcome"] for r in store.pods("ns")] == ["grouped", "grouped"]
    assert store.pod_group("ns", "pg-train-job-uid")["stored"]  # type: ignore[index]

    store.record_pod_patch_failed("ns", "p", "Pod ns/p: cannot set its PodGroup: 422 Invalid: denied")
    rec = store.pod("ns", "p")
    assert rec is not None and (rec["outcome"], rec["reason"]) == ("failed", "PodNotMarked")
    assert rec["lastError"] == "Pod ns/p: cannot set its PodGroup: 422 Invalid: denied"
    assert [r["pod"]["name"] for r in store.failing_pods("ns")] == ["p"]
    assert store.unpatched_record("ns", "p")  # looked at again even when it needs no patch any more
    store.record_pod_patched("ns", "p", "patched")
    assert store.pod("ns", "p")["outcome"] == "grouped" and store.failing_pods() == []  # type: ignore[index]
