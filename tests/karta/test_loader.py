"""Loading definitions: formats, CRD defaults, legacy API, located errors (karta.md §1, §7.4)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from grouper.karta import KartaLoadError, from_object, load_dir, load_file
from grouper.model.objects import GVK
from tests.karta.fixtures import pyflow_karta


def write(tmp_path: Path, name: str, docs: list[Any]) -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump_all(docs) if name.endswith((".yaml", ".yml")) else json.dumps(docs))
    return p


def test_from_object_fields() -> None:
    d = from_object(pyflow_karta({"podGroup": {"name": "training"}}), "cluster:Karta/pyflow")
    assert d.name == "pyflow"
    assert d.gvk == GVK("jobs.example.com", "v1", "PyFlow")
    assert d.api_version == "run.ai/v1alpha1"
    assert d.origin == "cluster:Karta/pyflow"
    assert [c.name for c in d.children] == ["master", "worker"]
    assert d.children[1].path == "spec.structureDefinition.childComponents[1]"
    assert d.gang is not None and d.gang.pod_group is not None and d.gang.pod_group.name == "training"
    assert d.raw["metadata"]["name"] == "pyflow"


def test_resource_version_and_deletion() -> None:
    obj = pyflow_karta()
    obj["metadata"].update(resourceVersion="42", deletionTimestamp="2026-01-01T00:00:00Z")
    d = from_object(obj, "x")
    assert (d.resource_version, d.deleting) == ("42", True)


def test_crd_defaults_applied_for_conditions() -> None:
    obj = pyflow_karta()
    obj["spec"]["structureDefinition"]["rootComponent"]["statusDefinition"] = {
        "conditionsDefinition": {"path": ".status.conditions", "typeFieldName": ""},
        "statusMappings": {},
    }
    cd = from_object(obj, "x").root.status.conditions  # type: ignore[union-attr]
    assert cd is not None
    assert (cd.type_field, cd.status_field, cd.message_field, cd.reason_field) == (
        "type",
        "status",
        "message",
        "reason",
    )


def test_legacy_resource_interface_accepted() -> None:
    obj = pyflow_karta()
    obj["apiVersion"] = "optimization.nvidia.com/v1alpha1"
    obj["kind"] = "ResourceInterface"
    obj["spec"]["optimizationInstructions"] = {
        "gangScheduling": {"podGroups": [{"name": "g", "members": [{"componentName": "worker"}]}]}
    }
    d = from_object(obj, "x")
    assert d.api_version == "optimization.nvidia.com/v1alpha1"
    assert d.gang is not None and d.gang.pod_groups[0].members[0].component_name == "worker"


def test_gang_without_instructions_is_none() -> None:
    obj = pyflow_karta({"podGroups": []})
    assert from_object(obj, "x").gang is None


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda o: o.update(kind="Deployment"), "apiVersion"),
        (lambda o: o["metadata"].pop("name"), "metadata.name"),
        (lambda o: o.pop("spec"), "spec"),
        (lambda o: o["spec"].pop("structureDefinition"), "spec.structureDefinition"),
        (
            lambda o: o["spec"]["structureDefinition"]["childComponents"][1]["scaleDefinition"].update(
                replicasPath=2
            ),
            "spec.structureDefinition.childComponents[1].scaleDefinition.replicasPath",
        ),
        (
            lambda o: o["spec"]["structureDefinition"].update(childComponents={}),
            "spec.structureDefinition.childComponents",
        ),
        (
            lambda o: o["spec"]["structureDefinition"]["childComponents"][0]["podSelector"][
                "componentTypeSelector"
            ].update(matchLabels={"a": 1}),
            "spec.structureDefinition.childComponents[0].podSelector.componentTypeSelector.matchLabels.a",
        ),
    ],
)
def test_type_errors_name_the_field(mutate: Any, field: str) -> None:
    obj = pyflow_karta()
    mutate(obj)
    with pytest.raises(KartaLoadError) as e:
        from_object(obj, "x")
    assert e.value.field == field
    assert field in str(e.value)


def test_load_file_multi_document_and_list(tmp_path: Path) -> None:
    a, b, c = pyflow_karta(), pyflow_karta(), pyflow_karta()
    b["metadata"]["name"] = "b"
    c["metadata"]["name"] = "c"
    p = write(tmp_path, "defs.yaml", [a, None, {"apiVersion": "v1", "kind": "List", "items": [b, c]}])
    defs = load_file(p)
    assert [d.name for d in defs] == ["pyflow", "b", "c"]
    assert defs[0].origin == f"file:{p}"
    assert defs[1].origin == f"file:{p}#2"


def test_load_file_json(tmp_path: Path) -> None:
    p = tmp_path / "one.json"
    p.write_text(json.dumps(pyflow_karta()))
    assert [d.name for d in load_file(p)] == ["pyflow"]


def test_load_file_error_names_file_document_and_field(tmp_path: Path) -> None:
    bad = pyflow_karta()
    bad["spec"]["structureDefinition"]["rootComponent"]["name"] = ["x"]
    p = write(tmp_path, "bad.yaml", [pyflow_karta(), bad])
    with pytest.raises(KartaLoadError) as e:
        load_file(p)
    assert (e.value.file, e.value.index, e.value.field) == (
        str(p),
        1,
        "spec.structureDefinition.rootComponent.name",
    )
    assert str(e.value).startswith(f"{p}: document 1: field spec.structureDefinition.rootComponent.name: ")


def test_load_file_bad_yaml(tmp_path: Path) -> None:
    p = tmp_path / "broken.yaml"
    p.write_text("a: [1,\n")
    with pytest.raises(KartaLoadError, match="invalid YAML"):
        load_file(p)


def test_load_dir_collects_errors_and_origins(tmp_path: Path) -> None:
    d = tmp_path / "definitions"
    d.mkdir()
    write(d, "a.yaml", [pyflow_karta()])
    (d / "b.yaml").write_text("kind: [")
    (d / "notes.txt").write_text("ignored")
    defs, errors = load_dir(d)
    assert [x.origin for x in defs] == ["builtin:definitions/a.yaml"]
    assert len(errors) == 1 and errors[0].file == str(d / "b.yaml")


def test_load_dir_missing_directory(tmp_path: Path) -> None:
    assert load_dir(tmp_path / "nope") == ([], [])


def test_structure_helpers(catalog: dict[str, Any]) -> None:
    lws = catalog["lws"]
    assert [c.name for c in lws.descendants("leaderworkerset")] == ["group", "leader", "worker"]
    assert [c.name for c in lws.ancestors("worker")] == ["group", "leaderworkerset"]
    assert [c.name for c in lws.leaves()] == ["leader", "worker"]
    assert lws.component("nope") is None
    assert lws.has_scale_definition and not lws.is_empty


def test_owner_kinds_and_pod_paths() -> None:
    """What the controller derives from a loaded definition: the owner kinds its walk may follow (root and
    components) and the pod fields its cache must keep (the selectors' jq paths)."""
    d = from_object(pyflow_karta(), "x")
    assert d.owner_kinds() == {("jobs.example.com", "PyFlow"), ("", "Pod")}
    assert d.pod_paths() == [".metadata.labels.role", ".metadata.labels.role"]
