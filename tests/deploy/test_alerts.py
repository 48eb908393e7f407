"""The chart's alerts and dashboard (deploy/chart/files/) checked with the real tools, no cluster: ``helm template``
renders them with the flags on and off, ``promtool check rules`` parses the rendered PrometheusRule,
``promtool test rules`` runs tests/deploy/prometheus/alerts.test.yaml (every alert fires on synthetic series and
stays silent short of its threshold), every dashboard query parses, and each panel's legend names only labels
its query keeps. tests/tooling/test_alerts_live.py runs both against a real Prometheus scraping a grouper.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from realtools import promtool

from devtools import chart
from devtools.tools.install import unavailable

REPO = Path(__file__).resolve().parents[2]
FILES = chart.CHART / "files"
UNIT_TESTS = Path(__file__).with_name("prometheus") / "alerts.test.yaml"
PROMETHEUS_RULE_API = ("--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
ALERTS = {"PodGrouperGangWaiting", "PodGrouperGangDegraded", "PodGrouperGangsInError", "PodGrouperGroupingErrors",
          "PodGrouperWriteFailures", "PodGrouperDown", "PodGrouperNoLeader", "PodGrouperWorkQueueStalled"}
# what a Grafana variable stands for when a query is sent to Prometheus outside Grafana
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$namespace": "kai-system", "$job": "kai-pod-grouper",
                     "$queue": ".*"}


def needs_promtool() -> None:
    why = unavailable("prometheus")
    if why:
        pytest.skip(why)


def objects(rendered: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(rendered) if d]


def rule_groups(values: dict[str, Any] | None = None, **template: Any) -> list[dict[str, Any]]:
    """The ``spec.groups`` of the rendered PrometheusRule (the rules are switched on in ``values``)."""
    values = {"metrics": {"prometheusRule": {"enabled": True}}} if values is None else values
    (rule,) = [o for o in objects(chart.template(values, extra=PROMETHEUS_RULE_API, **template))
               if o["kind"] == "PrometheusRule"]
    return list(rule["spec"]["groups"])


def write_rules(path: Path, groups: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


def dashboard() -> dict[str, Any]:
    return dict(json.loads((FILES / "dashboard.json").read_text()))


def dashboard_targets(dash: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(p["title"], t) for p in dash["panels"] for t in p.get("targets", [])]


def expand(expr: str, variables: dict[str, str] = GRAFANA_VARIABLES) -> str:
    """A dashboard query as Grafana sends it (its variables replaced; the longest names first)."""
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace(name, variables[name])
    assert "$" not in expr, f"unexpanded variable in {expr!r}"
    return expr


def test_rules_and_dashboard_render_only_when_enabled() -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects(chart.template(extra=PROMETHEUS_RULE_API))}
    assert ("PrometheusRule", "kai-pod-grouper") not in kinds
    assert ("ConfigMap", "kai-pod-grouper-dashboard") not in kinds
    on = {"metrics": {"prometheusRule": {"enabled": True, "labels": {"release": "kps"}},
                      "dashboard": {"enabled": True, "namespace": "grafana",
                                    "annotations": {"grafana_folder": "Scheduling"}}}}
    objs = objects(chart.template(on, extra=PROMETHEUS_RULE_API))
    (rule,) = [o for o in objs if o["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "kai-system" and rule["metadata"]["labels"]["release"] == "kps"
    assert {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]} == ALERTS
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "kai-pod-grouper-dashboard"]
    assert cm["metadata"]["namespace"] == "grafana"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"  # the sidecar's default label
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Scheduling"}
    # the ConfigMap carries the file itself, byte for byte (the tests read the same file)
    assert cm["data"] == {"kai-pod-grouper.json": (FILES / "dashboard.json").read_text().rstrip("\n")}


def test_prometheus_rule_needs_the_operator_crd() -> None:
    proc_error = ""
    try:
        chart.template({"metrics": {"prometheusRule": {"enabled": True}}})
    except RuntimeError as e:
        proc_error = str(e)
    assert "no monitoring.coreos.com/v1 PrometheusRule" in proc_error


def test_every_rule_has_annotations_severity_and_a_runbook_section() -> None:
    operations = (REPO / "docs" / "operations.md").read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", operations, re.M)}
    for group in rule_groups():
        for r in group["rules"]:
            assert r["labels"]["severity"] in ("warning", "critical"), r
            assert r["annotations"]["summary"] and r["annotations"]["description"], r["alert"]
            url = r["annotations"]["runbook_url"]
            assert url.endswith("docs/operations.md#" + r["alert"].lower()), url
            assert r["alert"].lower() in anchors, f"docs/operations.md has no section {r['alert']}"


def test_promtool_checks_the_rendered_rules(tmp_path: Path) -> None:
    needs_promtool()
    checked = promtool("check", "rules", str(write_rules(tmp_path / "rules.yaml", rule_groups())))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in checked.stdout
    # promtool really parses: a broken expression fails it
    broken = rule_groups()
    broken[0]["rules"][0]["expr"] = broken[0]["rules"][0]["expr"].replace(")", "", 1)
    assert promtool("check", "rules", str(write_rules(tmp_path / "broken.yaml", broken))).returncode != 0


def unit_test(tmp_path: Path, values: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    write_rules(tmp_path / "rules.yaml", rule_groups(values))
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    return promtool("test", "rules", str(tmp_path / UNIT_TESTS.name))


def test_promtool_unit_tests_of_every_alert(tmp_path: Path) -> None:
    needs_promtool()
    tests = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    tested = {a["alertname"] for t in tests for a in t["alert_rule_test"]}
    firing = {a["alertname"] for t in tests for a in t["alert_rule_test"] if a["exp_alerts"]}
    assert tested == firing == ALERTS  # each alert is seen firing and silent
    result = unit_test(tmp_path, {"metrics": {"prometheusRule": {"enabled": True}}})
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_waiting_threshold_and_selector_come_from_the_values(tmp_path: Path) -> None:
    """The unit tests expect PodGrouperGangWaiting at 32 min with the default 30: with 45 it must not fire
    there (the threshold of the value is what promtool evaluated), and the expression says 45 min."""
    needs_promtool()
    values = {"metrics": {"prometheusRule": {"enabled": True, "alerts": {"gangWaiting": {"minutes": 45}}}}}
    (waiting,) = [r for g in rule_groups(values) for r in g["rules"] if r["alert"] == "PodGrouperGangWaiting"]
    assert waiting["expr"].endswith("> 2700") and "45 minutes" in waiting["annotations"]["summary"]
    result = unit_test(tmp_path, values)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    failed = re.findall(r"alertname: (\w+), time: (\w+)", output)
    assert failed == [("PodGrouperGangWaiting", "32m")], output
    # the release namespace scopes the series (the ServiceMonitor's job and namespace labels)
    for group in rule_groups(namespace="gpu-ops"):
        for r in group["rules"]:
            assert 'job="kai-pod-grouper", namespace="gpu-ops"' in r["expr"], r["expr"]
    custom = {"metrics": {"prometheusRule": {"enabled": True, "selector": 'job="grouper"'}}}
    assert all('{job="grouper"' in r["expr"] for g in rule_groups(custom) for r in g["rules"])


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    """promtool parses each query (as a recording rule) after Grafana's variables are replaced."""
    needs_promtool()
    targets = dashboard_targets(dashboard())
    rules = [{"record": f"dashboard:q{i}", "expr": expand(t["expr"])} for i, (_, t) in enumerate(targets)]
    checked = promtool("check", "rules", str(write_rules(tmp_path / "dash.yaml", [{"name": "d", "rules": rules}])))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules)} rules found" in checked.stdout


def legend_labels(target: dict[str, Any]) -> set[str]:
    return set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")))


def test_dashboard_panels_and_legends() -> None:
    dash = dashboard()
    assert dash["uid"] == "kai-pod-grouper"
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert variables == {"datasource", "namespace", "job", "queue"}
    titles = {p["title"] for p in dash["panels"]}
    assert {"Gangs by state and queue", "Oldest waiting gang per queue", "GPUs requested by waiting gangs per queue",
            "Time to admission", "Gang state transitions", "Reconciles by result", "Work queue depth",
            "Leader and replicas", "Grouping errors and write failures"} <= titles
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for title, t in dashboard_targets(dash):
        # one release: every query selects its namespace and job
        assert 'namespace="$namespace", job="$job"' in t["expr"], (title, t["expr"])
        assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        # a legend names only labels the query's outer aggregation keeps (each query starts with it; a
        # quantile's is the `sum by (le, ...)` inside histogram_quantile)
        by = re.search(r"by \(([^)]*)\)", t["expr"])
        assert by, (title, t["expr"])
        kept = {label.strip() for label in by.group(1).split(",")} - {"le"}
        assert legend_labels(t) <= kept, (title, t["expr"], t["legendFormat"])


def test_helm_lint_with_the_dashboard() -> None:
    # helm lint has no --api-versions: the PrometheusRule (which needs its CRD) is rendered by the tests above
    proc = subprocess.run(
        [chart.helm(), "lint", "--strict", str(chart.CHART), "--values", "-"],
        input=json.dumps({"metrics": {"dashboard": {"enabled": True}}}), capture_output=True, text=True,
    )
    assert proc.returncode == 0 and "0 chart(s) failed" in proc.stdout, proc.stdout + proc.stderr
