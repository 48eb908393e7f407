"""A tiny in-process fake API server (aiohttp) for timing-sensitive unit tests of the informer and
leader election: list, watch (a queue of lines per open watch), GET/PUT/POST of Leases, and fault
switches — refuse connections (``down()``), hang requests, send a garbage watch line. The real-server
tests cover the same code against kube-apiserver; this one makes the timing deterministic."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from grouper.kube import config as kubeconfig
from grouper.kube.config import ClusterConfig


class FakeApi:
    def __init__(self, *, watch_list: bool = True) -> None:
        """``watch_list``: serve streaming lists (a watch with ``sendInitialEvents``), as Kubernetes >= 1.34
        does; else refuse them as a server with the WatchList feature off does (422)."""
        self.watch_list = watch_list
        self.pods: dict[str, dict[str, Any]] = {}
        self.rv = 100
        self.watches: list[asyncio.Queue[bytes | None]] = []
        self.lists = 0  # full lists served: LISTs and streaming lists
        self.cut_initial_after: int | None = None  # the next streaming list ends after this many objects
        self.watch_opens = 0
        self._unhung = asyncio.Event()
        self._unhung.set()
        self.leases: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.port = 0

    # ------------------------------------------------------------------ lifecycle

    async def start(self, port: int = 0) -> None:
        app = web.Application()
        app.router.add_get("/api/v1/pods", self._pods)
        app.router.add_get("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}", self._get_lease)
        app.router.add_put("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}", self._put_lease)
        app.router.add_post("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", self._post_lease)
        app.router.add_get("/livez", self._livez)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, "127.0.0.1", port or self.port)
        await self._site.start()
        server = self._site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def down(self) -> None:
        """Stop listening and cut every open watch: clients see connection refused / reset."""
        for q in self.watches:
            q.put_nowait(None)
        self.watches.clear()
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner = self._site = None

    async def up(self) -> None:
        await self.start(self.port)

    def config(self) -> ClusterConfig:
        return kubeconfig.explicit(f"http://127.0.0.1:{self.port}", token="t")

    # ------------------------------------------------------------------ objects

    def add_pod(self, name: str, **labels: str) -> None:
        self.rv += 1
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": str(self.rv),
            "labels": labels}, "spec": {"schedulerName": "kai-scheduler"}}
        self.pods[name] = pod
        self._send({"type": "ADDED", "object": pod})

    def expire(self) -> None:
        """An ERROR event 410 on every open watch (the resourceVersion it continues from is too old)."""
        self._send({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "code": 410,
                                                "reason": "Expired", "message": "too old resource version"}})

    def garbage(self) -> None:
        for q in self.watches:
            q.put_nowait(b"this is not json\n")

    def _send(self, event: dict[str, Any]) -> None:
        line = json.dumps(event).encode() + b"\n"
        for q in self.watches:
            q.put_nowait(line)

    # ------------------------------------------------------------------ handlers

    @property
    def hang(self) -> bool:
        """While True every request waits (a hung API server); set False to answer again."""
        return not self._unhung.is_set()

    @hang.setter
    def hang(self, value: bool) -> None:
        if value:
            self._unhung.clear()
        else:
            self._unhung.set()

    async def _maybe_hang(self) -> None:
        await self._unhung.wait()

    async def _livez(self, request: web.Request) -> web.Response:
        await self._maybe_hang()
        return web.Response(text="ok")

    async def _pods(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(("GET", str(request.rel_url)))
        await self._maybe_hang()
        if request.query.get("watch") == "true":
            q: asyncio.Queue[bytes | None] = asyncio.Queue()
            if request.query.get("sendInitialEvents") == "true":
                if not self.watch_list:
                    return web.json_response({"kind": "Status", "code": 422, "reason": "Invalid", "message": (
                        "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents "
                        "is forbidden for watch unless the WatchList feature gate is enabled")}, status=422)
                self.lists += 1
                pods, cut, self.cut_initial_after = list(self.pods.values()), self.cut_initial_after, None
                for pod in pods[:cut]:
                    q.put_nowait(json.dumps({"type": "ADDED", "object": pod}).encode() + b"\n")
                if cut is not None:
                    q.put_nowait(None)  # the connection breaks before the end of the objects
                q.put_nowait(json.dumps({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {
                    "resourceVersion": str(self.rv), "annotations": {"k8s.io/initial-events-end": "true"}}}}).encode()
                    + b"\n")
            self.watch_opens += 1
            self.watches.append(q)
            resp = web.StreamResponse()
            await resp.prepare(request)
            while True:
                line = await q.get()
                if line is None:
                    break
                await resp.write(line)
            return resp
        self.lists += 1
        return web.json_response({"kind": "PodList", "apiVersion": "v1",
                                  "metadata": {"resourceVersion": str(self.rv)}, "items": list(self.pods.values())})

    async def _get_lease(self, request: web.Request) -> web.Response:
        await self._maybe_hang()
        lease = self.leases.get(request.match_info["name"])
        if lease is None:
            return web.json_response({"kind": "Status", "reason": "NotFound", "message": "no"}, status=404)
        return web.json_response(lease)

    async def _put_lease(self, request: web.Request) -> web.Response:
        await self._maybe_hang()
        body = await request.json()
        cur = self.leases.get(request.match_info["name"])
        if cur is None or cur["metadata"]["resourceVersion"] != body["metadata"].get("resourceVersion"):
            return web.json_response({"kind": "Status", "reason": "Conflict", "message": "rv"}, status=409)
        self.rv += 1
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.leases[request.match_info["name"]] = body
        return web.json_response(body)

    async def _post_lease(self, request: web.Request) -> web.Response:
        await self._maybe_hang()
        body = await request.json()
        name = body["metadata"]["name"]
        if name in self.leases:
            return web.json_response({"kind": "Status", "reason": "AlreadyExists", "message": "x"}, status=409)
        self.rv += 1
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.leases[name] = body
        return web.json_response(body, status=201)


async def until(cond: Callable[[], bool], timeout: float = 10.0) -> float:
    """Wait for ``cond`` (polled every 20 ms); the seconds it took. TimeoutError after ``timeout``."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.02)
    return time.monotonic() - t0
