"""The cluster benchmark: ``grouper run`` against a real local control plane, compared with the
minimal-writes baseline in the same run (speed issue, item 1). See docs/perf-journal.md, "cluster_bench.py".

    .venv/bin/python benchmarks/cluster_bench.py                       # quick profile (< 15 min)
    .venv/bin/python benchmarks/cluster_bench.py --profile full        # every scenario (prints an estimate)
    .venv/bin/python benchmarks/cluster_bench.py --scenario burst-1000-small
    .venv/bin/python benchmarks/cluster_bench.py --grouper-python ../other/.venv/bin/python --label after
    .venv/bin/python benchmarks/cluster_bench.py --grouper-arg=--qps=500 --grouper-arg=--burst=1000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import multiprocessing as mp
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from clusterbench.api import Api, ApiError, Endpoint  # noqa: E402
from clusterbench.observers import baseline_main, probe_main, watcher_main  # noqa: E402
from clusterbench.workloads import (  # noqa: E402
    ANNOTATION,
    KINDS,
    PATHS,
    SUBGROUP_LABEL,
    Expectation,
    PodSpec,
    Workload,
    workload_set,
)

from devtools.cluster import LocalCluster  # noqa: E402
from devtools.cluster.audit import audit_args as cluster_audit_args  # noqa: E402
from devtools.cluster.audit import write_audit_policy  # noqa: E402
from devtools.cluster.objects import create_manifest  # noqa: E402
from devtools.grouper_process import GrouperProcess, parse_metric  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
README = REPO / "benchmarks" / "README.md"
CRDS = [REPO / "deploy" / "crds"] + [REPO / "tests" / "crds" / f for f in (
    "jobset.x-k8s.io_jobsets.yaml", "kubeflow.org_pytorchjobs.yaml", "ray.io_rayclusters.yaml",
    "leaderworkerset.x-k8s.io_leaderworkersets.yaml", "apps.nvidia.com_nimservices.yaml")]
# The benchmark plays the workload controllers; KCM keeps garbage collection, namespaces and tokens.
KCM_CONTROLLERS = ("garbagecollector", "namespace", "serviceaccount", "serviceaccount-token")
SA_NAMESPACE, SA_NAME = "kai-system", "kai-pod-grouper"
GROUPER_SCHEDULER = "kai-scheduler"
BASELINE_SCHEDULER = "bench-baseline"  # the grouper's pod informer selects spec.schedulerName=kai-scheduler
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{SA_NAMESPACE}/leases/kai-pod-grouper"
PGS = "/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups"
IN_FLIGHT = 32
STALL_S = 300.0  # a phase gives up when no pod got annotated for this long after the last create
WRITE_VERBS = ("create", "update", "patch", "delete")


def say(msg: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------------- scenarios


@dataclass
class Scenario:
    name: str
    kind: str  # burst | steady | restart | limits
    pods: int
    per_workload: int = 5
    rate: float = 0.0  # steady: pods/s
    probes: bool = False  # event-loop figures during this phase
    restart: bool = False  # burst: then restart the grouper over the burst's grouped pods
    namespaces: int = 1  # grouper phase: workloads spread round-robin over this many namespaces
    limits: tuple[tuple[str, ...], ...] = ()
    kinds: tuple[str, ...] = KINDS  # workload kinds, mixed round-robin

    @property
    def shape(self) -> str:
        return "small" if self.per_workload == 5 else "large"


DEFAULT_LIMITS = "--qps=500 --burst=1000"
LIMITS = (("--qps", "50", "--burst", "300"), ("--qps", "500", "--burst", "1000"), ("--qps", "0"))


def profile(name: str) -> list[Scenario]:
    """The largest scenario comes last: the run ends without deleting its namespace (the cluster is
    discarded), which saves ~7 ms per pod."""
    steady_s = 30 if name == "quick" else 60
    out = [
        Scenario("burst-1000-small", "burst", 1000),
        Scenario("burst-1000-large", "burst", 1000, per_workload=1000),
        Scenario("burst-10000-large", "burst", 10000, per_workload=1000),
    ]
    if name == "full":
        out.append(Scenario("burst-30000-large", "burst", 30000, per_workload=1000))
    rates = (50, 100) if name == "quick" else (50, 100, 200)
    out += [Scenario(f"steady-{r}", "steady", r * steady_s, rate=r) for r in rates]
    out.append(Scenario("limits-1000-small", "limits", 1000, limits=LIMITS))
    out.append(Scenario("burst-10000-small", "burst", 10000, probes=True, restart=True))
    if name == "full":
        out += [Scenario("burst-30000-small", "burst", 30000, probes=True),
                Scenario("restart-100000", "restart", 100000, namespaces=10)]
    return out


def all_scenarios() -> dict[str, Scenario]:
    """Every scenario of the full profile, and restart-10000 on its own (in the profiles it follows
    burst-10000-small, over that burst's pods)."""
    return {s.name: s for s in [*profile("full"), Scenario("restart-10000", "restart", 10000)]}


def estimate_seconds(scenarios: list[Scenario], bracket: bool = False, restarts: int = 1) -> float:
    """Rough, from the quick profile on the busy 2-core box (load 4-9): ~10 ms per pod and phase to create
    and group (phases: baseline + grouper, + baseline with ``bracket``; limits 1 + 3; restart its setup),
    ~6 ms per pod to delete a grouper namespace (not in the last scenario), ~3 ms per cached pod for a
    restart, ~10 s per phase."""
    total = 30.0
    for i, s in enumerate(scenarios):
        baselines = {"restart": 0, "limits": 1}.get(s.kind, 1 + bracket)
        phases = baselines + (len(s.limits) if s.kind == "limits" else 1)
        total += 10 * phases + (phases * s.pods / s.rate if s.kind == "steady" else s.pods * phases * 0.010)
        if i < len(scenarios) - 1:
            total += s.pods * (phases - baselines) * 0.006  # the baselines' namespaces stay
        if s.kind == "restart" or s.restart:
            total += (20 + s.pods * 0.003) * restarts
    return total


# ---------------------------------------------------------------------------------------------------- figures


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def rounded(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def lease_gaps(renewals: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(renewals)]


@dataclass
class Verification:
    failures: list[str] = field(default_factory=list)
    pods_checked: int = 0
    podgroups_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.failures

    def fail(self, msg: str) -> None:
        if len(self.failures) < 50:
            self.failures.append(msg)
        elif len(self.failures) == 50:
            self.failures.append("... (more failures not listed)")

    def merge(self, other: Verification) -> None:
        for f in other.failures:
            self.fail(f)
        self.pods_checked += other.pods_checked
        self.podgroups_checked += other.podgroups_checked

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "pods_checked": self.pods_checked, "podgroups_checked": self.podgroups_checked,
                "failures": self.failures}


async def verify(api: Api, ns: str, expected: Expectation) -> Verification:
    """Every pod carries its expected PodGroup (and sub-group label), every expected PodGroup exists with the
    expected minMember / minSubGroup / sub-groups, and there is no other PodGroup."""
    v = Verification()
    pods, _ = await api.list(PATHS["Pod"].format(ns=ns))
    by_name = {p["metadata"]["name"]: p for p in pods}
    for name, (pg, sg) in expected.pods.items():
        v.pods_checked += 1
        pod = by_name.get(name)
        if pod is None:
            v.fail(f"pod {ns}/{name}: missing")
            continue
        meta = pod["metadata"]
        have_pg = (meta.get("annotations") or {}).get(ANNOTATION)
        have_sg = (meta.get("labels") or {}).get(SUBGROUP_LABEL)
        if have_pg != pg:
            v.fail(f"pod {ns}/{name}: annotation {ANNOTATION}={have_pg!r}, expected {pg!r}")
        if have_sg != sg:
            v.fail(f"pod {ns}/{name}: label {SUBGROUP_LABEL}={have_sg!r}, expected {sg!r}")
    pgs, _ = await api.list(PGS.format(ns=ns))
    by_pg = {p["metadata"]["name"]: p for p in pgs}
    for name, exp in expected.pod_groups.items():
        v.podgroups_checked += 1
        obj = by_pg.pop(name, None)
        if obj is None:
            v.fail(f"PodGroup {ns}/{name}: missing")
            continue
        spec = obj.get("spec") or {}
        if spec.get("minMember") != exp.min_member:
            v.fail(f"PodGroup {ns}/{name}: minMember {spec.get('minMember')!r}, expected {exp.min_member!r}")
        if spec.get("minSubGroup") != exp.min_sub_group:
            v.fail(f"PodGroup {ns}/{name}: minSubGroup {spec.get('minSubGroup')!r}, expected {exp.min_sub_group!r}")
        have = sorted((s.get("name"), s.get("parent"), s.get("minMember"), s.get("minSubGroup"))
                      for s in spec.get("subGroups") or [])
        want = sorted(exp.sub_groups, key=lambda t: t[0])
        if len(have) != len(want):
            v.fail(f"PodGroup {ns}/{name}: {len(have)} sub-groups, expected {len(want)}")
        elif have != sorted(want):
            diff = sorted(set(have) ^ set(want))[:4]
            v.fail(f"PodGroup {ns}/{name}: sub-groups differ (name, parent, minMember, minSubGroup): {diff}")
        owners = obj["metadata"].get("ownerReferences") or []
        if not owners or owners[0].get("uid") != exp.owner.get("uid"):
            v.fail(f"PodGroup {ns}/{name}: owner {owners[:1]}, expected {exp.owner}")
    for name in sorted(by_pg)[:10]:
        v.fail(f"PodGroup {ns}/{name}: not expected")
    return v


# ---------------------------------------------------------------------------------------------------- the run


class Bench:
    def __init__(self, args: argparse.Namespace, cluster: LocalCluster, work: Path) -> None:
        self.args = args
        self.cluster = cluster
        self.work = work
        self.ep = Endpoint(cluster.server, cluster.admin_token, cluster.ca_file)
        self.api = Api(self.ep, connections=IN_FLIGHT + 8)
        self.mp = mp.get_context("spawn")
        self.token_file = work / "token"
        self.grouper: GrouperProcess | None = None
        self.generation = 0
        self.seq = 0
        self.final = False  # running the last scenario

    # ---------------------------------------------------------------- the grouper process

    def grouper_args(self, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
        return ("--leader-elect", "--leader-election-namespace", SA_NAMESPACE, *self.args.limits.split(),
                *self.args.grouper_arg, *extra)

    def start_grouper(self, extra: tuple[str, ...] = (), command: list[str] | None = None) -> float:
        """Start ``grouper run`` (``command``: instead of ``--grouper-python``'s); returns the seconds until
        /readyz answered 200."""
        self.generation += 1
        self.token_file.write_text(self.cluster.create_token(SA_NAMESPACE, SA_NAME, expiration_seconds=48 * 3600))
        g = GrouperProcess(self.cluster, self.token_file, self.work, identity=f"bench-{self.generation}",
                           args=self.grouper_args(extra), command=command or self.args.command,
                           env={"GROUPER_LOG_LEVEL": "warning"}, die_with_parent=True)
        self.grouper = g.start()
        return g.wait_ready(timeout=600)

    def stop_grouper(self, *, crash: bool = False) -> None:
        """``crash``: SIGKILL — no drain, and the lease is not released (a successor waits it out)."""
        if self.grouper is not None:
            if crash:
                self.grouper.kill()
            else:
                self.grouper.stop()
            self.grouper.http.close()
            self.grouper = None

    def leading(self) -> bool:
        """Whether this grouper holds the Lease, read from the API server: its ``podgrouper_leader`` metric
        answers only once its HTTP API has loaded (in a thread, after ``/readyz``), which is not when it leads."""
        status, lease = self.cluster.request("GET", LEASE)
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity") if isinstance(lease, dict) else None
        return status == 200 and holder == self.g.identity

    def wait_leading(self, timeout: float = 120) -> float:
        t0 = time.monotonic()
        while not self.leading():
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"the grouper did not become leader:\n{self.g.log_tail()}")
            time.sleep(0.2)
        return time.monotonic() - t0

    @property
    def g(self) -> GrouperProcess:
        assert self.grouper is not None, "grouper not running"
        return self.grouper

    def counters(self) -> dict[str, float]:
        text = self.g.metrics_text()
        out = {"requests": parse_metric(text, "podgrouper_api_requests_total"),
               "lease_requests": parse_metric(text, "podgrouper_api_requests_total", resource="leases"),
               "reconciles": parse_metric(text, "podgrouper_reconciles_total"),
               "queue": parse_metric(text, "podgrouper_workqueue_depth"),
               "decision_errors": parse_metric(text, "podgrouper_decision_errors_total"),
               # pod decisions made (not kept from the workload's last plan; older groupers count by path)
               "decisions": parse_metric(text, "podgrouper_pod_decisions_total")
               - parse_metric(text, "podgrouper_pod_decisions_total", source="kept")}
        writes = 0.0
        for verb in WRITE_VERBS:
            for res in ("pods", "podgroups"):
                writes += parse_metric(text, "podgrouper_api_requests_total", verb=verb, resource=res)
        out["writes"] = writes
        out["events"] = parse_metric(text, "podgrouper_api_requests_total", resource="events")
        # what the writes were: PodGroup operations, pod patch results, and the answers other than 2xx
        for op in ("created", "updated", "unchanged"):
            out[f"podgroups_{op}"] = parse_metric(text, "podgrouper_podgroups_written_total", operation=op)
        out["podgroups_deleted"] = parse_metric(text, "podgrouper_podgroups_deleted_total")
        for res in ("ok", "requeue", "later", "error", "failed"):  # reconciles by result ("later": waiting for a cache)
            out[f"reconciles_{res}"] = parse_metric(text, "podgrouper_reconciles_total", result=res)
        for res in ("patched", "unchanged", "gone", "error"):
            out[f"pod_patches_{res}"] = parse_metric(text, "podgrouper_pod_patches_total", result=res)
        for line in text.splitlines():
            m = re.match(r'podgrouper_api_requests_total\{code="([^"]+)",resource="(pods|podgroups)",'
                         r'verb="(create|update|patch|delete)"\} (\S+)', line)
            if m and not m.group(1).startswith("2"):
                out[f"answer_{m.group(1)}_{m.group(3)}_{m.group(2)}"] = float(m.group(4))
        return out

    def client_limits(self, extra: tuple[str, ...] = ()) -> dict[str, str]:
        """The --qps / --burst the grouper runs with: the last one passed, else its own default (--help)."""
        argv = list(self.grouper_args(extra))
        out = dict(self.args.default_limits)
        for flag in ("qps", "burst"):
            for i, a in enumerate(argv):
                if a == f"--{flag}" and i + 1 < len(argv):
                    out[flag] = argv[i + 1]
                elif a.startswith(f"--{flag}="):
                    out[flag] = a.split("=", 1)[1]
        return out

    # ---------------------------------------------------------------- namespaces

    async def new_namespace(self, tag: str) -> str:
        self.seq += 1
        ns = f"b{self.seq:02d}-{tag}"[:63]
        await self.api.request("POST", "/api/v1/namespaces",
                               {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        return ns

    async def delete_namespace(self, ns: str, timeout: float = 1800) -> float | None:
        """Delete and wait; None (not deleted) in the run's last scenario: the cluster is discarded anyway."""
        if self.final:
            return None
        t0 = time.monotonic()
        with contextlib.suppress(ApiError):  # the pods in one request: faster than the namespace controller
            await self.api.request("DELETE", PATHS["Pod"].format(ns=ns), ok=(200, 202, 404))
        with contextlib.suppress(ApiError):
            await self.api.request("DELETE", f"/api/v1/namespaces/{ns}", ok=(200, 202, 404))
        while time.monotonic() - t0 < timeout:
            try:
                await self.api.request("GET", f"/api/v1/namespaces/{ns}")
            except ApiError as e:
                if e.status == 404:
                    return time.monotonic() - t0
                raise
            await asyncio.sleep(0.5)
        raise TimeoutError(f"namespace {ns} not deleted after {timeout:.0f} s")

    # ---------------------------------------------------------------- creating workloads

    async def create(self, place: dict[str, str], workloads: list[Workload], rate: float,
                     on_top: Callable[[Workload, str], None]) -> dict[str, float]:
        """Create every workload (top object, intermediates, pods) with IN_FLIGHT requests in flight; with a
        ``rate`` (pods/s) pod k is sent no earlier than start + k / rate. Returns pod -> send time."""
        sem = asyncio.Semaphore(IN_FLIGHT)
        sent: dict[str, float] = {}
        t0 = time.monotonic()
        k = 0
        plans: list[tuple[Workload, dict[str, float]]] = []
        for w in workloads:
            times: dict[str, float] = {}
            for n in w.nodes:
                if n.is_pod:
                    times[n.key] = t0 + k / rate if rate else t0
                    k += 1
            plans.append((w, times))

        async def run(w: Workload, times: dict[str, float]) -> None:
            if rate:
                await asyncio.sleep(max(0.0, min(times.values()) - time.monotonic() - 0.05))
            uids: dict[str, str] = {}
            done = {n.key: asyncio.Event() for n in w.nodes}

            async def one(n: Any) -> None:
                for d in n.deps:
                    await done[d].wait()
                if n.is_pod and rate:
                    await asyncio.sleep(max(0.0, times[n.key] - time.monotonic()))
                body = n.body(uids)
                path = PATHS[n.kind].format(ns=place[w.name])
                async with sem:
                    if n.is_pod:
                        sent[body["metadata"]["name"]] = time.monotonic()
                    obj = await self.api.request("POST", path, body)
                uids[n.key] = obj["metadata"]["uid"]
                if n.key == "top":
                    on_top(w, uids["top"])
                done[n.key].set()

            await asyncio.gather(*(one(n) for n in w.nodes))

        await asyncio.gather(*(run(w, t) for w, t in plans))
        return sent

    # ---------------------------------------------------------------- one phase

    async def phase(self, sc: Scenario, mode: str, *, keep: bool = False, probes: bool = False,
                    tag: str = "") -> dict[str, Any]:
        """Create the scenario's workloads in a fresh namespace and wait until every pod is annotated, by the
        grouper (``mode == "grouper"``) or by the baseline; measure and verify. Deletes the namespace
        afterwards unless ``keep``."""
        scheduler = GROUPER_SCHEDULER if mode == "grouper" else BASELINE_SCHEDULER
        n_ns = sc.namespaces if mode == "grouper" else 1
        names = [await self.new_namespace(f"{sc.name}-{tag or mode}" + (f"-{i}" if n_ns > 1 else ""))
                 for i in range(n_ns)]
        ns = names[0]
        workloads = workload_set(sc.pods, sc.per_workload, PodSpec(scheduler), "", kinds=sc.kinds)
        place = {w.name: names[i % n_ns] for i, w in enumerate(workloads)}
        total = sum(w.pod_count for w in workloads)
        ctx = self.mp
        watchers = []
        for name in names:
            expected_here = sum(w.pod_count for w in workloads if place[w.name] == name)
            ready, stop, out, progress = ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Value("i", 0)
            proc = ctx.Process(target=watcher_main, args=(self.ep, name, expected_here, ready, stop, out, progress),
                               daemon=True)
            proc.start()
            watchers.append((proc, ready, stop, out, progress))
        procs = [w[0] for w in watchers]
        b_inbox = b_out = b_stop = None
        if mode == "baseline":
            b_ready, b_stop, b_out = ctx.Event(), ctx.Event(), ctx.Queue()
            b_recv, b_inbox = ctx.Pipe(duplex=False)
            base = ctx.Process(target=baseline_main, args=(self.ep, ns, b_recv, b_ready, b_stop, b_out), daemon=True)
            base.start()
            procs.append(base)
            if not b_ready.wait(60):
                raise RuntimeError("the baseline process did not start")
        for _, ready, *_ in watchers:
            if not ready.wait(60):
                raise RuntimeError("a watcher process did not start")
        p_stop = p_out = None
        if probes:
            p_stop, p_out = ctx.Event(), ctx.Queue()
            prober = ctx.Process(target=probe_main, args=(self.g.port, self.ep, LEASE, p_stop, p_out), daemon=True)
            prober.start()
            procs.append(prober)
            await asyncio.sleep(1.0)
        expected = {name: Expectation({}, {}) for name in names}

        def on_top(w: Workload, uid: str) -> None:
            e = w.expect(uid)
            expected[place[w.name]].pods.update(e.pods)
            expected[place[w.name]].pod_groups.update(e.pod_groups)
            if b_inbox is not None:
                b_inbox.send((e.pods, {n: pg.body() for n, pg in e.pod_groups.items()}))

        before = self.counters()
        cpu0, rss0 = self.g.cpu_seconds(), self.g.rss_bytes()
        t_start = time.monotonic()
        sent = await self.create(place, workloads, sc.rate, on_top)
        t_created = time.monotonic()
        last_create = max(sent.values())
        stalled = await self.wait_annotated([w[4] for w in watchers], total, t_created, mode)
        for w in watchers:
            w[2].set()  # a watcher that already saw all its pods has put its result and ignores this
        results = [await asyncio.to_thread(_get, w[3], 60) or {"annotated": {}, "error": "no result"}
                   for w in watchers]
        annotated: dict[str, float] = {}
        for r in results:
            annotated.update(r["annotated"])
        t_done = max(annotated.values()) if annotated else time.monotonic()
        cpu1, rss1 = self.g.cpu_seconds(), self.g.rss_bytes()
        after = self.counters()
        probe = None
        if p_stop is not None and p_out is not None:
            p_stop.set()
            probe = await asyncio.to_thread(_get, p_out, 30)
        base_result = None
        if b_stop is not None and b_out is not None and b_inbox is not None:
            b_inbox.send(None)
            b_stop.set()
            base_result = await asyncio.to_thread(_get, b_out, 60)
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
        lat = [annotated[p] - sent[p] for p in sent if p in annotated]
        by_kind: dict[str, list[float]] = {}
        for p in sent:  # pod names start with the kind's abbreviation (workloads.py, _ABBREV)
            if p in annotated:
                by_kind.setdefault(p.split("-", 1)[0], []).append(annotated[p] - sent[p])
        v = Verification()
        for name in names:
            v.merge(await verify(self.api, name, expected[name]))
        if len(annotated) < total:
            v.fail(f"only {len(annotated)} of {total} pods were seen annotated"
                   + (f": no progress for {STALL_S:.0f} s (stalled)" if stalled else ""))
        for r in results:
            if r.get("error"):
                v.fail(f"watcher: {r['error']}")
        if base_result is not None and (base_result.get("error") or base_result.get("error_count")):
            v.fail(f"baseline: {base_result.get('error') or base_result.get('errors')}")
        requests = after["requests"] - before["requests"] - (after["lease_requests"] - before["lease_requests"])
        out: dict[str, Any] = {
            "mode": mode, "namespace": ns, "namespaces": names, "pods": total, "workloads": len(workloads),
            "podgroups": sum(len(e.pod_groups) for e in expected.values()),
            "create_s": round(t_created - t_start, 2),
            "total_s": round(t_done - t_start, 2),
            "after_last_create_s": round(t_done - last_create, 2),
            "latency_s": {"p50": rounded(pct(lat, 50)), "p90": rounded(pct(lat, 90)), "p99": rounded(pct(lat, 99)),
                          "max": rounded(max(lat) if lat else None)},
            "latency_by_kind_s": {k: {"pods": len(v), "p50": rounded(pct(v, 50)), "p99": rounded(pct(v, 99)),
                                      "max": rounded(max(v))} for k, v in sorted(by_kind.items())},
            "grouper_cpu_s": round(cpu1 - cpu0, 2),
            "grouper_cpu_ms_per_pod": round((cpu1 - cpu0) * 1000 / total, 2),
            "grouper_rss_mib": round(rss1 / 2**20, 1),
            "grouper_rss_growth_kb_per_pod": round((rss1 - rss0) / 1024 / total, 1),
            "grouper_requests": requests,
            "grouper_requests_per_pod": round(requests / total, 3),
            "grouper_writes": after["writes"] - before["writes"],
            "grouper_write_breakdown": {k: after[k] - before.get(k, 0.0) for k in sorted(after)
                                        if k.startswith(("podgroups_", "pod_patches_", "answer_", "reconciles_"))
                                        and after[k] - before.get(k, 0.0)},
            "grouper_decision_errors": after["decision_errors"] - before["decision_errors"],
            "grouper_reconciles": after["reconciles"] - before["reconciles"],
            "grouper_decisions_per_pod": round((after["decisions"] - before["decisions"]) / total, 3),
            "verification": v.as_dict(),
        }
        if base_result is not None:
            out["baseline_writes"] = base_result
        if probe is not None:
            out["event_loop"] = probe_figures(probe)
        status = "OK" if v.ok else "VERIFICATION FAILED"
        say(f"  {sc.name} [{mode}{'/' + tag if tag else ''}] {total} pods: {out['total_s']} s "
            f"(+{out['after_last_create_s']} s after the last create), p50/p99 {out['latency_s']['p50']}/"
            f"{out['latency_s']['p99']} s, grouper CPU {out['grouper_cpu_ms_per_pod']} ms/pod, "
            f"{out['grouper_requests_per_pod']} req/pod — {status}")
        for f in v.failures[:10]:
            say(f"    !! {f}")
        if not keep:
            out["delete_s"] = rounded(await self.delete_namespaces(names), 1)
        return out

    async def wait_annotated(self, progress: list[Any], total: int, t_created: float, mode: str) -> bool:
        """Until the watchers have seen ``total`` pods annotated; True when it gave up: no new annotation for
        STALL_S seconds after the last create, or the grouper exited."""
        last, changed = -1, time.monotonic()
        while True:
            seen = sum(p.value for p in progress)
            if seen >= total:
                return False
            now = time.monotonic()
            if seen != last:
                last, changed = seen, now
            if now - max(changed, t_created) > STALL_S:
                say(f"  !! stalled: {seen} of {total} pods annotated, none for {STALL_S:.0f} s")
                return True
            if mode == "grouper" and not self.g.alive():
                say(f"  !! the grouper exited: {seen} of {total} pods annotated")
                return True
            await asyncio.sleep(1.0)

    async def delete_namespaces(self, names: list[str]) -> float | None:
        t0 = time.monotonic()
        for name in names:
            if await self.delete_namespace(name) is None:
                return None
        return time.monotonic() - t0

    # ---------------------------------------------------------------- scenarios

    async def run_scenario(self, sc: Scenario) -> dict[str, Any]:
        say(f"scenario {sc.name}: {sc.kind}, {sc.pods} pods, {sc.per_workload} per workload"
            + (f", {sc.rate:g} pods/s" if sc.rate else ""))
        res: dict[str, Any] = {"name": sc.name, "kind": sc.kind, "shape": sc.shape, "pods": sc.pods,
                               "per_workload": sc.per_workload, "rate": sc.rate or None,
                               **({"kinds": list(sc.kinds)} if sc.kinds != KINDS else {}),
                               "load_start": os.getloadavg()[0]}
        if sc.kind in ("burst", "steady"):
            res["client_limits"] = self.client_limits()
            res["baseline"] = await self.phase(sc, "baseline", keep=True)
            res["grouper"] = await self.phase(sc, "grouper", probes=sc.probes, keep=sc.restart)
            if sc.restart:
                res["restart"] = await self.restart_over(res["grouper"])
            if self.args.bracket:  # after the grouper's namespace is gone, as before the first baseline
                res["baseline_after"] = await self.phase(sc, "baseline", keep=True, tag="baseline-after")
            res.update(bracketed_ratio(res["grouper"], res["baseline"], res.get("baseline_after")))
        elif sc.kind == "limits":
            res["baseline"] = await self.phase(sc, "baseline", keep=True)
            res["settings"] = []
            for extra in sc.limits:
                self.stop_grouper()
                self.start_grouper(extra)
                self.wait_leading()
                r = await self.phase(sc, "grouper", tag="-".join(a.strip("-") for a in extra))
                r["client_limits"] = self.client_limits(extra)
                r["ratio"] = _ratio(r, res["baseline"])
                res["settings"].append(r)
            self.stop_grouper()
            self.start_grouper()
            self.wait_leading()
        elif sc.kind == "restart":
            res["client_limits"] = self.client_limits()
            res["restart"] = await self.restart_over(await self.phase(sc, "grouper", keep=True, tag="setup"))
        res["load_end"] = os.getloadavg()[0]
        return res

    async def restart_over(self, setup: dict[str, Any]) -> dict[str, Any]:
        """Restart the grouper over the kept namespace of ``setup`` (a verified grouper phase), check that
        nothing changed, delete the namespace."""
        names = setup["namespaces"]
        before: dict[str, dict[str, str]] = {}
        for ns in names:
            pgs, _ = await self.api.list(PGS.format(ns=ns))
            before[ns] = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in pgs}
        res: dict[str, Any] = {"setup": setup, "pods": setup["pods"], "workloads": setup["workloads"]}
        runs = []
        for i in range(self.args.restarts):  # with --restart-alt-python every other one runs the other grouper
            alt = bool(self.args.alt_command) and i % 2 == 1
            run = await self.restart(setup, command=self.args.alt_command if alt else None)
            run["grouper"] = "alt" if alt else "main"
            runs.append(run)
        res.update(runs[0])
        if len(runs) > 1:
            res["runs"] = runs
        v = Verification()
        for ns in names:
            v.merge(await self.verify_again(ns, before[ns]))
        if v.pods_checked != setup["pods"]:
            v.fail(f"{v.pods_checked} pods after the restart, expected {setup['pods']}")
        res["verification"] = v.as_dict()
        res["delete_s"] = rounded(await self.delete_namespaces(names), 1)
        return res

    async def restart(self, setup: dict[str, Any], command: list[str] | None = None) -> dict[str, Any]:
        """Stop the grouper, start a new one (``command``: another checkout's) over the cached, grouped pods:
        time to /readyz, to leading, to having re-decided every workload (reconciles >= workloads and an
        empty queue, twice in a row), the writes it made, RSS."""
        # the floor of a restart: the grouper's pods listed by a plain client while no grouper runs, page by
        # page (500 per page) and as one streaming list. A crash (--restart-crash) comes after the floors, so
        # its lease has not run out before the successor starts.
        crash = bool(self.args.restart_crash)
        if not crash:
            self.stop_grouper()
        selector = {"fieldSelector": f"spec.schedulerName={GROUPER_SCHEDULER}"}
        t_list = time.monotonic()
        listed, _ = await self.api.list("/api/v1/pods", limit=500, selectors=selector)
        list_floor_s, n_listed = time.monotonic() - t_list, len(listed)
        del listed
        t_list = time.monotonic()
        streamed = await self.api.stream_list("/api/v1/pods", selectors=selector)
        stream_floor_s = time.monotonic() - t_list
        if streamed != n_listed:
            say(f"  !! a streaming list sent {streamed:,} pods, the LIST {n_listed:,}")
        lists = await self.lists_floor(selector)
        if crash:
            self.stop_grouper(crash=True)
        api0 = self.cluster.cpu_seconds("kube-apiserver")
        t0 = time.monotonic()
        ready_s = self.start_grouper(command=command)
        api_ready = self.cluster.cpu_seconds("kube-apiserver") - api0
        leading_s = self.wait_leading() + ready_s
        # a new workload created while the re-checks run: grouped at once, or queued behind them?
        fresh = asyncio.create_task(self.fresh_workload())
        workloads = setup["workloads"] + 1
        api_settled, grouper_settled = api_ready, self.g.cpu_seconds()
        stable = 0
        settled_s = None
        while time.monotonic() - t0 < 1800:
            c = self.counters()
            if c["reconciles"] >= workloads and c["queue"] == 0:
                stable += 1
                if stable >= 2:
                    settled_s = time.monotonic() - t0
                    break
            else:
                stable = 0
                # CPU until settled (as of the last look that found work left): what the restart cost the box
                api_settled = self.cluster.cpu_seconds("kube-apiserver") - api0
                grouper_settled = self.g.cpu_seconds()
            await asyncio.sleep(0.25)
        await asyncio.sleep(3.0)  # late writes would show here
        new_ns, new_s, new_writes = await fresh
        c = self.counters()
        rss = self.g.rss_bytes()
        out = {"list_floor_s": round(list_floor_s, 2), "list_floor_pods": n_listed,
               "stream_list_floor_s": round(stream_floor_s, 2),
               "grouper_commit": git_commit(grouper_checkout(command) or REPO) if command else None,
               "crash": crash, "lists_floor": lists,
               "apiserver_cpu_s": {"to_ready": round(api_ready, 2), "to_settled": round(api_settled, 2)},
               "grouper_cpu_settled_s": round(grouper_settled, 2),
               # the shortest time this box's CPUs could do the restart's work in, were it spread perfectly
               "cpu_floor_s": round((api_settled + grouper_settled) / (os.cpu_count() or 1), 2),
               "ready_s": round(ready_s, 2), "leading_s": round(leading_s, 2),
               "settled_s": rounded(settled_s, 2), "reconciles": c["reconciles"],
               "new_workload_s": rounded(new_s, 2), "new_workload_writes": new_writes,
               "writes_after_restart": c["writes"] - new_writes,
               "events_after_restart": c["events"], "cpu_s": round(self.g.cpu_seconds(), 2),
               "rss_mib": round(rss / 2**20, 1),
               "rss_per_cached_pod_kb": round((rss - self.args.idle_rss) / 1024 / setup["pods"], 1)}
        say(f"  restart{' (alt grouper)' if command else ''}{' after a crash' if crash else ''}: a plain LIST of the {n_listed:,} pods {out['list_floor_s']} s, a streaming list "
            f"{out['stream_list_floor_s']} s; ready {out['ready_s']} s, leading {out['leading_s']} s, settled {out['settled_s']} s, "
            f"{c['reconciles']:.0f} reconciles, {out['writes_after_restart']:.0f} writes, RSS {out['rss_mib']} MiB "
            f"({out['rss_per_cached_pod_kb']} KB per cached pod); a new 5-pod workload grouped {out['new_workload_s']} s "
            f"after its last pod was created")
        say(f"  the floor: a plain client's streaming lists of everything the grouper caches ({lists['objects']:,} "
            f"objects) {lists['wall_s']} s, the API server {lists['apiserver_cpu_s']} CPU-s; the restart until settled: "
            f"the API server {out['apiserver_cpu_s']['to_settled']} CPU-s ({out['apiserver_cpu_s']['to_ready']} to ready), "
            f"the grouper {out['grouper_cpu_settled_s']} CPU-s: {out['cpu_floor_s']} s of this box's {os.cpu_count()} CPUs")
        await self.delete_namespace(new_ns)
        return out

    async def lists_floor(self, selector: dict[str, str]) -> dict[str, Any]:
        """The floor of a restart's lists: a plain client streams everything the grouper caches — its pods,
        the PodGroups, every owner kind of the workloads — at once, decoding each object and nothing more:
        wall time, objects, and the CPU it cost the API server and the client."""
        cluster_wide = [PGS, *(PATHS[k] for k in sorted(PATHS) if k != "Pod")]
        paths: list[tuple[str, dict[str, str] | None]] = [("/api/v1/pods", selector)]
        paths += [(p.replace("namespaces/{ns}/", ""), None) for p in cluster_wide]
        api0, client0, t0 = self.cluster.cpu_seconds("kube-apiserver"), time.process_time(), time.monotonic()
        counts = await asyncio.gather(*(self.api.stream_list(p, selectors=sel) for p, sel in paths))
        return {"wall_s": round(time.monotonic() - t0, 2), "objects": sum(counts),
                "apiserver_cpu_s": round(self.cluster.cpu_seconds("kube-apiserver") - api0, 2),
                "client_cpu_s": round(time.process_time() - client0, 2)}

    async def fresh_workload(self) -> tuple[str, float | None, int]:
        """One 5-pod JobSet in a namespace of its own: seconds from its last pod's create to every pod
        annotated (polled every 50 ms; None after 300 s), and the writes it needs (1 PodGroup + 5 pods),
        which the restart's write count leaves out."""
        ns = await self.new_namespace("restart-new")
        workloads = workload_set(5, 5, PodSpec(GROUPER_SCHEDULER), "")
        sent = await self.create({w.name: ns for w in workloads}, workloads, 0, lambda w, uid: None)
        last = max(sent.values())
        while time.monotonic() - last < 300:
            pods, _ = await self.api.list(PATHS["Pod"].format(ns=ns))
            if len(pods) == 5 and all(ANNOTATION in (p["metadata"].get("annotations") or {}) for p in pods):
                return ns, time.monotonic() - last, 1 + len(pods)
            await asyncio.sleep(0.05)
        return ns, None, 0

    async def verify_again(self, ns: str, pg_versions: dict[str, str]) -> Verification:
        """After the restart: every pod still annotated, no PodGroup changed since the setup's verification."""
        pods, _ = await self.api.list(PATHS["Pod"].format(ns=ns))
        pgs, _ = await self.api.list(PGS.format(ns=ns))
        v = Verification()
        for p in pods:
            v.pods_checked += 1
            if ANNOTATION not in (p["metadata"].get("annotations") or {}):
                v.fail(f"pod {ns}/{p['metadata']['name']}: no {ANNOTATION} after the restart")
        v.podgroups_checked = len(pgs)
        after = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in pgs}
        changed = sorted(n for n in set(after) | set(pg_versions) if after.get(n) != pg_versions.get(n))
        if changed:
            v.fail(f"{len(changed)} PodGroups created, changed or deleted across the restart: {changed[:5]}")
        return v


def _get(q: Any, timeout: float) -> Any:
    try:
        return q.get(True, timeout)
    except Exception:
        return None


def _ratio(g: dict[str, Any], b: dict[str, Any]) -> float | None:
    return round(g["total_s"] / b["total_s"], 2) if b.get("total_s") else None


def bracketed_ratio(g: dict[str, Any], before: dict[str, Any], after: dict[str, Any] | None) -> dict[str, Any]:
    """The grouper's time over the baseline's. With a second baseline after the grouper phase (``--bracket``)
    the ratio is to the mean of both, which cancels a drift of the box or the API server that is linear in
    time (the grouper phase always runs second); ``baseline_drift`` (after / before) says how large it was."""
    if after is None or not after.get("total_s") or not before.get("total_s"):
        return {"ratio": _ratio(g, before)}
    mean = (before["total_s"] + after["total_s"]) / 2
    return {"ratio": round(g["total_s"] / mean, 2), "ratio_to_first_baseline": _ratio(g, before),
            "baseline_drift": round(after["total_s"] / before["total_s"], 2)}


def probe_figures(p: dict[str, Any]) -> dict[str, Any]:
    gaps = lease_gaps(p.get("renewals") or [])
    return {
        "healthz_ms": {"p50": rounded(pct(p["healthz"], 50), 1), "p99": rounded(pct(p["healthz"], 99), 1),
                       "max": rounded(max(p["healthz"]) if p["healthz"] else None, 1), "n": len(p["healthz"])},
        "readyz_ms": {"p50": rounded(pct(p["readyz"], 50), 1), "p99": rounded(pct(p["readyz"], 99), 1),
                      "max": rounded(max(p["readyz"]) if p["readyz"] else None, 1), "n": len(p["readyz"])},
        "probe_failures": p.get("failures", 0),
        "probe_failure_reasons": p.get("failure_reasons", []),
        "lease_renew_interval_s": {"median": rounded(statistics.median(gaps) if gaps else None, 2),
                                   "max": rounded(max(gaps) if gaps else None, 2), "n": len(gaps)},
    }


# ---------------------------------------------------------------------------------------------------- report


def _reasons(el: dict[str, Any]) -> str:
    """``: <first reason>`` for a table line when probes failed (the JSON keeps up to 20)."""
    reasons = el.get("probe_failure_reasons") or []
    return f": {reasons[0]}" + (f" and {len(reasons) - 1} more" if len(reasons) > 1 else "") if reasons else ""


def _f(x: Any, nd: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    return f"{x:,}"


def table(results: dict[str, Any]) -> str:
    rows = ["| scenario | pods | grouper / baseline | grouper s (baseline s) | after last create s | "
            "latency p50 / p90 / p99 s | grouper CPU ms/pod | RSS MiB (growth KB/pod) | requests/pod | "
            "writes (minimal) | qps / burst | load | verified |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|"]

    def row(name: str, pods: int, g: dict[str, Any], b: dict[str, Any] | None, limits: dict[str, str],
            load: str, ratio: Any, b2: dict[str, Any] | None = None) -> str:
        lat = g["latency_s"]
        ok = "yes" if all(x["verification"]["ok"] for x in (g, b, b2) if x is not None) else "**NO**"
        base = f" ({_f(b['total_s'])}{' / ' + _f(b2['total_s']) if b2 else ''})" if b else ""
        minimal = (b or {}).get("baseline_writes", {}).get("writes")
        return (f"| {name} | {pods:,} | {_f(ratio)}x | {_f(g['total_s'])}{base} | {_f(g['after_last_create_s'])} | "
                f"{_f(lat['p50'])} / {_f(lat['p90'])} / {_f(lat['p99'])} | {_f(g['grouper_cpu_ms_per_pod'])} | "
                f"{_f(g['grouper_rss_mib'], 0)} ({_f(g['grouper_rss_growth_kb_per_pod'], 1)}) | "
                f"{_f(g['grouper_requests_per_pod'])} | {_f(int(g['grouper_writes']))} ({_f(minimal)}) | "
                f"{limits.get('qps')} / {limits.get('burst')} | {load} | {ok} |")

    extra: list[str] = []
    for s in results["scenarios"]:
        if s.get("error"):  # a failed scenario has only its name, kind and error
            rows.append(f"| {s['name']} | | **FAILED: {s['error'][:80]}** | | | | | | | | | | **NO** |")
            continue
        load = f"{s['load_start']:.1f}-{s['load_end']:.1f}"
        if s["kind"] in ("burst", "steady"):
            rows.append(row(s["name"], s["pods"], s["grouper"], s["baseline"], s["client_limits"], load, s["ratio"],
                            s.get("baseline_after")))
            if s.get("baseline_after"):
                extra.append(f"- **{s['name']}, baselines before / after the grouper**: "
                             f"{_f(s['baseline']['total_s'])} / {_f(s['baseline_after']['total_s'])} s (drift "
                             f"{_f(s['baseline_drift'])}x); the ratio is to their mean, "
                             f"{_f(s['ratio_to_first_baseline'])}x to the first alone")
            el = s["grouper"].get("event_loop")
            if el:
                extra.append(f"- **event loop during {s['name']}**: `/healthz` p50 / p99 / max "
                             f"{_f(el['healthz_ms']['p50'], 1)} / {_f(el['healthz_ms']['p99'], 1)} / "
                             f"{_f(el['healthz_ms']['max'], 1)} ms, `/readyz` {_f(el['readyz_ms']['p50'], 1)} / "
                             f"{_f(el['readyz_ms']['p99'], 1)} / {_f(el['readyz_ms']['max'], 1)} ms "
                             f"({el['probe_failures']} failed{_reasons(el)}), Lease renewTime interval median "
                             f"{_f(el['lease_renew_interval_s']['median'])} s, max "
                             f"{_f(el['lease_renew_interval_s']['max'])} s")
        elif s["kind"] == "limits":
            for r in s["settings"]:
                rows.append(row(f"{s['name']} `{' '.join(f'{k}={v}' for k, v in r['client_limits'].items())}`",
                                s["pods"], r, s["baseline"], r["client_limits"], load, r["ratio"]))
        r = s.get("restart")
        if r:
            ok = "yes" if r["verification"]["ok"] and r["setup"]["verification"]["ok"] else "**NO**"
            name = s["name"] if s["kind"] == "restart" else f"restart after {s['name']}"
            extra.append(f"- **{name}** (over {r['pods']:,} grouped pods, {r['workloads']:,} "
                         f"workloads; a plain client's LIST of its pods: {_f(r.get('list_floor_s'))} s"
                         f"{_stream_floor(r)}): `/readyz` {_f(r['ready_s'])} s, leading {_f(r['leading_s'])} s, re-decided "
                         f"everything {_f(r['settled_s'])} s after the start, **{r['writes_after_restart']:.0f} "
                         f"writes** after the restart (a new 5-pod workload created once it led: grouped "
                         f"{_f(r.get('new_workload_s'))} s after its last pod), RSS {_f(r['rss_mib'], 0)} MiB = "
                         f"{_f(r['rss_per_cached_pod_kb'], 1)} KB per cached pod (over the idle grouper's); "
                         f"verified: {ok}; load {load}")
            if r.get("lists_floor"):
                extra.append(f"  - **the floor of {name}**: {_cpu_floor(r)}")
            if r.get("runs"):
                extra.append(f"  - every restart of {name} (ready / leading / settled s, writes): " + "; ".join(
                    f"{run['grouper']}{' ' + run['grouper_commit'] if run.get('grouper_commit') else ''}"
                    f"{' after a crash' if run.get('crash') else ''} "
                    f"{_f(run['ready_s'])} / {_f(run['leading_s'])} / {_f(run['settled_s'])}, "
                    f"{run['writes_after_restart']:.0f}" for run in r["runs"]))
    return "\n".join([*rows, "", *extra])


def _cpu_floor(r: dict[str, Any]) -> str:
    lists, api = r["lists_floor"], r["apiserver_cpu_s"]
    return (f"a plain client's streaming lists of everything the grouper caches ({lists['objects']:,} objects, at once) "
            f"{_f(lists['wall_s'])} s, {_f(lists['apiserver_cpu_s'])} CPU-s of the API server and "
            f"{_f(lists['client_cpu_s'])} of the client; the restart until settled: the API server "
            f"{_f(api['to_settled'])} CPU-s ({_f(api['to_ready'])} to ready), the grouper "
            f"{_f(r['grouper_cpu_settled_s'])} CPU-s, together {_f(r['cpu_floor_s'])} s of the box's CPUs")


def _stream_floor(r: dict[str, Any]) -> str:
    return f", a streaming list: {_f(r['stream_list_floor_s'])} s" if r.get("stream_list_floor_s") is not None else ""


def header(results: dict[str, Any]) -> str:
    m = results["machine"]
    return (f"{results['date'][:16]} UTC, label **{results['label']}**, grouper commit {results['grouper_commit']} "
            f"(benchmark {results['commit']}), profile {results['profile']}, {m['cpus']} CPUs, Python "
            f"{m['python']}; load average {m['load_start']:.1f} at the start, {m['load_end']:.1f} at the end; "
            f"total {results['duration_s'] / 60:.1f} min; idle grouper RSS {results['grouper_idle_rss_mib']} MiB.")


def write_readme(results: dict[str, Any], text: str) -> None:
    begin = f"<!-- cluster-bench:{results['profile']}:begin -->"
    end = f"<!-- cluster-bench:{results['profile']}:end -->"
    section = f"{begin}\n{text}\n{end}"
    doc = README.read_text()
    if begin in doc and end in doc:
        doc = doc[: doc.index(begin)] + section + doc[doc.index(end) + len(end):]
    else:
        doc = doc.rstrip("\n") + f"\n\n### Latest numbers ({results['profile']} profile)\n\n{section}\n"
    README.write_text(doc)


# ---------------------------------------------------------------------------------------------------- main


def git_commit(path: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def git_tree(path: Path) -> str:
    """The git tree id of the checkout's grouper/ (identical trees = identical grouper code)."""
    try:
        return subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD:grouper"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def grouper_checkout(command: list[str]) -> Path | None:
    """The checkout whose grouper ``command`` runs (None: the grouper is not importable with it)."""
    code = "import grouper, pathlib; print(pathlib.Path(grouper.__file__).resolve().parents[1])"
    try:  # from a neutral directory, as GrouperProcess runs it (the working directory comes first on sys.path)
        out = subprocess.run([command[0], "-c", code], capture_output=True, text=True, cwd=tempfile.gettempdir())
    except OSError:
        return None
    return Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None


def default_limits(command: list[str]) -> dict[str, str]:
    """The grouper's own --qps / --burst defaults, from its --help."""
    text = subprocess.run([*command, "run", "--help"], capture_output=True, text=True, cwd=tempfile.gettempdir()).stdout
    text = re.sub(r"\s+", " ", text)
    out = {}
    for flag in ("qps", "burst"):
        m = re.search(rf"\[env GROUPER_{flag.upper()}; default: ([^\]]+)\]", text)
        out[flag] = m.group(1).strip() if m else "?"
    return out


def audit_args(path: str | None, work: Path) -> tuple[str, ...]:
    """API server flags for ``--audit-log``: every write to pods and PodGroups, with its body (who wrote
    what, to explain a write count above the minimal)."""
    if not path:
        return ()
    return cluster_audit_args(write_audit_policy(work / "audit-policy.yaml", level="Request"), path, mode="batch")


@contextlib.contextmanager
def workdir(keep: bool) -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="cluster-bench-"))
    yield d
    if not keep:
        subprocess.run(["rm", "-rf", str(d)], check=False)


async def run(args: argparse.Namespace, scenarios: list[Scenario]) -> dict[str, Any]:
    t0 = time.monotonic()
    load_start = os.getloadavg()[0]
    results: dict[str, Any] = {
        "label": args.label, "profile": args.profile if not args.scenario else "scenarios",
        "bracket": args.bracket, "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": git_commit(REPO), "grouper_commit": args.grouper_commit or git_commit(args.checkout),
        "grouper_tree": git_tree(args.checkout),
        "grouper_command": args.command, "grouper_args": args.grouper_arg,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_start": load_start},
        "scenarios": [],
    }
    with workdir(args.keep) as work:
        say(f"starting the control plane (work dir {work})")
        with LocalCluster(crds=CRDS, controllers=KCM_CONTROLLERS, quiet=True, base_dir=args.base_dir,
                          apiserver_args=audit_args(args.audit_log, work)) as cluster:
            say(f"control plane up in {cluster.started_in:.1f} s")
            results["cluster_started_s"] = round(cluster.started_in, 1)
            create_manifest(cluster, REPO / "deploy" / "rbac.yaml")
            bench = Bench(args, cluster, work)
            try:
                ready = bench.start_grouper()
                bench.wait_leading()
                await asyncio.sleep(2.0)
                args.idle_rss = bench.g.rss_bytes()
                results["grouper_ready_s"] = round(ready, 2)
                results["grouper_idle_rss_mib"] = round(args.idle_rss / 2**20, 1)
                say(f"grouper ready in {ready:.1f} s, idle RSS {results['grouper_idle_rss_mib']} MiB; "
                    f"client limits {bench.client_limits()}")
                for i, sc in enumerate(scenarios):
                    bench.final = i == len(scenarios) - 1
                    try:
                        results["scenarios"].append(await bench.run_scenario(sc))
                    except Exception as e:  # a broken scenario is reported, the others still run
                        say(f"scenario {sc.name} FAILED: {e!r}")
                        results["scenarios"].append({"name": sc.name, "kind": sc.kind, "error": repr(e)})
                        if bench.grouper is None or not bench.grouper.alive():
                            log = bench.grouper.log_tail() if bench.grouper else ""
                            say(f"grouper not running:\n{log}")
                            bench.start_grouper()
                            bench.wait_leading()
            finally:
                bench.stop_grouper()
                await bench.api.close()
    results["machine"]["load_end"] = os.getloadavg()[0]
    results["duration_s"] = round(time.monotonic() - t0, 1)
    failed = [s["name"] for s in results["scenarios"] if s.get("error") or not _verified(s)]
    results["verification_failed"] = failed
    return results


def _verified(s: dict[str, Any]) -> bool:
    checks = [s.get(k, {}).get("verification", {}).get("ok", True) for k in ("grouper", "baseline", "baseline_after")]
    checks += [r["verification"]["ok"] for r in s.get("settings", [])]
    r = s.get("restart") or {}
    checks += [r.get("verification", {}).get("ok", True), r.get("setup", {}).get("verification", {}).get("ok", True)]
    return all(checks)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", choices=("quick", "full"), default="quick")
    ap.add_argument("--scenario", action="append", default=[], metavar="NAME",
                    help=f"run only this scenario (repeatable): {', '.join(all_scenarios())}")
    ap.add_argument("--grouper-arg", action="append", default=[], metavar="ARG",
                    help="extra `grouper run` flag, e.g. --grouper-arg=--qps=500 (repeatable)")
    ap.add_argument("--limits", default=DEFAULT_LIMITS, metavar="FLAGS",
                    help=f"client-limit flags for every scenario but limits-* (default {DEFAULT_LIMITS!r}, KAI's "
                         "scale-test settings; --limits= runs the grouper's own defaults)")
    ap.add_argument("--grouper-python", metavar="PATH",
                    help="Python of another checkout to run its grouper (`PATH -m grouper.cli.main run`); "
                         "default: this checkout's .venv")
    ap.add_argument("--grouper-commit", default="",
                    help="commit to record for the grouper (default: the checkout's HEAD; grouper_tree is recorded too)")
    ap.add_argument("--label", default="", help="label stored in the JSON and the table (e.g. before / after)")
    ap.add_argument("--out", type=Path, help="JSON output (default benchmarks/results/cluster-<profile>.json)")
    ap.add_argument("--readme", action=argparse.BooleanOptionalAction, default=None,
                    help="rewrite the profile's table in benchmarks/README.md (default: on for a whole profile)")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply every scenario's pod count (whole workloads, at least one) by this")
    ap.add_argument("--kinds", default="", metavar="K1,K2",
                    help=f"workload kinds to mix, round-robin (default all: {','.join(KINDS)})")
    ap.add_argument("--base-dir", default="/dev/shm" if Path("/dev/shm").is_dir() else None,
                    help="where the control plane keeps etcd's data (default /dev/shm: the shared disk's fsync "
                         "latency would otherwise dominate every write)")
    ap.add_argument("--render", type=Path, metavar="JSON",
                    help="only print (and with --readme write) the table of an earlier run's JSON")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (grouper logs, token)")
    ap.add_argument("--bracket", action="store_true",
                    help="run each burst and steady scenario's baseline again after its grouper phase and "
                         "take the ratio to the mean of both (cancels the drift of a box whose load changes)")
    ap.add_argument("--restarts", type=int, default=1, metavar="N",
                    help="restart the grouper N times over a restart scenario's pods (each run is recorded)")
    ap.add_argument("--restart-alt-python", metavar="PATH",
                    help="with --restarts: every other restart runs the grouper of this other checkout's Python "
                         "(paired A/B over the same objects)")
    ap.add_argument("--restart-crash", action="store_true",
                    help="end the grouper with SIGKILL before each restart (no drain, the lease not released: the "
                         "successor waits out its 15 s)")
    ap.add_argument("--audit-log", metavar="PATH",
                    help="the API server's audit log of every pod and PodGroup write, with its body")
    args = ap.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)  # checked before anything starts
    if args.kinds and not kinds:
        ap.error(f"--kinds {args.kinds!r}: no kind named; known: {', '.join(KINDS)}")
    if unknown := [k for k in kinds if k not in KINDS]:
        ap.error(f"--kinds: unknown kind(s) {', '.join(unknown)}; known: {', '.join(KINDS)}")

    if args.render:
        results = json.loads(args.render.read_text())
        text = header(results) + "\n\n" + table(results)
        print(text)
        if args.readme:
            write_readme(results, text)
        return 1 if results.get("verification_failed") else 0
    python = args.grouper_python or str(REPO / ".venv" / "bin" / "python")
    if not args.grouper_python and not Path(python).exists():
        python = sys.executable
    args.command = [python, "-m", "grouper.cli.main"]
    checkout = grouper_checkout(args.command)
    if checkout is None:
        ap.error(f"--grouper-python {python}: cannot import the grouper package with it (is it a checkout's "
                 ".venv/bin/python with the package installed?)")
    args.checkout = checkout
    args.alt_command = None
    if args.restart_alt_python:
        args.alt_command = [args.restart_alt_python, "-m", "grouper.cli.main"]
        if grouper_checkout(args.alt_command) is None:
            ap.error(f"--restart-alt-python {args.restart_alt_python}: cannot import the grouper package with it")
    if args.restarts < 1:
        ap.error("--restarts must be >= 1")
    args.default_limits = default_limits(args.command)
    args.label = args.label or git_commit(args.checkout)
    if args.scenario:
        known = all_scenarios()
        unknown = [s for s in args.scenario if s not in known]
        if unknown:
            ap.error(f"unknown scenario(s) {unknown}; known: {', '.join(known)}")
        scenarios = [known[s] for s in args.scenario]
    else:
        scenarios = profile(args.profile)
    if args.scale != 1.0:
        scenarios = [replace(s, pods=max(1, round(s.pods * args.scale / s.per_workload)) * s.per_workload)
                     for s in scenarios]
    if kinds:
        scenarios = [replace(s, kinds=kinds) for s in scenarios]
    readme = args.readme if args.readme is not None else not args.scenario and not args.kinds
    say(f"cluster benchmark, profile {args.profile}, {len(scenarios)} scenario(s), grouper {args.checkout} "
        f"({git_commit(args.checkout)}); estimated {estimate_seconds(scenarios, args.bracket, args.restarts) / 60:.0f} min")

    results = asyncio.run(run(args, scenarios))
    out = args.out or RESULTS / f"cluster-{results['profile']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    text = header(results) + "\n\n" + table(results)
    print("\n" + text + "\n", flush=True)
    if readme:
        write_readme(results, text)
    say(f"results in {out}")
    if results["verification_failed"]:
        say(f"!!! VERIFICATION FAILED in: {', '.join(results['verification_failed'])} (see the JSON)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
