"""The admission webhook's answer (grouper.webhook.admission), without a server."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from grouper.core.decision import Decision
from grouper.model.podgroup import OwnerRef, PodGroupMetadata
from grouper.webhook.admission import Admission, mutation

OWNER = OwnerRef("batch/v1", "Job", "train", "u1")


def grouped(sub_group: str | None = None) -> Decision:
    md = PodGroupMetadata(name="pg-train-u1", namespace="ns", owner=OWNER)
    return Decision("ns", "", "", "grouped", "Grouped", pod_group=md, sub_group=sub_group)


def pod(**meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "train-", **meta}, "spec": {}}


def review(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    return {"request": {"uid": "r1", "operation": operation, "namespace": "ns", "object": obj}}


def patch_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    resp = answer["response"]
    assert resp["patchType"] == "JSONPatch"
    return list(json.loads(base64.b64decode(resp["patch"])))


def test_kai_backend_adds_the_annotations_map_when_the_pod_has_none() -> None:
    assert mutation(pod(), grouped(), "kai") == [
        {"op": "add", "path": "/metadata/annotations", "value": {"pod-group-name": "pg-train-u1"}}
    ]


def test_kai_backend_adds_entries_to_existing_maps_with_escaped_keys() -> None:
    ops = mutation(pod(annotations={"a": "b"}, labels={"x": "y"}), grouped("workers"), "kai")
    assert ops == [
        {"op": "add", "path": "/metadata/annotations/pod-group-name", "value": "pg-train-u1"},
        {"op": "add", "path": "/metadata/labels/kai.scheduler~1subgroup-name", "value": "workers"},
    ]


def test_nothing_to_add_when_the_pod_already_says_so() -> None:
    p = pod(annotations={"pod-group-name": "pg-train-u1"})
    assert mutation(p, grouped(), "kai") == []


OWN = "podgrouper.kai.scheduler/scheduling-group"


def test_upstream_backend_sets_the_scheduling_group_unless_already_set() -> None:
    assert mutation(pod(), grouped("workers"), "upstream") == [
        {"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": "pg-train-u1"}},
        {"op": "add", "path": "/metadata/annotations", "value": {OWN: "pg-train-u1"}},
    ]
    theirs = pod()
    theirs["spec"]["schedulingGroup"] = {"podGroupName": "theirs"}
    assert mutation(theirs, grouped(), "upstream") == []
    claimed = pod(annotations={OWN: "other"})  # our mark names another group: theirs all the same
    claimed["spec"]["schedulingGroup"] = {"podGroupName": "theirs"}
    assert mutation(claimed, grouped(), "upstream") == []


@pytest.mark.parametrize("repeat", range(2))
def test_on_reinvocation_the_upstream_group_we_set_is_replaced_by_the_new_decision(repeat: int) -> None:
    """A later webhook (LeaderWorkerSet's pod webhook) labelled the pod after our first answer, and the API
    server called us again: the group we set goes, the decision's takes its place; as decided, nothing."""
    first = pod(annotations={OWN: "pg-serve-u1"})
    first["spec"]["schedulingGroup"] = {"podGroupName": "pg-serve-u1"}
    assert mutation(first, grouped(), "upstream") == [
        {"op": "replace", "path": "/spec/schedulingGroup", "value": {"podGroupName": "pg-train-u1"}},
        {"op": "add", "path": f"/metadata/annotations/{OWN.replace('/', '~1')}", "value": "pg-train-u1"},
    ]
    again = pod(annotations={OWN: "pg-train-u1"})
    again["spec"]["schedulingGroup"] = {"podGroupName": "pg-train-u1"}
    assert mutation(again, grouped(), "upstream") == []


def test_skipped_or_failed_decisions_leave_the_pod_alone() -> None:
    assert mutation(pod(), Decision("ns", "p", "", "skipped", "NoOwner"), "kai") == []
    assert mutation(pod(), Decision("ns", "p", "", "error", "OwnerCycle"), "upstream") == []


def test_review_answers_with_the_request_uid_and_a_base64_json_patch() -> None:
    seen: list[dict[str, Any]] = []

    async def decide(p: dict[str, Any]) -> Decision:
        seen.append(p)
        return grouped()

    adm = Admission(decide)
    answer = asyncio.run(adm.review(review(pod())))
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == "r1" and answer["response"]["allowed"] is True
    assert patch_of(answer)[0]["path"] == "/metadata/annotations"
    assert seen[0]["metadata"]["namespace"] == "ns"  # filled from the request for the decision
    assert (adm.admitted, adm.mutated) == (1, 1)


def test_review_allows_unchanged_when_not_create_not_ours_or_deciding_fails() -> None:
    async def boom(p: dict[str, Any]) -> Decision:
        raise RuntimeError("plugin bug")

    async def always(p: dict[str, Any]) -> Decision:
        return grouped()

    async def not_ours(p: dict[str, Any]) -> None:
        return None

    for adm, req in (
        (Admission(always), review(pod(), "UPDATE")),
        (Admission(not_ours), review(pod())),
        (Admission(boom), review(pod())),
    ):
        resp = asyncio.run(adm.review(req))["response"]
        assert resp == {"uid": "r1", "allowed": True}


def test_a_body_that_is_no_admission_review_is_a_clear_error() -> None:
    async def not_ours(p: dict[str, Any]) -> None:
        return None

    with pytest.raises(ValueError, match=r"request\.uid"):
        asyncio.run(Admission(not_ours).review({"kind": "Pod"}))
