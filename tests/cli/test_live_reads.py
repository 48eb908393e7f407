"""The command line's cluster reads go through the controller's client stack (``grouper.kube.sync.SyncKube``
over ``KubeClient`` + ``Discovery``): paging, discovery by short name and preferred version, the context's
namespace as the default, and ``ApiError`` for every failure. Against the local API server."""

from __future__ import annotations

import json
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest
from kube import Kube

from grouper.cli.live_workload import KindNotResolved, resolve_kind
from grouper.cli.main import main
from grouper.kube.config import KubeConfigError, explicit
from grouper.kube.sync import SyncKube
from grouper.kube.transport import ApiError
from grouper.model.objects import GVK

PG = GVK("scheduling.run.ai", "v2alpha2", "PodGroup")


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_lists_every_page_with_kind_and_api_version(cluster: Any, kube: Kube, namespace: str) -> None:
    for i in range(7):
        kube.create(f"/api/v1/namespaces/{namespace}/configmaps",
                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}", "labels": {"n": str(i)}}})
    with SyncKube.connect(cluster.kubeconfig_path) as k:
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        items = k.run(k.client.list_items(path, {"labelSelector": "n"}, page_size=2))  # 4 pages
        assert sorted(i["metadata"]["name"] for i in items) == [f"cm-{i}" for i in range(7)]
        assert {(i["apiVersion"], i["kind"]) for i in items} == {("v1", "ConfigMap")}
        assert [i["metadata"]["name"] for i in k.list_items(path, {"labelSelector": "n=3"})] == ["cm-3"]


def test_discovery_names_and_preferred_versions(cluster: Any) -> None:
    with SyncKube.connect(cluster.kubeconfig_path) as k:
        deploy = next(r for r in k.served("apps", "v1") if r.kind == "Deployment")
        assert {"deployment", "deployments", "deploy"} <= deploy.names() and deploy.namespaced
        pg = next(r for r in k.served(PG.group, PG.version) if r.kind == "PodGroup")
        assert pg.short_names == ("pg",) and pg.singular == "podgroup"
        assert k.served("nothing.example.com", "v1") == []
        assert k.preferred_version("apps") == "v1"
        assert k.preferred_version("") == "v1"
        assert k.preferred_version("nothing.example.com") is None
        # the user's KIND among the Karta-covered kinds: by short name, qualified, or not installed
        assert resolve_kind(k, "pg", {PG, GVK("apps", "v1", "Deployment")}).kind == "PodGroup"
        assert resolve_kind(k, "deploy.apps", {PG, GVK("apps", "v1", "Deployment")}).plural == "deployments"
        with pytest.raises(KindNotResolved, match="Widget is not installed") as missing:
            resolve_kind(k, "widget", {GVK("nothing.example.com", "v1", "Widget")})
        assert missing.value.not_installed


def test_every_failure_is_an_api_error(cluster: Any, kube: Kube, namespace: str, tmp_path: Path) -> None:
    kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nobody"}})
    token = cluster.create_token(namespace, "nobody")
    kc = cluster.write_kubeconfig(tmp_path / "nobody.kubeconfig", token=token, user="nobody")
    with SyncKube.connect(str(kc)) as k:
        with pytest.raises(ApiError) as denied:
            k.list_items(f"/api/v1/namespaces/{namespace}/pods")
        assert denied.value.forbidden and denied.value.method == "GET"
        with pytest.raises(ApiError) as denied_get:  # only a 404 reads as "absent"
            k.get_object(f"/api/v1/namespaces/{namespace}/pods/missing")
        assert denied_get.value.forbidden
    with SyncKube.connect(cluster.kubeconfig_path) as k:
        assert k.get_object(f"/api/v1/namespaces/{namespace}/configmaps/missing") is None  # 404: None

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(Path(cluster.kubeconfig_path).read_text().replace(cluster.server, f"https://127.0.0.1:{port}"))
    with SyncKube.connect(str(dead)) as k, pytest.raises(ApiError) as refused:
        k.get_object("/api/v1/namespaces/default")
    assert refused.value.status == 0 and refused.value.reason == "ConnectionError"
    with pytest.raises(KubeConfigError, match="cannot load kubeconfig"):
        SyncKube.connect(str(tmp_path / "absent.kubeconfig"))
    bad_ca = tmp_path / "bad-ca.pem"
    bad_ca.write_text("not a certificate")
    with pytest.raises(KubeConfigError, match="cannot use the TLS settings"):
        SyncKube(explicit(cluster.server, token=cluster.admin_token, ca_file=str(bad_ca)))


def test_context_namespace_is_the_default(capsys: pytest.CaptureFixture[str], cluster: Any, kube: Kube,
                                          namespace: str, tmp_path: Path) -> None:
    kc = cluster.write_kubeconfig(tmp_path / "ns.kubeconfig", token=cluster.admin_token, namespace=namespace)
    with SyncKube.connect(str(kc)) as k:
        assert k.namespace == namespace
    with SyncKube.connect(cluster.kubeconfig_path) as k:
        assert k.namespace == "default"
    name = f"pg-{uuid.uuid4().hex[:6]}"
    kube.create(f"/apis/scheduling.run.ai/v2alpha2/namespaces/{namespace}/podgroups",
                {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": name},
                 "spec": {"minMember": 2, "queue": "q"}})
    code, out, _ = run_cli(capsys, "get", "podgroups", "-o", "json", "--kubeconfig", str(kc))
    assert code == 0
    assert [(i["namespace"], i["name"], i["minMember"]) for i in json.loads(out)["items"]] == [(namespace, name, 2)]
    code, _, err = run_cli(capsys, "explain", "absent", "--kubeconfig", str(kc))
    assert code == 3 and f"pod {namespace}/absent not found" in err
    kube.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})
    code, out, err = run_cli(capsys, "describe", "deploy/web", "-o", "json", "--kubeconfig", str(kc))
    assert code == 0, err
    view = json.loads(out)
    assert (view["kind"], view["namespace"], view["name"]) == ("Deployment", namespace, "web")
    code, _, err = run_cli(capsys, "describe", "deploy/web", "--kubeconfig", cluster.kubeconfig_path)
    assert code == 4 and "Deployment default/web not found" in err
