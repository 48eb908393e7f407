"""The cluster benchmark's expectations (``benchmarks/clusterbench/workloads.py``) agree with the real
grouping core: every kind's objects, as the benchmark creates them, run through ``grouper plan -o json``
(the same core and built-in catalog ``grouper run`` uses) must give exactly the PodGroups (name, owner,
minMember, minSubGroup, sub-groups) and pod assignments the benchmark verifies the cluster against.
The benchmark's own verification would then fail only for a real difference of the running grouper."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from grouper.cli.main import main

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from clusterbench.workloads import KINDS, PodSpec, Workload, build, workload_set  # noqa: E402

NS = "bench"


def materialize(w: Workload) -> tuple[list[dict[str, Any]], str]:
    """The workload's objects with uids, as the API server would return them; and the top object's uid."""
    uids: dict[str, str] = {}
    objs = []
    for node in w.nodes:  # nodes are listed after their dependencies
        assert all(d in uids for d in node.deps), f"{w.name}: {node.key} listed before {node.deps}"
        body = node.body(uids)
        uids[node.key] = str(uuid.uuid4())
        body["metadata"] = {**body["metadata"], "namespace": NS, "uid": uids[node.key],
                            "creationTimestamp": "2026-12-01T12:00:00Z", "resourceVersion": "1"}
        objs.append(body)
    return objs, uids["top"]


def plan(capsys: pytest.CaptureFixture[str], tmp_path: Path, objs: list[dict[str, Any]]) -> dict[str, Any]:
    f = tmp_path / "objs.yaml"
    f.write_text(yaml.safe_dump_all(objs))
    capsys.readouterr()
    rc = main(["plan", "-f", str(f), "-o", "json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    return dict(json.loads(out))


@pytest.mark.parametrize("pods", [5, 40], ids=["small", "large"])
@pytest.mark.parametrize("kind", KINDS)
def test_expectation_matches_the_grouping_core(kind: str, pods: int, capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    w = build(kind, PodSpec("kai-scheduler"), f"w-{kind.lower()}", pods)
    objs, top_uid = materialize(w)
    expected = w.expect(top_uid)
    got = plan(capsys, tmp_path, objs)
    assert not got["errors"], got["errors"]
    assert {p["name"]: (p["podGroup"], p["subGroup"]) for p in got["pods"]} == expected.pods
    pgs = {pg["metadata"]["name"]: pg for pg in got["podGroups"]}
    assert set(pgs) == set(expected.pod_groups)
    for name, exp in expected.pod_groups.items():
        spec = pgs[name]["spec"]
        assert (spec.get("minMember"), spec.get("minSubGroup")) == (exp.min_member, exp.min_sub_group), name
        have = sorted((s["name"], s.get("parent"), s.get("minMember"), s.get("minSubGroup"))
                      for s in spec.get("subGroups") or [])
        assert have == sorted(exp.sub_groups), name
        assert pgs[name]["metadata"]["ownerReferences"][0]["uid"] == exp.owner["uid"] == top_uid


def test_shapes_mix_kinds_and_count_pods() -> None:
    small = workload_set(1000, 5, PodSpec("x"), "")
    assert len(small) == 200 and sum(w.pod_count for w in small) == 1000
    assert [w.kind for w in small[:7]] == list(KINDS)
    large = workload_set(10000, 1000, PodSpec("x"), "")
    assert [w.pod_count for w in large] == [1000] * 10
    jobset = large[0]
    assert sum(1 for n in jobset.nodes if n.kind == "Job") == 125  # 125 Jobs x 8 pods
    with pytest.raises(ValueError, match="multiple"):
        workload_set(1001, 5, PodSpec("x"), "")


def test_report_renders_a_failed_scenario_next_to_a_measured_one() -> None:
    """A scenario that raised has only its name, kind and error; the table still renders (and says NO)."""
    import cluster_bench

    fig = {"total_s": 2.0, "after_last_create_s": 0.5, "latency_s": {"p50": 0.1, "p90": 0.2, "p99": 0.3},
           "grouper_cpu_ms_per_pod": 1.0, "grouper_rss_mib": 80.0, "grouper_rss_growth_kb_per_pod": 2.0,
           "grouper_requests_per_pod": 1.2, "grouper_writes": 1200.0, "verification": {"ok": True}}
    results = {"scenarios": [
        {"name": "restart-100000", "kind": "restart", "error": "AssertionError('/metrics: None')"},
        {"name": "burst-1000-small", "kind": "burst", "pods": 1000, "load_start": 1.0, "load_end": 2.0,
         "client_limits": {"qps": "0", "burst": "0"}, "ratio": 1.1, "grouper": fig,
         "baseline": {**fig, "baseline_writes": {"writes": 1200}}},
    ]}
    text = cluster_bench.table(results)
    assert "| restart-100000 | | **FAILED: AssertionError('/metrics: None')** |" in text
    assert "| burst-1000-small | 1,000 | 1.10x |" in text


def test_bracketed_ratio_is_to_the_mean_of_both_baselines_and_says_the_drift() -> None:
    import cluster_bench

    g, b1, b2 = {"total_s": 33.0}, {"total_s": 25.0}, {"total_s": 35.0}
    assert cluster_bench.bracketed_ratio(g, b1, None) == {"ratio": 1.32}
    assert cluster_bench.bracketed_ratio(g, b1, b2) == {"ratio": 1.1, "ratio_to_first_baseline": 1.32,
                                                        "baseline_drift": 1.4}
    assert cluster_bench.bracketed_ratio(g, b1, {"total_s": 0}) == {"ratio": 1.32}  # no second figure


def test_report_of_a_bracketed_run_shows_both_baselines_and_checks_both() -> None:
    import cluster_bench

    fig = {"total_s": 2.0, "after_last_create_s": 0.5, "latency_s": {"p50": 0.1, "p90": 0.2, "p99": 0.3},
           "grouper_cpu_ms_per_pod": 1.0, "grouper_rss_mib": 80.0, "grouper_rss_growth_kb_per_pod": 2.0,
           "grouper_requests_per_pod": 1.2, "grouper_writes": 1200.0, "verification": {"ok": True}}
    base = {**fig, "baseline_writes": {"writes": 1200}}
    s = {"name": "burst-1000-small", "kind": "burst", "pods": 1000, "load_start": 1.0, "load_end": 2.0,
         "client_limits": {"qps": "0", "burst": "0"}, "grouper": fig, "baseline": {**base, "total_s": 1.6},
         "baseline_after": {**base, "total_s": 2.4, "verification": {"ok": False}},
         **cluster_bench.bracketed_ratio(fig, {"total_s": 1.6}, {"total_s": 2.4})}
    text = cluster_bench.table({"scenarios": [s]})
    assert "| burst-1000-small | 1,000 | 1.00x | 2.00 (1.60 / 2.40) |" in text
    assert "| **NO** |" in text  # the second baseline's namespace failed verification
    assert "baselines before / after the grouper**: 1.60 / 2.40 s (drift 1.50x)" in text
    assert "1.25x to the first alone" in text


def test_report_of_repeated_restarts_lists_each_run_with_its_grouper_and_both_floors() -> None:
    import cluster_bench

    def run(grouper: str, ready: float, commit: str | None = None) -> dict[str, Any]:
        return {"grouper": grouper, "grouper_commit": commit, "ready_s": ready, "leading_s": ready + 0.1,
                "settled_s": ready * 2, "writes_after_restart": 0.0, "list_floor_s": 19.6,
                "stream_list_floor_s": 6.1, "new_workload_s": 0.5, "rss_mib": 700.0, "rss_per_cached_pod_kb": 6.9}

    runs = [run("main", 10.0), run("alt", 21.0, "526d94c"), {**run("main", 11.0), "crash": True}]
    s = {"name": "restart-100000", "kind": "restart", "load_start": 1.0, "load_end": 2.0,
         "restart": {**runs[0], "runs": runs, "pods": 100000, "workloads": 20000,
                     "verification": {"ok": True}, "setup": {"verification": {"ok": True}}}}
    text = cluster_bench.table({"scenarios": [s]})
    assert "a plain client's LIST of its pods: 19.60 s, a streaming list: 6.10 s): `/readyz` 10.00 s" in text
    assert ("every restart of restart-100000 (ready / leading / settled s, writes): main 10.00 / 10.10 / 20.00, 0; "
            "alt 526d94c 21.00 / 21.10 / 42.00, 0; main after a crash 11.00 / 11.10 / 22.00, 0") in text


def test_report_of_a_restart_states_what_it_cost_the_box_beside_the_floor_of_its_lists() -> None:
    import cluster_bench

    r = {"ready_s": 10.0, "leading_s": 10.1, "settled_s": 28.0, "writes_after_restart": 0.0, "list_floor_s": 12.0,
         "stream_list_floor_s": 5.0, "new_workload_s": 0.4, "rss_mib": 700.0, "rss_per_cached_pod_kb": 5.8,
         "lists_floor": {"wall_s": 9.5, "objects": 171450, "apiserver_cpu_s": 11.2, "client_cpu_s": 4.1},
         "apiserver_cpu_s": {"to_ready": 10.1, "to_settled": 14.6}, "grouper_cpu_settled_s": 24.6,
         "cpu_floor_s": 19.6, "pods": 100000, "workloads": 20000,
         "verification": {"ok": True}, "setup": {"verification": {"ok": True}}}
    s = {"name": "restart-100000", "kind": "restart", "load_start": 1.0, "load_end": 2.0, "restart": r}
    text = cluster_bench.table({"scenarios": [s]})
    assert ("the floor of restart-100000**: a plain client's streaming lists of everything the grouper caches "
            "(171,450 objects, at once) 9.50 s, 11.20 CPU-s of the API server and 4.10 of the client; the restart "
            "until settled: the API server 14.60 CPU-s (10.10 to ready), the grouper 24.60 CPU-s, together 19.60 s "
            "of the box's CPUs") in text
    # results saved before these figures existed still render, without the line
    old = {k: v for k, v in r.items() if k not in ("lists_floor", "apiserver_cpu_s", "grouper_cpu_settled_s")}
    assert "the floor of" not in cluster_bench.table({"scenarios": [{**s, "restart": old}]})


def test_restarts_add_to_the_estimate() -> None:
    import cluster_bench

    sc = [cluster_bench.all_scenarios()["restart-10000"]]
    one, three = cluster_bench.estimate_seconds(sc), cluster_bench.estimate_seconds(sc, restarts=3)
    assert three - one == 2 * (20 + 10000 * 0.003)
