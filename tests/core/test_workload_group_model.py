"""The WorkloadGroup object and the membership annotation: parsing, with errors naming object and field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from grouper.model import workload_group as wg
from grouper.model.podgroup import TopologyConstraint

GOOD: dict[str, Any] = {
    "apiVersion": "grouper.kai-pod-grouper.io/v1alpha1",
    "kind": "WorkloadGroup",
    "metadata": {"name": "rl", "namespace": "team-a", "uid": "u-1"},
    "spec": {
        "expectedWorkloads": 3,
        "priorityClassName": "train",
        "preemptibility": "non-preemptible",
        "preemptionDelay": "90s",
        "stalenessGracePeriod": "-1s",
        "topologyConstraint": {"topology": "gpu-topology", "requiredTopologyLevel": "zone"},
    },
}


def with_spec(**changes: Any) -> dict[str, Any]:
    obj = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if value is None:
            obj["spec"].pop(key, None)
        else:
            obj["spec"][key] = value
    return obj


def test_parse_reads_every_field_and_normalizes_durations() -> None:
    g = wg.parse(GOOD)
    assert g == wg.WorkloadGroup(
        namespace="team-a", name="rl", uid="u-1", expected_workloads=3, priority_class_name="train",
        preemptibility="non-preemptible", preemption_delay="1m30s", staleness_grace_period="-1s",
        topology=TopologyConstraint(topology="gpu-topology", required_level="zone"),
    )
    assert g.key == "team-a/rl"


def test_only_expected_workloads_is_required() -> None:
    obj = {**GOOD, "spec": {"expectedWorkloads": 1}}
    g = wg.parse(obj)
    assert (g.priority_class_name, g.preemptibility, g.preemption_delay, g.staleness_grace_period, g.topology) == (
        None, None, None, None, None
    )


@pytest.mark.parametrize(
    ("obj", "field", "words"),
    [
        (with_spec(expectedWorkloads=None), "spec.expectedWorkloads", "is required"),
        (with_spec(expectedWorkloads=0), "spec.expectedWorkloads", "between 1 and 1000"),
        (with_spec(expectedWorkloads=1001), "spec.expectedWorkloads", "between 1 and 1000"),
        (with_spec(expectedWorkloads=10**400), "spec.expectedWorkloads", "got 100000000000…(401 digits)"),
        (with_spec(expectedWorkloads="3"), "spec.expectedWorkloads", "expected an integer"),
        (with_spec(expectedWorkloads=True), "spec.expectedWorkloads", "expected an integer"),
        (with_spec(expectedPodGroups=3), "spec.expectedPodGroups", "use spec.expectedWorkloads"),
        (with_spec(prioriy="train"), "spec.prioriy", "unknown field"),
        (with_spec(priorityClassName="Not_A_Name"), "spec.priorityClassName", "not a valid PriorityClass name"),
        (with_spec(priorityClassName=""), "spec.priorityClassName", "non-empty string"),
        (with_spec(preemptibility="sometimes"), "spec.preemptibility", "not one of"),
        (with_spec(preemptionDelay="5 minutes"), "spec.preemptionDelay", "not a valid duration"),
        (with_spec(preemptionDelay="-5m"), "spec.preemptionDelay", "non-negative"),
        (with_spec(stalenessGracePeriod="soon"), "spec.stalenessGracePeriod", "not a valid duration"),
        (with_spec(topologyConstraint="zone"), "spec.topologyConstraint", "expected an object"),
        (with_spec(topologyConstraint={"requiredTopologyLevel": "zone"}), "spec.topologyConstraint.topology",
         "is required"),
        (with_spec(topologyConstraint={"topology": "t"}), "spec.topologyConstraint", "neither"),
        (with_spec(topologyConstraint={"topology": "t", "level": "zone"}), "spec.topologyConstraint.level",
         "unknown field"),
        ({**GOOD, "spec": []}, "spec", "expected an object"),
        ({**GOOD, "metadata": {"name": "rl"}}, "metadata.namespace", "is required"),
        ({**GOOD, "metadata": {"name": "RL", "namespace": "a"}}, "metadata.name", "DNS label"),
        ({**GOOD, "apiVersion": "scheduling.run.ai/v1alpha1"}, "apiVersion", "KAI's proposed group"),
        ({**GOOD, "apiVersion": "grouper.kai-pod-grouper.io/v2"}, "apiVersion", "is not"),
    ],
)
def test_bad_objects_are_refused_naming_the_object_and_the_field(obj: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(wg.InvalidWorkloadGroup) as err:
        wg.parse(obj)
    message = str(err.value)
    ns = obj.get("metadata", {}).get("namespace")
    assert message.startswith(f"WorkloadGroup {ns + '/' if ns else ''}{obj['metadata']['name']}: field {field}: ")
    assert words in message
    assert err.value.retryable is False


def test_kais_proposed_group_is_recognized_so_that_parse_can_point_at_ours() -> None:
    assert wg.is_workload_group({**GOOD, "apiVersion": "scheduling.run.ai/v1alpha1"})
    assert wg.is_workload_group(GOOD)
    assert not wg.is_workload_group({**GOOD, "kind": "PodGroup"})
    assert not wg.is_workload_group({**GOOD, "apiVersion": "example.com/v1"})


def test_membership_is_the_annotation_value() -> None:
    obj = {"kind": "RayJob", "metadata": {"name": "j", "namespace": "a",
                                          "annotations": {"kai.scheduler/workload-group": "rl"}}}
    assert wg.membership(obj) == "rl"
    assert wg.membership({"kind": "RayJob", "metadata": {"name": "j"}}) is None
    assert wg.membership({"kind": "RayJob", "metadata": {"name": "j", "annotations": {"other": "x"}}}) is None


@pytest.mark.parametrize("value", ["", "Not-Lowercase", "a" * 64, 3, "has.dot"])
def test_a_membership_value_that_cannot_name_a_group_is_an_error_naming_the_workload(value: Any) -> None:
    obj = {"kind": "RayJob", "metadata": {"name": "j", "namespace": "a",
                                          "annotations": {"kai.scheduler/workload-group": value}}}
    with pytest.raises(wg.InvalidWorkloadGroup) as err:
        wg.membership(obj)
    assert str(err.value).startswith('RayJob a/j: field metadata.annotations["kai.scheduler/workload-group"]: ')
