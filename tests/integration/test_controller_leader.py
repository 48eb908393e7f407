"""Leader election on a coordination.k8s.io/v1 Lease: only the leader writes, a standby keeps warm caches
and takes over when the leader releases the lease (clean stop) or when the lease expires (the holder
stops renewing); a leader that loses the lease stops writing at once."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from controller.harness import GrouperThread, annotated, job, label_namespace, pod_groups, pods
from kube import Kube, wait_until

from grouper.kube.cache import POD


def lease(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}")


def test_only_the_leader_writes_and_the_standby_takes_over(cluster: Any, kube: Kube, namespace: str) -> None:
    ns = namespace
    label_namespace(kube, ns)
    lease_name = f"grouper-{ns}"
    opts = {"leader_elect": True, "leader_election_namespace": ns, "leader_election_id": lease_name}
    a = GrouperThread(cluster, ns, identity="instance-a", **opts).start()
    b = GrouperThread(cluster, ns, identity="instance-b", **opts)
    try:
        wait_until(lambda: a.service.leader.is_leader(), 20, what="instance-a leads")
        b.start()
        assert lease(kube, ns, lease_name)["spec"]["holderIdentity"] == "instance-a"
        assert b.service.status.health_snapshot().synced, "the standby is ready: caches synced"
        assert not b.service.leader.is_leader() and not b.controller.workers.running

        kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job("first", 2))
        wait_until(lambda: annotated(kube, ns, 2, "job-name=first"), 30, what="first Job grouped")
        # a write is counted once its answer is read: the test's own read of the pods can come first
        wait_until(lambda: a.writes() >= 3, 5, what="the leader's 3 writes counted")
        a.wait_idle()
        assert a.writes() == 3 and b.writes() == 0
        assert len(b.controller.cache.informer(POD).list(ns)) == 2, "the standby's pod cache is warm"
        assert a.metrics.value("podgrouper_leader") == 1 and b.metrics.value("podgrouper_leader") == 0

        # clean stop of the leader releases the lease: the standby takes over without waiting for expiry
        t0 = time.monotonic()
        a.stop()
        wait_until(lambda: b.service.leader.is_leader(), 10, what="instance-b leads after the release")
        takeover = time.monotonic() - t0
        kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job("second", 2))
        wait_until(lambda: annotated(kube, ns, 2, "job-name=second"), 30, what="second Job grouped by b")
        spec = lease(kube, ns, lease_name)["spec"]
        assert spec["holderIdentity"] == "instance-b" and spec["leaseTransitions"] >= 1

        # someone else holds the lease (and never renews): b stops writing at its next renewal ...
        lease_obj = lease(kube, ns, lease_name)
        lease_obj["spec"]["holderIdentity"] = "intruder"
        kube.replace(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{lease_name}", lease_obj)
        wait_until(lambda: not b.service.leader.is_leader(), 10, what="instance-b steps down")
        assert b.metrics.value("podgrouper_leader") == 0
        writes_before = b.writes()
        kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job("third", 1))
        time.sleep(3)
        assert b.writes() == writes_before, "no writes without the lease"
        # ... and takes the lease back once the intruder's 15 s lease expired
        t1 = time.monotonic()
        wait_until(lambda: b.service.leader.is_leader(), 25, what="instance-b re-acquires after expiry")
        expiry = time.monotonic() - t1 + 3
        wait_until(lambda: annotated(kube, ns, 1, "job-name=third"), 30, what="third Job grouped")
        print(f"\n[measure] takeover after release {takeover:.2f}s; after expiry {expiry:.1f}s (lease 15 s)")
    finally:
        a.stop()
        b.stop()
    # b's clean stop released the lease
    assert lease(kube, ns, lease_name)["spec"].get("holderIdentity", "") == ""


def test_a_replica_waiting_out_a_crashed_leaders_lease_decides_meanwhile_and_then_only_writes(
    cluster: Any, kube: Kube, namespace: str
) -> None:
    """After a crash the lease stays held for its duration. The new replica campaigns from its start and,
    its caches complete, decides every workload while it waits — writing nothing — so its first pass as
    leader decides nothing again: it creates the missing PodGroup and marks the pods from the kept
    decisions."""
    ns = namespace
    label_namespace(kube, ns)
    lease_name = f"grouper-{ns}"
    kube.create(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": lease_name},
        "spec": {"holderIdentity": "crashed", "leaseDurationSeconds": 15,
                 "renewTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "leaseTransitions": 2},
    })
    # pods the crashed leader never grouped
    kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job("orphaned", 3))
    wait_until(lambda: len(pods(kube, ns, "job-name=orphaned")) == 3, 30, what="the Job's 3 pods")
    opts = {"leader_elect": True, "leader_election_namespace": ns, "leader_election_id": lease_name}
    b = GrouperThread(cluster, ns, identity="successor", **opts).start()
    try:
        decided = {"source": "decided"}
        wait_until(lambda: b.metrics.value("podgrouper_pod_decisions_total", decided) == 3, 10,
                   what="the 3 pods decided while waiting for the lease")
        assert not b.service.leader.is_leader() and not b.controller.workers.running
        assert b.writes() == 0 and lease(kube, ns, lease_name)["spec"]["holderIdentity"] == "crashed"
        pg_name = ""
        for p in pods(kube, ns, "job-name=orphaned"):
            rec = b.store.pod(ns, p["metadata"]["name"])
            assert rec is not None and rec.outcome == "grouped", rec  # /podgroups explains them already
            pg_name = rec.pod_group
        assert not pod_groups(kube, ns) and annotated(kube, ns, 3, "job-name=orphaned") is None

        wait_until(lambda: b.service.leader.is_leader(), 25, what="the successor leads once the lease ran out")
        wait_until(lambda: annotated(kube, ns, 3, "job-name=orphaned"), 30, what="the pods marked")
        wait_until(lambda: b.writes() >= 4, 5, what="the successor's writes counted")
        b.wait_idle()
        assert list(pod_groups(kube, ns)) == [pg_name]
        assert b.metrics.value("podgrouper_pod_decisions_total", decided) == 3, "nothing decided twice"
        assert b.writes() == 4, "1 PodGroup + 3 pod patches, exactly"
        assert lease(kube, ns, lease_name)["spec"]["holderIdentity"] == "successor"
    finally:
        b.stop()
