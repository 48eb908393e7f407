"""The workload-group examples (``examples/workload-groups/``) through the real ``grouper plan``.

Goldens in ``tests/examples/expected/workload-groups/<name>.json``: the plan's ``podGroups``, ``pods`` and
``errors`` (as ``test_examples_plan.py`` compares them) plus each group's state, members and notes. They
were recorded from the program and then checked line by line against the rules of docs/workload-groups.md
(wrapper per workload, prefixed tree, root minSubGroup = workloads, the merge rules); the structural
assertions below hold independently of the files. Also: the gate when the WorkloadGroup object or a member
is missing, the errors' exit code, the table / YAML outputs and the upstream backend's objects.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from grouper.cli.main import main
from grouper.core.validation import validate_pod_group
from grouper.model.podgroup import OwnerRef, PodGroupMetadata, SubGroup

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "workload-groups"
EXPECTED = Path(__file__).resolve().parent / "expected" / "workload-groups"
DEFINITIONS = REPO / "definitions"
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.yaml"))


def run_plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["plan", *args, "--definitions", str(DEFINITIONS)])
    out, err = capsys.readouterr()
    return rc, out, err


def plan_json(capsys: pytest.CaptureFixture[str], *files: Path, extra: tuple[str, ...] = ()) -> tuple[int, Any]:
    args: list[str] = []
    for f in files:
        args += ["-f", str(f)]
    rc, out, err = run_plan(capsys, *args, "-o", "json", *extra)
    assert out, err
    return rc, json.loads(out)


def golden_view(data: dict[str, Any]) -> dict[str, Any]:
    def key(obj: dict[str, Any]) -> tuple[str, str]:
        meta = obj.get("metadata", obj)
        return (str(meta.get("namespace", "")), str(meta.get("name", "")))

    return {
        "podGroups": sorted(data["podGroups"], key=key),
        "pods": sorted(data["pods"], key=key),
        "errors": data["errors"],
        "workloadGroups": [
            {k: g[k] for k in ("namespace", "name", "state", "podGroup", "expectedWorkloads", "errors", "pending",
                               "notes")} | {"observedMembers": g["status"]["observedMembers"]}
            for g in data["workloadGroups"]
        ],
    }


def test_every_group_example_has_a_golden() -> None:
    assert NAMES == sorted(p.stem for p in EXPECTED.glob("*.json")) == ["finetune-and-serve", "rl-post-training"]


def as_metadata(obj: dict[str, Any]) -> PodGroupMetadata:
    spec = obj["spec"]
    return PodGroupMetadata(
        name=obj["metadata"]["name"], namespace=obj["metadata"]["namespace"], owner=OwnerRef("", "", "", ""),
        queue=spec.get("queue", ""), min_member=spec.get("minMember"), min_sub_group=spec.get("minSubGroup"),
        sub_groups=[SubGroup(s["name"], s.get("minMember"), s.get("minSubGroup"), s.get("parent"))
                    for s in spec.get("subGroups", [])],
    )


@pytest.mark.parametrize("name", NAMES)
def test_group_example_plan_matches_golden(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, data = plan_json(capsys, EXAMPLES / f"{name}.yaml")
    assert rc == 0
    expected = json.loads((EXPECTED / f"{name}.json").read_text())
    assert golden_view(data) == expected
    # Independently of the golden: one PodGroup (the group's), owned by the WorkloadGroup, root minSubGroup
    # = its workloads, valid; every grouped pod in it, in a leaf below its workload's wrapper.
    (group,) = data["workloadGroups"]
    (pg,) = data["podGroups"]
    assert pg["metadata"]["ownerReferences"][0]["kind"] == "WorkloadGroup"
    assert pg["metadata"].get("labels") is None and pg["metadata"].get("annotations") is None
    members = group["status"]["observedMembers"]
    assert pg["spec"]["minSubGroup"] == len(members) == group["expectedWorkloads"]
    assert validate_pod_group(as_metadata(pg)) == []
    roots = {s["name"] for s in pg["spec"]["subGroups"] if "parent" not in s}
    assert roots == {m["rootSubGroup"] for m in members}
    parents = {s.get("parent") for s in pg["spec"]["subGroups"]}
    grouped = [p for p in data["pods"] if p["plugin"]]
    assert grouped and all(p["podGroup"] == pg["metadata"]["name"] for p in grouped)
    assert all(p["subGroup"] not in parents for p in grouped), "pods only in leaf sub-groups"
    assert all(any(p["subGroup"].startswith(r) for r in roots) for p in grouped)


def test_rl_group_takes_the_lowest_priority_and_the_strictest_preemptibility(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, data = plan_json(capsys, EXAMPLES / "rl-post-training.yaml")
    spec = data["podGroups"][0]["spec"]
    # members: RayJob and Deployment "inference" (125, non-preemptible by KAI's rule), RayCluster "train" (50)
    assert (spec["priorityClassName"], spec["preemptibility"]) == ("train", "non-preemptible")


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_without_the_workloadgroup_object_member_pods_are_gated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = [d for d in _documents(EXAMPLES / "rl-post-training.yaml") if d["kind"] != "WorkloadGroup"]
    members_only = tmp_path / "members.yaml"
    members_only.write_text(yaml.safe_dump_all(docs))
    rc, data = plan_json(capsys, members_only)
    assert rc == 1, "a group that is not rendered fails the plan"
    assert data["podGroups"] == [], "no member is given a PodGroup of its own"
    (group,) = data["workloadGroups"]
    assert group["state"] == "Pending" and "does not exist (yet): 3 workload(s) name it" in group["pending"][0]
    assert group["gate"] and group["podGroup"] in group["gate"]
    grouped = [p for p in data["pods"] if p["plugin"]]
    assert grouped and all((p["podGroup"], p["subGroup"]) == (group["podGroup"], None) for p in grouped)


def test_a_missing_member_keeps_the_group_pending(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = _documents(EXAMPLES / "rl-post-training.yaml")
    without_deployment = [d for d in docs if not (
        d["metadata"]["name"].startswith("llm-chat") and d["kind"] in {"Deployment", "ReplicaSet", "Pod"})]
    f = tmp_path / "two.yaml"
    f.write_text(yaml.safe_dump_all(without_deployment))
    rc, data = plan_json(capsys, f)
    assert rc == 1
    (group,) = data["workloadGroups"]
    assert group["state"] == "Pending"
    assert group["pending"] == ["WorkloadGroup team-a/rl-post-training: 2 of 3 workloads present "
                                "(RayCluster team-a/ray-train, RayJob team-a/ray-batch-infer)"]


def test_an_extra_member_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = _documents(EXAMPLES / "finetune-and-serve.yaml")
    docs[0]["spec"]["expectedWorkloads"] = 1
    f = tmp_path / "extra.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    rc, data = plan_json(capsys, f)
    assert rc == 1
    (group,) = data["workloadGroups"]
    assert group["state"] == "Invalid"
    assert "2 workloads carry the annotation but spec.expectedWorkloads is 1" in group["errors"][0]


def test_an_invalid_workloadgroup_is_reported_naming_its_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = _documents(EXAMPLES / "finetune-and-serve.yaml")
    docs[0]["spec"]["expectedPodGroups"] = docs[0]["spec"].pop("expectedWorkloads")
    f = tmp_path / "kai-field.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    rc, data = plan_json(capsys, f)
    assert rc == 1
    (group,) = data["workloadGroups"]
    assert group["state"] == "Invalid" and data["podGroups"] == []
    assert group["errors"][0].startswith(
        "WorkloadGroup team-a/finetune-and-serve: field spec.expectedPodGroups: not a field of this WorkloadGroup")


@pytest.mark.parametrize("name", NAMES)
def test_table_and_yaml_show_the_same_group(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    f = str(EXAMPLES / f"{name}.yaml")
    _, data = plan_json(capsys, EXAMPLES / f"{name}.yaml")
    rc_yaml, out_yaml, _ = run_plan(capsys, "-f", f, "-o", "yaml")
    assert rc_yaml == 0 and yaml.safe_load(out_yaml) == data
    rc_table, table, _ = run_plan(capsys, "-f", f, "-o", "table")
    assert rc_table == 0
    group = data["workloadGroups"][0]
    assert f"WorkloadGroup team-a/{group['name']}  Rendered  members=" in table
    assert f"PodGroup team-a/{group['podGroup']}  minSubGroup={group['expectedWorkloads']}" in table
    for m in group["status"]["observedMembers"]:
        assert f"member {m['kind']}/{m['name']}  rootSubGroup={m['rootSubGroup']}" in table


def test_upstream_backend_shows_a_composite_or_the_flattened_gang(capsys: pytest.CaptureFixture[str]) -> None:
    f = EXAMPLES / "finetune-and-serve.yaml"
    _, data = plan_json(capsys, f, extra=("--backend", "upstream"))
    (u,) = data["upstream"]
    assert u["workloadGroup"] == "team-a/finetune-and-serve"
    assert u["compositePodGroup"]["spec"]["schedulingPolicy"] == {"gang": {"minGroupCount": 2}}
    counts = sorted(pg["spec"]["schedulingPolicy"]["gang"]["minCount"] for pg in u["podGroups"])
    assert counts == [5, 6]  # PyTorchJob master 1 + 2 segments of 2; LWS 2 replicas of 3
    _, flat = plan_json(capsys, f, extra=("--backend", "upstream", "--no-composite"))
    (uf,) = flat["upstream"]
    assert uf["compositePodGroup"] is None
    assert [pg["spec"]["schedulingPolicy"]["gang"]["minCount"] for pg in uf["podGroups"]] == [11]
    assert "does not serve CompositePodGroup" in uf["notes"][0]
