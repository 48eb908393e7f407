"""The work queue: de-duplication, no concurrent processing of one key, back-off, delayed adds, shutdown."""

from __future__ import annotations

import asyncio

import pytest

from grouper.controller.queue import ShutDown, WorkQueue
from grouper.observability.metrics import Metrics


async def test_duplicate_adds_are_one_item() -> None:
    q: WorkQueue[str] = WorkQueue()
    for _ in range(5):
        q.add("a")
    q.add("b")
    assert len(q) == 2
    assert await q.get() == "a"
    assert await q.get() == "b"
    assert len(q) == 0


async def test_key_added_while_processing_comes_back_once_after_done() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    key = await q.get()
    q.add("a")
    q.add("a")
    assert len(q) == 0, "a key being processed must not be handed to a second worker"
    q.done(key)
    assert len(q) == 1
    assert await q.get() == "a"
    q.done("a")
    assert len(q) == 0


async def test_processing_key_is_never_handed_out_concurrently() -> None:
    q: WorkQueue[str] = WorkQueue()
    active: set[str] = set()
    overlaps = 0
    processed = 0

    async def worker() -> None:
        nonlocal overlaps, processed
        while True:
            try:
                k = await q.get()
            except ShutDown:
                return
            if k in active:
                overlaps += 1
            active.add(k)
            await asyncio.sleep(0.001)
            if processed < 200:
                q.add(k)  # events keep arriving for the key while it is processed
            processed += 1
            active.discard(k)
            q.done(k)

    workers = [asyncio.create_task(worker()) for _ in range(8)]
    for k in ("a", "b", "c"):
        q.add(k)
    while processed < 200:
        await asyncio.sleep(0.005)
    q.shutdown()
    await asyncio.gather(*workers)
    assert overlaps == 0


async def test_rate_limited_backoff_doubles_and_caps_and_forget_resets() -> None:
    m = Metrics()
    q: WorkQueue[str] = WorkQueue(base_delay=1.0, max_delay=60.0, metrics=m)
    delays = [q.backoff("x") for _ in range(9)]
    assert delays == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert q.num_requeues("x") == 9
    assert m.value("podgrouper_workqueue_retries_total") == 9
    q.forget("x")
    assert q.num_requeues("x") == 0
    assert q.backoff("x") == 1.0
    q.shutdown()


async def test_add_after_keeps_the_earliest_time_and_fires() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add_after("a", 10.0)
    q.add_after("a", 0.05)
    q.add_after("a", 5.0)  # later than the pending one: ignored
    assert len(q) == 0 and "a" in q
    assert await asyncio.wait_for(q.get(), 1.0) == "a"
    q.done("a")
    assert q.pending_delayed == 0


async def test_immediate_add_cancels_pending_delay() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add_after("a", 0.05)
    q.add("a")
    assert await q.get() == "a"
    q.done("a")
    await asyncio.sleep(0.1)
    assert len(q) == 0, "the cancelled delayed add must not fire again"


async def test_rate_limited_items_are_delayed_with_exponential_back_off() -> None:
    q: WorkQueue[str] = WorkQueue(base_delay=0.05, max_delay=0.15)
    q.add_after("a", q.backoff("a"))
    assert q.pending_delayed == 1 and q.num_requeues("a") == 1
    assert len(q) == 0, "not queued before its delay"
    assert await asyncio.wait_for(q.get(), 10.0) == "a"
    q.done("a")
    assert [q.backoff("a") for _ in range(3)] == [0.1, 0.15, 0.15], "doubles, capped at max_delay"
    q.forget("a")
    assert q.num_requeues("a") == 0 and q.backoff("a") == 0.05, "a success resets the back-off"


async def test_shutdown_wakes_blocked_getters() -> None:
    q: WorkQueue[str] = WorkQueue()
    getters = [asyncio.create_task(q.get()) for _ in range(3)]
    await asyncio.sleep(0)
    q.shutdown()
    for g in getters:
        with pytest.raises(ShutDown):
            await g
    q.add("late")
    assert len(q) == 0


async def test_cancelled_getter_passes_its_wakeup_on() -> None:
    q: WorkQueue[str] = WorkQueue()
    g1 = asyncio.create_task(q.get())
    g2 = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.add("a")  # wakes g1 ...
    g1.cancel()  # ... which is cancelled before it takes the key
    with pytest.raises(asyncio.CancelledError):
        await g1
    assert await asyncio.wait_for(g2, 1.0) == "a"


async def test_depth_gauge_follows_the_queue() -> None:
    m = Metrics()
    q: WorkQueue[str] = WorkQueue(metrics=m)
    q.add("a")
    q.add("b")
    assert m.value("podgrouper_workqueue_depth") == 2
    await q.get()
    assert m.value("podgrouper_workqueue_depth") == 1


async def test_background_keys_wait_behind_new_work_and_are_promoted_by_it() -> None:
    q: WorkQueue[str] = WorkQueue()
    for k in ("r1", "r2", "r3"):
        q.add(k, background=True)  # re-checks after a restart
    q.add("new")
    q.add("r2")  # new work for a workload already waiting in the background: it moves to the front
    q.add("r3", background=True)  # a second re-check changes nothing
    assert len(q) == 4
    assert [await q.get() for _ in range(4)] == ["new", "r2", "r1", "r3"]
    assert len(q) == 0
    for k in ("new", "r2", "r1", "r3"):
        q.done(k)
    assert len(q) == 0, "a promoted key is handed out once, not again from its old place"


async def test_background_key_added_while_processing_comes_back_once() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a", background=True)
    assert await q.get() == "a"
    q.add("a", background=True)
    q.done("a")
    assert len(q) == 1
    assert await q.get() == "a"
    q.done("a")
    q.add("b", background=True)
    q.add("b")
    assert await q.get() == "b"
    q.done("b")
    assert len(q) == 0


async def test_a_blocked_getter_wakes_for_a_background_key() -> None:
    q: WorkQueue[str] = WorkQueue()
    getter = asyncio.ensure_future(q.get())
    await asyncio.sleep(0)
    q.add("x", background=True)
    assert await asyncio.wait_for(getter, 1) == "x"


async def test_busy_since_marks_when_work_arrived_to_an_idle_queue() -> None:
    """Liveness counts a stall from here: set by the first add to an idle queue, kept while any key waits
    or is processed (re-adds while processing included), cleared when the last key is done."""
    q: WorkQueue[str] = WorkQueue()
    assert q.busy_since is None
    q.add("a")
    first = q.busy_since
    assert first is not None
    q.add("b")
    assert q.busy_since == first
    a = await q.get()
    b = await q.get()
    assert q.busy_since == first  # nothing queued, two processing: still busy
    q.add(a)  # re-added while processing
    q.done(a)  # goes back in the queue
    assert q.busy_since == first
    q.done(b)
    assert q.busy_since == first  # a still waits
    q.done(await q.get())
    assert q.busy_since is None
    await asyncio.sleep(0.01)
    q.add("c", background=True)
    assert q.busy_since is not None and q.busy_since > first
    q.done(await q.get())
    assert q.busy_since is None


async def test_busy_since_is_set_by_a_delayed_add_when_it_fires() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add_after("a", 0.01)
    assert q.busy_since is None  # waiting for its time is not work yet
    assert await asyncio.wait_for(q.get(), 2) == "a"
    assert q.busy_since is not None
    q.done("a")
    assert q.busy_since is None
