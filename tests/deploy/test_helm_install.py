"""The chart against a real API server of its own (started without the PodGroup and Karta CRDs, so Helm
installs them): ``helm template`` applied with server-side dry-run, ``helm install``, the grouper run with
the installed Deployment's arguments and the chart's ServiceAccount token (the Deployment's pods cannot
run: no kubelet), ``helm upgrade`` adding a workload kind, ``helm uninstall`` leaving the CRDs.

The tests run in file order and share one release.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusters import TEST_CRDS, cluster_fixture
from controller.harness import annotated, job, pod_groups
from deploy_support import credentials, deployment_args, running
from kube import Kube, KubeError, wait_until

from devtools import chart
from devtools.cluster import LocalCluster

REPO = Path(__file__).resolve().parents[2]
NS = "kai-system"
RELEASE = "kai-pod-grouper"
CRDS = ("podgroups.scheduling.run.ai", "kartas.run.ai", "workloadgroups.grouper.kai-pod-grouper.io")
pytestmark = pytest.mark.cluster

BATCHLING_KARTA = yaml.safe_load((REPO / "examples" / "batchling-karta.yaml").read_text())
KARTA_VALUE = {
    "name": BATCHLING_KARTA["metadata"]["name"],
    "labels": BATCHLING_KARTA["metadata"]["labels"],
    "spec": BATCHLING_KARTA["spec"],
}
BATCHLING_KIND = {"group": "example.com", "kind": "Batchling", "resource": "batchlings"}


# a control plane with the test CRDs (JobSet, Batchling, ...) but not the chart's own
bare = cluster_fixture("bare", shared=False, crds=TEST_CRDS)


@pytest.fixture(scope="module")
def admin(bare: LocalCluster) -> Iterator[Kube]:
    with Kube.from_cluster(bare) as k:
        yield k


def helm(helm_bin: str, bare: LocalCluster, *args: str, values: dict[str, Any] | None = None) -> str:
    cmd = [helm_bin, "--kubeconfig", bare.kubeconfig_path, *args]
    if values is not None:
        cmd += ["--values", "-"]
    proc = subprocess.run(cmd, input=json.dumps(values or {}), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"helm {' '.join(args)}: {proc.stderr}{proc.stdout}"
    return proc.stdout


def crds_present(admin: Kube) -> set[str]:
    return {
        c["metadata"]["name"] for c in admin.list("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
    } & set(CRDS)


def test_template_passes_server_side_dry_run(helm_bin: str, admin: Kube) -> None:
    """Every rendered object (CRDs included) is accepted by the API server's validation and admission."""
    assert crds_present(admin) == set()
    admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    rendered = chart.template(extra=("--include-crds",))
    objs = [d for d in yaml.safe_load_all(rendered) if d]
    kinds = sorted({o["kind"] for o in objs})
    assert kinds == sorted({
        "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
        "Service", "Deployment", "PodDisruptionBudget",
    })
    for obj in objs:
        if obj["kind"] != "CustomResourceDefinition":
            admin.resource_info(obj["apiVersion"], obj["kind"])  # served by this API server
        resp = admin.request(
            "PATCH", admin.object_path(obj),
            content=json.dumps(obj), headers={"Content-Type": "application/apply-patch+yaml"},
            params={"dryRun": "All", "fieldManager": "helm-test", "force": "true"},
        )
        assert resp.status_code in (200, 201), f"{obj['kind']} {obj['metadata']['name']}: {resp.text}"
    assert crds_present(admin) == set(), "a dry run creates nothing"


def test_helm_install(helm_bin: str, bare: LocalCluster, admin: Kube) -> None:
    helm(helm_bin, bare, "install", RELEASE, str(chart.CHART), "-n", NS, values={"kartas": [KARTA_VALUE]})
    assert crds_present(admin) == set(CRDS), "Helm installs the chart's crds/ first"
    status = json.loads(helm(helm_bin, bare, "status", RELEASE, "-n", NS, "-o", "json"))
    assert status["info"]["status"] == "deployed"
    dep = admin.get(f"/apis/apps/v1/namespaces/{NS}/deployments/{RELEASE}")
    assert dep["spec"]["replicas"] == 2
    assert admin.get(f"/api/v1/namespaces/{NS}/serviceaccounts/kai-pod-grouper")
    assert admin.get(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/{RELEASE}")
    assert admin.get(f"/apis/run.ai/v1alpha1/kartas/{KARTA_VALUE['name']}")["spec"] == KARTA_VALUE["spec"]


def _batchling(admin: Kube, ns: str, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A Batchling (1 coordinator, 2 workers) and the pods its imaginary operator would create."""
    bl = admin.create(f"/apis/example.com/v1/namespaces/{ns}/batchlings", {
        "apiVersion": "example.com/v1", "kind": "Batchling", "metadata": {"name": name},
        "spec": {"coordinator": {"template": {}}, "workers": {"replicas": 2, "template": {}}},
    })
    ref = {"apiVersion": "example.com/v1", "kind": "Batchling", "name": name, "uid": bl["metadata"]["uid"],
           "controller": True}
    pods = []
    for i, role in enumerate(("coordinator", "worker", "worker")):
        pods.append(admin.create(f"/api/v1/namespaces/{ns}/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-{role}-{i}", "labels": {"example.com/role": role},
                         "ownerReferences": [ref]},
            "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "x"}]},
        }))
    return bl, pods


def _namespace(admin: Kube, name: str) -> str:
    admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_until(lambda: admin.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"), 30,
               what=f"ServiceAccount {name}/default")
    return name


def test_grouper_as_the_installed_release(helm_bin: str, bare: LocalCluster, admin: Kube, tmp_path: Path) -> None:
    """The installed Deployment's args and ServiceAccount: grants what grouping needs, and no more."""
    args = deployment_args(helm(helm_bin, bare, "get", "manifest", RELEASE, "-n", NS))
    assert not [a for a in args if a.startswith("--extra-owner-kinds")]
    creds = credentials(tmp_path, bare, NS, "kai-pod-grouper")
    ns = _namespace(admin, "team-a")
    with running(args, bare, creds, tmp_path / "grouper.log") as g:
        g.wait_ready()
        token = (creds / "token").read_text()
        auth = {"Authorization": f"Bearer {token}"}
        # a kind the chart grants: a batch Job (native plugin)
        created = admin.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job("train", 2))
        ps = wait_until(lambda: annotated(admin, ns, 2, "job-name=train"), 60, what="Job pods grouped")
        assert {p["metadata"]["annotations"]["pod-group-name"] for p in ps} == {
            f"pg-train-{created['metadata']['uid']}"
        }
        # a kind it does not grant: Batchling has the chart's Karta definition but no RBAC rule, so the owner
        # walk stops at Forbidden; each pod is grouped alone and the record says why
        bl, bl_pods = _batchling(admin, ns, "sweep")
        wait_until(lambda: annotated(admin, ns, 3, "example.com/role"), 60, what="Batchling pods grouped")
        assert f"pg-{bl['metadata']['uid']}-batchling" not in pod_groups(admin, ns)
        pod_view = g.http.get(f"/pods/{ns}/{bl_pods[1]['metadata']['name']}", headers=auth)
        assert pod_view.status_code == 200, pod_view.text
        text = json.dumps(pod_view.json())
        assert f"forbidden to read Batchling {ns}/sweep" in text, text[:2000]
        # what the ServiceAccount cannot do (403 from the API server)
        other = admin.create(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases", _lease("someone-else"))
        sa = admin.with_token(token)
        try:
            for method, path, body in (
                ("GET", f"/api/v1/namespaces/{NS}/secrets", None),
                ("GET", f"/api/v1/namespaces/{ns}/secrets", None),
                ("DELETE", f"/api/v1/namespaces/{ns}/pods/{ps[0]['metadata']['name']}", None),
                ("PUT", f"/api/v1/namespaces/{ns}/pods/{ps[0]['metadata']['name']}", ps[0]),
                ("GET", f"/apis/example.com/v1/namespaces/{ns}/batchlings", None),
                ("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/someone-else", None),
                ("PUT", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/someone-else", other),
                ("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/kai-pod-grouper", None),
                ("GET", f"/api/v1/namespaces/{NS}/configmaps", None),
                ("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", None),
            ):
                kw = {"json": body} if body is not None else {}
                resp = sa.request(method, path, **kw)
                assert resp.status_code == 403, f"{method} {path}: {resp.status_code} {resp.text[:300]}"
        finally:
            sa.close()
        # ... and what it can: its own Lease, held by this replica
        lease = admin.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/kai-pod-grouper")
        assert lease["spec"]["holderIdentity"] == g.name
        assert g.http.get("/metrics").status_code == 401, "the API needs a token (--http-auth=kubernetes)"


def _lease(name: str) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name, "namespace": NS},
            "spec": {"holderIdentity": "other"}}


def test_helm_upgrade_adds_a_workload_kind(helm_bin: str, bare: LocalCluster, admin: Kube, tmp_path: Path) -> None:
    """`extraOwnerKinds` (with the Karta already installed by the chart) adds the RBAC rule and the flag."""
    helm(helm_bin, bare, "upgrade", RELEASE, str(chart.CHART), "-n", NS, "--reuse-values",
         values={"extraOwnerKinds": [BATCHLING_KIND], "args": {"maxConcurrentReconciles": 4}})
    args = deployment_args(helm(helm_bin, bare, "get", "manifest", RELEASE, "-n", NS))
    assert "--extra-owner-kinds=Batchling.example.com" in args
    assert "--max-concurrent-reconciles=4" in args
    dep = admin.get(f"/apis/apps/v1/namespaces/{NS}/deployments/{RELEASE}")
    assert dep["spec"]["template"]["spec"]["containers"][0]["args"] == args, "the Deployment was updated"
    rules = admin.get(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{RELEASE}")["rules"]
    assert {"apiGroups": ["example.com"], "resources": ["batchlings"], "verbs": ["get", "list", "watch"]} in rules

    creds = credentials(tmp_path, bare, NS, "kai-pod-grouper")
    ns = _namespace(admin, "team-b")
    with running(args, bare, creds, tmp_path / "grouper.log") as g:
        g.wait_ready()
        bl, _ = _batchling(admin, ns, "sweep")
        name = f"pg-{bl['metadata']['uid']}-batchling"
        wait_until(lambda: annotated(admin, ns, 3, "example.com/role"), 60, what="Batchling pods grouped")
        pg = wait_until(lambda: pod_groups(admin, ns).get(name), 30, what=f"PodGroup {name}")
        assert {sg["name"] for sg in pg["spec"]["subGroups"]} >= {"coordinator", "worker"}
        assert pg["metadata"]["ownerReferences"][0]["kind"] == "Batchling"


def test_helm_uninstall_leaves_the_crds(helm_bin: str, bare: LocalCluster, admin: Kube) -> None:
    helm(helm_bin, bare, "uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "60s")
    for path in (
        f"/apis/apps/v1/namespaces/{NS}/deployments/{RELEASE}",
        f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{RELEASE}",
        f"/api/v1/namespaces/{NS}/serviceaccounts/kai-pod-grouper",
        f"/apis/run.ai/v1alpha1/kartas/{KARTA_VALUE['name']}",
    ):
        with pytest.raises(KubeError) as e:
            admin.get(path)
        assert e.value.status == 404, path
    assert crds_present(admin) == set(CRDS), "Helm never deletes CRDs (the README says how to)"
    # the PodGroups already written are kept with their workloads
    assert admin.list("/apis/scheduling.run.ai/v2alpha2/podgroups")
