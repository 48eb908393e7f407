"""What the API reads of the running service (:class:`~grouper.api.state.ControllerStatus`): the inputs of
the probes — the controller's informers, queue and workers, when the API server last answered (the probe on
the control client, the work client), the role leader election gives this replica, a task that crashed for
good —, the cached objects, live reads through discovery, and the Events and gang states the web view shows.
It joins the service's parts, which the controller does not hold: clients, probe, leader election, supervisor.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grouper.controller.controller import REQUIRED, Controller
from grouper.core.lookups import Lookups
from grouper.kube.leader import LeaderElector
from grouper.kube.probe import ApiProbe
from grouper.kube.transport import KubeClient
from grouper.model.objects import GVK, Obj
from grouper.observability.health import HealthSnapshot, Role
from grouper.runtime.supervisor import Supervisor
from grouper.visibility.gangs import GangTracker
from grouper.writer.events import EventRecorder

if TYPE_CHECKING:  # FastAPI and uvicorn: imported only when the webhook is on
    from grouper.webhook.server import WebhookServer


@dataclass
class ServiceStatus:
    controller: Controller
    client: KubeClient  # the work client
    supervisor: Supervisor
    leader: LeaderElector | None = None
    probe: ApiProbe | None = None
    webhook_address: str = ""  # --webhook-bind-address: readiness waits for the webhook when it is set
    webhook: WebhookServer | None = None  # the server, once the service created it
    stopping: bool = False  # set on SIGTERM: readiness fails from then on

    @property
    def recorder(self) -> EventRecorder:
        """The Events the controller sent (the web view lists the recent ones)."""
        return self.controller.recorder

    @property
    def gangs(self) -> GangTracker:
        return self.controller.gangs

    def role(self) -> Role:
        if self.leader is None:
            return "single"
        return "leader" if self.leader.is_leader() else "standby"

    def health_snapshot(self) -> HealthSnapshot:
        ctl, now = self.controller, time.monotonic()
        informers: dict[str, bool] = {}
        messages: dict[str, str] = {}
        errors: dict[str, str] = {}
        for gvk in REQUIRED:
            inf = ctl.cache.informer(gvk)
            healthy, why = inf.health(now) if inf is not None else (False, "not started")
            informers[str(gvk)], messages[str(gvk)] = healthy, why
            if inf is not None and inf.error is not None:
                errors[str(gvk)] = str(inf.error)
        contact = self.probe.last_ok if self.probe is not None else self.client.last_success
        if self.probe is not None and self.client.last_success is not None and self.probe.last_error is None:
            contact = max(contact or 0.0, self.client.last_success)
        return HealthSnapshot(
            role=self.role(),
            started=ctl.started,
            fatal=self.supervisor.fatal,
            worker_heartbeat=ctl.workers.last_progress,
            busy_since=ctl.queue.busy_since,
            queue_depth=len(ctl.queue),
            processing=len(ctl.queue.processing),
            informers=informers,
            informer_messages=messages,
            informer_errors=errors,
            last_api_contact=contact,
            api_error=self.probe.last_error if self.probe is not None else None,
            webhook=(self.webhook.url if self.webhook is not None else self.webhook_address),
            webhook_serving=self.webhook is not None and self.webhook.serving,
            stopping=self.stopping,
            started_at=ctl.started_at or now,
            now=now,
        )

    def objects(self) -> Lookups:
        return self.controller.cache.lookups()

    async def read_live(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        res = await self.controller.discovery.resolve(GVK.from_api_version(api_version, kind))
        if res is None:
            return None
        return await self.client.get_object(res.path(namespace, name))

    async def resource_of(self, api_version: str, kind: str) -> tuple[str, str] | None:
        res = await self.controller.discovery.resolve(GVK.from_api_version(api_version, kind))
        return (res.group, res.plural) if res is not None else None


__all__ = ["ServiceStatus"]
