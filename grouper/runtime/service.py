"""The ``grouper run`` service: one asyncio loop runs the informers, the reconcile workers, leader
election, the API server probe and the HTTP server (uvicorn, same loop), every one of them supervised.

Two API clients: the *work* client (informers, writes, Events; rate-limited by ``--qps``/``--burst``)
and the *control* client (leader election and the API server probe: its own connection pool, no
client-side rate limit, a request timeout of half the renew deadline), so a busy queue or a slow relist
can never delay a Lease renewal past its deadline.

Start order: HTTP (so probes answer while caches sync; the API itself — FastAPI — loads in a thread
after the first ``/readyz`` 200, or at the first request that needs it, ``http_front.py``) → caches
synced → leader campaign (or workers right away without ``--leader-elect``). Stop order
(SIGTERM/SIGINT): stop taking work, drain in-flight reconciles (``--shutdown-drain-seconds``), release
the lease, stop informers, stop HTTP, close the clients. A supervised task that cannot recover makes liveness fail and the service exit with code 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import time
import uuid
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from grouper import __version__
from grouper.api.auth import api_access
from grouper.api.server import HttpServer
from grouper.api.state import AppState
from grouper.controller.controller import Controller, ControllerSettings
from grouper.karta import DefinitionRegistry
from grouper.kube import config as kubeconfig
from grouper.kube.config import ClusterConfig
from grouper.kube.leader import LeaderElector
from grouper.kube.probe import ApiProbe
from grouper.kube.transport import KubeClient
from grouper.model.objects import GVK
from grouper.observability.metrics import Metrics
from grouper.records.decisions import DecisionStore
from grouper.runtime.composition import build_grouper, cached_kinds
from grouper.runtime.heap import HeapKeeper, malloc_trim, tune_collector
from grouper.runtime.http_front import App, StartupFront
from grouper.runtime.preload import preload_definitions
from grouper.runtime.settings import RunSettings, kinds_of
from grouper.runtime.status import ServiceStatus
from grouper.runtime.supervisor import Supervisor
from grouper.runtime.wiring import build_controller

if TYPE_CHECKING:
    from grouper.webhook.admission import Admission
    from grouper.webhook.server import WebhookServer

log = logging.getLogger(__name__)

RENEW_DEADLINE = 10.0
PREWARMED_OWNER_KINDS = (
    GVK("batch", "v1", "Job"),
    GVK("apps", "v1", "ReplicaSet"),
    GVK("apps", "v1", "StatefulSet"),
)


def cluster_config(s: RunSettings) -> ClusterConfig:
    if s.server:
        return kubeconfig.explicit(
            s.server, token_file=s.token_file or None, ca_file=s.certificate_authority or None
        )
    return kubeconfig.load(s.kubeconfig or None, s.context or None)


class Service:
    def __init__(
        self,
        settings: RunSettings,
        *,
        config: ClusterConfig | None = None,
        metrics: Metrics | None = None,
        identity: str | None = None,
        definitions: Future[DefinitionRegistry] | None = None,
    ) -> None:
        """``definitions``: the Karta registry being loaded already (``preload_definitions``, which
        ``grouper run`` starts before importing this module); by default it is loaded when ``start`` begins."""
        self.settings = settings
        self._definitions = definitions
        self.config = config
        self.metrics = metrics or Metrics()
        self.identity = identity or settings.identity or f"{socket.gethostname()}_{uuid.uuid4()}"
        self.store = DecisionStore()
        self.state = AppState(metrics=self.metrics, store=self.store, settings=settings)
        self.supervisor = Supervisor(self.metrics, on_fatal=self._fatal)
        self.client: KubeClient | None = None
        self.control: KubeClient | None = None
        self.controller: Controller | None = None
        self.status: ServiceStatus | None = None
        self.leader: LeaderElector | None = None
        self.probe: ApiProbe | None = None
        self.http: HttpServer | None = None
        self.webhook: WebhookServer | None = None
        self.admission: Admission | None = None
        self.stopped = asyncio.Event()
        self._stopping = False
        self._fatal_event = asyncio.Event()

    @property
    def http_port(self) -> int | None:
        return self.http.port if self.http is not None else None

    def _fatal(self, message: str) -> None:
        self.state.fatal = message
        self._fatal_event.set()

    async def start(self) -> None:
        s = self.settings
        if s.webhook_bind_address:  # a webhook nobody may call fails now, not after the caches filled
            from grouper.webhook.server import check_client_auth  # FastAPI: only when the webhook is on

            check_client_auth(s.webhook_client_ca, s.webhook_allow_unauthenticated)
        # the catalog's jq compiles in the sandbox (another process) while the HTTP server and clients start
        loading = self._definitions or preload_definitions(s)
        tune_collector()  # before the first LIST: its decoding must not run full collections
        await self._start_http()
        cfg = self.config or cluster_config(s)
        log.info("connecting to %s (%s)", cfg.server, cfg.source)
        # the identity in the User-Agent tells the replicas apart in the API server's audit log
        agent = f"kai-pod-grouper/{__version__} ({self.identity})"
        self.client = KubeClient(
            cfg, qps=s.qps, burst=s.burst, metrics=self.metrics, user_agent=agent, watch_list=s.watch_list
        )
        self.control = KubeClient(
            cfg,
            qps=0,
            burst=1,
            metrics=self.metrics,
            request_timeout=RENEW_DEADLINE / 2,
            user_agent=f"{agent} leader-election",
        )
        self.probe = ApiProbe(self.control)
        self.supervisor.spawn("api-probe", self.probe.run)
        definitions = await asyncio.wrap_future(loading)  # off the loop: probes answer meanwhile
        grouper = build_grouper(s.grouping_config(), definitions)
        if s.leader_elect:
            self.leader = LeaderElector(
                self.control,
                name=s.leader_election_id,
                namespace=s.leader_election_namespace,
                identity=self.identity,
                renew_deadline=RENEW_DEADLINE,
                metrics=self.metrics,
            )
        self.controller = build_controller(
            self.client,
            ControllerSettings(
                pod_label_selector=s.pod_label_selector,
                namespace_label_selector=s.namespace_label_selector,
                max_concurrent_reconciles=s.max_concurrent_reconciles,
                batch_window=s.batch_window_seconds,
                allowed_kinds=cached_kinds(kinds_of(s.extra_owner_kinds)),
                backend=s.backend,
                workload_info_metrics=s.workload_info_metrics,
            ),
            grouper=grouper,
            metrics=self.metrics,
            supervisor=self.supervisor,
            store=self.store,
            leader=self.leader,
            definitions=definitions,
        )
        self.state.grouper, self.state.definitions = grouper, definitions
        if self.leader is not None:
            # Campaign from the start, but take the lease only with complete caches (the gate): after a
            # crash the old holder's lease expires while the caches fill, not after them.
            ctl = self.controller
            self.leader.gate.clear()
            self.leader.on_started_leading = ctl.start_workers
            self.leader.on_stopped_leading = ctl.stop_workers
            self.supervisor.spawn("leader-election", self.leader.run)
        await self.controller.start()
        # The caches are the bulk of the heap and live as long as the process: move them out of the
        # collector's reach, so full collections do not walk millions of cached objects while the loop
        # (probes, Lease renewals) waits (benchmarks/bench_event_loop.py: 2-4 s pauses at 100,000 pods).
        gc.freeze()
        ctl = self.controller
        keeper = HeapKeeper(idle=ctl.idle, progress=lambda: ctl.reconciler.passes, trim=malloc_trim())
        self.supervisor.spawn("heap-keeper", keeper.run)
        self.status = ServiceStatus(self.controller, self.client, self.supervisor, self.leader, self.probe,
                                    webhook_address=s.webhook_bind_address)
        self.state.controller = self.status  # what the API reads
        if s.webhook_bind_address:
            await self._start_webhook()
        if self.leader is not None:
            if self.leader.holder not in ("", self.identity):
                self.controller.warm_up()  # another holds the lease: decide while it runs out or is released
            self.leader.gate.set()
        else:
            self.metrics.leader.set(1)  # without leader election this instance is the one that writes
            self.controller.start_workers()
        log.info("grouper running", extra={"identity": self.identity, "leader_elect": s.leader_elect,
                                           "event_loop": type(asyncio.get_running_loop()).__module__})

    async def _start_webhook(self) -> None:
        from grouper.webhook.admission import Admission
        from grouper.webhook.decide import controller_decider
        from grouper.webhook.server import WebhookServer

        assert self.controller is not None
        s = self.settings
        # The webhook decides at admission, from the caches: the built-in kinds that own most pods are
        # watched before it serves, so the first pod of a Job or ReplicaSet need not wait for an informer.
        for gvk in PREWARMED_OWNER_KINDS:
            await self.controller.cache.ensure(gvk)
        self.admission = Admission(controller_decider(self.controller), backend=s.backend)
        self.webhook = WebhookServer(
            self.admission,
            s.webhook_bind_address,
            s.webhook_cert_file,
            s.webhook_key_file,
            client_ca=s.webhook_client_ca,
            allow_unauthenticated=s.webhook_allow_unauthenticated,
        )
        await self.webhook.start()
        if self.status is not None:
            self.status.webhook = self.webhook  # readiness follows it from now on
        self.supervisor.spawn("webhook", self._watch_webhook)

    async def _watch_webhook(self) -> None:
        """Restart the webhook server if it stops by itself (pods are still grouped without it)."""
        assert self.webhook is not None
        if self.webhook.task is None or self.webhook.task.done():
            await self.webhook.start()
        assert self.webhook.task is not None
        await asyncio.shield(self.webhook.task)
        if not self._stopping:
            raise RuntimeError("the webhook server stopped")

    async def _start_http(self) -> None:
        access = api_access(self.settings, lambda: self.client)  # reviews go through the service's client
        state, loop = self.state, asyncio.get_running_loop()

        def build() -> App:
            from grouper.api.app import create_app  # FastAPI and the routes: in the loading thread

            return create_app(state, access=access)

        def loaded(api: Future[App]) -> None:  # in the loading thread
            if not api.cancelled() and api.exception() is not None:
                loop.call_soon_threadsafe(self._fatal, f"the HTTP API could not be built: {api.exception()!r}")

        # the API (FastAPI, pydantic) loads once ready, or at the first request that is not a probe
        front = StartupFront(self.state, build)
        front.app.add_done_callback(loaded)
        self.http = HttpServer(front, self.settings.http_bind_address)
        await self.http.start()
        self.supervisor.spawn("http", self._watch_http)

    async def _watch_http(self) -> None:
        """Restart the HTTP server if it stops by itself (the probes and the API depend on it)."""
        assert self.http is not None
        if self.http.task is None or self.http.task.done():
            await self.http.start()
        assert self.http.task is not None
        await asyncio.shield(self.http.task)
        if not self._stopping:
            raise RuntimeError("the HTTP server stopped")

    async def shutdown(self) -> None:
        """Clean stop. Safe to call more than once."""
        if self.stopped.is_set():
            return
        self._stopping = True
        began = time.monotonic()
        log.info("shutting down")
        if self.status is not None:
            self.status.stopping = True  # not ready: the replica leaves its Service's endpoints
        if self.controller is not None:
            self.controller.queue.shutdown()
            await self.controller.stop_workers(drain=self.settings.shutdown_drain_seconds)
        if self.leader is not None:
            await self.supervisor.stop("leader-election")  # no renewal races the release
            await self.leader.release()
        if self.webhook is not None:
            # The API server calls this replica until the endpoint change has reached it (and kube-proxy):
            # answer on meanwhile, from caches still watching, for the pods created in those seconds.
            left = self.settings.webhook_shutdown_delay_seconds - (time.monotonic() - began)
            if left > 0 and self.webhook.serving:
                log.info("admission webhook answers %.1fs more while this replica leaves its endpoints", left)
                await asyncio.sleep(left)
            await self.webhook.stop()
        if self.controller is not None:
            await self.controller.shutdown(drain=0)
        await self.supervisor.stop()
        if self.http is not None:
            await self.http.stop()
        for client in (self.client, self.control):
            if client is not None:
                await client.close()
        self.stopped.set()
        log.info("stopped")

    async def run(self, stop: asyncio.Event | None = None) -> int:
        """Run until ``stop`` is set, SIGTERM/SIGINT arrives (exit 0) or a task fails for good (exit 1)."""
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        installed = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, stop.set)
                installed.append(sig)
        start = asyncio.create_task(self.start(), name="start")
        waiter = asyncio.create_task(stop.wait(), name="stop-signal")
        fatal = asyncio.create_task(self._fatal_event.wait(), name="fatal")
        tasks: list[asyncio.Task[Any]] = [start, waiter, fatal]
        try:
            done, _ = await asyncio.wait({start, waiter, fatal}, return_when=asyncio.FIRST_COMPLETED)
            if start in done:
                start.result()  # a start-up failure propagates (exit code 1 in the CLI)
                await asyncio.wait({waiter, fatal}, return_when=asyncio.FIRST_COMPLETED)
            if self.state.fatal:
                log.error("exiting: %s", self.state.fatal)
                return 1
            return 0
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.shutdown()
            for sig in installed:
                loop.remove_signal_handler(sig)
