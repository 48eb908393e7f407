"""JobSet plugin: KAI's jobset_grouper_test.go / legacy_grouper_test.go (reference §5.2) and error paths."""

from __future__ import annotations

import re
from typing import Any

import pytest
from builders import context, obj, pod, podgroup, sub_group
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grouper.core.config import GroupingConfig
from grouper.core.lookups import InMemoryLookups
from grouper.core.workload_context import WorkloadContext
from grouper.model.errors import GroupingError
from grouper.model.objects import Obj
from grouper.model.podgroup import PodGroupMetadata
from grouper.plugins.jobset import JobSetGrouper

RJ_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
IDX_LABEL = "jobset.sigs.k8s.io/job-index"
MIN_KEY = "kai.scheduler/batch-min-member"


def rjob(name: str, replicas: int | None = 1, parallelism: int | None = None,
         annotations: dict[str, str] | None = None) -> dict[str, Any]:
    tmpl: dict[str, Any] = {"spec": {}}
    if parallelism is not None:
        tmpl["spec"]["parallelism"] = parallelism
    if annotations is not None:
        tmpl["metadata"] = {"annotations": annotations}
    out: dict[str, Any] = {"name": name, "template": tmpl}
    if replicas is not None:
        out["replicas"] = replicas
    return out


def jobset(*rjobs: dict[str, Any], annotations: dict[str, str] | None = None, order: str | None = None) -> Obj:
    spec: dict[str, Any] = {"replicatedJobs": list(rjobs)}
    if order:
        spec["startupPolicy"] = {"startupPolicyOrder": order}
    return obj("jobset.x-k8s.io/v1alpha2", "JobSet", "js", uid="uid", annotations=annotations, spec=spec)


def js_pod(rj: str | None = "worker", idx: str | None = "0", name: str = "p") -> Obj:
    labels = {}
    if rj is not None:
        labels[RJ_LABEL] = rj
    if idx is not None:
        labels[IDX_LABEL] = idx
    return pod(name, namespace="default", labels=labels)


def run(js: Obj, the_pod: Obj, *objects: Obj, config: GroupingConfig | None = None,
        plugin: JobSetGrouper | None = None, workload: WorkloadContext | None = None) -> PodGroupMetadata:
    ctx = context(the_pod, js, objects=objects, config=config)
    if workload is not None:
        ctx.workload = workload
    md = (plugin or JobSetGrouper()).metadata(ctx)
    assert md is not None
    return md


# ---------------------------------------------------------------- §5.2 new shape


def test_SingleReplicatedJobSingleReplica() -> None:
    md = run(jobset(rjob("worker", 1, 4)), js_pod("worker", "0"))
    assert md.name == "pg-js-uid"
    assert md.min_sub_group == 1 and md.min_member is None
    assert len(md.sub_groups) == 2
    parent = sub_group(md, "worker")
    assert parent.min_sub_group == 1 and parent.min_member is None and parent.parent is None and parent.pods == []
    leaf = sub_group(md, "worker-replica-0")
    assert (leaf.min_member, leaf.parent, leaf.pods) == (4, "worker", ["p"])
    assert md.owner.kind == "JobSet" and md.owner.name == "js" and md.owner.uid == "uid"


def test_SingleReplicatedJobMultipleReplicas() -> None:
    md = run(jobset(rjob("worker", 3, 4)), js_pod("worker", "2"))
    assert len(md.sub_groups) == 4
    assert sub_group(md, "worker").min_sub_group == 3
    for i in range(3):
        leaf = sub_group(md, f"worker-replica-{i}")
        assert (leaf.min_member, leaf.parent) == (4, "worker")
        assert leaf.pods == (["p"] if i == 2 else [])
    assert md.sub_group_of("p") == "worker-replica-2"


def test_MultipleReplicatedJobsAnyOrder() -> None:
    md = run(jobset(rjob("leader", 1, 1), rjob("worker", 2, 4), order="AnyOrder"), js_pod("worker", "1"))
    assert md.min_sub_group == 2


def test_StartupPolicyInOrderRootMinSubGroup() -> None:
    md = run(jobset(rjob("leader", 1, 1), rjob("worker", 2, 4), order="InOrder"), js_pod("worker", "1"))
    assert md.min_sub_group == 1


def test_JobSetAnnotationOverridesRoot() -> None:
    js = jobset(rjob("a", 1, 1), rjob("b", 1, 1), rjob("c", 1, 1), annotations={MIN_KEY: "2"})
    assert run(js, js_pod("a")).min_sub_group == 2


def test_JobSetAnnotationClampedToReplicatedJobCount() -> None:
    js = jobset(rjob("a", 1, 1), rjob("b", 1, 1), annotations={MIN_KEY: "9"})
    assert run(js, js_pod("a")).min_sub_group == 2


def test_JobSetAnnotationWinsOverInOrder() -> None:
    js = jobset(rjob("a", 1, 1), rjob("b", 1, 1), annotations={MIN_KEY: "2"}, order="InOrder")
    assert run(js, js_pod("a")).min_sub_group == 2


def test_JobSetAnnotationUnparseable() -> None:
    with pytest.raises(GroupingError, match=re.escape(MIN_KEY)) as err:
        run(jobset(rjob("a"), annotations={MIN_KEY: "not-an-int"}), js_pod("a"))
    assert "JobSet default/js" in str(err.value)


def test_JobSetAnnotationBelowOne() -> None:
    with pytest.raises(GroupingError, match=">= 1"):
        run(jobset(rjob("a"), annotations={MIN_KEY: "0"}), js_pod("a"))


def test_TemplateAnnotationOverridesLeafMinMember() -> None:
    md = run(jobset(rjob("worker", 2, 8, annotations={MIN_KEY: "5"})), js_pod("worker", "0"))
    assert sub_group(md, "worker-replica-0").min_member == 5
    assert sub_group(md, "worker-replica-1").min_member == 5


def test_TemplateAnnotationGreaterThanParallelismAccepted() -> None:
    md = run(jobset(rjob("worker", 1, 2, annotations={MIN_KEY: "10"})), js_pod("worker", "0"))
    assert sub_group(md, "worker-replica-0").min_member == 10


@pytest.mark.parametrize("value, phrase", [("abc", "not an integer"), ("0", ">= 1"), ("-2", ">= 1")])
def test_TemplateAnnotationUnparseable_BelowOne(value: str, phrase: str) -> None:
    with pytest.raises(GroupingError, match=phrase) as err:
        run(jobset(rjob("worker", 1, 2, annotations={MIN_KEY: value})), js_pod("worker", "0"))
    assert "spec.replicatedJobs[0].template.metadata.annotations" in str(err.value)
    assert MIN_KEY in str(err.value)


def test_PodMissingReplicatedJobLabel() -> None:
    with pytest.raises(GroupingError) as err:
        run(jobset(rjob("worker")), js_pod(None, "0"))
    assert str(err.value) == f'Pod default/p: label "{RJ_LABEL}" is missing'


def test_PodMissingJobIndexLabel() -> None:
    with pytest.raises(GroupingError) as err:
        run(jobset(rjob("worker")), js_pod("worker", None))
    assert str(err.value) == f'Pod default/p: label "{IDX_LABEL}" is missing'


def test_PodRoutingFindsCorrectLeaf() -> None:
    js = jobset(rjob("leader", 1, 1), rjob("worker", 3, 4))
    md = run(js, js_pod("leader", "0", name="leader-pod"))
    assert sub_group(md, "leader-replica-0").pods == ["leader-pod"]
    assert md.sub_group_of("leader-pod") == "leader-replica-0"
    md = run(js, js_pod("worker", "1", name="worker-pod"))
    assert sub_group(md, "worker-replica-1").pods == ["worker-pod"]
    assert all(s.pods == [] for s in md.sub_groups if s.name != "worker-replica-1")


def test_EmptyReplicatedJobs() -> None:
    with pytest.raises(GroupingError, match="no replicatedJobs") as err:
        run(jobset(), js_pod())
    assert "JobSet default/js" in str(err.value) and "spec.replicatedJobs" in str(err.value)


def test_EmptyReplicatedJobs_FieldMissing() -> None:
    js = obj("jobset.x-k8s.io/v1alpha2", "JobSet", "js", uid="uid", spec={})
    with pytest.raises(GroupingError, match="no replicatedJobs"):
        run(js, js_pod())


def test_RootMinSubGroupNotMinAvailable() -> None:
    md = run(jobset(rjob("worker", 1, 1)), js_pod())
    assert md.min_member is None and md.min_sub_group == 1
    spec = md.spec()
    assert "minMember" not in spec and spec["minSubGroup"] == 1


def test_DistinctTopologiesAtJobSetAndReplicatedJobLevels() -> None:
    js = jobset(
        rjob("worker", 2, 4, annotations={
            "kai.scheduler/topology": "leaf-topology",
            "kai.scheduler/topology-required-placement": "rack",
            "kai.scheduler/topology-preferred-placement": "zone",
        }),
        annotations={"kai.scheduler/topology": "root-topology",
                     "kai.scheduler/topology-required-placement": "datacenter"},
    )
    md = run(js, js_pod())
    assert (md.topology.topology, md.topology.required_level, md.topology.preferred_level) == (
        "root-topology", "datacenter", "")
    assert sub_group(md, "worker").topology is None
    for leaf in ("worker-replica-0", "worker-replica-1"):
        t = sub_group(md, leaf).topology
        assert t is not None and (t.topology, t.required_level, t.preferred_level) == ("leaf-topology", "rack", "zone")


def test_ReplicasDefaultsToOne() -> None:
    md = run(jobset(rjob("worker", None, 2)), js_pod())
    assert sub_group(md, "worker").min_sub_group == 1
    assert sub_group(md, "worker-replica-0").min_member == 2
    assert len(md.sub_groups) == 2


# ---------------------------------------------------------------- §5.2 legacy shape


def test_FlatPodGroupTriggersOldHandler() -> None:
    md = run(jobset(rjob("worker", 2, 4), order="AnyOrder"), js_pod(), podgroup("pg-js-uid"))
    assert md.name == "pg-js-uid"
    assert md.min_sub_group is None and md.sub_groups == [] and md.min_member == 1


def test_InOrderPerReplicatedJobPodGroup() -> None:
    js = jobset(rjob("leader", 1, 1), rjob("worker", 2, 4), order="InOrder")
    md = run(js, js_pod("worker", "0"), podgroup("pg-js-uid-leader"))
    assert md.name == "pg-js-uid-worker"
    assert md.sub_groups == [] and md.min_sub_group is None and md.min_member == 1


def test_AnnotationOverridesLegacyMinAvailable() -> None:
    md = run(jobset(rjob("worker", 2, 4), annotations={MIN_KEY: "3"}), js_pod(), podgroup("pg-js-uid"))
    assert md.min_member == 3 and md.min_sub_group is None


def test_PodGroupWithSubGroupsDoesNotTriggerLegacy() -> None:
    existing = podgroup("pg-js-uid", sub_groups=[{"name": "worker", "minSubGroup": 1}])
    md = run(jobset(rjob("worker", 1, 4)), js_pod(), existing)
    assert md.min_sub_group == 1 and md.sub_groups


def test_Legacy_DisabledByConfig() -> None:
    md = run(jobset(rjob("worker", 2, 4)), js_pod(), podgroup("pg-js-uid"),
             config=GroupingConfig(search_legacy_pg=False))
    assert md.min_sub_group == 1 and len(md.sub_groups) == 3


def test_Legacy_OtherJobSetsPodGroupsIgnored() -> None:
    others = [podgroup("pg-js-uidx"), podgroup("pg-js-uid", namespace="other"), podgroup("pg-other-uid")]
    md = run(jobset(rjob("worker", 1, 4)), js_pod(), *others)
    assert md.sub_groups


def test_Legacy_PodMissingReplicatedJobLabel() -> None:
    with pytest.raises(GroupingError, match=re.escape(RJ_LABEL)):
        run(jobset(rjob("worker")), js_pod(None, "0"), podgroup("pg-js-uid"))


def test_Legacy_AnnotationBelowOne() -> None:
    with pytest.raises(GroupingError, match=">= 1"):
        run(jobset(rjob("worker"), annotations={MIN_KEY: "0"}), js_pod(), podgroup("pg-js-uid"))


def test_Legacy_ListForbidden() -> None:
    forbidden = InMemoryLookups([], forbidden=[("scheduling.run.ai", "PodGroup")])
    ctx = context(js_pod(), jobset(rjob("worker")), the_lookups=forbidden)
    with pytest.raises(GroupingError, match="cannot list PodGroups"):
        JobSetGrouper().metadata(ctx)


# ---------------------------------------------------------------- other error paths and choices


def test_PodIndexOutOfRange() -> None:
    with pytest.raises(GroupingError, match='no sub-group "worker-replica-5"'):
        run(jobset(rjob("worker", 2, 1)), js_pod("worker", "5"))


def test_PodUnknownReplicatedJob() -> None:
    with pytest.raises(GroupingError, match="Pod default/p"):
        run(jobset(rjob("worker", 2, 1)), js_pod("driver", "0"))


def test_ZeroReplicasBecomesEmptyLeaf() -> None:
    md = run(jobset(rjob("init", 0, 1), rjob("worker", 1, 2)), js_pod())
    init = sub_group(md, "init")
    assert (init.min_member, init.min_sub_group, init.parent) == (0, None, None)
    assert md.min_sub_group == 2


@pytest.mark.parametrize("field, rj", [("replicas", rjob("w", -1, 1)), ("parallelism", rjob("w", 1, -1)),
                                       ("replicas", rjob("w", "x", 1))])  # type: ignore[arg-type]
def test_BadCountsAreErrors(field: str, rj: dict[str, Any]) -> None:
    with pytest.raises(GroupingError, match=field) as err:
        run(jobset(rj), js_pod("w"))
    assert "JobSet default/js" in str(err.value)


def test_ReplicatedJobWithoutName() -> None:
    with pytest.raises(GroupingError, match=r"spec.replicatedJobs\[0\].name"):
        run(jobset({"replicas": 1}), js_pod())


def test_TooManyReplicaSubGroups() -> None:
    with pytest.raises(GroupingError, match="greater than max allowed"):
        run(jobset(rjob("worker", 10001, 1)), js_pod())


def test_TopologyNeedsNameAndLevel() -> None:
    md = run(jobset(rjob("worker", 1, 1, annotations={"kai.scheduler/topology-required-placement": "rack"})),
             js_pod())
    assert sub_group(md, "worker-replica-0").topology is None
    md = run(jobset(rjob("worker", 1, 1, annotations={"kai.scheduler/topology": "t"})), js_pod())
    assert sub_group(md, "worker-replica-0").topology is None


def test_DefaultGrouperFieldsKept() -> None:
    js = jobset(rjob("worker"))
    js["metadata"]["labels"] = {"kai.scheduler/queue": "team-a"}
    md = run(js, js_pod())
    assert md.queue == "team-a" and md.priority_class_name == "train"
    assert md.provenance["minSubGroup"].startswith("number of replicatedJobs")


# ---------------------------------------------------------------- property test

junk = st.one_of(st.none(), st.booleans(), st.integers(-3, 12), st.text(max_size=4),
                 st.lists(st.integers(0, 2), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
small_int = st.one_of(st.integers(-2, 6), st.just(2**40), junk)
names = st.sampled_from(["worker", "leader", "a", "", "Worker"])
ann_values = st.one_of(st.sampled_from(["1", "0", "3", "-1", "x", "", "99"]), st.text(max_size=3))


@st.composite
def replicated_jobs(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(junk)
    out = []
    for _ in range(draw(st.integers(0, 3))):
        rj: dict[str, Any] = {}
        if draw(st.booleans()):
            rj["name"] = draw(st.one_of(names, junk))
        if draw(st.booleans()):
            rj["replicas"] = draw(small_int)
        tmpl: dict[str, Any] = {}
        if draw(st.booleans()):
            tmpl["spec"] = {"parallelism": draw(small_int)}
        if draw(st.booleans()):
            tmpl["metadata"] = {"annotations": draw(st.dictionaries(
                st.sampled_from([MIN_KEY, "kai.scheduler/topology", "kai.scheduler/topology-required-placement"]),
                st.one_of(ann_values, st.integers()), max_size=3))}
        rj["template"] = draw(st.one_of(st.just(tmpl), junk))
        out.append(draw(st.one_of(st.just(rj), junk)) if draw(st.integers(0, 9)) == 0 else rj)
    return out


@given(
    rjobs=replicated_jobs(),
    order=st.one_of(st.none(), st.sampled_from(["InOrder", "AnyOrder", "Weird"]), junk),
    js_ann=st.dictionaries(st.sampled_from([MIN_KEY, "kai.scheduler/topology"]), ann_values, max_size=2),
    pod_labels=st.dictionaries(st.sampled_from([RJ_LABEL, IDX_LABEL]), st.sampled_from(["worker", "a", "0", "1", ""]),
                               max_size=2),
    legacy=st.sampled_from([None, "pg-js-uid", "pg-js-uid-worker", "pg-js-uid-x"]),
    legacy_subgroups=st.booleans(),
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_property_metadata_or_grouping_error(rjobs: Any, order: Any, js_ann: dict[str, str],
                                             pod_labels: dict[str, str], legacy: str | None,
                                             legacy_subgroups: bool) -> None:
    spec: dict[str, Any] = {"replicatedJobs": rjobs}
    if order is not None:
        spec["startupPolicy"] = {"startupPolicyOrder": order}
    js = obj("jobset.x-k8s.io/v1alpha2", "JobSet", "js", uid="uid", annotations=js_ann, spec=spec)
    objects = []
    if legacy:
        objects.append(podgroup(legacy, sub_groups=[{"name": "x"}] if legacy_subgroups else None))
    try:
        md = JobSetGrouper().metadata(context(pod("p", namespace="default", labels=pod_labels), js,
                                              objects=objects))
    except GroupingError:
        return
    assert isinstance(md, PodGroupMetadata)
    assert (md.min_member is None) != (md.min_sub_group is None)
    md.to_object()


# ---------------------------------------------------------------- shared sub-groups (one build per JobSet and pass)


def test_pods_of_one_jobset_share_its_sub_groups_but_each_lists_only_itself() -> None:
    js = jobset(rjob("worker", replicas=3, parallelism=2))
    plugin, workload, built = JobSetGrouper(), WorkloadContext(), []
    prepare = plugin.prepare
    plugin.prepare = lambda *args: built.append(1) or prepare(*args)  # type: ignore[method-assign]
    a = run(js, js_pod("worker", "0", name="a"), plugin=plugin, workload=workload)
    b = run(js, js_pod("worker", "2", name="b"), plugin=plugin, workload=workload)
    assert len(built) == 1, "the sub-groups are built once per pass"
    assert a.sub_group_of("a") == "worker-replica-0" and a.sub_group_of("b") is None
    assert b.sub_group_of("b") == "worker-replica-2" and b.sub_group_of("a") is None
    assert [sg.pods for sg in a.sub_groups] == [[], ["a"], [], []]
    assert a.sub_groups[2] is b.sub_groups[2], "the sub-group neither pod joins is one object"
    assert a.spec() == b.spec() and a.same_spec(b)


def test_the_next_pass_gets_sub_groups_of_the_jobsets_new_content() -> None:
    js = jobset(rjob("worker", replicas=2, parallelism=2))
    before = run(js, js_pod("worker", "0"))
    js["spec"]["replicatedJobs"][0]["replicas"] = 3
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = 4
    after = run(js, js_pod("worker", "2"))
    assert [sg.name for sg in before.sub_groups] == ["worker", "worker-replica-0", "worker-replica-1"]
    assert [(sg.name, sg.min_member) for sg in after.sub_groups][-1] == ("worker-replica-2", 4)
    assert not before.same_spec(after)


def test_same_spec_agrees_with_comparing_specs() -> None:
    js = jobset(rjob("worker", replicas=2, parallelism=2), rjob("ps", replicas=1))
    a = run(js, js_pod("worker", "0", name="a"))
    other = run(jobset(rjob("worker", replicas=2, parallelism=3), rjob("ps", replicas=1)), js_pod("worker", "0"))
    queued = run(js, js_pod("ps", "0", name="c"))
    queued.queue = "team-b"
    for x in (a, other, queued):
        for y in (a, other, queued):
            assert x.same_spec(y) == (x.spec() == y.spec())
    kept = a.for_keeping()
    assert all(not sg.pods for sg in kept.sub_groups) and a.sub_group_of("a") == "worker-replica-0"
    assert kept.same_spec(a)
