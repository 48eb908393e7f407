"""Event-loop latency of ``grouper run`` at scale: do ``/healthz`` and the Lease renewals keep their
latency with 100,000 cached pods and a 10,000-pod burst in progress?

The REAL service (``grouper.runtime.Service``: informers, handlers, work queue, reconcile workers,
leader election, API probe, HTTP server on one asyncio loop) runs in this process, in a thread of its
own, against ``devtools/fakeapi.py`` in a separate process (its CPU is not the grouper's; what is measured
is the grouper's event loop, not an API server). ``/healthz`` is probed from a third process every
50 ms over a new connection (as the kubelet does). Lease renewals are timed inside the grouper (the
elector's ``_try_acquire_or_renew``: GET + PUT) and as the fake server receives them; a monitor task
on the service's loop sleeps 10 ms in a loop and records each overshoot (the loop's stalls).

Phases, each compared with the baseline of the same run:

1. ``baseline``   — the service with 0 pods, leading, idle;
2. ``restart``    — a new service over N cached pods, each already annotated and its PodGroup present
   (the LIST): from start until caches synced, leadership gained and every workload re-checked; must
   write nothing;
3. ``steady``     — N cached pods, idle;
4. ``burst``      — B new bare pods pushed on the pod watch at once, until every one is patched (the
   fake records the patches) — one PodGroup create and one pod patch each;
5. ``relist``     — the pod watch answers 410 Gone: a re-list of all N + B pods while leading.

Bare pods (no owner): the default grouper, one PodGroup per pod — the cheapest decision, so what
shows is the machinery around it. The pre-grouped pods and PodGroups come from templates computed by
the real grouping core (one decision), so the restart really writes nothing (checked).

    python benchmarks/bench_event_loop.py                    # 100,000 cached + 10,000 burst, ~4-6 min
    python benchmarks/bench_event_loop.py --quick            # 10,000 + 1,000, ~1 min
    python benchmarks/bench_event_loop.py --pods 50000 --burst 5000 --window 10 --out /tmp/el.json
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import collections
import datetime as dt
import gc
import itertools
import json
import logging
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from grouper.core.lookups import InMemoryLookups  # noqa: E402
from grouper.core.workload_plan import merge_decisions  # noqa: E402
from grouper.kube import config as kubeconfig  # noqa: E402
from grouper.kube.leader import LeaderElector  # noqa: E402
from grouper.model.podgroup import POD_GROUP_ANNOTATION, SUBGROUP_LABEL  # noqa: E402
from grouper.observability.logging import setup_logging  # noqa: E402
from grouper.runtime import RunSettings, Service  # noqa: E402
from grouper.runtime.composition import build_grouper  # noqa: E402
from grouper.runtime.settings import default_definitions_dir  # noqa: E402

NAMESPACE = "bench"
PLACEHOLDER = "@@I@@"
STALL_TICK = 0.010
WATCHDOG_AFTER = 0.2  # a stall this long gets its stack sampled
RESULTS = REPO / "benchmarks" / "results" / "event_loop.json"

# ---------------------------------------------------------------------- objects


def pod_template(prefix: str, annotated_as: tuple[str, str | None] | None = None) -> dict[str, Any]:
    """A bare pod as the API server returns it (containers, volumes, status: what the cache drops)."""
    meta: dict[str, Any] = {
        "name": f"{prefix}{PLACEHOLDER}",
        "namespace": NAMESPACE,
        "uid": f"{prefix}uid-{PLACEHOLDER}",
        "resourceVersion": "@@RV@@",
        "creationTimestamp": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "labels": {"app": "bench", "kai.scheduler/queue": "team-a"},
        "annotations": {"example.com/owner": "bench"},
    }
    if annotated_as is not None:
        meta["annotations"][POD_GROUP_ANNOTATION] = annotated_as[0]
        if annotated_as[1]:
            meta["labels"][SUBGROUP_LABEL] = annotated_as[1]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": "kai-scheduler",
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example.com/train:1.0",
                    "command": ["python", "train.py"],
                    "env": [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(8)],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def _decide_one(settings: RunSettings, pod: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The PodGroup object and sub-group the real grouping core gives this pod (as the reconciler merges it)."""
    d = build_grouper(settings.grouping_config()).decide(pod, InMemoryLookups([pod]))
    if d.outcome != "grouped" or d.pod_group is None:
        raise SystemExit(f"the bare pod template is not grouped: {d.outcome} {d.message}")
    merged = merge_decisions([d], {d.pod_key: pod["metadata"]["creationTimestamp"]})
    return merged[0].metadata.to_object(), d.sub_group


def _concrete(template: str, idx: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(template.replace(PLACEHOLDER, idx).replace('"@@RV@@"', '"1"'))
    return out


def grouped_templates(settings: RunSettings) -> tuple[str, str]:
    """(pod, PodGroup) JSON templates of a pod already grouped, decided by the real grouping core; checked
    by deciding a second index and comparing with the template's expansion."""
    sample = "424242"
    pod = _concrete(json.dumps(pod_template("p-")), sample)
    pg, sub_group = _decide_one(settings, pod)
    pg["metadata"].update(uid=f"pg-uid-{sample}", resourceVersion="@@RV@@",
                          creationTimestamp=pod["metadata"]["creationTimestamp"], generation=1)
    pod_json = json.dumps(pod_template("p-", (pg["metadata"]["name"], sub_group))).replace(sample, PLACEHOLDER)
    pg_json = json.dumps(pg).replace(sample, PLACEHOLDER)
    other = "000017"
    want, _ = _decide_one(settings, _concrete(json.dumps(pod_template("p-")), other))
    got = _concrete(pg_json, other)
    for k in ("uid", "resourceVersion", "creationTimestamp", "generation"):
        got["metadata"].pop(k, None)
    if got != want:
        raise SystemExit(f"the PodGroup template does not expand to the decision:\n{got}\n{want}")
    return pod_json, pg_json


# ---------------------------------------------------------------------- the fake API server


class Fake:
    def __init__(self, workdir: Path) -> None:
        port_file = workdir / "fake.port"
        self.log = open(workdir / "fake.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "devtools.fakeapi", "--port-file", str(port_file)],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=REPO,
        )
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"fake API server did not start (see {workdir / 'fake.log'})")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{port_file.read_text()}"

    def call(self, op: str, body: dict[str, Any] | None = None, timeout: float = 600) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.url}/_bench/{op}", data=data, method="POST" if data else "GET",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


# ---------------------------------------------------------------------- the /healthz prober (own process)


def probe_main(url: str, out: Path, interval: float) -> None:
    """Every ``interval`` s: GET ``url`` over a new connection; one line per probe: start, seconds, status."""
    import http.client
    from urllib.parse import urlsplit

    u = urlsplit(url)
    with open(out, "a", buffering=1) as f:
        while True:
            t0 = time.monotonic()
            status = 0
            try:
                conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=10)
                conn.request("GET", u.path)
                resp = conn.getresponse()
                resp.read()
                status = resp.status
                conn.close()
            except OSError:
                status = -1
            dur = time.monotonic() - t0
            f.write(f"{t0:.6f} {dur:.6f} {status}\n")
            time.sleep(max(0.0, interval - dur))


def read_probes(path: Path) -> list[tuple[float, float, int]]:
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            out.append((float(parts[0]), float(parts[1]), int(parts[2])))
    return out


# ---------------------------------------------------------------------- instrumentation in the grouper

LEASE_ATTEMPTS: dict[str, list[tuple[float, float, bool]]] = {}  # identity -> (start, end, ok), monotonic
_original_attempt = LeaderElector._try_acquire_or_renew


async def _timed_attempt(self: LeaderElector) -> bool:
    t0 = time.monotonic()
    ok = await _original_attempt(self)
    LEASE_ATTEMPTS.setdefault(self.identity, []).append((t0, time.monotonic(), ok))
    return ok


LeaderElector._try_acquire_or_renew = _timed_attempt  # type: ignore[method-assign]  # measurement only

GC_PAUSES: list[tuple[float, float, int]] = []  # (end, seconds, generation) of every collection in this process
_gc_started = 0.0


def _gc_callback(phase: str, info: dict[str, Any]) -> None:
    global _gc_started
    now = time.monotonic()
    if phase == "start":
        _gc_started = now
    else:
        GC_PAUSES.append((now, now - _gc_started, int(info.get("generation", -1))))


gc.callbacks.append(_gc_callback)


_SERVICES = itertools.count()


class ServiceThread:
    """One ``Service`` on its own loop in a thread (the bench drives it from the main thread), plus the
    stall monitor on the same loop."""

    def __init__(self, settings: RunSettings, server: str) -> None:
        self.identity = f"bench-{os.getpid()}-{next(_SERVICES)}"
        self.service = Service(settings, config=kubeconfig.explicit(server, token="bench"), identity=self.identity)
        self.loop = asyncio.new_event_loop()
        self.stalls: list[tuple[float, float]] = []  # (time, overshoot)
        self.stall_samples: dict[float, dict[str, Any]] = {}  # loop tick a stall started at -> what ran
        self._beat = time.monotonic()
        self._loop_thread = 0
        self.exit_code: int | None = None
        self.error: BaseException | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="grouper", daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def run() -> int:
            self._stop = asyncio.Event()
            monitor = asyncio.create_task(self._monitor())
            try:
                return await self.service.run(self._stop)
            finally:
                monitor.cancel()

        try:
            self.exit_code = self.loop.run_until_complete(run())
        except BaseException as e:  # reported by the main thread
            self.error = e
        finally:
            self.loop.close()

    async def _monitor(self) -> None:
        self._loop_thread = threading.get_ident()
        threading.Thread(target=self._watchdog, name="stall-watchdog", daemon=True).start()
        while True:
            t0 = time.monotonic()
            self._beat = t0
            await asyncio.sleep(STALL_TICK)
            t1 = time.monotonic()
            self.stalls.append((t1, max(0.0, t1 - t0 - STALL_TICK)))

    def _watchdog(self) -> None:
        """While the loop has not ticked for ``WATCHDOG_AFTER`` s, sample what the loop thread is running
        (the innermost grouper frames), so a stall can be attributed to code (a GC pause holds the GIL and
        shows as no sample)."""
        while not self.loop.is_closed():
            time.sleep(0.05)
            beat = self._beat
            late = time.monotonic() - beat
            if late < WATCHDOG_AFTER:
                continue
            frame = sys._current_frames().get(self._loop_thread)
            if frame is None:
                continue
            stack = [f"{Path(f.filename).relative_to(REPO)}:{f.lineno} {f.name}"
                     for f in traceback.extract_stack(frame) if str(REPO / "grouper") in f.filename]
            cur = self.stall_samples.setdefault(beat, {"at": beat, "late_s": 0.0, "stacks": collections.Counter()})
            cur["late_s"] = round(late, 3)
            cur["stacks"][" <- ".join(reversed(stack[-6:])) or "(outside grouper code)"] += 1

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        while self._stop is None:
            time.sleep(0.01)
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(120)
        if self._thread.is_alive():
            raise SystemExit("the grouper did not stop within 120 s")
        if self.error is not None:
            raise SystemExit(f"the grouper crashed: {self.error!r}")

    def check(self) -> None:
        if self.error is not None or (not self._thread.is_alive() and self.exit_code is not None):
            raise SystemExit(f"the grouper stopped: exit {self.exit_code} {self.error!r}")

    def settled(self) -> bool:
        """Leading, caches synced, the leadership re-check queued and nothing waiting or in progress."""
        svc = self.service
        ctl, leader = svc.controller, svc.leader
        if ctl is None or leader is None or not leader.is_leader() or not ctl.workers.running:
            return False
        resync = ctl.resync
        if resync.pending or (resync._enqueue_task is not None and not resync._enqueue_task.done()):
            return False
        return len(ctl.queue) == 0 and not ctl.queue.processing and ctl.queue.pending_delayed == 0


def wait_for(cond: Callable[[], bool], timeout: float, what: str, svc: ServiceThread | None = None,
             stable: float = 0.0) -> float:
    """Poll ``cond`` every 50 ms until it holds for ``stable`` s; returns when it first held (monotonic)."""
    deadline = time.monotonic() + timeout
    since: float | None = None
    while True:
        if svc is not None:
            svc.check()
        now = time.monotonic()
        if cond():
            since = since if since is not None else now
            if now - since >= stable:
                return since
        else:
            since = None
        if now > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def tracked_objects(top: int = 10) -> dict[str, Any]:
    """Objects the cyclic garbage collector tracks (what a full collection walks), by type."""
    objs = gc.get_objects()
    counts = collections.Counter(type(x).__name__ for x in objs)
    del objs
    return {"total": sum(counts.values()), "top": dict(counts.most_common(top))}


def settled_rss() -> int:
    gc.collect()
    time.sleep(0.2)
    return rss_bytes()


# ---------------------------------------------------------------------- figures


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))
    return s[k]


def ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 1)


def phase_figures(name: str, t0: float, t1: float, svc: ServiceThread, probes: list[tuple[float, float, int]],
                  lease_renewals_server: list[list[Any]]) -> dict[str, Any]:
    hz = [(d, st) for t, d, st in probes if t0 <= t and t + d < t1]  # answered inside the window
    lat = [d for d, st in hz if st == 200]
    mine = LEASE_ATTEMPTS.get(svc.identity, [])
    attempts = [(a, b, ok) for a, b, ok in mine if t0 <= b < t1]
    oks = [b for a, b, ok in mine if ok]
    # intervals between consecutive successful renewals (of this service) that end inside the window
    intervals = [b - a for a, b in itertools.pairwise(oks) if t0 <= b < t1]
    server = sorted(t for t, holder in lease_renewals_server if holder == svc.identity)
    server_int = [b - a for a, b in itertools.pairwise(server) if t0 <= b < t1]
    stalls = [s for t, s in svc.stalls if t0 <= t < t1]
    gcs = [(d, g) for t, d, g in GC_PAUSES if t0 <= t < t1]
    gc_ends = [t for t, _, _ in GC_PAUSES]
    no_gc = []  # each stall minus the collections that ran inside it: the loop blocked by code
    for t, over in svc.stalls:
        if t0 <= t < t1:
            begin = t - over - STALL_TICK
            lo, hi = bisect.bisect_left(gc_ends, begin), bisect.bisect_right(gc_ends, t)
            inside = sum(d for e, d, _ in GC_PAUSES[lo:hi] if e - d >= begin - 0.001)
            no_gc.append(max(0.0, over - inside))
    return {
        "phase": name,
        "seconds": round(t1 - t0, 2),
        "healthz": {
            "probes": len(hz),
            "failed": sum(1 for _, st in hz if st != 200),
            "p50_ms": ms(pct(lat, 50)),
            "p99_ms": ms(pct(lat, 99)),
            "max_ms": ms(max(lat) if lat else None),
        },
        "lease": {
            "attempts": len(attempts),
            "failed": sum(1 for *_, ok in attempts if not ok),
            "request_p50_ms": ms(pct([b - a for a, b, _ in attempts], 50)),
            "request_p99_ms": ms(pct([b - a for a, b, _ in attempts], 99)),
            "request_max_ms": ms(max((b - a for a, b, _ in attempts), default=None)),
            "renew_interval_max_s": round(max(intervals), 3) if intervals else None,
            "server_renew_interval_max_s": round(max(server_int), 3) if server_int else None,
        },
        "loop_stall": {
            "samples": len(stalls),
            "p99_ms": ms(pct(stalls, 99)),
            "max_ms": ms(max(stalls) if stalls else None),
            "max_excluding_gc_ms": ms(max(no_gc) if no_gc else None),
        },
        "stall_stacks": [
            {"at_s": round(v["at"] - t0, 2), "late_s": v["late_s"], "samples": dict(v["stacks"].most_common(3))}
            for v in sorted((v for v in svc.stall_samples.values() if t0 <= v["at"] < t1),
                            key=lambda v: -v["late_s"])[:3]
        ],
        "gc": {
            "collections": len(gcs),
            "gen2": sum(1 for _, g in gcs if g == 2),
            "max_pause_ms": ms(max((d for d, _ in gcs), default=None)),
            "total_ms": ms(sum(d for d, _ in gcs)),
        },
    }


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return round(a / b, 2)


def add_ratios(phase: dict[str, Any], base: dict[str, Any]) -> None:
    phase["vs_baseline"] = {
        "healthz_p50": ratio(phase["healthz"]["p50_ms"], base["healthz"]["p50_ms"]),
        "healthz_p99": ratio(phase["healthz"]["p99_ms"], base["healthz"]["p99_ms"]),
        "healthz_max": ratio(phase["healthz"]["max_ms"], base["healthz"]["max_ms"]),
        "lease_request_p99": ratio(phase["lease"]["request_p99_ms"], base["lease"]["request_p99_ms"]),
        "lease_renew_interval_max": ratio(phase["lease"]["renew_interval_max_s"], base["lease"]["renew_interval_max_s"]),
        "loop_stall_max": ratio(phase["loop_stall"]["max_ms"], base["loop_stall"]["max_ms"]),
    }


def machine_info() -> dict[str, Any]:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                text=True, timeout=5).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                                    capture_output=True, text=True, timeout=5).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", False
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "git_commit": commit + ("+dirty" if dirty else ""),
        "loadavg_1m_5m_15m": list(os.getloadavg()),
    }


def fmt(x: Any, unit: str = "") -> str:
    return "-" if x is None else f"{x:,}{unit}" if isinstance(x, int) else f"{x}{unit}"


def print_table(phases: list[dict[str, Any]]) -> None:
    hdr = (f"{'phase':<9} {'secs':>6} {'healthz p50/p99/max ms':>24} {'fail':>4} {'lease req p99/max ms':>21} "
           f"{'renew int max s':>15} {'stall p99/max ms':>17} {'gc max ms':>9} {'stall-gc max':>12}")
    print(hdr)
    print("-" * len(hdr))
    for p in phases:
        h, le, st = p["healthz"], p["lease"], p["loop_stall"]
        print(f"{p['phase']:<9} {p['seconds']:>6} "
              f"{fmt(h['p50_ms']) + ' / ' + fmt(h['p99_ms']) + ' / ' + fmt(h['max_ms']):>24} {h['failed']:>4} "
              f"{fmt(le['request_p99_ms']) + ' / ' + fmt(le['request_max_ms']):>21} "
              f"{fmt(le['renew_interval_max_s']):>15} "
              f"{fmt(st['p99_ms']) + ' / ' + fmt(st['max_ms']):>17} {fmt(p['gc']['max_pause_ms']):>9} "
              f"{fmt(st['max_excluding_gc_ms']):>12}")


# ---------------------------------------------------------------------- the run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(args: argparse.Namespace) -> dict[str, Any]:
    t_run = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="bench-event-loop-"))
    setup_logging(args.log_level, "json", open(workdir / "grouper.log", "a"))  # noqa: SIM115
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    fake = Fake(workdir)
    http_port = free_port()
    settings = RunSettings(
        http_bind_address=f"127.0.0.1:{http_port}",
        http_auth="none",
        qps=0,
        leader_elect=True,
        definitions=default_definitions_dir(),
        log_level=args.log_level,
        shutdown_drain_seconds=1.0,
    )
    probe_file = workdir / "healthz.txt"
    prober = subprocess.Popen([sys.executable, __file__, "--probe", f"http://127.0.0.1:{http_port}/healthz",
                               "--probe-out", str(probe_file), "--probe-interval", str(args.probe_interval)])
    phases: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    try:
        # 1. baseline: no pods
        print(f"baseline: 0 pods, {args.window:.0f} s", flush=True)
        svc = ServiceThread(settings, fake.url)
        svc.start()
        wait_for(svc.settled, 120, "the baseline service to lead", svc, stable=1.0)
        t0 = time.monotonic()
        time.sleep(args.window)
        t1 = time.monotonic()
        rss_base = settled_rss()
        stats = fake.call("stats")
        phases.append(phase_figures("baseline", t0, t1, svc, read_probes(probe_file), stats["lease_renewals"]))
        svc.stop()

        # 2. restart over N pre-grouped pods
        pod_json, pg_json = grouped_templates(settings)
        fake.call("clear")
        pop = fake.call("populate", {"pods": args.pods, "pod": pod_json, "podgroup": pg_json})
        print(f"restart: {pop['pods']:,} pods + {pop['podgroups']:,} PodGroups in the fake "
              f"(generated in {pop['seconds']:.1f} s)", flush=True)
        fake.call("reset-counters")
        svc = ServiceThread(settings, fake.url)
        t_start = time.monotonic()
        svc.start()
        # the window starts when /healthz first answers (before that the port is not bound yet)
        t0 = wait_for(lambda: any(t > t_start and st == 200 for t, _, st in read_probes(probe_file)[-20:]),
                      120, "the HTTP server", svc)
        ctl_ready = wait_for(lambda: svc.service.status is not None and svc.service.status.health_snapshot().synced,
                             600, "caches synced", svc)
        leading = wait_for(lambda: svc.service.leader is not None and svc.service.leader.is_leader(), 600,
                           "leadership", svc)
        t1 = wait_for(svc.settled, args.timeout, "the restart re-check to finish", svc, stable=1.0)
        stats = fake.call("stats")
        restart = phase_figures("restart", t0, t1, svc, read_probes(probe_file), stats["lease_renewals"])
        restart_writes = {k: v for k, v in stats["writes"].items() if "leases" not in k}
        restart.update(
            http_s=round(t0 - t_start, 2), ready_s=round(ctl_ready - t_start, 2),
            leading_s=round(leading - t_start, 2), settled_s=round(t1 - t_start, 2), writes=restart_writes,
        )
        phases.append(restart)
        print(f"  ready {ctl_ready - t_start:.1f} s, leading {leading - t_start:.1f} s, "
              f"settled {t1 - t_start:.1f} s, "
              f"writes {restart_writes or 'none'}", flush=True)

        if args.gc_freeze:  # what a service that froze its heap once the caches are synced would see
            gc.freeze()
            extra["gc_frozen"] = gc.get_freeze_count()
        # 3. steady
        print(f"steady: {args.pods:,} cached pods, {args.window:.0f} s", flush=True)
        fake.call("reset-counters")
        t0 = time.monotonic()
        time.sleep(args.window)
        t1 = time.monotonic()
        rss_steady = settled_rss()
        stats = fake.call("stats")
        steady = phase_figures("steady", t0, t1, svc, read_probes(probe_file), stats["lease_renewals"])
        steady["writes"] = {k: v for k, v in stats["writes"].items() if "leases" not in k}
        phases.append(steady)
        extra["gc_tracked"] = tracked_objects()  # (outside every window: it holds the GIL for a while)

        # 4. burst
        print(f"burst: {args.burst:,} new pods on the watch", flush=True)
        fake.call("reset-counters")
        burst_pod = json.dumps(pod_template("b-"))
        t0 = time.monotonic()
        fake.call("burst", {"pods": args.burst, "pod": burst_pod, "prefix": "b-"})

        def burst_done() -> bool:
            b = fake.call("stats")["burst"]
            return bool(b.get("patched", 0) >= args.burst)

        wait_for(burst_done, args.timeout, f"{args.burst} pods patched", svc)
        stats = fake.call("stats")
        b = stats["burst"]
        t1 = b["last_patch"]
        burst = phase_figures("burst", t0, t1, svc, read_probes(probe_file), stats["lease_renewals"])
        burst.update(
            pods=args.burst,
            push_s=round(b["push_done"] - b["start"], 2),
            completion_s=round(b["last_patch"] - b["start"], 2),
            pods_per_s=round(args.burst / (b["last_patch"] - b["start"]), 1),
            podgroups_created=b["podgroups_created"],
            writes={k: v for k, v in stats["writes"].items() if "leases" not in k},
        )
        phases.append(burst)
        print(f"  all {args.burst:,} patched {burst['completion_s']} s after the first was pushed "
              f"(push took {burst['push_s']} s; {burst['pods_per_s']} pods/s)", flush=True)
        wait_for(svc.settled, args.timeout, "the burst to settle", svc, stable=1.0)

        # 5. relist (410 Gone on the pod watch)
        if args.window > 0:
            total = args.pods + args.burst
            print(f"relist: 410 on the pod watch, re-list of {total:,} pods, {args.window:.0f} s", flush=True)
            lists_before = fake.call("stats")["lists"]["pods"]
            t0 = time.monotonic()
            fake.call("gone")
            time.sleep(args.window)
            t1 = time.monotonic()
            stats = fake.call("stats")
            relist = phase_figures("relist", t0, t1, svc, read_probes(probe_file), stats["lease_renewals"])
            relist["lists"] = stats["lists"]["pods"] - lists_before
            phases.append(relist)
        extra["unknown_requests"] = fake.call("stats")["unknown"]
        svc.stop()
    finally:
        prober.terminate()
        prober.wait(10)
        fake.stop()

    base = phases[0]
    for p in phases[1:]:
        add_ratios(p, base)
    memory = {
        "rss_baseline_mib": round(rss_base / 2**20, 1),
        "rss_steady_mib": round(rss_steady / 2**20, 1),
        "bytes_per_cached_pod": round((rss_steady - rss_base) / args.pods) if args.pods else None,
        "note": "RSS delta / cached pods; each pod comes with its PodGroup in the cache, its workload in the "
                "indexes and its records in the decision store",
    }
    return {
        "machine": machine_info(),
        "params": {"pods": args.pods, "burst": args.burst, "window_s": args.window, "gc_freeze": args.gc_freeze,
                   "probe_interval_s": args.probe_interval, "log_level": args.log_level},
        "phases": phases,
        "memory": memory,
        "total_s": round(time.monotonic() - t_run, 1),
        "workdir": str(workdir),
        **extra,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pods", type=int, default=100_000, help="pods cached before the burst")
    p.add_argument("--burst", type=int, default=10_000, help="new pods in the burst")
    p.add_argument("--window", type=float, default=10.0, help="seconds measured in the baseline/steady/relist")
    p.add_argument("--quick", action="store_true", help="10,000 cached, 1,000 burst, 5 s windows")
    p.add_argument("--timeout", type=float, default=900.0, help="give up on a phase after this many seconds")
    p.add_argument("--probe-interval", type=float, default=0.05)
    p.add_argument("--log-level", default="info", help="the grouper's log level (logs go to the work dir)")
    p.add_argument("--gc-freeze", action="store_true",
                   help="gc.freeze() once the restart has settled (shows the effect of freezing the cache)")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--probe", help=argparse.SUPPRESS)
    p.add_argument("--probe-out", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.probe:
        probe_main(args.probe, args.probe_out, args.probe_interval)
        return
    if args.quick:
        args.pods, args.burst, args.window = 10_000, 1_000, 5.0
    result = run(args)
    print()
    print_table(result["phases"])
    m = result["memory"]
    print(f"\nRSS {m['rss_baseline_mib']} MiB with 0 pods -> {m['rss_steady_mib']} MiB with {args.pods:,} "
          f"({fmt(m['bytes_per_cached_pod'])} bytes per cached pod); total {result['total_s']} s; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
