"""LeaderWorkerSet plugin: KAI's lws_grouper_test.go (reference §5.3), our deviations, error paths."""

from __future__ import annotations

import re
from typing import Any

import pytest
from builders import context, obj, pod, sub_group
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grouper.model.errors import GroupingError
from grouper.model.objects import Obj
from grouper.model.podgroup import PodGroupMetadata, SubGroup
from grouper.plugins.lws import LWSGrouper

WI = "leaderworkerset.sigs.k8s.io/worker-index"
GI = "leaderworkerset.sigs.k8s.io/group-index"
SIZE = "leaderworkerset.sigs.k8s.io/size"
SEG = "kai.scheduler/segment-size"
TOPO = "kai.scheduler/topology"
SEG_REQ = "kai.scheduler/segment-topology-required-placement"
SEG_PREF = "kai.scheduler/segment-topology-preferred-placement"
NOT_VALID = re.escape("is not valid. It must be bigger than 0")


def lws(name: str = "lws-test", policy: str | None = "LeaderCreated", size: Any = 3, *, segment: Any = None,
        policy_type: str | None = None, worker_annotations: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None) -> Obj:
    tmpl: dict[str, Any] = {"workerTemplate": {"metadata": {}}, "size": size}
    if segment is not None:
        tmpl["subGroupPolicy"] = {"subGroupSize": segment}
        if policy_type is not None:
            tmpl["subGroupPolicy"]["subGroupPolicyType"] = policy_type
    if worker_annotations is not None:
        tmpl["workerTemplate"]["metadata"]["annotations"] = worker_annotations
    spec: dict[str, Any] = {"leaderWorkerTemplate": tmpl}
    if policy is not None:
        spec["startupPolicy"] = policy
    return obj("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", name, uid=f"{name}-uid",
               annotations=annotations, spec=spec)


def lpod(name: str, wi: str | None = None, gi: str | None = None, *, annotations: dict[str, str] | None = None,
         node: str | None = None) -> Obj:
    labels = {}
    if wi is not None:
        labels[WI] = wi
    if gi is not None:
        labels[GI] = gi
    return pod(name, namespace="default", labels=labels, annotations=annotations, node_name=node)


def run(owner: Obj, the_pod: Obj) -> PodGroupMetadata:
    md = LWSGrouper().metadata(context(the_pod, owner))
    assert md is not None
    return md


def shape(md: PodGroupMetadata) -> list[tuple[Any, ...]]:
    """(name, minMember, minSubGroup, parent, pods) of every sub-group, in order."""
    return [(s.name, s.min_member, s.min_sub_group, s.parent, s.pods) for s in md.sub_groups]


def topo(s: SubGroup) -> tuple[str, str, str] | None:
    return None if s.topology is None else (s.topology.topology, s.topology.required_level, s.topology.preferred_level)


# ---------------------------------------------------------------- §5.3 startup policies and plain sub-groups


def test_LeaderCreated() -> None:
    md = run(lws("lws-test", "LeaderCreated", 3), lpod("lws-test-0-1"))
    assert md.min_member == 3
    assert (md.owner.kind, md.owner.api_version, md.owner.name, md.owner.uid) == (
        "LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", "lws-test", "lws-test-uid")
    assert shape(md) == [("leader", 1, None, None, []), ("workers", 2, None, None, ["lws-test-0-1"])]
    assert md.name == "pg-lws-test-lws-test-uid"


def test_LeaderReady_LeaderPod() -> None:
    md = run(lws("lws-ready", "LeaderReady", 5), lpod("lws-ready-0-0", "0"))
    assert md.min_member == 1
    assert shape(md) == [("leader", 1, None, None, ["lws-ready-0-0"])]


def test_LeaderReady_WorkerPod() -> None:
    md = run(lws("lws-ready", "LeaderReady", 5), lpod("lws-ready-0-2", "2", "0", annotations={SIZE: "5"}, node="n1"))
    assert md.min_member == 5
    assert len(md.sub_groups) == 2
    assert (sub_group(md, "workers").min_member, sub_group(md, "workers").pods) == (4, ["lws-ready-0-2"])


def test_LeaderReady_BoundLeaderNeedsWholeGroup() -> None:
    md = run(lws("lws-ready", "LeaderReady", 5), lpod("l", "0", node="n1"))
    assert md.min_member == 5 and sub_group(md, "leader").pods == ["l"]


def test_LeaderReady_SizeAnnotationOverridesSpec() -> None:
    assert run(lws("x", "LeaderReady", 5), lpod("w", "1", annotations={SIZE: "3"})).min_member == 3
    # unparseable or non-positive annotation: the spec size
    assert run(lws("x", "LeaderReady", 5), lpod("w", "1", annotations={SIZE: "three"})).min_member == 5
    assert run(lws("x", "LeaderReady", 5), lpod("w", "1", annotations={SIZE: "0"})).min_member == 5


def test_StartupPolicyDefaultsToLeaderCreated() -> None:
    assert run(lws("x", None, 4), lpod("p", "0")).min_member == 4


def test_GroupIndex_Label() -> None:
    md = run(lws("lws-group", "LeaderCreated", 2), lpod("lws-group-1-0", "0", "1"))
    assert "-group-1" in md.name
    assert md.name == "pg-lws-group-lws-group-uid-group-1"


def test_SubGroups_LeaderPod() -> None:
    md = run(lws("lws-subgroups", "LeaderCreated", 3), lpod("lws-subgroups-0-0", "0"))
    assert shape(md) == [("leader", 1, None, None, ["lws-subgroups-0-0"]), ("workers", 2, None, None, [])]


def test_SubGroups_WorkerPod() -> None:
    md = run(lws("lws-subgroups", "LeaderCreated", 3), lpod("lws-subgroups-0-1", "1"))
    assert shape(md) == [("leader", 1, None, None, []), ("workers", 2, None, None, ["lws-subgroups-0-1"])]


def test_SubGroups_OnlyLeader() -> None:
    md = run(lws("lws-single", "LeaderCreated", 1), lpod("lws-single-0-0", "0"))
    assert shape(md) == [("leader", 1, None, None, ["lws-single-0-0"])]


def test_NegativeWorkerIndex() -> None:
    with pytest.raises(GroupingError, match=NOT_VALID) as err:
        run(lws("lws-neg", "LeaderCreated", 3), lpod("lws-neg-0-x", "-1"))
    assert "Pod default/lws-neg-0-x" in str(err.value) and WI in str(err.value)


# ---------------------------------------------------------------- §5.3 segmentation


def test_Segmentation_ExceedsMax() -> None:
    with pytest.raises(GroupingError, match="greater than max allowed segmentation"):
        run(lws("lws-seg-cap", "LeaderCreated", 20003, segment=2), lpod("lws-seg-cap-0-0", "0"))


def test_Segmentation_Divisible_LeaderPod() -> None:
    md = run(lws("lws-seg", "LeaderCreated", 5, segment=2), lpod("lws-seg-0-0", "0"))
    assert shape(md) == [
        ("segment-0", None, 2, None, []),
        ("segment-1", 2, None, None, []),
        ("leader", 1, None, "segment-0", ["lws-seg-0-0"]),
        ("workers", 2, None, "segment-0", []),
    ]


def test_Segmentation_Divisible_WorkerInFirstSegment() -> None:
    md = run(lws("lws-seg", "LeaderCreated", 5, segment=2), lpod("lws-seg-0-1", "1"))
    assert shape(md) == [
        ("segment-0", None, 2, None, []),
        ("segment-1", 2, None, None, []),
        ("leader", 1, None, "segment-0", []),
        ("workers", 2, None, "segment-0", ["lws-seg-0-1"]),
    ]


def test_Segmentation_Divisible_WorkerInLaterSegment() -> None:
    md = run(lws("lws-seg", "LeaderCreated", 5, segment=2), lpod("lws-seg-0-3", "3"))
    assert sub_group(md, "segment-1").pods == ["lws-seg-0-3"] and sub_group(md, "segment-1").min_member == 2
    assert sub_group(md, "segment-0").min_sub_group == 2 and sub_group(md, "segment-0").min_member is None
    assert sub_group(md, "workers").pods == [] and sub_group(md, "leader").pods == []
    assert len(md.sub_groups) == 4


def test_Segmentation_NotDivisible_LeaderPod() -> None:
    md = run(lws("lws-seg", "LeaderCreated", 4, segment=2), lpod("lws-seg-0-0", "0"))
    assert shape(md) == [
        ("segment-0", None, 2, None, []),
        ("segment-1", 2, None, None, []),
        ("leader", 1, None, "segment-0", ["lws-seg-0-0"]),
        ("workers", 1, None, "segment-0", []),
    ]


def test_Segmentation_LeaderExcluded_WorkerInFirstSegment() -> None:
    md = run(lws("lws-seg", "LeaderCreated", 5, segment=2, policy_type="LeaderExcluded"), lpod("lws-seg-0-1", "1"))
    assert shape(md) == [
        ("leader", 1, None, None, []),
        ("segment-0", 2, None, None, ["lws-seg-0-1"]),
        ("segment-1", 2, None, None, []),
    ]


def test_Segmentation_LeaderExcluded_WorkerInLaterSegment() -> None:
    md = run(lws("lws-seg", "LeaderCreated", 5, segment=2, policy_type="LeaderExcluded"), lpod("lws-seg-0-3", "3"))
    assert shape(md) == [
        ("leader", 1, None, None, []),
        ("segment-0", 2, None, None, []),
        ("segment-1", 2, None, None, ["lws-seg-0-3"]),
    ]


def test_Segmentation_LeaderExcluded_LeaderPod() -> None:
    md = run(lws("lws-seg", "LeaderCreated", 5, segment=2, policy_type="LeaderExcluded"), lpod("l", "0"))
    assert md.sub_group_of("l") == "leader" and sub_group(md, "segment-0").pods == []


def test_Segmentation_TopologyPreferredOnly_LeaderIncluded_NotDivisible() -> None:
    owner = lws("lws-seg", "LeaderCreated", 5, segment=3,
                worker_annotations={SEG_REQ: "", SEG_PREF: "node", TOPO: "rack"})
    md = run(owner, lpod("lws-seg-0-1", "1"))
    assert shape(md) == [
        ("segment-0", None, 2, None, []),
        ("segment-1", 2, None, None, []),
        ("leader", 1, None, "segment-0", []),
        ("workers", 2, None, "segment-0", ["lws-seg-0-1"]),
    ]
    assert topo(sub_group(md, "segment-0")) == topo(sub_group(md, "segment-1")) == ("rack", "", "node")
    assert topo(sub_group(md, "leader")) is None and topo(sub_group(md, "workers")) is None


def test_Segmentation_TopologyBothPlacementKeys_LeaderExcluded() -> None:
    owner = lws("lws-seg", "LeaderCreated", 5, segment=2, policy_type="LeaderExcluded",
                worker_annotations={SEG_REQ: "rack-unit", SEG_PREF: "node", TOPO: "rack"})
    md = run(owner, lpod("lws-seg-0-1", "1"))
    assert [s.name for s in md.sub_groups] == ["leader", "segment-0", "segment-1"]
    assert topo(sub_group(md, "leader")) is None
    assert topo(sub_group(md, "segment-0")) == topo(sub_group(md, "segment-1")) == ("rack", "rack-unit", "node")
    assert sub_group(md, "segment-0").pods == ["lws-seg-0-1"]


def test_SegmentSizeFromWorkerTemplateAnnotation() -> None:
    owner = lws("lws-seg", "LeaderCreated", 5, annotations={TOPO: "rack"},
                worker_annotations={SEG: "2", SEG_REQ: "rack-unit", SEG_PREF: "node"})
    md = run(owner, lpod("lws-seg-0-1", "1"))
    assert shape(md) == [
        ("segment-0", None, 2, None, []),
        ("segment-1", 2, None, None, []),
        ("leader", 1, None, "segment-0", []),
        ("workers", 2, None, "segment-0", ["lws-seg-0-1"]),
    ]
    assert topo(sub_group(md, "segment-0")) == topo(sub_group(md, "segment-1")) == ("rack", "rack-unit", "node")
    assert topo(sub_group(md, "leader")) is None and topo(sub_group(md, "workers")) is None


def test_SegmentSizeFromLWSAnnotation() -> None:
    md = run(lws("x", "LeaderCreated", 5, annotations={SEG: "2"}, worker_annotations={SEG: "4"}), lpod("p", "3"))
    assert [s.name for s in md.sub_groups] == ["segment-0", "segment-1", "leader", "workers"]
    assert sub_group(md, "segment-1").pods == ["p"]


def test_SegmentsWithoutTopologyName() -> None:
    """Reference §8 item 9: levels but no topology name → segments without a constraint."""
    md = run(lws("x", "LeaderCreated", 5, segment=2, worker_annotations={SEG_REQ: "rack"}), lpod("p", "1"))
    assert [topo(s) for s in md.sub_groups] == [None] * 4


def test_SegmentTopologyFromPodAnnotations() -> None:
    md = run(lws("x", "LeaderCreated", 5, segment=2, worker_annotations={TOPO: "t", SEG_REQ: "rack"}),
             lpod("p", "1", annotations={TOPO: "pod-topology", SEG_PREF: "node"}))
    assert topo(sub_group(md, "segment-0")) == ("pod-topology", "rack", "node")


# ---------------------------------------------------------------- deviations from KAI (module docstring)


def test_SingleSegmentDivisible_CountsEachPodOnce() -> None:
    """KAI: size 3, S 2 gives workers(3) for 2 workers, a gang that can never be met."""
    md = run(lws("x", "LeaderCreated", 3, segment=2), lpod("p", "2"))
    assert shape(md) == [("segment-0", None, 2, None, []), ("leader", 1, None, "segment-0", []),
                         ("workers", 2, None, "segment-0", ["p"])]
    md = run(lws("x", "LeaderCreated", 3, segment=2, policy_type="LeaderExcluded"), lpod("p", "2"))
    assert shape(md) == [("leader", 1, None, None, []), ("segment-0", 2, None, None, ["p"])]


def test_SingleSegmentNotDivisible() -> None:
    md = run(lws("x", "LeaderCreated", 3, segment=3), lpod("p", "1"))
    assert shape(md) == [("segment-0", None, 2, None, []), ("leader", 1, None, "segment-0", []),
                         ("workers", 2, None, "segment-0", ["p"])]


def test_LeaderReady_UnboundLeaderWithSegmentation() -> None:
    """KAI errors ("segmentSize is greater than replicasSize"), so the leader is never grouped."""
    md = run(lws("x", "LeaderReady", 5, segment=2), lpod("l", "0"))
    assert md.min_member == 1
    assert shape(md) == [("leader", 1, None, None, ["l"])]


def test_LeaderReady_UnboundLeaderStillValidatesSegmentSize() -> None:
    with pytest.raises(GroupingError, match="invalid segment size"):
        run(lws("x", "LeaderReady", 5, segment=1), lpod("l", "0"))


def test_WorkerSegmentsSumToGroupSize() -> None:
    for size in range(2, 30):
        for seg in range(2, size + 1):
            md = run(lws("x", "LeaderCreated", size, segment=seg), lpod("p", "0"))
            leaves = [s.min_member for s in md.sub_groups if s.min_sub_group is None]
            assert sum(m or 0 for m in leaves) == size, (size, seg)


# ---------------------------------------------------------------- error paths


@pytest.mark.parametrize("size", [0, -1, None, "three", 2.5])
def test_InvalidSize(size: Any) -> None:
    with pytest.raises(GroupingError, match=re.escape("spec.leaderWorkerTemplate.size")):
        run(lws("x", "LeaderCreated", size), lpod("p", "0"))


def test_UnknownStartupPolicy() -> None:
    with pytest.raises(GroupingError, match="unknown startupPolicy 'Sometimes'"):
        run(lws("x", "Sometimes", 3), lpod("p", "0"))


def test_NonIntegerWorkerIndex() -> None:
    with pytest.raises(GroupingError, match="not an integer"):
        run(lws("x", "LeaderCreated", 3), lpod("p", "one"))


@pytest.mark.parametrize("gi, phrase", [("-1", NOT_VALID), ("x", "not an integer")])
def test_BadGroupIndex(gi: str, phrase: str) -> None:
    with pytest.raises(GroupingError, match=phrase) as err:
        run(lws("x", "LeaderCreated", 3), lpod("p", "0", gi))
    assert GI in str(err.value)


@pytest.mark.parametrize("segment", [1, 0, -3])
def test_SegmentSizeNotAboveOne(segment: int) -> None:
    with pytest.raises(GroupingError, match="invalid segment size"):
        run(lws("x", "LeaderCreated", 5, segment=segment), lpod("p", "0"))


def test_SegmentSizeAnnotationMalformed() -> None:
    with pytest.raises(GroupingError, match="invalid segment size") as err:
        run(lws("x", "LeaderCreated", 5, annotations={SEG: "two"}), lpod("p", "0"))
    assert "LeaderWorkerSet default/x" in str(err.value)
    with pytest.raises(GroupingError, match="invalid segment size") as err:
        run(lws("x", "LeaderCreated", 5, worker_annotations={SEG: "1"}), lpod("p", "0"))
    assert "workerTemplate" in str(err.value)


def test_SegmentSizeAboveGroupSize() -> None:
    with pytest.raises(GroupingError, match="greater than the group size 5"):
        run(lws("x", "LeaderCreated", 5, segment=6), lpod("p", "0"))


def test_LeaderExcludedNotDivisible() -> None:
    with pytest.raises(GroupingError, match="not divisible"):
        run(lws("x", "LeaderCreated", 4, segment=2, policy_type="LeaderExcluded"), lpod("p", "1"))


def test_UnknownSubGroupPolicyType() -> None:
    with pytest.raises(GroupingError, match="subGroupPolicyType"):
        run(lws("x", "LeaderCreated", 5, segment=2, policy_type="Other"), lpod("p", "1"))


def test_SegmentedPodWithoutWorkerIndex() -> None:
    with pytest.raises(GroupingError, match=re.escape(f'label "{WI}" is missing')):
        run(lws("x", "LeaderCreated", 5, segment=2), lpod("p"))


def test_WorkerIndexOutsideGroup() -> None:
    with pytest.raises(GroupingError, match="outside a group of 5 pods"):
        run(lws("x", "LeaderCreated", 5, segment=2), lpod("p", "7"))


# ---------------------------------------------------------------- property test

junk = st.one_of(st.none(), st.booleans(), st.integers(-3, 10), st.text(max_size=3),
                 st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))
counts = st.one_of(st.integers(-2, 14), st.just(2**31 - 1), st.just(20003), junk)
ann_values = st.one_of(st.sampled_from(["1", "2", "3", "0", "-1", "x", "", "rack"]), st.text(max_size=3))
ann_keys = st.sampled_from([SEG, TOPO, SEG_REQ, SEG_PREF, SIZE])
index_values = st.sampled_from(["0", "1", "2", "3", "9", "-1", "x", ""])


@given(
    policy=st.one_of(st.none(), st.sampled_from(["LeaderCreated", "LeaderReady", "Other"]), junk),
    size=counts,
    segment=st.one_of(st.none(), counts),
    policy_type=st.one_of(st.none(), st.sampled_from(["LeaderWorker", "LeaderExcluded", "X"]), junk),
    owner_ann=st.dictionaries(ann_keys, ann_values, max_size=3),
    worker_ann=st.one_of(st.dictionaries(ann_keys, ann_values, max_size=3), junk),
    pod_labels=st.dictionaries(st.sampled_from([WI, GI]), index_values, max_size=2),
    pod_ann=st.dictionaries(ann_keys, ann_values, max_size=3),
    node=st.one_of(st.none(), st.just("n1")),
)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_property_metadata_or_grouping_error(policy: Any, size: Any, segment: Any, policy_type: Any,
                                             owner_ann: dict[str, str], worker_ann: Any,
                                             pod_labels: dict[str, str], pod_ann: dict[str, str],
                                             node: str | None) -> None:
    owner = lws("x", None, size, segment=segment, policy_type=policy_type, annotations=owner_ann)
    owner["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["annotations"] = worker_ann
    if policy is not None:
        owner["spec"]["startupPolicy"] = policy
    the_pod = pod("p", namespace="default", labels=pod_labels, annotations=pod_ann, node_name=node)
    try:
        md = LWSGrouper().metadata(context(the_pod, owner))
    except GroupingError:
        return
    assert isinstance(md, PodGroupMetadata)
    assert md.min_member is not None and md.min_member >= 1
    # every pod lands in exactly one sub-group, except a non-leader pod of a 1-pod group (as KAI)
    in_groups = sum(1 for s in md.sub_groups if "p" in s.pods)
    assert in_groups == 1 or (in_groups == 0 and md.min_member == 1 and pod_labels.get(WI) != "0")
    leaves = [s for s in md.sub_groups if s.min_sub_group is None]
    assert sum(s.min_member or 0 for s in leaves) == md.min_member
    md.to_object()
