"""The PodGroup webhook rules, applied locally before any write."""

from __future__ import annotations

import pytest

from grouper.core.naming import MAX_NAME_LENGTH, is_subdomain, shorten_name
from grouper.core.validation import validate_pod_group
from grouper.model.podgroup import OwnerRef, PodGroupMetadata, SubGroup

OWNER = OwnerRef("v1", "Pod", "p", "u")


def md(**kw) -> PodGroupMetadata:
    return PodGroupMetadata(name=kw.pop("name", "pg-x-u"), namespace="ns", owner=OWNER, **kw)


def test_valid_flat_group() -> None:
    assert validate_pod_group(md(min_member=3)) == []


def test_min_member_and_min_sub_group_are_exclusive() -> None:
    errs = validate_pod_group(md(min_member=1, min_sub_group=1))
    assert errs == ["PodGroup ns/pg-x-u: spec.minMember and spec.minSubGroup are mutually exclusive"]


def test_duplicate_sub_group_names() -> None:
    errs = validate_pod_group(md(min_member=None, min_sub_group=1, sub_groups=[SubGroup("a", 1), SubGroup("a", 1)]))
    assert any("duplicate sub-group name 'a'" in e for e in errs)


def test_unknown_parent() -> None:
    errs = validate_pod_group(md(min_member=None, min_sub_group=1, sub_groups=[SubGroup("a", 1, parent="nope")]))
    assert any("spec.subGroups[a].parent 'nope' names no sub-group" in e for e in errs)


def test_parent_cycle() -> None:
    sgs = [SubGroup("a", None, 1, parent="b"), SubGroup("b", None, 1, parent="a")]
    errs = validate_pod_group(md(min_member=None, min_sub_group=1, sub_groups=sgs))
    assert any("parent cycle" in e for e in errs)


def test_sub_group_with_both_sizes() -> None:
    errs = validate_pod_group(md(min_member=None, min_sub_group=1, sub_groups=[SubGroup("a", 1, 1)]))
    assert any("sets both minMember and minSubGroup" in e for e in errs)


def test_leaf_with_min_sub_group_and_leaf_without_min_member() -> None:
    errs = validate_pod_group(md(min_member=None, min_sub_group=2, sub_groups=[SubGroup("a", None, 1), SubGroup("b")]))
    assert any("[a] is a leaf sub-group and must not set minSubGroup" in e for e in errs)
    assert any("[b] is a leaf sub-group and must set minMember" in e for e in errs)


def test_mid_level_with_min_member_is_rejected() -> None:
    sgs = [SubGroup("parent", 2), SubGroup("child", 1, parent="parent")]
    errs = validate_pod_group(md(min_member=None, min_sub_group=1, sub_groups=sgs))
    assert any("[parent] has child sub-groups and must not set minMember" in e for e in errs)


def test_two_level_shape_is_valid() -> None:
    sgs = [SubGroup("worker", None, 2), SubGroup("worker-replica-0", 4, parent="worker"),
           SubGroup("worker-replica-1", 4, parent="worker")]
    assert validate_pod_group(md(min_member=None, min_sub_group=1, sub_groups=sgs)) == []


def test_sub_group_name_must_be_a_dns_label() -> None:
    errs = validate_pod_group(md(min_member=None, min_sub_group=1, sub_groups=[SubGroup("Worker_A", 1)]))
    assert any("'Worker_A' must be a DNS label" in e for e in errs)


def test_negative_sizes() -> None:
    errs = validate_pod_group(md(min_member=-1))
    assert errs == ["PodGroup ns/pg-x-u: spec.minMember must be >= 0, got -1"]


def test_invalid_name() -> None:
    errs = validate_pod_group(md(name="Bad_Name", min_member=1))
    assert errs and "RFC 1123 subdomain" in errs[0]


def test_shorten_name_is_deterministic_valid_and_unique() -> None:
    long_a = "pg-" + "a" * 300 + "-uid1"
    long_b = "pg-" + "a" * 300 + "-uid2"
    short_a, short_b = shorten_name(long_a), shorten_name(long_b)
    assert len(short_a) <= MAX_NAME_LENGTH and is_subdomain(short_a)
    assert short_a == shorten_name(long_a)
    assert short_a != short_b
    assert shorten_name("pg-short-uid") == "pg-short-uid"


def test_shorten_name_never_leaves_a_dash_before_the_hash() -> None:
    name = "pg-" + "b" * 238 + "-" + "c" * 40
    short = shorten_name(name)
    assert "--" not in short and is_subdomain(short)


def test_counts_must_fit_in_int32() -> None:
    errs = validate_pod_group(md(min_member=2**31))
    assert errs == [f"PodGroup ns/pg-x-u: spec.minMember must fit in int32 (<= {2**31 - 1}), got {2**31}"]
    sgs = [SubGroup("a", 2**31)]
    errs = validate_pod_group(md(min_member=None, min_sub_group=1, sub_groups=sgs))
    assert any("spec.subGroups[a].minMember must fit in int32" in e for e in errs)


def test_a_pass_checks_each_distinct_pod_group_once_and_gets_the_answer() -> None:
    from grouper.core import validation
    from grouper.core.workload_context import WorkloadContext

    checked: list[str] = []
    real = validation.validate_pod_group

    def counting(m: PodGroupMetadata) -> list[str]:
        checked.append(m.name)
        return real(m)

    workload = WorkloadContext()
    bad = md(min_member=None, min_sub_group=1, sub_groups=[SubGroup("a", 1), SubGroup("a", 1)])
    same = md(min_member=None, min_sub_group=1, sub_groups=[SubGroup("a", 1), SubGroup("a", 1)])
    renamed = md(min_member=None, min_sub_group=1, sub_groups=[SubGroup("a", 1), SubGroup("b", 1)])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("grouper.core.workload_context.validate_pod_group", counting)
        first = workload.validate(bad)
        assert first and workload.validate(same) == first == real(bad)
        first.append("changed by a caller")
        assert workload.validate(bad) == real(bad), "callers get their own list"
        assert workload.validate(renamed) == []  # another PodGroup, its own answer
        assert len(checked) == 2  # bad (and its equal), renamed
        assert WorkloadContext().validate(bad) == real(bad) and len(checked) == 3  # a new pass checks again
