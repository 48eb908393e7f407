"""The HTTP API over an in-memory state: real decisions of real example objects in a real DecisionStore."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from grouper.api.app import create_app
from grouper.api.state import AppState, HealthSnapshot
from grouper.core.lookups import InMemoryLookups
from grouper.observability.metrics import Metrics

from .fixtures import LAST_APPLIED, SECRET_ENV_VALUE, SPARK_NS, World, batch_objects, pod_names, record

JOBSET_PG = ("default", "pg-demo-5c1b2a3e-0000-4000-8000-000000000101")
PYTORCH_PG = ("team-a", "pg-llama-finetune-5c1b2a3e-0000-4000-8000-000000000801")
BATCHLING_PG = ("team-a", "pg-5c1b2a3e-0000-4000-8000-000000002601-batchling")
SPARK_PG = (SPARK_NS, "pg-etl-5c1b2a3e-0000-4000-8000-00000000a001")


def names(body: dict[str, Any]) -> list[str]:
    return [i["name"] for i in body["items"]]


# ----------------------------------------------------------------------------------------------- health


def test_healthz_and_readyz_ok(client: TestClient) -> None:
    live = client.get("/healthz")
    assert live.status_code == 200 and live.json()["status"] == "ok"
    assert {c["name"] for c in live.json()["checks"]} == {"event-loop", "service", "work-queue"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["role"] == "single"


def test_healthz_fails_when_workers_stall(client: TestClient, world: World) -> None:
    now = time.monotonic()
    world.health.set(queue_depth=3, processing=1, worker_heartbeat=now - 500)
    r = client.get("/healthz")
    assert r.status_code == 503
    check = next(c for c in r.json()["checks"] if c["name"] == "work-queue")
    assert not check["ok"] and "3 queued, 1 processing" in check["message"] and "limit 120s" in check["message"]
    world.health.set(worker_heartbeat=now - 5)  # progress again
    assert client.get("/healthz").status_code == 200
    world.health.set(queue_depth=0, processing=0, worker_heartbeat=now - 10_000)  # idle is healthy
    assert client.get("/healthz").status_code == 200


def test_healthz_counts_a_stall_from_when_work_arrived_after_a_quiet_time(client: TestClient, world: World) -> None:
    """The first burst after a quiet hour is not an hour-long stall: the last key was finished long ago, but
    the queue has been busy for 5 s only. Busy for longer than the limit without progress is a stall."""
    now = time.monotonic()
    world.health.set(queue_depth=0, processing=32, worker_heartbeat=now - 3600, busy_since=now - 5, started_at=now - 7200)
    r = client.get("/healthz")
    check = next(c for c in r.json()["checks"] if c["name"] == "work-queue")
    assert r.status_code == 200 and check["ok"] and "busy since 5.0s ago" in check["message"]
    world.health.set(worker_heartbeat=None)  # not a single key finished since start-up
    assert client.get("/healthz").status_code == 200
    world.health.set(busy_since=now - 500)
    r = client.get("/healthz")
    check = next(c for c in r.json()["checks"] if c["name"] == "work-queue")
    assert r.status_code == 503 and "busy since 500.0s ago (limit 120s)" in check["message"]


def test_healthz_standby_and_fatal(client: TestClient, world: World) -> None:
    world.health.set(role="standby", queue_depth=5, worker_heartbeat=None)
    assert client.get("/healthz").status_code == 200
    world.health.set(fatal="lost the pod watch for good")
    r = client.get("/healthz")
    assert r.status_code == 503
    assert any(c["message"] == "lost the pod watch for good" for c in r.json()["checks"] if not c["ok"])


def test_readyz_reports_what_failed_and_standby_is_ready(client: TestClient, world: World) -> None:
    world.health.set(informers={"Pod.v1": True, "PodGroup.v2alpha2.scheduling.run.ai": False})
    r = client.get("/readyz")
    assert r.status_code == 503 and r.json()["status"] == "failing"
    assert "PodGroup.v2alpha2.scheduling.run.ai" in next(c for c in r.json()["checks"] if not c["ok"])["message"]
    world.health.set(informers={"Pod.v1": True, "PodGroup.v2alpha2.scheduling.run.ai": True},
                     last_api_contact=time.monotonic() - 600)
    r = client.get("/readyz")
    assert r.status_code == 503
    assert "api-server" in [c["name"] for c in r.json()["checks"] if not c["ok"]]
    world.health.set(last_api_contact=time.monotonic(), role="standby")
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json()["role"] == "standby"


def test_probes_answer_while_the_service_starts() -> None:
    """An AppState with no controller yet: alive, not ready, everything else empty (no 5xx)."""
    with TestClient(create_app(AppState(metrics=Metrics()))) as c:
        assert c.get("/healthz").status_code == 200
        r = c.get("/readyz")
        assert r.status_code == 503 and "starting" in json.dumps(r.json())
        assert c.get("/podgroups").json() == {"items": [], "errors": [], "continue": None}
        assert c.get("/definitions").json() == {"items": []}
        assert c.get("/podgroups/a/b").status_code == 404


# ----------------------------------------------------------------------------------------------- metrics


def test_metrics_text_and_openmetrics(client: TestClient, world: World) -> None:
    world.state.metrics.reconciles.labels(result="ok", plugin="jobset").inc(3)  # type: ignore[union-attr]
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    assert "podgrouper_reconciles" in families
    sample = next(s for s in families["podgrouper_reconciles"].samples if s.labels.get("plugin") == "jobset")
    assert sample.value == 3
    assert not any(name.startswith("python_") or name.startswith("process_") for name in families)
    om = client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert om.headers["content-type"].startswith("application/openmetrics-text")
    assert om.text.rstrip().endswith("# EOF")


# ----------------------------------------------------------------------------------------------- /podgroups


def test_list_podgroups_items(shared_client: TestClient) -> None:
    body = shared_client.get("/podgroups").json()
    assert body["continue"] is None
    by_name = {i["name"]: i for i in body["items"]}
    assert [(i["namespace"], i["name"]) for i in body["items"]] == sorted([JOBSET_PG, PYTORCH_PG, BATCHLING_PG,
                                                                           SPARK_PG])
    js = by_name[JOBSET_PG[1]]
    assert js["workload"] == {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "demo"}
    assert js["plugin"] == "JobSet Grouper" and js["definition"] is None
    assert js["minSubGroup"] == 2 and js["minMember"] is None and js["podsAssigned"] == 3
    assert js["queue"] == "team-a"
    assert js["workloadStatus"] == "Initializing"  # the built-in JobSet Karta maps a JobSet without status
    pt = by_name[PYTORCH_PG[1]]
    assert pt["minMember"] == 5 and pt["podsAssigned"] == 5 and pt["plugin"] == "PyTorchJob Grouper"
    bl = by_name[BATCHLING_PG[1]]
    assert bl["plugin"] == "Karta Grouper" and bl["workloadStatus"] == "Running"
    assert bl["definition"] == {"name": "example-com-batchling-v1", "origin": "cluster:Karta/example-com-batchling-v1"}
    sp = by_name[SPARK_PG[1]]
    assert sp["plugin"] == "Default Grouper" and sp["minMember"] == 1 and sp["workloadStatus"] is None


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"namespace": "team-a"}, [BATCHLING_PG, PYTORCH_PG]),
        ({"namespace": "nope"}, []),
        ({"kind": "JobSet"}, [JOBSET_PG]),
        ({"kind": "jobset.jobset.x-k8s.io"}, [JOBSET_PG]),
        ({"kind": "PyTorchJob.v1.kubeflow.org"}, [PYTORCH_PG]),
        ({"kind": "batchling"}, [BATCHLING_PG]),
        ({"plugin": "jobset"}, [JOBSET_PG]),
        ({"plugin": "Karta Grouper"}, [BATCHLING_PG]),
        ({"plugin": "default"}, [SPARK_PG]),
        ({"queue": "team-b"}, [SPARK_PG]),
        ({"queue": "team-a", "namespace": "default"}, [JOBSET_PG]),
        ({"labelSelector": "tier=batch"}, [SPARK_PG]),
        ({"labelSelector": "tier==batch,kai.scheduler/queue=team-b"}, [SPARK_PG]),
        ({"labelSelector": "kai.scheduler/queue!=team-a"}, [SPARK_PG]),
        ({"labelSelector": "kai.scheduler/queue in (team-b, other)"}, [SPARK_PG]),
        ({"labelSelector": "kai.scheduler/queue notin (team-b)"}, [JOBSET_PG, BATCHLING_PG, PYTORCH_PG]),
        ({"labelSelector": "app.kubernetes.io/name"}, [JOBSET_PG]),
        ({"labelSelector": "!tier,app.kubernetes.io/name=demo"}, [JOBSET_PG]),
    ],
)
def test_list_podgroups_filters(shared_client: TestClient, params: dict[str, str],
                                expected: list[tuple[str, str]]) -> None:
    r = shared_client.get("/podgroups", params=params)
    assert r.status_code == 200, r.text
    assert [(i["namespace"], i["name"]) for i in r.json()["items"]] == sorted(expected)


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"labelSelector": "a in (b"}, "labelSelector"),
        ({"labelSelector": "=x"}, "labelSelector"),
        ({"labelSelector": "a=b=c"}, "labelSelector"),
        ({"labelSelector": "a,,b"}, "labelSelector"),
        ({"labelSelector": "bad key!=x"}, "labelSelector"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"continue": "%%%not-base64"}, "continue"),
        ({"continue": "eyJ2IjoxfQ"}, "continue"),  # valid base64 JSON, wrong shape
        # reproduction: a token nested 20,000 deep once answered 500 (RecursionError in json.loads)
        ({"continue": base64.urlsafe_b64encode(b"[" * 20000 + b"]" * 20000).decode()}, "continue"),
        ({"continue": base64.urlsafe_b64encode(b"[" * 700 + b"]" * 700).decode()}, "nested deeper than 4"),
        ({"continue": base64.urlsafe_b64encode(b'{"a":' * 6 + b"1" + b"}" * 6).decode()}, "nested deeper"),
    ],
)
def test_list_podgroups_rejects_bad_query(shared_client: TestClient, params: dict[str, str], fragment: str) -> None:
    r = shared_client.get("/podgroups", params=params)
    assert r.status_code == 422
    assert fragment in r.json()["detail"]


def test_pagination_walks_every_page_once(shared_client: TestClient) -> None:
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 1}
    pages = 0
    while True:
        body = shared_client.get("/podgroups", params=params).json()
        pages += 1
        seen += names(body)
        if body["continue"] is None:
            break
        params["continue"] = body["continue"]
    assert pages == 4 and len(seen) == 4 and len(set(seen)) == 4
    two = shared_client.get("/podgroups", params={"limit": 3}).json()
    assert len(two["items"]) == 3 and two["continue"]
    rest = shared_client.get("/podgroups", params={"limit": 3, "continue": two["continue"]}).json()
    assert names(two) + names(rest) == seen and rest["continue"] is None


def test_continue_token_is_bound_to_its_filters(shared_client: TestClient) -> None:
    token = shared_client.get("/podgroups", params={"limit": 1, "namespace": "team-a"}).json()["continue"]
    r = shared_client.get("/podgroups", params={"limit": 1, "continue": token})
    assert r.status_code == 422 and "other filters" in r.json()["detail"]


def test_list_podgroups_errors_name_workloads_without_podgroup(client: TestClient, world: World) -> None:
    objects = batch_objects()
    lookups = InMemoryLookups(objects)
    record(world.store, [world.state.grouper.decide(p, lookups) for p in objects if p["kind"] == "Pod"])

    body = client.get("/podgroups").json()
    assert [i["workload"] for i in body["items"] if i["namespace"] == "batch"] \
        == [{"apiVersion": "batch/v1", "kind": "Job", "name": "fine"}]  # grouped: listed in items, not in errors
    broken, orphan = body["errors"]
    assert broken["workload"] == {"apiVersion": "batch/v1", "kind": "Job", "name": "broken"}
    assert broken["namespace"] == "batch" and broken["reason"] == "InvalidWorkload"
    assert "Job batch/broken" in broken["message"] and "kai.scheduler/batch-min-member" in broken["message"]
    assert '"abc"' in broken["message"] and broken["time"].endswith("Z")
    assert broken["pods"] == [f"broken-{i:02}" for i in range(20)] and broken["podCount"] == 23
    assert orphan["workload"] == {"apiVersion": "v1", "kind": "Pod", "name": "orphan"}
    assert orphan["reason"] == "OwnerNotFound" and "Job batch/gone" in orphan["message"]
    assert orphan["pods"] == ["orphan"] and orphan["podCount"] == 1

    def errors(**params: str) -> list[tuple[str, str]]:
        r = client.get("/podgroups", params=params)
        assert r.status_code == 200, r.text
        return [(e["workload"]["kind"], e["workload"]["name"]) for e in r.json()["errors"]]

    both = [("Job", "broken"), ("Pod", "orphan")]
    assert errors(namespace="batch") == both and errors(namespace="team-a") == []
    assert errors(kind="Job") == errors(kind="job.batch") == errors(kind="Job.v1.batch") == [("Job", "broken")]
    assert errors(kind="pod") == [("Pod", "orphan")] and errors(kind="JobSet") == []
    # plugin, queue and labelSelector select PodGroups, which these workloads lack: they do not apply
    assert errors(plugin="jobset") == errors(queue="nope") == errors(labelSelector="tier=batch") == both
    # not paginated: every page carries the same list
    page = client.get("/podgroups", params={"limit": 1}).json()
    assert page["continue"] and page["errors"] == body["errors"]
    assert client.get("/podgroups", params={"limit": 1, "continue": page["continue"]}).json()["errors"] \
        == body["errors"]


def test_a_podgroup_the_api_server_refused_is_not_listed_and_its_workload_is_an_error(
    client: TestClient, world: World
) -> None:
    """Never written (create refused): not among the items — it does not exist — and its workload is among
    the errors with the API server's message, as are its pods' records and the PodGroup's own record.
    Refused on update (it exists): listed, and its workload among the errors all the same."""
    rec = world.store.pod_group(*SPARK_PG)
    assert rec is not None
    refused = f"PodGroup {SPARK_PG[0]}/{SPARK_PG[1]}: write failed: 422 Invalid: denied by policy"
    world.store.record_pod_group(*SPARK_PG, workload=rec.workload, desired=rec.desired(), operation=None,
                                 pods=list(rec.pods), notes=[], error=refused, stored=False)
    body = client.get("/podgroups").json()
    assert SPARK_PG[1] not in [i["name"] for i in body["items"]]
    [err] = body["errors"]
    assert err["workload"] == {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
                               "name": "etl"}
    assert err["reason"] == "PodGroupNotWritten" and err["message"] == refused and err["pods"] == list(rec.pods)
    assert client.get("/podgroups", params={"kind": "Job"}).json()["errors"] == []
    pod = client.get(f"/pods/{SPARK_NS}/{rec.pods[0]}").json()
    assert pod["outcome"] == "failed" and pod["lastError"]["message"] == refused
    assert pod["lastError"]["reason"] == "PodGroupNotWritten"
    detail = client.get("/podgroups/{}/{}".format(*SPARK_PG)).json()
    assert detail["decision"]["lastError"]["message"] == refused

    world.store.record_pod_group(*SPARK_PG, workload=rec.workload, desired=rec.desired(), operation=None,
                                 pods=list(rec.pods), notes=[], error=refused, stored=True)
    body = client.get("/podgroups").json()
    assert SPARK_PG[1] in [i["name"] for i in body["items"]] and [e["message"] for e in body["errors"]] == [refused]


def test_list_podgroups_errors_empty_when_all_grouped(shared_client: TestClient) -> None:
    assert shared_client.get("/podgroups").json()["errors"] == []


# ----------------------------------------------------------------------------------------------- one PodGroup


def test_podgroup_detail_jobset(shared_client: TestClient) -> None:
    r = shared_client.get("/podgroups/{}/{}".format(*JOBSET_PG))
    assert r.status_code == 200
    d = r.json()
    assert d["podGroup"]["spec"]["minSubGroup"] == 2 and d["podGroup"]["kind"] == "PodGroup"
    assert d["storedResourceVersion"] == "1000"
    assert (d["required"], d["requiredUnit"], d["present"]) == (2, "subGroups", 2)
    sgs = {s["name"]: s for s in d["subGroups"]}
    assert sgs["leader"]["required"] == 1 and sgs["leader"]["present"] == 1 and sgs["leader"]["pods"] == []
    assert sgs["worker-replica-0"]["parent"] == "worker"
    assert sgs["worker-replica-0"]["pods"] == ["demo-worker-0-0-q9m4t"]
    assert sgs["worker-replica-1"]["pods"] == ["demo-worker-1-0-w2n8d"]
    assert (sgs["worker-replica-0"]["required"], sgs["worker-replica-0"]["present"]) == (1, 1)
    assert (sgs["worker"]["required"], sgs["worker"]["present"]) == (2, 2)
    pods = {p["name"]: p for p in d["pods"]}
    assert pods["demo-leader-0-0-k7x2p"]["subGroup"] == "leader-replica-0"
    assert pods["demo-leader-0-0-k7x2p"]["labels"] == {"jobset.sigs.k8s.io/replicatedjob-name": "leader",
                                                       "jobset.sigs.k8s.io/job-index": "0"}
    rec = d["decision"]
    assert rec["plugin"] == "JobSet Grouper" and rec["definition"] is None
    assert rec["topOwner"]["kind"] == "JobSet" and rec["topOwner"]["name"] == "demo"
    assert [o["kind"] for o in rec["ownerChain"]] == ["Job", "JobSet"]
    assert rec["provenance"]["queue"] == "label kai.scheduler/queue on JobSet default/demo"
    assert rec["lastError"] is None


def test_podgroup_detail_pytorch_nested_subgroups(shared_client: TestClient, shared_world: World) -> None:
    d = shared_client.get("/podgroups/{}/{}".format(*PYTORCH_PG)).json()
    assert (d["required"], d["requiredUnit"], d["present"]) == (5, "pods", 5)
    assert sorted(p["name"] for p in d["pods"]) == pod_names(shared_world, "PyTorchJob")
    sgs = {s["name"]: s for s in d["subGroups"]}
    assert sgs["worker"]["minSubGroup"] == 2 and sgs["worker"]["present"] == 2
    assert sgs["worker-0"]["topologyConstraint"]["topology"] == "gpu-topology"
    running = next(p for p in d["pods"] if p["name"] == "llama-finetune-worker-0")
    assert running["phase"] == "Running" and running["node"] == "gpu-node-7"
    assert running["labels"].get("training.kubeflow.org/replica-type") in (None, "worker", "Worker")


def test_podgroup_detail_karta_and_fallback(shared_client: TestClient) -> None:
    bl = shared_client.get("/podgroups/{}/{}".format(*BATCHLING_PG)).json()
    assert bl["decision"]["plugin"] == "Karta Grouper"
    assert bl["decision"]["definition"]["origin"] == "cluster:Karta/example-com-batchling-v1"
    assert bl["workloadStatus"] == "Running"
    # the pod labels the Karta selector reads (example.com/role) are shown, others are not
    assert {p["labels"].get("example.com/role") for p in bl["pods"]} == {"coordinator", "worker"}
    assert all("example.com/batchling" not in p["labels"] for p in bl["pods"])
    sp = shared_client.get("/podgroups/{}/{}".format(*SPARK_PG)).json()
    assert sp["decision"]["plugin"] == "Default Grouper"
    note = next(n for n in sp["decision"]["notes"] if n.startswith("Karta spark-broken"))
    assert "recursive descent" in note and "Default Grouper" in note


def test_podgroup_detail_last_error(client: TestClient, world: World) -> None:
    world.store.record_pod_group(*SPARK_PG, workload="SparkApplication.sparkoperator.k8s.io team-b/etl",
                                 desired=world.store.pod_group(*SPARK_PG).desired(),  # type: ignore[union-attr]
                                 operation=None, pods=["etl-driver", "etl-exec-1"], notes=[],
                                 error="PodGroup write failed: 403 Forbidden")
    err = client.get("/podgroups/{}/{}".format(*SPARK_PG)).json()["decision"]["lastError"]
    assert err["message"] == "PodGroup write failed: 403 Forbidden" and err["time"].endswith("Z")
    world.store.record_pod_error(SPARK_NS, "etl-exec-1", "cannot set its PodGroup: 409 Conflict")
    err = client.get("/podgroups/{}/{}".format(*SPARK_PG)).json()["decision"]["lastError"]
    assert err["message"] == "pod etl-exec-1: cannot set its PodGroup: 409 Conflict"


def test_unknown_podgroup_is_404(shared_client: TestClient) -> None:
    r = shared_client.get("/podgroups/default/nope")
    assert r.status_code == 404 and r.json()["detail"] == "PodGroup default/nope is not managed by this grouper"


# ----------------------------------------------------------------------------------------------- /workloads


def test_workload_describe_karta_kind(shared_client: TestClient) -> None:
    r = shared_client.get("/workloads/team-a/Batchling/sim-sweep")
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["source"] == "cache" and d["status"] == "Running"
    assert d["definition"]["name"] == "example-com-batchling-v1"
    assert d["podGroups"] == [BATCHLING_PG[1]]
    tree = d["describe"]
    assert tree is not None and d["describeError"] is None
    comps = {c["name"]: c for c in tree["components"]}
    assert comps["worker"]["replicas"]["desired"] == 3
    assert {p["name"] for p in comps["worker"]["pods"]} == {"sim-sweep-worker-0", "sim-sweep-worker-1",
                                                            "sim-sweep-worker-2"}
    assert len(d["pods"]) == 4


def test_workload_describe_native_kind_and_qualified_kind(shared_client: TestClient) -> None:
    d = shared_client.get("/workloads/default/jobset.jobset.x-k8s.io/demo").json()
    assert d["workload"]["kind"] == "JobSet" and d["podGroups"] == [JOBSET_PG[1]]
    assert d["definition"]["name"] == "jobset-x-k8s-io-jobset-v1alpha2"  # built-in, used for describe/status
    sp = shared_client.get(f"/workloads/{SPARK_NS}/SparkApplication/etl").json()
    assert sp["definition"] is None and sp["describe"] is None and len(sp["pods"]) == 2


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("/workloads/team-a/Widget/x", "no workload kind 'Widget'"),
        ("/workloads/team-a/Batchling/missing", "Batchling team-a/missing is not in the grouper's cache"),
    ],
)
def test_unknown_workload_is_404(shared_client: TestClient, path: str, fragment: str) -> None:
    r = shared_client.get(path)
    assert r.status_code == 404 and fragment in r.json()["detail"]


def test_workload_live_read(world: World) -> None:
    calls: list[tuple[Any, ...]] = []

    async def live(api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        calls.append((api_version, kind, namespace, name))
        obj = world.lookups.get(api_version, kind, namespace, name)
        if obj is None:
            return None
        newer = {**obj["metadata"], "resourceVersion": "101"}  # the status cache is per resourceVersion
        return {**obj, "metadata": newer, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}

    async def broken(*args: Any) -> None:
        raise ConnectionError("API server unreachable")

    world.state.live = live
    with TestClient(create_app(world.state)) as c:
        d = c.get("/workloads/team-a/Batchling/sim-sweep", params={"live": "true"}).json()
        assert d["source"] == "live" and d["status"] == "Completed"
        assert calls == [("example.com/v1", "Batchling", "team-a", "sim-sweep")]
        assert c.get("/workloads/team-a/Batchling/sim-sweep").json()["source"] == "cache"
    world.state.live = broken
    with TestClient(create_app(world.state)) as c:
        r = c.get("/workloads/team-a/Batchling/sim-sweep", params={"live": True})
        assert r.status_code == 502 and "API server unreachable" in r.json()["detail"]


# ----------------------------------------------------------------------------------------------- /definitions


def test_definitions(shared_client: TestClient) -> None:
    items = shared_client.get("/definitions").json()["items"]
    by_name = {i["name"]: i for i in items}
    bl = by_name["example-com-batchling-v1"]
    assert bl["valid"] and bl["active"] and bl["origin"].startswith("cluster:")
    assert bl["gvk"] == {"group": "example.com", "version": "v1", "kind": "Batchling"}
    broken = by_name["spark-broken"]
    assert not broken["valid"] and not broken["active"]
    assert broken["errors"][0]["expression"] == ".spec | .."
    assert "recursive descent" in broken["errors"][0]["message"]
    assert broken["notUsedReason"].startswith("invalid:")
    unloadable = by_name["not-a-karta"]
    assert not unloadable["valid"] and unloadable["notUsedReason"] == "cannot be loaded"
    assert "structureDefinition" in unloadable["errors"][0]["field"]
    js = by_name["jobset-x-k8s-io-jobset-v1alpha2"]
    assert js["origin"].startswith("builtin:") and js["valid"] and js["active"]


# ----------------------------------------------------------------------------------------------- safety


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
@pytest.mark.parametrize("path", ["/podgroups", "/podgroups/default/x", "/healthz", "/metrics", "/nope"])
def test_only_get(shared_client: TestClient, method: str, path: str) -> None:
    r = shared_client.request(method, path)
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
    assert "read-only" in r.json()["detail"]


def test_never_leaks_env_specs_or_annotations(shared_client: TestClient) -> None:
    bodies = [shared_client.get(p).text for p in (
        "/podgroups", "/podgroups/{}/{}".format(*SPARK_PG), "/podgroups/{}/{}".format(*BATCHLING_PG),
        "/podgroups/{}/{}".format(*JOBSET_PG), f"/workloads/{SPARK_NS}/SparkApplication/etl",
        "/workloads/team-a/Batchling/sim-sweep", "/workloads/team-a/PyTorchJob/llama-finetune", "/definitions",
    )]
    for text in bodies:
        assert SECRET_ENV_VALUE not in text
        assert '"containers"' not in text and '"env"' not in text
        assert "annotations never leave the API" not in text and "not-for-api" not in text
    sp = json.loads(bodies[1])
    # The grouper does not copy kubectl's last-applied-configuration onto PodGroups at all.
    assert LAST_APPLIED not in sp["podGroup"]["metadata"].get("annotations", {})


def test_bearer_token(tmp_path: Path, world: World) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("tok-1\n")
    world.state.auth_token_file = str(token_file)
    with TestClient(create_app(world.state)) as c:
        assert c.get("/healthz").status_code == 200 and c.get("/readyz").status_code == 200
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic dG9rLTE="},
                        {"Authorization": "tok-1"}):
            r = c.get("/podgroups", headers=headers)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        ok = {"Authorization": "Bearer tok-1"}
        for path in ("/podgroups", "/metrics", "/definitions", "/openapi.json"):
            assert c.get(path, headers=ok).status_code == 200, path
        token_file.write_text("tok-2")  # rotated: the new token works, the old one no longer
        future = time.time() + 5
        import os

        os.utime(token_file, (future, future))
        assert c.get("/podgroups", headers=ok).status_code == 401
        assert c.get("/podgroups", headers={"Authorization": "Bearer tok-2"}).status_code == 200


def test_settings_token_file_is_honoured(tmp_path: Path) -> None:
    class Settings:
        http_auth_token_file = str(tmp_path / "t")

    (tmp_path / "t").write_text("x")
    with TestClient(create_app(AppState(metrics=Metrics(), settings=Settings()))) as c:
        assert c.get("/definitions").status_code == 401
        assert c.get("/definitions", headers={"Authorization": "Bearer x"}).status_code == 200


def test_openapi_schema_is_complete(shared_client: TestClient) -> None:
    schema = shared_client.get("/openapi.json").json()
    assert set(schema["paths"]) >= {"/healthz", "/readyz", "/metrics", "/podgroups", "/podgroups/{namespace}/{name}",
                                    "/workloads/{namespace}/{kind}/{name}", "/definitions"}
    for path, ops in schema["paths"].items():
        assert set(ops) == {"get"}, path
    models = set(schema["components"]["schemas"])
    assert {"PodGroupList", "WorkloadError", "PodGroupSummary", "PodGroupDetail", "DecisionRecord", "SubGroupView",
            "PodInfo", "WorkloadDescribe", "DefinitionList", "DefinitionView", "HealthResponse", "ErrorResponse"} <= models
    listed = schema["components"]["schemas"]["PodGroupList"]["properties"]
    assert listed["errors"]["items"] == {"$ref": "#/components/schemas/WorkloadError"}
    params = {p["name"] for p in schema["paths"]["/podgroups"]["get"]["parameters"]}
    assert params == {"namespace", "kind", "plugin", "queue", "labelSelector", "limit", "continue"}
    assert "422" in schema["paths"]["/podgroups"]["get"]["responses"]
    assert "404" in schema["paths"]["/podgroups/{namespace}/{name}"]["get"]["responses"]


def test_health_snapshot_defaults_are_consistent() -> None:
    s = HealthSnapshot(role="leader")
    assert s.now >= s.started_at


def test_a_workload_whose_grouping_failed_is_in_state_error(client: TestClient, world: World) -> None:
    """Issue 39: ``Error`` is a workload state (grouping failed), even with no PodGroup to carry a gang."""
    objects = batch_objects()
    lookups = InMemoryLookups(objects)
    record(world.store, [world.state.grouper.decide(p, lookups) for p in objects if p["kind"] == "Pod"])
    states = {w["name"]: w["state"] for w in client.get("/workloads", params={"namespace": "batch"}).json()["items"]}
    assert states["broken"] == "Error", states
    assert states["fine"] != "Error", states
