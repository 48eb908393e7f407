"""Kubeflow distributed plugins (TFJob, XGBoostJob, JAXJob) and the shared min-member rule."""

from __future__ import annotations

import re
from typing import Any

import pytest
from builders import context, obj, pod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grouper.model.errors import GroupingError
from grouper.model.objects import Obj
from grouper.model.podgroup import PodGroupMetadata
from grouper.plugins.kubeflow import (
    KubeflowDistributedGrouper,
    distributed_min_member,
    jax_grouper,
    tensorflow_grouper,
    xgboost_grouper,
)


def job(kind: str, field: str, specs: Any, *, min_available: Any = None, **meta: Any) -> Obj:
    spec: dict[str, Any] = {field: specs}
    if min_available is not None:
        spec["runPolicy"] = {"schedulingPolicy": {"minAvailable": min_available}}
    return obj("kubeflow.org/v1", kind, "test_job", namespace="test_namespace", uid="1", spec=spec, **meta)


def run(grouper: KubeflowDistributedGrouper, the_job: Obj) -> PodGroupMetadata:
    md = grouper.metadata(context(pod("p", namespace="test_namespace"), the_job))
    assert md is not None
    return md


def reps(**counts: Any) -> dict[str, Any]:
    return {name: ({"replicas": n} if n is not None else {}) for name, n in counts.items()}


# ---------------------------------------------------------------- TFJob


def test_TFJob_SumOfReplicas() -> None:
    md = run(tensorflow_grouper(), job("TFJob", "tfReplicaSpecs", reps(Chief=1, PS=2, Worker=4)))
    assert md.min_member == 7
    assert md.name == "pg-test_job-1" and md.priority_class_name == "train" and md.sub_groups == []
    assert md.provenance["minMember"].startswith("sum of spec.tfReplicaSpecs")


def test_TFJob_NothingMandatory() -> None:
    assert run(tensorflow_grouper(), job("TFJob", "tfReplicaSpecs", reps(Worker=3))).min_member == 3


def test_TFJob_MinAvailableWins() -> None:
    md = run(tensorflow_grouper(), job("TFJob", "tfReplicaSpecs", reps(Worker=3), min_available=2))
    assert md.min_member == 2
    assert md.provenance["minMember"].startswith("spec.runPolicy.schedulingPolicy.minAvailable")


def test_TFJob_MinAvailableSkipsReplicaChecks() -> None:
    assert run(tensorflow_grouper(), job("TFJob", "tfReplicaSpecs", reps(Worker=0), min_available=1)).min_member == 1


@pytest.mark.parametrize("replicas", [0, -1, None, "x"])
def test_TFJob_ReplicasMustBePositive(replicas: Any) -> None:
    with pytest.raises(GroupingError, match=re.escape("spec.tfReplicaSpecs.Worker.replicas")) as err:
        run(tensorflow_grouper(), job("TFJob", "tfReplicaSpecs", reps(Chief=1, Worker=replicas)))
    assert "TFJob test_namespace/test_job" in str(err.value)


def test_TFJob_MissingReplicaSpecs() -> None:
    with pytest.raises(GroupingError, match="tfReplicaSpecs"):
        run(tensorflow_grouper(), obj("kubeflow.org/v1", "TFJob", "j", spec={}))


def test_TFJob_ReplicaSpecsNotAMap() -> None:
    with pytest.raises(GroupingError, match="expected an object"):
        run(tensorflow_grouper(), job("TFJob", "tfReplicaSpecs", ["Worker"]))


@pytest.mark.parametrize("value", [-1, "x", 1.5])
def test_TFJob_BadMinAvailable(value: Any) -> None:
    with pytest.raises(GroupingError, match="minAvailable"):
        run(tensorflow_grouper(), job("TFJob", "tfReplicaSpecs", reps(Worker=1), min_available=value))


def test_TFJob_TopologyAndQueueFromDefaultGrouper() -> None:
    the_job = job("TFJob", "tfReplicaSpecs", reps(Worker=2), labels={"kai.scheduler/queue": "q"},
                  annotations={"kai.scheduler/topology": "t", "kai.scheduler/topology-required-placement": "rack"})
    md = run(tensorflow_grouper(), the_job)
    assert md.queue == "q" and (md.topology.topology, md.topology.required_level) == ("t", "rack")


# ---------------------------------------------------------------- XGBoostJob


def test_XGBoostJob_MasterAndWorker() -> None:
    assert run(xgboost_grouper(), job("XGBoostJob", "xgbReplicaSpecs", reps(Master=1, Worker=3))).min_member == 4


@pytest.mark.parametrize("missing", ["Master", "Worker"])
def test_XGBoostJob_MandatorySpecs(missing: str) -> None:
    specs = reps(Master=1, Worker=3)
    del specs[missing]
    with pytest.raises(GroupingError, match=f"doesn't have a {missing} replica spec") as err:
        run(xgboost_grouper(), job("XGBoostJob", "xgbReplicaSpecs", specs))
    assert f"spec.xgbReplicaSpecs.{missing}" in str(err.value)


# ---------------------------------------------------------------- JAXJob


def test_JAXJob_Worker() -> None:
    assert run(jax_grouper(), job("JAXJob", "jaxReplicaSpecs", reps(Worker=8))).min_member == 8


def test_JAXJob_WorkerMandatory() -> None:
    with pytest.raises(GroupingError, match="Worker replica spec"):
        run(jax_grouper(), job("JAXJob", "jaxReplicaSpecs", reps(Launcher=1)))


def test_GrouperNamesAndConstructor() -> None:
    g = KubeflowDistributedGrouper("tfReplicaSpecs", (), "TensorFlow Grouper")
    assert g.name == "TensorFlow Grouper" and g == tensorflow_grouper()
    assert [x.name for x in (xgboost_grouper(), jax_grouper())] == ["XGBoost Grouper", "JAX Grouper"]


def test_distributed_min_member_direct() -> None:
    the_job = job("TFJob", "tfReplicaSpecs", reps(A=2, B=5))
    assert distributed_min_member(the_job, "tfReplicaSpecs")[0] == 7


# ---------------------------------------------------------------- property test

junk = st.one_of(st.none(), st.booleans(), st.integers(-3, 10), st.text(max_size=3),
                 st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))
counts = st.one_of(st.integers(-2, 10), st.just(2**31), junk)


@given(
    which=st.sampled_from([tensorflow_grouper, xgboost_grouper, jax_grouper]),
    specs=st.one_of(st.dictionaries(st.sampled_from(["Master", "Worker", "Chief", "PS"]),
                                    st.one_of(st.fixed_dictionaries({"replicas": counts}), junk), max_size=4), junk),
    min_available=st.one_of(st.none(), counts),
)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_property_metadata_or_grouping_error(which: Any, specs: Any, min_available: Any) -> None:
    grouper = which()
    the_job = job("TFJob", grouper.replica_specs_field, specs, min_available=min_available)
    try:
        md = grouper.metadata(context(pod("p"), the_job))
    except GroupingError:
        return
    assert isinstance(md, PodGroupMetadata)
    assert md.min_member is not None and md.min_member >= 0
    md.to_object()
