"""The workload context (``grouper/core/workload_context.py``): what a planning pass computes once for a
workload's pods — the owner walk, the plugin's per-workload part (a JobSet's sub-groups, a Karta definition's
one sandbox run), the PodGroup rules' answer — gives the decisions deciding each pod alone gives."""

from __future__ import annotations

from typing import Any

import pytest

from grouper.core.context import GroupingContext
from grouper.core.lookups import InMemoryLookups
from grouper.core.workload_context import WorkloadContext
from grouper.karta import Evaluator
from grouper.model.objects import Obj
from grouper.plugins.jobset import JobSetGrouper
from grouper.plugins.karta import KartaGrouper
from grouper.runtime.composition import build_grouper
from tests.karta.test_evaluate_each import CountingRunner, nimservice, nimservice_pods, nimservice_root

__all__ = ["nimservice"]  # the fixture, used by name

NS = "ns"


def owned(api_version: str, kind: str, name: str, owner: Obj | None = None, **extra: Any) -> Obj:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{kind.lower()}-{name}", "resourceVersion": "1"}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"], "controller": True,
                                    "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}]
    meta.update(extra.pop("meta", {}))
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **extra}


def jobset_world(name: str, replicas: int, *, bad: bool = False) -> tuple[list[Obj], list[Obj]]:
    """A JobSet of one replicatedJob ``worker`` with ``replicas`` Jobs of two pods each (``bad``: a negative
    parallelism, an error of the JobSet's sub-groups)."""
    parallelism = -1 if bad else 2
    js = owned("jobset.x-k8s.io/v1alpha2", "JobSet", name, spec={"replicatedJobs": [
        {"name": "worker", "replicas": replicas, "template": {"spec": {"parallelism": parallelism}}}]})
    objects, pods = [js], []
    for r in range(replicas):
        job = owned("batch/v1", "Job", f"{name}-worker-{r}", js)
        objects.append(job)
        for i in range(2):
            labels = {"jobset.sigs.k8s.io/replicatedjob-name": "worker", "jobset.sigs.k8s.io/job-index": str(r)}
            pods.append(owned("v1", "Pod", f"{name}-worker-{r}-{i}", job, meta={"labels": labels},
                              spec={"schedulerName": "kai-scheduler"}))
    return objects + pods, pods


@pytest.fixture()
def prepares(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The top owners JobSet sub-groups were built for."""
    built: list[str] = []
    real = JobSetGrouper.prepare

    def counting(self: JobSetGrouper, top_owner: Obj, pods: Any) -> Any:
        built.append(top_owner["metadata"]["name"])
        return real(self, top_owner, pods)

    monkeypatch.setattr(JobSetGrouper, "prepare", counting)
    return built


def test_a_pass_builds_each_jobsets_sub_groups_once_and_decides_as_each_pod_alone(prepares: list[str]) -> None:
    a_objects, a_pods = jobset_world("a", 4)
    b_objects, b_pods = jobset_world("b", 3)
    lookups = InMemoryLookups(a_objects + b_objects)
    grouper = build_grouper()
    pods = a_pods + b_pods
    workload = WorkloadContext(pods)
    together = [grouper.decide(p, lookups, workload) for p in pods]
    assert prepares == ["a", "b"], "once per JobSet in the pass"
    prepares.clear()
    alone = [grouper.decide(p, lookups) for p in pods]
    assert len(prepares) == len(pods)  # a context of its own each
    assert together == alone
    assert {d.outcome for d in together} == {"grouped"}
    assert [d.sub_group for d in together[:2]] == ["worker-replica-0"] * 2


def test_a_jobsets_sub_group_error_is_every_pods_answer_and_built_once(prepares: list[str]) -> None:
    objects, pods = jobset_world("bad", 3, bad=True)
    lookups = InMemoryLookups(objects)
    grouper = build_grouper()
    workload = WorkloadContext(pods)
    together = [grouper.decide(p, lookups, workload) for p in pods]
    assert prepares == ["bad"]
    assert {(d.outcome, d.reason) for d in together} == {("error", "InvalidWorkload")}
    assert "parallelism" in together[0].message
    assert together == [grouper.decide(p, lookups) for p in pods]


def test_a_new_version_of_the_top_owner_is_prepared_again(prepares: list[str]) -> None:
    objects, pods = jobset_world("js", 2)
    grouper = build_grouper()
    workload = WorkloadContext()
    first = grouper.decide(pods[0], InMemoryLookups(objects), workload)
    changed = [dict(objects[0], metadata={**objects[0]["metadata"], "resourceVersion": "2"}), *objects[1:]]
    changed[0]["spec"] = {"replicatedJobs": [{"name": "worker", "replicas": 3, "template": {"spec": {"parallelism": 2}}}]}
    # (a new owner walk: the chain shared in the pass is the old one, so a fresh context, as after a yield)
    second = grouper.decide(pods[0], InMemoryLookups(changed), WorkloadContext())
    third = grouper.decide(pods[1], InMemoryLookups(objects), workload)
    assert prepares == ["js", "js"]
    assert first.pod_group is not None and second.pod_group is not None and third.pod_group is not None
    assert len(first.pod_group.sub_groups) == 3 and len(second.pod_group.sub_groups) == 4
    assert third.pod_group.same_spec(first.pod_group)


def test_a_karta_workloads_pass_costs_one_sandbox_run(nimservice: Any) -> None:
    """The Karta plugin's per-workload part: the root's and every pod's expressions in one run, at the first
    pod; the other pods' decisions read its outcomes."""
    pods, root = nimservice_pods(6, "ctx"), nimservice_root("ctx", replicas=6)
    counting = CountingRunner()
    plugin = KartaGrouper(nimservice, Evaluator(nimservice, runner=counting))
    workload = WorkloadContext(pods)
    lookups = InMemoryLookups([root, *pods])
    together = [plugin.metadata(GroupingContext(pod=p, top_owner=root, owners=[root], lookups=lookups,
                                                workload=workload)) for p in pods]
    assert counting.runs == 1
    alone_runner = CountingRunner()
    alone_plugin = KartaGrouper(nimservice, Evaluator(nimservice, runner=alone_runner))
    alone = [alone_plugin.metadata(GroupingContext(pod=p, top_owner=root, owners=[root], lookups=lookups))
             for p in pods]
    assert together == alone and together[0] is not None
    assert alone_runner.runs > counting.runs


class CountingLookups(InMemoryLookups):
    """Counts the pod lists (the cost ``WorkloadContext.from_pods`` saves)."""

    lists = 0

    def list(self, api_version: str, kind: str, namespace: str | None, label_selector: Any = None) -> list[Obj]:
        self.lists += kind == "Pod"
        return super().list(api_version, kind, namespace, label_selector)


def pod_group(name: str, owner: Obj) -> Obj:
    return owned("scheduling.run.ai/v2alpha2", "PodGroup", name, owner, spec={"minMember": 1})


def deployment_world(new: int, legacy: int = 0, foreign_pg: bool = False) -> tuple[list[Obj], list[Obj]]:
    """A Deployment whose ReplicaSet has ``legacy`` pods on per-pod PodGroups (KAI before v0.18) and ``new``
    pods not grouped yet; ``foreign_pg``: one more pod names a PodGroup owned by a ConfigMap."""
    dep = owned("apps/v1", "Deployment", "web", spec={"selector": {"matchLabels": {"app": "web"}}})
    rs = owned("apps/v1", "ReplicaSet", "web-5d8", dep)
    objects, pods = [dep, rs], []

    def web_pod(name: str, pg: str | None = None) -> Obj:
        meta: dict[str, Any] = {"labels": {"app": "web"}}
        if pg:
            meta["annotations"] = {"pod-group-name": pg}
        return owned("v1", "Pod", name, rs, meta=meta, spec={"schedulerName": "kai-scheduler"})

    for i in range(legacy):
        p = web_pod(f"web-5d8-old{i}", f"pg-web-5d8-old{i}-uid-pod-web-5d8-old{i}")
        objects.append(pod_group(f"pg-web-5d8-old{i}-uid-pod-web-5d8-old{i}", p))
        pods.append(p)
    if foreign_pg:
        cm = owned("v1", "ConfigMap", "cm")
        pods.append(web_pod("web-5d8-odd", "pg-odd"))
        objects += [cm, pod_group("pg-odd", cm)]
    pods += [web_pod(f"web-5d8-new{i}") for i in range(new)]
    return objects + pods, pods


@pytest.mark.parametrize(
    ("world", "outcome", "names"),
    [
        (deployment_world(6), "grouped", {"pg-web-uid-deployment-web"}),  # a new Deployment: one gang
        (deployment_world(4, legacy=3), "grouped", None),  # per pod, kept through the upgrade
        (deployment_world(4, foreign_pg=True), "error", set()),  # neither a Pod nor the Deployment owns it
    ],
    ids=["new", "legacy-per-pod", "foreign-owner"],
)
def test_a_deployment_pass_lists_its_pods_once_and_decides_as_each_pod_alone(
    world: tuple[list[Obj], list[Obj]], outcome: str, names: set[str] | None
) -> None:
    """KAI's per-pod rule reads the Deployment's pods: a pass of 300 new pods used to list 300 pods 300 times
    (the burst's second-largest CPU difference); now once per pass, with the same decisions."""
    objects, pods = world
    grouper = build_grouper()
    together_lookups = CountingLookups(objects)
    workload = WorkloadContext(pods)
    together = [grouper.decide(p, together_lookups, workload) for p in pods]
    assert together_lookups.lists == 1
    alone_lookups = CountingLookups(objects)
    alone = [grouper.decide(p, alone_lookups) for p in pods]
    assert together == alone
    new = [d for p, d in zip(pods, together, strict=True) if "new" in p["metadata"]["name"]]
    assert {d.outcome for d in new} == {outcome}
    if names is None:  # one PodGroup each
        assert len({d.pod_group.name for d in new if d.pod_group is not None}) == len(new)
    else:
        assert {d.pod_group.name for d in new if d.pod_group is not None} == names
    if outcome == "error":
        assert "owned by ConfigMap" in new[0].message


def test_a_knative_revisions_pods_are_listed_once_per_pass() -> None:
    svc = owned("serving.knative.dev/v1", "Service", "svc")
    rev = owned("serving.knative.dev/v1", "Revision", "svc-00001", svc)
    pods = [owned("v1", "Pod", f"svc-00001-{i}", rev,
                  meta={"labels": {"serving.knative.dev/revision": "svc-00001"}},
                  spec={"schedulerName": "kai-scheduler"}) for i in range(5)]
    grouper = build_grouper()
    lookups = CountingLookups([svc, rev, *pods])
    workload = WorkloadContext(pods)
    together = [grouper.decide(p, lookups, workload) for p in pods]
    assert lookups.lists == 1
    assert together == [grouper.decide(p, CountingLookups([svc, rev, *pods])) for p in pods]
    assert {d.pod_group.name for d in together if d.pod_group is not None} == {"pg-svc-00001-uid-revision-svc-00001"}


@pytest.mark.parametrize(
    ("job_meta", "backend", "reason"),
    [
        ({}, "kai", "Grouped"),
        ({"annotations": {"kai.scheduler/skip-podgrouper": "true"}}, "kai", "SkipAnnotation"),
        ({"labels": ["not", "a", "map"]}, "kai", "InvalidWorkload"),
        ({}, "upstream", "Grouped"),
    ],
)
def test_the_step_aside_rules_read_a_shared_chains_owners_once_and_decide_as_each_pod_alone(
    monkeypatch: pytest.MonkeyPatch, job_meta: dict[str, Any], backend: str, reason: str
) -> None:
    """The owners' part of the step-aside rules (a skip-annotated owner, an owner whose controller writes
    upstream groups, a malformed owner's metadata) is computed once for the pods that share a chain; each pod
    gets what deciding it alone gives, an error included."""
    from grouper.core import grouping
    from grouper.core.config import GroupingConfig

    calls: list[int] = []
    real = grouping._owner_rules

    def counting(owners: list[Obj], upstream: bool) -> Any:
        calls.append(len(owners))
        return real(owners, upstream)

    monkeypatch.setattr(grouping, "_owner_rules", counting)
    js = owned("jobset.x-k8s.io/v1alpha2", "JobSet", "js", spec={"replicatedJobs": [
        {"name": "worker", "replicas": 2, "template": {"spec": {"parallelism": 3}}}]})
    jobs = [owned("batch/v1", "Job", f"js-worker-{r}", js, meta=dict(job_meta) if r == 0 else {}) for r in range(2)]
    pods = [owned("v1", "Pod", f"js-worker-{r}-{i}", jobs[r], spec={"schedulerName": "kai-scheduler"},
                  meta={"labels": {"jobset.sigs.k8s.io/replicatedjob-name": "worker",
                                   "jobset.sigs.k8s.io/job-index": str(r)}})
            for r in range(2) for i in range(3)]
    grouper = build_grouper(GroupingConfig(backend=backend))
    lookups = InMemoryLookups([js, *jobs, *pods])
    workload = WorkloadContext(pods)
    together = [grouper.decide(p, lookups, workload) for p in pods]
    assert calls == [2, 2], "once per chain: one per Job"
    alone = [grouper.decide(p, InMemoryLookups([js, *jobs, *pods])) for p in pods]
    assert together == alone
    assert {d.reason for d in together[:3]} == {reason}
    assert {d.reason for d in together[3:]} == {"Grouped"}
    if reason == "InvalidWorkload":
        assert "metadata.labels" in together[0].message and "js-worker-0" in together[0].message
