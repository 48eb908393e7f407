"""The HTTP server's application while ``grouper run`` starts: the probes answer at once, the API loads aside.

The HTTP API (FastAPI, Starlette, its route models, the UI) costs about half of ``grouper run``'s start-up CPU
(~0.45 s of ~1 s on a 2-core box: importing FastAPI and building the app), yet the kubelet asks only
``/healthz`` and ``/readyz`` until the pod is ready. :class:`StartupFront` serves those two itself, from the
same checks and with the same bodies as the API's routes (:mod:`grouper.api.health` over
:meth:`grouper.api.state.StateReader.health`), while the API is built in a thread started with the service
(the loop meanwhile mostly waits on the API server and the Karta sandbox). Any other request waits for the
API, then is the API's; once built, every request, probes included, goes to the API as before.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import Future
from typing import Any

import orjson

from grouper.api import health
from grouper.api.state import AppState, StateReader

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class StartupFront:
    """An ASGI app answering ``GET /healthz`` and ``GET /readyz`` until ``build()`` (run in a thread by
    :meth:`start_loading`) has returned the real app; after that, the real app for everything."""

    def __init__(self, state: AppState, build: Callable[[], App]) -> None:
        self._reader = StateReader(state)
        self._build = build
        self.app: Future[App] = Future()

    def start_loading(self) -> Future[App]:
        """Build the real app in a daemon thread, now; the future holds it or why it could not be built."""
        if self.app.set_running_or_notify_cancel():
            threading.Thread(target=self._load, name="load-http-api", daemon=True).start()
        return self.app

    def _load(self) -> None:
        started = time.monotonic()
        try:
            app = self._build()
        except BaseException as e:  # handed to every request waiting for the API, and to the service
            self.app.set_exception(e)
            return
        log.info("HTTP API loaded in %.2fs", time.monotonic() - started)
        self.app.set_result(app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.app.done():
            await self.app.result()(scope, receive, send)
        elif scope["type"] == "http" and scope["method"] == "GET" and scope["path"] in ("/healthz", "/readyz"):
            await self._probe(scope["path"], send)
        else:
            await (await asyncio.wrap_future(self.app))(scope, receive, send)

    async def _probe(self, path: str, send: Send) -> None:
        """What the API's route answers: the check's model as compact JSON, 200 when ok, else 503."""
        check = health.liveness if path == "/healthz" else health.readiness
        result = check(self._reader.health(), self._reader.limits)
        body = orjson.dumps(result.model_dump())
        await send({"type": "http.response.start", "status": 200 if result.status == "ok" else 503,
                    "headers": [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


__all__ = ["StartupFront"]
