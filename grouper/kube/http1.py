"""Keep-alive HTTP/1.1 connections to one API server, for unary requests (everything but watches).

Why not aiohttp's client for these: a pod patch through ``ClientSession.request`` costs ~300-400 µs of
CPU on this machine kind (URL and header objects, cookie and tracing hooks, timer handles, its
payload and response machinery), this ~140-160 µs (measured side by side on the same API server, 32
in flight, uvloop) — and a grouper sends one request per pod. What the API server needs of HTTP/1.1
is small: a request line and a few headers out; a status line, headers and a body framed by
``Content-Length`` or ``chunked`` back (the grouper never asks for compression). Watches stay on
aiohttp (``KubeClient.watch``): a stream, not a request.

Connections are kept (LIFO, at most ``limit`` open) and dropped when the server says
``Connection: close``, when a read failed half way, when they saw EOF while idle, or after
``idle_s`` unused (below the API server's idle timeout; Go's ``IdleConnTimeout``): checked when one is
taken and, for the least recently used, whenever one is put back — else the connections a burst opened
below the top of the stack would stay open for good while a steady trickle reuses the top one (the soak's
RSS rose with every new high-water mark of concurrent requests). A request that fails on a *reused*
connection before any byte of the answer arrived is sent once more on a new connection: the server
closed the idle connection as the request went out (Go's transport does the same); every write the
grouper makes is safe to repeat (creates by name, merge patches, deletes with preconditions).

Timeouts are :class:`Deadlines`, one loop timer for all the requests in flight, instead of an
``asyncio.timeout`` per request (a timer created and cancelled per pod patch: ~2% of the grouper's
CPU in a burst, docs/perf-journal.md).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

MAX_HEAD = 1 << 20  # status line and headers
_REUSE_ERRORS = (ConnectionError, asyncio.IncompleteReadError, EOFError)


class ProtocolError(OSError):
    """The server's answer is not HTTP/1.1 as expected (the connection is dropped)."""


class Response:
    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body


class _Conn:
    __slots__ = ("reader", "used", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, used: float) -> None:
        self.reader, self.writer = reader, writer
        self.used = used

    def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError):  # the loop may be closing
            self.writer.close()


class Http1Pool:
    """Create inside the running loop; ``await close()`` at the end."""

    def __init__(
        self,
        server: str,
        ssl_context: ssl.SSLContext | None,
        *,
        default_headers: dict[str, str],
        limit: int = 256,
        idle_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock``: injected by tests (idle expiry without waiting)."""
        u = urlsplit(server)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"server {server!r}: not an http(s) URL")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.ssl = ssl_context if u.scheme == "https" else None
        self.base = u.path.rstrip("/")
        host = f"[{self.host}]" if ":" in self.host else self.host
        if u.port:
            host += f":{u.port}"
        self._head = header_lines({"Host": host, **default_headers})
        self.idle_s = idle_s
        self._clock = clock
        # least recently used on the left: taken from the right (LIFO), expired from the left
        self._idle: collections.deque[_Conn] = collections.deque()
        self._slots = asyncio.Semaphore(limit)
        self._deadlines = Deadlines()
        self._closed = False

    def target(self, path: str, params: dict[str, str] | None) -> str:
        """The request target: the server's base path, the path (quoted where it is not already), the query."""
        target = self.base + quote(path, safe="/%:@!$&'()*+,;=-._~")
        if params:
            target += "?" + urlencode(params, quote_via=quote)
        return target

    async def request(
        self,
        method: str,
        target: str,
        headers: bytes,
        body: bytes | None,
        timeout: float,
    ) -> Response:
        """One request and its whole answer; ``headers``: more header lines, encoded (see
        :func:`header_lines`). Raises ``OSError`` (connection, TLS, protocol) and ``TimeoutError``;
        the caller turns both into a connection failure."""
        head = [f"{method} {target} HTTP/1.1\r\n".encode(), self._head, headers]
        if body is not None:
            head.append(b"Content-Length: %d\r\n" % len(body))
        head.append(b"\r\n")
        if body:
            head.append(body)
        data = b"".join(head)
        with self._deadlines.bound(timeout):  # waiting for a connection counts too
            async with self._slots:
                conn, reused = self._take(), True
                if conn is None:
                    conn, reused = await self._connect(), False
                try:
                    return await self._exchange(conn, data)
                except _REUSE_ERRORS as e:
                    conn.close()
                    if not reused or isinstance(e, _AnswerStarted) or (isinstance(e, asyncio.IncompleteReadError) and e.partial):
                        raise
                except BaseException:
                    conn.close()  # half-read answer, timeout, cancellation: the connection is unusable
                    raise
                conn = await self._connect()  # the server closed the idle connection as we sent on it
                try:
                    return await self._exchange(conn, data)
                except BaseException:
                    conn.close()
                    raise

    @property
    def idle_connections(self) -> int:
        return len(self._idle)

    def _take(self) -> _Conn | None:
        now = self._clock()
        while self._idle:
            conn = self._idle.pop()
            if now - conn.used < self.idle_s and not conn.reader.at_eof() and not conn.writer.is_closing():
                return conn
            conn.close()
        return None

    async def _connect(self) -> _Conn:
        if self._closed:
            raise ConnectionError("client is closed")
        reader, writer = await asyncio.open_connection(
            self.host, self.port, ssl=self.ssl, limit=MAX_HEAD, server_hostname=self.host if self.ssl else None
        )
        return _Conn(reader, writer, self._clock())

    async def _exchange(self, conn: _Conn, data: bytes) -> Response:
        conn.writer.write(data)
        reader = conn.reader
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError as e:
            raise ProtocolError(f"response head larger than {MAX_HEAD} bytes") from e
        try:
            return await self._answer(conn, head)
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            raise _AnswerStarted(f"connection lost while reading the answer: {e}") from e

    async def _answer(self, conn: _Conn, head: bytes) -> Response:
        lines = head[:-4].decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:100]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        status = int(code)
        reader = conn.reader
        length = headers.get("content-length")
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = await _read_chunked(reader)
        elif length is not None:
            if not length.isdigit():
                raise ProtocolError(f"bad Content-Length {length!r}")
            body = await reader.readexactly(int(length)) if length != "0" else b""
        elif status in (204, 304) or 100 <= status < 200:
            body = b""
        else:  # framed by the end of the connection
            body = await reader.read()
            headers["connection"] = "close"
        if headers.get("connection", "").lower() == "close" or version == "HTTP/1.0" or self._closed:
            conn.close()
        else:
            now = conn.used = self._clock()
            idle = self._idle
            idle.append(conn)
            while idle and now - idle[0].used >= self.idle_s:  # the least recently used, unused too long
                idle.popleft().close()
        return Response(status, headers, body)

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, collections.deque()
        for conn in idle:
            conn.close()


def header_lines(headers: dict[str, str]) -> bytes:
    """``Name: value`` lines for a request head. Values with a line break are refused (header injection)."""
    for k, v in headers.items():
        if any(c in f"{k}{v}" for c in "\r\n"):
            raise ValueError(f"header {k!r}: line break in name or value")
    return "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode()


class _Bound:
    """One task's deadline, as the context manager :meth:`Deadlines.bound` returns (a class, not a
    ``contextlib.contextmanager`` generator: that costs more per request than the timer it replaces)."""

    __slots__ = ("deadline", "expired", "owner", "seconds", "task")

    def __init__(self, owner: Deadlines, task: asyncio.Task[Any], seconds: float, deadline: float) -> None:
        self.owner, self.task, self.seconds, self.deadline, self.expired = owner, task, seconds, deadline, False

    def __enter__(self) -> None:
        self.owner._add(self)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self.owner._bounds.discard(self)
        # our cancel request is taken back whatever the body did with it (as asyncio.timeout does); only
        # when no other cancellation is pending does it become the timeout
        if self.expired and self.task.uncancel() == 0 and exc_type is asyncio.CancelledError:
            raise TimeoutError(f"no answer within {self.seconds:g} s") from None


class Deadlines:
    """Time limits for the awaits of many tasks, kept by one loop timer armed at the earliest deadline.

    ``with deadlines.bound(seconds):`` around awaits of the current task: once the time is up the task
    is cancelled and the block raises ``TimeoutError`` instead; a cancellation from anywhere else stays a
    cancellation (``Task.uncancel`` counts them, as ``asyncio.timeout`` does). The timer runs only while
    the task waits, so the cancellation always lands inside the block. Requests mostly share one
    timeout, so a new bound rarely moves the timer: the earliest deadline is an older request's."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None  # the first bound's (one loop, like the pool)
        self._bounds: set[_Bound] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at = 0.0

    def bound(self, seconds: float) -> _Bound:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("Deadlines.bound outside a task")
        return _Bound(self, task, seconds, loop.time() + seconds)

    def _add(self, b: _Bound) -> None:
        self._bounds.add(b)
        if self._timer is None or b.deadline < self._armed_at:
            self._arm(b.deadline)

    def _arm(self, when: float) -> None:
        assert self._loop is not None
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._armed_at = self._loop.call_at(when, self._check), when

    def _check(self) -> None:
        assert self._loop is not None
        self._timer = None
        now = self._loop.time()
        upcoming: float | None = None
        for b in self._bounds:
            if b.expired:
                continue
            if b.deadline <= now:
                b.expired = True
                b.task.cancel()
            elif upcoming is None or b.deadline < upcoming:
                upcoming = b.deadline
        if upcoming is not None:
            self._arm(upcoming)

    def __len__(self) -> int:
        return len(self._bounds)


class _AnswerStarted(ConnectionError):
    """The connection broke after the answer began: the request reached the server, so it is not resent."""


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        line = await reader.readuntil(b"\r\n")
        size_text = line[:-2].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise ProtocolError(f"bad chunk size {size_text[:20]!r}") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise ProtocolError("chunk not followed by CRLF")
