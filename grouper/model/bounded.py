"""The one bound for memos of derived values: a table that forgets everything when it is full.

Every memo in the grouper (parsed GVKs, rendered timestamps, interned strings, encoded header lines ...)
maps a key to something that can always be recomputed, so a miss costs only the recompute. Starting over
when full is cheaper than recency tracking (an LRU's bookkeeping costs more on every hit than the rare
refill) and keeps memory bounded whatever the input: a hostile stream of distinct keys only restarts the
table.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedMemo(Generic[K, V]):
    __slots__ = ("_data", "limit")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"BoundedMemo: limit must be at least 1, got {limit}")
        self.limit = limit
        self._data: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        """The value kept for ``key``, or None. Raises TypeError for an unhashable key, like a dict."""
        return self._data.get(key)

    def put(self, key: K, value: V) -> V:
        """Keep ``value`` for ``key`` (starting over first when full); returns ``value``."""
        if len(self._data) >= self.limit and key not in self._data:
            self._data.clear()
        self._data[key] = value
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        self._data.clear()
