#!/usr/bin/env python
"""Benchmark of the pure grouping core: ``Grouper.decide`` over ``InMemoryLookups``, and ``merge_decisions``.

Run: ``.venv/bin/python benchmarks/bench_core.py`` (or ``make bench``). Options: ``--quick`` (shorter
measurements, for a smoke run), ``--target SECONDS`` (length of one measurement, default 0.5),
``--repeats N`` (default 3), ``--out PATH`` (default benchmarks/results/core.json), ``--only SUBSTR``.

What is measured (see docs/perf-journal.md, "bench_core.py"):

1. decide: pod-to-PodGroup decisions per second, per workload kind, each workload's pods in one workload
   context (``core/workload_context.py``) as a controller pass and ``grouper plan`` decide them. Each scenario is one file of
   examples/ (workload + intermediate owners + pods, e.g. a JobSet with its Jobs and pods). The
   scenario is cloned K times with fresh uids (and a ``resourceVersion``, as objects read from an
   API server have), each clone getting its own ``InMemoryLookups`` like a namespace-indexed informer
   cache; every pod of every clone is decided by ONE ``Grouper`` (native plugin table + Karta
   registry over definitions/ + the cluster Karta of examples/batchling-karta.yaml), as the controller
   does. K is calibrated so one measurement takes ~``--target`` s; each repeat uses new clones (new
   uids), so per-object caches of the Karta engine start cold for every workload in every repeat.
2. jobset-1000: one JobSet of 125 replicas x 8 pods (125 Jobs, 1,000 pods) in ONE InMemoryLookups, as
   ``grouper plan`` sees it: time to decide all 1,000 pods, then ``merge_decisions`` over the 1,000
   decisions (merges per second), plus the tracemalloc peak of deciding them.
3. memory: tracemalloc peak and retained size while deciding 10,000 pods (clones of every scenario,
   round-robin) and keeping the decisions (as ``grouper plan`` does).

Every run prints a table and writes JSON with machine info. Total run time ~1-1.5 min on 2 cores.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import tracemalloc
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grouper.core.decision import Decision  # noqa: E402
from grouper.core.grouping import Grouper  # noqa: E402
from grouper.core.lookups import InMemoryLookups  # noqa: E402
from grouper.core.workload_context import WorkloadContext  # noqa: E402
from grouper.core.workload_plan import merge_decisions  # noqa: E402
from grouper.karta import DefinitionRegistry  # noqa: E402
from grouper.manifests import load_manifests  # noqa: E402
from grouper.model import objects as o  # noqa: E402
from grouper.runtime.composition import build_grouper  # noqa: E402

EXAMPLES = REPO / "examples"
DEFINITIONS = REPO / "definitions"
KARTA_KINDS = {"Karta", "ResourceInterface"}
# Files that are not scenarios on their own: planned together with the file that needs them.
COMPANIONS = {"jobset-demo.yaml": ["jobset-demo-pods.yaml"], "custom-batchling.yaml": []}
NOT_SCENARIOS = {"jobset-demo-pods.yaml", "batchling-karta.yaml"}
CLUSTER_KARTAS = ["batchling-karta.yaml"]
MAX_CLONES = 20_000


# ---------------------------------------------------------------- scenarios and clones


@dataclass
class Scenario:
    """One example file: its objects (Kartas removed) as a JSON template with uid placeholders."""

    name: str
    files: list[str]
    objects: list[dict[str, Any]]
    top_kind: str = ""
    plugin: str = ""
    pods_per_clone: int = 0
    _template: bytes = b""
    _uids: list[str] = field(default_factory=list)
    _pattern: re.Pattern[bytes] | None = None

    def __post_init__(self) -> None:
        objs = [json.loads(json.dumps(x)) for x in self.objects]
        for x in objs:
            x.setdefault("metadata", {})["resourceVersion"] = "1"
        self._uids = sorted({o.uid(x) for x in objs if o.uid(x)}, key=len, reverse=True)
        self._template = orjson.dumps(objs)
        if self._uids:
            self._pattern = re.compile(b"|".join(re.escape(u.encode()) for u in self._uids))
        self.pods_per_clone = sum(1 for x in objs if _is_pod(x))

    def clone(self, serial: int) -> tuple[InMemoryLookups, list[dict[str, Any]]]:
        """A copy with fresh, unique uids (consistently replaced in ownerReferences and labels)."""
        text = self._template
        if self._pattern is not None:
            index = {u.encode(): i for i, u in enumerate(self._uids)}
            text = self._pattern.sub(
                lambda m: str(uuid.UUID(int=(serial << 16) | index[m.group(0)])).encode(), text
            )
        objs = orjson.loads(text)
        pods = sorted((x for x in objs if _is_pod(x)), key=lambda p: (o.namespace(p), o.name(p)))
        return InMemoryLookups(objs), pods


def _is_pod(obj: dict[str, Any]) -> bool:
    return obj.get("kind") == "Pod" and obj.get("apiVersion") == "v1"


_SERIAL = 0


def next_serial() -> int:
    global _SERIAL
    _SERIAL += 1
    return _SERIAL


def load_scenarios(only: str | None) -> tuple[list[Scenario], list[dict[str, Any]]]:
    scenarios: list[Scenario] = []
    kartas = [m.obj for f in CLUSTER_KARTAS for m in load_manifests([EXAMPLES / f])]
    for path in sorted(EXAMPLES.glob("*.yaml")):
        if path.name in NOT_SCENARIOS:
            continue
        name = path.stem
        if only and only not in name:
            continue
        files = [path.name, *COMPANIONS.get(path.name, [])]
        objs = [m.obj for f in files for m in load_manifests([EXAMPLES / f])]
        kartas += [x for x in objs if x.get("kind") in KARTA_KINDS]
        objs = [x for x in objs if x.get("kind") not in KARTA_KINDS]
        scenarios.append(Scenario(name, files, objs))
    return [s for s in scenarios if s.pods_per_clone], kartas


def make_grouper(kartas: list[dict[str, Any]]) -> tuple[Grouper, DefinitionRegistry]:
    registry = DefinitionRegistry(DEFINITIONS)
    for k in kartas:
        registry.upsert_cluster_object(k)
    return build_grouper(definitions=registry), registry


# ---------------------------------------------------------------- measurements


def decide_all(grouper: Grouper, clones: list[tuple[InMemoryLookups, list[dict[str, Any]]]]) -> list[Decision]:
    """Each clone's pods decided in one workload context, as a controller's pass decides a workload's pods."""
    out: list[Decision] = []
    decide = grouper.decide
    for lookups, pods in clones:
        workload = WorkloadContext(pods)
        for pod in pods:
            out.append(decide(pod, lookups, workload))
    return out


def timed_decide(grouper: Grouper, sc: Scenario, n_clones: int) -> tuple[float, float, int]:
    """(wall seconds, process CPU seconds, pods decided) for deciding ``n_clones`` fresh clones."""
    clones = [sc.clone(next_serial()) for _ in range(n_clones)]
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    decisions = decide_all(grouper, clones)
    return time.perf_counter() - t0, time.process_time() - c0, len(decisions)


def summary(values: list[float]) -> dict[str, float]:
    med = statistics.median(values)
    return {
        "median": med,
        "min": min(values),
        "max": max(values),
        "spread_pct": 100.0 * (max(values) - min(values)) / med if med else 0.0,
    }


def bench_scenario(grouper: Grouper, sc: Scenario, target: float, repeats: int) -> dict[str, Any]:
    # Warm-up on one clone: first-use costs (jq compilation, imports), and the outcome mix.
    warm = decide_all(grouper, [sc.clone(next_serial())])
    outcomes = Counter(d.outcome for d in warm)
    plugins = Counter(d.plugin for d in warm if d.plugin)
    top = Counter(d.top_owner.kind for d in warm if d.top_owner)
    sc.plugin = plugins.most_common(1)[0][0] if plugins else "-"
    sc.top_kind = top.most_common(1)[0][0] if top else "-"
    errors = [d.message for d in warm if d.outcome == "error"]
    # Calibrate: a pilot of a few clones gives the cost per pod.
    pilot = max(1, min(50, 200 // sc.pods_per_clone))
    elapsed, _, n = timed_decide(grouper, sc, pilot)
    per_pod = max(elapsed / n, 1e-7)
    n_clones = int(min(MAX_CLONES, max(1, round(target / (per_pod * sc.pods_per_clone)))))
    runs: list[float] = []
    cpu_runs: list[float] = []
    pods = 0
    for _ in range(repeats):
        elapsed, cpu, pods = timed_decide(grouper, sc, n_clones)
        runs.append(pods / elapsed)
        cpu_runs.append(pods / max(cpu, 1e-9))
    return {
        "scenario": sc.name,
        "files": sc.files,
        "top_owner_kind": sc.top_kind,
        "plugin": sc.plugin,
        "pods_per_workload": sc.pods_per_clone,
        "workloads": n_clones,
        "pods_per_run": pods,
        "seconds_per_run": [pods / r for r in runs],
        "decisions_per_s": summary(runs),
        "us_per_decision": 1e6 / statistics.median(runs),
        "decisions_per_cpu_s": summary(cpu_runs),
        "cpu_us_per_decision": 1e6 / statistics.median(cpu_runs),
        "outcomes": dict(outcomes),
        "errors": errors[:3],
    }


def jobset_objects(replicas: int = 125, pods_per_job: int = 8, ns: str = "bench") -> list[dict[str, Any]]:
    """A JobSet (one replicatedJob ``worker``: replicas x parallelism), its Jobs and their pods, as the
    JobSet and Job controllers create them (the labels the JobSet plugin routes by)."""
    js_uid = str(uuid.uuid4())
    tmpl = {"metadata": {}, "spec": {"schedulerName": "kai-scheduler", "restartPolicy": "Never",
                                     "containers": [{"name": "trainer", "image": "trainer:1",
                                                     "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    js = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "big", "namespace": ns, "uid": js_uid, "resourceVersion": "1",
                     "labels": {"kai.scheduler/queue": "team-a"}},
        "spec": {"replicatedJobs": [{"name": "worker", "replicas": replicas, "template": {"spec": {
            "parallelism": pods_per_job, "completions": pods_per_job, "completionMode": "Indexed",
            "template": tmpl}}}]},
    }
    out = [js]
    for j in range(replicas):
        job_name, job_uid = f"big-worker-{j}", str(uuid.uuid4())
        jl: dict[str, str] = {"jobset.sigs.k8s.io/jobset-name": "big", "jobset.sigs.k8s.io/replicatedjob-name": "worker",
              "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicas), "jobset.sigs.k8s.io/job-index": str(j)}
        out.append({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": job_name, "namespace": ns, "uid": job_uid, "resourceVersion": "1", "labels": jl,
                         "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                              "name": "big", "uid": js_uid, "controller": True}]},
            "spec": {"parallelism": pods_per_job, "completions": pods_per_job, "template": tmpl},
        })
        for i in range(pods_per_job):
            pod_labels = {**jl, "batch.kubernetes.io/job-completion-index": str(i), "job-name": job_name}
            out.append({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": f"{job_name}-{i}-x{j:03d}{i}", "namespace": ns, "uid": str(uuid.uuid4()),
                    "resourceVersion": "1", "creationTimestamp": f"2026-08-10T09:{j % 60:02d}:{i:02d}Z",
                    "labels": pod_labels,
                    "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job_name,
                                         "uid": job_uid, "controller": True}],
                },
                "spec": dict(tmpl["spec"]),
            })
    return out


def bench_jobset_merge(grouper: Grouper, target: float, repeats: int) -> dict[str, Any]:
    replicas, per_job = 125, 8
    objs = jobset_objects(replicas, per_job)
    lookups = InMemoryLookups(objs)
    pods = [x for x in objs if _is_pod(x)]
    creation = {f"{o.namespace(p)}/{o.name(p)}": o.meta(p)["creationTimestamp"] for p in pods}
    # First pass under tracemalloc (doubles as the warm-up): peak memory of deciding the workload.
    gc.collect()
    tracemalloc.start()
    warm = WorkloadContext(pods)
    decisions = [grouper.decide(p, lookups, warm) for p in pods]
    del warm
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    bad = [d.message for d in decisions if d.outcome != "grouped"]
    decide_runs, decide_cpu = [], []
    for _ in range(repeats):
        decisions = []
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        workload = WorkloadContext(pods)  # one for the workload, as ``grouper plan`` decides it
        decisions = [grouper.decide(p, lookups, workload) for p in pods]
        decide_runs.append(len(pods) / (time.perf_counter() - t0))
        decide_cpu.append(len(pods) / max(time.process_time() - c0, 1e-9))
    merged = merge_decisions(decisions, creation)
    assert len(merged) == 1, f"expected one PodGroup, got {len(merged)}"
    leaves = [sg for sg in merged[0].metadata.sub_groups if sg.parent]
    assert len(leaves) == replicas and all(len(sg.pods) == per_job for sg in leaves), "bad merge"
    t0 = time.perf_counter()
    merge_decisions(decisions, creation)
    loops = max(1, round(target / max(time.perf_counter() - t0, 1e-6)))
    merge_runs = []
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        for _ in range(loops):
            merge_decisions(decisions, creation)
        merge_runs.append(loops / (time.perf_counter() - t0))
    return {
        "workload": f"JobSet, 1 replicatedJob x {replicas} replicas x {per_job} pods (+{replicas} Jobs)",
        "pods": len(pods),
        "sub_groups": len(merged[0].metadata.sub_groups),
        "not_grouped": bad[:3],
        "decide_pods_per_s": summary(decide_runs),
        "decide_pods_per_cpu_s": summary(decide_cpu),
        "decide_seconds_all_pods": len(pods) / statistics.median(decide_runs),
        "decide_peak_mib": peak / 2**20,
        "merge_loops_per_run": loops,
        "merges_per_s": summary(merge_runs),
        "ms_per_merge": 1e3 / statistics.median(merge_runs),
    }


def bench_memory(grouper: Grouper, scenarios: list[Scenario], total: int = 10_000) -> dict[str, Any]:
    clones: list[tuple[InMemoryLookups, list[dict[str, Any]]]] = []
    count = 0
    while count < total:
        for sc in scenarios:
            lookups, pods = sc.clone(next_serial())
            pods = pods[: total - count]
            if not pods:
                break
            clones.append((lookups, pods))
            count += len(pods)
    gc.collect()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    t0 = time.perf_counter()
    decisions = decide_all(grouper, clones)
    elapsed = time.perf_counter() - t0
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "pods": len(decisions),
        "workloads": len(clones),
        "mix": "round-robin clones of every scenario",
        "peak_mib": (peak - base) / 2**20,
        "retained_mib": (current - base) / 2**20,
        "retained_bytes_per_decision": (current - base) / max(1, len(decisions)),
        "seconds_under_tracemalloc": elapsed,
        "outcomes": dict(Counter(d.outcome for d in decisions)),
    }


# ---------------------------------------------------------------- report


def machine_info() -> dict[str, Any]:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "git_commit": commit,
        "loadavg_1m_5m_15m": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def print_table(decide: list[dict[str, Any]], merge: dict[str, Any] | None, mem: dict[str, Any] | None) -> None:
    print()
    hdr = (f"{'scenario':<24} {'top owner':<22} {'plugin':<26} {'pods':>7} {'decisions/s':>12} {'spread':>7} "
           f"{'us/pod':>8} {'cpu us/pod':>10}")
    print(hdr)
    print("-" * len(hdr))
    for r in decide:
        s = r["decisions_per_s"]
        print(f"{r['scenario']:<24} {r['top_owner_kind']:<22} {r['plugin']:<26} {r['pods_per_run']:>7} "
              f"{s['median']:>12,.0f} {s['spread_pct']:>6.1f}% {r['us_per_decision']:>8.1f} "
              f"{r['cpu_us_per_decision']:>10.1f}")
    if merge:
        s, m = merge["decide_pods_per_s"], merge["merges_per_s"]
        print(f"\njobset-1000 ({merge['workload']}, one InMemoryLookups):")
        print(f"  decide all {merge['pods']} pods: {s['median']:,.0f} pods/s (spread {s['spread_pct']:.1f}%; "
              f"{merge['decide_pods_per_cpu_s']['median']:,.0f} per CPU-s), {merge['decide_seconds_all_pods']:.2f} s; "
              f"tracemalloc peak {merge['decide_peak_mib']:.1f} MiB")
        print(f"  merge_decisions over {merge['pods']} decisions: {m['median']:,.1f} merges/s "
              f"(spread {m['spread_pct']:.1f}%), {merge['ms_per_merge']:.2f} ms per merge")
    if mem:
        print(f"\nmemory, deciding {mem['pods']:,} pods ({mem['workloads']} workloads, {mem['mix']}), decisions kept:")
        print(f"  tracemalloc peak {mem['peak_mib']:.1f} MiB, retained {mem['retained_mib']:.1f} MiB "
              f"({mem['retained_bytes_per_decision']:,.0f} B per decision)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=float, default=0.5, help="seconds per measurement (default 0.5)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="target 0.1 s, for a smoke run")
    ap.add_argument("--only", default=None, help="only scenarios whose name contains this")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "core.json")
    args = ap.parse_args(argv)
    target = 0.1 if args.quick else args.target
    logging_quiet()
    t_start = time.perf_counter()
    scenarios, kartas = load_scenarios(args.only)
    grouper, _ = make_grouper(kartas)
    decide: list[dict[str, Any]] = []
    for sc in scenarios:
        r = bench_scenario(grouper, sc, target, args.repeats)
        decide.append(r)
        s = r["decisions_per_s"]
        print(f"  {sc.name:<24} {s['median']:>10,.0f} decisions/s  ({r['pods_per_run']} pods x {args.repeats})",
              flush=True)
    merge = mem = None
    if not args.only:
        merge = bench_jobset_merge(grouper, target, args.repeats)
        mem = bench_memory(grouper, scenarios)
    print_table(decide, merge, mem)
    total = time.perf_counter() - t_start
    print(f"\ntotal {total:.1f} s; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} CPUs")
    result = {
        "benchmark": "core",
        "machine": machine_info(),
        "settings": {"target_s": target, "repeats": args.repeats, "only": args.only},
        "decide": decide,
        "jobset_1000": merge,
        "memory_10k": mem,
        "total_seconds": total,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out}")
    return 0


def logging_quiet() -> None:
    import logging

    logging.getLogger("grouper").setLevel(logging.CRITICAL)


if __name__ == "__main__":
    sys.exit(main())
