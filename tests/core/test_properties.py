"""Property tests of the WHOLE grouping core: generated workloads and pods through ``Grouper().decide``.

The grouper is the real one: the native plugin table, a ``DefinitionRegistry`` over the shipped
``definitions/`` catalog plus the cluster Karta of ``examples/batchling-karta.yaml``. Inputs are

* mutated examples: every scenario of ``examples/`` (workload, intermediate owners, pods) with random
  edits — the top owner's kind swapped for another native / catalog / unknown kind, junk at random
  paths of any object (junk types where numbers are expected, deleted keys), ``kai.scheduler/*`` and
  other known label/annotation keys with junk values, broken owner chains (missing owners, uid
  mismatches, cycles, several owners, controller flags, RBAC-forbidden kinds), pods without typemeta,
  other schedulers, pods being deleted;
* synthetic workloads: a random top-owner kind (native table, catalog GVKs, unknown kinds), random
  metadata and a random spec built from the field names plugins read, 0-2 intermediate owners, 1-4 pods.

Properties, for every pod: ``decide`` returns a ``Decision`` (no exception escapes) with outcome
grouped / skipped / error, never ``InternalError`` (an exception inside a plugin or the core: bad input
must become a named error); the record is JSON-serializable and deciding twice gives the same record;
when grouped, the PodGroup passes ``validate_pod_group``, its name is a DNS subdomain of at most 253
characters, it lives in the pod's namespace and the pod is in at most one of its sub-groups. For every
workload (``grouper plan`` semantics): ``merge_decisions`` over the decisions of all its pods yields one
PodGroup per (namespace, name), every grouped pod in exactly one merged PodGroup and in at most one of
its sub-groups, and the merged PodGroups validate.

A separate test feeds structurally broken objects (metadata / labels / ownerReferences of the wrong
JSON type, which neither an API server nor ``grouper plan``'s manifest check lets through) and only
requires that a ``Decision`` comes back.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import note as _note
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from grouper.core.decision import Decision
from grouper.core.grouping import Grouper
from grouper.core.lookups import InMemoryLookups
from grouper.core.naming import MAX_NAME_LENGTH, is_subdomain
from grouper.core.validation import validate_pod_group
from grouper.core.workload_plan import merge_decisions
from grouper.karta import DefinitionRegistry
from grouper.manifests import load_manifests
from grouper.model import objects as o
from grouper.model.objects import GVK
from grouper.plugins.registry import WILDCARD, native_plugins
from grouper.runtime.composition import build_grouper

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
DEFINITIONS = REPO / "definitions"
KARTA_KINDS = {"Karta", "ResourceInterface"}
OUTCOMES = {"grouped", "skipped", "error"}

# GROUPER_PROPERTY_SCALE=20 runs 20x the examples (a long bug hunt); the default keeps the file ~30 s.
SCALE = float(os.environ.get("GROUPER_PROPERTY_SCALE", "1"))


def examples(n: int) -> int:
    return max(1, int(n * SCALE))


SETTINGS = settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


# ---------------------------------------------------------------- the world: grouper, catalog, examples


@functools.cache
def world() -> dict[str, Any]:
    registry = DefinitionRegistry(DEFINITIONS)
    examples: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for m in load_manifests([path]):
            if m.obj.get("kind") in KARTA_KINDS:
                registry.upsert_cluster_object(m.obj)
        if path.name == "jobset-demo-pods.yaml":
            continue
        objs = [m.obj for m in load_manifests([path]) if m.obj.get("kind") not in KARTA_KINDS]
        if path.name == "jobset-demo.yaml":
            objs += [m.obj for m in load_manifests([EXAMPLES / "jobset-demo-pods.yaml"])]
        if any(_is_pod(x) for x in objs):
            examples[path.stem] = objs
    native = native_plugins()
    native_gvks = sorted({(g, v, k) for (g, v, k) in native})
    catalog_gvks = sorted({(d.definition.gvk.group, d.definition.gvk.version, d.definition.gvk.kind)
                           for d in registry.all()})
    return {
        "grouper": build_grouper(definitions=registry),
        "registry": registry,
        "examples": examples,
        "native_gvks": native_gvks,
        "catalog_gvks": catalog_gvks,
    }


def note(text: str) -> None:
    if currently_in_test_context():
        _note(text)


def _is_pod(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("kind") == "Pod" and obj.get("apiVersion") == "v1"


def _api_version(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


# ---------------------------------------------------------------- strategies: values


KAI_KEYS = [
    "kai.scheduler/queue", "kai.scheduler/node-pool", "kai.scheduler/preemptibility",
    "kai.scheduler/preemption-delay", "kai.scheduler/staleness-grace-period", "kai.scheduler/topology",
    "kai.scheduler/topology-required-placement", "kai.scheduler/topology-preferred-placement",
    "kai.scheduler/batch-min-member", "kai.scheduler/skip-podgrouper", "kai.scheduler/subgroup-name",
    "kai.scheduler/top-owner-metadata", "kai.scheduler/segment-size",
    "kai.scheduler/segment-topology-required-placement", "kai.scheduler/segment-topology-preferred-placement",
]
OTHER_KEYS = [
    "project", "user", "priorityClassName", "pod-group-name", "ray.io/priority-class-name", "ray.io/group",
    "ray.io/node-type", "ray.io/cluster", "training.kubeflow.org/replica-type",
    "training.kubeflow.org/replica-index", "training.kubeflow.org/job-name", "training.kubeflow.org/job-role",
    "jobset.sigs.k8s.io/replicatedjob-name", "jobset.sigs.k8s.io/job-index", "jobset.sigs.k8s.io/jobset-name",
    "leaderworkerset.sigs.k8s.io/size", "leaderworkerset.sigs.k8s.io/group-index",
    "leaderworkerset.sigs.k8s.io/worker-index", "leaderworkerset.sigs.k8s.io/name",
    "serving.knative.dev/revision", "autoscaling.knative.dev/min-scale", "grove.io/podgang",
    "grove.io/topology-name", "grove.io/podclique", "spark-app-name", "spark-app-selector", "spark-role",
    "example.com/role", "batch.kubernetes.io/job-completion-index", "job-name", "controller-uid",
    "apps.kubernetes.io/pod-index", "statefulset.kubernetes.io/pod-name", "nvidia.com/dynamo-component-type",
    "serving.kserve.io/inferenceservice", "workflows.argoproj.io/workflow", "app",
]
LABEL_KEYS = st.one_of(st.sampled_from(KAI_KEYS), st.sampled_from(OTHER_KEYS), st.text(max_size=12))

TRICKY_STRINGS = [
    "", "true", "false", "True", "1", "0", "-1", "2", "3", "7", "64", "2147483647", "2147483648", "-2147483649",
    "99999999999999999999", " 1", "1 ", "+2", "0x10", "1e3", "1.5", "2.0", "1_000", "\u0663", "\uff15", "NaN", "null",
    "5m", "-5m", "1h30m", "90s", "0s", "1.5h", "300ms", "-1ns", "1d", "preemptible", "non-preemptible",
    "Preemptible", "team-a", "default-queue", "a" * 64, "a" * 254, "UPPER", "under_score", "dot.ted",
    "-lead", "trail-", "x/y", "nvidia.com/gpu", "leader", "worker", "head", "Master", "Worker", "Launcher",
    "coordinator", "rack", "zone", "block", "kai-scheduler", "{}", "[]", "name: x\nuid: y", "\x00", "é",
]
JUNK_STRINGS = st.one_of(st.sampled_from(TRICKY_STRINGS), st.text(max_size=16))
LABEL_VALUES = st.one_of(
    JUNK_STRINGS,
    JUNK_STRINGS,
    JUNK_STRINGS,
    # YAML in a `grouper plan` file turns unquoted 1/true/null into non-strings
    st.one_of(st.none(), st.booleans(), st.integers(-5, 10), st.floats(allow_nan=False, width=32)),
)
JUNK_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 12),
    st.sampled_from([-(2**31) - 1, -(2**31), 2**31 - 1, 2**31, 2**53 + 1, 2**63, 10**30, 10_001, 100_000]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.0, 2.5, 3.0, 1e300, float("inf")]),
    JUNK_STRINGS,
)
SPEC_KEYS = [
    "replicas", "parallelism", "completions", "minAvailable", "minReplicas", "maxReplicas", "numOfHosts",
    "size", "template", "spec", "metadata", "annotations", "labels", "name", "replicatedJobs", "workerGroupSpecs",
    "headGroupSpec", "groupName", "rayClusterSpec", "startupPolicy", "startupPolicyOrder", "leaderWorkerTemplate",
    "workerTemplate", "leaderTemplate", "subGroupPolicy", "subGroupSize", "pytorchReplicaSpecs", "tfReplicaSpecs",
    "mpiReplicaSpecs", "xgbReplicaSpecs", "jaxReplicaSpecs", "Master", "Worker", "Launcher", "PS", "Chief",
    "runPolicy", "schedulingPolicy", "elasticPolicy", "launcherCreationPolicy", "suspend", "cliques",
    "podCliqueScalingGroups", "services", "predictor", "workers", "coordinator", "components",
    "schedulerName", "priorityClassName", "topologyConstraint", "minMember", "roleName",
]
JUNK = st.recursive(
    JUNK_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.sampled_from(SPEC_KEYS), st.text(max_size=6)), inner, max_size=4),
    ),
    max_leaves=8,
)
DNS_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
NAMES = st.one_of(
    DNS_LABEL,
    DNS_LABEL,
    st.builds(lambda a, b: f"{a}.{b}", DNS_LABEL, DNS_LABEL),
    st.integers(60, 253).map(lambda n: ("abcdefghij-" * 30)[: n - 1] + "z"),  # long, valid
    st.sampled_from(["", "UPPER", "under_score", "-lead", "a..b", "é"]),  # invalid on purpose
)
UIDS = st.one_of(st.uuids().map(str), st.just(""), st.sampled_from(["1", "uid-a", "UID_X"]))
NAMESPACES = st.one_of(st.sampled_from(["default", "team-a", "ns"]), DNS_LABEL)


# ---------------------------------------------------------------- strategies: GVKs


@st.composite
def top_gvks(draw: st.DrawFn) -> tuple[str, str, str]:
    w = world()
    source = draw(st.sampled_from(["native", "catalog", "unknown"]))
    if source == "native":
        group, version, kind = draw(st.sampled_from(w["native_gvks"]))
        if version == WILDCARD:
            version = draw(st.sampled_from(["v1", "v1alpha1", "v1beta1", "v2"]))
        return group, version, kind
    if source == "catalog":
        return draw(st.sampled_from(w["catalog_gvks"]))
    group = draw(st.sampled_from(["example.com", "", "batch", "apps", "ray.io", "kubeflow.org", "x.y.z", "run.ai"]))
    version = draw(st.sampled_from(["v1", "v1alpha1", "v2beta1", "v0"]))
    kind = draw(st.one_of(st.sampled_from(["Widget", "Job", "Pod", "RayJob", "MPIJob", "Batchling", "Thing"]),
                          st.from_regex(r"[A-Z][A-Za-z0-9]{0,10}", fullmatch=True)))
    return group, version, kind


# ---------------------------------------------------------------- mutations of object trees


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        for k, v in value.items():
            out.append((*prefix, k))
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.append((*prefix, i))
            out.extend(_paths(v, (*prefix, i)))
    return out


def _parent(obj: Any, path: tuple[Any, ...]) -> Any:
    cur = obj
    for step in path[:-1]:
        cur = cur[step]
    return cur


def _refs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    meta = obj.setdefault("metadata", {})
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        refs = meta["ownerReferences"] = []
    return refs


def _ref_to(target: dict[str, Any], controller: bool | None = True) -> dict[str, Any]:
    ref = {"apiVersion": target.get("apiVersion", "v1"), "kind": target.get("kind", "Pod"),
           "name": o.name(target), "uid": o.uid(target)}
    if controller is not None:
        ref["controller"] = controller
    return ref


INT32_MAX = 2**31 - 1
COUNTS = st.one_of(
    st.sampled_from([INT32_MAX, INT32_MAX - 1, 2**31, 2**30 + 1, 100_000, 10_001, 10_000, 0, -1]),
    st.sampled_from(["2147483647", "2147483648", "0", "-1", "3", "1.5", ""]),
    st.sampled_from([1.5, 2.0, -0.0, float("nan"), None, True]),
    st.integers(0, 9),
)


def _is_count(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, str) and value.isdigit() and len(value) < 6)


STRUCTURE = {("metadata",), ("metadata", "labels"), ("metadata", "annotations"), ("metadata", "ownerReferences")}


def _editable(obj: dict[str, Any], path: tuple[Any, ...], op: str) -> bool:
    """Paths the junk/delete edits may touch: anything but the names, and (for junk) not the JSON types
    an API server enforces on metadata and a pod's spec (those are test_structurally_broken_objects')."""
    if path[:2] == ("metadata", "name"):
        return False
    if op == "delete":
        return path != ("metadata",)
    if path in STRUCTURE or (len(path) == 3 and path[:2] == ("metadata", "ownerReferences")):
        return False
    return not (path == ("spec",) and _is_pod(obj))


@st.composite
def mutate(draw: st.DrawFn, objs: list[dict[str, Any]], max_ops: int) -> tuple[list[dict[str, Any]], set]:
    """Apply 0..max_ops random edits in place; returns (objects in the store, forbidden (group, kind))."""
    forbidden: set[tuple[str, str]] = set()
    removed: set[int] = set()
    n_ops = draw(st.integers(0, max_ops))
    for _ in range(n_ops):
        op = draw(st.sampled_from([
            "junk", "junk", "junk", "delete", "label", "label", "annotation", "annotation", "swap_kind",
            "missing_owner", "uid_mismatch", "cycle", "extra_owner", "controller_flags", "forbid",
            "pod_typemeta", "scheduler", "deleting", "rename", "clear_uid", "number", "number",
        ]))
        workloads = [x for x in objs if not _is_pod(x)]
        if op in ("junk", "delete", "number") and workloads and draw(st.integers(0, 3)) < 3:
            target = draw(st.sampled_from(workloads))  # mostly the workload objects: that is where plugins read specs
        else:
            target = draw(st.sampled_from(objs))
        note(f"op {op} on {target.get('kind')}/{o.name(target)}")
        if op in ("junk", "delete"):
            paths = [p for p in _paths(target) if p[0] in ("spec", "metadata", "status") and _editable(target, p, op)]
            if not paths:
                continue
            path = draw(st.sampled_from(paths))
            parent = _parent(target, path)
            if op == "junk":
                parent[path[-1]] = draw(JUNK)
            elif isinstance(parent, dict):
                del parent[path[-1]]
            else:
                parent.pop(path[-1])
        elif op == "number":
            # a count somewhere in the spec (an int, or a string of one) becomes an edge value
            paths = [p for p in _paths(target) if p[0] == "spec" and _is_count(_parent(target, p)[p[-1]])]
            if not paths:
                continue
            path = draw(st.sampled_from(paths))
            _parent(target, path)[path[-1]] = draw(COUNTS)
        elif op in ("label", "annotation"):
            section = "labels" if op == "label" else "annotations"
            meta = target.setdefault("metadata", {})
            if not isinstance(meta.get(section), dict):
                meta[section] = {}
            meta[section][draw(LABEL_KEYS)] = draw(LABEL_VALUES)
        elif op == "swap_kind":
            tops = [x for x in objs if not _is_pod(x) and not o.owner_references(x)]
            if not tops:
                continue
            top = draw(st.sampled_from(tops))
            old = (top.get("apiVersion"), top.get("kind"), o.name(top))
            group, version, kind = draw(top_gvks())
            top["apiVersion"], top["kind"] = _api_version(group, version), kind
            for x in objs:
                for ref in o.owner_references(x):
                    if (ref.get("apiVersion"), ref.get("kind"), ref.get("name")) == old:
                        ref["apiVersion"], ref["kind"] = top["apiVersion"], kind
        elif op == "missing_owner":
            owners = [i for i, x in enumerate(objs) if not _is_pod(x)]
            if owners:
                removed.add(draw(st.sampled_from(owners)))
        elif op == "uid_mismatch":
            refs = o.owner_references(target)
            if refs:
                draw(st.sampled_from(refs))["uid"] = draw(st.uuids().map(str))
        elif op == "cycle":
            # the target (an owner, or a pod) gets a reference to an object below it, or to itself
            other = draw(st.sampled_from(objs))
            _refs(target).insert(draw(st.integers(0, len(_refs(target)))), _ref_to(other, draw(st.sampled_from([True, None]))))
        elif op == "extra_owner":
            other = draw(st.one_of(st.sampled_from(objs), st.builds(
                lambda k, n, u: {"apiVersion": "example.com/v1", "kind": k, "metadata": {"name": n, "uid": u}},
                st.sampled_from(["Widget", "Job", "ReplicaSet"]), DNS_LABEL, st.uuids().map(str))))
            refs = _refs(target)
            refs.insert(draw(st.integers(0, len(refs))), _ref_to(other, draw(st.sampled_from([True, False, None]))))
        elif op == "controller_flags":
            for ref in o.owner_references(target):
                choice = draw(st.sampled_from([True, False, None, "true", 1]))
                if choice is None:
                    ref.pop("controller", None)
                else:
                    ref["controller"] = choice
        elif op == "forbid":
            gvk = GVK.of(target)
            forbidden.add((gvk.group, gvk.kind))
        elif op == "pod_typemeta" and _is_pod(target):
            target.pop("apiVersion", None)
            target.pop("kind", None)
        elif op == "scheduler":
            spec = target.get("spec")
            if isinstance(spec, dict):
                spec["schedulerName"] = draw(st.sampled_from(["kai-scheduler", "default-scheduler", "", None]))
        elif op == "deleting":
            target.setdefault("metadata", {})["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        elif op == "rename":
            new = draw(NAMES)
            old_name = o.name(target)
            target.setdefault("metadata", {})["name"] = new
            for x in objs:
                for ref in o.owner_references(x):
                    if ref.get("name") == old_name and ref.get("kind") == target.get("kind"):
                        ref["name"] = new
        elif op == "clear_uid":
            target.setdefault("metadata", {})["uid"] = draw(st.sampled_from(["", None]))
    store = [x for i, x in enumerate(objs) if i not in removed]
    return store, forbidden


@st.composite
def mutated_examples(draw: st.DrawFn, max_ops: int = 6) -> tuple[str, list[dict[str, Any]], list[dict], set]:
    w = world()
    name = draw(st.sampled_from(sorted(w["examples"])))
    objs = copy.deepcopy(w["examples"][name])
    store, forbidden = draw(mutate(objs, max_ops))
    pods = [x for x in objs if isinstance(x.get("metadata"), dict) and x.get("kind", "Pod") == "Pod"
            and x.get("apiVersion", "v1") == "v1"]
    return name, store, pods, forbidden


# ---------------------------------------------------------------- strategies: synthetic workloads


def _meta(name: str, ns: str, uid: str | None, labels: dict, annotations: dict) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if uid is not None:
        meta["uid"] = uid
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return meta


LABEL_MAPS = st.dictionaries(LABEL_KEYS, LABEL_VALUES, max_size=5)
INTERMEDIATE_GVKS = [
    ("batch", "v1", "Job"), ("apps", "v1", "ReplicaSet"), ("apps", "v1", "StatefulSet"),
    ("serving.knative.dev", "v1", "Revision"), ("serving.knative.dev", "v1", "Configuration"),
    ("grove.io", "v1alpha1", "PodClique"), ("ray.io", "v1", "RayCluster"),
    ("jobset.x-k8s.io", "v1alpha2", "JobSet"), ("example.com", "v1", "Widget"),
]


@st.composite
def synthetic_workloads(draw: st.DrawFn) -> tuple[str, list[dict[str, Any]], list[dict], set]:
    w = world()
    ns = draw(NAMESPACES)
    group, version, kind = draw(top_gvks())
    seeds = [x for objs in w["examples"].values() for x in objs
             if GVK.of(x).kind == kind and GVK.of(x).group == group and isinstance(x.get("spec"), dict)]
    spec: dict[str, Any]
    use_seed: bool = draw(st.booleans())
    if seeds and use_seed:
        spec = copy.deepcopy(draw(st.sampled_from(seeds))["spec"])
    else:
        spec = draw(st.dictionaries(st.sampled_from(SPEC_KEYS), JUNK, max_size=5))
    top = {"apiVersion": _api_version(group, version), "kind": kind,
           "metadata": _meta(draw(NAMES), ns, draw(UIDS), draw(LABEL_MAPS), draw(LABEL_MAPS)), "spec": spec}
    chain: list[dict[str, Any]] = [top]
    for _ in range(draw(st.integers(0, 2))):
        g, v, k = draw(st.sampled_from(INTERMEDIATE_GVKS))
        inter: dict[str, Any] = {"apiVersion": _api_version(g, v), "kind": k,
                 "metadata": _meta(draw(NAMES), ns, draw(UIDS), draw(LABEL_MAPS), draw(LABEL_MAPS)),
                 "spec": draw(st.dictionaries(st.sampled_from(SPEC_KEYS), JUNK, max_size=3))}
        inter["metadata"]["ownerReferences"] = [_ref_to(chain[-1], draw(st.sampled_from([True, None])))]
        chain.append(inter)
    pods: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 4))):
        owner = chain[-1] if draw(st.integers(0, 3)) < 3 else draw(st.sampled_from(chain))
        pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
               "metadata": _meta(f"p{i}-{draw(DNS_LABEL)}", ns, draw(st.uuids().map(str)),
                                 draw(LABEL_MAPS), draw(LABEL_MAPS)),
               "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "i"}]}}
        if draw(st.integers(0, 9)) < 9:  # mostly owned; sometimes a bare pod
            pod["metadata"]["ownerReferences"] = [_ref_to(owner, draw(st.sampled_from([True, None])))]
        pods.append(pod)
    objs = chain + pods
    store, forbidden = draw(mutate(objs, 3))
    return f"synthetic {kind}", store, pods, forbidden


# ---------------------------------------------------------------- the properties


def _record(d: Decision) -> str:
    return json.dumps(d.to_record(), sort_keys=True)


def check_decision(pod: dict[str, Any], d: Decision, again: Decision) -> None:
    assert isinstance(d, Decision)
    assert d.outcome in OUTCOMES, d.outcome
    assert d.reason != "InternalError", f"exception inside the core or a plugin: {d.message}"
    assert _record(d) == _record(again), "deciding the same pod twice gave different records"
    if d.outcome != "grouped":
        assert d.pod_group is None and d.sub_group is None
        return
    md = d.pod_group
    assert md is not None
    assert validate_pod_group(md) == [], validate_pod_group(md)
    assert is_subdomain(md.name) and len(md.name) <= MAX_NAME_LENGTH, md.name
    assert md.namespace == o.namespace(pod), (md.namespace, o.namespace(pod))
    assert_int32_counts(md)
    json.dumps(md.to_object())
    holders = [sg.name for sg in md.sub_groups for p in sg.pods if p == o.name(pod)]
    assert len(holders) <= 1, f"pod {o.name(pod)} in several sub-groups: {holders}"
    assert d.sub_group == (holders[0] if holders else None)


def assert_int32_counts(md: Any) -> None:
    """minMember / minSubGroup are int32 in the PodGroup API (kai-podgrouper.md §3.1): a larger value
    cannot be written (and KAI, in Go, would have wrapped around)."""
    counts = [("spec.minMember", md.min_member), ("spec.minSubGroup", md.min_sub_group)]
    for sg in md.sub_groups:
        counts += [(f"subGroups[{sg.name}].minMember", sg.min_member),
                   (f"subGroups[{sg.name}].minSubGroup", sg.min_sub_group)]
    too_big = [(f, v) for f, v in counts if v is not None and v > INT32_MAX]
    assert not too_big, f"PodGroup {md.name}: counts beyond int32: {too_big}"


def check_plan(decisions: list[Decision]) -> None:
    merged = merge_decisions(decisions)
    keys = [(m.metadata.namespace, m.metadata.name) for m in merged]
    assert len(keys) == len(set(keys)), f"several merged PodGroups share a name: {keys}"
    grouped = [d for d in decisions if d.outcome == "grouped"]
    owners = Counter(d_key for m in merged for d_key in (f"{m.metadata.namespace}/{p}" for p in m.pods))
    assert all(owners[d.pod_key] == 1 for d in grouped), "a grouped pod is in zero or several merged PodGroups"
    assert sum(owners.values()) == len(grouped)
    for m in merged:
        md = m.metadata
        errors = validate_pod_group(md)
        assert errors == [], errors
        assert_int32_counts(md)
        members = Counter(p for sg in md.sub_groups for p in sg.pods)
        several = [p for p, n in members.items() if n > 1]
        assert not several, f"PodGroup {md.name}: pods in several sub-groups: {several}"
        names = set(m.pods)
        assert set(members) <= names, f"PodGroup {md.name} lists pods it has no decision for"


def run_workload(label: str, store: list[dict[str, Any]], pods: list[dict], forbidden: set) -> list[Decision]:
    grouper: Grouper = world()["grouper"]
    note(f"{label}: {len(store)} objects, {len(pods)} pods, forbidden {sorted(forbidden)}")
    decisions = []
    for pod in pods:
        d = grouper.decide(pod, InMemoryLookups(store, forbidden=forbidden))
        again = grouper.decide(pod, InMemoryLookups(store, forbidden=forbidden))
        note(f"pod {o.name(pod)!r}: {d.outcome} {d.reason} {d.message[:300]}")
        check_decision(pod, d, again)
        if currently_in_test_context():
            event(f"{d.outcome}: {d.reason}")
            event(f"plugin: {d.plugin}")
        decisions.append(d)
    # pods with the same namespace/name would collide in a real namespace and in the merge
    keys = [(o.namespace(p), o.name(p)) for p in pods]
    if len(keys) == len(set(keys)):
        check_plan(decisions)
    return decisions


@pytest.fixture(autouse=True)
def _quiet_internal_errors() -> Iterator[None]:
    # InternalError decisions fail the test with their message; the logged traceback is noise here.
    logger = logging.getLogger("grouper.core.grouping")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


@SETTINGS
@given(mutated_examples())
def test_mutated_examples_always_decide(case: tuple[str, list[dict[str, Any]], list[dict], set]) -> None:
    run_workload(*case)


@settings(SETTINGS, max_examples=examples(150))
@given(synthetic_workloads())
def test_synthetic_workloads_always_decide(case: tuple[str, list[dict[str, Any]], list[dict], set]) -> None:
    run_workload(*case)


@settings(SETTINGS, max_examples=examples(100))
@given(mutated_examples(max_ops=2))
def test_plan_merge_one_pod_group_per_name(case: tuple[str, list[dict[str, Any]], list[dict], set]) -> None:
    """``grouper plan`` semantics on lightly edited examples, where most pods are grouped."""
    name, store, pods, forbidden = case
    keys = [(o.namespace(p), o.name(p)) for p in pods]
    assume(len(keys) == len(set(keys)))
    decisions = run_workload(name, store, pods, forbidden)
    by_name: dict[tuple[str, str], set[str]] = {}
    for d in decisions:
        if d.outcome == "grouped" and d.pod_group is not None:
            by_name.setdefault((d.pod_group.namespace, d.pod_group.name), set()).add(d.pod_name)
    merged = {(m.metadata.namespace, m.metadata.name): m for m in merge_decisions(decisions)}
    assert set(merged) == set(by_name)
    for key, pod_names in by_name.items():
        assert set(merged[key].pods) == pod_names


@settings(SETTINGS, max_examples=examples(60))
@given(st.deferred(lambda: st.sampled_from(sorted(world()["examples"]))), st.data())
def test_owner_errors_only_for_broken_chains(name: str, data: st.DataObject) -> None:
    """An intact owner chain (every referenced owner exists; a reference without a uid cannot
    mismatch) never ends in OwnerNotFound / OwnerUidMismatch — also when objects carry no uid, as
    hand-written manifests for ``grouper plan`` usually do."""
    objs = copy.deepcopy(world()["examples"][name])
    owners = [x for x in objs if not _is_pod(x)]
    stripped = data.draw(st.lists(st.sampled_from(owners), unique_by=id, min_size=1 if owners else 0)) if owners else []
    stripped_keys = {(x.get("kind"), o.name(x)) for x in stripped}
    for x in stripped:
        x["metadata"].pop("uid", None)
    for x in objs:
        for ref in o.owner_references(x):
            if (ref.get("kind"), ref.get("name")) in stripped_keys:
                ref.pop("uid", None)
    note(f"uids removed from {sorted(stripped_keys)}")
    decisions = run_workload(name, objs, [x for x in objs if _is_pod(x)], set())
    broken = [(d.pod_name, d.message) for d in decisions if d.reason in ("OwnerNotFound", "OwnerUidMismatch")]
    assert not broken, broken


@settings(SETTINGS, max_examples=examples(80))
@given(mutated_examples(max_ops=2), st.randoms(use_true_random=False))
def test_irrelevant_changes_do_not_change_decisions(case: tuple, rnd: Any) -> None:
    """Metamorphic: the order of objects in the lookups, a pod read from a typed list (no
    apiVersion/kind), an unrelated pod label/annotation and the order of decisions given to
    ``merge_pod_groups`` change nothing."""
    _, store, pods, forbidden = case
    keys = [(o.namespace(p), o.name(p)) for p in pods]
    assume(len(keys) == len(set(keys)) and all(isinstance(p.get("metadata"), dict) for p in pods))
    grouper: Grouper = world()["grouper"]
    base = [grouper.decide(p, InMemoryLookups(store, forbidden=forbidden)) for p in pods]
    shuffled = list(store)
    rnd.shuffle(shuffled)
    for pod, d in zip(pods, base, strict=True):
        variant = copy.deepcopy(pod)
        variant.pop("apiVersion", None)
        variant.pop("kind", None)
        meta = variant["metadata"]
        for section in ("labels", "annotations"):
            if isinstance(meta.get(section), dict) or meta.get(section) is None:
                meta[section] = {**(meta.get(section) or {}), "unrelated.example.com/note": "x"}
        # the stored copy keeps its type (a lookup by kind finds it, e.g. through a self-reference)
        typed = {**variant, "apiVersion": pod.get("apiVersion"), "kind": pod.get("kind")}
        stored = [typed if x is pod else x for x in shuffled]
        other = grouper.decide(variant, InMemoryLookups(stored, forbidden=forbidden))
        note(f"pod {o.name(pod)}: {d.outcome} {d.reason} {d.message[:200]} / {other.outcome} {other.message[:200]}")
        assert (other.outcome, other.reason) == (d.outcome, d.reason)
        if d.pod_group is not None:
            assert other.pod_group is not None
            assert (other.pod_group.name, other.pod_group.spec(), other.sub_group) == (
                d.pod_group.name, d.pod_group.spec(), d.sub_group)
    if len(keys) == len(set(keys)):
        creation = {f"{o.namespace(p)}/{o.name(p)}": str(o.meta(p).get("creationTimestamp") or "") for p in pods}
        merged = [m.metadata.to_object() for m in merge_decisions(base, creation)]
        again = list(base)
        rnd.shuffle(again)
        assert [m.metadata.to_object() for m in merge_decisions(again, creation)] == merged


def test_unmutated_examples_are_all_handled() -> None:
    """Sanity: the generators start from examples that group cleanly (no errors at all)."""
    w = world()
    for name, objs in w["examples"].items():
        decisions = run_workload(name, copy.deepcopy(objs), [x for x in objs if _is_pod(x)], set())
        errors = [(d.pod_name, d.message) for d in decisions if d.outcome == "error"]
        assert not errors, (name, errors)
        assert any(d.outcome == "grouped" for d in decisions), name


# Minimal reproducers of failures the properties above found (kept so they fail deterministically until
# fixed): one edit of an example workload, then every pod of it must satisfy the same properties.
REGRESSIONS = {
    # sum of replicas beyond int32 -> minMember 2147483648 (MPIJob Launcher 1 + Worker 2147483647)
    "mpijob-minmember-int32": ("mpijob", "MPIJob", ("spec", "mpiReplicaSpecs", "Worker", "replicas"), INT32_MAX),
    "tfjob-minmember-int32": ("tfjob", "TFJob", ("spec", "tfReplicaSpecs", "Worker", "replicas"), INT32_MAX),
    "xgboostjob-minmember-int32": ("xgboostjob", "XGBoostJob", ("spec", "xgbReplicaSpecs", "Worker", "replicas"),
                                   INT32_MAX),
    # 1 (head) + minReplicas x numOfHosts -> 2147483648
    "raycluster-minmember-int32": ("raycluster", "RayCluster", ("spec", "workerGroupSpecs", 0, "numOfHosts"),
                                   INT32_MAX),
    # sum of the PodGang's podgroups[].minReplicas -> 2147483649
    "grove-minmember-int32": ("grove-podcliqueset", "PodGang", ("spec", "podgroups", 0, "minReplicas"), INT32_MAX),
    # Karta (catalog milvus-io-milvus-v1beta1): sum of component scales -> 2147483652
    "milvus-karta-minmember-int32": ("milvus", "Milvus", ("spec", "components", "queryNode", "replicas"), INT32_MAX),
}


@pytest.mark.parametrize("case", sorted(REGRESSIONS))
def test_regressions(case: str) -> None:
    example, kind, path, value = REGRESSIONS[case]
    objs = copy.deepcopy(world()["examples"][example])
    target = next(x for x in objs if x.get("kind") == kind)
    _parent(target, path)[path[-1]] = value
    run_workload(case, objs, [x for x in objs if _is_pod(x)], set())


# ---------------------------------------------------------------- structurally broken objects


WRONG_TYPES = st.one_of(st.text(max_size=4), st.integers(), st.lists(st.text(max_size=3), max_size=2), st.booleans())


def test_regression_uidless_owners_are_not_a_cycle() -> None:
    """Found by test_owner_errors_only_for_broken_chains: ``resolve_owners`` keeps a set of seen uids
    starting with the pod's, so two objects without a uid in one chain (typical hand-written
    ``grouper plan`` input) are reported as "owner reference cycle"."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ns"}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "ns",
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "controller": True}]},
           "spec": {"schedulerName": "kai-scheduler"}}
    d = world()["grouper"].decide(pod, InMemoryLookups([job]))
    assert d.reason != "OwnerNotFound", d.message


def test_regression_pod_metadata_not_a_mapping() -> None:
    """Found by the test below: ``Grouper.decide`` builds the Decision (``o.namespace(pod)``) outside its
    try block, so a pod whose metadata is not a mapping raises AttributeError out of decide."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": "x", "spec": {"schedulerName": "kai-scheduler"}}
    d = world()["grouper"].decide(pod, InMemoryLookups())
    assert d.outcome == "error"


@settings(SETTINGS, max_examples=examples(120))
@given(mutated_examples(max_ops=2), st.data())
def test_structurally_broken_objects_still_give_a_decision(case: tuple, data: st.DataObject) -> None:
    """metadata / labels / annotations / ownerReferences / spec of the wrong JSON type: no exception
    escapes ``decide``. (InternalError is tolerated here: such objects cannot come from an API server.)"""
    _, store, pods, forbidden = case
    victim = data.draw(st.sampled_from(store + pods))
    where = data.draw(st.sampled_from(["metadata", "labels", "annotations", "ownerReferences", "ownerRef", "spec"]))
    junk = data.draw(WRONG_TYPES)
    if where in ("metadata", "spec"):
        victim[where] = junk
    elif isinstance(victim.get("metadata"), dict):
        if where == "ownerRef" and o.owner_references(victim):
            victim["metadata"]["ownerReferences"][0] = junk
        else:
            victim["metadata"][where] = junk
    grouper: Grouper = world()["grouper"]
    for pod in pods:
        try:
            d = grouper.decide(pod, InMemoryLookups([x for x in store if isinstance(x.get("metadata"), dict)],
                                                    forbidden=forbidden))
        except Exception as exc:  # pragma: no cover - reported by the assertion
            pytest.fail(f"exception escaped Grouper.decide for {where}={junk!r}: {exc!r}")
        assert d.outcome in OUTCOMES
