"""What the HTTP handlers can see of the running service. Filled by ``grouper.runtime``.

:class:`AppState` is created before the controller exists (so probes answer during start-up) and
filled in as the service starts: ``store`` at once, ``grouper`` / ``definitions`` and then ``controller``
once the caches are synced. The API reads everything through the small protocols below, which the
controller's objects satisfy; the optional fields let tests (and other embedders) supply them directly:

- :class:`DecisionSource` — ``grouper.controller.decisions.DecisionStore`` (per-pod and per-PodGroup
  records as JSON-able dicts, with their last errors);
- :class:`ObjectSource` — cache reads without I/O (``Lookups.get``; default: the controller's
  ``cache.lookups()``; :func:`safe_get` turns "not cached" / "forbidden" into None);
- :class:`HealthSource` — one :class:`HealthSnapshot` (default: derived from the controller, see
  :mod:`grouper.api.adapter`);
- :data:`LiveReader` — an async GET of one object for ``/workloads/...?live=true`` (default: the
  controller's client).

The API never writes to any of these and never blocks on the API server (except the live read).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from prometheus_client import CollectorRegistry

from grouper.core.config import GroupingConfig
from grouper.model.objects import Obj
from grouper.observability.metrics import Metrics

if TYPE_CHECKING:
    from grouper.controller.controller import Controller
    from grouper.controller.decisions import DecisionStore
    from grouper.core.grouping import Grouper

Role = Literal["leader", "standby", "single"]


class DecisionSource(Protocol):
    """Read side of the controller's decision store. Every call returns copies (the caller may keep them)."""

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]: ...

    def pod_group(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def pod_groups(self, namespace: str | None = None) -> list[dict[str, Any]]: ...


class ObjectSource(Protocol):
    """Cached objects. May raise for kinds that are not cached or not readable; never does I/O."""

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None: ...


@dataclass(frozen=True)
class HealthSnapshot:
    """Inputs of ``/healthz`` and ``/readyz``. Times are ``time.monotonic()`` values.

    ``worker_heartbeat``: the last time a queue worker finished a key (None before the first).
    ``fatal``: set when the service can no longer work (liveness fails with it).
    ``informers``: required informer name -> synced (and watching); ``informer_errors``: name -> why it
    gave up. ``last_api_contact``: the last successful answer from the API server.
    """

    role: Role
    started: bool = True
    fatal: str | None = None
    worker_heartbeat: float | None = None
    queue_depth: int = 0
    processing: int = 0
    informers: dict[str, bool] = field(default_factory=dict)
    informer_errors: dict[str, str] = field(default_factory=dict)
    last_api_contact: float | None = None
    started_at: float = field(default_factory=time.monotonic)
    now: float = field(default_factory=time.monotonic)


class HealthSource(Protocol):
    def __call__(self) -> HealthSnapshot: ...


LiveReader = Callable[[str, str, str | None, str], Awaitable[Obj | None]]
"""``await live(api_version, kind, namespace, name)``: the object from the API server, or None (404)."""


@dataclass(frozen=True)
class HealthLimits:
    """``worker_stall``: seconds without worker progress while work waits before ``/healthz`` fails;
    ``api_contact``: seconds without an API server answer before ``/readyz`` fails (watch bookmarks come
    about once a minute, lease renewals every 2 s)."""

    worker_stall: float = 120.0
    api_contact: float = 120.0


class _NoDecisions:
    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return []

    def pod_group(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def pod_groups(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return []


class _NoObjects:
    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        return None


@dataclass
class AppState:
    """The service's state as the API sees it (``create_app`` also accepts any object with some of these
    attributes, see :class:`StateReader`)."""

    metrics: Metrics | None = None
    store: DecisionStore | None = None
    controller: Controller | None = None
    grouper: Grouper | None = None
    definitions: Any = None  # grouper.karta.DefinitionRegistry
    settings: Any = None  # grouper.runtime.settings.RunSettings
    extra: dict[str, Any] = field(default_factory=dict)
    fatal: str | None = None  # set when the service can no longer work (liveness fails)
    # --- optional overrides; derived from ``controller`` / ``settings`` when None
    objects: ObjectSource | None = None
    health: HealthSource | None = None
    live: LiveReader | None = None
    limits: HealthLimits = field(default_factory=HealthLimits)
    auth_token_file: str | None = None  # default: settings.http_auth_token_file


class StateReader:
    """What the API reads, resolved from an :class:`AppState` — or from any object carrying some of its
    attributes (``controller``, ``metrics``, ``store``, ``definitions``, ``grouper``, ``settings``,
    ``fatal``, ``objects``, ``health``, ``live``, ``limits``, ``auth_token_file``). Read on every request,
    so attributes filled in while the service starts (``controller``) are picked up."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self._fallback_registry: CollectorRegistry | None = None

    def _attr(self, name: str) -> Any:
        return getattr(self.source, name, None)

    @property
    def controller(self) -> Controller | None:
        return self._attr("controller")

    @property
    def settings(self) -> Any:
        return self._attr("settings")

    @property
    def fatal(self) -> str | None:
        fatal = self._attr("fatal")
        return str(fatal) if fatal else None

    @property
    def health_override(self) -> HealthSource | None:
        h = self._attr("health")
        return h if callable(h) else None

    @property
    def live(self) -> LiveReader | None:
        return self._attr("live")

    @property
    def limits(self) -> HealthLimits:
        limits = self._attr("limits")
        return limits if isinstance(limits, HealthLimits) else HealthLimits()

    def registry(self) -> CollectorRegistry:
        metrics = self._attr("metrics")
        if metrics is None and self.controller is not None:
            metrics = self.controller.metrics
        if metrics is not None:
            reg: CollectorRegistry = metrics.registry
            return reg
        if self._fallback_registry is None:
            self._fallback_registry = CollectorRegistry()
        return self._fallback_registry

    def decision_source(self) -> DecisionSource:
        store = self._attr("store")
        if store is not None:
            return store
        if self.controller is not None:
            return self.controller.store
        return _NoDecisions()

    def object_source(self) -> ObjectSource:
        objects = self._attr("objects")
        if objects is not None:
            return objects
        if self.controller is not None:
            return self.controller.cache.lookups()
        return _NoObjects()

    def grouper(self) -> Grouper | None:
        g = self._attr("grouper")
        if g is None and self.controller is not None:
            g = self.controller.grouper
        return g

    def definition_registry(self) -> Any:
        defs = self._attr("definitions")
        if defs is None and self.controller is not None:
            defs = self.controller.definitions
        g = self.grouper()
        if defs is None and g is not None:
            defs = g.definitions
        return defs

    def grouping_config(self) -> GroupingConfig:
        g = self.grouper()
        if g is not None:
            return g.config
        if self.settings is not None and hasattr(self.settings, "grouping_config"):
            cfg: GroupingConfig = self.settings.grouping_config()
            return cfg
        return GroupingConfig()

    def token_file(self) -> str | None:
        return self._attr("auth_token_file") or getattr(self.settings, "http_auth_token_file", None) or None


def safe_get(source: ObjectSource, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
    """``source.get`` with "not cached", "forbidden" and "absent" all meaning None."""
    try:
        return source.get(api_version, kind, namespace, name)
    except Exception:  # NotCached / LookupForbidden / anything a cache raises: the API shows "unknown"
        return None


__all__ = [
    "AppState",
    "DecisionSource",
    "HealthLimits",
    "HealthSnapshot",
    "HealthSource",
    "LiveReader",
    "ObjectSource",
    "Role",
    "StateReader",
    "safe_get",
]
