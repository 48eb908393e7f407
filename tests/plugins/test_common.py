"""Shared plugin helpers: strict integers with object+field errors, topology, fetching objects."""

from __future__ import annotations

from typing import Any

import pytest
from builders import context, lookups, owner, pod

from grouper.model.errors import GroupingError, InvalidWorkload, OwnerNotFound
from grouper.model.podgroup import TopologyConstraint
from grouper.plugins.common import (
    annotations_of,
    fetch,
    int_annotation,
    int_spec_field,
    labels_of,
    normalize_go_duration,
    parse_int,
    podgroup_name,
    topology_from_annotations,
)
from grouper.plugins.default import top_owner_metadata_yaml

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


# ---------------------------------------------------------------- strict string maps


class _Tag(str):
    """A str subclass (what a YAML loader or a caller may hand over): still a string."""


def test_string_maps_are_copies_of_valid_maps() -> None:
    obj = owner(labels={"a": "1", "b": ""}, annotations={"c": "x"})
    got = labels_of(obj)
    assert got == {"a": "1", "b": ""}
    got["a"] = "changed"  # the caller's copy: the (cached, shared) object stays as it was
    assert obj["metadata"]["labels"] == {"a": "1", "b": ""}
    assert annotations_of(obj) == {"c": "x"}
    assert labels_of({"metadata": {}}) == {} and labels_of({"metadata": {"labels": {}}}) == {}
    tagged = owner(labels={_Tag("k"): _Tag("v")})
    assert labels_of(tagged) == {"k": "v"}


@pytest.mark.parametrize(
    ("labels", "field"),
    [
        ({"ok": "1", "n": 7}, 'metadata.labels["n"]'),
        ({"ok": "1", 3: "x"}, 'metadata.labels["3"]'),
        ({"none": None}, 'metadata.labels["none"]'),
    ],
)
def test_string_maps_name_the_first_bad_entry(labels: dict[Any, Any], field: str) -> None:
    obj = owner("JobSet", "jobset.x-k8s.io/v1alpha2", "js", namespace="default")
    obj["metadata"]["labels"] = labels
    with pytest.raises(InvalidWorkload) as err:
        labels_of(obj)
    assert err.value.field == field
    assert err.value.obj == "JobSet default/js"


def test_top_owner_metadata_text_follows_each_field() -> None:
    """The text is kept per (apiVersion, kind, name, uid): a change of any one gives another text."""
    a = owner("JobSet", "jobset.x-k8s.io/v1alpha2", "js", namespace="default", uid="u1")
    assert top_owner_metadata_yaml(a) == "name: js\nuid: u1\ngroup: jobset.x-k8s.io\nversion: v1alpha2\nkind: JobSet\n"
    assert top_owner_metadata_yaml(a) is top_owner_metadata_yaml(a)
    b = owner("JobSet", "jobset.x-k8s.io/v1alpha2", "true", namespace="default", uid="u1")
    assert top_owner_metadata_yaml(b).startswith('name: "true"\nuid: u1\n')
    c = owner("Job", "batch/v1", "js", namespace="default", uid="u2")
    assert top_owner_metadata_yaml(c) == "name: js\nuid: u2\ngroup: batch\nversion: v1\nkind: Job\n"
    d = owner("ConfigMap", "v1", "js", namespace="default", uid="u2")
    assert top_owner_metadata_yaml(d) == 'name: js\nuid: u2\ngroup: ""\nversion: v1\nkind: ConfigMap\n'
