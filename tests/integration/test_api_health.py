"""Probes and auth of real groupers: with leader election the leader and the standby are both ready and say
which they are; a static bearer token (--http-auth-token-file) guards everything but the probes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from controller.harness import GrouperThread, label_namespace
from kube import Kube, wait_until


def probe(g: GrouperThread, path: str, **headers: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{g.service.http_port}{path}", headers=headers, timeout=10)


def test_leader_and_standby_are_both_ready(cluster: Any, kube: Kube, namespace: str) -> None:
    label_namespace(kube, namespace)
    lease = {"leader_elect": True, "leader_election_namespace": namespace, "leader_election_id": "api-test"}
    with GrouperThread(cluster, namespace, identity="a", **lease) as a:
        wait_until(lambda: probe(a, "/readyz").json()["role"] == "leader", 30, what="a leads")
        with GrouperThread(cluster, namespace, identity="b", **lease) as b:
            ready = probe(b, "/readyz")
            assert ready.status_code == 200, ready.text
            assert ready.json()["role"] == "standby"
            live = probe(b, "/healthz")
            assert live.status_code == 200
            assert "standby" in next(c["message"] for c in live.json()["checks"] if c["name"] == "work-queue")
            assert probe(a, "/readyz").json()["role"] == "leader"
            metrics = probe(b, "/metrics").text
            assert "podgrouper_leader 0.0" in metrics
            assert "podgrouper_leader 1.0" in probe(a, "/metrics").text


def test_bearer_token_guards_all_but_probes(cluster: Any, kube: Kube, namespace: str, tmp_path: Path) -> None:
    label_namespace(kube, namespace)
    token = tmp_path / "token"
    token.write_text("integration-token\n")
    with GrouperThread(cluster, namespace, http_auth_token_file=str(token)) as g:
        assert probe(g, "/healthz").status_code == 200
        assert probe(g, "/readyz").status_code == 200
        for path in ("/podgroups", "/metrics", "/definitions", "/openapi.json", f"/pods/{namespace}/x"):
            r = probe(g, path)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", path
            assert probe(g, path, Authorization="Bearer wrong").status_code == 401
        ok = probe(g, "/podgroups", Authorization="Bearer integration-token")
        assert ok.status_code == 200 and ok.json() == {"items": [], "errors": [], "continue": None}
        assert probe(g, "/metrics", Authorization="Bearer integration-token").status_code == 200


def test_the_http_server_is_restarted_when_it_stops(cluster: Any, kube: Kube, namespace: str) -> None:
    """The probes live on the HTTP server: when it stops by itself the service starts it again on the same
    port (after the supervisor's back-off), and the probes answer as before; three times."""
    label_namespace(kube, namespace)
    with GrouperThread(cluster, namespace) as g:
        http = g.service.http
        assert http is not None
        for _ in range(3):
            g.call(http.stop())
            try:
                probe(g, "/healthz")
                raise AssertionError("the stopped HTTP server answered")
            except httpx.ConnectError:
                pass
            wait_until(lambda: _answers(g), 30, what="the HTTP server back")
            assert probe(g, "/readyz").status_code == 200
        assert g.service.supervisor.fatal is None


def _answers(g: GrouperThread) -> bool:
    try:
        return probe(g, "/healthz").status_code == 200
    except httpx.ConnectError:
        return False
