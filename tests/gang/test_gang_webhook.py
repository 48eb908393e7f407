"""The admission webhook against the real API server (KAI backend): pods of a Job are created already
in their PodGroup, so the grouper patches no pod; with the webhook down (failurePolicy Ignore) pods are
still created and the reconciler groups them, one patch per pod. Prints pod patches per pod both ways."""

from __future__ import annotations

import json
import socket
import ssl
from typing import Any

import httpx
import pytest
from controller.harness import ANNOTATION, annotated, job, label_namespace
from kube import Kube, wait_until
from webhooks import (
    ADMISSION,
    bare_pod,
    called_by_the_api_server,
    grouper_with_webhook,
    webhook_configuration,
)

from devtools.cluster import LocalCluster

PODS = 6


def test_pods_are_grouped_at_creation_and_never_patched(
    sched_cluster: LocalCluster, skube: Kube, sns: str
) -> None:
    label_namespace(skube, sns)
    with grouper_with_webhook(sched_cluster, skube, sns) as g:
        created = skube.create(
            f"/apis/batch/v1/namespaces/{sns}/jobs",
            job("train", PODS, annotations={"kai.scheduler/batch-min-member": str(PODS)}),
        )
        name = f"pg-train-{created['metadata']['uid']}"
        ps = wait_until(lambda: annotated(skube, sns, PODS, "job-name=train"), 30, what="annotated pods")
        assert {p["metadata"]["annotations"][ANNOTATION] for p in ps} == {name}
        wait_until(
            lambda: skube.exists(f"/apis/scheduling.run.ai/v2alpha2/namespaces/{sns}/podgroups/{name}"), 30
        )
        g.wait_idle()
        patches = g.requests("patch", "pods")
        assert g.service.admission is not None and g.service.admission.mutated >= PODS
        print(
            f"\n[measure] KAI backend with the webhook: {patches / PODS:.2f} pod patches per pod ({PODS} pods)"
        )
        assert patches == 0


def test_with_the_webhook_down_pods_are_still_created_and_grouped(
    sched_cluster: LocalCluster, skube: Kube, sns: str
) -> None:
    label_namespace(skube, sns)
    with grouper_with_webhook(sched_cluster, skube, sns, register=False) as g:
        assert g.service.webhook is not None
        closed = _closed_port()
        cfg: dict[str, Any] = webhook_configuration(f"down-{sns}", sns, closed, sched_cluster.ca_file)
        skube.create(f"/apis/{ADMISSION}/mutatingwebhookconfigurations", cfg)
        try:
            skube.create(
                f"/apis/batch/v1/namespaces/{sns}/jobs",
                job("train", PODS, annotations={"kai.scheduler/batch-min-member": str(PODS)}),
            )
            wait_until(lambda: annotated(skube, sns, PODS, "job-name=train"), 60, what="annotated pods")
            g.wait_idle()
            patches = g.requests("patch", "pods")
            print(f"\n[measure] KAI backend without the webhook: {patches / PODS:.2f} pod patches per pod")
            # exactly one successful patch per pod. A request the API server answered 429/5xx and the client
            # retried is the same patch sent again, not a second one: it is not counted as a patch, and the
            # failure message says how many there were (the answers, the results and the Job's counts: a pod
            # that failed and was replaced would be a seventh pod, not a second patch)
            codes, results = _patch_counts(g)
            why = (f"pod patch requests by answer {codes}, by result {results}; Job status "
                   f"{skube.get(f'/apis/batch/v1/namespaces/{sns}/jobs/train').get('status')}")
            assert results.get("patched") == PODS and codes.get("200") == PODS, why
            assert set(codes) <= {"200", "429", "500", "502", "503", "504"}, why
        finally:
            skube.delete(f"/apis/{ADMISSION}/mutatingwebhookconfigurations/down-{sns}", ignore_missing=True)


def test_not_ready_while_its_webhook_does_not_listen(sched_cluster: LocalCluster, skube: Kube, sns: str) -> None:
    """``/readyz`` waits for the webhook: the API server calls it as soon as it is registered, and a call
    refused admits the pod unchanged (with the upstream backend it can never join its PodGroup). A webhook
    server that stops by itself fails readiness until the service has it listening again; three times."""
    label_namespace(skube, sns)
    with grouper_with_webhook(sched_cluster, skube, sns, register=False) as g:
        hook = g.service.webhook
        assert hook is not None

        for _ in range(3):
            wait_until(lambda: readyz(g)[0] == 200, 30, what="ready, its webhook listening")
            assert readyz(g)[1]["webhook"] == (True, f"serving admission at {hook.url}")
            g.call(hook.stop())  # the supervisor restarts it after a back-off of at least 1 s
            code, checks = readyz(g)
            assert code == 503 and checks["webhook"] == (
                False, f"not serving at {hook.url} yet: a pod admitted now would not be put in its group")
        wait_until(lambda: readyz(g)[0] == 200, 30, what="ready again")
        skube.create(f"/apis/{ADMISSION}/mutatingwebhookconfigurations",
                     webhook_configuration(f"back-{sns}", sns, hook.port, sched_cluster.ca_file))
        try:  # the webhook listening again answers the API server
            called_by_the_api_server(skube, sns, g)
        finally:
            skube.delete(f"/apis/{ADMISSION}/mutatingwebhookconfigurations/back-{sns}", ignore_missing=True)


def test_on_sigterm_it_goes_unready_and_its_webhook_answers_on(
    sched_cluster: LocalCluster, skube: Kube, sns: str
) -> None:
    """In a rolling update the API server calls a terminating replica until the endpoint change reached it:
    the replica is not ready from SIGTERM on, and its webhook answers ``--webhook-shutdown-delay-seconds``
    more, from caches still watching. Its workers stopped at SIGTERM, so a pod created then that is in its
    PodGroup was put there at admission (and no pod was patched)."""
    label_namespace(skube, sns)
    with grouper_with_webhook(sched_cluster, skube, sns, webhook_shutdown_delay_seconds=20.0) as g:
        g.begin_stop()
        wait_until(lambda: readyz(g)[1].get("shutdown", (True, ""))[0] is False, 30, what="unready: shutting down")
        assert readyz(g)[0] == 503
        wait_until(lambda: not g.controller.workers.running, 30, what="the workers stopped")
        created = skube.create(
            f"/apis/batch/v1/namespaces/{sns}/jobs",
            job("late", 3, annotations={"kai.scheduler/batch-min-member": "3"}),
        )
        ps = wait_until(lambda: annotated(skube, sns, 3, "job-name=late"), 15, what="pods grouped at admission")
        assert {p["metadata"]["annotations"][ANNOTATION] for p in ps} == {f"pg-late-{created['metadata']['uid']}"}
        assert g.requests("patch", "pods") == 0
        assert g.service.webhook is not None and g.service.webhook.serving  # still within the delay


def readyz(g: Any) -> tuple[int, dict[str, tuple[bool, str]]]:
    """``/readyz``'s status and its checks by name: (ok, message)."""
    r = httpx.get(f"http://127.0.0.1:{g.service.http_port}/readyz", timeout=10)
    return r.status_code, {c["name"]: (c["ok"], c["message"]) for c in r.json()["checks"]}


def _patch_counts(g: Any) -> tuple[dict[str, float], dict[str, float]]:
    """Pod patch requests by answer code (a 429/5xx retried shows here) and pod patches by result."""
    codes: dict[str, float] = {}
    results: dict[str, float] = {}
    for metric in g.metrics.registry.collect():
        for s in metric.samples:
            if not s.name.endswith("_total"):
                continue
            if metric.name == "podgrouper_api_requests" and (s.labels["verb"], s.labels["resource"]) == ("patch", "pods"):
                codes[s.labels["code"]] = s.value
            elif metric.name == "podgrouper_pod_patches":
                results[s.labels["result"]] = s.value
    return codes, results


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_only_the_api_server_may_call_the_webhook(sched_cluster: LocalCluster, skube: Kube, sns: str) -> None:
    """The API server presents its webhook client certificate (the cluster's admission configuration) and
    is answered; a client without it (none, or one of the cluster's own CA) is refused at the handshake."""
    label_namespace(skube, sns)
    with grouper_with_webhook(sched_cluster, skube, sns) as g:
        assert g.service.webhook is not None and g.service.admission is not None
        skube.create(f"/api/v1/namespaces/{sns}/pods", bare_pod("solo"))
        assert g.service.admission.admitted >= 1  # the API server's call came through (Ignore would hide a refusal)
        other_cert, other_key = sched_cluster.serving_cert(f"someone-{sns}")
        for client in (None, (other_cert, other_key)):
            ctx = ssl.create_default_context(cafile=sched_cluster.ca_file)
            if client is not None:
                ctx.load_cert_chain(str(client[0]), str(client[1]))
            review = json.dumps({"request": {"uid": "u", "operation": "CREATE", "object": bare_pod("x")}})
            request = (
                f"POST /mutate-pods HTTP/1.1\r\nHost: x\r\nContent-Length: {len(review)}\r\n\r\n{review}".encode()
            )
            with pytest.raises((ssl.SSLError, ConnectionError)):
                raw = socket.create_connection(("127.0.0.1", g.service.webhook.port), timeout=30)
                with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                    s.sendall(request)
                    if not s.recv(4096):
                        raise ConnectionError("closed without an answer")
