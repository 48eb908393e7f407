"""Keep the cyclic garbage collector's pauses proportional to what changed, not to the cache.

A full collection walks every container object the collector tracks; with 100,000 cached pods that is
millions of objects and seconds with the event loop blocked (probes, Lease renewals, watches). The
service freezes the heap once its caches are synced (``gc.freeze()``: those objects leave the
collector's generations). Everything cached after that — a burst of new pods, a re-list — would be walked
again by every full collection, so once the controller is idle after enough work, :class:`HeapKeeper`
collects (only the unfrozen objects: a pause proportional to the burst) and freezes again.

Frozen objects are still freed by reference counting; only a cycle formed later among frozen objects
would outlive its use, and the cached objects are trees (no cycles), collected garbage is gone before
each freeze.

After each such collection the keeper also hands the C allocator's free memory back to the system
(glibc's ``malloc_trim(0)``: the free pages inside its heaps, not only the top). Objects larger than
Python's small-object allocator takes (big dicts and lists, response bodies, TLS buffers) live in glibc's
heap; under steady churn its free chunks are scattered, and each newly touched page stayed resident for
good: the soak's RSS rose ~18 MiB an hour with the Python objects and the heap's used bytes flat
(``benchmarks/bench_soak.py``; ``docs/perf-journal.md``). Where the C library has no ``malloc_trim``
(musl) nothing is trimmed.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

# A full collection is due after this many collections of the middle generation (the interpreter's
# default is 10, i.e. every ~70,000 net allocations, subject to its 25%-growth rule). Decoding the first
# LIST of 100,000 pods then runs 16 full collections, each walking the cache built so far: 6.4 of 8.2 s
# (docs/perf-journal.md, bench_event_loop.py, "Full collections made rare"). At 1,000 a full collection comes every ~7 million net
# allocations; the young generations, which catch almost all short-lived cycles, run as before.
FULL_COLLECTION_THRESHOLD = 1000


def tune_collector() -> tuple[int, int, int]:
    """Make full collections rare (the caches are frozen, see :class:`HeapKeeper`); returns the thresholds."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_THRESHOLD)
    return gc.get_threshold()


def malloc_trim() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)`` (give every free page of the C heaps back), or None without it. Called once
    the caches are synced, so ``ctypes`` is imported then, not on the way to the first ``/readyz``."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


class HeapKeeper:
    def __init__(
        self,
        *,
        idle: Callable[[], bool],
        progress: Callable[[], int],
        interval: float = 5.0,
        min_work: int = 500,
        trim: Callable[[], object] | None = None,
    ) -> None:
        """``idle``: nothing queued or in progress; ``progress``: a count of finished reconciles; ``trim``:
        what hands the C allocator's free memory back after each collection (:func:`malloc_trim`)."""
        self.idle, self.progress, self.trim = idle, progress, trim
        self.interval, self.min_work = interval, min_work
        self.freezes = 0

    def maybe_freeze(self, since: int) -> bool:
        """Collect and freeze when at least ``min_work`` reconciles finished since ``since`` and the
        controller is idle; True when it did."""
        if self.progress() - since < self.min_work or not self.idle():
            return False
        t0 = time.monotonic()
        collected = gc.collect()
        gc.freeze()
        if self.trim is not None:
            self.trim()
        self.freezes += 1
        log.info(
            "heap frozen after a burst",
            extra={"collected": collected, "frozen": gc.get_freeze_count(),
                   "pause_ms": round((time.monotonic() - t0) * 1000, 1)},
        )
        return True

    async def run(self) -> None:
        since = self.progress()
        while True:
            await asyncio.sleep(self.interval)
            if self.maybe_freeze(since):
                since = self.progress()


__all__ = ["FULL_COLLECTION_THRESHOLD", "HeapKeeper", "malloc_trim", "tune_collector"]
