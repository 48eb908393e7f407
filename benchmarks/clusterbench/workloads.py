"""The workloads the benchmark creates, as their controllers would, and the PodGroups it expects for them.

Each workload is a list of :class:`Node` objects (the top object, the intermediate owners, the pods) with
the nodes each needs created first (for the uid in its ownerReference). The expectation is written per
kind from the shape the benchmark created (not from the grouper's code), after the reference's naming rules
(``pg-<name>-<uid>``, LWS ``-group-<n>``, Karta v2/alpha ``pg-<uid>-<key>``).

Kinds: JobSet → Job (suspend) → pods; PyTorchJob → pods; RayCluster → pods; LeaderWorkerSet → leader
StatefulSet → leader pod → worker StatefulSet → worker pods; batch Job → pods; Deployment → ReplicaSet →
pods; NIMService (Karta-only: no native plugin, ``definitions/apps-nvidia-com-nimservice-v1alpha1.yaml``)
→ Deployment → ReplicaSet → pods.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
Uids = dict[str, str]

ANNOTATION = "pod-group-name"
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
MIN_MEMBER_ANNOTATION = "kai.scheduler/batch-min-member"
KINDS = ("JobSet", "PyTorchJob", "RayCluster", "LeaderWorkerSet", "Job", "Deployment", "NIMService")

PATHS = {
    "JobSet": "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets",
    "PyTorchJob": "/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs",
    "RayCluster": "/apis/ray.io/v1/namespaces/{ns}/rayclusters",
    "LeaderWorkerSet": "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets",
    "Job": "/apis/batch/v1/namespaces/{ns}/jobs",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "ReplicaSet": "/apis/apps/v1/namespaces/{ns}/replicasets",
    "StatefulSet": "/apis/apps/v1/namespaces/{ns}/statefulsets",
    "NIMService": "/apis/apps.nvidia.com/v1alpha1/namespaces/{ns}/nimservices",
    "Pod": "/api/v1/namespaces/{ns}/pods",
}
API_VERSIONS = {
    "JobSet": "jobset.x-k8s.io/v1alpha2", "PyTorchJob": "kubeflow.org/v1", "RayCluster": "ray.io/v1",
    "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1", "Job": "batch/v1", "Deployment": "apps/v1",
    "ReplicaSet": "apps/v1", "StatefulSet": "apps/v1", "NIMService": "apps.nvidia.com/v1alpha1", "Pod": "v1",
}


@dataclass
class Node:
    key: str  # unique within the workload; "top" is the workload object
    kind: str
    body: Callable[[Uids], Obj]  # built once its dependencies' uids are known
    deps: tuple[str, ...] = ()

    @property
    def is_pod(self) -> bool:
        return self.kind == "Pod"


@dataclass
class ExpectedPodGroup:
    name: str
    min_member: int | None
    min_sub_group: int | None
    # (name, parent, minMember, minSubGroup) per sub-group
    sub_groups: list[tuple[str, str | None, int | None, int | None]] = field(default_factory=list)
    owner: Obj = field(default_factory=dict)

    def body(self) -> Obj:
        """The PodGroup the minimal-writes baseline creates (the same shape the grouper must write)."""
        spec: Obj = {"queue": "default-queue"}
        if self.min_sub_group is not None:
            spec["minSubGroup"] = self.min_sub_group
        else:
            spec["minMember"] = self.min_member
        subs = []
        for name, parent, mm, msg in self.sub_groups:
            sg: Obj = {"name": name}
            if parent:
                sg["parent"] = parent
            if msg is not None:
                sg["minSubGroup"] = msg
            else:
                sg["minMember"] = mm
            subs.append(sg)
        if subs:
            spec["subGroups"] = subs
        return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                "metadata": {"name": self.name, "ownerReferences": [self.owner]}, "spec": spec}


@dataclass
class Expectation:
    pods: dict[str, tuple[str, str | None]]  # pod name -> (PodGroup, sub-group or None)
    pod_groups: dict[str, ExpectedPodGroup]


@dataclass
class Workload:
    kind: str
    name: str
    nodes: list[Node]
    expect: Callable[[str], Expectation]  # from the top object's uid

    @property
    def pod_count(self) -> int:
        return sum(1 for n in self.nodes if n.is_pod)


def _meta(name: str, labels: dict[str, str] | None = None, owner: tuple[str, str, str] | None = None,
          uids: Uids | None = None, annotations: dict[str, str] | None = None) -> Obj:
    m: Obj = {"name": name}
    if labels:
        m["labels"] = labels
    if annotations:
        m["annotations"] = annotations
    if owner is not None:
        kind, oname, dep = owner
        assert uids is not None
        m["ownerReferences"] = [{"apiVersion": API_VERSIONS[kind], "kind": kind, "name": oname, "uid": uids[dep],
                                 "controller": True, "blockOwnerDeletion": True}]
    return m


def _owner_ref(kind: str, name: str, uid: str) -> Obj:
    return {"apiVersion": API_VERSIONS[kind], "kind": kind, "name": name, "uid": uid}


class PodSpec:
    """The pod spec every benchmark pod gets: the scheduler the phase is for, one tiny container."""

    def __init__(self, scheduler_name: str) -> None:
        self.scheduler_name = scheduler_name

    def pod(self, name: str, labels: dict[str, str], owner: tuple[str, str, str]) -> Node:
        def body(uids: Uids) -> Obj:
            return {"apiVersion": "v1", "kind": "Pod", "metadata": _meta(name, labels, owner, uids),
                    "spec": {"schedulerName": self.scheduler_name,
                             "containers": [{"name": "main", "image": "registry.invalid/bench:1"}]}}
        return Node(f"pod/{name}", "Pod", body, (owner[2],))

    def template(self, labels: dict[str, str] | None = None) -> Obj:
        return {"metadata": {"labels": labels or {}},
                "spec": {"schedulerName": self.scheduler_name,
                         "containers": [{"name": "main", "image": "registry.invalid/bench:1"}]}}


def _top(kind: str, body: Obj) -> Node:
    return Node("top", kind, lambda uids: body)


# ---------------------------------------------------------------------------------------------------- kinds


def jobset(ps: PodSpec, name: str, replicas: int, parallelism: int) -> Workload:
    """One replicatedJob ``worker`` of ``replicas`` Jobs x ``parallelism`` pods; Jobs suspended."""
    rj = "worker"
    top = {"apiVersion": API_VERSIONS["JobSet"], "kind": "JobSet", "metadata": {"name": name},
           "spec": {"replicatedJobs": [{"name": rj, "replicas": replicas, "template": {"spec": {
               "parallelism": parallelism, "completions": parallelism, "template": ps.template()}}}]}}
    nodes = [_top("JobSet", top)]
    for i in range(replicas):
        job = f"{name}-{rj}-{i}"
        labels = {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": rj,
                  "jobset.sigs.k8s.io/job-index": str(i)}

        def job_body(uids: Uids, job: str = job, labels: dict[str, str] = labels) -> Obj:
            return {"apiVersion": "batch/v1", "kind": "Job",
                    "metadata": _meta(job, labels, ("JobSet", name, "top"), uids),
                    "spec": {"suspend": True, "parallelism": parallelism, "completions": parallelism,
                             "template": {**ps.template(labels), "spec": {**ps.template()["spec"],
                                                                          "restartPolicy": "Never"}}}}
        nodes.append(Node(f"job/{job}", "Job", job_body, ("top",)))
        for p in range(parallelism):
            nodes.append(ps.pod(f"{job}-{p}", {**labels, "batch.kubernetes.io/job-name": job},
                                ("Job", job, f"job/{job}")))

    def expect(uid: str) -> Expectation:
        pg = f"pg-{name}-{uid}"
        subs: list[tuple[str, str | None, int | None, int | None]] = [(rj, None, None, replicas)]
        subs += [(f"{rj}-replica-{i}", rj, parallelism, None) for i in range(replicas)]
        pods = {f"{name}-{rj}-{i}-{p}": (pg, f"{rj}-replica-{i}") for i in range(replicas) for p in range(parallelism)}
        return Expectation(pods, {pg: ExpectedPodGroup(pg, None, 1, subs, _owner_ref("JobSet", name, uid))})
    return Workload("JobSet", name, nodes, expect)


def pytorchjob(ps: PodSpec, name: str, pods: int) -> Workload:
    """Master 1 + Worker ``pods - 1``, pods owned by the PyTorchJob (as the training operator does)."""
    workers = pods - 1
    top = {"apiVersion": API_VERSIONS["PyTorchJob"], "kind": "PyTorchJob", "metadata": {"name": name},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": ps.template()},
                                            "Worker": {"replicas": workers, "template": ps.template()}}}}
    nodes = [_top("PyTorchJob", top)]
    names: list[tuple[str, str]] = []
    for rtype, count in (("master", 1), ("worker", workers)):
        for i in range(count):
            pod = f"{name}-{rtype}-{i}"
            names.append((pod, rtype))
            nodes.append(ps.pod(pod, {"training.kubeflow.org/job-name": name,
                                      "training.kubeflow.org/replica-type": rtype,
                                      "training.kubeflow.org/replica-index": str(i)}, ("PyTorchJob", name, "top")))

    def expect(uid: str) -> Expectation:
        pg = f"pg-{name}-{uid}"
        subs: list[tuple[str, str | None, int | None, int | None]] = [("master", None, 1, None),
                                                                       ("worker", None, workers, None)]
        return Expectation({p: (pg, t) for p, t in names},
                           {pg: ExpectedPodGroup(pg, pods, None, subs, _owner_ref("PyTorchJob", name, uid))})
    return Workload("PyTorchJob", name, nodes, expect)


def raycluster(ps: PodSpec, name: str, pods: int) -> Workload:
    """Head + one worker group ``workers`` of ``pods - 1`` replicas, pods owned by the RayCluster."""
    workers = pods - 1
    top = {"apiVersion": API_VERSIONS["RayCluster"], "kind": "RayCluster", "metadata": {"name": name},
           "spec": {"headGroupSpec": {"template": ps.template()},
                    "workerGroupSpecs": [{"groupName": "workers", "replicas": workers, "minReplicas": 0,
                                          "maxReplicas": workers, "template": ps.template()}]}}
    nodes = [_top("RayCluster", top)]
    names: list[tuple[str, str]] = []
    for i in range(pods):
        head = i == 0
        pod = f"{name}-head" if head else f"{name}-workers-{i}"
        group = "headgroup" if head else "workers"
        names.append((pod, group))
        nodes.append(ps.pod(pod, {"ray.io/cluster": name, "ray.io/node-type": "head" if head else "worker",
                                  "ray.io/group": group}, ("RayCluster", name, "top")))

    def expect(uid: str) -> Expectation:
        pg = f"pg-{name}-{uid}"
        subs: list[tuple[str, str | None, int | None, int | None]] = [("headgroup", None, 1, None),
                                                                       ("workers", None, workers, None)]
        return Expectation({p: (pg, g) for p, g in names},
                           {pg: ExpectedPodGroup(pg, pods, None, subs, _owner_ref("RayCluster", name, uid))})
    return Workload("RayCluster", name, nodes, expect)


def leaderworkerset(ps: PodSpec, name: str, replicas: int, size: int) -> Workload:
    """``replicas`` groups of ``size``: leader StatefulSet (its pods are the leaders), one worker
    StatefulSet per group owned by its leader pod (as the LWS controller does)."""
    top = {"apiVersion": API_VERSIONS["LeaderWorkerSet"], "kind": "LeaderWorkerSet", "metadata": {"name": name},
           "spec": {"replicas": replicas, "leaderWorkerTemplate": {
               "size": size, "leaderTemplate": ps.template(), "workerTemplate": ps.template()}}}
    lbl = "leaderworkerset.sigs.k8s.io/"

    def sts(sname: str, owner: tuple[str, str, str], count: int, labels: dict[str, str]) -> Callable[[Uids], Obj]:
        def body(uids: Uids) -> Obj:
            return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _meta(sname, labels, owner, uids),
                    "spec": {"replicas": count, "serviceName": name, "selector": {"matchLabels": labels},
                             "template": ps.template(labels)}}
        return body

    nodes = [_top("LeaderWorkerSet", top),
             Node("leader-sts", "StatefulSet",
                  sts(name, ("LeaderWorkerSet", name, "top"), replicas, {f"{lbl}name": name, f"{lbl}worker-index": "0"}),
                  ("top",))]
    names: list[tuple[str, int, str]] = []
    for g in range(replicas):
        glabels = {f"{lbl}name": name, f"{lbl}group-index": str(g), f"{lbl}group-key": f"{name}-{g}"}
        leader = f"{name}-{g}"
        names.append((leader, g, "leader"))
        nodes.append(ps.pod(leader, {**glabels, f"{lbl}worker-index": "0"}, ("StatefulSet", name, "leader-sts")))
        wsts = f"{name}-{g}"
        if size > 1:
            nodes.append(Node(f"worker-sts/{wsts}", "StatefulSet",
                              sts(wsts, ("Pod", leader, f"pod/{leader}"), size - 1, glabels), (f"pod/{leader}",)))
        for w in range(1, size):
            pod = f"{name}-{g}-{w}"
            names.append((pod, g, "workers"))
            nodes.append(ps.pod(pod, {**glabels, f"{lbl}worker-index": str(w)},
                                ("StatefulSet", wsts, f"worker-sts/{wsts}")))

    def expect(uid: str) -> Expectation:
        subs: list[tuple[str, str | None, int | None, int | None]] = [("leader", None, 1, None)]
        if size > 1:
            subs.append(("workers", None, size - 1, None))
        pgs = {f"pg-{name}-{uid}-group-{g}": ExpectedPodGroup(
            f"pg-{name}-{uid}-group-{g}", size, None, subs, _owner_ref("LeaderWorkerSet", name, uid))
            for g in range(replicas)}
        return Expectation({p: (f"pg-{name}-{uid}-group-{g}", sg) for p, g, sg in names}, pgs)
    return Workload("LeaderWorkerSet", name, nodes, expect)


def batch_job(ps: PodSpec, name: str, pods: int) -> Workload:
    """A Job of ``pods`` parallel pods with ``kai.scheduler/batch-min-member: pods``."""
    top = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "annotations": {MIN_MEMBER_ANNOTATION: str(pods)}},
           "spec": {"parallelism": pods, "completions": pods,
                    "template": {**ps.template(), "spec": {**ps.template()["spec"], "restartPolicy": "Never"}}}}
    nodes = [_top("Job", top)]
    names = [f"{name}-{i}" for i in range(pods)]
    nodes += [ps.pod(p, {"batch.kubernetes.io/job-name": name}, ("Job", name, "top")) for p in names]

    def expect(uid: str) -> Expectation:
        pg = f"pg-{name}-{uid}"
        return Expectation({p: (pg, None) for p in names},
                           {pg: ExpectedPodGroup(pg, pods, None, [], _owner_ref("Job", name, uid))})
    return Workload("Job", name, nodes, expect)


def _replicaset_chain(ps: PodSpec, name: str, pods: int, owner_kind: str, dep_key: str,
                      labels: dict[str, str]) -> tuple[list[Node], list[str]]:
    rs = f"{name}-5d8f7c9b6"
    rs_labels = {**labels, "pod-template-hash": "5d8f7c9b6"}

    def rs_body(uids: Uids) -> Obj:
        return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": _meta(rs, rs_labels, (owner_kind, name, dep_key), uids),
                "spec": {"replicas": pods, "selector": {"matchLabels": rs_labels}, "template": ps.template(rs_labels)}}
    nodes = [Node("rs", "ReplicaSet", rs_body, (dep_key,))]
    names = [f"{rs}-p{i:04d}" for i in range(pods)]
    nodes += [ps.pod(p, rs_labels, ("ReplicaSet", rs, "rs")) for p in names]
    return nodes, names


def deployment(ps: PodSpec, name: str, pods: int) -> Workload:
    """Deployment (``batch-min-member: pods``, gang) → ReplicaSet → pods."""
    labels = {"app": name}
    top = {"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "annotations": {MIN_MEMBER_ANNOTATION: str(pods)}},
           "spec": {"replicas": pods, "selector": {"matchLabels": labels}, "template": ps.template(labels)}}
    chain, names = _replicaset_chain(ps, name, pods, "Deployment", "top", labels)

    def expect(uid: str) -> Expectation:
        pg = f"pg-{name}-{uid}"
        return Expectation({p: (pg, None) for p in names},
                           {pg: ExpectedPodGroup(pg, pods, None, [], _owner_ref("Deployment", name, uid))})
    return Workload("Deployment", name, [_top("Deployment", top), *chain], expect)


def nimservice(ps: PodSpec, name: str, pods: int) -> Workload:
    """NIMService (``replicas: pods``) → Deployment → ReplicaSet → pods labelled app.kubernetes.io/name;
    grouped by the built-in Karta definition (alpha form: ``pg-<uid>-<app.kubernetes.io/name>``)."""
    labels = {"app.kubernetes.io/name": name, "app": name}
    top = {"apiVersion": API_VERSIONS["NIMService"], "kind": "NIMService", "metadata": {"name": name},
           "spec": {"image": {"repository": "registry.invalid/nim", "tag": "1"}, "replicas": pods,
                    "schedulerName": ps.scheduler_name}}

    def dep_body(uids: Uids) -> Obj:
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(name, labels, ("NIMService", name, "top"), uids),
                "spec": {"replicas": pods, "selector": {"matchLabels": labels}, "template": ps.template(labels)}}
    chain, names = _replicaset_chain(ps, name, pods, "Deployment", "dep", labels)

    def expect(uid: str) -> Expectation:
        pg = f"pg-{uid}-{name}"
        return Expectation({p: (pg, None) for p in names},
                           {pg: ExpectedPodGroup(pg, pods, None, [], _owner_ref("NIMService", name, uid))})
    return Workload("NIMService", name, [_top("NIMService", top), Node("dep", "Deployment", dep_body, ("top",)), *chain],
                    expect)


# ---------------------------------------------------------------------------------------------------- shapes

_ABBREV = {"JobSet": "js", "PyTorchJob": "pt", "RayCluster": "ray", "LeaderWorkerSet": "lws", "Job": "job",
           "Deployment": "dep", "NIMService": "nim"}


def build(kind: str, ps: PodSpec, name: str, pods: int) -> Workload:
    """One workload of ``pods`` pods. JobSet and LWS: groups of 8 when ``pods`` is a multiple of 8 above 8
    (1,000 = 125 Jobs / LWS groups x 8), else one Job / group of ``pods``."""
    groups, per = (pods // 8, 8) if pods > 8 and pods % 8 == 0 else (1, pods)
    if kind == "JobSet":
        return jobset(ps, name, groups, per)
    if kind == "LeaderWorkerSet":
        return leaderworkerset(ps, name, groups, per)
    builders = {"PyTorchJob": pytorchjob, "RayCluster": raycluster, "Job": batch_job, "Deployment": deployment,
                "NIMService": nimservice}
    return builders[kind](ps, name, pods)


def workload_set(total_pods: int, pods_per_workload: int, ps: PodSpec, prefix: str,
                 kinds: tuple[str, ...] = KINDS) -> list[Workload]:
    """``total_pods / pods_per_workload`` workloads, kinds mixed round-robin."""
    if total_pods % pods_per_workload:
        raise ValueError(f"{total_pods} pods is not a multiple of {pods_per_workload} per workload")
    out = []
    for i in range(total_pods // pods_per_workload):
        kind = kinds[i % len(kinds)]
        out.append(build(kind, ps, f"{prefix}{_ABBREV[kind]}-{i:05d}", pods_per_workload))
    return out
