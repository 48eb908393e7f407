"""Every validation rule (karta.md §2.1, §2.2 and the additions for §7.11)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from grouper.karta import validate
from grouper.karta.validate import check_expression
from tests.karta.fixtures import defn, pyflow_karta

Obj = dict[str, Any]
ROOT = "spec.structureDefinition.rootComponent"
CHILD0 = "spec.structureDefinition.childComponents[0]"
CHILD1 = "spec.structureDefinition.childComponents[1]"
GANG = "spec.optimizationInstructions.gangScheduling"


def root(o: Obj) -> Obj:
    r: Obj = o["spec"]["structureDefinition"]["rootComponent"]
    return r


def child(o: Obj, i: int) -> Obj:
    c: Obj = o["spec"]["structureDefinition"]["childComponents"][i]
    return c


def errors_of(mutate: Callable[[Obj], Any], gang: Obj | None = None) -> list[tuple[str, str]]:
    o = pyflow_karta(gang)
    mutate(o)
    return [(i.field, i.message) for i in validate(defn(o)).errors]


def test_valid_definition_has_no_issues() -> None:
    report = validate(
        defn(pyflow_karta({"podGroup": {"name": "t", "subGroups": [{"componentName": "worker"}]}}))
    )
    assert report.ok and report.errors == [] and report.warnings == []


def test_nil() -> None:
    assert [i.message for i in validate(None).errors] == ["karta is nil"]


def test_duplicate_component_name_stops_validation() -> None:
    def mutate(o: Obj) -> None:
        child(o, 1)["name"] = "master"
        child(o, 1)["scaleDefinition"]["replicasPath"] = ".a = 1"  # not reported: phase 1 stops

    assert errors_of(mutate) == [(f"{CHILD1}.name", "component name master is not unique")]


@pytest.mark.parametrize(
    "kind",
    [
        None,
        {"group": "x", "version": "", "kind": "K"},
        {"group": "x", "version": "v1", "kind": ""},
        {"group": "", "version": "v1", "kind": "ReplicationController"},
    ],
)
def test_root_needs_full_kind(kind: Obj | None) -> None:
    def mutate(o: Obj) -> None:
        if kind is None:
            root(o).pop("kind")
        else:
            root(o)["kind"] = kind

    assert (f"{ROOT}.kind", "root component must have full kind (group, version, kind)") in errors_of(mutate)


def test_groupless_pod_root_allowed() -> None:
    assert errors_of(lambda o: root(o).update(kind={"group": "", "version": "v1", "kind": "Pod"})) == []


def test_root_owner_ref_and_status() -> None:
    def mutate(o: Obj) -> None:
        root(o)["ownerRef"] = "x"
        root(o).pop("statusDefinition")

    errs = errors_of(mutate)
    assert (f"{ROOT}.ownerRef", "root component cannot have owner ref") in errs
    assert (f"{ROOT}.statusDefinition", "root component must have status definition") in errs


def test_child_owner_refs() -> None:
    def mutate(o: Obj) -> None:
        child(o, 0).pop("ownerRef")
        child(o, 1)["ownerRef"] = "ghost"

    errs = errors_of(mutate)
    assert (f"{CHILD0}.ownerRef", "child component 'master' has no owner ref") in errs
    assert (
        f"{CHILD1}.ownerRef",
        "child component 'worker' has owner ref to non-existing component 'ghost'",
    ) in errs


def test_empty_component_name() -> None:
    assert (f"{CHILD0}.name", "component name is empty") in errors_of(lambda o: child(o, 0).update(name=""))


def test_multiple_pod_spec_definitions() -> None:
    errs = errors_of(lambda o: child(o, 0)["specDefinition"].update(podSpecPath=".spec.x"))
    assert (f"{CHILD0}.specDefinition", "component 'master' has multiple pod spec definitions") in errs


def test_metadata_path_without_pod_spec_path() -> None:
    errs = errors_of(lambda o: child(o, 0)["specDefinition"].update(metadataPath=".spec.m"))
    assert any(f == f"{CHILD0}.specDefinition.metadataPath" and "without podSpecPath" in m for f, m in errs)
    ok = errors_of(
        lambda o: child(o, 0).update(specDefinition={"podSpecPath": ".spec.x", "metadataPath": ".spec.x"})
    )
    assert ok == []


def test_instance_id_path_and_instance_selector_go_together() -> None:
    errs = errors_of(lambda o: child(o, 0).update(instanceIdPath=".spec.x[].name"))
    assert (
        f"{CHILD0}.instanceIdPath",
        "component 'master' has instance id path but no pod component instance selector",
    ) in errs
    errs = errors_of(lambda o: child(o, 0)["podSelector"].update(componentInstanceSelector={"idPath": ".a"}))
    assert (
        f"{CHILD0}.podSelector.componentInstanceSelector",
        "component 'master' has pod component instance selector but no instance id path",
    ) in errs


def test_ownership_cycle() -> None:
    def mutate(o: Obj) -> None:
        child(o, 0)["ownerRef"] = "worker"
        child(o, 1)["ownerRef"] = "master"

    errs = errors_of(mutate)
    assert len([m for _, m in errs if m.startswith("ownership cycle detected involving component")]) == 1


def test_cycle_check_skipped_when_structure_fails() -> None:
    def mutate(o: Obj) -> None:
        child(o, 0)["ownerRef"] = "worker"
        child(o, 1)["ownerRef"] = "master"
        child(o, 1)["name"] = ""

    assert not any("cycle" in m for _, m in errors_of(mutate))


def test_self_owner_is_a_cycle() -> None:
    errs = errors_of(lambda o: child(o, 0).update(ownerRef="master"))
    assert (f"{CHILD0}.ownerRef", "ownership cycle detected involving component master") in errs


def test_alpha_member_unknown_component() -> None:
    errs = errors_of(lambda o: None, {"podGroups": [{"name": "g", "members": [{"componentName": "nope"}]}]})
    assert (
        f"{GANG}.podGroups[0].members[0].componentName",
        "pod-group member component 'nope' is not defined (should be a root or child component)",
    ) in errs


def test_alpha_duplicates() -> None:
    gang = {
        "podGroups": [
            {"name": "g", "members": [{"componentName": "worker"}, {"componentName": "worker"}]},
            {"name": "g", "members": [{"componentName": "master"}]},
        ]
    }
    msgs = [m for _, m in errors_of(lambda o: None, gang)]
    assert "pod-group member component 'worker' is listed twice" in msgs
    assert "pod-group name g is not unique" in msgs


def test_v2_subgroup_components_checked() -> None:
    gang = {
        "podGroup": {
            "name": "t",
            "subGroups": [
                {"componentName": ""},
                {"componentName": "ghost"},
                {"componentName": "worker"},
                {"componentName": "worker"},
            ],
        }
    }
    errs = errors_of(lambda o: None, gang)
    assert (f"{GANG}.podGroup.subGroups[0].componentName", "subgroup component name cannot be empty") in errs
    assert (
        f"{GANG}.podGroup.subGroups[1].componentName",
        "sub-group component 'ghost' is not defined (should be a root or child component)",
    ) in errs
    assert (
        f"{GANG}.podGroup.subGroups[3].componentName",
        "sub-group component 'worker' is listed twice",
    ) in errs


def test_v2_name_required() -> None:
    assert (f"{GANG}.podGroup.name", "podGroup name is empty") in errors_of(
        lambda o: None, {"podGroup": {"name": ""}}
    )


@pytest.mark.parametrize(
    ("topology", "expected"),
    [
        ({"preferredTopologyLevel": "rack"}, ["topology constraint must include topology name"]),
        ({"topologyName": "t"}, ["topology constraint must include preferred or required topology level"]),
        ({"topologyName": "t", "requiredTopologyLevel": "zone"}, []),
    ],
)
def test_incomplete_topology(topology: Obj, expected: list[str]) -> None:
    gang = {
        "podGroup": {
            "name": "t",
            "topology": topology,
            "subGroups": [{"componentName": "worker", "topology": topology}],
        }
    }
    msgs = [m for _, m in errors_of(lambda o: None, gang)]
    assert msgs == expected * 2


def test_type_selector_cel_rules() -> None:
    errs = errors_of(lambda o: child(o, 0)["podSelector"].update(componentTypeSelector={"value": "x"}))
    assert (
        f"{CHILD0}.podSelector.componentTypeSelector",
        "at least one of keyPath or matchLabels must be set",
    ) in errs
    assert (f"{CHILD0}.podSelector.componentTypeSelector.value", "value requires keyPath") in errs
    assert (
        errors_of(
            lambda o: child(o, 0)["podSelector"].update(componentTypeSelector={"matchLabels": {"a": "b"}})
        )
        == []
    )


def test_required_selector_paths_and_conditions_path() -> None:
    def mutate(o: Obj) -> None:
        child(o, 0)["podSelector"]["replicaSelector"] = {}
        root(o)["statusDefinition"]["conditionsDefinition"] = {}

    errs = errors_of(mutate)
    assert (f"{CHILD0}.podSelector.replicaSelector.keyPath", "keyPath is required") in errs
    assert (f"{ROOT}.statusDefinition.conditionsDefinition.path", "path is required") in errs


def test_suspend_definition_rules() -> None:
    errs = errors_of(
        lambda o: root(o).update(
            suspendDefinition={"suspendActions": [{"path": ".spec.suspend", "value": "yes"}]}
        )
    )
    assert (f"{ROOT}.suspendDefinition.resumeActions", "must have at least 1 item") in errs
    assert any(f == f"{ROOT}.suspendDefinition.suspendActions[0].value" for f, _ in errs)


def test_warnings_sibling_selectors_and_shadowed_alpha() -> None:
    o = pyflow_karta(
        {"podGroup": {"name": "t"}, "podGroups": [{"name": "g", "members": [{"componentName": "worker"}]}]}
    )
    child(o, 1)["podSelector"]["componentTypeSelector"]["value"] = "master"
    child(o, 1)["statusDefinition"] = {"statusMappings": {}}
    report = validate(defn(o))
    assert report.ok
    msgs = [i.message for i in report.warnings]
    assert any("identical componentTypeSelectors" in m and "'master'" in m for m in msgs)
    assert "ignored: gangScheduling.podGroup takes precedence over podGroups" in msgs
    assert "status definition is only evaluated on the root component" in msgs


# ---------------------------------------------------------------- jq (phase 4)


def test_jq_parse_failure_reported_with_field_and_expression() -> None:
    o = pyflow_karta()
    child(o, 0)["scaleDefinition"]["replicasPath"] = ".spec.master.replicas |"
    [issue] = validate(defn(o)).errors
    assert issue.field == f"{CHILD0}.scaleDefinition.replicasPath"
    assert issue.expression == ".spec.master.replicas |"
    assert issue.message.startswith("failed to parse JQ expression: syntax error")
    assert str(issue).startswith(
        f"Karta pyflow: {CHILD0}.scaleDefinition.replicasPath: failed to parse JQ expression"
    )
    assert str(issue).endswith("(expression '.spec.master.replicas |')")


@pytest.mark.parametrize(
    ("where", "set_expr"),
    [
        (
            "instanceIdPath",
            lambda o, e: (
                child(o, 0).update(instanceIdPath=e),
                child(o, 0)["podSelector"].update(componentInstanceSelector={"idPath": ".a"}),
            ),
        ),
        (
            "specDefinition.podTemplateSpecPath",
            lambda o, e: child(o, 0)["specDefinition"].update(podTemplateSpecPath=e),
        ),
        (
            "specDefinition.fragmentedPodSpecDefinition.labelsPath",
            lambda o, e: child(o, 0).update(
                specDefinition={"fragmentedPodSpecDefinition": {"labelsPath": e}}
            ),
        ),
        (
            "scaleDefinition.minReplicasPath",
            lambda o, e: child(o, 0)["scaleDefinition"].update(minReplicasPath=e),
        ),
        (
            "podSelector.componentTypeSelector.keyPath",
            lambda o, e: child(o, 0)["podSelector"]["componentTypeSelector"].update(keyPath=e),
        ),
        (
            "podSelector.replicaSelector.keyPath",
            lambda o, e: child(o, 0)["podSelector"].update(replicaSelector={"keyPath": e}),
        ),
    ],
)
def test_every_child_jq_field_is_checked(where: str, set_expr: Callable[[Obj, str], Any]) -> None:
    o = pyflow_karta()
    set_expr(o, "del(.a)")
    errs = [(i.field, i.message) for i in validate(defn(o)).errors]
    assert (f"{CHILD0}.{where}", "JQ expression failed validation: del function is not allowed") in errs


def test_root_status_and_gang_jq_fields_are_checked() -> None:
    o = pyflow_karta(
        {
            "podGroups": [
                {
                    "name": "g",
                    "members": [
                        {"componentName": "worker", "groupByKeyPaths": ["env.X"], "filters": ["$ENV"]}
                    ],
                }
            ]
        }
    )
    root(o)["statusDefinition"] = {
        "phaseDefinition": {"path": ".."},
        "conditionsDefinition": {"path": "[paths]"},
        "statusMappings": {"running": [{"byExpression": {"expression": ".a = 1", "expectedResult": "true"}}]},
    }
    root(o)["suspendDefinition"] = {
        "suspendActions": [{"path": "input", "value": "true"}],
        "resumeActions": [{"path": ".s", "value": "false"}],
    }
    errs = {i.field: i.message for i in validate(defn(o)).errors}
    assert errs[f"{ROOT}.statusDefinition.phaseDefinition.path"].endswith(
        "recursive descent operator '..' is not allowed"
    )
    assert errs[f"{ROOT}.statusDefinition.conditionsDefinition.path"].endswith(
        "function 'paths' may produce excessive output and is not allowed"
    )
    assert errs[f"{ROOT}.statusDefinition.statusMappings.running[0].byExpression.expression"].endswith(
        "modifying operator '=' is not allowed"
    )
    assert "function 'input'" in errs[f"{ROOT}.suspendDefinition.suspendActions[0].path"]
    assert "function 'env'" in errs[f"{GANG}.podGroups[0].members[0].groupByKeyPaths[0]"]
    assert "variable '$ENV'" in errs[f"{GANG}.podGroups[0].members[0].filters[0]"]


def test_untagged_fields_are_not_parsed() -> None:
    """value, matchLabels, expectedResult, suspend values and topology strings are not jq."""

    def mutate(o: Obj) -> None:
        child(o, 0)["podSelector"]["componentTypeSelector"]["value"] = "del(.a) | ..("
        root(o)["statusDefinition"]["statusMappings"] = {
            "running": [{"byExpression": {"expression": ".ok", "expectedResult": ".. = 1"}}]
        }

    assert errors_of(mutate) == []


def test_check_expression_allows_the_catalog_idioms() -> None:
    for e in [
        '"1"',
        ".spec.replicas // 1",
        ".spec.x | tonumber?",
        "limit(2; .[])",
        'getpath(["a"])',
        '[splits(",")]',
        'test("a.*")',
        '.a == "b = c"',
        ".a <= 1 and .b >= 2 and .c != 3",
    ]:
        assert check_expression(e) == [], e
