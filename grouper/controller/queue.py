"""A work queue of keys with client-go semantics, for one asyncio loop.

- **De-duplication**: a key waiting in the queue is held once, however often it is added.
- **No concurrent processing of one key**: a key added while a worker processes it is marked dirty and
  handed out again only after :meth:`done` — so a burst of events for one workload costs one extra pass.
- **Three ways in**: :meth:`add` (now), :meth:`add_after` (after a delay) and ``add(key, background=True)``.
- **Per-key exponential back-off** for failures (:meth:`backoff`, the delay a failure re-queues after):
  ``base * 2**n`` capped at ``max_delay`` (1 s … 60 s like upstream's podgrouper), reset by :meth:`forget`
  after a success.
- **Delayed adds** keep only the earliest pending time per key.
- **A background lane** (``add(key, background=True)``): re-checks of workloads already grouped (after a
  restart, a periodic resync) wait behind everything else, so a new workload is not queued behind 20,000
  re-checks; adding a background key normally moves it to the front lane.
- **Busy since** (:attr:`busy_since`): when the queue last went from idle (nothing waiting, nothing
  processing) to having work, so liveness measures a stall from then and not from the last key finished
  before a quiet hour.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Hashable
from typing import Generic, TypeVar

from grouper.observability.metrics import Metrics

K = TypeVar("K", bound=Hashable)


class ShutDown(Exception):
    """The queue was shut down; workers stop."""


class WorkQueue(Generic[K]):
    def __init__(
        self, *, base_delay: float = 1.0, max_delay: float = 60.0, metrics: Metrics | None = None
    ) -> None:
        self.base_delay, self.max_delay = base_delay, max_delay
        self.metrics = metrics
        self._queue: collections.deque[K] = collections.deque()
        self._background: collections.deque[K] = collections.deque()  # may hold keys moved to _queue since
        self._in_background: set[K] = set()  # the keys of _background still waiting there
        self._dirty: set[K] = set()  # waiting to be processed (in _queue, or re-queued after processing)
        self._processing: set[K] = set()
        self._failures: dict[K, int] = {}
        self._delayed: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._shutdown = False
        self.busy_since: float | None = None  # monotonic; None while idle

    # ------------------------------------------------------------------ adding

    def add(self, key: K, *, background: bool = False) -> None:
        if self._shutdown:
            return
        if key in self._dirty:
            if not background and key in self._in_background:  # promoted: new work for it arrived
                self._in_background.discard(key)
                self._queue.append(key)
            return
        pending = self._delayed.pop(key, None)
        if pending is not None:
            pending[1].cancel()
        self._dirty.add(key)
        if key in self._processing:
            return  # re-queued by done()
        if self.busy_since is None:
            self.busy_since = time.monotonic()
        if background:
            self._background.append(key)
            self._in_background.add(key)
        else:
            self._queue.append(key)
        self._gauge()
        self._wake()

    def add_after(self, key: K, delay: float) -> None:
        if self._shutdown:
            return
        if delay <= 0:
            self.add(key)
            return
        when = time.monotonic() + delay
        pending = self._delayed.get(key)
        if pending is not None:
            if pending[0] <= when:
                return
            pending[1].cancel()
        handle = asyncio.get_running_loop().call_later(delay, self._fire, key)
        self._delayed[key] = (when, handle)

    def _fire(self, key: K) -> None:
        self._delayed.pop(key, None)
        self.add(key)

    def backoff(self, key: K) -> float:
        """A failure of ``key``: its next back-off delay (counted: the next one is twice as long, until
        :meth:`forget`), for :meth:`add_after` — client-go's ``AddRateLimited`` is ``add_after(k, backoff(k))``."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        if self.metrics is not None:
            self.metrics.workqueue_retries.inc()
        return min(self.base_delay * (2**n), self.max_delay)

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    def num_requeues(self, key: K) -> int:
        return self._failures.get(key, 0)

    # ------------------------------------------------------------------ processing

    async def get(self) -> K:
        """Wait for a key and mark it processing. Raises :class:`ShutDown` once the queue is shut down."""
        while not self._queue and not self._in_background:
            if self._shutdown:
                raise ShutDown()
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled() and len(self):
                    self._wake()  # we were woken for a key but will not take it: pass it on
                raise
            finally:
                if fut in self._waiters:
                    self._waiters.remove(fut)
        key = self._queue.popleft() if self._queue else self._pop_background()
        self._dirty.discard(key)
        self._processing.add(key)
        self._gauge()
        return key

    def _pop_background(self) -> K:
        while True:
            key = self._background.popleft()
            if key in self._in_background:  # else it moved to the front lane (and was handed out there)
                self._in_background.discard(key)
                return key

    def done(self, key: K) -> None:
        """Processing of ``key`` finished; if it was added meanwhile, it goes back in the queue."""
        self._processing.discard(key)
        if key in self._dirty and not self._shutdown:
            self._queue.append(key)
            self._gauge()
            self._wake()
        elif not self._processing and not self._queue and not self._in_background:
            self.busy_since = None

    def shutdown(self) -> None:
        """Stop handing out keys; blocked :meth:`get` calls raise :class:`ShutDown`."""
        self._shutdown = True
        for _, handle in self._delayed.values():
            handle.cancel()
        self._delayed.clear()
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)

    # ------------------------------------------------------------------ introspection

    def __len__(self) -> int:
        return len(self._queue) + len(self._in_background)

    def __contains__(self, key: object) -> bool:
        return key in self._dirty or key in self._delayed

    @property
    def processing(self) -> frozenset[K]:
        return frozenset(self._processing)

    @property
    def pending_delayed(self) -> int:
        return len(self._delayed)

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.workqueue_depth.set(len(self))

    def _wake(self) -> None:
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)
                return
