"""Leader election on its own client, against the fake API: a hung API server ends leadership within the
renew deadline (request timeout below it), writes stop at once, and leadership comes back after."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from devtools.fakeapi import FakeApi, until
from grouper.kube.leader import LeaderElector
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


def _dead_holders_lease(api: FakeApi, duration: int) -> None:
    """The lease as a crashed leader left it: held, never to be renewed again."""
    api.rv += 1
    api.leases["kai-pod-grouper"] = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "kai-pod-grouper", "namespace": "kai-system", "resourceVersion": str(api.rv)},
        "spec": {"holderIdentity": "crashed", "leaseDurationSeconds": duration,
                 "renewTime": "2026-12-05T00:00:00.000000Z", "leaseTransitions": 3},
    }


async def test_a_gated_candidate_starts_the_dead_holders_clock_but_takes_the_lease_only_through_the_gate(
    api: FakeApi,
) -> None:
    """A restart after a crash: the lease's duration runs while the caches fill (the gate closed) — the
    candidate leads as soon as the gate opens once the record stayed unchanged that long since it first
    read it — and nothing is written to the lease before the gate opens."""
    _dead_holders_lease(api, duration=2)
    client = KubeClient(api.config(), qps=0)
    le = LeaderElector(client, identity="new", lease_duration=2, renew_deadline=1.2, retry_period=0.1)
    le.gate.clear()
    task = asyncio.create_task(le.run())
    try:
        started = time.monotonic()
        await asyncio.sleep(2.5)  # the caches take longer than the lease's duration
        assert not le.is_leader()
        assert api.leases["kai-pod-grouper"]["spec"]["holderIdentity"] == "crashed", "not taken before the gate"
        assert api.leases["kai-pod-grouper"]["metadata"]["resourceVersion"] == str(api.rv), "not even written"
        opened = time.monotonic()
        le.gate.set()
        await until(le.is_leader, timeout=5)
        # at once (a request or two), not a lease duration (2 s) after the gate: its clock started at `started`
        assert time.monotonic() - opened < 1.0, time.monotonic() - started
        assert api.leases["kai-pod-grouper"]["spec"]["holderIdentity"] == "new"
        assert api.leases["kai-pod-grouper"]["spec"]["leaseTransitions"] == 4
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()


async def test_a_gated_candidate_waits_out_a_live_holder_and_a_released_lease_only_for_its_gate(
    api: FakeApi,
) -> None:
    """The gate never shortens a live holder's term (its renewals restart the clock), and a lease released
    on a clean shutdown is taken the moment the gate opens, not a retry period later."""
    ca, cb = KubeClient(api.config(), qps=0), KubeClient(api.config(), qps=0)
    a = LeaderElector(ca, identity="a", lease_duration=1, renew_deadline=0.6, retry_period=0.1)
    b = LeaderElector(cb, identity="b", lease_duration=1, renew_deadline=0.6, retry_period=0.1)
    b.gate.clear()
    ta = asyncio.create_task(a.run())
    tb = asyncio.create_task(b.run())
    try:
        await until(a.is_leader)
        b.gate.set()
        await asyncio.sleep(1.5)  # longer than the lease's duration: a renews, b must not take over
        assert a.is_leader() and not b.is_leader()
        b.gate.clear()
        ta.cancel()
        await asyncio.gather(ta, return_exceptions=True)
        await a.release()
        await asyncio.sleep(0.5)
        assert not b.is_leader(), "a released lease is not taken before the gate opens"
        opened = time.monotonic()
        b.gate.set()
        await until(b.is_leader, timeout=5)
        assert time.monotonic() - opened < 0.5
    finally:
        for t in (ta, tb):
            t.cancel()
        await asyncio.gather(ta, tb, return_exceptions=True)
        await ca.close()
        await cb.close()
