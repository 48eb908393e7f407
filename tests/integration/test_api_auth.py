"""The HTTP API against the real API server with ``--http-auth=kubernetes`` (the default): the grouper runs as
the ServiceAccount of deploy/rbac.yaml and checks callers' ServiceAccount tokens (TokenRequest) with
TokenReview and SubjectAccessReview. A tenant sees only its namespace, no token is 401, missing rights are
403 naming what is missing, the metrics-reader ClusterRole opens /metrics, and an RBAC change takes effect
within the review cache's TTL."""

from __future__ import annotations

import base64
import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from controller.harness import GrouperThread, annotated, job, label_namespace, pod_groups
from kube import Kube, KubeError, wait_until

REPO = Path(__file__).resolve().parents[2]
PG_GROUP = "scheduling.run.ai"


def role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name},
            "rules": rules}


def binding(kind: str, name: str, role_kind: str, role_name: str, sa_ns: str, sa: str) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}]}


TENANT_RULES = [
    {"apiGroups": [PG_GROUP], "resources": ["podgroups"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
]


@pytest.fixture
def other_namespace(kube: Kube, namespace: str) -> Iterator[str]:
    """A second tenant namespace, in the scope of the grouper of ``namespace``."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": name, "labels": {"grouper-test": namespace}}})
    yield name
    with contextlib.suppress(KubeError):
        kube.delete(f"/api/v1/namespaces/{name}", ignore_missing=True)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_tenants_scrapers_and_strangers(cluster: Any, kube: Kube, namespace: str, other_namespace: str) -> None:
    a, b = namespace, other_namespace
    label_namespace(kube, a)
    kube.apply_yaml(REPO / "deploy" / "rbac.yaml")
    for ns in (a, b):
        kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job("train", 2))
    # tenant-a may read PodGroups and pods in a; nobody has no rights; scraper has the metrics-reader role
    cluster.create_service_account(a, "tenant-a")
    cluster.create_service_account(a, "nobody")
    cluster.create_service_account(a, "scraper")
    kube.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{a}/roles", role("grouper-reader", TENANT_RULES))
    kube.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{a}/rolebindings",
                binding("RoleBinding", "tenant-a", "Role", "grouper-reader", a, "tenant-a"))
    scraper_binding = f"scraper-{a}"
    kube.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                binding("ClusterRoleBinding", scraper_binding, "ClusterRole", "kai-pod-grouper-metrics-reader", a,
                        "scraper"))
    tenant = cluster.create_token(a, "tenant-a")
    nobody = cluster.create_token(a, "nobody")
    scraper = cluster.create_token(a, "scraper")
    grouper_token = cluster.create_token("kai-system", "kai-pod-grouper")
    try:
        with GrouperThread(cluster, a, token=grouper_token, http_auth="kubernetes") as g:
            api = httpx.Client(base_url=f"http://127.0.0.1:{g.service.http_port}", timeout=10)
            for ns in (a, b):
                wait_until(lambda ns=ns: annotated(kube, ns, 2), 60, what=f"Job pods grouped in {ns}")
            pg_a, pg_b = next(iter(pod_groups(kube, a))), next(iter(pod_groups(kube, b)))
            pod_a = annotated(kube, a, 2)[0]["metadata"]["name"]  # type: ignore[index]

            # probes stay open; everything else needs a valid token
            assert api.get("/healthz").status_code == 200 and api.get("/readyz").status_code == 200
            for path in ("/podgroups", "/metrics", "/definitions", f"/pods/{a}/{pod_a}", "/docs"):
                for headers in ({}, bearer("not-a-token"), bearer(tenant[:-4] + "AAAA")):
                    r = api.get(path, headers=headers)
                    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", (path, r.text)

            # the admin (system:masters) sees both namespaces and the definitions
            admin = bearer(cluster.admin_token)
            assert {i["namespace"] for i in api.get("/podgroups", headers=admin).json()["items"]} == {a, b}
            assert api.get("/definitions", headers=admin).status_code == 200

            # tenant-a: its namespace only, wherever it looks
            wait_until(lambda: api.get("/podgroups", headers=bearer(tenant)).json().get("items"), 15,
                       what="tenant RoleBinding effective")
            items = api.get("/podgroups", headers=bearer(tenant)).json()["items"]
            assert {i["namespace"] for i in items} == {a} and [i["name"] for i in items] == [pg_a]
            assert api.get(f"/podgroups/{a}/{pg_a}", headers=bearer(tenant)).status_code == 200
            assert api.get(f"/pods/{a}/{pod_a}", headers=bearer(tenant)).status_code == 200
            r = api.get("/podgroups", params={"namespace": b}, headers=bearer(tenant))
            assert r.status_code == 403
            assert r.json()["detail"].startswith(
                f'forbidden: user "system:serviceaccount:{a}:tenant-a" cannot list resource "podgroups" in API '
                f'group "scheduling.run.ai" in the namespace "{b}"')
            assert r.json()["errors"] == [{"verb": "list", "group": PG_GROUP, "resource": "podgroups",
                                           "namespace": b, "name": None}]
            assert api.get(f"/podgroups/{b}/{pg_b}", headers=bearer(tenant)).status_code == 403
            assert api.get(f"/pods/{b}/x", headers=bearer(tenant)).status_code == 403
            assert api.get("/definitions", headers=bearer(tenant)).status_code == 403
            assert api.get("/metrics", headers=bearer(tenant)).status_code == 403
            # the live read needs the caller's own right on the workload's kind
            r = api.get(f"/workloads/{a}/Job/train", params={"live": "true"}, headers=bearer(tenant))
            assert r.status_code == 403 and 'cannot get resource "jobs" named "train" in API group "batch"' \
                in r.json()["detail"]

            # nobody: a valid token without rights may read nothing, and is told which right it lacks (it once
            # got an empty 200 from /podgroups and every namespace's rows from /workloads)
            nobody_user = f"system:serviceaccount:{a}:nobody"
            for path in ("/podgroups", "/workloads"):
                r = api.get(path, headers=bearer(nobody))
                assert r.status_code == 403 and "items" not in r.json(), (path, r.text)
                assert r.json()["detail"].startswith(
                    f'forbidden: user "{nobody_user}" cannot list resource "podgroups" in API group '
                    '"scheduling.run.ai" at the cluster scope, nor in any namespace'), r.text
                r = api.get(path, params={"namespace": b}, headers=bearer(nobody))
                assert r.status_code == 403 and f'in the namespace "{b}"' in r.json()["detail"]
            assert api.get("/metrics", headers=bearer(nobody)).status_code == 403
            assert api.get(f"/pods/{a}/{pod_a}", headers=bearer(nobody)).status_code == 403
            assert api.get(f"/workloads/{b}/Job/train", headers=bearer(nobody)).status_code == 403

            # tenant-a's workloads: its namespace only, the other one 403
            rows = api.get("/workloads", headers=bearer(tenant)).json()["items"]
            assert {w["namespace"] for w in rows} == {a} and [w["name"] for w in rows] == ["train"]
            assert api.get("/workloads", params={"namespace": b}, headers=bearer(tenant)).status_code == 403
            admin_rows = api.get("/workloads", headers=admin).json()["items"]
            assert {w["namespace"] for w in admin_rows} == {a, b}

            # a continue token nested 5,000 deep (13 kB, under uvicorn's 16 kB request head): 422 naming the
            # parameter (it was a 500 with a RecursionError traceback)
            deep = base64.urlsafe_b64encode(b"[" * 5000 + b"]" * 5000).decode()
            r = api.get("/podgroups", params={"continue": deep}, headers=admin)
            assert r.status_code == 422 and "query parameter continue" in r.json()["detail"], r.text[:300]

            # the metrics reader: /metrics and nothing else
            m = api.get("/metrics", headers=bearer(scraper))
            assert m.status_code == 200 and "podgrouper_api_requests_total" in m.text
            assert api.get("/podgroups", headers=bearer(scraper)).status_code == 403

            # RBAC changes take effect once the denial's short cache entry expires
            kube.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{b}/roles",
                        role("grouper-reader", [*TENANT_RULES,
                                                {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]}]))
            kube.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{b}/rolebindings",
                        binding("RoleBinding", "tenant-a", "Role", "grouper-reader", a, "tenant-a"))
            t0 = time.monotonic()
            wait_until(lambda: {i["namespace"] for i in api.get("/podgroups", headers=bearer(tenant)).json()["items"]}
                       == {a, b}, 20, what="new RoleBinding seen")
            noticed = time.monotonic() - t0
            live = api.get(f"/workloads/{b}/Job/train", params={"live": "true"}, headers=bearer(tenant))
            assert live.status_code == 200 and live.json()["source"] == "live", live.text

            # cached: many requests with one token cost one TokenReview
            before = g.requests("create", "tokenreviews")
            t1 = time.monotonic()
            for _ in range(50):
                assert api.get(f"/podgroups/{a}/{pg_a}", headers=bearer(tenant)).status_code == 200
            cached_ms = (time.monotonic() - t1) / 50 * 1000
            assert g.requests("create", "tokenreviews") - before <= 1
            fresh = [cluster.create_token(a, "tenant-a") for _ in range(5)]
            t3 = time.monotonic()
            for tok in fresh:
                assert api.get(f"/podgroups/{a}/{pg_a}", headers=bearer(tok)).status_code == 200
            uncached_ms = (time.monotonic() - t3) / 5 * 1000
            print(f"\n[measure] API auth: new RoleBinding honoured after {noticed:.1f}s; a request with a cached "
                  f"review {cached_ms:.1f} ms, with a new token (TokenReview) {uncached_ms:.1f} ms")
            # the reviews went through the grouper's own client, as its ServiceAccount
            assert g.requests("create", "subjectaccessreviews") > 0
    finally:
        with contextlib.suppress(KubeError):
            kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{scraper_binding}",
                        ignore_missing=True)


def test_audience_bound_tokens(cluster: Any, kube: Kube, namespace: str) -> None:
    """``--http-auth-audiences``: only tokens minted for the grouper count; they do not work against the API
    server, and the API server's own tokens do not work against the grouper."""
    label_namespace(kube, namespace)
    kube.apply_yaml(REPO / "deploy" / "rbac.yaml")
    cluster.create_service_account(namespace, "reader")
    for_grouper = cluster.create_token(namespace, "reader", audiences=["kai-pod-grouper"])
    for_api_server = cluster.create_token(namespace, "reader")
    grouper_token = cluster.create_token("kai-system", "kai-pod-grouper")
    with GrouperThread(cluster, namespace, token=grouper_token, http_auth="kubernetes",
                       http_auth_audiences="kai-pod-grouper") as g:
        api = httpx.Client(base_url=f"http://127.0.0.1:{g.service.http_port}", timeout=10)
        assert api.get("/openapi.json", headers=bearer(for_grouper)).status_code == 200
        r = api.get("/podgroups", headers=bearer(for_grouper))
        assert r.status_code == 403, r.text  # authenticated; no podgroups rights
        assert api.get("/openapi.json", headers=bearer(for_api_server)).status_code == 401
    with kube.with_token(for_grouper) as replayed:
        assert replayed.request("GET", f"/api/v1/namespaces/{namespace}/pods").status_code == 401
