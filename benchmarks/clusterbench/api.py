"""A small asyncio client of the API server for the benchmark and its helper processes (aiohttp, bearer
token, the cluster's CA): JSON requests, paginated lists, and a watch that survives reconnects."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp

try:
    import orjson

    def _loads(b: bytes) -> Any:
        return orjson.loads(b)

    def _dumps(o: Any) -> bytes:
        return orjson.dumps(o)
except ImportError:  # pragma: no cover
    def _loads(b: bytes) -> Any:
        return json.loads(b)

    def _dumps(o: Any) -> bytes:
        return json.dumps(o).encode()


@dataclass(frozen=True)
class Endpoint:
    """Where and as whom to connect; picklable, so helper processes get one."""

    server: str
    token: str
    ca_file: str


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {str(body)[:300]}")
        self.status = status


class Api:
    def __init__(self, ep: Endpoint, connections: int = 64) -> None:
        self.ep = ep
        ctx = ssl.create_default_context(cafile=ep.ca_file)
        self.session = aiohttp.ClientSession(
            base_url=ep.server,
            connector=aiohttp.TCPConnector(ssl=ctx, limit=connections),
            headers={"Authorization": f"Bearer {ep.token}", "Accept": "application/json"},
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            skip_auto_headers=("Accept-Encoding",),  # like the grouper: no gzip of large answers
        )

    async def close(self) -> None:
        await self.session.close()

    async def request(self, method: str, path: str, body: Any = None, *, ok: tuple[int, ...] = (200, 201),
                      content_type: str = "application/json", params: dict[str, str] | None = None,
                      retries: int = 5) -> Any:
        data = _dumps(body) if body is not None else None
        headers = {"Content-Type": content_type} if data is not None else {}
        for attempt in range(retries + 1):
            try:
                async with self.session.request(method, path, data=data, headers=headers, params=params,
                                                timeout=aiohttp.ClientTimeout(total=60)) as r:
                    raw = await r.read()
                    status = r.status
            except (TimeoutError, aiohttp.ClientError):
                if attempt == retries:
                    raise
                await asyncio.sleep(0.2 * (attempt + 1))
                continue
            if status == 429 or (status >= 500 and attempt < retries):
                await asyncio.sleep(0.2 * (attempt + 1))
                continue
            decoded = _loads(raw) if raw else None
            if status not in ok:
                raise ApiError(method, path, status, decoded)
            return decoded
        raise AssertionError("unreachable")

    async def list(
        self, path: str, limit: int = 1000, selectors: dict[str, str] | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """Every item (paginated) and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        cont = ""
        while True:
            params = {**(selectors or {}), "limit": str(limit)}
            if cont:
                params["continue"] = cont
            body = await self.request("GET", path, params=params)
            items += body.get("items") or []
            cont = (body.get("metadata") or {}).get("continue") or ""
            if not cont:
                return items, body["metadata"]["resourceVersion"]

    async def stream_list(self, path: str, selectors: dict[str, str] | None = None) -> int:
        """A streaming list (a watch with ``sendInitialEvents``): the number of objects sent before the
        ``k8s.io/initial-events-end`` bookmark, each decoded."""
        params = {**(selectors or {}), "watch": "1", "sendInitialEvents": "true", "allowWatchBookmarks": "true",
                  "resourceVersionMatch": "NotOlderThan", "timeoutSeconds": "600"}
        n = 0
        async with self.session.get(path, params=params) as r:
            if r.status != 200:
                raise ApiError("WATCH", path, r.status, await r.text())
            pending: list[bytes] = []
            async for chunk in r.content.iter_any():
                pending.append(chunk)
                if b"\n" not in chunk:
                    continue
                lines = b"".join(pending).split(b"\n")
                pending = [lines.pop()]
                for line in lines:
                    if not line.strip():
                        continue
                    ev = _loads(line)
                    if ev.get("type") == "BOOKMARK":
                        ann = (ev["object"].get("metadata") or {}).get("annotations") or {}
                        if ann.get("k8s.io/initial-events-end") == "true":
                            return n
                    elif ev.get("type") == "ERROR":
                        raise ApiError("WATCH", path, int(ev["object"].get("code") or 0), ev["object"])
                    else:
                        n += 1
        raise ApiError("WATCH", path, 0, "the stream ended before its initial-events-end bookmark")

    async def watch(self, path: str, resource_version: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Events (type, object) from ``resource_version`` on, forever; reconnects from the last seen
        resourceVersion (bookmarks included). A 410 ends the iteration with ``("GONE", {})``."""
        rv = resource_version
        while True:
            params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": "3600"}
            try:
                async with self.session.get(path, params=params) as r:
                    if r.status != 200:
                        raise ApiError("WATCH", path, r.status, await r.text())
                    buf = b""
                    async for chunk in r.content.iter_any():
                        buf += chunk
                        while b"\n" in buf:
                            line, buf = buf.split(b"\n", 1)
                            if not line.strip():
                                continue
                            ev = _loads(line)
                            obj = ev.get("object") or {}
                            if ev.get("type") == "ERROR":
                                if obj.get("code") == 410:
                                    yield "GONE", {}
                                    return
                                raise ApiError("WATCH", path, int(obj.get("code") or 0), obj)
                            rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                            if ev.get("type") != "BOOKMARK":
                                yield ev["type"], obj
            except (TimeoutError, aiohttp.ClientError):
                await asyncio.sleep(0.2)
