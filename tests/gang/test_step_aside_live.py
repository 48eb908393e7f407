"""Stepping aside for a controller that groups its own pods, with the real Job controller: a control plane
with the Workload API and ``WorkloadWithJob`` on (kube-apiserver and kube-controller-manager), a Job with
``.spec.scheduling``. The Job controller writes the Workload and PodGroup and creates pods that join it;
the upstream backend's grouper (with its admission webhook) writes nothing for them and says so; the KAI
backend still writes the KAI PodGroup KAI's scheduler needs, and notes the upstream group.

JobSet v0.11.0 (the pinned operator) cannot take part: its CRD has no ``spec.scheduling`` (KEP-969 came
later) and its pod template schema predates ``spec.schedulingGroup`` (it prunes both); the JobSet rule is
unit-tested with hand-made objects (tests/core/test_step_aside.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube import Kube, fresh_namespace, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from controller.harness import GrouperThread, label_namespace
from gang.webhooks import grouper_with_webhook

from devtools.cluster import LocalCluster
from grouper.cli.main import main

pytestmark = [pytest.mark.cluster, pytest.mark.gang]

REPO = Path(__file__).resolve().parents[2]
SCHED = "scheduling.k8s.io/v1beta1"
JOB_GATE = "--feature-gates=WorkloadWithJob=true"  # after the cluster's own --feature-gates: merged


@pytest.fixture(scope="module")
def job_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(
        crds=[REPO / "deploy" / "crds"],
        workload_api=True,
        apiserver_args=[JOB_GATE],
        controller_manager_args=[JOB_GATE],
    ) as c:
        print(f"\n[devcluster] WorkloadWithJob cluster up in {c.started_in:.1f}s", file=sys.stderr)
        yield c


@pytest.fixture(scope="module")
def jkube(job_cluster: LocalCluster) -> Iterator[Kube]:
    with Kube.from_cluster(job_cluster) as k:
        yield k


@pytest.fixture
def jns(jkube: Kube) -> Iterator[str]:
    with fresh_namespace(jkube, "sa") as name:
        label_namespace(jkube, name)
        yield name


def gang_job(name: str, scheduler: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "scheduling": {"schedulingPolicy": {"gang": {"minCount": 2}}},
            "template": {
                "spec": {
                    "schedulerName": scheduler,
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}],
                }
            },
        },
    }


def job_pods(kube: Kube, ns: str, job: str, count: int) -> list[dict[str, Any]] | None:
    items = kube.list(f"/api/v1/namespaces/{ns}/pods", label_selector=f"job-name={job}")
    return items if len(items) == count else None


def stepped_aside(g: GrouperThread) -> float:
    return g.metrics.value("podgrouper_pods_stepped_aside_total", {"reason": "GroupedByController"}) or 0.0


def test_upstream_backend_steps_aside_for_the_job_controllers_gang(
    job_cluster: LocalCluster, jkube: Kube, jns: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ns = jns
    with grouper_with_webhook(job_cluster, jkube, ns, backend="upstream", scheduler_name="default-scheduler") as g:
        job = jkube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", gang_job("gang", "default-scheduler"))
        assert job["spec"].get("scheduling"), "the API server kept .spec.scheduling: WorkloadWithJob is on"
        pods = wait_until(lambda: job_pods(jkube, ns, "gang", 2), 60, what="the Job controller's 2 pods")
        theirs = {p["spec"].get("schedulingGroup", {}).get("podGroupName") for p in pods}
        (group,) = theirs
        assert group and not group.startswith("pg-"), f"the Job controller's own PodGroup, got {theirs}"
        names = sorted(p["metadata"]["name"] for p in pods)
        wait_until(lambda: all(g.store.pod(ns, n) for n in names), 30, what="decision records")
        g.wait_idle()
        for n in names:
            rec = g.store.pod(ns, n)
            assert (rec.outcome, rec.reason) == ("skipped", "GroupedByController"), rec
            assert f"Job {ns}/gang sets spec.scheduling" in rec.message
        assert stepped_aside(g) >= 2
        # what `grouper explain --server` prints from the running grouper's /pods record
        assert main(["explain", names[0], "-n", ns, "--server", f"http://127.0.0.1:{g.service.http_port}"]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"Pod {ns}/{names[0]} is not grouped (GroupedByController): Job {ns}/gang sets "
                              "spec.scheduling"), out
        # only the Job controller's objects: none of ours (pg-...), no KAI PodGroup, no pod patched
        for kind in ("workloads", "podgroups"):
            items = jkube.list(f"/apis/{SCHED}/namespaces/{ns}/{kind}")
            assert items and all(i["metadata"]["ownerReferences"][0]["kind"] == "Job" for i in items)
            assert not [i for i in items if i["metadata"]["name"].startswith("pg-")]
        assert jkube.list(f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups") == []
        assert g.requests("patch", "pods") == 0
        assert g.writes(("workloads", "podgroups")) == 0


def test_kai_backend_still_writes_the_kai_podgroup_and_notes_the_upstream_gang(
    job_cluster: LocalCluster, jkube: Kube, jns: str
) -> None:
    ns = jns
    with GrouperThread(job_cluster, ns) as g:  # KAI backend, scheduler kai-scheduler
        job = jkube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", gang_job("gang", "kai-scheduler"))
        pods = wait_until(lambda: job_pods(jkube, ns, "gang", 2), 60, what="the Job controller's 2 pods")
        assert all(p["spec"].get("schedulingGroup") for p in pods), "the Job controller put them in its group"
        name = f"pg-gang-{job['metadata']['uid']}"
        path = f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups/{name}"
        wait_until(lambda: jkube.exists(path), 30, what="the KAI PodGroup")
        g.wait_idle()
        rec = g.store.pod(ns, pods[0]["metadata"]["name"])
        assert (rec.outcome, rec.pod_group) == ("grouped", name), rec
        assert any("also in an upstream group" in n and "KAI's scheduler does not read" in n for n in rec.part.notes)  # type: ignore[union-attr]
        assert stepped_aside(g) == 0
