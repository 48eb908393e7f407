"""Start-up of ``grouper run``: from process start to its first log line and to ``/readyz`` 200 on an empty
local cluster, and what the imports cost (``python -X importtime``).

Each run starts a fresh ``grouper run --kubeconfig`` (a ServiceAccount token of deploy/rbac.yaml, the
cluster's CA as ``certificate-authority-data``; no leader election, ``--http-auth none``) as a separate
process and polls its log file and ``/readyz`` every 5 ms until it answers 200, notes the CPU time the
process (and its jq sandbox) used until then (less sensitive to a busy box than wall time), then stops it
(SIGTERM).
The import figures come from ``python -X importtime -c IMPORT`` (IMPORT: what ``grouper run`` imports before
its event loop starts: the CLI with every command, the service, uvloop), the time each top-level package's
modules took (self time summed), and the wall time of that same import, over the same runs.

    .venv/bin/python benchmarks/bench_startup.py                 # 10 runs, ~1 min after the cluster is up
    .venv/bin/python benchmarks/bench_startup.py --quick         # 3 runs
    .venv/bin/python benchmarks/bench_startup.py --no-cluster    # the import figures only
    .venv/bin/python benchmarks/bench_startup.py --pythonpath /tmp/old-checkout --label before --out /tmp/b.json

``--pythonpath``: put another checkout first on the grouper's ``sys.path`` (an A/B of two versions of the code
with this venv's packages). Results go to benchmarks/results/startup.json (``--out`` elsewhere).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from devtools.cluster import LocalCluster  # noqa: E402
from devtools.cluster.objects import create_manifest  # noqa: E402
from devtools.grouper_process import free_port  # noqa: E402

CRDS = (REPO / "deploy" / "crds", REPO / "tests" / "crds")
SA_NAMESPACE, SA_NAME = "kai-system", "kai-pod-grouper"
# what `grouper run` imports before its event loop starts: the CLI with every command (build_parser), the
# service and the event loop
IMPORT = "import grouper.cli.main as m; m.build_parser(); import grouper.runtime.service, uvloop"


def spread(samples: list[float]) -> dict[str, Any]:
    s = sorted(samples)
    return {"median_s": round(statistics.median(s), 3), "min_s": round(s[0], 3), "max_s": round(s[-1], 3),
            "runs": [round(x, 3) for x in samples]}


def child_env(pythonpath: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUPER_") and k != "KUBECONFIG"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def which_grouper(env: dict[str, str]) -> str:
    code = "import grouper, pathlib; print(pathlib.Path(grouper.__file__).resolve().parents[1])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=tempfile.gettempdir(), check=True)
    return out.stdout.strip()


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def import_times(env: dict[str, str], runs: int) -> dict[str, Any]:
    """Wall time of the import (``runs`` times) and, from the last ``-X importtime``, self time per
    top-level package, largest first."""
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(runs):
        t0, c0 = time.monotonic(), children_cpu()
        subprocess.run([sys.executable, "-c", IMPORT], env=env, check=True, cwd=tempfile.gettempdir())
        walls.append(time.monotonic() - t0)
        cpus.append(children_cpu() - c0)
    per_run: list[dict[str, float]] = []
    for _ in range(runs):
        err = subprocess.run([sys.executable, "-X", "importtime", "-c", IMPORT], env=env, check=True,
                             capture_output=True, text=True, cwd=tempfile.gettempdir()).stderr
        by_package: dict[str, float] = collections.defaultdict(float)
        for line in err.splitlines():
            if not line.startswith("import time:") or "self [us]" in line:
                continue
            self_us, _cumulative, name = (part.strip() for part in line[len("import time:"):].split("|", 2))
            by_package[name.split(".", 1)[0]] += int(self_us) / 1e6
        per_run.append(by_package)
    packages = {p for run in per_run for p in run}
    medians = {p: statistics.median(run.get(p, 0.0) for run in per_run) for p in packages}
    top = sorted(medians.items(), key=lambda kv: -kv[1])[:15]
    return {
        "import_wall": spread(walls),
        "import_cpu": spread(cpus),
        "importtime_total_s": round(statistics.median(sum(run.values()) for run in per_run), 3),
        "importtime_top_packages_s": {p: round(s, 3) for p, s in top},
        "kubernetes_imported": any("kubernetes" in run for run in per_run),
    }


def cpu_seconds(pid: int) -> float:
    """user + system CPU time of ``pid`` and its children (the jq sandbox): less sensitive than wall time to
    what else the box runs."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if stat.parent.name == str(pid):
            ticks += sum(int(f) for f in fields[11:15])
        elif fields[1] == str(pid):
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def start_once(cluster: LocalCluster, kubeconfig: Path, env: dict[str, str], work: Path, i: int) -> dict[str, float]:
    port = free_port()
    log = work / f"grouper-{i}.log"
    argv = [sys.executable, "-m", "grouper.cli.main", "run", "--kubeconfig", str(kubeconfig),
            "--http-bind-address", f"127.0.0.1:{port}", "--http-auth", "none"]
    with open(log, "wb") as out, httpx.Client(timeout=2) as http:
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, env={**env, "GROUPER_LOG_FORMAT": "json"}, stdout=out,
                                stderr=subprocess.STDOUT, cwd=work)
        first_log: float | None = None
        try:
            while True:
                now = time.monotonic() - t0
                if first_log is None and log.stat().st_size > 0:
                    first_log = now
                if proc.poll() is not None:
                    raise SystemExit(f"grouper exited {proc.returncode}:\n{log.read_text()[-3000:]}")
                if now > 120:
                    raise SystemExit(f"grouper not ready after 120 s:\n{log.read_text()[-3000:]}")
                try:
                    if http.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                        ready = time.monotonic() - t0
                        cpu = cpu_seconds(proc.pid)
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.005)
        finally:
            proc.terminate()
            proc.wait(30)
    return {"first_log_s": first_log if first_log is not None else ready, "ready_s": ready, "cpu_s": cpu}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="3 runs")
    ap.add_argument("--no-cluster", action="store_true", help="only the import figures")
    ap.add_argument("--pythonpath", help="a checkout to run instead of this venv's grouper (first on sys.path)")
    ap.add_argument("--label", default="")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "startup.json")
    args = ap.parse_args()
    runs = 3 if args.quick else args.runs
    env = child_env(args.pythonpath)
    result: dict[str, Any] = {
        "benchmark": "grouper run start-up", "label": args.label,
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "grouper_checkout": which_grouper(env),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_start": os.getloadavg()[0]},
        "runs": runs,
    }
    print(f"grouper from {result['grouper_checkout']}, load {result['machine']['load_start']:.1f}")
    result.update(import_times(env, runs))
    print(f"imports of grouper run: median {result['import_wall']['median_s']} s "
          f"({result['import_wall']['min_s']}-{result['import_wall']['max_s']}), CPU "
          f"{result['import_cpu']['median_s']} s ({result['import_cpu']['min_s']}-{result['import_cpu']['max_s']}); "
          "importtime self times:")
    for package, seconds in result["importtime_top_packages_s"].items():
        print(f"  {package:24} {seconds * 1000:7.0f} ms")
    if not args.no_cluster:
        with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp, \
                LocalCluster(crds=CRDS, controller_manager=False, quiet=True) as cluster:
            work = Path(tmp)
            create_manifest(cluster, REPO / "deploy" / "rbac.yaml")
            token = cluster.create_token(SA_NAMESPACE, SA_NAME, expiration_seconds=3600)
            kubeconfig = cluster.write_kubeconfig(work / "kubeconfig", token=token, user=SA_NAME)
            samples = [start_once(cluster, kubeconfig, env, work, i) for i in range(runs)]
        result["first_log"] = spread([s["first_log_s"] for s in samples])
        result["ready"] = spread([s["ready_s"] for s in samples])
        result["cpu_until_ready"] = spread([s["cpu_s"] for s in samples])
        print(f"process start -> first log line: median {result['first_log']['median_s']} s "
              f"({result['first_log']['min_s']}-{result['first_log']['max_s']})")
        print(f"process start -> /readyz 200:    median {result['ready']['median_s']} s "
              f"({result['ready']['min_s']}-{result['ready']['max_s']})")
        print(f"CPU seconds until /readyz 200:   median {result['cpu_until_ready']['median_s']} s "
              f"({result['cpu_until_ready']['min_s']}-{result['cpu_until_ready']['max_s']})")
    result["machine"]["load_end"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
