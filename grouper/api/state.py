"""What the HTTP handlers can see of the running service. Filled by ``grouper.runtime``.

:class:`AppState` is created before the controller exists (so probes answer during start-up) and
filled in as the service starts: ``store`` at once, ``grouper`` / ``definitions`` and then ``controller``
once the caches are synced. The API reads everything through the small protocols below, which the
controller's objects satisfy; the optional fields let tests (and other embedders) supply them directly:

- :class:`DecisionSource` — ``grouper.records.decisions.DecisionStore`` (per-pod and per-PodGroup
  records, the frozen dataclasses of ``grouper.records.typed``, with their last errors);
- :class:`ObjectSource` — cache reads without I/O (``Lookups.get``; default: the controller's
  :meth:`ControllerStatus.objects`; :func:`safe_get` turns "not cached" / "forbidden" into None);
- :class:`HealthSource` — one :class:`HealthSnapshot` (default: the controller's own
  :meth:`ControllerStatus.health_snapshot`);
- :data:`LiveReader` — an async GET of one object for ``/workloads/...?live=true`` (default: the
  controller's :meth:`ControllerStatus.read_live`).

The API never writes to any of these and never blocks on the API server (except the live read).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry

from grouper.core.config import GroupingConfig
from grouper.model.objects import Obj
from grouper.observability.health import HealthSnapshot, Role
from grouper.observability.metrics import Metrics
from grouper.records.decisions import DecisionStore

if TYPE_CHECKING:
    from grouper.core.gang_state import GangState
    from grouper.core.grouping import Grouper
    from grouper.records.typed import PodGroupRecord, PodRecord



class DecisionSource(Protocol):
    """Read side of the controller's decision store. Records are read-only (the store replaces, never
    mutates them), so no call copies the store; each is indexed, none scans the cluster."""

    def pod(self, namespace: str, name: str) -> PodRecord | None: ...

    def namespaces(self) -> set[str]: ...

    def pods(self, namespace: str | None = None) -> list[PodRecord]: ...

    def pod_names_of_group(self, namespace: str, pod_group: str) -> list[str]: ...

    def pods_of_group(self, namespace: str, pod_group: str) -> list[PodRecord]: ...

    def failing_pods(self, namespace: str | None = None) -> list[PodRecord]: ...

    def pod_group(self, namespace: str, name: str) -> PodGroupRecord | None: ...

    def pod_groups(self, namespace: str | None = None) -> list[PodGroupRecord]: ...


class ObjectSource(Protocol):
    """Cached objects. May raise for kinds that are not cached or not readable; never does I/O."""

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None: ...


class GangSource(Protocol):
    """The controller's gang states (``grouper.visibility.gangs.GangTracker``): cached, no I/O."""

    clock: Callable[[], datetime]

    def get(self, namespace: str, name: str) -> GangState | None: ...

    def of_workload(self, namespace: str, uid: str) -> list[tuple[str, GangState]]: ...


class HealthSource(Protocol):
    def __call__(self) -> HealthSnapshot: ...


LiveReader = Callable[[str, str, str | None, str], Awaitable[Obj | None]]
"""``await live(api_version, kind, namespace, name)``: the object from the API server, or None (404)."""


@dataclass(frozen=True)
class HealthLimits:
    """``worker_stall``: seconds without worker progress while work waits before ``/healthz`` fails;
    ``api_contact``: seconds without an API server answer before ``/readyz`` fails (the controller probes
    the API server every few seconds on its own connection, so 15 s means three missed probes)."""

    worker_stall: float = 120.0
    api_contact: float = 15.0


class _NoObjects:
    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        return None


class ControllerStatus(Protocol):
    """The small read interface the running controller implements for the API (no other coupling)."""

    def health_snapshot(self) -> HealthSnapshot: ...

    def objects(self) -> ObjectSource: ...

    async def read_live(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None: ...

    async def resource_of(self, api_version: str, kind: str) -> tuple[str, str] | None:
        """(group, plural) of a kind from discovery; None when not served."""
        ...


def _starting() -> HealthSnapshot:
    return HealthSnapshot(role="single", started=False)


@dataclass
class AppState:
    """The service's state as the API sees it. Created before the controller exists (so probes answer
    during start-up); ``controller`` is set once the caches are synced. ``objects``, ``health`` and
    ``live`` override what the controller provides (tests and other embedders)."""

    metrics: Metrics = field(default_factory=Metrics)
    store: DecisionSource | None = None
    controller: ControllerStatus | None = None
    grouper: Grouper | None = None
    definitions: Any = None  # grouper.karta.DefinitionRegistry
    settings: Any = None  # grouper.runtime.settings.RunSettings
    fatal: str | None = None  # set when the service can no longer work (liveness fails)
    objects: ObjectSource | None = None
    health: HealthSource | None = None
    live: LiveReader | None = None
    gangs: GangSource | None = None  # default: the controller's gang tracker (its ``gangs``)
    limits: HealthLimits = field(default_factory=HealthLimits)
    auth_token_file: str | None = None  # default: settings.http_auth_token_file


class StateReader:
    """Typed accessors over an :class:`AppState`, read on every request (the controller appears once
    the service has started)."""

    def __init__(self, state: AppState) -> None:
        self.source = state

    @property
    def controller(self) -> ControllerStatus | None:
        return self.source.controller

    @property
    def settings(self) -> Any:
        return self.source.settings

    @property
    def fatal(self) -> str | None:
        return self.source.fatal or None

    def health(self) -> HealthSnapshot:
        s = self.source
        if s.health is not None:
            snap = s.health()
        elif s.controller is not None:
            snap = s.controller.health_snapshot()
        else:
            role: Role = "standby" if getattr(s.settings, "leader_elect", False) else "single"
            snap = HealthSnapshot(role=role, started=False)
        if s.fatal and not snap.fatal:
            snap = HealthSnapshot(**{**snap.__dict__, "fatal": s.fatal})
        return snap

    @property
    def live(self) -> LiveReader | None:
        if self.source.live is not None:
            return self.source.live
        return self.source.controller.read_live if self.source.controller is not None else None

    @property
    def limits(self) -> HealthLimits:
        return self.source.limits

    def registry(self) -> CollectorRegistry:
        return self.source.metrics.registry

    def decision_source(self) -> DecisionSource:
        return self.source.store if self.source.store is not None else DecisionStore()  # none yet: empty

    def object_source(self) -> ObjectSource:
        if self.source.objects is not None:
            return self.source.objects
        if self.source.controller is not None:
            return self.source.controller.objects()
        return _NoObjects()

    def grouper(self) -> Grouper | None:
        return self.source.grouper

    def recent_events(self, uid: str) -> list[Any]:
        """The Events the controller's recorder sent about the object with this uid (newest first)."""
        recorder = getattr(self.source.controller, "recorder", None)
        recent = getattr(recorder, "recent", None)
        return list(recent(uid)) if recent is not None and uid else []

    def gang_source(self) -> GangSource | None:
        """The gang states; None without a controller (the API then shows no gang)."""
        if self.source.gangs is not None:
            return self.source.gangs
        gangs: GangSource | None = getattr(self.source.controller, "gangs", None)
        return gangs

    def definition_registry(self) -> Any:
        s = self.source
        if s.definitions is not None:
            return s.definitions
        return s.grouper.definitions if s.grouper is not None else None

    def grouping_config(self) -> GroupingConfig:
        s = self.source
        if s.grouper is not None:
            return s.grouper.config
        if s.settings is not None and hasattr(s.settings, "grouping_config"):
            cfg: GroupingConfig = s.settings.grouping_config()
            return cfg
        return GroupingConfig()

    def token_file(self) -> str | None:
        return self.source.auth_token_file or getattr(self.source.settings, "http_auth_token_file", None) or None


def safe_get(source: ObjectSource, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
    """``source.get`` with "not cached", "forbidden" and "absent" all meaning None."""
    try:
        return source.get(api_version, kind, namespace, name)
    except Exception:  # NotCached / LookupForbidden / anything a cache raises: the API shows "unknown"
        return None


__all__ = [
    "AppState",
    "ControllerStatus",
    "DecisionSource",
    "GangSource",
    "HealthLimits",
    "HealthSnapshot",
    "HealthSource",
    "LiveReader",
    "ObjectSource",
    "Role",
    "StateReader",
    "safe_get",
]
