"""Leader election on its own client, against the fake API, on a hand-driven clock (devtools/clock.py): a
hung API server ends leadership at the renew deadline — before another replica may take the lease — however
long the client's request timeout; leadership comes back after; a released lease is taken within a retry
period; a gated candidate starts a dead holder's clock early but takes the lease only through its gate.
Deadlines are asserted on the elector's clock, never on the wall clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from devtools.clock import ManualClock
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


def _elector(client: KubeClient, clock: ManualClock, identity: str, **timing: float) -> LeaderElector:
    return LeaderElector(client, identity=identity, clock=clock, sleep=clock.sleep, **timing)  # type: ignore[arg-type]


async def test_hung_api_server_ends_leadership_at_the_renew_deadline(api: FakeApi) -> None:


    clock = ManualClock()
    client = KubeClient(api.config(), qps=0, request_timeout=600)  # the elector must not rely on it
    events: list[tuple[str, float]] = []
    le = LeaderElector(
        client, identity="a", lease_duration=15, renew_deadline=10, retry_period=2, clock=clock, sleep=clock.sleep,
        on_started_leading=lambda: events.append(("start", clock())),
        on_stopped_leading=lambda: events.append(("stop", clock())),
    )
    task = asyncio.create_task(le.run())
    try:
        await until(le.is_leader)
        await clock.parked(1)  # leading, waiting a retry period to renew
        assert api.leases["kai-pod-grouper"]["spec"]["holderIdentity"] == "a"
        last_renew = clock()
        api.hang = True
        await clock.advance(2)  # the renewal starts and hangs
        await clock.advance(7.9)
        assert le.is_leader(), "still leading inside the renew deadline"
        assert [e for e, _ in events] == ["start"]
        await clock.advance(0.1, tasks=0)  # the renew deadline
        assert not le.is_leader(), "is_leader() is False at the renew deadline"
        await until(lambda: any(e == "stop" for e, _ in events))
        stop_at = next(t for e, t in events if e == "stop")
        assert stop_at == last_renew + 10, "the hung renewal is abandoned at the deadline, not at a request timeout"
        assert stop_at < last_renew + 15, "the workers stop before another replica may take the lease"
        api.hang = False  # the hung acquire attempt is answered: the lease is still ours
        await until(le.is_leader)
        assert [e for e, _ in events] == ["start", "stop", "start"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await le.release()
        await client.close()
    assert api.leases["kai-pod-grouper"]["spec"]["holderIdentity"] == "", "released on shutdown"


async def test_a_standby_takes_over_a_released_lease_within_a_retry_period(api: FakeApi) -> None:


    clock = ManualClock()
    ca, cb = KubeClient(api.config(), qps=0), KubeClient(api.config(), qps=0)
    a = _elector(ca, clock, "a", lease_duration=5, renew_deadline=3, retry_period=0.1)
    b = _elector(cb, clock, "b", lease_duration=5, renew_deadline=3, retry_period=0.1)
    ta = asyncio.create_task(a.run())
    tb: asyncio.Task[None] | None = None
    try:
        await until(a.is_leader)
        await clock.parked(1)
        tb = asyncio.create_task(b.run())
        await clock.parked(2)
        await clock.advance(3, tasks=2)  # a renews every 0.1 s; b keeps trying
        assert a.is_leader() and not b.is_leader(), "never two leaders"
        ta.cancel()
        await asyncio.gather(ta, return_exceptions=True)
        await a.release()
        released = clock()
        await clock.advance(0.1 * 1.2)  # one retry period with its largest jitter
        await until(b.is_leader)
        assert clock() == released + 0.1 * 1.2, "taken within a retry period, not a lease duration"
        assert not a.is_leader()
    finally:
        for t in (ta, tb):
            if t is not None:
                t.cancel()
                await asyncio.gather(t, return_exceptions=True)
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
    clock = ManualClock()
    client = KubeClient(api.config(), qps=0)
    le = _elector(client, clock, "new", lease_duration=2, renew_deadline=1.2, retry_period=0.1)
    le.gate.clear()
    task = asyncio.create_task(le.run())
    try:
        await clock.parked(1)  # read the lease once, waiting for the gate or a retry period
        await clock.advance(2.5)  # the caches take longer than the lease's duration
        assert not le.is_leader()
        assert api.leases["kai-pod-grouper"]["spec"]["holderIdentity"] == "crashed", "not taken before the gate"
        assert api.leases["kai-pod-grouper"]["metadata"]["resourceVersion"] == str(api.rv), "not even written"
        opened = clock()
        le.gate.set()
        await until(le.is_leader)
        # at once, not a lease duration (2 s) after the gate: its clock started when the record was first read
        assert clock() == opened
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


    clock = ManualClock()
    ca, cb = KubeClient(api.config(), qps=0), KubeClient(api.config(), qps=0)
    a = _elector(ca, clock, "a", lease_duration=1, renew_deadline=0.6, retry_period=0.1)
    b = _elector(cb, clock, "b", lease_duration=1, renew_deadline=0.6, retry_period=0.1)
    b.gate.clear()
    ta = asyncio.create_task(a.run())
    tb = asyncio.create_task(b.run())
    try:
        await until(a.is_leader)
        await clock.parked(2)
        b.gate.set()
        await clock.parked(2)
        await clock.advance(1.5, tasks=2)  # longer than the lease's duration: a renews, b must not take over
        assert a.is_leader() and not b.is_leader()
        b.gate.clear()
        ta.cancel()
        await asyncio.gather(ta, return_exceptions=True)
        await a.release()
        await clock.parked(1)
        await clock.advance(0.5)
        assert not b.is_leader(), "a released lease is not taken before the gate opens"
        opened = clock()
        b.gate.set()
        await until(b.is_leader)
        assert clock() == opened, "taken the moment the gate opens"
    finally:
        for t in (ta, tb):
            t.cancel()
        await asyncio.gather(ta, tb, return_exceptions=True)
        await ca.close()
        await cb.close()
