"""Per kind: realistic objects and their pods (as the operators create them) through the catalog.

For every fixture: primary phase (and the full matched set), instance ids, scales, which
component/instance each pod is, and the PodGroup ``apply_gang`` decides for each pod.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

import pytest

from grouper.karta import apply_gang
from grouper.model.objects import GVK, name, uid

from .workloads import base_metadata, definition_for, evaluator, fixture


@dataclass(frozen=True)
class PodExpect:
    component: str
    instance: str | None
    pod_group: str | None  # the PodGroup name after "pg-<workload uid>-"; None: no gang instructions
    min_member: int | None


@dataclass(frozen=True)
class Case:
    fixture: str
    phases: list[str]  # matched statuses, upstream order; the first is the primary phase
    pods: dict[str, PodExpect]  # fnmatch pattern on the pod name -> expectation (first match wins)
    pod_count: int
    instances: dict[str, list[str]] = field(default_factory=dict)
    scales: dict[str, dict[str, tuple[int | None, int | None]]] = field(default_factory=dict)  # (replicas, min)
    total: int | None = None  # subtree scale of the root component


def P(component: str, instance: str | None, pod_group: str | None, min_member: int | None) -> PodExpect:
    return PodExpect(component, instance, pod_group, min_member)


NO_GANG = P  # readability: P(component, instance, None, None) = the definition leaves grouping alone


CASES = [
    # ---------------------------------------------------------------- JobSet (v2, whole JobSet)
    Case("jobset/running.yaml", ["Running"],
         {"trainer-leader-*": P("replicatedjob", "leader", "jobset", 5),
          "trainer-worker-*": P("replicatedjob", "worker", "jobset", 5)}, 5,
         instances={"replicatedjob": ["leader", "worker"]},
         scales={"replicatedjob": {"leader": (1, None), "worker": (4, None)}}, total=5),
    Case("jobset/pending.yaml", ["Initializing"],
         {"sweep-leader-*": P("replicatedjob", "leader", "jobset", 3),
          "sweep-worker-*": P("replicatedjob", "worker", "jobset", 3)}, 3,
         scales={"replicatedjob": {"leader": (1, None), "worker": (2, None)}}, total=3),
    # ---------------------------------------------------------------- Kubeflow training operator
    Case("pytorchjob/running.yaml", ["Running"],
         {"llama-ft-master-0": P("master", None, "pytorchjob", 4),
          "llama-ft-worker-*": P("worker", None, "pytorchjob", 4)}, 4,
         scales={"master": {"": (1, None)}, "worker": {"": (3, None)}}, total=4),
    Case("pytorchjob/failed.yaml", ["Failed"],
         {"elastic-bert-worker-*": P("worker", None, "pytorchjob", 2)}, 4,
         scales={"master": {"": (0, None)}, "worker": {"": (4, 2)}}, total=2),
    Case("tfjob/running.yaml", ["Running"],
         {"resnet-dist-chief-0": P("chief", None, "tfjob", 7),
          "resnet-dist-ps-*": P("ps", None, "tfjob", 7),
          "resnet-dist-worker-*": P("worker", None, "tfjob", 7)}, 7,
         scales={"chief": {"": (1, None)}, "master": {"": (0, None)}, "ps": {"": (2, None)},
                 "worker": {"": (4, None)}, "evaluator": {"": (0, None)}}, total=7),
    Case("tfjob/pending.yaml", ["Initializing"],
         {"wide-deep-ps-0": P("ps", None, "tfjob", 4),
          "wide-deep-worker-*": P("worker", None, "tfjob", 4),
          "wide-deep-evaluator-0": P("evaluator", None, "tfjob", 4)}, 4, total=4),
    Case("mpijob/running.yaml", ["Running"],
         {"pi-launcher-*": P("launcher", None, "mpijob", 3),
          "pi-worker-*": P("worker", None, "mpijob", 3)}, 3,
         scales={"launcher": {"": (1, None)}, "worker": {"": (2, None)}}, total=3),
    Case("mpijob/pending.yaml", ["Initializing"],  # WaitForWorkersReady: launcher not counted
         {"allreduce-worker-*": P("worker", None, "mpijob", 4)}, 4,
         scales={"launcher": {"": (0, None)}, "worker": {"": (4, None)}}, total=4),
    # ---------------------------------------------------------------- KubeRay
    Case("raycluster/running.yaml", ["Running"],
         {"ray-train-head-*": P("head", None, "raycluster", 4),
          "ray-train-gpu-worker-*": P("worker", "gpu", "raycluster", 4),
          "ray-train-cpu-worker-*": P("worker", "cpu", "raycluster", 4)}, 6,
         instances={"worker": ["gpu", "cpu"]},
         scales={"head": {"": (1, None)}, "worker": {"gpu": (4, 2), "cpu": (1, 0)}}, total=4),
    Case("raycluster/pending.yaml", ["Initializing"],  # head only, no workerGroupSpecs at all
         {"ray-notebook-head-*": P("head", None, "raycluster", 1)}, 1,
         instances={"worker": []}, scales={"worker": {}}, total=1),
    Case("rayjob/running.yaml", ["Running"],
         {"rayjob-pi-kf6xq-head-*": P("head", None, "rayjob", 3),
          "rayjob-pi-kf6xq-small-worker-*": P("worker", "small", "rayjob", 3),
          "rayjob-pi-*": P("submitter", None, "rayjob", 3)}, 4,
         scales={"worker": {"small": (2, 2)}, "submitter": {"": (None, None)}}, total=3),
    Case("rayjob/failed.yaml", ["Failed"],  # numOfHosts 2: gpu replicas 2 x 2 pods, min 1 x 2
         {"rayjob-llm-8lw2d-head-*": P("head", None, "rayjob", 3),
          "rayjob-llm-8lw2d-gpu-worker-*": P("worker", "gpu", "rayjob", 3)}, 5,
         scales={"worker": {"gpu": (4, 2)}}, total=3),
    Case("rayservice/running.yaml", ["Running"],
         {"llm-serve-*-head-*": P("head", None, "rayservice", 2),
          "llm-serve-*-gpu-worker-*": P("worker", "gpu", "rayservice", 2)}, 3, total=2),
    Case("rayservice/pending.yaml", ["Initializing"],
         {"embed-serve-*-head-*": P("head", None, "rayservice", 2),
          "embed-serve-*-gpu-worker-*": P("worker", "gpu", "rayservice", 2)}, 3, total=2),
    # ---------------------------------------------------------------- serving
    Case("inferenceservice/running.yaml", ["Running"],
         {"llama-8b-predictor-*": P("predictor", None, "inferenceservice", 3),
          "llama-8b-transformer-*": P("transformer", None, "inferenceservice", 3)}, 3,
         scales={"predictor": {"": (None, 1)}, "transformer": {"": (None, 2)}}, total=3),
    Case("inferenceservice/failed.yaml", ["Failed"],  # serverless: 6 owner hops
         {"bert-qa-predictor-*": P("predictor", None, "inferenceservice", 1)}, 1,
         scales={"predictor": {"": (None, 1)}, "transformer": {"": (None, 0)}}, total=1),
    Case("knative-service/running.yaml", ["Running"],
         {"hello-00001-deployment-*": P("revision", None, "hello-00001", 2)}, 2,
         scales={"revision": {"": (None, 2)}}, total=2),
    Case("knative-service/failed.yaml", ["Failed"],
         {"broken-00001-deployment-*": P("revision", None, "broken-00001", 1)}, 1, total=1),
    Case("nimservice/running.yaml", ["Running"],
         {"llama3-8b-*": P("nimservice", None, "llama3-8b", 2)}, 2,
         scales={"nimservice": {"": (2, None)}}, total=2),
    Case("nimservice/pending.yaml", ["Initializing"],  # HPA: minimum from scale.hpa.minReplicas
         {"mistral-7b-*": P("nimservice", None, "mistral-7b", 1)}, 1,
         scales={"nimservice": {"": (1, 1)}}, total=1),
    # ---------------------------------------------------------------- LeaderWorkerSet (per group = size)
    Case("leaderworkerset/running.yaml", ["Running"],
         {"vllm-70b-0": P("leader", None, "vllm-70b-0", 4),
          "vllm-70b-1": P("leader", None, "vllm-70b-1", 4),
          "vllm-70b-0-*": P("worker", None, "vllm-70b-0", 4),
          "vllm-70b-1-*": P("worker", None, "vllm-70b-1", 4)}, 8,
         scales={"leader": {"": (1, None)}, "worker": {"": (3, None)}}, total=4),
    Case("leaderworkerset/pending.yaml", ["Initializing"],
         {"deepseek-0": P("leader", None, "deepseek-0", 2),
          "deepseek-0-1": P("worker", None, "deepseek-0", 2)}, 2, total=2),
    # ---------------------------------------------------------------- Milvus (etcd pod is not Milvus-owned)
    Case("milvus/running.yaml", ["Running"],
         {"vector-db-milvus-proxy-*": P("proxy", None, "milvus", 6),
          "vector-db-milvus-mixcoord-*": P("mixcoord", None, "milvus", 6),
          "vector-db-milvus-querynode-*": P("querynode", None, "milvus", 6),
          "vector-db-milvus-datanode-*": P("datanode", None, "milvus", 6),
          "vector-db-milvus-streamingnode-*": P("streamingnode", None, "milvus", 6)}, 6,
         scales={"standalone": {"": (0, None)}, "querynode": {"": (2, None)}}, total=6),
    Case("milvus/pending.yaml", ["Initializing"],
         {"docs-search-milvus-standalone-*": P("standalone", None, "milvus", 1)}, 1,
         scales={"standalone": {"": (1, None)}, "proxy": {"": (0, None)}}, total=1),
    # ---------------------------------------------------------------- Grove (per PodCliqueSet replica)
    Case("podcliqueset/running.yaml", ["Running"],
         {"disagg-0-frontend-*": P("clique", "frontend", "disagg-0", 4),
          "disagg-1-frontend-*": P("clique", "frontend", "disagg-1", 4),
          "disagg-0-prefill-0-pleader-*": P("sgclique", "pleader", "disagg-0", 4),
          "disagg-1-prefill-0-pleader-*": P("sgclique", "pleader", "disagg-1", 4),
          "disagg-0-prefill-0-pworker-*": P("sgclique", "pworker", "disagg-0", 4),
          "disagg-1-prefill-0-pworker-*": P("sgclique", "pworker", "disagg-1", 4)}, 8,
         instances={"clique": ["frontend"], "scalinggroup": ["prefill"], "sgclique": ["pleader", "pworker"]},
         scales={"clique": {"frontend": (1, 1)}, "sgclique": {"pleader": (1, 1), "pworker": (2, 2)}}, total=4),
    Case("podcliqueset/pending.yaml", ["Initializing"],  # scaled scaling-group replica joins the base
         {"agg-0-frontend-*": P("clique", "frontend", "agg-0", 4),
          "agg-0-prefill-*-pleader-*": P("sgclique", "pleader", "agg-0", 4),
          "agg-0-prefill-*-pworker-*": P("sgclique", "pworker", "agg-0", 4)}, 7,
         scales={"sgclique": {"pleader": (2, 1), "pworker": (4, 2)}}, total=4),
    # ---------------------------------------------------------------- Dynamo (one PodGroup per service)
    Case("dynamographdeployment/v1alpha1-running.yaml", ["Running"],
         {"vllm-disagg-frontend-*": P("service", "Frontend", "frontend", 1),
          "vllm-disagg-vllmdecodeworker-*": P("service", "VllmDecodeWorker", "vllmdecodeworker", 2)}, 3,
         instances={"service": ["Frontend", "VllmDecodeWorker"]},
         scales={"service": {"Frontend": (1, None), "VllmDecodeWorker": (2, None)}}, total=3),
    Case("dynamographdeployment/v1alpha1-pending.yaml", ["Initializing"],  # LWS backend, 6 owner hops
         {"llama-405b-frontend-*": P("service", "Frontend", "frontend", 1),
          "llama-405b-trtllmworker-*": P("service", "TrtllmWorker", "trtllmworker", 2)}, 3,
         scales={"service": {"Frontend": (1, None), "TrtllmWorker": (2, None)}}, total=3),
    Case("dynamographdeployment/v1beta1-running.yaml", ["Running"],
         {"sglang-agg-0-frontend-*": P("component", "frontend", "frontend", 1),
          "sglang-agg-0-decode-*": P("component", "decode", "decode", 2)}, 3,
         scales={"component": {"frontend": (1, None), "decode": (2, 2)}}, total=3),
    Case("dynamographdeployment/v1beta1-pending.yaml", ["Initializing"],
         {"sglang-big-0-frontend-*": P("component", "frontend", "frontend", 1),
          "sglang-big-0-decode-*": P("component", "decode", "decode", 2)}, 3, total=3),
    # ---------------------------------------------------------------- built-in kinds
    Case("job/running.yaml", ["Running"],
         {"preprocess-*": P("job", None, "job", 1)}, 5, scales={"job": {"": (3, 1)}}, total=1),
    Case("job/failed.yaml", ["Failed", "Degraded"],  # batch-min-member 2; Degraded: upstream's rule also matches
         {"etl-nightly-*": P("job", None, "job", 2)}, 2, scales={"job": {"": (2, 2)}}, total=2),
    Case("deployment/running.yaml", ["Running"],  # KAI v0.18: one gang PodGroup per Deployment
         {"web-*": P("deployment", None, "deployment", 1)}, 2, scales={"deployment": {"": (2, 1)}}, total=1),
    Case("deployment/failed.yaml", ["Failed"],
         {"gpu-api-*": P("deployment", None, "deployment", 1)}, 1, total=1),
    Case("statefulset/running.yaml", ["Running"],
         {"etcd-*": P("statefulset", None, "statefulset", 1)}, 3, scales={"statefulset": {"": (3, 1)}}, total=1),
    Case("statefulset/pending.yaml", ["Initializing"],
         {"kafka-*": P("statefulset", None, "statefulset", 1)}, 1, total=1),
    # ---------------------------------------------------------------- Workload Map v0.2.9 entries
    # CronJob and Pod: no gang instructions (the native plugins group them), as upstream.
    Case("cronjob/running.yaml", ["Running"],
         {"nightly-eval-*": NO_GANG("cronjob", None, None, None)}, 2, scales={"cronjob": {"": (2, None)}}, total=2),
    Case("cronjob/pending.yaml", ["Initializing"], {}, 0, total=2),
    Case("cronjob/suspended.yaml", ["Suspended"], {}, 0, total=2),
    Case("pod/running.yaml", ["Running"], {"debug-shell": NO_GANG("pod", None, None, None)}, 1, total=1),
    Case("pod/failed.yaml", ["Failed"], {"smoke-test": NO_GANG("pod", None, None, None)}, 1, total=1),
    # NIMCache: no gang instructions -> KAI's default grouper; NIM_CACHE_JOB_CREATED stays True while
    # the download runs, so Initializing also matches (upstream's mappings); the primary is Running.
    Case("nimcache/running.yaml", ["Running", "Initializing"],
         {"llama3-8b-cache-job-*": NO_GANG("nimcache", None, None, None)}, 1, total=1),
    Case("nimcache/pending.yaml", ["Initializing"],
         {"mistral-7b-cache-job-*": NO_GANG("nimcache", None, None, None)}, 1, total=1),
    # LLMInferenceService: one PodGroup per service over model servers, prefill and the router.
    Case("llminferenceservice/v1alpha1-running.yaml", ["Running"],
         {"llama-8b-kserve-router-scheduler-*": P("router-scheduler", None, "llama-8b", 3),
          "llama-8b-kserve-*": P("main", None, "llama-8b", 3)}, 3,
         scales={"main": {"": (2, None)}, "prefill": {"": (0, None)}, "worker": {"": (0, None)},
                 "router-scheduler": {"": (1, None)}}, total=3),
    Case("llminferenceservice/v1alpha1-failed.yaml", ["Failed"], {}, 0, total=1),
    Case("llminferenceservice/v1alpha2-running.yaml", ["Running"],
         {"granite-3b-kserve-router-scheduler-*": P("router-scheduler", None, "granite-3b", 2),
          "granite-3b-kserve-*": P("main", None, "granite-3b", 2)}, 2, total=2),
    Case("llminferenceservice/v1alpha2-pending.yaml", ["Initializing"],
         {"qwen-pd-kserve-prefill-*": P("prefill", None, "qwen-pd", 3),
          "qwen-pd-kserve-*": P("main", None, "qwen-pd", 3)}, 3,
         scales={"main": {"": (1, None)}, "prefill": {"": (2, None)}, "router-scheduler": {"": (0, None)}},
         total=3),
    # Agent Sandbox: one PodGroup per Sandbox, keyed by its uid (upstream's alpha form).
    Case("sandbox/running.yaml", ["Running"],
         {"agent-alice": P("agent", None, "f01878d2-ac9d-5a42-97e9-c7f91243bf8e", 1)}, 1,
         scales={"agent": {"": (1, None)}}, total=1),
    Case("sandbox/pending.yaml", ["Initializing"],
         {"agent-bob": P("agent", None, "db8f2dd8-0866-5d2a-a0c5-ed3f4f48d8e8", 1)}, 1, total=1),
]


@pytest.fixture(params=CASES, ids=[c.fixture.removesuffix(".yaml") for c in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    return request.param


def test_status(case: Case) -> None:
    fx = fixture(case.fixture)
    result = evaluator(GVK.of(fx.workload)).status(fx.workload)
    assert result.matched == case.phases
    assert result.primary == case.phases[0]


def test_instances_and_scale(case: Case) -> None:
    fx = fixture(case.fixture)
    ev = evaluator(GVK.of(fx.workload))
    for comp, ids in case.instances.items():
        assert ev.instance_ids(fx.workload, comp) == ids, comp
    for comp, want in case.scales.items():
        got = {k: (s.replicas, s.min_replicas) for k, s in ev.scale(fx.workload, comp).items()}
        assert got == want, comp
    if case.total is not None:
        assert ev.subtree_scale(fx.workload, definition_for(fx.workload).root) == case.total


def _expect(case: Case, pod_name: str) -> PodExpect:
    for pattern, want in case.pods.items():
        if fnmatch.fnmatchcase(pod_name, pattern):
            return want
    raise AssertionError(f"{pod_name}: no expectation in the case")


def test_pods_match_components(case: Case) -> None:
    fx = fixture(case.fixture)
    ev = evaluator(GVK.of(fx.workload))
    assert len(fx.pods) == case.pod_count
    for pod in fx.pods:
        want = _expect(case, name(pod))
        assert ev.component_of_pod(fx.workload, pod) == (want.component, want.instance), name(pod)


def test_pod_groups(case: Case) -> None:
    fx = fixture(case.fixture)
    defn = definition_for(fx.workload)
    ev = evaluator(GVK.of(fx.workload))
    base = base_metadata(fx.workload)
    sizes: dict[str, set[int | None]] = {}
    for pod in fx.pods:
        want = _expect(case, name(pod))
        pg = apply_gang(defn, ev, fx.workload, pod, base)
        if want.pod_group is None:  # no gang instructions: the caller keeps the base (default grouper)
            assert pg is None, name(pod)
            continue
        assert pg is not None
        suffix = want.pod_group.replace("{pod}", name(pod))
        assert pg.name == f"pg-{uid(fx.workload)}-{suffix}", name(pod)
        assert (pg.min_member, pg.min_sub_group, pg.sub_groups) == (want.min_member, None, []), name(pod)
        # everything else comes from the base metadata unchanged
        assert (pg.namespace, pg.owner, pg.queue, pg.labels) == (base.namespace, base.owner, base.queue, base.labels)
        sizes.setdefault(pg.name, set()).add(pg.min_member)
    # one PodGroup, one minimum: no pod of a PodGroup disagrees about its size (karta.md §7.6)
    assert all(len(v) == 1 for v in sizes.values()), sizes


def test_every_kind_has_a_running_and_a_pending_or_failed_fixture() -> None:
    by_kind: dict[GVK, set[str]] = {}
    for c in CASES:
        by_kind.setdefault(GVK.of(fixture(c.fixture).workload), set()).add(c.phases[0])
    assert len(by_kind) == 24
    for gvk, phases in by_kind.items():
        assert "Running" in phases and phases & {"Initializing", "Failed"}, gvk


def test_llminferenceservice_versions_evaluate_alike() -> None:
    """v1alpha1 and v1alpha2 are the same definition under another version: the same object (with
    its apiVersion changed) yields the same status, scales and PodGroup."""
    import copy

    fx = fixture("llminferenceservice/v1alpha1-running.yaml")
    alt = copy.deepcopy(fx.workload)
    alt["apiVersion"] = "serving.kserve.io/v1alpha2"
    v1, v2 = evaluator(GVK.of(fx.workload)), evaluator(GVK.of(alt))
    assert v1.status(fx.workload).matched == v2.status(alt).matched
    for pod in fx.pods:
        a = apply_gang(definition_for(fx.workload), v1, fx.workload, pod, base_metadata(fx.workload))
        b = apply_gang(definition_for(alt), v2, alt, pod, base_metadata(alt))
        assert a is not None and b is not None and (a.name, a.min_member) == (b.name, b.min_member)
