"""``SharedViews``: equal PodGroup views kept as one object, answered as comparing each new view with the
kept one would, and comparing a pass's views (which share their sub-groups) at the pods' own sub-groups only."""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.core.workload_plan import SharedViews
from grouper.model.podgroup import OwnerRef, PodGroupMetadata, SubGroup

OWNER = OwnerRef("jobset.x-k8s.io/v1alpha2", "JobSet", "js", "uid-js")


def _prepared(replicas: int, min_member: int = 8) -> list[SubGroup]:
    """A JobSet's sub-groups as one pass's per-workload part makes them: new objects each time."""
    return [SubGroup("w", min_member=None, min_sub_group=replicas)] + [
        SubGroup(f"w-replica-{i}", min_member=min_member, parent="w") for i in range(replicas)
    ]


def _view(prepared: list[SubGroup], pod: int, *, queue: str = "q", pods_per_replica: int = 8) -> PodGroupMetadata:
    """One pod's kept view: the pass's sub-groups, its own leaf a copy (as the JobSet plugin and
    ``for_keeping`` make it)."""
    subs = list(prepared)
    leaf = 1 + pod // pods_per_replica
    subs[leaf] = subs[leaf].with_pods([f"js-{pod}"])
    return PodGroupMetadata(name="pg-js", namespace="ns", owner=OWNER, queue=queue, sub_groups=subs).for_keeping()


def _simple(kept: dict[str, PodGroupMetadata], key: str, view: PodGroupMetadata) -> PodGroupMetadata:
    """The simple path: compare with the kept view itself."""
    shared = kept.get(key)
    if shared is not None and shared == view:
        return shared
    kept[key] = view
    return view


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 2), st.integers(0, 2), st.integers(0, 15)),
                max_size=30),
       st.lists(st.sampled_from(["a", "b"]), max_size=2, unique=True))
def test_each_answer_is_the_object_comparing_with_the_kept_view_gives(steps: list[tuple[str, int, int, int]],
                                                                      seeded: list[str]) -> None:
    """Any sequence of views (some equal, some not; made in different passes or the same one), with or
    without views kept from an earlier pass: the same object back, every time, as the simple path."""
    passes = [_prepared(2) for _ in range(3)]  # three passes: equal sub-groups, different objects
    first = {key: _view(passes[0], 0) for key in seeded}
    views, simple = SharedViews(first.items()), dict(first)
    for key, made_in, queue, pod in steps:
        view = _view(passes[made_in], pod, queue=f"q{queue}")
        got, want = views.share(key, view), _simple(simple, key, view)
        assert got is want
        assert got == view


def test_a_pass_compares_its_views_at_the_pods_own_sub_groups_not_every_sub_group() -> None:
    """A 126-sub-group JobSet: 64 pods of a new pass shared against a view kept from an earlier pass compare
    the whole view once, then only the sub-groups that are not the same objects. The simple path compared
    every sub-group for every pod."""
    earlier, now = _prepared(125), _prepared(125)
    kept = _view(earlier, 0)

    def count(share: object) -> tuple[int, list[PodGroupMetadata]]:
        calls = 0
        real = SubGroup.__eq__

        def counting(self: SubGroup, other: object) -> bool:
            nonlocal calls
            calls += 1
            return real(self, other)

        with mock.patch.object(SubGroup, "__eq__", counting):
            got = [share(_view(now, pod)) for pod in range(64)]  # type: ignore[operator]
        return calls, got

    views = SharedViews([("pg-js", kept)])
    calls, got = count(lambda v: views.share("pg-js", v))
    assert all(g is kept for g in got)
    assert calls <= 126 + 2 * 63, calls
    simple = {"pg-js": kept}
    simple_calls, _ = count(lambda v: _simple(simple, "pg-js", v))
    assert simple_calls >= 126 * 64
