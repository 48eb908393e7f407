"""Shared plugin helpers: strict integers with object+field errors, topology, fetching objects."""

from __future__ import annotations

from typing import Any

import pytest
from builders import context, lookups, owner, pod

from grouper.model.errors import GroupingError, InvalidWorkload, OwnerNotFound
from grouper.model.podgroup import TopologyConstraint
from grouper.plugins.common import (
    fetch,
    int_annotation,
    int_spec_field,
    normalize_go_duration,
    parse_int,
    podgroup_name,
    topology_from_annotations,
)

JS = owner("JobSet", "jobset.x-k8s.io/v1alpha2", "js", namespace="default", uid="uid",
           annotations={"kai.scheduler/batch-min-member": "abc", "n": "-1", "ok": "7", "big": "2147483648"})


def test_int_annotation_messages_name_object_and_field() -> None:
    with pytest.raises(InvalidWorkload) as err:
        int_annotation(JS, "kai.scheduler/batch-min-member", minimum=1)
    assert str(err.value) == ('JobSet default/js: field metadata.annotations["kai.scheduler/batch-min-member"]: '
                              '"abc" is not an integer')
    assert err.value.obj == "JobSet default/js"
    assert err.value.field == 'metadata.annotations["kai.scheduler/batch-min-member"]'
    with pytest.raises(InvalidWorkload, match=r'field metadata.annotations\["n"\]: -1 is not valid: it must be >= 1'):
        int_annotation(JS, "n", minimum=1)
    with pytest.raises(InvalidWorkload, match="out of range"):
        int_annotation(JS, "big")
    assert int_annotation(JS, "ok") == 7
    assert int_annotation(JS, "absent") is None


@pytest.mark.parametrize(("value", "expected"), [(3, 3), ("3", 3), ("+3", 3), ("-3", -3), (3.0, 3), ("007", 7)])
def test_parse_int_accepts(value: Any, expected: int) -> None:
    assert parse_int(value, obj="X", field="f") == expected


@pytest.mark.parametrize("value", ["", " 3", "3.5", "1e3", "1_000", "٣", None, [], True, 3.5, "0x1"])
def test_parse_int_rejects(value: Any) -> None:
    with pytest.raises(InvalidWorkload, match=r"X: field f: .* is not an integer"):
        parse_int(value, obj="X", field="f")


def test_int_spec_field() -> None:
    o = owner(spec={"a": {"b": [{"c": "5"}]}})
    assert int_spec_field(o, "spec", "a", "b", 0, "c") == 5
    assert int_spec_field(o, "spec", "a", "x") is None
    with pytest.raises(InvalidWorkload, match=r"field spec.a.b\[1\].c: is missing"):
        int_spec_field(o, "spec", "a", "b", 1, "c", required=True)


def test_topology_from_annotations() -> None:
    assert topology_from_annotations({"kai.scheduler/topology": "t",
                                      "kai.scheduler/topology-preferred-placement": "rack"}) == \
        TopologyConstraint("t", "", "rack")
    assert topology_from_annotations({}).is_empty()


def test_normalize_go_duration_rejects_negative_when_asked() -> None:
    assert normalize_go_duration("-1m") == "-1m0s"
    with pytest.raises(ValueError, match="non-negative"):
        normalize_go_duration("-1m", allow_negative=False)


def test_podgroup_name() -> None:
    assert podgroup_name(JS) == "pg-js-uid"


def test_fetch() -> None:
    job = owner("Job", "batch/v1", "j", namespace="default")
    ctx = context(pod(namespace="default"), job, objects=[job])
    assert fetch(ctx, "batch/v1", "Job", "default", "j", why="test") == job
    with pytest.raises(OwnerNotFound, match=r"Job default/missing \(batch/v1\) not found; because"):
        fetch(ctx, "batch/v1", "Job", "default", "missing", why="because")
    deleting = context(pod(namespace="default", deleting=True), job)
    assert fetch(deleting, "batch/v1", "Job", "default", "missing", why="x") is None
    forbidden = context(pod(), job, the_lookups=lookups(forbidden=[("batch", "Job")]))
    with pytest.raises(GroupingError, match="cannot read Job default/j"):
        fetch(forbidden, "batch/v1", "Job", "default", "j", why="x")
