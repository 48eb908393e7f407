"""The cached shapes hold everything grouping reads, and grouping changes nothing it is given.

The controller decides on cached objects: pods as ``PodShape.slim`` keeps them (shared parts and all,
widened by the loaded Karta definitions' pod paths as ``KartaSync`` does) and owners as ``slim_owner``
keeps them. ``grouper plan`` decides on the full objects. For every example of ``examples/`` (the
goldens' inputs) both paths must give the same decisions and the same PodGroups. And because cached
objects are shared (siblings hold one labels dict, one ownerReferences list), ``Grouper.decide`` must
leave every object it reads exactly as it was.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from grouper.core.decision import Decision
from grouper.core.grouping import Grouper
from grouper.core.lookups import InMemoryLookups
from grouper.core.workload_plan import merge_decisions
from grouper.karta import DefinitionRegistry
from grouper.kube.cache import PodShape, slim_owner, slim_podgroup
from grouper.manifests import load_manifests
from grouper.runtime.composition import build_grouper
from grouper.runtime.settings import default_definitions_dir

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
GOLDENS = sorted(p.stem for p in (REPO / "tests" / "examples" / "expected").glob("*.json"))
INPUTS = {
    "jobset-demo": ["jobset-demo.yaml", "jobset-demo-pods.yaml"],
    "custom-batchling": ["custom-batchling.yaml", "batchling-karta.yaml"],
}
KARTA_KINDS = {"Karta", "ResourceInterface"}


def scenario(name: str) -> tuple[list[dict[str, Any]], Grouper, DefinitionRegistry]:
    """The example's objects (as the API server would hold them) and a grouper with its Kartas loaded."""
    registry = DefinitionRegistry(default_definitions_dir())
    objects = []
    for i, m in enumerate(load_manifests([EXAMPLES / f for f in INPUTS.get(name, [f"{name}.yaml"])])):
        if m.obj.get("kind") in KARTA_KINDS:
            assert registry.upsert_cluster_object(m.obj) is not None
            continue
        obj = copy.deepcopy(m.obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", f"uid-{name}-{i}")
        meta.setdefault("resourceVersion", str(100 + i))
        objects.append(obj)
    return objects, build_grouper(definitions=registry), registry


def decide_all(objects: list[dict[str, Any]], grouper: Grouper) -> list[Decision]:
    lookups = InMemoryLookups(objects)
    pods = sorted((x for x in objects if x.get("kind") == "Pod"), key=lambda p: p["metadata"]["name"])
    return [grouper.decide(p, lookups) for p in pods]


def cached(objects: list[dict[str, Any]], registry: DefinitionRegistry) -> list[dict[str, Any]]:
    """The objects as the controller's caches hold them."""
    shape = PodShape()
    for ld in registry.all():
        shape.widen(ld.definition.pod_paths())
    out = []
    for obj in copy.deepcopy(objects):
        if obj.get("kind") == "Pod":
            out.append(shape.slim(obj))
        elif obj.get("kind") == "PodGroup":
            out.append(slim_podgroup(obj))
        else:
            out.append(slim_owner(obj))
    return out


def _creation(objects: list[dict[str, Any]]) -> dict[str, str]:
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}": str(p["metadata"].get("creationTimestamp") or "")
            for p in objects if p.get("kind") == "Pod"}


@pytest.mark.parametrize("name", GOLDENS)
def test_decisions_on_the_cached_shapes_equal_those_on_the_full_objects(name: str) -> None:
    objects, grouper, registry = scenario(name)
    full = decide_all(objects, grouper)
    slim = decide_all(cached(objects, registry), grouper)
    assert full, f"{name}: no pods"
    assert [d.to_record() for d in slim] == [d.to_record() for d in full]
    full_groups = merge_decisions(full, _creation(objects))
    slim_groups = merge_decisions(slim, _creation(objects))
    assert [m.metadata.to_object() for m in slim_groups] == [m.metadata.to_object() for m in full_groups]


@pytest.mark.parametrize("name", GOLDENS)
def test_deciding_leaves_every_object_it_reads_unchanged(name: str) -> None:
    objects, grouper, registry = scenario(name)
    for objs in (objects, cached(objects, registry)):
        before = copy.deepcopy(objs)
        decide_all(objs, grouper)
        decide_all(objs, grouper)  # twice: caches inside the plugins must not write back either
        assert objs == before
