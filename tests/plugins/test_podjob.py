"""Bare pods and Spark (KAI ``podjob_test.go``, ``spark_test.go``)."""

from __future__ import annotations

import pytest
from builders import context, owner, pod

from grouper.model.errors import InvalidWorkload
from grouper.model.podgroup import OwnerRef
from grouper.plugins.podjob import PodJobGrouper, is_spark_pod

SPARK = {"spark-app-name": "pi", "spark-app-selector": "spark-123"}


@pytest.mark.parametrize(
    ("labels", "expected"),
    [({}, False), ({"spark-app-name": "pi"}, False), ({"spark-app-selector": "s"}, False), (SPARK, True)],
)
def test_IsSparkPod(labels: dict[str, str], expected: bool) -> None:
    assert is_spark_pod(pod(labels=labels)) is expected


def test_NonSparkPod_UsesDefaultGrouper() -> None:
    p = pod("solo", namespace="ns", uid="u1", annotations={"kai.scheduler/topology": "net"},
            labels={"kai.scheduler/queue": "q"})
    md = PodJobGrouper().metadata(context(p))
    assert (md.name, md.namespace, md.min_member, md.priority_class_name) == ("pg-solo-u1", "ns", 1, "train")
    assert md.owner == OwnerRef("v1", "Pod", "solo", "u1")
    assert md.queue == "q"
    assert md.topology.topology == "net"


@pytest.mark.parametrize("labels", [{"spark-app-name": "pi"}, {"spark-app-selector": "s"}])
def test_PodWithOnlyOneSparkLabel_UsesDefaultGrouper(labels: dict[str, str]) -> None:
    md = PodJobGrouper().metadata(context(pod("solo", uid="u1", labels=labels)))
    assert md.name == "pg-solo-u1"


def test_SparkPod_GroupNameEqualsSelector() -> None:
    driver = pod("driver", uid="d1", labels=SPARK)
    executor = pod("exec-1", uid="e1", labels=SPARK, owner=driver)
    a = PodJobGrouper().metadata(context(driver))
    b = PodJobGrouper().metadata(context(executor, driver))
    assert a.name == b.name == "spark-123"
    assert b.owner == OwnerRef("v1", "Pod", "driver", "d1")
    assert (b.priority_class_name, b.min_member) == ("train", 1)


def test_SparkPod_empty_selector_is_an_error() -> None:
    with pytest.raises(InvalidWorkload) as err:
        PodJobGrouper().metadata(context(pod("driver", labels={**SPARK, "spark-app-selector": ""})))
    assert str(err.value).startswith('Pod test_namespace/driver: field metadata.labels["spark-app-selector"]: is empty')


def test_skipped_owner_labels_reach_a_pod_top_owner() -> None:
    top = owner(labels={"x": "y"})
    md = PodJobGrouper().metadata(context(pod(), top))
    assert md.labels == {"x": "y"}
