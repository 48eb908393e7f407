"""The describe view (``grouper.describe``): quantities, pod requests, owner-chain attribution, the
component tree built from the catalog fixtures, and the table renderer."""

from __future__ import annotations

import copy
import json
import re
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from grouper.describe import (
    MAX_DEPTH,
    ComponentNode,
    DescribeView,
    Resources,
    build_describe,
    format_cpu,
    format_memory,
    parse_quantity,
    pod_request,
    pods_of,
    render_table,
)
from grouper.karta import Evaluator, from_object
from grouper.model.objects import GVK, name

from .workloads import catalog, evaluator, fixture

GI = 2**30


# ------------------------------------------------------------------------------ quantities


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", "0.5"), ("2", "2"), (4, "4"), (0.25, "0.25"), ("1Gi", str(GI)), ("1.5Gi", str(GI * 3 // 2)),
     ("128974848", "128974848"), ("129e6", "129000000"), ("129M", "129000000"), ("1E", str(10**18)),
     ("100n", "1E-7"), ("+3k", "3000")],
)
def test_parse_quantity(text: Any, value: str) -> None:
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize("bad", ["", "1.2.3", "abc", "5 Gi", "1Zi", True, None, [1]])
def test_parse_quantity_rejects(bad: Any) -> None:
    with pytest.raises(ValueError):
        parse_quantity(bad)


def test_format_cpu_and_memory() -> None:
    assert [format_cpu(m) for m in (0, 250, 1000, 2500, 12000)] == ["0", "250m", "1", "2500m", "12"]
    assert [format_memory(b) for b in (0, 512, 1024, 1536 * 2**20, 3 * GI, 10**9, 1000)] == [
        "0", "512", "1Ki", "1536Mi", "3Gi", "1G", "1k"]


# ------------------------------------------------------------------------------ pod requests


def c(name: str, cpu: str | None = None, mem: str | None = None, gpu: int | None = None,
      limits_only: bool = False, sidecar: bool = False) -> dict[str, Any]:
    res = {k: v for k, v in (("cpu", cpu), ("memory", mem), ("nvidia.com/gpu", gpu)) if v is not None}
    out: dict[str, Any] = {"name": name, "resources": {"limits" if limits_only else "requests": res}}
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


def test_pod_request_sums_containers_and_falls_back_to_limits() -> None:
    spec = {"containers": [c("a", "1", "1Gi", 2), c("b", "500m", "512Mi", limits_only=True)]}
    assert pod_request(spec) == Resources(2, 1500, GI + GI // 2)


def test_pod_request_init_containers_and_sidecars() -> None:
    # the largest regular init container wins over the containers
    assert pod_request({"initContainers": [c("init", "4", "64Mi")], "containers": [c("m", "1", "1Gi")]}) == Resources(
        0, 4000, GI)
    # sidecars run next to the containers: containers + sidecars
    spec = {"initContainers": [c("log", "100m", "64Mi", sidecar=True)], "containers": [c("m", "1", "1Gi")]}
    assert pod_request(spec) == Resources(0, 1100, GI + 64 * 2**20)
    # a regular init container after a sidecar runs next to that sidecar
    spec = {"initContainers": [c("proxy", "1", sidecar=True), c("migrate", "3")], "containers": [c("m", "500m")]}
    assert pod_request(spec).cpu_millis == 4000


def test_pod_request_pod_level_resources_and_overhead() -> None:
    spec = {"containers": [c("a", "1", "1Gi", 1), c("b", "1", "1Gi")],
            "resources": {"requests": {"cpu": "3"}, "limits": {"memory": "4Gi"}},
            "overhead": {"cpu": "250m", "memory": "120Mi"}}
    assert pod_request(spec) == Resources(1, 3250, 4 * GI + 120 * 2**20)
    assert pod_request(None) == Resources()


# ------------------------------------------------------------------------------ attribution


def test_owner_chain_attribution_covers_six_hops_and_no_more() -> None:
    fx = fixture("inferenceservice/failed.yaml")  # Pod -> RS -> Deployment -> Rev -> Config -> KSvc -> ISVC
    assert MAX_DEPTH == 6
    assert [name(p) for p in pods_of(fx.workload, fx.pods, fx.others)] == [name(fx.pods[0])]
    # one more hop: put a wrapper object between the Knative Service and the InferenceService
    objs = copy.deepcopy(fx.others)
    ksvc = next(o for o in objs if o["kind"] == "Service")
    wrapper = {"apiVersion": "example.com/v1", "kind": "Wrapper",
               "metadata": {"name": "w", "uid": "wrapper-uid", "ownerReferences": ksvc["metadata"]["ownerReferences"]}}
    ksvc["metadata"]["ownerReferences"] = [{"apiVersion": "example.com/v1", "kind": "Wrapper", "name": "w",
                                            "uid": "wrapper-uid"}]
    assert pods_of(fx.workload, fx.pods, [*objs, wrapper]) == []


def test_attribution_ignores_pods_of_other_owners_and_missing_intermediates() -> None:
    fx = fixture("milvus/running.yaml")
    all_pods = [d for d in fx.documents if d["kind"] == "Pod"]
    owned = pods_of(fx.workload, all_pods, fx.others)
    assert "vector-db-etcd-0" not in {name(p) for p in owned} and len(owned) == 6
    # without the ReplicaSets/Deployments the chain cannot be followed
    assert pods_of(fx.workload, all_pods, []) == []


def test_lws_worker_pods_are_owned_through_the_leader_pod() -> None:
    fx = fixture("leaderworkerset/running.yaml")
    docs = [d for d in fx.documents[1:]]
    owned = pods_of(fx.workload, [d for d in docs if d["kind"] == "Pod"], [d for d in docs if d["kind"] != "Pod"])
    assert len(owned) == 8


# ------------------------------------------------------------------------------ tree


def describe(rel: str, *, file_mode: bool = False) -> DescribeView:
    fx = fixture(rel)
    defn = catalog()[GVK.of(fx.workload)]
    return build_describe(defn, evaluator(defn.gvk), fx.workload, [d for d in fx.documents[1:] if d["kind"] == "Pod"],
                          file_mode=file_mode, objects=[d for d in fx.documents[1:] if d["kind"] != "Pod"])


def shape(n: ComponentNode) -> tuple[Any, ...]:
    r = n.replicas
    return (n.label, r.desired, r.current, r.ready, tuple(shape(ch) for ch in n.children), len(n.pods))


def test_lws_tree_splits_groups_by_replica_key() -> None:
    view = describe("leaderworkerset/running.yaml")
    (group,) = view.components
    assert shape(group) == ("group", 8, 8, 8, (
        ("group[0]", 4, 4, 4, (("leader", 1, 1, 1, (), 1), ("worker", 3, 3, 3, (), 3)), 0),
        ("group[1]", 4, 4, 4, (("leader", 1, 1, 1, (), 1), ("worker", 3, 3, 3, (), 3)), 0),
    ), 0)
    assert group.grouping and group.children[0].replica_key == "0"
    # kli: a row per instance of the tree (each LWS group's leader and workers)
    assert [(r.component, r.replicas, r.resources.gpus) for r in view.resource_table] == [
        ("leader", 1, 8), ("worker", 3, 24), ("leader", 1, 8), ("worker", 3, 24)]
    assert view.resources == Resources(64, 128_000, 1600 * GI)
    assert view.phases == ["Running"] and not view.warnings


def test_lws_file_mode_without_pods_shows_one_group() -> None:
    fx = fixture("leaderworkerset/running.yaml")
    defn = catalog()[GVK.of(fx.workload)]
    view = build_describe(defn, evaluator(defn.gvk), fx.workload, [], file_mode=True)
    assert shape(view.components[0]) == ("group", 4, 0, 0, (("leader", 1, 0, 0, (), 0), ("worker", 3, 0, 0, (), 0)), 0)


def test_grove_tree_instances_replicas_and_scaling_group() -> None:
    view = describe("podcliqueset/running.yaml")
    (replica,) = view.components
    r0 = replica.children[0]
    assert r0.label == "replica[0]" and r0.replicas.desired == 4
    clique, sg = r0.children
    assert [ch.label for ch in clique.children] == ["frontend"]
    (prefill,) = sg.children
    (sgclique,) = prefill.children
    assert [(ch.label, ch.replicas.desired, len(ch.pods)) for ch in sgclique.children] == [("pleader", 1, 1), ("pworker", 2, 2)]
    assert [(r.component, r.replicas) for r in view.resource_table] == [
        ("frontend", 1), ("pleader", 1), ("pworker", 2)] * 2  # per instance, both PodCliqueSet replicas


def test_dynamo_multinode_service_lists_pods_per_replica_key() -> None:
    view = describe("dynamographdeployment/v1alpha1-pending.yaml")
    (service,) = view.components
    frontend, worker = service.children
    assert (frontend.label, frontend.replicas.desired, frontend.replicas.ready) == ("Frontend", 1, 1)
    assert (worker.label, worker.replicas.desired, worker.resources.gpus) == ("TrtllmWorker", 2, 16)
    (replica0,) = worker.children
    assert (replica0.label, replica0.replicas.desired, replica0.replicas.current) == ("service[0]", None, 2)
    assert {(p.phase, p.reason, p.node) for p in replica0.pods} == {("Pending", "Unschedulable", None)}
    assert view.phases == ["Initializing"]


def test_empty_components_are_left_out_and_resources_follow_the_template() -> None:
    view = describe("tfjob/running.yaml")
    assert [n.label for n in view.components] == ["chief", "ps", "worker"]  # no master/evaluator rows
    job = describe("job/running.yaml")
    (row,) = job.components
    assert (row.replicas.desired, row.replicas.current, row.replicas.ready) == (3, 3, 3)
    assert len(row.pods) == 5  # 3 running + 2 succeeded
    assert job.resources == Resources(0, 6000, 3 * GI)  # max(init 2 CPU, 500m) x parallelism 3


def test_pods_matching_no_component_and_evaluation_errors_are_reported() -> None:
    fx = fixture("pytorchjob/running.yaml")
    raw = copy.deepcopy(catalog()[GVK.of(fx.workload)].raw)
    worker = raw["spec"]["structureDefinition"]["childComponents"][1]
    worker["podSelector"]["componentTypeSelector"]["value"] = "trainer"
    worker["scaleDefinition"]["replicasPath"] = ".spec.pytorchReplicaSpecs.Worker.replicas * null"
    defn = from_object(raw, "test:broken")
    view = build_describe(defn, Evaluator(defn), fx.workload, fx.pods, file_mode=False)
    assert sorted(p.name for p in view.unassigned_pods) == ["llama-ft-worker-0", "llama-ft-worker-1", "llama-ft-worker-2"]
    assert any("no component found" in w for w in view.warnings)
    assert any("cannot be multiplied" in w for w in view.warnings)


def test_json_shape() -> None:
    data = json.loads(json.dumps(describe("jobset/running.yaml").to_dict()))
    assert {"name", "namespace", "kind", "apiVersion", "createdAt", "definition", "origin", "phases", "fileMode",
            "resources", "components"} <= set(data)
    assert data["resources"] == {"gpus": 4, "cpuMillis": 20000, "memoryBytes": 80 * GI}
    comp = data["components"][0]
    assert {"name", "kind", "replicas", "resources", "nodes", "pods", "children"} <= set(comp)
    assert comp["kind"] == "Job" and comp["replicas"] == {"desired": 5, "current": 5, "ready": 5}
    pod = comp["children"][1]["pods"][0]
    assert set(pod) == {"name", "phase", "ready", "node", "reason", "resources"}
    pending = json.loads(json.dumps(describe("jobset/pending.yaml").to_dict()))
    assert pending["components"][0]["children"][0]["pods"][0]["node"] is None


# ------------------------------------------------------------------------------ renderer

NOW = datetime(2026, 11, 20, 9, 19, 3, tzinfo=UTC)


def test_render_live_table() -> None:
    text = render_table(describe("jobset/running.yaml"), now=NOW)
    lines = text.splitlines()
    assert lines[0] == ("JobSet/trainer   namespace: ml-team   definition: jobset-x-k8s-io-jobset-v1alpha2 "
                        "(builtin:definitions/jobset-x-k8s-io-jobset-v1alpha2.yaml)   age: 5m")
    assert lines[2].startswith("`-- replicatedjob") and "5/5 ready" in lines[2] and "gpu: 4" in lines[2]
    assert lines[3].startswith("    |-- leader")
    assert any(line.startswith("        |-- trainer-worker-0-0-") and "Running" in line and "gpu: 1" in line
               for line in lines)
    assert "Phase: Running" in lines
    i = lines.index("Resources:")
    assert lines[i + 1].split() == ["COMPONENT", "REPLICAS", "GPU", "CPU", "MEMORY"]
    # kli: one row per instance (replicatedJob), not one for the grouping component
    assert lines[i + 2].split() == ["leader", "1", "0", "4", "16Gi"]
    assert lines[i + 3].split() == ["worker", "4", "4", "16", "64Gi"]
    assert lines[i + 4].split() == ["TOTAL", "5", "4", "20", "80Gi"]


def test_render_file_mode_and_pending_pods() -> None:
    text = render_table(describe("jobset/pending.yaml", file_mode=True), now=NOW)
    lines = text.splitlines()
    assert "age:" not in lines[0] and lines[1] == "(file mode: no live status)"
    assert "replicas: 3" in lines[3] and "Phase:" not in text
    assert any("Pending (Unschedulable)" in line and "gpu: 8" in line and line.endswith("<none>") for line in lines)


def test_render_pod_limit_shows_unhealthy_first() -> None:
    view = describe("job/running.yaml")
    text = render_table(view, now=NOW, pod_limit=2)
    assert re.search(r"-- \.\.\. +and 3 more \(0 unhealthy shown\)$", text, re.M)
    fx = fixture("rayjob/failed.yaml")  # 1 running head, 4 pending workers in one row
    defn = catalog()[GVK.of(fx.workload)]
    v = build_describe(defn, evaluator(defn.gvk), fx.workload, fx.pods, file_mode=False, objects=fx.others)
    out = render_table(v, now=NOW, pod_limit=3)
    assert re.search(r"-- \.\.\. +and 1 more \(3 of 4 unhealthy shown\)$", out, re.M)


def test_age_formatting() -> None:
    from grouper.describe import age

    assert [age("2026-11-20T09:14:03Z", NOW.replace(hour=h, minute=m, second=s)) for h, m, s in
            ((9, 14, 50), (9, 40, 0), (20, 0, 0))] == ["47s", "25m", "10h"]
    assert age("2026-11-10T09:14:03Z", NOW) == "10d" and age(None) is None and age("yesterday") is None


def test_pods_without_a_replica_key_stay_on_the_grouping_row() -> None:
    fx = fixture("leaderworkerset/running.yaml")
    docs = copy.deepcopy(fx.documents[1:])
    stray = next(d for d in docs if d["kind"] == "Pod" and name(d) == "vllm-70b-1-3")
    del stray["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"]
    stray["metadata"]["resourceVersion"] += "1"  # the evaluator caches per uid + resourceVersion
    defn = catalog()[GVK.of(fx.workload)]
    view = build_describe(defn, evaluator(defn.gvk), fx.workload, [d for d in docs if d["kind"] == "Pod"],
                          file_mode=False, objects=[d for d in docs if d["kind"] != "Pod"])
    (group,) = view.components
    assert [p.name for p in group.pods] == ["vllm-70b-1-3"]
    assert group.replicas.current == 8 and group.children[1].replicas.current == 3


def test_callers_that_know_the_pods_can_skip_the_owner_chain() -> None:
    fx = fixture("jobset/running.yaml")
    defn = catalog()[GVK.of(fx.workload)]
    ev = evaluator(defn.gvk)
    assert build_describe(defn, ev, fx.workload, fx.pods, file_mode=False).components[0].replicas.current == 0
    view = build_describe(defn, ev, fx.workload, fx.pods, file_mode=False, pods_attributed=True)
    assert view.components[0].replicas.current == 5
