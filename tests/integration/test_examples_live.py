"""Every example workload, live: ``grouper run`` (a separate process, authenticated as the ServiceAccount
of deploy/rbac.yaml) groups what the operators would have created, and what it stores in the API server
equals what ``grouper plan`` prints for the same objects.

This covers one workload per native plugin, the Karta catalog kinds (KServe, NIM, Milvus) and a custom
kind known only through a ``Karta`` applied at run time. The cluster here runs without the controller
manager: the examples carry the intermediate objects and pods as the operators and the built-in
controllers create them, and a live Job / ReplicaSet controller would add pods of its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from controller.harness import GROUPER, free_port
from kube import Kube, KubeError, wait_until

from devtools.cluster import LocalCluster
from grouper.core.config import GroupingConfig
from grouper.core.plan import plan
from grouper.karta import DefinitionRegistry
from grouper.runtime.composition import build_grouper

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
CRD_DIRS = (REPO / "deploy" / "crds", REPO / "tests" / "crds")
# Example name -> files submitted together (default "<name>.yaml"); batchling-karta goes with its kind.
INPUTS = {
    "jobset-demo": ["jobset-demo.yaml", "jobset-demo-pods.yaml"],
    "custom-batchling": ["batchling-karta.yaml", "custom-batchling.yaml"],
}
SKIP = {"jobset-demo-pods", "batchling-karta"}
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.yaml") if p.stem not in SKIP)
# What the README tells an operator to add for a kind known only through a Karta definition.
BATCHLING_READER = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "kai-pod-grouper-batchlings"},
        "rules": [{"apiGroups": ["example.com"], "resources": ["batchlings"], "verbs": ["get", "list", "watch"]}],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "kai-pod-grouper-batchlings"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kai-pod-grouper-batchlings"},
        "subjects": [{"kind": "ServiceAccount", "name": "kai-pod-grouper", "namespace": "kai-system"}],
    },
]



@pytest.fixture(scope="module")
def bare() -> Iterator[tuple[LocalCluster, Kube]]:
    with LocalCluster(controller_manager=False, crds=CRD_DIRS) as c, Kube.from_cluster(c) as k:
        yield c, k


@pytest.fixture(scope="module")
def grouper(bare: tuple[LocalCluster, Kube], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``grouper run`` as the ServiceAccount of deploy/rbac.yaml; yields its HTTP address."""
    cluster, kube = bare
    kube.apply_yaml(REPO / "deploy" / "rbac.yaml")
    kube.apply_yaml(BATCHLING_READER)
    token_file = tmp_path_factory.mktemp("grouper") / "token"
    token_file.write_text(cluster.create_token("kai-system", "kai-pod-grouper", expiration_seconds=7200))
    port = free_port()
    log = tmp_path_factory.mktemp("log") / "grouper.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUPER_") and k != "KUBECONFIG"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(GROUPER), "run", "--server", cluster.server, "--token-file", str(token_file),
             "--certificate-authority", cluster.ca_file, "--http-bind-address", f"127.0.0.1:{port}",
             "--definitions", str(REPO / "definitions"), "--log-format", "text"],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert proc.poll() is None, log.read_text()[-4000:]
        try:
            return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(ready, timeout=90, what="grouper ready")
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        print(f"\n[grouper log tail]\n{log.read_text()[-3000:]}", file=sys.stderr)


def submit(kube: Kube, files: list[Path], ns: str) -> list[dict[str, Any]]:
    """Create the objects in file order, as the operators would: owners first, then their dependents,
    rewriting the example's fixed uids to the ones the API server assigns. Status is written through
    the status subresource (plugins read e.g. a RayJob's status.rayClusterName)."""
    uids: dict[str, str] = {}
    created: list[dict[str, Any]] = []
    for file in files:
        for doc in yaml.safe_load_all(file.read_text()):
            if not doc:
                continue
            text = json.dumps(doc)
            for old, new in uids.items():
                text = text.replace(old, new)
            obj = with_namespace(json.loads(text), doc["metadata"].get("namespace"), ns)
            meta = obj["metadata"]
            old_uid = meta.pop("uid", None)
            for key in ("resourceVersion", "creationTimestamp"):
                meta.pop(key, None)
            namespaced = kube.resource_info(obj["apiVersion"], obj["kind"])["namespaced"]
            if namespaced:
                meta["namespace"] = ns
            collection = kube.path_for(obj["apiVersion"], obj["kind"], ns if namespaced else None)
            if obj["kind"] == "Pod":
                ensure_service_account(kube, ns, (obj.get("spec") or {}).get("serviceAccountName") or "default")
            try:
                stored = kube.create(collection, obj)
            except KubeError as exc:
                if exc.status != 409 or namespaced:  # cluster-scoped objects are shared by the examples
                    raise
                stored = kube.get(f"{collection}/{meta['name']}")
            if obj.get("status") and obj["kind"] != "Pod":
                try:
                    stored = kube.patch(f"{collection}/{meta['name']}/status", {"status": obj["status"]})
                except KubeError as exc:
                    if exc.status != 404:  # no status subresource: the status was stored on create
                        raise
            if old_uid:
                uids[old_uid] = stored["metadata"]["uid"]
            created.append(stored)
    return created


def with_namespace(value: Any, old: str | None, new: str) -> Any:
    """Move an example into the test's namespace: every ``namespace`` field that named the example's
    own namespace (metadata, and references such as a PodGang's podReferences) now names ``new``."""
    if isinstance(value, dict):
        return {k: (new if k == "namespace" and v == old else with_namespace(v, old, new)) for k, v in value.items()}
    if isinstance(value, list):
        return [with_namespace(v, old, new) for v in value]
    return value


def ensure_service_account(kube: Kube, ns: str, name: str) -> None:
    """No controller manager here: create the ServiceAccount that pod admission looks for."""
    if not kube.exists(f"/api/v1/namespaces/{ns}/serviceaccounts/{name}"):
        kube.create(f"/api/v1/namespaces/{ns}/serviceaccounts",
                    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})


def planned(kube: Kube, submitted: list[dict[str, Any]]) -> dict[str, Any]:
    """``grouper plan`` over the objects as the API server stored them on submission (before the
    grouper annotated anything), plus the cluster's Kartas and PriorityClasses."""
    registry = DefinitionRegistry(REPO / "definitions")
    for karta in kube.list("/apis/run.ai/v1alpha1/kartas"):
        registry.upsert_cluster_object({"apiVersion": "run.ai/v1alpha1", "kind": "Karta", **karta})
    objects = [o for o in submitted if o["kind"] not in ("Karta", "PriorityClass")]
    for pc in kube.list("/apis/scheduling.k8s.io/v1/priorityclasses"):
        objects.append({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", **pc})
    return plan(objects, build_grouper(GroupingConfig(), registry)).to_json()


@pytest.mark.parametrize("name", NAMES)
def test_example_grouped_live_as_planned(bare: tuple[LocalCluster, Kube], grouper: str, name: str) -> None:
    _, kube = bare
    ns = f"ex-{name}"[:63]
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    files = [EXAMPLES / f for f in INPUTS.get(name, [f"{name}.yaml"])]
    want = planned(kube, submit(kube, files, ns))
    assert want["errors"] == [], want["errors"]
    assert want["podGroups"], f"{name}: the plan has no PodGroup"
    want_pgs = {pg["metadata"]["name"]: pg for pg in want["podGroups"]}
    want_pods = {p["name"]: p for p in want["pods"] if p["namespace"] == ns}

    def stored() -> tuple[dict[str, Any], dict[str, Any]]:
        pgs = {pg["metadata"]["name"]: pg for pg in kube.list(f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups")}
        pods = {p["metadata"]["name"]: p for p in kube.list(f"/api/v1/namespaces/{ns}/pods")}
        return pgs, pods

    def converged() -> bool:
        pgs, pods = stored()
        if set(pgs) != set(want_pgs):
            return False
        for pod_name, p in want_pods.items():
            meta = pods[pod_name]["metadata"]
            if (meta.get("annotations") or {}).get("pod-group-name") != p["podGroup"]:
                return False
            if (meta.get("labels") or {}).get("kai.scheduler/subgroup-name") != p["subGroup"]:
                return False
        return all(pgs[n]["spec"] == want_pgs[n]["spec"] for n in want_pgs)

    try:
        wait_until(converged, timeout=60, interval=0.25, what=f"{name}: PodGroups and pods as planned")
    finally:
        pgs, pods = stored()
        # Precise messages on failure (and the same assertions on success).
        assert set(pgs) == set(want_pgs), f"{name}: stored {sorted(pgs)}, planned {sorted(want_pgs)}"
        for pg_name, pg in want_pgs.items():
            got = pgs[pg_name]
            assert got["spec"] == pg["spec"], f"{name}: PodGroup {pg_name} spec"
            assert got["metadata"]["ownerReferences"] == pg["metadata"]["ownerReferences"]
            for field in ("labels", "annotations"):
                have = got["metadata"].get(field) or {}
                for key, value in (pg["metadata"].get(field) or {}).items():
                    assert have.get(key) == value, f"{name}: PodGroup {pg_name} {field}[{key}]"
        for pod_name, p in want_pods.items():
            meta = pods[pod_name]["metadata"]
            assert (meta.get("annotations") or {}).get("pod-group-name") == p["podGroup"], pod_name
            assert (meta.get("labels") or {}).get("kai.scheduler/subgroup-name") == p["subGroup"], pod_name

    # And the grouper can explain every PodGroup it wrote (its API authenticates callers with TokenReview).
    admin = {"Authorization": f"Bearer {bare[0].admin_token}"}
    for pg_name in want_pgs:
        detail = httpx.get(f"{grouper}/podgroups/{ns}/{pg_name}", headers=admin, timeout=5)
        assert detail.status_code == 200, detail.text
        assert detail.json()["decision"]["plugin"], detail.text


def test_every_native_plugin_and_karta_path_is_covered() -> None:
    """The examples exercise every native plugin family and the Karta fallback."""
    plugins: set[str] = set()
    for name in NAMES:
        files = [EXAMPLES / f for f in INPUTS.get(name, [f"{name}.yaml"])]
        objs = [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]
        registry = DefinitionRegistry(REPO / "definitions")
        for o in objs:
            if o["kind"] == "Karta":
                registry.upsert_cluster_object(o)
        result = plan([o for o in objs if o["kind"] != "Karta"], build_grouper(GroupingConfig(), registry))
        plugins |= {d.plugin for d in result.decisions if d.plugin}
    expected = {
        "BatchJob Grouper", "CronJob Grouper", "Deployment Grouper", "PodJob Grouper", "JobSet Grouper",
        "PyTorchJob Grouper", "MPI Grouper", "TensorFlow Grouper", "XGBoost Grouper", "JAX Grouper", "RayCluster Grouper", "RayJob Grouper", "RayService Grouper", "LWS Grouper", "KNative Grouper",
        "Grove Grouper", "SkipTopOwner Grouper", "Kubeflow Notebook Grouper", "Karta Grouper",
        "StatefulSet Grouper", "Default Grouper",
    }
    missing = {p for p in expected if not any(p in got for got in plugins)}
    assert not missing, f"no example exercises {sorted(missing)}; got {sorted(plugins)}"


def test_restart_over_every_example_writes_nothing(
    bare: tuple[LocalCluster, Kube], grouper: str, tmp_path: Path
) -> None:
    """A fresh grouper over the whole converged examples set (what a restart or a fail-over does) decides
    everything again and writes nothing: every PodGroup's and pod's resourceVersion stays the same."""
    cluster, kube = bare
    namespaces = [n["metadata"]["name"] for n in kube.list("/api/v1/namespaces") if n["metadata"]["name"].startswith("ex-")]
    if len(namespaces) != len(NAMES):
        pytest.skip("runs after every example was grouped (the whole module)")

    def versions() -> dict[str, str]:
        out = {}
        for ns in namespaces:
            for pg in kube.list(f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups"):
                out[f"pg {ns}/{pg['metadata']['name']}"] = pg["metadata"]["resourceVersion"]
            for p in kube.list(f"/api/v1/namespaces/{ns}/pods"):
                out[f"pod {ns}/{p['metadata']['name']}"] = p["metadata"]["resourceVersion"]
        return out

    before = versions()
    token_file = tmp_path / "token"
    token_file.write_text(cluster.create_token("kai-system", "kai-pod-grouper"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUPER_") and k != "KUBECONFIG"}
    log = tmp_path / "second.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(GROUPER), "run", "--server", cluster.server, "--token-file", str(token_file),
             "--certificate-authority", cluster.ca_file, "--http-bind-address", f"127.0.0.1:{port}",
             "--definitions", str(REPO / "definitions"), "--http-auth", "none"],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )
    base = f"http://127.0.0.1:{port}"

    def metric(name: str) -> float:
        text = httpx.get(f"{base}/metrics", timeout=5).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.split("{", 1)[0].split(" ", 1)[0] == name)

    try:
        def settled() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code != 200:
                    return False
                return metric("podgrouper_workqueue_depth") == 0 and metric("podgrouper_reconciles_total") > 0
            except httpx.HTTPError:
                return False

        wait_until(settled, timeout=90, what="the second grouper decided everything")
        time.sleep(1.0)
        writes = sum(float(line.rsplit(" ", 1)[1]) for line in httpx.get(f"{base}/metrics", timeout=5).text.splitlines()
                     if line.startswith("podgrouper_api_requests_total{")
                     and any(f'verb="{v}"' in line for v in ("create", "update", "patch", "delete"))
                     and ('resource="podgroups"' in line or 'resource="pods"' in line))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    after = versions()
    changed = sorted(k for k in before if after.get(k) != before[k])
    assert not changed and after.keys() == before.keys(), f"written on restart: {changed}"
    assert writes == 0
    print(f"\n[measure] restart over {len(namespaces)} examples ({len(before)} objects): 0 writes")
