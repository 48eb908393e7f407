"""The one bound of every memo (grouper/model/bounded.py): full means start over, never more than ``limit``."""

from __future__ import annotations

import pytest

from grouper.model.bounded import BoundedMemo


def test_keeps_values_until_full_then_starts_over() -> None:
    memo: BoundedMemo[int, str] = BoundedMemo(3)
    for i in range(3):
        assert memo.put(i, str(i)) == str(i)
    assert [memo.get(i) for i in range(3)] == ["0", "1", "2"] and len(memo) == 3
    memo.put(1, "one")  # a key it holds: replaced, nothing forgotten
    assert len(memo) == 3 and memo.get(1) == "one" and memo.get(0) == "0"
    memo.put(3, "3")  # a new key when full: everything else is forgotten
    assert len(memo) == 1 and memo.get(3) == "3" and memo.get(0) is None and 0 not in memo


def test_never_holds_more_than_its_limit_whatever_the_keys() -> None:
    memo: BoundedMemo[int, int] = BoundedMemo(7)
    for i in range(1000):
        memo.put(i, i)
        assert len(memo) <= 7


def test_refuses_a_limit_below_one_and_unhashable_keys_like_a_dict() -> None:
    with pytest.raises(ValueError, match="limit must be at least 1"):
        BoundedMemo(0)
    memo: BoundedMemo[object, int] = BoundedMemo(2)
    with pytest.raises(TypeError):
        memo.get([1])  # type: ignore[arg-type]
