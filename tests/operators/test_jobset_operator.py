"""The real JobSet controller (sigs.k8s.io/jobset, pinned in devtools/cluster/go/jobset/go.mod) in the loop.

Every other test builds a JobSet's Jobs and pods by hand, "as the operator creates them". Here only the
JobSet is submitted: the JobSet controller creates the Jobs, the Job controller the pods, and

- the hand-written fixtures (examples/jobset-demo.yaml's Jobs, examples/jobset-demo-pods.yaml) must carry
  exactly the labels, annotations, owner references and names the real controllers give them;
- a running grouper stores the PodGroup ``grouper plan`` computes from the same live objects, keeps it
  (no write, no duplicate) when the Job controller replaces a pod, and the garbage collector removes it
  with the JobSet.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from controller.harness import ANNOTATION, SUBGROUP, GrouperThread, child_jobs, label_namespace
from controller.harness import jobset as harness_jobset
from faults.conftest import Audit
from kube import Kube, KubeError, wait_until

from devtools.cluster import LocalCluster
from operators.opkit import PODGROUPS, differences, grouper_writes, normalize, owner_refs, planned, uids

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "jobset-demo.yaml"
DEMO_PODS = REPO / "examples" / "jobset-demo-pods.yaml"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
# a pod's name is <job>-<completion index>-<5 random characters> (the Job controller's generateName)
POD_NAME = re.compile(r"^(?P<prefix>.+-\d+-)[a-z0-9]{5}$")
# pod spec fields the grouper reads (resources for describe/get, scheduler, priority) or the Job sets
JOB_SELECTOR_LABELS = ("controller-uid", "job-name", "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name")
POD_SPEC_FIELDS = ("schedulerName", "priorityClassName", "restartPolicy", "hostname", "subdomain")


def demo_docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(DEMO.read_text()) if d]


def demo_jobset() -> dict[str, Any]:
    """The JobSet of examples/jobset-demo.yaml as a user submits it (no uid, no timestamps)."""
    js = copy.deepcopy(next(d for d in demo_docs() if d["kind"] == "JobSet"))
    for key in ("uid", "creationTimestamp", "namespace"):
        js["metadata"].pop(key, None)
    return js


def live(kube: Kube, ns: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """JobSets, Jobs and pods of the namespace, as typed objects (list items carry no kind)."""
    jobsets = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", **o}
               for o in kube.list(JOBSETS.format(ns=ns))]
    jobs = [{"apiVersion": "batch/v1", "kind": "Job", **o} for o in kube.list(f"/apis/batch/v1/namespaces/{ns}/jobs")]
    pods = [{"apiVersion": "v1", "kind": "Pod", **o} for o in kube.list(f"/api/v1/namespaces/{ns}/pods")]
    return jobsets, jobs, pods


# ---------------------------------------------------------------------- fixture truth


def _view(obj: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """What the grouper (and the plan) reads of a Job or pod the operators create."""
    meta, spec = obj["metadata"], obj.get("spec") or {}
    view: dict[str, Any] = {
        "labels": meta.get("labels") or {},
        "annotations": meta.get("annotations") or {},
        "ownerReferences": owner_refs(meta),
    }
    if obj["kind"] == "Job":
        view["name"] = meta["name"]
        for key in ("parallelism", "completions", "completionMode"):
            view[f"spec.{key}"] = spec.get(key)
        tmeta = spec["template"].get("metadata") or {}
        # the API server adds the selector's labels to a Job's template on create (the fixtures' Jobs are
        # submitted without them, like the controller's); the pods' own labels are compared below
        view["template.labels"] = {
            k: v for k, v in (tmeta.get("labels") or {}).items() if k not in JOB_SELECTOR_LABELS
        }
        view["template.annotations"] = tmeta.get("annotations") or {}
    else:
        m = POD_NAME.match(meta["name"])
        view["name"] = f"{m.group('prefix')}<random>" if m else meta["name"]
        for key in POD_SPEC_FIELDS:
            view[f"spec.{key}"] = spec.get(key)
        view["resources"] = [c.get("resources") for c in spec.get("containers") or []]
    return normalize(view, names)


def test_demo_fixtures_are_what_the_real_controllers_create(op_cluster: LocalCluster, okube: Kube) -> None:
    """examples/jobset-demo.yaml's Jobs and examples/jobset-demo-pods.yaml equal, in everything the grouper
    reads, what the JobSet and Job controllers create for the JobSet of examples/jobset-demo.yaml. It runs
    in the fixtures' own namespace (``default``: the job-key label hashes the namespace) with no grouper."""
    ns = "default"
    okube.create(JOBSETS.format(ns=ns), demo_jobset())
    try:
        fixture = demo_docs() + [d for d in yaml.safe_load_all(DEMO_PODS.read_text()) if d]
        want_jobs = [d for d in fixture if d["kind"] == "Job"]
        want_pods = [d for d in fixture if d["kind"] == "Pod"]

        def created() -> Any:
            jobsets, jobs, pods = live(okube, ns)
            return (jobsets, jobs, pods) if len(jobs) == len(want_jobs) and len(pods) == len(want_pods) else None

        jobsets, jobs, pods = wait_until(created, timeout=90, interval=0.25, what="the Jobs and pods of JobSet demo")
        fixture_uids, live_uids = uids(fixture), uids(jobsets + jobs + pods)

        def by_key(objs: list[dict[str, Any]], names: dict[str, str]) -> dict[str, dict[str, Any]]:
            return {(v := _view(o, names))["name"]: v for o in objs}

        problems = differences("Job", by_key(want_jobs, fixture_uids), by_key(jobs, live_uids))
        problems += differences("Pod", by_key(want_pods, fixture_uids), by_key(pods, live_uids))
        assert not problems, "the fixtures differ from what the real controllers create:\n" + "\n".join(problems)
    finally:
        okube.delete(f"{JOBSETS.format(ns=ns)}/demo", ignore_missing=True)


def test_the_harness_jobs_are_a_true_subset_of_the_real_controllers(op_cluster: LocalCluster, okube: Kube, ons: str) -> None:
    """tests/controller/harness.py's ``child_jobs`` (the Jobs many controller and gang tests create by hand
    for a JobSet) names and owns its Jobs as the JobSet controller does, and every label it sets, on the
    Job and its pod template, has the real controller's value (it sets fewer: those the grouper reads)."""
    stored = okube.create(JOBSETS.format(ns=ons), harness_jobset("h"))
    built = {j["metadata"]["name"]: j for j in child_jobs(stored)}

    def jobs() -> Any:
        _, real, _ = live(okube, ons)
        return real if len(real) == len(built) else None

    real = {j["metadata"]["name"]: j for j in wait_until(jobs, timeout=90, interval=0.25, what="the Jobs of JobSet h")}
    assert set(built) == set(real)
    problems = []
    for name, job in built.items():
        got = real[name]
        refs = [{k: r.get(k) for k in ("apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion")}
                for r in got["metadata"]["ownerReferences"]]
        if refs != job["metadata"]["ownerReferences"]:
            problems.append(f"Job {name} ownerReferences: harness {job['metadata']['ownerReferences']}, real {refs}")
        for where, have, want in (
            ("labels", job["metadata"]["labels"], got["metadata"]["labels"]),
            ("template.labels", job["spec"]["template"]["metadata"]["labels"], got["spec"]["template"]["metadata"]["labels"]),
        ):
            problems += [f"Job {name} {where}[{k}]: harness {v!r}, real {want.get(k)!r}" for k, v in have.items() if want.get(k) != v]
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------- the grouper over the real operator


def test_grouper_follows_the_real_jobset_controller(
    op_cluster: LocalCluster, okube: Kube, ons: str, audit: Audit
) -> None:
    ns = ons
    label_namespace(okube, ns)
    # what operators expect of a real cluster: the root-ca-cert-publisher runs with them
    wait_until(lambda: okube.exists(f"/api/v1/namespaces/{ns}/configmaps/kube-root-ca.crt"), 30,
               what="the kube-root-ca.crt ConfigMap")
    js = demo_jobset()
    for rj in js["spec"]["replicatedJobs"]:
        # a deleted pod counts as a failure of its Job: leave room for the replacement below
        rj["template"]["spec"]["backoffLimit"] = 3
    with GrouperThread(op_cluster, ns) as grouper:
        okube.create(JOBSETS.format(ns=ns), js)

        def grouped() -> Any:
            jobsets, jobs, pods = live(okube, ns)
            ok = len(pods) == 3 and all((p["metadata"].get("annotations") or {}).get(ANNOTATION) for p in pods)
            return (jobsets, jobs, pods) if ok else None

        jobsets, jobs, pods = wait_until(grouped, timeout=90, interval=0.25, what="3 pods created and grouped")
        grouper.wait_idle(timeout=60)
        jobsets, jobs, pods = live(okube, ns)
        want = planned(jobsets, jobs, pods)
        assert want["errors"] == [], want["errors"]
        stored = okube.list(PODGROUPS.format(ns=ns))
        assert [pg["metadata"]["name"] for pg in stored] == [pg["metadata"]["name"] for pg in want["podGroups"]]
        (pg,) = stored
        (want_pg,) = want["podGroups"]
        assert pg["spec"] == want_pg["spec"]
        assert pg["metadata"]["ownerReferences"] == want_pg["metadata"]["ownerReferences"]
        assert pg["spec"]["minSubGroup"] == 2
        decided = {d["name"]: d for d in want["pods"]}
        for pod in pods:
            meta = pod["metadata"]
            assert meta["annotations"][ANNOTATION] == decided[meta["name"]]["podGroup"] == pg["metadata"]["name"]
            assert meta["labels"][SUBGROUP] == decided[meta["name"]]["subGroup"]

        # "scaling" a replicatedJob: JobSet v0.11 keeps spec.replicatedJobs immutable, its webhook says so
        with pytest.raises(KubeError) as refused:
            okube.patch(
                f"{JOBSETS.format(ns=ns)}/demo",
                {"spec": {"replicatedJobs": [{**rj, "replicas": rj["replicas"] + 1} for rj in js["spec"]["replicatedJobs"]]}},
            )
        assert "immutable" in refused.value.message, refused.value

        # the Job controller replaces a deleted pod: the new pod joins the same PodGroup, which is not written
        since = len(audit.writes(namespace=ns))
        rv = pg["metadata"]["resourceVersion"]
        victim = next(p for p in pods if p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "worker")
        okube.delete(f"/api/v1/namespaces/{ns}/pods/{victim['metadata']['name']}")

        def replaced() -> bool:
            _, _, now = live(okube, ns)
            names = {p["metadata"]["name"] for p in now}
            return (
                len(now) == 3
                and victim["metadata"]["name"] not in names
                and all((p["metadata"].get("annotations") or {}).get(ANNOTATION) for p in now)
            )

        wait_until(replaced, timeout=90, interval=0.25, what="the deleted pod replaced and grouped")
        grouper.wait_idle(timeout=60)
        jobsets, jobs, pods = live(okube, ns)
        (after,) = okube.list(PODGROUPS.format(ns=ns))
        assert after["metadata"]["resourceVersion"] == rv, "the PodGroup was rewritten for a replaced pod"
        assert after["spec"] == planned(jobsets, jobs, pods)["podGroups"][0]["spec"]
        new = next(p for p in pods if p["metadata"]["name"] not in {q["metadata"]["name"] for q in [victim]}
                   and p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] == victim["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"]
                   and p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "worker")
        assert new["metadata"]["labels"][SUBGROUP] == victim["metadata"]["labels"][SUBGROUP]
        assert grouper_writes(audit, ns, since) == {"pods": 1}, "one write: the new pod's group and sub-group"

        # deleting the JobSet: the garbage collector removes Jobs, pods and the PodGroup it owns
        okube.delete(f"{JOBSETS.format(ns=ns)}/demo")
        wait_until(lambda: not okube.list(PODGROUPS.format(ns=ns)), timeout=90, interval=0.25,
                   what="the PodGroup garbage-collected with its JobSet")


def test_a_jobset_restart_keeps_its_podgroup_unwritten(
    op_cluster: LocalCluster, okube: Kube, ons: str, audit: Audit
) -> None:
    """A failed pod fails its Job (backoffLimit 0) and the JobSet controller restarts the whole JobSet
    (failurePolicy.maxRestarts 1): every Job and pod is recreated (restart-attempt 1). The PodGroup is named
    after the JobSet, so it stays as it is: no write, no second PodGroup; each new pod is written once."""
    ns = ons
    label_namespace(okube, ns)
    js = demo_jobset()
    js["spec"]["failurePolicy"] = {"maxRestarts": 1}
    with GrouperThread(op_cluster, ns) as grouper:
        okube.create(JOBSETS.format(ns=ns), js)

        def grouped(attempt: str) -> Any:
            _, _, pods = live(okube, ns)
            ok = len(pods) == 3 and all(
                (p["metadata"].get("annotations") or {}).get(ANNOTATION)
                and p["metadata"]["labels"].get("jobset.sigs.k8s.io/restart-attempt") == attempt
                for p in pods
            )
            return pods if ok else None

        before = wait_until(lambda: grouped("0"), timeout=90, interval=0.25, what="3 pods grouped")
        grouper.wait_idle(timeout=60)
        (pg,) = okube.list(PODGROUPS.format(ns=ns))
        since = len(audit.writes(namespace=ns))
        victim = before[0]["metadata"]["name"]
        okube.patch(f"/api/v1/namespaces/{ns}/pods/{victim}/status", {"status": {"phase": "Failed"}})
        after = wait_until(lambda: grouped("1"), timeout=120, interval=0.25, what="the restarted JobSet's 3 pods grouped")
        grouper.wait_idle(timeout=60)
        assert not {p["metadata"]["name"] for p in after} & {p["metadata"]["name"] for p in before}
        (pg_after,) = okube.list(PODGROUPS.format(ns=ns))
        assert pg_after["metadata"]["name"] == pg["metadata"]["name"]
        assert pg_after["metadata"]["resourceVersion"] == pg["metadata"]["resourceVersion"]
        jobsets, jobs, pods = live(okube, ns)
        assert pg_after["spec"] == planned(jobsets, jobs, pods)["podGroups"][0]["spec"]
        assert grouper_writes(audit, ns, since) == {"pods": 3}, "one write per new pod, none to the PodGroup"
