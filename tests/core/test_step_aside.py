"""Stepping aside for pods something else groups (grouper.core.step_aside), through ``Grouper.decide`` with
both backends, ``grouper plan`` and the webhook's answer: one rule, every caller."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from grouper.core.config import GroupingConfig
from grouper.core.context import GroupingContext
from grouper.core.decision import Decision
from grouper.core.lookups import InMemoryLookups
from grouper.core.plan import plan
from grouper.core.step_aside import STEP_ASIDE_REASONS
from grouper.model.errors import InvalidWorkload
from grouper.runtime.composition import build_grouper
from grouper.webhook.admission import Admission

KAI = GroupingConfig()
UPSTREAM = GroupingConfig(backend="upstream", scheduler_name="default-scheduler")
BACKENDS = pytest.mark.parametrize("config", [KAI, UPSTREAM], ids=["kai", "upstream"])

Obj = dict[str, Any]


def obj(api_version: str, kind: str, name: str, *, spec: Obj | None = None, labels: Obj | None = None,
        annotations: Obj | None = None, owner: Obj | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels or {},
                 "annotations": annotations or {}}
    if owner is not None:
        meta["ownerReferences"] = [ref(owner)]
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec or {}}


def ref(o: Obj) -> Obj:
    return {"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"],
            "uid": o["metadata"]["uid"], "controller": True}


def pod(config: GroupingConfig, name: str = "p", owner: Obj | None = None, *, group: str | None = None,
        labels: Obj | None = None, annotations: Obj | None = None) -> Obj:
    p = obj("v1", "Pod", name, labels=labels, annotations=annotations, owner=owner,
            spec={"schedulerName": config.scheduler_name, "containers": [{"name": "c", "image": "x"}]})
    if group is not None:
        p["spec"]["schedulingGroup"] = {"podGroupName": group}
    return p


def job(name: str = "j", scheduling: Obj | None = None, owner: Obj | None = None) -> Obj:
    spec: Obj = {"parallelism": 2, "completions": 2, "template": {"spec": {}}}
    if scheduling is not None:
        spec["scheduling"] = scheduling
    return obj("batch/v1", "Job", name, spec=spec, owner=owner)


def decide(config: GroupingConfig, p: Obj, *objects: Obj) -> Decision:
    return build_grouper(config).decide(p, InMemoryLookups(list(objects)))


GANG = {"schedulingPolicy": {"gang": {"minCount": 2}}}


# ------------------------------------------------------------------ a workload with spec.scheduling


def test_upstream_backend_steps_aside_for_a_job_with_spec_scheduling() -> None:
    j = job(scheduling=GANG)
    d = decide(UPSTREAM, pod(UPSTREAM, owner=j), j)
    assert (d.outcome, d.reason, d.pod_group) == ("skipped", "GroupedByController", None)
    assert "Job ns/j sets spec.scheduling" in d.message
    assert [r.kind for r in d.owner_chain] == ["Job"]  # the record still shows where the pod belongs


def test_kai_backend_groups_the_job_for_kai_and_notes_the_upstream_gang() -> None:
    j = job(scheduling=GANG)
    d = decide(KAI, pod(KAI, owner=j), j)
    assert d.outcome == "grouped" and d.pod_group is not None
    (note,) = [n for n in d.notes if "upstream group" in n]
    assert "Job ns/j sets spec.scheduling" in note and "kai.scheduler/skip-podgrouper=true" in note


@BACKENDS
def test_a_job_without_spec_scheduling_is_grouped_by_both_backends(config: GroupingConfig) -> None:
    j = job()
    d = decide(config, pod(config, owner=j), j)
    assert d.outcome == "grouped" and not [n for n in d.notes if "upstream group" in n]


def test_an_empty_scheduling_block_counts_jobset_and_lws_default_it_to_a_gang() -> None:
    lws = obj("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "inf", spec={"replicas": 1, "scheduling": {}})
    d = decide(UPSTREAM, pod(UPSTREAM, owner=lws), lws)
    assert (d.outcome, d.reason) == ("skipped", "GroupedByController")
    assert "LeaderWorkerSet ns/inf sets spec.scheduling" in d.message


def test_jobset_spec_scheduling_higher_in_the_owner_chain() -> None:
    js = obj("jobset.x-k8s.io/v1alpha2", "JobSet", "train",
             spec={"replicatedJobs": [{"name": "w", "replicas": 1}], "scheduling": {"schedulingPolicy": {"gang": {}}}})
    j = job("train-w-0", owner=js)
    d = decide(UPSTREAM, pod(UPSTREAM, owner=j), j, js)
    assert (d.outcome, d.reason) == ("skipped", "GroupedByController")
    assert "JobSet ns/train sets spec.scheduling" in d.message


def test_spec_scheduling_of_a_kind_not_in_the_table_means_nothing() -> None:
    other = obj("example.com/v1", "Widget", "w", spec={"scheduling": {"anything": True}})
    d = decide(UPSTREAM, pod(UPSTREAM, owner=other), other)
    assert d.outcome == "grouped"


# ------------------------------------------------------------------ KubeRay's gang label


def test_kuberay_gang_label_steps_aside_with_the_upstream_backend_only() -> None:
    rc = obj("ray.io/v1", "RayCluster", "ray", labels={"ray.io/gang-scheduling-enabled": "true"},
             spec={"headGroupSpec": {"template": {"spec": {}}}, "workerGroupSpecs": []})
    up = decide(UPSTREAM, pod(UPSTREAM, owner=rc, labels={"ray.io/node-type": "head"}), rc)
    assert (up.outcome, up.reason) == ("skipped", "GroupedByController")
    assert "RayCluster ns/ray has label ray.io/gang-scheduling-enabled=true" in up.message
    assert "KubernetesWAS" in up.message
    kai = decide(KAI, pod(KAI, owner=rc, labels={"ray.io/node-type": "head"}), rc)
    assert kai.outcome == "grouped" and not [n for n in kai.notes if "upstream group" in n]


def test_kuberay_label_other_than_true_is_not_the_gang() -> None:
    rc = obj("ray.io/v1", "RayCluster", "ray", labels={"ray.io/gang-scheduling-enabled": "false"},
             spec={"headGroupSpec": {"template": {"spec": {}}}, "workerGroupSpecs": []})
    d = decide(UPSTREAM, pod(UPSTREAM, owner=rc, labels={"ray.io/node-type": "head"}), rc)
    assert d.outcome == "grouped"


# ------------------------------------------------------------------ a pod already in an upstream group


def test_upstream_backend_steps_aside_for_a_pod_in_someone_elses_group() -> None:
    d = decide(UPSTREAM, pod(UPSTREAM, group="theirs"))
    assert (d.outcome, d.reason) == ("skipped", "GroupedByController")
    assert "pod ns/p has spec.schedulingGroup.podGroupName=theirs" in d.message
    assert "not this grouper's pg-p-uid-p" in d.message


def test_upstream_backend_keeps_a_pod_its_own_webhook_put_in_its_group() -> None:
    d = decide(UPSTREAM, pod(UPSTREAM, group="pg-p-uid-p"))
    assert (d.outcome, d.reason) == ("grouped", "Grouped") and d.pod_group is not None


def test_a_group_our_webhook_set_earlier_in_the_same_admission_is_ours_to_change() -> None:
    """Reinvoked after LeaderWorkerSet's webhook labelled the pod: the group our first answer set (marked by
    our annotation) is not a controller's own, so the pod is decided again, not stepped aside for."""
    p = pod(UPSTREAM, group="pg-old", annotations={"podgrouper.kai.scheduler/scheduling-group": "pg-old"})
    d = decide(UPSTREAM, p)
    assert (d.outcome, d.reason) == ("grouped", "Grouped") and d.pod_group is not None
    assert d.pod_group.name == "pg-p-uid-p"


def test_kai_backend_groups_a_pod_in_an_upstream_group_and_says_so() -> None:
    d = decide(KAI, pod(KAI, group="theirs"))
    assert d.outcome == "grouped" and d.pod_group is not None and d.pod_group.name == "pg-p-uid-p"
    assert any("spec.schedulingGroup.podGroupName=theirs" in n and "KAI's scheduler does not read" in n
               for n in d.notes)


class Failing:
    name = "Failing"

    def metadata(self, ctx: GroupingContext) -> None:
        raise InvalidWorkload("bad annotation", obj="Widget ns/w", field="metadata.annotations[x]")


def test_upstream_backend_steps_aside_even_when_its_plugin_cannot_decide_a_grouped_pod() -> None:
    widget = obj("example.com/v1", "Widget", "w")
    grouper = build_grouper(UPSTREAM, native={("example.com", "v1", "Widget"): Failing()})
    in_group = grouper.decide(pod(UPSTREAM, owner=widget, group="theirs"), InMemoryLookups([widget]))
    assert (in_group.outcome, in_group.reason) == ("skipped", "GroupedByController")
    assert in_group.plugin is None and in_group.pod_group is None
    alone = grouper.decide(pod(UPSTREAM, owner=widget), InMemoryLookups([widget]))
    assert (alone.outcome, alone.reason) == ("error", "InvalidWorkload")  # reported as before


# ------------------------------------------------------------------ skip markers: always, both backends


@BACKENDS
def test_skip_annotation_on_pod_or_owner_steps_aside_with_both_backends(config: GroupingConfig) -> None:
    marked = {"kai.scheduler/skip-podgrouper": "true"}
    d = decide(config, pod(config, annotations=marked, group="theirs"))
    assert (d.outcome, d.reason) == ("skipped", "SkipAnnotation")
    j = job(scheduling=GANG)
    j["metadata"]["annotations"] = marked
    d = decide(config, pod(config, owner=j), j)
    assert (d.outcome, d.reason) == ("skipped", "SkipAnnotation") and "Job ns/j has annotation" in d.message


def podgang(ignore: bool) -> Obj:
    return obj("scheduler.grove.io/v1alpha1", "PodGang", "gang-0",
               annotations={"grove.io/ignore": "true"} if ignore else {},
               spec={"podgroups": [{"name": "pc", "minReplicas": 1,
                                    "podReferences": [{"namespace": "ns", "name": "p"}]}]})


@BACKENDS
def test_grove_podgang_marked_ignore_steps_aside_with_both_backends(config: GroupingConfig) -> None:
    p = pod(config, labels={"grove.io/podgang": "gang-0"})
    d = decide(config, p, podgang(ignore=True))
    assert (d.outcome, d.reason) == ("skipped", "PodGangIgnored")
    assert d.message.startswith("PodGang ns/gang-0 (pod label grove.io/podgang) has annotation grove.io/ignore=true")
    assert decide(config, p, podgang(ignore=False)).outcome == "grouped"


@BACKENDS
@pytest.mark.parametrize("label", [{"name": "gang-0"}, ["gang-0"], 7])
def test_a_podgang_label_that_is_not_a_string_is_no_internal_error(config: GroupingConfig, label: Any) -> None:
    """Found by the core fuzzer: a non-string ``grove.io/podgang`` label value made the PodGang lookup key
    unhashable (an InternalError). It is no PodGang name: nothing to step aside for."""
    d = decide(config, pod(config, labels={"grove.io/podgang": label}), podgang(ignore=True))
    assert d.reason != "InternalError" and d.reason != "PodGangIgnored", (d.reason, d.message)


def test_step_aside_reasons_are_the_bounded_tokens_the_metric_counts() -> None:
    assert {"SkipAnnotation", "PodGangIgnored", "GroupedByController"} == STEP_ASIDE_REASONS


# ------------------------------------------------------------------ the same rule in plan and the webhook


def test_grouper_plan_shows_the_step_aside_and_writes_no_podgroup_for_it() -> None:
    j, free = job("gang", scheduling=GANG), job("free")

    def objects(c: GroupingConfig) -> list[Obj]:
        return [j, free, pod(c, "g0", owner=j), pod(c, "g1", owner=j), pod(c, "f0", owner=free)]

    result = plan(objects(UPSTREAM), build_grouper(UPSTREAM)).to_json()
    assert [pg["metadata"]["name"] for pg in result["podGroups"]] == ["pg-free-uid-free"]
    skipped = {s["pod"]: s for s in result["skipped"]}
    assert sorted(skipped) == ["ns/g0", "ns/g1"]
    assert skipped["ns/g0"]["reason"] == "GroupedByController"
    assert "Job ns/gang sets spec.scheduling" in skipped["ns/g1"]["message"]
    assert {p["name"]: p["podGroup"] for p in result["pods"]} == {"g0": None, "g1": None, "f0": "pg-free-uid-free"}
    kai = plan(objects(KAI), build_grouper(KAI)).to_json()
    assert sorted(pg["metadata"]["name"] for pg in kai["podGroups"]) == ["pg-free-uid-free", "pg-gang-uid-gang"]


def test_upstream_webhook_leaves_a_pod_of_a_job_with_spec_scheduling_to_the_job_controller() -> None:
    j = job(scheduling=GANG)
    grouper = build_grouper(UPSTREAM)

    async def decide_now(p: Obj) -> Decision:
        return grouper.decide(p, InMemoryLookups([j]))

    fresh = pod(UPSTREAM, owner=j)
    answer = asyncio.run(Admission(decide_now, backend="upstream").review(
        {"request": {"uid": "r1", "operation": "CREATE", "namespace": "ns", "object": fresh}}))
    assert "patch" not in answer["response"] and answer["response"]["allowed"] is True
