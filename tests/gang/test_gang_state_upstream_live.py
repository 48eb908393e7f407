"""The gang state of the upstream backend live (issue 39): a real kube-scheduler (GangScheduling) and kwok
nodes, the grouper's webhook putting pods in their gang. A gang that fits shows ``Admitted`` in ``/podgroups``
and ``/workloads`` with its time to admission (the scheduler's ``PodGroupInitiallyScheduled``); its node
deleted (and its pods, as the pod GC would), it shows ``Degraded``, with a ``GangDegraded`` Event on the workload."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from controller.harness import GrouperThread, label_namespace
from gangkit import POOL_LABEL, bound
from kube import Kube, wait_until
from test_gang_e2e import JOBSET_LABEL, gang_jobset, pod_names, submit
from webhooks import grouper_with_webhook

from devtools.cluster import LocalCluster


@pytest.fixture
def upstream(sched_cluster: LocalCluster, skube: Kube, sns: str) -> Iterator[GrouperThread]:
    label_namespace(skube, sns)
    with grouper_with_webhook(
        sched_cluster, skube, sns, backend="upstream", scheduler_name="default-scheduler"
    ) as g:
        yield g


def test_upstream_gang_admitted_then_degraded_when_its_node_goes(
    sched_cluster: LocalCluster, skube: Kube, sns: str, pool: str, upstream: GrouperThread
) -> None:
    (node,) = sched_cluster.add_nodes(1, gpus=5, labels={POOL_LABEL: pool})  # exactly the gang's 5 GPUs
    js = submit(skube, sns, gang_jobset("st", pool))
    name = f"pg-st-{js['metadata']['uid']}"
    names = wait_until(lambda: pod_names(skube, sns, 5, f"{JOBSET_LABEL}=st"), 30, what="5 pods")
    wait_until(lambda: len(bound(skube, sns, names)) == 5, 60, what="5 pods bound")

    with httpx.Client(base_url=f"http://127.0.0.1:{upstream.service.http_port}", timeout=30) as http:

        def gang(state: str) -> dict[str, Any] | None:
            items = [i for i in http.get("/podgroups", params={"namespace": sns}).json()["items"]
                     if i["name"] == name]
            g = items[0]["gang"] if items else None
            return g if g is not None and g["state"] == state else None

        g = wait_until(lambda: gang("Admitted"), 30, what="gang Admitted")
        assert (g["required"], g["present"], g["scheduled"]) == (5, 5, 5)
        assert g["admittedAt"] is not None and g["timeToAdmissionSeconds"] is not None
        workloads = [w for w in http.get("/workloads", params={"namespace": sns}).json()["items"]
                     if w["kind"] == "JobSet" and w["name"] == "st"]
        assert [w["state"] for w in workloads] == ["Admitted"]

        # the node goes; its pods with it: the test plays the pod GC (kube-controller-manager's, not run
        # here, deletes the pods of a node that no longer exists). Their replacements find no node.
        skube.delete(f"/api/v1/nodes/{node}")
        for n in names[:2]:
            skube.delete(f"/api/v1/namespaces/{sns}/pods/{n}")
        g = wait_until(lambda: gang("Degraded"), 60, interval=0.5, what="gang Degraded")
        assert g["scheduled"] < 5

        def degraded_events() -> list[dict[str, Any]]:
            return [e for e in skube.get(f"/api/v1/namespaces/{sns}/events")["items"]
                    if e["reason"] == "GangDegraded" and e["involvedObject"]["name"] == "st"]

        events = wait_until(degraded_events, 30, what="Event GangDegraded")
        assert events[0]["involvedObject"]["kind"] == "JobSet" and events[0]["type"] == "Warning"
