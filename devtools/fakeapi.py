"""The one fake Kubernetes API server, for the timing-sensitive unit tests (informer, leader election) and
for ``benchmarks/bench_event_loop.py``. The real-server tests cover the same code against kube-apiserver;
this one makes timing deterministic and costs little enough that the benchmark measures the grouper.

It serves what ``grouper run`` asks for with bare pods (the default grouper): pods
(list/watch/get/merge-patch), PodGroups ``scheduling.run.ai/v2alpha2`` (list/watch/get/create/
update/delete), PriorityClasses and Kartas (empty list/watch), Leases (get/create/update), Events
(create/patch) and ``/livez``. LISTs are paginated (``limit``/``continue``) over a snapshot; watches
stream chunked JSON lines, a streaming list's (``sendInitialEvents=true``) first every object as ADDED and
the ``k8s.io/initial-events-end`` bookmark; every write bumps a global resourceVersion and is echoed on
the watches. Objects are kept as serialized JSON (orjson), parsed only when patched, so 100,000 pods cost
little memory and CPU here.

In process (tests): ``await FakeApi().start()``, then ``config()`` for a client, objects through
``add_pod`` / ``put_pod`` / ``remove_pod`` and ``leases``, and the fault switches: ``down()`` / ``up()``
(refuse connections, cut every watch), ``hang`` (every request waits), ``garbage()`` (a line that is not
JSON), ``expire()`` (410 on the watches), ``end_watches()`` (the server's watch timeout),
``cut_initial_after`` (the next streaming list breaks after that many objects), ``watch_list=False``
(refuse streaming lists with 422, as a server with the WatchList feature off does).

As a process (the benchmark), with control endpoints that are not Kubernetes: ``POST /_bench/populate``
(N pods already annotated + their PodGroups, from templates), ``POST /_bench/burst`` (push N new pods on
the pod watches as fast as possible), ``POST /_bench/gone`` (410 on the pod watches: forces a re-list),
``POST /_bench/clear``, ``GET /_bench/stats`` (writes by verb and resource, Lease renewals as the
server saw them, burst progress, unknown paths).

    python -m devtools.fakeapi --port-file /tmp/port   # writes the port once listening
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from grouper.kube import config as kubeconfig
from grouper.kube.config import ClusterConfig

Obj = dict[str, Any]
PLACEHOLDER = "@@I@@"
CHUNK_LINES = 200  # watch lines per write during a burst
POD_NAMESPACE = "ns"  # the namespace of the pods add_pod makes


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
            "message": message}
    return web.Response(body=orjson.dumps(body), status=code, content_type="application/json")


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class Kind:
    """Objects of one resource (serialized), its open watches."""

    def __init__(self, kind: str, api_version: str) -> None:
        self.kind, self.api_version = kind, api_version
        self.objects: dict[tuple[str, str], bytes] = {}
        self.watches: list[asyncio.Queue[bytes | None]] = []
        self.lists = 0  # full lists served: first pages of LISTs and streaming lists
        self.watch_opens = 0

    def send(self, etype: str, raw: bytes) -> None:
        self.send_line(b'{"type":"' + etype.encode() + b'","object":' + raw + b"}\n")

    def send_line(self, line: bytes | None) -> None:
        """``line`` on every open watch; None ends them."""
        for q in self.watches:
            q.put_nowait(line)


class FakeApi:
    def __init__(self, *, watch_list: bool = True) -> None:
        """``watch_list``: serve streaming lists (a watch with ``sendInitialEvents``), as Kubernetes >= 1.34
        does; else refuse them as a server with the WatchList feature off does (422)."""
        self.watch_list = watch_list
        self.rv = 1000
        self.kinds = {
            "pods": Kind("Pod", "v1"),
            "podgroups": Kind("PodGroup", "scheduling.run.ai/v2alpha2"),
            "priorityclasses": Kind("PriorityClass", "scheduling.k8s.io/v1"),
            "kartas": Kind("Karta", "run.ai/v1alpha1"),
        }
        self.leases: dict[str, Obj] = {}  # by name: the grouper keeps its Lease in one namespace
        self.writes: collections.Counter[str] = collections.Counter()  # "verb resource" -> count
        self.lease_renewals: list[tuple[float, str]] = []  # (receive time, holder) of every successful Lease PUT
        self.unknown: collections.Counter[str] = collections.Counter()
        self.requests: list[tuple[str, str]] = []  # (method, URL) of every list and watch
        self.cut_initial_after: int | None = None  # the next streaming list breaks after this many objects
        self.snapshots: dict[str, list[bytes]] = {}
        self.burst: dict[str, Any] = {}
        self.burst_names: set[str] = set()
        self.burst_patched: dict[str, float] = {}
        self.burst_created_pgs = 0
        self.started = time.monotonic()
        self._unhung = asyncio.Event()
        self._unhung.set()
        self._runner: web.AppRunner | None = None
        self.port = 0

    def next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    @property
    def lists(self) -> int:
        """Full lists served, of every kind."""
        return sum(k.lists for k in self.kinds.values())

    @property
    def watch_opens(self) -> int:
        return sum(k.watch_opens for k in self.kinds.values())

    # ------------------------------------------------------------------ lifecycle (in process)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.dispatch)
        return app

    async def start(self, port: int = 0, host: str = "127.0.0.1") -> None:
        """Listen on ``port`` (0: a free one, kept in ``port``)."""
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def down(self) -> None:
        """Stop listening and cut every open watch: clients see connection refused / reset."""
        for k in self.kinds.values():
            k.send_line(None)
            k.watches.clear()
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner = None

    async def up(self) -> None:
        """Listen again on the same port."""
        await self.start(self.port)

    def config(self) -> ClusterConfig:
        return kubeconfig.explicit(f"http://127.0.0.1:{self.port}", token="t")

    # ------------------------------------------------------------------ faults and objects (in process)

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

    def garbage(self) -> None:
        """A line that is not JSON on every pod watch."""
        self.kinds["pods"].send_line(b"this is not json\n")

    def expire(self) -> None:
        """An ERROR event 410 on every pod watch (the resourceVersion it continues from is too old)."""
        self.kinds["pods"].send_line(orjson.dumps({"type": "ERROR", "object": {
            "kind": "Status", "apiVersion": "v1", "code": 410, "reason": "Expired",
            "message": "too old resource version"}}) + b"\n")

    def end_watches(self) -> None:
        """End every pod watch, as the server does when a watch's timeout runs out."""
        pods = self.kinds["pods"]
        pods.send_line(None)
        pods.watches.clear()

    def put_pod(self, name: str, labels: dict[str, str] | None = None, *, event: str | None = "ADDED") -> Obj:
        """Store a pod of namespace ``POD_NAMESPACE`` with a new resourceVersion; ``event`` (None: no
        event, a change the watches miss) on every pod watch."""
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": POD_NAMESPACE, "uid": f"uid-{name}", "resourceVersion": self.next_rv(),
            "labels": dict(labels or {})}, "spec": {"schedulerName": "kai-scheduler"}}
        raw = orjson.dumps(pod)
        self.kinds["pods"].objects[(POD_NAMESPACE, name)] = raw
        if event:
            self.kinds["pods"].send(event, raw)
        return pod

    def add_pod(self, name: str, **labels: str) -> Obj:
        """A new pod, sent as ADDED on the pod watches."""
        return self.put_pod(name, labels)

    def remove_pod(self, name: str, *, event: bool = False) -> None:
        """Delete a pod; DELETED on the watches only with ``event``."""
        raw = self.kinds["pods"].objects.pop((POD_NAMESPACE, name))
        if event:
            self.kinds["pods"].send("DELETED", raw)

    # ------------------------------------------------------------------ routing

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        await self._unhung.wait()
        path = request.path.rstrip("/")
        parts = path.strip("/").split("/")
        m = request.method
        if path in ("/livez", "/healthz", "/readyz"):
            return web.Response(text="ok")
        if parts[0] == "_bench":
            return await self.control(request, parts[1] if len(parts) > 1 else "")
        # /api/v1/... or /apis/<group>/<version>/...
        if parts[0] == "api" and len(parts) >= 2:
            rest = parts[2:]
        elif parts[0] == "apis" and len(parts) >= 3:
            rest = parts[3:]
        else:
            rest = None
        ns = ""
        if rest and rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        if rest:
            res, name = rest[0], (rest[1] if len(rest) > 1 else "")
            if len(rest) <= 2:
                if res in self.kinds:
                    kind = self.kinds[res]
                    if m == "GET" and not name:
                        self.requests.append((m, str(request.rel_url)))
                        if request.query.get("watch") in ("true", "1"):
                            return await self.watch(request, kind, ns)
                        return self.list(request, kind, ns)
                    if m == "GET":
                        raw = kind.objects.get((ns, name))
                        if raw is None:
                            return _status(404, "NotFound", f"{res} {name} not found")
                        return web.Response(body=raw, content_type="application/json")
                    if m == "PATCH" and res == "pods" and name:
                        return await self.patch_pod(request, ns, name)
                    if m == "POST" and res == "podgroups" and not name:
                        return await self.create_pg(request, ns)
                    if m == "PUT" and res == "podgroups" and name:
                        return await self.update_pg(request, ns, name)
                    if m == "DELETE" and res == "podgroups" and name:
                        return self.delete_pg(ns, name)
                if res == "leases":
                    return await self.lease(request, ns, name)
                if res == "events" and m in ("POST", "PATCH"):
                    self.writes[f"{'create' if m == 'POST' else 'patch'} events"] += 1
                    body = await request.json()
                    return _json(body, 201 if m == "POST" else 200)
        self.unknown[f"{m} {path}"] += 1
        return _status(404, "NotFound", f"the fake serves no {m} {path}")

    # ------------------------------------------------------------------ list / watch

    def list(self, request: web.Request, kind: Kind, ns: str) -> web.Response:
        limit = int(request.query.get("limit") or 0)
        cont = request.query.get("continue") or ""
        if cont:
            snap_id, _, off = cont.partition(":")
            items = self.snapshots.get(snap_id)
            if items is None:
                return _status(410, "Expired", "continue token expired")
            offset = int(off)
        else:
            kind.lists += 1
            items = [raw for (ons, _), raw in kind.objects.items() if not ns or ons == ns]
            snap_id, offset = uuid.uuid4().hex, 0
            self.snapshots[snap_id] = items
        end = offset + limit if limit else len(items)
        page = items[offset:end]
        meta: Obj = {"resourceVersion": str(self.rv)}
        if end < len(items):
            meta["continue"] = f"{snap_id}:{end}"
        else:
            self.snapshots.pop(snap_id, None)
        body = (
            b'{"kind":"' + kind.kind.encode() + b'List","apiVersion":"' + kind.api_version.encode()
            + b'","metadata":' + orjson.dumps(meta) + b',"items":[' + b",".join(page) + b"]}"
        )
        return web.Response(body=body, content_type="application/json")

    async def watch(self, request: web.Request, kind: Kind, ns: str) -> web.StreamResponse:
        q: asyncio.Queue[bytes | None] = asyncio.Queue()
        if request.query.get("sendInitialEvents") in ("true", "1"):  # a streaming list: the objects first
            if not self.watch_list:
                return _status(422, "Invalid", (
                    "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents "
                    "is forbidden for watch unless the WatchList feature gate is enabled"))
            kind.lists += 1
            objects = [raw for (ons, _), raw in kind.objects.items() if not ns or ons == ns]
            cut, self.cut_initial_after = self.cut_initial_after, None
            for raw in objects[:cut]:
                q.put_nowait(b'{"type":"ADDED","object":' + raw + b"}\n")
            if cut is not None:
                q.put_nowait(None)  # the connection breaks before the end of the objects
            end = {"type": "BOOKMARK", "object": {"kind": kind.kind, "apiVersion": kind.api_version, "metadata": {
                "resourceVersion": str(self.rv), "annotations": {"k8s.io/initial-events-end": "true"}}}}
            q.put_nowait(orjson.dumps(end) + b"\n")
        kind.watch_opens += 1
        kind.watches.append(q)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        timeout = float(request.query.get("timeoutSeconds") or 600)
        deadline = time.monotonic() + timeout
        try:
            ended = False
            while not ended:
                try:
                    line = await asyncio.wait_for(q.get(), max(0.1, deadline - time.monotonic()))
                except TimeoutError:
                    break
                if line is None:
                    break
                buf = [line]
                while not q.empty() and len(buf) < CHUNK_LINES:  # coalesce a burst into few writes
                    nxt = q.get_nowait()
                    if nxt is None:  # the end: what was queued after it is never sent
                        ended = True
                        break
                    buf.append(nxt)
                await resp.write(b"".join(buf))
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            if q in kind.watches:
                kind.watches.remove(q)
        return resp

    # ------------------------------------------------------------------ writes

    async def patch_pod(self, request: web.Request, ns: str, name: str) -> web.Response:
        kind = self.kinds["pods"]
        raw = kind.objects.get((ns, name))
        if raw is None:
            return _status(404, "NotFound", f"pods {name} not found")
        patch = orjson.loads(await request.read())
        pod = merge_patch(orjson.loads(raw), patch)
        pod["metadata"]["resourceVersion"] = self.next_rv()
        out = orjson.dumps(pod)
        kind.objects[(ns, name)] = out
        self.writes["patch pods"] += 1
        if name in self.burst_names and name not in self.burst_patched:
            self.burst_patched[name] = time.monotonic()
        kind.send("MODIFIED", out)
        return web.Response(body=out, content_type="application/json")

    async def create_pg(self, request: web.Request, ns: str) -> web.Response:
        kind = self.kinds["podgroups"]
        pg = orjson.loads(await request.read())
        meta = pg.setdefault("metadata", {})
        meta["namespace"] = ns
        key = (ns, str(meta.get("name")))
        if key in kind.objects:
            return _status(409, "AlreadyExists", f"podgroups {key[1]} already exists")
        meta.update(uid=str(uuid.uuid4()), resourceVersion=self.next_rv(), generation=1,
                    creationTimestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        out = orjson.dumps(pg)
        kind.objects[key] = out
        self.writes["create podgroups"] += 1
        if self.burst:
            self.burst_created_pgs += 1
        kind.send("ADDED", out)
        return web.Response(body=out, status=201, content_type="application/json")

    async def update_pg(self, request: web.Request, ns: str, name: str) -> web.Response:
        kind = self.kinds["podgroups"]
        raw = kind.objects.get((ns, name))
        if raw is None:
            return _status(404, "NotFound", f"podgroups {name} not found")
        pg = orjson.loads(await request.read())
        cur = orjson.loads(raw)
        if pg["metadata"].get("resourceVersion") != cur["metadata"]["resourceVersion"]:
            return _status(409, "Conflict", "the object has been modified")
        pg["metadata"]["resourceVersion"] = self.next_rv()
        out = orjson.dumps(pg)
        kind.objects[(ns, name)] = out
        self.writes["update podgroups"] += 1
        kind.send("MODIFIED", out)
        return web.Response(body=out, content_type="application/json")

    def delete_pg(self, ns: str, name: str) -> web.Response:
        kind = self.kinds["podgroups"]
        raw = kind.objects.pop((ns, name), None)
        if raw is None:
            return _status(404, "NotFound", f"podgroups {name} not found")
        self.writes["delete podgroups"] += 1
        kind.send("DELETED", raw)
        return _json({"kind": "Status", "status": "Success"})

    async def lease(self, request: web.Request, ns: str, name: str) -> web.Response:
        m = request.method
        if m == "GET" and name:
            lease = self.leases.get(name)
            return _json(lease) if lease is not None else _status(404, "NotFound", f"leases {name} not found")
        if m == "POST" and not name:
            body = await request.json()
            name = body["metadata"]["name"]
            if name in self.leases:
                return _status(409, "AlreadyExists", "lease exists")
            body["metadata"].update(namespace=ns, resourceVersion=self.next_rv(), uid=str(uuid.uuid4()))
            self.leases[name] = body
            self.writes["create leases"] += 1
            return _json(body, 201)
        if m == "PUT" and name:
            received = time.monotonic()
            body = await request.json()
            cur = self.leases.get(name)
            if cur is None or cur["metadata"]["resourceVersion"] != body["metadata"].get("resourceVersion"):
                return _status(409, "Conflict", "lease modified")
            body["metadata"]["resourceVersion"] = self.next_rv()
            self.leases[name] = body
            self.writes["update leases"] += 1
            self.lease_renewals.append((received, str((body.get("spec") or {}).get("holderIdentity") or "")))
            return _json(body)
        return _status(405, "MethodNotAllowed", f"{m} leases")

    # ------------------------------------------------------------------ benchmark control

    async def control(self, request: web.Request, op: str) -> web.Response:
        body = await request.json() if request.method == "POST" and request.can_read_body else {}
        if op == "stats":
            return _json({
                "now": time.monotonic(),
                "writes": dict(self.writes),
                "lease_renewals": self.lease_renewals,
                "unknown": dict(self.unknown),
                "objects": {k: len(v.objects) for k, v in self.kinds.items()},
                "lists": {k: v.lists for k, v in self.kinds.items()},
                "watch_opens": {k: v.watch_opens for k, v in self.kinds.items()},
                "watches": {k: len(v.watches) for k, v in self.kinds.items()},
                "burst": {**self.burst, "patched": len(self.burst_patched),
                          "last_patch": max(self.burst_patched.values(), default=None),
                          "podgroups_created": self.burst_created_pgs},
            })
        if op == "clear":
            for k in self.kinds.values():
                k.objects.clear()
            self.leases.clear()
            self.writes.clear()
            self.lease_renewals.clear()
            self.burst, self.burst_names, self.burst_patched, self.burst_created_pgs = {}, set(), {}, 0
            return _json({"ok": True})
        if op == "reset-counters":
            self.writes.clear()
            return _json({"ok": True})
        if op == "populate":
            return _json(self.populate(int(body["pods"]), body["pod"], body["podgroup"]))
        if op == "burst":
            asyncio.get_running_loop().create_task(self.push_burst(int(body["pods"]), body["pod"], body["prefix"]))
            return _json({"ok": True})
        if op == "gone":
            self.expire()
            return _json({"watches": len(self.kinds["pods"].watches), "at": time.monotonic()})
        return _status(404, "NotFound", f"no control op {op}")

    def populate(self, n: int, pod_template: str, pg_template: str) -> Obj:
        """``n`` pods and PodGroups from JSON templates in which ``@@I@@`` is the pod's index."""
        t0 = time.monotonic()
        pods, pgs = self.kinds["pods"], self.kinds["podgroups"]
        for i in range(n):
            idx = f"{i:06d}"
            pod = pod_template.replace(PLACEHOLDER, idx).replace('"@@RV@@"', f'"{self.next_rv()}"')
            pg = pg_template.replace(PLACEHOLDER, idx).replace('"@@RV@@"', f'"{self.next_rv()}"')
            p_obj, g_obj = pod.encode(), pg.encode()
            pm, gm = orjson.loads(p_obj)["metadata"], orjson.loads(g_obj)["metadata"]
            pods.objects[(pm["namespace"], pm["name"])] = p_obj
            pgs.objects[(gm["namespace"], gm["name"])] = g_obj
        return {"pods": len(pods.objects), "podgroups": len(pgs.objects), "seconds": time.monotonic() - t0}

    async def push_burst(self, n: int, pod_template: str, prefix: str) -> None:
        """Create ``n`` pods at once: each stored and sent as ADDED on every pod watch, yielding every
        ``CHUNK_LINES`` so the watch writers flush them as fast as the client reads."""
        pods = self.kinds["pods"]
        self.burst = {"pods": n, "start": time.monotonic(), "pushed": 0, "push_done": None}
        self.burst_patched, self.burst_created_pgs = {}, 0
        for i in range(n):
            name = f"{prefix}{i:06d}"
            raw = pod_template.replace(PLACEHOLDER, f"{i:06d}").replace('"@@RV@@"', f'"{self.next_rv()}"').encode()
            self.burst_names.add(name)
            pods.objects[("bench", name)] = raw
            pods.send("ADDED", raw)
            self.burst["pushed"] = i + 1
            if i % CHUNK_LINES == CHUNK_LINES - 1:
                await asyncio.sleep(0)
        self.burst["push_done"] = time.monotonic()


async def until(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait for ``cond`` (polled every 20 ms); TimeoutError after ``timeout`` s (a hang guard, not a
    measurement: tests assert the order of events, not how long they took)."""
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.02)


async def serve(port_file: Path, host: str = "127.0.0.1") -> None:
    fake = FakeApi()
    await fake.start(0, host)
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(str(fake.port))
    tmp.rename(port_file)
    await asyncio.Event().wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port-file", type=Path, required=True)
    args = p.parse_args()
    asyncio.run(serve(args.port_file))


if __name__ == "__main__":
    main()
