"""Memory per cached pod: what the controller keeps for each pod, structure by structure.

Feeds N realistic pods (default 100,000) through the controller's real structures, in this process:

- the objects are clones of real ones captured from the local API server (``benchmarks/capture_pods.py``
  → ``benchmarks/data/captured.json``: a running pod of JobSet → Job, one of Deployment → ReplicaSet,
  and their owners, managedFields and status included), renamed consistently (names, uids, labels,
  owner references, node, pod IP); the pods carry the ``pod-group-name`` annotation and sub-group
  label the grouper wrote (a restart over grouped pods);
- three shapes: JobSets of 5 pods (one Job, parallelism 5), JobSets of 1,000 pods (125 Jobs x 8) and
  Deployments of 10 replicas, in several namespaces;
- each object arrives as a watch line (bytes) decoded with orjson by a stand-in client and goes through
  the informer's own event-apply path (``Informer._watch``: transform, store, namespace view, indexes);
- the pod informer's indexes and handlers are those the controller registers (``Controller._attach``),
  and the handlers route every pod into the ``WorkloadIndex`` (the owner walk on the cache);
- per workload, what the reconciler does with what it decides: real Decisions from ``build_grouper``
  over ``InMemoryLookups`` of the cached objects, dependencies, one ``DecisionStore`` record per pod
  (``record_decision`` + ``record_pod_patched``), the merged PodGroups' records and the workload record;
  then the PodGroups themselves go into the PodGroup informer (as the API server returns them).

Measured with tracemalloc (bytes retained after each step, ``gc.collect()`` first) and RSS; the baseline
in the same run is the parsed JSON of the same pods (orjson, as the transport decodes them). Memory a
decision allocated and a record kept (messages, provenance strings) is counted for the decision store.

    .venv/bin/python benchmarks/bench_memory.py               # 100,000 pods, ~6 min on 2 busy cores
    .venv/bin/python benchmarks/bench_memory.py --pods 10000 --out /tmp/memory.json
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import json
import os
import platform
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from grouper.controller.controller import ControllerSettings  # noqa: E402
from grouper.controller.plans import PlanCache  # noqa: E402
from grouper.controller.reconciler import decision_dependencies  # noqa: E402
from grouper.controller.tuning import DEFAULT_TUNING  # noqa: E402
from grouper.controller.workloads import WorkloadKey  # noqa: E402
from grouper.core.lookups import InMemoryLookups  # noqa: E402
from grouper.core.workload_plan import assemble, merge_decisions  # noqa: E402
from grouper.kube.cache import (  # noqa: E402
    POD,
    POD_PODGROUP_INDEX,
    PODGROUP,
    _KindState,
    pod_group_names,
)
from grouper.kube.discovery import Resource  # noqa: E402
from grouper.kube.informer import Informer  # noqa: E402
from grouper.model import objects as o  # noqa: E402
from grouper.model.objects import Obj  # noqa: E402
from grouper.model.podgroup import POD_GROUP_ANNOTATION, SUBGROUP_LABEL  # noqa: E402
from grouper.observability.metrics import Metrics  # noqa: E402
from grouper.runtime.composition import build_grouper  # noqa: E402
from grouper.runtime.supervisor import Supervisor  # noqa: E402
from grouper.runtime.wiring import build_controller  # noqa: E402

CAPTURED = REPO / "benchmarks" / "data" / "captured.json"
RESULTS = REPO / "benchmarks" / "results" / "memory.json"
SCHEDULER = "kai-scheduler"
NAMESPACES = 20
NODES = 500

RESOURCES = {
    "JobSet": Resource("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", True),
    "Job": Resource("batch", "v1", "Job", "jobs", True),
    "Deployment": Resource("apps", "v1", "Deployment", "deployments", True),
    "ReplicaSet": Resource("apps", "v1", "ReplicaSet", "replicasets", True),
    "Pod": Resource("", "v1", "Pod", "pods", True),
    "PodGroup": Resource("scheduling.run.ai", "v2alpha2", "PodGroup", "podgroups", True),
}

# ---------------------------------------------------------------------- cloning the captured objects


class Ids:
    """Deterministic uids, resourceVersions, timestamps."""

    def __init__(self) -> None:
        self.n = 0
        self.rv = 1000

    def uid(self) -> str:
        self.n += 1
        return f"{self.n:08x}-{(self.n * 7919) % 65536:04x}-4{self.n % 4096:03x}-8{self.n % 4093:03x}-{self.n * 104729:012x}"[
            :36
        ]

    def version(self) -> str:
        self.rv += 1
        return str(self.rv)


def _ts(i: int) -> str:
    return (dt.datetime(2026, 12, 1, 8, 0, 0) + dt.timedelta(seconds=i // 7)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ref(obj: Obj) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _replace_strings(obj: Any, old: str, new: str) -> Any:
    """Every string containing ``old`` (names in labels, managedFields keys, commands) with ``new``."""
    if isinstance(obj, str):
        return obj.replace(old, new) if old in obj else obj
    if isinstance(obj, list):
        return [_replace_strings(v, old, new) for v in obj]
    if isinstance(obj, dict):
        return {_replace_strings(k, old, new): _replace_strings(v, old, new) for k, v in obj.items()}
    return obj


@dataclass
class Workload:
    shape: str
    namespace: str
    owners: list[Obj] = field(default_factory=list)  # top owner first
    pods: list[Obj] = field(default_factory=list)


class Factory:
    def __init__(self, captured: dict[str, Any]) -> None:
        self.cap = captured
        self.ids = Ids()
        self.pod_seq = 0
        self.wl_seq = 0

    def _meta(self, obj: Obj, ns: str, name: str, ts: str) -> None:
        m = obj["metadata"]
        m.update(
            namespace=ns,
            name=name,
            uid=self.ids.uid(),
            resourceVersion=self.ids.version(),
            creationTimestamp=ts,
        )

    def _pod(
        self,
        tpl: Obj,
        ns: str,
        name: str,
        owner: Obj,
        pg: str,
        sub_group: str | None,
        labels: dict[str, str],
        annotations: dict[str, str],
        ts: str,
    ) -> Obj:
        self.pod_seq += 1
        i = self.pod_seq
        pod = orjson.loads(orjson.dumps(tpl))
        m = pod["metadata"]
        self._meta(pod, ns, name, ts)
        m["generateName"] = name.rsplit("-", 1)[0] + "-"
        m["labels"] = {**m["labels"], **labels}
        if sub_group:
            m["labels"][SUBGROUP_LABEL] = sub_group
        m["annotations"] = {**(m.get("annotations") or {}), **annotations, POD_GROUP_ANNOTATION: pg}
        m["ownerReferences"] = [_ref(owner)]
        node = f"node-{i % NODES:04d}"
        spec, status = pod["spec"], pod["status"]
        spec.update(schedulerName=SCHEDULER, nodeName=node)
        if "hostname" in spec:
            spec["hostname"] = name.rsplit("-", 1)[0]
        status.update(
            podIP=f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}",
            hostIP=f"192.168.{i % NODES >> 8}.{i % NODES & 255}",
            startTime=ts,
        )
        status["podIPs"] = [{"ip": status["podIP"]}]
        status["hostIPs"] = [{"ip": status["hostIP"]}]
        for c in status.get("conditions") or []:
            c["lastTransitionTime"] = ts
        for cs in status.get("containerStatuses") or []:
            cs["containerID"] = f"containerd://{i:064x}"
            cs["state"] = {"running": {"startedAt": ts}}
        return pod

    def jobset(self, ns: str, replicas: int, parallelism: int) -> Workload:
        self.wl_seq += 1
        name = f"train-{self.wl_seq}"
        ts = _ts(self.pod_seq)
        js = _replace_strings(self.cap["jobset"], "train", name)
        self._meta(js, ns, name, ts)
        js["spec"]["replicatedJobs"][0].update(replicas=replicas)
        js["spec"]["replicatedJobs"][0]["template"]["spec"].update(
            parallelism=parallelism, completions=parallelism
        )
        wl = Workload("jobset", ns, [js])
        pg = f"pg-{name}-{js['metadata']['uid']}"
        for j in range(replicas):
            job_name = f"{name}-worker-{j}"
            job = _replace_strings(self.cap["job"], "train-worker-0", job_name)
            job = _replace_strings(job, "train", name)
            self._meta(job, ns, job_name, ts)
            job_uid = job["metadata"]["uid"]
            key = f"{self.wl_seq * 1000 + j:040x}"
            js_labels = {
                "jobset.sigs.k8s.io/jobset-name": name,
                "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicas),
                "jobset.sigs.k8s.io/job-index": str(j),
                "jobset.sigs.k8s.io/job-global-index": str(j),
                "jobset.sigs.k8s.io/job-key": key,
            }
            job["metadata"]["labels"].update(js_labels)
            job["metadata"]["annotations"].update(js_labels)
            job["metadata"]["ownerReferences"] = [_ref(js)]
            job["spec"].update(parallelism=parallelism, completions=parallelism)
            sel = {"batch.kubernetes.io/controller-uid": job_uid}
            job["spec"]["selector"] = {"matchLabels": sel}
            job["spec"]["template"]["metadata"]["labels"].update(
                {**js_labels, **sel, "controller-uid": job_uid}
            )
            job["status"] = {
                "active": parallelism,
                "ready": parallelism,
                "startTime": ts,
                "uncountedTerminatedPods": {},
                "terminating": 0,
            }
            wl.owners.append(job)
            for k in range(parallelism):
                labels = {
                    **js_labels,
                    "batch.kubernetes.io/controller-uid": job_uid,
                    "controller-uid": job_uid,
                    "batch.kubernetes.io/job-name": job_name,
                    "job-name": job_name,
                    "batch.kubernetes.io/job-completion-index": str(k),
                }
                ann = {**js_labels, "batch.kubernetes.io/job-completion-index": str(k)}
                suffix = f"{self.pod_seq:05x}"[-5:]
                wl.pods.append(
                    self._pod(
                        self.cap["job_pod"],
                        ns,
                        f"{job_name}-{k}-{suffix}",
                        job,
                        pg,
                        "worker",
                        labels,
                        ann,
                        ts,
                    )
                )
        return wl

    def deployment(self, ns: str, replicas: int) -> Workload:
        self.wl_seq += 1
        name = f"web-{self.wl_seq}"
        ts = _ts(self.pod_seq)
        dep = _replace_strings(self.cap["deployment"], "web", name)
        self._meta(dep, ns, name, ts)
        dep["spec"]["replicas"] = replicas
        rs_name = self.cap["replicaset"]["metadata"]["name"].replace("web", name)
        rs = _replace_strings(self.cap["replicaset"], "web", name)
        self._meta(rs, ns, rs_name, ts)
        rs["metadata"]["ownerReferences"] = [_ref(dep)]
        rs["spec"]["replicas"] = replicas
        hash_ = rs["metadata"]["labels"]["pod-template-hash"]
        wl = Workload("deployment", ns, [dep, rs])
        pg = f"pg-{name}-{dep['metadata']['uid']}"
        for _ in range(replicas):
            suffix = f"{self.pod_seq:05x}"[-5:]
            wl.pods.append(
                self._pod(
                    self.cap["deployment_pod"],
                    ns,
                    f"{rs_name}-{suffix}",
                    rs,
                    pg,
                    None,
                    {"app": name, "pod-template-hash": hash_},
                    {},
                    ts,
                )
            )
        return wl


def workloads(total: int, captured: dict[str, Any]) -> Iterator[Workload]:
    """Shapes in proportion: 60% of the pods in 5-pod JobSets, 20% in 1,000-pod JobSets, 20% in
    10-pod Deployments (in that rotation, until ``total`` pods)."""
    f = Factory(captured)
    made = {"js5": 0, "js1000": 0, "dep": 0}
    share = {"js5": 0.6, "js1000": 0.2, "dep": 0.2}
    n = 0
    while n < total:
        left = total - n
        # the shape furthest below its share, sized to what is left
        shape = min(made, key=lambda s: made[s] / max(share[s] * total, 1))
        ns = f"team-{f.wl_seq % NAMESPACES:02d}"
        if shape == "js1000" and left >= 1000:
            wl = f.jobset(ns, 125, 8)
        elif shape == "dep" and left >= 10:
            wl = f.deployment(ns, 10)
        else:
            shape = "js5"
            wl = f.jobset(ns, 1, min(5, left))
        made[shape] += len(wl.pods)
        n += len(wl.pods)
        yield wl


# ---------------------------------------------------------------------- driving the real structures


class FeedClient:
    """Stands in for ``KubeClient`` in ``Informer._watch``: serves the given watch lines, decoded with
    orjson exactly as the transport decodes a watch stream."""

    def __init__(self) -> None:
        self.lines: Iterable[bytes] = ()

    async def watch(
        self, path: str, params: Any, *, timeout: float, on_open: Callable[[], None] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        if on_open is not None:
            on_open()
        for line in self.lines:
            yield orjson.loads(line)

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"the memory benchmark makes no requests ({name})")


def watch_lines(objs: Iterable[Obj], etype: str = "ADDED") -> Iterator[bytes]:
    for obj in objs:
        yield orjson.dumps({"type": etype, "object": obj})


def traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


MEMO_PLACES = (f"PlanCache: each pod's kept decision, the views it shares and the last plan carried out "
               f"(dropped after {DEFAULT_TUNING.kept_idle_seconds:.0f} s idle)")
WITH_GROUPS = "  + PodGroup and workload records, PodGroup cache"
GANG_STATES = "gang states (one per PodGroup)"


@dataclass
class Meter:
    """Bytes retained per named structure (traced deltas), in order."""

    parts: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, nbytes: int) -> None:
        self.parts[name] = self.parts.get(name, 0) + nbytes


async def run(args: argparse.Namespace) -> dict[str, Any]:
    captured = json.loads(CAPTURED.read_text())
    t_start = time.monotonic()
    print(f"generating {args.pods:,} pods ...", flush=True)
    # bytes on the wire, kept as watch lines (each workload's dicts dropped at once) so generation is not measured
    pod_lines: list[bytes] = []
    owner_lines: dict[str, list[bytes]] = {k: [] for k in ("JobSet", "Job", "Deployment", "ReplicaSet")}
    shapes = {"jobset": 0, "deployment": 0}
    for w in workloads(args.pods, captured):
        pod_lines.extend(watch_lines(w.pods))
        for owner in w.owners:
            owner_lines[owner["kind"]].extend(watch_lines([owner]))
        shapes[w.shape] += len(w.pods)
    n_pods = len(pod_lines)
    json_bytes = sum(len(line) for line in pod_lines)
    gc.collect()
    print(
        f"  {n_pods:,} pods ({shapes}), {json_bytes / n_pods:,.0f} B of JSON per pod event, "
        f"{time.monotonic() - t_start:.0f} s",
        flush=True,
    )

    meter = Meter()
    tracemalloc.start(1)
    rss0 = rss_bytes()

    # baseline: the parsed JSON of the same pods
    t0 = traced()
    parsed = [orjson.loads(line)["object"] for line in pod_lines]
    baseline = traced() - t0
    del parsed
    print(f"baseline (parsed JSON): {baseline / n_pods:,.0f} B per pod", flush=True)

    client = FeedClient()
    grouper = build_grouper()
    controller = build_controller(
        client,
        ControllerSettings(),
        grouper=grouper,
        metrics=Metrics(),  # type: ignore[arg-type]
        supervisor=Supervisor(),
    )
    cache = controller.cache
    t_base = traced()
    rss_base = rss_bytes()
    snap_base = tracemalloc.take_snapshot() if args.top else None

    def informer_of(kind: str) -> Informer:
        res = RESOURCES[kind]
        inf = cache._new_informer(res.gvk, res)
        cache.kinds[res.gvk] = _KindState(informer=inf)
        inf.client = client  # type: ignore[assignment]
        return inf

    async def feed(inf: Informer, lines: Iterable[bytes]) -> None:
        client.lines = lines
        await inf._watch()
        inf.synced.set()

    # owners: their informers (slim_owner), their handlers (UID → workloads)
    t0 = traced()
    for kind, lines in owner_lines.items():
        inf = informer_of(kind)
        await feed(inf, lines)
        controller.handlers.attach(RESOURCES[kind].gvk, inf)
    meter.add("owner objects (Job, JobSet, ReplicaSet, Deployment caches)", traced() - t0)
    del owner_lines

    # the pod informer: transform (PodShape.slim) + store + namespace view
    pods_inf = informer_of("Pod")
    t0 = traced()
    await feed(pods_inf, pod_lines)
    meter.add("pod informer store (slim pods)", traced() - t0)
    del pod_lines
    assert len(pods_inf) == n_pods, (len(pods_inf), n_pods)

    # the pod informer's index (as Controller._attach registers it)
    t0 = traced()
    pods_inf.add_index(POD_PODGROUP_INDEX, pod_group_names)
    meter.add("pod informer indexes", traced() - t0)

    # the handlers: every pod routed (owner walk) into the WorkloadIndex; the queue drained
    t0 = traced()
    controller.handlers.attach(POD, pods_inf)
    while len(controller.queue):
        key = await controller.queue.get()
        controller.queue.done(key)
    meter.add("WorkloadIndex: pod ↔ workload", traced() - t0)
    index, store = controller.index, controller.store
    wl_keys = sorted(index.workloads())

    # each workload's owners (top owner and the objects below it), from the caches, found once
    owners_of: dict[tuple[str, str], list[Obj]] = {}
    for kind in ("JobSet", "Job", "Deployment", "ReplicaSet"):
        inf = cache.informer(RESOURCES[kind].gvk)
        for obj in inf.list() if inf is not None else ():
            refs = o.owner_references(obj)
            top = str(refs[0].get("name")) if refs else o.name(obj)
            owners_of.setdefault((o.namespace(obj), top), []).append(obj)
    # per workload, what the reconciler keeps of its decisions
    t0 = traced()
    deps_bytes = pg_bytes = 0
    pg_lines: list[bytes] = []  # the PodGroups as created, for their informer below
    mismatched = 0
    t_decide = time.monotonic()
    # With the collector running on its own, a collection inside one of the windows below would subtract
    # earlier workloads' cyclic garbage from it: collect the young generations between workloads instead,
    # with the caches frozen (out of the collector's generations) so that stays cheap.
    gc.freeze()
    gc.disable()

    # what it keeps is measured at the end, by letting it expire; its clock stands still meanwhile (deciding
    # under tracemalloc takes longer than the idle time)
    memo = PlanCache(clock=lambda: 0.0)

    def reconcile_one(wl: WorkloadKey) -> tuple[int, int, int, int]:
        """What the reconciler keeps of one workload; a function so its locals (the Decisions) die at return."""
        pods = sorted((pods_inf.get(*k) for k in index.pods_of(wl)), key=o.name)  # type: ignore[arg-type]
        objs = owners_of.get((wl.namespace, wl.name), [])
        lookups = InMemoryLookups([*objs, *pods])  # type: ignore[list-item]
        decided = [(p, grouper.decide(p, lookups)) for p in pods if p is not None]
        bad = 0
        a = tracemalloc.get_traced_memory()[0]
        deps: set[str] = set()
        for pod, d in decided:
            deps.update(decision_dependencies(pod, d))
        index.set_dependencies(wl, deps)
        del deps
        b = tracemalloc.get_traced_memory()[0]
        for pod, d in decided:
            store.record_decision(d, str(wl))
            store.record_pod_patched(d.pod_namespace, d.pod_name, "unchanged")
            if d.pod_group is None or o.annotations(pod).get(POD_GROUP_ANNOTATION) != d.pod_group.name:
                bad += 1
        c = tracemalloc.get_traced_memory()[0]
        grouped = [d for _, d in decided if d.outcome == "grouped" and d.pod_group is not None]
        creation = {
            f"{o.namespace(p)}/{o.name(p)}": str(o.meta(p).get("creationTimestamp")) for p, _ in decided
        }
        merged = merge_decisions(grouped, creation)
        plan = assemble(wl.namespace, [p for p, _ in decided], {}, decided)
        memo.put(wl, plan.kept)
        memo.settle(wl, plan, frozenset())  # and the plan carried out, the next pass's start
        del plan
        desired = [m.metadata.to_object() for m in merged]
        pg_lines.extend(orjson.dumps(x) for x in desired)  # for the PodGroup informer (not the store's)
        e = tracemalloc.get_traced_memory()[0]
        for m, obj in zip(merged, desired, strict=True):
            md = m.metadata
            store.record_pod_group(
                md.namespace,
                md.name,
                workload=str(wl),
                desired=obj,
                operation="unchanged",
                pods=list(m.pods),
                notes=m.notes,
            )
        index.set_pod_groups(wl, [(m.metadata.namespace, m.metadata.name) for m in merged])
        store.record_workload(
            str(wl),
            pods=len(decided),
            terminalPods=0,
            podGroups=sorted(m.metadata.name for m in merged),
            plugin=decided[0][1].plugin,
            result="ok",
            error=None,
        )
        f = tracemalloc.get_traced_memory()[0]
        return b - a, c - b, f - e, bad

    for i, wl in enumerate(wl_keys):
        if i % 64 == 63:
            gc.collect(1)
        db, _, pb, bad = reconcile_one(wl)
        deps_bytes += db
        pg_bytes += pb
        mismatched += bad
    decide_s = time.monotonic() - t_decide
    gc.enable()
    gc.unfreeze()
    total_pass = traced() - t0
    meter.add("WorkloadIndex: dependencies and PodGroups", deps_bytes)
    # the memo's two parts, filled in below from what dropping each frees (what it alone keeps, counting
    # what the decisions allocated and it holds on to): its places per pod, its PodGroup views per group
    meter.add(MEMO_PLACES, 0)
    meter.add("DecisionStore: pod records", 0)  # filled in below, once the pass's own leftovers are freed
    meter.add("DecisionStore: PodGroup and workload records", pg_bytes)
    print(
        f"decided {n_pods:,} pods in {decide_s:.0f} s (traced); {mismatched} decisions differ from the "
        f"pods' annotations",
        flush=True,
    )

    # the PodGroups as the API server returns them, into their informer (slim_podgroup + owner-uid index)
    ids = Ids()
    ids.n = 10**7

    def as_served(line: bytes) -> bytes:
        pg = orjson.loads(line)
        pg["metadata"].update(
            uid=ids.uid(), resourceVersion=ids.version(), creationTimestamp=_ts(0), generation=1
        )
        pg["status"] = {"schedulingConditions": [], "resourcesStatus": {}}
        return orjson.dumps({"type": "ADDED", "object": pg})

    t0 = traced()
    pg_inf = informer_of("PodGroup")
    await feed(pg_inf, (as_served(line) for line in pg_lines))
    # (its indexes are the cache's: by name prefix, by owner uid, pod-owned)
    controller.handlers.attach(PODGROUP, pg_inf)
    meter.add("PodGroup cache (one per workload)", traced() - t0)
    # the gang state of every PodGroup (issue 39): computed once from the caches; the members a busy gang
    # keeps (dropped after memo_idle seconds without a recompute) are measured apart, as the plan memo is
    gangs = getattr(controller, "gangs", None)
    gang_memo_bytes = 0
    if gangs is not None:
        t0 = traced()
        pg_inf.add_handler(gangs.on_pod_group)  # replays every PodGroup: each is marked
        while gangs.flush():
            pass
        gang_with_memo = traced() - t0
        gangs.expire_memos(-1.0)
        gc.collect()
        meter.add(GANG_STATES, traced() - t0)
        gang_memo_bytes = gang_with_memo - (traced() - t0)
        print(f"gang states of {len(gangs.states):,} PodGroups; a busy gang's members: "
              f"{gang_memo_bytes / n_pods:,.0f} B per pod while it is recomputed", flush=True)
    t0 = traced()
    pg_lines.clear()
    freed = t0 - traced()
    total = traced() - t_base
    rss_total = rss_bytes() - rss_base
    if snap_base is not None:  # where what is retained was allocated (for whoever optimises next)
        print(f"\ntop {args.top} allocation sites of what the structures retain (bytes per pod):")
        for st in tracemalloc.take_snapshot().compare_to(snap_base, "lineno")[: args.top]:
            frame = st.traceback[0]
            where = f"{Path(frame.filename).relative_to(REPO) if frame.filename.startswith(str(REPO)) else frame.filename}"
            print(f"  {st.size_diff / n_pods:8,.0f}  {where}:{frame.lineno}")

    # What the plan cache alone keeps: let it expire and see what is freed (all figures above were taken
    # with it in place).
    memos = [m for m in (memo.get(wl) for wl in wl_keys) if m is not None]
    gc.collect()
    memo_groups = 0
    t0 = traced()
    expired = memo.expire(memo.idle_seconds)  # what the controller does once they are idle
    assert expired == len(memos) and len(memo) == 0, (expired, len(memos), len(memo))
    del memos
    gc.collect()
    memo_members = t0 - traced()
    meter.add(MEMO_PLACES, memo_members)
    # the records, and what they keep of what deciding allocated (messages, provenance texts): all the
    # pass retained but the dependencies, the memo and the PodGroup / workload records
    meter.add("DecisionStore: pod records", total_pass - deps_bytes - pg_bytes - memo_groups - memo_members - freed)
    tracemalloc.stop()

    # the goal's scope: what the controller holds per pod (not per PodGroup / workload, not the owners)
    per_group = ("DecisionStore: PodGroup and workload records", "PodGroup cache (one per workload)", GANG_STATES)
    # the goal's figure: what stays per cached pod; the memo is kept only while its workload is reconciled
    target_parts = [
        k for k in meter.parts if not k.startswith("owner") and k not in per_group and k != MEMO_PLACES
    ]
    target = sum(meter.parts[k] for k in target_parts)
    with_memo = target + meter.parts[MEMO_PLACES]
    with_groups = with_memo + sum(meter.parts.get(k, 0) for k in per_group)
    per_pod = {k: round(v / n_pods) for k, v in meter.parts.items()}
    result = {
        "benchmark": "bench_memory",
        "machine": machine_info(),
        "pods": n_pods,
        "pods_by_shape": shapes,
        "workloads": len(wl_keys),
        "pod_groups": len(pg_inf),
        "json_bytes_per_pod_event": round(json_bytes / n_pods),
        "baseline_parsed_json_per_pod": round(baseline / n_pods),
        "bytes_per_pod": per_pod,
        "target_bytes_per_pod": round(target / n_pods),
        "target_parts": target_parts,
        "target_with_memo_bytes_per_pod": round(with_memo / n_pods),
        "memo_idle_seconds": DEFAULT_TUNING.kept_idle_seconds,
        "with_pod_group_records_per_pod": round(with_groups / n_pods),
        "gang_memo_bytes_per_pod_while_busy": round(gang_memo_bytes / n_pods),
        "total_traced_per_pod": round(total / n_pods),
        "rss_delta_per_pod": round(rss_total / n_pods),
        "rss_mib": round((rss_bytes() + 0) / 2**20),
        "rss_before_mib": round(rss0 / 2**20),
        "ratio_parsed_json_to_target": round(baseline / max(target, 1), 1),
        "store_sizes": store.sizes(),
        "index_sizes": index.sizes(),
        "decide_seconds": round(decide_s, 1),
        "decisions_differing_from_annotations": mismatched,
        "seconds": round(time.monotonic() - t_start, 1),
    }
    return result


def machine_info() -> dict[str, Any]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True, check=False
            ).stdout.strip()
        )
    except OSError:
        commit, dirty = "", False
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit + ("+dirty" if dirty else ""),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "maxrss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def print_table(r: dict[str, Any]) -> None:
    print()
    print(
        f"{r['pods']:,} pods ({r['pods_by_shape']}), {r['workloads']:,} workloads, {r['pod_groups']:,} PodGroups"
    )
    print(f"{'structure':62} {'B/pod':>8}")
    for k, v in r["bytes_per_pod"].items():
        mark = "*" if k in r["target_parts"] else " "
        print(f"{mark} {k:60} {v:8,}")
    print(
        f"* {'per-pod structures: pod cache + indexes + pod records (goal ≤ 2,048)':60} {r['target_bytes_per_pod']:8,}"
    )
    print(
        f"  {'  + the memo, while a workload is reconciled (then its idle time)':60} {r['target_with_memo_bytes_per_pod']:8,}"
    )
    print(
        f"  {WITH_GROUPS:60} {r['with_pod_group_records_per_pod']:8,}"
    )
    print(f"  {'total traced':60} {r['total_traced_per_pod']:8,}")
    print(f"  {'RSS delta':60} {r['rss_delta_per_pod']:8,}")
    print(
        f"  {'baseline: parsed JSON of the pod':60} {r['baseline_parsed_json_per_pod']:8,}"
        f"   ({r['ratio_parsed_json_to_target']}x the target figure)"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=100_000)
    ap.add_argument("--quick", action="store_true", help="10,000 pods")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument(
        "--top", type=int, default=0, metavar="N", help="print the N allocation sites that retain most"
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.pods = 10_000
    r = asyncio.run(run(args))
    print_table(r)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(r, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
