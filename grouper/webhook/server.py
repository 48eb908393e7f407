"""Serve the admission webhook over TLS on its own port (the API server only calls HTTPS webhooks).

server = WebhookServer(admission, "0.0.0.0:9443", cert_file, key_file)
await server.start()     # binds now; a busy port or a bad certificate fails here
...
await server.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Generator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from grouper.webhook.admission import Admission

log = logging.getLogger(__name__)
MUTATE_PATH = "/mutate-pods"


def create_app(admission: Admission) -> FastAPI:
    app = FastAPI(title="kai-pod-grouper admission", docs_url=None, redoc_url=None, openapi_url=None)

    @app.post(MUTATE_PATH)
    async def mutate(request: Request) -> JSONResponse:
        try:
            body: Any = await request.json()
            return JSONResponse(await admission.review(body))
        except ValueError as e:
            return JSONResponse({"error": str(e)}, status_code=400)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:  # the service handles signals
        yield


class WebhookServer:
    def __init__(self, admission: Admission, bind_address: str, cert_file: str, key_file: str) -> None:
        host, _, port = bind_address.rpartition(":")
        self.host, self.port = host.strip("[]") or "0.0.0.0", int(port)
        self.config = uvicorn.Config(
            create_app(admission),
            host=self.host,
            port=self.port,
            ssl_certfile=cert_file,
            ssl_keyfile=key_file,
            log_level="warning",
            access_log=False,
            lifespan="off",
            log_config=None,
            timeout_graceful_shutdown=2,
        )
        self._server: _Server | None = None
        self._sock: socket.socket | None = None
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.config.load()  # reads the certificate: a bad one fails here, not on the first call
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
        log.info("admission webhook listening on https://%s:%d%s", self.host, self.port, MUTATE_PATH)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self.task, 5)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
