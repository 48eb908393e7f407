"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go / controller-runtime timing.

- Lease duration 15 s, renew deadline 10 s, retry period 2 s.
- A candidate takes the lease when it is free (no holder — released) or when the record it last saw
  has not changed for a full lease duration, measured on *our* clock from when we observed it (like
  client-go: no trust in other machines' clocks).
- The leader renews every retry period. :meth:`is_leader` turns False as soon as no renewal succeeded
  for ``renew_deadline`` — before any other candidate may take over (15 s) — so writes stop in time even
  when the API server is unreachable.
- On clean shutdown the lease is released (holder cleared, duration 1 s) so a standby takes over at once.
- A renewal that hangs is abandoned at the renew deadline (client-go's renew context has that timeout), so
  leadership ends on time whatever the client's request timeout.
- Time comes from ``clock`` and ``sleep`` (injected; ``time.monotonic`` and ``asyncio.sleep`` by default):
  the tests drive them by hand and assert deadlines on that clock, never on the wall clock.
- ``gate``: an event, open unless the caller closes it until this replica can lead (the service closes it
  at start and opens it when its caches are complete). While it is closed the candidate only *reads* the
  lease every retry period: a replica that cannot sync never holds it, yet the clock of a dead holder's
  record starts at process start — after a crash the lease's 15 s run while the caches fill instead of
  after them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from grouper.kube.discovery import WELL_KNOWN
from grouper.kube.transport import ApiError, KubeClient
from grouper.model.objects import GVK
from grouper.observability.metrics import Metrics

log = logging.getLogger(__name__)

LEASE = WELL_KNOWN[GVK("coordination.k8s.io", "v1", "Lease")]
Callback = Callable[[], Awaitable[None] | None]


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        *,
        name: str = "kai-pod-grouper",
        namespace: str = "kai-system",
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        metrics: Metrics | None = None,
        on_started_leading: Callback | None = None,
        on_stopped_leading: Callback | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._clock, self._sleep = clock, sleep
        self.client = client
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_duration, self.renew_deadline, self.retry_period = (
            lease_duration,
            renew_deadline,
            retry_period,
        )
        self.metrics = metrics
        self.on_started_leading, self.on_stopped_leading = on_started_leading, on_stopped_leading
        self._leading = False
        self._taken = False
        self._last_renew = 0.0
        self._observed: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._rv = ""
        self.transitions = 0  # times this instance became leader
        self.gate = asyncio.Event()  # campaign only while set (module docstring); open unless a caller closes it
        self.gate.set()

    def is_leader(self) -> bool:
        return self._leading and not self._taken and self._clock() - self._last_renew < self.renew_deadline

    @property
    def holder(self) -> str:
        return str((self._observed or {}).get("holderIdentity") or "")

    async def run(self) -> None:
        """Campaign, lead, and on losing the lease go back to campaigning. Cancel to stop."""
        try:
            while True:
                await self._acquire()
                await self._set_leading(True)
                await self._renew_until_lost()
                await self._set_leading(False)
        finally:
            if self._leading:
                await self._set_leading(False)

    async def _acquire(self) -> None:
        while True:
            if not self.gate.is_set():
                await self._observe()
                await self._first(self.gate.wait(), self.retry_period)  # wake at once when the gate opens
                continue
            if await self._try_acquire_or_renew():
                log.info("acquired lease %s/%s", self.namespace, self.name, extra={"identity": self.identity})
                return
            await self._sleep(self.retry_period * random.uniform(1.0, 1.2))

    async def _first(self, work: Awaitable[Any], seconds: float) -> bool:
        """Run ``work`` for at most ``seconds`` on our clock; True when it finished (it is cancelled else)."""
        task, timer = asyncio.ensure_future(work), asyncio.ensure_future(self._sleep(max(0.0, seconds)))
        try:
            await asyncio.wait((task, timer), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (task, timer):
                t.cancel()
            await asyncio.gather(task, timer, return_exceptions=True)
        if task.cancelled():
            return False
        if (error := task.exception()) is not None:
            raise error  # not ours to swallow: the same as awaiting the work directly
        return True

    async def _observe(self) -> None:
        """Read the lease without taking it: a record first seen now is free once it stays unchanged for
        its duration, however long this replica still needs before it may lead."""
        with contextlib.suppress(ApiError):
            await self._read(self._clock())

    async def _read(self, attempt_at: float) -> dict[str, Any]:
        """GET the lease and note when its record changed as this replica saw it (client-go's clock: no
        trust in the holder's timestamps). Raises ApiError (a not-found one quietly)."""
        try:
            lease = await self.client.get(LEASE.path(self.namespace, self.name))
        except ApiError as e:
            if not e.not_found:
                log.warning("cannot read lease %s/%s: %s", self.namespace, self.name, e)
            raise
        spec = lease.get("spec") or {}
        if spec != self._observed:
            self._observed, self._observed_at = spec, attempt_at
        return lease

    async def _renew_until_lost(self) -> None:
        while True:
            await self._sleep(self.retry_period)
            deadline = self._last_renew + self.renew_deadline
            while not await self._renewed_by(deadline):
                if self._taken:
                    return
                if self._clock() >= deadline:
                    log.warning(
                        "failed to renew lease %s/%s within %.0fs; stopping writes",
                        self.namespace,
                        self.name,
                        self.renew_deadline,
                    )
                    return
                await self._sleep(min(self.retry_period / 2, max(0.0, deadline - self._clock())))

    async def _renewed_by(self, deadline: float) -> bool:
        """One renewal, abandoned at ``deadline`` (a hung API server must not keep us leading past it)."""
        renewed: list[bool] = []

        async def attempt() -> None:
            renewed.append(await self._try_acquire_or_renew())

        return await self._first(attempt(), deadline - self._clock()) and renewed == [True]

    async def _set_leading(self, leading: bool) -> None:
        if self._leading == leading:
            return
        self._leading = leading
        self._taken = False
        if self.metrics is not None:
            self.metrics.leader.set(1 if leading else 0)
        if leading:
            self.transitions += 1
        cb = self.on_started_leading if leading else self.on_stopped_leading
        if cb is not None:
            res = cb()
            if res is not None:
                await res

    def _spec(self, old: dict[str, Any] | None) -> dict[str, Any]:
        now = _micro_time()
        old = old or {}
        mine = old.get("holderIdentity") == self.identity
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": old.get("acquireTime") if mine and old.get("acquireTime") else now,
            "renewTime": now,
            "leaseTransitions": int(old.get("leaseTransitions") or 0) + (0 if mine else 1),
        }

    async def _try_acquire_or_renew(self) -> bool:
        attempt_at = self._clock()
        try:
            lease = await self._read(attempt_at)
        except ApiError as e:
            if not e.not_found:
                return False
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {**self._spec(None), "leaseTransitions": 0},
            }
            try:
                created = await self.client.create(LEASE.path(self.namespace), body)
            except ApiError as e2:
                log.debug("cannot create lease: %s", e2)
                return False
            self._remember(created, attempt_at)
            self._last_renew = attempt_at
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and attempt_at < self._observed_at + duration:
            if self._leading:
                log.warning("lease %s/%s taken by %s", self.namespace, self.name, holder)
                self._taken = True  # is_leader() is False right away; run() notices on return
            return False
        lease["spec"] = self._spec(spec)
        try:
            updated = await self.client.replace(LEASE.path(self.namespace, self.name), lease)
        except ApiError as e:
            log.debug("cannot update lease: %s", e)
            return False
        self._remember(updated, attempt_at)
        self._last_renew = attempt_at
        return True

    def _remember(self, lease: Any, at: float) -> None:
        if isinstance(lease, dict):
            self._observed, self._observed_at = lease.get("spec") or {}, at
            self._rv = str((lease.get("metadata") or {}).get("resourceVersion") or "")

    async def release(self) -> None:
        """Give the lease up (if held) so a standby need not wait for it to expire."""
        was_leading = self._leading
        if was_leading:
            await self._set_leading(False)
        if not was_leading and self.holder != self.identity:
            return
        with contextlib.suppress(ApiError):
            lease = await self.client.get(LEASE.path(self.namespace, self.name))
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            now = _micro_time()
            lease["spec"] = {
                **lease["spec"],
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "renewTime": now,
                "acquireTime": now,
            }
            await self.client.replace(LEASE.path(self.namespace, self.name), lease)
            log.info("released lease %s/%s", self.namespace, self.name)
