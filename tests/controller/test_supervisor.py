"""Supervised tasks: a crash is logged, counted and restarted; a task that keeps crashing is fatal."""

from __future__ import annotations

import asyncio

import pytest

from grouper.observability.metrics import Metrics
from grouper.runtime.supervisor import Supervisor


async def test_a_crash_restarts_the_task_and_is_counted() -> None:
    metrics = Metrics()
    sup = Supervisor(metrics, backoff=(0.01, 0.02))
    runs = 0
    done = asyncio.Event()

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs < 3:
            raise RuntimeError("boom")
        done.set()
        await asyncio.sleep(3600)

    sup.spawn("informer:pods", flaky)
    await asyncio.wait_for(done.wait(), 5)
    assert runs == 3 and sup.fatal is None
    assert sup.tasks["informer:pods"].restarts == 2
    assert sup.tasks["informer:pods"].last_error == "RuntimeError: boom"
    assert metrics.value("podgrouper_task_restarts_total", {"task": "informer:pods"}) == 2
    assert sup.is_running("informer:pods")
    await sup.stop()
    assert not sup.is_running("informer:pods")


async def test_a_task_that_keeps_crashing_is_fatal() -> None:
    fatal: list[str] = []
    sup = Supervisor(Metrics(), max_failures=3, window=60, backoff=(0.001, 0.001), on_fatal=fatal.append)

    async def broken() -> None:
        raise ValueError("always")

    task = sup.spawn("leader-election", broken)
    await asyncio.wait_for(task, 5)
    assert sup.fatal is not None and "leader-election crashed 3 times" in sup.fatal and "always" in sup.fatal
    assert fatal == [sup.fatal]


async def test_a_task_that_returns_is_done_not_restarted() -> None:
    sup = Supervisor(Metrics())
    runs = 0

    async def once() -> None:
        nonlocal runs
        runs += 1

    await asyncio.wait_for(sup.spawn("worker", once), 5)
    await asyncio.sleep(0.05)
    assert runs == 1 and sup.tasks["worker"].restarts == 0


async def test_cancel_stops_without_counting() -> None:
    metrics = Metrics()
    sup = Supervisor(metrics)
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.sleep(3600)

    sup.spawn("reconcile-worker-0", forever)
    await started.wait()
    await sup.stop("reconcile-worker-0")
    assert sup.tasks["reconcile-worker-0"].restarts == 0
    assert metrics.value("podgrouper_task_restarts_total", {"task": "reconcile-worker"}) == 0


@pytest.mark.parametrize(("name", "label"), [("informer:pods.v1@ns", "informer:pods.v1"),
                                             ("reconcile-worker-7", "reconcile-worker"), ("http", "http")])
def test_metric_labels_are_bounded(name: str, label: str) -> None:
    from grouper.runtime.supervisor import _task_label

    assert _task_label(name) == label
