"""Start-up of ``grouper run``: from process start to its first log line and to ``/readyz`` 200 on an empty
local cluster, and what the imports cost (``python -X importtime``).

Each run starts a fresh ``grouper run --kubeconfig`` (a ServiceAccount token of deploy/rbac.yaml, the
cluster's CA as ``certificate-authority-data``) with the flags the chart gives its two replicas: leader
election on (``--leader-elect=true``, the Lease in kai-system, ``--identity`` per run), ``--http-auth``
at its default (kubernetes); ``--no-leader-elect`` for a single replica. A separate process, its log file is
read every 5 ms and its ``/readyz`` asked every 100 ms until the log says the caches synced (readiness cannot
pass before), then every 5 ms, until it answers 200 (each answer costs the grouper CPU: asked every 5 ms from
the start, the longer a loaded box kept it waiting for its caches, the more of its CPU was the benchmark's);
the CPU time the process (and its jq sandbox) used until then is noted (less sensitive to a busy box than
wall time), then it is stopped
(SIGTERM: it releases the Lease, so the next run takes it at once). The HTTP API (FastAPI) starts loading in a
thread right after that first 200, so the CPU read can include its first milliseconds, never less. The
*milestones* of each run, medians printed: the first log line, "connecting to" (the HTTP server is up and the clients are built), the first
informer's list done, the caches synced, ``/readyz`` 200. The run whose ready time is the median prints its
*timeline*: each log line's offset from the process start (the JSON log's millisecond timestamps), then
the first 200.

Bytecode as in the image (its build runs ``compileall``): the children get a fresh ``PYTHONPYCACHEPREFIX``
(and not ``PYTHONDONTWRITEBYTECODE``), filled by a first import before anything is measured, so no run
compiles the checkout's sources (~0.3 s with ``PYTHONDONTWRITEBYTECODE=1`` and an editable install).
``--alt-pythonpath OLD``: a paired A/B in one run and one cluster, alternating a run of this checkout with a
run of OLD (``git archive <commit> grouper | tar -x -C OLD``), import figures and start-ups alike.
The import figures come from ``python -X importtime -c IMPORT`` (IMPORT: what ``grouper run`` imports before
its event loop starts: the CLI with every command, the service, uvloop), the time each top-level package's
modules took (self time summed), the modules with the largest cumulative time (a module and what it
imported first), and the wall time of that same import, over the same runs.

    .venv/bin/python benchmarks/bench_startup.py                 # 10 runs, ~1 min after the cluster is up
    .venv/bin/python benchmarks/bench_startup.py --quick         # 3 runs
    .venv/bin/python benchmarks/bench_startup.py --no-cluster    # the import figures only
    .venv/bin/python benchmarks/bench_startup.py --pythonpath /tmp/old-checkout --label before --out /tmp/b.json
    .venv/bin/python benchmarks/bench_startup.py --alt-pythonpath /tmp/old-checkout --runs 6   # paired A/B

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
# (only the `run` command's module where build_parser takes the command line)
IMPORT = ("import grouper.cli.main as m; m.build_parser(['run']) if m.build_parser.__code__.co_argcount "
          "else m.build_parser(); import grouper.runtime.service, uvloop")


def spread(samples: list[float]) -> dict[str, Any]:
    s = sorted(samples)
    return {"median_s": round(statistics.median(s), 3), "min_s": round(s[0], 3), "max_s": round(s[-1], 3),
            "runs": [round(x, 3) for x in samples]}


def child_env(pythonpath: str | None, pycache: Path) -> dict[str, str]:
    drop = ("KUBECONFIG", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUPER_") and k not in drop}
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
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


def import_sample(env: dict[str, str]) -> dict[str, Any]:
    """One import's wall and CPU time, and one ``-X importtime``'s self time per top-level package."""
    t0, c0 = time.monotonic(), children_cpu()
    subprocess.run([sys.executable, "-c", IMPORT], env=env, check=True, cwd=tempfile.gettempdir())
    wall, cpu = time.monotonic() - t0, children_cpu() - c0
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", IMPORT], env=env, check=True,
                         capture_output=True, text=True, cwd=tempfile.gettempdir()).stderr
    by_package: dict[str, float] = collections.defaultdict(float)
    cumulative: dict[str, float] = {}
    for line in err.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative_us, name = (part.strip() for part in line[len("import time:"):].split("|", 2))
        by_package[name.split(".", 1)[0]] += int(self_us) / 1e6
        cumulative[name] = int(cumulative_us) / 1e6
    return {"wall": wall, "cpu": cpu, "by_package": by_package, "cumulative": cumulative}


def import_summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Wall and CPU time of the import and the median self time per top-level package, largest first."""
    per_run = [s["by_package"] for s in samples]
    packages = {p for run in per_run for p in run}
    medians = {p: statistics.median(run.get(p, 0.0) for run in per_run) for p in packages}
    top = sorted(medians.items(), key=lambda kv: -kv[1])[:15]
    modules = {m for s in samples for m in s["cumulative"]}
    cumulative = {m: statistics.median(s["cumulative"].get(m, 0.0) for s in samples) for m in modules}
    return {
        "import_wall": spread([s["wall"] for s in samples]),
        "import_cpu": spread([s["cpu"] for s in samples]),
        "importtime_total_s": round(statistics.median(sum(run.values()) for run in per_run), 3),
        "importtime_top_packages_s": {p: round(s, 3) for p, s in top},
        "importtime_top_cumulative_s": {m: round(s, 3) for m, s in sorted(cumulative.items(), key=lambda kv: -kv[1])[:15]},
        "kubernetes_imported": any("kubernetes" in run for run in per_run),
    }


def cpu_seconds(pid: int) -> tuple[float, float]:
    """user + system CPU time of ``pid`` alone and with its children (the jq sandbox): less sensitive than wall
    time to what else the box runs. The process's own is about its wall time on an idle box with a core to
    spare for the sandbox (the registry is then ready before the service waits for it)."""
    own = children = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if stat.parent.name == str(pid):
            own = int(fields[11]) + int(fields[12])
            children += int(fields[13]) + int(fields[14])
        elif fields[1] == str(pid):
            children += int(fields[11]) + int(fields[12])
    tick = os.sysconf("SC_CLK_TCK")
    return own / tick, (own + children) / tick


def timeline(log: Path, t0_wall: float, ready: float) -> list[tuple[float, str]]:
    """(seconds after the process start, what) for each JSON log line up to the first ``/readyz`` 200."""
    events: list[tuple[float, str]] = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            doc = json.loads(line)
            at = datetime.strptime(doc["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp() - t0_wall
        except (ValueError, KeyError, TypeError):
            continue
        if at <= ready + 0.001:
            events.append((round(at, 3), f"{doc.get('logger', '')}: {str(doc.get('msg', ''))[:90]}"))
    return [*events, (round(ready, 3), "/readyz 200")]


# milestones: (key, what, predicate on a timeline entry's text); the first entry matching counts
MILESTONES: tuple[tuple[str, str, Any], ...] = (
    ("first_log", "first log line", lambda text: True),
    ("connecting", '"connecting to" (HTTP up, clients built)', lambda text: ": connecting to " in text),
    ("first_list", "first informer list done", lambda text: " objects by " in text or "listed" in text),
    ("caches_synced", "caches synced", lambda text: "caches synced" in text),
    ("ready", "/readyz 200", lambda text: text == "/readyz 200"),
)


def milestones(events: list[tuple[float, str]]) -> dict[str, float | None]:
    return {key: next((at for at, text in events if match(text)), None) for key, _what, match in MILESTONES}


SYNCED = b"caches synced"  # the controller's log line once its informers listed: /readyz can pass from then


def start_once(cluster: LocalCluster, kubeconfig: Path, env: dict[str, str], work: Path, i: str,
               leader_elect: bool = True) -> dict[str, Any]:
    port = free_port()
    log = work / f"grouper-{i}.log"
    argv = [sys.executable, "-m", "grouper.cli.main", "run", "--kubeconfig", str(kubeconfig),
            "--http-bind-address", f"127.0.0.1:{port}"]
    if leader_elect:  # as the chart runs its two replicas
        argv += ["--leader-elect=true", f"--leader-election-namespace={SA_NAMESPACE}", f"--identity=bench-{i}"]
    with open(log, "wb") as out, httpx.Client(timeout=2) as http:
        t0, t0_wall = time.monotonic(), time.time()
        proc = subprocess.Popen(argv, env={**env, "GROUPER_LOG_FORMAT": "json"}, stdout=out,
                                stderr=subprocess.STDOUT, cwd=work)
        first_log: float | None = None
        synced, next_ask = False, 0.0
        try:
            while True:
                now = time.monotonic() - t0
                if first_log is None and log.stat().st_size > 0:
                    first_log = now
                if proc.poll() is not None:
                    raise SystemExit(f"grouper exited {proc.returncode}:\n{log.read_text()[-3000:]}")
                if now > 120:
                    raise SystemExit(f"grouper not ready after 120 s:\n{log.read_text()[-3000:]}")
                synced = synced or (first_log is not None and SYNCED in log.read_bytes())
                if synced or now >= next_ask:
                    next_ask = now + 0.1
                    try:
                        if http.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                            ready = time.monotonic() - t0
                            cpu_own, cpu = cpu_seconds(proc.pid)
                            break
                    except httpx.HTTPError:
                        pass
                time.sleep(0.005)
        finally:
            proc.terminate()
            proc.wait(30)
    events = timeline(log, t0_wall, ready)
    return {"first_log_s": first_log if first_log is not None else ready, "ready_s": ready, "cpu_s": cpu,
            "cpu_own_s": cpu_own, "milestones": milestones(events), "timeline": events}


def summarize(result: dict[str, Any], samples: list[dict[str, Any]]) -> None:
    result["first_log"] = spread([s["first_log_s"] for s in samples])
    result["ready"] = spread([s["ready_s"] for s in samples])
    result["cpu_until_ready"] = spread([s["cpu_s"] for s in samples])
    result["cpu_own_until_ready"] = spread([s["cpu_own_s"] for s in samples])
    result["milestones_median_s"] = {
        key: (round(statistics.median(got), 3) if (got := [s["milestones"][key] for s in samples
                                                          if s["milestones"][key] is not None]) else None)
        for key, _what, _match in MILESTONES}
    median_run = sorted(samples, key=lambda s: s["ready_s"])[(len(samples) - 1) // 2]
    result["timeline_of_median_run"] = median_run["timeline"]


def report(result: dict[str, Any], name: str) -> None:
    print(f"{name}: imports of grouper run: median {result['import_wall']['median_s']} s "
          f"({result['import_wall']['min_s']}-{result['import_wall']['max_s']}), CPU "
          f"{result['import_cpu']['median_s']} s ({result['import_cpu']['min_s']}-{result['import_cpu']['max_s']}); "
          "importtime self times:")
    for package, seconds in list(result["importtime_top_packages_s"].items())[:8]:
        print(f"  {package:24} {seconds * 1000:7.0f} ms")
    print(f"{name}: importtime cumulative (a module with what it imported first):")
    for module, seconds in list(result["importtime_top_cumulative_s"].items())[:12]:
        print(f"  {module:40} {seconds * 1000:7.0f} ms")
    if "ready" not in result:
        return
    for key, what in (("first_log", "process start -> first log line"), ("ready", "process start -> /readyz 200"),
                      ("cpu_until_ready", "CPU s until /readyz 200 (+ sandbox)"),
                      ("cpu_own_until_ready", "CPU s until /readyz 200 (process)")):
        r = result[key]
        print(f"{name}: {what + ':':32} median {r['median_s']} s ({r['min_s']}-{r['max_s']})")
    print(f"{name}: milestones, median over the runs (seconds after the process start; from the JSON log):")
    for key, what, _match in MILESTONES:
        print(f"  {what:42} {result['milestones_median_s'][key]}")
    print(f"{name}: timeline of the median run (seconds after the process start):")
    for at, what in result["timeline_of_median_run"]:
        print(f"  {at:6.3f}  {what}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="3 runs")
    ap.add_argument("--no-cluster", action="store_true", help="only the import figures")
    ap.add_argument("--pythonpath", help="a checkout to run instead of this venv's grouper (first on sys.path)")
    ap.add_argument("--alt-pythonpath", help="a second checkout, run alternately with the first (paired A/B)")
    ap.add_argument("--no-leader-elect", action="store_true",
                    help="a single replica's flags (the chart's two replicas elect a leader)")
    ap.add_argument("--label", default="")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "startup.json")
    args = ap.parse_args()
    runs = 3 if args.quick else args.runs
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        work = Path(tmp)
        sides = {"this": child_env(args.pythonpath, work / "pyc-this")}
        if args.alt_pythonpath:
            sides["alt"] = child_env(args.alt_pythonpath, work / "pyc-alt")
        result: dict[str, Any] = {
            "benchmark": "grouper run start-up", "label": args.label,
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "load_start": os.getloadavg()[0]},
            "runs": runs, "leader_elect": not args.no_leader_elect,
        }
        per_side: dict[str, dict[str, Any]] = {}
        for name, env in sides.items():
            per_side[name] = {"grouper_checkout": which_grouper(env)}
            print(f"{name}: grouper from {per_side[name]['grouper_checkout']}")
            subprocess.run([sys.executable, "-c", IMPORT], env=env, check=True, cwd=tempfile.gettempdir())  # pyc
        print(f"load {result['machine']['load_start']:.1f}")
        imports: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
        for _ in range(runs):  # alternate the sides, so a drift of the box's speed hits both alike
            for name, env in sides.items():
                imports[name].append(import_sample(env))
        for name in sides:
            per_side[name].update(import_summary(imports[name]))
        if not args.no_cluster:
            with LocalCluster(crds=CRDS, controller_manager=False, quiet=True) as cluster:
                create_manifest(cluster, REPO / "deploy" / "rbac.yaml")
                token = cluster.create_token(SA_NAMESPACE, SA_NAME, expiration_seconds=3600)
                kubeconfig = cluster.write_kubeconfig(work / "kubeconfig", token=token, user=SA_NAME)
                samples: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
                for i in range(runs):
                    for name, env in sides.items():
                        samples[name].append(start_once(cluster, kubeconfig, env, work, f"{name}-{i}",
                                                        leader_elect=not args.no_leader_elect))
            for name in sides:
                summarize(per_side[name], samples[name])
            if "alt" in sides:
                result["ready_ratio_this_to_alt_per_pair"] = [
                    round(a["ready_s"] / b["ready_s"], 3) for a, b in zip(samples["this"], samples["alt"], strict=True)]
                result["cpu_ratio_this_to_alt_per_pair"] = [
                    round(a["cpu_s"] / b["cpu_s"], 3) for a, b in zip(samples["this"], samples["alt"], strict=True)]
                result["cpu_own_ratio_this_to_alt_per_pair"] = [
                    round(a["cpu_own_s"] / b["cpu_own_s"], 3)
                    for a, b in zip(samples["this"], samples["alt"], strict=True)]
    result.update(per_side["this"])
    if "alt" in per_side:
        result["alt"] = per_side["alt"]
    for name in sides:
        report(per_side[name], name)
    for key in ("ready_ratio_this_to_alt_per_pair", "cpu_ratio_this_to_alt_per_pair",
                "cpu_own_ratio_this_to_alt_per_pair"):
        if key in result:
            print(f"{key}: {result[key]} (median {statistics.median(result[key]):.3f})")
    result["machine"]["load_end"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
