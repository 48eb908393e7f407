"""Hostile jq is stopped within its bounds: validation rejects it, and if it slips through (or is
evaluated without validation) the sandbox worker's deadline / memory cap ends it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from grouper.karta import Evaluator, KartaEvalError, SandboxedRunner
from grouper.karta.jqrun import JqError, JqTimeout, evaluate_many
from grouper.karta.validate import check_expression
from tests.karta.fixtures import defn, karta

HOSTILE = {
    "endless recursion": "def f: f; f",
    "huge generator": "[limit(100000000; repeat(1))]",
    "deep recursion": "def f(n): if n == 0 then 0 else f(n - 1) + 1 end; f(100000000)",
    "while": "[while(true; .)]",
}


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxedRunner]:
    r = SandboxedRunner(workers=1, memory_limit_mb=512)
    yield r
    r.close()


def running_workers(runner: SandboxedRunner) -> set[int]:
    """The pids of the runner's live workers, after making sure there is one (a deadline is checked by
    the kill it causes, not by a clock: a jq run that ran out of time takes its worker with it)."""
    assert runner.run(".", "null", 10, 5) == [None]
    pids = set(runner.pids())
    assert pids
    return pids


@pytest.mark.parametrize("expr", HOSTILE.values(), ids=HOSTILE.keys())
def test_validation_rejects_unbounded_programs(expr: str) -> None:
    assert any("failed validation" in m for m in check_expression(expr))


@pytest.mark.parametrize("expr", HOSTILE.values(), ids=HOSTILE.keys())
def test_sandbox_deadline_kills_and_recovers(sandbox: SandboxedRunner, expr: str) -> None:
    before = running_workers(sandbox)
    with pytest.raises(JqTimeout, match=r"exceeded the time limit of 0\.5s"):
        sandbox.run(expr, "{}", 1000, 0.5)
    assert before.isdisjoint(sandbox.pids()), "the worker that ran out of time was killed"
    assert sandbox.run(".a", '{"a": 1}', 1000, 5) == [1]  # a fresh worker answers


def test_sandbox_memory_cap(sandbox: SandboxedRunner) -> None:
    before = sandbox.restarts
    with pytest.raises(JqError):
        sandbox.run('"x" * 2000000000', "{}", 1000, 10)
    assert sandbox.restarts == before + 1
    assert sandbox.run("1", "null", 1000, 5) == [1]


def test_sandbox_output_cap_and_errors(sandbox: SandboxedRunner) -> None:
    with pytest.raises(JqError, match="query results exceed the allowed number 10"):
        sandbox.run("range(1e12)", "null", 10, 5)
    with pytest.raises(JqError, match="Cannot iterate over null"):
        sandbox.run(".x[]", "{}", 10, 5)


def test_sandbox_has_no_environment(sandbox: SandboxedRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECRET_TOKEN", "s3cr3t")
    [env] = sandbox.run("$ENV", "null", 10, 5)
    assert "SECRET_TOKEN" not in env


def test_fused_timeout_is_blamed_on_the_expression_that_ran_out_of_time(sandbox: SandboxedRunner) -> None:
    out = evaluate_many([".a", "def f: f; f", ".b"], '{"a": 1}', runner=sandbox, timeout_s=0.5)
    assert out[".a"].values == (1,)  # evaluated alone after the fused run timed out
    culprit = out["def f: f; f"]
    assert culprit.error is not None and "time limit of 0.5s" in culprit.error and culprit.blame is None
    assert out[".b"].blame == "def f: f; f" and out[".b"].error is not None
    assert evaluate_many([".a"], '{"a": 1}', runner=sandbox, timeout_s=5)[".a"].values == (1,)


def test_hostile_definition_that_slipped_past_validation(sandbox: SandboxedRunner) -> None:
    d = defn(
        karta(
            "evil",
            {
                "name": "r",
                "kind": {"group": "x", "version": "v1", "kind": "K"},
                "statusDefinition": {
                    "statusMappings": {
                        "running": [{"byExpression": {"expression": "def f: f; f", "expectedResult": "true"}}]
                    }
                },
            },
        )
    )
    ev = Evaluator(d, runner=sandbox, timeout_s=0.5)
    before = running_workers(sandbox)
    with pytest.raises(KartaEvalError, match="time limit"):
        ev.status({"metadata": {"uid": "u", "resourceVersion": "1"}})
    assert before.isdisjoint(sandbox.pids()), "the worker that ran out of time was killed"


def test_concurrent_queries_share_workers() -> None:
    import threading

    r = SandboxedRunner(workers=2)
    results: list[list[object]] = []
    threads = [
        threading.Thread(target=lambda i=i: results.append(r.run(f"{i}", "null", 10, 10))) for i in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    r.close()
    assert sorted(x[0] for x in results) == list(range(6))  # type: ignore[type-var]
