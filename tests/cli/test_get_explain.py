"""``grouper get podgroups`` and ``grouper explain``: against a running grouper's HTTP API (``--server``, here
the app over an in-memory state served by uvicorn) and against the live cluster (``--kubeconfig``)."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from api.fixtures import World, build_world
from api.workloads import (
    batchling_karta,
    create_batchling,
    create_karta,
    create_pytorchjob,
    delete_karta,
    pg_list,
    pods,
)
from controller.harness import GrouperThread, label_namespace
from kube import Kube, wait_until

from grouper.api.app import create_app
from grouper.api.server import HttpServer
from grouper.cli.main import main

JOBSET_PG = "pg-demo-5c1b2a3e-0000-4000-8000-000000000101"


class ServedApp:
    """The API app served by uvicorn on 127.0.0.1:<free port> in a background event loop."""

    def __init__(self, state: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = HttpServer(create_app(state), "127.0.0.1:0")
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)
        return self.server.url

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(15)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(scope="module")
def world() -> World:
    return build_world()


@pytest.fixture(scope="module")
def server(world: World) -> Iterator[str]:
    with ServedApp(world.state) as url:
        yield url


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------------------------- --server


def test_get_podgroups_from_server(capsys: pytest.CaptureFixture[str], server: str) -> None:
    code, out, _ = run_cli(capsys, "get", "podgroups", "-A", "--server", server)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "WORKLOAD", "PLUGIN", "QUEUE", "MIN", "PODS", "STATUS"]
    assert len(lines) == 5
    js = next(line for line in lines if JOBSET_PG in line)
    assert js.split()[0] == "default" and "JobSet/demo" in js and "JobSet Grouper" in js and "2 sub-groups" in js
    bl = next(line for line in lines if "Batchling/sim-sweep" in line)
    assert "Karta Grouper (example-com-batchling-v1)" in bl and "Running" in bl

    code, out, _ = run_cli(capsys, "get", "podgroups", "-n", "team-a", "-o", "json", "--server", server)
    items = json.loads(out)["items"]
    assert code == 0 and {i["workload"]["kind"] for i in items} == {"PyTorchJob", "Batchling"}
    code, out, err = run_cli(capsys, "get", "podgroups", "-n", "empty", "--server", server)
    assert code == 0 and out == "" and "No PodGroups found in namespace empty" in err


def test_explain_from_server(capsys: pytest.CaptureFixture[str], server: str) -> None:
    code, out, _ = run_cli(capsys, "explain", "demo-worker-0-0-q9m4t", "-n", "default", "--server", server)
    assert code == 0, out
    assert out.startswith(f"Pod default/demo-worker-0-0-q9m4t belongs to PodGroup {JOBSET_PG}, "
                          "sub-group worker-replica-0.")
    assert ("Plugin JobSet Grouper chose it because the top owner is JobSet default/demo (owner chain: "
            "Pod default/demo-worker-0-0-q9m4t -> Job default/demo-worker-0 -> JobSet default/demo).") in out
    assert f"PodGroup {JOBSET_PG} needs 2 of its sub-groups (minSubGroup); 2 sub-groups present." in out
    assert "Sub-group worker-replica-0 needs 1 pod (minMember); 1 assigned: demo-worker-0-0-q9m4t." in out
    assert "It is a child of sub-group worker." in out
    assert "  queue team-a came from label kai.scheduler/queue on JobSet default/demo" in out
    assert "  priority class train came from fallback: train" in out
    assert f"(source: decision recorded by the grouper at {server})" in out


def test_explain_karta_and_fallback_from_server(capsys: pytest.CaptureFixture[str], server: str) -> None:
    code, out, _ = run_cli(capsys, "explain", "sim-sweep-worker-1", "-n", "team-a", "--server", server)
    assert code == 0
    assert "Plugin Karta Grouper chose it because the top owner is Batchling team-a/sim-sweep" in out
    assert ("The Karta definition example-com-batchling-v1 (cluster:Karta/example-com-batchling-v1) "
            "describes that kind.") in out
    code, out, _ = run_cli(capsys, "explain", "etl-driver", "-n", "team-b", "--server", server)
    assert code == 0 and "Plugin Default Grouper chose it" in out
    assert "Karta spark-broken for SparkApplication.v1beta2.sparkoperator.k8s.io was not used: invalid:" in out


def test_explain_errors(capsys: pytest.CaptureFixture[str], server: str) -> None:
    code, _, err = run_cli(capsys, "explain", "nope", "-n", "default", "--server", server)
    assert code == 3 and "has no decision for pod default/nope" in err
    code, _, err = run_cli(capsys, "get", "podgroups", "--server", "http://127.0.0.1:1")
    assert code == 1 and "cannot reach http://127.0.0.1:1" in err


def test_token_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "token").write_text("sekret\n")
    world = build_world(with_spark=False)
    world.state.auth_token_file = str(tmp_path / "token")
    with ServedApp(world.state) as url:
        code, _, err = run_cli(capsys, "get", "podgroups", "-A", "--server", url)
        assert code == 1 and "401 missing or wrong bearer token" in err
        code, out, _ = run_cli(capsys, "get", "podgroups", "-A", "--server", url, "--token-file",
                               str(tmp_path / "token"))
        assert code == 0 and JOBSET_PG in out


# ----------------------------------------------------------------------------------------------- cluster


@pytest.fixture
def workloads(kube: Kube, namespace: str) -> Iterator[str]:
    label_namespace(kube, namespace)
    create_karta(kube, batchling_karta(namespace))
    create_pytorchjob(kube, namespace)
    create_batchling(kube, namespace)
    try:
        yield namespace
    finally:
        delete_karta(kube, batchling_karta(namespace)["metadata"]["name"])


def test_explain_and_get_from_the_cluster(capsys: pytest.CaptureFixture[str], cluster: Any, kube: Kube,
                                          workloads: str) -> None:
    ns = workloads
    kc = cluster.kubeconfig_path
    job_uid = kube.get(f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs/llama-finetune")["metadata"]["uid"]
    pg = f"pg-llama-finetune-{job_uid}"

    # no grouper has run: the decision is recomputed, the pod does not carry it yet
    code, out, _ = run_cli(capsys, "explain", "llama-finetune-worker-2", "-n", ns, "--kubeconfig", kc)
    assert code == 0, out
    assert out.startswith(f"Pod {ns}/llama-finetune-worker-2 belongs to PodGroup {pg}, sub-group worker-1.")
    assert f"Plugin PyTorchJob Grouper chose it because the top owner is PyTorchJob {ns}/llama-finetune" in out
    assert f"queue team-a came from label kai.scheduler/queue on PyTorchJob {ns}/llama-finetune" in out
    assert f"PodGroup {pg} does not exist in the cluster yet" in out
    assert "pod-group-name=(none)" in out and "not yet what was decided" in out
    assert "(source: recomputed now from the cluster at https://127.0.0.1:" in out

    code, out, _ = run_cli(capsys, "explain", "sim-sweep-coordinator-0", "-n", ns, "--kubeconfig", kc)
    assert code == 0 and "Plugin Karta Grouper chose it" in out
    assert f"The Karta definition batchling-{ns} (cluster:Karta/batchling-{ns}) describes that kind." in out

    code, _, err = run_cli(capsys, "explain", "missing", "-n", ns, "--kubeconfig", kc)
    assert code == 3 and f"pod {ns}/missing not found" in err

    with GrouperThread(cluster, ns) as g:
        wait_until(lambda: len(pg_list(kube, ns)) == 2 and all(
            (p["metadata"].get("annotations") or {}).get("pod-group-name") for p in pods(kube, ns)),
            60, what="PodGroups and annotated pods")
        g.wait_idle(30)
        code, out, _ = run_cli(capsys, "explain", "llama-finetune-worker-2", "-n", ns, "--kubeconfig", kc)
        assert code == 0
        assert f"pod-group-name={pg} and kai.scheduler/subgroup-name=worker-1, as decided." in out
        assert "does not exist in the cluster yet" not in out
        assert "Sub-group worker-1 needs 2 pods (minMember); 2 assigned: llama-finetune-worker-2, " \
               "llama-finetune-worker-3." in out
        server = f"http://127.0.0.1:{g.service.http_port}"
        code, from_server, _ = run_cli(capsys, "explain", "llama-finetune-worker-2", "-n", ns, "--server", server)
        assert code == 0
        assert from_server.splitlines()[:2] == out.splitlines()[:2]  # same decision, recorded vs recomputed

        code, out, _ = run_cli(capsys, "get", "podgroups", "-n", ns, "--kubeconfig", kc)
        assert code == 0
        rows = {line.split()[0]: line for line in out.splitlines()[1:]}
        assert "PyTorchJob/llama-finetune" in rows[pg] and "5 pods" in rows[pg]
        assert rows[pg].split()[-2:] == ["5", "-"]  # 5 pods carry the annotation; status only via --server
        code, out, _ = run_cli(capsys, "get", "podgroups", "-n", ns, "-o", "json", "--server", server)
        assert {i["name"] for i in json.loads(out)["items"]} == {p["metadata"]["name"] for p in pg_list(kube, ns)}


def test_get_from_cluster_bad_kubeconfig(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "get", "podgroups", "--kubeconfig", str(tmp_path / f"{uuid.uuid4()}.yaml"))
    assert code == 1 and "cannot load kubeconfig" in err


def test_get_podgroups_reports_workloads_that_could_not_be_grouped(capsys: pytest.CaptureFixture[str]) -> None:
    from api.fixtures import batch_objects, record

    from grouper.core.lookups import InMemoryLookups

    world = build_world(with_spark=False)
    objects = batch_objects()
    lookups = InMemoryLookups(objects)
    record(world.store, [world.state.grouper.decide(p, lookups) for p in objects if p["kind"] == "Pod"])
    with ServedApp(world.state) as url:
        code, out, err = run_cli(capsys, "get", "podgroups", "-n", "batch", "--server", url)
        assert code == 0 and "Job/fine" in out
        assert "NOT GROUPED batch/Job/broken (23 pods): InvalidWorkload:" in err
        assert "kai.scheduler/batch-min-member" in err and "NOT GROUPED batch/Pod/orphan (1 pods)" in err
        code, out, _ = run_cli(capsys, "get", "podgroups", "-n", "batch", "-o", "json", "--server", url)
        assert [e["workload"]["name"] for e in json.loads(out)["errors"]] == ["broken", "orphan"]


def test_explain_warns_of_a_pod_relabelled_out_of_its_component(
    capsys: pytest.CaptureFixture[str], cluster: Any, kube: Kube, workloads: str
) -> None:
    """A Batchling worker relabelled out of its component is in no sub-group: explain says so as a warning
    (``core.satisfiable``), and says nothing of the kind for a pod that is where it belongs."""
    ns = workloads
    kc = cluster.kubeconfig_path
    code, out, _ = run_cli(capsys, "explain", "sim-sweep-worker-1", "-n", ns, "--kubeconfig", kc)
    assert code == 0 and "Warnings" not in out, out
    kube.patch(f"/api/v1/namespaces/{ns}/pods/sim-sweep-worker-2",
               {"metadata": {"labels": {"example.com/role": "other"}}})
    code, out, _ = run_cli(capsys, "explain", "sim-sweep-worker-2", "-n", ns, "--kubeconfig", kc)
    assert code == 0, out
    assert "Warnings (the gang can never be satisfied as it stands):" in out
    assert "pod sim-sweep-worker-2 is in no sub-group (no component matches, or the pod was relabelled out of its " \
           "component)" in out
    code, out, _ = run_cli(capsys, "explain", "sim-sweep-worker-2", "-n", ns, "--kubeconfig", kc, "-o", "json")
    assert any("is in no sub-group" in w for w in json.loads(out)["podGroup"]["warnings"])
