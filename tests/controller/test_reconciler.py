"""The reconciler alone, over an in-memory cluster (``plan_world``: the controller ``grouper run`` builds,
its informers filled from the world, its writers talking to a fake API server that applies what they
send): a pass never waits for its pods' patches; a patch that fails after its pass ended is recorded,
reported and retried with back-off (a terminal one is not); replaced PodGroups are deleted once the
workload's patches have landed; a second pass in a row writes nothing; kept decisions are used again.
The same behaviours against the real API server: ``tests/integration/test_patches_fire_and_track.py``."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.clock import ManualClock
from grouper.controller.controller import Controller
from grouper.controller.tuning import DEFAULT_TUNING
from grouper.controller.workloads import WorkloadKey
from grouper.core.config import GroupingConfig
from grouper.karta import DefinitionRegistry
from grouper.kube.cache import POD, PODGROUP
from grouper.kube.transport import ApiError
from grouper.model import objects as o
from grouper.model.podgroup import POD_GROUP_ANNOTATION
from grouper.observability.metrics import Metrics
from grouper.runtime.composition import build_grouper
from tests.controller.plan_world import JOB, NS, STATEFULSET, FakeClient, World, key_of, start_grouper

WL = WorkloadKey(NS, "batch", "Job", "train")
REPO = Path(__file__).resolve().parents[2]


class Client(FakeClient):
    """The fake API server, with pod patches that can be held (a slow API server) or fail."""

    def __init__(self, world: World) -> None:
        super().__init__(world)
        self.hold = asyncio.Event()
        self.hold.set()
        self.hold_groups = asyncio.Event()  # PodGroup creates, held the same way
        self.hold_groups.set()
        self.fail: dict[str, ApiError] = {}  # pod name -> the error its next patch meets
        self.patches: list[str] = []
        self.waiting = {"pods": 0, "podgroups": 0}  # requests held now
        self.most = {"pods": 0, "podgroups": 0}  # the most held at once

    async def _held(self, what: str, hold: asyncio.Event) -> None:
        self.waiting[what] += 1
        self.most[what] = max(self.most[what], self.waiting[what])
        await hold.wait()
        self.waiting[what] -= 1

    async def create(self, path: str, obj: Any) -> Any:
        if "/podgroups" in path:
            await self._held("podgroups", self.hold_groups)
        return await super().create(path, obj)

    async def merge_patch(self, path: str, patch: dict[str, Any], *, metadata_only: bool = False) -> Any:
        name = path.rsplit("/", 1)[-1]
        if "/pods/" in path:
            self.patches.append(name)
            await self._held("pods", self.hold)
            err = self.fail.pop(name, None)
            if err is not None:
                raise err
        return await super().merge_patch(path, patch, metadata_only=metadata_only)


class Bench:
    def __init__(self, loop: asyncio.AbstractEventLoop, **settings: Any) -> None:
        self.loop = loop
        self.world = World()
        self.grouper = build_grouper(GroupingConfig(), DefinitionRegistry(None))
        self.ctl: Controller = start_grouper(self.world, self.grouper, metrics=Metrics(), **settings)
        self.world.grouper = self.ctl
        self.client = Client(self.world)
        self.ctl.writers.pods.client = self.client  # type: ignore[assignment]
        self.ctl.writers.pod_groups.client = self.client  # type: ignore[assignment]

    @property
    def retried(self) -> list[WorkloadKey]:
        """The workload as often as it was queued with back-off (the passes here are run by hand: only a
        patch failing after its pass backs off)."""
        return [WL] * self.ctl.queue.num_requeues(WL)

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def job(self, pods: int, name: str = "train") -> dict[str, Any]:
        job = self.world.put({"apiVersion": "batch/v1", "kind": "Job",
                              "metadata": {"name": name, "namespace": NS,
                                           "annotations": {"kai.scheduler/batch-min-member": str(pods)}},
                              "spec": {"parallelism": pods}})
        for i in range(pods):
            self.pod(job, f"{name}-{i}")
        return job

    def pod(self, owner: dict[str, Any], name: str) -> dict[str, Any]:
        return self.world.put({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "creationTimestamp": "2026-12-01T10:00:00Z",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": o.name(owner),
                                              "uid": o.uid(owner), "controller": True}]},
            "spec": {"schedulerName": "kai-scheduler"}, "status": {"phase": "Pending"},
        })

    def drain(self) -> None:
        """Forget what the events queued so far (the test runs the passes itself)."""
        async def drain() -> None:
            while len(self.ctl.queue):
                self.ctl.queue.done(await self.ctl.queue.get())

        self.run(drain())

    async def landed(self) -> None:
        while self.ctl.writers.pods.in_flight:
            await asyncio.sleep(0)

    def marks(self) -> dict[str, str | None]:
        return {o.name(p): o.annotations(p).get(POD_GROUP_ANNOTATION) for p in self.world.of(POD)}

    def decided(self, source: str) -> float:
        return self.ctl.metrics.registry.get_sample_value("podgrouper_pod_decisions_total", {"source": source}) or 0.0


@pytest.fixture
def bench() -> Iterator[Bench]:
    loop = asyncio.new_event_loop()
    b = Bench(loop)
    try:
        yield b
    finally:
        loop.run_until_complete(b.ctl.reconciler.settle())
        loop.close()


def test_a_pass_ends_with_its_patches_in_flight_and_they_land_after(bench: Bench) -> None:
    job = bench.job(3)
    bench.client.hold.clear()  # a slow API server: no patch answers yet
    result = bench.run(bench.ctl.reconciler.reconcile(WL))
    assert result.status == "ok" and result.written == 4  # the PodGroup and three patches sent
    pg = f"pg-train-{o.uid(job)}"
    assert [o.name(p) for p in bench.world.of(PODGROUP)] == [pg]
    assert bench.ctl.writers.pods.in_flight == 3 and set(bench.marks().values()) == {None}
    # a pass while they fly sends none of them again
    assert bench.run(bench.ctl.reconciler.reconcile(WL)).written == 0
    bench.client.hold.set()
    bench.run(bench.landed())
    assert set(bench.marks().values()) == {pg} and sorted(bench.client.patches) == ["train-0", "train-1", "train-2"]
    assert [r.patched.result if r.patched else None for r in bench.ctl.store.pods(NS)] == ["patched"] * 3


def test_max_concurrent_reconciles_bounds_podgroup_writes_and_twice_that_pod_patches() -> None:
    """What ``--max-concurrent-reconciles`` promises (docs/operations.md): N PodGroup writes in flight and 2N pod
    patches (no pass waits for its patches, so those of every pass meet at the patcher), whatever the number
    of passes running; and everything held lands once the API server answers."""
    loop = asyncio.new_event_loop()
    bench = Bench(loop, max_concurrent_reconciles=3)
    names = [f"job{i}" for i in range(8)]
    for name in names:
        bench.job(4, name)
    bench.drain()
    bench.client.hold.clear()
    bench.client.hold_groups.clear()

    async def run() -> list[Any]:
        passes = [asyncio.ensure_future(bench.ctl.reconciler.reconcile(WorkloadKey(NS, "batch", "Job", n)))
                  for n in names]
        for _ in range(200):  # every pass runs until the API server holds it
            await asyncio.sleep(0)
        assert bench.client.waiting == {"pods": 0, "podgroups": 3}, "a new workload's PodGroup goes first"
        bench.client.hold_groups.set()
        results = await asyncio.gather(*passes)
        for _ in range(200):
            await asyncio.sleep(0)
        assert bench.client.waiting["pods"] == 6 and bench.ctl.writers.pods.in_flight == 32
        bench.client.hold.set()
        await bench.landed()
        return results

    try:
        results = bench.run(run())
        assert [r.status for r in results] == ["ok"] * 8 and bench.client.most == {"pods": 6, "podgroups": 3}
        assert len(bench.world.of(PODGROUP)) == 8 and None not in bench.marks().values()
    finally:
        loop.run_until_complete(bench.ctl.reconciler.settle())
        loop.close()


def test_a_second_pass_writes_nothing_and_decides_nothing(bench: Bench) -> None:
    bench.job(3)
    bench.run(bench.ctl.reconciler.reconcile(WL))
    bench.run(bench.landed())
    writes = len(bench.world.writes)
    assert bench.decided("decided") == 3
    result = bench.run(bench.ctl.reconciler.reconcile(WL))
    assert result.status == "ok" and result.written == 0 and len(bench.world.writes) == writes
    assert (bench.decided("decided"), bench.decided("kept")) == (3, 3), "the unchanged pods' decisions are kept"


@pytest.mark.parametrize("repeat", range(3))
def test_a_patch_failing_after_its_pass_is_reported_and_retried_with_back_off(bench: Bench, repeat: int) -> None:
    job = bench.job(2)
    bench.client.fail["train-1"] = ApiError(500, "InternalError", "etcd is sad", method="PATCH", path="p")
    assert bench.run(bench.ctl.reconciler.reconcile(WL)).status == "ok"
    bench.run(bench.landed())
    rec = bench.ctl.store.pod(NS, "train-1")
    assert rec is not None and rec.outcome == "failed" and "etcd is sad" in rec.message
    assert bench.retried == [WL], "the first failure queues the workload after its back-off"
    assert bench.ctl.metrics.registry.get_sample_value(
        "podgrouper_write_failures_total", {"resource": "pods", "reason": "ServerError", "retry": "retryable"}) == 1
    # the retry's pass sends the patch again and reports the failure (its status backs off further)
    bench.client.fail["train-1"] = ApiError(500, "InternalError", "etcd is sad", method="PATCH", path="p")
    result = bench.run(bench.ctl.reconciler.reconcile(WL))
    assert result.status == "error" and any("etcd is sad" in e for e in result.errors)
    bench.run(bench.landed())
    assert bench.retried == [WL], "a failure the pass already reported is not queued a second time"
    # it heals
    result = bench.run(bench.ctl.reconciler.reconcile(WL))
    bench.run(bench.landed())
    assert result.status == "error"  # the pass that sent it again still reports the failure it retries
    assert bench.marks() == {"train-0": f"pg-train-{o.uid(job)}", "train-1": f"pg-train-{o.uid(job)}"}
    assert bench.run(bench.ctl.reconciler.reconcile(WL)).status == "ok"
    rec = bench.ctl.store.pod(NS, "train-1")
    assert rec is not None and rec.outcome == "grouped" and rec.patched is not None and rec.patched.result == "patched"


def test_a_terminal_patch_failure_waits_for_a_change(bench: Bench) -> None:
    bench.job(1)
    bench.client.fail["train-0"] = ApiError(422, "Invalid", "no", method="PATCH", path="p")
    bench.run(bench.ctl.reconciler.reconcile(WL))
    bench.run(bench.landed())
    assert bench.retried == [] and bench.ctl.store.workload(str(WL)).result == "failed"  # type: ignore[union-attr]


def test_a_replaced_podgroup_goes_once_the_patches_moving_its_pods_away_have_landed(bench: Bench) -> None:
    """"old" is replaced: the pass moves its pods to the workload's PodGroup, and deletes it once those patches
    have landed. "stale" is named by no pod and no pass moved a pod away from it: its pods are gone, not
    moved (a LeaderWorkerSet group recreated or scaled away looks just like it), so it is left to the
    garbage collector with its owner, as KAI leaves every PodGroup."""
    job = bench.job(2)
    owned = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": o.uid(job)}]
    for name in ("stale", "old"):
        bench.world.put({"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                         "metadata": {"name": name, "namespace": NS, "ownerReferences": owned},
                         "spec": {"minMember": 1}})
    for pod_name in ("train-0", "train-1"):  # grouped before into "old" (an older grouper's name)
        pod = copy.deepcopy(bench.world.get(POD, NS, pod_name))
        assert pod is not None
        pod["metadata"]["annotations"] = {POD_GROUP_ANNOTATION: "old"}
        bench.world.put(pod)
    bench.client.hold.clear()
    bench.drain()
    result = bench.run(bench.ctl.reconciler.reconcile(WL))
    assert bench.world.get(PODGROUP, NS, "stale") is not None, "no pod moved away from it: not replaced"
    assert result.deferred and bench.world.get(PODGROUP, NS, "old") is not None, "its pods' patches still fly"
    assert WL not in bench.ctl.queue
    bench.client.hold.set()
    bench.run(bench.landed())
    assert WL in bench.ctl.queue, "the last patch to land queues the workload"
    result = bench.run(bench.ctl.reconciler.reconcile(WL))
    assert not result.deferred and result.written == 1
    assert [o.name(pg) for pg in bench.world.of(PODGROUP)] == [f"pg-train-{o.uid(job)}", "stale"]
    assert bench.run(bench.ctl.reconciler.reconcile(WL)).written == 0, "the same again: nothing to write"


def _lws(bench: Bench) -> dict[str, Any]:
    """examples/leaderworkerset.yaml (2 groups of 3) in the world; the LWS."""
    docs = [d for d in yaml.safe_load_all((REPO / "examples" / "leaderworkerset.yaml").read_text()) if d]
    for doc in docs:
        doc["metadata"]["namespace"] = NS
        doc.pop("status", None)
        bench.world.put(doc)
    return docs[0]


def _group(bench: Bench, index: str) -> list[dict[str, Any]]:
    return [p for p in bench.world.of(POD)
            if o.labels(p).get("leaderworkerset.sigs.k8s.io/group-index") == index]


def test_a_group_whose_pods_are_all_gone_for_a_moment_keeps_its_podgroup(bench: Bench) -> None:
    """LWS recreates a group (RecreateGroupOnPodRestart): its worker StatefulSet and pods go, then its leader,
    and new ones come with the same names. A pass in between sees the LWS with group 0 only: group 1's
    PodGroup is not wanted and named by no pod, but no pod was moved away from it — it is kept, and the new
    pods find it as they need it: 3 patches, no PodGroup written. Scaled away (the LWS at 1 replica) it is
    kept the same way, until the garbage collector removes it with the LWS. (Before: deleted in the pass
    in between, and created again for the new pods.)"""
    lws = _lws(bench)
    wl = WorkloadKey(NS, "leaderworkerset.x-k8s.io", "LeaderWorkerSet", o.name(lws))
    bench.drain()
    bench.run(bench.ctl.reconciler.reconcile(wl))
    bench.run(bench.landed())
    names = sorted(o.name(pg) for pg in bench.world.of(PODGROUP))
    assert len(names) == 2 and names[1].endswith("-group-1")
    versions = {o.name(pg): pg["metadata"]["resourceVersion"] for pg in bench.world.of(PODGROUP)}
    for round_ in range(3):
        leader, *workers = sorted(_group(bench, "1"), key=o.name)
        sts = bench.world.get(STATEFULSET, NS, o.name(leader))  # the group's workers' StatefulSet
        assert sts is not None
        for obj in (*workers, sts, leader):  # foreground deletion: the leader's dependents first
            bench.world.delete(key_of(obj))
        bench.world.writes.clear()
        result = bench.run(bench.ctl.reconciler.reconcile(wl))
        assert result.status == "ok" and bench.world.writes == [], f"round {round_}: {bench.world.writes}"
        owner = None
        for obj in (leader, sts, *workers):  # anew, the same names: each owned by its new owner
            new = copy.deepcopy(obj)
            new["metadata"]["uid"] = ""
            (new["metadata"].get("annotations") or {}).pop(POD_GROUP_ANNOTATION, None)
            (new["metadata"].get("labels") or {}).pop("kai.scheduler/subgroup-name", None)
            if owner is not None:
                new["metadata"]["ownerReferences"][0]["uid"] = o.uid(owner)
            made = bench.world.put(new)
            if o.name(obj) == o.name(leader):  # the leader owns the StatefulSet, the StatefulSet the workers
                owner = made
        bench.run(bench.ctl.reconciler.reconcile(wl))
        bench.run(bench.landed())
        assert sorted((w.verb, w.kind) for w in bench.world.writes) == [("patch", "Pod")] * 3, f"round {round_}"
        assert {o.name(pg): pg["metadata"]["resourceVersion"] for pg in bench.world.of(PODGROUP)} == versions
    for pod in _group(bench, "1"):  # scaled to 1 replica: group 1 goes for good
        bench.world.delete(key_of(pod))
    bench.world.writes.clear()
    assert bench.run(bench.ctl.reconciler.reconcile(wl)).written == 0 and bench.world.writes == []
    assert sorted(o.name(pg) for pg in bench.world.of(PODGROUP)) == names, "left to the garbage collector"


def test_a_pod_decided_again_while_its_patch_flies_is_looked_at_once_it_lands(bench: Bench) -> None:
    job = bench.job(1)
    bench.client.hold.clear()
    bench.run(bench.ctl.reconciler.reconcile(WL))
    # the pod is adopted by another Job meanwhile: its decision moves it, its first patch still flies
    other = bench.world.put({"apiVersion": "batch/v1", "kind": "Job",
                             "metadata": {"name": "other", "namespace": NS}, "spec": {"parallelism": 1}})
    pod = copy.deepcopy(bench.world.get(POD, NS, "train-0"))
    assert pod is not None
    pod["metadata"]["ownerReferences"][0].update(name="other", uid=o.uid(other))
    bench.world.put(pod)
    other_wl = WorkloadKey(NS, "batch", "Job", "other")
    assert bench.ctl.index.workload_of((NS, "train-0")) == other_wl
    bench.run(bench.ctl.reconciler.reconcile(other_wl))
    bench.drain()
    bench.client.hold.set()
    bench.run(bench.landed())
    assert other_wl in bench.ctl.queue
    bench.run(bench.ctl.reconciler.reconcile(other_wl))
    bench.run(bench.landed())
    assert bench.marks() == {"train-0": f"pg-other-{o.uid(other)}"} and JOB and o.uid(job)


def test_the_workload_context_is_kept_with_the_decisions_and_dropped_with_them(bench: Bench) -> None:
    """A pass that starts from kept decisions decides its new pods in the context the pass that kept them
    made (owner chains walked, per-workload parts); a change of what they read drops both."""
    job = bench.job(2)
    plans = bench.ctl.reconciler.plans
    bench.run(bench.ctl.reconciler.reconcile(WL))
    bench.run(bench.landed())
    context = plans.context(WL)
    assert context is not None
    bench.pod(job, "train-2")  # the Job's controller adds a pod: decided in the kept context
    bench.run(bench.ctl.reconciler.reconcile(WL))
    bench.run(bench.landed())
    assert plans.context(WL) is context and bench.decided("decided") == 3
    changed = copy.deepcopy(bench.world.get(JOB, NS, "train"))
    assert changed is not None
    changed["metadata"]["annotations"]["kai.scheduler/batch-min-member"] = "3"
    bench.world.put(changed)
    assert plans.get(WL) is None and plans.context(WL) is None, "the Job the decisions read changed"
    bench.run(bench.ctl.reconciler.reconcile(WL))
    assert plans.context(WL) not in (None, context)
    (pg,) = bench.world.of(PODGROUP)
    assert pg["spec"]["minMember"] == 3, "decided again from the changed Job, not from the dropped context"


@pytest.mark.parametrize("repeat", range(3))
def test_a_pod_deleted_while_its_pass_decides_leaves_no_record_behind(bench: Bench, repeat: int) -> None:
    """Its delete is seen (and its record forgotten) while the pass is still deciding (Karta decisions run
    off the loop): the pass must not record it again afterwards, or the record outlives the pod for good (the
    soak's records grew with every workload torn down mid-pass)."""
    bench.job(3)
    reconciler = bench.ctl.reconciler
    plan = reconciler.plan

    async def plan_then_delete(*args: Any, **kwargs: Any) -> Any:
        result = await plan(*args, **kwargs)
        bench.world.delete(("v1", "Pod", NS, "train-1"))  # its DELETED event: handled here, mid-pass
        return result

    reconciler.plan = plan_then_delete  # type: ignore[method-assign]
    bench.run(reconciler.reconcile(WL))
    bench.run(bench.landed())
    reconciler.plan = plan  # type: ignore[method-assign]
    assert bench.ctl.store.pod(NS, "train-1") is None
    assert [r.name for r in bench.ctl.store.pods(NS)] == ["train-0", "train-2"]
    assert bench.ctl.store.sizes()["pods"] == 2


def test_a_pass_checks_each_podgroup_against_the_rules_once(bench: Bench, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pod's decision checks its PodGroup against the rules, and so does the write (a merged PodGroup is
    written only if it holds to them): all with the answers of the pass's workload context, which the plan
    carries to the write — one check per distinct PodGroup per pass, however many pods see it."""
    import grouper.controller.reconciler as rec
    import grouper.core.workload_context as wc

    checked: list[str] = []
    validate = wc.validate_pod_group

    def counted(md: Any) -> list[str]:
        checked.append(md.name)
        return validate(md)

    monkeypatch.setattr(wc, "validate_pod_group", counted)
    monkeypatch.setattr(rec, "validate_pod_group", counted)
    job = bench.job(3)
    result = bench.run(bench.ctl.reconciler.reconcile(WL))
    assert result.status == "ok" and result.written == 4
    assert checked == [f"pg-train-{o.uid(job)}"]


def _written(bench: Bench, op: str) -> float:
    return bench.ctl.metrics.registry.get_sample_value("podgrouper_podgroups_written_total", {"operation": op}) or 0.0


def test_a_pass_whose_new_pods_only_join_their_podgroup_writes_no_podgroup(bench: Bench) -> None:
    """A large workload's pods arriving a few per pass: its PodGroup object does not change (the new pods see
    it as its newest pod does), so the pass neither compares nor writes it — the record lists the new pods.
    A PodGroup someone else changed is compared (and put right) by the next pass."""
    job = bench.job(40)  # at least Tuning.settle_min_pods: the next pass starts from this one's plan
    reconciler = bench.ctl.reconciler
    bench.run(reconciler.reconcile(WL))
    bench.run(bench.landed())
    pg = f"pg-train-{o.uid(job)}"
    compared = _written(bench, "created") + _written(bench, "unchanged") + _written(bench, "updated")
    assert compared == 1
    for i in (40, 41):
        bench.pod(job, f"train-{i}")
    bench.drain()
    result = bench.run(reconciler.reconcile(WL))
    bench.run(bench.landed())
    assert result.status == "ok" and result.written == 2, "two pod patches, no PodGroup write"
    assert _written(bench, "created") + _written(bench, "unchanged") + _written(bench, "updated") == compared
    record = bench.ctl.store.pod_group(NS, pg)
    assert record is not None and len(record.pods) == 42 and {"train-40", "train-41"} <= set(record.pods)
    assert set(bench.marks().values()) == {pg}
    # someone else edits the PodGroup: its event makes the next pass compare it and put it right
    stored = copy.deepcopy(bench.world.get(PODGROUP, NS, pg))
    assert stored is not None
    stored["spec"]["minMember"] = 7
    bench.world.put(stored)
    bench.pod(job, "train-42")
    bench.drain()
    result = bench.run(reconciler.reconcile(WL))
    assert result.status == "ok" and _written(bench, "updated") == 1
    fixed = bench.world.get(PODGROUP, NS, pg)
    assert fixed is not None and fixed["spec"]["minMember"] == 40


@pytest.mark.parametrize("repeat", range(3))
def test_a_pod_found_deleted_is_not_patched_again_before_the_watch_says_so(bench: Bench, repeat: int) -> None:
    """Its owner's change and its delete race (an operator scaling down): the patch is answered 404 while the
    pod's DELETED event is still on its way, and another event (the owner's status) brings a pass meanwhile.
    That pass must not patch it again (the real Kubeflow operator test saw two 404 patches of one pod)."""
    bench.job(2)
    bench.client.fail["train-1"] = ApiError(404, "NotFound", 'pods "train-1" not found', method="PATCH", path="p")
    assert bench.run(bench.ctl.reconciler.reconcile(WL)).status == "ok"
    bench.run(bench.landed())
    rec = bench.ctl.store.pod(NS, "train-1")
    assert rec is not None and rec.patched is not None and rec.patched.result == "gone"
    result = bench.run(bench.ctl.reconciler.reconcile(WL))
    bench.run(bench.landed())
    assert (result.status, result.written) == ("ok", 0)
    assert sorted(bench.client.patches) == ["train-0", "train-1"], "train-1 patched once"
    bench.world.delete(("v1", "Pod", NS, "train-1"))  # its DELETED event arrives
    assert len(bench.ctl.writers.pods.expectations) == 0
    assert bench.run(bench.ctl.reconciler.reconcile(WL)).written == 0 and bench.ctl.store.pod(NS, "train-1") is None


def _coalescing(bench: Bench) -> ManualClock:
    """The production tuning (plan_world's passes are run by hand, none put off) on an injected clock."""
    clock = ManualClock()
    bench.ctl.reconciler.tuning, bench.ctl.reconciler._clock = DEFAULT_TUNING, clock
    return clock


def _passes(bench: Bench) -> float:
    reg = bench.ctl.metrics.registry
    return sum(s.value for m in reg.collect() if m.name == "podgrouper_reconciles" for s in m.samples
               if s.name == "podgrouper_reconciles_total")


def test_a_pass_while_the_last_ones_patches_fly_waits_for_them_and_decides_what_came_meanwhile_at_once(
        bench: Bench) -> None:
    """client-go's expectations: the pods arriving while a workload's patches fly share the pass their landing
    queues, instead of a pass each."""
    _coalescing(bench)
    job = bench.job(2)
    bench.client.hold.clear()
    assert bench.run(bench.ctl.reconciler.reconcile(WL)).written == 3  # the PodGroup and two patches
    bench.pod(job, "train-2")
    bench.pod(job, "train-3")
    bench.drain()
    decided, passes, counted = bench.decided("decided"), _passes(bench), bench.ctl.reconciler.passes
    for _ in range(2):  # each new pod's event: put off, nothing decided, sent or counted as a pass
        put_off = bench.run(bench.ctl.reconciler.reconcile(WL))
        assert put_off.requeue_after == pytest.approx(DEFAULT_TUNING.coalesce_seconds) and put_off.written == 0
    assert (bench.decided("decided"), _passes(bench), len(bench.client.patches)) == (decided, passes, 2)
    assert bench.ctl.reconciler.passes == counted, "a put-off pass is no work done for the heap keeper either"
    bench.client.hold.set()
    bench.run(bench.landed())
    assert WL in bench.ctl.queue, "the last patch landing queues the workload"
    bench.drain()
    assert bench.run(bench.ctl.reconciler.reconcile(WL)).written == 2
    bench.run(bench.landed())
    assert bench.decided("decided") == decided + 2 and _passes(bench) == passes + 1
    assert bench.ctl.reconciler.passes == counted + 1
    assert set(bench.marks().values()) == {f"pg-train-{o.uid(job)}"}


def test_a_pass_is_put_off_for_patches_in_flight_at_most_coalesce_seconds(bench: Bench) -> None:
    """A slow API server holds no new pod back longer than ``coalesce_seconds``: then its pass runs while the
    earlier patches still fly (and sends none of those again)."""
    clock = _coalescing(bench)
    job = bench.job(1)
    bench.client.hold.clear()
    bench.run(bench.ctl.reconciler.reconcile(WL))
    bench.pod(job, "train-1")
    assert bench.run(bench.ctl.reconciler.reconcile(WL)).requeue_after == pytest.approx(0.05)
    clock.now += 0.03
    assert bench.run(bench.ctl.reconciler.reconcile(WL)).requeue_after == pytest.approx(0.02)
    clock.now += 0.02
    late = bench.run(bench.ctl.reconciler.reconcile(WL))
    assert late.requeue_after is None and late.written == 1 and bench.client.patches == ["train-0", "train-1"]
    clock.now += 0.01  # both fly now: the next pass is put off afresh, for the whole window
    assert bench.run(bench.ctl.reconciler.reconcile(WL)).requeue_after == pytest.approx(0.05)
    bench.client.hold.set()
    bench.run(bench.landed())
    assert set(bench.marks().values()) == {f"pg-train-{o.uid(job)}"}


def test_a_pass_run_at_the_bound_is_the_one_owed_and_the_landing_queues_no_other(bench: Bench) -> None:
    """The put-off passes waited for one pass; when it ran at the bound (the patches still flying) nothing is
    owed for them, so the patches' landing queues no pass with nothing to look at (every workload whose pods
    came in two batches while the API server was slow had that third pass)."""
    clock = _coalescing(bench)
    job = bench.job(1)
    bench.client.hold.clear()
    bench.run(bench.ctl.reconciler.reconcile(WL))
    bench.pod(job, "train-1")
    bench.drain()
    assert bench.run(bench.ctl.reconciler.reconcile(WL)).requeue_after == pytest.approx(0.05)
    clock.now += 0.05
    late = bench.run(bench.ctl.reconciler.reconcile(WL))
    assert late.requeue_after is None and late.written == 1
    bench.client.hold.set()
    bench.run(bench.landed())
    assert WL not in bench.ctl.queue, "no pass owed once the patches land"
    assert set(bench.marks().values()) == {f"pg-train-{o.uid(job)}"}
    bench.client.hold.clear()  # put off again, and the bound not reached: the landing queues the pass
    bench.pod(job, "train-2")
    bench.drain()
    assert bench.run(bench.ctl.reconciler.reconcile(WL)).written == 1
    bench.pod(job, "train-3")
    bench.drain()
    assert bench.run(bench.ctl.reconciler.reconcile(WL)).requeue_after == pytest.approx(0.05)
    bench.client.hold.set()
    bench.run(bench.landed())
    assert WL in bench.ctl.queue, "the pass put off is owed"
