"""Evaluation rules of karta.md §3.1-§3.6, each with the upstream result or our documented deviation."""

from __future__ import annotations

from typing import Any

import pytest

from grouper.karta import Evaluator, KartaDefinition, KartaEvalError
from grouper.karta.jqrun import IN_PROCESS, PROGRAMS
from tests.karta.fixtures import defn, karta

Obj = dict[str, Any]
ROOT_KIND = {"group": "x.io", "version": "v1", "kind": "Job"}


def mk(children: list[Obj], status: Obj | None = None, root_extra: Obj | None = None) -> KartaDefinition:
    root = {
        "name": "job",
        "kind": ROOT_KIND,
        "statusDefinition": status or {"statusMappings": {}},
        **(root_extra or {}),
    }
    return defn(karta("t", root, [{"ownerRef": "job", **c} for c in children]))


def obj(spec: Obj | None = None, status: Obj | None = None, **meta: Any) -> Obj:
    o: Obj = {
        "apiVersion": "x.io/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u", **meta},
        "spec": spec or {},
    }
    if status is not None:
        o["status"] = status
    return o


def pod(labels: dict[str, Any] | None = None, **extra: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "labels": labels or {}},
        **extra,
    }


def multi(instance_path: str, replicas_path: str | None = None, **extra: Any) -> Obj:
    c: Obj = {
        "name": "w",
        "instanceIdPath": instance_path,
        "podSelector": {"componentInstanceSelector": {"idPath": ".metadata.labels.g"}},
        "specDefinition": {"podSpecPath": ".spec.groups[].spec"},
        **extra,
    }
    if replicas_path:
        c["scaleDefinition"] = {"replicasPath": replicas_path}
    return c


# ---------------------------------------------------------------- instance ids (§3.2)


def test_no_instance_id_path_is_one_empty_instance() -> None:
    ev = Evaluator(mk([{"name": "w", "specDefinition": {"podSpecPath": ".spec.w"}}]))
    assert ev.instance_ids(obj({"w": {}}), "w") == [""]


def test_numeric_and_boolean_ids_rendered_go_style() -> None:
    """Deviation: upstream fails to decode non-string ids; we render them with %v."""
    ev = Evaluator(mk([multi(".spec.ids[]")]))
    assert ev.instance_ids(obj({"ids": [1, 1.5, 1000000, True]}), "w") == ["1", "1.5", "1e+06", "true"]


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ([None, "a"], "instance id path contained empty string values [ a]"),
        (["", "a"], "instance id path contained empty string values [ a]"),
        (["a", "b", "a"], "instance id path contained duplicate values [a]"),
        ([{"x": 1}], 'instance id path returned a non-scalar value {"x":1}'),
    ],
)
def test_bad_ids(ids: list[Any], message: str) -> None:
    ev = Evaluator(mk([multi(".spec.ids[]")]))
    with pytest.raises(KartaEvalError) as e:
        ev.instance_ids(obj({"ids": ids}), "w")
    assert e.value.detail == message
    assert (e.value.definition, e.value.component, e.value.expression) == ("t", "w", ".spec.ids[]")


def test_object_iteration_order_is_gojq_sorted() -> None:
    ev = Evaluator(mk([multi(".spec.services | to_entries[] | .key", ".spec.services[] | .replicas")]))
    o = obj({"services": {"zeta": {"replicas": 1}, "alpha": {"replicas": 2}, "mid": {"replicas": 3}}})
    assert ev.instance_ids(o, "w") == ["alpha", "mid", "zeta"]
    assert {k: v.replicas for k, v in ev.scale(o, "w").items()} == {"alpha": 2, "mid": 3, "zeta": 1}
    assert ev.evaluate(o, ".spec.services | keys_unsorted") == [["alpha", "mid", "zeta"]]


def test_zip_by_position_mismatch() -> None:
    """§3.1: `.x[].replicas // 1` yields only the truthy outputs -> count mismatch, as upstream."""
    ev = Evaluator(mk([multi(".spec.groups[].name", ".spec.groups[].replicas // 1")]))
    o = obj({"groups": [{"name": "a", "replicas": 2}, {"name": "b"}]})
    with pytest.raises(KartaEvalError, match=r"instance ids count \(2\) does not match results count \(1\)"):
        ev.scale(o, "w")
    ok = Evaluator(mk([multi(".spec.groups[].name", ".spec.groups[] | (.replicas // 1)")]))
    assert {k: v.replicas for k, v in ok.scale(o, "w").items()} == {"a": 2, "b": 1}


def test_iterating_null_is_an_error_as_upstream() -> None:
    ev = Evaluator(mk([multi(".spec.groups[].name")]))
    with pytest.raises(KartaEvalError, match="Cannot iterate over null"):
        ev.instance_ids(obj({}), "w")
    optional = Evaluator(mk([multi(".spec.groups[]?.name")]))
    assert optional.instance_ids(obj({}), "w") == []


# ---------------------------------------------------------------- scale (§3.2)


def test_scale_values() -> None:
    c = {
        "name": "w",
        "specDefinition": {"podSpecPath": ".spec.w"},
        "scaleDefinition": {
            "replicasPath": ".spec.r",
            "minReplicasPath": ".spec.min",
            "maxReplicasPath": ".spec.max",
        },
    }
    ev = Evaluator(mk([c]))
    s = ev.scale(obj({"r": "3", "min": None, "max": 5.0}), "w")[""]
    assert (s.replicas, s.min_replicas, s.max_replicas, s.effective) == (3, None, 5, 3)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("x", 'replicas value "x" at index 0 is not a number'),
        (1.5, "replicas value 1.5 at index 0 is not an integer"),
    ],
)
def test_scale_decode_errors(value: Any, message: str) -> None:
    ev = Evaluator(mk([{"name": "w", "scaleDefinition": {"replicasPath": ".spec.r"}}]))
    with pytest.raises(KartaEvalError) as e:
        ev.scale(obj({"r": value}), "w")
    assert e.value.detail == message and e.value.expression == ".spec.r"


def test_scale_count_is_the_longest_path() -> None:
    c = multi(".spec.groups[].name", ".spec.groups[].replicas")
    c["scaleDefinition"]["minReplicasPath"] = ".spec.groups[0].min"
    ev = Evaluator(mk([c]))
    s = ev.scale(obj({"groups": [{"name": "a", "replicas": 1, "min": 1}, {"name": "b", "replicas": 2}]}), "w")
    assert (s["a"].min_replicas, s["b"].min_replicas, s["b"].replicas) == (1, None, 2)


def test_literal_scale_and_absent_definition() -> None:
    ev = Evaluator(mk([{"name": "h", "scaleDefinition": {"replicasPath": "1"}}, {"name": "x"}]))
    assert ev.scale(obj(), "h")[""].replicas == 1
    assert ev.scale(obj(), "x") == {}


def test_unknown_component() -> None:
    with pytest.raises(KartaEvalError, match="component nope not found"):
        Evaluator(mk([])).scale(obj(), "nope")


# ---------------------------------------------------------------- pod definitions (§3.2)


def test_pod_spec_and_metadata_path_decoded_like_go() -> None:
    c = {"name": "t", "specDefinition": {"podSpecPath": ".spec.t", "metadataPath": ".spec.t"}}
    ev = Evaluator(mk([c]))
    t = ev.pod_templates(
        obj({"t": {"labels": {"a": "b"}, "containers": [{"name": "c"}], "minReplicas": 1}}), "t"
    )
    assert t == {"": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c"}]}}}


def test_pod_template_of_absent_field_is_empty() -> None:
    ev = Evaluator(mk([{"name": "t", "specDefinition": {"podTemplateSpecPath": ".spec.t"}}]))
    assert ev.pod_templates(obj(), "t") == {"": {"metadata": {}, "spec": {}}}
    assert Evaluator(mk([{"name": "x"}])).pod_templates(obj(), "x") == {}


# ---------------------------------------------------------------- status (§3.3)

CONDS = {"path": ".status.conditions", "typeFieldName": "type", "statusFieldName": "status"}


def status_ev(mappings: Obj, **extra: Any) -> Evaluator:
    return Evaluator(mk([], {"conditionsDefinition": CONDS, "statusMappings": mappings, **extra}))


def test_all_matches_in_upstream_order_primary_first() -> None:
    mappings: Obj = {
        s: [{}]
        for s in (
            "degraded",
            "initializing",
            "completed",
            "failed",
            "running",
            "suspended",
            "suspending",
            "resuming",
        )
    }
    r = status_ev(mappings).status(obj())
    assert r.matched == [
        "Resuming",
        "Suspending",
        "Suspended",
        "Running",
        "Failed",
        "Completed",
        "Initializing",
        "Degraded",
    ]
    assert r.primary == "Resuming"


def test_undefined_when_nothing_matches_or_no_definition() -> None:
    assert status_ev({"running": [{"byPhase": "x"}]}).status(obj()).matched == ["Undefined"]
    d = mk([])
    object.__setattr__(d.root, "status", None)
    assert Evaluator(d).status(obj()).primary == "Undefined"


def test_pytorch_created_and_running_overlap() -> None:
    ev = status_ev(
        {
            "initializing": [{"byConditions": [{"type": "Created", "status": "True"}]}],
            "running": [{"byConditions": [{"type": "Running", "status": "True"}]}],
        }
    )
    o = obj(
        status={"conditions": [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}]}
    )
    assert ev.status(o).matched == ["Running", "Initializing"]


def test_conditions_last_duplicate_wins_and_reason_checked() -> None:
    ev = status_ev(
        {
            "failed": [{"byConditions": [{"type": "Ready", "status": "False", "reason": "Timeout"}]}],
            "running": [{"byConditions": [{"type": "Ready", "status": "True"}]}],
        }
    )
    o = obj(
        status={
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "Timeout"},
            ]
        }
    )
    assert ev.status(o).matched == ["Failed"]
    o2 = obj(status={"conditions": [{"type": "Ready", "status": "False", "reason": "Other"}]})
    assert ev.status(o2).matched == ["Undefined"]


def test_custom_condition_field_names_and_non_strings() -> None:
    ev = Evaluator(
        mk(
            [],
            {
                "conditionsDefinition": {
                    "path": ".status.c",
                    "typeFieldName": "kind",
                    "statusFieldName": "ok",
                },
                "statusMappings": {
                    "running": [{"byConditions": [{"type": "Up", "status": "yes"}]}],
                    "failed": [{"byConditions": [{"type": "Down", "status": "true"}]}],
                },
            },
        )
    )
    o = obj(status={"c": [{"kind": "Up", "ok": "yes"}, {"kind": "Down", "ok": True}]})
    assert ev.status(o).matched == ["Running"]  # a boolean status is not a string: ignored


def test_phase() -> None:
    ev = Evaluator(
        mk(
            [],
            {
                "phaseDefinition": {"path": ".status.state"},
                "statusMappings": {"running": [{"byPhase": "ready"}], "failed": [{"byPhase": "failed"}]},
            },
        )
    )
    assert ev.status(obj(status={"state": "ready"})).matched == ["Running"]
    assert ev.status(obj()).matched == ["Undefined"]
    with pytest.raises(KartaEvalError, match="phase must be a string"):
        ev.status(obj(status={"state": 3}))


def test_by_expression_tostring_and_no_output() -> None:
    ev = status_ev(
        {
            "running": [{"byExpression": {"expression": ".status.n", "expectedResult": "1"}}],
            "failed": [{"byExpression": {"expression": ".status.f", "expectedResult": "true"}}],
            "degraded": [{"byExpression": {"expression": ".status.none[]?", "expectedResult": ""}}],
        }
    )
    assert ev.status(obj(status={"n": 1.0, "f": True})).matched == [
        "Running",
        "Failed",
    ]  # 1.0|tostring is "1" (gojq)
    assert ev.status(obj(status={"n": None})).matched == ["Undefined"]  # null is "null", not "1"


def test_by_expression_null_matches_expected_null_like_upstream() -> None:
    ev = status_ev({"initializing": [{"byExpression": {"expression": ".status.started", "expectedResult": "null"}}]})
    assert ev.status(obj(status={"started": None})).matched == ["Initializing"]
    assert ev.status(obj(status={})).matched == ["Initializing"]  # a missing field is null too
    assert ev.status(obj(status={"started": "2026-12-01"})).matched == ["Undefined"]


def test_matcher_criteria_are_anded() -> None:
    ev = Evaluator(
        mk(
            [],
            {
                "phaseDefinition": {"path": ".status.p"},
                "conditionsDefinition": CONDS,
                "statusMappings": {
                    "running": [
                        {
                            "byPhase": "up",
                            "byConditions": [{"type": "R"}],
                            "byExpression": {"expression": ".ok", "expectedResult": "true"},
                        }
                    ]
                },
            },
        )
    )
    full = {"p": "up", "conditions": [{"type": "R", "status": "Whatever"}]}
    assert ev.status({**obj(status=full), "ok": True}).matched == ["Running"]
    assert ev.status({**obj(status=full), "ok": False}).matched == ["Undefined"]
    assert ev.status({**obj(status={**full, "conditions": []}), "ok": True}).matched == ["Undefined"]


def test_by_expression_error_propagates() -> None:
    ev = status_ev({"running": [{"byExpression": {"expression": ".status.x[]", "expectedResult": "1"}}]})
    with pytest.raises(
        KartaEvalError,
        match="failed to match status: failed to evaluate matcher: failed to evaluate ByExpression",
    ):
        ev.status(obj())


def test_conditions_must_be_arrays() -> None:
    with pytest.raises(KartaEvalError, match="conditions path must yield arrays of objects"):
        status_ev({"running": [{}]}).status(obj(status={"conditions": {"type": "x"}}))


def test_legacy_resource_interface_status() -> None:
    o = karta(
        "legacy",
        {
            "name": "job",
            "kind": ROOT_KIND,
            "statusDefinition": {
                "conditionsDefinition": CONDS,
                "statusMappings": {"running": [{"byConditions": [{"type": "Running"}]}]},
            },
        },
    )
    o.update(apiVersion="optimization.nvidia.com/v1alpha1", kind="ResourceInterface")
    assert Evaluator(defn(o)).status(
        obj(status={"conditions": [{"type": "Running", "status": "True"}]})
    ).matched == ["Running"]


# ---------------------------------------------------------------- pods (§3.4)


def typed(
    name: str, key: str | None = ".metadata.labels.role", value: str | None = None, labels: Obj | None = None
) -> Obj:
    sel: Obj = {}
    if key:
        sel["keyPath"] = key
    if value is not None:
        sel["value"] = value
    if labels:
        sel["matchLabels"] = labels
    return {
        "name": name,
        "specDefinition": {"podSpecPath": f".spec.{name}"},
        "podSelector": {"componentTypeSelector": sel},
    }


def test_single_leaf_shortcut_ignores_selectors() -> None:
    ev = Evaluator(mk([typed("only", value="nope")]))
    assert ev.component_of_pod(obj(), pod({"role": "something-else"})) == ("only", None)


def test_first_matching_leaf_in_definition_order_wins() -> None:
    ev = Evaluator(mk([typed("a"), typed("b")]))
    assert ev.component_of_pod(obj(), pod({"role": "x"})) == ("a", None)


def test_typed_value_comparison() -> None:
    ev = Evaluator(
        mk([typed("zero", key=".metadata.n", value="0"), typed("other", key=".metadata.labels.r", value="0")])
    )
    p = pod({"r": "0"})
    p["metadata"]["n"] = 0
    assert ev.matches_component_type(p, "zero") is False  # number 0 != "0"
    assert ev.component_of_pod(obj(), p) == ("other", None)


@pytest.mark.parametrize(("value", "present"), [("", True), (False, True), (0, True), (None, False)])
def test_existence_check(value: Any, present: bool) -> None:
    ev = Evaluator(mk([typed("a", key=".metadata.x"), typed("b")]))
    p = pod()
    p["metadata"]["x"] = value
    assert ev.matches_component_type(p, "a") is present


def test_match_labels_anded_with_key_path() -> None:
    """Deviation: upstream ignores matchLabels; we AND it with keyPath/value."""
    ev = Evaluator(
        mk(
            [
                typed("zk", key=".metadata.labels.x", labels={"app": "pulsar", "component": "zookeeper"}),
                typed("only_labels", key=None, labels={"app": "pulsar"}),
            ]
        )
    )
    assert ev.matches_component_type(pod({"app": "pulsar", "component": "zookeeper", "x": "1"}), "zk")
    assert not ev.matches_component_type(pod({"app": "pulsar", "component": "zookeeper"}), "zk")
    assert not ev.matches_component_type(pod({"app": "pulsar", "component": "broker", "x": "1"}), "zk")
    assert ev.matches_component_type(pod({"app": "pulsar"}), "only_labels")


def test_value_with_comma_keypath_is_parenthesised() -> None:
    """Deviation: `(keyPath) == value`; upstream's unparenthesised splice changes meaning here."""
    ev = Evaluator(mk([typed("a", key=".metadata.labels.x, .metadata.labels.y", value="v"), typed("b")]))
    assert ev.matches_component_type(pod({"x": "other", "y": "v"}), "a")
    assert not ev.matches_component_type(pod({"x": "other", "y": "w"}), "a")


def test_no_component_for_pod() -> None:
    ev = Evaluator(mk([typed("a", value="x"), {"name": "b", "specDefinition": {"podSpecPath": ".b"}}]))
    with pytest.raises(KartaEvalError, match="no component found for pod ns/p"):
        ev.component_of_pod(obj(), pod({"role": "y"}))


def test_instance_matching() -> None:
    ev = Evaluator(mk([multi(".spec.groups[].name")]))
    o = obj({"groups": [{"name": "gpu"}, {"name": "cpu"}]})
    assert ev.component_of_pod(o, pod({"g": "cpu"})) == ("w", "cpu")
    with pytest.raises(
        KartaEvalError, match=r'could not match instance id "tpu". existing instance ids \[gpu cpu\]'
    ):
        ev.component_of_pod(o, pod({"g": "tpu"}))
    with pytest.raises(KartaEvalError, match="query result is empty"):
        ev.component_of_pod(o, pod({}))


def test_single_value_rules() -> None:
    c = typed("a")
    c["podSelector"]["replicaSelector"] = {"keyPath": ".metadata.labels.idx[]?"}
    ev = Evaluator(mk([c]))
    assert ev.replica_key(pod({"idx": [7]}), "a") == "7"
    assert ev.replica_key(pod({"idx": [1000000]}), "a") == "1e+06"  # Go %v of a float64
    with pytest.raises(KartaEvalError, match="expected single query result, got 2"):
        ev.replica_key(pod({"idx": [1, 2]}), "a")
    with pytest.raises(KartaEvalError, match="expected single query result, got 0"):
        ev.replica_key(pod({}), "a")
    with pytest.raises(KartaEvalError, match="query result is empty"):
        ev.replica_key(pod({"idx": [""]}), "a")
    assert Evaluator(mk([typed("b")])).replica_key(pod(), "b") is None


def test_filters_must_be_exactly_true() -> None:
    ev = Evaluator(mk([typed("a")]))
    assert ev.passes_filters(pod({"role": "m"}), ['.metadata.labels.role == "m"'])
    assert not ev.passes_filters(pod({"role": "w"}), ['.metadata.labels.role == "m"'])
    assert not ev.passes_filters(pod({"role": "w"}), [".metadata.labels.role"])  # "w" is not true
    with pytest.raises(KartaEvalError, match="query result is empty"):
        ev.passes_filters(pod(), [".metadata.labels.role"])


# ---------------------------------------------------------------- subtree scale (§3.6)


def scaled(name: str, owner: str, replicas: str | None = None, min_r: str | None = None) -> Obj:
    c: Obj = {"name": name, "ownerRef": owner, "specDefinition": {"podSpecPath": ".spec.x"}}
    paths: Obj = {}
    if replicas is not None:
        paths["replicasPath"] = replicas
    if min_r is not None:
        paths["minReplicasPath"] = min_r
    if paths:
        c["scaleDefinition"] = paths
    return c


@pytest.mark.parametrize(
    ("parent_scale", "worker", "master", "expected"),
    [
        ("2", ("4", None), ("1", None), 10),  # parent x (children sum)
        (None, ("4", None), ("1", None), 5),  # parent without scale: children sum
        (None, ("5", "3"), ("1", None), 4),  # min 3 preferred over replicas 5
        (None, ("5", "0"), ("1", None), 6),  # min 0 falls back to replicas 5
        (None, (None, None), ("1", None), 1),  # both missing: 0
        ("2", (None, None), (None, None), 2),
    ],  # children sum 0: own
)
def test_mode_a_unit_evidence(
    parent_scale: str | None,
    worker: tuple[str | None, str | None],
    master: tuple[str | None, str | None],
    expected: int,
) -> None:
    parent: Obj = {"name": "parent"}
    if parent_scale:
        parent["scaleDefinition"] = {"replicasPath": parent_scale}
    d = mk([parent, scaled("worker", "parent", *worker), scaled("master", "parent", *master)])
    assert Evaluator(d).subtree_scale(obj(), "parent") == expected


def test_mode_a_missing_everything_is_zero() -> None:
    d = mk([{"name": "a", "scaleDefinition": {"replicasPath": "null"}}, {"name": "b", "ownerRef": "a"}])
    assert Evaluator(d).subtree_scale(obj(), "job") == 0


def test_mode_a_instances_summed_or_selected() -> None:
    ev = Evaluator(mk([multi(".spec.groups[].name", ".spec.groups[].replicas")]))
    o = obj({"groups": [{"name": "a", "replicas": 2}, {"name": "b", "replicas": 3}]})
    assert ev.subtree_scale(o, "w") == 5
    assert ev.subtree_scale(o, "w", "b") == 3
    with pytest.raises(KartaEvalError, match="instance id c not found"):
        ev.subtree_scale(o, "w", "c")
    with pytest.raises(KartaEvalError, match="instance id is empty"):
        ev.subtree_scale(o, "w", "")


def test_mode_b_counts_instances() -> None:
    ev = Evaluator(
        mk([multi(".spec.groups[].name"), {"name": "solo", "specDefinition": {"podSpecPath": ".s"}}])
    )
    o = obj({"groups": [{"name": "a"}, {"name": "b"}, {"name": "c"}]})
    assert ev.subtree_scale(o, "job") == 4
    assert ev.subtree_scale(o, "w") == 3
    assert ev.subtree_scale(o, "w", "b") == 1
    with pytest.raises(KartaEvalError, match="instance id z not found"):
        ev.subtree_scale(o, "w", "z")


# ---------------------------------------------------------------- bounds and caching (§3.1, §7.15)


def test_output_cap_the_thousandth_output_fails() -> None:
    ev = Evaluator(mk([multi(".spec.ids[]")]))
    assert len(ev.instance_ids(obj({"ids": [f"i{n}" for n in range(999)]}), "w")) == 999
    with pytest.raises(KartaEvalError, match="query results exceed the allowed number 1000"):
        ev.instance_ids(obj({"ids": [f"i{n}" for n in range(1000)]}), "w")
    small = Evaluator(mk([multi(".spec.ids[]")]), max_outputs=3)
    with pytest.raises(KartaEvalError, match="query results exceed the allowed number 3"):
        small.instance_ids(obj({"ids": ["a", "b", "c"]}), "w")


def test_huge_generator_is_cut_early() -> None:
    ev = Evaluator(mk([]))
    with pytest.raises(KartaEvalError, match="query results exceed the allowed number 1000"):
        ev.evaluate(obj(), "range(1e12)")


class CountingRunner:
    def __init__(self) -> None:
        self.runs = 0

    def run(
        self, program: str, input_text: str, max_outputs: int, timeout_s: float | None = None
    ) -> list[Any]:
        self.runs += 1
        return IN_PROCESS.run(program, input_text, max_outputs, timeout_s)


def test_one_fused_run_per_object_version() -> None:
    runner = CountingRunner()
    d = mk(
        [
            {
                **multi(".spec.groups[].name", ".spec.groups[].replicas"),
                "podSelector": {
                    "componentInstanceSelector": {"idPath": ".metadata.labels.g"},
                    "componentTypeSelector": {"keyPath": ".metadata.labels.t"},
                },
            },
            typed("other", key=".metadata.labels.o"),
        ],
        {"phaseDefinition": {"path": ".status.p"}, "statusMappings": {"running": [{"byPhase": "up"}]}},
    )
    ev = Evaluator(d, runner=runner)
    o = obj({"groups": [{"name": "a", "replicas": 2}]}, {"p": "up"}, resourceVersion="1")
    p = pod({"g": "a", "t": "x"})
    p["metadata"].update(uid="p1", resourceVersion="9")
    for _ in range(3):
        assert ev.status(o).primary == "Running"
        assert ev.component_of_pod(o, p) == ("w", "a")
        assert ev.subtree_scale(o, "w", "a") == 2
    assert runner.runs == 2  # one run on the workload, one on the pod
    o2 = obj({"groups": [{"name": "a", "replicas": 5}]}, {"p": "up"}, resourceVersion="2")
    assert ev.subtree_scale(o2, "w", "a") == 5
    assert runner.runs == 3


def test_compiled_programs_are_cached() -> None:
    d = mk([multi(".spec.groups[].name")])
    o = obj({"groups": [{"name": "a"}]})
    Evaluator(d).instance_ids(o, "w")
    before = PROGRAMS.hits
    Evaluator(d).instance_ids(o, "w")  # fresh evaluator, same programs
    assert PROGRAMS.hits > before


def test_uncompilable_expression_fails_only_itself() -> None:
    d = mk([multi(".spec.groups[].name", ".spec.groups[] | .replicas |")])  # bad replicasPath
    ev = Evaluator(d)
    o = obj({"groups": [{"name": "a"}]})
    assert ev.instance_ids(o, "w") == ["a"]
    with pytest.raises(KartaEvalError, match="failed to compile JQ expression"):
        ev.scale(o, "w")


def test_isolated_evaluator_gives_the_same_answers() -> None:
    d = mk([multi(".spec.groups[].name", ".spec.groups[].replicas")])
    o = obj({"groups": [{"name": "a", "replicas": 2}, {"name": "b", "replicas": 3}]})
    ev = Evaluator(d, isolate=True, timeout_s=5)
    assert ev.isolated
    assert ev.instance_ids(o, "w") == ["a", "b"]
    assert ev.subtree_scale(o, "job") == 5
    with pytest.raises(KartaEvalError, match="Cannot iterate over null"):
        ev.evaluate(o, ".nothing[]")


class RecordingRunner(CountingRunner):
    def __init__(self) -> None:
        super().__init__()
        self.inputs: list[str] = []

    def run(
        self, program: str, input_text: str, max_outputs: int, timeout_s: float | None = None
    ) -> list[Any]:
        self.inputs.append(input_text)
        return super().run(program, input_text, max_outputs, timeout_s)


def test_jq_sees_only_the_fields_a_batch_reads() -> None:
    runner = RecordingRunner()
    ev = Evaluator(mk([typed("a", value="a"), typed("b", value="b")]), runner=runner)
    p = pod({"role": "b"}, spec={"containers": [{"name": "big", "env": ["x"] * 100}]})
    assert ev.component_of_pod(obj(), p) == ("b", None)
    assert runner.inputs == ['{"metadata":{"labels":{"role":"b"},"name":"p","namespace":"ns"}}']


def test_adhoc_expressions_do_not_share_projected_cache_entries() -> None:
    ev = Evaluator(mk([typed("a"), typed("b")]))
    p1, p2 = pod({"role": "a"}, spec={"x": 1}), pod({"role": "a"}, spec={"x": 2})
    assert ev.component_of_pod(obj(), p1) == ev.component_of_pod(obj(), p2)
    assert ev.evaluate(p1, ".spec.x") == [1] and ev.evaluate(p2, ".spec.x") == [2]


def test_subtree_scale_beyond_int32_is_an_error() -> None:
    d = mk([{"name": "p", "scaleDefinition": {"replicasPath": "65536"}}, scaled("k", "p", "65536")])
    with pytest.raises(KartaEvalError, match="subtree scale 4294967296 is beyond the int32 range"):
        Evaluator(d).subtree_scale(obj(), "job")
