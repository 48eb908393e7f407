"""The ``grouper run`` service: one asyncio loop runs the informers, the reconcile workers, leader
election and the HTTP server (uvicorn, same loop).

Start order: HTTP (so probes answer while caches sync) → caches synced → leader campaign (or workers
right away without ``--leader-elect``). Stop order (SIGTERM/SIGINT): stop taking work, drain in-flight
reconciles (``--shutdown-drain-seconds``), release the lease, stop informers, stop HTTP, close the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import uuid
from typing import Any

from grouper.api.app import create_app
from grouper.api.auth import api_access
from grouper.api.server import HttpServer
from grouper.api.state import AppState
from grouper.controller.controller import Controller, ControllerSettings
from grouper.controller.decisions import DecisionStore
from grouper.controller.leader import LeaderElector
from grouper.core.grouping import Grouper
from grouper.karta import DefinitionRegistry
from grouper.kube import config as kubeconfig
from grouper.kube.config import ClusterConfig
from grouper.kube.transport import KubeClient
from grouper.observability.metrics import Metrics
from grouper.runtime.settings import RunSettings

log = logging.getLogger(__name__)


def cluster_config(s: RunSettings) -> ClusterConfig:
    if s.server:
        return kubeconfig.explicit(
            s.server, token_file=s.token_file or None, ca_file=s.certificate_authority or None
        )
    return kubeconfig.load(s.kubeconfig or None, s.context or None)


def load_definitions(s: RunSettings) -> DefinitionRegistry | None:
    """The Karta registry with the built-in catalog from ``--definitions`` (None when Karta is off)."""
    if not s.generic_karta_fallback:
        return None
    return DefinitionRegistry(s.definitions or None)


class Service:
    def __init__(
        self,
        settings: RunSettings,
        *,
        config: ClusterConfig | None = None,
        metrics: Metrics | None = None,
        identity: str | None = None,
    ) -> None:
        self.settings = settings
        self.config = config
        self.metrics = metrics or Metrics()
        self.identity = identity or f"{socket.gethostname()}_{uuid.uuid4()}"
        self.store = DecisionStore()
        self.state = AppState(metrics=self.metrics, store=self.store, settings=settings)
        self.client: KubeClient | None = None
        self.controller: Controller | None = None
        self.leader: LeaderElector | None = None
        self.http: HttpServer | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self.stopped = asyncio.Event()

    @property
    def http_port(self) -> int | None:
        return self.http.port if self.http is not None else None

    async def start(self) -> None:
        s = self.settings
        await self._start_http()
        cfg = self.config or cluster_config(s)
        log.info("connecting to %s (%s)", cfg.server, cfg.source)
        self.client = KubeClient(cfg, qps=s.qps, burst=s.burst, metrics=self.metrics)
        definitions = load_definitions(s)
        grouper = Grouper(s.grouping_config(), definitions)
        if s.leader_elect:
            self.leader = LeaderElector(
                self.client,
                name=s.leader_election_id,
                namespace=s.leader_election_namespace,
                identity=self.identity,
                metrics=self.metrics,
            )
        self.controller = Controller(
            self.client,
            ControllerSettings(
                pod_label_selector=s.pod_label_selector,
                namespace_label_selector=s.namespace_label_selector,
                max_concurrent_reconciles=s.max_concurrent_reconciles,
            ),
            grouper=grouper,
            metrics=self.metrics,
            store=self.store,
            leader=self.leader,
            definitions=definitions,
        )
        self.state.grouper, self.state.definitions = grouper, definitions
        self.controller.update_karta_metrics()
        await self.controller.start()
        self.state.controller = self.controller
        if self.leader is not None:
            ctl = self.controller
            self.leader.on_started_leading = ctl.start_workers
            self.leader.on_stopped_leading = ctl.stop_workers
            self._tasks.append(asyncio.create_task(self.leader.run(), name="leader-election"))
        else:
            self.controller.start_workers()
        log.info("grouper running", extra={"identity": self.identity, "leader_elect": s.leader_elect})

    async def _start_http(self) -> None:
        access = api_access(self.settings, lambda: self.client)  # reviews go through the service's client
        self.http = HttpServer(create_app(self.state, access=access), self.settings.http_bind_address)
        await self.http.start()

    async def shutdown(self) -> None:
        """Clean stop. Safe to call more than once."""
        if self.stopped.is_set():
            return
        log.info("shutting down")
        if self.controller is not None:
            self.controller.queue.shutdown()
            await self.controller.stop_workers(drain=self.settings.shutdown_drain_seconds)
        if self.leader is not None:
            campaign = [t for t in self._tasks if t.get_name() == "leader-election"]
            for t in campaign:
                t.cancel()
            await asyncio.gather(*campaign, return_exceptions=True)  # no renewal races the release
            await self.leader.release()
        if self.controller is not None:
            await self.controller.shutdown(drain=0)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.http is not None:
            await self.http.stop()
        if self.client is not None:
            await self.client.close()
        self.stopped.set()
        log.info("stopped")

    async def run(self, stop: asyncio.Event | None = None) -> int:
        """Run until ``stop`` is set or SIGTERM/SIGINT arrives; returns the exit code."""
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        installed = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, stop.set)
                installed.append(sig)
        start = asyncio.create_task(self.start(), name="start")
        waiter = asyncio.create_task(stop.wait(), name="stop-signal")
        try:
            done, _ = await asyncio.wait({start, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if start in done:
                start.result()  # a start-up failure propagates (exit code 1 in the CLI)
                await waiter
            return 0
        finally:
            for t in (start, waiter):
                t.cancel()
            await asyncio.gather(start, waiter, return_exceptions=True)
            await self.shutdown()
            for sig in installed:
                loop.remove_signal_handler(sig)
