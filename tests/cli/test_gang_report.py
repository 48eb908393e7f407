"""The pure rendering of ``grouper why`` and ``grouper get workloads`` (grouper/cli/gang_report.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from grouper.api.models import GangView
from grouper.cli.gang_report import (
    WhyReport,
    decision_notes,
    duration,
    gang_now,
    gang_view,
    render_why,
    render_workload_rows,
    row_facts,
    worst,
)
from grouper.core.decision import Decision
from grouper.describe.workloads import WorkloadSummary

NOW = datetime(2026, 12, 5, 13, 0, tzinfo=UTC)


def ts(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, *, group: str = "pg", created: datetime = NOW - timedelta(minutes=10), node: str = "",
        message: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {}
    if message:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": message, "lastTransitionTime": ts(created)}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": ts(created),
                         "annotations": {"pod-group-name": group}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
            "status": status}


def kai_pg(min_member: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "ns", "creationTimestamp": ts(NOW - timedelta(minutes=10))},
            "spec": {"minMember": min_member, "queue": "team-a"}}


@pytest.mark.parametrize(("seconds", "text"), [
    (None, "-"), (-3, "0s"), (45, "45s"), (60, "1m"), (90, "1m30s"), (599, "9m59s"), (600, "10m"), (7199, "119m"),
    (7200, "2h"), (3 * 3600 + 300, "3h5m"), (11 * 3600 + 300, "11h"), (50 * 3600, "2d"),
])
def test_duration(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


def test_worst_state_first() -> None:
    assert worst(["Admitted", "Waiting", "Grouping"]) == "Waiting"
    assert worst(["Admitted", "Degraded", "Error"]) == "Error"
    assert worst([None, ""]) is None and worst([]) is None


def test_many_held_pods_are_named_within_the_limit() -> None:
    """Twelve held pods: one line per distinct message, at most ``limit`` names and ``limit`` messages."""
    pods = [pod(f"w-{i:02d}", message=f"0/4 nodes are available: {i % 3}") for i in range(12)]
    g = gang_now(kai_pg(12), pods, now=NOW)
    report = WhyReport("batch/v1", "Job", "ns", "train", [g], "BatchJob Grouper", ["pg"], 12)
    text = render_why(report, NOW, limit=2)
    assert text.splitlines()[0] == ("Job ns/train is Waiting: every pod the gang needs is there, but the scheduler "
                                    "has not placed enough of them.")
    assert "  State: Waiting for 10m (since 2026-12-05T12:50:00Z)" in text
    assert "  Needs: 12 scheduled pods (minMember 12)." in text
    assert "  Has: 12 present, 0 scheduled (24 GPUs requested)." in text
    assert ("    4 pods PodScheduled=False (w-00, w-03 and 2 more): Unschedulable: 0/4 nodes are available: 0"
            in text)
    assert "    4 pods PodScheduled=False (w-01, w-04 and 2 more): Unschedulable: 0/4 nodes are available: 1" in text
    assert "available: 2" not in text and "    ... and 1 more pod message (4 pods)" in text
    everything = render_why(report, NOW, limit=0)
    assert "(w-00, w-03, w-06, w-09)" in everything and "available: 2" in everything
    body = report.to_dict(NOW)
    GangView.model_validate(body["gangs"][0])
    assert [len(r["pods"]) for r in body["gangs"][0]["reasons"]] == [4, 4, 4]  # structured output: every pod


def test_admitted_gang_and_its_time_to_admission() -> None:
    pg = kai_pg(2)
    pg["metadata"]["annotations"] = {"kai.scheduler/last-start-timestamp": ts(NOW - timedelta(minutes=8))}
    g = gang_now(pg, [pod("a", node="n1"), pod("b", node="n2")], now=NOW)
    view = gang_view("pg", g.state, NOW)
    assert (view["state"], view["timeToAdmissionSeconds"], view["secondsInState"]) == ("Admitted", 120.0, 480.0)
    text = render_why(WhyReport("batch/v1", "Job", "ns", "j", [g]), NOW)
    assert "  Admitted at 2026-12-05T12:52:00Z after 2m (from the first pod's creation)." in text
    assert "The scheduler said" not in text


def test_a_podgroup_field_that_cannot_be_read_is_an_error_naming_it() -> None:
    pg = kai_pg(2)
    pg["spec"]["minMember"] = "two"
    g = gang_now(pg, [pod("a")], now=NOW)
    text = render_why(WhyReport("batch/v1", "Job", "ns", "j", [g]), NOW)
    assert text.startswith("Job ns/j is Error: grouping it failed.")
    assert "  State: Error (since when, the cluster does not record" in text
    assert "  Error: PodGroup ns/pg: field spec.minMember: expected a count (an integer >= 0), got 'two'" in text


def test_not_grouped_says_why_from_the_plan() -> None:
    decisions = [Decision("ns", f"p{i}", f"u{i}", "skipped", "OtherScheduler", "handled by scheduler default-scheduler")
                 for i in range(7)]
    notes = decision_notes(decisions, 3)
    assert notes == ["7 pods (p0, p1, p2 and 4 more) are not grouped (OtherScheduler): handled by scheduler "
                     "default-scheduler"]
    own = [Decision("ns", f"q{i}", f"v{i}", "error", "OwnerNotFound", f"owner of pod ns/q{i} not found")
           for i in range(5)]
    assert decision_notes(own, 2) == ["pod q0 could not be grouped (OwnerNotFound): owner of pod ns/q0 not found",
                                      "pod q1 could not be grouped (OwnerNotFound): owner of pod ns/q1 not found",
                                      "... and 3 more (3 pods)"]
    text = render_why(WhyReport("batch/v1", "Job", "ns", "j", [], None, [], 7, notes), NOW)
    assert text.splitlines()[0] == "Job ns/j is Grouping: the grouper has not grouped it yet (no PodGroup in the cluster)."
    assert text.splitlines()[1] == "Why:"


def summary(name: str) -> WorkloadSummary:
    return WorkloadSummary("ns", name, "JobSet", "jobset.x-k8s.io/v1alpha2", ts(NOW - timedelta(hours=1)),
                           ["Running"], [("leader", 1), ("worker", 2)], 12, 3)


def test_workload_rows_state_and_wide_columns() -> None:
    long = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available"
    waiting = {"podGroup": "pg-a", "state": "Waiting", "since": ts(NOW - timedelta(minutes=12)), "secondsInState": 1.0,
               "queue": "team-a", "reasons": [{"source": "Pod", "reason": "Unschedulable", "message": long}],
               "error": ""}
    admitted = {"podGroup": "pg-b", "state": "Admitted", "since": ts(NOW), "queue": "team-b", "reasons": []}
    rows = [(summary("a"), "Waiting", [admitted, waiting]), (summary("b"), "Admitted", [admitted]),
            (summary("c"), None, [])]
    text = render_workload_rows(rows, wide=False, now=NOW)
    assert text.splitlines()[0].split() == ["NAMESPACE", "NAME", "KIND", "PHASE", "STATE", "COMPONENTS", "GPU", "AGE"]
    assert [line.split()[4] for line in text.splitlines()[1:]] == ["Waiting", "Admitted", "-"]
    wide = render_workload_rows(rows, wide=True, now=NOW).splitlines()
    header = wide[0]
    assert header.split()[-3:] == ["QUEUE", "WAITING", "REASON"]
    at = header.index("QUEUE")
    # the worst gang's queue, its time in state (from since, at this clock), its first reason cut to 60
    assert wide[1][at:].split()[:2] == ["team-a", "12m"]
    assert wide[1][header.index("REASON"):] == ("Unschedulable: " + long)[:57] + "..."
    assert wide[2][at:].split() == ["team-b", "-", "-"]
    assert wide[3][at:].split() == ["-", "-", "-"]
    assert row_facts([{**waiting, "state": "Degraded"}], NOW, live=True)[1] == "?"
    assert row_facts([{**waiting, "state": "Degraded"}], NOW)[1] == "12m"  # a grouper's since is the real one
