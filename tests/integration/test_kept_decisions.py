"""Kept decisions against the real API server: a pod that joins an already decided workload is decided
alone (its siblings keep their decisions and the PodGroup is not written), while a change to an object
the decisions read decides every pod again. Observed through ``podgrouper_pod_decisions_total{source}``,
the PodGroup and the pods' marks — what an operator sees.

The test plays the training operator: it creates the PyTorchJob and its pods itself (no controller of
that kind runs here), so nothing else touches the pods and the counts are exact."""

from __future__ import annotations

import time
from typing import Any

from controller.harness import (
    ANNOTATION,
    SUBGROUP,
    GrouperThread,
    annotated,
    job_pod_spec,
    pod_groups,
)
from kube import Kube, wait_until

PYTORCH = "/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"
SELECTOR = "training.kubeflow.org/job-name=train"


def decisions(g: GrouperThread, source: str = "decided") -> float:
    value = g.metrics.registry.get_sample_value("podgrouper_pod_decisions_total", {"source": source})
    return value or 0.0


def pytorchjob(workers: int) -> dict[str, Any]:
    def replica(n: int) -> dict[str, Any]:
        return {"replicas": n, "template": {"spec": job_pod_spec()}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "train"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}},
    }


def replica_pod(owner: dict[str, Any], rtype: str, index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"train-{rtype}-{index}",
            "labels": {
                "training.kubeflow.org/job-name": "train",
                "training.kubeflow.org/replica-type": rtype,
                "training.kubeflow.org/replica-index": str(index),
            },
            "ownerReferences": [
                {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "train",
                 "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
            ],
        },
        "spec": job_pod_spec(),
    }


def train(kube: Kube, ns: str, replicas: int, workers: int) -> dict[str, Any]:
    """The PyTorchJob ``train`` (``replicas`` workers in its spec) and, as its operator would, its master's pod
    and ``workers`` workers' pods: the PyTorchJob."""
    owner = kube.create(PYTORCH.format(ns=ns), pytorchjob(replicas))
    for rtype, index in [("master", 0), *(("worker", i) for i in range(workers))]:
        kube.create(f"/api/v1/namespaces/{ns}/pods", replica_pod(owner, rtype, index))
    return owner


def grouped(kube: Kube, ns: str, grouper: GrouperThread, pods: int, timeout: float = 30) -> list[dict[str, Any]]:
    """``train``'s ``pods`` pods once all are marked and the grouper is idle, each decided once."""
    ps = wait_until(lambda: annotated(kube, ns, pods, SELECTOR), timeout, what=f"{pods} annotated pods")
    grouper.wait_idle()
    assert decisions(grouper) == pods, "each pod decided once while they arrived"
    return ps


def test_a_new_pod_is_decided_alone_and_an_owner_change_decides_all(
    kube: Kube, scoped: str, grouper: GrouperThread
) -> None:
    ns = scoped
    owner = train(kube, ns, 3, 2)
    name = f"pg-train-{owner['metadata']['uid']}"
    ps = grouped(kube, ns, grouper, 3)
    assert {p["metadata"]["annotations"][ANNOTATION] for p in ps} == {name}
    decided = decisions(grouper)
    pg_version = pod_groups(kube, ns)[name]["metadata"]["resourceVersion"]

    # the last worker arrives: it alone is decided, placed into the decided PodGroup, and patched
    kube.create(f"/api/v1/namespaces/{ns}/pods", replica_pod(owner, "worker", 2))
    ps = wait_until(lambda: annotated(kube, ns, 4, SELECTOR), 30, what="the new worker annotated")
    grouper.wait_idle()
    assert decisions(grouper) == decided + 1
    assert pod_groups(kube, ns)[name]["metadata"]["resourceVersion"] == pg_version, "PodGroup not rewritten"
    new = next(p for p in ps if p["metadata"]["name"] == "train-worker-2")
    assert new["metadata"]["annotations"][ANNOTATION] == name
    assert new["metadata"]["labels"].get(SUBGROUP) == next(
        p for p in ps if p["metadata"]["name"] == "train-worker-0")["metadata"]["labels"].get(SUBGROUP)

    # a label on the PyTorchJob (copied to its PodGroup): every decision read it, so all four are redone
    kube.patch(f"{PYTORCH.format(ns=ns)}/train", {"metadata": {"labels": {"team": "vision"}}})
    wait_until(
        lambda: pod_groups(kube, ns)[name]["metadata"].get("labels", {}).get("team") == "vision",
        30,
        what="the owner's new label on its PodGroup",
    )
    grouper.wait_idle()
    assert decisions(grouper) == decided + 1 + 4


def test_a_new_pod_costs_one_decision_and_a_stripped_mark_is_repaired_without_deciding_again(
    kube: Kube, scoped: str, grouper: GrouperThread
) -> None:
    """With 12 pods grouped, a new pod costs one decision (the others are kept); a mark someone strips
    from an old pod changes nothing its decision read, so it is put back with the kept decision."""
    ns = scoped
    owner = train(kube, ns, 12, 11)
    name = f"pg-train-{owner['metadata']['uid']}"
    grouped(kube, ns, grouper, 12)
    decided = decisions(grouper)

    # our own patch of the pod changes nothing its decision read: it stays kept
    kube.create(f"/api/v1/namespaces/{ns}/pods", replica_pod(owner, "worker", 11))
    wait_until(lambda: annotated(kube, ns, 13, SELECTOR), 30, what="the new worker annotated")
    grouper.wait_idle()
    assert decisions(grouper) == decided + 1
    kube.patch(f"/api/v1/namespaces/{ns}/pods/train-worker-3", {"metadata": {"annotations": {ANNOTATION: None}}})
    wait_until(lambda: annotated(kube, ns, 13, SELECTOR), 30, what="the stripped mark put back")
    grouper.wait_idle()
    assert decisions(grouper) == decided + 1, "the stripped pod's decision was kept"
    pod = kube.get(f"/api/v1/namespaces/{ns}/pods/train-worker-3")
    assert pod["metadata"]["annotations"][ANNOTATION] == name


def test_a_pass_over_a_big_workload_looks_only_at_what_changed(kube: Kube, scoped: str, grouper: GrouperThread) -> None:
    """40 pods grouped (a workload big enough that its passes start from the last plan carried out): a new
    pod and a stripped mark each cost a look at that pod only — the new pod decided, the stripped one's
    decision kept — not a re-check of every kept decision (before: 40 and 41 of them); a PodGroup changed by
    someone else is compared in full (every kept decision checked again) and put back."""
    ns = scoped
    owner = train(kube, ns, 39, 39)
    name = f"pg-train-{owner['metadata']['uid']}"
    grouped(kube, ns, grouper, 40, timeout=60)
    decided, kept = decisions(grouper), decisions(grouper, "kept")

    kube.create(f"/api/v1/namespaces/{ns}/pods", replica_pod(owner, "worker", 39))
    wait_until(lambda: annotated(kube, ns, 41, SELECTOR), 30, what="the new worker annotated")
    grouper.wait_idle()
    assert decisions(grouper) == decided + 1
    assert decisions(grouper, "kept") - kept <= 1, "the pass looked at the new pod (and its echo), not all 40"
    kept = decisions(grouper, "kept")

    kube.patch(f"/api/v1/namespaces/{ns}/pods/train-worker-3", {"metadata": {"annotations": {ANNOTATION: None}}})
    wait_until(lambda: annotated(kube, ns, 41, SELECTOR), 30, what="the stripped mark put back")
    grouper.wait_idle()
    assert decisions(grouper) == decided + 1, "the stripped pod's decision was kept"
    assert decisions(grouper, "kept") - kept <= 2, "the pass looked at the stripped pod (and its echo), not all 41"
    kept = decisions(grouper, "kept")

    path = f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups/{name}"
    want = kube.get(path)["spec"]["minMember"]
    kube.patch(path, {"spec": {"minMember": 7}})
    wait_until(lambda: kube.get(path)["spec"]["minMember"] == want, 30, what="the PodGroup put back")
    grouper.wait_idle()
    assert decisions(grouper) == decided + 1 and decisions(grouper, "kept") - kept >= 41, "compared in full"


def _refuse_podgroups(kube: Kube, ns: str) -> str:
    """A ValidatingAdmissionPolicy that refuses creating PodGroups in ``ns``; returns its name once the
    API server enforces it."""
    name = f"no-podgroups-{ns}"
    kube.create("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": ["scheduling.run.ai"], "apiVersions": ["*"],
                                                         "operations": ["CREATE"], "resources": ["podgroups"]}]},
                 "validations": [{"expression": "false", "message": "no PodGroups in this namespace"}]}})
    kube.create("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}}})
    probe = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "probe"},
             "spec": {"minMember": 1}}

    def enforced() -> bool:
        try:
            kube.create(f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups", probe)
        except Exception:
            return True
        kube.delete(f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups/probe")
        return False

    wait_until(enforced, 30, what="the policy enforced")
    return name


def test_pods_left_unmarked_by_a_refused_podgroup_are_marked_once_it_is_written(
    kube: Kube, scoped: str, grouper: GrouperThread
) -> None:
    """An admission policy refuses the PodGroup (422: terminal, so not retried on a timer): its pods stay
    unmarked; once the policy is gone, the next change of one pod re-queues the workload, and that pass
    marks all five."""
    ns = scoped
    policy = _refuse_podgroups(kube, ns)
    try:
        owner = train(kube, ns, 4, 4)
        wait_until(
            lambda: (grouper.metrics.registry.get_sample_value(
                "podgrouper_reconciles_total", {"result": "failed", "plugin": "PyTorchJob Grouper"}) or 0) >= 1,
            60, what="the refused PodGroup reported",
        )
        assert annotated(kube, ns, 5, SELECTOR) is None and not pod_groups(kube, ns)
    finally:
        kube.delete(f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{policy}")
        kube.delete(f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{policy}")
    # the API server drops the policy from its admission within a moment: touch a pod until it is written
    def touched_and_marked() -> list[dict[str, Any]] | None:
        kube.patch(f"/api/v1/namespaces/{ns}/pods/train-master-0",
                   {"metadata": {"labels": {"touched": str(time.monotonic_ns())}}})
        try:
            return wait_until(lambda: annotated(kube, ns, 5, SELECTOR), 3, what="all 5 pods marked")
        except TimeoutError:
            return None  # refused again (the policy still in force): touch again

    ps = wait_until(touched_and_marked, 90, what="all 5 pods marked after the policy went and a pod changed")
    name = f"pg-train-{owner['metadata']['uid']}"
    assert {p["metadata"]["annotations"][ANNOTATION] for p in ps} == {name}
    assert name in pod_groups(kube, ns)
