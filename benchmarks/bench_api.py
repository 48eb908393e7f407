"""CPU per request of the grouper's HTTP API (``grouper.api.app.create_app``), in-process, against the floor
of a bare ASGI app that sends the same bytes (the baseline, in the same run).

Each request is one ASGI call (``scope``, ``receive``, ``send``) on one event loop, as uvicorn makes it
after parsing; no sockets, so the figure is the application's own cost, which is what a probe or a
scrape takes from the grouper's loop. ``/healthz`` and ``/readyz`` are what kubelet probes (and the
cluster benchmark's prober, 20 a second); ``/metrics`` is a Prometheus scrape of a registry holding one
child per label set the service creates. The access mode is ``none`` for the probes' paths either way
(they are open), a static token for ``/metrics``. Rounds alternate the app and the floor.

    python benchmarks/bench_api.py [--requests 3000] [--rounds 3] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from grouper.api.app import create_app  # noqa: E402
from grouper.api.auth import StaticTokenAccess  # noqa: E402
from grouper.api.state import AppState  # noqa: E402
from grouper.observability.health import HealthSnapshot  # noqa: E402
from grouper.observability.metrics import Metrics  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "api.json"
TOKEN = "bench-api-token"

App = Callable[[dict[str, Any], Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]], Awaitable[None]]


def _scope(path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": b"", "headers": [(b"host", b"localhost"), *headers],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8080), "state": {},
    }


async def _call(app: App, path: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(_scope(path, headers), receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def _floor(answers: dict[str, tuple[int, bytes]]) -> App:
    """A bare ASGI app that sends the recorded status and body of each path."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        status, body = answers[scope["path"]]
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    return app


def _state() -> AppState:
    metrics = Metrics()
    # children like a running service's: a few plugins, results, resources
    for plugin in ("JobSet", "PyTorchJob", "RayCluster", "LWS", "BatchJob", "Deployment", "Karta"):
        for result in ("ok", "requeue", "error"):
            metrics.reconciles.labels(plugin=plugin, result=result).inc()
    now = time.monotonic()
    snapshot = HealthSnapshot(
        role="leader", informers={"Pod.v1": True, "PodGroup.v2alpha2.scheduling.run.ai": True},
        worker_heartbeat=now, last_api_contact=now,
    )
    return AppState(metrics=metrics, health=lambda: snapshot)


async def _measure(app: App, path: str, headers: list[tuple[bytes, bytes]], n: int) -> float:
    """µs of process CPU per request over ``n`` sequential requests."""
    t0 = time.process_time()
    for _ in range(n):
        await _call(app, path, headers)
    return (time.process_time() - t0) / n * 1e6


async def run(requests: int, rounds: int) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".token", delete=False) as f:
        f.write(TOKEN)
    app = create_app(_state(), access=StaticTokenAccess(f.name))
    auth = [(b"authorization", f"Bearer {TOKEN}".encode())]
    paths = {"/healthz": [], "/readyz": [], "/metrics": auth}
    answers = {p: await _call(app, p, h) for p, h in paths.items()}
    for p, (status, body) in answers.items():
        if status != 200:
            raise SystemExit(f"{p} answered {status}: {body[:300]!r}")
    floor = _floor(answers)
    out: dict[str, Any] = {}
    for p, h in paths.items():
        app_us: list[float] = []
        floor_us: list[float] = []
        await _measure(app, p, h, requests // 10)  # warm-up
        for _ in range(rounds):
            app_us.append(await _measure(app, p, h, requests))
            floor_us.append(await _measure(floor, p, h, requests))
        a, b = statistics.median(app_us), statistics.median(floor_us)
        out[p] = {"app_us": round(a, 1), "floor_us": round(b, 1), "ratio": round(a / b, 1),
                  "app_rounds_us": [round(x, 1) for x in app_us], "floor_rounds_us": [round(x, 1) for x in floor_us],
                  "bytes": len(answers[p][1])}
    return out


def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    figures = asyncio.run(run(args.requests, args.rounds))
    print(f"{'path':<10} {'app µs':>8} {'floor µs':>9} {'ratio':>6} {'bytes':>6}")
    for p, f in figures.items():
        print(f"{p:<10} {f['app_us']:>8} {f['floor_us']:>9} {f['ratio']:>5}x {f['bytes']:>6}")
    result = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": _commit(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()[0]},
        "requests": args.requests, "rounds": args.rounds, "paths": figures,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results in {args.out}")


if __name__ == "__main__":
    main()
