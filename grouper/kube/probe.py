"""A cheap, frequent question to the API server: is it there? (``GET /livez``, every ``period`` seconds).

Watches say nothing while nothing changes and a hung connection can stay silent for minutes, so
readiness cannot rest on them alone. The probe runs on the control-plane client (its own connection,
no client-side rate limit, short timeout — the one leader election uses), so a busy work queue never
delays it and a lost API server shows in ``/readyz`` within seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time

from grouper.kube.transport import ApiError, KubeClient

log = logging.getLogger(__name__)


class ApiProbe:
    def __init__(self, client: KubeClient, *, period: float = 3.0, path: str = "/livez") -> None:
        self.client = client
        self.period = period
        self.path = path
        self.last_ok: float | None = None
        self.last_error: str | None = None
        self.failures = 0

    async def run(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(self.period)

    async def check(self) -> bool:
        try:
            await self.client.request("GET", self.path, timeout=max(1.0, self.period))
        except ApiError as e:
            if e.status in (401, 403):  # answered: it is there (the probe path may be locked down)
                self._ok()
                return True
            self.failures += 1
            self.last_error = f"{self.path}: {e.status or ''} {e.reason}: {e.message}".strip()[:300]
            if self.failures == 1:
                log.warning("API server probe failed: %s", self.last_error)
            return False
        self._ok()
        return True

    def _ok(self) -> None:
        if self.failures:
            log.info("API server reachable again after %d failed probes", self.failures)
        self.last_ok, self.last_error, self.failures = time.monotonic(), None, 0


__all__ = ["ApiProbe"]
