"""A workload of several PodGroups (a LeaderWorkerSet: one per group) has them written together, not one
after another: its pods' patches wait for the last of them, so with 125 groups the one-by-one writes
added a round trip per group to every pod of the pass. Against the real API server; the writer is
wrapped only to count the creates in flight."""

from __future__ import annotations

import asyncio
from typing import Any

from controller.harness import ANNOTATION, GrouperThread, job_pod_spec, label_namespace, owned_pod, pod_groups
from kube import Kube, wait_until

LWS = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets"
LABEL = "leaderworkerset.sigs.k8s.io/"
GROUPS, SIZE = 4, 2


def test_a_workloads_podgroups_are_written_concurrently(cluster: Any, kube: Kube, namespace: str) -> None:
    ns = namespace
    label_namespace(kube, ns)
    # one pass for the whole workload: its pods all arrive within the batch window
    with GrouperThread(cluster, ns, batch_window_seconds=3.0) as g:
        writer = g.controller.writers.pod_groups
        apply = writer.apply
        in_flight, most = 0, 0

        async def counting(md: Any) -> Any:
            nonlocal in_flight, most
            in_flight += 1
            most = max(most, in_flight)
            try:
                await asyncio.sleep(0.05)  # a slower API server: the writes would not overlap by chance
                return await apply(md)
            finally:
                in_flight -= 1

        writer.apply = counting
        owner = kube.create(LWS.format(ns=ns), {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "serve"},
            "spec": {"replicas": GROUPS, "leaderWorkerTemplate": {
                "size": SIZE, "workerTemplate": {"spec": job_pod_spec()}}},
        })
        for group in range(GROUPS):
            for worker in range(SIZE):
                labels = {f"{LABEL}name": "serve", f"{LABEL}group-index": str(group),
                          f"{LABEL}worker-index": str(worker)}
                kube.create(f"/api/v1/namespaces/{ns}/pods", owned_pod(f"serve-{group}-{worker}", labels, owner))
        pods = wait_until(
            lambda: (ps := kube.list(f"/api/v1/namespaces/{ns}/pods")) and len(ps) == GROUPS * SIZE
            and all((p["metadata"].get("annotations") or {}).get(ANNOTATION) for p in ps) and ps,
            60,
            what="every pod of the LeaderWorkerSet grouped",
        )
        g.wait_idle()
    uid = owner["metadata"]["uid"]
    expected = {f"pg-serve-{uid}-group-{i}" for i in range(GROUPS)}
    assert set(pod_groups(kube, ns)) == expected
    assert {p["metadata"]["annotations"][ANNOTATION] for p in pods} == expected
    assert most == GROUPS, f"at most {most} of the {GROUPS} PodGroup writes were in flight together"
