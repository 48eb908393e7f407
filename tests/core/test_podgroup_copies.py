"""The cheap copies merging makes of a PodGroup's metadata give what ``dataclasses.replace`` would."""

from __future__ import annotations

from dataclasses import fields, replace

from grouper.model.podgroup import OwnerRef, PodGroupMetadata, SubGroup, TopologyConstraint


def _every_field_set() -> SubGroup:
    sg = SubGroup("workers", min_member=3, min_sub_group=2, parent="root",
                  topology=TopologyConstraint(topology="rack-topology", required_level="rack"), pods=["p-0"])
    unset = [f.name for f in fields(SubGroup) if getattr(sg, f.name) == getattr(SubGroup("x"), f.name)]
    assert unset == [], f"a SubGroup field this test leaves at its default: {unset}"
    return sg


def test_with_pods_is_replace() -> None:
    sg = _every_field_set()
    copy = sg.with_pods(["p-1", "p-2"])
    assert copy == replace(sg, pods=["p-1", "p-2"])
    assert sg.pods == ["p-0"]  # the original is untouched


def test_copy_without_pods_and_for_keeping_empty_every_pod_list_and_leave_the_original() -> None:
    sg = _every_field_set()
    shared = SubGroup("leaders", min_member=1)
    md = PodGroupMetadata(name="pg", namespace="ns", owner=OwnerRef("batch/v1", "Job", "j", "uid-j"),
                          sub_groups=[sg, shared])
    for copy in (md.copy_without_pods(), md.for_keeping()):
        assert [s.pods for s in copy.sub_groups] == [[], []]
        assert copy.sub_groups[0] == replace(sg, pods=[])
        assert sg.pods == ["p-0"]
    assert md.for_keeping().sub_groups[1] is shared  # a sub-group without pods is shared, never changed


def test_replaced_is_replace_for_every_field() -> None:
    """``PodGroupMetadata._replaced`` (the copy ``for_keeping`` and ``copy_without_pods`` make) gives exactly
    what ``dataclasses.replace`` gives, field by field, and leaves the original as it was."""
    md = PodGroupMetadata(
        name="pg", namespace="ns", owner=OwnerRef("batch/v1", "Job", "j", "uid-j"), labels={"l": "1"},
        annotations={"a": "2"}, queue="q", priority_class_name="train", preemptibility="preemptible",
        preemption_delay="5m0s", staleness_grace_period="1m0s", min_member=4, min_sub_group=2,
        sub_groups=[_every_field_set()], topology=TopologyConstraint(topology="t", required_level="rack"),
        provenance={"queue": "label"}, warnings=["w"],
    )
    default = PodGroupMetadata(name="x", namespace="y", owner=OwnerRef("v1", "Pod", "p", "u"))
    unset = [f.name for f in fields(PodGroupMetadata) if getattr(md, f.name) == getattr(default, f.name)]
    assert unset == [], f"a PodGroupMetadata field this test leaves at its default: {unset}"
    before = replace(md)
    for changes in ({}, {"provenance": {}}, {"queue": "other", "sub_groups": []}):
        copy = md._replaced(**changes)
        assert type(copy) is PodGroupMetadata and copy is not md
        assert copy == replace(md, **changes)
        for f in fields(PodGroupMetadata):
            assert getattr(copy, f.name) is (changes[f.name] if f.name in changes else getattr(md, f.name)), f.name
    assert md == before
    assert md.for_keeping() == replace(md, provenance={}, sub_groups=[replace(s, pods=[]) for s in md.sub_groups])
