"""Issue 39's "Done when" on the upstream backend, end to end: a real kube-scheduler (GangScheduling), kwok
nodes, kube-controller-manager's pod garbage collector (as in any cluster with nodes: devtools.cluster
``pod_gc``), a running grouper with its webhook putting pods in their gang.

- a gang that fits is ``Admitted``, with its time to admission (from the scheduler's
  ``PodGroupInitiallyScheduled``);
- a gang that does not fit is ``Waiting``, with the scheduler's reason verbatim;
- the node holding the admitted gang deleted: its pods stay bound to a node that is gone (still scheduled,
  still ``Admitted``) until the pod GC deletes them, then the gang is ``Degraded`` (the Job controller's
  replacements find no node), with a ``GangDegraded`` Event on the workload.

Each fact is read where people look: ``/workloads`` of the running grouper, ``grouper why`` (the CLI reading
the cluster), its ``/metrics``: ``podgrouper_gangs{state}`` and, turned on here, the per-workload
``podgrouper_workload_info{namespace,kind,name,queue,state}``. The gang metrics count every PodGroup the
grouper caches, those of other tests' namespaces too (``--namespace-label-selector`` scopes grouping, not the
caches), so the exact facts of this test's gangs come from the per-workload series.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from controller.harness import GrouperThread, label_namespace
from gangkit import POOL_LABEL, bound
from kube import Kube, wait_until
from prometheus_client.parser import text_string_to_metric_families
from test_gang_e2e import JOBSET_LABEL, SCHED, gang_jobset, pod_names, submit
from webhooks import grouper_with_webhook

from devtools.cluster import LocalCluster
from grouper.cli.gang_report import duration, gang_now
from grouper.cli.main import main
from grouper.core.gang_state import State, parse_time

# a gang's pods are gone 40-80 s after their node (the pod GC's pass every 20 s and 40 s quarantine); slack
# for a loaded machine
POD_GC_TIMEOUT = 180


@pytest.fixture
def upstream(sched_cluster: LocalCluster, skube: Kube, sns: str) -> Iterator[GrouperThread]:
    label_namespace(skube, sns)
    with grouper_with_webhook(
        sched_cluster, skube, sns, backend="upstream", scheduler_name="default-scheduler",
        workload_info_metrics=True,
    ) as g:
        yield g


def samples(http: httpx.Client, name: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for f in text_string_to_metric_families(http.get("/metrics").text)
            for s in f.samples if s.name == name]


def gangs_metric(http: httpx.Client) -> dict[str, float]:
    """``podgrouper_gangs`` by state (the upstream API has no queue: ``queue=""``)."""
    return {labels["state"]: value for labels, value in samples(http, "podgrouper_gangs") if labels["queue"] == ""}


def workload_states(http: httpx.Client, ns: str) -> dict[str, str]:
    """JobSet name -> its state, from the ``podgrouper_workload_info`` series of ``ns`` (value 1 each)."""
    out = {}
    for labels, value in samples(http, "podgrouper_workload_info"):
        if labels["namespace"] == ns and labels["kind"] == "JobSet":
            assert value == 1 and labels["name"] not in out, labels  # one series per workload
            out[labels["name"]] = labels["state"]
    return out


def transitions(http: httpx.Client, before: str, after: str) -> float:
    return sum(v for labels, v in samples(http, "podgrouper_gang_transitions_total")
               if labels == {"from": before, "to": after})


def condition(kube: Kube, ns: str, pg: str) -> dict[str, Any] | None:
    """The upstream PodGroup's ``PodGroupInitiallyScheduled`` condition, as kube-scheduler wrote it."""
    path = f"/apis/{SCHED}/namespaces/{ns}/podgroups/{pg}"
    if not kube.exists(path):
        return None
    conds = (kube.get(path).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == "PodGroupInitiallyScheduled"), None)


def test_admitted_waiting_then_degraded_when_a_node_goes_everywhere(
    capsys: pytest.CaptureFixture[str], sched_cluster: LocalCluster, skube: Kube, sns: str, pool: str,
    upstream: GrouperThread,
) -> None:
    ns, tight = sns, f"p-{uuid.uuid4().hex[:8]}"
    (node,) = sched_cluster.add_nodes(1, gpus=5, labels={POOL_LABEL: pool})  # exactly the gang's 5 GPUs
    sched_cluster.add_nodes(1, gpus=4, labels={POOL_LABEL: tight})  # one GPU short of the other gang
    fits = submit(skube, ns, gang_jobset("fits", pool))
    waits = submit(skube, ns, gang_jobset("waits", tight))
    fits_pg, waits_pg = (f"pg-{js['metadata']['name']}-{js['metadata']['uid']}" for js in (fits, waits))
    names = wait_until(lambda: pod_names(skube, ns, 5, f"{JOBSET_LABEL}=fits"), 30, what="5 pods of fits")
    wait_until(lambda: len(bound(skube, ns, names)) == 5, 60, what="5 pods of fits bound")
    admitted = wait_until(lambda: (c := condition(skube, ns, fits_pg)) and c["status"] == "True" and c, 30,
                          what="fits admitted by kube-scheduler")
    held = wait_until(lambda: (c := condition(skube, ns, waits_pg)) and c["status"] == "False" and c, 90,
                      what="waits found unschedulable by kube-scheduler")
    created = [parse_time(skube.get(f"/api/v1/namespaces/{ns}/pods/{n}")["metadata"]["creationTimestamp"])
               for n in names]
    admitted_at = parse_time(admitted["lastTransitionTime"])
    assert admitted_at is not None and None not in created
    time_to_admission = (admitted_at - min(t for t in created if t is not None)).total_seconds()

    def why(name: str, *args: str) -> str:
        code = main(["why", f"jobset/{name}", "-n", ns, "--kubeconfig", sched_cluster.kubeconfig_path,
                     "--backend", "upstream", "--scheduler-name", "default-scheduler", *args])
        out, _ = capsys.readouterr()
        assert code == 0, out
        return out

    with httpx.Client(base_url=f"http://127.0.0.1:{upstream.service.http_port}", timeout=30) as http:

        def workload(name: str, state: str) -> dict[str, Any] | None:
            items = [w for w in http.get("/workloads", params={"namespace": ns}).json()["items"]
                     if w["kind"] == "JobSet" and w["name"] == name]
            return items[0] if items and items[0]["state"] == state else None

        # 1. the gang that fits: Admitted, with its time to admission
        w = wait_until(lambda: workload("fits", "Admitted"), 30, what="fits Admitted in /workloads")
        (g,) = w["gangs"]
        assert (g["podGroup"], g["required"], g["present"], g["scheduled"]) == (fits_pg, 5, 5, 5)
        assert g["admittedAt"] is not None and g["timeToAdmissionSeconds"] is not None
        admission = (g["admittedAt"], g["timeToAdmissionSeconds"])
        out = why("fits")
        assert out.startswith(f"JobSet {ns}/fits is Admitted: the scheduler placed every pod its minimums need.")
        assert "  Has: 5 present, 5 scheduled" in out
        assert (f"  Admitted at {admitted['lastTransitionTime']} after {duration(time_to_admission)} "
                "(from the first pod's creation).") in out

        # 2. the gang that does not fit: Waiting, with kube-scheduler's reason verbatim
        w = wait_until(lambda: workload("waits", "Waiting"), 30, what="waits Waiting in /workloads")
        (g,) = w["gangs"]
        assert (g["podGroup"], g["required"], g["present"], g["scheduled"]) == (waits_pg, 5, 5, 0)
        assert {"source": "PodGroup", "reason": held["reason"], "message": held["message"]}.items() <= \
            next(r for r in g["reasons"] if r["source"] == "PodGroup").items()
        out = why("waits")
        assert out.startswith(f"JobSet {ns}/waits is Waiting: every pod the gang needs is there, but the "
                              "scheduler has not placed enough of them.")
        assert (f"    PodGroup PodGroupInitiallyScheduled, since {held['lastTransitionTime']}: "
                f"{held['reason']}: {held['message']}") in out
        wait_until(lambda: workload_states(http, ns) == {"fits": "Admitted", "waits": "Waiting"}, 30,
                   what="podgrouper_workload_info: fits Admitted, waits Waiting")
        gangs = gangs_metric(http)
        assert gangs["Admitted"] >= 1 and gangs["Waiting"] >= 1

        # 3. the node goes. Its pods stay bound to it until the pod GC deletes them: until then they count
        # as scheduled, the gang is still Admitted (the scheduler's view; the grouper watches no Nodes)
        sched_cluster.delete_node(node)
        assert len(bound(skube, ns, names)) == 5
        assert workload("fits", "Admitted") is not None
        assert why("fits").startswith(f"JobSet {ns}/fits is Admitted")
        still = skube.list(f"/api/v1/namespaces/{ns}/pods", label_selector=f"{JOBSET_LABEL}=fits")
        assert sorted(p["metadata"]["name"] for p in still if not p["metadata"].get("deletionTimestamp")) == names, \
            "the pod GC acted within its quarantine: the Admitted above proves nothing"

        # the pod GC deletes them (kube-controller-manager's, not the test); the Job controller's
        # replacements find no node: Degraded
        w = wait_until(lambda: workload("fits", "Degraded"), POD_GC_TIMEOUT, interval=1,
                       what="fits Degraded in /workloads once the pod GC deleted its pods")
        (g,) = w["gangs"]
        assert g["required"] == 5 and g["scheduled"] < 5
        assert (g["admittedAt"], g["timeToAdmissionSeconds"]) == admission  # the first admission is kept
        log = sched_cluster.log_path("kube-controller-manager").read_text()
        assert any(f'"Forced deletion of orphaned Pod succeeded" pod="{ns}/{n}"' in log for n in names)

        def degraded_events() -> list[dict[str, Any]]:
            return [e for e in skube.get(f"/api/v1/namespaces/{ns}/events")["items"]
                    if e["reason"] == "GangDegraded" and e["involvedObject"]["name"] == "fits"]

        (event,) = wait_until(degraded_events, 30, what="Event GangDegraded")
        assert event["involvedObject"]["kind"] == "JobSet" and event["type"] == "Warning"
        assert "of the 5 pods it needs are scheduled" in event["message"]
        out = why("fits")
        assert out.startswith(f"JobSet {ns}/fits is Degraded: it was admitted, and is now below a minimum")
        # the admission is kept; how long it took, only the running grouper remembers (the pods it was
        # measured from are gone: test_a_gang_whose_admitted_pods_are_all_gone_has_no_known_time_to_admission)
        assert f"  Admitted at {admitted['lastTransitionTime']}" in out
        wait_until(lambda: workload_states(http, ns) == {"fits": "Degraded", "waits": "Waiting"}, 30,
                   what="podgrouper_workload_info: fits Degraded, waits Waiting")
        assert gangs_metric(http)["Degraded"] >= 1
        assert transitions(http, "Admitted", "Degraded") >= 1
        assert workload("waits", "Waiting") is not None  # the other gang is untouched


def test_a_gang_whose_admitted_pods_are_all_gone_has_no_known_time_to_admission() -> None:
    """What ``grouper why`` met above, from the objects alone: the scheduler admitted the gang at 10:00:05,
    its pods were deleted with their node, the Job controller's replacement was created at 10:02:00."""
    pod_group = {
        "apiVersion": SCHED, "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "ns", "creationTimestamp": "2026-12-05T10:00:01Z"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 5}}},
        "status": {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled",
                                   "lastTransitionTime": "2026-12-05T10:00:05Z"}]},
    }
    replacement = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "fits-workers-0-0-x", "namespace": "ns", "creationTimestamp": "2026-12-05T10:02:00Z"},
        "spec": {"schedulingGroup": {"podGroupName": "pg"}, "containers": [{"name": "c"}]},
    }
    gs = gang_now(pod_group, [replacement], now=parse_time("2026-12-05T10:03:00Z")).state  # type: ignore[arg-type]
    assert gs.state == State.DEGRADED and gs.admitted_at == parse_time("2026-12-05T10:00:05Z")
    assert gs.time_to_admission is None
