"""The upstream output backend: write a decision as ``scheduling.k8s.io`` Workload + PodGroups.

Same write strategy as :mod:`grouper.writer.podgroups` (create, else a full update carrying the read
``resourceVersion``; on a conflict re-read and retry) and the same :class:`WriteExpectations` tracker.
There is no informer for these kinds: the expectations answer for our own recent writes, and a create
that finds the object already there (a restart, another writer) reads it and compares. What an update
may change is what the API lets change: ``gang.minCount``, labels, annotations, owner references; the
rest (templates, workloadRef, policy kind, priorityClassName) is fixed at creation, and a decision that
wants it different is reported as a note instead of being refused by the API server on every reconcile.

API versions are picked from discovery, the newest stable-most version that serves each kind.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Callable
from typing import Any

from grouper.core.upstream import (
    GROUP,
    PODGROUP_KIND,
    WORKLOAD_KIND,
    UpstreamObjects,
    UpstreamVersions,
    membership_notes,
    min_count,
    scheduling_group,
    to_upstream,
)
from grouper.kube.discovery import WELL_KNOWN, Discovery, Resource
from grouper.kube.transport import ApiError, KubeClient
from grouper.model import objects as o
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import PodGroupMetadata
from grouper.writer.expectations import WriteExpectations
from grouper.writer.podgroups import NotLeader, Operation, normalize_owner_refs

log = logging.getLogger(__name__)

VERSION_PREFERENCE = ("v1", "v1beta1", "v1alpha3")
PRIORITY_CLASS_TTL = 60.0
# expectation kinds: distinct from the KAI PodGroup's "PodGroup"
EXPECT_WORKLOAD = "Workload.scheduling.k8s.io"
EXPECT_PODGROUP = "PodGroup.scheduling.k8s.io"


class UpstreamApiMissing(Exception):
    """The API server does not serve the Workload API (feature gate GenericWorkload off)."""


async def resolve_resources(discovery: Discovery) -> tuple[Resource, Resource]:
    """The Workload and PodGroup resources, each at the first served version of VERSION_PREFERENCE."""
    found: dict[str, Resource] = {}
    for kind in (WORKLOAD_KIND, PODGROUP_KIND):
        for version in VERSION_PREFERENCE:
            res = await discovery.resolve(GVK(GROUP, version, kind))
            if res is not None:
                found[kind] = res
                break
        else:
            raise UpstreamApiMissing(
                f"the API server serves no {kind}.{GROUP} in {', '.join(VERSION_PREFERENCE)} "
                "(kube-apiserver needs --feature-gates=GenericWorkload=true and "
                "--runtime-config=scheduling.k8s.io/v1beta1=true)"
            )
    return found[WORKLOAD_KIND], found[PODGROUP_KIND]


def _fixed_fields_differ(desired: Obj, existing: Obj) -> list[str]:
    """Creation-only parts of ``existing`` that ``desired`` wants otherwise (not writable)."""
    out = []
    dspec, espec = desired.get("spec") or {}, existing.get("spec") or {}
    if desired.get("kind") == WORKLOAD_KIND:
        names = [t.get("name") for t in dspec.get("podGroupTemplates") or []]
        if names != [t.get("name") for t in espec.get("podGroupTemplates") or []]:
            out.append("podGroupTemplates")
    else:
        for f in ("workloadRef", "priorityClassName"):
            if dspec.get(f) != espec.get(f):
                out.append(f)
    return out


def merged_object(desired: Obj, existing: Obj) -> Obj:
    """``existing`` with the mutable parts of ``desired``: minCounts, owner refs, labels, annotations."""
    out = copy.deepcopy(existing)
    spec = out.setdefault("spec", {})
    dspec = desired.get("spec") or {}
    if desired.get("kind") == WORKLOAD_KIND:
        wanted = {t["name"]: t for t in dspec.get("podGroupTemplates") or []}
        for t in spec.get("podGroupTemplates") or []:
            if t.get("name") in wanted and "gang" in (t.get("schedulingPolicy") or {}):
                t["schedulingPolicy"] = copy.deepcopy(wanted[t["name"]]["schedulingPolicy"])
    elif "gang" in (spec.get("schedulingPolicy") or {}):
        spec["schedulingPolicy"] = copy.deepcopy(dspec.get("schedulingPolicy"))
    meta, dmeta = out.setdefault("metadata", {}), desired.get("metadata") or {}
    meta["ownerReferences"] = copy.deepcopy(dmeta.get("ownerReferences") or [])
    for f in ("labels", "annotations"):
        merged = {**(meta.get(f) or {}), **(dmeta.get(f) or {})}
        if merged:
            meta[f] = merged
    meta.pop("managedFields", None)
    out.pop("status", None)
    return out


def needs_update(desired: Obj, existing: Obj) -> bool:
    merged = merged_object(desired, existing)
    em, mm = existing.get("metadata") or {}, merged.get("metadata") or {}
    return (
        (merged.get("spec") or {}) != (existing.get("spec") or {})
        or normalize_owner_refs(mm.get("ownerReferences")) != normalize_owner_refs(em.get("ownerReferences"))
        or (mm.get("labels") or {}) != (em.get("labels") or {})
        or (mm.get("annotations") or {}) != (em.get("annotations") or {})
    )


class UpstreamWriter:
    """Applies a decision as upstream objects; ``apply`` returns the operation on the Workload's set
    (``created`` if anything was created, ``updated`` if anything changed, else ``unchanged``)."""

    def __init__(
        self,
        client: KubeClient,
        discovery: Discovery,
        *,
        expectations: WriteExpectations,
        can_write: Callable[[], bool] = lambda: True,
        max_conflicts: int = 5,
    ) -> None:
        self.client, self.discovery = client, discovery
        self.expectations = expectations
        self.can_write = can_write
        self.max_conflicts = max_conflicts
        self._resources: tuple[Resource, Resource] | None = None
        self._priority_classes: dict[str, tuple[float, bool]] = {}  # name -> (when, exists)

    async def resources(self) -> tuple[Resource, Resource]:
        if self._resources is None:
            self._resources = await resolve_resources(self.discovery)
        return self._resources

    async def plan(self, md: PodGroupMetadata) -> UpstreamObjects:
        workload, pod_group = await self.resources()
        exists = await self._priority_class_exists(md.priority_class_name) if md.priority_class_name else True
        return to_upstream(
            md, UpstreamVersions(workload.api_version, pod_group.api_version), priority_class_exists=exists
        )

    async def _priority_class_exists(self, name: str) -> bool:
        """Whether the PriorityClass exists (cached for a minute; one GET per class, not per reconcile)."""
        hit = self._priority_classes.get(name)
        now = time.monotonic()
        if hit is not None and now - hit[0] < PRIORITY_CLASS_TTL:
            return hit[1]
        res = WELL_KNOWN[GVK("scheduling.k8s.io", "v1", "PriorityClass")]
        try:
            exists = await self.client.get_object(res.path(None, name)) is not None
        except ApiError as e:
            if not e.forbidden:
                raise
            log.warning("cannot read PriorityClass %s (forbidden): left out of the upstream PodGroups", name)
            exists = False
        self._priority_classes[name] = (now, exists)
        return exists

    async def apply(self, md: PodGroupMetadata, pods: list[Obj]) -> tuple[Operation, UpstreamObjects]:
        """Converge the Workload and its PodGroups to ``md`` (``pods``: the pods decided into it).
        Raises ``ApiError`` or ``NotLeader``."""
        objs = await self.plan(md)
        members = [(o.name(p), md.sub_group_of(o.name(p)), scheduling_group(p)) for p in pods]
        skip, notes = membership_notes(objs, members)
        objs.notes.extend(notes)
        if skip:
            return "unchanged", objs
        wl_res, pg_res = await self.resources()
        # an existing Workload the API server refuses to change (a field it fixes that we do not know
        # of) is noted, not fatal: the PodGroups are what the scheduler reads, they are still converged
        ops = [
            await self._apply_one(wl_res, EXPECT_WORKLOAD, objs.workload, objs.notes, tolerate_invalid=True)
        ]
        for pg in objs.pod_groups:
            ops.append(await self._apply_one(pg_res, EXPECT_PODGROUP, pg, objs.notes))
        op: Operation = "created" if "created" in ops else "updated" if "updated" in ops else "unchanged"
        return op, objs

    async def _apply_one(
        self, res: Resource, kind: str, desired: Obj, notes: list[str], *, tolerate_invalid: bool = False
    ) -> Operation:
        meta = desired["metadata"]
        ns, name = meta["namespace"], meta["name"]
        existing = self.expectations.current(kind, ns, name, None)
        for attempt in range(self.max_conflicts + 1):
            if existing is not None:
                fixed = _fixed_fields_differ(desired, existing)
                if fixed:
                    notes.append(
                        f"{desired['kind']} {name}: {', '.join(fixed)} fixed at creation, kept as stored"
                    )
                if not needs_update(desired, existing):
                    return "unchanged"
            if not self.can_write():
                raise NotLeader()
            try:
                if existing is None:
                    written = await self.client.create(res.path(ns), desired)
                else:
                    written = await self.client.replace(res.path(ns, name), merged_object(desired, existing))
            except ApiError as e:
                if e.status == 422 and existing is not None and tolerate_invalid:
                    notes.append(f"{desired['kind']} {name}: update refused: {e.reason}: {e.message}")
                    return "unchanged"
                if not e.conflict or attempt == self.max_conflicts:
                    raise
                existing = await self.client.get_object(res.path(ns, name))
                if attempt:
                    await asyncio.sleep(0.05 * attempt)
                continue
            if isinstance(written, dict):
                self.expectations.wrote(kind, written)
                log.info(
                    "%s %s/%s %s (minCount %s)",
                    desired["kind"],
                    ns,
                    name,
                    "created" if existing is None else "updated",
                    min_count(written) if desired["kind"] == PODGROUP_KIND else "-",
                )
            return "created" if existing is None else "updated"
        raise AssertionError("unreachable")  # pragma: no cover


def upstream_desired(objs: UpstreamObjects) -> dict[str, Any]:
    """What the decision record shows as the desired state of the upstream backend."""
    return {"workload": objs.workload, "podGroups": objs.pod_groups}
