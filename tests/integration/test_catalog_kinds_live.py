"""The Workload Map v0.2.9 kinds against the real API server, with their test CRDs (tests/crds):
the realistic catalog fixtures are accepted as stored objects without losing a field the definitions
read, and a running grouper groups their pods as KAI v0.18 does with the catalog installed.

- NIMCache (no gang instructions): the default grouper, one PodGroup owned by the NIMCache; its pod is
  created by the real Job controller from the operator's Job.
- LLMInferenceService (v1alpha1 and v1alpha2): one PodGroup per service over the model-server and router
  Deployments' pods (created by the real Deployment/ReplicaSet controllers).
- Sandbox: one PodGroup per Sandbox for its pod (created here, as the sandbox controller does).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from controller.harness import ANNOTATION, GrouperThread, annotated, label_namespace, pod_groups
from kube import Kube, wait_until

from grouper.karta import Evaluator, load_dir
from grouper.model.objects import GVK

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "catalog" / "fixtures"
PLURAL = {"NIMCache": "nimcaches", "LLMInferenceService": "llminferenceservices", "Sandbox": "sandboxes"}
pytestmark = pytest.mark.cluster


def docs(rel: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((FIXTURES / rel).read_text()) if d]


def as_new(obj: dict[str, Any], ns: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    """The object as a client submits it: no server-set metadata or status; optionally owned by ``owner``."""
    out = copy.deepcopy(obj)
    m = out["metadata"]
    for k in ("uid", "resourceVersion", "creationTimestamp", "generation", "ownerReferences"):
        m.pop(k, None)
    m["namespace"] = ns
    out.pop("status", None)
    if owner is not None:
        m["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
                                 "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    return out


def path(obj: dict[str, Any], ns: str) -> str:
    group, _, version = obj["apiVersion"].rpartition("/")
    return f"/apis/{group}/{version}/namespaces/{ns}/{PLURAL[obj['kind']]}"


def evaluator_for(obj: dict[str, Any]) -> Evaluator:
    defs, errors = load_dir(REPO / "definitions")
    assert not errors
    return Evaluator(next(d for d in defs if d.gvk == GVK.of(obj)))


@pytest.mark.parametrize("rel", ["nimcache/running.yaml", "llminferenceservice/v1alpha1-running.yaml",
                                 "llminferenceservice/v1alpha2-pending.yaml", "sandbox/running.yaml"])
def test_stored_object_keeps_what_the_definition_reads(kube: Kube, namespace: str, rel: str) -> None:
    fixture = docs(rel)[0]
    stored = kube.create(path(fixture, namespace), as_new(fixture, namespace))
    ev = evaluator_for(fixture)
    root = ev.definition.root
    assert ev.subtree_scale(stored, root) == ev.subtree_scale(fixture, root)
    for comp in ev.definition.components():
        assert ev.scale(stored, comp) == ev.scale(fixture, comp), comp.name
    assert ev.instance_ids(stored, root) == ev.instance_ids(fixture, root)


def test_nimcache_pod_is_grouped_by_the_default_grouper(cluster: Any, kube: Kube, namespace: str) -> None:
    label_namespace(kube, namespace)
    nc_doc, job_doc, _ = docs("nimcache/running.yaml")
    with GrouperThread(cluster, namespace):
        nc = kube.create(path(nc_doc, namespace), as_new(nc_doc, namespace))
        job = as_new(job_doc, namespace, owner=nc)
        job["spec"]["template"]["spec"]["containers"][0]["resources"] = {}  # no GPUs needed to be created
        kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
        (p,) = wait_until(lambda: annotated(kube, namespace, 1), 30, what="the caching pod grouped")
    pgs = pod_groups(kube, namespace)
    name = f"pg-{nc['metadata']['name']}-{nc['metadata']['uid']}"
    assert p["metadata"]["annotations"][ANNOTATION] == name and set(pgs) == {name}
    owner = pgs[name]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("NIMCache", nc["metadata"]["uid"])
    assert pgs[name]["spec"]["minMember"] == 1


@pytest.mark.parametrize("rel", ["llminferenceservice/v1alpha1-running.yaml", "llminferenceservice/v1alpha2-running.yaml"])
def test_llminferenceservice_pods_share_one_podgroup(cluster: Any, kube: Kube, namespace: str, rel: str) -> None:
    label_namespace(kube, namespace)
    objs = docs(rel)
    svc_doc = objs[0]
    deployments = [d for d in objs if d["kind"] == "Deployment"]
    want = sum(d["spec"]["replicas"] for d in deployments)
    with GrouperThread(cluster, namespace):
        svc = kube.create(path(svc_doc, namespace), as_new(svc_doc, namespace))
        for d in deployments:
            body = as_new(d, namespace, owner=svc)
            for c in body["spec"]["template"]["spec"]["containers"]:
                c["resources"] = {}
            kube.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", body)
        ps = wait_until(lambda: annotated(kube, namespace, want), 40, what=f"{want} pods grouped")
    pg_name = f"pg-{svc['metadata']['uid']}-{svc['metadata']['name']}"
    assert {p["metadata"]["annotations"][ANNOTATION] for p in ps} == {pg_name}
    pg = pod_groups(kube, namespace)[pg_name]
    assert pg["spec"]["minMember"] == want
    assert pg["metadata"]["ownerReferences"][0]["kind"] == "LLMInferenceService"


def test_sandbox_pod_is_grouped_per_sandbox(cluster: Any, kube: Kube, namespace: str) -> None:
    label_namespace(kube, namespace)
    sb_doc, pod_doc = docs("sandbox/running.yaml")
    with GrouperThread(cluster, namespace):
        sb = kube.create(path(sb_doc, namespace), as_new(sb_doc, namespace))
        pod = as_new(pod_doc, namespace, owner=sb)
        pod["spec"].pop("nodeName", None)
        pod["spec"]["containers"][0]["resources"] = {}
        kube.create(f"/api/v1/namespaces/{namespace}/pods", pod)
        (p,) = wait_until(lambda: annotated(kube, namespace, 1), 30, what="the sandbox pod grouped")
    uid = sb["metadata"]["uid"]
    assert p["metadata"]["annotations"][ANNOTATION] == f"pg-{uid}-{uid}"
    assert pod_groups(kube, namespace)[f"pg-{uid}-{uid}"]["spec"]["minMember"] == 1
