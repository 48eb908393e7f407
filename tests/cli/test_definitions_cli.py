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
    assert "OK: jobset-x-k8s-io-jobset-v1alpha2 (" in out
    assert "is a valid Karta definition (GVK: jobset.x-k8s.io/v1alpha2, Kind=JobSet)" in out
    assert out.rstrip().endswith("24 definitions checked, 0 invalid: all valid")


def test_validate_reports_file_definition_field_and_expression(
    defs_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["definitions", "validate", str(defs_dir)]) == 1
    out = capsys.readouterr().out
    assert f"OK: widgets ({defs_dir / 'good.yaml'}) is a valid Karta definition" in out
    bad = [line for line in out.splitlines() if line.startswith("INVALID: broken-gadgets")]
    assert bad and all(line.startswith(f"INVALID: broken-gadgets ({defs_dir / 'bad.yaml'}): ") for line in bad)
    assert any(
        "spec.structureDefinition.childComponents[0].scaleDefinition.replicasPath" in line
        and "'(.spec.parts |= 3)'" in line and "|=" in line
        for line in bad
    )
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
    code = main(["definitions", "validate", str(wrong_type), str(not_yaml)])
    out = capsys.readouterr().out
    assert code == 1
    assert f"INVALID: {wrong_type}: field spec.structureDefinition.rootComponent.name: cannot load: must be a string" in out
    assert f"INVALID: {not_yaml}: cannot load: invalid YAML" in out
    assert out.rstrip().endswith("0 definitions checked, 0 invalid, 2 could not be loaded")
    # a file that cannot be read is an I/O error: exit 2, like kli
    code = main(["definitions", "validate", str(wrong_type), str(not_yaml), str(tmp_path / "missing.yaml")])
    captured = capsys.readouterr()
    assert code == 2
    assert f"error: {tmp_path / 'missing.yaml'}: no such file or directory" in captured.err
    assert "0 definitions checked, 0 invalid, 2 could not be loaded, 1 could not be read" in captured.out


def test_validate_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO((GOOD + "---\n" + BAD).encode())))
    assert main(["definitions", "validate", "-"]) == 1
    out = capsys.readouterr().out
    assert "OK: widgets (-) is a valid Karta definition (GVK: example.com/v1, Kind=Widget)" in out
    assert "INVALID: broken-gadgets (-): " in out


HOSTILE_FILES = {
    "binary": (b"\x7fELF\x00\x01\x02" + bytes(range(256)), "not a text file"),
    "latin-1": ("name: caf\xe9".encode("latin-1"), "not UTF-8 text"),
    "deep JSON": (b"[" * 100_000 + b"]" * 100_000, "nests too deeply"),
    "not a mapping": (b"- a\n- b\n", "document must be an object, got list"),
    "500-deep chain": (None, "more than 32 ownerRef levels below the root"),
    "gojq lacks it": (GOOD.replace(".spec.replicas // 1", ".spec | keys_unsorted | length").encode(),
                      "is not available in gojq"),
    "exponential": (GOOD.replace(".spec.replicas // 1", '"def f(x): x,x; ' + "f(" * 30 + "." + ")" * 30 + '"').encode(),
                    "exponential time"),
}


def _chain(depth: int) -> bytes:
    kids = "".join(
        f"      - {{name: c{i}, ownerRef: {'widget' if i == 0 else f'c{i - 1}'}, "
        "kind: {group: example.com, version: v1, kind: Part}}\n"
        for i in range(depth)
    )
    return (GOOD.replace("  optimizationInstructions:", "    childComponents:\n" + kids + "  optimizationInstructions:")).encode()


@pytest.mark.parametrize("name", HOSTILE_FILES)
def test_validate_hostile_files_without_traceback(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, expected = HOSTILE_FILES[name]
    f = tmp_path / ("k.json" if name == "deep JSON" else "k.yaml")
    f.write_bytes(_chain(200) if data is None else data)
    assert main(["definitions", "validate", str(f)]) == 1
    out = capsys.readouterr().out
    assert expected in out and "INVALID: " in out and "Traceback" not in out


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


def test_definitions_without_subcommand_lists_as_kli_does(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["definitions"]) == 0
    listed = capsys.readouterr().out
    assert main(["definitions", "list"]) == 0
    assert capsys.readouterr().out == listed and listed.startswith("NAME ")


# ---------------------------------------------------------------- what plan would reject for every workload


BATCHLING = (REPO / "examples" / "batchling-karta.yaml").read_text()


def test_two_kartas_for_one_kind_are_invalid_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """plan: "found multiple Kartas with gang scheduling instructions" for every workload of the kind."""
    d = tmp_path / "defs"
    d.mkdir()
    (d / "a.yaml").write_text(BATCHLING)
    (d / "b.yaml").write_text(BATCHLING.replace("name: example-com-batchling-v1", "name: second-batchling", 1))
    code = main(["definitions", "validate", str(d)])
    out = capsys.readouterr().out
    assert code == 1, out
    assert out.count("found multiple Kartas with gang scheduling instructions for example.com/v1, Kind=Batchling") == 2
    assert "example-com-batchling-v1" in out and "second-batchling" in out
    (d / "b.yaml").unlink()
    assert main(["definitions", "validate", str(d)]) == 0


@pytest.mark.parametrize(
    "old,new,field,expected",
    [("        name: batchling\n", "        name: Batch_Ling\n", "podGroup.name", 'podGroup name "Batch_Ling" makes PodGroup names'),
     ("componentName: worker", "componentName: Worker_1", "podGroup.subGroups[1].componentName",
      'component name "Worker_1" becomes a sub-group name')],
    ids=["podGroup name", "component name"],
)
def test_names_plan_would_refuse_are_invalid(
    old: str, new: str, field: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = BATCHLING.replace(old, new)
    if "Worker_1" in new:
        text = text.replace("- name: worker\n", "- name: Worker_1\n").replace("ownerRef: worker", "ownerRef: Worker_1")
    assert text != BATCHLING
    f = tmp_path / "k.yaml"
    f.write_text(text)
    code = main(["definitions", "validate", str(f)])
    out = capsys.readouterr().out
    assert code == 1 and f"gangScheduling.{field}: {expected}" in out, out
    # and plan, over a workload of the kind, refuses it the same way (before: only plan did, per pod)
    code = main(["plan", "-f", str(f), "-f", str(REPO / "examples" / "custom-batchling.yaml")])
    out = capsys.readouterr()
    assert code == 2 and expected in out.err, out
