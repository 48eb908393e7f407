"""The writer's pure parts: spec normalization, the compare that decides whether to write, the fields
other writers own, the update body, and the pod merge patch."""

from __future__ import annotations

import copy

from grouper.model.podgroup import OwnerRef, PodGroupMetadata, SubGroup, TopologyConstraint
from grouper.writer.expectations import WriteExpectations
from grouper.writer.podgroups import (
    PodGroupWriter,
    differences,
    normalize_owner_refs,
    normalize_spec,
    preserve_foreign_fields,
    updated_object,
)
from grouper.writer.pods import pod_patch

OWNER = OwnerRef("batch/v1", "Job", "train", "uid-1")
NP, QL = "kai.scheduler/node-pool", "kai.scheduler/queue"


def md(**kw: object) -> PodGroupMetadata:
    base: dict[str, object] = {
        "name": "pg-train-uid-1",
        "namespace": "ns",
        "owner": OWNER,
        "queue": "q1",
        "priority_class_name": "train",
        "labels": {"app": "x"},
        "annotations": {"a": "1"},
    }
    base.update(kw)
    return PodGroupMetadata(**base)  # type: ignore[arg-type]


def stored(desired: dict, **changes: object) -> dict:
    """``desired`` as the API server would return it: server fields added."""
    obj = copy.deepcopy(desired)
    obj["metadata"].update(
        resourceVersion="42", uid="pg-uid", creationTimestamp="2026-01-01T00:00:00Z", generation=1
    )
    obj.update(changes)
    return obj


def writer() -> PodGroupWriter:
    return PodGroupWriter(None, existing=lambda ns, n: None, expectations=WriteExpectations())  # type: ignore[arg-type]


def test_normalize_treats_empty_as_absent() -> None:
    assert normalize_spec({"minMember": 1, "subGroups": [], "queue": "", "topologyConstraint": {}}) == {
        "minMember": 1
    }
    assert normalize_spec(None) == {}
    # zero is a value, not "empty"
    assert normalize_spec({"minMember": 0}) == {"minMember": 0}
    assert normalize_spec({"subGroups": [{"name": "a", "minMember": 1, "parent": ""}]}) == {
        "subGroups": [{"name": "a", "minMember": 1}]
    }


def test_flat_podgroup_read_back_is_unchanged() -> None:
    """Upstream's bug §8.3: desired subGroups [] vs stored nil caused an update every reconcile."""
    desired = md().to_object()
    existing = stored(desired)
    existing["spec"]["subGroups"] = None
    assert differences(desired, existing) == []
    op, _ = writer().plan(md(), existing)
    assert op == "unchanged"


def test_missing_podgroup_is_created_as_decided() -> None:
    op, obj = writer().plan(md(), None)
    assert op == "created"
    assert obj == md().to_object()
    assert obj["metadata"]["ownerReferences"] == [OWNER.to_dict()]


def test_spec_change_updates_and_keeps_foreign_fields() -> None:
    existing = stored(md().to_object())
    existing["spec"].update(markUnschedulable=True, schedulingBackoff=1)
    existing["metadata"]["finalizers"] = ["other/keep"]
    existing["metadata"]["labels"]["added-by-someone"] = "yes"
    op, obj = writer().plan(md(min_member=4), existing)
    assert op == "updated"
    assert obj["spec"]["minMember"] == 4
    assert obj["spec"]["markUnschedulable"] is True and obj["spec"]["schedulingBackoff"] == 1
    assert obj["metadata"]["resourceVersion"] == "42", "the PUT must carry the read resourceVersion"
    assert obj["metadata"]["finalizers"] == ["other/keep"]
    assert obj["metadata"]["labels"] == {"app": "x", "added-by-someone": "yes"}


def test_queue_is_never_changed_after_creation() -> None:
    existing = stored(md(queue="team-a").to_object())
    op, _ = writer().plan(md(queue="team-b"), existing)
    assert op == "unchanged"
    op, obj = writer().plan(md(queue="team-b", min_member=3), existing)
    assert op == "updated" and obj["spec"]["queue"] == "team-a"


def test_nodepool_label_only_at_creation_and_existing_queue_label_kept() -> None:
    created = md(labels={NP: "pool-1", QL: "qa"}).to_object()
    assert created["metadata"]["labels"][NP] == "pool-1"
    # stored without node-pool label: a later decision with one does not add it
    existing = stored(md(labels={QL: "qa"}).to_object())
    desired = preserve_foreign_fields(
        md(labels={NP: "pool-2", QL: "qb"}).to_object(), existing, nodepool_label_key=NP, queue_label_key=QL
    )
    assert NP not in desired["metadata"]["labels"]
    assert desired["metadata"]["labels"][QL] == "qa"
    # stored with a node-pool label: it stays as it is
    existing = stored(md(labels={NP: "pool-1"}).to_object())
    desired = preserve_foreign_fields(
        md(labels={NP: "pool-2"}).to_object(), existing, nodepool_label_key=NP, queue_label_key=QL
    )
    assert desired["metadata"]["labels"][NP] == "pool-1"
    assert differences(desired, existing) == []


def test_preserving_foreign_fields_changes_neither_input() -> None:
    topo = TopologyConstraint(topology="net", required_level="zone")
    existing = stored(md(queue="team-a", labels={NP: "pool-1", QL: "qa"}, topology=topo).to_object())
    existing["spec"]["markUnschedulable"] = True
    desired = md(queue="team-b", labels={NP: "pool-2", QL: "qb", "x": "y"}, min_member=3).to_object()
    before = (copy.deepcopy(desired), copy.deepcopy(existing))
    out = preserve_foreign_fields(desired, existing, nodepool_label_key=NP, queue_label_key=QL)
    assert (desired, existing) == before
    assert out["spec"]["queue"] == "team-a" and out["spec"]["markUnschedulable"] is True
    assert out["spec"]["minMember"] == 3 and out["spec"]["topologyConstraint"] == existing["spec"]["topologyConstraint"]
    assert out["metadata"]["labels"] == {NP: "pool-1", QL: "qa", "x": "y"}


def test_existing_topology_kept_when_new_decision_has_none() -> None:
    topo = TopologyConstraint(topology="net", required_level="zone")
    existing = stored(md(topology=topo).to_object())
    op, _ = writer().plan(md(), existing)
    assert op == "unchanged"
    op, obj = writer().plan(
        md(topology=TopologyConstraint(topology="net2", preferred_level="rack")), existing
    )
    assert op == "updated"
    assert obj["spec"]["topologyConstraint"] == {"topology": "net2", "preferredTopologyLevel": "rack"}


def test_labels_and_annotations_compare_as_subset() -> None:
    existing = stored(md().to_object())
    existing["metadata"]["annotations"]["extra"] = "kept"
    assert writer().plan(md(), existing)[0] == "unchanged"
    op, obj = writer().plan(md(annotations={"a": "2"}), existing)
    assert op == "updated"
    assert obj["metadata"]["annotations"] == {"a": "2", "extra": "kept"}


def test_owner_reference_change_is_a_difference() -> None:
    existing = stored(md().to_object())
    other = OwnerRef("batch/v1", "Job", "train", "uid-2")
    assert differences(md(owner=other).to_object(), existing) == ["ownerReferences"]
    # flags the server might add are compared too, but missing == absent
    assert normalize_owner_refs([{**OWNER.to_dict(), "controller": None}]) == [OWNER.to_dict()]


def test_subgroup_changes_are_differences() -> None:
    base = md(
        min_member=None,
        min_sub_group=2,
        sub_groups=[SubGroup("a", min_member=1), SubGroup("b", min_member=2)],
    )
    existing = stored(base.to_object())
    assert writer().plan(base, existing)[0] == "unchanged"
    scaled = md(
        min_member=None,
        min_sub_group=2,
        sub_groups=[SubGroup("a", min_member=1), SubGroup("b", min_member=3)],
    )
    assert differences(scaled.to_object(), existing) == ["spec"]


def test_update_body_drops_status_and_managed_fields() -> None:
    existing = stored(md().to_object(), status={"conditions": [{"type": "x"}]})
    existing["metadata"]["managedFields"] = [{"manager": "m"}]
    body = updated_object(md(min_member=2).to_object(), existing)
    assert "status" not in body and "managedFields" not in body["metadata"]
    assert body["spec"]["minMember"] == 2


def pod(annotations: dict | None = None, labels: dict | None = None) -> dict:
    return {
        "metadata": {"name": "p", "namespace": "ns", "annotations": annotations or {}, "labels": labels or {}}
    }


def test_pod_patch_sets_annotation_and_subgroup_label() -> None:
    assert pod_patch(pod(), "pg-1", "workers") == {
        "metadata": {
            "annotations": {"pod-group-name": "pg-1"},
            "labels": {"kai.scheduler/subgroup-name": "workers"},
        }
    }
    assert pod_patch(pod(), "pg-1", None) == {"metadata": {"annotations": {"pod-group-name": "pg-1"}}}


def test_pod_patch_skipped_when_correct_and_removes_stale_subgroup() -> None:
    sg = {"kai.scheduler/subgroup-name": "workers"}
    assert pod_patch(pod({"pod-group-name": "pg-1"}, sg), "pg-1", "workers") is None
    assert pod_patch(pod({"pod-group-name": "pg-1"}), "pg-1", None) is None
    assert pod_patch(pod({"pod-group-name": "pg-1"}, sg), "pg-1", None) == {
        "metadata": {"labels": {"kai.scheduler/subgroup-name": None}}
    }
    assert pod_patch(pod({"pod-group-name": "old"}, sg), "pg-1", "workers") == {
        "metadata": {"annotations": {"pod-group-name": "pg-1"}}
    }
