"""Compact containers for the caches and indexes that hold one entry per cached pod.

At 100,000 pods every byte per entry is 100 kB, and most index values have one member or a few (a
pod's own PodGroup, a uid read by one workload, the 5 pods of a Job): an empty ``set`` alone costs 216
bytes. A multimap here stores a lone member as itself, a few in a list and switches to a set beyond
:data:`SMALL`.

- :func:`add_member` / :func:`discard_member` / :func:`members` / :func:`has_member` — such a multimap
  (``dict[K, T | list[T] | set[T]]``); members are hashable, so never lists or sets themselves.
- :class:`Interner` — one shared string object per distinct low-cardinality value (namespaces, label
  keys and repeated values, owner kinds, node names), with a bounded table: values that turn out unique
  (uids, pod names) cost a table slot until the table is full, and then the table starts over (what is
  already cached keeps its shared strings).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, TypeAlias, TypeVar

from grouper.model.bounded import BoundedMemo

K = TypeVar("K", bound=Hashable)
T = TypeVar("T", bound=Hashable)
V = TypeVar("V", bound=Hashable)

Members: TypeAlias = T | list[T] | set[T]
SMALL = 16  # up to this many members: a list (a set of 5 costs 472 bytes, a list of 5 about 100)


def add_member(index: dict[K, Members[T]], key: K, member: T) -> None:
    cur = index.get(key)
    if cur is None:
        index[key] = member
    elif isinstance(cur, set):
        cur.add(member)
    elif isinstance(cur, list):
        if member not in cur:
            if len(cur) < SMALL:
                cur.append(member)
            else:
                index[key] = {*cur, member}
    elif cur != member:
        index[key] = [cur, member]


def discard_member(index: dict[K, Members[T]], key: K, member: T) -> None:
    cur = index.get(key)
    if cur is None:
        return
    if isinstance(cur, set | list):
        if member in cur:
            cur.remove(member)
        if len(cur) == 1:
            index[key] = next(iter(cur))
        elif not cur:
            del index[key]
    elif cur == member:
        del index[key]


def members(index: dict[K, Members[T]], key: K) -> frozenset[T] | set[T]:
    """The members of ``key`` (a fresh set when there are several: callers may iterate while writing)."""
    cur = index.get(key)
    if cur is None:
        return frozenset()
    if isinstance(cur, set | list):
        return set(cur)
    return frozenset((cur,))


def has_member(index: dict[K, Members[T]], key: K, member: T) -> bool:
    """Whether ``member`` is one of ``key``'s (O(1), or O(SMALL) for a short list)."""
    cur = index.get(key)
    if cur is None:
        return False
    if isinstance(cur, set | list):
        return member in cur
    return bool(cur == member)


def count(index: dict[K, Members[T]], key: K) -> int:
    """How many members ``key`` has (O(1))."""
    cur = index.get(key)
    if cur is None:
        return 0
    return len(cur) if isinstance(cur, set | list) else 1


class Interner:
    """A bounded table of canonical objects: ``intern(v)`` returns the first equal value it saw."""

    def __init__(self, max_entries: int = 65_536) -> None:
        self.max_entries = max_entries
        self._table: BoundedMemo[Any, Any] = BoundedMemo(max_entries)

    def __call__(self, value: V) -> V:
        got = self._table.get(value)
        if got is not None:
            return got
        self._table.put(value, value)
        return value

    def __len__(self) -> int:
        return len(self._table)


__all__ = ["Interner", "Members", "add_member", "discard_member", "members"]
