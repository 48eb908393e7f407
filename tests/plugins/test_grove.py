"""Grove grouper (KAI ``grove_grouper_test.go``): PodGang → PodGroup with parent/leaf sub-groups."""

from __future__ import annotations

from typing import Any

import pytest
from builders import context, obj, owner, pod

from grouper.model.errors import InvalidWorkload, OwnerNotFound
from grouper.model.podgroup import OwnerRef, TopologyConstraint
from grouper.plugins.grove import GroveGrouper

NS = "test-ns"


def gang(spec: dict[str, Any], *, annotations: dict[str, str] | None = None,
         labels: dict[str, str] | None = None) -> dict:
    return obj("scheduler.grove.io/v1alpha1", "PodGang", "pgs-0", namespace=NS, uid="gang-uid", spec=spec,
               annotations=annotations, labels=labels)


def leaf(name: str, min_replicas: Any, pods: list[str], **extra: Any) -> dict:
    return {"name": name, "minReplicas": min_replicas,
            "podReferences": [{"namespace": NS, "name": p} for p in pods], **extra}


def pcs(**kw: Any) -> dict:
    return owner("PodCliqueSet", "grove.io/v1alpha1", "pcs", namespace=NS, uid="pcs-uid", **kw)


def run(spec: dict[str, Any], *, the_pod: dict | None = None, top: dict | None = None, **gang_kw: Any) -> Any:
    p = the_pod or pod("worker-0", namespace=NS, labels={"grove.io/podgang": "pgs-0"})
    return GroveGrouper().metadata(context(p, top or pcs(), objects=[gang(spec, **gang_kw)]))


def test_GetPodGroupMetadata() -> None:
    spec = {"priorityClassName": "gang-prio",
            "podgroups": [leaf("prefill", 2, ["p-0", "p-1"]), leaf("decode", 3, ["worker-0", "d-1", "d-2"])]}
    md = run(spec, top=pcs(labels={"kai.scheduler/queue": "q1", "team": "a"}, annotations={"note": "x"}))
    assert md.name == "pg-pgs-0-gang-uid"
    assert md.owner == OwnerRef("scheduler.grove.io/v1alpha1", "PodGang", "pgs-0", "gang-uid")
    assert md.min_member == 5
    assert md.priority_class_name == "gang-prio"
    assert [(s.name, s.min_member, s.parent, s.pods) for s in md.sub_groups] == [
        ("prefill", 2, None, ["p-0", "p-1"]), ("decode", 3, None, ["worker-0", "d-1", "d-2"])]
    assert md.sub_group_of("worker-0") == "decode"
    assert md.labels["team"] == "a" and md.annotations["note"] == "x"  # merged from the PodCliqueSet


def test_WithTopologyHierarchy() -> None:
    spec = {
        "topologyConstraint": {"packConstraint": {"required": "zone", "preferred": "rack"}},
        "topologyConstraintGroupConfigs": [
            {"name": "sg", "podGroupNames": ["a", "b"], "topologyConstraint": {"packConstraint": {"required": "rack"}}},
            {"name": "empty", "podGroupNames": []},
        ],
        "podgroups": [leaf("a", 1, ["x"], topologyConstraint={"packConstraint": {"preferred": "host"}}),
                      leaf("b", 2, ["y"]), leaf("c", 1, ["z"])],
    }
    md = run(spec, annotations={"grove.io/topology-name": "topo"})
    assert md.topology == TopologyConstraint("topo", "zone", "rack")
    shape = [(s.name, s.min_member, s.min_sub_group, s.parent, s.topology) for s in md.sub_groups]
    assert shape == [
        ("sg", None, 2, None, TopologyConstraint("topo", "rack", "")),
        ("a", 1, None, "sg", TopologyConstraint("topo", "", "host")),
        ("b", 2, None, "sg", None),
        ("c", 1, None, None, None),
    ]
    assert md.min_member == 4


def test_SpecOverridesAnnotation_and_WithTopologyAnnotation() -> None:
    spec = {"topologyConstraint": {"packConstraint": {"required": "zone"}}, "podgroups": []}
    md = run(spec, annotations={"grove.io/topology-name": "grove-topo", "kai.scheduler/topology": "kai-topo"})
    assert md.topology.topology == "grove-topo"
    md = run(spec, annotations={"kai.scheduler/topology": "kai-topo"})
    assert md.topology == TopologyConstraint("kai-topo", "zone", "")


def test_MissingTopologyConstraints_levels_without_name() -> None:
    spec = {"topologyConstraint": {"packConstraint": {"required": "zone"}}}
    with pytest.raises(InvalidWorkload) as err:
        run(spec)
    assert str(err.value).startswith("PodGang test-ns/pgs-0: field spec.topologyConstraint.packConstraint: "
                                     "topology levels are set but no topology name is")


def test_top_owner_metadata_overrides() -> None:
    top = pcs(labels={"priorityClassName": "from-label", "kai.scheduler/preemptibility": "non-preemptible"},
              annotations={"kai.scheduler/preemption-delay": "45s", "kai.scheduler/topology": "t",
                           "kai.scheduler/topology-preferred-placement": "rack"})
    md = run({"priorityClassName": "gang-prio", "podgroups": []}, top=top)
    assert (md.priority_class_name, md.preemptibility, md.preemption_delay) == ("from-label", "non-preemptible", "45s")
    assert md.topology == TopologyConstraint("t", "", "rack")
    assert md.provenance["priorityClassName"] == "label priorityClassName on PodCliqueSet test-ns/pcs"


def test_invalid_preemptibility_on_top_owner() -> None:
    with pytest.raises(InvalidWorkload) as err:
        run({}, top=pcs(labels={"kai.scheduler/preemptibility": "sometimes"}))
    assert str(err.value).startswith('PodCliqueSet test-ns/pcs: field metadata.labels["kai.scheduler/preemptibility"]: '
                                     "invalid preemptibility 'sometimes'")


@pytest.mark.parametrize(
    ("bad_leaf", "field", "message"),
    [
        ({"minReplicas": 1, "podReferences": []}, "spec.podgroups[0].name", "missing required field"),
        ({"name": "a", "podReferences": []}, "spec.podgroups[0].minReplicas", "missing required field"),
        ({"name": "a", "minReplicas": 0, "podReferences": []}, "spec.podgroups[0].minReplicas", "must be greater than 0"),
        ({"name": "a", "minReplicas": -1, "podReferences": []}, "spec.podgroups[0].minReplicas", "must be greater than 0"),
        ({"name": "a", "minReplicas": "two", "podReferences": []}, "spec.podgroups[0].minReplicas", "not an integer"),
        ({"name": "a", "minReplicas": 1}, "spec.podgroups[0].podReferences", "missing required field"),
        ({"name": "a", "minReplicas": 1, "podReferences": [{"name": "x"}]}, "spec.podgroups[0].podReferences[0]",
         "needs namespace and name"),
        ({"name": "a", "minReplicas": 1, "podReferences": [{"namespace": "other", "name": "x"}]},
         "spec.podgroups[0].podReferences[0]", "cross-namespace pod reference not allowed"),
        ({"name": 5, "minReplicas": 1, "podReferences": []}, "spec.podgroups[0].name", "expected a string"),
        ("not-a-map", "spec.podgroups[0]", "expected an object"),
    ],
)
def test_ParseGroveSubGroup_errors(bad_leaf: Any, field: str, message: str | None) -> None:
    with pytest.raises(InvalidWorkload) as err:
        run({"podgroups": [bad_leaf]})
    assert f"PodGang test-ns/pgs-0: field {field}: " in str(err.value)
    if message:
        assert message in str(err.value)


def test_InvalidTopologyConstraintGroupConfigsType() -> None:
    with pytest.raises(InvalidWorkload, match=r"field spec\.topologyConstraintGroupConfigs: expected a list"):
        run({"topologyConstraintGroupConfigs": {"name": "x"}})
    with pytest.raises(InvalidWorkload, match=r"spec.topologyConstraintGroupConfigs\[0\].name: missing"):
        run({"topologyConstraintGroupConfigs": [{"podGroupNames": ["a"]}]})


def test_missing_podgang_label_and_object() -> None:
    with pytest.raises(InvalidWorkload, match=r'field metadata.labels\["grove.io/podgang"\]: is missing'):
        run({}, the_pod=pod("w", namespace=NS))
    p = pod("w", namespace=NS, labels={"grove.io/podgang": "other"})
    with pytest.raises(OwnerNotFound, match="PodGang test-ns/other"):
        GroveGrouper().metadata(context(p, pcs()))
    deleting = pod("w", namespace=NS, labels={"grove.io/podgang": "other"}, deleting=True)
    assert GroveGrouper().metadata(context(deleting, pcs())) is None
