"""Small builders for Kubernetes objects (plain dicts) and grouping contexts used by plugin tests."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from grouper.core.config import GroupingConfig
from grouper.core.context import GroupingContext, Plugin
from grouper.core.lookups import InMemoryLookups
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import PodGroupMetadata, SubGroup

DEFAULTS_CM = ("kai-system", "kai-defaults")


def obj(
    api_version: str,
    kind: str,
    name: str,
    *,
    namespace: str | None = "default",
    uid: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    owner: Obj | None = None,
    spec: Mapping[str, Any] | None = None,
    **extra: Any,
) -> Obj:
    """Any object; ``owner`` adds an ownerReference to that object; ``extra`` becomes top-level keys."""
    meta: dict[str, Any] = {"name": name, "uid": uid if uid is not None else f"{name}-uid"}
    if namespace:
        meta["namespace"] = namespace
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    if owner is not None:
        meta["ownerReferences"] = [owner_ref(owner)]
    out: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": meta}
    if spec is not None:
        out["spec"] = dict(spec)
    out.update(extra)
    return out


def owner_ref(owner: Obj) -> dict[str, Any]:
    m = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": m["name"], "uid": m["uid"],
            "controller": True}


def owner(
    kind: str = "test_kind",
    api_version: str = "test_version",
    name: str = "test_name",
    *,
    namespace: str = "test_namespace",
    uid: str = "1",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    **kw: Any,
) -> Obj:
    """A workload object; defaults are KAI's default-grouper test fixture (``test_kind``/``1``)."""
    return obj(api_version, kind, name, namespace=namespace, uid=uid, labels=labels, annotations=annotations, **kw)


def pod(
    name: str = "test_pod",
    *,
    namespace: str = "test_namespace",
    uid: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    owner: Obj | None = None,
    priority_class: str | None = None,
    node_name: str | None = None,
    deleting: bool = False,
    typemeta: bool = True,
) -> Obj:
    """A pod (scheduler ``kai-scheduler``); ``typemeta=False`` drops apiVersion/kind as typed lists do."""
    spec: dict[str, Any] = {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "busybox"}]}
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    if node_name is not None:
        spec["nodeName"] = node_name
    p = obj("v1", "Pod", name, namespace=namespace, uid=uid, labels=labels, annotations=annotations,
            owner=owner, spec=spec)
    if deleting:
        p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if not typemeta:
        del p["apiVersion"], p["kind"]
    return p


def priority_class(name: str, value: int = 1000) -> Obj:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value}


def defaults_configmap(types: Iterable[Mapping[str, str]] | str, *, key: str = "types",
                       where: tuple[str, str] = DEFAULTS_CM) -> Obj:
    """The defaults ConfigMap; ``types`` is a list of entries or raw text for the ``types`` key."""
    data = types if isinstance(types, str) else json.dumps(list(types))
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": where[0], "name": where[1]},
            "data": {key: data}}


def podgroup(name: str, *, namespace: str = "default", owner: Obj | None = None,
             sub_groups: list[dict[str, Any]] | None = None) -> Obj:
    spec: dict[str, Any] = {"minMember": 1}
    if sub_groups:
        spec["subGroups"] = sub_groups
    out = obj("scheduling.run.ai/v2alpha2", "PodGroup", name, namespace=namespace, spec=spec)
    if owner is not None:
        out["metadata"]["ownerReferences"] = [owner_ref(owner)]
    return out


def lookups(*objects: Obj, defaults_cm: bool = False, forbidden: Iterable[tuple[str, str]] = ()) -> InMemoryLookups:
    """InMemoryLookups over ``objects``; ``defaults_cm=True`` points the flags at ``DEFAULTS_CM``."""
    return InMemoryLookups(objects, defaults_configmap=DEFAULTS_CM if defaults_cm else None, forbidden=forbidden)


def context(
    the_pod: Obj,
    top_owner: Obj | None = None,
    owners: list[Obj] | None = None,
    *,
    objects: Iterable[Obj] = (),
    defaults_cm: bool = False,
    config: GroupingConfig | None = None,
    plugins: Mapping[tuple[str, str, str], Plugin] | None = None,
    the_lookups: InMemoryLookups | None = None,
) -> GroupingContext:
    """A GroupingContext. ``top_owner`` None = bare pod (top owner is the pod, no owners);
    ``owners`` None = ``[top_owner]``; ``plugins`` backs ``plugin_for`` (exact GVK, then version ``*``)."""
    if top_owner is None:
        top, chain = the_pod, []
    else:
        top, chain = top_owner, (owners if owners is not None else [top_owner])
    table = dict(plugins or {})

    def plugin_for(gvk: GVK) -> Plugin | None:
        return table.get((gvk.group, gvk.version, gvk.kind)) or table.get((gvk.group, "*", gvk.kind))

    return GroupingContext(
        pod=the_pod,
        top_owner=top,
        owners=chain,
        lookups=the_lookups if the_lookups is not None else lookups(*objects, defaults_cm=defaults_cm),
        config=config or GroupingConfig(),
        plugin_for=plugin_for,
    )


def sub_group(md: PodGroupMetadata, name: str) -> SubGroup:
    """The one sub-group of ``md`` called ``name`` (fails the test when there is none or several)."""
    found = [s for s in md.sub_groups if s.name == name]
    assert len(found) == 1, f"{name} not in {[s.name for s in md.sub_groups]}"
    return found[0]


__all__ = ["context", "defaults_configmap", "lookups", "obj", "owner", "pod", "podgroup", "priority_class", "sub_group"]
