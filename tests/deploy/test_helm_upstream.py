"""The chart with the upstream backend and the admission webhook, installed with ``helm install`` on a
control plane of its own with the Workload API on: the ClusterRole grants what the upstream backend writes
(the grouper, run with the installed Deployment's arguments and the chart's ServiceAccount token, writes a
Job's Workload and PodGroup), the webhook's certificate Secret, client-CA ConfigMap and
MutatingWebhookConfiguration (failurePolicy Ignore) are installed, the certificate serves the Service's
name and survives ``helm upgrade``, and the webhook answers the API server's client certificate with
``spec.schedulingGroup``. (The Deployment's pods cannot run: no kubelet; the grouper runs locally.)

The tests run in file order and share one release."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_support import credentials, deployment_args, free_port, running
from kube import Kube, wait_until

from devtools import chart
from devtools.cluster import LocalCluster

REPO = Path(__file__).resolve().parents[2]
NS = "kai-system"
RELEASE = "kai-pod-grouper"
SVC_HOST = f"{RELEASE}.{NS}.svc"
SCHED = "scheduling.k8s.io/v1beta1"
pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def wcluster() -> Iterator[LocalCluster]:
    """A control plane with the Workload API (gates and versions of devtools/cluster/gang.py), no chart CRDs."""
    with LocalCluster(crds=(REPO / "tests" / "crds",), workload_api=True) as c:
        yield c


@pytest.fixture(scope="module")
def admin(wcluster: LocalCluster) -> Iterator[Kube]:
    with Kube.from_cluster(wcluster) as k:
        yield k


def values(cluster: LocalCluster) -> dict[str, Any]:
    return {
        "replicas": 1,
        "args": {"backend": "upstream", "schedulerName": "default-scheduler"},
        "webhook": {"enabled": True, "clientCA": Path(cluster.webhook_client_ca).read_text()},
    }


def helm(helm_bin: str, cluster: LocalCluster, *args: str, vals: dict[str, Any] | None = None) -> str:
    cmd = [helm_bin, "--kubeconfig", cluster.kubeconfig_path, *args]
    if vals is not None:
        cmd += ["--values", "-"]
    proc = subprocess.run(cmd, input=json.dumps(vals or {}), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"helm {' '.join(args)}: {proc.stderr}{proc.stdout}"
    return proc.stdout


def secret(admin: Kube) -> dict[str, bytes]:
    data = admin.get(f"/api/v1/namespaces/{NS}/secrets/{RELEASE}-webhook-tls")["data"]
    return {k: base64.b64decode(v) for k, v in data.items()}


def test_install_grants_the_upstream_kinds_and_registers_the_webhook(
    helm_bin: str, wcluster: LocalCluster, admin: Kube
) -> None:
    admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    helm(helm_bin, wcluster, "install", RELEASE, str(chart.CHART), "-n", NS, vals=values(wcluster))
    rules = admin.get(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{RELEASE}")["rules"]
    assert {"apiGroups": ["scheduling.k8s.io"], "resources": ["workloads"],
            "verbs": ["get", "create", "update"]} in rules
    assert {"apiGroups": ["scheduling.k8s.io"], "resources": ["podgroups"],
            "verbs": ["get", "list", "watch", "create", "update"]} in rules
    assert {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["get"]} in rules
    assert not [r for r in rules if "compositepodgroups" in r["resources"]]  # not written: not granted

    tls = secret(admin)
    assert set(tls) == {"ca.crt", "tls.crt", "tls.key"}
    (hook,) = admin.get(f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{RELEASE}")["webhooks"]
    assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None"
    assert hook["clientConfig"]["service"] == {"name": RELEASE, "namespace": NS, "port": 443, "path": "/mutate-pods"}
    assert base64.b64decode(hook["clientConfig"]["caBundle"]) == tls["ca.crt"]
    assert hook["rules"][0]["operations"] == ["CREATE"] and hook["rules"][0]["resources"] == ["pods"]
    ports = admin.get(f"/api/v1/namespaces/{NS}/services/{RELEASE}")["spec"]["ports"]
    assert {"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"} in ports
    client_ca = admin.get(f"/api/v1/namespaces/{NS}/configmaps/{RELEASE}-webhook-client-ca")["data"]["ca.crt"]
    assert client_ca == Path(wcluster.webhook_client_ca).read_text()


def test_a_pod_is_admitted_while_the_webhook_cannot_be_reached(admin: Kube) -> None:
    """failurePolicy Ignore: the Service has no endpoints here (no kubelet), pods are created all the same."""
    admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-u"}})
    wait_until(lambda: admin.exists("/api/v1/namespaces/team-u/serviceaccounts/default"), 30, what="default SA")
    pod = admin.create("/api/v1/namespaces/team-u/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "lonely"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    })
    assert "schedulingGroup" not in pod["spec"]


def test_upgrade_keeps_the_webhook_certificate(helm_bin: str, wcluster: LocalCluster, admin: Kube) -> None:
    before = secret(admin)
    helm(helm_bin, wcluster, "upgrade", RELEASE, str(chart.CHART), "-n", NS, "--reuse-values",
         vals={"args": {"maxConcurrentReconciles": 4}})
    assert secret(admin) == before
    (hook,) = admin.get(f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{RELEASE}")["webhooks"]
    assert base64.b64decode(hook["clientConfig"]["caBundle"]) == before["ca.crt"]


def _review(sock: ssl.SSLSocket, review: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps(review).encode()
    head = f"POST /mutate-pods HTTP/1.1\r\nHost: {SVC_HOST}\r\nContent-Type: application/json\r\n"
    sock.sendall(f"{head}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head_b, _, payload = data.partition(b"\r\n\r\n")
    assert head_b.split(b" ", 2)[1] == b"200", data[:500]
    return dict(json.loads(payload))


def test_the_installed_release_writes_upstream_objects_and_serves_the_webhook(
    helm_bin: str, wcluster: LocalCluster, admin: Kube, tmp_path: Path
) -> None:
    manifest = helm(helm_bin, wcluster, "get", "manifest", RELEASE, "-n", NS)
    args = deployment_args(manifest)
    assert "--backend=upstream" in args and "--webhook-bind-address=0.0.0.0:9443" in args
    # the mounted files (Secret and ConfigMap) where this process can read them, the port on loopback
    files = tmp_path / "webhook"
    files.mkdir()
    tls = secret(admin)
    for name, data in tls.items():
        (files / name).write_bytes(data)
    (files / "client-ca.crt").write_text(Path(wcluster.webhook_client_ca).read_text())
    port = free_port()
    args += [f"--webhook-bind-address=127.0.0.1:{port}", f"--webhook-cert-file={files / 'tls.crt'}",
             f"--webhook-key-file={files / 'tls.key'}", f"--webhook-client-ca={files / 'client-ca.crt'}"]
    creds = credentials(tmp_path, wcluster, NS, RELEASE)
    with running(args, wcluster, creds, tmp_path / "grouper.log") as g:
        g.wait_ready()
        # as the chart's ServiceAccount: a Job's Workload and PodGroup (forbidden without the chart's rules)
        job = admin.create("/apis/batch/v1/namespaces/team-u/jobs", {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "annotations": {"kai.scheduler/batch-min-member": "2"}},
            "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
                "restartPolicy": "Never", "schedulerName": "default-scheduler",
                "containers": [{"name": "c", "image": "busybox"}]}}},
        })
        uid = job["metadata"]["uid"]
        name = f"pg-train-{uid}"
        pg = wait_until(lambda: admin.exists(f"/apis/{SCHED}/namespaces/team-u/podgroups/{name}")
                        and admin.get(f"/apis/{SCHED}/namespaces/team-u/podgroups/{name}"), 60,
                        what="the upstream PodGroup written with the chart's RBAC")
        assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
        assert admin.exists(f"/apis/{SCHED}/namespaces/team-u/workloads/{name}")
        assert "forbidden" not in g.logs().lower(), g.logs()[-3000:]

        # the webhook: the generated certificate is valid for the Service's name (verified against the CA
        # in the caBundle), and the API server's client certificate gets an answer
        webhook_kubeconfig = yaml.safe_load((Path(str(wcluster.data_dir)) / "admission-webhooks.kubeconfig").read_text())
        user = webhook_kubeconfig["users"][0]["user"]
        ctx = ssl.create_default_context(cadata=tls["ca.crt"].decode())
        ctx.load_cert_chain(user["client-certificate"], user["client-key"])
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "generateName": "train-", "namespace": "team-u", "labels": {"job-name": "train"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": uid,
                                 "controller": True}]},
            "spec": {"schedulerName": "default-scheduler", "containers": [{"name": "c", "image": "busybox"}]}}
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "r1", "operation": "CREATE", "namespace": "team-u", "object": pod,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"}}}
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30),
                             server_hostname=SVC_HOST) as sock:
            answer = _review(sock, review)
        resp = answer["response"]
        assert resp["uid"] == "r1" and resp["allowed"] is True
        ops = json.loads(base64.b64decode(resp["patch"]))
        assert {"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": name}} in ops, ops
