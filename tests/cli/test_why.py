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
from clusters import REPO, cluster_fixture
from controller.harness import GrouperThread, label_namespace
from kube import Kube, fresh_namespace, wait_until

from devtools.cluster import LocalCluster
from grouper.api.models import GangView
from grouper.cli import common
from grouper.cli.commands.get import server_get
from grouper.cli.gang_report import duration
from grouper.cli.main import main
from grouper.core.gang_state import parse_time
from grouper.core.upstream import initially_scheduled
from grouper.manifests import load_manifests

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
        # --server: STATE is what the grouper's /workloads says (`-` from a grouper that sends no state)
        server = f"http://127.0.0.1:{g.service.http_port}"
        sent = next(i for i in server_get(server, "/workloads", {"namespace": ns})["items"]
                    if i["name"] == "llama-finetune")
        code, out, _ = run_cli(capsys, "get", "workloads", "-n", ns, "--server", server, "-o", "wide")
        assert code == 0, out
        header, *rows = out.splitlines()
        assert header.split()[4] == "STATE" and header.split()[-3:] == ["QUEUE", "WAITING", "REASON"]
        row = next(r for r in rows if "llama-finetune" in r)
        assert row.split()[4] == (sent.get("state") or "-")

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


# ----------------------------------------------------------------------------------------------- upstream

# the gang tests' cluster (a real kube-scheduler, kwok nodes, the Workload API): one control plane for both
sched_cluster = cluster_fixture("sched_cluster", scheduler=True)
POOL_LABEL = "test.kai-pod-grouper.io/pool"
SCHED = "scheduling.k8s.io/v1beta1"


@pytest.fixture
def skube(sched_cluster: LocalCluster) -> Iterator[Kube]:
    with Kube.from_cluster(sched_cluster) as k:
        yield k


def unschedulable_pods(kube: Kube, ns: str) -> dict[str, dict[str, Any]]:
    """Pod name -> its PodScheduled=False condition."""
    out = {}
    for p in pods(kube, ns):
        c = next((c for c in p["status"].get("conditions") or [] if c.get("type") == "PodScheduled"), None)
        if c is not None and c.get("status") == "False":
            out[p["metadata"]["name"]] = c
    return out


def upstream_pytorchjob(kube: Kube, ns: str, pool: str) -> str:
    """The PyTorchJob example (master 1, workers 4) with its pods created as the training operator would and
    put in their gang at creation as the grouper's webhook does (``spec.schedulingGroup``), 1 GPU each on
    the nodes of ``pool``, for kube-scheduler. Returns the gang's PodGroup name."""
    objs = [m.obj for m in load_manifests([REPO / "examples" / "pytorchjob.yaml"])]
    # without the example's topology annotations: a required topology level the kwok nodes lack never fits
    job = {**objs[0], "metadata": {k: v for k, v in objs[0]["metadata"].items() if k in ("name", "labels")}}
    job = kube.create(f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs", job)
    pg = f"pg-{job['metadata']['name']}-{job['metadata']['uid']}"
    for raw in objs[1:]:
        meta = {k: v for k, v in raw["metadata"].items() if k in ("name", "labels", "ownerReferences")}
        meta["ownerReferences"] = [{**meta["ownerReferences"][0], "uid": job["metadata"]["uid"]}]
        spec = {**raw["spec"], "schedulerName": "default-scheduler", "nodeSelector": {POOL_LABEL: pool},
                "schedulingGroup": {"podGroupName": pg}}
        spec["containers"] = [{**spec["containers"][0], "resources": {
            "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]
        kube.create(f"/api/v1/namespaces/{ns}/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                                                     "spec": spec})
    return pg


def test_upstream_gang_waits_with_the_schedulers_reason_then_is_admitted(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, sched_cluster: LocalCluster, skube: Kube,
) -> None:
    pool = f"p-{uuid.uuid4().hex[:8]}"
    sched_cluster.add_nodes(1, gpus=4, labels={POOL_LABEL: pool})  # 4 GPUs: the gang of 5 does not fit
    with fresh_namespace(skube, "w") as ns:
        label_namespace(skube, ns)
        pg = upstream_pytorchjob(skube, ns, pool)
        t0 = first_created(skube, ns)
        now = t0 + timedelta(hours=1)
        monkeypatch.setattr(common, "now", lambda: now)
        why = ("why", "pytorchjob/llama-finetune", "-n", ns, "--kubeconfig", sched_cluster.kubeconfig_path,
               "--backend", "upstream", "--scheduler-name", "default-scheduler")
        path = f"/apis/{SCHED}/namespaces/{ns}/podgroups/{pg}"
        with GrouperThread(sched_cluster, ns, backend="upstream", scheduler_name="default-scheduler"):
            wait_until(lambda: initially_scheduled(skube.get(path))[0] == "False" if skube.exists(path) else None,
                       90, what="kube-scheduler found the gang unschedulable")
            held = wait_until(lambda: len(h := unschedulable_pods(skube, ns)) == 5 and h, 30,
                              what="the pods marked PodScheduled=False")
            stored = skube.get(path)
            cond = next(c for c in stored["status"]["conditions"] if c["type"] == "PodGroupInitiallyScheduled")
            code, out, _ = run_cli(capsys, *why, "--limit", "0")
            assert code == 0, out
            assert out.startswith(f"PyTorchJob {ns}/llama-finetune is Waiting:")
            assert f"PodGroup {pg} ({SCHED}, queue team-a)" in out, out
            assert "  Needs: 5 scheduled pods (spec.schedulingPolicy.gang.minCount 5)." in out
            assert "  Has: 5 present, 0 scheduled (5 GPUs requested)." in out
            assert (f"    PodGroup PodGroupInitiallyScheduled, since {cond['lastTransitionTime']}: "
                    f"{cond['reason']}: {cond['message']}") in out  # verbatim
            # kube-scheduler's own words on the pods, verbatim too, grouped by message with the pods named
            by_message: dict[tuple[str, str], list[str]] = {}
            for name, c in held.items():
                by_message.setdefault((c["reason"], c["message"]), []).append(name)
            for (reason, message), names in by_message.items():
                assert (f"PodScheduled=False ({', '.join(sorted(names))}): {reason}: {message}") in out

            sched_cluster.add_nodes(1, gpus=4, labels={POOL_LABEL: pool})
            wait_until(lambda: initially_scheduled(skube.get(path))[0] == "True", 90, what="the gang admitted")
            stored = skube.get(path)
            admitted = next(c for c in stored["status"]["conditions"] if c["type"] == "PodGroupInitiallyScheduled")
            wait_until(lambda: all(p["spec"].get("nodeName") for p in pods(skube, ns)), 30, what="5 pods bound")
            code, out, _ = run_cli(capsys, *why, "-o", "json")
            assert code == 0
            (gang,) = json.loads(out)["gangs"]
            GangView.model_validate(gang)
            at = parse_time(admitted["lastTransitionTime"])
            assert at is not None
            assert (gang["state"], gang["scheduled"], gang["admittedAt"]) == ("Admitted", 5, admitted["lastTransitionTime"])
            assert gang["timeToAdmissionSeconds"] == (at - t0).total_seconds()
            code, out, _ = run_cli(capsys, *why)
            assert f"  Admitted at {admitted['lastTransitionTime']} after {duration((at - t0).total_seconds())}" in out
            # get workloads finds the upstream PodGroup it owns (its pods by spec.schedulingGroup); no queue upstream
            code, out, _ = run_cli(capsys, "get", "workloads", "-n", ns, "-o", "wide", "--kubeconfig",
                                   sched_cluster.kubeconfig_path)
            assert code == 0, out
            row = next(r for r in out.splitlines() if "llama-finetune" in r)
            assert row.split()[4] == "Admitted" and row.split()[-3:] == ["-", "-", "-"]


@pytest.mark.parametrize(("argv", "code", "message"), [
    (["why", "a/b/c"], 2, "expected KIND/NAME or KIND NAME, got 'a/b/c'"),
    (["why", "job/x", "--limit", "-1"], 2, "--limit must not be negative"),
    (["why", "job/x", "--kubeconfig", "/nonexistent/kubeconfig"], 1, "cannot load kubeconfig"),
])
def test_why_usage_and_kubeconfig_errors(argv: list[str], code: int, message: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    got, out, err = run_cli(capsys, *argv)
    assert (got, out) == (code, "") and message in err
