"""KAI v0.18 grouping rules (upstream-2026-10.md §1.3), one test per rule, named after it.

StatefulSet cases mirror KAI's ``statefulset_grouper_test.go``; min-member parsing mirrors
``minmember/min_member_test.go``; the semi-preemptible warnings mirror ``pytorch_semi_preemptible_test.go``
and ``lws_semi_preemptible_test.go``; skip-top-owner through the hub mirrors PR #2067.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import context, obj, owner, pod

from grouper.core.lookups import InMemoryLookups
from grouper.karta import DefinitionRegistry
from grouper.model.errors import InvalidWorkload
from grouper.model.objects import Obj
from grouper.model.podgroup import OwnerRef
from grouper.plugins.default import DefaultGrouper
from grouper.plugins.lws import LWSGrouper
from grouper.plugins.pytorch import PyTorchGrouper
from grouper.plugins.statefulset import StatefulSetGrouper
from grouper.runtime.composition import build_grouper as Grouper
from tests.karta.fixtures import pyflow_karta, pyflow_object

MIN = "kai.scheduler/min-member"
BATCH = "kai.scheduler/batch-min-member"
PREEMPT = "kai.scheduler/preemptibility"


def sts(annotations: dict[str, str] | None = None, policy: str | None = None) -> Obj:
    spec: dict[str, Any] = {} if policy is None else {"podManagementPolicy": policy}
    return obj("apps/v1", "StatefulSet", "workers", namespace="ns", uid="test-uid", annotations=annotations,
               spec=spec)


def sts_run(owner_obj: Obj):  # type: ignore[no-untyped-def]
    return StatefulSetGrouper().metadata(context(pod("workers-0", namespace="ns"), owner_obj))


# ---------------------------------------------------------------- StatefulSet grouper


@pytest.mark.parametrize("policy", ["OrderedReady", None])
def test_StatefulSet_NoAnnotation(policy: str | None) -> None:
    md = sts_run(sts(policy=policy))
    assert (md.name, md.min_member) == ("pg-workers-test-uid", 1)
    assert md.owner == OwnerRef("apps/v1", "StatefulSet", "workers", "test-uid")


@pytest.mark.parametrize(("value", "want"), [("4", 4), ("8", 8), ("1", 1)])
def test_StatefulSet_ValidAnnotation_Parallel(value: str, want: int) -> None:
    md = sts_run(sts({MIN: value}, "Parallel"))
    assert md.min_member == want
    assert "podManagementPolicy Parallel" in md.provenance["minMember"]


@pytest.mark.parametrize("value", ["abc", "1.5", "0", "-1"])
def test_StatefulSet_InvalidAnnotation(value: str) -> None:
    with pytest.raises(InvalidWorkload, match=r'StatefulSet ns/workers: field metadata.annotations\["kai.scheduler/min-member"\]'):
        sts_run(sts({MIN: value}, "Parallel"))


def test_StatefulSet_Annotation_ExplicitOrderedReady() -> None:
    with pytest.raises(InvalidWorkload) as err:
        sts_run(sts({MIN: "4"}, "OrderedReady"))
    message = str(err.value)
    assert message.startswith("StatefulSet ns/workers: field spec.podManagementPolicy: ")
    assert "requires spec.podManagementPolicy: Parallel" in message
    assert "'OrderedReady'" in message and "deadlocks gang scheduling" in message


def test_StatefulSet_Annotation_DefaultPolicy() -> None:
    with pytest.raises(InvalidWorkload, match=r"OrderedReady \(default\)"):
        sts_run(sts({MIN: "4"}))


def test_StatefulSet_Annotation_One_OrderedReady() -> None:
    with pytest.raises(InvalidWorkload, match="podManagementPolicy: Parallel"):
        sts_run(sts({MIN: "1"}, "OrderedReady"))


def test_StatefulSet_BatchMinMemberHonouredByDefaultGrouper() -> None:
    """v0.18 fragment added-20260929 (issue #2098): the default grouper honours batch-min-member; this
    does not depend on the pod management policy (KAI's older statefulset test predates it)."""
    assert sts_run(sts({BATCH: "4"}, "OrderedReady")).min_member == 4


def test_StatefulSet_MinMemberWinsOverBatchMinMember() -> None:
    assert sts_run(sts({BATCH: "2", MIN: "3"}, "Parallel")).min_member == 3


def test_StatefulSet_ErrorThroughTheGrouperNamesTheStatefulSet() -> None:
    s = sts({MIN: "4"})
    p = pod("workers-0", namespace="ns", owner=s)
    d = Grouper().decide(p, InMemoryLookups([s]))
    assert (d.outcome, d.reason, d.plugin) == ("error", "InvalidWorkload", "StatefulSet Grouper")
    assert d.message.startswith("StatefulSet ns/workers: ")


# ---------------------------------------------------------------- default grouper batch-min-member


@pytest.mark.parametrize("kind", [("apps/v1", "ReplicaSet"), ("tekton.dev/v1", "TaskRun"), ("example.com/v1", "Widget")])
def test_DefaultGrouper_HonoursBatchMinMember(kind: tuple[str, str]) -> None:
    top = obj(kind[0], kind[1], "w", namespace="ns", uid="u", annotations={BATCH: "5"})
    md = DefaultGrouper().metadata(context(pod("w-0", namespace="ns", owner=top), top))
    assert md.min_member == 5
    assert md.provenance["minMember"] == f"annotation {BATCH} on {kind[1]} ns/w"


@pytest.mark.parametrize("value", ["0", "-3", "x", "2147483648"])
def test_MinMember_BelowOneOrMalformedRejected_NamingTheObject(value: str) -> None:
    top = owner("Widget", "example.com/v1", "w", annotations={BATCH: value})
    with pytest.raises(InvalidWorkload) as err:
        DefaultGrouper().metadata(context(pod(), top))
    assert str(err.value).startswith(f'Widget test_namespace/w: field metadata.annotations["{BATCH}"]: ')


def test_DefaultGrouper_NoAnnotationIsOne() -> None:
    md = DefaultGrouper().metadata(context(pod(), owner()))
    assert (md.min_member, md.provenance["minMember"]) == (1, "default grouper: 1")


# ---------------------------------------------------------------- skip-top-owner through the hub


def _runai(kind: str, version: str = "v7") -> Obj:
    return obj(f"run.ai/{version}", kind, "runner", namespace="ns", uid="r-1", labels={"kai.scheduler/queue": "team"})


@pytest.mark.parametrize("version", ["v1", "v2alpha1"])
def test_WorkloadRunner_IsSkippedAnyVersion(version: str) -> None:
    runner = _runai("WorkloadRunner", version)
    job = obj("batch/v1", "Job", "runner-job", namespace="ns", uid="j-1", owner=runner)
    p = pod("runner-job-abc", namespace="ns", owner=job)
    d = Grouper().decide(p, InMemoryLookups([runner, job]))
    assert (d.outcome, d.plugin) == ("grouped", "SkipTopOwner Grouper")
    assert d.pod_group is not None
    assert d.pod_group.owner == OwnerRef("batch/v1", "Job", "runner-job", "j-1")
    assert d.pod_group.queue == "team"  # the skipped owner's labels propagate down
    assert "grouped by BatchJob Grouper" in d.pod_group.provenance["skippedTopOwner"]


def test_SkipTopOwner_ResolvesTheNextOwnerByWildcardVersion() -> None:
    """The kind below the skipped owner is found through the hub's any-version entries
    (DynamoGraphDeployment is registered with version "*"), no longer only by exact GVK."""
    runner = _runai("WorkloadRunner")
    dgd = obj("nvidia.com/v9", "DynamoGraphDeployment", "dgd", namespace="ns", uid="g-1", owner=runner)
    p = pod("dgd-0", namespace="ns", owner=dgd)
    d = Grouper().decide(p, InMemoryLookups([runner, dgd]))
    assert d.pod_group is not None
    # DynamoGraphDeployment is itself skipped, down to the pod (PodJob grouper): one PodGroup per pod.
    assert d.pod_group.owner.kind == "Pod"
    assert "grouped by SkipTopOwner Grouper" in d.pod_group.provenance["skippedTopOwner"]


def test_SkipTopOwner_ResolvesTheNextOwnerThroughTheKartaFallback(tmp_path: Path) -> None:
    (tmp_path / "pyflow.yaml").write_text(yaml.safe_dump(pyflow_karta({"podGroup": {"name": "training"}})))
    runner = _runai("WorkloadRunner")
    flow = pyflow_object()
    flow["metadata"].update(namespace="ns", ownerReferences=[
        {"apiVersion": "run.ai/v7", "kind": "WorkloadRunner", "name": "runner", "uid": "r-1", "controller": True}])
    p = pod("pyflow-pod", namespace="ns", labels={"role": "worker"}, owner=flow)
    d = Grouper(definitions=DefinitionRegistry(tmp_path)).decide(p, InMemoryLookups([runner, flow]))
    assert d.outcome == "grouped", d.message
    assert d.pod_group is not None
    assert d.pod_group.name == f"pg-{flow['metadata']['uid']}-training"
    assert d.pod_group.min_member == 3
    assert "grouped by Karta" in d.pod_group.provenance["skippedTopOwner"]


# ---------------------------------------------------------------- semi-preemptible


def test_SemiPreemptible_IsPassedThrough() -> None:
    top = owner(labels={PREEMPT: "semi-preemptible"})
    md = DefaultGrouper().metadata(context(pod(), top))
    assert md.preemptibility == "semi-preemptible" and md.warnings == []
    assert md.spec()["preemptibility"] == "semi-preemptible"


def _pytorch(segmented: bool) -> Obj:
    worker: dict[str, Any] = {"replicas": 4}
    if segmented:
        worker["template"] = {"metadata": {"annotations": {"kai.scheduler/segment-size": "2"}}}
    return obj("kubeflow.org/v1", "PyTorchJob", "test-job", namespace="test_namespace", uid="1",
               spec={"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": worker}})


@pytest.mark.parametrize(("segmented", "semi", "warns"), [(True, True, True), (True, False, False), (False, True, False)])
def test_PyTorchWarnOnSemiPreemptibleSegmented(segmented: bool, semi: bool, warns: bool) -> None:
    labels = {"training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": "0"}
    if semi:
        labels[PREEMPT] = "semi-preemptible"
    md = PyTorchGrouper().metadata(context(pod("test-job-worker-0", labels=labels), _pytorch(segmented)))
    assert bool(md.warnings) is warns
    if warns:
        assert "PyTorchJob test_namespace/test-job is segmented and semi-preemptible" in md.warnings[0]


@pytest.mark.parametrize(("segmented", "semi", "warns"), [(True, True, True), (True, False, False), (False, True, False)])
def test_LWSWarnOnSemiPreemptibleSegmented(segmented: bool, semi: bool, warns: bool) -> None:
    tmpl: dict[str, Any] = {"size": 5, "workerTemplate": {"metadata": {}}}
    if segmented:
        tmpl["subGroupPolicy"] = {"subGroupSize": 2}
    lws = obj("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "lws", uid="lws-uid",
              labels={PREEMPT: "semi-preemptible"} if semi else None, spec={"leaderWorkerTemplate": tmpl})
    p = pod("lws-0-1", namespace="default", labels={"leaderworkerset.sigs.k8s.io/worker-index": "1"})
    md = LWSGrouper().metadata(context(p, lws))
    assert bool(md.warnings) is warns


def test_SemiPreemptibleWarningIsInTheDecisionRecord() -> None:
    job = _pytorch(True)
    job["metadata"]["labels"] = {PREEMPT: "semi-preemptible"}
    p = pod("test-job-worker-0", labels={"training.kubeflow.org/replica-type": "worker",
                                         "training.kubeflow.org/replica-index": "0"}, owner=job)
    d = Grouper().decide(p, InMemoryLookups([job]))
    assert d.outcome == "grouped", d.message
    assert any(n.startswith("warning: PyTorchJob test_namespace/test-job is segmented") for n in d.notes)


# ---------------------------------------------------------------- minMember 0 at the root


def test_RootMinMemberZeroIsValid() -> None:
    """CRD minimum 0 for minMember / minSubGroup (PR #1989): a zero root is written, not rejected."""
    from grouper.core.validation import validate_pod_group

    md = DefaultGrouper().metadata(context(pod(), owner(name="scale-to-zero")))
    md.min_member = 0
    assert validate_pod_group(md) == []
    crd = yaml.safe_load((Path(__file__).parents[2] / "deploy/crds/scheduling.run.ai_podgroups.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["minMember"]["minimum"] == 0 and spec["minSubGroup"]["minimum"] == 0
    assert "semi-preemptible" in spec["preemptibility"]["enum"]
