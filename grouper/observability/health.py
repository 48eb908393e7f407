"""What the probes judge: one snapshot of the service's health inputs (filled by the controller)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

Role = Literal["leader", "standby", "single"]


@dataclass(frozen=True)
class HealthSnapshot:
    """Inputs of ``/healthz`` and ``/readyz``. Times are ``time.monotonic()`` values.

    ``worker_heartbeat``: the last time a queue worker finished a key (None before the first);
    ``busy_since``: when the work queue last went from idle to having work (None while idle).
    ``fatal``: set when the service can no longer work (liveness fails with it).
    ``informers``: required informer name -> healthy (synced and watching); ``informer_messages``: name
    -> what it is doing in words; ``informer_errors``: name -> why it gave up.
    ``last_api_contact``: the last successful answer from the API server (the dedicated probe, the
    watches, any request); ``api_error``: the last failure of the probe, while failing.
    ``webhook``: the admission webhook's address when it is configured ("" when it is not);
    ``webhook_serving``: whether it accepts connections now.
    ``stopping``: the service is shutting down (on SIGTERM).
    """

    role: Role
    started: bool = True
    fatal: str | None = None
    worker_heartbeat: float | None = None
    busy_since: float | None = None
    queue_depth: int = 0
    processing: int = 0
    informers: dict[str, bool] = field(default_factory=dict)
    informer_messages: dict[str, str] = field(default_factory=dict)
    informer_errors: dict[str, str] = field(default_factory=dict)
    last_api_contact: float | None = None
    api_error: str | None = None
    webhook: str = ""
    webhook_serving: bool = False
    stopping: bool = False
    started_at: float = field(default_factory=time.monotonic)
    now: float = field(default_factory=time.monotonic)

    @property
    def synced(self) -> bool:
        """Started, and every required informer synced and watching (the caches' part of readiness)."""
        return self.started and bool(self.informers) and all(self.informers.values())


__all__ = ["HealthSnapshot", "Role"]
