"""Hostile Karta definitions: gojq dialect, exponential programs, input limits, sandbox lanes,
quarantine and the async registry API."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from grouper.karta import DefinitionRegistry, KartaEvalError, KartaLoadError, from_object
from grouper.karta.jqrun import JqTimeout
from grouper.karta.sandbox import JqQuarantined, SandboxPool
from grouper.karta.validate import check_expression, validate

GOJQ_TABLE = {
    # libjq has these, gojq (upstream's engine) does not
    "keys_unsorted": False,
    "$__loc__": False,
    "@base32": False,
    "@base32d": False,
    "input_filename": False,
    "input_line_number": False,
    "get_search_list": False,
    "have_decnum": False,
    "have_literal_numbers": False,
    "lgamma_r": False,
    "ascii": False,
    "toarray": False,
    "splits(\"a\"; \"g\"; 1)": False,
    # both have these
    "keys": True,
    "splits(\"a\")": True,
    "splits(\"a\"; \"g\")": True,
    "getpath([\"a\"])": True,
    "ltrimstr(\"x\")": True,
    "trimstr(\"x\")": True,
    "toboolean": True,
    "abs": True,
    "pick(.a)": True,
    "@base64d": True,
    "@sh \"x\\(.a)\"": True,
    "tojson | fromjson": True,
    "to_entries | map(.key)": True,
    "limit(3; .[])": True,
    "true, false, null": True,
    "def keys_unsorted: keys; keys_unsorted": True,  # defined by the expression itself
}


@pytest.mark.parametrize("expr,valid", GOJQ_TABLE.items(), ids=GOJQ_TABLE.keys())
def test_gojq_dialect(expr: str, valid: bool) -> None:
    assert (check_expression(expr) == []) is valid, check_expression(expr)


def _nest(fn: str, depth: int) -> str:
    e = "."
    for _ in range(depth):
        e = f"{fn}({e})"
    return e


BLOWUPS = {
    "comma doubling": "def f(x): x,x; " + _nest("f", 25),
    "plus doubling": "def f(x): x+x; [" + _nest("f", 25) + "]",
    "value param doubling": "def f($x): $x,$x; [" + _nest("f", 25) + "] | length",
    "pipe of commas": "[(.,.)" + "|(.,.)" * 25 + "] | length",
    "constant string repetition": '("x" * 1e9) | length',
    "nested repetition": '(("x" * 100000) * 100000) | length',
}


@pytest.mark.parametrize("expr", BLOWUPS.values(), ids=BLOWUPS.keys())
def test_exponential_programs_are_rejected(expr: str) -> None:
    reasons = check_expression(expr)
    assert reasons and all("failed validation" in r for r in reasons), reasons


def test_shallow_nesting_is_allowed() -> None:
    assert check_expression("def f(x): x,x; " + _nest("f", 3)) == []
    assert check_expression(".a * 1073741824") == []


def _karta(name: str, n_children: int = 0, expr: str = '"Running"', **extra: Any) -> dict[str, Any]:
    children = [
        {"name": f"c{i}", "ownerRef": "root" if i == 0 else f"c{i - 1}", "kind": {"group": "x", "version": "v1", "kind": "C"}}
        for i in range(n_children)
    ]
    return {
        "apiVersion": "run.ai/v1alpha1",
        "kind": "Karta",
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": {
            "structureDefinition": {
                "rootComponent": {
                    "name": "root",
                    "kind": {"group": "x.io", "version": "v1", "kind": "Hostile"},
                    "statusDefinition": {
                        "statusMappings": {"running": [{"byExpression": {"expression": expr, "expectedResult": "Running"}}]}
                    },
                    **extra,
                },
                "childComponents": children,
            },
            "optimizationInstructions": {"gangScheduling": {"podGroup": {"name": "g"}}},
        },
    }


def test_input_limits_have_clear_errors() -> None:
    with pytest.raises(KartaLoadError, match=r"childComponents: 5001 components, more than the limit of 256"):
        from_object(_karta("big", 5000), "cluster:Karta/big")
    with pytest.raises(KartaLoadError, match=r"ownerRef: component 'c\d+' is more than 32 ownerRef levels"):
        from_object(_karta("deep", 200), "cluster:Karta/deep")
    nested: Any = 1
    for _ in range(500):
        nested = {"a": nested}
    with pytest.raises(KartaLoadError, match="nests deeper than 64 levels"):
        from_object(_karta("nested", extra=nested), "cluster:Karta/nested")
    with pytest.raises(KartaLoadError, match="more than the limit of 262144"):
        from_object(_karta("huge", padding="x" * 600_000), "cluster:Karta/huge")
    report = validate(from_object(_karta("long", expr="." + "a" * 20_000), "cluster:Karta/long"))
    assert any("longer than 10000 characters" in i.message and i.expression for i in report.errors)


def test_constant_folding_bomb_is_compiled_in_the_sandbox_not_here() -> None:
    """libjq folds ``"x" * 1e9`` while compiling: validation must not do that in this process."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report = validate(from_object(_karta("bomb", expr='("x" * 1000000000) | length'), "cluster:Karta/bomb"))
    assert not report.ok
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert after - before < 200_000  # KB: the gigabyte string was never built here


@pytest.fixture
def pool() -> Any:
    p = SandboxPool(max_workers=2, idle_s=0.3, quarantine_after=2)
    yield p
    p.close()


def test_a_hostile_lane_does_not_block_another(pool: SandboxPool) -> None:
    evil, good = pool.lane("evil"), pool.lane("good")
    started = threading.Event()

    def hog() -> None:
        started.set()
        with pytest.raises(JqTimeout):
            evil.run("def f: f; f", "null", 10, 5.0)

    t = threading.Thread(target=hog)
    t.start()
    started.wait()
    time.sleep(0.2)
    assert good.run(".a", '{"a": 1}', 10, 5.0) == [1]
    assert t.is_alive()  # answered while the hostile lane was still busy, not after it
    t.join()


def test_pool_is_bounded_and_idle_workers_are_reaped(pool: SandboxPool) -> None:
    for i in range(5):
        assert pool.lane(f"d{i}").run(str(i), "null", 10, 5.0) == [i]
        assert len(pool.pids()) <= 2
    time.sleep(0.4)
    pool.reap_idle()
    assert pool.pids() == []


def test_repeated_timeouts_quarantine_the_definition_until_it_changes(pool: SandboxPool) -> None:
    reg = DefinitionRegistry(pool=pool, timeout_s=0.3)
    loaded = reg.upsert_cluster_object(_karta("slow", expr='"Running"'))
    assert loaded is not None and loaded.report.ok
    ev = reg.evaluator(loaded.definition)
    lane = pool.lane(_lane_of(reg, loaded.definition))
    for _ in range(2):
        with pytest.raises(JqTimeout):
            lane.run("def f: f; f", "null", 10, 0.2)
    assert reg.quarantine(loaded.definition) is not None
    assert "quarantined after 2 consecutive jq timeouts" in (reg.quarantined()["slow"])
    assert reg.all()[0].quarantine is not None
    with pytest.raises(KartaEvalError, match="quarantined"):
        ev.status({"metadata": {"uid": "u", "resourceVersion": "9"}})
    with pytest.raises(JqQuarantined):
        lane.run("1", "null", 10, 1.0)
    changed = reg.upsert_cluster_object({**_karta("slow"), "metadata": {"name": "slow", "resourceVersion": "2"}})
    assert changed is not None and reg.quarantine(changed.definition) is None


def _lane_of(reg: DefinitionRegistry, defn: Any) -> str:
    from grouper.karta.validate import lane_key

    return lane_key(defn)


def test_timeout_names_the_component_and_expression_that_ran_out_of_time(pool: SandboxPool) -> None:
    raw = _karta("blame", expr='"Running"', scaleDefinition={"replicasPath": "1"})
    defn = from_object(raw, "cluster:Karta/blame")
    from grouper.karta import Evaluator

    ev = Evaluator(defn, runner=pool.lane("blame"), timeout_s=0.3)
    # an expression outside validation's view (evaluate) that loops
    with pytest.raises(KartaEvalError, match=r"time limit of 0\.3s \(expression 'def f: f; f'\)"):
        ev.evaluate({"metadata": {"uid": "u", "resourceVersion": "1"}}, "def f: f; f")


def test_async_upsert_does_not_block_the_event_loop() -> None:
    reg = DefinitionRegistry()
    big = _karta("many", 0)
    big["spec"]["structureDefinition"]["childComponents"] = [
        {"name": f"c{i}", "ownerRef": "root", "kind": {"group": "x", "version": "v1", "kind": "C"},
         "instanceIdPath": f".spec.c{i}[].name"}
        for i in range(255)
    ]

    async def main() -> tuple[Any, int]:
        ticks = 0
        done = False

        async def ticker() -> None:
            nonlocal ticks
            while not done:
                ticks += 1
                await asyncio.sleep(0.001)

        t = asyncio.create_task(ticker())
        loaded = await reg.upsert_cluster_object_async(big)
        done = True
        await t
        return loaded, ticks

    loaded, ticks = asyncio.run(main())
    assert loaded is not None and loaded.definition.name == "many"
    assert ticks > 1  # the loop kept running while the Karta was validated


SLOW_WORKER = "[.spec.w[] as $x | .spec.w[] as $y | .spec.w[] | select(false)] | length"  # valid, data-dependent CPU


def _coordinator_worker() -> dict[str, Any]:
    def child(name: str, replicas: str) -> dict[str, Any]:
        return {"name": name, "kind": {"group": "", "version": "v1", "kind": "Pod"}, "ownerRef": "root",
                "scaleDefinition": {"replicasPath": replicas},
                "podSelector": {"componentTypeSelector": {"keyPath": ".metadata.labels.role", "value": name}}}

    k = _karta("blamed")
    # the slow worker comes first in the fused batch, so its timeouts are consecutive and quarantine the lane
    k["spec"]["structureDefinition"]["childComponents"] = [child("worker", SLOW_WORKER), child("coordinator", "1")]
    return k


def test_a_quarantine_names_the_component_and_expression_that_timed_out(pool: SandboxPool) -> None:
    """Hostile testing: once quarantined, every evaluation failed blaming whichever component was asked
    first (``component coordinator ... (expression '1')``), not the worker expression that timed out."""
    reg = DefinitionRegistry(pool=pool, timeout_s=0.3)
    loaded = reg.upsert_cluster_object(_coordinator_worker())
    assert loaded is not None and loaded.report.ok, loaded and loaded.report.errors
    ev = reg.evaluator(loaded.definition)
    messages: list[KartaEvalError] = []
    for version in range(3):  # each new object version pays its own timeouts until the lane is quarantined
        obj = {"metadata": {"uid": "u", "resourceVersion": str(version)}, "spec": {"w": list(range(300))}}
        with pytest.raises(KartaEvalError) as caught:
            ev.scale(obj, "coordinator")
        messages.append(caught.value)
    assert reg.quarantine(loaded.definition) is not None
    assert f"the last to time out: expression '{SLOW_WORKER}'" in reg.quarantined()["blamed"]
    for e in messages:
        assert (e.component, e.expression) == ("worker", SLOW_WORKER), str(e)
        assert "expression '1' of component coordinator was not evaluated" in str(e)
    assert "quarantined" in str(messages[-1])
