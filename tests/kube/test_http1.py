"""The keep-alive HTTP/1.1 pool under ``KubeClient.request``, against a plain asyncio server that answers
the ways an API server (or the network in front of it) can: Content-Length and chunked bodies, a
``Connection: close``, an idle connection closed by the server, an answer cut off half way, no answer,
a non-HTTP answer. Every real-server test goes through it as well."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest

from grouper.kube import config as kubeconfig
from grouper.kube.http1 import Deadlines, Http1Pool, header_lines
from grouper.kube.transport import ApiError, KubeClient

Handler = Callable[[bytes, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]


class Server:
    """Reads requests (head + Content-Length body) and lets ``handler`` answer; records what came in."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[bytes] = []
        self.connections = 0
        self.server: asyncio.base_events.Server | None = None
        self.url = ""
        self._handlers: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for task in self._handlers:  # a handler still sleeping must not outlive the test (one loop for all)
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length) if length else b""
                self.requests.append(head + body)
                if not await self.handler(head + body, reader, writer):
                    break
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()


def answer(status: int, body: bytes, *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


async def ok_json(request: bytes, reader: Any, writer: asyncio.StreamWriter) -> bool:
    writer.write(answer(200, orjson.dumps({"echo": request.split(b" ", 2)[1].decode()})))
    return True


@contextlib.asynccontextmanager
async def client_for(server: Server, timeout: float = 5.0) -> AsyncIterator[KubeClient]:
    c = KubeClient(kubeconfig.explicit(server.url, token="t0k"), qps=0, request_timeout=timeout)
    try:
        yield c
    finally:
        await c.close()


async def test_keep_alive_one_connection_for_sequential_requests() -> None:
    async with Server(ok_json) as s, client_for(s) as c:
        for i in range(5):
            assert await c.get(f"/api/v1/namespaces/n/pods/p{i}") == {"echo": f"/api/v1/namespaces/n/pods/p{i}"}
        assert s.connections == 1
        head = s.requests[0].decode()
        assert "Authorization: Bearer t0k\r\n" in head and "Host: 127.0.0.1:" in head
        assert "Accept: application/json\r\n" in head


async def test_patch_body_content_type_and_query_encoding() -> None:
    async with Server(ok_json) as s, client_for(s) as c:
        await c.merge_patch("/api/v1/namespaces/n/pods/p", {"metadata": {"annotations": {"a": "b"}}})
        got = await c.get("/api/v1/pods", {"labelSelector": "a=b,c in (x y)", "limit": 5, "continue": ""})
        req = s.requests[0]
        assert req.startswith(b"PATCH /api/v1/namespaces/n/pods/p HTTP/1.1\r\n")
        assert b"Content-Type: application/merge-patch+json\r\n" in req
        assert req.endswith(b'{"metadata":{"annotations":{"a":"b"}}}')
        assert got == {"echo": "/api/v1/pods?labelSelector=a%3Db%2Cc%20in%20%28x%20y%29&limit=5"}


async def test_chunked_body_with_extensions_and_trailers() -> None:
    async def chunked(request: bytes, reader: Any, writer: asyncio.StreamWriter) -> bool:
        body = orjson.dumps({"items": ["x" * 5000, "y"]})
        parts = [body[:7], body[7:4000], body[4000:]]
        out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        for i, p in enumerate(parts):
            out += f"{len(p):x}{';ext=1' if i == 1 else ''}\r\n".encode() + p + b"\r\n"
        writer.write(out + b"0\r\nX-Trailer: 1\r\n\r\n")
        return True

    async with Server(chunked) as s, client_for(s) as c:
        for _ in range(2):
            assert await c.get("/api/v1/pods") == {"items": ["x" * 5000, "y"]}
        assert s.connections == 1  # the connection survives a chunked answer


async def test_connection_close_answer_is_not_reused() -> None:
    async def close(request: bytes, reader: Any, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(200, b"{}", "Connection: close"))
        return False

    async with Server(close) as s, client_for(s) as c:
        for _ in range(3):
            assert await c.get("/api/v1/pods") == {}
        assert s.connections == 3


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    async def one_per_connection(request: bytes, reader: Any, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(201, b'{"ok": true}'))  # keep-alive advertised ...
        await writer.drain()
        return False  # ... but closed

    async with Server(one_per_connection) as s, client_for(s) as c:
        for _ in range(5):
            assert await c.create("/api/v1/namespaces/n/configmaps", {"metadata": {"name": "x"}}) == {"ok": True}
            await asyncio.sleep(0.05)  # the EOF arrives while the connection is idle
        assert len(s.requests) == 5 and s.connections == 5


async def test_a_request_on_a_connection_closed_as_it_went_out_is_sent_again_on_a_new_one() -> None:
    """The server takes the second request of a connection and closes it without a byte of answer (its
    idle timeout raced the request): the client sends it once more on a new connection."""
    answered = 0

    async def first_only(request: bytes, reader: Any, writer: asyncio.StreamWriter) -> bool:
        nonlocal answered
        if request.startswith(b"POST") and getattr(writer, "_seen", False):
            return False  # closed, nothing answered
        writer._seen = True  # type: ignore[attr-defined]
        answered += 1
        writer.write(answer(201, b'{"ok": true}'))
        return True

    async with Server(first_only) as s, client_for(s) as c:
        for _ in range(3):
            assert await c.create("/api/v1/namespaces/n/configmaps", {"metadata": {"name": "x"}}) == {"ok": True}
        assert answered == 3 and s.connections == 3
        assert len(s.requests) == 5  # the 2nd and 3rd went out twice: once on the closing connection


async def test_an_answer_cut_off_half_way_is_an_error_and_not_sent_again() -> None:
    async def cut(request: bytes, reader: Any, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"partial")
        await writer.drain()
        return False

    async with Server(cut) as s, client_for(s) as c:
        with pytest.raises(ApiError) as e:
            await c.create("/api/v1/namespaces/n/configmaps", {})
        assert e.value.status == 0 and e.value.reason == "ConnectionError"
        assert len(s.requests) == 1


def by_call(*handlers: Handler) -> Handler:
    """The n-th request is answered by the n-th handler (the last one answers the rest)."""
    calls = 0

    async def handle(request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        nonlocal calls
        calls += 1
        return await handlers[min(calls, len(handlers)) - 1](request, reader, writer)

    return handle


def answering(status: int, body: bytes, *headers: str) -> Handler:
    async def handle(request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(status, body, *headers))
        return True

    return handle


async def test_no_answer_times_out_and_the_connection_is_dropped() -> None:
    async def silent(request: bytes, reader: Any, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(5)
        return False

    silent_once = by_call(silent, answering(200, b"{}"))

    async with Server(silent_once) as s, client_for(s, timeout=0.3) as c:
        with pytest.raises(ApiError) as e:
            await c.get("/api/v1/pods")
        assert e.value.status == 0 and "TimeoutError" in e.value.message
        assert await c.get("/api/v1/pods") == {}  # a new connection, not the one with a late answer
        assert s.connections == 2


async def test_not_http_is_a_connection_error() -> None:
    async def garbage(request: bytes, reader: Any, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        return False

    async with Server(garbage) as s, client_for(s) as c:
        with pytest.raises(ApiError) as e:
            await c.get("/api/v1/pods")
        assert e.value.status == 0 and "status line" in e.value.message


async def test_error_status_with_a_kubernetes_status_body_and_retry_after() -> None:
    busy_then_missing = by_call(
        answering(429, b'{"kind":"Status","reason":"TooManyRequests","message":"slow down"}', "Retry-After: 0"),
        answering(404, b'{"kind":"Status","reason":"NotFound","message":"pods \\"p\\" not found"}'),
    )

    async with Server(busy_then_missing) as s, client_for(s) as c:
        assert await c.get_object("/api/v1/namespaces/n/pods/p") is None
        assert len(s.requests) == 2 and s.connections == 1


async def test_concurrent_requests_open_connections_up_to_the_limit() -> None:
    async def slow(request: bytes, reader: Any, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(0.05)
        writer.write(answer(200, b"{}"))
        return True

    async with Server(slow) as s:
        pool = Http1Pool(s.url, None, default_headers={}, limit=4)
        try:
            await asyncio.gather(*(pool.request("GET", "/x", b"", None, 5) for _ in range(12)))
        finally:
            await pool.close()
        assert s.connections == 4 and len(s.requests) == 12


def test_header_injection_is_refused() -> None:
    with pytest.raises(ValueError, match="line break"):
        header_lines({"Authorization": "Bearer x\r\nX-Evil: 1"})


def test_server_base_path_and_ipv6_host() -> None:
    pool = Http1Pool("https://[::1]:6443/k8s/clusters/c1/", None, default_headers={})
    assert pool.target("/api/v1/pods", {"limit": "5"}) == "/k8s/clusters/c1/api/v1/pods?limit=5"
    assert b"Host: [::1]:6443\r\n" in pool._head


# ---------------------------------------------------------------------------------------------- Deadlines
# The pool's timeouts: one loop timer for all requests in flight (what every request above relies on).


async def _bounded(deadlines: Deadlines, seconds: float, work: float) -> str:
    with deadlines.bound(seconds):
        await asyncio.sleep(work)
    return "done"


async def test_a_bound_turns_a_late_await_into_a_timeout_and_the_task_goes_on() -> None:
    deadlines = Deadlines()

    async def late_then_more() -> str:
        with pytest.raises(TimeoutError):
            await _bounded(deadlines, 0.05, 30)
        await asyncio.sleep(0.01)  # no cancellation left over for the task's next await
        return await _bounded(deadlines, 30, 0.01)

    assert await asyncio.wait_for(late_then_more(), 10) == "done"
    assert len(deadlines) == 0


async def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    deadlines = Deadlines()
    task = asyncio.create_task(_bounded(deadlines, 30, 30))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(deadlines) == 0


async def test_each_task_keeps_its_own_deadline_whatever_order_they_start_in() -> None:
    """A long bound arms the timer first; a shorter one started later must re-arm it earlier, and its
    expiry must not touch the long one, which then finishes normally."""
    deadlines = Deadlines()
    long = asyncio.create_task(_bounded(deadlines, 30, 0.3))
    await asyncio.sleep(0.01)
    short = asyncio.create_task(_bounded(deadlines, 0.05, 30))
    both = await asyncio.wait_for(asyncio.gather(long, short, return_exceptions=True), 10)
    assert both[0] == "done"
    assert isinstance(both[1], TimeoutError)


async def test_many_bounds_time_out_exactly_the_late_ones() -> None:
    deadlines = Deadlines()
    tasks = [asyncio.create_task(_bounded(deadlines, 0.1 if i % 3 == 0 else 30, 0.5 if i % 2 == 0 else 0.01))
             for i in range(60)]
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
    late = {i for i in range(60) if i % 3 == 0 and i % 2 == 0}  # short bound, long work
    assert {i for i, r in enumerate(results) if isinstance(r, TimeoutError)} == late
    assert all(r == "done" for i, r in enumerate(results) if i not in late)
    assert len(deadlines) == 0


async def test_a_body_that_swallows_the_timeout_leaves_no_cancellation_counted() -> None:
    """Our cancel request is taken back even when the awaited code swallowed it (as asyncio.timeout does):
    the task's count of pending cancellations must not stay raised for whatever it awaits later."""
    deadlines = Deadlines()

    async def swallowing() -> int:
        with deadlines.bound(0.05), contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(30)
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()

    assert await asyncio.wait_for(swallowing(), 10) == 0


async def test_connections_a_burst_opened_expire_while_a_trickle_reuses_the_newest() -> None:
    """LIFO reuse keeps the newest connection busy; the ones below it, opened by a burst, are closed once
    unused for ``idle_s`` (when any connection is put back), not kept open for good."""
    now = [100.0]

    async def slow(request: bytes, reader: Any, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(0.02)
        writer.write(answer(200, b"{}"))
        return True

    async with Server(slow) as s:
        pool = Http1Pool(s.url, None, default_headers={}, limit=8, idle_s=30.0, clock=lambda: now[0])
        try:
            await asyncio.gather(*(pool.request("GET", "/x", b"", None, 5) for _ in range(4)))
            assert pool.idle_connections == 4 and s.connections == 4
            for step in range(4):  # one request every 10 s: only the newest connection is used
                now[0] += 10.0
                await pool.request("GET", "/x", b"", None, 5)
                assert pool.idle_connections == (4 if step < 2 else 1), step
            assert s.connections == 4, "the trickle reused a connection the burst opened"
        finally:
            await pool.close()
