"""Leader election on a coordination.k8s.io/v1 Lease: only the leader writes, a standby keeps warm caches
and takes over when the leader releases the lease (clean stop) or when the lease expires (the holder
stops renewing); a leader that loses the lease stops writing at once."""

from __future__ import annotations

import time
from typing import Any

from controller.harness import GrouperThread, annotated, job, label_namespace
from kube import Kube, wait_until

from grouper.controller.cache import POD


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
        assert b.controller.ready()[0], "the standby is ready: caches synced"
        assert not b.service.leader.is_leader() and not b.controller.workers_running

        kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job("first", 2))
        wait_until(lambda: annotated(kube, ns, 2, "job-name=first"), 30, what="first Job grouped")
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
