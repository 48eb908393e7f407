"""Many objects in one jq run (``evaluate_groups``, ``Evaluator.prefetch``): the same
outcomes as one run per object, one sandbox round trip per chunk of pods (and their root object) instead
of one per pod."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from grouper.karta import Evaluator, SandboxedRunner, from_object
from grouper.karta.jqrun import (
    EACH_MAX_INPUTS,
    IN_PROCESS,
    evaluate_groups,
    evaluate_many,
    serialize,
)
from grouper.karta.sandbox import SandboxPool
from grouper.karta.validate import check_expression
from tests.karta.test_properties import JSON, PROGRAMS, SETTINGS, _compiles

REPO = Path(__file__).resolve().parents[2]
NIMSERVICE = REPO / "definitions" / "apps-nvidia-com-nimservice-v1alpha1.yaml"

ERRORS = [
    'error("boom")',
    ".a.b",
    'error({"a": [1, "x"]})',
    "error(null)",
    "error(1)",
    "error",
    ".[] | tonumber",
    "[range(5)] | .[]",
    "range(2000)",  # more outputs than allowed
    "empty",
    "not_a_function(1)",  # does not compile
]
INPUTS = ["1", '{"a": {"b": 2}}', '{"a": 3}', "[1, 2]", "null", '"s"', '{"a": {"b": [1, {"c": null}]}}']


def evaluate_each(exprs: list[str], texts: list[str], **kwargs: Any) -> list[dict[str, Any]] | None:
    """One group's answer: what the evaluator's one-run path gives for a pass's pods alone."""
    out = evaluate_groups([(exprs, texts)], **kwargs)
    return None if out is None else out[0]


class CountingRunner:
    def __init__(self) -> None:
        self.runs = 0

    def run(self, program: str, input_text: str, max_outputs: int, timeout_s: float | None) -> list[Any]:
        self.runs += 1
        return IN_PROCESS.run(program, input_text, max_outputs, timeout_s)


@pytest.mark.parametrize("expr", ERRORS)
def test_a_lone_expression_gives_what_its_own_run_gives(expr: str) -> None:
    """A lone expression runs unfused one input at a time; in a batch it is wrapped: same outputs, same
    error text (a non-string error value is its JSON text both ways), same output cap."""
    each = evaluate_each([expr], INPUTS)
    if not _compiles(expr):
        assert each is None  # nothing to run: each object takes the one-by-one path
        return
    assert each == [evaluate_many([expr], text) for text in INPUTS]


def test_several_expressions_with_errors_and_compile_errors() -> None:
    each = evaluate_each(ERRORS, INPUTS)
    assert each == [evaluate_many(ERRORS, text) for text in INPUTS]
    assert each is not None and "failed to compile" in str(each[0]["not_a_function(1)"].error)


@SETTINGS
@given(st.lists(PROGRAMS, min_size=1, max_size=3), st.lists(JSON, min_size=1, max_size=4))
def test_one_run_for_many_inputs_equals_one_run_each(exprs: list[str], values: list[Any]) -> None:
    exprs = [e for e in exprs if not check_expression(e)]
    texts = [serialize({"x": v, "a": v, "metadata": {"labels": {"k": v}}}) for v in values]
    each = evaluate_each(exprs, texts, max_outputs=50)
    if each is None:
        return  # nothing compiled, or the batch failed: the caller runs each input alone
    assert each == [evaluate_many(exprs, t, max_outputs=50) for t in texts]


def test_a_batch_that_times_out_hands_over_to_the_one_by_one_path() -> None:
    pool = SandboxPool(max_workers=1, quarantine_after=3)
    try:
        lane = pool.lane("slow")
        slow = "if .slow then (reduce range(0; 100000000) as $i (0; . + 1)) else .n end"
        texts = ['{"n": 1}', '{"n": 2, "slow": true}', '{"n": 3}']
        assert evaluate_each([slow], texts, runner=lane, timeout_s=0.3) is None
        # the fast inputs still evaluate alone; the lane's timeouts are consecutive only, so the batch's
        # one does not add up to a quarantine with the slow input's own
        assert evaluate_many([slow], texts[0], runner=lane, timeout_s=5)[slow].values == (1,)
        assert "time limit" in str(evaluate_many([slow], texts[1], runner=lane, timeout_s=0.3)[slow].error)
        assert evaluate_many([slow], texts[2], runner=lane, timeout_s=5)[slow].values == (3,)
        assert pool.quarantined() == {}
    finally:
        pool.close()


# ---------------------------------------------------------------- Evaluator.prefetch


def nimservice_pods(n: int, service: str = "llm") -> list[dict[str, Any]]:
    run = uuid.uuid4().hex[:8]  # objects' texts are cached by uid and resourceVersion, process-wide
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{service}-{i}",
                "namespace": "ns",
                "uid": f"uid-{run}-{service}-{i}",
                "resourceVersion": str(100 + i),
                "labels": {"app.kubernetes.io/name": service, "pod-index": str(i)},
            },
            "spec": {"schedulerName": "kai-scheduler"},
        }
        for i in range(n)
    ]


@pytest.fixture()
def nimservice() -> Any:
    return from_object(yaml.safe_load(NIMSERVICE.read_text()), f"builtin:{NIMSERVICE.name}")


GROUP_KEY = '.metadata.labels["app.kubernetes.io/name"]'


def test_prefetch_pays_one_run_per_chunk_and_the_decisions_read_it(nimservice: Any) -> None:
    pods = nimservice_pods(150)
    counting = CountingRunner()
    ev = Evaluator(nimservice, runner=counting)
    assert ev.prefetch(pods) == 150
    assert counting.runs == -(-150 // EACH_MAX_INPUTS)  # 3 runs for 150 pods
    keys = [ev.group_keys(p, [GROUP_KEY], "nimservice") for p in pods]
    assert counting.runs == 3  # every pod's expressions came from the prefetched outcomes
    plain = Evaluator(nimservice, runner=CountingRunner())
    assert keys == [plain.group_keys(p, [GROUP_KEY], "nimservice") for p in pods] == [["llm"]] * 150
    assert ev.prefetch(pods) == 0 and counting.runs == 3  # already cached: no run


def test_prefetch_keeps_each_pods_error(nimservice: Any) -> None:
    pods = nimservice_pods(4)
    del pods[2]["metadata"]["labels"]["app.kubernetes.io/name"]  # the group key is null for this one
    ev = Evaluator(nimservice, runner=CountingRunner())
    ev.prefetch(pods)
    plain = Evaluator(nimservice, runner=CountingRunner())
    for p in pods:
        outcome: list[Any] = []
        for e in (ev, plain):
            try:
                outcome.append(e.group_keys(p, [GROUP_KEY], "nimservice"))
            except Exception as exc:
                outcome.append(str(exc))
        assert outcome[0] == outcome[1]
    with pytest.raises(Exception, match="query result is empty"):
        ev.group_keys(pods[2], [GROUP_KEY], "nimservice")


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxedRunner]:
    r = SandboxedRunner(workers=1)
    yield r
    r.close()


def test_prefetch_through_the_sandbox(nimservice: Any, sandbox: SandboxedRunner) -> None:
    """The worker process answers a batch with the same outcomes as one query per pod."""
    pods = nimservice_pods(70, "a") + nimservice_pods(3, "b")
    ev = Evaluator(nimservice, runner=sandbox)
    assert ev.prefetch(pods) == 73
    got = [ev.group_keys(p, [GROUP_KEY], "nimservice") for p in pods]
    assert got == [["a"]] * 70 + [["b"]] * 3


def test_groups_in_one_run_give_each_group_what_its_own_run_gives() -> None:
    exprs_a, exprs_b = ERRORS[:6], [".a", "keys?", "length", "not_a_function(2)"]
    counting = CountingRunner()
    got = evaluate_groups([(exprs_a, INPUTS), ([".x"], []), (exprs_b, INPUTS[:3])], runner=counting)
    assert got is not None and counting.runs == 1
    assert got[0] == evaluate_each(exprs_a, INPUTS) == [evaluate_many(exprs_a, t) for t in INPUTS]
    assert got[1] == []
    assert got[2] == [evaluate_many(exprs_b, t) for t in INPUTS[:3]]
    assert evaluate_groups([([".a"], []), ([".b"], [])]) == [[], []]


def nimservice_root(name: str = "llm", replicas: int = 5) -> dict[str, Any]:
    return {"apiVersion": "apps.nvidia.com/v1alpha1", "kind": "NIMService",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{uuid.uuid4().hex}", "resourceVersion": "7"},
            "spec": {"replicas": replicas}}


def test_prefetch_with_the_root_object_answers_a_workloads_decisions_in_one_run(nimservice: Any) -> None:
    pods, root = nimservice_pods(5), nimservice_root(replicas=5)
    counting = CountingRunner()
    ev = Evaluator(nimservice, runner=counting)
    assert ev.prefetch(pods, root=root) == 5
    assert counting.runs == 1
    scale = ev.scale(root, "nimservice")
    keys = [ev.group_keys(p, [GROUP_KEY], "nimservice") for p in pods]
    assert counting.runs == 1, "the root's expressions came with the pods'"
    plain = Evaluator(nimservice, runner=CountingRunner())
    assert scale == plain.scale(root, "nimservice") and {s.replicas for s in scale.values()} == {5}
    assert keys == [plain.group_keys(p, [GROUP_KEY], "nimservice") for p in pods]
    # a one-pod workload is worth one run too; a cached root does not ride again
    one, counting.runs = nimservice_pods(1, "solo"), 0
    assert ev.prefetch(one, root=nimservice_root("solo")) == 1 and counting.runs == 1
    assert ev.prefetch(nimservice_pods(1, "again"), root=root) == 0 and counting.runs == 1


def test_prefetch_with_the_root_through_the_sandbox(nimservice: Any, sandbox: SandboxedRunner) -> None:
    pods, root = nimservice_pods(3, "c"), nimservice_root("c", replicas=3)
    ev = Evaluator(nimservice, runner=sandbox)
    assert ev.prefetch(pods, root=root) == 3
    assert ev.scale(root, "nimservice") == Evaluator(nimservice, runner=CountingRunner()).scale(root, "nimservice")
