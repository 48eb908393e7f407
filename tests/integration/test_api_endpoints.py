"""The HTTP API of a real grouper (``grouper.runtime.Service`` in-process) against the real API server.

One grouper, scoped to one namespace, groups four workloads: a JobSet (pods made by the real Job
controller), a PyTorchJob, a Karta-only Batchling, and a SparkApplication whose cluster Karta is invalid
(its pods fall back to the default grouper); a fifth, a batch Job with a malformed ``batch-min-member``,
fails to group and shows in ``/podgroups`` ``errors``. Every endpoint is called over HTTP and its content
checked against the objects in the cluster.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from api.workloads import (
    BAD_JOB,
    batchling_karta,
    create_bad_job,
    create_batchling,
    create_jobset,
    create_karta,
    create_pytorchjob,
    create_spark,
    delete_karta,
    karta_name,
    pg_list,
    pods,
    spark_karta,
)
from controller.harness import GrouperThread, label_namespace
from kube import Kube, KubeError, wait_until

POD_COUNT = 3 + 5 + 4 + 2


@dataclass
class Env:
    namespace: str
    grouper: GrouperThread
    http: httpx.Client
    kube: Kube

    def get(self, path: str, **params: Any) -> httpx.Response:
        return self.http.get(path, params=params or None)

    def pg_of(self, kind: str) -> dict[str, Any]:
        for pg in pg_list(self.kube, self.namespace):
            if pg["metadata"]["ownerReferences"][0]["kind"] == kind:
                return pg
        raise AssertionError(f"no PodGroup for a {kind}")


def _bad_job_pods(kube: Kube, ns: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods(kube, ns)
                  if (p["metadata"].get("labels") or {}).get("job-name") == BAD_JOB)


def _all_grouped(kube: Kube, ns: str) -> bool:
    ps = [p for p in pods(kube, ns) if (p["metadata"].get("labels") or {}).get("job-name") != BAD_JOB]
    return len(ps) == POD_COUNT and all((p["metadata"].get("annotations") or {}).get("pod-group-name") for p in ps)


@pytest.fixture(scope="module")
def env(cluster: Any, kube: Kube) -> Iterator[Env]:
    ns = f"api-{uuid.uuid4().hex[:8]}"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    wait_until(lambda: kube.exists(f"/api/v1/namespaces/{ns}/serviceaccounts/default"), 30, what="default SA")
    label_namespace(kube, ns)
    create_karta(kube, batchling_karta(ns))
    create_karta(kube, spark_karta(ns))
    try:
        with GrouperThread(cluster, ns) as g:
            create_jobset(kube, ns)
            create_pytorchjob(kube, ns)
            create_batchling(kube, ns)
            create_spark(kube, ns)
            create_bad_job(kube, ns)
            wait_until(lambda: _all_grouped(kube, ns), 60, what=f"{POD_COUNT} pods with their PodGroup")
            wait_until(lambda: _bad_job_pods(kube, ns), 30, what=f"the pod of Job {BAD_JOB}")
            g.wait_idle(30)
            with httpx.Client(base_url=f"http://127.0.0.1:{g.service.http_port}", timeout=30) as http:
                yield Env(ns, g, http, kube)
    finally:
        for base in ("batchling", "spark-broken"):
            delete_karta(kube, karta_name(base, ns))
        with contextlib.suppress(KubeError):
            kube.delete(f"/api/v1/namespaces/{ns}", ignore_missing=True)


# ----------------------------------------------------------------------------------------------- health


def test_health_ready_and_role(env: Env) -> None:
    live = env.get("/healthz")
    assert live.status_code == 200 and live.json()["status"] == "ok", live.text
    ready = env.get("/readyz")
    assert ready.status_code == 200, ready.text
    body = ready.json()
    assert body["role"] == "single"
    checks = {c["name"]: c for c in body["checks"]}
    assert checks["informers"]["ok"] and "Pod.v1" in checks["informers"]["message"]
    assert checks["api-server"]["ok"]


def test_only_get(env: Env) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert env.http.request(method, "/podgroups").status_code == 405


# ----------------------------------------------------------------------------------------------- /podgroups


def test_list_podgroups_matches_the_cluster(env: Env) -> None:
    body = env.get("/podgroups", namespace=env.namespace).json()
    items = {i["workload"]["kind"]: i for i in body["items"]}
    assert set(items) == {"JobSet", "PyTorchJob", "Batchling", "SparkApplication"}
    cluster = {pg["metadata"]["name"]: pg for pg in pg_list(env.kube, env.namespace)}
    assert {i["name"] for i in body["items"]} == set(cluster)
    js, pt, bl, sp = items["JobSet"], items["PyTorchJob"], items["Batchling"], items["SparkApplication"]
    assert js["plugin"] == "JobSet Grouper" and js["minSubGroup"] == 2 and js["podsAssigned"] == 3
    assert js["queue"] == "team-a" and js["workloadStatus"] == "Initializing"
    assert pt["plugin"] == "PyTorchJob Grouper" and pt["minMember"] == 5 and pt["podsAssigned"] == 5
    assert bl["plugin"] == "Karta Grouper" and bl["minSubGroup"] == 2 and bl["podsAssigned"] == 4
    assert bl["definition"] == {"name": karta_name("batchling", env.namespace),
                                "origin": f"cluster:Karta/{karta_name('batchling', env.namespace)}"}
    assert sp["plugin"] == "Default Grouper" and sp["minMember"] == 1 and sp["podsAssigned"] == 2
    assert sp["definition"] is None
    for i in body["items"]:
        spec = cluster[i["name"]]["spec"]
        assert (i["minMember"], i["minSubGroup"]) == (spec.get("minMember"), spec.get("minSubGroup"))
        assert i["queue"] == spec.get("queue")


def test_list_podgroups_names_the_job_that_failed_to_group(env: Env) -> None:
    ns = env.namespace
    body = wait_until(lambda: (b := env.get("/podgroups", namespace=ns).json())["errors"] and b, 30,
                      what=f"Job {BAD_JOB} in /podgroups errors")
    assert [e["workload"] for e in body["errors"]] == [{"apiVersion": "batch/v1", "kind": "Job", "name": BAD_JOB}]
    err = body["errors"][0]
    assert err["namespace"] == ns and err["reason"] == "InvalidWorkload" and err["time"]
    assert f"Job {ns}/{BAD_JOB}" in err["message"] and "kai.scheduler/batch-min-member" in err["message"]
    assert '"abc"' in err["message"]
    assert err["pods"] == _bad_job_pods(env.kube, ns) and err["podCount"] == 1
    assert BAD_JOB not in {i["workload"]["name"] for i in body["items"]}
    # The failing Job is retried with back-off, so "time" moves between requests; the rest must not.
    def untimed(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in e.items() if k != "time"} for e in errors]

    assert untimed(env.get("/podgroups", namespace=ns, kind="job.batch").json()["errors"]) == untimed(body["errors"])
    assert env.get("/podgroups", namespace=ns, kind="JobSet").json()["errors"] == []
    assert env.get("/podgroups", namespace="elsewhere").json()["errors"] == []


def test_list_filters_and_pages(env: Env) -> None:
    ns = env.namespace
    assert [i["workload"]["kind"] for i in env.get("/podgroups", namespace=ns, kind="pytorchjob").json()["items"]] \
        == ["PyTorchJob"]
    assert [i["workload"]["kind"] for i in env.get("/podgroups", namespace=ns, plugin="karta").json()["items"]] \
        == ["Batchling"]
    assert [i["workload"]["kind"] for i in env.get("/podgroups", namespace=ns, queue="team-b").json()["items"]] \
        == ["SparkApplication"]
    sel = env.get("/podgroups", namespace=ns, labelSelector="app.kubernetes.io/name=demo").json()["items"]
    assert [i["workload"]["kind"] for i in sel] == ["JobSet"]
    assert env.get("/podgroups", labelSelector="a in (b").status_code == 422
    seen, token = [], None
    while True:
        body = env.get("/podgroups", namespace=ns, limit=3, **({"continue": token} if token else {})).json()
        seen += [i["name"] for i in body["items"]]
        token = body["continue"]
        if not token:
            break
    assert len(seen) == 4 == len(set(seen))


def test_podgroup_detail_jobset(env: Env) -> None:
    pg = env.pg_of("JobSet")
    name = pg["metadata"]["name"]
    d = wait_until(lambda: (r := env.get(f"/podgroups/{env.namespace}/{name}").json())
                   and r["storedResourceVersion"] == env.kube.get(
                       f"/apis/scheduling.run.ai/v2alpha2/namespaces/{env.namespace}/podgroups/{name}"
                   )["metadata"]["resourceVersion"] and r, 15, what="cache at the PodGroup's resourceVersion")
    assert d["podGroup"]["spec"] == {k: v for k, v in pg["spec"].items() if k in d["podGroup"]["spec"]}
    assert (d["required"], d["requiredUnit"], d["present"]) == (2, "subGroups", 2)
    subs = {s["name"]: s for s in d["subGroups"]}
    leader_pod = next(p for p in pods(env.kube, env.namespace)
                      if (p["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/replicatedjob-name") == "leader")
    assert subs["leader-replica-0"]["pods"] == [leader_pod["metadata"]["name"]]
    assert len(subs["worker-replica-0"]["pods"]) == 1 and subs["worker-replica-0"]["required"] == 1
    assert len(subs["worker-replica-1"]["pods"]) == 1 and subs["worker"]["required"] == 2
    assert all(p["phase"] == "Pending" and p["node"] is None for p in d["pods"])
    rec = d["decision"]
    assert rec["plugin"] == "JobSet Grouper"
    assert [o["kind"] for o in rec["ownerChain"]] == ["Job", "JobSet"]
    assert rec["provenance"]["queue"] == f"label kai.scheduler/queue on JobSet {env.namespace}/demo"
    assert rec["lastError"] is None


def test_podgroup_detail_pytorch_and_batchling(env: Env) -> None:
    pt = env.get(f"/podgroups/{env.namespace}/{env.pg_of('PyTorchJob')['metadata']['name']}").json()
    assert (pt["required"], pt["requiredUnit"], pt["present"]) == (5, "pods", 5)
    subs = {s["name"]: s for s in pt["subGroups"]}
    assert subs["master"]["pods"] == ["llama-finetune-master-0"]
    assert subs["worker"]["minSubGroup"] == 2 and subs["worker-0"]["topologyConstraint"]["topology"] == "gpu-topology"
    bl = env.get(f"/podgroups/{env.namespace}/{env.pg_of('Batchling')['metadata']['name']}").json()
    assert bl["workloadStatus"] is not None
    assert bl["decision"]["definition"]["name"] == karta_name("batchling", env.namespace)
    assert {s["name"]: len(s["pods"]) for s in bl["subGroups"]} == {"coordinator": 1, "worker": 3}
    assert {p["labels"].get("example.com/role") for p in bl["pods"]} == {"coordinator", "worker"}


def test_invalid_karta_falls_back_and_is_explained(env: Env) -> None:
    sp = env.get(f"/podgroups/{env.namespace}/{env.pg_of('SparkApplication')['metadata']['name']}").json()
    rec = sp["decision"]
    assert rec["plugin"] == "Default Grouper" and rec["definition"] is None
    note = next(n for n in rec["notes"] if karta_name("spark-broken", env.namespace) in n)
    assert "invalid" in note and "recursive descent" in note
    defs = {d["name"]: d for d in env.get("/definitions").json()["items"]}
    broken = defs[karta_name("spark-broken", env.namespace)]
    assert not broken["valid"] and not broken["active"]
    assert broken["gvk"]["kind"] == "SparkApplication"
    assert broken["errors"][0]["expression"] == ".spec | .."
    # ... and the Karta itself carries a Warning Event that names the field and the expression.
    events = env.kube.list("/api/v1/namespaces/default/events",
                           field_selector=f"involvedObject.name={karta_name('spark-broken', env.namespace)}")
    assert any(e["reason"] == "InvalidKarta" and e["type"] == "Warning" and ".spec | .." in e["message"]
               for e in events), events
    good = defs[karta_name("batchling", env.namespace)]
    assert good["valid"] and good["active"] and good["origin"].startswith("cluster:")
    assert defs["jobset-x-k8s-io-jobset-v1alpha2"]["origin"].startswith("builtin:")


def test_pod_record(env: Env) -> None:
    worker = next(p for p in pods(env.kube, env.namespace) if p["metadata"]["name"].startswith("llama-finetune-worker"))
    name = worker["metadata"]["name"]
    r = env.get(f"/pods/{env.namespace}/{name}").json()
    assert r["outcome"] == "grouped" and r["podGroup"] == worker["metadata"]["annotations"]["pod-group-name"]
    assert r["subGroup"] == worker["metadata"]["labels"]["kai.scheduler/subgroup-name"]
    assert r["patched"]["result"] in ("patched", "unchanged")  # "unchanged" after a later reconcile
    assert env.get(f"/pods/{env.namespace}/nope").status_code == 404


# ----------------------------------------------------------------------------------------------- /workloads


def test_workload_describe(env: Env) -> None:
    ns = env.namespace
    bl = env.get(f"/workloads/{ns}/Batchling/sim-sweep")
    assert bl.status_code == 200, bl.text
    d = bl.json()
    assert d["source"] == "cache" and d["definition"]["name"] == karta_name("batchling", ns)
    assert d["describeError"] is None
    comps = {c["name"]: c for c in d["describe"]["components"]}
    assert comps["worker"]["replicas"]["desired"] == 3 and len(comps["worker"]["pods"]) == 3
    assert len(d["pods"]) == 4 and d["podGroups"] == [env.pg_of("Batchling")["metadata"]["name"]]
    js = env.get(f"/workloads/{ns}/jobset.jobset.x-k8s.io/demo").json()
    assert js["podGroups"] == [env.pg_of("JobSet")["metadata"]["name"]] and len(js["pods"]) == 3
    live = env.get(f"/workloads/{ns}/PyTorchJob/llama-finetune", live="true").json()
    assert live["source"] == "live" and len(live["pods"]) == 5
    assert env.get(f"/workloads/{ns}/Batchling/missing").status_code == 404
    assert env.get(f"/workloads/{ns}/Widget/x").status_code == 404
    for path in (f"/workloads/{ns}/SparkApplication/etl", f"/podgroups/{ns}/{env.pg_of('SparkApplication')['metadata']['name']}"):
        text = env.get(path).text
        assert "s3cr3t" not in text and '"env"' not in text and '"containers"' not in text
