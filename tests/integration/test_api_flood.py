"""Reproduction against the real API server with real ServiceAccount tokens: 1,000 requests with random bearer
tokens (up to 200 at a time) once used up the grouper's one review budget, and right after, a tenant with a
new token, the Prometheus ServiceAccount on /metrics and a tenant whose cached review had expired all got 429.

The grouper runs in-process (``GrouperThread``, as the ServiceAccount of deploy/rbac.yaml) with its review
caches and budgets on an injected clock that the test moves (no budget refills behind the test's back, no
sleeps). The flood comes from 127.0.0.2 (Linux answers the whole 127/8 on loopback), everyone else from
127.0.0.1: the flooding address spends its own budget; known-valid tokens are re-reviewed from theirs even
from the flooding address.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from controller.harness import GrouperThread, annotated, job, label_namespace
from kube import Kube, KubeError, wait_until

import grouper.runtime.service as service_module
from grouper.api.auth import KubeAccess

REPO = Path(__file__).resolve().parents[2]
FLOODER = "127.0.0.2"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
READER_RULES = [{"apiGroups": ["scheduling.run.ai"], "resources": ["podgroups"], "verbs": ["get", "list"]}]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def bind(kind: str, name: str, role_kind: str, role_name: str, namespace: str, sa: str) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]}


async def flood(port: int, n: int) -> list[int]:
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    transport = httpx.AsyncHTTPTransport(local_address=FLOODER, limits=limits)
    timeout = httpx.Timeout(60, pool=None)  # a busy box may take long to answer all 1,000: wait for the pool
    async with httpx.AsyncClient(transport=transport, base_url=f"http://127.0.0.1:{port}", timeout=timeout) as c:
        rs = await asyncio.gather(*(c.get("/podgroups", headers=bearer(secrets.token_urlsafe(32)))
                                    for _ in range(n)))
    return [r.status_code for r in rs]


def from_flooder(port: int) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=FLOODER), base_url=f"http://127.0.0.1:{port}",
                        timeout=10)


def test_random_token_flood_locks_out_nobody_else(cluster: Any, kube: Kube, namespace: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    ns = namespace
    label_namespace(kube, ns)
    kube.apply_yaml(REPO / "deploy" / "rbac.yaml")
    kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job("train", 2))
    for sa in ("tenant-a", "tenant-b", "scraper"):
        cluster.create_service_account(ns, sa)
    kube.create(f"{RBAC}/namespaces/{ns}/roles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                                  "metadata": {"name": "grouper-reader"}, "rules": READER_RULES})
    for sa in ("tenant-a", "tenant-b"):
        kube.create(f"{RBAC}/namespaces/{ns}/rolebindings", bind("RoleBinding", sa, "Role", "grouper-reader", ns, sa))
    scraper_binding = f"scraper-{ns}"
    kube.create(f"{RBAC}/clusterrolebindings",
                bind("ClusterRoleBinding", scraper_binding, "ClusterRole", "kai-pod-grouper-metrics-reader", ns,
                     "scraper"))
    tenant_a, scraper = cluster.create_token(ns, "tenant-a"), cluster.create_token(ns, "scraper")
    grouper_token = cluster.create_token("kai-system", "kai-pod-grouper")

    now = [0.0]
    made: list[KubeAccess] = []

    def access_on_test_clock(settings: Any, client: Any) -> KubeAccess:
        made.append(KubeAccess(client, clock=lambda: now[0]))
        return made[-1]

    monkeypatch.setattr(service_module, "api_access", access_on_test_clock)
    try:
        with GrouperThread(cluster, ns, token=grouper_token, http_auth="kubernetes") as g:
            port = g.service.http_port
            api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
            wait_until(lambda: annotated(kube, ns, 2), 60, what="Job pods grouped")

            def served(token: str, path: str = "/podgroups") -> bool:
                now[0] += 3  # past a denial's cache while the RoleBinding settles in the authorizer
                return api.get(path, headers=bearer(token)).status_code == 200

            # before: tenant-a and the scraper are served; their tokens are now known valid
            wait_until(lambda: served(tenant_a), 15, what="tenant-a served")
            wait_until(lambda: served(scraper, "/metrics"), 15, what="scraper served")
            now[0] += 60  # every cached review expired; the clock stands still from here on: nothing refills

            reviews = g.requests("create", "tokenreviews")
            t0 = time.monotonic()
            codes = asyncio.run(flood(port, 1000))
            took = time.monotonic() - t0
            flood_reviews = g.requests("create", "tokenreviews") - reviews
            counts = {c: codes.count(c) for c in sorted(set(codes))}
            print(f"\n[measure] flood of 1000 random tokens from {FLOODER}: {counts} in {took:.1f}s, "
                  f"{flood_reviews} TokenReviews")
            assert counts == {401: 10, 429: 990} and flood_reviews == 10

            # after: a tenant's new token, the scraper and tenant-a (re-reviewed) are all served
            tenant_b = cluster.create_token(ns, "tenant-b")
            fresh = api.get("/podgroups", headers=bearer(tenant_b))
            scrape = api.get("/metrics", headers=bearer(scraper))
            expired = api.get("/podgroups", headers=bearer(tenant_a))
            print(f"[measure] right after: new tenant token {fresh.status_code}, scraper /metrics "
                  f"{scrape.status_code}, tenant with an expired review {expired.status_code}")
            assert (fresh.status_code, scrape.status_code, expired.status_code) == (200, 200, 200)
            assert {i["namespace"] for i in fresh.json()["items"]} == {ns}
            assert "podgrouper_" in scrape.text
            assert g.requests("create", "tokenreviews") - reviews == 10 + 3
            with from_flooder(port) as f:
                # a known-valid token is served even from the flooding address; a new one waits for the
                # address's budget (nothing but a review tells it from a random token)
                assert f.get("/metrics", headers=bearer(scraper)).status_code == 200
                r = f.get("/podgroups", headers=bearer(cluster.create_token(ns, "tenant-b")))
                assert r.status_code == 429 and r.headers["retry-after"] == "1", r.text
                now[0] += 2  # two seconds of the address's budget
                assert f.get("/podgroups", headers=bearer(cluster.create_token(ns, "tenant-b"))).status_code == 200
            assert made and made[-1].refused["source"] == 991
    finally:
        with contextlib.suppress(KubeError):
            kube.delete(f"{RBAC}/clusterrolebindings/{scraper_binding}", ignore_missing=True)
