"""CPU of the controller's reconciles alone: the real controller (handlers, indexes, plan cache,
reconciler, writers) over the in-memory cluster of the planning property test
(``tests/controller/plan_world.py``: the writers talk to a fake API server that applies what they send at
once), while workloads' pods arrive in batches, each batch followed by the passes it queues. No network,
no API server: what is measured is the grouper's own CPU per pod (process time), so a before/after pair is
comparable on a busy box. The collector is set as the service sets it (``runtime/heap.tune_collector``, the
listed objects frozen): with the interpreter's defaults, full collections of the growing world were a fifth
of the CPU measured (2,000 five-pod workloads: 50 of 243 µs per pod). Pods carry no empty label map (the API
server leaves it out; with one, the echo of every patch differed from what the patch sets and queued a second
pass). Paired A/B: ``--src OLD_TREE`` runs the same scenario with another checkout's ``grouper`` package (and
its ``tests/controller/plan_world.py``), alternating with this one.

    .venv/bin/python benchmarks/bench_reconcile.py                          # this tree
    .venv/bin/python benchmarks/bench_reconcile.py --src /tmp/before --pairs 3   # A/B, alternating
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"

SCENARIOS = {
    # name: (workloads, pods per workload, pods per batch, kind: Jobs, or JobSets of 8-pod Jobs)
    "10x1000-batches-of-50": (10, 1000, 50, "job"),
    "2000x5-batches-of-5": (2000, 5, 5, "job"),
    "4x1000-batches-of-10": (4, 1000, 10, "job"),
    # as on a real control plane, where a pass of a filling 1,000-pod workload sees one or two new pods
    "4x1000-jobset-batches-of-2": (4, 1000, 2, "jobset"),
}

CHILD = r'''
import asyncio, gc, json, sys, time, resource
sys.path.insert(0, sys.argv[1])
from tests.controller.plan_world import NS, POD, World, start_grouper  # POD: where that tree has it
from grouper.core.config import GroupingConfig
from grouper.karta import DefinitionRegistry
from grouper.observability.metrics import Metrics
from grouper.runtime.composition import build_grouper
from grouper.model import objects as o

workloads, size, batch = (int(x) for x in sys.argv[2:5])
kind = sys.argv[5]
PER_JOB = 8  # a JobSet's pods per Job

async def main():
    try:  # the service's collector: full collections rare (it freezes its synced caches; see below)
        from grouper.runtime.heap import tune_collector
        tune_collector()
    except ImportError:  # a tree from before it
        pass
    world = World()
    grouper = build_grouper(GroupingConfig(), DefinitionRegistry(None))
    ctl = start_grouper(world, grouper, metrics=Metrics())
    world.grouper = ctl
    rec = ctl.reconciler
    if hasattr(rec, "readded"):
        rec.readded = None  # the tree before fire-and-track: a pass waits for its own patches
    patcher = ctl.writers.pods
    cpu = 0.0
    passes = 0
    jobs = []  # per workload: the Job of each of its pods
    for w in range(workloads):
        if kind == "job":
            job = world.put({"apiVersion": "batch/v1", "kind": "Job",
                             "metadata": {"name": f"job{w}", "namespace": NS,
                                          "annotations": {"kai.scheduler/batch-min-member": str(size)}},
                             "spec": {"parallelism": size}})
            jobs.append([(job, {})] * size)
            continue
        js = world.put({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                        "metadata": {"name": f"js{w}", "namespace": NS},
                        "spec": {"replicatedJobs": [{"name": "w", "replicas": size // PER_JOB,
                                                     "template": {"spec": {"parallelism": PER_JOB}}}]}})
        mine = []
        for j in range(size // PER_JOB):
            labels = {"jobset.sigs.k8s.io/jobset-name": o.name(js), "jobset.sigs.k8s.io/replicatedjob-name": "w",
                      "jobset.sigs.k8s.io/job-index": str(j)}
            job = world.put({"apiVersion": "batch/v1", "kind": "Job",
                             "metadata": {"name": f"js{w}-w-{j}", "namespace": NS, "labels": labels,
                                          "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                                               "kind": "JobSet", "name": o.name(js),
                                                               "uid": o.uid(js), "controller": True}]},
                             "spec": {"parallelism": PER_JOB}})
            mine += [(job, labels)] * PER_JOB
        jobs.append(mine)
    gc.freeze()  # as the service does once its caches are synced: the owners are what it had listed
    for start in range(0, size, batch):
        for w, of_pod in enumerate(jobs):
            t0 = time.process_time()
            for i in range(start, min(size, start + batch)):
                job, labels = of_pod[i]
                meta = {"name": f"w{w}-{i}", "namespace": NS, "creationTimestamp": "2026-12-01T10:00:00Z"}
                if labels:  # (the API server leaves an empty map out: the echo of our patch would differ)
                    meta["labels"] = dict(labels)
                world.put({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {**meta,
                                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                                             "name": o.name(job), "uid": o.uid(job),
                                                             "controller": True}]},
                           "spec": {"schedulerName": "kai-scheduler"}, "status": {"phase": "Pending"}})
            while len(ctl.queue) or getattr(patcher, "in_flight", 0):
                if not len(ctl.queue):
                    await asyncio.sleep(0)
                    continue
                wl = await ctl.queue.get()
                try:
                    await rec.reconcile(wl)
                finally:
                    ctl.queue.done(wl)
                passes += 1
                while getattr(patcher, "in_flight", 0):
                    await asyncio.sleep(0)
            gangs = getattr(ctl, "gangs", None)  # the gang state tracker (issue 39): its recomputes count too
            while gangs is not None and gangs.flush():
                pass
            cpu += time.process_time() - t0
    marked = sum(1 for p in world.of(POD)
                 if (o.annotations(p) or {}).get("pod-group-name"))
    pods = workloads * size
    print(json.dumps({"cpu_us_per_pod": round(cpu / pods * 1e6, 1), "passes": passes, "pods": pods,
                      "marked": marked, "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))

asyncio.run(main())
'''


def run(tree: Path, python: str, scenario: str) -> dict[str, float]:
    workloads, size, batch, kind = SCENARIOS[scenario]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([python, "-c", CHILD, str(tree), str(workloads), str(size), str(batch), kind],
                         capture_output=True, text=True, env=env, cwd=tree, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{tree}: {out.stderr[-2000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    if result["marked"] != result["pods"]:
        raise SystemExit(f"{tree} {scenario}: {result['marked']} of {result['pods']} pods marked")
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", type=Path, help="another checkout to compare with (A), alternating with this one (B)")
    ap.add_argument("--src-python", default="", help="its Python (default: its .venv/bin/python)")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--scenario", action="append", default=[], choices=sorted(SCENARIOS))
    ap.add_argument("--out", type=Path, default=RESULTS / "reconcile.json")
    args = ap.parse_args()
    mine = str(REPO / ".venv" / "bin" / "python")
    sides = [("this", REPO, mine)]
    if args.src:
        sides.insert(0, ("before", args.src, args.src_python or str(args.src / ".venv" / "bin" / "python")))
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    for scenario in args.scenario or list(SCENARIOS):
        for _ in range(args.pairs if args.src else 1):
            for label, tree, python in sides:
                r = run(tree, python, scenario)
                results.setdefault(scenario, {}).setdefault(label, []).append(r)
                print(f"{scenario:24} {label:7} {r['cpu_us_per_pod']:8.1f} us CPU/pod  {r['passes']:6} passes  "
                      f"maxrss {r['maxrss_mib']} MiB", flush=True)
    summary = {}
    for scenario, by in results.items():
        med = {label: statistics.median(r["cpu_us_per_pod"] for r in runs) for label, runs in by.items()}
        summary[scenario] = med
        if "before" in med:
            print(f"{scenario:24} median CPU/pod: before {med['before']:.1f} us, this {med['this']:.1f} us, "
                  f"ratio {med['this'] / med['before']:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "bench_reconcile", "runs": results, "median": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
