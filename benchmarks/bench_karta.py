"""Karta engine throughput: pod -> PodGroup decisions per second on realistic objects.

A *decision* is what one pod costs the grouper: ``status(workload)`` + ``component_of_pod`` +
``subtree_scale`` (the "gang" column runs the full ``apply_gang`` instead). Scenarios:

* warm — one workload version, a stream of distinct pods (steady state: the workload's batch is
  evaluated once and shared, every pod costs one jq run);
* cold — every decision sees a new workload version and a new pod (worst case: two jq runs plus
  serialization of both objects);

each with the compiled-program cache on and off, plus cold decisions through the sandbox worker
(how cluster-supplied definitions run). Definitions: every ``definitions/*.yaml`` with a sample
workload below, plus the test definitions in ``tests/karta/data``. Prints a table and writes
``benchmarks/results/karta.json``.

    python benchmarks/bench_karta.py [--seconds 0.5] [--only jobset]
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import platform
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import jq  # noqa: E402
import yaml  # noqa: E402

from grouper.karta import Evaluator, KartaDefinition, KartaEvalError, apply_gang, load_dir  # noqa: E402
from grouper.karta.jqrun import OBJECT_TEXTS, PROGRAMS, serialize  # noqa: E402
from grouper.karta.sandbox import SandboxedRunner, SandboxPool  # noqa: E402
from grouper.model.objects import GVK  # noqa: E402
from grouper.model.podgroup import OwnerRef, PodGroupMetadata  # noqa: E402

Obj = dict[str, Any]

# ---------------------------------------------------------------- realistic objects


def container(name: str, env: int = 24, gpus: int = 8) -> Obj:
    return {
        "name": name,
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["torchrun"],
        "args": [
            "--nnodes=$(NNODES)",
            "--nproc-per-node=8",
            "/workspace/train.py",
            "--config=/etc/train/config.yaml",
        ],
        "env": [{"name": f"TRAINING_SETTING_{i}", "value": f"value-{i}-" + "x" * 24} for i in range(env)],
        "resources": {
            "limits": {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi"},
            "requests": {"nvidia.com/gpu": str(gpus), "cpu": "48", "memory": "480Gi"},
        },
        "volumeMounts": [{"name": n, "mountPath": f"/mnt/{n}"} for n in ("data", "ckpt", "shm", "config")],
        "ports": [{"containerPort": 29500, "name": "c10d"}],
    }


def template(name: str, labels: dict[str, str] | None = None, env: int = 24) -> Obj:
    return {
        "metadata": {
            "labels": {"app": name, **(labels or {})},
            "annotations": {"sidecar.istio.io/inject": "false"},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "priorityClassName": "train",
            "restartPolicy": "Never",
            "containers": [container(name, env)],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}},
                {"name": "ckpt", "persistentVolumeClaim": {"claimName": "checkpoints"}},
                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
                {"name": "config", "configMap": {"name": "train-config"}},
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "nvidia.com/gpu.product",
                                        "operator": "In",
                                        "values": ["H100-SXM"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
        },
    }


def workload(
    api_version: str, kind: str, spec: Obj, status: Obj | None = None, labels: dict[str, str] | None = None
) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": "train",
            "namespace": "team-a",
            "uid": "6f1c2b0e-0000-4000-8000-000000000001",
            "resourceVersion": "1",
            "labels": {"kai.scheduler/queue": "team-a", **(labels or {})},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}" * 200},
        },
        "spec": spec,
        "status": status or {},
    }


def pod(labels: dict[str, str], annotations: dict[str, str] | None = None) -> Obj:
    t = template("main")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-pod",
            "namespace": "team-a",
            "uid": "pod-0",
            "resourceVersion": "1",
            "labels": labels,
            "annotations": annotations or {},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "train-x", "uid": "j", "controller": True}
            ],
        },
        "spec": {**t["spec"], "nodeName": "node-1"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


COND_RUNNING = {"conditions": [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}]}


def sample_jobset() -> tuple[Obj, list[Obj]]:
    def rj(name: str, replicas: int, par: int) -> Obj:
        return {
            "name": name,
            "replicas": replicas,
            "template": {"spec": {"parallelism": par, "completions": par, "template": template(name)}},
        }

    obj = workload(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        {"replicatedJobs": [rj("leader", 1, 1), rj("worker", 4, 2)]},
        {
            "replicatedJobsStatus": [
                {"name": "leader", "active": 1, "ready": 1, "failed": 0},
                {"name": "worker", "active": 4, "ready": 4, "failed": 0},
            ]
        },
    )
    pods = [
        pod({"jobset.sigs.k8s.io/replicatedjob-name": n, "jobset.sigs.k8s.io/jobset-name": "train"})
        for n in ("leader", "worker")
    ]
    return obj, pods


def sample_kubeflow(
    kind: str, api_version: str, specs_key: str, roles: tuple[str, str], role_label: str
) -> Callable[[], tuple[Obj, list[Obj]]]:
    def make() -> tuple[Obj, list[Obj]]:
        a, b = roles
        obj = workload(
            api_version,
            kind,
            {
                specs_key: {
                    a: {"replicas": 1, "template": template(a.lower())},
                    b: {"replicas": 8, "template": template(b.lower())},
                },
                "runPolicy": {"cleanPodPolicy": "None"},
            },
            COND_RUNNING,
        )
        pods = [
            pod(
                {
                    role_label: r.lower(),
                    "training.kubeflow.org/job-name": "train",
                    "training.kubeflow.org/replica-type": r.lower(),
                }
            )
            for r in roles
        ]
        return obj, pods

    return make


def sample_raycluster() -> tuple[Obj, list[Obj]]:
    spec = {
        "headGroupSpec": {"template": template("head")},
        "workerGroupSpecs": [
            {
                "groupName": "gpu",
                "replicas": 4,
                "minReplicas": 2,
                "maxReplicas": 8,
                "template": template("gpu"),
            },
            {"groupName": "cpu", "replicas": 2, "template": template("cpu")},
        ],
    }
    obj = workload("ray.io/v1", "RayCluster", spec, {"state": "ready"})
    pods = [
        pod({"ray.io/node-type": "head", "ray.io/cluster": "train"}),
        pod({"ray.io/node-type": "worker", "ray.io/group": "gpu", "ray.io/cluster": "train"}),
    ]
    return obj, pods


def sample_rayjob() -> tuple[Obj, list[Obj]]:
    cluster, pods = sample_raycluster()
    obj = workload(
        "ray.io/v1",
        "RayJob",
        {"entrypoint": "python main.py", "rayClusterSpec": cluster["spec"]},
        {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"},
    )
    return obj, pods


def sample_lws() -> tuple[Obj, list[Obj]]:
    obj = workload(
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        {
            "replicas": 2,
            "leaderWorkerTemplate": {
                "size": 4,
                "leaderTemplate": template("leader"),
                "workerTemplate": template("worker"),
            },
        },
        {"conditions": [{"type": "Available", "status": "True"}], "replicas": 2, "readyReplicas": 2},
    )
    base = {"leaderworkerset.sigs.k8s.io/name": "train", "leaderworkerset.sigs.k8s.io/group-index": "1"}
    pods = [
        pod({**base, "leaderworkerset.sigs.k8s.io/worker-index": "0"}),
        pod(
            {**base, "leaderworkerset.sigs.k8s.io/worker-index": "2"},
            {"leaderworkerset.sigs.k8s.io/leader-name": "train-1"},
        ),
    ]
    return obj, pods


def sample_knative() -> tuple[Obj, list[Obj]]:
    t = template("server")
    t["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] = "2"
    obj = workload(
        "serving.knative.dev/v1",
        "Service",
        {"template": t},
        {"conditions": [{"type": "Ready", "status": "True"}]},
    )
    return obj, [pod({"serving.knative.dev/revision": "train-00001", "serving.knative.dev/service": "train"})]


def sample_dynamo() -> tuple[Obj, list[Obj]]:
    def svc(replicas: int, nodes: int = 1) -> Obj:
        return {
            "replicas": replicas,
            "multinode": {"nodeCount": nodes},
            "labels": {"tier": "llm"},
            "resources": {"limits": {"gpu": "8"}},
            "extraPodSpec": {"mainContainer": container("main")},
        }

    obj = workload(
        "nvidia.com/v1alpha1",
        "DynamoGraphDeployment",
        {"services": {"frontend": svc(1), "prefill": svc(2, 2), "decode": svc(4)}},
        {"state": "successful"},
    )
    return obj, [pod({"nvidia.com/dynamo-component": n}) for n in ("prefill", "decode")]


def sample_job() -> tuple[Obj, list[Obj]]:
    obj = workload(
        "batch/v1",
        "Job",
        {"parallelism": 4, "completions": 4, "template": template("job")},
        {"ready": 4, "active": 4},
    )
    return obj, [pod({"batch.kubernetes.io/job-name": "train", "job-name": "train"})]


def sample_deployment() -> tuple[Obj, list[Obj]]:
    obj = workload(
        "apps/v1",
        "Deployment",
        {"replicas": 3, "template": template("web")},
        {"availableReplicas": 3, "conditions": [{"type": "Available", "status": "True"}]},
    )
    return obj, [pod({"app": "web", "pod-template-hash": "abc"})]


def sample_rayservice() -> tuple[Obj, list[Obj]]:
    cluster, pods = sample_raycluster()
    obj = workload(
        "ray.io/v1",
        "RayService",
        {"rayClusterConfig": cluster["spec"], "serveConfigV2": "applications: []"},
        {"conditions": [{"type": "Ready", "status": "True"}]},
    )
    return obj, pods


def sample_statefulset() -> tuple[Obj, list[Obj]]:
    obj = workload(
        "apps/v1",
        "StatefulSet",
        {"replicas": 3, "serviceName": "db", "template": template("db")},
        {"readyReplicas": 3, "replicas": 3, "availableReplicas": 3},
    )
    return obj, [
        pod({"app": "db", "apps.kubernetes.io/pod-index": "1", "statefulset.kubernetes.io/pod-name": "db-1"})
    ]


def sample_nimservice() -> tuple[Obj, list[Obj]]:
    t = template("nim")
    obj = workload(
        "apps.nvidia.com/v1alpha1",
        "NIMService",
        {
            "replicas": 2,
            "labels": t["metadata"]["labels"],
            "annotations": t["metadata"]["annotations"],
            "resources": t["spec"]["containers"][0]["resources"],
            "affinity": t["spec"]["affinity"],
            "schedulerName": "kai-scheduler",
            "image": {"repository": "nvcr.io/nim/llama", "tag": "1.0.0"},
        },
        {"state": "Ready"},
    )
    return obj, [pod({"app.kubernetes.io/name": "train", "app": "nim"})]


def sample_dynamo_v1beta1() -> tuple[Obj, list[Obj]]:
    comps = [
        {"name": n, "replicas": r, "multinode": {"nodeCount": m}, "podTemplate": template(n)}
        for n, r, m in (("frontend", 1, 1), ("prefill", 2, 2), ("decode", 4, 1))
    ]
    obj = workload(
        "nvidia.com/v1beta1", "DynamoGraphDeployment", {"components": comps}, {"state": "successful"}
    )
    return obj, [pod({"nvidia.com/dynamo-component": n}) for n in ("prefill", "decode")]


def sample_inferenceservice() -> tuple[Obj, list[Obj]]:
    t = template("kserve-container")
    predictor = {
        "minReplicas": 2,
        "maxReplicas": 4,
        "labels": {"team": "a"},
        "schedulerName": "kai-scheduler",
        "model": {
            "modelFormat": {"name": "pytorch"},
            "storageUri": "s3://models/llm",
            "resources": t["spec"]["containers"][0]["resources"],
        },
    }
    obj = workload(
        "serving.kserve.io/v1beta1",
        "InferenceService",
        {"predictor": predictor},
        {
            "conditions": [
                {"type": t, "status": "True"}
                for t in ("PredictorReady", "RoutesReady", "LatestDeploymentReady")
            ]
        },
    )
    return obj, [pod({"component": "predictor", "serving.kserve.io/inferenceservice": "train"})]


def sample_from_fixture(name: str, kind: str) -> Callable[[], tuple[Obj, list[Obj]]]:
    """A realistic running workload and its pods from the catalog tests' fixtures."""

    def load() -> tuple[Obj, list[Obj]]:
        path = Path(__file__).resolve().parents[1] / "tests" / "catalog" / "fixtures" / name / "running.yaml"
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        return next(d for d in docs if d["kind"] == kind), [d for d in docs if d["kind"] == "Pod"]

    return load


SAMPLES: dict[GVK, Callable[[], tuple[Obj, list[Obj]]]] = {
    GVK("milvus.io", "v1beta1", "Milvus"): sample_from_fixture("milvus", "Milvus"),
    GVK("grove.io", "v1alpha1", "PodCliqueSet"): sample_from_fixture("podcliqueset", "PodCliqueSet"),
    GVK("kubeflow.org", "v1", "TFJob"): sample_kubeflow(
        "TFJob",
        "kubeflow.org/v1",
        "tfReplicaSpecs",
        ("Chief", "Worker"),
        "training.kubeflow.org/replica-type",
    ),
    GVK("ray.io", "v1", "RayService"): sample_rayservice,
    GVK("apps", "v1", "StatefulSet"): sample_statefulset,
    GVK("apps.nvidia.com", "v1alpha1", "NIMService"): sample_nimservice,
    GVK("nvidia.com", "v1beta1", "DynamoGraphDeployment"): sample_dynamo_v1beta1,
    GVK("serving.kserve.io", "v1beta1", "InferenceService"): sample_inferenceservice,
    GVK("jobset.x-k8s.io", "v1alpha2", "JobSet"): sample_jobset,
    GVK("kubeflow.org", "v1", "PyTorchJob"): sample_kubeflow(
        "PyTorchJob",
        "kubeflow.org/v1",
        "pytorchReplicaSpecs",
        ("Master", "Worker"),
        "training.kubeflow.org/replica-type",
    ),
    GVK("kubeflow.org", "v2beta1", "MPIJob"): sample_kubeflow(
        "MPIJob",
        "kubeflow.org/v2beta1",
        "mpiReplicaSpecs",
        ("Launcher", "Worker"),
        "training.kubeflow.org/job-role",
    ),
    GVK("ray.io", "v1", "RayCluster"): sample_raycluster,
    GVK("ray.io", "v1", "RayJob"): sample_rayjob,
    GVK("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"): sample_lws,
    GVK("serving.knative.dev", "v1", "Service"): sample_knative,
    GVK("nvidia.com", "v1alpha1", "DynamoGraphDeployment"): sample_dynamo,
    GVK("batch", "v1", "Job"): sample_job,
    GVK("apps", "v1", "Deployment"): sample_deployment,
}

# ---------------------------------------------------------------- measurement


def decision(ev: Evaluator, obj: Obj, p: Obj) -> None:
    ev.status(obj)
    comp, inst = ev.component_of_pod(obj, p)
    ev.subtree_scale(obj, comp, inst)


def base_for(obj: Obj) -> PodGroupMetadata:
    return PodGroupMetadata(name="pg-train-uid", namespace="team-a", owner=OwnerRef.of(obj), queue="team-a")


def gang_decision(ev: Evaluator, obj: Obj, p: Obj) -> None:
    apply_gang(ev.definition, ev, obj, p, base_for(obj))


@dataclass
class Cell:
    per_second: float
    mean_us: float
    n: int


def measure(step: Callable[[], None], seconds: float) -> Cell:
    step()  # warm-up (and surface errors before timing)
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        step()
        n += 1
        if n % 16 == 0 and time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - start
    return Cell(n / elapsed, elapsed / n * 1e6, n)


def pod_stream(pods: list[Obj]) -> Iterator[Obj]:
    for i in itertools.count():
        p = copy.copy(pods[i % len(pods)])
        p["metadata"] = {**p["metadata"], "uid": f"pod-{i}", "name": f"train-pod-{i}"}
        yield p


def object_stream(obj: Obj) -> Iterator[Obj]:
    for i in itertools.count(2):
        o = copy.copy(obj)
        o["metadata"] = {**obj["metadata"], "resourceVersion": str(i)}
        yield o


def scenario(
    defn: KartaDefinition,
    obj: Obj,
    pods: list[Obj],
    *,
    cold: bool,
    fn: Callable[[Evaluator, Obj, Obj], None],
    seconds: float,
    runner: Any = None,
) -> Cell:
    ev = (
        Evaluator(defn, runner=runner, cache_size=256)
        if runner is not None
        else Evaluator(defn, cache_size=256)
    )
    ps = pod_stream(pods)
    objs = object_stream(obj)

    def step() -> None:
        fn(ev, next(objs) if cold else obj, next(ps))

    return measure(step, seconds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=0.4, help="time per cell")
    ap.add_argument("--only", default="", help="substring filter on definition name")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "karta.json"))
    ap.add_argument("--hostile-memory", action="store_true",
                    help="instead: peak RSS of this process while a registry upserts the worst Kartas we know")
    args = ap.parse_args()
    if args.hostile_memory:
        hostile_memory()
        return

    defs, errors = load_dir(REPO / "definitions")
    test_defs, _ = load_dir(REPO / "tests" / "karta" / "data", origin_prefix="test")
    for e in errors:
        print(f"load error: {e}", file=sys.stderr)
    sandbox = SandboxedRunner(workers=1)
    pool = SandboxPool(max_workers=2)
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    header = (
        f"{'definition':44} {'origin':8} {'obj KB':>6} {'warm/s':>8} {'warm nc/s':>9} {'cold/s':>8} "
        f"{'cold nc/s':>9} {'gang/s':>8} {'sandbox/s':>9} {'lane w/s':>8} {'lane c/s':>8} {'cold us':>8}"
    )
    print(header)
    print("-" * len(header))
    for defn in [*defs, *test_defs]:
        if args.only and args.only not in defn.name:
            continue
        make = SAMPLES.get(defn.gvk)
        if make is None or defn.gang is None:
            skipped.append(f"{defn.name} ({defn.origin}): no sample workload")
            continue
        obj, all_pods = make()
        # Only pods the definition models (a fixture may hold others, e.g. Helm-installed dependencies).
        probe, pods = Evaluator(defn), []
        error: KartaEvalError | None = None
        for p in all_pods:
            try:
                decision(probe, obj, p)
                pods.append(p)
            except KartaEvalError as e:
                error = e
        if not pods:
            skipped.append(f"{defn.name} ({defn.origin}): {error}")
            continue
        cells: dict[str, Cell] = {}
        PROGRAMS.enabled = True
        cells["warm"] = scenario(defn, obj, pods, cold=False, fn=decision, seconds=args.seconds)
        cells["cold"] = scenario(defn, obj, pods, cold=True, fn=decision, seconds=args.seconds)
        cells["gang_warm"] = scenario(defn, obj, pods, cold=False, fn=gang_decision, seconds=args.seconds)
        cells["sandbox_cold"] = scenario(
            defn, obj, pods, cold=True, fn=decision, seconds=args.seconds, runner=sandbox
        )
        lane = pool.lane(defn.name)  # how the registry runs every definition now
        cells["lane_warm"] = scenario(defn, obj, pods, cold=False, fn=decision, seconds=args.seconds, runner=lane)
        cells["lane_cold"] = scenario(defn, obj, pods, cold=True, fn=decision, seconds=args.seconds, runner=lane)
        PROGRAMS.enabled = False
        PROGRAMS.clear()
        cells["warm_nocache"] = scenario(defn, obj, pods, cold=False, fn=decision, seconds=args.seconds)
        cells["cold_nocache"] = scenario(defn, obj, pods, cold=True, fn=decision, seconds=args.seconds)
        PROGRAMS.enabled = True
        OBJECT_TEXTS.clear()
        size_kb = len(serialize(obj)) / 1024
        origin = defn.origin.split(":")[0]
        print(
            f"{defn.name[:44]:44} {origin:8} {size_kb:6.1f} {cells['warm'].per_second:8.0f} "
            f"{cells['warm_nocache'].per_second:9.0f} {cells['cold'].per_second:8.0f} "
            f"{cells['cold_nocache'].per_second:9.0f} {cells['gang_warm'].per_second:8.0f} "
            f"{cells['sandbox_cold'].per_second:9.0f} {cells['lane_warm'].per_second:8.0f} "
            f"{cells['lane_cold'].per_second:8.0f} {cells['cold'].mean_us:8.0f}"
        )
        rows.append(
            {
                "definition": defn.name,
                "origin": defn.origin,
                "gvk": str(defn.gvk),
                "object_bytes": len(serialize(obj)),
                "pod_bytes": len(serialize(pods[0])),
                **{
                    name: {
                        "decisions_per_second": round(c.per_second, 1),
                        "mean_us": round(c.mean_us, 1),
                        "iterations": c.n,
                    }
                    for name, c in cells.items()
                },
            }
        )
    sandbox.close()
    pool.close()
    for s in skipped:
        print(f"skipped: {s}")
    print(
        "\nwarm = one workload version, distinct pods; cold = new workload version and pod every decision;"
        "\nnc = compiled-program cache off; gang = full apply_gang (warm); sandbox = cold via worker process;"
        "\nlane w/c = warm/cold through the definition's own SandboxPool lane (what the registry uses)."
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "benchmark": "karta decisions (status + component_of_pod + subtree_scale)",
                "python": platform.python_version(),
                "machine": platform.machine(),
                "jq_binding": getattr(jq, "__version__", "unknown"),
                "seconds_per_cell": args.seconds,
                "results": rows,
                "skipped": skipped,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out}")


# ---------------------------------------------------------------- hostile memory


def _rss_kb() -> tuple[int, int]:
    """(current RSS, peak RSS) of this process in KiB, from /proc."""
    fields = dict(
        line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line
    )
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def _hostile_karta(name: str, rv: int, exprs: list[str], children: int = 0) -> Obj:
    kids = [
        {"name": f"c{i}", "ownerRef": "root", "kind": {"group": "", "version": "v1", "kind": "Pod"},
         "scaleDefinition": {"replicasPath": exprs[i % len(exprs)]}}
        for i in range(children)
    ]
    return {
        "apiVersion": "run.ai/v1alpha1", "kind": "Karta",
        "metadata": {"name": name, "resourceVersion": str(rv)},
        "spec": {
            "structureDefinition": {
                "rootComponent": {
                    "name": "root", "kind": {"group": "evil.example.com", "version": "v1", "kind": "Evil"},
                    "statusDefinition": {"statusMappings": {"running": [
                        {"byExpression": {"expression": exprs[0], "expectedResult": "true"}}]}},
                },
                "childComponents": kids,
            },
            "optimizationInstructions": {"gangScheduling": {"podGroup": {"name": "g"}}},
        },
    }


def hostile_memory() -> None:
    """Peak RSS of a process holding a DefinitionRegistry (the controller's) while it upserts
    the worst single Kartas we could write, each in 20 revisions."""
    from grouper.karta import DefinitionRegistry

    registry = DefinitionRegistry(REPO / "definitions")
    base, _ = _rss_kb()
    long_expr = "[" + ",".join(f".spec.f{i}" for i in range(900)) + "] | length"  # ~9.5 KB
    cases = {
        "constant-folding bomb": [f'("x" * {10**9 + i}) | length' for i in range(4)],
        "exponential defs": ["def f(x): x,x; " + "f(" * 60 + "." + ")" * 60],
        "deep nesting": ["[" * 3000 + "]" * 3000],
        "200 x 1 KB distinct expressions": [f"[.spec.a{j}" + " , .spec.b" * 90 + "] | length" for j in range(200)],
        "20 x 10 KB expressions": [long_expr.replace("f1", f"f{j}x", 1) for j in range(20)],
    }
    print(f"{'karta':36} {'revisions':>9} {'seconds':>8} {'RSS MiB':>8} {'peak MiB':>9} valid")
    print(f"{'(registry with the catalog)':36} {'':>9} {'':>8} {base / 1024:8.1f}")
    for label, exprs in cases.items():
        children = len(exprs) if len(exprs) > 4 else 0
        start = time.monotonic()
        loaded = None
        for rv in range(20):
            variant = [e.replace("length", f"length + {rv}") for e in exprs]
            loaded = registry.upsert_cluster_object(_hostile_karta("evil", rv, variant, children))
        elapsed = time.monotonic() - start
        rss, peak = _rss_kb()
        ok = "load error" if loaded is None else ("yes" if loaded.report.ok else "no")
        print(f"{label:36} {20:9d} {elapsed:8.1f} {rss / 1024:8.1f} {peak / 1024:9.1f} {ok}")
    registry.remove_cluster_object("evil")
    rss, peak = _rss_kb()
    print(f"{'(after delete)':36} {'':>9} {'':>8} {rss / 1024:8.1f} {peak / 1024:9.1f}")


if __name__ == "__main__":
    main()
