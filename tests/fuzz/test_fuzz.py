"""Fuzzing with hypothesis: generated Karta definitions, workloads and pods through the Karta path
(load → validate → registry → evaluate → gang) and the whole core (``Grouper.decide`` with
``InMemoryLookups``), plus the mutated examples of ``tests/core/test_properties``.

Properties: loading raises only ``KartaLoadError``; validation never raises (a report comes
back); evaluation raises only ``KartaEvalError``; every decision is a ``Decision`` whose error
reason is a documented ``GroupingError`` reason (never ``InternalError``); the Python heap of one
example stays under ``PEAK_BYTES`` (tracemalloc). jq runs in one sandbox worker process shared by
all generated definitions (a small ``SandboxPool``), so hostile generated programs are bounded.

Short run by default (``FUZZ_EXAMPLES``, 150 examples per test); ``pytest -m fuzz_long tests/fuzz``
runs 10,000 examples per test (under 5 minutes on one core).
"""

from __future__ import annotations

import functools
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grouper.core.decision import Decision
from grouper.core.grouping import Grouper
from grouper.core.lookups import InMemoryLookups
from grouper.karta import (
    DefinitionRegistry,
    Evaluator,
    KartaEvalError,
    KartaLoadError,
    apply_gang,
    from_object,
    validate,
)
from grouper.karta.sandbox import SandboxPool
from grouper.model import errors as model_errors
from grouper.model.podgroup import OwnerRef, PodGroupMetadata
from grouper.runtime.composition import build_grouper
from tests.core.test_properties import mutated_examples, synthetic_workloads

SHORT = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
LONG = settings(SHORT, max_examples=10_000)
# The long run is a count of examples, not a time: 10,000 Karta examples took 4-5 min on a quiet 2-core
# box and more than the suite's 300 s per test on a busy one (each example runs jq in the sandbox)
LONG_TIMEOUT_S = 1200
PEAK_BYTES = 64 * 1024 * 1024

GROUP, VERSION, KIND = "fuzz.example.com", "v1", "Widget"


def _documented_reasons() -> set[str]:
    out: set[str] = set()
    stack: list[type] = [model_errors.GroupingError]
    while stack:
        cls = stack.pop()
        out.add(cls.reason)  # type: ignore[attr-defined]
        stack.extend(cls.__subclasses__())
    return out


@functools.cache
def pool() -> SandboxPool:
    return SandboxPool(max_workers=1, idle_s=600)


@functools.cache
def grouper_for_catalog() -> Grouper:
    from tests.core.test_properties import world

    g: Grouper = world()["grouper"]
    return g


# ---------------------------------------------------------------- strategies

JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8), st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(), max_size=3),
)
FIELD = st.sampled_from(["spec", "status", "metadata", "replicas", "items", "name", "workers", "labels", "x"])


SAFE_LEAVES = [".", "1", "0", "-3", "2", "null", '"x"', "true", ".spec.replicas // 1", "length",
               '.metadata.labels["role"]', "keys", "[.spec.items[]?] | length", ".spec.items[]? | .name",
               "tostring", "tonumber?", 'splits("a")', 'getpath(["spec"])', "(.x[]?)", ".spec.workers.replicas"]
HOSTILE_LEAVES = ["keys_unsorted", "$__loc__", "input_filename", "env", '"x" * 100000', "@base32", "ascii",
                  "range(5)", "..", ".a |= 1", "def f: f; f", "[limit(5; repeat(1))]"]


def _grammar(leaves: list[str]) -> st.SearchStrategy[str]:
    leaf = st.one_of(
        st.builds(lambda a, b: f".{a}.{b}", FIELD, FIELD),
        st.builds(lambda a: f".spec.{a}[]?", FIELD),
        st.sampled_from(leaves),
    )
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.builds(lambda a, b: f"{a} | {b}", inner, inner),
            st.builds(lambda a, b: f"({a}), ({b})", inner, inner),
            st.builds(lambda a, b: f"({a}) // ({b})", inner, inner),
            st.builds(lambda a: f"[{a}]", inner),
            st.builds(lambda a: f"select({a})", inner),
            st.builds(lambda a, n: "def f(x): x,x; " + "f(" * n + a + ")" * n, inner, st.integers(1, 30)),
            st.builds(lambda a: f"try ({a}) catch .", inner),
        ),
        max_leaves=6,
    )


SAFE_JQ = _grammar(SAFE_LEAVES)
JQ = _grammar(SAFE_LEAVES + HOSTILE_LEAVES)


def _mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any], one_in: int = 12) -> st.SearchStrategy[Any]:
    # a middle value picks the bad branch: hypothesis favours the bounds of an integer range
    return st.integers(0, one_in - 1).flatmap(lambda i: bad if i == one_in // 2 else good)


EXPR = _mostly(SAFE_JQ, st.one_of(JQ, JUNK), 6)  # now and then hostile jq or any JSON type


@st.composite
def components(draw: st.DrawFn, names: list[str], index: int) -> dict[str, Any]:
    name = names[index]
    c: dict[str, Any] = {"name": draw(JUNK) if draw(st.integers(0, 30)) == 15 else name}
    if index > 0:
        c["ownerRef"] = draw(st.sampled_from([*names[:index], "missing", name]))
        c["kind"] = {"group": "", "version": "v1", "kind": "Pod"}
    if draw(st.booleans()):
        c["scaleDefinition"] = {k: draw(EXPR) for k in draw(st.sets(st.sampled_from(
            ["replicasPath", "minReplicasPath", "maxReplicasPath"]), max_size=2))}
    if draw(st.booleans()):
        c["specDefinition"] = {draw(st.sampled_from(["podTemplateSpecPath", "podSpecPath"])): draw(EXPR)}
    if draw(st.booleans()):
        c["instanceIdPath"] = draw(EXPR)
    if draw(st.booleans()):
        sel: dict[str, Any] = {"componentTypeSelector": {"keyPath": draw(EXPR), "value": draw(st.sampled_from(["a", "b", ""]))}}
        if draw(st.booleans()):
            sel["componentInstanceSelector"] = {"idPath": draw(EXPR)}
        if draw(st.booleans()):
            sel["replicaSelector"] = {"keyPath": draw(EXPR)}
        c["podSelector"] = sel
    if draw(st.integers(0, 12)) == 6:
        c[draw(st.sampled_from(["scaleDefinition", "podSelector", "specDefinition", "name"]))] = draw(JUNK)
    return c


@st.composite
def kartas(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 4))
    names = ["root", *[f"c{i}" for i in range(n)]]
    root = draw(components(names, 0))
    root["kind"] = {"group": GROUP, "version": VERSION, "kind": KIND}
    root["statusDefinition"] = draw(_mostly(st.one_of(
        st.just({"statusMappings": {"running": [{"byExpression": {"expression": draw(JQ), "expectedResult": "true"}}]}}),
        st.just({"phaseDefinition": {"path": draw(JQ)}, "statusMappings": {"running": [{"byPhase": "Running"}]}}),
    ), JUNK))
    children = [draw(components(names, i)) for i in range(1, n + 1)]
    gang: Any
    if draw(st.booleans()):
        gang = {"podGroup": {"name": draw(st.sampled_from(["g", "", "G!"])),
                             "subGroups": [{"componentName": draw(st.sampled_from([*names, "nope"]))}
                                           for _ in range(draw(st.integers(0, 3)))]}}
    else:
        gang = {"podGroups": [{"name": "pg", "members": [
            {"componentName": draw(st.sampled_from(names)),
             "groupByKeyPaths": draw(st.lists(EXPR, max_size=2)), "filters": draw(st.lists(EXPR, max_size=1))}]}]}
    obj: dict[str, Any] = {
        "apiVersion": "run.ai/v1alpha1",
        "kind": "Karta",
        "metadata": {"name": draw(st.sampled_from(["fuzz-widget", "fuzz-widget-2"])), "resourceVersion": "1"},
        "spec": {
            "structureDefinition": {"rootComponent": root, "childComponents": children},
            "optimizationInstructions": {"gangScheduling": gang},
        },
    }
    if draw(st.integers(0, 20)) == 10:
        obj["spec"][draw(st.sampled_from(["structureDefinition", "optimizationInstructions"]))] = draw(JUNK)
    return obj


@st.composite
def widget_world(draw: st.DrawFn) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    uid = "5c1b2a3e-0000-4000-8000-00000000f000"
    spec = draw(st.dictionaries(FIELD, st.one_of(JUNK, st.dictionaries(FIELD, JUNK, max_size=3),
                                                 st.lists(st.dictionaries(FIELD, JUNK, max_size=2), max_size=3)),
                                max_size=4))
    workload = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                "metadata": {"name": "w", "namespace": "ns", "uid": uid, "resourceVersion": str(draw(st.integers(1, 9)))},
                "spec": spec, "status": draw(st.dictionaries(FIELD, JUNK, max_size=2))}
    pods = []
    for i in range(draw(st.integers(1, 3))):
        labels = draw(st.dictionaries(st.sampled_from(["role", "kai.scheduler/queue", "x"]),
                                      st.sampled_from(["a", "b", "worker", "not a label!", ""]), max_size=3))
        pods.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"w-{i}", "namespace": "ns", "uid": f"{uid[:-3]}{i:03d}",
                                  "resourceVersion": "1", "labels": labels,
                                  "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": "w",
                                                       "uid": uid, "controller": True}]},
                     "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "i"}]}})
    return workload, pods


# ---------------------------------------------------------------- properties


@functools.cache
def documented() -> frozenset[str]:
    return frozenset(_documented_reasons())


def _check_decision(d: Any) -> None:
    assert isinstance(d, Decision)
    assert d.outcome in {"grouped", "skipped", "error"}
    if d.outcome == "error":
        assert d.reason in documented(), f"{d.reason}: {d.message}"


def _with_memory_bound(fn: Any) -> Any:
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> None:
        tracemalloc.start()
        try:
            fn(*args, **kwargs)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < PEAK_BYTES, f"one example peaked at {peak / 2**20:.1f} MiB"

    return run


def karta_path(karta: dict[str, Any], world: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    workload, pods = world
    try:
        defn = from_object(karta, "cluster:Karta/fuzz")
    except KartaLoadError:
        return
    report = validate(defn, pool().lane("fuzz-validate"))
    assert isinstance(report.errors, list)
    registry = DefinitionRegistry(pool=pool(), timeout_s=2.0)
    loaded = registry.upsert_cluster_object(karta)
    assert loaded is not None
    grouper = build_grouper(definitions=registry)
    lookups = InMemoryLookups([workload, *pods])
    for pod in pods:
        _check_decision(grouper.decide(pod, lookups))
    if not report.ok:
        return
    ev = Evaluator(defn, runner=pool().lane("fuzz-eval"), timeout_s=2.0)
    base = PodGroupMetadata(name="pg", namespace="ns", owner=OwnerRef(f"{GROUP}/{VERSION}", KIND, "w", "u"))
    for pod in pods:
        try:
            ev.status(workload)
            for c in defn.components():
                ev.subtree_scale(workload, c)
            apply_gang(defn, ev, workload, pod, base)
        except KartaEvalError:
            pass


@given(kartas(), widget_world())
@SHORT
@_with_memory_bound
def test_fuzz_karta_path(karta: dict[str, Any], world: Any) -> None:
    karta_path(karta, world)


@pytest.mark.fuzz_long
@pytest.mark.timeout(LONG_TIMEOUT_S)
@given(kartas(), widget_world())
@LONG
@_with_memory_bound
def test_fuzz_karta_path_long(karta: dict[str, Any], world: Any) -> None:
    karta_path(karta, world)


def core_path(case: tuple[str, list[dict[str, Any]], list[dict[str, Any]], set[Any]]) -> None:
    _, store, pods, forbidden = case
    lookups = InMemoryLookups(store, forbidden=forbidden)
    for pod in pods:
        _check_decision(grouper_for_catalog().decide(pod, lookups))


@given(st.one_of(mutated_examples(), synthetic_workloads()))
@SHORT
@_with_memory_bound
def test_fuzz_core(case: Any) -> None:
    core_path(case)


@pytest.mark.fuzz_long
@pytest.mark.timeout(LONG_TIMEOUT_S)
@given(st.one_of(mutated_examples(), synthetic_workloads()))
@LONG
@_with_memory_bound
def test_fuzz_core_long(case: Any) -> None:
    core_path(case)
