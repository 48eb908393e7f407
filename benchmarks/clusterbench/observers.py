"""Helper processes of the cluster benchmark, each with its own interpreter (spawned), so the benchmark's
own CPU (creating thousands of objects) does not delay what they observe:

- :func:`watcher_main` watches one namespace's pods and records, per pod, when its ``pod-group-name``
  annotation was first seen (``time.monotonic()``: CLOCK_MONOTONIC, the same clock in every process);
- :func:`baseline_main` is the minimal-writes baseline: its own pod watch, 1 PodGroup create per PodGroup
  and 1 merge patch per pod (annotation + sub-group label), 32 requests in flight, the PodGroups and
  pod assignments handed to it by the benchmark as each workload's top object is created;
- :func:`probe_main` polls the grouper's ``/healthz`` and ``/readyz`` every 100 ms (a new connection each,
  as the kubelet does) and reads the leader-election Lease to record its renewTime intervals.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import ssl
import threading
import time
import urllib.request
from datetime import datetime
from multiprocessing.synchronize import Event
from typing import Any

from clusterbench.api import Api, Endpoint
from clusterbench.workloads import ANNOTATION, SUBGROUP_LABEL

IN_FLIGHT = 32


async def _until(stop: Event) -> None:
    while not stop.is_set():
        await asyncio.sleep(0.1)


# ---------------------------------------------------------------------------------------------------- watcher


def watcher_main(ep: Endpoint, ns: str, expected: int, ready: Event, stop: Event, out: Any, progress: Any) -> None:
    """Puts ``{"annotated": {pod: monotonic time first seen annotated}, "events": n}`` on ``out`` once
    ``expected`` pods were seen annotated, or when ``stop`` is set; ``progress`` (a shared int) is the
    number seen so far."""
    asyncio.run(_watcher(ep, ns, expected, ready, stop, out, progress))


async def _watcher(ep: Endpoint, ns: str, expected: int, ready: Event, stop: Event, out: Any,
                   progress: Any) -> None:
    api = Api(ep, connections=4)
    seen: dict[str, float] = {}
    events = 0
    path = f"/api/v1/namespaces/{ns}/pods"
    try:
        items, rv = await api.list(path)
        for p in items:
            if ANNOTATION in (p["metadata"].get("annotations") or {}):
                seen[p["metadata"]["name"]] = time.monotonic()
        progress.value = len(seen)
        ready.set()

        async def consume() -> None:
            nonlocal events
            async for typ, obj in api.watch(path, rv):
                events += 1
                if typ == "GONE":
                    raise RuntimeError("pod watch expired (410) during a phase")
                meta = obj.get("metadata") or {}
                if typ != "DELETED" and ANNOTATION in (meta.get("annotations") or {}) and meta["name"] not in seen:
                    seen[meta["name"]] = time.monotonic()
                    progress.value = len(seen)
                    if len(seen) >= expected:
                        return

        consumer = asyncio.create_task(consume())
        stopper = asyncio.create_task(_until(stop))
        await asyncio.wait({consumer, stopper}, return_when=asyncio.FIRST_COMPLETED)
        for t in (consumer, stopper):
            t.cancel()
        if consumer.done() and not consumer.cancelled() and consumer.exception():
            raise consumer.exception()  # type: ignore[misc]
        out.put({"annotated": seen, "events": events})
    except BaseException as e:
        out.put({"annotated": seen, "events": events, "error": repr(e)})
        raise
    finally:
        await api.close()


# ---------------------------------------------------------------------------------------------------- baseline


def baseline_main(ep: Endpoint, ns: str, inbox: Any, ready: Event, stop: Event, out: Any) -> None:
    """``inbox`` (the reading end of a Pipe: sent at once by the benchmark, no feeder thread) carries
    ``(pods: {pod: (podgroup, subgroup | None)}, podgroups: {name: body})`` per workload, then None.
    Puts ``{"writes": n, "podgroups": n, "patches": n, "errors": [...], "cpu_s": s}`` on ``out`` when ``stop``
    is set."""
    asyncio.run(_baseline(ep, ns, inbox, ready, stop, out))


async def _baseline(ep: Endpoint, ns: str, inbox: Any, ready: Event, stop: Event, out: Any) -> None:
    api = Api(ep, connections=IN_FLIGHT + 4)
    sem = asyncio.Semaphore(IN_FLIGHT)
    assign: dict[str, tuple[str, str | None]] = {}
    bodies: dict[str, dict[str, Any]] = {}
    pg_created: dict[str, asyncio.Task[None]] = {}
    parked: set[str] = set()
    handled: set[str] = set()
    counts = {"podgroups": 0, "patches": 0}
    errors: list[str] = []
    tasks: set[asyncio.Task[None]] = set()
    pods_path = f"/api/v1/namespaces/{ns}/pods"
    pgs_path = f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups"

    async def create_pg(name: str) -> None:
        async with sem:
            await api.request("POST", pgs_path, bodies[name])
        counts["podgroups"] += 1

    async def group(pod: str) -> None:
        pg, sg = assign[pod]
        if pg not in pg_created:
            pg_created[pg] = asyncio.create_task(create_pg(pg))
        try:
            await pg_created[pg]
            patch: dict[str, Any] = {"metadata": {"annotations": {ANNOTATION: pg}}}
            if sg:
                patch["metadata"]["labels"] = {SUBGROUP_LABEL: sg}
            async with sem:
                await api.request("PATCH", f"{pods_path}/{pod}", patch,
                                  content_type="application/merge-patch+json")
            counts["patches"] += 1
        except Exception as e:
            errors.append(f"{pod}: {e}")

    def start(pod: str) -> None:
        handled.add(pod)
        t = asyncio.create_task(group(pod))
        tasks.add(t)
        t.add_done_callback(tasks.discard)

    def receive(msg: Any) -> None:
        pods, pgs = msg
        bodies.update(pgs)
        assign.update(pods)
        for p in [p for p in parked if p in assign]:
            parked.discard(p)
            start(p)

    def read_inbox(loop: asyncio.AbstractEventLoop) -> None:  # a thread: recv() blocks
        with contextlib.suppress(EOFError, OSError):
            while (msg := inbox.recv()) is not None:
                loop.call_soon_threadsafe(receive, msg)

    async def watch(rv: str) -> None:
        async for typ, obj in api.watch(pods_path, rv):
            meta = obj.get("metadata") or {}
            name = meta.get("name", "")
            if typ == "DELETED" or name in handled or ANNOTATION in (meta.get("annotations") or {}):
                continue
            if name in assign:
                start(name)
            else:
                parked.add(name)

    try:
        _, rv = await api.list(pods_path)
        ready.set()
        threading.Thread(target=read_inbox, args=(asyncio.get_running_loop(),), daemon=True).start()
        watcher = asyncio.create_task(watch(rv))
        await _until(stop)
        watcher.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=30)
        out.put({"writes": counts["podgroups"] + counts["patches"], **counts, "errors": errors[:20],
                 "error_count": len(errors), "unassigned": len(parked),
                 "cpu_s": round(time.process_time(), 2)})  # the whole process: its own CPU per pod
    except BaseException as e:
        out.put({"error": repr(e), **counts})
        raise
    finally:
        await api.close()


# ---------------------------------------------------------------------------------------------------- probes


def _rfc3339(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def probe_main(port: int, ep: Endpoint, lease_path: str, stop: Event, out: Any) -> None:
    """Puts ``{"healthz": [ms...], "readyz": [ms...], "failures": n, "failure_reasons": [str...],
    "renewals": [epoch s...]}`` on ``out`` when ``stop`` is set. A failure is an answer other than 200 (its
    reason: the failing checks' messages) or no answer (the exception); the first 20 reasons are kept."""
    lat: dict[str, list[float]] = {"/healthz": [], "/readyz": []}
    failures = 0
    reasons: list[str] = []
    renewals: list[float] = []
    ctx = ssl.create_default_context(cafile=ep.ca_file)
    lease_req = urllib.request.Request(ep.server + lease_path, headers={"Authorization": f"Bearer {ep.token}"})
    tick = 0
    while not stop.is_set():
        t_next = time.monotonic() + 0.1
        for path in lat:
            t0 = time.monotonic()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.request("GET", path)
                resp = conn.getresponse()
                body = resp.read()
                conn.close()
                if resp.status != 200:
                    failures += 1
                    if len(reasons) < 20:
                        reasons.append(f"{time.strftime('%H:%M:%S')} {path} {resp.status}: {_failing_checks(body)}")
            except OSError as err:
                failures += 1
                if len(reasons) < 20:
                    reasons.append(f"{time.strftime('%H:%M:%S')} {path}: {type(err).__name__}: {err}")
            lat[path].append((time.monotonic() - t0) * 1000)
        if tick % 2 == 0:
            with contextlib.suppress(OSError, ValueError, KeyError):
                with urllib.request.urlopen(lease_req, timeout=5, context=ctx) as r:
                    renew = json.loads(r.read())["spec"].get("renewTime")
                if renew and (not renewals or _rfc3339(renew) != renewals[-1]):
                    renewals.append(_rfc3339(renew))
        tick += 1
        time.sleep(max(0.0, t_next - time.monotonic()))
    out.put({"healthz": lat["/healthz"], "readyz": lat["/readyz"], "failures": failures,
             "failure_reasons": reasons, "renewals": renewals})


def _failing_checks(body: bytes) -> str:
    """The failing checks of a probe's 503 answer (``name: message; ...``), or the body's start."""
    try:
        checks = json.loads(body)["checks"]
        return "; ".join(f"{c['name']}: {c['message']}" for c in checks if not c.get("ok")) or "no failing check"
    except (ValueError, KeyError, TypeError):
        return body[:200].decode(errors="replace")
