"""Ray plugins: KAI's ray_grouper_test.go (reference §5.4), legacy shape, error paths."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from builders import context, obj, pod, podgroup
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grouper.core.config import GroupingConfig
from grouper.core.lookups import InMemoryLookups
from grouper.model.errors import GroupingError, OwnerNotFound
from grouper.model.objects import Obj
from grouper.model.podgroup import PodGroupMetadata
from grouper.plugins.ray import RayGrouper, should_use_sub_groups

NS = "test_namespace"
TOPO = "kai.scheduler/topology"
REQ = "kai.scheduler/topology-required-placement"
PREF = "kai.scheduler/topology-preferred-placement"
GROUP = "ray.io/group"


def cluster(*groups: dict[str, Any], api_version: str = "ray.io/v1alpha1", labels: dict[str, str] | None = None,
            head: dict[str, Any] | None = None, name: str = "test_ray_cluster", uid: str = "1") -> Obj:
    """KAI's fixture: label test_label, annotation test_annotation; groups A (3/min 2) and B (3/min 1)."""
    if not groups:
        groups = ({"replicas": 3, "minReplicas": 2}, {"replicas": 3, "minReplicas": 1})
    return obj(api_version, "RayCluster", name, namespace=NS, uid=uid,
               labels=labels if labels is not None else {"test_label": "test_value"},
               annotations={"test_annotation": "test_value"},
               spec={"headGroupSpec": head or {}, "workerGroupSpecs": [dict(g) for g in groups]})


def top(kind: str, status: dict[str, Any], api_version: str = "ray.io/v1alpha1") -> Obj:
    return obj(api_version, kind, "test_name", namespace=NS, uid="1", labels={"test_label": "test_value"},
               annotations={"test_annotation": "test_value"}, status=status)


def run(kind: str, top_owner: Obj, *objects: Obj, the_pod: Obj | None = None,
        config: GroupingConfig | None = None) -> PodGroupMetadata:
    md = RayGrouper(kind).metadata(context(the_pod or pod("p", namespace=NS), top_owner, objects=objects,
                                           config=config))
    assert md is not None
    return md


def subs(md: PodGroupMetadata) -> list[tuple[str, int | None]]:
    return [(s.name, s.min_member) for s in md.sub_groups]


def common_asserts(md: PodGroupMetadata, kind: str, name: str, labels: int = 1, priority: str = "train",
                   api_version: str = "ray.io/v1alpha1") -> None:
    assert (md.owner.kind, md.owner.api_version, md.owner.uid, md.owner.name) == (kind, api_version, "1", name)
    assert len(md.annotations) == 2 and "kai.scheduler/top-owner-metadata" in md.annotations
    assert len(md.labels) == labels
    assert md.queue == "default-queue"
    assert md.priority_class_name == priority


# ---------------------------------------------------------------- §5.4


def test_RayCluster() -> None:
    c = cluster()
    md = run("RayCluster", c)
    common_asserts(md, "RayCluster", "test_ray_cluster")
    assert md.min_member == 4
    assert md.name == "pg-test_ray_cluster-1"


def test_RayCluster_NonAutoScaling() -> None:
    c = cluster(labels={"test_label": "test_value", "ray.io/priority-class-name": "ray_train_priority_class"})
    md = run("RayCluster", c)
    common_asserts(md, "RayCluster", "test_ray_cluster", labels=2, priority="ray_train_priority_class")
    assert md.min_member == 4
    assert md.provenance["priorityClassName"].startswith("label ray.io/priority-class-name")


def test_RayCluster_SuspendedWorkers() -> None:
    md = run("RayCluster", cluster({"replicas": 3, "minReplicas": 2},
                                   {"suspended": True, "replicas": 3, "minReplicas": 1}))
    common_asserts(md, "RayCluster", "test_ray_cluster")
    assert md.min_member == 3


def test_RayCluster_NumOfHosts() -> None:
    md = run("RayCluster", cluster({"numOfHosts": 2, "replicas": 3, "minReplicas": 2},
                                   {"numOfHosts": 3, "replicas": 3, "minReplicas": 1}))
    common_asserts(md, "RayCluster", "test_ray_cluster")
    assert md.min_member == 8


def test_RayJob() -> None:
    md = run("RayJob", top("RayJob", {"rayClusterName": "test_ray_cluster"}), cluster())
    common_asserts(md, "RayJob", "test_name")
    assert md.min_member == 4
    assert md.name == "pg-test_name-1"


def test_RayJob_v1() -> None:
    md = run("RayJob", top("RayJob", {"rayClusterName": "test_ray_cluster"}, api_version="ray.io/v1"),
             cluster(api_version="ray.io/v1"))
    common_asserts(md, "RayJob", "test_name", api_version="ray.io/v1")
    assert md.min_member == 4


def test_RayService() -> None:
    svc = top("RayService", {"activeServiceStatus": {"rayClusterName": "test_ray_cluster"}})
    c = cluster()
    c["metadata"]["ownerReferences"] = [{"kind": "RayService", "apiVersion": "ray.io/v1alpha1",
                                         "name": "test_name", "uid": "1"}]
    md = run("RayService", svc, c)
    common_asserts(md, "RayService", "test_name")
    assert md.min_member == 4


def test_RayService_PendingCluster() -> None:
    svc = top("RayService", {"activeServiceStatus": {"rayClusterName": ""},
                             "pendingServiceStatus": {"rayClusterName": "test_ray_cluster"}})
    assert run("RayService", svc, cluster()).min_member == 4


def test_SubGroups_Default() -> None:
    md = run("RayCluster", cluster())
    assert md.min_member == 4
    assert subs(md) == [("headgroup", 1), ("worker-group-0", 2), ("worker-group-1", 1)]


def test_SubGroups_NamedWorkerGroups() -> None:
    md = run("RayCluster", cluster({"groupName": "gpu-workers", "replicas": 3, "minReplicas": 2},
                                   {"groupName": "cpu-workers", "replicas": 3, "minReplicas": 1}))
    assert md.min_member == 4
    assert subs(md) == [("headgroup", 1), ("gpu-workers", 2), ("cpu-workers", 1)]


def test_SuspendedWorkers_SubGroups() -> None:
    md = run("RayCluster", cluster({"replicas": 3, "minReplicas": 2},
                                   {"suspended": True, "replicas": 3, "minReplicas": 1}))
    assert md.min_member == 3
    assert subs(md) == [("headgroup", 1), ("worker-group-0", 2)]


def _tmpl(annotations: dict[str, str]) -> dict[str, Any]:
    return {"template": {"metadata": {"annotations": annotations}}}


def test_SubGroups_WithTopologyConstraints() -> None:
    c = cluster(
        {"groupName": "gpu-workers", "replicas": 3, "minReplicas": 2,
         **_tmpl({TOPO: "test-topology", REQ: "zone", PREF: "rack"})},
        {"groupName": "cpu-workers", "replicas": 1, "minReplicas": 1, **_tmpl({TOPO: "test-topology", PREF: "host"})},
        {"groupName": "best-effort-workers", "replicas": 1, "minReplicas": 1, **_tmpl({TOPO: "test-topology"})},
        api_version="ray.io/v1", name="topology_ray_cluster", uid="2",
        head=_tmpl({TOPO: "test-topology", REQ: "rack", PREF: "node"}),
    )
    md = run("RayCluster", c)
    assert len(md.sub_groups) == 4
    got = [(s.name, None if s.topology is None else (s.topology.topology, s.topology.required_level,
                                                       s.topology.preferred_level)) for s in md.sub_groups]
    assert got == [
        ("headgroup", ("test-topology", "rack", "node")),
        ("gpu-workers", ("test-topology", "zone", "rack")),
        ("cpu-workers", ("test-topology", "", "host")),
        ("best-effort-workers", None),
    ]


def test_BackwardsCompatibility_NoPodGroupExists() -> None:
    md = run("RayCluster", cluster())
    assert md.min_member == 4 and len(md.sub_groups) == 3


def test_BackwardsCompatibility_ExistingPodGroupWithoutSubGroups() -> None:
    md = run("RayCluster", cluster(), podgroup("pg-test_ray_cluster-1", namespace=NS))
    assert md.min_member == 4 and md.sub_groups == []
    assert "legacy" in md.provenance["subGroups"]


def test_BackwardsCompatibility_ExistingPodGroupWithSubGroups() -> None:
    existing = podgroup("pg-test_ray_cluster-1", namespace=NS, sub_groups=[
        {"name": "headgroup", "minMember": 1}, {"name": "worker-group-0", "minMember": 2},
        {"name": "worker-group-1", "minMember": 1}])
    md = run("RayCluster", cluster(), existing)
    assert md.min_member == 4 and len(md.sub_groups) == 3


def test_BackwardsCompatibility_DisabledByConfig() -> None:
    md = run("RayCluster", cluster(), podgroup("pg-test_ray_cluster-1", namespace=NS),
             config=GroupingConfig(search_legacy_pg=False))
    assert len(md.sub_groups) == 3


def test_ShouldUseSubGroups_NoPodGroupExists() -> None:
    assert should_use_sub_groups(InMemoryLookups(), "test-ns", "non-existent-pg") is True


def test_ShouldUseSubGroups_PodGroupExistsWithoutSubGroups() -> None:
    assert should_use_sub_groups(InMemoryLookups([podgroup("test-pg", namespace="test-ns")]), "test-ns",
                                 "test-pg") is False


def test_ShouldUseSubGroups_PodGroupExistsWithSubGroups() -> None:
    pg = podgroup("test-pg", namespace="test-ns", sub_groups=[{"name": "headgroup", "minMember": 1}])
    assert should_use_sub_groups(InMemoryLookups([pg]), "test-ns", "test-pg") is True


def test_ShouldUseSubGroups_Forbidden() -> None:
    lookups = InMemoryLookups([podgroup("test-pg", namespace="test-ns")], forbidden=[("scheduling.run.ai", "PodGroup")])
    assert should_use_sub_groups(lookups, "test-ns", "test-pg") is True


# ---------------------------------------------------------------- pod routing


def test_PodRoutedByRayGroupLabel() -> None:
    md = run("RayCluster", cluster(), the_pod=pod("head-pod", namespace=NS, labels={GROUP: "headgroup"}))
    assert md.sub_group_of("head-pod") == "headgroup"
    md = run("RayCluster", cluster(), the_pod=pod("w", namespace=NS, labels={GROUP: "worker-group-1"}))
    assert md.sub_group_of("w") == "worker-group-1"


def test_PodWithUnknownOrMissingGroupJoinsNone() -> None:
    for labels in ({}, {GROUP: "nope"}):
        md = run("RayCluster", cluster(), the_pod=pod("w", namespace=NS, labels=labels))
        assert md.sub_group_of("w") is None and len(md.sub_groups) == 3


def test_PodOfSuspendedGroupJoinsNone() -> None:
    md = run("RayCluster", cluster({"replicas": 1}, {"suspended": True, "replicas": 2}),
             the_pod=pod("w", namespace=NS, labels={GROUP: "worker-group-1"}))
    assert md.sub_group_of("w") is None


# ---------------------------------------------------------------- error paths and other rules


def test_RayJobWithoutClusterName() -> None:
    with pytest.raises(GroupingError, match="ray-operator is up") as err:
        run("RayJob", top("RayJob", {}), cluster())
    assert "RayJob test_namespace/test_name" in str(err.value) and "status.rayClusterName" in str(err.value)


def test_RayServiceWithoutClusterName() -> None:
    with pytest.raises(GroupingError, match="pendingServiceStatus"):
        run("RayService", top("RayService", {"activeServiceStatus": {}}), cluster())


def test_RayJobClusterMissing() -> None:
    with pytest.raises(OwnerNotFound, match="RayCluster test_namespace/other"):
        run("RayJob", top("RayJob", {"rayClusterName": "other"}), cluster())


def test_RayJobClusterMissingWhilePodDeleted() -> None:
    ctx = context(pod("p", namespace=NS, deleting=True), top("RayJob", {"rayClusterName": "gone"}))
    assert RayGrouper("RayJob").metadata(ctx) is None


def test_RayJobClusterForbidden() -> None:
    ctx = context(pod("p", namespace=NS), top("RayJob", {"rayClusterName": "test_ray_cluster"}),
                  the_lookups=InMemoryLookups([cluster()], forbidden=[("ray.io", "RayCluster")]))
    with pytest.raises(GroupingError, match="cannot read RayCluster"):
        RayGrouper("RayJob").metadata(ctx)


def test_MinReplicasAboveReplicas() -> None:
    with pytest.raises(GroupingError, match="can't be less than minReplicas") as err:
        run("RayCluster", cluster({"replicas": 1, "minReplicas": 2}))
    assert re.search(r"spec\.workerGroupSpecs\[0\]\.replicas", str(err.value))


def test_EmptyWorkerGroupsDoNotCount() -> None:
    md = run("RayCluster", cluster({"replicas": 0, "minReplicas": 0}, {"replicas": 2}))
    assert md.min_member == 3
    assert subs(md) == [("headgroup", 1), ("worker-group-1", 2)]


def test_HeadOnlyCluster() -> None:
    c = cluster()
    del c["spec"]["workerGroupSpecs"]
    md = run("RayCluster", c)
    assert md.min_member == 1 and subs(md) == [("headgroup", 1)]


def test_TopologyLevelWithoutName() -> None:
    with pytest.raises(GroupingError, match=re.escape(f'"{TOPO}" is required for workerGroupSpecs.gpu')):
        run("RayCluster", cluster({"groupName": "gpu", "replicas": 1, **_tmpl({REQ: "rack"})}))
    with pytest.raises(GroupingError, match="headGroupSpec"):
        run("RayCluster", cluster(head=_tmpl({PREF: "rack"})))


@pytest.mark.parametrize("group, field", [({"replicas": -1}, "replicas"), ({"replicas": "x"}, "replicas"),
                                          ({"replicas": 1, "numOfHosts": -2}, "numOfHosts"),
                                          ({"replicas": 1, "suspended": "yes"}, "suspended")])
def test_BadWorkerGroupFields(group: dict[str, Any], field: str) -> None:
    with pytest.raises(GroupingError, match=field) as err:
        run("RayCluster", cluster(group))
    assert "RayCluster test_namespace/test_ray_cluster" in str(err.value)


def test_UnknownKind() -> None:
    with pytest.raises(ValueError, match="RayThing"):
        RayGrouper("RayThing")


def test_GrouperNames() -> None:
    assert [RayGrouper(k).name for k in ("RayCluster", "RayJob", "RayService")] == [
        "RayCluster Grouper", "RayJob Grouper", "RayService Grouper"]


# ---------------------------------------------------------------- property test

junk = st.one_of(st.none(), st.booleans(), st.integers(-3, 10), st.text(max_size=3),
                 st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))
counts = st.one_of(st.integers(-1, 6), st.just(2**31), junk)
ann = st.dictionaries(st.sampled_from([TOPO, REQ, PREF]), st.sampled_from(["", "rack", "t"]), max_size=3)


@st.composite
def worker_group(draw: st.DrawFn) -> Any:
    g: dict[str, Any] = {}
    for key, strat in (("replicas", counts), ("minReplicas", counts), ("numOfHosts", counts),
                       ("suspended", st.one_of(st.booleans(), junk)),
                       ("groupName", st.one_of(st.sampled_from(["gpu", "headgroup", ""]), junk))):
        if draw(st.booleans()):
            g[key] = draw(strat)
    if draw(st.booleans()):
        g["template"] = {"metadata": {"annotations": draw(ann)}}
    return draw(junk) if draw(st.integers(0, 12)) == 0 else g


@given(
    kind=st.sampled_from(["RayCluster", "RayJob", "RayService"]),
    groups=st.one_of(st.lists(worker_group(), max_size=4), junk),
    head=st.one_of(st.fixed_dictionaries({"template": st.fixed_dictionaries({"metadata": st.fixed_dictionaries(
        {"annotations": ann})})}), junk),
    status=st.one_of(st.just({"rayClusterName": "c"}),
                     st.just({"activeServiceStatus": {"rayClusterName": "c"}}),
                     st.just({"pendingServiceStatus": {"rayClusterName": "c"}}),
                     st.just({"rayClusterName": "missing"}), st.fixed_dictionaries({"rayClusterName": junk})),
    pod_group=st.sampled_from([None, "headgroup", "gpu", "worker-group-0"]),
    legacy=st.sampled_from([None, "flat", "subgroups"]),
    deleting=st.booleans(),
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_property_metadata_or_grouping_error(kind: str, groups: Any, head: Any, status: dict[str, Any],
                                             pod_group: str | None, legacy: str | None, deleting: bool) -> None:
    the_cluster = obj("ray.io/v1", "RayCluster", "c", namespace=NS, uid="1",
                      spec={"headGroupSpec": head, "workerGroupSpecs": copy.deepcopy(groups)})
    objects = [the_cluster]
    top_owner = the_cluster if kind == "RayCluster" else obj("ray.io/v1", kind, "t", namespace=NS, uid="1",
                                                             status=status)
    if legacy:
        objects.append(podgroup(f"pg-{top_owner['metadata']['name']}-1", namespace=NS,
                                sub_groups=[{"name": "x"}] if legacy == "subgroups" else None))
    the_pod = pod("p", namespace=NS, labels={GROUP: pod_group} if pod_group else {}, deleting=deleting)
    try:
        md = RayGrouper(kind).metadata(context(the_pod, top_owner, objects=objects))
    except GroupingError:
        return
    if md is None:
        assert deleting and kind != "RayCluster"
        return
    assert isinstance(md, PodGroupMetadata)
    assert md.min_member is not None and md.min_member >= 1
    if md.sub_groups:
        assert sum(s.min_member or 0 for s in md.sub_groups) == md.min_member
    md.to_object()
