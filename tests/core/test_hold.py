"""The hold rule's pure parts (grouper/core/hold.py): the source a Karta PodGroup records, what counts as a
weaker gang, and when a stored PodGroup is held."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from grouper.core.decision import Decision
from grouper.core.hold import (
    DEFINITION_ANNOTATION,
    GENERATION_ANNOTATION,
    HELD_ANNOTATION,
    Gang,
    Held,
    hold_of,
    made_by_definition,
    replan,
    say_held,
    source_of,
    unchanged_source,
    weakenings,
)
from grouper.core.plan import plan
from grouper.karta import DefinitionRegistry, from_object
from grouper.model.podgroup import POD_GROUP_ANNOTATION, SUBGROUP_LABEL, OwnerRef, PodGroupMetadata, SubGroup
from grouper.runtime.composition import build_grouper

REPO = Path(__file__).resolve().parents[2]
KARTA = yaml.safe_load((REPO / "examples" / "batchling-karta.yaml").read_text())
BATCHLING = [d for d in yaml.safe_load_all((REPO / "examples" / "custom-batchling.yaml").read_text())]
OWNER = OwnerRef("example.com/v1", "Batchling", "sim-sweep", "u1")


def gang_pg(source: str, generation: str = "3") -> dict[str, Any]:
    return {
        "metadata": {
            "name": "pg-u1-batchling", "namespace": "ns",
            "annotations": {DEFINITION_ANNOTATION: source, GENERATION_ANNOTATION: generation},
        },
        "spec": {"minSubGroup": 2, "subGroups": [{"name": "coordinator", "minMember": 1},
                                                 {"name": "worker", "minMember": 3}]},
    }


def default_md() -> PodGroupMetadata:
    return PodGroupMetadata("pg-sim-sweep-u1", "ns", OWNER)  # the default grouper: minMember 1


def test_karta_podgroup_records_its_definition_and_the_workload_generation() -> None:
    registry = DefinitionRegistry(None)
    registry.upsert_cluster_object(KARTA)
    workload = {**BATCHLING[0], "metadata": {**BATCHLING[0]["metadata"], "generation": 7}}
    result = plan([workload, *BATCHLING[1:]], build_grouper(definitions=registry))
    [pg] = result.pod_groups
    ann = pg.metadata.annotations
    loaded = registry.get(KARTA["metadata"]["name"])
    assert loaded is not None
    assert ann[DEFINITION_ANNOTATION] == source_of(loaded.definition)
    assert ann[GENERATION_ANNOTATION] == "7"
    # the digest is of the spec: labels or a resourceVersion do not change it, a spec change does
    relabelled = from_object({**KARTA, "metadata": {**KARTA["metadata"], "resourceVersion": "9"}}, "x")
    assert source_of(relabelled) == source_of(loaded.definition)
    spec = yaml.safe_load(yaml.safe_dump(KARTA["spec"]))
    spec["optimizationInstructions"]["gangScheduling"]["podGroup"]["subGroups"].pop()
    assert source_of(from_object({**KARTA, "spec": spec}, "x")) != source_of(loaded.definition)


def test_weaker_gangs() -> None:
    batchling = Gang(0, 2, {"coordinator": 1, "worker": 3})
    assert weakenings(batchling, Gang(1, 0, {})) == ["minSubGroup 2 -> 0", "sub-groups 2 -> 0"]
    assert weakenings(batchling, Gang(0, 2, {"coordinator": 1, "worker": 2})) == ["sub-group worker minimum 3 -> 2"]
    assert weakenings(batchling, Gang(0, 2, {"coordinator": 1, "worker": 5})) == []  # stronger
    assert weakenings(Gang(4), Gang(3)) == ["minMember 4 -> 3"]
    assert weakenings(Gang(4), Gang(4)) == []
    assert Gang.of_spec(gang_pg("x")["spec"]) == batchling
    md = PodGroupMetadata("pg", "ns", OWNER, min_member=None, min_sub_group=1, sub_groups=[SubGroup("a", min_member=2)])
    assert Gang.of(md) == Gang(0, 1, {"a": 2})


def test_hold_of() -> None:
    gone = {}.get  # no definition loaded any more
    stored = gang_pg("example-com-batchling-v1@abc")
    hold = hold_of(stored, [default_md()], generation="3", current=gone)
    assert hold is not None and hold.change == "deleted" and hold.pod_group == "pg-u1-batchling"
    assert hold.message == (
        "held: definition example-com-batchling-v1 deleted would weaken the gang of PodGroup pg-u1-batchling "
        "from minSubGroup 2, sub-groups coordinator=1, worker=3 to minMember 1, no sub-groups "
        "(minSubGroup 2 -> 0; sub-groups 2 -> 0); kept until the workload changes"
    )
    changed = {"example-com-batchling-v1": "example-com-batchling-v1@def"}.get
    hold = hold_of(stored, [default_md()], generation="3", current=changed)
    assert hold is not None and hold.change == "changed"
    # the workload changed since (another generation, or none to compare): the new decision applies
    assert hold_of(stored, [default_md()], generation="4", current=gone) is None
    assert hold_of(stored, [default_md()], generation=None, current=gone) is None
    # a PodGroup without a recorded source (native plugin, default grouper, written before the rule)
    plain = {"metadata": {"name": "pg"}, "spec": {"minMember": 4}}
    assert hold_of(plain, [default_md()], generation="3", current=gone) is None
    # a stronger or equal gang applies as today
    strong = PodGroupMetadata("pg-x", "ns", OWNER, min_member=None, min_sub_group=2,
                              sub_groups=[SubGroup("coordinator", 1), SubGroup("worker", 4)])
    assert hold_of(stored, [strong], generation="3", current=gone) is None
    # the same definition deciding again: its own answer stands, whatever it is
    same = default_md()
    same.annotations[DEFINITION_ANNOTATION] = "example-com-batchling-v1@abc"
    assert hold_of(stored, [same], generation="3", current=gone) is None


class Planned:
    def __init__(self, md: PodGroupMetadata, pods: list[str]) -> None:
        self.metadata, self.pods = md, pods


def test_unchanged_source_is_the_steady_state() -> None:
    stored = gang_pg("example-com-batchling-v1@abc")
    same = PodGroupMetadata("pg-u1-batchling", "ns", OWNER)
    same.annotations[DEFINITION_ANNOTATION] = "example-com-batchling-v1@abc"
    assert unchanged_source(stored, {"pg-u1-batchling": Planned(same, [])})
    assert not unchanged_source(stored, {}), "not planned again"
    other = PodGroupMetadata("pg-u1-batchling", "ns", OWNER)
    other.annotations[DEFINITION_ANNOTATION] = "example-com-batchling-v1@def"
    assert not unchanged_source(stored, {"pg-u1-batchling": Planned(other, [])}), "another definition decided"
    marked = gang_pg("example-com-batchling-v1@abc")
    marked["metadata"]["annotations"][HELD_ANNOTATION] = "held: ..."
    assert not unchanged_source(marked, {"pg-u1-batchling": Planned(same, [])}), "marked held: looked at again"


def test_replan_sends_the_replacing_groups_pods_back_to_the_held_podgroup() -> None:
    stored = gang_pg("example-com-batchling-v1@abc")
    hold = hold_of(stored, [default_md()], generation="3", current={}.get)
    assert hold is not None
    new = Planned(default_md(), ["in-it", "new-worker", "new-other", "unseen"])
    keep = Planned(PodGroupMetadata("pg-other", "ns", OWNER), ["x"])
    groups = [new, keep]
    placement: dict[str, tuple[str, str | None]] = {
        "in-it": ("pg-sim-sweep-u1", None), "new-worker": ("pg-sim-sweep-u1", "worker"),
        "new-other": ("pg-sim-sweep-u1", "gpu"), "x": ("pg-other", None),
    }
    pods = {"in-it": {"metadata": {"name": "in-it", "annotations": {POD_GROUP_ANNOTATION: "pg-u1-batchling"},
                                   "labels": {SUBGROUP_LABEL: "coordinator"}}}}
    held = Held()
    replan(stored, hold, [new], groups, placement, pods.get, held)
    assert groups == [keep], "the replacing PodGroup is not written"
    assert placement == {
        "in-it": ("pg-u1-batchling", "coordinator"),  # already in it: as it is
        "new-worker": ("pg-u1-batchling", "worker"),  # a sub-group of that name exists: kept
        "new-other": ("pg-u1-batchling", None),  # none of that name: no sub-group
        "x": ("pg-other", None),
    }, "a pod not looked at in this pass (unseen) stays where the last pass put it"
    assert set(held.pods) == {"in-it", "new-worker", "new-other", "unseen"} and held.pods["unseen"] is hold


def test_say_held_tells_where_the_pod_is_and_why() -> None:
    stored = gang_pg("example-com-batchling-v1@abc")
    hold = hold_of(stored, [default_md()], generation="3", current={}.get)
    assert hold is not None
    d = Decision("ns", "w-0", "u", "grouped", "Grouped", pod_group=default_md())
    say_held(d, hold, ("pg-u1-batchling", "worker"))
    assert d.pod_group is not None and (d.pod_group.name, d.sub_group) == ("pg-u1-batchling", "worker")
    assert d.reason == "Held" and d.message == f"PodGroup pg-u1-batchling {hold.message}"
    assert d.notes == [f"{hold.message}; the new decision would be PodGroup pg-sim-sweep-u1"]


def test_made_by_definition_names_the_owner_kind_of_a_karta_podgroup() -> None:
    owner = {"apiVersion": "example.com/v1", "kind": "Batchling", "name": "sim-sweep", "uid": "u1"}
    pg = gang_pg("example-com-batchling-v1@abc")
    pg["metadata"]["ownerReferences"] = [owner]
    assert made_by_definition(pg) == ("example.com", "Batchling")
    pg["metadata"]["ownerReferences"] = [{**owner, "apiVersion": "v1", "kind": "Pod"}]
    assert made_by_definition(pg) is None, "a per-pod PodGroup: no owner kind to keep walkable"
    assert made_by_definition({"metadata": {"ownerReferences": [owner]}}) is None, "no definition recorded"
