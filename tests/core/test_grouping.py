"""The decision flow around the plugins: filters, skips, errors, hub order, records."""

from __future__ import annotations

from grouper.core.config import GroupingConfig
from grouper.core.context import GroupingContext
from grouper.core.hub import PluginHub
from grouper.core.lookups import InMemoryLookups
from grouper.model.errors import InvalidWorkload
from grouper.model.objects import GVK
from grouper.model.podgroup import OwnerRef, PodGroupMetadata, SubGroup
from grouper.plugins.default import DefaultGrouper
from grouper.runtime.composition import build_grouper as Grouper


def pod(name: str = "p", owners: list[dict] | None = None, *, scheduler: str = "kai-scheduler",
        labels: dict | None = None, annotations: dict | None = None, deleting: bool = False) -> dict:
    meta: dict = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels or {},
                  "annotations": annotations or {}}
    if owners:
        meta["ownerReferences"] = owners
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"schedulerName": scheduler}}


def workload(kind: str = "Widget", api_version: str = "example.com/v1", name: str = "w", **meta: dict) -> dict:
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", **meta}}


def ref(obj: dict) -> dict:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True}


class Fixed:
    """A plugin with a fixed answer, to observe which plugin the hub picked."""

    def __init__(self, name: str, sub_group: str | None = None, *, fail: bool = False) -> None:
        self.name, self.sub_group, self.fail = name, sub_group, fail

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata | None:
        if self.fail:
            raise InvalidWorkload("bad annotation", obj="Widget ns/w", field="metadata.annotations[x]")
        md = PodGroupMetadata(name=f"pg-{self.name}", namespace="ns", owner=OwnerRef.of(ctx.top_owner))
        if self.sub_group:
            md.min_member, md.min_sub_group = None, 1
            md.sub_groups = [SubGroup(self.sub_group, 1, pods=[ctx.pod["metadata"]["name"]])]
        return md


W = workload()


def test_default_grouper_for_unknown_kind() -> None:
    d = Grouper(GroupingConfig(), None, native={}).decide(pod(owners=[ref(W)]), InMemoryLookups([W]))
    assert d.outcome == "grouped" and d.plugin == "Default Grouper"
    assert d.pod_group is not None and d.pod_group.name == "pg-w-uid-w"
    assert d.top_owner == OwnerRef("example.com/v1", "Widget", "w", "uid-w")
    record = d.to_record()
    assert record["podGroup"] == "pg-w-uid-w" and record["ownerChain"][0]["kind"] == "Widget"
    assert "queue" in record["provenance"]


def test_other_scheduler_is_skipped() -> None:
    d = Grouper().decide(pod(scheduler="default-scheduler"), InMemoryLookups())
    assert (d.outcome, d.reason, d.pod_group) == ("skipped", "OtherScheduler", None)


def test_missing_scheduler_name_means_default_scheduler() -> None:
    p = pod()
    del p["spec"]["schedulerName"]
    assert Grouper().decide(p, InMemoryLookups()).reason == "OtherScheduler"


def test_skip_annotation_on_pod() -> None:
    d = Grouper().decide(pod(annotations={"kai.scheduler/skip-podgrouper": "true"}), InMemoryLookups())
    assert (d.outcome, d.reason) == ("skipped", "SkipAnnotation")


def test_skip_annotation_must_be_exactly_true() -> None:
    d = Grouper(native={}).decide(pod(annotations={"kai.scheduler/skip-podgrouper": "True"}), InMemoryLookups())
    assert d.outcome == "grouped"


def test_skip_annotation_on_any_owner() -> None:
    top = workload(annotations={"kai.scheduler/skip-podgrouper": "true"})
    d = Grouper(native={}).decide(pod(owners=[ref(top)]), InMemoryLookups([top]))
    assert (d.outcome, d.reason) == ("skipped", "SkipAnnotation")
    assert "Widget ns/w" in d.message


def test_ownerless_pod_with_group_annotation_is_externally_grouped() -> None:
    d = Grouper().decide(pod(annotations={"pod-group-name": "mine"}), InMemoryLookups())
    assert (d.outcome, d.reason) == ("skipped", "ExternallyGrouped")


def test_missing_owner_is_an_error_for_that_pod() -> None:
    d = Grouper(native={}).decide(pod(owners=[ref(W)]), InMemoryLookups())
    assert d.outcome == "error" and d.reason == "OwnerNotFound"
    assert "Widget ns/w" in d.message


def test_missing_owner_while_deleting_is_skipped_quietly() -> None:
    d = Grouper(native={}).decide(pod(owners=[ref(W)], deleting=True), InMemoryLookups())
    assert (d.outcome, d.reason) == ("skipped", "PodDeleting")


def test_plugin_error_becomes_an_error_decision() -> None:
    g = Grouper(native={("example.com", "v1", "Widget"): Fixed("bad", fail=True)})
    d = g.decide(pod(owners=[ref(W)]), InMemoryLookups([W]))
    assert (d.outcome, d.reason) == ("error", "InvalidWorkload")
    assert d.message == "Widget ns/w: field metadata.annotations[x]: bad annotation"
    assert d.plugin == "bad"


def test_plugin_crash_is_contained() -> None:
    class Crashing(Fixed):
        def metadata(self, ctx: GroupingContext) -> PodGroupMetadata | None:
            raise KeyError("spec")

    d = Grouper(native={("example.com", "v1", "Widget"): Crashing("crash")}).decide(
        pod(owners=[ref(W)]), InMemoryLookups([W])
    )
    assert (d.outcome, d.reason) == ("error", "InternalError")
    assert "KeyError" in d.message and "crash" in d.message


def test_exact_version_beats_wildcard() -> None:
    native = {("example.com", "v1", "Widget"): Fixed("exact"), ("example.com", "*", "Widget"): Fixed("wild")}
    d = Grouper(native=native).decide(pod(owners=[ref(W)]), InMemoryLookups([W]))
    assert d.plugin == "exact"


def test_wildcard_version() -> None:
    native = {("example.com", "*", "Widget"): Fixed("wild")}
    d = Grouper(native=native).decide(pod(owners=[ref(W)]), InMemoryLookups([W]))
    assert d.plugin == "wild"


def test_sub_group_membership_and_nodepool_label() -> None:
    g = Grouper(native={("example.com", "v1", "Widget"): Fixed("sg", sub_group="workers")})
    d = g.decide(pod(owners=[ref(W)], labels={"kai.scheduler/node-pool": "pool-a"}), InMemoryLookups([W]))
    assert d.sub_group == "workers"
    assert d.pod_group is not None and d.pod_group.labels["kai.scheduler/node-pool"] == "pool-a"


def test_invalid_pod_group_is_reported_not_returned() -> None:
    class Invalid(Fixed):
        def metadata(self, ctx: GroupingContext) -> PodGroupMetadata | None:
            md = super().metadata(ctx)
            assert md is not None
            md.min_sub_group = 1  # together with min_member=1: the webhook rejects it
            return md

    d = Grouper(native={("example.com", "v1", "Widget"): Invalid("inv")}).decide(
        pod(owners=[ref(W)]), InMemoryLookups([W])
    )
    assert (d.outcome, d.reason, d.pod_group) == ("error", "InvalidPodGroup", None)
    assert "mutually exclusive" in d.message


def test_long_names_are_shortened_and_noted() -> None:
    long = workload(name="w" * 250)
    d = Grouper(native={}).decide(pod(owners=[ref(long)]), InMemoryLookups([long]))
    assert d.outcome == "grouped" and d.pod_group is not None
    assert len(d.pod_group.name) <= 253
    assert any("shortened" in n for n in d.notes)


def test_hub_native_for_is_exact_only() -> None:
    hub = PluginHub({("a", "*", "K"): Fixed("wild"), ("a", "v1", "J"): Fixed("j")}, DefaultGrouper())
    assert hub.native_for(GVK("a", "v1", "K")) is None
    assert hub.native_for(GVK("a", "v1", "J")) is not None
    assert hub.select(GVK("a", "v2", "K")).plugin.name == "wild"
    assert hub.select(GVK("b", "v1", "Z")).plugin.name == "Default Grouper"


def test_in_memory_list_filters_by_namespace_and_labels_sorted() -> None:
    objs = [workload(name=n, labels={"app": a}) for n, a in (("b", "x"), ("a", "x"), ("c", "y"))]
    other_ns = workload(name="d", labels={"app": "x"})
    other_ns["metadata"]["namespace"] = "other"
    lookups = InMemoryLookups([*objs, other_ns])
    got = lookups.list("example.com/v1", "Widget", "ns", {"app": "x"})
    assert [o["metadata"]["name"] for o in got] == ["a", "b"]
    assert len(lookups.list("example.com/v1", "Widget", None)) == 4


def test_pod_spec_that_is_not_a_mapping_is_not_an_internal_error() -> None:
    # Found by the property tests: a malformed pod must not reach the plugins' exception handler.
    p = pod()
    p["spec"] = 1
    d = Grouper(native={}).decide(p, InMemoryLookups())
    assert (d.outcome, d.reason) == ("skipped", "OtherScheduler")


def test_bare_pod_annotated_with_our_own_group_stays_grouped() -> None:
    # Re-evaluating a bare pod after we annotated it must give the same decision, not "externally grouped".
    first = Grouper(native={}).decide(pod("bare"), InMemoryLookups())
    assert first.outcome == "grouped" and first.pod_group is not None
    again = Grouper(native={}).decide(pod("bare", annotations={"pod-group-name": first.pod_group.name}),
                                      InMemoryLookups())
    assert (again.outcome, again.plugin) == ("grouped", "Default Grouper")
    assert again.pod_group is not None and again.pod_group.name == first.pod_group.name
