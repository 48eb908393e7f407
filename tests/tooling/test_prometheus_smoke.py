"""A real Prometheus (Debian's, ``make tools``) scrapes a running ``grouper run`` over the local cluster: the
``podgrouper_*`` series arrive, a value the grouper changes is seen changing, a rule file is checked by
``promtool`` and its alert fires."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kube import Kube, wait_until
from realtools import PrometheusServer, promtool

from devtools.cluster import LocalCluster
from devtools.grouper_process import GrouperProcess
from grouper import __version__

REPO = Path(__file__).resolve().parents[2]
RULES = {"groups": [{"name": "smoke", "rules": [
    {"record": "podgrouper:series:count", "expr": 'count({__name__=~"podgrouper_.+"})'},
    {"alert": "GrouperDecidedPods", "expr": "sum(podgrouper_pod_decisions_total) > 0", "for": "0s",
     "labels": {"severity": "info"}, "annotations": {"summary": "the grouper decided {{ $value }} pod(s)"}},
]}]}


@pytest.fixture
def grouper(cluster: LocalCluster, kube: Kube, tmp_path: Path) -> Iterator[GrouperProcess]:
    kube.apply_yaml(REPO / "deploy" / "rbac.yaml")
    token = tmp_path / "token"
    token.write_text(cluster.create_token("kai-system", "kai-pod-grouper"))
    with GrouperProcess(cluster, token, tmp_path, identity="prom-smoke",
                        args=["--definitions", str(REPO / "definitions")]) as g:
        g.wait_ready(120)
        yield g


def test_prometheus_scrapes_the_grouper_and_evaluates_rules(
    prometheus: object, grouper: GrouperProcess, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(RULES, sort_keys=False))
    checked = promtool("check", "rules", str(rules))
    assert checked.returncode == 0 and "SUCCESS: 2 rules found" in checked.stdout, checked.stdout + checked.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [{"alert": "A", "expr": "sum(("}]}]}))
    assert promtool("check", "rules", str(bad)).returncode != 0  # promtool really parses the expressions

    prom: PrometheusServer = prometheus(  # type: ignore[operator]
        [{"job_name": "grouper", "metrics_path": "/metrics",
          "static_configs": [{"targets": [f"127.0.0.1:{grouper.port}"]}]}], [rules])
    up = prom.wait_for('up{job="grouper"} == 1')
    assert up[0]["metric"]["instance"] == f"127.0.0.1:{grouper.port}"
    names = {s["metric"]["__name__"] for s in prom.wait_for('{__name__=~"podgrouper_.+", job="grouper"}')}
    assert {"podgrouper_build_info", "podgrouper_leader", "podgrouper_workqueue_depth"} <= names, names
    prom.wait_for(f'podgrouper_build_info{{job="grouper", version="{__version__}"}} == 1')  # values, not only names
    assert float(prom.wait_for("podgrouper:series:count")[0]["value"][1]) > 0  # the recording rule runs

    # the grouper decides a pod; Prometheus sees the counter move and the alert fire
    kube.create(f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "solo"},
        "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "busybox"}]}})
    wait_until(lambda: kube.get(f"/api/v1/namespaces/{namespace}/pods/solo")["metadata"].get(
        "annotations", {}).get("pod-group-name"), 60, what="the grouper's pod-group-name annotation")
    prom.wait_for("sum(podgrouper_pod_decisions_total) > 0")
    firing = prom.wait_for('ALERTS{alertname="GrouperDecidedPods", alertstate="firing"}')
    assert firing[0]["metric"]["severity"] == "info"
    (alert,) = [a for a in prom.alerts() if a["labels"]["alertname"] == "GrouperDecidedPods"]
    assert alert["state"] == "firing" and alert["annotations"]["summary"].startswith("the grouper decided ")
