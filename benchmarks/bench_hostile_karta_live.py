"""Peak memory and probe latency of a running ``grouper run`` while the worst Kartas we could write are
applied to the cluster (issue: one Karta object must not be able to OOM or stall the controller).

Starts the local control plane, runs ``grouper run`` as a separate process (``--http-auth none``),
measures its RSS and the ``/healthz`` latency with only the catalog loaded (the baseline, same run), then
applies each hostile Karta in 5 revisions and measures again. Prints a table and saves
``benchmarks/results/hostile_karta_live.json``.

    .venv/bin/python benchmarks/bench_hostile_karta_live.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_karta import _hostile_karta  # noqa: E402

from devtools.cluster import LocalCluster  # noqa: E402

CRDS = (REPO / "deploy" / "crds", REPO / "tests" / "crds")


def status_kb(pid: int) -> tuple[int, int]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


class Prober(threading.Thread):
    """GET /healthz every 50 ms; latencies in seconds (a timeout counts as 5 s)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.samples, self.stop = url, [], threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=5) as c:
            while not self.stop.is_set():
                t0 = time.monotonic()
                try:
                    c.get(self.url)
                    self.samples.append(time.monotonic() - t0)
                except httpx.HTTPError:
                    self.samples.append(5.0)
                time.sleep(0.05)


def figures(samples: list[float]) -> dict[str, float]:
    s = sorted(samples) or [0.0]
    return {"p50_ms": round(statistics.median(s) * 1000, 2), "p99_ms": round(s[int(len(s) * 0.99) - 1] * 1000, 2),
            "max_ms": round(s[-1] * 1000, 2)}


def main() -> int:
    long_expr = "[" + ",".join(f".spec.f{i}" for i in range(900)) + "] | length"
    cases: dict[str, list[str]] = {
        "constant-folding bomb": [f'("x" * {10**9 + i}) | length' for i in range(4)],
        "exponential defs": ["def f(x): x,x; " + "f(" * 60 + "." + ")" * 60],
        "200 x 1 KB distinct expressions": [f"[.spec.a{j}" + " , .spec.b" * 90 + "] | length" for j in range(200)],
        "20 x 10 KB expressions": [long_expr.replace("f1", f"f{j}x", 1) for j in range(20)],
    }
    rows: list[dict[str, Any]] = []
    with LocalCluster(crds=CRDS, controller_manager=False) as cluster:
        port = 18000 + os.getpid() % 1000
        env = {k: v for k, v in os.environ.items() if not k.startswith("GROUPER_") and k != "KUBECONFIG"}
        proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("grouper")), "run", "--kubeconfig", cluster.kubeconfig_path,
             "--http-bind-address", f"127.0.0.1:{port}", "--http-auth", "none", "--log-level", "warning"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit("grouper not ready")
                time.sleep(0.2)
            time.sleep(1.0)
            prober = Prober(f"{url}/healthz")
            prober.start()
            time.sleep(3.0)
            rss, hwm = status_kb(proc.pid)
            rows.append({"karta": "(baseline: catalog only)", "rss_mib": round(rss / 1024, 1),
                         "peak_mib": round(hwm / 1024, 1), **figures(prober.samples)})
            for label, exprs in cases.items():
                prober.samples = []
                children = len(exprs) if len(exprs) > 4 else 0
                t0 = time.monotonic()
                for rev in range(5):
                    obj = _hostile_karta("hostile", rev, [e.replace("length", f"length + {rev}") for e in exprs], children)
                    obj["metadata"].pop("resourceVersion", None)
                    status, body = cluster.request("GET", "/apis/run.ai/v1alpha1/kartas/hostile")
                    if status == 200:
                        obj["metadata"]["resourceVersion"] = body["metadata"]["resourceVersion"]
                        status, body = cluster.request("PUT", "/apis/run.ai/v1alpha1/kartas/hostile", obj)
                    else:
                        status, body = cluster.request("POST", "/apis/run.ai/v1alpha1/kartas", obj)
                    if status not in (200, 201):
                        print(f"  {label}: the API server refused it ({status}): {str(body)[:200]}")
                        break
                    time.sleep(1.5)
                time.sleep(3.0)
                rss, hwm = status_kb(proc.pid)
                defs = httpx.get(f"{url}/definitions", timeout=10).json()["items"]
                mine = next((d for d in defs if d["name"] == "hostile"), None)
                rows.append({"karta": label, "seconds": round(time.monotonic() - t0, 1), "rss_mib": round(rss / 1024, 1),
                             "peak_mib": round(hwm / 1024, 1), "valid": mine["valid"] if mine else None,
                             **figures(prober.samples)})
                cluster.request("DELETE", "/apis/run.ai/v1alpha1/kartas/hostile")
                time.sleep(1.0)
            prober.stop.set()
        finally:
            proc.terminate()
            proc.wait(30)
    print(f"{'karta':34} {'RSS MiB':>8} {'peak MiB':>9} {'healthz p50/p99/max ms':>24} valid")
    for r in rows:
        print(f"{r['karta']:34} {r['rss_mib']:8.1f} {r['peak_mib']:9.1f} "
              f"{r['p50_ms']:>7}/{r['p99_ms']}/{r['max_ms']:<8} {r.get('valid', '')}")
    out = REPO / "benchmarks" / "results" / "hostile_karta_live.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"benchmark": "grouper run under hostile Kartas", "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
