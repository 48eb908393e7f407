"""The gang state live in a running grouper (issue 39), KAI backend, on the local API server: a Job's PodGroup
gets its status written through the status subresources the way KAI's scheduler writes it (tests/kai_status.py)
and its pods bound through the binding subresource. ``/workloads`` and ``/podgroups`` carry the state and the
scheduler's reason, the Job gets ``GangAdmitted`` and ``GangDegraded`` Events, ``/metrics`` counts the gangs.

A lost member is simulated by deleting a bound pod, as the pod GC does for a node that is gone: KAI's
scheduler is not run here, and this cluster has no real nodes (so no pod GC: its pods are bound to a made-up
node). The real node loss, with kube-scheduler, kwok nodes and the pod GC, is tested on the upstream backend
(tests/gang/test_gang_state_upstream_live.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
from controller.harness import PG_PATH, GrouperThread, job
from kai_status import (
    NOT_ENOUGH_RESOURCES,
    FitError,
    clear_scheduling_conditions,
    fit_errors_message,
    mark_unschedulable,
    pod_unschedulable,
    set_last_start,
    write_pod_condition,
    write_status,
)
from kube import Kube, wait_until
from prometheus_client.parser import text_string_to_metric_families

GPU_MESSAGE = "2 node(s) didn't have enough resources: GPUs"
QUEUE_LABEL = "kai.scheduler/queue"


def scrape(http: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = http.get("/metrics").text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def sample(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def gpu_job(name: str, parallelism: int) -> dict[str, Any]:
    j = job(name, parallelism, labels={QUEUE_LABEL: "team-a"},
            annotations={"kai.scheduler/batch-min-member": str(parallelism)})  # a gang of all its pods
    j["spec"]["template"]["metadata"] = {"labels": {QUEUE_LABEL: "team-a"}}
    j["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return j


def test_kai_gang_waiting_admitted_degraded_live(kube: Kube, scoped: str, grouper: GrouperThread) -> None:
    ns = scoped
    pods_path = f"/api/v1/namespaces/{ns}/pods"
    kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", gpu_job("train", 2))

    def grouped() -> list[dict[str, Any]] | None:
        ps = [p for p in kube.get(pods_path)["items"] if not p["metadata"].get("deletionTimestamp")]
        ok = len(ps) == 2 and all((p["metadata"].get("annotations") or {}).get("pod-group-name") for p in ps)
        return ps if ok else None

    pods = wait_until(grouped, 60, what="2 pods with their PodGroup")
    pg_name = pods[0]["metadata"]["annotations"]["pod-group-name"]
    pg_path = f"{PG_PATH.format(ns=ns)}/{pg_name}"

    # KAI's scheduler cannot place the gang: its condition on the PodGroup, PodScheduled=False on the pods
    pg = kube.get(pg_path)
    errors = [FitError(NOT_ENOUGH_RESOURCES, [GPU_MESSAGE])]
    now = datetime.now(UTC)
    assert mark_unschedulable(pg, errors, now=now)
    write_status(kube, pg_path, pg)
    for p in pods:
        write_pod_condition(kube, f"{pods_path}/{p['metadata']['name']}",
                            pod_unschedulable(p, fit_errors_message(errors), now=now))

    with httpx.Client(base_url=f"http://127.0.0.1:{grouper.service.http_port}", timeout=30) as http:

        def workload(state: str) -> dict[str, Any] | None:
            items = [w for w in http.get("/workloads", params={"namespace": ns}).json()["items"]
                     if w["kind"] == "Job" and w["name"] == "train"]
            return items[0] if items and items[0]["state"] == state else None

        w = wait_until(lambda: workload("Waiting"), 30, what="workload train Waiting")
        gang = w["gangs"][0]
        assert gang["podGroup"] == pg_name and gang["queue"] == "team-a"
        assert (gang["required"], gang["present"], gang["scheduled"], gang["requestedGPUs"]) == (2, 2, 0, 2)
        assert [(r["source"], r["reason"], r["message"]) for r in gang["reasons"]] == [
            ("PodGroup", NOT_ENOUGH_RESOURCES, GPU_MESSAGE), ("Pod", "Unschedulable", fit_errors_message(errors))]
        listed = http.get("/podgroups", params={"namespace": ns}).json()["items"]
        assert [i["gang"]["state"] for i in listed if i["name"] == pg_name] == ["Waiting"]
        m = scrape(http)
        assert sample(m, "podgrouper_gangs", state="Waiting", queue="team-a") == 1
        assert sample(m, "podgrouper_gang_pods", state="Waiting", queue="team-a") == 2
        assert sample(m, "podgrouper_gang_requested_gpus", state="Waiting", queue="team-a") == 2
        assert sample(m, "podgrouper_gang_oldest_seconds", state="Waiting", queue="team-a") is not None
        assert sample(m, "podgrouper_gangs", state="Admitted", queue="team-a") == 0
        assert not [k for k in m if k[0] == "podgrouper_workload_info"]  # off by default

        # bound through the binding subresource, the scheduler's start record written: Admitted
        for p in pods:
            name = p["metadata"]["name"]
            kube.create(f"{pods_path}/{name}/binding", {
                "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}})
        pg = kube.get(pg_path)
        clear_scheduling_conditions(pg)
        set_last_start(pg, datetime.now(UTC))
        write_status(kube, pg_path, pg)
        w = wait_until(lambda: workload("Admitted"), 30, what="workload train Admitted")
        gang = w["gangs"][0]
        assert gang["scheduled"] == 2 and gang["reasons"] == []
        assert gang["admittedAt"] is not None and gang["timeToAdmissionSeconds"] is not None
        assert gang["timeToAdmissionSeconds"] >= 0
        detail = http.get(f"/podgroups/{ns}/{pg_name}").json()
        assert detail["gang"]["state"] == "Admitted"

        def events(reason: str) -> list[dict[str, Any]]:
            return [e for e in kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
                    if e["reason"] == reason and e["involvedObject"]["kind"] == "Job"
                    and e["involvedObject"]["name"] == "train"]

        admitted = wait_until(lambda: events("GangAdmitted"), 30, what="Event GangAdmitted")
        assert len(admitted) == 1 and admitted[0]["type"] == "Normal"
        assert "after its first pod was created" in admitted[0]["message"]
        m = scrape(http)
        assert sample(m, "podgrouper_gang_transitions_total", **{"from": "Waiting", "to": "Admitted"}) == 1
        assert sample(m, "podgrouper_gang_time_to_admission_seconds_count", queue="team-a") == 1

        # a bound pod deleted: below the minimum (the Job's replacement is not bound)
        kube.delete(f"{pods_path}/{pods[1]['metadata']['name']}")
        w = wait_until(lambda: workload("Degraded"), 30, what="workload train Degraded")
        degraded = wait_until(lambda: events("GangDegraded"), 30, what="Event GangDegraded")
        assert len(degraded) == 1 and degraded[0]["type"] == "Warning"
        assert "1 of the 2 pods it needs are scheduled" in degraded[0]["message"]
        m = scrape(http)
        assert sample(m, "podgrouper_gangs", state="Degraded", queue="team-a") == 1
        assert sample(m, "podgrouper_gang_transitions_total", **{"from": "Admitted", "to": "Degraded"}) == 1
        assert len(events("GangAdmitted")) == 1  # one Event per transition
        # the workload page's Events: those the grouper sent, newest first (no right to list Events needed)
        sent = http.get(f"/workloads/{ns}/Job/train").json()["events"]
        assert [e["reason"] for e in sent] == ["GangDegraded", "GangAdmitted"], sent
