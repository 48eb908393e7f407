"""One way for a long synchronous loop to share the event loop: :class:`Cooperative`.

Everything the grouper does runs on one asyncio loop: a loop over 100,000 cached pods (a LIST's handler
calls, a resync, the pods parked for their owner's kind) that never awaits would hold the watches, the
probes and the Lease renewals for seconds. Such a loop calls ``await coop.tick()`` once per item and
yields to the loop every ``every`` items; the items in between cost a counter increment and an await of
a finished awaitable (no coroutine, no task).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Generator
from typing import Any


class _Ready:
    """An awaitable that is already done: awaiting it never suspends, and gives False (no yield)."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, bool]:
        return False
        yield  # (a generator: awaiting it returns at once)


_READY = _Ready()


class Cooperative:
    """Counts steps of a loop; :meth:`tick` yields to the event loop every ``every`` steps."""

    __slots__ = ("_n", "every")

    def __init__(self, every: int) -> None:
        self.every = max(1, every)
        self._n = 0

    def tick(self, steps: int = 1) -> Awaitable[bool]:
        """Count ``steps``; the ``every``-th counted step's awaitable yields once (``asyncio.sleep(0)``).
        Awaited, it says whether it yielded (what the loop read from the caches may have changed since)."""
        self._n += steps
        if self._n < self.every:
            return _READY
        self._n = 0
        return asyncio.sleep(0, True)


__all__ = ["Cooperative"]
