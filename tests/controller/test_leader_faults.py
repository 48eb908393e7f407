"""Leader election on its own client, against the fake API: a hung API server ends leadership within the
renew deadline (request timeout below it), writes stop at once, and leadership comes back after."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from controller.fakeapi import FakeApi

from grouper.controller.leader import LeaderElector
from grouper.kube.transport import KubeClient


@pytest.fixture
async def api() -> AsyncIterator[FakeApi]:
    fake = FakeApi()
    await fake.start()
    yield fake
    fake.hang = False
    await fake.down()


async def test_hung_api_server_ends_leadership_within_the_renew_deadline(api: FakeApi) -> None:
    client = KubeClient(api.config(), qps=0, request_timeout=0.5)  # half the renew deadline, like the service
    events: list[tuple[str, float]] = []
    le = LeaderElector(
        client, identity="a", lease_duration=1.5, renew_deadline=1.0, retry_period=0.2,
        on_started_leading=lambda: events.append(("start", time.monotonic())),
        on_stopped_leading=lambda: events.append(("stop", time.monotonic())),
    )
    task = asyncio.create_task(le.run())
    try:
        while not le.is_leader():
            await asyncio.sleep(0.02)
        assert api.leases["kai-pod-grouper"]["spec"]["holderIdentity"] == "a"
        api.hang = True
        hung_at = time.monotonic()
        while le.is_leader():
            await asyncio.sleep(0.01)
        assert time.monotonic() - hung_at <= 1.0 + 0.1, "is_leader() is False by the renew deadline"
        while not any(e == "stop" for e, _ in events):
            await asyncio.sleep(0.01)
        stop_at = next(t for e, t in events if e == "stop")
        assert stop_at - hung_at < 1.5, "the workers are stopped before another replica may take the lease"
        api.hang = False
        while not le.is_leader():
            await asyncio.sleep(0.02)
        assert [e for e, _ in events] == ["start", "stop", "start"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await le.release()
        await client.close()
    assert api.leases["kai-pod-grouper"]["spec"]["holderIdentity"] == "", "released on shutdown"


async def test_a_standby_takes_over_a_released_lease_at_once(api: FakeApi) -> None:
    ca, cb = KubeClient(api.config(), qps=0), KubeClient(api.config(), qps=0)
    a = LeaderElector(ca, identity="a", lease_duration=5, renew_deadline=3, retry_period=0.1)
    b = LeaderElector(cb, identity="b", lease_duration=5, renew_deadline=3, retry_period=0.1)
    ta = asyncio.create_task(a.run())
    try:
        while not a.is_leader():
            await asyncio.sleep(0.02)
        tb = asyncio.create_task(b.run())
        await asyncio.sleep(0.3)
        assert not b.is_leader(), "never two leaders"
        ta.cancel()
        await asyncio.gather(ta, return_exceptions=True)
        released = time.monotonic()
        await a.release()
        while not b.is_leader():
            await asyncio.sleep(0.02)
        assert time.monotonic() - released < 1.0 + 0.5
        assert not a.is_leader()
        tb.cancel()
        await asyncio.gather(tb, return_exceptions=True)
    finally:
        await ca.close()
        await cb.close()
