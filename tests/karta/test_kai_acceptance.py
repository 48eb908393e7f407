"""kai-podgrouper.md §5.1: KAI's Karta grouper and hub tests, case by case (named after upstream).

The default grouper is not under test here: ``base_metadata`` builds the PodGroup it would
produce (name ``pg-pyflow-example-<uid>``, minMember 1)."""

from __future__ import annotations

from typing import Any

import pytest

from grouper.karta import DefinitionRegistry, Evaluator, KartaEvalError, apply_gang
from grouper.model.objects import GVK
from grouper.model.podgroup import PodGroupMetadata, TopologyConstraint
from tests.karta.fixtures import PYFLOW_UID, base_metadata, defn, pyflow_karta, pyflow_object, pyflow_pod

WORKER_TOPOLOGY = {
    "topologyName": "gpu-topology",
    "preferredTopologyLevel": "host",
    "requiredTopologyLevel": "rack",
}
PG_TOPOLOGY = {
    "topologyName": "rack-topology",
    "preferredTopologyLevel": "rack",
    "requiredTopologyLevel": "zone",
}
PYFLOW_GVK = GVK("jobs.example.com", "v1", "PyFlow")


def group(
    gang: dict[str, Any] | None,
    pod_role: str = "worker",
    *,
    obj: dict[str, Any] | None = None,
    with_spec: bool = True,
    job_name: str = "pyflow-example",
) -> tuple[PodGroupMetadata | None, PodGroupMetadata]:
    d = defn(pyflow_karta(gang, with_spec=with_spec))
    top = obj or pyflow_object()
    base = base_metadata(top)
    return apply_gang(d, Evaluator(d), top, pyflow_pod(pod_role, job_name), base), base


def test_PodGroupV2() -> None:
    pg, base = group(
        {
            "podGroup": {
                "name": "training",
                "topology": PG_TOPOLOGY,
                "subGroups": [
                    {"componentName": "master"},
                    {"componentName": "worker", "topology": WORKER_TOPOLOGY},
                ],
            }
        }
    )
    assert pg is not None
    assert pg.name == f"pg-{PYFLOW_UID}-training"
    assert pg.topology == TopologyConstraint("rack-topology", required_level="zone", preferred_level="rack")
    assert (pg.min_sub_group, pg.min_member) == (2, None)
    master, worker = pg.sub_groups
    assert (master.name, master.min_member, master.pods, master.topology) == ("master", 1, [], None)
    assert (worker.name, worker.min_member, worker.pods) == ("worker", 2, ["pyflow-pod"])
    assert worker.topology == TopologyConstraint(
        "gpu-topology", required_level="rack", preferred_level="host"
    )
    # default-grouper fields survive; the base object is not modified
    assert (pg.queue, pg.priority_class_name, pg.owner) == (base.queue, base.priority_class_name, base.owner)
    assert base.name == f"pg-pyflow-example-{PYFLOW_UID}" and base.min_member == 1 and base.sub_groups == []
    assert pg.spec()["minSubGroup"] == 2 and "minMember" not in pg.spec()


@pytest.mark.parametrize("role", ["master", "worker"])
def test_PodGroupV2WithoutSubGroups(role: str) -> None:
    pg, _ = group({"podGroup": {"name": "training"}}, role, obj=pyflow_object(master=1, worker=1))
    assert pg is not None
    assert (pg.name, pg.min_member, pg.min_sub_group, pg.sub_groups) == (
        f"pg-{PYFLOW_UID}-training",
        2,
        None,
        [],
    )


def test_PodGroupV2DoesNotRequireSpecDefinition() -> None:
    pg, _ = group(
        {
            "podGroup": {
                "name": "training",
                "subGroups": [{"componentName": "master"}, {"componentName": "worker"}],
            }
        },
        with_spec=False,
    )
    assert pg is not None
    assert pg.name == f"pg-{PYFLOW_UID}-training"
    assert [(s.name, s.pods) for s in pg.sub_groups] == [("master", []), ("worker", ["pyflow-pod"])]


def test_PodGroupV2TakesPrecedenceOverAlphaPodGroups() -> None:
    pg, _ = group(
        {
            "podGroups": [{"name": "alpha", "members": [{"componentName": "pyflow"}]}],
            "podGroup": {"name": "v2", "subGroups": [{"componentName": "worker"}]},
        }
    )
    assert pg is not None
    assert pg.name == f"pg-{PYFLOW_UID}-v2"
    assert len(pg.sub_groups) == 1 and pg.min_sub_group == 1


def test_AlphaPodGroups() -> None:
    pg, _ = group(
        {
            "podGroups": [
                {
                    "name": "job",
                    "members": [
                        {"componentName": "pyflow", "groupByKeyPaths": ['.metadata.labels["job-name"]']}
                    ],
                }
            ]
        }
    )
    assert pg is not None
    assert (pg.min_member, pg.min_sub_group, pg.sub_groups) == (3, None, [])
    assert pg.name == f"pg-{PYFLOW_UID}-pyflow-example"
    assert pg.provenance["minMember"].startswith("Karta pyflow: ")


def test_AlphaPodGroupsFailsWhenGroupingKeysProduceInvalidName() -> None:
    with pytest.raises(KartaEvalError) as e:
        group(
            {
                "podGroups": [
                    {
                        "name": "job",
                        "members": [
                            {"componentName": "pyflow", "groupByKeyPaths": ['.metadata.labels["job-name"]']}
                        ],
                    }
                ]
            },
            job_name="Invalid_Name",
        )
    assert "Karta grouping keys [Invalid_Name] produce invalid Kubernetes PodGroup name" in str(e.value)
    assert "a lowercase RFC 1123 subdomain" in str(e.value)
    assert e.value.reason == "KartaError"


def test_AlphaPodGroupsFailsWhenPodDoesNotMatchAnyMember() -> None:
    with pytest.raises(KartaEvalError, match="does not match any Karta pod group member definition"):
        group(
            {
                "podGroups": [
                    {
                        "name": "job",
                        "members": [
                            {"componentName": "pyflow", "filters": ['.metadata.labels.role == "master"']}
                        ],
                    }
                ]
            }
        )


def test_WithoutGangSchedulingFallsBackToDefaultGrouper() -> None:
    pg, base = group(None)
    assert pg is None  # the caller keeps the default grouper's answer unchanged
    assert base.name == f"pg-pyflow-example-{PYFLOW_UID}"


# ---------------------------------------------------------------- hub_test.go (registry)

GANG = {"podGroup": {"name": "training"}}


def cluster_obj(name: str, gang: dict[str, Any] | None = GANG, **meta: Any) -> dict[str, Any]:
    obj = pyflow_karta(gang)
    obj["metadata"] = {"name": name, **meta}
    return obj


def test_hub_no_karta() -> None:
    r = DefinitionRegistry().resolve(PYFLOW_GVK)
    assert (r.definition, r.error) == (None, None)


def test_hub_karta_found() -> None:
    reg = DefinitionRegistry()
    reg.upsert_cluster_object(cluster_obj("pyflow"))
    r = reg.resolve(PYFLOW_GVK)
    assert r.definition is not None and r.definition.name == "pyflow" and r.error is None
    assert r.definition.origin == "cluster:Karta/pyflow"


def test_hub_multiple_kartas_for_gvk() -> None:
    reg = DefinitionRegistry()
    reg.upsert_cluster_object(cluster_obj("b"))
    reg.upsert_cluster_object(cluster_obj("a"))
    r = reg.resolve(PYFLOW_GVK)
    assert r.definition is None
    assert r.error == f"found multiple Kartas with gang scheduling instructions for {PYFLOW_GVK}: a, b"


def test_hub_no_gang_instructions() -> None:
    reg = DefinitionRegistry()
    reg.upsert_cluster_object(cluster_obj("pyflow", gang=None))
    r = reg.resolve(PYFLOW_GVK)
    assert (r.definition, r.error) == (None, None)
    assert r.skipped == {"pyflow": "no gang scheduling instructions"}


def test_hub_invalid_karta_skipped_and_does_not_block_valid_one() -> None:
    reg = DefinitionRegistry()
    bad = cluster_obj("bad")
    bad["spec"]["structureDefinition"]["childComponents"][0]["scaleDefinition"]["replicasPath"] = ".a |= 1"
    reg.upsert_cluster_object(bad)
    reg.upsert_cluster_object(cluster_obj("good"))
    r = reg.resolve(PYFLOW_GVK)
    assert r.definition is not None and r.definition.name == "good"
    assert "modifying operator '|=' is not allowed" in r.skipped["bad"]


def test_hub_deleting_karta_ignored() -> None:
    reg = DefinitionRegistry()
    reg.upsert_cluster_object(cluster_obj("gone", deletionTimestamp="2026-01-01T00:00:00Z"))
    r = reg.resolve(PYFLOW_GVK)
    assert r.definition is None and r.skipped == {"gone": "being deleted"}


def test_hub_exact_version_match() -> None:
    reg = DefinitionRegistry()
    reg.upsert_cluster_object(cluster_obj("pyflow"))
    assert reg.resolve(GVK("jobs.example.com", "v2", "PyFlow")).definition is None
    assert reg.resolve(GVK("jobs.example.com", "*", "PyFlow")).definition is None
