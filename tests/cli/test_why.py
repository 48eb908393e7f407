"""``grouper why KIND/NAME`` and the STATE column of ``grouper get workloads``, against the real API server.

The KAI backend's scheduler is played by tests/kai_status.py (PodGroup status and pod conditions written
exactly as KAI's scheduler writes them, through the status subresources) and pods are bound through the
pods/binding subresource, as a scheduler binds them. The command's clock is ``grouper.cli.common.now``,
set here to a fixed moment, so every duration printed is known.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import kai_status
import pytest
import yaml
from api.workloads import create_bad_job, create_pytorchjob, pg_list, pods
from controller.harness import GrouperThread, label_namespace
from kube import Kube, wait_until

from grouper.api.models import GangView
from grouper.cli import common
from grouper.cli.gang_report import duration
from grouper.cli.main import main
from grouper.core.gang_state import parse_time

KAI_PG = "/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups/{name}"
MESSAGE = "Not enough resources for the workload: node(s) didn't have enough resources: nvidia.com/gpu"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def node(kube: Kube) -> Iterator[str]:
    """A Node object to bind to (no kubelet: the pods stay as bound), deleted afterwards."""
    name = f"why-{uuid.uuid4().hex[:8]}"
    kube.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    yield name
    kube.delete(f"/api/v1/nodes/{name}", ignore_missing=True)


def bind(kube: Kube, ns: str, pod: str, node: str) -> None:
    kube.create(f"/api/v1/namespaces/{ns}/pods/{pod}/binding",
                {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
                 "target": {"apiVersion": "v1", "kind": "Node", "name": node}})


def first_created(kube: Kube, ns: str) -> datetime:
    moment = min(parse_time(p["metadata"]["creationTimestamp"]) for p in pods(kube, ns))  # type: ignore[type-var]
    assert moment is not None
    return moment


def test_kai_gang_from_grouping_to_waiting_admitted_and_degraded(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, cluster: Any, kube: Kube, namespace: str,
    node: str,
) -> None:
    ns, kc = namespace, cluster.kubeconfig_path
    label_namespace(kube, ns)
    create_pytorchjob(kube, ns)
    job_uid = kube.get(f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs/llama-finetune")["metadata"]["uid"]
    pg = f"pg-llama-finetune-{job_uid}"
    t0 = first_created(kube, ns)
    now = t0 + timedelta(minutes=7)
    monkeypatch.setattr(common, "now", lambda: now)
    why = ("why", "pytorchjob/llama-finetune", "-n", ns, "--kubeconfig", kc)

    # errors: unknown kind, missing workload
    code, _, err = run_cli(capsys, "why", "nosuchkind/x", "-n", ns, "--kubeconfig", kc)
    assert code == 3 and "no Karta definition or plugin covers 'nosuchkind'" in err
    code, _, err = run_cli(capsys, "why", "pytorchjob/absent", "-n", ns, "--kubeconfig", kc)
    assert code == 4 and f"PyTorchJob {ns}/absent not found" in err

    # 1. no PodGroup yet: Grouping, the plan names the PodGroup to come
    code, out, _ = run_cli(capsys, *why)
    assert code == 5, out
    assert out.startswith(f"PyTorchJob {ns}/llama-finetune is Grouping: the grouper has not grouped it yet "
                          "(no PodGroup in the cluster).")
    assert f"The grouper's plan (PyTorchJob Grouper, 5 pods): {pg}." in out
    assert f"PodGroup {pg} (planned; not in the cluster yet)" in out
    assert f"  State: Grouping for 7m (since {kai_status.rfc3339(t0)})" in out
    # what it will need comes from the plan: the PyTorchJob's master and workers, its pods placed by the plan
    assert "  Needs: 5 scheduled pods (minMember 5, all 2 top-level sub-groups)." in out
    assert "  Has: 5 present, 0 scheduled (40 GPUs requested)." in out
    assert "      worker-1: 2 / 2 / 0 (not met)" in out

    # the grouper writes the PodGroup and annotates the pods
    with GrouperThread(cluster, ns) as g:
        wait_until(lambda: len(pg_list(kube, ns)) == 1 and all(
            (p["metadata"].get("annotations") or {}).get("pod-group-name") == pg for p in pods(kube, ns)),
            60, what="PodGroup and annotated pods")
        g.wait_idle(30)

    # 2. KAI's scheduler cannot place the gang: Waiting, with its reasons verbatim
    path = KAI_PG.format(ns=ns, name=pg)
    stored = kube.get(path)
    held_at = t0 + timedelta(minutes=2)
    fit = kai_status.FitError(kai_status.NOT_ENOUGH_RESOURCES,
                              ["node(s) didn't have enough resources: nvidia.com/gpu"])
    assert kai_status.mark_unschedulable(stored, [fit], now=held_at)
    kai_status.write_status(kube, path, stored)
    names = sorted(p["metadata"]["name"] for p in pods(kube, ns))
    for p in pods(kube, ns):
        held = kai_status.pod_unschedulable(p, kai_status.fit_errors_message([fit]), now=held_at)
        kai_status.write_pod_condition(kube, f"/api/v1/namespaces/{ns}/pods/{p['metadata']['name']}", held)

    code, out, _ = run_cli(capsys, *why, "--limit", "2")
    assert code == 0, out
    assert out.startswith(f"PyTorchJob {ns}/llama-finetune is Waiting: every pod the gang needs is there, but the "
                          "scheduler has not placed enough of them.")
    assert f"PodGroup {pg} (scheduling.run.ai/v2alpha2, queue team-a)" in out
    # waiting since the gang formed: the creation of its last (5th) pod
    formed = max(parse_time(p["metadata"]["creationTimestamp"]) for p in pods(kube, ns))  # type: ignore[type-var]
    assert f"  State: Waiting for {duration((now - formed).total_seconds())} (since {kai_status.rfc3339(formed)})" in out
    assert "  Needs: 5 scheduled pods (minMember 5, all 2 top-level sub-groups)." in out
    assert "  Has: 5 present, 0 scheduled (40 GPUs requested)." in out
    assert (f"    PodGroup UnschedulableOnNodePool on node pool default, since {kai_status.rfc3339(held_at)}: "
            f"{MESSAGE}") in out
    assert (f"    5 pods PodScheduled=False ({names[0]}, {names[1]} and 3 more): Unschedulable: "
            f"{kai_status.fit_errors_message([fit])}") in out

    code, out, _ = run_cli(capsys, *why, "-o", "json")
    assert code == 0
    body = json.loads(out)
    assert body["state"] == "Waiting" and body["workload"] == {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "llama-finetune"}
    (gang,) = body["gangs"]
    GangView.model_validate(gang)  # the API's shape, field for field
    assert (gang["podGroup"], gang["required"], gang["present"], gang["scheduled"]) == (pg, 5, 5, 0)
    assert gang["reasons"][0] == {"source": "PodGroup", "reason": kai_status.NOT_ENOUGH_RESOURCES,
                                  "message": "node(s) didn't have enough resources: nvidia.com/gpu",
                                  "type": "UnschedulableOnNodePool", "nodePool": "default", "pods": [],
                                  "since": kai_status.rfc3339(held_at)}
    assert gang["reasons"][1]["pods"] == names
    code, out, _ = run_cli(capsys, *why, "-o", "yaml")
    assert code == 0 and yaml.safe_load(out) == body

    # get workloads: STATE, and -o wide QUEUE WAITING REASON
    code, out, _ = run_cli(capsys, "get", "workloads", "-n", ns, "--kubeconfig", kc)
    assert code == 0, out
    header, *rows = out.splitlines()
    assert header.split() == ["NAMESPACE", "NAME", "KIND", "PHASE", "STATE", "COMPONENTS", "GPU", "AGE"]
    row = next(r for r in rows if "llama-finetune" in r)
    assert row.split()[4] == "Waiting"
    code, out, _ = run_cli(capsys, "get", "workloads", "-n", ns, "-o", "wide", "--kubeconfig", kc)
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split()[-3:] == ["QUEUE", "WAITING", "REASON"]
    row = next(r for r in rows if "llama-finetune" in r)
    reason_at = header.index("REASON")
    assert row[reason_at:] == f"{MESSAGE}"[:57] + "..."
    assert row[header.index("QUEUE"):header.index("WAITING")].strip() == "team-a"
    code, out, _ = run_cli(capsys, "get", "workloads", "-n", ns, "-o", "json", "--kubeconfig", kc)
    item = next(i for i in json.loads(out)["items"] if i["name"] == "llama-finetune")
    assert item["state"] == "Waiting" and [GangView.model_validate(x).podGroup for x in item["gangs"]] == [pg]

    # 3. the scheduler binds the gang and records the start: Admitted, with the time to admission
    for n in names:
        bind(kube, ns, n, node)
    started = t0 + timedelta(seconds=150)
    stored = kube.get(path)
    kai_status.set_last_start(stored, started)
    kai_status.clear_scheduling_conditions(stored)
    kai_status.write_status(kube, path, stored)
    code, out, _ = run_cli(capsys, *why)
    assert code == 0, out
    assert out.startswith(f"PyTorchJob {ns}/llama-finetune is Admitted: the scheduler placed every pod its "
                          "minimums need.")
    assert "  State: Admitted for 4m30s (since" in out
    assert "  Has: 5 present, 5 scheduled" in out
    assert f"  Admitted at {kai_status.rfc3339(started)} after 2m30s (from the first pod's creation)." in out
    assert "The scheduler said" not in out
    gang = json.loads(run_cli(capsys, *why, "-o", "json")[1])["gangs"][0]
    assert (gang["state"], gang["timeToAdmissionSeconds"], gang["admittedAt"]) == (
        "Admitted", 150.0, kai_status.rfc3339(started))
    code, out, _ = run_cli(capsys, "get", "workloads", "-n", ns, "-o", "wide", "--kubeconfig", kc)
    row = next(r for r in out.splitlines() if "llama-finetune" in r)
    assert row.split()[4] == "Admitted" and row.split()[-3:] == ["team-a", "-", "-"]

    # 4. a bound pod goes away: Degraded (the scheduler's start record says it was admitted)
    kube.delete(f"/api/v1/namespaces/{ns}/pods/{names[-1]}")
    code, out, _ = run_cli(capsys, *why)
    assert code == 0, out
    assert out.startswith(f"PyTorchJob {ns}/llama-finetune is Degraded: it was admitted, and is now below a minimum")
    assert "  State: Degraded (since when, the cluster does not record; a running grouper's /workloads says)" in out
    assert "  Has: 4 present, 4 scheduled" in out
    assert "      worker-1: 2 / 1 / 1 (not met)" in out
    assert f"  Admitted at {kai_status.rfc3339(started)} after 2m30s" in out  # the first admission is kept
    code, out, _ = run_cli(capsys, "get", "workloads", "-n", ns, "-o", "wide", "--kubeconfig", kc)
    row = next(r for r in out.splitlines() if "llama-finetune" in r)
    assert row.split()[4] == "Degraded" and row.split()[-3:-1] == ["team-a", "?"]


def test_a_workload_whose_grouping_fails_is_in_error(
    capsys: pytest.CaptureFixture[str], cluster: Any, kube: Kube, namespace: str
) -> None:
    """The Job controller makes the pod; its ``kai.scheduler/batch-min-member`` is not an integer."""
    job = create_bad_job(kube, namespace)
    name = job["metadata"]["name"]
    wait_until(lambda: pods(kube, namespace), 30, what="the Job's pod")
    code, out, _ = run_cli(capsys, "why", f"job/{name}", "-n", namespace, "--kubeconfig", cluster.kubeconfig_path)
    assert code == 5, out
    first = out.splitlines()[0]
    assert first.startswith(f"Job {namespace}/{name} is Error: grouping it failed: ") and \
        "kai.scheduler/batch-min-member" in first
    assert "could not be grouped (InvalidWorkload)" in out
