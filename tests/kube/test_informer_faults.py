"""The informer under faults, against the in-process fake API (deterministic timing): health follows the
watch, an outage forces a re-list before health returns, garbage and crashes are survived — whether the
server serves streaming lists or not."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from devtools.fakeapi import FakeApi, until
from grouper.kube.discovery import WELL_KNOWN
from grouper.kube.informer import Informer
from grouper.kube.transport import KubeClient
from grouper.model.objects import GVK
from grouper.observability.metrics import Metrics
from grouper.runtime.supervisor import Supervisor

POD = WELL_KNOWN[GVK("", "v1", "Pod")]


@pytest.fixture(params=[True, False], ids=["streaming-list", "list"])
async def api(request: pytest.FixtureRequest) -> AsyncIterator[FakeApi]:
    """A fake API server that serves streaming lists, and one that refuses them (every informer then
    falls back to paginated LISTs): the faults below must be survived the same way by both."""
    fake = FakeApi(watch_list=request.param)
    await fake.start()
    yield fake
    await fake.down()



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

        before_down = time.monotonic()
        await api.down()
        await until(lambda: "watch down" in inf.health()[1], 5)  # the informer saw its watch break
        noticed = time.monotonic()
        # the grace rule on an injected clock: healthy while the watch is down less than `grace`, not after
        assert inf.healthy(now=before_down), "a watch down for less than the grace period is a re-open"
        assert not inf.healthy(now=noticed + inf.grace), "unhealthy once the grace period has passed"
        await until(lambda: not inf.healthy(), 5)
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
        api.end_watches()  # the server ends the watch (its timeout)
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


async def test_a_large_list_is_emitted_in_chunks_that_let_the_loop_run(api: FakeApi) -> None:
    """The first LIST of many objects yields to the loop between chunks of handler calls (a probe, a
    watch or a Lease renewal runs in between), and every object is still emitted once, in order."""
    for i in range(2_000):
        api.add_pod(f"p{i:04d}")
    client = KubeClient(api.config(), qps=0)
    inf = Informer(client, POD, emit_chunk=500)
    seen: list[str] = []
    inf.add_handler(lambda etype, pod, old: seen.append(pod["metadata"]["name"]))
    ticks: list[int] = []  # how many events had been emitted each time another task got the loop

    async def other_task() -> None:
        while not inf.synced.is_set():
            ticks.append(len(seen))
            await asyncio.sleep(0)

    ticker = asyncio.create_task(other_task())
    inf.start()
    try:
        assert await inf.wait_synced(10)
        assert seen == sorted(seen) and len(seen) == 2_000 and len(set(seen)) == 2_000
        assert any(0 < n < 2_000 for n in ticks), "another task ran while the LIST's events were emitted"
        assert max(n for n in ticks if n < 2_000) >= 1_500, "it ran between the later chunks too"
    finally:
        ticker.cancel()
        await inf.stop()
        await client.close()


async def test_a_list_emission_cancelled_half_way_is_completed_by_the_next_list(api: FakeApi) -> None:
    """Stopped in the middle of emitting a LIST, the informer keeps only what its handlers saw; started
    again, its re-list emits the rest: no object is missed by the handlers, none is cached unseen."""
    for i in range(1_000):
        api.add_pod(f"p{i:04d}")
    client = KubeClient(api.config(), qps=0)
    inf = Informer(client, POD, emit_chunk=100)
    seen: set[str] = set()
    stopping: list[asyncio.Task[None]] = []

    def handler(etype: str, pod: dict, old: dict | None) -> None:
        seen.add(pod["metadata"]["name"])
        if len(seen) == 350 and not stopping:
            stopping.append(asyncio.create_task(inf.stop()))

    inf.add_handler(handler)
    inf.start()
    try:
        await until(lambda: bool(stopping) and stopping[0].done())
        assert not inf.synced.is_set()
        assert len(seen) < 1_000, "stopped before every event was emitted"
        cached = {p["metadata"]["name"] for p in inf.list()}
        assert cached == seen, "the cache holds exactly what the handlers have seen"
        inf.start()
        assert await inf.wait_synced(10)
        assert len(seen) == 1_000 and len(inf) == 1_000
        assert api.lists == 2
    finally:
        await inf.stop()
        await client.close()


async def test_a_relist_after_410_rebuilds_views_and_indexes_and_emits_only_the_differences(api: FakeApi) -> None:
    """Re-listing (views and indexes built aside in chunks, then swapped) leaves the namespace view and
    the secondary indexes exactly those of the new LIST, and emits MODIFIED / DELETED / ADDED for what changed."""
    api.add_pod("a", g="1")
    api.add_pod("b", g="1")
    api.add_pod("c", g="2")
    client = KubeClient(api.config(), qps=0)
    inf = Informer(client, POD, emit_chunk=1)
    inf.add_index("g", lambda pod: [pod["metadata"]["labels"]["g"]])
    events: list[tuple[str, str]] = []
    inf.add_handler(lambda etype, pod, old: events.append((etype, pod["metadata"]["name"])))
    inf.start()
    try:
        assert await inf.wait_synced(5)
        await until(lambda: api.watch_opens == 1)
        assert [p["metadata"]["name"] for p in inf.by_index("g", "1")] == ["a", "b"]
        events.clear()
        # changes the informer cannot see (no watch events), then the watch expires
        api.put_pod("b", {"g": "2"}, event=None)
        api.remove_pod("c")
        api.put_pod("d", {"g": "2"}, event=None)
        api.expire()
        await until(lambda: api.lists == 2 and len(events) == 3)
        assert sorted(events) == [("ADDED", "d"), ("DELETED", "c"), ("MODIFIED", "b")]
        assert [p["metadata"]["name"] for p in inf.by_index("g", "1")] == ["a"]
        assert [p["metadata"]["name"] for p in inf.by_index("g", "2")] == ["b", "d"]
        assert sorted(p["metadata"]["name"] for p in inf.list("ns")) == ["a", "b", "d"]
        assert inf.get("ns", "c") is None
    finally:
        await inf.stop()
        await client.close()
