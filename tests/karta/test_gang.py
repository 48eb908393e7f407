"""Gang instructions beyond KAI's table: errors, sub-group membership, alpha member selection and
our once-per-group-key minMember (karta.md §3.5, §3.9, §7.6)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from grouper.karta import Evaluator, KartaDefinition, KartaEvalError, apply_gang
from grouper.karta.gang import dns1123_subdomain_errors, member_candidates
from grouper.model.podgroup import PodGroupMetadata, SubGroup, TopologyConstraint
from tests.karta.fixtures import base_metadata, defn, karta

Obj = dict[str, Any]
ROOT = {
    "name": "app",
    "kind": {"group": "x.io", "version": "v1", "kind": "App"},
    "statusDefinition": {"statusMappings": {}},
}
TOP: Obj = {
    "apiVersion": "x.io/v1",
    "kind": "App",
    "metadata": {"name": "app", "namespace": "ns", "uid": "u1"},
    "spec": {"a": 2, "b": 3, "g": [{"n": "x", "r": 1}, {"n": "y", "r": 4}]},
}


def comp(
    name: str, owner: str = "app", *, role: str | None = None, replicas: str | None = None, **extra: Any
) -> Obj:
    c: Obj = {"name": name, "ownerRef": owner, **extra}
    if role is not None:
        c.setdefault("specDefinition", {"podSpecPath": f".spec.{name}"})
        c["podSelector"] = {
            **c.get("podSelector", {}),
            "componentTypeSelector": {"keyPath": ".metadata.labels.role", "value": role},
        }
    if replicas is not None:
        c["scaleDefinition"] = {"replicasPath": replicas}
    return c


def pod(labels: dict[str, str], name: str = "p1") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "labels": labels},
    }


def run(d: KartaDefinition, p: Obj, top: Obj = TOP) -> PodGroupMetadata:
    out = apply_gang(d, Evaluator(d), top, p, base_metadata(top))
    assert out is not None
    return out


# ---------------------------------------------------------------- v2


def test_v2_zero_scale_sub_group_is_an_error() -> None:
    d = defn(
        karta(
            "k",
            ROOT,
            [comp("a", role="a", replicas="0")],
            {"podGroup": {"name": "g", "subGroups": [{"componentName": "a"}]}},
        )
    )
    # upstream: "component a must expose a replica scale definition"; ours names the values
    with pytest.raises(
        KartaEvalError,
        match=r"sub-group a has no pods to wait for: its scale is 0 \(component a: replicas 0 \(expression '0'\)\)",
    ):
        run(d, pod({"role": "a"}))


def test_v2_runtime_checks_for_unvalidated_definitions() -> None:
    d = defn(
        karta(
            "k",
            ROOT,
            [comp("a", role="a", replicas="1")],
            {"podGroup": {"name": "g", "subGroups": [{"componentName": "zz"}]}},
        )
    )
    with pytest.raises(KartaEvalError, match="component zz not found"):
        run(d, pod({"role": "a"}))
    d = defn(
        karta(
            "k",
            ROOT,
            [comp("a", role="a", replicas="1")],
            {"podGroup": {"name": "g", "subGroups": [{"componentName": ""}]}},
        )
    )
    with pytest.raises(KartaEvalError, match="subgroup component name cannot be empty"):
        run(d, pod({"role": "a"}))
    d = defn(
        karta(
            "k",
            ROOT,
            [comp("a", role="a", replicas="1")],
            {"podGroup": {"name": "g", "topology": {"topologyName": "t"}}},
        )
    )
    with pytest.raises(
        KartaEvalError, match="topology constraint must include preferred or required topology level"
    ):
        run(d, pod({"role": "a"}))


def test_v2_sub_group_membership_through_descendants() -> None:
    """A grouping component without a selector contains the pod when a descendant's selector matches."""
    d = defn(
        karta(
            "k",
            ROOT,
            [
                comp("grp", replicas=".spec.a"),
                comp("leaf", "grp", role="l", replicas=".spec.b"),
                comp("other", role="o", replicas="1"),
            ],
            {"podGroup": {"name": "g", "subGroups": [{"componentName": "grp"}, {"componentName": "other"}]}},
        )
    )
    pg = run(d, pod({"role": "l"}))
    assert [(s.name, s.min_member, s.pods) for s in pg.sub_groups] == [("grp", 6, ["p1"]), ("other", 1, [])]
    assert pg.sub_group_of("p1") == "grp"
    pg = run(d, pod({"role": "nobody"}))
    assert all(s.pods == [] for s in pg.sub_groups)


def test_v2_topology_overrides_base() -> None:
    d = defn(
        karta(
            "k",
            ROOT,
            [comp("a", role="a", replicas="1")],
            {"podGroup": {"name": "g", "topology": {"topologyName": "t", "requiredTopologyLevel": "zone"}}},
        )
    )
    top = TOP
    base = base_metadata(top)
    base.topology.topology = "from-annotation"
    out = apply_gang(d, Evaluator(d), top, pod({"role": "a"}), base)
    assert out is not None and (
        out.topology.topology,
        out.topology.required_level,
        out.topology.preferred_level,
    ) == ("t", "zone", "")
    assert base.topology.topology == "from-annotation"


# ---------------------------------------------------------------- alpha


def alpha(children: list[Obj], groups: list[Obj]) -> KartaDefinition:
    return defn(karta("k", ROOT, children, {"podGroups": groups}))


def test_member_candidates_direct_first_then_ancestors_nearest_first() -> None:
    d = alpha(
        [comp("mid"), comp("leaf", "mid", role="l")],
        [
            {"name": "g1", "members": [{"componentName": "app"}, {"componentName": "mid"}]},
            {"name": "g2", "members": [{"componentName": "leaf"}]},
        ],
    )
    leaf = d.component("leaf")
    assert leaf is not None
    assert [(c.group.name, c.member.component_name) for c in member_candidates(d, leaf)] == [
        ("g2", "leaf"),
        ("g1", "mid"),
        ("g1", "app"),
    ]


def test_filters_pick_the_effective_member() -> None:
    d = alpha(
        [comp("a", role="a", replicas=".spec.a"), comp("b", role="b", replicas=".spec.b")],
        [
            {
                "name": "g",
                "members": [
                    {
                        "componentName": "a",
                        "filters": ['.metadata.labels.tier == "gold"'],
                        "groupByKeyPaths": [".metadata.labels.k"],
                    },
                    {"componentName": "app", "groupByKeyPaths": ['"all"']},
                ],
            }
        ],
    )
    gold = run(d, pod({"role": "a", "tier": "gold", "k": "kk"}))
    assert gold.name == "pg-u1-kk" and gold.min_member == 2  # app's key "all" differs: not a co-member
    plain = run(d, pod({"role": "a", "tier": "silver"}))
    assert plain.name == "pg-u1-all" and plain.min_member == 5  # effective member is the root


def test_no_group_keys_gives_uid_only_name_without_dns_check() -> None:
    d = alpha([comp("a", role="a", replicas=".spec.a")], [{"name": "g", "members": [{"componentName": "a"}]}])
    assert run(d, pod({"role": "a"})).name == "pg-u1"


def test_instance_scoping_only_when_keys_split_by_instance() -> None:
    inst: Obj = {
        "instanceIdPath": ".spec.g[].n",
        "podSelector": {"componentInstanceSelector": {"idPath": ".metadata.labels.inst"}},
        "specDefinition": {"podSpecPath": ".spec.g[]"},
        "scaleDefinition": {"replicasPath": ".spec.g[].r"},
    }
    per_instance = alpha(
        [comp("w", **inst)],
        [{"name": "g", "members": [{"componentName": "w", "groupByKeyPaths": [".metadata.labels.inst"]}]}],
    )
    pg = run(per_instance, pod({"inst": "y"}))
    assert (pg.name, pg.min_member) == ("pg-u1-y", 4)
    whole = alpha(
        [comp("w", **inst)],
        [{"name": "g", "members": [{"componentName": "w", "groupByKeyPaths": [".metadata.labels.app"]}]}],
    )
    for i in ("x", "y"):
        pg = run(whole, pod({"inst": i, "app": "app"}))
        assert (pg.name, pg.min_member) == ("pg-u1-app", 5)  # upstream: 1 for x pods, 4 for y pods


def test_nested_co_members_not_counted_twice() -> None:
    d = alpha(
        [comp("grp", replicas="1"), comp("leaf", "grp", role="l", replicas=".spec.b")],
        [
            {
                "name": "g",
                "members": [
                    {"componentName": "leaf", "groupByKeyPaths": ['"k"']},
                    {"componentName": "grp", "groupByKeyPaths": ['"k"']},
                ],
            }
        ],
    )
    pg = run(d, pod({"role": "l"}))
    assert pg.min_member == 3  # S(grp) = 1 x 3, not S(leaf) + S(grp)
    assert pg.provenance["minMember"] == "Karta k: sum of subtree scales of grp (podGroups[g])"


def test_co_member_with_failing_key_is_not_counted() -> None:
    d = alpha(
        [comp("a", role="a", replicas=".spec.a"), comp("b", role="b", replicas=".spec.b")],
        [
            {
                "name": "g",
                "members": [
                    {"componentName": "a", "groupByKeyPaths": [".metadata.labels.k"]},
                    {"componentName": "b", "groupByKeyPaths": [".metadata.labels.kb"]},
                ],
            }
        ],
    )
    assert run(d, pod({"role": "a", "k": "x"})).min_member == 2


def test_group_key_errors_propagate() -> None:
    d = alpha(
        [comp("a", role="a", replicas=".spec.a")],
        [{"name": "g", "members": [{"componentName": "a", "groupByKeyPaths": [".metadata.labels.k"]}]}],
    )
    with pytest.raises(KartaEvalError, match="query result is empty"):
        run(d, pod({"role": "a"}))


def test_dns1123_subdomain_rules() -> None:
    assert dns1123_subdomain_errors("pg-u1-a.b") == []
    assert dns1123_subdomain_errors("pg-" + "a" * 251) == ["must be no more than 253 characters"]
    assert len(dns1123_subdomain_errors("Pg")) == 1
    assert (
        dns1123_subdomain_errors("-a") and dns1123_subdomain_errors("a-") and dns1123_subdomain_errors("a..b")
    )


def test_apply_gang_leaves_the_base_metadata_as_it_was() -> None:
    """The Karta plugin edits a copy of the default grouper's answer: the base (with sub-groups, pods,
    labels and a topology, as a caller might hand in) is equal to a snapshot taken before, deeply."""
    d = alpha([comp("w", role="w", replicas=".spec.a")], [{"name": "g", "members": [{"componentName": "w"}]}])
    base = base_metadata(TOP)
    base.labels["l"] = "1"
    base.provenance["queue"] = "q"
    base.sub_groups = [SubGroup("s", min_member=1, topology=TopologyConstraint("t", "rack"), pods=["p0"])]
    base.warnings.append("w")
    before = copy.deepcopy(base)
    out = apply_gang(d, Evaluator(d), TOP, pod({"role": "w"}), base)
    assert out is not None and out.min_member == 2 and out.sub_groups == []
    assert base == before


def test_edit_copy_shares_nothing_mutable() -> None:
    base = base_metadata(TOP)
    base.sub_groups = [SubGroup("s", topology=TopologyConstraint("t"), pods=["p0"]), SubGroup("u")]
    c = base.edit_copy()
    assert c == base
    c.labels["x"] = c.annotations["x"] = c.provenance["x"] = "1"
    c.warnings.append("x")
    c.topology.topology = "changed"
    c.sub_groups[0].pods.append("p1")
    assert c.sub_groups[0].topology is not None
    c.sub_groups[0].topology.required_level = "zone"
    c.sub_groups.append(SubGroup("v"))
    assert "x" not in base.labels and "x" not in base.annotations and "x" not in base.provenance
    assert base.warnings == [] and base.topology.topology != "changed"
    assert base.sub_groups[0].pods == ["p0"] and base.sub_groups[0].topology == TopologyConstraint("t")
    assert [sg.name for sg in base.sub_groups] == ["s", "u"]
