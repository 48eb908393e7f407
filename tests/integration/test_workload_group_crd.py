"""The WorkloadGroup CRD (deploy/crds) on a real kube-apiserver: it is structural and Established (the
``cluster`` fixture installs every CRD of deploy/crds), the examples' WorkloadGroups are stored as written,
and the API server and ``grouper.model.workload_group.parse`` agree on what is invalid — so a WorkloadGroup
the API server accepts is one the grouper can read (and the reverse for every case below)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube import Kube, KubeError

from grouper.model import workload_group as wg

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "workload-groups"
CRD = "workloadgroups.grouper.kai-pod-grouper.io"


def example(name: str) -> dict[str, Any]:
    return next(d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d and d["kind"] == "WorkloadGroup")


def in_namespace(obj: dict[str, Any], ns: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"] = {"name": obj["metadata"]["name"], "namespace": ns}
    return out


def path(ns: str) -> str:
    return f"/apis/grouper.kai-pod-grouper.io/v1alpha1/namespaces/{ns}/workloadgroups"


def test_the_crd_is_established_and_structural(kube: Kube) -> None:
    crd = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD}")
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions.get("Established") == "True"
    assert conditions.get("NonStructuralSchema", "False") == "False"


@pytest.mark.parametrize("name", ["rl-post-training.yaml", "finetune-and-serve.yaml"])
def test_the_examples_are_stored_as_written_and_parse_back(kube: Kube, namespace: str, name: str) -> None:
    obj = in_namespace(example(name), namespace)
    stored = kube.create(path(namespace), obj)
    assert stored["spec"] == obj["spec"]
    parsed = wg.parse(stored)
    assert parsed.expected_workloads == obj["spec"]["expectedWorkloads"] and parsed.uid == stored["metadata"]["uid"]


BAD_SPECS: dict[str, dict[str, Any]] = {
    "no expectedWorkloads": {},
    "zero workloads": {"expectedWorkloads": 0},
    "too many workloads": {"expectedWorkloads": 1001},
    "a string count": {"expectedWorkloads": "3"},
    "unknown preemptibility": {"expectedWorkloads": 2, "preemptibility": "sometimes"},
    "a duration without unit": {"expectedWorkloads": 2, "preemptionDelay": "5"},
    "a negative preemption delay": {"expectedWorkloads": 2, "preemptionDelay": "-5m"},
    "a grace in words": {"expectedWorkloads": 2, "stalenessGracePeriod": "soon"},
    "topology without a level": {"expectedWorkloads": 2, "topologyConstraint": {"topology": "gpu"}},
    "a level without topology": {"expectedWorkloads": 2, "topologyConstraint": {"requiredTopologyLevel": "zone"}},
    "an empty priority": {"expectedWorkloads": 2, "priorityClassName": ""},
}


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_the_api_server_and_the_parser_refuse_the_same_objects(kube: Kube, namespace: str, case: str) -> None:
    obj = {"apiVersion": wg.API_VERSION, "kind": wg.KIND, "metadata": {"name": "g", "namespace": namespace},
           "spec": BAD_SPECS[case]}
    with pytest.raises(KubeError) as refused:
        kube.create(path(namespace), obj)
    assert refused.value.status == 422, refused.value
    with pytest.raises(wg.InvalidWorkloadGroup):
        wg.parse(obj)


GOOD_SPECS: dict[str, dict[str, Any]] = {
    "minimal": {"expectedWorkloads": 1},
    "fractional and compound durations": {"expectedWorkloads": 2, "preemptionDelay": "1.5h",
                                          "stalenessGracePeriod": "1h30m"},
    "negative grace": {"expectedWorkloads": 2, "stalenessGracePeriod": "-1s"},
    "zero durations": {"expectedWorkloads": 2, "preemptionDelay": "0", "stalenessGracePeriod": "0s"},
    "semi-preemptible": {"expectedWorkloads": 3, "preemptibility": "semi-preemptible"},
    "preferred topology": {"expectedWorkloads": 2, "topologyConstraint": {"topology": "gpu",
                                                                          "preferredTopologyLevel": "zone"}},
}


@pytest.mark.parametrize("case", sorted(GOOD_SPECS))
def test_the_api_server_and_the_parser_accept_the_same_objects(kube: Kube, namespace: str, case: str) -> None:
    obj = {"apiVersion": wg.API_VERSION, "kind": wg.KIND, "metadata": {"name": "g", "namespace": namespace},
           "spec": GOOD_SPECS[case]}
    stored = kube.create(path(namespace), obj)
    assert stored["spec"] == obj["spec"]
    wg.parse(stored)
