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
