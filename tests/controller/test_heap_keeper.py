"""The heap keeper freezes only after enough work and only when the controller is idle: a collection
then walks what a burst added, not the whole cache."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from grouper.runtime.heap import HeapKeeper


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
