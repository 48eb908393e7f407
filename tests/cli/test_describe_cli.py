"""``grouper describe`` offline (-f): exit codes, table and JSON output. The live path
(``KIND/NAME -n NS``) is covered by tests/integration/test_describe_live.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from grouper.cli.main import main

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "catalog" / "fixtures"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["describe", *argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_table_from_one_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "-f", str(FIXTURES / "leaderworkerset/running.yaml"))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("LeaderWorkerSet/vllm-70b   namespace: ml-team   definition: leaderworkerset-x-k8s-io-leaderworkerset-v1")
    assert lines[1] == "(file mode: no live status)"
    assert any(line.startswith("    |-- group[0]") and "replicas: 4" in line for line in lines)
    assert "Phase:" not in out
    # kli: one row per instance of the tree (here per LWS group), not one per component
    assert [line.split() for line in lines[-6:]] == [
        ["COMPONENT", "REPLICAS", "GPU", "CPU", "MEMORY"],
        ["leader", "1", "8", "16", "200Gi"],
        ["worker", "3", "24", "48", "600Gi"],
        ["leader", "1", "8", "16", "200Gi"],
        ["worker", "3", "24", "48", "600Gi"],
        ["TOTAL", "8", "64", "128", "1600Gi"],
    ]


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "-f", str(FIXTURES / "raycluster/running.yaml"), "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert (data["kind"], data["name"], data["fileMode"], data["phases"]) == ("RayCluster", "ray-train", True, ["Running"])
    head, worker = data["components"]
    assert head["replicas"] == {"desired": 1, "current": 1, "ready": 1}
    assert [c["label"] for c in worker["children"]] == ["cpu", "gpu"]
    assert worker["replicas"]["desired"] == 5 and data["resources"]["gpus"] == 4


def test_workload_and_pods_in_separate_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = list(yaml.safe_load_all((FIXTURES / "jobset/running.yaml").read_text()))
    (tmp_path / "jobset.yaml").write_text(yaml.safe_dump(docs[0]))
    (tmp_path / "owned.yaml").write_text(yaml.safe_dump_all(docs[1:]))
    code, out, _ = run(capsys, "-f", str(tmp_path / "jobset.yaml"), "-f", str(tmp_path / "owned.yaml"), "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert data["components"][0]["replicas"] == {"desired": 5, "current": 5, "ready": 5}
    code, out, _ = run(capsys, "-f", str(tmp_path / "jobset.yaml"), "-o", "json")
    assert code == 0 and json.loads(out)["components"][0]["replicas"] == {"desired": 5, "current": 0, "ready": 0}


def test_target_selects_among_covered_objects(capsys: pytest.CaptureFixture[str]) -> None:
    f = str(FIXTURES / "inferenceservice/failed.yaml")  # ISVC, Knative Service, Deployment ... all covered
    code, out, _ = run(capsys, "-f", f)
    assert code == 0 and out.startswith("InferenceService/bert-qa ")
    code, out, _ = run(capsys, "deployment/bert-qa-predictor-00001-deployment", "-f", f, "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert (data["kind"], data["definition"]) == ("Deployment", "apps-deployment-v1")
    assert data["components"][0]["replicas"]["current"] == 1
    code, _, err = run(capsys, "Deployment", "nope", "-f", f)
    assert code == 4 and "the files hold no Deployment/nope" in err


def test_karta_objects_in_the_files_describe_new_kinds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    karta = {
        "apiVersion": "run.ai/v1alpha1", "kind": "Karta", "metadata": {"name": "widgets"},
        "spec": {"structureDefinition": {
            "rootComponent": {"name": "widget", "kind": {"group": "example.com", "version": "v1", "kind": "Widget"},
                              "statusDefinition": {"phaseDefinition": {"path": ".status.phase"},
                                                   "statusMappings": {"running": [{"byPhase": "Up"}]}}},
            "childComponents": [{"name": "part", "ownerRef": "widget",
                                 "specDefinition": {"podTemplateSpecPath": ".spec.template"},
                                 "scaleDefinition": {"replicasPath": ".spec.parts"}}]}},
    }
    widget = {"apiVersion": "example.com/v1", "kind": "Widget",
              "metadata": {"name": "w1", "namespace": "ns", "uid": "w1-uid"},
              "spec": {"parts": 2, "template": {"spec": {"containers": [
                  {"name": "m", "resources": {"requests": {"cpu": "250m", "nvidia.com/gpu": 1}}}]}}},
              "status": {"phase": "Up"}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "w1-part-0", "namespace": "ns", "uid": "p0",
                        "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "Widget", "name": "w1", "uid": "w1-uid"}]},
           "spec": {"nodeName": "n1", "containers": [{"name": "m"}]},
           "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all([karta, widget, pod]))
    code, out, _ = run(capsys, "-f", str(tmp_path / "all.yaml"))
    assert code == 0
    assert "definition: widgets (cluster:Karta/widgets)" in out
    assert any(line.startswith("`-- part") and "replicas: 2" in line and "gpu: 2" in line for line in out.splitlines())
    # without the Karta no definition covers the kind
    (tmp_path / "widget.yaml").write_text(yaml.safe_dump_all([widget, pod]))
    code, _, err = run(capsys, "-f", str(tmp_path / "widget.yaml"))
    assert code == 3 and "no Karta definition covers Widget.v1.example.com" in err


def test_pod_limit(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "-f", str(FIXTURES / "rayjob/failed.yaml"), "--pod-limit", "2")
    assert code == 0
    # kli: "..." in the name column, the note in the status column
    assert re.search(r"-- \.\.\. +and 2 more \(2 of 4 unhealthy shown\)$", out, re.M)
    code, _, err = run(capsys, "-f", str(FIXTURES / "rayjob/failed.yaml"), "--pod-limit", "-1")
    assert code == 2 and "--pod-limit" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give KIND/NAME"),
        (["a/b/c"], "expected KIND/NAME"),
        (["job", "x", "y"], "expected KIND/NAME"),
        (["-f", "/nonexistent/file.yaml"], "cannot read"),
        (["--definitions", "/nonexistent", "-f", "x.yaml"], "not a directory"),
    ],
)
def test_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err


def test_only_pods_in_the_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = list(yaml.safe_load_all((FIXTURES / "statefulset/running.yaml").read_text()))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(docs[1:]))
    code, _, err = run(capsys, "-f", str(tmp_path / "pods.yaml"))
    assert code == 4 and "only pods" in err


def test_live_mode_without_a_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "jobset/trainer", "-n", "ml-team", "--kubeconfig", str(tmp_path / "missing"))
    assert code == 1 and "cannot load kubeconfig" in err


@pytest.mark.parametrize("command", ["describe", "why"])
@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["a/b/c"], 2, "error: expected KIND/NAME or KIND NAME, got 'a/b/c'"),
        (["job", "x", "y"], 2, "error: expected KIND/NAME or KIND NAME, got 'job x y'"),
        (["job/x", "LIMIT", "-1"], 2, "error: LIMIT must not be negative"),
        (["job/x", "--kubeconfig", "MISSING"], 1, "error: cannot load kubeconfig"),
    ],
)
def test_describe_and_why_share_their_prologue(
    command: str, argv: list[str], code: int, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The live workload commands check their arguments, and map an unusable kubeconfig, the same way (one
    prologue, ``grouper.cli.common``): only the name of the limit flag differs."""
    limit = {"describe": "--pod-limit", "why": "--limit"}[command]
    args = [limit if a == "LIMIT" else str(tmp_path / "missing") if a == "MISSING" else a for a in argv]
    got = main([command, *args])
    err = capsys.readouterr().err
    assert got == code and err.startswith(message.replace("LIMIT", limit)), err
