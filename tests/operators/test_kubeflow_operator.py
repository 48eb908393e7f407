"""The real Kubeflow training-operator (github.com/kubeflow/training-operator, pinned in
devtools/cluster/go/kubeflow/go.mod; its PyTorchJob and MPIJob controllers, ``kubeflow.org/v1``) in the loop,
with its PyTorchJob validating webhook served with a certificate of the cluster's CA.

Every other test builds a PyTorchJob's or MPIJob's pods by hand, "as the operator creates them". Here only
the job is submitted: the training-operator creates the pods directly (owned by the job; an MPIJob's
launcher too, with the launcher's ServiceAccount, Role, RoleBinding and hostfile ConfigMap), and

- the hand-written fixtures (examples/pytorchjob.yaml, tests/catalog/fixtures/pytorchjob/running.yaml,
  examples/mpijob-v1.yaml) must carry the labels, annotations, owner references, names and requests the
  real operator gives its pods;
- a running grouper stores the PodGroup ``grouper plan`` computes from the same live objects, written once
  and each pod patched once; a pod deleted and recreated by the operator rejoins it with no PodGroup write;
  the Worker replicas changed on a running job (the operator creates the missing indexes and deletes those
  beyond) move minMember with one PodGroup write; a restarted grouper writes nothing; the garbage collector
  removes the PodGroup with its job.

There is no scheduler or kubelet: the pods stay Pending, which the operator does not wait on.
"""

from __future__ import annotations

import copy
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
    restart_then_delete,
    typed,
    uids,
    wait_grouped,
    wait_planned,
)

OPERATORS = ["kubeflow"]
# its own control plane with the training-operator (tests/clusters.py; the conftest's default runs JobSet)
op_cluster = cluster_fixture("op_cluster", shared=False, audit=True, crds=DEPLOY_CRDS, operators=OPERATORS)
REPO = Path(__file__).resolve().parents[2]
KF = "kubeflow.org/v1"
PYTORCHJOBS = "/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"
MPIJOBS = "/apis/kubeflow.org/v1/namespaces/{ns}/mpijobs"
JOB_NAME = "training.kubeflow.org/job-name"
# pod spec fields the grouper reads (scheduler, priority) or the operator sets (the MPI launcher's DNS)
POD_SPEC_FIELDS = ("schedulerName", "priorityClassName", "hostname", "subdomain")
FIXTURES = {
    "PyTorchJob": ("examples/pytorchjob.yaml", "tests/catalog/fixtures/pytorchjob/running.yaml"),
    "MPIJob": ("examples/mpijob-v1.yaml",),
}


def docs(rel: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((REPO / rel).read_text()) if d]


def submitted(doc: dict[str, Any], **replicas: int) -> dict[str, Any]:
    """A fixture's job as a user submits it (no uid, timestamps, namespace or status), with the replicas of
    the named replica specs overridden."""
    obj = copy.deepcopy(doc)
    for key in ("uid", "creationTimestamp", "namespace", "resourceVersion", "generation"):
        obj["metadata"].pop(key, None)
    obj.pop("status", None)
    specs = obj["spec"]["pytorchReplicaSpecs" if obj["kind"] == "PyTorchJob" else "mpiReplicaSpecs"]
    for name, n in replicas.items():
        specs[name]["replicas"] = n
    return obj


def jobs_path(kind: str, ns: str) -> str:
    return (PYTORCHJOBS if kind == "PyTorchJob" else MPIJOBS).format(ns=ns)


def live(kube: Kube, ns: str) -> dict[str, list[dict[str, Any]]]:
    return {
        "PyTorchJob": typed(kube.list(PYTORCHJOBS.format(ns=ns)), KF, "PyTorchJob"),
        "MPIJob": typed(kube.list(MPIJOBS.format(ns=ns)), KF, "MPIJob"),
        "Pod": typed(kube.list(f"/api/v1/namespaces/{ns}/pods"), "v1", "Pod"),
    }


def ensure_namespace(kube: Kube, ns: str) -> None:
    if not kube.exists(f"/api/v1/namespaces/{ns}"):
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    wait_until(lambda: kube.exists(f"/api/v1/namespaces/{ns}/serviceaccounts/default"), 30, what="ServiceAccount")


# ---------------------------------------------------------------------- fixture truth


def _view(pod: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """What the grouper (plan, describe, get) reads of a pod the operator creates."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    view: dict[str, Any] = {
        "labels": meta.get("labels") or {},
        "annotations": meta.get("annotations") or {},
        "ownerReferences": owner_refs(meta),
    }
    for key in POD_SPEC_FIELDS:
        view[f"spec.{key}"] = spec.get(key)
    view["request"] = pod_request(spec).to_dict()  # what describe and get sum up
    return normalize(view, names)


@pytest.mark.parametrize("kind,fixture", [(k, f) for k, files in FIXTURES.items() for f in files])
def test_fixture_is_what_the_training_operator_creates(op_cluster: LocalCluster, okube: Kube, kind: str,
                                                       fixture: str) -> None:
    """The fixture's pods equal, in everything the grouper reads, the pods the training-operator creates for
    its job (in the fixture's own namespace; no grouper runs here)."""
    objs = docs(fixture)
    (job,) = [d for d in objs if d["kind"] == kind]
    want = [d for d in objs if d["kind"] == "Pod"]
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    ensure_namespace(okube, ns)
    okube.create(jobs_path(kind, ns), submitted(job))
    try:
        def created() -> Any:
            pods = [p for p in live(okube, ns)["Pod"] if p["metadata"].get("labels", {}).get(JOB_NAME) == name]
            return pods if len(pods) == len(want) else None

        pods = wait_until(created, timeout=90, interval=0.25, what=f"the pods of {kind} {ns}/{name}")
        real_job = okube.get(f"{jobs_path(kind, ns)}/{name}")
        fixture_names, live_names = uids(objs), uids([{"kind": kind, **real_job}, *pods])
        problems = differences(
            "Pod",
            {p["metadata"]["name"]: _view(p, fixture_names) for p in want},
            {p["metadata"]["name"]: _view(p, live_names) for p in pods},
        )
        assert not problems, f"{fixture} differs from what the training-operator creates:\n" + "\n".join(problems)
    finally:
        okube.delete(f"{jobs_path(kind, ns)}/{name}", ignore_missing=True)
        wait_until(lambda: not okube.exists(f"{jobs_path(kind, ns)}/{name}"), 60, what=f"{kind} {name} deleted")


def test_the_pytorchjob_webhook_is_served(op_cluster: LocalCluster, okube: Kube, ons: str) -> None:
    """The training-operator's PyTorchJob validating webhook is registered and answers over TLS with our
    certificate: a job with two Masters and no ``pytorch`` container is rejected with its messages, as a
    real cluster rejects it."""
    (fixture,) = [d for d in docs(FIXTURES["PyTorchJob"][0]) if d["kind"] == "PyTorchJob"]
    job = submitted(fixture, Master=2)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "main"
    with pytest.raises(KubeError) as err:
        okube.create(PYTORCHJOBS.format(ns=ons), job)
    assert err.value.status == 403, err.value  # controller-runtime denies with 403
    assert 'admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied' in err.value.message
    assert "spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1" in err.value.message
    assert "must have at least one container with name pytorch" in err.value.message
    assert not okube.list(PYTORCHJOBS.format(ns=ons))


# ---------------------------------------------------------------------- the grouper over the real operator


def _grouped(kube: Kube, ns: str, count: int, pred: Any = None) -> Any:
    """The live objects once ``count`` pods exist, none terminating, every one grouped (and ``pred``)."""
    return wait_grouped(lambda: live(kube, ns), count, "pods", pred=pred, settled=True)

def small(job: dict[str, Any]) -> dict[str, Any]:
    """The job in a test namespace (its pods need no node here): the fixture's spec, 1 CPU per container."""
    for spec in (job["spec"].get("pytorchReplicaSpecs") or job["spec"].get("mpiReplicaSpecs")).values():
        for c in spec["template"]["spec"]["containers"]:
            c["resources"] = {"requests": {"cpu": "1"}}
    return job


def names_of(objs: dict[str, list[dict[str, Any]]]) -> set[str]:
    return {p["metadata"]["name"] for p in objs["Pod"]}


@pytest.mark.parametrize("kind", ["PyTorchJob", "MPIJob"])
def test_grouper_follows_a_real_job(op_cluster: LocalCluster, okube: Kube, ons: str, audit: Audit, kind: str) -> None:
    """A PyTorchJob (Master 1 + Worker 2) or MPIJob (Launcher 1 + Worker 2): one PodGroup named after and
    owned by the job, equal to the plan, written once, each pod patched once. A deleted worker is recreated
    by the operator and rejoins with one write (the pod). Worker replicas 2 -> 3 (a new worker-2) and back
    to 2 (worker-2 deleted by the operator): minMember follows, one PodGroup write each way, one pod write
    for the new worker. A restarted grouper writes nothing; deleting the job garbage-collects the
    PodGroup."""
    ns = ons
    label_namespace(okube, ns)
    (fixture,) = [d for d in docs(FIXTURES[kind][0]) if d["kind"] == kind]
    first = "Master" if kind == "PyTorchJob" else "Launcher"
    job = small(submitted(fixture, **{first: 1, "Worker": 2}))
    name = job["metadata"]["name"]
    path = f"{jobs_path(kind, ns)}/{name}"

    def set_workers(n: int) -> None:
        obj = okube.get(path)
        obj["spec"]["pytorchReplicaSpecs" if kind == "PyTorchJob" else "mpiReplicaSpecs"]["Worker"]["replicas"] = n
        okube.replace(path, obj)

    with GrouperThread(op_cluster, ns) as grouper:
        since = len(audit.writes(namespace=ns))
        created = okube.create(jobs_path(kind, ns), job)
        _grouped(okube, ns, 3)
        grouper.wait_idle(timeout=60)
        objs = live(okube, ns)
        pg = assert_stored_is_planned(okube, ns, objs)
        assert pg["metadata"]["name"] == f"pg-{name}-{created['metadata']['uid']}"
        assert [(r["kind"], r["name"]) for r in pg["metadata"]["ownerReferences"]] == [(kind, name)]
        assert pg["spec"]["minMember"] == 3
        assert grouper_writes(audit, ns, since) == {"podgroups": 1, "pods": 3}, "something written twice"
        rv = pg["metadata"]["resourceVersion"]

        # the operator recreates a deleted worker (same name): it rejoins the PodGroup, which is not written
        since = len(audit.writes(namespace=ns))
        victim = f"{name}-worker-0"
        old_uid = okube.get(f"/api/v1/namespaces/{ns}/pods/{victim}")["metadata"]["uid"]
        okube.delete(f"/api/v1/namespaces/{ns}/pods/{victim}")
        _grouped(okube, ns, 3, lambda o: victim in names_of(o) and all(
            p["metadata"]["uid"] != old_uid for p in o["Pod"]))
        grouper.wait_idle(timeout=60)
        pg = assert_stored_is_planned(okube, ns, live(okube, ns))
        assert pg["metadata"]["resourceVersion"] == rv, "the PodGroup was rewritten for a recreated pod"
        assert grouper_writes(audit, ns, since) == {"pods": 1}, "one write: the recreated worker"

        # scale up on the running job: the operator creates worker-2; minMember 4
        since = len(audit.writes(namespace=ns))
        set_workers(3)
        _grouped(okube, ns, 4, lambda o: f"{name}-worker-2" in names_of(o))
        # worker-2 grouped says the grouper saw the pod, not yet the new replicas (another watch)
        wait_planned(okube, ns, lambda: live(okube, ns), "the PodGroup following Worker replicas 3")
        grouper.wait_idle(timeout=60)
        pg = assert_stored_is_planned(okube, ns, live(okube, ns))
        assert pg["spec"]["minMember"] == 4
        assert grouper_writes(audit, ns, since) == {"podgroups": 1, "pods": 1}

        # scale down: the operator deletes worker-2 (its index is beyond the replicas); minMember 3. The
        # PyTorchJob's workers are in segments of 2 (examples/pytorchjob.yaml): the PodGroup loses segment
        # worker-1, and if the grouper sees the new spec before the operator deletes worker-2 it takes
        # worker-2 out of that segment first (one write, to the departing pod only; a race KAI has too)
        since = len(audit.writes(namespace=ns))
        set_workers(2)
        _grouped(okube, ns, 3, lambda o: f"{name}-worker-2" not in names_of(o))
        # worker-2 gone says the operator is done, not that the grouper has seen it or the new replicas yet
        wait_planned(okube, ns, lambda: live(okube, ns), "the PodGroup following Worker replicas 2")
        grouper.wait_idle(timeout=60)
        pg = assert_stored_is_planned(okube, ns, live(okube, ns))
        assert pg["spec"]["minMember"] == 3
        writes = audit.writes(namespace=ns)[since:]
        assert [w["objectRef"]["resource"] for w in writes].count("podgroups") == 1, "scale-down: one PodGroup write"
        pod_writes = [w["objectRef"]["name"] for w in writes if w["objectRef"]["resource"] == "pods"]
        allowed = ([], [f"{name}-worker-2"]) if kind == "PyTorchJob" else ([],)
        assert pod_writes in allowed, f"scale-down: pod writes {pod_writes}"

    restart_then_delete(op_cluster, okube, audit, ns, path, f"its {kind}")
