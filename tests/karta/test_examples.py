"""The worked examples of karta.md §3.7 on catalog-shaped definitions (tests/karta/data)."""

from __future__ import annotations

from typing import Any

import pytest

from grouper.karta import Evaluator, KartaDefinition, KartaEvalError, apply_gang, validate
from tests.karta.fixtures import base_metadata, defn, karta

UID = "uid-1"


def top(kind: str, api_version: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "w", "namespace": "ns", "uid": UID, **meta},
        "spec": spec,
    }


def pod(labels: dict[str, str], annotations: dict[str, str] | None = None, name: str = "p") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


def test_catalog_definitions_are_valid(catalog: dict[str, KartaDefinition]) -> None:
    for d in catalog.values():
        report = validate(d)
        assert report.ok, report.summary()
        assert report.warnings == []


# ---------------------------------------------------------------- JobSet


def jobset(parallelism: int | None = 1, worker_parallelism: int | None = None) -> dict[str, Any]:
    def rj(name: str, replicas: int, par: int | None) -> dict[str, Any]:
        spec: dict[str, Any] = {"template": {"spec": {"containers": [{"name": name}]}}}
        if par is not None:
            spec["parallelism"] = par
        return {"name": name, "replicas": replicas, "template": {"spec": spec}}

    worker = rj("worker", 2, parallelism if worker_parallelism is None else worker_parallelism)
    return top(
        "JobSet", "jobset.x-k8s.io/v1alpha2", {"replicatedJobs": [rj("leader", 1, parallelism), worker]}
    )


def jobset_pod(rj: str) -> dict[str, Any]:
    return pod({"jobset.sigs.k8s.io/replicatedjob-name": rj})


def test_jobset_instances_scales_and_tree(catalog: dict[str, KartaDefinition]) -> None:
    ev = Evaluator(catalog["jobset"])
    obj = jobset()
    assert ev.instance_ids(obj, "replicatedjob") == ["leader", "worker"]
    assert {k: v.effective for k, v in ev.scale(obj, "replicatedjob").items()} == {"leader": 1, "worker": 2}
    assert ev.subtree_scale(obj, "jobset") == 3
    assert set(ev.pod_templates(obj, "replicatedjob")) == {"leader", "worker"}


def test_jobset_single_leaf_shortcut_and_instance(catalog: dict[str, KartaDefinition]) -> None:
    ev = Evaluator(catalog["jobset"])
    assert ev.component_of_pod(jobset(), jobset_pod("worker")) == ("replicatedjob", "worker")


@pytest.mark.parametrize(
    ("rj", "name", "size"), [("leader", "pg-uid-1-leader", 1), ("worker", "pg-uid-1-worker", 2)]
)
def test_jobset_alpha_one_podgroup_per_replicated_job(
    catalog: dict[str, KartaDefinition], rj: str, name: str, size: int
) -> None:
    d = catalog["jobset"]
    obj = jobset()
    pg = apply_gang(d, Evaluator(d), obj, jobset_pod(rj), base_metadata(obj))
    assert pg is not None
    assert (pg.name, pg.min_member, pg.min_sub_group, pg.sub_groups) == (name, size, None, [])


def test_jobset_parallelism_four(catalog: dict[str, KartaDefinition]) -> None:
    d = catalog["jobset"]
    obj = jobset(worker_parallelism=4)
    ev = Evaluator(d)
    assert ev.subtree_scale(obj, "replicatedjob", "worker") == 8
    assert ev.subtree_scale(obj, "jobset") == 9
    pg = apply_gang(d, ev, obj, jobset_pod("worker"), base_metadata(obj))
    assert pg is not None and pg.min_member == 8


def test_jobset_missing_parallelism_fails_the_scale_extraction(catalog: dict[str, KartaDefinition]) -> None:
    ev = Evaluator(catalog["jobset"])
    with pytest.raises(KartaEvalError, match="JQ execution error") as e:
        ev.subtree_scale(jobset(parallelism=None), "jobset")
    assert e.value.expression == ".spec.replicatedJobs[] | .replicas * .template.spec.parallelism"
    assert "replicatedjob" in str(e.value)


# ---------------------------------------------------------------- PyTorchJob


def pytorch(master: int = 1, worker: int = 3, elastic_min: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "pytorchReplicaSpecs": {
            "Master": {"replicas": master, "template": {"spec": {}}},
            "Worker": {"replicas": worker, "template": {"spec": {}}},
        }
    }
    if elastic_min is not None:
        spec["elasticPolicy"] = {"minReplicas": elastic_min}
    return top("PyTorchJob", "kubeflow.org/v1", spec)


def pytorch_pod(role: str) -> dict[str, Any]:
    return pod({"training.kubeflow.org/replica-type": role, "training.kubeflow.org/job-name": "w"})


def test_pytorch_components_by_selector(catalog: dict[str, KartaDefinition]) -> None:
    ev = Evaluator(catalog["pytorchjob"])
    obj = pytorch()
    assert ev.component_of_pod(obj, pytorch_pod("master")) == ("master", None)
    assert ev.component_of_pod(obj, pytorch_pod("worker")) == ("worker", None)
    assert ev.subtree_scale(obj, "pytorchjob") == 4


@pytest.mark.parametrize("role", ["master", "worker"])
def test_pytorch_alpha_min_member_once_per_group_key(catalog: dict[str, KartaDefinition], role: str) -> None:
    """Deviation (§7.6): upstream gives master 1 / worker 3 in the same PodGroup; we give 4 to both."""
    d = catalog["pytorchjob"]
    obj = pytorch()
    pg = apply_gang(d, Evaluator(d), obj, pytorch_pod(role), base_metadata(obj))
    assert pg is not None
    assert (pg.name, pg.min_member) == ("pg-uid-1-w", 4)
    assert "master, worker" in pg.provenance["minMember"]


def test_pytorch_v2_variants(catalog: dict[str, KartaDefinition]) -> None:
    raw = dict(catalog["pytorchjob"].raw)
    obj = pytorch()
    no_sub = defn(
        {
            **raw,
            "spec": {
                **raw["spec"],
                "optimizationInstructions": {"gangScheduling": {"podGroup": {"name": "job"}}},
            },
        }
    )
    pg = apply_gang(no_sub, Evaluator(no_sub), obj, pytorch_pod("worker"), base_metadata(obj))
    assert pg is not None and (pg.min_member, pg.min_sub_group) == (4, None)
    subs = defn(
        {
            **raw,
            "spec": {
                **raw["spec"],
                "optimizationInstructions": {
                    "gangScheduling": {
                        "podGroup": {
                            "name": "job",
                            "subGroups": [{"componentName": "master"}, {"componentName": "worker"}],
                        }
                    }
                },
            },
        }
    )
    pg = apply_gang(subs, Evaluator(subs), obj, pytorch_pod("worker"), base_metadata(obj))
    assert pg is not None
    assert [(s.name, s.min_member, s.pods) for s in pg.sub_groups] == [
        ("master", 1, []),
        ("worker", 3, ["p"]),
    ]
    assert (pg.min_sub_group, pg.min_member) == (2, None)


def test_pytorch_elastic_min_replicas_preferred(catalog: dict[str, KartaDefinition]) -> None:
    ev = Evaluator(catalog["pytorchjob"])
    assert ev.subtree_scale(pytorch(elastic_min=2), "pytorchjob") == 3


# ---------------------------------------------------------------- RayCluster


def raycluster(gpu_min: int | None = 2) -> dict[str, Any]:
    gpu: dict[str, Any] = {"groupName": "gpu", "replicas": 4, "template": {}}
    if gpu_min is not None:
        gpu["minReplicas"] = gpu_min
    return top(
        "RayCluster",
        "ray.io/v1",
        {
            "headGroupSpec": {"template": {}},
            "workerGroupSpecs": [gpu, {"groupName": "cpu", "replicas": 1, "template": {}}],
        },
    )


def ray_pod(node_type: str, group: str | None = None) -> dict[str, Any]:
    labels = {"ray.io/node-type": node_type, "ray.io/cluster": "w"}
    if group:
        labels["ray.io/group"] = group
    return pod(labels)


def test_raycluster_scales(catalog: dict[str, KartaDefinition]) -> None:
    ev = Evaluator(catalog["raycluster"])
    obj = raycluster()
    assert ev.instance_ids(obj, "worker") == ["gpu", "cpu"]
    scales = ev.scale(obj, "worker")
    assert (scales["gpu"].replicas, scales["gpu"].min_replicas) == (4, 2)
    assert (scales["cpu"].replicas, scales["cpu"].min_replicas) == (1, None)
    assert ev.subtree_scale(obj, "head") == 1
    assert ev.subtree_scale(obj, "worker", "gpu") == 2
    assert ev.subtree_scale(obj, "worker", "cpu") == 1
    assert ev.subtree_scale(obj, "raycluster") == 4
    assert ev.component_of_pod(obj, ray_pod("worker", "gpu")) == ("worker", "gpu")
    assert ev.component_of_pod(obj, ray_pod("head")) == ("head", None)


def test_raycluster_min_replicas_zero_falls_back_to_replicas(catalog: dict[str, KartaDefinition]) -> None:
    ev = Evaluator(catalog["raycluster"])
    assert ev.subtree_scale(raycluster(gpu_min=0), "raycluster") == 1 + 4 + 1


@pytest.mark.parametrize("p", [ray_pod("head"), ray_pod("worker", "gpu"), ray_pod("worker", "cpu")])
def test_raycluster_alpha_every_pod_agrees(catalog: dict[str, KartaDefinition], p: dict[str, Any]) -> None:
    """Upstream: head 1, gpu 2, cpu 1 for one PodGroup; ours: the whole cluster, 4, for all."""
    d = catalog["raycluster"]
    obj = raycluster()
    pg = apply_gang(d, Evaluator(d), obj, p, base_metadata(obj))
    assert pg is not None and (pg.name, pg.min_member) == ("pg-uid-1-w", 4)


# ---------------------------------------------------------------- LeaderWorkerSet


def lws(replicas: int = 2, size: int = 4) -> dict[str, Any]:
    return top(
        "LeaderWorkerSet",
        "leaderworkerset.x-k8s.io/v1",
        {
            "replicas": replicas,
            "leaderWorkerTemplate": {"size": size, "leaderTemplate": {}, "workerTemplate": {}},
        },
    )


def test_lws_scale_multiplication_kept_from_upstream(catalog: dict[str, KartaDefinition]) -> None:
    d = catalog["lws"]
    ev = Evaluator(d)
    assert ev.subtree_scale(lws(), "group") == 32
    assert ev.subtree_scale(lws(), "leaderworkerset") == 32
    assert ev.subtree_scale(lws(replicas=1), "group") == 16
    leader = pod(
        {
            "leaderworkerset.sigs.k8s.io/worker-index": "0",
            "leaderworkerset.sigs.k8s.io/name": "w",
            "leaderworkerset.sigs.k8s.io/group-index": "1",
        }
    )
    worker = pod(
        {
            "leaderworkerset.sigs.k8s.io/worker-index": "2",
            "leaderworkerset.sigs.k8s.io/name": "w",
            "leaderworkerset.sigs.k8s.io/group-index": "1",
        },
        {"leaderworkerset.sigs.k8s.io/leader-name": "w-1"},
    )
    assert ev.component_of_pod(lws(), leader) == ("leader", None)
    assert ev.component_of_pod(lws(), worker) == ("worker", None)
    assert ev.replica_key(worker, "group") == "1"
    for p in (leader, worker):
        pg = apply_gang(d, ev, lws(), p, base_metadata(lws()))
        assert pg is not None and (pg.name, pg.min_member) == ("pg-uid-1-w-1", 32)


# ---------------------------------------------------------------- Dynamo


def dynamo(names: tuple[str, str, str] = ("Frontend", "PrefillWorker", "DecodeWorker")) -> dict[str, Any]:
    fe, pf, dec = names
    # document order deliberately not sorted
    services = {fe: {"replicas": 1}, pf: {"replicas": 2, "multinode": {"nodeCount": 2}}, dec: {"replicas": 1}}
    return top("DynamoGraphDeployment", "nvidia.com/v1alpha1", {"services": services})


def test_dynamo_sorted_instance_order(catalog: dict[str, KartaDefinition]) -> None:
    ev = Evaluator(catalog["dynamo"])
    obj = dynamo()
    assert ev.instance_ids(obj, "service") == ["DecodeWorker", "Frontend", "PrefillWorker"]
    assert {k: v.replicas for k, v in ev.scale(obj, "service").items()} == {
        "DecodeWorker": 1,
        "Frontend": 1,
        "PrefillWorker": 4,
    }
    assert list(ev.evaluate(obj, ".spec.services[] | .replicas")) == [1, 1, 2]
    p = pod({"nvidia.com/dynamo-component": "PrefillWorker"})
    assert ev.component_of_pod(obj, p) == ("service", "PrefillWorker")
    assert ev.subtree_scale(obj, "service", "PrefillWorker") == 4


def test_dynamo_uppercase_service_gives_invalid_podgroup_name(catalog: dict[str, KartaDefinition]) -> None:
    d = catalog["dynamo"]
    obj = dynamo()
    with pytest.raises(
        KartaEvalError,
        match=r"Karta grouping keys \[PrefillWorker\] produce invalid Kubernetes PodGroup name",
    ):
        apply_gang(
            d, Evaluator(d), obj, pod({"nvidia.com/dynamo-component": "PrefillWorker"}), base_metadata(obj)
        )


def test_dynamo_alpha_one_group_per_service(catalog: dict[str, KartaDefinition]) -> None:
    d = catalog["dynamo"]
    obj = dynamo(("frontend", "prefill", "decode"))
    pg = apply_gang(d, Evaluator(d), obj, pod({"nvidia.com/dynamo-component": "prefill"}), base_metadata(obj))
    assert pg is not None and (pg.name, pg.min_member) == ("pg-uid-1-prefill", 4)


def test_dynamo_fragmented_templates(catalog: dict[str, KartaDefinition]) -> None:
    ev = Evaluator(catalog["dynamo"])
    obj = dynamo()
    obj["spec"]["services"]["Frontend"]["labels"] = {"a": "b"}
    obj["spec"]["services"]["Frontend"]["extraPodSpec"] = {"mainContainer": {"name": "main", "image": "img"}}
    t = ev.pod_templates(obj, "service")
    assert t["Frontend"] == {
        "metadata": {"labels": {"a": "b"}},
        "spec": {"containers": [{"image": "img", "name": "main"}]},
    }
    assert t["DecodeWorker"] == {"metadata": {}, "spec": {}}


# ---------------------------------------------------------------- Knative, Mode B


def test_knative_min_scale_annotation_string(catalog: dict[str, KartaDefinition]) -> None:
    ev = Evaluator(catalog["knative"])
    svc = top(
        "Service",
        "serving.knative.dev/v1",
        {"template": {"metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "3"}}}},
    )
    assert ev.scale(svc, "revision")[""].min_replicas == 3
    assert ev.subtree_scale(svc, "knativeservice") == 3
    plain = top("Service", "serving.knative.dev/v1", {"template": {}}, resourceVersion="2")
    assert ev.subtree_scale(plain, "knativeservice") == 1


def test_mode_b_counts_leaves() -> None:
    d = defn(
        karta(
            "modeb",
            {
                "name": "job",
                "kind": {"group": "x.io", "version": "v1", "kind": "Job"},
                "statusDefinition": {"statusMappings": {}},
            },
            [
                {"name": "master", "ownerRef": "job", "specDefinition": {"podSpecPath": ".spec.m"}},
                {"name": "worker", "ownerRef": "job", "specDefinition": {"podSpecPath": ".spec.w"}},
            ],
        )
    )
    ev = Evaluator(d)
    obj = top("Job", "x.io/v1", {"m": {}, "w": {}})
    assert (
        ev.subtree_scale(obj, "job"),
        ev.subtree_scale(obj, "master"),
        ev.subtree_scale(obj, "worker"),
    ) == (2, 1, 1)


def test_repository_catalog_loads_and_validates() -> None:
    """Cross-check of the built-in catalog (definitions/, written separately) with this engine."""
    from pathlib import Path

    from grouper.karta import load_dir

    catalog_dir = Path(__file__).resolve().parents[2] / "definitions"
    if not catalog_dir.is_dir():
        pytest.skip("no definitions/ directory")
    defs, errors = load_dir(catalog_dir)
    assert errors == []
    bad = {d.name: validate(d).summary() for d in defs if not validate(d).ok}
    assert bad == {}
