"""Helpers for the catalog tests: the built-in definitions and the fixture workloads.

A fixture file (``fixtures/<kind>/<scenario>.yaml``) holds the workload first, then its
intermediate owners and pods as the operator creates them (plus, sometimes, unrelated objects).
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from grouper.describe import pods_of
from grouper.karta import Evaluator, KartaDefinition, load_dir
from grouper.model.objects import GVK, name, namespace, uid
from grouper.model.podgroup import OwnerRef, PodGroupMetadata

REPO = Path(__file__).resolve().parents[2]
DEFINITIONS = REPO / "definitions"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

Obj = dict[str, Any]


@dataclass(frozen=True)
class Fixture:
    path: Path
    workload: Obj
    pods: list[Obj]  # the workload's pods (owner chain), in file order
    others: list[Obj]  # every other object in the file (owners, unrelated pods)
    documents: list[Obj]


@functools.cache
def catalog() -> dict[GVK, KartaDefinition]:
    defs, errors = load_dir(DEFINITIONS)
    assert not errors, errors
    return {d.gvk: d for d in defs}


@functools.cache
def evaluator(gvk: GVK) -> Evaluator:
    return Evaluator(catalog()[gvk])


@functools.cache
def fixture(rel: str) -> Fixture:
    path = FIXTURES / rel
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    workload, rest = docs[0], docs[1:]
    if workload.get("kind") == "Pod" and not workload.get("apiVersion", "v1").count("/"):
        pods = [workload]  # a bare pod is its own (only) pod
    else:
        pods = pods_of(workload, [d for d in rest if d.get("kind") == "Pod"], rest)
    mine = {id(p) for p in pods}
    return Fixture(path, workload, pods, [d for d in rest if id(d) not in mine], docs)


def definition_for(obj: Obj) -> KartaDefinition:
    return catalog()[GVK.of(obj)]


def base_metadata(workload: Obj) -> PodGroupMetadata:
    """What the default grouper would say; the Karta gang instructions start from it."""
    return PodGroupMetadata(
        name=f"pg-{name(workload)}-{uid(workload)}",
        namespace=namespace(workload),
        owner=OwnerRef.of(workload),
        labels={"team": "ml"},
        queue="team-a",
        min_member=1,
    )


def variant(obj: Obj, **spec_changes: Any) -> Obj:
    """A copy of ``obj`` with top-level ``spec`` fields replaced and a new resourceVersion (the
    evaluator caches per uid + resourceVersion)."""
    out = copy.deepcopy(obj)
    out["spec"].update(spec_changes)
    out["metadata"]["resourceVersion"] = str(int(out["metadata"].get("resourceVersion") or 0) + 1)
    return out
