"""Knative grouper (KAI ``knative_test.go``) plus our §8 item 13 choice (all default-grouper fields)."""

from __future__ import annotations

from typing import Any

import pytest
from builders import context, lookups, obj, pod, podgroup, priority_class

from grouper.core.config import GroupingConfig
from grouper.model.errors import GroupingError, InvalidWorkload, OwnerNotFound
from grouper.model.podgroup import OwnerRef
from grouper.plugins.knative import KnativeGrouper

NS = "default"
REV_LABEL = "serving.knative.dev/revision"


def service() -> dict:
    return obj("serving.knative.dev/v1", "Service", "svc", namespace=NS, uid="svcUID")


def revision(annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> dict:
    return obj("serving.knative.dev/v1", "Revision", "revision", namespace=NS, uid="revUID", labels=labels,
               annotations=annotations)


def kpod(name: str = "pod", uid: str = "podUID", pg: str | None = None, **labels: str) -> dict:
    p = pod(name, namespace=NS, uid=uid, labels={REV_LABEL: "revision", **labels},
            annotations={"pod-group-name": pg} if pg else None)
    return p


def run(the_pod: dict, *objects: dict, gang: bool = True) -> Any:
    ctx = context(the_pod, service(), objects=[*objects, priority_class("inference")],
                  config=GroupingConfig(knative_gang_schedule=gang))
    return KnativeGrouper().metadata(ctx)


def test_GetPodGroupMetadata_gang() -> None:
    p = kpod()
    md = run(p, revision(), p)
    assert md.name == "pg-revision-revUID"
    assert md.owner == OwnerRef("serving.knative.dev/v1", "Revision", "revision", "revUID")
    assert (md.min_member, md.priority_class_name, md.queue) == (1, "inference", "default-queue")


@pytest.mark.parametrize(("value", "expected"), [("3", 3), ("0", 0), ("abc", 1), ("-2", 1), ("1.5", 1)])
def test_GetPodGroupMetadata_MinScale(value: str, expected: int) -> None:
    p = kpod()
    md = run(p, revision({"autoscaling.knative.dev/min-scale": value}), p)
    assert md.min_member == expected


def test_one_pod_service_disabled_gang_schedule() -> None:
    p = kpod()
    md = run(p, revision({"autoscaling.knative.dev/min-scale": "3"}), p, gang=False)
    assert (md.name, md.min_member) == ("pg-pod-podUID", 1)
    assert md.owner == OwnerRef("v1", "Pod", "pod", "podUID")


def test_legacy_service_gang_schedule_enabled() -> None:
    # two pods, each already in its own PodGroup → keep per-pod
    a, b = kpod("a", "ua", pg="pg-a-ua"), kpod("b", "ub", pg="pg-b-ub")
    md = run(a, revision(), a, b)
    assert md.name == "pg-a-ua"
    assert "per-pod, kept" in md.provenance["name"]


def test_gang_service_gang_schedule_enabled() -> None:
    a, b = kpod("a", "ua", pg="pg-revision-revUID"), kpod("b", "ub", pg="pg-revision-revUID")
    c = kpod("c", "uc")
    md = run(c, revision({"autoscaling.knative.dev/min-scale": "2"}), a, b, c)
    assert (md.name, md.min_member) == ("pg-revision-revUID", 2)


def test_one_existing_pod_no_podgroup() -> None:
    a, b = kpod("a", "ua", pg="pg-gone"), kpod("b", "ub")
    assert run(b, revision(), a, b).name == "pg-revision-revUID"


def test_one_existing_pod_existing_non_gang_podgroup() -> None:
    a, b = kpod("a", "ua", pg="pg-a-ua"), kpod("b", "ub")
    pg = podgroup("pg-a-ua", namespace=NS, owner=a)
    assert run(b, revision(), a, b, pg).name == "pg-b-ub"


def test_one_existing_pod_existing_gang_podgroup() -> None:
    a, b = kpod("a", "ua", pg="pg-revision-revUID"), kpod("b", "ub")
    pg = podgroup("pg-revision-revUID", namespace=NS, owner=revision())
    assert run(b, revision(), a, b, pg).name == "pg-revision-revUID"


def test_existing_podgroup_with_unexpected_owner_is_an_error() -> None:
    a, b = kpod("a", "ua", pg="pg-x"), kpod("b", "ub")
    pg = podgroup("pg-x", namespace=NS, owner=service())
    with pytest.raises(GroupingError, match="unexpected owner kind 'Service'"):
        run(b, revision(), a, b, pg)
    pg_no_owner = podgroup("pg-x", namespace=NS)
    with pytest.raises(GroupingError, match="has no owner references"):
        run(b, revision(), a, b, pg_no_owner)


def test_priority_class_name_set_in_pod() -> None:
    p = kpod(priorityClassName="very-high")
    md = run(p, revision(), p, priority_class("very-high", 125))
    assert md.priority_class_name == "very-high"


def test_priority_class_name_set_in_top_owner() -> None:
    p = kpod()
    md = run(p, revision(labels={"priorityClassName": "high"}), p, priority_class("high", 100))
    assert md.priority_class_name == "high"


def test_per_pod_mode_honours_priority_labels_too() -> None:
    p = kpod()
    md = run(p, revision(labels={"priorityClassName": "high"}), p, priority_class("high"), gang=False)
    assert md.priority_class_name == "high"  # KAI: fixed "inference" in per-pod mode


def test_item13_revision_settings_are_applied() -> None:
    rev = revision(annotations={"kai.scheduler/topology": "net", "kai.scheduler/topology-required-placement": "rack",
                                "kai.scheduler/preemption-delay": "2m", "kai.scheduler/staleness-grace-period": "1h"},
                   labels={"kai.scheduler/preemptibility": "non-preemptible", "kai.scheduler/queue": "serve"})
    p = kpod()
    md = run(p, rev, p)
    assert (md.preemptibility, md.preemption_delay, md.staleness_grace_period) == ("non-preemptible", "2m0s", "1h0m0s")
    assert (md.topology.topology, md.topology.required_level, md.queue) == ("net", "rack", "serve")


def test_missing_revision_label() -> None:
    with pytest.raises(InvalidWorkload) as err:
        run(pod("p", namespace=NS), revision())
    assert str(err.value) == ('Pod default/p: field metadata.labels["serving.knative.dev/revision"]: is missing; '
                              "a Knative Service pod must name its Revision")


def test_missing_revision() -> None:
    with pytest.raises(OwnerNotFound, match="Revision default/revision"):
        run(kpod())
    assert run(pod("p", namespace=NS, labels={REV_LABEL: "revision"}, deleting=True)) is None


def test_listing_pods_forbidden() -> None:
    p = kpod()
    ctx = context(p, service(), the_lookups=lookups(revision(), p, forbidden=[("", "Pod")]))
    with pytest.raises(GroupingError, match="cannot list the pods of Revision default/revision"):
        KnativeGrouper().metadata(ctx)
