"""Workload groups where people look, over an in-memory world (docs/workload-groups.md, "Where groups appear").

The world is the RayJob + RayCluster + Deployment example (examples/workload-groups/rl-post-training.yaml)
planned by ``grouper.core.plan`` and recorded the way the controller records it: each member's decisions
(naming its own PodGroup, which is not written while it is a member), the group's rendered PodGroup owned by
the WorkloadGroup, the pods placed in it, and the WorkloadGroup's status as the group pass writes it. The
gang states come from the pure derivation (``grouper.core.gang_state``) over those objects.

A member's ``/workloads`` row carries the group's gang and names the group; an invalid group makes it
Error with the group's message; ``/pods`` says the pod is held for the group; the web view says "member of
WorkloadGroup X (n of m members)" with the group's reasons.
"""

from __future__ import annotations

import copy
import html
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from api.fixtures import DEFINITIONS, record
from grouper.api.app import create_app
from grouper.api.state import AppState
from grouper.controller.workload_groups import group_key
from grouper.core.config import GroupingConfig
from grouper.core.gang_state import GangState, gang_of, gang_state, member
from grouper.core.lookups import InMemoryLookups
from grouper.core.plan import plan
from grouper.core.workload_group import rendered_name
from grouper.core.workload_group_status import active_condition
from grouper.karta import DefinitionRegistry
from grouper.manifests import load_manifests
from grouper.model import objects as o
from grouper.model import workload_group as wg
from grouper.model.podgroup import POD_GROUP_ANNOTATION, SUBGROUP_LABEL
from grouper.observability.metrics import Metrics
from grouper.records.decisions import DecisionStore
from grouper.runtime.composition import build_grouper

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "workload-groups" / "rl-post-training.yaml"
NS, GROUP = "team-a", "rl-post-training"
NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
UNSCHEDULABLE = "node(s) didn't have enough resources: nvidia.com/gpu"


@dataclass
class Gangs:
    """The gang tracker's read side (grouper.api.state.GangSource) over fixed states."""

    states: dict[tuple[str, str], tuple[str, GangState]]  # (namespace, PodGroup) -> (owner uid, state)

    def clock(self) -> datetime:
        return NOW

    def get(self, namespace: str, name: str) -> GangState | None:
        found = self.states.get((namespace, name))
        return found[1] if found is not None else None

    def of_workload(self, namespace: str, uid: str) -> list[tuple[str, GangState]]:
        return [(n, st) for (ns, n), (owner, st) in sorted(self.states.items()) if ns == namespace and owner == uid]


def world(*, invalid: bool = False) -> AppState:
    """The example recorded as the controller records it; ``invalid``: the Deployment on another queue (the
    group is then not rendered, its members' pods gated on the rendered PodGroup's name)."""
    objects = [m.obj for m in load_manifests([EXAMPLE])]
    if invalid:
        dep = next(x for x in objects if x["kind"] == "Deployment")
        dep["metadata"].setdefault("labels", {})["kai.scheduler/queue"] = "team-b"
    registry = DefinitionRegistry(DEFINITIONS)
    grouper = build_grouper(GroupingConfig(), registry)
    result = plan(copy.deepcopy(objects), grouper)
    render = next(g for g in result.workload_groups if g.name == GROUP)
    assert (render.state == "Invalid") == invalid, render.to_json()

    store = DecisionStore()
    record(store, result.decisions, [])  # each member's decisions name its own PodGroup (never written)
    group = next(x for x in objects if x["kind"] == wg.KIND)
    status = render.status()
    status["conditions"].append(active_condition(render.pod_group is not None, render.pod_group is not None, 0))
    group["status"] = status
    stored = []
    states: dict[tuple[str, str], tuple[str, GangState]] = {}
    pods = {o.name(p): p for p in objects if p["kind"] == "Pod"}
    for pod_name, (pg, sub) in render.placement.items():  # the pods as the group pass patches them
        meta = pods[pod_name]["metadata"]
        meta.setdefault("annotations", {})[POD_GROUP_ANNOTATION] = pg
        if sub:
            meta.setdefault("labels", {})[SUBGROUP_LABEL] = sub
    if render.pod_group is not None:
        pg_obj = render.pod_group.to_object()
        pg_obj["status"] = {"schedulingConditions": [{
            "type": "UnschedulableOnNodePool", "nodePool": "default", "reason": "NotEnoughResources",
            "message": UNSCHEDULABLE, "transitionID": "0", "lastTransitionTime": "2026-12-05T11:50:00Z"}]}
        stored.append(pg_obj)
        store.record_pod_group(NS, render.pod_group_name, workload=str(group_key(NS, GROUP)),
                               desired=render.pod_group.to_object(), operation="created",
                               pods=sorted(render.placement), notes=[])
        members = [member(pods[n]) for n in render.placement]
        states[(NS, render.pod_group_name)] = (o.uid(group), gang_state(gang_of(pg_obj), members, None, now=NOW))
    return AppState(metrics=Metrics(), store=store, grouper=grouper, definitions=registry,
                    objects=InMemoryLookups([*objects, *stored]), gangs=Gangs(states))


@pytest.fixture(scope="module")
def rendered() -> Iterator[TestClient]:
    with TestClient(create_app(world())) as c:
        yield c


@pytest.fixture(scope="module")
def invalid() -> Iterator[TestClient]:
    with TestClient(create_app(world(invalid=True))) as c:
        yield c


def rows(client: TestClient) -> dict[str, dict[str, Any]]:
    r = client.get("/workloads", params={"namespace": NS})
    assert r.status_code == 200, r.text
    return {f"{i['kind']}/{i['name']}": i for i in r.json()["items"]}


def test_a_members_workload_row_carries_the_groups_gang_and_names_the_group(rendered: TestClient) -> None:
    items = rows(rendered)
    pg = rendered_name(NS, GROUP)
    members = {"RayJob/ray-batch-infer", "RayCluster/ray-train", "Deployment/llm-chat"}
    assert members <= set(items), sorted(items)
    for key in members:
        row = items[key]
        assert [g["podGroup"] for g in row["gangs"]] == [pg], (key, row["gangs"])  # the group's, none of its own
        assert row["state"] == "Waiting" == row["gangs"][0]["state"]
        assert any(r["message"] == UNSCHEDULABLE for r in row["gangs"][0]["reasons"])
        group = row["workloadGroup"]
        assert group["name"] == GROUP and group["rendered"] and group["podGroup"] == pg
        assert group["state"] == "Rendered" and group["gangState"] == "Waiting" and group["expectedWorkloads"] == 3
        assert sorted(f"{m['kind']}/{m['name']}" for m in group["members"]) == sorted(members)
        assert {c["type"]: c["status"] for c in group["conditions"]} == {
            "InputsResolved": "True", "Rendered": "True", "Active": "True"}


def test_an_invalid_group_makes_its_members_error_with_the_groups_message(invalid: TestClient) -> None:
    row = rows(invalid)["Deployment/llm-chat"]
    assert row["state"] == "Error" and row["gangs"] == []
    group = row["workloadGroup"]
    assert group["state"] == "Invalid" and not group["rendered"] and group["gangState"] == "Error"
    assert "different queues" in group["message"] and "llm-chat" in group["message"]
    assert group["podGroup"] == rendered_name(NS, GROUP)  # the name its pods wait on (the gate)


def test_a_members_pod_is_held_for_the_group(rendered: TestClient, invalid: TestClient) -> None:
    pod = "llm-chat-7d9c8b6f5d-2xk9p"
    rec = rendered.get(f"/pods/{NS}/{pod}").json()
    pg = rendered_name(NS, GROUP)
    assert rec["podGroup"] == pg and rec["subGroup"] and rec["subGroup"].startswith("llm-chat-")
    assert rec["workloadGroup"]["name"] == GROUP and rec["workloadGroup"]["rendered"]
    assert any("alone would be in PodGroup" in n and GROUP in n for n in rec["notes"])
    gated = invalid.get(f"/pods/{NS}/{pod}").json()
    assert gated["podGroup"] == pg and gated["subGroup"] is None and not gated["workloadGroup"]["rendered"]
    # the rendered PodGroup's record lists the group's pods, each in the leaf it carries
    detail = rendered.get(f"/podgroups/{NS}/{pg}").json()
    leaf = next(s for s in detail["subGroups"] if s["name"] == rec["subGroup"])
    assert pod in leaf["pods"] and detail["workload"]["kind"] == wg.KIND


def test_a_workload_not_in_a_group_has_no_group() -> None:
    """Without the WorkloadGroup object the annotation is not honoured: no group named, its own gang."""
    state = world()
    lookups = state.objects
    assert isinstance(lookups, InMemoryLookups)
    state.objects = InMemoryLookups([x for x in lookups.objects() if x.get("kind") != wg.KIND])
    with TestClient(create_app(state)) as c:
        row = rows(c)["Deployment/llm-chat"]
    assert row.get("workloadGroup") is None and row["gangs"] == []


def test_the_web_view_says_member_of_the_group_with_its_reasons(rendered: TestClient, invalid: TestClient) -> None:
    page = rendered.get(f"/ui/fragments/workloads/{NS}/Deployment/llm-chat")
    assert page.status_code == 200, page.text
    body = page.text
    assert f"Member of WorkloadGroup {GROUP} (3 of 3 members)" in body
    assert f'data-podgroup="{rendered_name(NS, GROUP)}"' in body and html.escape(UNSCHEDULABLE) in body
    assert 'data-state="Waiting"' in body
    bad = invalid.get(f"/ui/fragments/workloads/{NS}/Deployment/llm-chat").text
    assert f"Member of WorkloadGroup {GROUP}" in bad and 'data-state="Error"' in bad
    assert 'data-condition="InputsResolved" data-status="False"' in bad and "different queues" in bad
    listing = invalid.get("/ui/fragments/workloads", params={"namespace": NS}).text
    assert f"WorkloadGroup {GROUP}: " in listing and "different queues" in listing


def test_explain_from_a_grouper_says_the_pod_is_held_for_the_group(capsys: pytest.CaptureFixture[str]) -> None:
    """``grouper explain --server``: a member's pod belongs to the group's PodGroup (its leaf), held for the
    group; with the group invalid, it waits on the gate and the group's reason is printed."""
    from cli.test_get_explain import ServedApp

    from grouper.cli.main import main

    pod, pg = "llm-chat-7d9c8b6f5d-2xk9p", rendered_name(NS, GROUP)
    with ServedApp(world()) as url:
        assert main(["explain", pod, "-n", NS, "--server", url]) == 0
    out = capsys.readouterr().out
    first, second = out.splitlines()[:2]
    assert first.startswith(f"Pod {NS}/{pod} belongs to PodGroup {pg}, sub-group llm-chat-"), out
    assert second == (f"It is held for WorkloadGroup {GROUP}: its workload is a member of WorkloadGroup {GROUP} "
                      f"(3 of 3 workloads): its gang is the group's PodGroup {pg}."), out
    assert f"PodGroup {pg} needs 3 of its sub-groups (minSubGroup); 3 sub-groups present." in out
    with ServedApp(world(invalid=True)) as url:
        assert main(["explain", pod, "-n", NS, "--server", url]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Pod {NS}/{pod} is held for WorkloadGroup {GROUP}: it names PodGroup {pg}, which is not "
                          "written while the group is not complete and valid, so the scheduler does not schedule it "
                          "(the gate)."), out
    assert "  InputsResolved=False (InvalidInputs): " in out and "different queues" in out
