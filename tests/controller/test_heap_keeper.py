"""The heap keeper freezes only after enough work and only when the controller is idle: a collection
then walks what a burst added, not the whole cache."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from grouper.runtime.heap import FULL_COLLECTION_THRESHOLD, HeapKeeper, malloc_trim, tune_collector


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_freezes_when_idle_after_enough_work() -> None:
    state = {"idle": False, "done": 0}
    keeper = HeapKeeper(idle=lambda: state["idle"], progress=lambda: state["done"], min_work=10)
    state["done"] = 9
    state["idle"] = True
    assert not keeper.maybe_freeze(0), "not enough work yet"
    state["done"], state["idle"] = 10, False
    assert not keeper.maybe_freeze(0), "busy: a collection now would stall the burst"
    burst = [{"pod": i, "labels": {"a": str(i)}} for i in range(1000)]  # tracked containers
    state["idle"] = True
    assert keeper.maybe_freeze(0)
    assert gc.get_freeze_count() >= len(burst)
    assert keeper.freezes == 1
    assert not keeper.maybe_freeze(10), "no new work since the last freeze"


def test_each_collection_hands_the_c_heaps_free_memory_back() -> None:
    """After the collection and freeze, not otherwise: the trim walks the C heaps' free chunks (a few
    milliseconds at most, paid only when the controller is idle)."""
    state = {"idle": True, "done": 0}
    trims: list[int] = []
    keeper = HeapKeeper(idle=lambda: state["idle"], progress=lambda: state["done"], min_work=10,
                        trim=lambda: trims.append(gc.get_freeze_count()))
    assert not keeper.maybe_freeze(0) and trims == []
    state["done"] = 10
    assert keeper.maybe_freeze(0) and len(trims) == 1 and trims[0] > 0, "trimmed once, after the freeze"
    state["idle"] = False
    state["done"] = 30
    assert not keeper.maybe_freeze(10) and len(trims) == 1


def test_malloc_trim_is_glibcs_here() -> None:
    """The service image and this machine use glibc: the trim exists and answers (1: memory was released,
    0: none was free)."""
    trim = malloc_trim()
    assert trim is not None
    junk = [bytes(4096) * 64 for _ in range(256)]  # ~64 MiB in chunks beyond Python's small objects
    del junk
    assert trim() in (0, 1)


def _full_collections_while_caching(n: int) -> int:
    """Full collections the collector runs while ``n`` small objects are built and kept (a LIST decoded
    into the cache)."""
    full = [0]

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            full[0] += 1

    gc.collect()
    gc.callbacks.append(count)
    try:
        kept = [{"metadata": {"name": f"p{i}", "labels": {"a": str(i)}}, "spec": [i]} for i in range(n)]
    finally:
        gc.callbacks.remove(count)
    assert len(kept) == n
    return full[0]


def test_tuned_collector_runs_no_full_collection_while_a_cache_fills() -> None:
    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)  # the interpreter's defaults
        assert _full_collections_while_caching(200_000) >= 3, "the defaults walk the growing cache again and again"
        assert tune_collector() == (700, 10, FULL_COLLECTION_THRESHOLD)
        assert _full_collections_while_caching(200_000) == 0
    finally:
        gc.set_threshold(*saved)
