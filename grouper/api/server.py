"""Serve the API with uvicorn on the *current* asyncio loop, next to the controller.

    server = HttpServer(create_app(state), "127.0.0.1:8080")
    await server.start()      # binds now: a busy port fails here, with OSError
    ...
    await server.stop()

Unlike ``uvicorn.Server.serve`` this installs no signal handlers (the service owns SIGTERM/SIGINT)
and never calls ``sys.exit``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Generator
from typing import Any

import uvicorn

log = logging.getLogger(__name__)

DEFAULT_BIND_ADDRESS = "127.0.0.1:8080"  # loopback: exposing the port is a deliberate choice (the chart's)


def parse_bind_address(text: str) -> tuple[str, int]:
    """``host:port``, ``:port`` (all interfaces) or ``[v6]:port`` -> (host, port). Raises ValueError."""
    host, sep, port_s = text.rpartition(":")
    if not sep or not port_s.isdigit() or not 0 <= int(port_s) <= 65535:
        raise ValueError(f"bind address {text!r}: expected HOST:PORT, e.g. {DEFAULT_BIND_ADDRESS}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port_s)


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:  # the service handles signals
        yield


class HttpServer:
    def __init__(self, app: Any, bind_address: str = DEFAULT_BIND_ADDRESS, *, log_level: str = "warning") -> None:
        """``app``: an ASGI app (FastAPI's, or ``grouper.runtime.http_front``'s while the service starts; FastAPI
        is not imported here, so the service can answer its probes before loading it)."""
        self.host, self.port = parse_bind_address(bind_address)
        self.app = app
        self._config = uvicorn.Config(
            app, host=self.host, port=self.port, log_level=log_level, access_log=False, lifespan="off",
            log_config=None, timeout_graceful_shutdown=5,
        )
        self._server = _Server(self._config)  # a new one at each start: a uvicorn server serves once
        self._sock: socket.socket | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    async def start(self) -> None:
        """Bind the port and start serving in a task. Raises OSError when the address is taken."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as e:
            sock.close()
            raise OSError(e.errno, f"cannot bind the HTTP server to {self.host}:{self.port}: {e.strerror}") from e
        sock.listen(128)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]  # resolves port 0
        self._sock = sock
        self._server = _Server(self._config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="http")
        while not self._server.started and not self._task.done():
            await asyncio.sleep(0.01)
        if self._task.done():
            self._task.result()  # re-raise why it could not start
        log.info("HTTP server listening on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        """Stop accepting, finish in-flight requests (up to 5 s), close the socket."""
        self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._task, 10)
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task


__all__ = ["DEFAULT_BIND_ADDRESS", "HttpServer", "parse_bind_address"]
