"""Deployment grouper (KAI ``deployment_test.go``): one PodGroup per pod, priority ``inference``."""

from __future__ import annotations

from builders import context, obj, owner, pod, priority_class

from grouper.model.podgroup import OwnerRef
from grouper.plugins.deployment import DeploymentGrouper


def test_GetPodGroupMetadata() -> None:
    dep = owner("Deployment", "apps/v1", "web", uid="d-1", labels={"kai.scheduler/queue": "serving"},
                annotations={"a": "b"})
    rs = obj("apps/v1", "ReplicaSet", "web-5d8", namespace="test_namespace", uid="r-1", owner=dep)
    p = pod("web-5d8-xyz", uid="p-1", owner=rs)
    md = DeploymentGrouper().metadata(context(p, dep, owners=[rs, dep]))
    assert md.name == "pg-web-5d8-xyz-p-1"
    assert md.owner == OwnerRef("v1", "Pod", "web-5d8-xyz", "p-1")
    assert (md.priority_class_name, md.queue, md.min_member) == ("inference", "serving", 1)
    assert md.labels == {"kai.scheduler/queue": "serving"}
    assert "kai.scheduler/top-owner-metadata" in md.annotations and md.annotations["a"] == "b"
    assert "one PodGroup per Deployment pod" in md.provenance["name"]


def test_pod_without_typemeta_still_owns_its_podgroup() -> None:
    dep = owner("Deployment", "apps/v1", "web", uid="d-1")
    md = DeploymentGrouper().metadata(context(pod("web-1", uid="p-1", typemeta=False), dep))
    assert md.owner == OwnerRef("v1", "Pod", "web-1", "p-1")


def test_explicit_priority_wins_over_inference() -> None:
    dep = owner("Deployment", "apps/v1", "web", uid="d-1", labels={"priorityClassName": "critical"})
    md = DeploymentGrouper().metadata(context(pod(), dep, objects=[priority_class("critical")]))
    assert md.priority_class_name == "critical"
