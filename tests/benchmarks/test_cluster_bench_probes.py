"""The cluster benchmark says why a probe failed: the reason kept for a 503 names the grouper's failing
checks (read from the answer ``grouper.api.health`` really gives), and the table line quotes the first."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

from grouper.api.health import readiness
from grouper.api.state import HealthLimits, HealthSnapshot

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from cluster_bench import _reasons  # noqa: E402
from clusterbench.observers import _failing_checks  # noqa: E402


def test_failing_checks_of_a_real_503_name_each_failing_check_only() -> None:
    now = 1000.0
    snap = HealthSnapshot(role="leader", informers={"Pod.v1": True}, last_api_contact=now - 20, now=now)
    body = orjson.dumps(readiness(snap, HealthLimits(api_contact=15.0)).body())
    reason = _failing_checks(body)
    assert reason == "api-server: last answer 20.0s ago (limit 15s)"


def test_failing_checks_of_a_body_that_is_not_a_health_answer() -> None:
    assert _failing_checks(b"<html>bad gateway</html>") == "<html>bad gateway</html>"
    assert _failing_checks(b'{"checks": [{"name": "x", "ok": true, "message": "m"}]}') == "no failing check"


def test_table_line_quotes_the_first_reason_and_counts_the_rest() -> None:
    assert _reasons({"probe_failures": 0}) == ""
    assert _reasons({"probe_failure_reasons": ["a"]}) == ": a"
    assert _reasons({"probe_failure_reasons": ["a", "b", "c"]}) == ": a and 2 more"
