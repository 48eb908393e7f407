"""Capture the objects ``bench_memory.py`` clones: real pods as the API server returns them.

Starts the local control plane with kube-scheduler and one kwok node (so the pods are bound and
Running, with the status conditions and container statuses a live pod has), then creates

- a JobSet ``train`` (CRD from tests/crds) with one replicatedJob ``worker`` and its Job
  ``train-worker-0`` (parallelism 8, Indexed), created as the JobSet operator would (labels,
  annotations, controlling owner reference); the real Job controller creates the pods;
- a Deployment ``web`` (2 replicas); the real ReplicaSet controller creates the ReplicaSet and pods,

waits until the pods run, and writes every object as the API server returned it (managedFields
included) to ``benchmarks/data/captured.json``. The pods ask for ``default-scheduler`` only so that
they get bound here; the benchmark renames the scheduler to ``kai-scheduler`` in its clones.

    .venv/bin/python benchmarks/capture_pods.py       # ~30 s
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from devtools.cluster import LocalCluster  # noqa: E402

OUT = REPO / "benchmarks" / "data" / "captured.json"
NS = "default"
CONTAINER = {
    "name": "trainer",
    "image": "nvcr.io/nvidia/pytorch:25.06-py3",
    "command": [
        "torchrun",
        "--nnodes=8",
        "--nproc-per-node=1",
        "--rdzv-endpoint=train-worker-0-0.train:29500",
        "train.py",
    ],
    "env": [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "OMP_NUM_THREADS", "value": "8"}],
    "ports": [{"containerPort": 29500, "name": "rdzv"}],
    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
    "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "shm", "mountPath": "/dev/shm"}],
}
VOLUMES = [
    {"name": "data", "emptyDir": {}},
    {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
]


def jobset_labels(job_index: int) -> dict[str, str]:
    return {
        "jobset.sigs.k8s.io/jobset-name": "train",
        "jobset.sigs.k8s.io/replicatedjob-name": "worker",
        "jobset.sigs.k8s.io/replicatedjob-replicas": "1",
        "jobset.sigs.k8s.io/job-index": str(job_index),
        "jobset.sigs.k8s.io/job-global-index": str(job_index),
        "jobset.sigs.k8s.io/job-key": "3f1d2c9e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e",
        "jobset.sigs.k8s.io/restart-attempt": "0",
        "kai.scheduler/queue": "team-a",
    }


def request(c: LocalCluster, method: str, path: str, body: Any = None) -> dict[str, Any]:
    status, out = c.request(method, path, body)
    if status not in (200, 201):
        raise SystemExit(f"{method} {path}: HTTP {status}: {out}")
    return dict(out)


def main() -> int:
    crd = REPO / "tests" / "crds" / "jobset.x-k8s.io_jobsets.yaml"
    with LocalCluster(scheduler=True, kwok_nodes=1, node_gpus=8, crds=[crd]) as c:
        pod_spec = {"containers": [CONTAINER], "volumes": VOLUMES, "restartPolicy": "Never"}
        jobset = request(
            c,
            "POST",
            f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets",
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {"name": "train", "labels": {"kai.scheduler/queue": "team-a"}},
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "worker",
                            "replicas": 1,
                            "template": {
                                "spec": {
                                    "parallelism": 8,
                                    "completions": 8,
                                    "completionMode": "Indexed",
                                    "backoffLimit": 0,
                                    "template": {"spec": pod_spec},
                                }
                            },
                        }
                    ]
                },
            },
        )
        labels = jobset_labels(0)
        job = request(
            c,
            "POST",
            f"/apis/batch/v1/namespaces/{NS}/jobs",
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": "train-worker-0",
                    "labels": labels,
                    "annotations": dict(labels),
                    "ownerReferences": [
                        {
                            "apiVersion": "jobset.x-k8s.io/v1alpha2",
                            "kind": "JobSet",
                            "name": "train",
                            "uid": jobset["metadata"]["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {
                    "parallelism": 8,
                    "completions": 8,
                    "completionMode": "Indexed",
                    "backoffLimit": 0,
                    "template": {
                        "metadata": {"labels": labels, "annotations": dict(labels)},
                        "spec": {**copy.deepcopy(pod_spec), "subdomain": "train"},
                    },
                },
            },
        )
        request(
            c,
            "POST",
            f"/apis/apps/v1/namespaces/{NS}/deployments",
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "web", "labels": {"app": "web", "kai.scheduler/queue": "team-a"}},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web", "kai.scheduler/queue": "team-a"}},
                        "spec": {
                            "containers": [{**CONTAINER, "name": "web", "command": ["serve"]}],
                            "volumes": VOLUMES,
                        },
                    },
                },
            },
        )
        deadline = time.monotonic() + 120
        while True:
            pods = request(c, "GET", f"/api/v1/namespaces/{NS}/pods")["items"]
            running = [
                p
                for p in pods
                if p.get("status", {}).get("phase") == "Running"
                and all(s.get("ready") for s in p["status"].get("containerStatuses") or [{}])
            ]
            if len(running) >= 10 and len(pods) == len(running):
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"pods not running after 120 s: {[p['status'].get('phase') for p in pods]}")
            time.sleep(1)
        job_pod = next(
            p for p in running if p["metadata"].get("labels", {}).get("job-name") == "train-worker-0"
        )
        dep_pod = next(p for p in running if p["metadata"].get("labels", {}).get("app") == "web")
        rs_name = dep_pod["metadata"]["ownerReferences"][0]["name"]
        out = {
            "captured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "how": "benchmarks/capture_pods.py against the local control plane (kube-apiserver, "
            "kube-controller-manager, kube-scheduler, one kwok node)",
            "jobset": request(c, "GET", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets/train"),
            "job": request(c, "GET", f"/apis/batch/v1/namespaces/{NS}/jobs/{job['metadata']['name']}"),
            "job_pod": {**job_pod, "apiVersion": "v1", "kind": "Pod"},
            "deployment": request(c, "GET", f"/apis/apps/v1/namespaces/{NS}/deployments/web"),
            "replicaset": request(c, "GET", f"/apis/apps/v1/namespaces/{NS}/replicasets/{rs_name}"),
            "deployment_pod": {**dep_pod, "apiVersion": "v1", "kind": "Pod"},
        }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    sizes = {k: len(json.dumps(v)) for k, v in out.items() if isinstance(v, dict)}
    print(f"wrote {OUT.relative_to(REPO)}: " + ", ".join(f"{k} {v:,} B" for k, v in sizes.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
