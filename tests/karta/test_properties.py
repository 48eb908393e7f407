"""Property-based tests: whatever the definition, object or pod, the engine returns a result or a
documented error (KartaLoadError, validation issues, KartaError) — never another exception; and
the jq checker copes with every program libjq accepts."""

from __future__ import annotations

import contextlib
import copy
import functools
import math
from collections.abc import Callable
from typing import Any

import jq
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grouper.karta import Evaluator, KartaLoadError, apply_gang, from_object, validate
from grouper.karta.jqrun import JqTimeout, evaluate_many, project, serialize
from grouper.karta.jqsyntax import JqSyntaxError, check, root_fields
from grouper.karta.sandbox import JqWorkerDied, shared_runner
from grouper.karta.validate import check_expression
from grouper.karta.values import decode_int32, go_float
from grouper.model.errors import KartaError
from tests.karta.fixtures import DATA, base_metadata

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------- jq programs

ATOMS = [
    ".",
    ".a",
    ".b",
    ".a.b",
    ".[0]",
    ".[]?",
    ".a[]?",
    "1",
    "2.5",
    '"s"',
    "null",
    "true",
    "$x",
    "[]",
    "{}",
    "length",
    "keys?",
    "tostring",
    "type",
    "empty",
    "not",
    "..",
    "$__loc__",
    "env",
    "input",
    "range(3)",
    '.["a"]',
    '."a-b"',
    ".a.[0]",
    "@base64",
    '@sh "x\\(.)"',
    "$ENV.PATH",
    ".e1",
    ".5",
    "1e3",
    "{$x}",
    '{"a": 1}',
    "{a}",
    "{if: 1}",
    "break $out",
    "..?",
    ".a[-1:]",
    ".[:2]",
    "ascii",
    "-.a",
]


BINARY = ["|", ",", "//", "+", "-", "*", "==", "!=", "<", ">=", "and", "or", "=", "|=", "+="]
UNARY = [
    "({})",
    "[{}]",
    "{{a: {}}}",
    '{{("k"): ({})}}',
    "select({})",
    "try {} catch .",
    "{}?",
    "-{}",
    '"x\\({})y"',
    "first({})",
    "limit(2; {})",
    "del({})",
    "def f: {}; f",
    "def g(h): h | {}; g(.)",
    ".a[1:{}]",
    "try {}",
    "label $out | {}",
    "def f($v): $v | {}; f(1)",
    "{} # comment",
    "[.[] | {}]",
    "{{$x: {}}}",
    '{{"k\\(1)": {}}}',
    "{{@base64: {}}}",
    ". as [$x, {{a: $y}}] | {}",
    ". as [$x] ?// $x | {}",
    "if {} then 1 end",
    "{}.a",
    "{}[]?",
]
TERNARY = [
    "{} as $x | {}",
    "reduce .[]? as $x (0; {})",
    "if {} then {} else {} end",
    "{}[{}]",
    "{{a: {} | {}}}",
    "foreach .[]? as $x (0; {}; {})",
    "if {} then {} elif {} then 1 else 2 end",
    "{}[{}:]",
    "{} as {{a: $x}} | {}",
]


@st.composite
def jq_programs(draw: st.DrawFn, depth: int = 3) -> str:
    """Random jq from a small grammar (composite rather than st.recursive: cheap to repr)."""
    kind = draw(st.integers(0, 3)) if depth > 0 else 0
    if kind == 0:
        return draw(st.sampled_from(ATOMS))
    if kind == 1:
        return (
            f"{draw(jq_programs(depth - 1))} {draw(st.sampled_from(BINARY))} {draw(jq_programs(depth - 1))}"
        )
    if kind == 2:
        return draw(st.sampled_from(UNARY)).format(draw(jq_programs(depth - 1)))
    form = draw(st.sampled_from(TERNARY))
    return form.format(*[draw(jq_programs(depth - 1)) for _ in range(form.count("{}"))])


PROGRAMS = jq_programs()


def _compiles(expr: str) -> bool:
    try:
        jq.compile(expr)
    except ValueError:
        return False
    return True


@SETTINGS
@given(PROGRAMS)
def test_checker_understands_every_program_libjq_accepts(expr: str) -> None:
    if not _compiles(expr):
        return
    reasons = check(expr)  # must not raise JqSyntaxError
    assert isinstance(reasons, list)
    if "del(" in expr:
        assert "del function is not allowed" in reasons


@SETTINGS
@given(st.text(alphabet=st.sampled_from(list('.|,[](){}"\\$@#:;=<>!+-*/%?ab1 \n')), max_size=30))
def test_checker_never_crashes_on_noise(expr: str) -> None:
    with contextlib.suppress(JqSyntaxError):
        check(expr)


# ---------------------------------------------------------------- values


@SETTINGS
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_go_float_round_trips(f: float) -> None:
    assert float(go_float(f)) == f or (f == 0 and math.copysign(1, f) < 0)


@SETTINGS
@given(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=5),
        st.lists(st.integers(), max_size=2),
    )
)
def test_decode_int32_is_int_none_or_value_error(v: Any) -> None:
    try:
        out = decode_int32(v, "replicas", 0)
    except ValueError:
        return
    assert out is None or isinstance(out, int)


# ---------------------------------------------------------------- definitions, objects, pods

EXPRS = st.one_of(
    st.sampled_from(
        [
            ".spec.items[].name",
            ".spec.items[] | .replicas",
            ".spec.items[]?.replicas // 1",
            ".spec.replicas",
            ".spec.replicas // 1",
            '"1"',
            "1",
            ".metadata.labels.role",
            ".metadata.labels.g",
            '.metadata.labels.role == "a"',
            ".status.conditions",
            ".status.phase",
            ".spec.items | to_entries[] | .key",
            ".spec",
            ".spec.items[].template",
            "null",
            "empty",
            ".spec.items[]",
            "[.spec.items[]?]",
            "..",
            ".a |",
        ]
    ),
    PROGRAMS,
)
NAMES = st.sampled_from(["root", "a", "b", "c", "d"])
LABELS = st.dictionaries(
    st.sampled_from(["role", "g", "k", "app"]),
    st.sampled_from(["a", "b", "x", "Bad_Key", "0", ""]),
    max_size=3,
)
JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 5),
    st.floats(-2, 1e6, allow_nan=False),
    st.sampled_from(["a", "b", "", "3"]),
)
JSON = st.recursive(
    JSON_LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["name", "replicas", "template", "x"]), inner, max_size=3),
    ),
    max_leaves=10,
)


@st.composite
def components(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(0, 3))
    names = ["a", "b", "c"][:n]
    out = []
    for name in names:
        c: dict[str, Any] = {"name": name, "ownerRef": draw(st.sampled_from(["root", *names, "ghost"]))}
        if draw(st.booleans()):
            c["specDefinition"] = draw(
                st.sampled_from(
                    [
                        {"podTemplateSpecPath": draw(EXPRS)},
                        {"podSpecPath": draw(EXPRS)},
                        {"fragmentedPodSpecDefinition": {"labelsPath": draw(EXPRS)}},
                    ]
                )
            )
        if draw(st.booleans()):
            c["scaleDefinition"] = {
                "replicasPath": draw(EXPRS),
                **({"minReplicasPath": draw(EXPRS)} if draw(st.booleans()) else {}),
            }
        if draw(st.booleans()):
            c["instanceIdPath"] = draw(EXPRS)
        sel: dict[str, Any] = {}
        if draw(st.booleans()):
            sel["componentTypeSelector"] = draw(
                st.sampled_from(
                    [
                        {"keyPath": draw(EXPRS)},
                        {"keyPath": draw(EXPRS), "value": "a"},
                        {"matchLabels": {"app": "a"}},
                        {"value": "x"},
                    ]
                )
            )
        if draw(st.booleans()):
            sel["componentInstanceSelector"] = {"idPath": draw(EXPRS)}
        if draw(st.booleans()):
            sel["replicaSelector"] = {"keyPath": draw(EXPRS)}
        if sel:
            c["podSelector"] = sel
        out.append(c)
    return out


@st.composite
def definitions(draw: st.DrawFn) -> dict[str, Any]:
    root: dict[str, Any] = {"name": "root", "kind": {"group": "x.io", "version": "v1", "kind": "W"}}
    if draw(st.booleans()):
        root["statusDefinition"] = {
            "phaseDefinition": {"path": draw(EXPRS)},
            "conditionsDefinition": {"path": draw(EXPRS)},
            "statusMappings": {
                draw(st.sampled_from(["running", "failed", "suspended"])): [
                    {"byPhase": "Running"},
                    {"byConditions": [{"type": "Ready", "status": "True"}]},
                    {"byExpression": {"expression": draw(EXPRS), "expectedResult": "true"}},
                    {},
                ]
            },
        }
    if draw(st.booleans()):
        root["scaleDefinition"] = {"replicasPath": draw(EXPRS)}
    children = draw(components())
    spec: dict[str, Any] = {"structureDefinition": {"rootComponent": root, "childComponents": children}}
    gang = draw(st.sampled_from(["none", "v2", "alpha"]))
    comp_names = st.sampled_from(["root", "a", "b", "c", "ghost", ""])
    if gang == "v2":
        spec["optimizationInstructions"] = {
            "gangScheduling": {
                "podGroup": {
                    "name": "g",
                    "subGroups": [
                        {"componentName": draw(comp_names)} for _ in range(draw(st.integers(0, 2)))
                    ],
                    **(
                        {"topology": {"topologyName": "t", "requiredTopologyLevel": "z"}}
                        if draw(st.booleans())
                        else {}
                    ),
                }
            }
        }
    elif gang == "alpha":
        spec["optimizationInstructions"] = {
            "gangScheduling": {
                "podGroups": [
                    {
                        "name": "g",
                        "members": [
                            {
                                "componentName": draw(comp_names),
                                "groupByKeyPaths": draw(st.lists(EXPRS, max_size=2)),
                                "filters": draw(st.lists(EXPRS, max_size=1)),
                            }
                            for _ in range(draw(st.integers(1, 2)))
                        ],
                    }
                ]
            }
        }
    return {"apiVersion": "run.ai/v1alpha1", "kind": "Karta", "metadata": {"name": "gen"}, "spec": spec}


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, Any]:
    items = draw(
        st.lists(
            st.fixed_dictionaries(
                {
                    "name": st.sampled_from(["a", "b", "c", 1, None]),
                    "replicas": st.one_of(st.integers(0, 4), st.just("2"), st.none()),
                }
            ),
            max_size=3,
        )
    )
    return {
        "apiVersion": "x.io/v1",
        "kind": "W",
        "metadata": {"name": "w", "namespace": "ns", "uid": "u"},
        "spec": {"items": items, "replicas": draw(JSON_LEAF), "x": draw(JSON)},
        "status": {
            "phase": draw(JSON_LEAF),
            "conditions": draw(st.one_of(st.none(), st.just([{"type": "Ready", "status": "True"}]), JSON)),
        },
    }


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(definitions(), workloads(), LABELS)
def test_engine_returns_result_or_documented_error(
    raw: dict[str, Any], obj: dict[str, Any], labels: dict[str, str]
) -> None:
    try:
        d = from_object(raw, "test:generated")
    except KartaLoadError:
        return
    report = validate(d)
    assert isinstance(report.ok, bool)
    for issue in report.errors + report.warnings:
        assert issue.definition == "gen" and isinstance(str(issue), str)
    ev = Evaluator(d)
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "labels": labels},
    }
    if not labels:
        pod["metadata"] = "not-a-mapping"  # structurally broken pods must not crash the engine either
    calls: list[Callable[[], object]] = [
        lambda: ev.status(obj),
        lambda: ev.component_of_pod(obj, pod),
        lambda: apply_gang(d, ev, obj, pod, base_metadata(obj)),
    ]
    for c in d.components():
        calls += [
            functools.partial(ev.instance_ids, obj, c),
            functools.partial(ev.scale, obj, c),
            functools.partial(ev.pod_templates, obj, c),
            functools.partial(ev.subtree_scale, obj, c),
            functools.partial(ev.replica_key, pod, c),
        ]
    for call in calls:
        with contextlib.suppress(KartaError):
            call()


@SETTINGS
@given(st.dictionaries(st.sampled_from(["apiVersion", "kind", "metadata", "spec"]), JSON, max_size=4))
def test_from_object_on_arbitrary_documents(doc: dict[str, Any]) -> None:
    doc.setdefault("apiVersion", "run.ai/v1alpha1")
    doc.setdefault("kind", "Karta")
    try:
        d = from_object(doc, "x")
    except KartaLoadError:
        return
    validate(d)


# ---------------------------------------------------------------- bounds


@SETTINGS
@given(PROGRAMS, JSON)
def test_validated_programs_stay_within_bounds(expr: str, value: Any) -> None:
    """Whatever passes validation runs in-process to a result or a jq error, capped in outputs."""
    if check_expression(expr):
        return
    out = evaluate_many([expr, ".x"], serialize({"x": value, "a": value}), max_outputs=50)
    assert set(out) == {expr, ".x"}
    assert all(o.error is not None or len(o.values) < 50 for o in out.values())


HOSTILE_CORES = [
    "def f: f; f",
    "[limit(100000000; repeat(1))]",
    "[while(true; .)]",
    "last(range(1e15))",
    "def f(n): f(n + 1); f(0)",
]


@settings(max_examples=6, deadline=None)
@given(
    st.sampled_from(HOSTILE_CORES),
    st.sampled_from(["{}", "[{}]", "{{a: ({})}}", "try ({}) catch .", ".a as $x | {}"]),
)
def test_hostile_programs_are_rejected_and_stopped(core: str, wrapper: str) -> None:
    expr = wrapper.format(core)
    assert check_expression(expr), expr  # validation rejects it ...
    runner = shared_runner()
    assert runner.run(".", "null", 10, 5) == [None]
    before = set(runner.pids())
    # ... and if evaluated anyway, the sandbox stops it: its deadline (or its memory cap) kills the worker
    with pytest.raises((JqTimeout, JqWorkerDied)):
        runner.run(expr, "{}", 1000, 0.3)
    assert before and before.isdisjoint(runner.pids()), "the worker that ran it was killed"


@SETTINGS
@given(PROGRAMS, JSON, JSON)
def test_projection_is_sound(expr: str, a: Any, b: Any) -> None:
    """When root_fields says an expression reads only some top-level fields, running it on the
    projection of the object gives exactly the same outcome as on the whole object."""
    if not _compiles(expr) or check_expression(expr):
        return
    fields = root_fields(expr)
    if fields is None:
        return
    full = {"a": a, "b": b, "c": {"a": b}, "metadata": {"name": "x"}}
    whole = evaluate_many([expr], serialize(full), max_outputs=50)[expr]
    part = evaluate_many([expr], serialize(project(full, fields)), max_outputs=50)[expr]
    assert whole == part, (expr, fields)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


CATALOG_DOCS = [yaml.safe_load(p.read_text()) for p in sorted(DATA.glob("*.yaml"))]


@SETTINGS
@given(st.sampled_from(CATALOG_DOCS), st.data(), JSON)
def test_mutated_catalog_documents(doc: dict[str, Any], data: st.DataObject, junk: Any) -> None:
    """A catalog definition with one field replaced by junk: loads or fails with KartaLoadError;
    validation and evaluation end in a report or a KartaError."""
    doc = copy.deepcopy(doc)
    path = data.draw(st.sampled_from(_paths(doc)[1:]))
    target = doc
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = junk
    try:
        d = from_object(doc, "test:mutated")
    except KartaLoadError:
        return
    validate(d)
    ev = Evaluator(d)
    obj = {
        "apiVersion": "x/v1",
        "kind": "K",
        "metadata": {"name": "w", "uid": "u"},
        "spec": {"replicatedJobs": [junk]},
    }
    pod = {"metadata": {"name": "p", "labels": {"a": "b"}}}
    with contextlib.suppress(KartaError):
        apply_gang(d, ev, obj, pod, base_metadata(obj))
    with contextlib.suppress(KartaError):
        ev.status(obj)
