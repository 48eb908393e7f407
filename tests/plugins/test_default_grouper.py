"""Default grouper: KAI's acceptance cases (reference §5.6, tests named after the upstream Go tests),
plus our documented choices (§8 item 7), durations, provenance and a property test."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from builders import context, defaults_configmap, owner, pod, priority_class
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grouper.core.config import GroupingConfig
from grouper.model.errors import GroupingError, InvalidWorkload
from grouper.model.objects import GVK
from grouper.model.podgroup import OwnerRef, PodGroupMetadata
from grouper.plugins.common import format_go_duration, parse_go_duration
from grouper.plugins.default import DefaultGrouper, apply_nodepool_label, default_metadata
from grouper.plugins.defaults_configmap import (
    DefaultsConfigMapError,
    TypeDefaults,
    default_priority_class_for_kind,
    parse_defaults_configmap,
)

FIXTURE_LABELS = {"test_label": "test_value"}
FIXTURE_ANNOTATIONS = {"test_annotation": "test_value"}


def fixture_owner(**kw: Any) -> dict[str, Any]:
    kw.setdefault("labels", FIXTURE_LABELS)
    kw.setdefault("annotations", FIXTURE_ANNOTATIONS)
    return owner(**kw)


def group(top: dict[str, Any], the_pod: dict[str, Any] | None = None, *objects: dict[str, Any],
          cm: list[dict[str, str]] | str | None = None, fallback: str = "train") -> PodGroupMetadata:
    objs = list(objects)
    if cm is not None:
        objs.append(defaults_configmap(cm))
    ctx = context(the_pod or pod(), top, objects=objs, defaults_cm=cm is not None)
    return default_metadata(ctx, priority_fallback=fallback)


# ---------------------------------------------------------------- §5.6 acceptance cases


def test_GetPodGroupMetadata() -> None:
    md = group(fixture_owner(), None, priority_class("train"))
    assert md.owner == OwnerRef("test_version", "test_kind", "test_name", "1")
    assert len(md.annotations) == 2
    assert len(md.labels) == 1
    assert md.queue == "default-queue"
    assert md.priority_class_name == "train"
    assert md.preemptibility == ""
    assert md.topology.is_empty()
    assert md.min_member == 1
    assert md.name == "pg-test_name-1"
    assert md.sub_groups == []


def test_QueueFromOwnerDefaultNP() -> None:
    md = group(fixture_owner(labels={**FIXTURE_LABELS, "project": "my-proj"}))
    assert md.queue == "my-proj"


def test_InferQueueFromProjectNodepool() -> None:
    md = group(fixture_owner(labels={**FIXTURE_LABELS, "project": "my-proj"}),
               pod(labels={"kai.scheduler/node-pool": "np-1"}))
    assert md.queue == "my-proj-np-1"


def test_QueueFromOwner() -> None:
    md = group(fixture_owner(labels={**FIXTURE_LABELS, "kai.scheduler/queue": "my-proj-np-1"}))
    assert md.queue == "my-proj-np-1"
    assert md.provenance["queue"] == "label kai.scheduler/queue on test_kind test_namespace/test_name"


def test_QueueFromPod() -> None:
    md = group(fixture_owner(), pod(labels={"kai.scheduler/queue": "my-queue"}))
    assert md.queue == "my-queue"


def test_PriorityClassFromOwner() -> None:
    md = group(fixture_owner(labels={"priorityClassName": "my-priority"}), None, priority_class("my-priority"))
    assert md.priority_class_name == "my-priority"


def test_PriorityClassFromPod() -> None:
    md = group(fixture_owner(), pod(labels={"priorityClassName": "my-priority"}), priority_class("my-priority"))
    assert md.priority_class_name == "my-priority"


def test_PriorityClassFromPodSpec() -> None:
    md = group(fixture_owner(), pod(priority_class="my-priority"), priority_class("my-priority"))
    assert md.priority_class_name == "my-priority"
    assert md.provenance["priorityClassName"].startswith("PriorityClass from pod spec.priorityClassName")


def test_FromDefaultsGroupKindConfigMap() -> None:
    cm = [{"typeName": "TestKind", "group": "apps", "priorityName": "high-priority"},
          {"typeName": "TestKind", "group": "", "priorityName": "low-priority"}]
    md = group(owner("TestKind", "apps/v1"), None, priority_class("high-priority"), cm=cm)
    assert md.priority_class_name == "high-priority"
    assert "defaults ConfigMap" in md.provenance["priorityClassName"]


def test_Preemptibility_InvalidInConfigMap() -> None:
    cm = [{"typeName": "TestKind", "group": "apps", "priorityName": "train", "preemptibility": "INVALID_VALUE"}]
    md = group(owner("TestKind", "apps/v1"), None, priority_class("train"), cm=cm)
    assert md.preemptibility == ""
    assert "INVALID_VALUE" in md.provenance["preemptibility"]


VALID_CM = [
    {"typeName": "TestKind", "group": "apps", "priorityName": "cm-prio-apps", "preemptibility": "preemptible"},
    {"typeName": "TestKind", "priorityName": "cm-prio-kind", "preemptibility": "non-preemptible"},
]


@pytest.mark.parametrize(
    ("api_version", "owner_labels", "pod_labels", "pod_spec", "want_priority", "want_preemptibility"),
    [
        pytest.param("apps/v1", None, None, None, "cm-prio-apps", "preemptible", id="defaults_by_groupkind"),
        pytest.param("batch/v1", None, None, None, "cm-prio-kind", "non-preemptible", id="defaults_by_kind_fallback"),
        pytest.param("batch/v1", {"kai.scheduler/preemptibility": "preemptible"}, None, None, "cm-prio-kind",
                     "preemptible", id="owner_preemptibility_overrides_defaults"),
        pytest.param("batch/v1", None, {"kai.scheduler/preemptibility": "preemptible"}, None, "cm-prio-kind",
                     "preemptible", id="pod_preemptibility_overrides_defaults"),
        pytest.param("batch/v1", {"priorityClassName": "my-priority"}, None, None, "my-priority", "non-preemptible",
                     id="owner_priority_overrides_defaults_preemptibility_from_defaults"),
        pytest.param("batch/v1", None, {"priorityClassName": "my-priority"}, None, "my-priority", "non-preemptible",
                     id="pod_priority_overrides_defaults_preemptibility_from_defaults"),
        pytest.param("batch/v1", None, None, "my-priority", "my-priority", "non-preemptible",
                     id="podspec_priority_overrides_defaults_preemptibility_from_defaults"),
    ],
)
def test_WithValidDefaultsConfigMap(
    api_version: str, owner_labels: dict[str, str] | None, pod_labels: dict[str, str] | None,
    pod_spec: str | None, want_priority: str, want_preemptibility: str,
) -> None:
    md = group(owner("TestKind", api_version, labels=owner_labels), pod(labels=pod_labels, priority_class=pod_spec),
               priority_class("cm-prio-apps"), priority_class("cm-prio-kind"), priority_class("my-priority"),
               cm=VALID_CM)
    assert (md.priority_class_name, md.preemptibility) == (want_priority, want_preemptibility)


def test_WrapperFallbackTrain() -> None:
    md = group(fixture_owner(), None, priority_class("train"))
    assert md.priority_class_name == "train"
    assert md.provenance["priorityClassName"] == "fallback: train"


def test_DefaultPriorityClassNameForKind_NoMatch() -> None:
    defaults = {"OtherKind.apps": TypeDefaults("OtherKind", "apps", "p")}
    assert default_priority_class_for_kind(defaults, GVK("apps", "v1", "UnknownKind")) == ""


def test_ParseConfigMap_MissingKey() -> None:
    with pytest.raises(DefaultsConfigMapError, match='does not contain the "types" key'):
        parse_defaults_configmap(defaults_configmap("[]", key="wrong-key"))
    with pytest.raises(DefaultsConfigMapError):
        parse_defaults_configmap(None)


def test_DefaultsConfigMapMissing_FallbackToTrain() -> None:
    # the flags name a ConfigMap that is not there
    ctx = context(pod(), owner("TestKind", "apps/v1", labels={"priorityClassName": "train"}),
                  objects=[priority_class("train")], defaults_cm=True)
    md = default_metadata(ctx)
    assert md.priority_class_name == "train"
    assert md.preemptibility == ""


def test_EmptyGroupKind_FallbackToTrain() -> None:
    cm = [{"typeName": "", "group": "", "priorityName": "train"}]
    md = group(owner("", ""), None, priority_class("train"), cm=cm)
    assert md.priority_class_name == "train"
    assert md.preemptibility == ""


def test_FromDefaultsKindConfigMap() -> None:
    cm = [{"typeName": "TestKind", "group": "differentgroup", "priorityName": "high-priority"},
          {"typeName": "TestKind", "priorityName": "low-priority"}]
    md = group(owner("TestKind", "apps/v1"), None, priority_class("low-priority"), cm=cm)
    assert md.priority_class_name == "low-priority"


def test_DefaultsOverrideFromPodSpec() -> None:
    cm = [{"typeName": "TestKind", "group": "apps", "priorityName": "high-priority"},
          {"typeName": "TestKind", "group": "", "priorityName": "low-priority"}]
    md = group(owner("TestKind", "apps/v1"), pod(priority_class="my-priority"), priority_class("my-priority"), cm=cm)
    assert md.priority_class_name == "my-priority"


def test_DefaultsOverrideFromLabel() -> None:
    cm = [{"typeName": "TestKind", "group": "apps", "priorityName": "high-priority"},
          {"typeName": "TestKind", "group": "differentgroup", "priorityName": "low-priority"}]
    md = group(owner("TestKind", "apps/v1", labels={"priorityClassName": "my-priority-2"}),
               pod(priority_class="my-priority"), priority_class("my-priority-2"), cm=cm)
    assert md.priority_class_name == "my-priority-2"


def test_TestNils() -> None:
    cm = [{"typeName": "TestKind", "group": "apps", "priorityName": "high-priority"},
          {"typeName": "TestKind", "priorityName": "low-priority"}]
    pcs = (priority_class("high-priority"), priority_class("train"))
    assert group(owner("TestKind", "apps/v1"), None, *pcs, cm=cm).priority_class_name == "high-priority"
    missing_cm = context(pod(), owner("TestKind", "apps/v1"), objects=pcs, defaults_cm=True)
    assert default_metadata(missing_cm).priority_class_name == "train"
    assert group(owner("", ""), None, *pcs, cm=cm).priority_class_name == "train"


def test_BadConfigmapData() -> None:
    assert group(owner("TestKind", "apps/v1"), None, priority_class("train"),
                 cm="[bad-data!!!!!]").priority_class_name == "train"
    wrong_key = defaults_configmap(json.dumps([{"typeName": "TestKind", "priorityName": "high-priority"}]),
                                   key="different-key!!!!")
    ctx = context(pod(), owner("TestKind", "apps/v1"), objects=[priority_class("train"),
                  priority_class("high-priority"), wrong_key], defaults_cm=True)
    assert default_metadata(ctx).priority_class_name == "train"


def test_OwnerUserOverridePodUser() -> None:
    md = group(fixture_owner(labels={"user": "ownerUser"}), pod(labels={"user": "podUser"}))
    assert md.labels["user"] == "ownerUser"


def test_WithTopology() -> None:
    md = group(fixture_owner(annotations={"kai.scheduler/topology-preferred-placement": "rack",
                                          "kai.scheduler/topology-required-placement": "zone",
                                          "kai.scheduler/topology": "network"}))
    assert (md.topology.preferred_level, md.topology.required_level, md.topology.topology) == ("rack", "zone", "network")
    assert md.spec()["topologyConstraint"] == {"preferredTopologyLevel": "rack", "requiredTopologyLevel": "zone",
                                               "topology": "network"}


def test_NonExistentDefaultFromConfigMap() -> None:
    cm = [{"typeName": "TestKind", "group": "apps", "priorityName": "non-existent-configmap-priority"}]
    md = group(owner("TestKind", "apps/v1"), cm=cm)
    assert md.priority_class_name == "train"


def test_ValidPriorityClassOverridesInvalidDefault() -> None:
    cm = [{"typeName": "TestKind", "group": "apps", "priorityName": "invalid-configmap-priority"}]
    md = group(owner("TestKind", "apps/v1", labels={"priorityClassName": "valid-priority"}), None,
               priority_class("valid-priority"), cm=cm)
    assert md.priority_class_name == "valid-priority"


def test_InvalidPriorityClassFallsBackToConfigMap() -> None:
    cm = [{"typeName": "TestKind", "group": "apps", "priorityName": "configmap-priority"}]
    md = group(owner("TestKind", "apps/v1", labels={"priorityClassName": "invalid-priority"}), None,
               priority_class("configmap-priority"), cm=cm)
    assert md.priority_class_name == "configmap-priority"
    assert "'invalid-priority'" in md.provenance["priorityClassName"]  # the skipped candidate is explained


P = "kai.scheduler/preemptibility"


@pytest.mark.parametrize(
    ("owner_labels", "pod_labels", "expected"),
    [
        pytest.param({P: "preemptible"}, None, "preemptible", id="valid preemptible from owner"),
        pytest.param({P: "non-preemptible"}, None, "non-preemptible", id="valid non-preemptible from owner"),
        pytest.param(None, {P: "preemptible"}, "preemptible", id="valid preemptible from pod"),
        pytest.param(None, {P: "non-preemptible"}, "non-preemptible", id="valid non-preemptible from pod"),
        pytest.param({P: "invalid-value"}, None, "", id="invalid value from owner"),
        pytest.param(None, {P: "invalid-value"}, "", id="invalid value from pod"),
        pytest.param(None, None, "", id="no labels"),
        pytest.param({P: "non-preemptible"}, {P: "preemptible"}, "non-preemptible", id="owner overrides pod"),
        pytest.param({P: "invalid-value"}, {P: "preemptible"}, "preemptible", id="owner invalid pod valid"),
    ],
)
def test_CalcPodGroupPreemptibility(
    owner_labels: dict[str, str] | None, pod_labels: dict[str, str] | None, expected: str
) -> None:
    assert group(owner(labels=owner_labels), pod(labels=pod_labels)).preemptibility == expected


D = "kai.scheduler/preemption-delay"


@pytest.mark.parametrize(
    ("owner_annotations", "pod_annotations", "expected"),
    [
        pytest.param({D: "5m"}, None, "5m0s", id="valid delay from owner"),
        pytest.param(None, {D: "90s"}, "1m30s", id="valid delay from pod"),
        pytest.param({D: "1h"}, {D: "5m"}, "1h0m0s", id="owner overrides pod"),
        pytest.param({D: "abc"}, {D: "30s"}, "30s", id="invalid owner value falls through to pod"),
        pytest.param(None, {D: "5"}, None, id="unit-less number is invalid"),
        pytest.param(None, {D: "-3m"}, None, id="negative duration is invalid"),
        pytest.param(None, None, None, id="no labels"),
    ],
)
def test_CalcPodGroupPreemptionDelay(
    owner_annotations: dict[str, str] | None, pod_annotations: dict[str, str] | None, expected: str | None
) -> None:
    md = group(owner(annotations=owner_annotations), pod(annotations=pod_annotations))
    assert md.preemption_delay == expected
    assert md.spec().get("preemptionDelay") == expected


def check_owner_kind(kind: str, api_version: str, labels: dict[str, str], annotations: dict[str, str],
                     want_annotations: int, want_labels: int) -> None:
    """KAI ``default_grouper_owners_test.go``: the default grouper called without an owner list."""
    top = owner(kind, api_version, labels=labels, annotations=annotations)
    md = default_metadata(context(pod(), top, owners=[]))
    assert md.owner == OwnerRef(api_version, kind, "test_name", "1")
    assert (len(md.annotations), len(md.labels)) == (want_annotations, want_labels)
    assert (md.queue, md.priority_class_name, md.min_member) == ("default-queue", "train", 1)


def test_KubeflowPipelineScheduledWorkflow() -> None:
    check_owner_kind("ScheduledWorkflow", "kubeflow.org/v1beta1",
                     {"test_label": "v", "scheduledworkflows.kubeflow.org/enabled": "true",
                      "scheduledworkflows.kubeflow.org/status": "Enabled"}, {"test_annotation": "v"}, 2, 3)


def test_ArgoWorkflow() -> None:
    check_owner_kind("Workflow", "argoproj.io/v1alpha1",
                     {"test_label": "v", "scheduledworkflows.kubeflow.org/isOwnedByScheduledWorkflow": "true",
                      "workflows.argoproj.io/phase": "Succeeded"},
                     {"test_annotation": "v", "pipelines.kubeflow.org/components-comp-say-hello": '{"a":1}'}, 3, 3)


def test_Tekton_TaskRun() -> None:
    check_owner_kind("TaskRun", "tekton.dev/v1", {"test_label": "v", "tekton.dev/task": "hello"},
                     {"test_annotation": "v", "pipeline.tekton.dev/release": "x"}, 3, 2)


def test_Tekton_PipelineRun() -> None:
    check_owner_kind("PipelineRun", "tekton.dev/v1", {"test_label": "v", "tekton.dev/pipeline": "p"},
                     {"test_annotation": "v"}, 2, 2)


# ---------------------------------------------------------------- labels, annotations, naming


def test_top_owner_metadata_annotation_is_go_yaml() -> None:
    md = group(owner("JobSet", "jobset.x-k8s.io/v1alpha2", "js", uid="a1b2-c3"))
    text = md.annotations["kai.scheduler/top-owner-metadata"]
    assert text == "name: js\nuid: a1b2-c3\ngroup: jobset.x-k8s.io\nversion: v1alpha2\nkind: JobSet\n"
    # quoting as yaml.v3 does for values that would read back as another type
    md = group(fixture_owner())
    assert md.annotations["kai.scheduler/top-owner-metadata"] == (
        'name: test_name\nuid: "1"\ngroup: ""\nversion: test_version\nkind: test_kind\n'
    )
    assert yaml.safe_load(md.annotations["kai.scheduler/top-owner-metadata"])["uid"] == "1"


def test_owner_annotations_win_over_pod_user_and_metadata() -> None:
    top = owner(annotations={"user": "owner-user", "kai.scheduler/top-owner-metadata": "custom"})
    md = group(top, pod(annotations={"user": "pod-user"}))
    assert md.annotations == {"user": "owner-user", "kai.scheduler/top-owner-metadata": "custom"}
    md = group(owner(), pod(annotations={"user": "pod-user"}))
    assert md.annotations["user"] == "pod-user"


def test_pod_user_label_copied_when_owner_has_none() -> None:
    assert group(owner(), pod(labels={"user": "alice"})).labels == {"user": "alice"}


def test_namespace_and_bare_pod() -> None:
    p = pod("solo", namespace="ns1", uid="u1")
    md = DefaultGrouper().metadata(context(p))  # bare pod: top owner is the pod, no owners
    assert (md.name, md.namespace, md.owner) == ("pg-solo-u1", "ns1", OwnerRef("v1", "Pod", "solo", "u1"))


def test_pod_without_typemeta_gets_v1_pod() -> None:
    p = pod("solo", uid="u1", typemeta=False)
    md = default_metadata(context(p))
    assert md.owner == OwnerRef("v1", "Pod", "solo", "u1")


def test_custom_queue_label_key_and_empty_values_count_as_absent() -> None:
    config = GroupingConfig(queue_label_key="example.com/queue")
    top = owner(labels={"example.com/queue": "", "project": ""})
    ctx = context(pod(labels={"example.com/queue": "q1"}), top, config=config)
    assert default_metadata(ctx).queue == "q1"
    md = group(owner(labels={"project": "p"}), pod(labels={"kai.scheduler/node-pool": ""}))
    assert md.queue == "p"


def test_project_from_pod_with_nodepool() -> None:
    md = group(owner(), pod(labels={"project": "team", "kai.scheduler/node-pool": "a100"}))
    assert md.queue == "team-a100"
    assert "node-pool" in md.provenance["queue"]


def test_provenance_names_every_field() -> None:
    md = group(owner())
    for key in ("queue", "priorityClassName", "preemptibility", "preemptionDelay", "stalenessGracePeriod",
                "topology", "minMember", "name"):
        assert md.provenance[key], key
    assert md.provenance["priorityClassName"] == "fallback: train (no such PriorityClass in the cluster)"


def test_fallback_is_not_validated() -> None:
    md = group(owner(), None, fallback="inference")
    assert md.priority_class_name == "inference"


# ---------------------------------------------------------------- §8 item 7: priority order


def test_owner_label_beats_pod_label_and_spec_across_the_chain() -> None:
    job = owner("Job", "batch/v1", "job", uid="j")
    cron = owner("CronJob", "batch/v1", "cron", uid="c", labels={"priorityClassName": "high"})
    ctx = context(pod(labels={"priorityClassName": "mid"}, priority_class="low"), cron, owners=[job, cron],
                  objects=[priority_class("high"), priority_class("mid"), priority_class("low")])
    md = default_metadata(ctx)
    assert md.priority_class_name == "high"  # KAI would pick "mid" (pod label, tried for the direct owner)
    assert md.provenance["priorityClassName"] == "label priorityClassName on CronJob test_namespace/cron"


def test_direct_owner_label_beats_higher_owner_label() -> None:
    job = owner("Job", "batch/v1", "job", uid="j", labels={"priorityClassName": "low"})
    cron = owner("CronJob", "batch/v1", "cron", uid="c", labels={"priorityClassName": "high"})
    ctx = context(pod(), cron, owners=[job, cron], objects=[priority_class("high"), priority_class("low")])
    assert default_metadata(ctx).priority_class_name == "low"


def test_defaults_configmap_tries_each_owner_kind() -> None:
    rs = owner("ReplicaSet", "apps/v1", "rs", uid="r")
    dep = owner("Deployment", "apps/v1", "dep", uid="d")
    cm = [{"typeName": "Deployment", "group": "apps", "priorityName": "serving", "preemptibility": "Non-Preemptible"}]
    ctx = context(pod(), dep, owners=[rs, dep], objects=[priority_class("serving"), defaults_configmap(cm)],
                  defaults_cm=True)
    md = default_metadata(ctx)
    assert (md.priority_class_name, md.preemptibility) == ("serving", "non-preemptible")  # lower-cased


def test_empty_preemptibility_label_stops_the_search() -> None:
    cm = [{"typeName": "TestKind", "priorityName": "x", "preemptibility": "preemptible"}]
    md = group(owner("TestKind", "apps/v1", labels={P: ""}), cm=cm)
    assert md.preemptibility == ""
    assert "empty" in md.provenance["preemptibility"]


def test_configmap_field_names_are_case_insensitive_and_last_entry_wins() -> None:
    cm = '[{"TypeName":"TestKind","PriorityName":"a"},{"typename":"TestKind","priorityname":"b"},null]'
    parsed = parse_defaults_configmap(defaults_configmap(cm))
    assert parsed["TestKind"].priority_name == "b"
    with pytest.raises(DefaultsConfigMapError, match="must be a string"):
        parse_defaults_configmap(defaults_configmap('[{"typeName": 3}]'))
    with pytest.raises(DefaultsConfigMapError, match="JSON list"):
        parse_defaults_configmap(defaults_configmap('{"typeName": "x"}'))
    assert parse_defaults_configmap(defaults_configmap("null")) == {}


# ---------------------------------------------------------------- staleness, durations


def test_staleness_grace_period_allows_negative() -> None:
    md = group(owner(annotations={"kai.scheduler/staleness-grace-period": "-1s"}))
    assert md.staleness_grace_period == "-1s"
    md = group(owner(annotations={"kai.scheduler/staleness-grace-period": "2h30m"}),
               pod(annotations={"kai.scheduler/staleness-grace-period": "1m"}))
    assert md.staleness_grace_period == "2h30m0s"
    md = group(owner(annotations={"kai.scheduler/staleness-grace-period": "soon"}))
    assert md.staleness_grace_period is None
    assert "soon" in md.provenance["stalenessGracePeriod"]


def test_delay_from_intermediate_owner_counts() -> None:
    rs = owner("ReplicaSet", "apps/v1", "rs", uid="r", annotations={D: "10s"})
    dep = owner("Deployment", "apps/v1", "dep", uid="d")
    md = default_metadata(context(pod(annotations={D: "1m"}), dep, owners=[rs, dep]))
    assert md.preemption_delay == "10s"


@pytest.mark.parametrize(
    ("text", "printed"),
    [
        ("0", "0s"), ("0s", "0s"), ("+0", "0s"), ("-0", "0s"), ("5m", "5m0s"), ("90s", "1m30s"), ("1h", "1h0m0s"),
        ("1.5s", "1.5s"), ("1.5h", "1h30m0s"), ("300ms", "300ms"), ("1us", "1µs"), ("1µs", "1µs"), ("1μs", "1µs"),
        ("1ns", "1ns"), ("1h2m3s4ms5us6ns", "1h2m3.004005006s"), (".5s", "500ms"), ("5.s", "5s"),
        ("-3m", "-3m0s"), ("1.0000000001s", "1s"), ("100h", "100h0m0s"),
        ("2562047h47m16.854775807s", "2562047h47m16.854775807s"),
    ],
)
def test_go_durations(text: str, printed: str) -> None:
    assert format_go_duration(parse_go_duration(text)) == printed


@pytest.mark.parametrize("text", ["", "5", "abc", "1x", ".s", "1h-", "--1s", "1 s", " 1s", "9223372036854775808ns",
                                  "2562048h", "+", "-"])
def test_go_durations_invalid(text: str) -> None:
    with pytest.raises(ValueError, match="time: "):
        parse_go_duration(text)


# ---------------------------------------------------------------- node-pool label (reconcile step 8)


def test_apply_nodepool_label() -> None:
    p = pod(labels={"kai.scheduler/node-pool": "np-1"})
    md = group(owner(), p)
    apply_nodepool_label(md, p, GroupingConfig())
    assert md.labels["kai.scheduler/node-pool"] == "np-1"
    md2 = group(owner(labels={"kai.scheduler/node-pool": "owner-np"}), p)
    apply_nodepool_label(md2, p, GroupingConfig())
    assert md2.labels["kai.scheduler/node-pool"] == "owner-np"  # the plugin's value is kept
    md3 = group(owner(), pod())
    apply_nodepool_label(md3, pod(), GroupingConfig())
    assert "kai.scheduler/node-pool" not in md3.labels
    apply_nodepool_label(md3, p, GroupingConfig(nodepool_label_key=""))
    assert "kai.scheduler/node-pool" not in md3.labels


# ---------------------------------------------------------------- malformed input


def test_non_string_label_value_is_an_error_naming_the_field() -> None:
    top = owner("JobSet", "jobset.x-k8s.io/v1alpha2", "js", namespace="default")
    top["metadata"]["labels"] = {"kai.scheduler/queue": 7}
    with pytest.raises(InvalidWorkload) as err:
        group(top)
    assert str(err.value) == 'JobSet default/js: field metadata.labels["kai.scheduler/queue"]: 7 is not a string'


def test_labels_not_a_map_is_an_error() -> None:
    top = owner()
    top["metadata"]["annotations"] = ["a"]
    with pytest.raises(InvalidWorkload, match=r"metadata\.annotations"):
        group(top)


# ---------------------------------------------------------------- property: never an unexpected exception

KEYS = st.sampled_from([
    "kai.scheduler/queue", "project", "kai.scheduler/node-pool", "priorityClassName", "user",
    "kai.scheduler/preemptibility", "kai.scheduler/preemption-delay", "kai.scheduler/staleness-grace-period",
    "kai.scheduler/topology", "kai.scheduler/topology-required-placement",
    "kai.scheduler/topology-preferred-placement", "kai.scheduler/top-owner-metadata",
]) | st.text(max_size=12)
VALUES = (
    st.text(max_size=24)
    | st.sampled_from(["preemptible", "non-preemptible", "5m", "-3m", "1.5h", "0", "9999999999999h", "train", ""])
    | st.from_regex(r"-?[0-9]{0,4}(\.[0-9]{0,3})?(ns|us|ms|s|m|h)", fullmatch=True)
)
MAPS = st.dictionaries(KEYS, VALUES, max_size=8)
ODD_MAPS = st.dictionaries(KEYS, st.integers() | st.none() | st.booleans() | VALUES, max_size=3)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    owner_labels=MAPS, owner_annotations=MAPS | ODD_MAPS, pod_labels=MAPS | ODD_MAPS, pod_annotations=MAPS,
    api_version=st.sampled_from(["apps/v1", "v1", "", "a/b/c", "batch/v1"]) | st.text(max_size=8),
    kind=st.sampled_from(["Deployment", "TestKind", ""]) | st.text(max_size=8),
    pod_priority=st.none() | st.text(max_size=8) | st.integers(),
    existing=st.lists(st.sampled_from(["train", "high", "5m", "preemptible", ""]), max_size=3),
    cm=st.none() | st.text(max_size=40) | st.lists(
        st.fixed_dictionaries({"typeName": st.sampled_from(["TestKind", "Deployment", ""]),
                               "priorityName": st.sampled_from(["high", "train", "nope"]),
                               "preemptibility": st.text(max_size=16)}), max_size=3).map(json.dumps),
)
def test_default_grouper_never_raises_unexpectedly(
    owner_labels: dict[str, Any], owner_annotations: dict[str, Any], pod_labels: dict[str, Any],
    pod_annotations: dict[str, Any], api_version: str, kind: str, pod_priority: Any, existing: list[str],
    cm: str | None,
) -> None:
    top = owner(kind, api_version, labels=owner_labels, annotations=owner_annotations)
    p = pod(labels=pod_labels, annotations=pod_annotations)
    p["spec"]["priorityClassName"] = pod_priority
    objects = [priority_class(name) for name in existing if name]
    if cm is not None:
        objects.append(defaults_configmap(cm))
    ctx = context(p, top, objects=objects, defaults_cm=cm is not None)
    try:
        md = default_metadata(ctx)
    except GroupingError:
        return
    assert isinstance(md, PodGroupMetadata)
    assert md.min_member == 1
    assert md.preemptibility in ("", "preemptible", "non-preemptible")
    assert md.queue
    if md.preemption_delay is not None:
        assert not md.preemption_delay.startswith("-")
        assert format_go_duration(parse_go_duration(md.preemption_delay)) == md.preemption_delay
    md.to_object()  # serialisable shape


def test_last_applied_configuration_is_not_copied() -> None:
    # Deliberate deviation: kubectl's copy of the whole workload (env values included) stays off PodGroups.
    last_applied = "kubectl.kubernetes.io/last-applied-configuration"
    md = group(fixture_owner(annotations={last_applied: '{"spec": {"env": "secret"}}', "keep": "me"}))
    assert last_applied not in md.annotations
    assert md.annotations["keep"] == "me"


# ---------------------------------------------------------------- each map read once per decision


def _chain_case(bad: str | None) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """(pod, owners direct first, top owner, PriorityClasses): every rule reads some owner's map; ``bad`` names
    one map made malformed (``"<who>.<labels|annotations>"``, who = pod, direct, middle or top)."""
    maps = {
        "pod": ({"project": "p", "user": "u"}, {"kai.scheduler/stale-grace-period": "2m"}),
        "direct": ({"kai.scheduler/preemptibility": "bogus"}, {"kai.scheduler/preemption-delay": "nope"}),
        "middle": ({"priorityClassName": "missing", "kai.scheduler/preemptibility": "preemptible"},
                   {"kai.scheduler/preemption-delay": "90s"}),
        "top": ({"priorityClassName": "inference", "app": "x"}, {"kai.scheduler/topology": "t"}),
    }
    if bad is not None:
        who, section = bad.split(".")
        labels, annotations = maps[who]
        maps[who] = ({**labels, "broken": 7}, annotations) if section == "labels" else (labels, {**annotations, "broken": 7})  # type: ignore[dict-item]
    top = owner("Top", "example.com/v1", "top", uid="t", labels=maps["top"][0], annotations=maps["top"][1])
    middle = owner("Middle", "example.com/v1", "middle", uid="m", labels=maps["middle"][0], annotations=maps["middle"][1])
    direct = owner("Direct", "example.com/v1", "direct", uid="d", labels=maps["direct"][0], annotations=maps["direct"][1])
    the_pod = pod(labels=maps["pod"][0], annotations=maps["pod"][1], owner=direct)
    return the_pod, [direct, middle, top], top, [priority_class("inference")]


@pytest.mark.parametrize("bad", [None, *(f"{who}.{section}" for who in ("pod", "direct", "middle", "top")
                                        for section in ("labels", "annotations"))])
def test_each_map_is_read_once_and_decides_as_reading_it_at_every_use(bad: str | None,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``_Maps`` keeps each object's labels and annotations for the decision: the PodGroup, its provenance and
    the first error (naming the object and field) are what reading the map at every use gives."""
    from grouper.plugins import default

    def decide() -> PodGroupMetadata | str:
        the_pod, owners, top, classes = _chain_case(bad)
        try:
            return default_metadata(context(the_pod, top, owners, objects=classes))
        except InvalidWorkload as e:
            return str(e)

    reads: list[int] = []
    real = default.labels_of, default.annotations_of
    monkeypatch.setattr(default, "labels_of", lambda obj: reads.append(id(obj)) or real[0](obj))
    monkeypatch.setattr(default, "annotations_of", lambda obj: reads.append(id(obj)) or real[1](obj))
    kept = decide()
    kept_reads = len(reads)
    monkeypatch.setattr(default._Maps, "labels", lambda self, obj: default.labels_of(obj))
    monkeypatch.setattr(default._Maps, "annotations", lambda self, obj: default.annotations_of(obj))
    reads.clear()
    every_time = decide()
    assert kept == every_time
    if bad is None:
        assert isinstance(kept, PodGroupMetadata)
        assert (kept.priority_class_name, kept.preemptibility, kept.preemption_delay, kept.queue) == (
            "inference", "preemptible", "1m30s", "p")
        assert kept_reads == 8 < len(reads)  # four objects, two maps each, against one read per use
    else:
        assert isinstance(kept, str) and "broken" in kept, kept
