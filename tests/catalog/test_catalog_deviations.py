"""Where the upstream catalog entry gives a wrong answer, ours gives the right one (karta.md §3.7, §7).

Each test rebuilds the upstream form of the relevant part of our definition, shows what it does with
the same realistic object, then shows ours.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from grouper.karta import Evaluator, KartaDefinition, KartaEvalError, apply_gang, from_object
from grouper.model.objects import GVK, name

from .workloads import base_metadata, catalog, evaluator, fixture, variant


def upstream_variant(gvk: GVK, edit: Callable[[dict[str, Any]], None]) -> KartaDefinition:
    raw = copy.deepcopy(catalog()[gvk].raw)
    edit(raw)
    return from_object(raw, "test:upstream")


def child(raw: dict[str, Any], component: str) -> dict[str, Any]:
    return next(c for c in raw["spec"]["structureDefinition"]["childComponents"] if c["name"] == component)


LWS = GVK("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet")


def _upstream_lws(raw: dict[str, Any]) -> None:
    child(raw, "group")["scaleDefinition"] = {"replicasPath": ".spec.leaderWorkerTemplate.size"}
    child(raw, "leader")["scaleDefinition"] = {"replicasPath": ".spec.replicas // 1"}
    child(raw, "worker")["scaleDefinition"] = {
        "replicasPath": "(.spec.replicas // 1) * ((.spec.leaderWorkerTemplate.size // 1) - 1)"
    }


@pytest.mark.parametrize(("replicas", "upstream_min"), [(2, 32), (1, 16)])
def test_lws_group_minimum_is_the_group_size_not_own_times_children(replicas: int, upstream_min: int) -> None:
    """Upstream: S(group) = size x (leaders + workers over ALL groups) = 4 x (2 + 6) = 32 for a group
    of 4 pods (16 with one group). Ours: scale only on the leaves, per group -> 4."""
    fx = fixture("leaderworkerset/running.yaml")
    lws = fx.workload if replicas == 2 else variant(fx.workload, replicas=replicas)
    upstream = upstream_variant(LWS, _upstream_lws)
    ours = catalog()[LWS]
    for pod in fx.pods:
        up = apply_gang(upstream, Evaluator(upstream), lws, pod, base_metadata(lws))
        mine = apply_gang(ours, evaluator(LWS), lws, pod, base_metadata(lws))
        assert up is not None and mine is not None
        assert up.name == mine.name  # same PodGroup per group ...
        assert (up.min_member, mine.min_member) == (upstream_min, 4)  # ... with the real group size


def test_jobset_without_parallelism_still_scales() -> None:
    """The stored JobSet omits `parallelism`: upstream's `.replicas * .template.spec.parallelism`
    is `1 * null`, a jq error; ours defaults it to the Job default 1."""
    gvk = GVK("jobset.x-k8s.io", "v1alpha2", "JobSet")
    fx = fixture("jobset/pending.yaml")
    upstream = upstream_variant(
        gvk,
        lambda raw: child(raw, "replicatedjob")["scaleDefinition"].update(
            replicasPath=".spec.replicatedJobs[] | .replicas * .template.spec.parallelism"
        ),
    )
    with pytest.raises(KartaEvalError, match=r"cannot be multiplied|number"):
        Evaluator(upstream).scale(fx.workload, "replicatedjob")
    assert {k: s.replicas for k, s in evaluator(gvk).scale(fx.workload, "replicatedjob").items()} == {
        "leader": 1,
        "worker": 2,
    }


RAYCLUSTER = GVK("ray.io", "v1", "RayCluster")


def _upstream_ray(raw: dict[str, Any]) -> None:
    w = child(raw, "worker")
    w["instanceIdPath"] = ".spec.workerGroupSpecs[].groupName"
    w["specDefinition"] = {"podTemplateSpecPath": ".spec.workerGroupSpecs[].template"}
    w["scaleDefinition"] = {
        "replicasPath": ".spec.workerGroupSpecs[].replicas // 1",
        "minReplicasPath": ".spec.workerGroupSpecs[].minReplicas",
    }


def test_raycluster_without_worker_groups_is_head_only() -> None:
    fx = fixture("raycluster/pending.yaml")
    upstream = upstream_variant(RAYCLUSTER, _upstream_ray)
    with pytest.raises(KartaEvalError, match="iterate"):
        Evaluator(upstream).instance_ids(fx.workload, "worker")
    pg = apply_gang(catalog()[RAYCLUSTER], evaluator(RAYCLUSTER), fx.workload, fx.pods[0], base_metadata(fx.workload))
    assert pg is not None and pg.min_member == 1


def test_raycluster_with_partly_unset_replicas_zips_per_group() -> None:
    """`.workerGroupSpecs[].replicas // 1` yields only the values that are set: with `gpu` unset the
    one output (cpu's 1) lands on `gpu` upstream. Ours evaluates per group (unset -> minReplicas)."""
    fx = fixture("raycluster/running.yaml")
    groups = copy.deepcopy(fx.workload["spec"]["workerGroupSpecs"])
    del groups[0]["replicas"]
    rc = variant(fx.workload, workerGroupSpecs=groups)
    upstream = upstream_variant(RAYCLUSTER, _upstream_ray)
    shifted = Evaluator(upstream).scale(rc, "worker")
    assert {k: (s.replicas, s.min_replicas) for k, s in shifted.items()} == {"gpu": (1, 2), "cpu": (None, 0)}
    scales = evaluator(RAYCLUSTER).scale(rc, "worker")
    assert {k: (s.replicas, s.min_replicas) for k, s in scales.items()} == {"gpu": (2, 2), "cpu": (1, 0)}


def test_pytorchjob_one_minimum_per_pod_group() -> None:
    """Upstream's alpha form gives the master pod minAvailable 1 and a worker pod 3 for the SAME
    PodGroup (karta.md §3.7); ours (v2 podGroup) gives every pod 4."""
    gvk = GVK("kubeflow.org", "v1", "PyTorchJob")
    fx = fixture("pytorchjob/running.yaml")

    def alpha(raw: dict[str, Any]) -> None:
        key = ['.metadata.labels["training.kubeflow.org/job-name"]']
        raw["spec"]["optimizationInstructions"]["gangScheduling"] = {
            "podGroups": [{"name": "job", "members": [
                {"componentName": "master", "groupByKeyPaths": key},
                {"componentName": "worker", "groupByKeyPaths": key},
            ]}]
        }

    upstream = upstream_variant(gvk, alpha)
    ev_up = Evaluator(upstream)
    # upstream semantics, per pod: the effective component is the pod's own member
    assert ev_up.subtree_scale(fx.workload, "master") == 1
    assert ev_up.subtree_scale(fx.workload, "worker") == 3
    ours = {
        name(p): apply_gang(catalog()[gvk], evaluator(gvk), fx.workload, p, base_metadata(fx.workload))
        for p in fx.pods
    }
    assert {pg.min_member for pg in ours.values() if pg} == {4}


def test_pytorchjob_created_condition_does_not_make_it_initializing() -> None:
    """The operator keeps Created=True; upstream maps Created=True to Initializing, so a running job
    reported Running,Initializing."""
    gvk = GVK("kubeflow.org", "v1", "PyTorchJob")
    fx = fixture("pytorchjob/running.yaml")
    upstream = upstream_variant(
        gvk,
        lambda raw: raw["spec"]["structureDefinition"]["rootComponent"]["statusDefinition"]["statusMappings"].update(
            initializing=[{"byConditions": [{"type": "Created", "status": "True"}]}]
        ),
    )
    assert Evaluator(upstream).status(fx.workload).matched == ["Running", "Initializing"]
    assert evaluator(gvk).status(fx.workload).matched == ["Running"]


def test_grove_pods_match_their_template_clique() -> None:
    """grove.io/podclique holds the PodClique's full name (`disagg-0-frontend`); upstream compared it
    with the template names (`frontend`) and never matched."""
    gvk = GVK("grove.io", "v1alpha1", "PodCliqueSet")
    fx = fixture("podcliqueset/running.yaml")
    upstream = upstream_variant(
        gvk,
        lambda raw: child(raw, "clique")["podSelector"]["componentInstanceSelector"].update(
            idPath='.metadata.labels["grove.io/podclique"]'
        ),
    )
    frontend = next(p for p in fx.pods if name(p).startswith("disagg-0-frontend"))
    with pytest.raises(KartaEvalError, match="could not match instance id"):
        Evaluator(upstream).component_of_pod(fx.workload, frontend)
    assert evaluator(gvk).component_of_pod(fx.workload, frontend) == ("clique", "frontend")


def test_dynamo_service_names_make_valid_pod_group_names() -> None:
    """`Frontend` as grouping key gives `pg-<uid>-Frontend`, not a DNS-1123 name; ours lower-cases."""
    gvk = GVK("nvidia.com", "v1alpha1", "DynamoGraphDeployment")
    fx = fixture("dynamographdeployment/v1alpha1-running.yaml")

    def no_downcase(raw: dict[str, Any]) -> None:
        member = raw["spec"]["optimizationInstructions"]["gangScheduling"]["podGroups"][0]["members"][0]
        member["groupByKeyPaths"] = ['.metadata.labels["nvidia.com/dynamo-component"]']

    upstream = upstream_variant(gvk, no_downcase)
    frontend = next(p for p in fx.pods if name(p).startswith("vllm-disagg-frontend"))
    with pytest.raises(KartaEvalError, match="invalid Kubernetes PodGroup name"):
        apply_gang(upstream, Evaluator(upstream), fx.workload, frontend, base_metadata(fx.workload))
    pg = apply_gang(catalog()[gvk], evaluator(gvk), fx.workload, frontend, base_metadata(fx.workload))
    assert pg is not None and pg.name.endswith("-frontend")


def test_milvus_pods_outside_the_upstream_members_still_group() -> None:
    """Upstream's members are querynode, datanode, streamingnode only: a proxy pod matched no member
    and could not be grouped. Ours: one PodGroup for every Milvus component."""
    gvk = GVK("milvus.io", "v1beta1", "Milvus")
    fx = fixture("milvus/running.yaml")
    key = ['.metadata.labels["app.kubernetes.io/instance"]']

    def alpha(raw: dict[str, Any]) -> None:
        raw["spec"]["optimizationInstructions"]["gangScheduling"] = {
            "podGroups": [{"name": "cluster", "members": [
                {"componentName": c, "groupByKeyPaths": key} for c in ("querynode", "datanode", "streamingnode")
            ]}]
        }

    upstream = upstream_variant(gvk, alpha)
    proxy = next(p for p in fx.pods if name(p).startswith("vector-db-milvus-proxy"))
    with pytest.raises(KartaEvalError, match="does not match any Karta pod group member"):
        apply_gang(upstream, Evaluator(upstream), fx.workload, proxy, base_metadata(fx.workload))
    pg = apply_gang(catalog()[gvk], evaluator(gvk), fx.workload, proxy, base_metadata(fx.workload))
    assert pg is not None and pg.min_member == 6


def test_rayjob_submitter_is_grouped_but_not_counted() -> None:
    gvk = GVK("ray.io", "v1", "RayJob")
    fx = fixture("rayjob/running.yaml")
    ev = evaluator(gvk)
    submitter = next(p for p in fx.pods if "job-name" in (p["metadata"].get("labels") or {}))
    assert ev.component_of_pod(fx.workload, submitter) == ("submitter", None)
    assert ev.subtree_scale(fx.workload, "submitter") == 0
    http_mode = variant(fx.workload, submissionMode="HTTPMode")
    assert ev.scale(http_mode, "submitter")[""].min_replicas == 0


def test_mpijob_launcher_counts_only_when_created_at_startup() -> None:
    gvk = GVK("kubeflow.org", "v2beta1", "MPIJob")
    fx = fixture("mpijob/pending.yaml")
    ev = evaluator(gvk)
    assert ev.subtree_scale(fx.workload, catalog()[gvk].root) == 4
    at_startup = variant(fx.workload, launcherCreationPolicy="AtStartup")
    assert ev.subtree_scale(at_startup, catalog()[gvk].root) == 5
