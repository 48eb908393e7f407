"""A Karta workload's decisions run in a worker thread over a snapshot of what they read
(``grouper/kube/lookup_snapshot.py``), never over the informer cache the event loop keeps changing:
a change made while the thread decides is not seen by the pass (every pod of it sees the cluster as the
pass found it) and queues the workload again; and what the decisions are recorded to have read — the
workload's dependencies, retry keys, kinds not cached — is exactly what the same decisions read from the
live cache."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from grouper.controller.controller import Controller
from grouper.controller.workloads import WorkloadKey
from grouper.core.config import GroupingConfig
from grouper.core.decision import Decision
from grouper.core.grouping import Grouper
from grouper.core.lookups import Lookups
from grouper.core.workload_context import WorkloadContext
from grouper.karta import DefinitionRegistry
from grouper.kube.lookup_snapshot import LookupSnapshot
from grouper.model import objects as o
from grouper.model.objects import GVK, Obj
from grouper.runtime.composition import build_grouper
from tests.controller.plan_world import BATCHLING, NS, World, key_of, start_grouper

REPO = Path(__file__).resolve().parents[2]
KARTA_OBJ: Obj = yaml.safe_load((REPO / "examples" / "batchling-karta.yaml").read_text())
WL = WorkloadKey(NS, "example.com", "Batchling", "b")
ROLE = "example.com/role"
PRIORITY = "priorityClassName"


class Interleaved:
    """The grouper, with ``between`` run on the event loop after the first decision, while the worker thread
    waits: a watch event arriving in the middle of a Karta pass (no sleeps: the thread hands over)."""

    def __init__(self, inner: Grouper, loop: asyncio.AbstractEventLoop, between: Callable[[], Awaitable[None]]) -> None:
        self.inner, self.loop, self.between = inner, loop, between
        self.done = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def decide(self, pod: Obj, lookups: Lookups, workload: WorkloadContext | None = None) -> Decision:
        d = self.inner.decide(pod, lookups, workload)
        if not self.done:
            self.done = True
            asyncio.run_coroutine_threadsafe(self.between(), self.loop).result()
        return d


class KartaWorld:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.world = World()
        self.registry = DefinitionRegistry(None)  # the cluster's Kartas only
        self.grouper = build_grouper(GroupingConfig(), self.registry)
        self.world.put({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                        "metadata": {"name": "high"}, "value": 1000})
        self.world.put(KARTA_OBJ)
        self.batchling = self.world.put({
            "apiVersion": "example.com/v1", "kind": "Batchling", "metadata": {"name": "b", "namespace": NS},
            "spec": {"coordinator": {"template": {}}, "workers": {"replicas": 3, "template": {}}}})
        self.ctl: Controller = self.run(self._start())
        # a Karta chunk of one pod: every decision walks the owner chain again (none is shared in a context)
        self.ctl.reconciler.tuning = dataclasses.replace(self.ctl.reconciler.tuning, decide_chunk=1)

    async def _start(self) -> Controller:
        ctl = start_grouper(self.world, self.grouper, definitions=self.registry)
        self.world.grouper = ctl
        assert ctl.karta_sync is not None
        await ctl.karta_sync.wait_idle()
        return ctl

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def pod(self, name: str, role: str, *, owner: Obj | None = None, labels: dict[str, str] | None = None) -> Obj:
        owner = owner or self.batchling

        async def put() -> Obj:
            return self.world.put({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": NS, "labels": {ROLE: role, **(labels or {})},
                             "creationTimestamp": "2026-12-01T10:00:00Z",
                             "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                                  "name": o.name(owner), "uid": o.uid(owner), "controller": True}]},
                "spec": {"schedulerName": "kai-scheduler"}, "status": {"phase": "Pending"}})

        return self.run(put())

    def pods(self) -> list[Obj]:
        inf = self.ctl.cache.informer(o.GVK("", "v1", "Pod"))
        assert inf is not None
        return sorted(inf.list(NS), key=o.name)

    def drain(self) -> None:
        async def drain() -> None:
            while len(self.ctl.queue):
                self.ctl.queue.done(await self.ctl.queue.get())

        self.run(drain())


@pytest.fixture
def kw() -> Iterator[KartaWorld]:
    loop = asyncio.new_event_loop()
    w = KartaWorld(loop)
    try:
        yield w
    finally:
        loop.run_until_complete(w.ctl.reconciler.settle())
        loop.close()


def test_an_owner_deleted_while_the_thread_decides_is_not_seen_by_the_pass_and_queues_the_workload(
    kw: KartaWorld,
) -> None:
    for i, role in enumerate(["coordinator", "worker", "worker", "worker"]):
        kw.pod(f"b-{i}", role)
    assert kw.run(kw.ctl.reconciler.reconcile(WL)).status == "ok"  # the first pass: its reads are recorded
    kw.drain()
    kw.ctl.plans.invalidate(WL)  # the next pass decides every pod again
    rec = kw.ctl.reconciler

    async def delete_owner() -> None:
        kw.world.delete(key_of(kw.batchling))  # its watch event, on the loop, mid-pass

    rec.grouper = Interleaved(kw.grouper, kw.loop, delete_owner)  # type: ignore[assignment]
    decided, seen, _ = kw.run(rec._decide(WL, kw.pods()))
    assert rec.grouper.done and kw.world.get(BATCHLING, NS, "b") is None  # deleted after the first decision
    assert kw.ctl.cache.get(BATCHLING, NS, "b") is None  # and the cache has it gone
    # every pod was decided over the Batchling as the pass found it: one PodGroup, four members
    assert [(o.name(p), d.outcome, d.reason) for p, d in decided] == [(f"b-{i}", "grouped", "Grouped") for i in range(4)]
    assert {d.pod_group.name for _, d in decided if d.pod_group} == {f"pg-{o.uid(kw.batchling)}-batchling"}
    assert o.uid(kw.batchling) in seen.reads
    assert WL in kw.ctl.queue  # the deletion queued the workload: the next pass sees it


def _live(rec: Any, pods: list[Obj]) -> tuple[list[tuple[str, Decision]], Any]:
    """The same decisions on the live cache (the native path's lookups), for comparison."""
    seen = rec.cache.lookups()
    out = []
    for pod in pods:
        out.append((o.name(pod), rec._decide_one(pod, seen, WorkloadContext(), rec.cache.lookups())))
    return out, seen


def test_the_snapshot_records_what_the_live_cache_would(kw: KartaWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads, retry keys, misses and refusals: replayed from the snapshot exactly as the cache records them
    (a PriorityClass found and one missing, asked of the loop from the thread; a pod whose owner is not
    in the cache: its Absent key a retry key; a pod owned by an uncached kind: a miss)."""
    kw.pod("b-0", "coordinator", labels={PRIORITY: "high"})
    kw.pod("b-1", "worker", labels={PRIORITY: "missing"})
    kw.pod("b-2", "worker")
    ghost = {"apiVersion": "example.com/v1", "kind": "Batchling", "metadata": {"name": "ghost", "uid": "u-ghost"}}
    kw.pod("b-3", "worker", owner=ghost)
    other = {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g", "uid": "u-gadget"}}
    kw.pod("b-4", "worker", owner=other)
    rec = kw.ctl.reconciler
    pods = kw.pods()
    asked: list[tuple[Any, ...]] = []
    ask_loop = LookupSnapshot._ask_loop

    def counted(self: LookupSnapshot, query: tuple[Any, ...]) -> Any:
        asked.append(query)
        return ask_loop(self, query)

    monkeypatch.setattr(LookupSnapshot, "_ask_loop", counted)
    decided, seen, _ = kw.run(rec._decide(WL, pods))
    # what the owner walks did not take beforehand was asked of the loop from the thread, once each
    assert sorted(q for q in asked if q[0] == "priority_class_exists") == [
        ("priority_class_exists", n) for n in ("high", "missing", "train")]
    assert len(asked) == len(set(asked))
    # the next pass of the kind takes the PriorityClasses its predecessor asked for beforehand: no wait
    asked.clear()
    again, again_seen, _ = kw.run(rec._decide(WL, pods))
    assert asked == [] and again_seen.reads == seen.reads
    assert [(d.outcome, d.pod_group) for _, d in again] == [(d.outcome, d.pod_group) for _, d in decided]
    live, live_seen = _live(rec, pods)
    assert [(o.name(p), d.outcome, d.reason, d.pod_group) for p, d in decided] == \
        [(n, d.outcome, d.reason, d.pod_group) for n, d in live]
    assert [d.outcome for _, d in decided] == ["grouped", "grouped", "grouped", "error", "error"]
    assert seen.reads == live_seen.reads and seen.misses == live_seen.misses
    assert seen.refused == live_seen.refused and seen.listed_pods == live_seen.listed_pods
    assert any(getattr(r, "retry", False) and r.name == "ghost" for r in seen.reads)  # the retry key
    assert seen.misses == {GVK("example.com", "v1", "Gadget")}  # a kind not cached: a miss


def _workers(d: Decision) -> int | None:
    """The worker sub-group's minimum in the decision's PodGroup (the Batchling's spec.workers.replicas)."""
    assert d.pod_group is not None
    return next(sg.min_member for sg in d.pod_group.sub_groups if sg.name == "worker")


def _scaled(kw: KartaWorld, replicas: int, status: dict[str, Any] | None = None) -> Callable[[], Awaitable[None]]:
    async def change() -> None:  # the Batchling's watch event, on the loop, mid-pass
        obj = {**kw.batchling, "spec": {**kw.batchling["spec"], "workers": {"replicas": replicas, "template": {}}}}
        if status is not None:
            obj["status"] = status
        kw.world.put(obj)

    return change


def test_an_owner_scaled_while_the_first_pass_decides_is_not_seen_by_it_and_queues_the_workload(kw: KartaWorld) -> None:
    """The workload's first pass: no dependency of it is known to the handlers yet, so only the snapshot can
    tell that the cluster moved on while the thread decided."""
    for i, role in enumerate(["coordinator", "worker", "worker", "worker"]):
        kw.pod(f"b-{i}", role)
    kw.drain()
    rec = kw.ctl.reconciler
    rec.grouper = Interleaved(kw.grouper, kw.loop, _scaled(kw, 5))  # type: ignore[assignment]
    decided, _, _ = kw.run(rec._decide(WL, kw.pods()))
    assert rec.grouper.done and kw.ctl.cache.get(BATCHLING, NS, "b")["spec"]["workers"]["replicas"] == 5
    # every pod saw 3 workers, as the pass found the Batchling
    assert {(d.outcome, _workers(d)) for _, d in decided} == {("grouped", 3)}
    assert WL in kw.ctl.queue


def test_a_status_write_while_the_thread_decides_queues_nothing(kw: KartaWorld) -> None:
    """What grouping does not read (the owner's status) changing meanwhile is no news, as for the handlers."""
    for i, role in enumerate(["coordinator", "worker", "worker", "worker"]):
        kw.pod(f"b-{i}", role)
    kw.drain()
    rec = kw.ctl.reconciler
    rec.grouper = Interleaved(kw.grouper, kw.loop, _scaled(kw, 3, {"phase": "Running"}))  # type: ignore[assignment]
    decided, _, _ = kw.run(rec._decide(WL, kw.pods()))
    assert rec.grouper.done and kw.ctl.cache.get(BATCHLING, NS, "b")["status"] == {"phase": "Running"}
    assert {(d.outcome, _workers(d)) for _, d in decided} == {("grouped", 3)}
    assert WL not in kw.ctl.queue
