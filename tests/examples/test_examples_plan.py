"""Every manifest in ``examples/`` run through the real ``grouper plan -o json``, compared with a golden file.

The golden files in ``tests/examples/expected/<name>.json`` were written by hand from the reference
(kai-podgrouper.md §1.7 naming, §2.3 plugin rules, §2.4 Karta fallback; karta.md §3 evaluation) and, for
the kinds grouped through Karta, the definition the plan uses (the shipped ``definitions/`` catalog, or
the example's own Karta file). They were NOT recorded from the program: when the two disagree, the
reference decides (see the assertion message, which lists every differing field).

Golden format = the ``plan -o json`` document: ``podGroups`` (PodGroup objects as written), ``pods``
(namespace, name, podGroup, subGroup, plugin) and ``errors``. PodGroups and pods are compared as sets
(sorted by namespace/name); everything inside a PodGroup, including the order of ``spec.subGroups``, is
compared exactly. An expected error's ``error`` text only has to be contained in the actual message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from grouper.cli.main import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
EXPECTED = Path(__file__).resolve().parent / "expected"
DEFINITIONS = REPO / "definitions"

# Golden name -> the example files planned together (default: "<name>.yaml").
INPUTS: dict[str, list[str]] = {
    "jobset-demo": ["jobset-demo.yaml", "jobset-demo-pods.yaml"],
    "custom-batchling": ["custom-batchling.yaml", "batchling-karta.yaml"],
}

GOLDENS = sorted(p.stem for p in EXPECTED.glob("*.json"))


def inputs_of(name: str) -> list[Path]:
    return [EXAMPLES / f for f in INPUTS.get(name, [f"{name}.yaml"])]


def run_plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()  # drop anything printed before
    try:
        rc = main(["plan", *args])
    except SystemExit as exc:  # argparse errors
        rc = int(exc.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


def plan_json(capsys: pytest.CaptureFixture[str], files: list[Path]) -> tuple[int, dict[str, Any], str]:
    args: list[str] = []
    for f in files:
        args += ["-f", str(f)]
    rc, out, err = run_plan(capsys, *args, "--definitions", str(DEFINITIONS), "-o", "json")
    try:
        data = json.loads(out)
    except json.JSONDecodeError as exc:
        pytest.fail(f"plan printed no JSON (exit {rc}): {exc}\nstdout:\n{out}\nstderr:\n{err}")
    return rc, data, err


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata", obj)
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


def normalize(data: dict[str, Any]) -> dict[str, Any]:
    return {
        "podGroups": sorted(data.get("podGroups") or [], key=_key),
        "pods": sorted(data.get("pods") or [], key=_key),
        "errors": sorted(data.get("errors") or [], key=lambda e: str(e.get("pod"))),
    }


def differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Every leaf where the two differ, as ``path: expected X, got Y``."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out: list[str] = []
        for key in list(expected) + [k for k in actual if k not in expected]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in actual:
                out.append(f"{sub}: expected {json.dumps(expected[key])}, got nothing")
            elif key not in expected:
                out.append(f"{sub}: expected nothing, got {json.dumps(actual[key])}")
            else:
                out += differences(expected[key], actual[key], sub)
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [
                f"{path}: expected {len(expected)} items {json.dumps(expected)}, got {len(actual)} {json.dumps(actual)}"
            ]
        out = []
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            label = (
                e.get("name")
                if isinstance(e, dict) and "name" in e
                else (e.get("metadata", {}).get("name") if isinstance(e, dict) and "metadata" in e else i)
            )
            out += differences(e, a, f"{path}[{label}]")
        return out
    return (
        [] if expected == actual else [f"{path}: expected {json.dumps(expected)}, got {json.dumps(actual)}"]
    )


def compare(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    exp, act = normalize(expected), normalize(actual)
    errors_exp, errors_act = exp.pop("errors"), act.pop("errors")
    diffs = differences(exp, act)
    if [e["pod"] for e in errors_exp] != [e.get("pod") for e in errors_act]:
        diffs.append(f"errors: expected pods {[e['pod'] for e in errors_exp]}, got {errors_act}")
    else:
        for e, a in zip(errors_exp, errors_act, strict=True):
            if e["error"] not in str(a.get("error")):
                diffs.append(
                    f"errors[{e['pod']}]: expected a message containing {e['error']!r}, got {a.get('error')!r}"
                )
    return diffs


def test_every_example_has_a_golden() -> None:
    covered = {f for name in GOLDENS for f in INPUTS.get(name, [f"{name}.yaml"])}
    manifests = {p.name for p in EXAMPLES.glob("*.yaml")}
    assert manifests - covered == set(), "example manifests without a golden file"
    assert covered - manifests == set(), "golden files naming missing example manifests"


@pytest.mark.parametrize("name", GOLDENS)
def test_example_plan_matches_golden(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    expected = json.loads((EXPECTED / f"{name}.json").read_text())
    rc, actual, err = plan_json(capsys, inputs_of(name))
    diffs = compare(expected, actual)
    want_rc = 1 if expected["errors"] else 0
    if rc != want_rc:
        diffs.insert(0, f"exit code: expected {want_rc}, got {rc} (stderr: {err.strip()!r})")
    assert not diffs, (
        f"grouper plan of {[p.name for p in inputs_of(name)]} differs from {name}.json:\n"
        + "\n".join(f"  - {d}" for d in diffs)
    )


# A few representative examples (sub-groups, a skipped pod, a Karta from the input files): each plan
# costs about a second, so the format check does not repeat every example.
@pytest.mark.parametrize("name", ["jobset-demo", "pytorchjob", "rayjob", "custom-batchling"])
def test_example_plan_table_and_yaml_outputs(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The other output formats describe the same plan (names of every PodGroup appear; YAML == JSON)."""
    files: list[str] = []
    for f in inputs_of(name):
        files += ["-f", str(f)]
    expected = json.loads((EXPECTED / f"{name}.json").read_text())
    rc_json, out_json, _ = run_plan(capsys, *files, "--definitions", str(DEFINITIONS), "-o", "json")
    rc_yaml, out_yaml, _ = run_plan(capsys, *files, "--definitions", str(DEFINITIONS), "-o", "yaml")
    assert rc_yaml == rc_json
    assert yaml.safe_load(out_yaml) == json.loads(out_json)
    rc_table, out_table, _ = run_plan(capsys, *files, "--definitions", str(DEFINITIONS), "-o", "table")
    assert rc_table == rc_json
    for pg in expected["podGroups"]:
        assert pg["metadata"]["name"] in out_table


# ---------------------------------------------------------------- failure modes


def test_unparseable_yaml_exits_2_naming_the_file_and_the_yaml_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {a: [1, 2}\n")
    with pytest.raises(yaml.YAMLError) as parse_error:
        yaml.safe_load(bad.read_text())
    problem = getattr(parse_error.value, "problem", None) or str(parse_error.value)

    rc, out, err = run_plan(capsys, "-f", str(EXAMPLES / "bare-pod.yaml"), "-f", str(bad), "-o", "json")
    assert rc == 2
    assert str(bad) in err
    assert problem in err, f"the YAML parser's message {problem!r} is not in stderr {err!r}"
    assert out.strip() == "", "no plan is printed for unreadable input"


def test_missing_file_exits_2_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    rc, out, err = run_plan(capsys, "-f", str(missing), "-o", "json")
    assert rc == 2
    assert str(missing) in err
    assert out.strip() == ""


def test_document_that_is_not_an_object_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "list.yaml"
    bad.write_text("- just\n- a list\n")
    rc, _, err = run_plan(capsys, "-f", str(bad), "-o", "json")
    assert rc == 2
    assert str(bad) in err


def test_pods_whose_owner_is_missing_exit_1_with_an_error_each(capsys: pytest.CaptureFixture[str]) -> None:
    """The demo's pods without the demo's Jobs: every pod's owner Job is missing."""
    rc, data, _ = plan_json(capsys, [EXAMPLES / "jobset-demo-pods.yaml"])
    assert rc == 1
    assert data["podGroups"] == []
    by_pod = {e["pod"]: e["error"] for e in data["errors"]}
    owners = {
        "default/demo-leader-0-0-k7x2p": "demo-leader-0",
        "default/demo-worker-0-0-q9m4t": "demo-worker-0",
        "default/demo-worker-1-0-w2n8d": "demo-worker-1",
    }
    assert set(by_pod) == set(owners)
    for pod_key, job in owners.items():
        assert "Job" in by_pod[pod_key] and job in by_pod[pod_key], by_pod[pod_key]
    assert all(p["podGroup"] is None and p["subGroup"] is None for p in data["pods"])
    assert sorted(p["name"] for p in data["pods"]) == sorted(k.split("/")[1] for k in owners)


def test_missing_owner_fails_only_that_pod(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    orphan = tmp_path / "orphan.yaml"
    orphan.write_text(
        """apiVersion: v1
kind: Pod
metadata:
  name: llm-chat-5f7d9c8b6a-x2x2x
  namespace: team-a
  uid: 5c1b2a3e-0000-4000-8000-000000009901
  ownerReferences:
  - apiVersion: apps/v1
    kind: ReplicaSet
    name: llm-chat-5f7d9c8b6a
    uid: 5c1b2a3e-0000-4000-8000-000000009902
    controller: true
spec:
  schedulerName: kai-scheduler
  containers:
  - name: c
    image: busybox
"""
    )
    rc, data, _ = plan_json(capsys, [EXAMPLES / "bare-pod.yaml", orphan])
    assert rc == 1
    assert [e["pod"] for e in data["errors"]] == ["team-a/llm-chat-5f7d9c8b6a-x2x2x"]
    message = data["errors"][0]["error"]
    assert "ReplicaSet" in message and "llm-chat-5f7d9c8b6a" in message, message
    # the healthy pod in the same run is still planned
    assert [pg["metadata"]["name"] for pg in data["podGroups"]] == [
        "pg-cuda-debug-5c1b2a3e-0000-4000-8000-000000000601"
    ]
    orphan_entry = next(p for p in data["pods"] if p["name"] == "llm-chat-5f7d9c8b6a-x2x2x")
    assert orphan_entry["podGroup"] is None
