"""The real KubeRay operator (github.com/ray-project/kuberay/ray-operator, pinned in
devtools/cluster/go/kuberay/go.mod) in the loop.

Every other test builds a RayCluster's or RayJob's pods by hand, "as the operator creates them". Here only
the RayCluster or RayJob is submitted: KubeRay creates the RayCluster of a RayJob, the head and worker pods,
the head Service and, once the cluster is ready, the RayJob's submitter Job (whose pod the Job controller
creates), and

- the hand-written fixtures (examples/raycluster.yaml, examples/rayjob.yaml) must carry the labels,
  annotations, owner references, names and requests the real controllers give them;
- a running grouper stores the PodGroup ``grouper plan`` computes from the same live objects and follows a
  worker group scaled up and down (by replicas, by the autoscaler's ``workersToDelete``, by
  ``minReplicas``), a pod KubeRay recreates and a restart of the grouper with no duplicate PodGroup and
  no needless write, and the garbage collector removes it with its workload;
- a RayService (RayService → its pending RayCluster → pods) gets one PodGroup owned by the RayService,
  written once, each pod patched once.

There is no kubelet: the tests play it where KubeRay waits for running pods (a RayJob submits only to a
ready cluster) by setting the pods' status to Running and Ready.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml
from clusters import DEPLOY_CRDS, Audit, cluster_fixture
from controller.harness import ANNOTATION, GrouperThread, label_namespace
from kube import Kube, wait_until

from devtools.cluster import LocalCluster
from grouper.describe.resources import pod_request
from operators.opkit import (
    PODGROUPS,
    assert_stored_is_planned,
    differences,
    grouper_writes,
    owner_refs,
    restart_then_delete,
    typed,
    uids,
    wait_grouped,
)

OPERATORS = ["kuberay"]
# its own control plane with the kuberay operator (tests/clusters.py; the conftest's default runs JobSet)
op_cluster = cluster_fixture("op_cluster", shared=False, audit=True, crds=DEPLOY_CRDS, operators=OPERATORS)
REPO = Path(__file__).resolve().parents[2]
RAY = "ray.io/v1"
RAYCLUSTERS = "/apis/ray.io/v1/namespaces/{ns}/rayclusters"
RAYJOBS = "/apis/ray.io/v1/namespaces/{ns}/rayjobs"
# KubeRay's generated names end in 5 random characters: pods (generateName), a RayJob's RayCluster
RANDOM = re.compile(r"-[a-z0-9]{5}$")
# the labels the API server adds to a Job's pod template (the fixture's Job is written without them)
JOB_SELECTOR_LABELS = ("controller-uid", "job-name", "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name")


def example(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((REPO / "examples" / name).read_text()) if d]


def submitted(doc: dict[str, Any]) -> dict[str, Any]:
    """An example's top object as a user submits it (no uid, timestamps, namespace or status)."""
    obj = copy.deepcopy(doc)
    for key in ("uid", "creationTimestamp", "namespace", "resourceVersion"):
        obj["metadata"].pop(key, None)
    obj.pop("status", None)
    return obj


def live(kube: Kube, ns: str) -> dict[str, list[dict[str, Any]]]:
    """RayJobs, RayClusters, Jobs and pods of the namespace, as typed objects."""
    return {
        "RayJob": typed(kube.list(RAYJOBS.format(ns=ns)), RAY, "RayJob"),
        "RayCluster": typed(kube.list(RAYCLUSTERS.format(ns=ns)), RAY, "RayCluster"),
        "Job": typed(kube.list(f"/apis/batch/v1/namespaces/{ns}/jobs"), "batch/v1", "Job"),
        "Pod": typed(kube.list(f"/api/v1/namespaces/{ns}/pods"), "v1", "Pod"),
    }


def play_kubelet(kube: Kube, ns: str, pods: list[dict[str, Any]]) -> None:
    """What a kubelet reports for a started pod: Running and Ready (KubeRay waits for that)."""
    for pod in pods:
        if (pod.get("status") or {}).get("phase") == "Running":
            continue
        conditions = [{"type": t, "status": "True"} for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]
        kube.patch(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/status",
                   {"status": {"phase": "Running", "conditions": conditions}})


def ray_pods(objs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [p for p in objs["Pod"] if "ray.io/node-type" in (p["metadata"].get("labels") or {})]


# ---------------------------------------------------------------------- fixture truth


class Names:
    """Turns generated names into patterns that fixture and live objects share: uids into what they name,
    the name of a RayJob's RayCluster (``<rayjob>-<random>``) into ``<cluster of RayJob x>`` where it
    prefixes another name or a label value, and the random suffix of a generated name into ``<random>``."""

    def __init__(self, objs: list[dict[str, Any]]) -> None:
        self.uids: dict[str, str] = {}
        self.clusters = {
            o["metadata"]["name"]: f"<cluster of RayJob {ref['name']}>"
            for o in objs if o["kind"] == "RayCluster"
            for ref in o["metadata"].get("ownerReferences") or [] if ref.get("kind") == "RayJob"
        }
        self.uids = {uid: self.value(what) for uid, what in uids(objs).items()}

    def value(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if not isinstance(value, str):
            return value
        if value in self.uids:
            return self.uids[value]
        for cluster, token in self.clusters.items():
            for at in (i for i in range(len(value)) if value.startswith(cluster, i)):
                end = at + len(cluster)
                if (at == 0 or value[at - 1] in " -") and (end == len(value) or value[end] in " ->"):
                    return value[:at] + token + value[end:]
        return value

    def generated(self, name: str, *, cluster: bool = False) -> str:
        """A generated name's pattern (a RayCluster's own name keeps its prefix: that is what it shows)."""
        return RANDOM.sub("-<random>", name if cluster else self.value(name))


def _view(obj: dict[str, Any], names: Names) -> dict[str, Any]:
    """What the grouper (plan, describe, get) reads of an object the operators create."""
    meta, spec = obj["metadata"], obj.get("spec") or {}
    view: dict[str, Any] = {
        "labels": names.value(meta.get("labels") or {}),
        "annotations": names.value(meta.get("annotations") or {}),
        "ownerReferences": names.value(owner_refs(meta)),
    }
    if obj["kind"] == "RayCluster":
        view["name"] = names.generated(meta["name"], cluster=True)
    elif obj["kind"] == "Job":
        view["name"] = meta["name"]
        tmeta = spec["template"].get("metadata") or {}
        view["template.labels"] = {k: v for k, v in (tmeta.get("labels") or {}).items() if k not in JOB_SELECTOR_LABELS}
        view["template.annotations"] = tmeta.get("annotations") or {}
    else:
        view["name"] = names.generated(meta["name"])
        for key in ("schedulerName", "priorityClassName"):
            view[f"spec.{key}"] = spec.get(key)
        view["request"] = pod_request(spec).to_dict()  # what describe and get sum up
    return view


def compare(fixture: list[dict[str, Any]], objs: list[dict[str, Any]], kinds: tuple[str, ...]) -> list[str]:
    """Every difference, per kind, between the fixture's objects and the live ones (paired by name
    pattern; pods of one pattern, e.g. the workers of a group, in order)."""
    fixture_names, live_names = Names(fixture), Names(objs)

    def by_key(items: list[dict[str, Any]], names: Names) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for item in sorted(items, key=lambda o: o["metadata"]["name"]):
            v = _view(item, names)
            n = sum(1 for k in out if k.split("#")[0] == v["name"])
            out[f"{v['name']}#{n}"] = v
        return out

    problems = []
    for kind in kinds:
        want = [o for o in fixture if o["kind"] == kind]
        got = [o for o in objs if o["kind"] == kind]
        problems += differences(kind, by_key(want, fixture_names), by_key(got, live_names))
    return problems


def test_raycluster_fixture_is_what_kuberay_creates(op_cluster: LocalCluster, okube: Kube, ons: str) -> None:
    """examples/raycluster.yaml's pods equal, in everything the grouper reads, the pods KubeRay creates for
    its RayCluster (no grouper runs here)."""
    fixture = example("raycluster.yaml")
    (cluster,) = [d for d in fixture if d["kind"] == "RayCluster"]
    want = [d for d in fixture if d["kind"] == "Pod"]
    okube.create(RAYCLUSTERS.format(ns=ons), submitted(cluster))

    def created() -> Any:
        objs = live(okube, ons)
        return objs if len(objs["Pod"]) == len(want) else None

    objs = wait_until(created, timeout=90, interval=0.25, what="the head and worker pods KubeRay creates")
    problems = compare(fixture, objs["RayCluster"] + objs["Pod"], ("Pod",))
    assert not problems, "examples/raycluster.yaml differs from what KubeRay creates:\n" + "\n".join(problems)


def test_rayjob_fixture_is_what_kuberay_creates(op_cluster: LocalCluster, okube: Kube, ons: str) -> None:
    """examples/rayjob.yaml's RayCluster, submitter Job and pods equal, in everything the grouper reads, what
    KubeRay (and the Job controller, for the submitter pod) creates for its RayJob."""
    fixture = example("rayjob.yaml")
    (rayjob,) = [d for d in fixture if d["kind"] == "RayJob"]
    want_pods = [d for d in fixture if d["kind"] == "Pod"]
    okube.create(RAYJOBS.format(ns=ons), submitted(rayjob))

    def cluster_pods() -> Any:
        pods = ray_pods(live(okube, ons))
        return pods if len(pods) == len(want_pods) - 1 else None

    play_kubelet(okube, ons, wait_until(cluster_pods, timeout=90, interval=0.25, what="the RayJob's cluster pods"))

    def everything() -> Any:
        objs = live(okube, ons)
        return objs if objs["Job"] and len(objs["Pod"]) == len(want_pods) else None

    objs = wait_until(everything, timeout=90, interval=0.25, what="the submitter Job and its pod (cluster ready)")
    (real_job,) = objs["Job"]
    assert real_job["metadata"]["name"] == rayjob["metadata"]["name"]
    problems = compare(fixture, [o for group in objs.values() for o in group], ("RayCluster", "Job", "Pod"))
    assert not problems, "examples/rayjob.yaml differs from what KubeRay creates:\n" + "\n".join(problems)


# ---------------------------------------------------------------------- the grouper over the real operator


def _grouped(kube: Kube, ns: str, count: int, pred: Any = None) -> Any:
    """The live objects once ``count`` Ray pods exist and every one is grouped (and ``pred(objs)``)."""
    return wait_grouped(lambda: live(kube, ns), count, "Ray pods", pods=ray_pods, pred=pred)

def workers(objs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return sorted((p for p in ray_pods(objs) if p["metadata"]["labels"]["ray.io/node-type"] == "worker"),
                  key=lambda p: p["metadata"]["name"])


def test_grouper_follows_a_real_raycluster(op_cluster: LocalCluster, okube: Kube, ons: str, audit: Audit) -> None:
    """The autoscaling RayCluster of examples/raycluster.yaml (head + gpu-workers, replicas 2, minReplicas 1:
    minMember 2). Scaled by replicas (up) and by the autoscaler's way down (``workersToDelete``), the
    PodGroup stays unwritten (minReplicas decides); ``minReplicas`` raised: one PodGroup write. A deleted
    worker is recreated by KubeRay: one write (the new pod). A restarted grouper writes nothing. Deleting
    the RayCluster garbage-collects the PodGroup."""
    ns = ons
    label_namespace(okube, ns)
    (cluster,) = [d for d in example("raycluster.yaml") if d["kind"] == "RayCluster"]
    path = f"{RAYCLUSTERS.format(ns=ns)}/{cluster['metadata']['name']}"

    def scale(**fields: Any) -> None:
        rc = okube.get(path)
        rc["spec"]["workerGroupSpecs"][0].update(fields)
        okube.replace(path, rc)

    with GrouperThread(op_cluster, ns) as grouper:
        okube.create(RAYCLUSTERS.format(ns=ns), submitted(cluster))
        objs = _grouped(okube, ns, 3)
        grouper.wait_idle(timeout=60)
        pg = assert_stored_is_planned(okube, ns, live(okube, ns))
        assert pg["spec"]["minMember"] == 2
        assert [(sg["name"], sg["minMember"]) for sg in pg["spec"]["subGroups"]] == [("headgroup", 1), ("gpu-workers", 1)]
        rv = pg["metadata"]["resourceVersion"]

        # up: replicas 2 -> 3, a third worker; minReplicas still decides minMember
        since = len(audit.writes(namespace=ns))
        scale(replicas=3)
        _grouped(okube, ns, 4)
        grouper.wait_idle(timeout=60)
        pg = assert_stored_is_planned(okube, ns, live(okube, ns))
        assert pg["metadata"]["resourceVersion"] == rv, "the PodGroup was rewritten for a scale-up minReplicas decides"
        assert grouper_writes(audit, ns, since) == {"pods": 1}, "one write: the new worker's group and sub-group"

        # down the autoscaler's way: replicas 3 -> 1 naming the workers to delete; nothing to write
        since = len(audit.writes(namespace=ns))
        victims = [p["metadata"]["name"] for p in workers(live(okube, ns))[:2]]
        scale(replicas=1, scaleStrategy={"workersToDelete": victims})
        _grouped(okube, ns, 2, lambda o: not {p["metadata"]["name"] for p in o["Pod"]} & set(victims))
        grouper.wait_idle(timeout=60)
        pg = assert_stored_is_planned(okube, ns, live(okube, ns))
        assert pg["metadata"]["resourceVersion"] == rv
        assert grouper_writes(audit, ns, since) == {}, "scale-down: no write"

        # minReplicas 1 -> 2 (replicas 2): minMember 3, one PodGroup write and one for the new worker
        since = len(audit.writes(namespace=ns))
        scale(replicas=2, minReplicas=2)
        objs = _grouped(okube, ns, 3)
        grouper.wait_idle(timeout=60)
        pg = assert_stored_is_planned(okube, ns, live(okube, ns))
        assert pg["spec"]["minMember"] == 3
        assert grouper_writes(audit, ns, since) == {"podgroups": 1, "pods": 1}

        # KubeRay recreates a deleted worker: the new pod joins the same PodGroup, which is not written
        since = len(audit.writes(namespace=ns))
        rv = pg["metadata"]["resourceVersion"]
        victim = workers(objs)[0]["metadata"]["name"]
        okube.delete(f"/api/v1/namespaces/{ns}/pods/{victim}")
        _grouped(okube, ns, 3, lambda o: victim not in {p["metadata"]["name"] for p in o["Pod"]})
        grouper.wait_idle(timeout=60)
        pg = assert_stored_is_planned(okube, ns, live(okube, ns))
        assert pg["metadata"]["resourceVersion"] == rv, "the PodGroup was rewritten for a recreated pod"
        assert grouper_writes(audit, ns, since) == {"pods": 1}, "one write: the recreated worker"

    restart_then_delete(op_cluster, okube, audit, ns, path, "its RayCluster")


def test_grouper_follows_a_real_rayjob(op_cluster: LocalCluster, okube: Kube, ons: str, audit: Audit) -> None:
    """The RayJob of examples/rayjob.yaml: KubeRay creates its RayCluster (``<rayjob>-<random>``, named in
    ``status.rayClusterName``), the pods and, once they run, the submitter Job, whose pod (default scheduler)
    the grouper leaves alone. One PodGroup named after and owned by the RayJob (minMember 1 + 2, priority
    from the RayJob's label) equals the plan; a recreated worker costs one write; deleting the RayJob
    garbage-collects the PodGroup."""
    ns = ons
    label_namespace(okube, ns)
    (rayjob,) = [d for d in example("rayjob.yaml") if d["kind"] == "RayJob"]
    with GrouperThread(op_cluster, ns) as grouper:
        job = okube.create(RAYJOBS.format(ns=ns), submitted(rayjob))
        objs = _grouped(okube, ns, 3)
        play_kubelet(okube, ns, ray_pods(objs))
        objs = wait_until(lambda: (o := live(okube, ns))["Job"] and len(o["Pod"]) == 4 and o, timeout=90,
                          interval=0.25, what="the submitter Job and its pod")
        grouper.wait_idle(timeout=60)
        objs = live(okube, ns)
        pg = assert_stored_is_planned(okube, ns, objs)
        assert pg["metadata"]["name"] == f"pg-{rayjob['metadata']['name']}-{job['metadata']['uid']}"
        assert pg["spec"]["minMember"] == 3
        assert pg["spec"]["priorityClassName"] == "inference"
        (submitter,) = [p for p in objs["Pod"] if "ray.io/node-type" not in p["metadata"]["labels"]]
        assert ANNOTATION not in (submitter["metadata"].get("annotations") or {})

        since = len(audit.writes(namespace=ns))
        rv = pg["metadata"]["resourceVersion"]
        victim = workers(objs)[0]["metadata"]["name"]
        okube.delete(f"/api/v1/namespaces/{ns}/pods/{victim}")
        _grouped(okube, ns, 3, lambda o: victim not in {p["metadata"]["name"] for p in o["Pod"]})
        grouper.wait_idle(timeout=60)
        pg = assert_stored_is_planned(okube, ns, live(okube, ns))
        assert pg["metadata"]["resourceVersion"] == rv, "the PodGroup was rewritten for a recreated pod"
        assert grouper_writes(audit, ns, since) == {"pods": 1}, "one write: the recreated worker"

        okube.delete(f"{RAYJOBS.format(ns=ns)}/{rayjob['metadata']['name']}")
        wait_until(lambda: not okube.list(PODGROUPS.format(ns=ns)), timeout=90, interval=0.25,
                   what="the PodGroup garbage-collected with its RayJob")


RAYSERVICES = "/apis/ray.io/v1/namespaces/{ns}/rayservices"


def test_grouper_follows_a_real_rayservice(op_cluster: LocalCluster, okube: Kube, ons: str, audit: Audit) -> None:
    """The RayService of examples/rayservice.yaml: KubeRay creates its RayCluster (``<rayservice>-<random>``,
    owned by the RayService, named in the RayService's status: pending until Serve answers, which it never
    does here — no Ray runs) and the head and gpu workers (the empty cpu group gets none). One PodGroup
    named after and owned by the RayService (RayService → RayCluster → pods; minMember 1 + 2) equals the
    plan, written once, each pod patched once, also after the pods run (KubeRay then looks for Serve and
    updates the RayService's status, which the grouper reads). A restarted grouper writes nothing; deleting
    the RayService garbage-collects the PodGroup."""
    ns = ons
    label_namespace(okube, ns)
    (service,) = [d for d in example("rayservice.yaml") if d["kind"] == "RayService"]
    name = service["metadata"]["name"]
    with GrouperThread(op_cluster, ns) as grouper:
        since = len(audit.writes(namespace=ns))
        svc = okube.create(RAYSERVICES.format(ns=ns), submitted(service))
        objs = _grouped(okube, ns, 3)
        play_kubelet(okube, ns, ray_pods(objs))  # running: KubeRay now asks the (absent) dashboard about Serve
        grouper.wait_idle(timeout=60)
        objs = live(okube, ns)
        (cluster,) = objs["RayCluster"]
        assert [(r["kind"], r["name"]) for r in cluster["metadata"]["ownerReferences"]] == [("RayService", name)]
        assert {p["metadata"]["ownerReferences"][0]["name"] for p in ray_pods(objs)} == {cluster["metadata"]["name"]}
        objs["RayService"] = typed(okube.list(RAYSERVICES.format(ns=ns)), RAY, "RayService")
        pg = assert_stored_is_planned(okube, ns, objs)
        assert pg["metadata"]["name"] == f"pg-{name}-{svc['metadata']['uid']}"
        assert [(r["kind"], r["name"]) for r in pg["metadata"]["ownerReferences"]] == [("RayService", name)]
        assert pg["spec"]["minMember"] == 3
        assert grouper_writes(audit, ns, since) == {"podgroups": 1, "pods": 3}
        rv = pg["metadata"]["resourceVersion"]

        # the cluster is the RayService's pending one (Serve never answers here), which the plugin falls
        # through to (the active one is empty), as KAI's does
        status = objs["RayService"][0].get("status") or {}
        assert (status.get("pendingServiceStatus") or {}).get("rayClusterName") == cluster["metadata"]["name"], status
        assert not (status.get("activeServiceStatus") or {}).get("rayClusterName"), status
        grouper.wait_idle(timeout=60)
        assert okube.get(f"{PODGROUPS.format(ns=ns)}/{pg['metadata']['name']}")["metadata"]["resourceVersion"] == rv
        assert grouper_writes(audit, ns, since) == {"podgroups": 1, "pods": 3}, "something written twice"

    restart_then_delete(op_cluster, okube, audit, ns, f"{RAYSERVICES.format(ns=ns)}/{name}", "its RayService")
