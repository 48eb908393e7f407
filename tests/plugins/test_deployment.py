"""Deployment grouper (KAI v0.18 ``deployment_grouper.go`` / ``deployment_test.go``).

Gang by default: one PodGroup per Deployment; per pod when ``--deployment-gang-schedule=false`` or
when the Deployment's pods already have per-pod PodGroups (KAI's ``hasPodGroupPerPod``).
"""

from __future__ import annotations

from typing import Any

import pytest
from builders import context, lookups, obj, owner, pod, priority_class

from grouper.core.config import GroupingConfig
from grouper.model.errors import InvalidWorkload
from grouper.model.objects import Obj
from grouper.model.podgroup import OwnerRef
from grouper.plugins.deployment import DeploymentGrouper

SELECTOR = {"matchLabels": {"app": "web"}}


def deployment(annotations: dict[str, str] | None = None, selector: Any = SELECTOR) -> Obj:
    return owner("Deployment", "apps/v1", "web", uid="d-1", labels={"kai.scheduler/queue": "serving"},
                 annotations={"a": "b", **(annotations or {})}, spec={"selector": selector})


def replica_set(dep: Obj) -> Obj:
    return obj("apps/v1", "ReplicaSet", "web-5d8", namespace="test_namespace", uid="r-1", owner=dep)


def web_pod(name: str, uid: str, rs: Obj, pg: str | None = None, app: str = "web") -> Obj:
    return pod(name, uid=uid, owner=rs, labels={"app": app},
               annotations={"pod-group-name": pg} if pg else None)


def pg_owned_by(pg_name: str, kind: str, owner_name: str) -> Obj:
    pg = obj("scheduling.run.ai/v2alpha2", "PodGroup", pg_name, namespace="test_namespace", spec={"minMember": 1})
    pg["metadata"]["ownerReferences"] = [{"apiVersion": "v1" if kind == "Pod" else "apps/v1", "kind": kind,
                                          "name": owner_name, "uid": "x"}]
    return pg


def decide(p: Obj, dep: Obj, *others: Obj, config: GroupingConfig | None = None):  # type: ignore[no-untyped-def]
    rs = replica_set(dep)
    return DeploymentGrouper().metadata(
        context(p, dep, owners=[rs, dep], the_lookups=lookups(p, rs, dep, *others), config=config)
    )


def test_GangByDefault() -> None:
    dep = deployment()
    rs = replica_set(dep)
    md = decide(web_pod("web-5d8-xyz", "p-1", rs), dep)
    assert md.name == "pg-web-d-1"
    assert md.owner == OwnerRef("apps/v1", "Deployment", "web", "d-1")
    assert (md.priority_class_name, md.queue, md.min_member) == ("inference", "serving", 1)
    assert md.labels == {"kai.scheduler/queue": "serving"}
    assert "kai.scheduler/top-owner-metadata" in md.annotations and md.annotations["a"] == "b"
    assert "one gang PodGroup per Deployment" in md.provenance["name"]


def test_GangMinMemberFromBatchMinMember() -> None:
    dep = deployment({"kai.scheduler/batch-min-member": "3"})
    md = decide(web_pod("web-5d8-xyz", "p-1", replica_set(dep)), dep)
    assert (md.name, md.min_member) == ("pg-web-d-1", 3)
    assert "batch-min-member" in md.provenance["minMember"]


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_GangMinMemberBelowOneOrMalformedIsAnError(value: str) -> None:
    dep = deployment({"kai.scheduler/batch-min-member": value})
    with pytest.raises(InvalidWorkload, match=r"Deployment test_namespace/web: field .*batch-min-member"):
        decide(web_pod("web-5d8-xyz", "p-1", replica_set(dep)), dep)


def test_GangScheduleDeploymentFalse_PodGroupPerPod() -> None:
    dep = deployment({"kai.scheduler/batch-min-member": "3"})
    md = decide(web_pod("web-5d8-xyz", "p-1", replica_set(dep)), dep,
                config=GroupingConfig(deployment_gang_schedule=False))
    assert md.name == "pg-web-5d8-xyz-p-1"
    assert md.owner == OwnerRef("v1", "Pod", "web-5d8-xyz", "p-1")
    assert (md.priority_class_name, md.min_member) == ("inference", 1)
    assert "--deployment-gang-schedule=false" in md.provenance["name"]


def test_LegacyPodGroupsPerPod_TwoDistinctPodGroups() -> None:
    dep = deployment()
    rs = replica_set(dep)
    old1 = web_pod("web-5d8-a", "p-a", rs, pg="pg-web-5d8-a-p-a")
    old2 = web_pod("web-5d8-b", "p-b", rs, pg="pg-web-5d8-b-p-b")
    md = decide(web_pod("web-5d8-new", "p-n", rs), dep, old1, old2)
    assert md.name == "pg-web-5d8-new-p-n"
    assert md.owner.kind == "Pod"
    assert "already have per-pod PodGroups" in md.provenance["name"]


def test_LegacyPodGroupsPerPod_OnePodGroupOwnedByPod() -> None:
    dep = deployment()
    rs = replica_set(dep)
    old = web_pod("web-5d8-a", "p-a", rs, pg="pg-web-5d8-a-p-a")
    md = decide(old, dep, pg_owned_by("pg-web-5d8-a-p-a", "Pod", "web-5d8-a"))
    assert md.name == "pg-web-5d8-a-p-a"


def test_OnePodGroupOwnedByTheDeploymentIsAGang() -> None:
    dep = deployment()
    rs = replica_set(dep)
    old = web_pod("web-5d8-a", "p-a", rs, pg="pg-web-d-1")
    md = decide(web_pod("web-5d8-b", "p-b", rs), dep, old, pg_owned_by("pg-web-d-1", "Deployment", "web"))
    assert md.name == "pg-web-d-1"


def test_TwoPodsSharingAPodGroupIsAGang() -> None:
    dep = deployment()
    rs = replica_set(dep)
    a = web_pod("web-5d8-a", "p-a", rs, pg="pg-shared")
    b = web_pod("web-5d8-b", "p-b", rs, pg="pg-shared")
    c = web_pod("web-5d8-c", "p-c", rs, pg="pg-web-5d8-c-p-c")
    assert decide(web_pod("web-5d8-n", "p-n", rs), dep, a, b, c).name == "pg-web-d-1"


def test_OnlyPodGroupGoneIsAGang() -> None:
    dep = deployment()
    rs = replica_set(dep)
    old = web_pod("web-5d8-a", "p-a", rs, pg="pg-web-5d8-a-p-a")
    assert decide(old, dep).name == "pg-web-d-1"


def test_OnlyPodGroupWithUnexpectedOwnerIsAnError() -> None:
    dep = deployment()
    rs = replica_set(dep)
    old = web_pod("web-5d8-a", "p-a", rs, pg="pg-other")
    with pytest.raises(InvalidWorkload, match=r"PodGroup test_namespace/pg-other .* owned by Job"):
        decide(old, dep, pg_owned_by("pg-other", "Job", "j"))


def test_PodsOfOtherWorkloadsDoNotCount() -> None:
    """Only pods the Deployment's selector matches are looked at (matchLabels, then matchExpressions)."""
    dep = deployment(selector={"matchLabels": {"app": "web"},
                               "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]})
    rs = replica_set(dep)
    other1 = web_pod("api-a", "p-a", rs, pg="pg-api-a-p-a", app="api")
    other2 = web_pod("api-b", "p-b", rs, pg="pg-api-b-p-b", app="api")
    db1 = pod("web-db-a", uid="p-c", labels={"app": "web", "tier": "db"}, annotations={"pod-group-name": "pg-1"})
    db2 = pod("web-db-b", uid="p-d", labels={"app": "web", "tier": "db"}, annotations={"pod-group-name": "pg-2"})
    assert decide(web_pod("web-5d8-n", "p-n", rs), dep, other1, other2, db1, db2).name == "pg-web-d-1"


def test_ExistingGangPodGroupSkipsThePodList() -> None:
    """The gang PodGroup owned by the Deployment is read by name; the pods are then not listed."""
    dep = deployment()
    rs = replica_set(dep)
    p = web_pod("web-5d8-a", "p-a", rs)
    store = lookups(p, rs, dep, pg_owned_by("pg-web-d-1", "Deployment", "web"))
    calls: list[str] = []
    real_list = store.list

    def counting_list(*args: Any, **kw: Any) -> list[Obj]:
        calls.append(args[1])
        return real_list(*args, **kw)

    store.list = counting_list  # type: ignore[method-assign]
    md = DeploymentGrouper().metadata(context(p, dep, owners=[rs, dep], the_lookups=store))
    assert md.name == "pg-web-d-1" and calls == []


def test_pod_without_typemeta_still_owns_its_podgroup() -> None:
    dep = deployment()
    md = decide(pod("web-1", uid="p-1", typemeta=False), dep, config=GroupingConfig(deployment_gang_schedule=False))
    assert md.owner == OwnerRef("v1", "Pod", "web-1", "p-1")


def test_explicit_priority_wins_over_inference() -> None:
    dep = owner("Deployment", "apps/v1", "web", uid="d-1", labels={"priorityClassName": "critical"})
    md = DeploymentGrouper().metadata(context(pod(), dep, objects=[priority_class("critical")]))
    assert md.priority_class_name == "critical"


def test_PodOnItsOwnPerPodPodGroupSkipsThePodList() -> None:
    """A pod that already names its own per-pod PodGroup (owned by the pod) stays per pod: two gets,
    no list of the namespace's pods."""
    dep = deployment()
    rs = replica_set(dep)
    p = web_pod("web-5d8-a", "p-a", rs, pg="pg-web-5d8-a-p-a")
    store = lookups(p, rs, dep, pg_owned_by("pg-web-5d8-a-p-a", "Pod", "web-5d8-a"))
    calls: list[str] = []
    real_list = store.list

    def counting_list(*args: Any, **kw: Any) -> list[Obj]:
        calls.append(args[1])
        return real_list(*args, **kw)

    store.list = counting_list  # type: ignore[method-assign]
    md = DeploymentGrouper().metadata(context(p, dep, owners=[rs, dep], the_lookups=store))
    assert md.name == "pg-web-5d8-a-p-a" and calls == []


def test_NewPodOfAPerPodDeploymentListsThePods() -> None:
    dep = deployment()
    rs = replica_set(dep)
    old1 = web_pod("web-5d8-a", "p-a", rs, pg="pg-web-5d8-a-p-a")
    old2 = web_pod("web-5d8-b", "p-b", rs, pg="pg-web-5d8-b-p-b")
    new = web_pod("web-5d8-c", "p-c", rs)
    md = decide(new, dep, old1, old2, pg_owned_by("pg-web-5d8-a-p-a", "Pod", "web-5d8-a"))
    assert md.name == "pg-web-5d8-c-p-c"
