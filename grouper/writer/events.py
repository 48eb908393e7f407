"""Warning Events (core/v1, reason ``PodGrouperWarning``, source component ``pod-grouper``).

A workload that keeps failing is retried with back-off for as long as it exists, so events are
de-duplicated and rate-limited per (object, reason) like client-go's correlator:

- the same message again within ``aggregate_window`` only bumps the existing Event's ``count`` —
  and that PATCH is sent at most once per ``patch_interval`` (counts in between accumulate locally);
- a *different* message starts a new Event, but each (object, reason) has a token bucket
  (``burst`` Events, one more per ``refill`` seconds); beyond it messages are dropped (and logged).

A failure that persists (a PodGroup the API server keeps refusing, a pod that cannot be marked) is
reported with :meth:`EventRecorder.report`: **one** Event per (object, cause) while the same message
stands, however often the workload is reconciled; a new message for that cause is a new Event, and
:meth:`EventRecorder.clear` (the write succeeded) lets the next failure be reported again.

Event writes never raise: a failure to report a failure must not fail the reconcile.

:meth:`EventRecorder.recent` answers "what did the grouper say about this object lately" from the series it
keeps anyway (bounded like them), so the web view shows a workload's recent Events without the grouper
holding a right to list Events: only those this replica sent (a standby sends none).
"""

from __future__ import annotations

import collections
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from grouper.kube.discovery import WELL_KNOWN
from grouper.kube.transport import ApiError, KubeClient
from grouper.model import objects as o
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import OwnerRef

log = logging.getLogger(__name__)

REASON = "PodGrouperWarning"
COMPONENT = "pod-grouper"
EVENT_RESOURCE = WELL_KNOWN[GVK("", "v1", "Event")]


@dataclass
class InvolvedObject:
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    @classmethod
    def of_owner(cls, ref: OwnerRef, namespace: str) -> InvolvedObject:
        """The object an owner reference names (a workload, in the namespace of what it owns)."""
        return cls(ref.api_version, ref.kind, namespace, ref.name, ref.uid)

    @classmethod
    def of_pod(cls, pod: Obj) -> InvolvedObject:
        return cls("v1", "Pod", o.namespace(pod), o.name(pod), o.uid(pod))

    def to_dict(self) -> dict[str, str]:
        out = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.uid:
            out["uid"] = self.uid
        return out

    @property
    def key(self) -> str:
        return self.uid or f"{self.kind}/{self.namespace}/{self.name}"


@dataclass
class _Series:
    message: str
    event_name: str
    namespace: str
    first: str
    count: int
    sent_count: int
    last_sent: float
    last_seen: float
    tokens: float
    stamp: float
    event_type: str = "Warning"
    last: str = ""  # RFC 3339 time the message was last seen


@dataclass(frozen=True)
class RecentEvent:
    """An Event this recorder sent (or counted) about an object: what the web view shows."""

    reason: str
    type: str
    message: str
    first: str
    last: str
    count: int


def _now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    def __init__(
        self,
        client: KubeClient,
        *,
        can_write: Callable[[], bool] = lambda: True,
        host: str | None = None,
        aggregate_window: float = 600.0,
        patch_interval: float = 60.0,
        burst: int = 5,
        refill: float = 60.0,
        max_tracked: int = 4096,
    ) -> None:
        self.client = client
        self.can_write = can_write
        self.host = host or socket.gethostname()
        self.aggregate_window, self.patch_interval = aggregate_window, patch_interval
        self.burst, self.refill = burst, refill
        self.max_tracked = max_tracked
        self._series: collections.OrderedDict[tuple[str, str], _Series] = collections.OrderedDict()
        # (object, cause) -> the message reported for it, while that failure stands (LRU, bounded)
        self._standing: collections.OrderedDict[tuple[str, str], str] = collections.OrderedDict()
        self.sent = 0  # Events created or patched (for tests and logs)
        self.suppressed = 0

    async def warn(self, obj: InvolvedObject, message: str, reason: str = REASON, *, event_type: str = "Warning") -> None:
        """Report ``message`` about ``obj`` as a Warning Event (``event_type`` ``Normal`` for news that is no
        failure, e.g. a gang admitted), subject to de-duplication and rate limits."""
        if not self.can_write():
            return
        key = (obj.key, reason)
        now = time.monotonic()
        s = self._series.get(key)
        if s is not None:
            self._series.move_to_end(key)
            s.tokens = min(self.burst, s.tokens + (now - s.stamp) / self.refill)
            s.stamp = now
            if s.message == message and now - s.last_seen < self.aggregate_window:
                s.count += 1
                s.last_seen = now
                s.last = _now_rfc3339()
                if now - s.last_sent >= self.patch_interval:
                    await self._patch_count(s)
                else:
                    self.suppressed += 1
                return
            if s.tokens < 1:
                self.suppressed += 1
                log.debug("event suppressed (rate limit)", extra={"object": obj.key, "reason": reason})
                return
            s.tokens -= 1
        else:
            s = _Series("", "", "", "", 0, 0, 0.0, 0.0, float(self.burst - 1), now)
        await self._create(obj, reason, message, s, now, event_type)
        self._series[key] = s
        self._series.move_to_end(key)
        while len(self._series) > self.max_tracked:
            self._series.popitem(last=False)

    def recent(self, obj_key: str, limit: int = 10) -> list[RecentEvent]:
        """The newest ``limit`` Events this recorder sent about the object (``InvolvedObject.key``: its uid),
        newest first, one per (object, reason) with its count."""
        mine = [(s.last_seen, reason, s) for (key, reason), s in self._series.items() if key == obj_key and s.sent_count]
        mine.sort(key=lambda t: t[0], reverse=True)  # our clock, finer than the Events' seconds
        return [RecentEvent(reason, s.event_type, s.message, s.first, s.last or s.first, s.count)
                for _, reason, s in mine[:limit]]

    async def report(self, obj: InvolvedObject, cause: str, message: str) -> bool:
        """Report a standing failure of ``obj`` (``cause``: what failed, e.g. ``PodGroup/<name>``) once:
        nothing while the same message stands for that cause. True when an Event was sent for it."""
        if not self.can_write():
            return False
        key = (obj.key, cause)
        if self._standing.get(key) == message:
            self._standing.move_to_end(key)
            return False
        self._standing[key] = message
        self._standing.move_to_end(key)
        while len(self._standing) > self.max_tracked:
            self._standing.popitem(last=False)
        await self.warn(obj, message)
        return True

    def clear(self, obj: InvolvedObject, cause: str) -> None:
        """The failure of ``obj`` for ``cause`` is over (the write succeeded): the next one is reported."""
        if self._standing:
            self._standing.pop((obj.key, cause), None)

    async def _create(
        self, obj: InvolvedObject, reason: str, message: str, s: _Series, now: float, event_type: str = "Warning"
    ) -> None:
        ts = _now_rfc3339()
        namespace = obj.namespace or "default"
        name = f"{obj.name}.{time.time_ns():x}"
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": obj.to_dict(),
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "source": {"component": COMPONENT, "host": self.host},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.host,
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
        }
        s.message, s.event_name, s.namespace, s.first, s.last, s.event_type = message, name, namespace, ts, ts, event_type
        s.count, s.sent_count = 1, 0
        s.last_sent = s.last_seen = now
        try:
            await self.client.create(EVENT_RESOURCE.path(namespace), body)
            s.sent_count = 1
            self.sent += 1
        except ApiError as e:
            log.warning("cannot record event on %s/%s: %s", obj.kind, obj.name, e)

    async def _patch_count(self, s: _Series) -> None:
        s.last_sent = time.monotonic()
        try:
            await self.client.merge_patch(
                EVENT_RESOURCE.path(s.namespace, s.event_name),
                {"count": s.count, "lastTimestamp": _now_rfc3339()},
            )
            s.sent_count = s.count
            self.sent += 1
        except ApiError as e:
            log.debug("cannot update event %s: %s", s.event_name, e)
