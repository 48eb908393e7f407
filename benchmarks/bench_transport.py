"""CPU per request of the grouper's client against the real API server, and of aiohttp's client (the
baseline, in the same run): what a pod patch costs the grouper in HTTP alone.

Both send the same merge patches to one ConfigMap, 32 in flight, on uvloop, over TLS with a bearer token,
and decode each answer with orjson; ``KubeClient`` also does its metrics and rate-limiter bookkeeping
(QPS off), which the baseline does not. Rounds alternate the two so a busy box weighs on both. Prints a
table and writes ``benchmarks/results/transport.json``.

    python benchmarks/bench_transport.py [--requests 3000] [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402
import orjson  # noqa: E402
import uvloop  # noqa: E402

from devtools.cluster.cluster import LocalCluster  # noqa: E402
from grouper.kube import config as kubeconfig  # noqa: E402
from grouper.kube.transport import KubeClient  # noqa: E402
from grouper.observability.metrics import Metrics  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "transport.json"
PATH = "/api/v1/namespaces/default/configmaps/bench-transport"
IN_FLIGHT = 32


async def measure(send: Callable[[int], Awaitable[Any]], n: int) -> tuple[float, float]:
    """(µs of this process's CPU per request, seconds) for ``n`` requests, ``IN_FLIGHT`` at a time."""
    sem = asyncio.Semaphore(IN_FLIGHT)

    async def one(i: int) -> None:
        async with sem:
            await send(i)

    await one(0)  # connect first
    cpu, wall = time.process_time(), time.monotonic()
    await asyncio.gather(*(one(i) for i in range(n)))
    return (time.process_time() - cpu) / n * 1e6, time.monotonic() - wall


async def grouper_client(cfg: kubeconfig.ClusterConfig, n: int) -> tuple[float, float]:
    client = KubeClient(cfg, qps=0, metrics=Metrics())
    try:
        return await measure(lambda i: client.merge_patch(PATH, {"data": {"k": str(i % 7)}}), n)
    finally:
        await client.close()


async def aiohttp_client(cfg: kubeconfig.ClusterConfig, n: int) -> tuple[float, float]:
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=cfg.ssl_context(), limit=256),
        headers={"Accept": "application/json", "Authorization": f"Bearer {cfg.bearer()}"},
    )
    timeout = aiohttp.ClientTimeout(total=30)
    headers = {"Content-Type": "application/merge-patch+json"}

    async def send(i: int) -> Any:
        body = orjson.dumps({"data": {"k": str(i % 7)}})
        async with session.patch(cfg.server + PATH, data=body, headers=headers, timeout=timeout) as r:
            raw = await r.read()
            if r.status != 200:
                raise RuntimeError(f"PATCH answered {r.status}: {raw[:200]!r}")
            return orjson.loads(raw)

    try:
        return await measure(send, n)
    finally:
        await session.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1,000 requests, 2 rounds")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.quick:
        args.requests, args.rounds = 1000, 2
    rows: dict[str, list[tuple[float, float]]] = {"grouper (KubeClient)": [], "aiohttp (baseline)": []}
    with LocalCluster(controller_manager=False, quiet=True) as cluster:
        cluster.request("POST", "/api/v1/namespaces/default/configmaps",
                        {"metadata": {"name": "bench-transport"}, "data": {"k": "x"}})
        cfg = kubeconfig.explicit(cluster.server, token=cluster.admin_token, ca_file=cluster.ca_file)
        for r in range(args.rounds):
            for name, run in (("grouper (KubeClient)", grouper_client), ("aiohttp (baseline)", aiohttp_client)):
                us, s = uvloop.run(run(cfg, args.requests))
                rows[name].append((us, s))
                print(f"round {r + 1}: {name:22} {us:6.0f} µs CPU per request, {args.requests / s:6.0f} requests/s",
                      flush=True)
    med = {k: statistics.median(us for us, _ in v) for k, v in rows.items()}
    ratio = med["grouper (KubeClient)"] / med["aiohttp (baseline)"]
    print(f"median µs CPU per request: grouper {med['grouper (KubeClient)']:.0f}, aiohttp {med['aiohttp (baseline)']:.0f}"
          f" — ratio {ratio:.2f}")
    out = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()[0]},
        "requests_per_round": args.requests,
        "in_flight": IN_FLIGHT,
        "rounds": {k: [{"us_cpu_per_request": round(us, 1), "seconds": round(s, 2)} for us, s in v]
                   for k, v in rows.items()},
        "median_us_cpu_per_request": {k: round(v, 1) for k, v in med.items()},
        "ratio_to_aiohttp": round(ratio, 3),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"results in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
