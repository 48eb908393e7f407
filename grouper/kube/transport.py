"""Async HTTP transport to the API server: requests over keep-alive HTTP/1.1 connections (``http1``),
watches (and the streaming lists of the informers) over aiohttp, orjson, client-side rate limiting,
metrics. Neither asks for compressed answers.

One :class:`KubeClient` per process shares one connection pool and one token bucket (``--qps`` /
``--burst``, like client-go's default rate limiter). Responses are decoded with orjson into plain
dicts. Watches are streamed line by line without aiohttp's line-length limit, so large custom
objects do not break them.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson

from grouper import __version__
from grouper.kube.config import ClusterConfig
from grouper.kube.http1 import Http1Pool, header_lines
from grouper.model.bounded import BoundedMemo
from grouper.observability.metrics import Metrics

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
JSON = "application/json"
# the object's metadata alone, else the whole object (any API server since 1.15 can do the first)
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json"


def retry_delay(status: int, retry_after: str | None) -> float | None:
    """How long to wait before asking again when the server said to (429 / 5xx with ``Retry-After``, as client-go
    does; at most 10 s); None: the answer stands. The tests' own client (tests/kube.py) follows the same rule."""
    if status not in (429, 500, 503, 504) or not retry_after:
        return None
    return min(float(retry_after) if retry_after.isdigit() else 1.0, 10.0)


class ApiError(Exception):
    """A non-2xx answer from the API server (``status`` 0 = no answer: connection failure)."""

    def __init__(
        self, status: int, reason: str, message: str, body: Any = None, *, method: str = "", path: str = ""
    ):
        self.status, self.reason, self.message, self.body = status, reason, message, body
        self.method, self.path = method, path
        super().__init__(
            f"{method} {path}: {status} {reason}: {message}" if method else f"{status} {reason}: {message}"
        )

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def forbidden(self) -> bool:
        return self.status == 403

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"


class RateLimiter:
    """Token bucket: ``burst`` tokens, refilled at ``qps`` per second; waiters are served in order."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """``clock`` and ``sleep``: injected by tests, so the bucket's arithmetic is checked without timing."""
        self.qps = float(qps)
        self.burst = max(1, int(burst))
        self._clock, self._sleep = clock, sleep
        self._tokens = float(self.burst)
        self._stamp = clock()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now

    async def acquire(self) -> None:
        if self.qps <= 0:  # disabled
            return
        async with self._lock:  # FIFO: one waiter sleeps at a time, the rest queue on the lock
            self._refill()
            if self._tokens < 1:
                await self._sleep((1 - self._tokens) / self.qps)
                self._refill()
            self._tokens -= 1


_PATH_RE = re.compile(
    r"^/(?:api/(?P<cv>[^/]+)|apis/(?P<g>[^/]+)/(?P<gv>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?(?:/(?P<res>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?)?/?$"
)


def describe_request(method: str, path: str, params: Mapping[str, Any] | None) -> tuple[str, str]:
    """(verb, resource) for metrics, like client-go's request labels, bounded by construction."""
    m = _PATH_RE.match(path.split("?", 1)[0])
    if m and not m.group("res") and m.group("ns"):
        res, name = "namespaces", m.group("ns")  # /api/v1/namespaces/<ns>: the Namespace object itself
    elif not m or not m.group("res"):
        return ("get" if method == "GET" else method.lower()), "discovery"
    else:
        res, name = m.group("res"), m.group("name")
    if m and m.group("sub"):
        res = f"{res}/{m.group('sub')}"
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
    if verb is None:
        if params and str(params.get("watch", "")).lower() in ("1", "true"):
            verb = "watch"
        else:
            verb = "get" if name else "list"
    return verb, res


def _status_message(body: Any, text: str) -> tuple[str, str]:
    if isinstance(body, dict) and body.get("kind") == "Status":
        return str(body.get("reason") or ""), str(body.get("message") or "")
    return "", text[:500]


class KubeClient:
    """Async client for one API server. Create it inside the running loop; ``await close()`` at the end."""

    def __init__(
        self,
        config: ClusterConfig,
        *,
        qps: float = 50.0,
        burst: int = 300,
        metrics: Metrics | None = None,
        user_agent: str = f"kai-pod-grouper/{__version__}",
        request_timeout: float = 30.0,
        watch_list: bool = True,
    ) -> None:
        self.config = config
        # informers sync with streaming lists while this is True (--watch-list); the first refusal by the
        # API server turns it off for every informer of this client
        self.watch_list = watch_list
        self.metrics = metrics
        self.user_agent = user_agent
        self.limiter = RateLimiter(qps, burst)
        self._timeout = request_timeout
        self._header_sets: BoundedMemo[tuple[str, str | None, str], bytes] = BoundedMemo(16)  # rotated tokens
        self.last_success: float | None = None  # monotonic time of the last 2xx answer or watch line
        ssl_context = config.ssl_context()
        # watches (streams) go through aiohttp; every other request through the leaner HTTP/1.1 pool
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ssl_context, limit=256, enable_cleanup_closed=True),
            headers={"User-Agent": user_agent, "Accept": JSON},
            json_serialize=lambda o: orjson.dumps(o).decode(),
            # no compression: the API server would gzip a streaming list (WatchListCompression, 1.37),
            # which cost its CPU more than the bytes saved (a restart over 100,000 pods was ready 1-3 s later)
            skip_auto_headers=("Accept-Encoding",),
        )
        self._http = Http1Pool(
            config.server,
            ssl_context if isinstance(ssl_context, ssl.SSLContext) else None,
            default_headers={"User-Agent": user_agent},  # Accept per request (_header_lines)
        )

    async def close(self) -> None:
        await self._http.close()
        await self._session.close()

    def _headers(self, content_type: str | None) -> dict[str, str]:
        h: dict[str, str] = {}
        token = self.config.bearer()
        if token:
            h["Authorization"] = f"Bearer {token}"
        if content_type:
            h["Content-Type"] = content_type
        return h

    def _header_lines(self, content_type: str | None, accept: str = JSON) -> bytes:
        """The request's own header lines, encoded once per (credential, content type, accept): the token
        changes only when the credentials rotate."""
        token = self.config.bearer() or ""
        cached = self._header_sets.get((token, content_type, accept))
        if cached is None:
            headers = {"Accept": accept, **self._headers(content_type)}
            cached = self._header_sets.put((token, content_type, accept), header_lines(headers))
        return cached

    def _count(self, method: str, path: str, params: Mapping[str, Any] | None, code: int | str) -> None:
        if self.metrics is None:
            return
        verb, res = describe_request(method, path, params)
        self.metrics.child(self.metrics.api_requests, verb, res, str(code)).inc()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | None = None,
        accept: str = JSON,
    ) -> Any:
        """One request; returns the decoded body. Raises :class:`ApiError` for non-2xx and transport errors.

        429 / 5xx with ``Retry-After`` are retried up to three times, a 401 once after re-reading rotating
        credentials; everything else is the caller's decision (the work queue backs off).
        """
        data = orjson.dumps(body) if body is not None and not isinstance(body, bytes) else body
        if data is not None and content_type is None:
            content_type = JSON
        attempts = 0
        refreshed = False
        while True:
            attempts += 1
            await self.limiter.acquire()
            try:
                resp = await self._http.request(
                    method,
                    self._http.target(path, _params(params)),
                    self._header_lines(content_type, accept),
                    data,
                    timeout or self._timeout,
                )
                raw, status = resp.body, resp.status
                retry_after = resp.headers.get("retry-after")
            except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as e:
                self._count(method, path, params, "error")
                raise ApiError(
                    0, "ConnectionError", f"{type(e).__name__}: {e}", method=method, path=path
                ) from e
            self._count(method, path, params, status)
            decoded: Any = None
            if raw:
                try:
                    decoded = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    decoded = None
            if 200 <= status < 300:
                self.last_success = time.monotonic()
                return decoded
            if status == 401 and not refreshed and self.config.refresh_token():
                refreshed = True
                continue
            delay = retry_delay(status, retry_after)
            if delay is not None and attempts < 4:
                await asyncio.sleep(delay)
                continue
            reason, message = _status_message(decoded, raw.decode(errors="replace"))
            raise ApiError(status, reason, message, decoded, method=method, path=path)

    async def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return await self.request("GET", path, params=params)

    async def get_object(self, path: str) -> dict[str, Any] | None:
        """The object at ``path``; None when it does not exist (404) or the answer is not an object."""
        try:
            obj = await self.get(path)
        except ApiError as e:
            if e.not_found:
                return None
            raise
        return obj if isinstance(obj, dict) else None

    async def list_items(
        self, path: str, params: Mapping[str, Any] | None = None, *, page_size: int = 500
    ) -> list[dict[str, Any]]:
        """Every item of a collection, page by page (``limit`` / ``continue``), with ``apiVersion`` and
        ``kind`` filled in from the list (the server leaves them out of items). An expired ``continue``
        token (410) starts the list over."""
        items: list[dict[str, Any]] = []
        cont = ""
        while True:
            try:
                page = await self.get(path, {**(params or {}), "limit": page_size, "continue": cont})
            except ApiError as e:
                if e.gone and cont:
                    items, cont = [], ""
                    continue
                raise
            page = page if isinstance(page, dict) else {}
            kind = str(page.get("kind") or "").removesuffix("List")
            for item in page.get("items") or []:
                if isinstance(item, dict):
                    item.setdefault("apiVersion", page.get("apiVersion"))
                    item.setdefault("kind", kind)
                    items.append(item)
            cont = str((page.get("metadata") or {}).get("continue") or "")
            if not cont:
                return items

    async def create(self, path: str, obj: dict[str, Any]) -> Any:
        return await self.request("POST", path, body=obj)

    async def replace(self, path: str, obj: dict[str, Any]) -> Any:
        return await self.request("PUT", path, body=obj)

    async def merge_patch(self, path: str, patch: dict[str, Any], *, metadata_only: bool = False) -> Any:
        """``metadata_only``: the answer is the object's ``metadata`` alone (a ``PartialObjectMetadata``)
        for a caller that reads nothing else of it; the API server then neither encodes nor sends the
        spec and status (most of a pod), and we do not decode them. A server that cannot answer so
        sends the whole object (the second choice of the Accept header)."""
        accept = METADATA_ONLY if metadata_only else JSON
        return await self.request("PATCH", path, body=patch, content_type=MERGE_PATCH, accept=accept)

    async def watch(
        self,
        path: str,
        params: Mapping[str, Any],
        *,
        timeout: float,
        on_open: Callable[[], None] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Stream watch events (``{"type", "object"}``) until the server closes the stream.

        ``timeout`` bounds a silent connection (no byte for that long, bookmarks included); ``on_open``
        is called once the server accepted the watch (200), before any event. A line that is not JSON
        ends the stream like a broken connection (``ApiError`` status 0): the caller re-watches.
        """
        params = {**params, "watch": "true"}
        await self.limiter.acquire()
        try:
            resp = await self._session.get(
                self.config.server + path,
                params=_params(params),
                headers=self._headers(None),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._timeout, sock_read=timeout),
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            self._count("GET", path, params, "error")
            raise ApiError(0, "ConnectionError", f"{type(e).__name__}: {e}", method="WATCH", path=path) from e
        self._count("GET", path, params, resp.status)
        try:
            if resp.status != 200:
                raw = await resp.read()
                if resp.status == 401:
                    self.config.refresh_token()
                try:
                    decoded = orjson.loads(raw) if raw else None
                except orjson.JSONDecodeError:
                    decoded = None
                reason, message = _status_message(decoded, raw.decode(errors="replace"))
                raise ApiError(resp.status, reason, message, decoded, method="WATCH", path=path)
            self.last_success = time.monotonic()
            if on_open is not None:
                on_open()
            pending: list[bytes] = []  # the start of a line not yet complete (a large object spans chunks)
            try:
                async for chunk in resp.content.iter_any():
                    pending.append(chunk)
                    if b"\n" not in chunk:
                        continue
                    # one split per chunk: a chunk carries many events during a burst, and slicing the
                    # remainder off after each line would copy it once per line
                    lines = b"".join(pending).split(b"\n")
                    pending = [lines.pop()]
                    self.last_success = time.monotonic()
                    for line in lines:
                        if line.strip():
                            yield orjson.loads(line)
            except orjson.JSONDecodeError as e:
                raise ApiError(
                    0, "BadWatchLine", f"watch stream: not JSON: {e}", method="WATCH", path=path
                ) from e
            except (TimeoutError, aiohttp.ClientError, OSError) as e:
                raise ApiError(
                    0, "ConnectionError", f"watch stream: {type(e).__name__}: {e}", method="WATCH", path=path
                ) from e
        finally:
            resp.release()


def _params(params: Mapping[str, Any] | None) -> dict[str, str] | None:
    if not params:
        return None
    out: dict[str, str] = {}
    for k, v in params.items():
        if v is None or v == "":
            continue
        out[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return out


def object_path(
    group: str,
    version: str,
    plural: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """REST path of a collection or object (names are URL-quoted)."""
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{plural}"
    if name:
        base += f"/{quote(name, safe='')}"
    if subresource:
        base += f"/{subresource}"
    return base
