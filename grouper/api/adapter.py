"""Health inputs and the live reader, derived from the running controller read through :class:`StateReader`.

Two inputs are read from explicit attributes when the controller provides them, and otherwise derived
(sampled on every probe) from what it already exposes:

- worker progress: ``controller.last_progress`` (monotonic time of the last finished reconcile), else the
  moment ``podgrouper_reconcile_duration_seconds_count`` last changed;
- API server contact: ``controller.client.last_success`` (monotonic time of the last 2xx answer or watch
  line), else the moment the count of 2xx API requests or any informer's resourceVersion (watch events and
  bookmarks advance it) last changed.
"""

from __future__ import annotations

import time
from typing import Any

from grouper.api.state import HealthSnapshot, LiveReader, Role, StateReader
from grouper.model.objects import GVK, Obj

REQUIRED_KINDS = (GVK("", "v1", "Pod"), GVK("scheduling.run.ai", "v2alpha2", "PodGroup"))


class _Changes:
    """Remembers when a sampled value last changed."""

    def __init__(self) -> None:
        self.value: Any = None
        self.changed_at: float | None = None

    def observe(self, value: Any, now: float, *, seen_before: bool) -> float | None:
        """``seen_before``: on the first sample, whether ``value`` proves the event happened already."""
        if value != self.value:
            if self.value is not None or seen_before:
                self.changed_at = now
            self.value = value
        return self.changed_at


class ControllerHealth:
    """The default :class:`~grouper.api.state.HealthSource`: reads ``state.controller`` (None while starting)."""

    def __init__(self, state: StateReader) -> None:
        self.state = state
        self.created = time.monotonic()
        self._progress = _Changes()
        self._contact = _Changes()

    def _role(self) -> Role:
        c = self.state.controller
        leader = c.leader if c is not None else None
        if leader is None:
            elect = bool(getattr(self.state.settings, "leader_elect", False))
            return "standby" if elect else "single"
        return "leader" if leader.is_leader() else "standby"

    def _ok_requests(self) -> float:
        total = 0.0
        for metric in self.state.registry().collect():
            if metric.name != "podgrouper_api_requests":
                continue
            for s in metric.samples:
                if s.name.endswith("_total") and str(s.labels.get("code", "")).startswith("2"):
                    total += s.value
        return total

    def __call__(self) -> HealthSnapshot:
        now = time.monotonic()
        st = self.state
        c = st.controller
        ok_requests = self._ok_requests()
        contact: float | None
        if c is None:
            contact = self._contact.observe((ok_requests, ()), now, seen_before=ok_requests > 0)
            return HealthSnapshot(role=self._role(), started=False, fatal=st.fatal, last_api_contact=contact,
                                  started_at=self.created, now=now)
        informers: dict[str, bool] = {}
        errors: dict[str, str] = {}
        for gvk in REQUIRED_KINDS:
            inf = c.cache.informer(gvk)
            informers[str(gvk)] = inf is not None and inf.synced.is_set() and inf.running
            if inf is not None and inf.error is not None:
                errors[str(gvk)] = str(inf.error)
        heartbeat: float | None = getattr(c, "last_progress", None)
        if heartbeat is None:
            count = st.registry().get_sample_value("podgrouper_reconcile_duration_seconds_count") or 0.0
            heartbeat = self._progress.observe(count, now, seen_before=count > 0)
        contact = getattr(c.client, "last_success", None)
        if contact is None:
            rvs = tuple(inf.resource_version for inf in c.cache.informers())
            contact = self._contact.observe((ok_requests, rvs), now, seen_before=ok_requests > 0 or any(rvs))
        return HealthSnapshot(
            role=self._role(),
            started=True,
            fatal=st.fatal,
            worker_heartbeat=heartbeat,
            queue_depth=len(c.queue),
            processing=len(c.queue.processing),
            informers=informers,
            informer_errors=errors,
            last_api_contact=contact,
            started_at=c.started_at or self.created,
            now=now,
        )


def controller_live_reader(state: StateReader) -> LiveReader | None:
    """``await read(api_version, kind, namespace, name)`` through the controller's client (None before start)."""
    if state.controller is None:
        return None
    controller = state.controller

    async def read(api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        res = await controller.discovery.resolve(GVK.from_api_version(api_version, kind))
        if res is None:
            return None
        return await controller.client.get_object(res.path(namespace, name))

    return read


__all__ = ["ControllerHealth", "controller_live_reader"]
