"""The real Kubeflow Trainer v2 controller (github.com/kubeflow/trainer/v2, pinned in
devtools/cluster/go/trainer/go.mod) in the loop, beside the real JobSet controller, with Trainer's
validating webhooks served with a certificate of the cluster's CA.

Every other test builds a TrainJob's JobSet, Job and pods by hand, "as the operators create them". Here
only the TrainJob (and the module's own ``torch-distributed`` runtime) is submitted: Trainer creates the
JobSet, the JobSet controller the Job, the Job controller the pods, and

- the hand-written fixture (examples/trainjob.yaml) must carry the labels, annotations, owner references,
  names and what the grouper reads of the JobSet and the pods that the real controllers give them;
- a running grouper (KAI backend) skips the TrainJob (skip-top-owner) and stores the PodGroup ``grouper
  plan`` computes from the same live objects, owned by the JobSet, with the TrainJob's queue; a pod the Job
  controller recreates joins it with one write; a restarted grouper writes nothing; the garbage collector
  removes the PodGroup with the TrainJob;
- Trainer's own gang (``podGroupPolicy.coscheduling``: a scheduler-plugins PodGroup and the pod label
  ``scheduling.x-k8s.io/pod-group``) is inert for KAI's scheduler: the grouper still groups those pods.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusters import DEPLOY_CRDS, Audit, cluster_fixture
from controller.harness import GrouperThread, label_namespace
from kube import Kube, KubeError, wait_until

from devtools.cluster import LocalCluster
from grouper.describe.resources import pod_request
from operators.opkit import (
    assert_stored_is_planned,
    differences,
    grouper_writes,
    normalize,
    owner_refs,
    planned,
    restart_then_delete,
    uids,
    wait_grouped,
)
from operators.trainerkit import (
    CLUSTER_RUNTIMES,
    COSCHED_LABEL,
    COSCHED_PODGROUPS,
    OPERATORS,
    RUNTIMES,
    TRAINJOBS,
    live,
    torch_distributed,
    trainjob,
)

# its own control plane with the JobSet and Trainer controllers (tests/clusters.py)
op_cluster = cluster_fixture("op_cluster", shared=False, audit=True, crds=DEPLOY_CRDS, operators=OPERATORS)
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "trainjob.yaml"
SKIP_TOP_OWNER = "SkipTopOwner Grouper"
# a pod's name is <job>-<completion index>-<5 random characters> (the Job controller's generateName)
POD_NAME = re.compile(r"^(?P<prefix>.+-\d+-)[a-z0-9]{5}$")
# the labels the API server adds to a Job's pod template (the fixture's Jobs are written without them)
JOB_SELECTOR_LABELS = ("controller-uid", "job-name", "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name")
POD_SPEC_FIELDS = ("schedulerName", "priorityClassName", "restartPolicy", "hostname", "subdomain")


@pytest.fixture(scope="module")
def runtime(okube: Kube) -> Iterator[dict[str, Any]]:
    """The module's ``torch-distributed`` ClusterTrainingRuntime as a KAI user installs it: its pods name
    ``kai-scheduler`` (TrainJob has no field for it)."""
    rt = okube.create(CLUSTER_RUNTIMES, torch_distributed(scheduler_name="kai-scheduler"))
    yield rt
    okube.delete(f"{CLUSTER_RUNTIMES}/{rt['metadata']['name']}", ignore_missing=True)


def example_docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]


def example_trainjob() -> dict[str, Any]:
    """examples/trainjob.yaml's TrainJob as a user submits it (no uid, timestamps or namespace)."""
    tj = copy.deepcopy(next(d for d in example_docs() if d["kind"] == "TrainJob"))
    for key in ("uid", "creationTimestamp", "namespace"):
        tj["metadata"].pop(key, None)
    return tj


# ---------------------------------------------------------------------- fixture truth


def _view(obj: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """What the grouper (plan, describe, get) reads of a JobSet, Job or pod the controllers create."""
    meta, spec = obj["metadata"], obj.get("spec") or {}
    view: dict[str, Any] = {
        "labels": meta.get("labels") or {},
        "annotations": meta.get("annotations") or {},
        "ownerReferences": owner_refs(meta),
    }
    if obj["kind"] == "JobSet":
        view["name"] = meta["name"]
        view["spec.startupPolicy"] = spec.get("startupPolicy")
        for rj in spec.get("replicatedJobs") or []:
            job = rj["template"].get("spec") or {}
            tmeta = rj["template"].get("metadata") or {}
            pod = (job.get("template") or {}).get("spec") or {}
            view[f"replicatedJobs[{rj['name']}]"] = {
                "replicas": rj.get("replicas"),
                "labels": tmeta.get("labels") or {},
                "annotations": tmeta.get("annotations") or {},
                "parallelism": job.get("parallelism"),
                "completions": job.get("completions"),
                "schedulerName": pod.get("schedulerName"),
                "request": pod_request(pod).to_dict(),
            }
    elif obj["kind"] == "Job":
        view["name"] = meta["name"]
        for key in ("parallelism", "completions", "completionMode"):
            view[f"spec.{key}"] = spec.get(key)
        tmeta = spec["template"].get("metadata") or {}
        view["template.labels"] = {k: v for k, v in (tmeta.get("labels") or {}).items() if k not in JOB_SELECTOR_LABELS}
        view["template.annotations"] = tmeta.get("annotations") or {}
    else:
        m = POD_NAME.match(meta["name"])
        view["name"] = f"{m.group('prefix')}<random>" if m else meta["name"]
        for key in POD_SPEC_FIELDS:
            view[f"spec.{key}"] = spec.get(key)
        view["request"] = pod_request(spec).to_dict()
    return normalize(view, names)


def test_trainjob_fixture_is_what_the_real_controllers_create(
    op_cluster: LocalCluster, okube: Kube, team_a: str, runtime: dict[str, Any]
) -> None:
    """examples/trainjob.yaml's JobSet, Job and pods equal, in everything the grouper reads, what Trainer,
    the JobSet and the Job controllers create for its TrainJob (no grouper runs here)."""
    ns = team_a
    fixture = example_docs()
    kinds = ("JobSet", "Job", "Pod")
    want = {kind: [d for d in fixture if d["kind"] == kind] for kind in kinds}
    okube.create(TRAINJOBS.format(ns=ns), example_trainjob())
    try:
        def created() -> Any:
            objs = live(okube, ns)
            return objs if all(len(objs[k]) == len(v) for k, v in want.items()) else None

        objs = wait_until(created, timeout=90, interval=0.25, what="the JobSet, Job and pods of TrainJob qwen-sft")
        fixture_names = uids(fixture)
        live_names = uids([o for group in objs.values() for o in group])
        problems = []
        for kind in kinds:
            problems += differences(
                kind,
                {(v := _view(o, fixture_names))["name"]: v for o in want[kind]},
                {(v := _view(o, live_names))["name"]: v for o in objs[kind]},
            )
        assert not problems, "examples/trainjob.yaml differs from what the controllers create:\n" + "\n".join(problems)
    finally:
        okube.delete(f"{TRAINJOBS.format(ns=ns)}/qwen-sft", ignore_missing=True)
        wait_until(lambda: not okube.list(f"/api/v1/namespaces/{ns}/pods"), timeout=90, interval=0.25,
                   what="the pods of TrainJob qwen-sft gone")


def test_trainers_webhook_refuses_a_trainjob_of_a_missing_runtime(op_cluster: LocalCluster, okube: Kube, ons: str) -> None:
    """Trainer's validating webhook is registered and served (a TrainJob naming no runtime is refused, as
    in a real cluster: the controller alone would only mark it failed)."""
    with pytest.raises(KubeError) as refused:
        okube.create(TRAINJOBS.format(ns=ons), trainjob("lost", runtime="no-such-runtime"))
    assert "no-such-runtime" in refused.value.message, refused.value


# ---------------------------------------------------------------------- the grouper over the real operator


def _grouped(kube: Kube, ns: str, count: int, pred: Any = None) -> dict[str, list[dict[str, Any]]]:
    return wait_grouped(lambda: live(kube, ns), count, "TrainJob pods", pred=pred)

def assert_planned_skipping_top_owner(kube: Kube, ns: str, objs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The one stored PodGroup is the one ``grouper plan`` computes from the same live objects
    (:func:`assert_stored_is_planned`), every pod decided by the skip-top-owner plugin."""
    pg = assert_stored_is_planned(kube, ns, objs)
    want = planned(*objs.values())
    assert want["skipped"] == [], want["skipped"]
    assert {d["plugin"] for d in want["pods"]} == {SKIP_TOP_OWNER}, want["pods"]
    return pg


def test_grouper_follows_a_real_trainjob(
    op_cluster: LocalCluster, okube: Kube, ons: str, audit: Audit, runtime: dict[str, Any]
) -> None:
    """TrainJob (numNodes 2, queue label) → Trainer's JobSet → one Job → 2 pods: one PodGroup
    ``pg-<jobset>-<jobset uid>`` owned by the JobSet (the TrainJob is skipped), queue from the TrainJob,
    replicatedJob ``node`` → leaf ``node-replica-0`` of 2. A deleted pod is recreated by its Job: one
    write (the new pod), none to the PodGroup. A restarted grouper writes nothing. Deleting the TrainJob
    garbage-collects the JobSet, and with it the PodGroup."""
    ns = ons
    label_namespace(okube, ns)
    path = f"{TRAINJOBS.format(ns=ns)}/sft"
    with GrouperThread(op_cluster, ns) as grouper:
        since = len(audit.writes(namespace=ns))
        okube.create(TRAINJOBS.format(ns=ns), trainjob("sft", labels={"kai.scheduler/queue": "team-a"}))
        objs = _grouped(okube, ns, 2)
        grouper.wait_idle(timeout=60)
        objs = live(okube, ns)
        pg = assert_planned_skipping_top_owner(okube, ns, objs)
        assert grouper_writes(audit, ns, since) == {"podgroups": 1, "pods": 2}, "each object written once"
        (tj,), (js,) = objs["TrainJob"], objs["JobSet"]
        assert js["metadata"]["ownerReferences"][0]["uid"] == tj["metadata"]["uid"], "Trainer's JobSet is the TrainJob's"
        assert pg["metadata"]["name"] == f"pg-sft-{js['metadata']['uid']}"
        assert [(r["kind"], r["name"]) for r in pg["metadata"]["ownerReferences"]] == [("JobSet", "sft")]
        assert pg["spec"]["queue"] == "team-a", "the skipped TrainJob's queue label"
        assert [(sg["name"], sg.get("minMember"), sg.get("parent")) for sg in pg["spec"]["subGroups"]] == [
            ("node", None, None), ("node-replica-0", 2, "node")]
        rv = pg["metadata"]["resourceVersion"]

        # the Job controller replaces a deleted pod: it joins the same PodGroup, which is not written
        since = len(audit.writes(namespace=ns))
        before = {p["metadata"]["uid"] for p in objs["Pod"]}
        victim = objs["Pod"][0]
        okube.delete(f"/api/v1/namespaces/{ns}/pods/{victim['metadata']['name']}")
        _grouped(okube, ns, 2, lambda o: {p["metadata"]["uid"] for p in o["Pod"]} - before)
        grouper.wait_idle(timeout=60)
        objs = live(okube, ns)
        (new,) = [p for p in objs["Pod"] if p["metadata"]["uid"] not in before]
        assert new["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == \
            victim["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
        after = assert_planned_skipping_top_owner(okube, ns, objs)
        assert after["metadata"]["resourceVersion"] == rv, "the PodGroup was rewritten for a replaced pod"
        assert grouper_writes(audit, ns, since) == {"pods": 1}, "one write: the new pod's group and sub-group"

    restart_then_delete(op_cluster, okube, audit, ns, path, "the TrainJob and its JobSet")
    assert not okube.list(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets")


def test_trainers_coscheduling_gang_is_inert_for_kai_so_the_grouper_groups(
    op_cluster: LocalCluster, okube: Kube, ons: str, audit: Audit
) -> None:
    """A runtime with ``podGroupPolicy.coscheduling`` (Trainer v2.1.0's own gang; it has no
    ``spec.scheduling``): Trainer writes a scheduler-plugins PodGroup named after the TrainJob (minMember 2)
    and labels the pods ``scheduling.x-k8s.io/pod-group``. KAI's scheduler reads neither, so with the KAI
    backend the pods of ``kai-scheduler`` still get their KAI PodGroup, the one ``grouper plan`` computes,
    nothing stepped aside; the scheduler-plugins PodGroup is left alone."""
    ns = ons
    label_namespace(okube, ns)
    policy = {"coscheduling": {"scheduleTimeoutSeconds": 120}}
    okube.create(RUNTIMES.format(ns=ns), {
        **torch_distributed(kind="TrainingRuntime", scheduler_name="kai-scheduler", pod_group_policy=policy),
        "metadata": {"name": "torch-cosched"},
    })
    with GrouperThread(op_cluster, ns) as grouper:
        since = len(audit.writes(namespace=ns))
        okube.create(TRAINJOBS.format(ns=ns), trainjob("co", runtime="torch-cosched", runtime_kind="TrainingRuntime"))
        objs = _grouped(okube, ns, 2)
        grouper.wait_idle(timeout=60)
        objs = live(okube, ns)
        for pod in objs["Pod"]:
            assert pod["metadata"]["labels"][COSCHED_LABEL] == "co", pod["metadata"]["name"]
        (native,) = okube.list(COSCHED_PODGROUPS.format(ns=ns))
        assert native["metadata"]["name"] == "co" and native["spec"]["minMember"] == 2
        assert [(r["kind"], r["name"]) for r in native["metadata"]["ownerReferences"]] == [("TrainJob", "co")]
        pg = assert_planned_skipping_top_owner(okube, ns, objs)
        assert pg["metadata"]["name"] == f"pg-co-{objs['JobSet'][0]['metadata']['uid']}"
        assert grouper_writes(audit, ns, since) == {"podgroups": 1, "pods": 2}, "each object written once"
        assert okube.get(f"{COSCHED_PODGROUPS.format(ns=ns)}/co")["metadata"]["resourceVersion"] == \
            native["metadata"]["resourceVersion"], "the grouper never touches Trainer's PodGroup"
