"""Serve the admission webhook over TLS on its own port (the API server only calls HTTPS webhooks).

server = WebhookServer(admission, "0.0.0.0:9443", cert_file, key_file, client_ca=ca_file)
await server.start()     # binds now; a busy port or a bad certificate fails here
...
await server.stop()

Who may call it: with ``client_ca`` the TLS handshake requires a client certificate signed by that CA (the
API server presents one when its admission configuration gives it one for this webhook's host), so nobody
else gets to send a byte. Without it the webhook would answer anyone who reaches the port with the group a
pod would get (an oracle of the caches; the review's ``userInfo`` is the caller's own claim, worth
nothing), so that mode must be asked for explicitly (``allow_unauthenticated``), for control planes that
cannot present a certificate, with the port closed to all but the API server by the network.

What it reads: at most :data:`~grouper.webhook.limits.MAX_BODY_BYTES` (413 otherwise, the rest unread,
the connection closed) nested at most :data:`~grouper.webhook.limits.MAX_DEPTH` deep (400).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import ssl
from collections.abc import Generator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from grouper.webhook.admission import Admission
from grouper.webhook.certs import RELOAD_INTERVAL_SECONDS, CertificateReloader
from grouper.webhook.limits import (
    MAX_BODY_BYTES,
    BodyTooLarge,
    check_depth,
    declared_length_error,
    read_limited,
)

log = logging.getLogger(__name__)
MUTATE_PATH = "/mutate-pods"


def check_client_auth(client_ca: str, allow_unauthenticated: bool) -> None:
    """The webhook needs an authenticated caller unless the operator asked otherwise (see the module doc)."""
    if not client_ca and not allow_unauthenticated:
        raise ValueError(
            "--webhook-bind-address needs --webhook-client-ca (the CA that signs the API server's webhook "
            "client certificate), or --webhook-allow-unauthenticated=true when the API server cannot present "
            "one and only it can reach the webhook's port"
        )


def create_app(admission: Admission, *, max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    app = FastAPI(title="kai-pod-grouper admission", docs_url=None, redoc_url=None, openapi_url=None)

    @app.post(MUTATE_PATH)
    async def mutate(request: Request) -> JSONResponse:
        # Refuse an oversize body before reading it (declared) or as soon as it passes the limit (chunked);
        # the connection is closed rather than drained, so the rest is never read at all.
        refused = declared_length_error(request.headers.get("content-length"), max_body_bytes)
        try:
            if refused is not None:
                raise BodyTooLarge(refused)
            raw = await read_limited(request.stream(), max_body_bytes)
        except BodyTooLarge as e:
            return JSONResponse({"error": str(e)}, status_code=413, headers={"Connection": "close"})
        try:
            check_depth(raw)  # before parsing: the decoder recurses once per level
            body: Any = json.loads(raw)
            return JSONResponse(await admission.review(body))
        except (ValueError, RecursionError) as e:  # JSON, UTF-8, depth, not a review
            return JSONResponse({"error": f"request body: {e}"}, status_code=400)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:  # the service handles signals
        yield


class WebhookServer:
    def __init__(
        self,
        admission: Admission,
        bind_address: str,
        cert_file: str,
        key_file: str,
        *,
        client_ca: str = "",
        allow_unauthenticated: bool = False,
        reload_interval: float = RELOAD_INTERVAL_SECONDS,
    ) -> None:
        check_client_auth(client_ca, allow_unauthenticated)
        if not client_ca:
            log.warning("the admission webhook answers any client that reaches its port (no --webhook-client-ca)")
        host, _, port = bind_address.rpartition(":")
        self.host, self.port = host.strip("[]") or "0.0.0.0", int(port)
        self.config = uvicorn.Config(
            create_app(admission),
            host=self.host,
            port=self.port,
            ssl_certfile=cert_file,
            ssl_keyfile=key_file,
            ssl_ca_certs=client_ca or None,
            ssl_cert_reqs=ssl.CERT_REQUIRED if client_ca else ssl.CERT_NONE,
            log_level="warning",
            access_log=False,
            lifespan="off",
            log_config=None,
            timeout_graceful_shutdown=2,
        )
        self._server: _Server | None = None
        self._sock: socket.socket | None = None
        self.task: asyncio.Task[None] | None = None
        self.reload_interval = reload_interval
        self.reloader: CertificateReloader | None = None  # a renewed certificate is served without a restart
        self._reloading: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if not self.config.loaded:  # once: a restart after the server stopped reuses it (uvicorn loads once)
            self.config.load()  # reads the certificates: a bad one fails here, not on the first call
            assert self.config.ssl is not None
            self.reloader = CertificateReloader(self.config.ssl, str(self.config.ssl_certfile),
                                                str(self.config.ssl_keyfile), interval=self.reload_interval)
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as e:
            sock.close()
            raise OSError(
                e.errno, f"cannot bind the webhook server to {self.host}:{self.port}: {e.strerror}"
            ) from e
        sock.listen(128)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self._sock = sock
        self._server = _Server(self.config)
        self.task = asyncio.create_task(self._server.serve(sockets=[sock]), name="webhook")
        while not self._server.started and not self.task.done():
            await asyncio.sleep(0.01)
        if self.task.done():
            self.task.result()
        if self.reloader is not None and (self._reloading is None or self._reloading.done()):
            self._reloading = asyncio.create_task(self.reloader.run(), name="webhook-certificate")
        log.info("admission webhook listening on %s", self.url)

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}{MUTATE_PATH}"

    @property
    def serving(self) -> bool:
        """Accepting connections: started, and its task has not ended."""
        return (self._server is not None and self._server.started and self.task is not None
                and not self.task.done())

    async def stop(self) -> None:
        if self._reloading is not None:
            self._reloading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloading
            self._reloading = None
        if self._server is not None:
            self._server.should_exit = True
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self.task, 5)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
