"""``grouper plan --backend upstream``: the upstream objects and what they cannot carry, offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grouper.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_plan_shows_the_upstream_gang_and_the_fields_it_cannot_carry(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["plan", "-f", str(EXAMPLES / "pytorchjob.yaml"), "--backend", "upstream"]
    assert main([*args, "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (up,) = data["upstream"]
    (pg,) = up["podGroups"]
    assert pg["apiVersion"] == "scheduling.k8s.io/v1beta1" and pg["kind"] == "PodGroup"
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 5}}  # master 1 + 2 workers x 2
    notes = "\n".join(up["notes"])
    assert "queue 'team-a'" in notes and "topologyConstraint" in notes and "sub-groups not carried" in notes

    assert main(args) == 0
    table = capsys.readouterr().out
    assert "gang minCount=5" in table and "note: queue 'team-a'" in table


def test_plan_without_the_flag_is_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-f", str(EXAMPLES / "pytorchjob.yaml"), "-o", "json"]) == 0
    assert "upstream" not in json.loads(capsys.readouterr().out)
