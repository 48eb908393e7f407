"""The gang tracker (grouper/visibility/gangs.py) over cached objects, with a fake clock: transitions, one
Event per transition, a restart rebuilt without Events, bounded batches, metrics; and what the cache keeps
of pods and PodGroups for it (grouper/kube/cache.py). Objects go through the cache's real transforms; the
cache itself is a stand-in holding them (the live tests run the real informers)."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kai_status import (
    NOT_ENOUGH_RESOURCES,
    FitError,
    clear_scheduling_conditions,
    mark_unschedulable,
    pod_unschedulable,
    rfc3339,
    set_last_start,
)

from grouper.core.gang_state import State
from grouper.kube.cache import (
    GPUS_FIELD,
    POD,
    POD_PODGROUP_INDEX,
    PODGROUP,
    PodShape,
    pod_gpus,
    pod_group_names,
    slim_podgroup,
)
from grouper.kube.informer import ADDED, DELETED, MODIFIED
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import POD_GROUP_ANNOTATION
from grouper.observability.metrics import Metrics
from grouper.visibility.gangs import SCHEDULING_GROUP_INDEX, GangTracker, scheduling_group_names
from grouper.writer.events import EventRecorder

T0 = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)
UPSTREAM_PG = GVK("scheduling.k8s.io", "v1beta1", "PodGroup")
MESSAGE = "2 node(s) didn't have enough resources: GPUs"
SHAPE = PodShape()


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class Store:
    """What the tracker reads of an informer: ``get`` and the pods' ``pod-group`` index."""

    def __init__(self) -> None:
        self.objs: dict[tuple[str, str], Obj] = {}

    def get(self, namespace: str | None, name: str) -> Obj | None:
        return self.objs.get((namespace or "", name))

    def by_index(self, index: str, value: str) -> list[Obj]:
        names = {POD_PODGROUP_INDEX: pod_group_names, SCHEDULING_GROUP_INDEX: scheduling_group_names}[index]
        return [p for p in self.objs.values() if value in names(p)]


class Cache:
    def __init__(self) -> None:
        self.stores = {POD: Store(), PODGROUP: Store(), UPSTREAM_PG: Store()}
        self.denied: set[str] = set()  # namespaces --namespace-label-selector leaves out

    def namespace_allowed(self, namespace: str) -> bool:
        return namespace not in self.denied

    def informer(self, gvk: GVK) -> Store:
        return self.stores[gvk]


class Client:
    """Records the Events the real EventRecorder creates."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.events.append(body)
        return body


class World:
    def __init__(self, *, leader: bool = True, metrics: Metrics | None = None) -> None:
        self.cache, self.clock, self.client = Cache(), Clock(), Client()
        self.leader = leader
        self.metrics = metrics or Metrics()
        self.recorder = EventRecorder(self.client, can_write=lambda: self.leader)  # type: ignore[arg-type]
        self.tracker = self.new_tracker()

    def new_tracker(self) -> GangTracker:
        t = GangTracker(self.cache, metrics=self.metrics, recorder=self.recorder, clock=self.clock,  # type: ignore[arg-type]
                        batch=2, delay=0)
        self.metrics.add_gang_source(t, workload_info=True)
        return t

    def pg(self, pg: Obj, etype: str = MODIFIED) -> None:
        slim = slim_podgroup(copy.deepcopy(pg))
        key = (pg["metadata"]["namespace"], pg["metadata"]["name"])
        store = self.cache.stores[self.tracker.pod_group_gvk]
        old = store.objs.get(key)
        if etype == DELETED:
            store.objs.pop(key, None)
        else:
            store.objs[key] = slim
        self.tracker.on_pod_group(etype, slim, old)

    def pod(self, pod: Obj, etype: str = MODIFIED) -> None:
        slim = SHAPE.slim(copy.deepcopy(pod))
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        old = self.cache.stores[POD].objs.get(key)
        if etype == DELETED:
            self.cache.stores[POD].objs.pop(key, None)
        else:
            self.cache.stores[POD].objs[key] = slim
        self.tracker.on_pod(etype, slim, old)

    def settle(self) -> None:
        while self.tracker.flush():
            pass
        asyncio.run(self.tracker.send_events())

    def reasons(self) -> list[str]:
        return [e["reason"] for e in self.client.events]


def kai_pg(min_member: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {"name": "pg-train", "namespace": "ml", "creationTimestamp": rfc3339(T0), "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u-train", "controller": True}]},
        "spec": {"queue": "team-a", "minMember": min_member},
    }


def member_pod(name: str, *, node: str | None = None, gpus: int = 1, created: datetime = T0) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "kai-scheduler", "containers": [
        {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "creationTimestamp": rfc3339(created),
                         "annotations": {POD_GROUP_ANNOTATION: "pg-train"}},
            "spec": spec, "status": {"phase": "Pending"}}


def waiting_world(**kw: Any) -> tuple[World, dict[str, Any]]:
    w = World(**kw)
    pg = kai_pg()
    w.pg(pg, ADDED)
    for i in range(2):
        w.pod(member_pod(f"p{i}", created=T0 + timedelta(seconds=i)), ADDED)
    w.settle()
    w.clock.now = T0 + timedelta(seconds=30)
    mark_unschedulable(pg, [FitError(NOT_ENOUGH_RESOURCES, [MESSAGE])], now=w.clock.now)
    w.pg(pg)
    for i in range(2):
        w.pod(pod_unschedulable(member_pod(f"p{i}", created=T0 + timedelta(seconds=i)), MESSAGE, now=w.clock.now))
    w.settle()
    return w, pg


def test_waiting_then_admitted_then_degraded_then_recovered_one_event_each() -> None:
    w, pg = waiting_world()
    st = w.tracker.get("ml", "pg-train")
    assert st is not None and st.state == State.WAITING
    assert [r.message for r in st.reasons if r.source == "PodGroup"] == [MESSAGE]
    assert [r.pods for r in st.reasons if r.source == "Pod"] == [("p0", "p1")]
    assert st.requested_gpus == 2
    assert w.reasons() == []  # Grouping -> Waiting sends nothing

    # bound: admitted, 60 s after the first pod's creation
    w.clock.now = T0 + timedelta(seconds=60)
    set_last_start(pg, w.clock.now)
    clear_scheduling_conditions(pg)
    w.pg(pg)
    for i in range(2):
        w.pod(member_pod(f"p{i}", node="n1", created=T0 + timedelta(seconds=i)))
    w.settle()
    st = w.tracker.get("ml", "pg-train")
    assert st is not None and st.state == State.ADMITTED and st.time_to_admission == 60
    assert w.reasons() == ["GangAdmitted"]
    ev = w.client.events[0]
    assert ev["type"] == "Normal" and ev["involvedObject"]["kind"] == "Job" and ev["involvedObject"]["name"] == "train"
    assert "60s after its first pod was created" in ev["message"]
    assert w.metrics.value("podgrouper_gang_time_to_admission_seconds_sum", {"queue": "team-a"}) == 60
    assert w.metrics.value("podgrouper_gang_transitions_total", {"from": "Waiting", "to": "Admitted"}) == 1

    # the same state again (an unrelated pod update): nothing new
    w.pg(pg)
    w.settle()
    assert w.reasons() == ["GangAdmitted"]

    # a bound pod deleted: degraded, which minimum is unmet
    w.clock.now = T0 + timedelta(seconds=90)
    w.pod(member_pod("p1", node="n1"), DELETED)
    w.settle()
    assert w.tracker.get("ml", "pg-train").state == State.DEGRADED  # type: ignore[union-attr]
    assert w.reasons() == ["GangAdmitted", "GangDegraded"]
    assert w.client.events[1]["type"] == "Warning"
    assert "1 of the 2 pods it needs are scheduled" in w.client.events[1]["message"]

    # a replacement bound: recovered
    w.pod(member_pod("p2", node="n2", created=T0 + timedelta(seconds=95)), ADDED)
    w.settle()
    assert w.reasons() == ["GangAdmitted", "GangDegraded", "GangRecovered"]
    assert w.metrics.value("podgrouper_gang_time_to_admission_seconds_count", {"queue": "team-a"}) == 1


def test_a_new_gang_admitted_before_its_first_recompute_still_counts_its_admission() -> None:
    """A fast scheduler binds a new gang within the tracker's coalescing second: its first state is
    Admitted, yet it is a new PodGroup (created after the tracker started), not one rebuilt after a restart,
    so its admission is a transition with its Event and its time to admission."""
    w = World()
    pg = kai_pg()
    pg["metadata"]["creationTimestamp"] = rfc3339(T0 + timedelta(seconds=5))
    set_last_start(pg, T0 + timedelta(seconds=7))
    w.pg(pg, ADDED)
    for i in range(2):
        w.pod(member_pod(f"p{i}", node="n1", created=T0 + timedelta(seconds=4)), ADDED)
    w.clock.now = T0 + timedelta(seconds=8)
    w.settle()
    st = w.tracker.get("ml", "pg-train")
    assert st is not None and st.state == State.ADMITTED
    assert w.reasons() == ["GangAdmitted"]
    assert w.metrics.value("podgrouper_gang_transitions_total", {"from": "Grouping", "to": "Admitted"}) == 1
    assert w.metrics.value("podgrouper_gang_time_to_admission_seconds_count", {"queue": "team-a"}) == 1


def test_a_one_pod_gang_sends_no_event_but_counts_in_the_metrics() -> None:
    """A per-pod PodGroup (required 1): its admission is its pod's scheduling, told by the pod's own
    Events; a Deployment's 100 replicas must not send 100 GangAdmitted per rollout."""
    w = World()
    pg = kai_pg(min_member=1)
    pg["metadata"]["creationTimestamp"] = rfc3339(T0 + timedelta(seconds=5))
    w.pg(pg, ADDED)
    w.pod(member_pod("p0", created=T0 + timedelta(seconds=4)), ADDED)
    w.clock.now = T0 + timedelta(seconds=6)
    w.settle()
    w.pod(member_pod("p0", node="n1", created=T0 + timedelta(seconds=4)))
    w.clock.now = T0 + timedelta(seconds=9)
    w.settle()
    assert w.tracker.get("ml", "pg-train").state == State.ADMITTED  # type: ignore[union-attr]
    assert w.reasons() == []
    assert w.metrics.value("podgrouper_gang_time_to_admission_seconds_count", {"queue": "team-a"}) == 1


def test_restart_rebuilds_without_events_or_transitions() -> None:
    w, pg = waiting_world()
    set_last_start(pg, T0 + timedelta(seconds=60))
    clear_scheduling_conditions(pg)
    w.pg(pg)
    w.pod(member_pod("p0", node="n1"))
    w.pod(member_pod("p1", node="n1"))
    w.settle()
    assert w.reasons() == ["GangAdmitted"]

    # a new process: a fresh tracker and metrics over the same cache (the informers replay every object)
    w2 = World(metrics=Metrics())
    w2.cache = w.cache
    w2.tracker = w2.new_tracker()
    for key in w.cache.stores[PODGROUP].objs:
        w2.tracker.mark(key)
    w2.clock.now = T0 + timedelta(hours=1)
    w2.settle()
    st = w2.tracker.get("ml", "pg-train")
    assert st is not None and st.state == State.ADMITTED
    assert st.since == T0 + timedelta(seconds=60)  # the scheduler's record, not the restart
    assert w2.client.events == []
    assert w2.metrics.value("podgrouper_gang_transitions_total", {"from": "Waiting", "to": "Admitted"}) == 0

    # rebuilt as admitted from the scheduler's record: a pod lost afterwards is a transition, with its Event
    w2.pod(member_pod("p1", node="n1"), DELETED)
    w2.settle()
    assert w2.reasons() == ["GangDegraded"]


def test_standby_tracks_but_writes_no_event() -> None:
    w, _ = waiting_world(leader=False)
    w.pod(member_pod("p0", node="n1"))
    w.pod(member_pod("p1", node="n1"))
    w.settle()
    assert w.tracker.get("ml", "pg-train").state == State.ADMITTED  # type: ignore[union-attr]
    assert w.client.events == []


def test_bounded_batches_and_marks_coalesce() -> None:
    w = World()
    for i in range(5):
        pg = kai_pg()
        pg["metadata"]["name"] = f"pg-{i}"
        w.pg(pg, ADDED)
        w.pg(pg)  # a second event of the same PodGroup before it is computed: one computation
    assert w.tracker.pending() == 5
    assert w.tracker.flush() == 2 and w.tracker.pending() == 3  # batch=2
    w.settle()
    assert w.tracker.computed == 5


def test_run_task_computes_dirty_podgroups() -> None:
    async def main() -> None:
        w = World()
        task = asyncio.get_running_loop().create_task(w.tracker.run())
        w.pg(kai_pg(), ADDED)
        for _ in range(10):
            await asyncio.sleep(0)
        task.cancel()
        assert w.tracker.get("ml", "pg-train") is not None

    asyncio.run(main())


def test_pod_updates_that_change_no_gang_input_mark_nothing() -> None:
    w, _ = waiting_world()
    before = w.tracker.computed
    p = pod_unschedulable(member_pod("p0"), MESSAGE, now=T0 + timedelta(seconds=30))
    p["status"]["phase"] = "Pending"
    p["metadata"]["labels"] = {"unrelated": "x"}  # grouping reads labels; the gang does not
    w.pod(p)
    assert w.tracker.pending() == 0 and w.tracker.computed == before


def test_podgroup_deleted_drops_state_and_metrics() -> None:
    w, pg = waiting_world()
    assert w.metrics.value("podgrouper_gangs", {"state": "Waiting", "queue": "team-a"}) == 1
    assert w.metrics.value("podgrouper_gang_pods", {"state": "Waiting", "queue": "team-a"}) == 2
    assert w.metrics.value("podgrouper_gang_requested_gpus", {"state": "Waiting", "queue": "team-a"}) == 2
    w.clock.now = T0 + timedelta(minutes=10)
    assert w.metrics.value("podgrouper_gang_oldest_seconds", {"state": "Waiting", "queue": "team-a"}) == 600
    assert w.metrics.value("podgrouper_workload_info", {"namespace": "ml", "kind": "Job", "name": "train",
                                                        "queue": "team-a", "state": "Waiting"}) == 1
    w.pg(pg, DELETED)
    w.settle()
    assert w.tracker.get("ml", "pg-train") is None and w.tracker.by_owner == {}
    assert w.metrics.value("podgrouper_gangs", {"state": "Waiting", "queue": "team-a"}) == 0


def test_bad_podgroup_field_is_error_naming_the_field() -> None:
    w = World()
    pg = kai_pg()
    pg["spec"]["minMember"] = "two"
    w.pg(pg, ADDED)
    w.settle()
    st = w.tracker.get("ml", "pg-train")
    assert st is not None and st.state == State.ERROR and "spec.minMember" in st.error


def test_workload_state_is_the_worst_of_its_podgroups() -> None:
    w, _ = waiting_world()
    other = kai_pg(min_member=0)
    other["metadata"]["name"] = "pg-side"
    w.pg(other, ADDED)
    w.settle()
    assert {n: s.state for n, s in w.tracker.of_workload("ml", "u-train")} == {
        "pg-side": State.ADMITTED, "pg-train": State.WAITING}
    assert [s.state for s in w.tracker.workload_samples()] == ["Waiting"]


def test_cache_keeps_only_what_the_gang_state_reads() -> None:
    running = member_pod("p0", node="n1", gpus=2)
    running["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]
    slim = SHAPE.slim(running)
    assert slim["spec"][GPUS_FIELD] == 2 and "status" in slim and "conditions" not in slim["status"]
    held = [SHAPE.slim(pod_unschedulable(member_pod(f"h{i}"), MESSAGE, now=T0)) for i in range(2)]
    assert held[0]["status"]["conditions"][0]["message"] == MESSAGE
    assert held[0]["status"]["conditions"][0] is held[1]["status"]["conditions"][0]  # shared
    pg = kai_pg()
    mark_unschedulable(pg, [FitError(NOT_ENOUGH_RESOURCES, [MESSAGE])], now=T0)
    pg["status"].update({"phase": "Pending", "schedulingConditions": pg["status"]["schedulingConditions"]})
    kept = slim_podgroup(copy.deepcopy(pg))["status"]
    assert set(kept) == {"schedulingConditions"}
    assert kept["schedulingConditions"][0]["reasons"] == [{"reason": NOT_ENOUGH_RESOURCES, "message": MESSAGE}]


def test_busy_gang_members_follow_pod_events_as_the_index_does() -> None:
    """The members a busy gang keeps (updated by pod events) give the state a fresh read of the index gives."""
    w, _ = waiting_world()
    moved = member_pod("p1", node="n1")
    moved["metadata"]["annotations"][POD_GROUP_ANNOTATION] = "pg-other"  # the pod now names another PodGroup
    w.pod(moved)
    w.pod(member_pod("p3", node="n1"), ADDED)
    w.settle()
    kept = w.tracker.get("ml", "pg-train")
    w.tracker.expire_memos(-1.0)
    w.tracker.mark(("ml", "pg-train"))
    w.settle()
    fresh = w.tracker.get("ml", "pg-train")
    assert kept is not None and fresh is not None
    assert (kept.counts, kept.state) == (fresh.counts, fresh.state)
    assert (fresh.counts.present, fresh.counts.scheduled) == (2, 1)


def test_pod_gpus_as_the_scheduler_reserves_them() -> None:
    def res(n: object, part: str = "limits") -> dict[str, Any]:
        return {"resources": {part: {"nvidia.com/gpu": n}}}

    assert pod_gpus({"containers": [res("2"), res(1, "requests")]}) == 3  # containers add up
    assert pod_gpus({"containers": [res("2"), res(1)], "initContainers": [res("4")]}) == 4  # a larger init
    assert pod_gpus({"resources": {"limits": {"nvidia.com/gpu": "8"}}, "containers": [res("1")]}) == 8  # pod-level
    assert pod_gpus({"containers": [res("x"), {"name": "no-resources"}]}) == 0  # unreadable: none


def upstream_pg(admitted: bool) -> dict[str, Any]:
    status = {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "True" if admitted else "False",
                              "reason": "Scheduled" if admitted else "Unschedulable",
                              "message": "" if admitted else MESSAGE, "lastTransitionTime": rfc3339(T0)}]}
    pg = kai_pg()
    pg.update(apiVersion="scheduling.k8s.io/v1beta1", spec={"schedulingPolicy": {"gang": {"minCount": 2}}},
              status=status)
    return pg


def upstream_pod(name: str, node: str | None = None) -> dict[str, Any]:
    p = member_pod(name, node=node)
    del p["metadata"]["annotations"]
    p["spec"]["schedulingGroup"] = {"podGroupName": "pg-train"}
    return p


def test_upstream_podgroups_by_scheduling_group_and_initially_scheduled() -> None:
    w = World()
    w.tracker.use_upstream(UPSTREAM_PG)
    w.pg(upstream_pg(False), ADDED)
    for i in range(2):
        w.pod(upstream_pod(f"p{i}"), ADDED)
    w.settle()
    st = w.tracker.get("ml", "pg-train")
    assert st is not None and st.state == State.WAITING
    assert [(r.reason, r.message) for r in st.reasons] == [("Unschedulable", MESSAGE)]
    w.pg(upstream_pg(True))
    for i in range(2):
        w.pod(upstream_pod(f"p{i}", node="n1"))
    w.settle()
    assert w.tracker.get("ml", "pg-train").state == State.ADMITTED  # type: ignore[union-attr]
    assert w.reasons() == ["GangAdmitted"]
    w.pod(upstream_pod("p1", node="n1"), DELETED)
    w.settle()
    assert w.reasons() == ["GangAdmitted", "GangDegraded"]


def test_held_pods_share_their_status() -> None:
    held = [SHAPE.slim(pod_unschedulable(member_pod(f"s{i}"), MESSAGE, now=T0)) for i in range(3)]
    assert held[0]["status"] is held[1]["status"] is held[2]["status"]
    widened = PodShape()
    widened.widen([".status.podIPs"])
    p = pod_unschedulable(member_pod("w0"), MESSAGE, now=T0)
    p["status"]["podIPs"] = [{"ip": "10.0.0.1"}]
    assert widened.slim(p)["status"]["podIPs"] == [{"ip": "10.0.0.1"}]  # unhashable: kept, not shared


def test_a_big_gang_is_recomputed_at_most_once_per_its_size_times_per_member() -> None:
    """A 300-member gang (per_member 5 ms: 1.5 s) growing pod by pod is recomputed once per 1.5 s, not on
    every mark; marks in between wait (deferred) and come back when due; its deletion is not deferred."""
    w = World()
    w.tracker.per_member = 0.005
    pg = kai_pg(min_member=300)
    w.pg(pg, ADDED)
    for i in range(300):
        w.pod(member_pod(f"p{i:03}"), ADDED)
    w.settle()
    before = w.tracker.computed
    st = w.tracker.get("ml", "pg-train")
    assert st is not None and st.counts.present == 300

    w.pod(member_pod("p300"), ADDED)  # one more pod, 1 s later: not due yet
    w.clock.now += timedelta(seconds=1)
    w.settle()
    assert w.tracker.computed == before, "deferred, not recomputed"
    assert w.tracker.get("ml", "pg-train").counts.present == 300  # type: ignore[union-attr]
    assert w.tracker.release_due() == pytest.approx(0.5)  # seconds until it is due

    w.clock.now += timedelta(seconds=0.5)
    assert w.tracker.release_due() is None  # due: marked again
    w.settle()
    assert w.tracker.computed == before + 1
    assert w.tracker.get("ml", "pg-train").counts.present == 301  # type: ignore[union-attr]

    w.pg(pg, DELETED)  # right after a recompute: its state goes at once all the same
    w.settle()
    assert w.tracker.get("ml", "pg-train") is None


def test_small_gangs_are_never_deferred() -> None:
    w, _ = waiting_world()
    w.tracker.per_member = 0.005
    for _ in range(3):
        w.pod(member_pod("p0", node="n1"))
        w.settle()
        w.pod(member_pod("p0"))
        w.settle()
    assert w.tracker.release_due() is None and not w.tracker._deferred


def test_only_the_namespaces_this_grouper_groups_are_tracked() -> None:
    """With --namespace-label-selector another grouper owns the other namespaces: their gangs are not this
    one's (no state, no metrics, no Events)."""
    w, _ = waiting_world()
    assert w.tracker.get("ml", "pg-train") is not None
    w.cache.denied.add("ml")
    w.pg(kai_pg())
    w.settle()
    assert w.tracker.get("ml", "pg-train") is None
    assert w.metrics.value("podgrouper_gangs", {"state": "Waiting", "queue": "team-a"}) in (0, None)
