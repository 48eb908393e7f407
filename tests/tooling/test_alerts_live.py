"""The chart's alerts and dashboard (deploy/chart/files/) in a real Prometheus (Debian's, ``make tools``) that
scrapes a running ``grouper run`` over the local cluster, with a ServiceAccount token bound to the chart's
metrics-reader ClusterRole (the grouper checks it with TokenReview and SubjectAccessReview).

The rules are the chart's render (``helm template``) with a 0-minute waiting threshold, no ``for`` and short
windows. The workloads make most alerts fire: a gang kept waiting (its pods never bound), gangs admitted by
binding their pods to a Node object as a scheduler would (one then loses a pod: degraded), a Job whose
minimum is not a number (grouping error), a namespace whose ResourceQuota allows no PodGroup (refused
writes), a PodGroup edited into one whose sub-groups cannot be read (gang state Error). Asserted through Prometheus' HTTP API: the rules are healthy, the expected alerts fire with the
labels their expression keeps, the grouper's own-health alerts stay quiet (a single replica without leader
election is its leader), and every dashboard query evaluates to series carrying its legend's labels.
Deadlines are generous and polled; nothing asserts a duration.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from controller.harness import job
from kube import Kube, KubeError, wait_until
from realtools import PrometheusServer, promtool

from devtools import chart
from devtools.cluster import LocalCluster
from devtools.grouper_process import GrouperProcess

REPO = Path(__file__).resolve().parents[2]
JOB = "kai-pod-grouper"  # the scrape job: the Service's name, as the ServiceMonitor sets it
SEL = f'job="{JOB}", namespace="{chart.NAMESPACE}"'  # the rules' default selector
QUEUE_LABEL = "kai.scheduler/queue"
GANG_OF_2 = {"kai.scheduler/batch-min-member": "2"}  # a Job's gang is one pod unless told
FAST = {"for": "0s"}
WINDOW = "30s"
LIVE_VALUES = {"metrics": {"prometheusRule": {"enabled": True, "alerts": {
    "gangWaiting": {"minutes": 0, **FAST}, "gangDegraded": FAST, "gangsInError": FAST,
    "groupingErrors": {"window": WINDOW, **FAST}, "writeFailures": {"window": WINDOW, **FAST},
    "down": FAST, "noLeader": FAST, "workQueueStalled": {"window": WINDOW, **FAST},
}}}}
# what each firing alert's series must carry (besides alertname, alertstate, severity)
FIRING = {
    "PodGrouperGangWaiting": {"namespace": chart.NAMESPACE, "job": JOB, "queue": "team-a"},
    "PodGrouperGangDegraded": {"namespace": chart.NAMESPACE, "job": JOB, "queue": "team-b"},
    "PodGrouperGangsInError": {"namespace": chart.NAMESPACE, "job": JOB, "queue": "team-c"},
    "PodGrouperGroupingErrors": {"namespace": chart.NAMESPACE, "job": JOB, "reason": "InvalidWorkload"},
    "PodGrouperWriteFailures": {"namespace": chart.NAMESPACE, "job": JOB, "resource": "podgroups",
                                "reason": "Forbidden"},
}
# the alerts that must stay quiet, with the operand of their expression: it has series of this shape
QUIET = {
    "PodGrouperDown": (f"max by (namespace, job) (up{{{SEL}}})", {"namespace", "job"}, 1.0),
    "PodGrouperNoLeader": (f"sum by (namespace, job) (podgrouper_leader{{{SEL}}})", {"namespace", "job"}, 1.0),
    "PodGrouperWorkQueueStalled": (f"max by (namespace, job, instance) (podgrouper_workqueue_depth{{{SEL}}})",
                                   {"namespace", "job", "instance"}, None),
}
GRAFANA_VARIABLES = {"$__rate_interval": "30s", "$namespace": chart.NAMESPACE, "$job": JOB, "$queue": ".*"}


def rendered_rules(path: Path) -> Path:
    (rule,) = [o for o in yaml.safe_load_all(chart.template(
        LIVE_VALUES, extra=("--api-versions", "monitoring.coreos.com/v1/PrometheusRule")))
        if o and o["kind"] == "PrometheusRule"]
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    return path


def dashboard_queries() -> list[tuple[str, str, set[str]]]:
    """(panel title, query as Grafana sends it, labels its legend names) of every dashboard target."""
    dash = json.loads((chart.CHART / "files" / "dashboard.json").read_text())
    out = []
    for panel in dash["panels"]:
        for t in panel["targets"]:
            expr = t["expr"]
            for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
                expr = expr.replace(name, GRAFANA_VARIABLES[name])
            out.append((panel["title"], expr, set(re.findall(r"\{\{\s*(\w+)\s*\}\}", t["legendFormat"]))))
    return out


@pytest.fixture
def node(kube: Kube, namespace: str) -> Iterator[str]:
    """A Node object to bind pods to (no kubelet: the pods stay Pending but are scheduled, as a gang
    scheduler leaves them between binding and the kubelet's start)."""
    name = f"alerts-{namespace}"
    kube.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    yield name
    with contextlib.suppress(KubeError):
        kube.delete(f"/api/v1/nodes/{name}", ignore_missing=True)


@pytest.fixture
def no_podgroups_namespace(kube: Kube, namespace: str) -> Iterator[str]:
    """A namespace whose ResourceQuota allows no PodGroup: the API server refuses the grouper's writes."""
    name = f"q-{uuid.uuid4().hex[:10]}"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    count = {"count/podgroups.scheduling.run.ai": "0"}
    quota = kube.create(f"/api/v1/namespaces/{name}/resourcequotas", {
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-podgroups"}, "spec": {"hard": count}})
    # the quota admission plugin checks the status the resourcequota controller writes; the local cluster runs
    # no such controller, so the test writes what it would
    quota["status"] = {"hard": count, "used": count}
    kube.replace(f"/api/v1/namespaces/{name}/resourcequotas/no-podgroups/status", quota)
    yield name
    with contextlib.suppress(KubeError):
        kube.delete(f"/api/v1/namespaces/{name}", ignore_missing=True)


@pytest.fixture
def scraper_token(cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """A token of a ServiceAccount bound to the chart's metrics-reader ClusterRole (the value metricsReaders)."""
    kube.apply_yaml(REPO / "deploy" / "rbac.yaml")
    cluster.create_service_account(namespace, "prometheus")
    binding = f"alerts-scraper-{namespace}"
    kube.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": binding},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "kai-pod-grouper-metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": namespace}]})
    token = tmp_path / "scraper-token"
    token.write_text(cluster.create_token(namespace, "prometheus"))
    yield token
    with contextlib.suppress(KubeError):
        kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{binding}", ignore_missing=True)


@pytest.fixture
def grouper(cluster: LocalCluster, kube: Kube, scraper_token: Path, tmp_path: Path) -> Iterator[GrouperProcess]:
    token = tmp_path / "grouper-token"
    token.write_text(cluster.create_token("kai-system", "kai-pod-grouper"))
    # --http-auth kubernetes (after GrouperProcess' own "none"): /metrics needs the scraper's token
    with GrouperProcess(cluster, token, tmp_path, identity="alerts-live",
                        args=["--definitions", str(REPO / "definitions"), "--http-auth", "kubernetes"]) as g:
        g.wait_ready(120)
        yield g


def pods_of(kube: Kube, namespace: str, job_name: str) -> list[dict[str, Any]]:
    return [p for p in kube.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=f"job-name={job_name}")["items"]
            if not p["metadata"].get("deletionTimestamp")]


def grouped_pods(kube: Kube, namespace: str, job_name: str, count: int) -> list[dict[str, Any]]:
    def done() -> list[dict[str, Any]] | None:
        pods = pods_of(kube, namespace, job_name)
        ok = [p for p in pods if p["metadata"].get("annotations", {}).get("pod-group-name")]
        return ok if len(ok) >= count else None

    return wait_until(done, 90, interval=0.5, what=f"{count} pods of Job {job_name} grouped")


def bind(kube: Kube, namespace: str, pod: str, node: str) -> None:
    """What a scheduler does: the pod's binding subresource (spec.nodeName, PodScheduled=True)."""
    kube.create(f"/api/v1/namespaces/{namespace}/pods/{pod}/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}})


def labels_of(series: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in series["metric"].items() if k not in ("__name__", "alertname", "alertstate", "severity")}


def test_alerts_and_dashboard_in_a_real_prometheus(
    prometheus: Any, grouper: GrouperProcess, kube: Kube, namespace: str, node: str,
    no_podgroups_namespace: str, scraper_token: Path, tmp_path: Path,
) -> None:
    rules = rendered_rules(tmp_path / "rules.yaml")
    checked = promtool("check", "rules", str(rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    prom: PrometheusServer = prometheus([{
        "job_name": JOB, "metrics_path": "/metrics",
        "authorization": {"credentials_file": str(scraper_token)},
        "static_configs": [{"targets": [f"127.0.0.1:{grouper.port}"], "labels": {"namespace": chart.NAMESPACE}}],
    }], [rules])
    prom.wait_for(f"up{{{SEL}}} == 1", 60)  # the token is accepted (401/403 would leave up at 0)

    # a gang kept waiting: its pods are never bound
    kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job("waiting", 2, GANG_OF_2, {QUEUE_LABEL: "team-a"}))
    # two gangs admitted: their pods bound as a scheduler binds them; one then loses a pod (degraded)
    for name in ("admitted", "degraded"):
        kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job(name, 2, GANG_OF_2, {QUEUE_LABEL: "team-b"}))
    pods = {name: grouped_pods(kube, namespace, name, 2) for name in ("admitted", "degraded")}
    # bound once the grouper has seen them wait (a gang first seen already admitted is taken as rebuilt after
    # a restart: no transition, no time to admission)
    prom.wait_for(f'max(podgrouper_gangs{{{SEL}, state="Waiting", queue="team-b"}}) >= 2', 120)
    for name in ("admitted", "degraded"):
        for pod in pods[name]:
            bind(kube, namespace, pod["metadata"]["name"], node)
    # the error alerts count a counter that appears (at 1) only on a target scraped a window before
    prom.wait_for(f"up{{{SEL}}} offset {WINDOW} == 1", 120)
    # a workload that cannot be grouped: its minimum is not a number
    kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job(
        "bad", 1, annotations={"kai.scheduler/batch-min-member": "abc"}))
    # PodGroup writes refused by the API server (the namespace's quota allows none)
    kube.create(f"/apis/batch/v1/namespaces/{no_podgroups_namespace}/jobs", job("refused", 1))
    # a PodGroup someone else wrote and then edited into one that cannot be read (sub-group parents in a cycle)
    pg_path = f"/apis/scheduling.run.ai/v2alpha2/namespaces/{namespace}/podgroups"
    kube.create(pg_path, {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                          "metadata": {"name": "hand-made"},
                          "spec": {"queue": "team-c", "subGroups": [{"name": "a", "minMember": 1},
                                                                    {"name": "b", "minMember": 1}]}})
    prom.wait_for(f'podgrouper_gangs{{{SEL}, queue="team-c"}}', 120)
    kube.patch(f"{pg_path}/hand-made", {"spec": {"subGroups": [{"name": "a", "minMember": 1, "parent": "b"},
                                                               {"name": "b", "minMember": 1, "parent": "a"}]}})

    prom.wait_for(f'max(podgrouper_gangs{{{SEL}, state="Admitted", queue="team-b"}}) >= 2', 120)
    (lost,) = [p for p in pods_of(kube, namespace, "degraded")][:1]
    kube.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{lost['metadata']['name']}",
                 json={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}).raise_for_status()

    # the expected alerts fire, with the labels their expression keeps
    for alert, labels in FIRING.items():
        selector = ", ".join(f'{k}="{v}"' for k, v in labels.items())
        firing = prom.wait_for(f'ALERTS{{alertname="{alert}", alertstate="firing", {selector}}}', 180)
        assert [labels_of(s) for s in firing] == [labels], (alert, firing)
    (waiting,) = [a for a in prom.alerts()
                  if a["labels"]["alertname"] == "PodGrouperGangWaiting" and a["labels"]["queue"] == "team-a"]
    assert waiting["state"] == "firing" and waiting["labels"]["severity"] == "warning"
    assert waiting["annotations"]["summary"] == "A gang of queue team-a has waited more than 0 minutes for admission"
    assert waiting["annotations"]["runbook_url"].endswith("docs/operations.md#podgroupergangwaiting")

    # every rule evaluates without error; the grouper's own-health alerts are quiet, their operands present
    def unsettled() -> list[tuple[str, str, str]]:
        return [(r["name"], r["health"], r.get("lastError", "")) for g in prom.rule_groups() for r in g["rules"]
                if r["health"] != "ok"] + [
            (a["labels"]["alertname"], a["state"], json.dumps(a["labels"])) for a in prom.alerts()
            if a["labels"]["alertname"] in QUIET]

    deadline = time.monotonic() + 120
    while unsettled() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not unsettled(), f"rules not healthy or own-health alerts active: {unsettled()}"
    assert {r["name"] for g in prom.rule_groups() for r in g["rules"]} == set(FIRING) | set(QUIET)
    expressions = {r["alert"]: r["expr"] for g in yaml.safe_load(rules.read_text())["groups"] for r in g["rules"]}
    for alert, (operand, label_names, value) in QUIET.items():
        assert operand in expressions[alert], (alert, expressions[alert])
        series = prom.wait_for(operand, 60)
        assert [set(s["metric"]) for s in series] == [label_names], (alert, series)
        if value is not None:
            assert float(series[0]["value"][1]) == value, (alert, series)

    # every dashboard query evaluates to series that carry the labels its legend names
    for title, expr, legend in dashboard_queries():
        series = prom.wait_for(expr, 120)
        missing = [s["metric"] for s in series if not legend <= set(s["metric"])]
        assert not missing, (title, expr, legend, missing)
