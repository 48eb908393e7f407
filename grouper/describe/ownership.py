"""Which pods belong to a workload: by ownerReference chain to the workload's UID (not selectors).

A pod belongs when some chain of ownerReferences leads from it to the workload within
``MAX_DEPTH`` hops (KServe serverless: Pod -> ReplicaSet -> Deployment -> Revision ->
Configuration -> Knative Service -> InferenceService is 6). Intermediate owners must be among the
given objects (other pods count too: an LWS leader pod owns its workers' StatefulSet).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from grouper.model.objects import owner_references, uid

MAX_DEPTH = 6

Obj = dict[str, Any]


def owned_by(root: Obj, obj: Obj, index: dict[str, Obj], max_depth: int = MAX_DEPTH) -> bool:
    """Whether ``obj`` reaches ``root`` through ownerReferences in at most ``max_depth`` hops."""
    target = uid(root)
    if not target:
        return False
    frontier = [str(r.get("uid") or "") for r in owner_references(obj) if isinstance(r, dict)]
    seen: set[str] = set()
    for _ in range(max_depth):
        if target in frontier:
            return True
        nxt: list[str] = []
        for u in frontier:
            if not u or u in seen:
                continue
            seen.add(u)
            owner = index.get(u)
            if owner is not None:
                nxt.extend(str(r.get("uid") or "") for r in owner_references(owner) if isinstance(r, dict))
        if not nxt:
            return False
        frontier = nxt
    return False


def index_by_uid(objects: Iterable[Obj]) -> dict[str, Obj]:
    return {u: o for o in objects if isinstance(o, dict) and (u := uid(o))}


def pods_of(root: Obj, pods: Iterable[Obj], objects: Iterable[Obj] = (), max_depth: int = MAX_DEPTH) -> list[Obj]:
    """The pods owned (directly or through intermediate owners) by ``root``, deduplicated."""
    pod_list = [p for p in pods if isinstance(p, dict)]
    index = index_by_uid([*objects, *pod_list, root])
    out: list[Obj] = []
    seen: set[str] = set()
    for p in pod_list:
        key = uid(p) or f"{(p.get('metadata') or {}).get('namespace')}/{(p.get('metadata') or {}).get('name')}"
        if key in seen:
            continue
        if owned_by(root, p, index, max_depth):
            seen.add(key)
            out.append(p)
    return out
