"""SkipTopOwner grouper (KAI ``skiptopowner_test.go``): group by the kind below the skipped owner."""

from __future__ import annotations

from typing import Any

from builders import context, defaults_configmap, obj, owner, pod, priority_class

from grouper.model.podgroup import OwnerRef
from grouper.plugins.default import DefaultGrouper
from grouper.plugins.deployment import DeploymentGrouper
from grouper.plugins.podjob import PodJobGrouper
from grouper.plugins.skip_top_owner import SkipTopOwnerGrouper

Q = "kai.scheduler/queue"


def other(**kw: Any) -> dict:
    return owner("Other", "v1", "other", namespace="default", uid="o-1", **kw)


def test_last_owner_is_a_pod() -> None:
    top = other(labels={Q: "test-queue"})
    p = pod("test-pod", namespace="default", uid="p-1", owner=top)
    md = SkipTopOwnerGrouper().metadata(context(p, top, plugins={("", "v1", "Pod"): PodJobGrouper()}))
    assert md is not None
    assert md.queue == "test-queue"  # propagated from the skipped owner
    assert (md.name, md.owner) == ("pg-test-pod-p-1", OwnerRef("v1", "Pod", "test-pod", "p-1"))
    assert md.provenance["skippedTopOwner"] == "Other default/other skipped; Pod default/test-pod grouped by PodJob Grouper"


def test_uses_the_second_last_owner_when_there_are_multiple() -> None:
    top = other(labels={Q: "test-queue"})
    dep = obj("apps/v1", "Deployment", "middle-owner", namespace="default", uid="d-1", owner=top)
    rs = obj("apps/v1", "ReplicaSet", "test-replicaset", namespace="default", uid="r-1", owner=dep)
    p = pod("test-pod", namespace="default", uid="p-1", owner=rs)
    ctx = context(p, top, owners=[rs, dep, top], plugins={("apps", "v1", "Deployment"): DeploymentGrouper()})
    md = SkipTopOwnerGrouper().metadata(ctx)
    assert md is not None
    assert md.queue == "test-queue"
    assert md.owner == OwnerRef("apps/v1", "Deployment", "middle-owner", "d-1")  # the Deployment grouper: a gang
    assert md.priority_class_name == "inference"


def test_uses_the_default_function_if_no_handler_for_owner_is_found() -> None:
    top = other(labels={Q: "test-queue"})
    dep = obj("apps/v1", "Deployment", "middle-owner", namespace="default", uid="d-1", owner=top)
    rs = obj("apps/v1", "ReplicaSet", "test-replicaset", namespace="default", uid="r-1", owner=dep)
    ctx = context(pod("test-pod", namespace="default", owner=rs), top, owners=[rs, dep, top])
    md = SkipTopOwnerGrouper().metadata(ctx)
    assert md is not None
    assert md.queue == "test-queue"
    assert md.owner == OwnerRef("apps/v1", "Deployment", "middle-owner", "d-1")
    assert md.name == "pg-middle-owner-d-1"


def test_propagates_labels_and_annotations_without_overriding() -> None:
    top = other(labels={Q: "q", "top-label": "top", "shared-label": "top-shared"},
                annotations={"top-annotation": "t", "shared-annotation": "top-shared-ann"})
    sts = obj("apps/v1", "StatefulSet", "middle", namespace="default", uid="s-1", owner=top,
              labels={"middle-label": "m", "shared-label": "middle-shared"},
              annotations={"middle-annotation": "m", "shared-annotation": "middle-shared-ann"})
    p = pod("sts-0", namespace="default", owner=sts)
    md = SkipTopOwnerGrouper().metadata(context(p, top, owners=[sts, top],
                                                plugins={("apps", "v1", "StatefulSet"): DefaultGrouper()}))
    assert md is not None
    assert md.labels == {Q: "q", "top-label": "top", "shared-label": "middle-shared", "middle-label": "m"}
    assert md.annotations["shared-annotation"] == "middle-shared-ann"
    assert md.annotations["top-annotation"] == "t"
    assert md.queue == "q"


def test_defaults_of_the_skipped_kind_fill_missing_labels() -> None:
    wf = owner("Workflow", "argoproj.io/v1alpha1", "wf", namespace="default", uid="w-1")
    p = pod("step-1", namespace="default", uid="p-1", owner=wf)
    cm = defaults_configmap([{"typeName": "Workflow", "group": "argoproj.io", "priorityName": "pipelines",
                              "preemptibility": "Preemptible"}])
    ctx = context(p, wf, objects=[cm, priority_class("pipelines")], defaults_cm=True,
                  plugins={("", "v1", "Pod"): PodJobGrouper()})
    md = SkipTopOwnerGrouper().metadata(ctx)
    assert md is not None
    assert (md.priority_class_name, md.preemptibility) == ("pipelines", "preemptible")


def test_defaults_priority_only_when_it_exists_and_labels_win() -> None:
    wf = owner("Workflow", "argoproj.io/v1alpha1", "wf", namespace="default", uid="w-1")
    cm = defaults_configmap([{"typeName": "Workflow", "priorityName": "missing", "preemptibility": "preemptible"}])
    p = pod("step-1", namespace="default", owner=wf, labels={"kai.scheduler/preemptibility": "non-preemptible"})
    md = SkipTopOwnerGrouper().metadata(context(p, wf, objects=[cm], defaults_cm=True))
    assert md is not None
    assert (md.priority_class_name, md.preemptibility) == ("train", "non-preemptible")


def test_skipped_owner_priority_label_counts_with_intermediate_owners() -> None:
    top = other(labels={"priorityClassName": "high"})
    dep = obj("apps/v1", "Deployment", "d", namespace="default", uid="d-1", owner=top)
    rs = obj("apps/v1", "ReplicaSet", "rs", namespace="default", uid="r-1", owner=dep)
    ctx = context(pod("p", namespace="default", owner=rs), top, owners=[rs, dep, top],
                  objects=[priority_class("high")])
    md = SkipTopOwnerGrouper().metadata(ctx)
    assert md is not None and md.priority_class_name == "high"


def test_delegate_returning_none_is_passed_through() -> None:
    class Nothing:
        name = "nothing"

        def metadata(self, ctx: object) -> None:
            return None

    top = other()
    p = pod("p", namespace="default", owner=top)
    assert SkipTopOwnerGrouper().metadata(context(p, top, plugins={("", "v1", "Pod"): Nothing()})) is None
