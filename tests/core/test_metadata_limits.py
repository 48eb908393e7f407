"""What a PodGroup copies from its workload stays within the API server's limits (grouper.model.metadata_limits),
deterministically, and the decision says what was left out."""

from __future__ import annotations

from grouper.core.config import GroupingConfig
from grouper.core.grouping import Grouper
from grouper.model.metadata_limits import (
    TOTAL_ANNOTATION_SIZE_LIMIT,
    annotations_size,
    bound_metadata,
    is_label_value,
    is_qualified_name,
)
from grouper.model.podgroup import TOP_OWNER_METADATA_ANNOTATION, OwnerRef, PodGroupMetadata
from grouper.writer.podgroups import updated_object

LIMIT = TOTAL_ANNOTATION_SIZE_LIMIT


def test_within_the_limits_nothing_is_dropped() -> None:
    labels = {"app": "x", "example.com/team": "a_b.c-d"}
    annotations = {"a": "v" * 1000, "example.com/b": "w"}
    out_l, out_a, dropped = bound_metadata(labels, annotations)
    assert (out_l, out_a, bool(dropped)) == (labels, annotations, False)


def test_exactly_at_the_limit_is_kept_one_byte_over_drops_the_largest() -> None:
    at = {"a": "x" * (LIMIT - 1)}
    assert bound_metadata({}, at)[1] == at
    over = {"a": "x" * (LIMIT - 13), "bb": "y" * 9, "c": "z"}  # 1 + L-13 + 2 + 9 + 1 + 1 = L + 1
    assert annotations_size(over) == LIMIT + 1
    _, kept, dropped = bound_metadata({}, over)
    assert kept == {"bb": "y" * 9, "c": "z"}
    assert dropped.annotations == {"a": f"{LIMIT - 12} bytes"}


def test_sizes_count_utf8_bytes() -> None:
    value = "é" * (LIMIT // 2)  # 2 bytes each: exactly the limit with its key over it
    _, kept, dropped = bound_metadata({}, {"k": value})
    assert kept == {} and dropped.annotations == {"k": f"{1 + LIMIT} bytes"}


def test_largest_first_ties_by_key_and_the_grouper_own_key_stays() -> None:
    big = "x" * 100_000
    annotations = {
        TOP_OWNER_METADATA_ANNOTATION: "y" * 200_000,  # ours: never dropped, even when it is the largest
        "b": big,
        "a": big,  # same size as b: the greater key (b) goes first
        "small": "s",
    }
    _, kept, dropped = bound_metadata({}, annotations, keep=(TOP_OWNER_METADATA_ANNOTATION,))
    assert list(dropped.annotations) == ["b", "a"]
    assert kept == {TOP_OWNER_METADATA_ANNOTATION: "y" * 200_000, "small": "s"}
    assert annotations_size(kept) <= LIMIT
    # deterministic: the order of the input does not matter
    again = bound_metadata({}, dict(reversed(list(annotations.items()))), keep=(TOP_OWNER_METADATA_ANNOTATION,))
    assert again[1] == kept and again[2].annotations == dropped.annotations


def test_invalid_label_values_and_keys_are_dropped() -> None:
    labels = {
        "ok": "fine",
        "priorityClassName": "p" * 64,  # e.g. a PriorityClass name (up to 253) from the defaults ConfigMap
        "spaces": "non preemptible",
        "-bad-key": "v",
        "example.com/": "v",
        "empty": "",
    }
    out, _, dropped = bound_metadata(labels, {})
    assert out == {"ok": "fine", "empty": ""}
    assert dropped.labels == {"-bad-key": "invalid key", "example.com/": "invalid key",
                              "priorityClassName": "invalid value", "spaces": "invalid value"}
    assert "priorityClassName (invalid value)" in dropped.describe()


def test_qualified_names_and_label_values() -> None:
    assert is_qualified_name("kai.scheduler/top-owner-metadata") and is_qualified_name("a")
    assert not is_qualified_name("Upper.Case/x") and not is_qualified_name("x" * 64)
    assert is_label_value("") and is_label_value("a" * 63) and not is_label_value("a" * 64)
    assert not is_label_value("-a")


def test_describe_names_what_was_dropped_bounded() -> None:
    _, _, dropped = bound_metadata({f"k{i:02d}": "-" for i in range(15)}, {})
    text = dropped.describe(limit=3)
    assert "k00 (invalid value), k01 (invalid value), k02 (invalid value) and 12 more" in text
    assert str(LIMIT) in text


def _pod_and_job(annotations: dict[str, str]) -> tuple[dict, dict]:
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "big", "namespace": "ns", "uid": "u1", "annotations": annotations}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "big-0", "namespace": "ns", "uid": "p1",
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "big", "uid": "u1",
                                             "controller": True}]},
           "spec": {"schedulerName": "kai-scheduler"}}
    return pod, job


def test_a_job_just_under_the_limit_gives_a_valid_podgroup_and_the_decision_says_what_was_dropped() -> None:
    from grouper.core.lookups import InMemoryLookups
    from grouper.runtime.composition import build_grouper

    # the hostile-testing reproduction: 262,100 bytes of annotations, valid on the Job
    annotations = {"example.com/a": "a" * 200_000, "example.com/b": "b" * (262_100 - 200_000 - 26)}
    assert annotations_size(annotations) == 262_100
    pod, job = _pod_and_job(annotations)
    grouper: Grouper = build_grouper(GroupingConfig(), None)
    d = grouper.decide(pod, InMemoryLookups([job, pod]))
    assert d.outcome == "grouped" and d.pod_group is not None
    written = d.pod_group.to_object()["metadata"]["annotations"]
    assert annotations_size(written) <= LIMIT
    assert TOP_OWNER_METADATA_ANNOTATION in written and "example.com/b" in written
    assert "example.com/a" not in written  # the largest, alone, makes room
    notes = [n for n in d.notes if "not copied" in n]
    assert len(notes) == 1 and "example.com/a (200013 bytes)" in notes[0], d.notes
    assert d.pod_group.warnings == [notes[0].removeprefix("warning: ")]


def test_an_update_drops_stored_annotations_no_longer_wanted_before_the_new_ones() -> None:
    md = PodGroupMetadata("pg", "ns", OwnerRef("batch/v1", "Job", "j", "u"), annotations={"new": "n" * 200_000})
    existing = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                "metadata": {"name": "pg", "namespace": "ns", "resourceVersion": "5",
                             "annotations": {"old": "o" * 200_000, "foreign": "f"}},
                "spec": {}}
    out = updated_object(md.to_object(), existing)
    assert out["metadata"]["annotations"] == {"foreign": "f", "new": "n" * 200_000}
    assert annotations_size(out["metadata"]["annotations"]) <= LIMIT
