"""``/healthz`` (liveness) and ``/readyz`` (readiness), computed from a :class:`HealthSnapshot`.

Unlike upstream's plain pings (kai-podgrouper.md §4.4):

``/healthz`` — restart me when failing:

- *event-loop*: the answer itself proves the loop runs (the app is served on the controller's loop, so a
  blocked loop makes the probe time out);
- *service*: no fatal condition was reported (``AppState.fatal``);
- *work-queue*: a worker finished a key within ``worker_stall`` seconds (or the queue has been busy for
  less than that, after being idle), or there is nothing to do (empty queue, nothing processing), or this replica is a standby (standbys do not reconcile), or the caches are
  still syncing at start-up.

``/readyz`` — count me as up:

- *informers*: the pod and PodGroup informers finished their first LIST and their watches are open
  (a watch down for more than a few seconds fails this check, and after such an outage it passes again
  only once the informer has re-listed);
- *api-server*: an answer from the API server within ``api_contact`` seconds (the controller probes
  ``/livez`` every few seconds on its own connection, so a lost API server fails readiness in seconds);
- *webhook* (only with ``--webhook-bind-address``): the admission webhook accepts connections. The API
  server calls it as soon as its configuration is registered; a call refused is a pod admitted unchanged
  (``failurePolicy: Ignore``), and with the upstream backend that pod can never join its PodGroup. So a
  replica is not ready, and a Service sends it no admission, until its webhook listens;
- *shutdown* (only while shutting down): failing from SIGTERM on, so the replica leaves its Service's
  endpoints while it still answers (its webhook for ``--webhook-shutdown-delay-seconds``);
- *role*: ``leader`` / ``standby`` / ``single`` is reported. A standby with warm caches and a reachable
  API server IS ready: it serves the API and takes over the moment it wins the lease.

Both answer 200 ``{"status": "ok"}`` or 503 ``{"status": "failing"}`` with every check and its message.

The results are plain dataclasses, not the API's pydantic models: ``grouper run`` answers its probes with them
before it imports pydantic and FastAPI (``grouper.runtime.http_front``), and the API's routes send the same
:meth:`Health.body` (its OpenAPI schema is ``grouper.api.models.HealthResponse``, which a test holds it to).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from grouper.api.state import HealthLimits, HealthSnapshot
from grouper.observability.health import Role


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    message: str


@dataclass(frozen=True)
class Health:
    """A probe's answer: ``status`` ``ok`` (200) or ``failing`` (503), the role, every check."""

    status: Literal["ok", "failing"]
    role: Role | None
    checks: list[Check]

    @property
    def http_status(self) -> int:
        return 200 if self.status == "ok" else 503

    def body(self) -> dict[str, Any]:
        """The JSON body, field for field ``grouper.api.models.HealthResponse``."""
        return {"status": self.status, "role": self.role,
                "checks": [{"name": c.name, "ok": c.ok, "message": c.message} for c in self.checks]}


def _ago(now: float, then: float) -> str:
    return f"{max(0.0, now - then):.1f}s ago"


def liveness(s: HealthSnapshot, limits: HealthLimits) -> Health:
    checks = [Check(name="event-loop", ok=True, message="serving this request")]
    if s.fatal:
        checks.append(Check(name="service", ok=False, message=s.fatal))
    else:
        checks.append(Check(name="service", ok=True, message="running" if s.started else "starting"))
    waiting = s.queue_depth + s.processing
    if not s.started:
        checks.append(Check(name="work-queue", ok=True, message="starting: caches syncing"))
    elif s.role == "standby":
        checks.append(Check(name="work-queue", ok=True, message="standby: workers wait for the leader lease"))
    elif waiting == 0:
        checks.append(Check(name="work-queue", ok=True, message="idle: queue empty"))
    else:
        # A stall counts from the last key finished or from when work arrived to an idle queue, whichever
        # is later: the first burst after a quiet hour is not a stall of that hour.
        since = s.worker_heartbeat if s.worker_heartbeat is not None else s.started_at
        if s.busy_since is not None:
            since = max(since, s.busy_since)
        stalled = s.now - since > limits.worker_stall
        progress = _ago(s.now, s.worker_heartbeat) if s.worker_heartbeat is not None else "never"
        msg = f"{s.queue_depth} queued, {s.processing} processing; last worker progress {progress}"
        if s.busy_since is not None:
            msg += f", busy since {_ago(s.now, s.busy_since)}"
        if stalled:
            msg += f" (limit {limits.worker_stall:.0f}s)"
        checks.append(Check(name="work-queue", ok=not stalled, message=msg))
    return _response(checks, s)


def readiness(s: HealthSnapshot, limits: HealthLimits) -> Health:
    checks: list[Check] = []
    unsynced = sorted(name for name, synced in s.informers.items() if not synced)
    if s.informer_errors:
        failed = "; ".join(f"{n}: {e}" for n, e in sorted(s.informer_errors.items()))
        checks.append(Check(name="informers", ok=False, message=f"informers gave up: {failed}"))
    elif not s.started or not s.informers:
        checks.append(Check(name="informers", ok=False, message="starting: caches not synced yet"))
    elif unsynced:
        why = "; ".join(f"{n}: {s.informer_messages.get(n, 'not synced or not watching')}" for n in unsynced)
        checks.append(Check(name="informers", ok=False, message=why))
    else:
        checks.append(Check(name="informers", ok=True, message=f"synced and watching: {', '.join(sorted(s.informers))}"))
    if s.last_api_contact is None:
        checks.append(Check(name="api-server", ok=False, message="API server not reached yet"))
    else:
        fresh = s.now - s.last_api_contact <= limits.api_contact
        msg = f"last answer {_ago(s.now, s.last_api_contact)}"
        if not fresh:
            msg += f" (limit {limits.api_contact:.0f}s)"
            if s.api_error:
                msg += f": {s.api_error}"
        checks.append(Check(name="api-server", ok=fresh, message=msg))
    if s.webhook:
        if s.webhook_serving:
            checks.append(Check(name="webhook", ok=True, message=f"serving admission at {s.webhook}"))
        else:
            checks.append(Check(name="webhook", ok=False, message=(
                f"not serving at {s.webhook} yet: a pod admitted now would not be put in its group")))
    if s.stopping:
        checks.append(Check(name="shutdown", ok=False, message="shutting down: send nothing new here"))
    checks.append(Check(name="role", ok=True, message=f"{s.role} (a standby replica is ready)"))
    return _response(checks, s)


def _response(checks: list[Check], s: HealthSnapshot) -> Health:
    ok = all(c.ok for c in checks)
    return Health(status="ok" if ok else "failing", role=s.role, checks=checks)


__all__ = ["Check", "Health", "liveness", "readiness"]
