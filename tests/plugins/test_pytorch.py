"""PyTorchJob plugin: KAI's pytorch_grouper_test.go (reference §5.5), upstream-bug choices, error paths."""

from __future__ import annotations

import re
from typing import Any

import pytest
from builders import context, obj, pod, sub_group
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grouper.model.errors import GroupingError
from grouper.model.objects import Obj
from grouper.model.podgroup import PodGroupMetadata
from grouper.plugins.pytorch import PyTorchGrouper

TYPE = "training.kubeflow.org/replica-type"
INDEX = "training.kubeflow.org/replica-index"
SEG = "kai.scheduler/segment-size"
TOPO = "kai.scheduler/topology"
SEG_REQ = "kai.scheduler/segment-topology-required-placement"
SEG_PREF = "kai.scheduler/segment-topology-preferred-placement"


def job(master: int | None = 2, worker: int | None = 4, *, min_replicas: int | None = None,
        min_available: int | None = None, worker_annotations: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None) -> Obj:
    specs: dict[str, Any] = {}
    if master is not None:
        specs["Master"] = {"replicas": master}
    if worker is not None:
        specs["Worker"] = {"replicas": worker}
        if worker_annotations is not None:
            specs["Worker"]["template"] = {"metadata": {"annotations": worker_annotations}}
    spec: dict[str, Any] = {"pytorchReplicaSpecs": specs}
    if min_replicas is not None:
        spec["elasticPolicy"] = {"minReplicas": min_replicas}
    if min_available is not None:
        spec["runPolicy"] = {"schedulingPolicy": {"minAvailable": min_available}}
    return obj("kubeflow.org/v1", "PyTorchJob", "test_job", namespace="test_namespace", uid="1",
               annotations=annotations, spec=spec)


def ppod(kind: str | None = None, index: str | None = None, name: str | None = None,
         annotations: dict[str, str] | None = None) -> Obj:
    labels = {}
    if kind is not None:
        labels[TYPE] = kind
    if index is not None:
        labels[INDEX] = index
    return pod(name or f"test-pod-{kind}-{index or 0}", namespace="test_namespace", labels=labels,
               annotations=annotations)


def run(the_job: Obj, the_pod: Obj | None = None) -> PodGroupMetadata:
    md = PyTorchGrouper().metadata(context(the_pod or ppod(), the_job))
    assert md is not None
    return md


# ---------------------------------------------------------------- §5.5 minMember


def test_OnlyReplicas() -> None:
    md = run(job())
    assert md.min_member == 6
    assert md.name == "pg-test_job-1" and md.priority_class_name == "train"


def test_OnlyMinReplicas() -> None:
    assert run(job(min_replicas=66)).min_member == 66


def test_OnlyMinAvailable() -> None:
    assert run(job(min_available=33)).min_member == 33


def test_MinAvailableAndMinReplicas() -> None:
    assert run(job(min_replicas=66, min_available=33)).min_member == 33


def test_OnlyMasterReplicas() -> None:
    assert run(job(worker=None)).min_member == 2


def test_OnlyWorkerReplicas() -> None:
    assert run(job(master=None)).min_member == 4


def test_OnlyMasterWithMinReplicas() -> None:
    assert run(job(worker=None, min_replicas=66)).min_member == 66


def test_OnlyWorkerWithMinReplicas() -> None:
    assert run(job(master=None, min_replicas=66)).min_member == 66


def test_OnlyMasterWithMinAvailable() -> None:
    assert run(job(worker=None, min_available=33)).min_member == 33


def test_OnlyWorkerWithMinAvailable() -> None:
    assert run(job(master=None, min_available=33)).min_member == 33


# ---------------------------------------------------------------- §5.5 sub-groups


def test_SubGroups_MasterAndWorker() -> None:
    md = run(job(), ppod("master", name="test-pod-master-0"))
    assert len(md.sub_groups) == 2
    master, worker = sub_group(md, "master"), sub_group(md, "worker")
    assert (master.min_member, master.pods) == (2, ["test-pod-master-0"])
    assert (worker.min_member, worker.pods) == (4, [])
    assert master.parent is None and worker.parent is None


def test_SubGroups_WorkerPod() -> None:
    md = run(job(), ppod("worker", name="test-pod-worker-0"))
    assert len(md.sub_groups) == 2
    assert sub_group(md, "master").pods == []
    assert sub_group(md, "worker").pods == ["test-pod-worker-0"]


def test_SubGroups_OnlyMaster() -> None:
    md = run(job(worker=None), ppod("master", name="test-pod-master-0"))
    assert [s.name for s in md.sub_groups] == ["master"]
    assert sub_group(md, "master").pods == ["test-pod-master-0"]


def test_SubGroups_OnlyWorker() -> None:
    md = run(job(master=None), ppod("worker", name="test-pod-worker-0"))
    assert [s.name for s in md.sub_groups] == ["worker"]
    assert sub_group(md, "worker").pods == ["test-pod-worker-0"]


def test_SubGroups_PodWithoutReplicaTypeLabel() -> None:
    md = run(job(), ppod())
    assert len(md.sub_groups) == 2
    assert all(s.pods == [] for s in md.sub_groups)


# ---------------------------------------------------------------- §5.5 segments


def test_Segments_HappyFlow_4Workers_2PerSegment() -> None:
    the_job = job(1, 4, worker_annotations={SEG: "2"})
    md = run(the_job, ppod("master", "0", name="test-job-master-0", annotations={SEG: "2"}))
    assert md.min_member == 5
    assert len(md.sub_groups) == 4
    assert (sub_group(md, "master").min_member, sub_group(md, "master").pods) == (1, ["test-job-master-0"])
    worker = sub_group(md, "worker")
    assert (worker.min_member, worker.min_sub_group) == (None, 2)
    assert sub_group(md, "worker-0").parent == "worker" and sub_group(md, "worker-1").parent == "worker"

    md = run(the_job, ppod("worker", "0", name="test-job-worker-0", annotations={SEG: "2"}))
    assert len(md.sub_groups) == 4
    assert sub_group(md, "worker-0").pods == ["test-job-worker-0"]
    md = run(the_job, ppod("worker", "2", name="test-job-worker-2", annotations={SEG: "2"}))
    assert sub_group(md, "worker-1").pods == ["test-job-worker-2"]
    assert md.spec()["subGroups"][1] == {"name": "worker", "minSubGroup": 2}


def test_Segments_5Workers_2PerSegment() -> None:
    the_job = job(1, 5, worker_annotations={SEG: "2"})
    md = run(the_job, ppod("worker", "0", name="test-job-worker-0", annotations={SEG: "2"}))
    assert md.min_member == 6
    assert len(md.sub_groups) == 5
    assert sub_group(md, "worker").min_sub_group == 3 and sub_group(md, "worker").min_member is None
    assert [(sub_group(md, f"worker-{i}").min_member, sub_group(md, f"worker-{i}").pods) for i in range(3)] == [
        (2, ["test-job-worker-0"]), (2, []), (1, [])]
    md = run(the_job, ppod("worker", "4", name="test-job-worker-4", annotations={SEG: "2"}))
    assert sub_group(md, "worker-2").pods == ["test-job-worker-4"]


def test_Segments_ElasticMinReplicas() -> None:
    md = run(job(1, 8, min_replicas=5, worker_annotations={SEG: "2"}),
             ppod("worker", "0", annotations={SEG: "2"}))
    assert md.min_member == 5
    assert sub_group(md, "worker").min_sub_group == 4
    assert [sub_group(md, f"worker-{i}").min_member for i in range(4)] == [2, 2, 0, 0]


def test_Segments_MalformedAnnotation() -> None:
    with pytest.raises(GroupingError, match="invalid segment size") as err:
        run(job(1, 4, worker_annotations={SEG: "invalid"}), ppod("worker", "0", annotations={SEG: "not-a-number"}))
    assert "Pod test_namespace/test-pod-worker-0" in str(err.value)


def test_Segments_MalformedAnnotationInTemplate() -> None:
    with pytest.raises(GroupingError, match="invalid segment size") as err:
        run(job(1, 4, worker_annotations={SEG: "invalid-size"}), ppod("worker", "0"))
    assert "PyTorchJob test_namespace/test_job" in str(err.value)
    assert "pytorchReplicaSpecs.Worker.template" in str(err.value)


def test_Segments_SegmentSizeFromPodTemplate() -> None:
    md = run(job(1, 4, worker_annotations={SEG: "2"}), ppod("worker", "1", name="test-job-worker-1"))
    assert len(md.sub_groups) == 4
    assert sub_group(md, "worker-0").pods == ["test-job-worker-1"]


def test_Segments_NegativeReplicaIndex() -> None:
    with pytest.raises(GroupingError, match=re.escape("is not valid. It must be bigger than 0")) as err:
        run(job(1, 4, worker_annotations={SEG: "2"}), ppod("worker", "-1", annotations={SEG: "2"}))
    assert INDEX in str(err.value)


def test_Segments_ExceedsMaxAllowedSegmentation() -> None:
    with pytest.raises(GroupingError, match="greater than max allowed segmentation"):
        run(job(1, 10001, worker_annotations={SEG: "1"}), ppod("worker", "0", annotations={SEG: "1"}))


def test_Segments_ExactlyMaxAllowedSegmentation() -> None:
    md = run(job(1, 10000, worker_annotations={SEG: "1"}), ppod("worker", "9999", name="w"))
    assert sub_group(md, "worker").min_sub_group == 10000 and sub_group(md, "worker-9999").pods == ["w"]


def _topology(md: PodGroupMetadata, name: str) -> tuple[str, str, str] | None:
    t = sub_group(md, name).topology
    return None if t is None else (t.topology, t.required_level, t.preferred_level)


def test_Segments_WithTopologyConstraints() -> None:
    ann = {SEG: "2", TOPO: "cluster-topology", SEG_REQ: "rack", SEG_PREF: "node"}
    md = run(job(1, 4, worker_annotations=ann), ppod("worker", "0", annotations=dict(ann)))
    assert len(md.sub_groups) == 4
    assert _topology(md, "worker-0") == _topology(md, "worker-1") == ("cluster-topology", "rack", "node")
    assert _topology(md, "worker") is None and _topology(md, "master") is None
    assert sub_group(md, "worker-0").topology is not sub_group(md, "worker-1").topology


def test_Segments_TopologyFromRootAnnotation() -> None:
    the_job = job(1, 4, worker_annotations={SEG: "2", SEG_REQ: "rack"}, annotations={TOPO: "cluster-topology"})
    md = run(the_job, ppod("worker", "0", annotations={SEG: "2", SEG_REQ: "rack"}))
    assert len(md.sub_groups) == 4
    assert _topology(md, "worker-0") == ("cluster-topology", "rack", "")


def test_Segments_NoTopologyWhenMissing() -> None:
    """Reference §8 item 9: no topology name → segments are still created, without a constraint."""
    md = run(job(1, 4, worker_annotations={SEG: "2", SEG_REQ: "rack"}),
             ppod("worker", "0", annotations={SEG: "2", SEG_REQ: "rack"}))
    assert len(md.sub_groups) == 4
    assert _topology(md, "worker-0") is None and _topology(md, "worker-1") is None


def test_Segments_OnlyRequiredPlacement() -> None:
    md = run(job(1, 4, worker_annotations={SEG: "2", SEG_REQ: "rack", TOPO: "cluster-topology"}),
             ppod("worker", "0", annotations={SEG: "2", TOPO: "cluster-topology", SEG_REQ: "rack"}))
    assert _topology(md, "worker-0") == ("cluster-topology", "rack", "")


def test_Segments_OnlyPreferredPlacement() -> None:
    md = run(job(1, 4, worker_annotations={SEG: "2", SEG_PREF: "node", TOPO: "cluster-topology"}),
             ppod("worker", "0", annotations={SEG: "2", TOPO: "cluster-topology", SEG_PREF: "node"}))
    assert _topology(md, "worker-0") == ("cluster-topology", "", "node")


def test_Segments_TopologyFromTemplate() -> None:
    md = run(job(1, 4, worker_annotations={SEG: "2", SEG_REQ: "rack", TOPO: "cluster-topology"}),
             ppod("worker", "0"))
    assert len(md.sub_groups) == 4
    assert _topology(md, "worker-0") == ("cluster-topology", "rack", "")


def test_Segments_ZeroWorkersFallsBackToLeaf() -> None:
    md = run(job(1, 0, min_available=1, worker_annotations={SEG: "2"}),
             ppod("master", "0", annotations={SEG: "2"}))
    worker = sub_group(md, "worker")
    assert worker.min_sub_group is None and worker.min_member == 0
    assert [s.name for s in md.sub_groups] == ["master", "worker"]


# ---------------------------------------------------------------- upstream bug 8 and other error paths


@pytest.mark.parametrize("value", ["0", "-2"])
def test_Segments_PodAnnotationSizeNotPositive(value: str) -> None:
    """Reference §8 item 8: KAI only checks the pod value is an integer (0 divides by zero)."""
    with pytest.raises(GroupingError, match="invalid segment size") as err:
        run(job(1, 4), ppod("worker", "0", annotations={SEG: value}))
    assert "Pod test_namespace/test-pod-worker-0" in str(err.value) and SEG in str(err.value)


@pytest.mark.parametrize("value", ["0", "-2"])
def test_Segments_TemplateSizeNotPositive(value: str) -> None:
    with pytest.raises(GroupingError, match="invalid segment size"):
        run(job(1, 4, worker_annotations={SEG: value}), ppod("worker", "0"))


def test_Segments_PodAnnotationWinsOverTemplate() -> None:
    md = run(job(1, 4, worker_annotations={SEG: "4"}), ppod("worker", "3", name="w", annotations={SEG: "1"}))
    assert sub_group(md, "worker").min_sub_group == 4 and sub_group(md, "worker-3").pods == ["w"]


def test_Segments_WorkerWithoutIndexLabel() -> None:
    with pytest.raises(GroupingError, match=r"replica-index\" is missing") as err:
        run(job(1, 4, worker_annotations={SEG: "2"}), ppod("worker"))
    assert str(err.value).startswith("Pod test_namespace/")


def test_Segments_WorkerWithNonIntegerIndex() -> None:
    with pytest.raises(GroupingError, match="not an integer"):
        run(job(1, 4, worker_annotations={SEG: "2"}), ppod("worker", "one"))


def test_Segments_MasterPodNeedsNoIndex() -> None:
    md = run(job(1, 4, worker_annotations={SEG: "2"}), ppod("master", name="m"))
    assert sub_group(md, "master").pods == ["m"]


def test_Segments_WorkerIndexBeyondReplicasJoinsNoSegment() -> None:
    md = run(job(1, 4, worker_annotations={SEG: "2"}), ppod("worker", "9", name="w"))
    assert md.sub_group_of("w") is None


def test_NoReplicaSpecs() -> None:
    with pytest.raises(GroupingError, match="pytorchReplicaSpecs") as err:
        run(obj("kubeflow.org/v1", "PyTorchJob", "j", spec={}))
    assert "PyTorchJob default/j" in str(err.value)


def test_ZeroWorkersWithoutMinAvailable() -> None:
    with pytest.raises(GroupingError, match="> 0"):
        run(job(1, 0))


@pytest.mark.parametrize("kw, field", [({"min_replicas": -1}, "minReplicas"), ({"min_available": -1}, "minAvailable"),
                                       ({"min_replicas": "x"}, "minReplicas")])
def test_BadMinimums(kw: dict[str, Any], field: str) -> None:
    with pytest.raises(GroupingError, match=field):
        run(job(**kw))


def test_Provenance() -> None:
    md = run(job(min_replicas=3))
    assert md.provenance["minMember"].startswith("spec.elasticPolicy.minReplicas")


# ---------------------------------------------------------------- property test

junk = st.one_of(st.none(), st.booleans(), st.integers(-3, 10), st.text(max_size=3),
                 st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))
counts = st.one_of(st.integers(-2, 12), st.just(2**31), st.just(20001), junk)
ann_keys = st.sampled_from([SEG, TOPO, SEG_REQ, SEG_PREF])
ann_values = st.one_of(st.sampled_from(["1", "2", "3", "0", "-1", "x", "", "rack"]), st.text(max_size=3))


@st.composite
def replica_spec(draw: st.DrawFn) -> Any:
    spec: dict[str, Any] = {}
    if draw(st.booleans()):
        spec["replicas"] = draw(counts)
    if draw(st.booleans()):
        spec["template"] = {"metadata": {"annotations": draw(st.dictionaries(ann_keys, ann_values, max_size=4))}}
    return draw(st.one_of(st.just(spec), junk)) if draw(st.integers(0, 9)) == 0 else spec


@given(
    specs=st.one_of(st.dictionaries(st.sampled_from(["Master", "Worker", "Other"]), replica_spec(), max_size=3), junk),
    min_replicas=st.one_of(st.none(), counts),
    min_available=st.one_of(st.none(), counts),
    owner_ann=st.dictionaries(ann_keys, ann_values, max_size=2),
    pod_labels=st.dictionaries(st.sampled_from([TYPE, INDEX]),
                               st.sampled_from(["master", "worker", "0", "3", "-1", "x", ""]), max_size=2),
    pod_ann=st.dictionaries(ann_keys, ann_values, max_size=3),
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_property_metadata_or_grouping_error(specs: Any, min_replicas: Any, min_available: Any,
                                             owner_ann: dict[str, str], pod_labels: dict[str, str],
                                             pod_ann: dict[str, str]) -> None:
    spec: dict[str, Any] = {"pytorchReplicaSpecs": specs}
    if min_replicas is not None:
        spec["elasticPolicy"] = {"minReplicas": min_replicas}
    if min_available is not None:
        spec["runPolicy"] = {"schedulingPolicy": {"minAvailable": min_available}}
    the_job = obj("kubeflow.org/v1", "PyTorchJob", "j", annotations=owner_ann, spec=spec)
    try:
        md = PyTorchGrouper().metadata(context(pod("p", labels=pod_labels, annotations=pod_ann), the_job))
    except GroupingError:
        return
    assert isinstance(md, PodGroupMetadata)
    assert md.min_member is not None and md.min_member >= 0
    assert len(md.sub_groups) <= 10002
    md.to_object()
