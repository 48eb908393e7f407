"""A small bounded TTL cache with single-flight loading, for TokenReview / SubjectAccessReview results.

Like the caches in front of controller-runtime's and kube-rbac-proxy's delegating authenticator and
authorizer: each answer is kept for a TTL chosen per answer (allowed answers longer than denied ones),
the oldest entries are evicted past ``max_entries``, and concurrent misses for one key share one load,
so a burst of requests with the same token costs the API server one review.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class TTLCache(Generic[V]):
    def __init__(self, max_entries: int = 1024, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max(1, max_entries)
        self._clock = clock
        self._entries: OrderedDict[Hashable, tuple[float, V]] = OrderedDict()
        self._loading: dict[Hashable, asyncio.Future[V]] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> tuple[bool, V | None]:
        """(True, value) while the entry is fresh, else (False, None)."""
        entry = self._entries.get(key)
        if entry is None:
            return False, None
        expires, value = entry
        if self._clock() >= expires:
            del self._entries[key]
            return False, None
        self._entries.move_to_end(key)
        return True, value

    def pop(self, key: Hashable) -> None:
        self._entries.pop(key, None)

    def put(self, key: Hashable, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        self._entries[key] = (self._clock() + ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    async def get_or_load(
        self, key: Hashable, load: Callable[[], Awaitable[V]], ttl: Callable[[V], float]
    ) -> V:
        """The cached value, or ``await load()`` cached for ``ttl(value)`` seconds. A failing load is not
        cached; every caller waiting on it gets its exception."""
        found, value = self.get(key)
        if found:
            self.hits += 1
            return value  # type: ignore[return-value]
        pending = self._loading.get(key)
        if pending is not None:
            self.hits += 1
            return await asyncio.shield(pending)
        self.misses += 1
        fut: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._loading[key] = fut
        try:
            result = await load()
        except asyncio.CancelledError:
            fut.set_exception(RuntimeError("the shared review was cancelled"))
            fut.exception()  # retrieved: no "exception never retrieved" warning when nobody waited
            raise
        except Exception as e:
            fut.set_exception(e)
            fut.exception()
            raise
        else:
            self.put(key, result, ttl(result))
            fut.set_result(result)
            return result
        finally:
            self._loading.pop(key, None)


__all__ = ["TTLCache"]
