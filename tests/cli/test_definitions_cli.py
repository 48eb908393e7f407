"""``grouper definitions validate|list`` offline: exit codes, human and JSON output."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grouper.cli.main import main

REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO / "definitions"

GOOD = """\
apiVersion: run.ai/v1alpha1
kind: Karta
metadata:
  name: widgets
spec:
  structureDefinition:
    rootComponent:
      name: widget
      kind: {group: example.com, version: v1, kind: Widget}
      statusDefinition:
        statusMappings:
          running:
            - byPhase: Running
        phaseDefinition: {path: .status.phase}
      specDefinition: {podTemplateSpecPath: .spec.template}
      scaleDefinition: {replicasPath: .spec.replicas // 1}
  optimizationInstructions:
    gangScheduling:
      podGroup: {name: widget}
"""

BAD = """\
apiVersion: run.ai/v1alpha1
kind: Karta
metadata:
  name: broken-gadgets
spec:
  structureDefinition:
    rootComponent:
      name: gadget
      kind: {group: example.com, version: v1, kind: Gadget}
      statusDefinition: {statusMappings: {}}
    childComponents:
      - name: part
        ownerRef: gadget
        scaleDefinition:
          replicasPath: (.spec.parts |= 3)
"""


@pytest.fixture
def defs_dir(tmp_path: Path) -> Path:
    d = tmp_path / "defs"
    d.mkdir()
    (d / "good.yaml").write_text(GOOD)
    (d / "bad.yaml").write_text(BAD)
    (d / "README.txt").write_text("not a definition")
    return d


def test_validate_builtin_catalog_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["definitions", "validate"]) == 0
    out = capsys.readouterr().out
    assert "jobset-x-k8s-io-jobset-v1alpha2: valid" in out
    assert out.rstrip().endswith("24 definitions checked, 0 invalid: all valid")


def test_validate_reports_file_definition_field_and_expression(
    defs_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["definitions", "validate", str(defs_dir)]) == 1
    out = capsys.readouterr().out
    assert f"{defs_dir / 'good.yaml'}: widgets: valid" in out
    assert f"{defs_dir / 'bad.yaml'}: broken-gadgets: INVALID" in out
    assert "spec.structureDefinition.childComponents[0].scaleDefinition.replicasPath" in out
    assert "'(.spec.parts |= 3)'" in out and "|=" in out
    assert out.rstrip().endswith("2 definitions checked, 1 invalid")
    assert "README" not in out


def test_validate_single_valid_file_and_json(defs_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["definitions", "validate", str(defs_dir / "good.yaml")]) == 0
    capsys.readouterr()
    assert main(["definitions", "validate", str(defs_dir), "-o", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["valid"] is False and data["loadErrors"] == []
    by_name = {d["name"]: d for d in data["definitions"]}
    assert by_name["widgets"]["valid"] is True
    assert by_name["widgets"]["gvk"] == {"group": "example.com", "version": "v1", "kind": "Widget"}
    (err,) = by_name["broken-gadgets"]["errors"]
    assert err["field"].endswith("scaleDefinition.replicasPath") and err["expression"] == "(.spec.parts |= 3)"
    assert "modifying operator" in err["message"]


def test_validate_unloadable_and_missing_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wrong_type = tmp_path / "wrong.yaml"
    wrong_type.write_text(GOOD.replace("name: widget\n", "name: [widget]\n"))
    not_yaml = tmp_path / "broken.yaml"
    not_yaml.write_text("apiVersion: run.ai/v1alpha1\nkind: Karta\nmetadata: {name: x\n")
    code = main(["definitions", "validate", str(wrong_type), str(not_yaml), str(tmp_path / "missing.yaml")])
    out = capsys.readouterr().out
    assert code == 1
    assert f"{wrong_type}: field spec.structureDefinition.rootComponent.name: cannot load: must be a string" in out
    assert f"{not_yaml}: cannot load: invalid YAML" in out
    assert "missing.yaml: cannot load: no such file or directory" in out
    assert "0 definitions checked, 0 invalid, 3 could not be loaded" in out


def test_validate_cluster_without_a_reachable_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["definitions", "validate", "--cluster", "--kubeconfig", str(tmp_path / "none")]) == 2
    assert "cannot read Kartas from the cluster" in capsys.readouterr().err


def test_list_builtin_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["definitions", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "ORIGIN", "VALID", "GANG", "IN", "EFFECT"]
    assert len(lines) == 25  # header + 24 built-in definitions
    row = next(line for line in lines if line.startswith("leaderworkerset-x-k8s-io-leaderworkerset-v1 "))
    assert row.split() == ["leaderworkerset-x-k8s-io-leaderworkerset-v1", "LeaderWorkerSet.v1.leaderworkerset.x-k8s.io",
                           "builtin:definitions/leaderworkerset-x-k8s-io-leaderworkerset-v1.yaml", "yes", "podGroups", "yes"]


def test_list_json_with_own_catalog(defs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(CATALOG / "batch-job-v1.yaml", defs_dir / "batch-job-v1.yaml")
    assert main(["definitions", "list", "--definitions", str(defs_dir), "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    items = {i["name"]: i for i in data["items"]}
    assert set(items) == {"widgets", "broken-gadgets", "batch-job-v1"}
    assert items["widgets"] | {} == items["widgets"] and items["widgets"]["kind"] == "Widget"
    assert (items["widgets"]["valid"], items["widgets"]["gang"], items["widgets"]["inEffect"]) == (True, "podGroup", True)
    assert (items["broken-gadgets"]["valid"], items["broken-gadgets"]["inEffect"]) == (False, False)
    assert items["broken-gadgets"]["source"] == "builtin" and items["batch-job-v1"]["group"] == "batch"
    assert main(["definitions", "list", "--definitions", str(tmp_path / "nope")]) == 2


def test_definitions_without_subcommand_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["definitions"]) == 2
    assert "validate" in capsys.readouterr().out
