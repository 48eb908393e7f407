"""``/metrics`` of a real grouper, scraped over HTTP before and after creating workloads: the counters and
histograms move by exactly what the grouper did (reconciles, PodGroups created, pod patches, latency)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from api.workloads import create_jobset, create_pytorchjob, pg_list, pods
from controller.harness import GrouperThread, label_namespace
from kube import Kube, wait_until
from prometheus_client.parser import text_string_to_metric_families


def scrape(http: httpx.Client, openmetrics: bool = False) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    headers = {"Accept": "application/openmetrics-text; version=1.0.0"} if openmetrics else {}
    r = http.get("/metrics", headers=headers)
    assert r.status_code == 200
    if openmetrics:
        assert r.headers["content-type"].startswith("application/openmetrics-text")
        from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families

        families = list(om_families(r.text))
    else:
        assert r.headers["content-type"].startswith("text/plain")
        families = list(text_string_to_metric_families(r.text))
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def total(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items()
               if n == name and all(dict(ls).get(k) == val for k, val in labels.items()))


@pytest.fixture
def grouper(cluster: Any, kube: Kube, namespace: str) -> Iterator[GrouperThread]:
    label_namespace(kube, namespace)
    with GrouperThread(cluster, namespace) as g:
        yield g


def grouped(kube: Kube, ns: str, count: int) -> bool:
    ps = pods(kube, ns)
    return len(ps) == count and all((p["metadata"].get("annotations") or {}).get("pod-group-name") for p in ps)


def test_metrics_move_by_what_the_grouper_did(kube: Kube, namespace: str, grouper: GrouperThread) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{grouper.service.http_port}", timeout=30) as http:
        grouper.wait_idle(10)
        before = scrape(http)
        assert total(before, "podgrouper_build_info") == 1

        create_jobset(kube, namespace)  # 3 pods, made by the Job controller
        create_pytorchjob(kube, namespace)  # 5 pods
        wait_until(lambda: grouped(kube, namespace, 8), 60, what="8 pods with their PodGroup")
        wait_until(lambda: len(pg_list(kube, namespace)) == 2, 10, what="2 PodGroups")
        grouper.wait_idle(30, settle=1.0)
        after = scrape(http)

    def delta(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    assert delta("podgrouper_podgroups_written_total", operation="created") == 2
    assert delta("podgrouper_podgroups_written_total", operation="updated") == 0
    # every pod patched at least once; a reconcile that runs before the informer has seen the grouper's own
    # patch may patch a pod again (idempotent, counted like any patch), so the exact count is checked
    # against the PATCH requests actually sent
    patched = delta("podgrouper_pod_patches_total", result="patched")
    assert patched >= 8
    assert patched == delta("podgrouper_api_requests_total", verb="patch", resource="pods", code="200")
    assert delta("podgrouper_pod_patches_total", result="error") == 0
    latency = delta("podgrouper_pod_grouped_latency_seconds_count")
    assert 8 <= latency <= patched  # observed on the patch that first sets the annotation
    assert delta("podgrouper_pod_grouped_latency_seconds_sum") > 0
    assert delta("podgrouper_pod_grouped_latency_seconds_bucket", le="+Inf") == latency
    reconciles = delta("podgrouper_reconciles_total")
    assert reconciles >= 2  # at least one per workload; pod events may add more
    assert delta("podgrouper_reconciles_total", result="error") == 0
    assert delta("podgrouper_reconciles_total", plugin="JobSet Grouper") >= 1
    assert delta("podgrouper_reconciles_total", plugin="PyTorchJob Grouper") >= 1
    assert delta("podgrouper_reconcile_duration_seconds_count") == reconciles
    # PodGroups: one POST each (the API request counter agrees with the domain one)
    assert delta("podgrouper_api_requests_total", verb="create", resource="podgroups", code="201") == 2

    # the same numbers in OpenMetrics format
    with httpx.Client(base_url=f"http://127.0.0.1:{grouper.service.http_port}", timeout=30) as http:
        om = scrape(http, openmetrics=True)
    assert total(om, "podgrouper_pod_grouped_latency_seconds_count") == total(
        after, "podgrouper_pod_grouped_latency_seconds_count")
