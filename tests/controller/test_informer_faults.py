"""The informer under faults, against the in-process fake API (deterministic timing): health follows the
watch, an outage forces a re-list before health returns, garbage and crashes are survived."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest
from controller.fakeapi import FakeApi

from grouper.controller.supervisor import Supervisor
from grouper.kube.discovery import WELL_KNOWN
from grouper.kube.informer import Informer
from grouper.kube.transport import KubeClient
from grouper.model.objects import GVK
from grouper.observability.metrics import Metrics

POD = WELL_KNOWN[GVK("", "v1", "Pod")]


@pytest.fixture
async def api() -> AsyncIterator[FakeApi]:
    fake = FakeApi()
    await fake.start()
    yield fake
    await fake.down()


async def until(cond: Callable[[], bool], timeout: float = 10.0) -> float:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.02)
    return time.monotonic() - t0


async def test_health_follows_the_watch_and_an_outage_forces_a_relist(api: FakeApi) -> None:
    client = KubeClient(api.config(), qps=0)
    inf = Informer(client, POD, grace=0.5)
    sup = Supervisor(Metrics())
    inf.start(sup)
    try:
        api.add_pod("a")
        assert await inf.wait_synced(5)
        await until(lambda: api.watch_opens == 1)
        assert inf.healthy() and inf.health()[1] == "watching"
        assert api.lists == 1

        await api.down()
        took = await until(lambda: not inf.healthy(), 5)
        assert took < 2.0, "unhealthy within the grace period of losing the API server"
        ok, why = inf.health()
        assert not ok and "watch down" in why
        assert inf.get("ns", "a") is not None, "the cache is kept through an outage"

        await asyncio.sleep(0.6)  # longer than grace: an outage
        api.add_pod("b")  # created while we could not see it (no watch is open to deliver it)
        await api.up()
        await until(inf.healthy, 15)
        assert api.lists == 2, "re-listed after the outage before counting as healthy"
        assert inf.get("ns", "b") is not None, "nothing missed"
    finally:
        await inf.stop()
        await client.close()


async def test_a_watch_reopened_on_time_does_not_relist(api: FakeApi) -> None:
    client = KubeClient(api.config(), qps=0)
    inf = Informer(client, POD, grace=5.0)
    inf.start()
    try:
        assert await inf.wait_synced(5)
        await until(lambda: api.watch_opens == 1)
        for q in api.watches:  # the server ends the watch (its timeout)
            q.put_nowait(None)
        api.watches.clear()
        await until(lambda: api.watch_opens == 2)
        assert inf.healthy() and api.lists == 1
    finally:
        await inf.stop()
        await client.close()


async def test_a_garbage_watch_line_is_a_broken_stream_not_a_dead_informer(api: FakeApi) -> None:
    client = KubeClient(api.config(), qps=0)
    inf = Informer(client, POD, grace=5.0)
    inf.start()
    try:
        assert await inf.wait_synced(5)
        await until(lambda: api.watch_opens == 1)
        api.garbage()
        await until(lambda: api.watch_opens == 2)
        await asyncio.sleep(0.05)
        api.add_pod("after")
        await until(lambda: inf.get("ns", "after") is not None)
        assert inf.running
    finally:
        await inf.stop()
        await client.close()


async def test_a_crash_inside_the_loop_is_restarted_by_the_supervisor_with_a_relist(api: FakeApi) -> None:
    metrics = Metrics()
    client = KubeClient(api.config(), qps=0)
    calls = 0

    def transform(obj: dict) -> dict:
        nonlocal calls
        calls += 1
        if obj["metadata"]["name"] == "poison" and calls < 4:
            raise KeyError("a bug in the transform")
        return obj

    inf = Informer(client, POD, transform=transform, grace=5.0)
    sup = Supervisor(metrics, backoff=(0.05, 0.1))
    inf.start(sup)
    try:
        assert await inf.wait_synced(5)
        await until(lambda: api.watch_opens == 1)  # the fake does not replay events from a resourceVersion
        api.add_pod("poison")
        await until(lambda: inf.get("ns", "poison") is not None, 10)
        assert sup.tasks["informer:pods.v1"].restarts >= 1
        assert metrics.value("podgrouper_task_restarts_total", {"task": "informer:pods.v1"}) >= 1
        assert api.lists >= 2, "a restarted informer trusts nothing: it re-lists"
        assert sup.fatal is None
    finally:
        await inf.stop()
        await client.close()
