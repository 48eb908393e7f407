"""Pods mapped to their workload share the owner walk of a pod with the same controlling owner routed in
the same run of the event loop (a listed batch, parked pods routed again), and only then: once the loop
runs anything else the cache may have changed, so the next pod walks again."""

from __future__ import annotations

import asyncio
from typing import Any

from grouper.controller.handlers import EventHandlers
from grouper.controller.queue import WorkQueue
from grouper.controller.workloads import DeletedOwners, WorkloadIndex, WorkloadKey
from grouper.core.lookups import InMemoryLookups
from grouper.model.objects import Obj
from grouper.observability.metrics import Metrics
from grouper.records.decisions import DecisionStore
from grouper.writer.expectations import WriteExpectations

NS = "ns"


def obj(api_version: str, kind: str, name: str, owner: Obj | None = None) -> Obj:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{kind}-{name}"}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                    "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                    "controller": True}]
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


class Lookups(InMemoryLookups):
    def __init__(self, objects: list[Obj]) -> None:
        super().__init__(objects)
        self.misses: set[Any] = set()
        self.refused: set[Any] = set()


class Cache:
    """What ``EventHandlers.workload_of`` asks of the cluster cache."""

    def __init__(self, objects: list[Obj]) -> None:
        self.objects = objects
        self.walks = 0

    def lookups(self) -> Lookups:
        self.walks += 1
        return Lookups(self.objects)

    def namespace_allowed(self, namespace: str) -> bool:
        return True


def handlers(cache: Cache, metrics: Metrics) -> EventHandlers:
    return EventHandlers(cache=cache, index=WorkloadIndex(), queue=WorkQueue(), store=DecisionStore(),  # type: ignore[arg-type]
                         expectations=WriteExpectations(), spawn=lambda c: c.close(), deleted=DeletedOwners(),
                         metrics=metrics)


def jobset_world() -> tuple[list[Obj], Obj, Obj]:
    a = obj("jobset.x-k8s.io/v1alpha2", "JobSet", "a")
    b = obj("jobset.x-k8s.io/v1alpha2", "JobSet", "b")
    job = obj("batch/v1", "Job", "a-worker-0", a)
    return [a, b, job], job, b


def routes(metrics: Metrics, path: str) -> float:
    return metrics.value("podgrouper_pod_routes_total", {"path": path})


async def test_the_pods_of_one_owner_routed_in_one_run_share_its_walk() -> None:
    objects, job, _ = jobset_world()
    cache, metrics = Cache(objects), Metrics()
    h = handlers(cache, metrics)
    pods = [obj("v1", "Pod", f"a-worker-0-{i}", job) for i in range(5)]
    keys = [h.workload_of(p) for p in pods]
    assert keys == [WorkloadKey(NS, "jobset.x-k8s.io", "JobSet", "a")] * 5
    assert cache.walks == 1 and (routes(metrics, "walk"), routes(metrics, "shared")) == (1, 4)


async def test_once_the_loop_ran_something_else_a_pod_walks_again() -> None:
    objects, job, b = jobset_world()
    cache, metrics = Cache(objects), Metrics()
    h = handlers(cache, metrics)
    assert h.workload_of(obj("v1", "Pod", "p0", job)) == WorkloadKey(NS, "jobset.x-k8s.io", "JobSet", "a")
    await asyncio.sleep(0)  # the loop ran: a watch event may have changed any owner meanwhile
    adopted = obj("batch/v1", "Job", "a-worker-0", b)  # the Job now belongs to JobSet b (same uid)
    cache.objects = [o for o in objects if o is not job] + [adopted]
    assert h.workload_of(obj("v1", "Pod", "p1", job)) == WorkloadKey(NS, "jobset.x-k8s.io", "JobSet", "b")
    assert cache.walks == 2


def test_without_a_running_loop_every_pod_walks() -> None:
    objects, job, _ = jobset_world()
    cache, metrics = Cache(objects), Metrics()
    h = handlers(cache, metrics)
    for i in range(3):
        assert h.workload_of(obj("v1", "Pod", f"p{i}", job)).name == "a"  # type: ignore[union-attr]
    assert cache.walks == 3 and routes(metrics, "shared") == 0


async def test_bare_pods_and_pods_owned_by_a_pod_are_not_shared() -> None:
    cache, metrics = Cache([]), Metrics()
    h = handlers(cache, metrics)
    parent = obj("v1", "Pod", "parent")
    cache.objects = [parent]
    assert h.workload_of(obj("v1", "Pod", "bare-1")) == WorkloadKey.of_pod(NS, "bare-1")
    assert h.workload_of(obj("v1", "Pod", "bare-2")) == WorkloadKey.of_pod(NS, "bare-2")
    h.workload_of(obj("v1", "Pod", "child-1", parent))
    h.workload_of(obj("v1", "Pod", "child-2", parent))
    assert cache.walks == 4 and routes(metrics, "shared") == 0
