"""Restarting the grouper writes nothing to objects that are already correct, and informers survive an
expired resourceVersion (410 Gone) by re-listing and reconciling their cache."""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from typing import Any

import orjson
from clusters import cluster_fixture
from controller.harness import (
    GrouperThread,
    annotated,
    child_jobs,
    deployment,
    job,
    jobset,
    label_namespace,
    pod_groups,
    pods,
)
from kube import Kube, compact_etcd, wait_until

from devtools.cluster import LocalCluster
from grouper.kube import config as kubeconfig
from grouper.kube.cache import slim_pod
from grouper.kube.discovery import WELL_KNOWN
from grouper.kube.informer import ADDED, DELETED, MODIFIED, Informer
from grouper.kube.transport import KubeClient
from grouper.model.objects import GVK
from grouper.observability.metrics import Metrics


def test_restart_writes_nothing_to_correct_objects(cluster: Any, kube: Kube, namespace: str) -> None:
    ns = namespace
    label_namespace(kube, ns)
    with GrouperThread(cluster, ns):
        kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job("train", 3))
        kube.create(f"/apis/apps/v1/namespaces/{ns}/deployments", deployment("serve", 2))
        js = kube.create(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", jobset("js"))
        for j in child_jobs(js):
            kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", j)
        wait_until(lambda: annotated(kube, ns, 10), 30, what="10 pods grouped")
    before_pgs = {n: pg["metadata"]["resourceVersion"] for n, pg in pod_groups(kube, ns).items()}
    before_pods = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in pods(kube, ns)}
    assert len(before_pgs) == 3  # Job, Deployment (a gang since KAI v0.18), JobSet

    t0 = time.monotonic()
    with GrouperThread(cluster, ns) as g:
        started = time.monotonic() - t0
        g.wait_idle(settle=1.0)
        unchanged = g.metrics.value("podgrouper_podgroups_written_total", {"operation": "unchanged"})
        writes = g.writes(("podgroups", "pods", "events"))
        reconciles = sum(
            g.metrics.value("podgrouper_reconciles_total", {"result": "ok", "plugin": p})
            for p in ("BatchJob Grouper", "Deployment Grouper", "JobSet Grouper")
        )
        requests = sum(
            s.value
            for m in g.metrics.registry.collect()
            if m.name == "podgrouper_api_requests"
            for s in m.samples
            if s.name.endswith("_total")
        )
    print(
        f"\n[measure] restart over 10 pods / 3 PodGroups: ready in {started:.2f}s, {reconciles:.0f} reconciles, "
        f"{requests:.0f} API requests in total (LIST/WATCH/discovery), {writes:.0f} writes"
    )
    assert writes == 0
    assert unchanged == 3
    assert reconciles == 3, "one reconcile per workload (Job, Deployment, JobSet), not per pod"
    assert {n: pg["metadata"]["resourceVersion"] for n, pg in pod_groups(kube, ns).items()} == before_pgs
    assert {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in pods(kube, ns)} == before_pods


def test_after_a_restart_a_new_workload_goes_before_the_re_checks(cluster: Any, kube: Kube, namespace: str) -> None:
    """A restarted grouper re-checks every grouped workload in the background lane: a workload whose pods
    are not grouped yet is decided first, not after all of them (one worker, so the order is the queue's)."""
    ns = namespace
    label_namespace(kube, ns)
    old = [f"old-{i:02d}" for i in range(40)]
    with GrouperThread(cluster, ns):
        for name in old:
            kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job(name))
        wait_until(lambda: annotated(kube, ns, len(old)), 90, what="the 40 Jobs' pods grouped")
    kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job("fresh"))
    wait_until(lambda: len(pods(kube, ns)) == len(old) + 1, 60, what="the new Job's pod created")

    # one worker, no batch window: re-checking a 1-pod Job takes well under a millisecond, so a 20 ms
    # window would let all 40 go first whatever the order of the queue
    with GrouperThread(cluster, ns, max_concurrent_reconciles=1, batch_window_seconds=0.0) as g:
        wait_until(lambda: annotated(kube, ns, len(old) + 1), 60, what="the new Job's pod grouped")
        g.wait_idle(settle=0.5)
        assert g.controller is not None
        decided = {r.name.rsplit("-", 1)[0]: r.decided_at or 0.0 for r in g.controller.store.pods(ns)}
        writes = g.writes(("pods",))
    assert set(decided) == {*old, "fresh"}
    later = [n for n in old if decided[n] > decided["fresh"]]
    assert len(later) >= len(old) - 5, f"the new Job was decided after {len(old) - len(later)} re-checks"
    assert writes == 1, "only the new pod is patched"


# a bare API server whose ConfigMaps bypass the watch cache, so expired resourceVersions and continue tokens
# really answer 410 Gone after an etcd compaction (the shared cluster's watch cache serves them)
uncached_cluster = cluster_fixture("uncached_cluster", shared=False, crds=(), controller_manager=False,
                                   apiserver_args=("--watch-cache-sizes=configmaps#0",))


def test_informer_paginates_and_relists_after_410_gone(uncached_cluster: LocalCluster) -> None:
    cluster = uncached_cluster
    kube = Kube.from_cluster(cluster)
    ns = "default"
    cm_path = f"/api/v1/namespaces/{ns}/configmaps"
    for i in range(5):
        kube.create(cm_path, {"metadata": {"name": f"cm-{i}", "labels": {"set": "a"}}, "data": {"i": str(i)}})

    async def scenario() -> dict[str, Any]:
        metrics = Metrics()
        client = KubeClient(
            kubeconfig.explicit(cluster.server, token=cluster.admin_token, ca_file=cluster.ca_file),
            qps=0,
            burst=1,
            metrics=metrics,
            watch_list=False,  # paginated LISTs: tests/kube/test_streaming_lists.py has the other way
        )
        events: list[tuple[str, str]] = []
        seen = 0

        def compact_after_first_page(obj: dict[str, Any]) -> dict[str, Any]:
            nonlocal seen
            seen += 1
            if seen == 2:  # the first page (limit 2) is in: make its continue token expire
                kube.create(cm_path, {"metadata": {"name": "bump"}})  # advance etcd past the list's revision
                compact_etcd(cluster)
            return obj

        res = WELL_KNOWN[GVK("", "v1", "ConfigMap")]
        inf = Informer(
            client,
            res,
            namespace=ns,
            label_selector="set=a",
            metrics=metrics,
            page_size=2,
            transform=compact_after_first_page,
        )
        inf.add_handler(lambda t, o, old: events.append((t, o["metadata"]["name"])))
        try:
            inf.start()
            assert await inf.wait_synced(30)
            assert sorted(n for t, n in events if t == ADDED) == [f"cm-{i}" for i in range(5)]
            # live watch: a change arrives as MODIFIED
            await asyncio.to_thread(kube.patch, f"{cm_path}/cm-0", {"data": {"i": "changed"}})
            for _ in range(100):
                if (MODIFIED, "cm-0") in events:
                    break
                await asyncio.sleep(0.05)
            # disconnected; meanwhile one object vanishes, one appears and etcd compacts past our resourceVersion
            await inf.stop()
            events.clear()
            await asyncio.to_thread(kube.delete, f"{cm_path}/cm-1")
            await asyncio.to_thread(
                kube.create, cm_path, {"metadata": {"name": "cm-new", "labels": {"set": "a"}}}
            )
            await asyncio.to_thread(compact_etcd, cluster)
            inf.start()
            for _ in range(200):
                if (DELETED, "cm-1") in events and (ADDED, "cm-new") in events:
                    break
                await asyncio.sleep(0.05)
            return {
                "events": list(events),
                "cached": sorted(o["metadata"]["name"] for o in inf.list()),
                "gone_lists": metrics.value(
                    "podgrouper_api_requests_total", {"verb": "list", "resource": "configmaps", "code": "410"}
                ),
                "relists": metrics.value("podgrouper_relists_total", {"resource": "configmaps"}),
            }
        finally:
            await inf.stop()
            await client.close()

    out = asyncio.run(scenario())
    kube.close()
    assert out["gone_lists"] == 1, "the expired continue token answered 410 once; the LIST started over"
    assert (DELETED, "cm-1") in out["events"], "the vanished object gets a synthesized DELETED"
    assert (ADDED, "cm-new") in out["events"]
    assert (MODIFIED, "cm-0") not in out["events"] and (ADDED, "cm-2") not in out["events"], (
        "unchanged objects produce no event on re-list"
    )
    assert out["relists"] == 1, "the watch's 410 Gone led to exactly one re-list"
    assert out["cached"] == ["cm-0", "cm-2", "cm-3", "cm-4", "cm-new"]


def _deep_size(obj: Any) -> int:
    tracemalloc.start()
    snap0 = tracemalloc.take_snapshot()
    copies = [orjson.loads(orjson.dumps(obj)) for _ in range(200)]
    snap1 = tracemalloc.take_snapshot()
    tracemalloc.stop()
    size = sum(s.size_diff for s in snap1.compare_to(snap0, "filename"))
    del copies
    return size // 200


def test_bytes_per_cached_pod(cluster: Any, kube: Kube, namespace: str) -> None:
    """Measure what one cached pod costs (real pods from the Job controller, JSON and Python heap)."""
    ns = namespace
    j = job("measure", 1, labels={"team": "ml", "kai.scheduler/queue": "team-a"})
    j["spec"]["template"]["metadata"] = {
        "labels": {"team": "ml", "kai.scheduler/queue": "team-a"},
        "annotations": {"example.com/note": "x" * 40},
    }
    j["spec"]["template"]["spec"]["containers"][0].update(
        env=[{"name": f"VAR_{i}", "value": "v" * 20} for i in range(5)],
        resources={"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}},
    )
    kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", j)
    full = wait_until(lambda: pods(kube, ns), 30, what="a pod")[0]
    slim = slim_pod(full)
    full_json, slim_json = len(orjson.dumps(full)), len(orjson.dumps(slim))
    full_heap, slim_heap = _deep_size(full), _deep_size(slim)
    print(
        f"\n[measure] one Job pod: full {full_json} B JSON / {full_heap} B heap; "
        f"cached {slim_json} B JSON / {slim_heap} B heap (Python dicts)"
    )
    assert slim_json < full_json / 2
    assert slim_heap < 4096
