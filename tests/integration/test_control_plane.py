"""The local control plane itself: CRDs, schemas, controllers, garbage collection, RBAC and tokens."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube import Kube, KubeError, wait_until

from devtools.cluster import LocalCluster
from grouper.kube.sync import SyncKube

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
PG_API = "/apis/scheduling.run.ai/v2alpha2"
KARTA_API = "/apis/run.ai/v1alpha1/kartas"


def pg_path(ns: str, name: str = "") -> str:
    return f"{PG_API}/namespaces/{ns}/podgroups" + (f"/{name}" if name else "")


def podgroup(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "labels": {"app": "cp-test"}},
        "spec": spec,
    }


def pod_template(labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels or {}},
        "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "main", "image": "busybox"}]},
    }


# ---------------------------------------------------------------------------------------------- CRDs


def test_all_crds_established_and_served(kube: Kube) -> None:
    files = sorted((REPO / "deploy" / "crds").glob("*.yaml")) + sorted(
        (REPO / "tests" / "crds").glob("*.yaml")
    )
    assert len(files) >= 20
    for f in files:
        crd = yaml.safe_load(f.read_text())
        got = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}")
        conds = {c["type"]: c["status"] for c in got["status"]["conditions"]}
        assert conds.get("Established") == "True", f.name
        assert conds.get("NonStructuralSchema") is None, f.name
        for v in crd["spec"]["versions"]:
            info = kube.resource_info(f"{crd['spec']['group']}/{v['name']}", crd["spec"]["names"]["kind"])
            assert info["name"] == crd["spec"]["names"]["plural"]


def test_podgroup_lifecycle(kube: Kube, namespace: str) -> None:
    spec = {
        "minSubGroup": 2,
        "queue": "team-a",
        "priorityClassName": "train",
        "preemptibility": "preemptible",
        "topologyConstraint": {"topology": "cluster-topology", "requiredTopologyLevel": "zone"},
        "subGroups": [
            {"name": "master", "minMember": 1},
            {"name": "worker", "minSubGroup": 2},
            {"name": "worker-0", "parent": "worker", "minMember": 4, "topologyConstraint": {"topology": "t"}},
            {"name": "worker-1", "parent": "worker", "minMember": 0},
        ],
        "markUnschedulable": True,
        "schedulingBackoff": 1,
        "preemptionDelay": "5m",
        "stalenessGracePeriod": "-1s",
    }
    created = kube.create(pg_path(namespace), podgroup("pg-a", **spec))
    assert created["spec"] == spec  # nothing pruned
    assert kube.get(pg_path(namespace, "pg-a"))["metadata"]["uid"] == created["metadata"]["uid"]

    kube.create(pg_path(namespace), podgroup("pg-b", minMember=3))
    listed = kube.list(pg_path(namespace), label_selector="app=cp-test")
    assert sorted(p["metadata"]["name"] for p in listed) == ["pg-a", "pg-b"]
    rv = kube.request("GET", pg_path(namespace)).json()["metadata"]["resourceVersion"]

    # watch from the list's resourceVersion while patching from another thread
    events: list[tuple[str, str, Any]] = []

    def watch() -> None:
        for typ, obj in kube.watch(pg_path(namespace), resource_version=rv, timeout_seconds=10):
            events.append((typ, obj["metadata"]["name"], obj["spec"].get("minMember")))
            if typ == "DELETED":
                return

    t = threading.Thread(target=watch)
    t.start()
    assert kube.patch(pg_path(namespace, "pg-b"), {"spec": {"queue": "q2"}})["spec"]["queue"] == "q2"
    got = kube.patch(
        pg_path(namespace, "pg-b"), [{"op": "replace", "path": "/spec/minMember", "value": 5}], type="json"
    )
    assert got["spec"]["minMember"] == 5
    # custom resources take merge, JSON and apply patches (no strategic merge patch)
    ssa = {**podgroup("pg-b"), "metadata": {"name": "pg-b", "annotations": {"a": "b"}}}
    got = kube.patch(pg_path(namespace, "pg-b"), ssa, type="apply", field_manager="annotator")
    assert got["metadata"]["annotations"] == {"a": "b"}
    assert got["spec"]["minMember"] == 5
    kube.delete(pg_path(namespace, "pg-b"))
    t.join(20)
    assert not t.is_alive()
    assert [e[0] for e in events] == ["MODIFIED", "MODIFIED", "MODIFIED", "DELETED"]
    assert events[1] == ("MODIFIED", "pg-b", 5)
    with pytest.raises(KubeError) as err:
        kube.get(pg_path(namespace, "pg-b"))
    assert err.value.status == 404

    # status is a subresource with a free-form schema; the main resource ignores status writes
    pg = kube.get(pg_path(namespace, "pg-a"))
    pg["status"] = {
        "conditions": [{"type": "Unschedulable", "status": "True"}],
        "resourcesStatus": {"allocated": {}},
    }
    assert (
        kube.replace(pg_path(namespace, "pg-a") + "/status", pg)["status"]["conditions"][0]["type"]
        == "Unschedulable"
    )
    after = kube.patch(pg_path(namespace, "pg-a"), {"status": {"conditions": []}, "spec": {"queue": "q3"}})
    assert after["status"]["conditions"][0]["type"] == "Unschedulable"
    assert after["spec"]["queue"] == "q3"


@pytest.mark.parametrize(
    "spec",
    [
        {"minMember": -1},
        {"minSubGroup": -2},
        {"preemptibility": "sometimes"},
        {"minMember": 1, "minSubGroup": 1},
        {"subGroups": [{"name": "Bad_Name", "minMember": 1}]},
        {"subGroups": [{"name": "ok", "parent": "-bad", "minMember": 1}]},
        {"subGroups": [{"name": "", "minMember": 1}]},
        {"subGroups": [{"minMember": 1}]},
        {"subGroups": [{"name": "a", "minMember": -1}]},
        {"subGroups": [{"name": "a", "minMember": 1, "minSubGroup": 1}]},
        {"minMember": "two"},
    ],
)
def test_podgroup_schema_rejects(kube: Kube, namespace: str, spec: dict[str, Any]) -> None:
    with pytest.raises(KubeError) as err:
        kube.create(pg_path(namespace), podgroup("bad", **spec))
    assert err.value.status == 422, err.value


def test_podgroup_unknown_fields_pruned_or_rejected(kube: Kube, namespace: str) -> None:
    got = kube.create(pg_path(namespace), podgroup("prune", minMember=1, bogus=True))
    assert "bogus" not in got["spec"]
    resp = kube.request(
        "POST", pg_path(namespace), params={"fieldValidation": "Strict"}, json=podgroup("strict", bogus=1)
    )
    assert resp.status_code == 400


def batchling_karta(name: str = "example-com-batchling-v1") -> dict[str, Any]:
    return {
        "apiVersion": "run.ai/v1alpha1",
        "kind": "Karta",
        "metadata": {
            "name": name,
            "labels": {
                "run.ai/karta-group": "example.com",
                "run.ai/karta-version": "v1",
                "run.ai/karta-kind": "Batchling",
            },
        },
        "spec": {
            "structureDefinition": {
                "rootComponent": {
                    "name": "batchling",
                    "kind": {"group": "example.com", "version": "v1", "kind": "Batchling"},
                    "statusDefinition": {
                        "conditionsDefinition": {"path": ".status.conditions"},
                        "statusMappings": {
                            "running": [{"byConditions": [{"type": "Running", "status": "True"}]}]
                        },
                    },
                },
                "childComponents": [
                    {
                        "name": "coordinator",
                        "ownerRef": "batchling",
                        "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "specDefinition": {"podTemplateSpecPath": ".spec.coordinator.template"},
                        "scaleDefinition": {"replicasPath": "1"},
                        "podSelector": {
                            "componentTypeSelector": {
                                "keyPath": '.metadata.labels["batchling/role"]',
                                "value": "coordinator",
                            }
                        },
                    },
                    {
                        "name": "worker",
                        "ownerRef": "batchling",
                        "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "specDefinition": {"podTemplateSpecPath": ".spec.workers.template"},
                        "scaleDefinition": {"replicasPath": ".spec.workers.replicas"},
                        "podSelector": {
                            "componentTypeSelector": {"matchLabels": {"batchling/role": "worker"}}
                        },
                    },
                ],
            },
            "optimizationInstructions": {
                "gangScheduling": {
                    "podGroup": {
                        "name": "batchling",
                        "subGroups": [{"componentName": "coordinator"}, {"componentName": "worker"}],
                    }
                }
            },
        },
    }


def test_karta_lifecycle_and_defaults(kube: Kube) -> None:
    name = f"krt-{uuid.uuid4().hex[:8]}"
    created = kube.create(KARTA_API, batchling_karta(name))
    assert "namespace" not in created["metadata"]  # cluster-scoped
    cond_def = created["spec"]["structureDefinition"]["rootComponent"]["statusDefinition"][
        "conditionsDefinition"
    ]
    assert cond_def == {
        "path": ".status.conditions",
        "typeFieldName": "type",
        "statusFieldName": "status",
        "messageFieldName": "message",
        "reasonFieldName": "reason",
    }
    sel = "run.ai/karta-group=example.com,run.ai/karta-version=v1,run.ai/karta-kind=Batchling"
    assert name in [k["metadata"]["name"] for k in kube.list(KARTA_API, label_selector=sel)]
    got = kube.patch(
        f"{KARTA_API}/{name}",
        {"spec": {"optimizationInstructions": {"gangScheduling": {"podGroup": {"topology": {
            "topologyName": "t", "preferredTopologyLevel": "rack", "requiredTopologyLevel": "zone"}}}}}},
    )  # fmt: skip
    assert (
        got["spec"]["optimizationInstructions"]["gangScheduling"]["podGroup"]["topology"]["topologyName"]
        == "t"
    )
    kube.delete(f"{KARTA_API}/{name}")
    assert not kube.exists(f"{KARTA_API}/{name}")


@pytest.mark.parametrize(
    "mutate",
    [
        lambda k: k["spec"].pop("structureDefinition"),
        lambda k: k["spec"]["structureDefinition"]["childComponents"][0]["podSelector"].update(
            componentTypeSelector={"value": "x"}
        ),
        lambda k: k["spec"]["structureDefinition"]["childComponents"][1]["podSelector"].update(
            componentTypeSelector={"matchLabels": {}}
        ),
        lambda k: k["spec"]["structureDefinition"]["childComponents"].append(
            {"name": "worker", "ownerRef": "x"}
        ),
        lambda k: k["spec"]["optimizationInstructions"]["gangScheduling"]["podGroup"].update(
            topology={"topologyName": "t"}
        ),
    ],
    ids=[
        "no-structure",
        "value-without-keypath",
        "empty-matchlabels",
        "duplicate-component",
        "partial-topology",
    ],
)
def test_karta_schema_rejects(kube: Kube, mutate: Any) -> None:
    k = batchling_karta(f"bad-{uuid.uuid4().hex[:8]}")
    mutate(k)
    with pytest.raises(KubeError) as err:
        kube.create(KARTA_API, k)
    assert err.value.status == 422, err.value


THIRD_PARTY = {
    "jobset": {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "spec": {
            "startupPolicy": {"startupPolicyOrder": "InOrder"},
            "replicatedJobs": [
                {"name": "workers", "replicas": 2,
                 "template": {"spec": {"parallelism": 4, "template": pod_template({"role": "w"})}}}
            ],
        },
    },
    "pytorchjob": {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "spec": {
            "elasticPolicy": {"minReplicas": 1, "maxReplicas": 3},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": pod_template()},
                "Worker": {"replicas": 3, "template": pod_template({"role": "w"})},
            },
        },
    },
    "mpijob-v2beta1": {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "spec": {
            "launcherCreationPolicy": "WaitForWorkersReady",
            "mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": pod_template()},
                                "Worker": {"replicas": 2, "template": pod_template({"role": "w"})}},
        },
    },
    "raycluster": {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "spec": {
            "headGroupSpec": {"template": pod_template()},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "minReplicas": 1, "numOfHosts": 2,
                                  "template": pod_template({"role": "w"})}],
        },
    },
    "lws": {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "spec": {"replicas": 2, "startupPolicy": "LeaderReady",
                 "leaderWorkerTemplate": {"size": 4, "workerTemplate": pod_template({"role": "w"})}},
    },
    "dgd-v1beta1": {
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoGraphDeployment",
        "spec": {"components": [{"name": "decode", "replicas": 2,
                                 "podTemplate": pod_template({"role": "w"})}]},
    },
    "batchling": {
        "apiVersion": "example.com/v1",
        "kind": "Batchling",
        "spec": {"workers": {"replicas": 3, "template": pod_template({"role": "w"})},
                 "coordinator": {"template": pod_template()}},
    },
}  # fmt: skip


@pytest.mark.parametrize("key", sorted(THIRD_PARTY))
def test_third_party_kind_roundtrip(kube: Kube, namespace: str, key: str) -> None:
    obj = {**THIRD_PARTY[key], "metadata": {"name": key, "labels": {"kind-test": key}}}
    [applied] = kube.apply_yaml([obj], namespace=namespace)
    assert applied["spec"] == obj["spec"]  # nested templates preserved as written
    path = kube.object_path(applied)
    assert kube.get(path)["metadata"]["uid"] == applied["metadata"]["uid"]
    coll = kube.path_for(obj["apiVersion"], obj["kind"], namespace)
    assert [o["metadata"]["name"] for o in kube.list(coll, label_selector=f"kind-test={key}")] == [key]
    patched = kube.patch(path, {"metadata": {"annotations": {"kai.scheduler/batch-min-member": "2"}}})
    assert patched["metadata"]["annotations"]["kai.scheduler/batch-min-member"] == "2"
    kube.delete(path)
    wait_until(lambda: not kube.exists(path), timeout=10, what=f"{key} deleted")


def test_third_party_typed_fields_validated(kube: Kube, namespace: str) -> None:
    bad = {**THIRD_PARTY["batchling"], "metadata": {"name": "bad"}}
    bad["spec"] = {"workers": {"replicas": -1, "template": {}}, "coordinator": {"template": {}}}
    with pytest.raises(KubeError) as err:
        kube.create(kube.path_for("example.com/v1", "Batchling", namespace), bad)
    assert err.value.status == 422


# ---------------------------------------------------------------------------------------------- controllers


def test_job_creates_pending_pods_with_owner(kube: Kube, namespace: str) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {
                "metadata": {"labels": {"app": "train"}},
                "spec": {"restartPolicy": "Never", "schedulerName": "kai-scheduler",
                         "containers": [{"name": "main", "image": "busybox"}]},
            },
        },
    }  # fmt: skip
    created = kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
    pods = wait_until(
        lambda: (
            (p := kube.list(f"/api/v1/namespaces/{namespace}/pods", label_selector="app=train"))
            and len(p) == 2
            and p
        ),
        timeout=30,
        what="2 pods of the Job",
    )
    for pod in pods:
        [ref] = pod["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
            "Job",
            "train",
            created["metadata"]["uid"],
            True,
        )
        assert pod["status"]["phase"] == "Pending"
        assert pod["spec"]["schedulerName"] == "kai-scheduler"
        assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "train"
    # what the grouper does to a pod: annotate it and label its subgroup (strategic merge patch on a core kind)
    name = pods[0]["metadata"]["name"]
    got = kube.patch(
        f"/api/v1/namespaces/{namespace}/pods/{name}",
        {
            "metadata": {
                "annotations": {"pod-group-name": "pg-train"},
                "labels": {"kai.scheduler/subgroup-name": "a"},
            }
        },
        type="strategic",
    )
    assert got["metadata"]["annotations"]["pod-group-name"] == "pg-train"
    assert got["metadata"]["labels"]["app"] == "train"


def test_garbage_collector_removes_dependent_podgroup(kube: Kube, namespace: str) -> None:
    owner = kube.apply_yaml([{**THIRD_PARTY["jobset"], "metadata": {"name": "owner"}}], namespace=namespace)[
        0
    ]
    pg = podgroup("pg-owner-x", minMember=1)
    pg["metadata"]["ownerReferences"] = [{
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "owner",
        "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True,
    }]  # fmt: skip
    kube.create(pg_path(namespace), pg)
    kube.delete(kube.object_path(owner))
    wait_until(
        lambda: not kube.exists(pg_path(namespace, "pg-owner-x")), timeout=30, what="PodGroup collected"
    )


# ---------------------------------------------------------------------------------------------- RBAC


def test_rbac_with_service_account_tokens(cluster: LocalCluster, kube: Kube, namespace: str) -> None:
    kube.apply_yaml(REPO / "deploy" / "rbac.yaml")

    cluster.create_service_account(namespace, "nobody")
    with kube.with_token(cluster.create_token(namespace, "nobody")) as nobody:
        assert nobody.request("GET", f"/api/v1/namespaces/{namespace}/pods").status_code == 403
        assert nobody.request("POST", pg_path(namespace), json=podgroup("x", minMember=1)).status_code == 403

    token = cluster.create_token("kai-system", "kai-pod-grouper", expiration_seconds=600)
    with kube.with_token(token) as grouper:
        # the binding was just applied: allow the authorizer's informers a moment
        wait_until(lambda: grouper.request("GET", f"/api/v1/namespaces/{namespace}/pods").status_code == 200,
                   timeout=10, what="RBAC binding effective")  # fmt: skip
        assert (
            grouper.create(pg_path(namespace), podgroup("by-grouper", minMember=2))["spec"]["minMember"] == 2
        )
        pg = grouper.get(pg_path(namespace, "by-grouper"))
        pg["spec"]["queue"] = "q"
        assert grouper.replace(pg_path(namespace, "by-grouper"), pg)["spec"]["queue"] == "q"
        assert grouper.list(KARTA_API) is not None
        assert grouper.list(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets") == []  # allowed (empty here)
        # not granted: deleting pods, writing jobs, reading secrets
        assert grouper.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/p").status_code == 403
        assert grouper.request("GET", f"/api/v1/namespaces/{namespace}/secrets").status_code == 403
        assert (
            grouper.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", json={}).status_code == 403
        )
        who = grouper.create(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        assert who["status"]["userInfo"]["username"] == "system:serviceaccount:kai-system:kai-pod-grouper"

    with kube.with_token("not-a-valid-token") as anon:
        assert anon.request("GET", f"/api/v1/namespaces/{namespace}/pods").status_code == 401


def test_admin_kubeconfig_works_with_the_grouper_kubeconfig_reader(cluster: LocalCluster, namespace: str) -> None:
    with SyncKube.connect(cluster.kubeconfig_path) as kube:
        sas = kube.list_items(f"/api/v1/namespaces/{namespace}/serviceaccounts")
    assert "default" in [sa["metadata"]["name"] for sa in sas]


def test_cpu_seconds_of_a_component_grows_with_the_work_it_serves(cluster: LocalCluster, kube: Kube) -> None:
    """What the cluster benchmark charges the API server for a restart's lists: its process's CPU time."""
    before = cluster.cpu_seconds("kube-apiserver")
    for _ in range(200):
        kube.get("/api/v1/namespaces")
    after = cluster.cpu_seconds("kube-apiserver")
    assert 0 < before < after
    with pytest.raises(RuntimeError, match="kube-nonexistent is not running"):
        cluster.cpu_seconds("kube-nonexistent")
