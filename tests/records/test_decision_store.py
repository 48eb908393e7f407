"""The decision store (grouper/records/decisions.py): compact storage, typed frozen records on read."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from grouper.controller.workloads import WorkloadKey
from grouper.core.decision import Decision
from grouper.core.lookups import InMemoryLookups
from grouper.manifests import load_manifests
from grouper.model.podgroup import OwnerRef, PodGroupMetadata
from grouper.records.decisions import DecisionStore
from grouper.records.typed import DefinitionUsed, Patch, PodRecord, WorkloadPart, WorkloadRecord, timestamp
from grouper.runtime.composition import build_grouper

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def decisions_of(*files: str) -> list[Decision]:
    objs = [m.obj for m in load_manifests([EXAMPLES / f for f in files])]
    lookups = InMemoryLookups(objs)
    grouper = build_grouper()
    return [grouper.decide(p, lookups) for p in objs if p.get("kind") == "Pod"]


def workload_of(d: Decision) -> str:
    top = d.top_owner
    return str(WorkloadKey.of_ref(top, d.pod_namespace) if top else WorkloadKey.of_pod(d.pod_namespace, d.pod_name))


def expected(d: Decision, workload: str, decided_at: float | None) -> PodRecord:
    """The record of a decision, as the store must give it back (nothing recorded since)."""
    part = WorkloadPart(
        workload=workload,
        plugin=d.plugin,
        definition=DefinitionUsed(d.definition, d.definition_origin or "") if d.definition else None,
        top_owner=d.top_owner,
        owner_chain=tuple(d.owner_chain),
        provenance=tuple(d.provenance.items()),
        notes=tuple(d.notes),
    )
    error = d.message if d.outcome == "error" else None
    return PodRecord(d.pod_namespace, d.pod_name, d.pod_uid, d.outcome, d.reason, d.message,
                     d.pod_group.name if d.pod_group else None, d.sub_group, part, decided_at,
                     error, decided_at if error else None, None)


@pytest.mark.parametrize(
    "files",
    [("jobset-demo.yaml", "jobset-demo-pods.yaml"), ("deployment.yaml",), ("pytorchjob.yaml",), ("bare-pod.yaml",),
     ("raycluster.yaml",), ("leaderworkerset.yaml",), ("kserve-inferenceservice.yaml",)],
    ids=lambda f: f[0].removesuffix(".yaml"),
)
def test_a_pod_record_is_exactly_what_the_decision_records(files: tuple[str, ...]) -> None:
    store = DecisionStore()
    decisions = decisions_of(*files)
    assert decisions
    for d in decisions:
        store.record_decision(d, workload_of(d))
    for d in decisions:
        rec = store.pod(d.pod_namespace, d.pod_name)
        assert rec is not None and rec.decided_at is not None
        assert rec == expected(d, workload_of(d), rec.decided_at)
        with pytest.raises(dataclasses.FrozenInstanceError):
            rec.outcome = "skipped"  # type: ignore[misc]
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
    # one read builds each shared part once: the pods that share it share the part it returns
    recs = store.pods()
    assert len({id(r.part) for r in recs}) == len(chains)
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


def _part(store: DecisionStore, name: str, namespace: str = "ns") -> WorkloadPart:
    rec = store.pod(namespace, name)
    assert rec is not None and rec.part is not None
    return rec.part


def test_texts_with_the_placeholder_character_or_per_pod_notes_still_read_as_given() -> None:
    store = DecisionStore()
    odd = _decision("a", provenance={"queue": "label q on Job ns/train \x00 (odd)"}, notes=["note on Job ns/train"])
    other = _decision("b", notes=["note for b only"])
    for d in (odd, other):
        store.record_decision(d, "Job.batch ns/train")
    assert _part(store, "a").provenance == (("queue", "label q on Job ns/train \x00 (odd)"),)
    assert _part(store, "a").notes == ("note on Job ns/train",)
    assert _part(store, "b").notes == ("note for b only",)
    assert _part(store, "b").provenance == (("queue", "label kai.scheduler/queue on Job ns/train"),)
    assert store.sizes()["sharedParts"] == 2


def test_each_shared_input_that_differs_from_the_pod_recorded_before_gets_its_own_part() -> None:
    """The store reuses the last pod's part when nothing of it differs; any one difference must not."""
    other_top = OwnerRef("batch/v1", "Job", "eval", "job-uid-2")
    karta = {"definition": "trainjob", "definition_origin": "builtin"}
    variants: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {  # the pod before, this pod
        "same": ({}, {}),
        "provenance": ({}, {"provenance": {"queue": "label kai.scheduler/queue on Pod ns/p"}}),
        "notes": ({}, {"notes": ["owner chain truncated: forbidden"]}),
        "chain": ({}, {"owner_chain": [OwnerRef("v1", "Pod", "x", "x-uid"),
                                       OwnerRef("batch/v1", "Job", "train", "job-uid")]}),
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
                got = store.pod(d.pod_namespace, d.pod_name)
                assert got is not None
                assert got == expected(d, "Job.batch ns/train", got.decided_at), name
    for name in [*variants, "a"]:
        store.forget_pod("other" if name == "namespace" else "ns", name)
    assert store.sizes()["sharedParts"] == 0
    # a part released with its last pod and then wanted again by an equal decision comes back
    store.record_decision(_decision("p"), "Job.batch ns/train")
    store.forget_pod("ns", "p")
    store.record_decision(_decision("q"), "Job.batch ns/train")
    assert store.sizes()["sharedParts"] == 1
    assert _part(store, "q").top_owner == OwnerRef("batch/v1", "Job", "train", "job-uid")
    store.forget_pod("ns", "q")
    assert store.sizes()["sharedParts"] == 0


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
def test_messages_read_as_given_whatever_they_name(message: str, sub_group: str | None) -> None:
    store = DecisionStore()
    store.record_decision(_decision("a", message=message, sub_group=sub_group), "Job.batch ns/train")
    rec = store.pod("ns", "a")
    assert rec is not None and rec.message == message and rec.sub_group == sub_group


def test_errors_patches_and_pods_without_a_decision() -> None:
    store = DecisionStore()
    store.record_pod_error("ns", "early", "cannot set its PodGroup: 409 Conflict")
    rec = store.pod("ns", "early")
    assert rec is not None and rec.last_error_at is not None
    assert rec == PodRecord("ns", "early", last_error="cannot set its PodGroup: 409 Conflict",
                            last_error_at=rec.last_error_at)
    assert rec.workload is None and rec.top_owner is None

    store.record_decision(_decision("p"), "Job.batch ns/train")
    store.record_pod_patched("ns", "p", "patched")
    rec = store.pod("ns", "p")
    assert rec is not None and rec.patched is not None and rec.patched.result == "patched"
    assert rec.patched.at is not None and (timestamp(rec.patched.at) or "").endswith("Z")
    store.record_pod_error("ns", "p", "boom")
    store.record_decision(_decision("p"), "Job.batch ns/train")  # a later decision keeps error and patch
    rec = store.pod("ns", "p")
    assert rec is not None and rec.last_error == "boom" and isinstance(rec.patched, Patch)
    assert rec.patched.result == "patched" and rec.outcome == "grouped" and store.failing_pods() == []

    store.record_decision(_decision("p", outcome="error", reason="OwnerNotFound", message="Job ns/x not found"),
                          "Job.batch ns/train")
    failing = store.failing_pods("ns")
    assert [r.name for r in failing] == ["p"]
    assert failing[0].last_error == "Job ns/x not found" and failing[0].last_error_at == failing[0].decided_at
    assert store.pods_of_group("ns", "pg-train-job-uid") == [store.pod("ns", "p")]
    assert store.pod_names_of_group("ns", "pg-train-job-uid") == ["p"]
    store.forget_pod("ns", "p")
    assert store.pods_of_group("ns", "pg-train-job-uid") == [] and store.failing_pods() == []
    assert store.pod_names_of_group("ns", "pg-train-job-uid") == []


def test_pod_group_records_keep_the_desired_object_and_the_last_write() -> None:
    store = DecisionStore()
    desired = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
               "metadata": {"name": "pg", "namespace": "ns", "labels": {"a": "b"}},
               "spec": {"minMember": 2, "queue": "q", "preemptibility": None,
                        "subGroups": [{"name": "s", "minMember": 1}]}}
    store.record_pod_group("ns", "pg", workload="Job.batch ns/train", desired=desired, operation="created",
                           pods=["p1", "p2"], notes=["n"])
    store.record_pod_group("ns", "pg", workload="Job.batch ns/train", desired=desired, operation="unchanged",
                           pods=["p1", "p2"], notes=["n"], error="PodGroup ns/pg: write failed: 500")
    rec = store.pod_group("ns", "pg")
    assert rec is not None
    assert rec.desired() == desired and rec.pods == ("p1", "p2") and rec.notes == ("n",)
    assert rec.last_operation == "unchanged" and rec.write_at is not None and not rec.ok
    assert rec.last_error == "PodGroup ns/pg: write failed: 500" and rec.error_at == rec.reconciled_at
    assert store.pod_groups("ns") == [rec]
    store.forget_workload("Job.batch ns/train")
    assert store.pod_groups() == []


def test_workload_records_keep_what_a_later_pass_does_not_say() -> None:
    store = DecisionStore()
    store.record_workload("Job.batch ns/train", pods=3, terminalPods=1, podGroups=["pg"], plugin="BatchJob",
                          result="ok", error=None)
    first = store.workload("Job.batch ns/train")
    assert first == WorkloadRecord("Job.batch ns/train", first.reconciled_at, 3, 1, ("pg",), "BatchJob", "ok")  # type: ignore[union-attr]
    store.record_workload("Job.batch ns/train", result="failed", error="Pod ns/p: patch refused")
    rec = store.workload("Job.batch ns/train")
    assert rec is not None and (rec.pods, rec.pod_groups, rec.plugin) == (3, ("pg",), "BatchJob")
    assert (rec.result, rec.error, rec.last_error) == ("failed", "Pod ns/p: patch refused", "Pod ns/p: patch refused")
    assert rec.last_error_at == rec.reconciled_at
    store.record_workload("Job.batch ns/train", result="ok", error=None)
    rec = store.workload("Job.batch ns/train")
    assert rec is not None and rec.error is None and rec.last_error == "Pod ns/p: patch refused"
    assert store.workloads() == [rec]


def test_a_refused_write_makes_the_pod_records_failed_until_it_succeeds() -> None:
    """A grouped pod whose PodGroup the API server refused, or whose own patch it refused, is not grouped:
    its record says ``failed`` with the server's message (it said ``grouped``, no last error)."""
    store = DecisionStore()
    for name in ("p", "q"):
        store.record_decision(_decision(name), "Job.batch ns/train")
    refused = "PodGroup ns/pg-train-job-uid: write failed: 422 Invalid: metadata.annotations: Too long"
    store.record_pod_group("ns", "pg-train-job-uid", workload="Job.batch ns/train", desired={}, operation=None,
                           pods=["p", "q"], notes=[], error=refused, stored=False)
    for rec in (store.pod("ns", "p"), *store.pods("ns"), *store.pods_of_group("ns", "pg-train-job-uid")):
        assert rec is not None and rec.outcome == "failed" and rec.reason == "PodGroupNotWritten"
        assert rec.message == rec.last_error == refused and rec.last_error_at is not None
        assert rec.pod_group == "pg-train-job-uid"  # what it would belong to
    pg = store.pod_group("ns", "pg-train-job-uid")
    assert pg is not None and not pg.ok and not pg.stored
    store.record_pod_group("ns", "pg-train-job-uid", workload="Job.batch ns/train", desired={}, operation="created",
                           pods=["p", "q"], notes=[])
    assert [r.outcome for r in store.pods("ns")] == ["grouped", "grouped"]
    assert store.pod_group("ns", "pg-train-job-uid").stored  # type: ignore[union-attr]

    store.record_pod_patch_failed("ns", "p", "Pod ns/p: cannot set its PodGroup: 422 Invalid: denied")
    rec = store.pod("ns", "p")
    assert rec is not None and (rec.outcome, rec.reason) == ("failed", "PodNotMarked")
    assert rec.last_error == "Pod ns/p: cannot set its PodGroup: 422 Invalid: denied"
    assert [r.name for r in store.failing_pods("ns")] == ["p"]
    assert store.unpatched_record("ns", "p")  # looked at again even when it needs no patch any more
    store.record_pod_patched("ns", "p", "patched")
    assert store.pod("ns", "p").outcome == "grouped" and store.failing_pods() == []  # type: ignore[union-attr]


def test_reusing_the_last_pods_shared_part_records_what_building_each_key_records() -> None:
    """The shortcut in ``DecisionStore._share`` (the pod recorded just before had the same inputs) against the
    simple path (every key built): the same records and the same table, whatever input changes between two
    pods, and after the part was released by the forgetting of all its pods."""
    other_top = OwnerRef("batch/v1", "Job", "eval", "job-uid-2")
    variants: list[tuple[str, dict[str, Any]]] = [
        ("ns/train", {"provenance": {"queue": "label kai.scheduler/queue on Job ns/train", "x": "y"}}),
        ("ns/train", {"notes": ["a note"]}),
        ("ns/train", {"plugin": "Other"}),
        ("ns/train", {"definition": "def", "definition_origin": "builtin"}),
        ("ns/train", {"definition": "def", "definition_origin": "catalog"}),
        ("ns/train", {"top_owner": other_top}),
        ("ns/train", {"owner_chain": [other_top, OwnerRef("batch/v1", "Job", "train", "job-uid")]}),
        ("ns/train", {"pod_namespace": "other"}),
        ("ns/other", {}),  # another workload
    ]
    # each variant right after a pod with the common inputs, whose part it must not reuse
    sequence: list[tuple[str, str, dict[str, Any]]] = [("a", "ns/train", {}), ("b", "ns/train", {})]
    for i, (wl, kw) in enumerate(variants):
        sequence += [(f"v{i}", wl, kw), (f"k{i}", "ns/train", {})]
    # and one input at a time between pods that both have a definition
    sequence += [("v9", "ns/train", {"definition": "d2", "definition_origin": "builtin"}),
                 ("v10", "ns/train", {"definition": "d2", "definition_origin": "catalog"}),
                 ("v11", "ns/train", {"definition": "d3", "definition_origin": "catalog"}),
                 ("z", "ns/train", {})]  # last: l's inputs, its part released in between

    def run(shortcut: bool) -> tuple[list[PodRecord], dict[str, int]]:
        store = DecisionStore()
        for name, wl, kw in sequence:
            if not shortcut:
                store._last_shared = None
            store.record_decision(_decision(name, **kw), wl)
        # every pod of the common part gone, then a new pod with the same inputs
        for name, _, _ in sequence:
            if not name.startswith("v"):
                store.forget_pod("ns", name)
        if not shortcut:
            store._last_shared = None
        store.record_decision(_decision("l"), "ns/train")
        return [dataclasses.replace(r, decided_at=None) for r in store.pods()], store.sizes()

    fast, slow = run(True), run(False)
    assert fast == slow
    assert fast[1]["sharedParts"] == 1 + len(variants) + 3  # the common part (again, for l) and each variant's
    assert sorted(r.name for r in fast[0]) == sorted(["l", *(f"v{i}" for i in range(len(variants) + 3))])


class _CopyingStore(DecisionStore):
    """The simple path ``record_pod_patched`` replaced: copy the record, set the patch, put the copy back."""

    def record_pod_patched(self, namespace: str, name: str, result: str) -> None:
        old = self._pods.get(namespace, {}).get(name)
        if old is not None:
            rec = old.copy()
            rec.patched, rec.patched_at = result, 0.0
            self._put_pod(namespace, name, rec)


def test_a_patch_updates_the_record_in_place_as_putting_a_copy_would(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pod's patch result is written into its record in place; the records, the failing pods and the
    PodGroups' members are what copying the record and putting it back gives, whatever came before (a
    decision, a failed decision, a failed patch) and whatever the result."""
    import grouper.records.decisions as decisions

    monkeypatch.setattr(decisions, "_clock", lambda: 0.0)
    steps: list[tuple[str, Any]] = [
        ("decide", _decision("a")), ("decide", _decision("b")), ("patched", ("a", "patched")),
        ("patch_failed", ("b", "422 Invalid")), ("patched", ("b", "unchanged")), ("patched", ("gone", "patched")),
        ("decide", _decision("c", outcome="error", reason="OwnerNotFound", message="Job ns/x not found")),
        ("patched", ("c", "patched")), ("patched", ("a", "failed")), ("error", ("a", "boom")),
        ("patched", ("a", "patched")),
    ]
    stores = (DecisionStore(), _CopyingStore())
    for what, arg in steps:
        for store in stores:
            if what == "decide":
                store.record_decision(arg, "Job.batch ns/train")
            elif what == "patched":
                store.record_pod_patched("ns", *arg)
            elif what == "patch_failed":
                store.record_pod_patch_failed("ns", *arg)
            else:
                store.record_pod_error("ns", *arg)
        fast, simple = stores
        assert fast.pods() == simple.pods(), (what, arg)
        assert fast.failing_pods() == simple.failing_pods(), (what, arg)
        assert fast.pods_of_group("ns", "pg-train-job-uid") == simple.pods_of_group("ns", "pg-train-job-uid")
    assert [r.name for r in stores[0].failing_pods()] == ["c"]  # a: its last patch succeeded
