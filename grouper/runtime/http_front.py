"""The HTTP server's application while ``grouper run`` starts: the probes answer at once, the API loads later.

The HTTP API (FastAPI, Starlette, pydantic, its route models, the UI) costs ~0.35 s of CPU to import and
build, more than half of what the rest of ``grouper run`` needs to be ready, yet the kubelet asks only
``/healthz`` and ``/readyz`` until the pod is ready. :class:`StartupFront` serves those two itself, from the
same checks and with the same bodies as the API's routes (:mod:`grouper.api.health`, plain dataclasses, over
:meth:`grouper.api.state.StateReader.health`), and builds the API in a thread only once it is needed
(:meth:`StartupFront.start_loading`): after its first ``/readyz`` 200 (the kubelet's probe), so the build
never competes for the interpreter with the start-up itself, or at the first other request, which waits for
the API and then is the API's. Once built, every request, probes included, goes to the API as before.
Nothing on the way to ready imports FastAPI or pydantic (tests/runtime/test_ready_imports.py).
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
    """An ASGI app answering ``GET /healthz`` and ``GET /readyz`` until ``build()`` has returned the real app
    (run in a thread by :meth:`start_loading`: after the first ``/readyz`` 200, at the first other request,
    or when the owner calls it); after that, the real app for everything."""

    def __init__(self, state: AppState, build: Callable[[], App]) -> None:
        self._reader = StateReader(state)
        self._build = build
        self.app: Future[App] = Future()
        self._loading = False

    def start_loading(self) -> Future[App]:
        """Build the real app in a daemon thread, started by the first call (later calls return the same
        future; all calls from the loop's thread); the future holds the app or why it could not be built."""
        if not self._loading:
            self._loading = True
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
        else:  # not a probe: the API's, which this request starts loading unless readiness already did
            await (await asyncio.wrap_future(self.start_loading()))(scope, receive, send)

    async def _probe(self, path: str, send: Send) -> None:
        """What the API's route answers: the check's body as compact JSON, 200 when ok, else 503."""
        check = health.liveness if path == "/healthz" else health.readiness
        result = check(self._reader.health(), self._reader.limits)
        body = orjson.dumps(result.body())
        await send({"type": "http.response.start", "status": result.http_status,
                    "headers": [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})
        if path == "/readyz" and result.http_status == 200:
            self.start_loading()  # ready: the API loads now, after the start-up it would have slowed


__all__ = ["StartupFront"]
