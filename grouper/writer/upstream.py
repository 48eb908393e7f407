"""The upstream output backend: write a decision as ``scheduling.k8s.io`` Workload + PodGroups.

Same write strategy as :mod:`grouper.writer.podgroups` (create, else a full update carrying the read
``resourceVersion``; on a conflict re-read and retry) and the same :class:`WriteExpectations` tracker.
There is no informer for these kinds: the expectations answer for our own recent writes, and a create
that finds the object already there (a restart, another writer) reads it and compares. What an update
may change is what the API lets change: ``gang.minCount``, labels, annotations, owner references; the
rest (templates, workloadRef, policy kind, priorityClassName) is fixed at creation, and a decision that
wants it different is reported as a note instead of being refused by the API server on every reconcile.

API versions are picked from discovery (:func:`grouper.core.upstream.choose_versions`): the newest version
serving both Workload and PodGroup; a version serving only one is refused, logged and counted, never mixed.
Before writing, the object tree is checked (the API server does not: it accepts a PodGroup whose parent is
missing); a broken tree is an error and nothing is written. After a create, the stored object (the create's
answer) is compared with what was sent: a field the API server dropped (a feature gate off) is noted,
counted and reported as an Event, as is a gang whose pods differ in priority (it never binds).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Callable
from typing import Any

from grouper.core.upstream import (
    COMPOSITE_KIND,
    COMPOSITE_VERSIONS,
    GROUP,
    PODGROUP_KIND,
    WORKLOAD_KIND,
    WORKLOAD_VERSIONS,
    UpstreamObjects,
    UpstreamVersions,
    choose_versions,
    dropped_fields,
    field_label,
    membership_notes,
    min_count,
    priority_warning,
    scheduling_group,
    to_upstream,
)
from grouper.core.workload_group_upstream import UpstreamGroupObjects
from grouper.kube.discovery import WELL_KNOWN, Discovery, Resource
from grouper.kube.transport import ApiError, KubeClient
from grouper.model import objects as o
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import PodGroupMetadata
from grouper.observability.metrics import Metrics
from grouper.writer.events import EventRecorder, InvolvedObject
from grouper.writer.expectations import WriteExpectations
from grouper.writer.podgroups import NotLeader, Operation, normalize_owner_refs

log = logging.getLogger(__name__)

PRIORITY_CLASS_TTL = 60.0
# expectation kinds: distinct from the KAI PodGroup's "PodGroup"
EXPECT_WORKLOAD = "Workload.scheduling.k8s.io"
EXPECT_PODGROUP = "PodGroup.scheduling.k8s.io"


class UpstreamApiMissing(ApiError):
    """No version of the API server serves both Workload and PodGroup (feature gate GenericWorkload off,
    or a version served in part). An ``ApiError`` 404: the reconciler records it for the PodGroup and
    retries with back-off (a server upgraded or reconfigured is found again)."""

    def __init__(self, message: str) -> None:
        super().__init__(404, "NotFound", message)


class UpstreamInvalid(ApiError):
    """The objects would break the rules the API server does not check (the tree): refused before any
    write, like the API server's own 422 (terminal: retried when the workload changes)."""

    def __init__(self, message: str) -> None:
        super().__init__(422, "Invalid", message)


async def discover(discovery: Discovery) -> tuple[UpstreamVersions | None, dict[str, str], str | None]:
    """(versions to use or None, refused partly served versions, why nothing can be used) from discovery."""
    served: dict[str, set[str]] = {}
    for version in dict.fromkeys((*WORKLOAD_VERSIONS, *COMPOSITE_VERSIONS)):
        served[version] = {r.kind for r in await discovery.served(GROUP, version)}
    choice = choose_versions(served)
    return choice.versions, choice.partial, choice.problem()


async def resolve_resources(discovery: Discovery) -> tuple[Resource, Resource]:
    """The Workload and PodGroup resources, of one version (see :func:`discover`)."""
    versions, _, problem = await discover(discovery)
    if versions is None:
        raise UpstreamApiMissing(problem or "no Workload API")
    wl = await discovery.resolve(GVK.from_api_version(versions.workload, WORKLOAD_KIND))
    pg = await discovery.resolve(GVK.from_api_version(versions.pod_group, PODGROUP_KIND))
    if wl is None or pg is None:  # discovery changed between the two reads
        raise UpstreamApiMissing(f"{WORKLOAD_KIND}/{PODGROUP_KIND} of {versions.workload} no longer served")
    return wl, pg


def _fixed_fields_differ(desired: Obj, existing: Obj) -> list[str]:
    """Creation-only parts of ``existing`` that ``desired`` wants otherwise (not writable)."""
    out = []
    dspec, espec = desired.get("spec") or {}, existing.get("spec") or {}
    if desired.get("kind") == WORKLOAD_KIND:
        names = [t.get("name") for t in dspec.get("podGroupTemplates") or []]
        if names != [t.get("name") for t in espec.get("podGroupTemplates") or []]:
            out.append("podGroupTemplates")
    else:
        for f in ("workloadRef", "podGroupTemplateRef", "priorityClassName"):
            if dspec.get(f) != espec.get(f):
                out.append(f)
        # immutable too; a stored object without it (the server dropped it) is reported as dropped instead
        if espec.get("schedulingConstraints") and dspec.get("schedulingConstraints") != espec.get("schedulingConstraints"):
            out.append("schedulingConstraints")
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
        metrics: Metrics | None = None,
        events: EventRecorder | None = None,
    ) -> None:
        self.client, self.discovery = client, discovery
        self.expectations = expectations
        self.can_write = can_write
        self.max_conflicts = max_conflicts
        self.metrics = metrics
        self.events = events
        self._resources: tuple[Resource, Resource] | None = None
        self.versions: UpstreamVersions | None = None
        self._refused: dict[str, str] = {}  # partly served versions already reported
        self._problem: str | None = None  # why nothing can be written, already logged
        self._priority_classes: dict[str, tuple[float, bool]] = {}  # name -> (when, exists)

    async def resources(self) -> tuple[Resource, Resource]:
        if self._resources is None:
            versions, partial, problem = await discover(self.discovery)
            self._report_versions(versions, partial, problem)
            if versions is None:
                raise UpstreamApiMissing(problem or "no Workload API")
            self._resources = await resolve_resources(self.discovery)
            self.versions = versions
        return self._resources

    def _report_versions(self, versions: UpstreamVersions | None, partial: dict[str, str], problem: str | None) -> None:
        """Log and count what discovery chose and refused (once per change)."""
        if partial != self._refused:
            for version, kind in partial.items():
                other = PODGROUP_KIND if kind == WORKLOAD_KIND else WORKLOAD_KIND
                log.warning(
                    "%s/%s serves %s but not %s: version refused, never mixed with another", GROUP, version, kind, other
                )
            self._refused = dict(partial)
        if self.metrics is not None:
            self.metrics.upstream_refused_versions.clear()
            for version in partial:
                self.metrics.upstream_refused_versions.labels(version=version).set(1)
        if versions is None:
            if problem != self._problem:  # once, not on every reconcile while it stands
                log.error("upstream backend cannot write: %s", problem)
            self._problem = problem
            return
        self._problem = None
        log.info(
            "upstream backend writes %s and %s as %s%s", WORKLOAD_KIND, PODGROUP_KIND, versions.workload,
            f"; {COMPOSITE_KIND} served as {versions.composite_pod_group} (not written)"
            if versions.composite_pod_group else "",
        )
        if self.metrics is not None:
            self.metrics.upstream_api.clear()
            for kind, av in ((WORKLOAD_KIND, versions.workload), (PODGROUP_KIND, versions.pod_group),
                             (COMPOSITE_KIND, versions.composite_pod_group)):
                if av:
                    self.metrics.upstream_api.labels(kind=kind, version=av.rpartition("/")[2]).set(1)

    async def plan(self, md: PodGroupMetadata) -> UpstreamObjects:
        await self.resources()
        assert self.versions is not None
        exists = await self._priority_class_exists(md.priority_class_name) if md.priority_class_name else True
        return to_upstream(md, self.versions, priority_class_exists=exists)

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
        Raises ``ApiError`` (``UpstreamInvalid`` for a tree the API server would accept broken: nothing
        is written) or ``NotLeader``."""
        objs = await self.plan(md)
        if objs.errors:
            raise UpstreamInvalid(
                "; ".join(objs.errors) + " (not written: the API server does not check the PodGroup tree, "
                "and a gang with a broken tree never binds)"
            )
        members = [(o.name(p), md.sub_group_of(o.name(p)), scheduling_group(p)) for p in pods]
        skip, notes = membership_notes(objs, members)
        objs.notes.extend(notes)
        if skip:
            return "unchanged", objs
        owner = InvolvedObject(md.owner.api_version, md.owner.kind, md.namespace, md.owner.name, md.owner.uid)
        mixed = priority_warning(md.name, pods)
        await self._report(owner, f"MixedPriority/{md.name}", mixed, objs.notes)
        wl_res, pg_res = await self.resources()
        dropped: list[str] = []
        # an existing Workload the API server refuses to change (a field it fixes that we do not know
        # of) is noted, not fatal: the PodGroups are what the scheduler reads, they are still converged
        ops = [
            await self._apply_one(
                wl_res, EXPECT_WORKLOAD, objs.workload, objs.notes, dropped, tolerate_invalid=True
            )
        ]
        for pg in objs.pod_groups:
            ops.append(await self._apply_one(pg_res, EXPECT_PODGROUP, pg, objs.notes, dropped))
        warning = None
        if dropped:
            text = (
                f"Warning: the API server did not store {', '.join(dropped)} (sent, silently dropped: a feature "
                "gate off on kube-apiserver?); the scheduler does not see them"
            )
            warning = (text, text)
        await self._report(owner, f"DroppedFields/{md.name}", warning, objs.notes)
        op: Operation = "created" if "created" in ops else "updated" if "updated" in ops else "unchanged"
        return op, objs

    async def _report(
        self, owner: InvolvedObject, cause: str, warning: tuple[str, str] | None, notes: list[str]
    ) -> None:
        """A warning (note, Event message) in the notes, and as one Event per cause while its message
        stands (cleared when it is gone)."""
        if warning is None:
            if self.events is not None:
                self.events.clear(owner, cause)
            return
        note, message = warning
        notes.append(note)
        if self.events is not None and owner.name and await self.events.report(owner, cause, message):
            log.warning("%s", note, extra={"podgroup": cause.partition("/")[2]})

    async def _apply_one(
        self,
        res: Resource,
        kind: str,
        desired: Obj,
        notes: list[str],
        dropped: list[str],
        *,
        tolerate_invalid: bool = False,
        stored: Obj | None = None,
    ) -> Operation:
        """Create or update one object; ``dropped`` gets the fields of ``desired`` it was stored without;
        ``stored``: the object as just listed (None: not known)."""
        meta = desired["metadata"]
        ns, name = meta["namespace"], meta["name"]
        existing = self.expectations.current(kind, ns, name, stored)
        for attempt in range(self.max_conflicts + 1):
            if existing is not None:
                fixed = _fixed_fields_differ(desired, existing)
                if fixed:
                    notes.append(
                        f"{desired['kind']} {name}: {', '.join(fixed)} fixed at creation, kept as stored"
                    )
                dropped.extend(f"{desired['kind']} {name} {f}" for f in dropped_fields(desired, existing))
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
                if existing is None:  # the answer is the object as stored: what did the server drop?
                    lost = dropped_fields(desired, written)
                    dropped.extend(f"{desired['kind']} {name} {f}" for f in lost)
                    if self.metrics is not None:
                        for f in lost:
                            self.metrics.upstream_dropped_fields.labels(
                                kind=desired["kind"], field=field_label(f)
                            ).inc()
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


    # ------------------------------------------------------------------ WorkloadGroups (several workloads)

    async def composite_resource(self) -> Resource | None:
        """The CompositePodGroup resource where the API server serves it (discovered with the versions)."""
        await self.resources()
        av = self.versions.composite_pod_group if self.versions is not None else None
        return await self.discovery.resolve(GVK.from_api_version(av, COMPOSITE_KIND)) if av else None

    async def _owned(self, res: Resource, namespace: str, owner_uid: str) -> dict[str, Obj]:
        items = await self.client.list_items(res.path(namespace))
        return {o.name(i): i for i in items
                if any(r.get("uid") == owner_uid for r in o.owner_references(i))}

    async def apply_group(self, objs: UpstreamGroupObjects | None, namespace: str, owner_uid: str) -> Operation:
        """Converge the objects owned by one WorkloadGroup (``owner_uid``) to ``objs``: the Workload, the
        CompositePodGroup (if any) and the PodGroups; ``objs`` None deletes them all (the group is not
        rendered: its gate is that the PodGroups its member pods name do not exist).

        The shape of a composite is fixed at creation (the Workload's templates, ``minGroupCount``, the
        children's parent and template): a changed member set deletes the group's objects and creates
        them anew. PodGroups the set no longer has are deleted. Listed, not watched: a group pass is rare."""
        wl_res, pg_res = await self.resources()
        cpg_res = await self.composite_resource()
        stored_wl = await self._owned(wl_res, namespace, owner_uid)
        stored_pg = await self._owned(pg_res, namespace, owner_uid)
        stored_cpg = await self._owned(cpg_res, namespace, owner_uid) if cpg_res is not None else {}
        notes = objs.notes if objs is not None else []
        deleted = 0
        if objs is not None:
            wname = objs.workload["metadata"]["name"]
            old = stored_wl.get(wname)
            if old is not None and _shape(old) != _shape(objs.workload):
                # another member set: nothing of the old shape can be changed in place
                for res, kind, found in ((cpg_res, COMPOSITE_KIND, stored_cpg), (pg_res, EXPECT_PODGROUP, stored_pg),
                                         (wl_res, EXPECT_WORKLOAD, stored_wl)):
                    for name, obj in list(found.items()):
                        if res is not None:
                            deleted += await self._delete(res, kind, obj)
                        found.pop(name)
        keep = set() if objs is None else {o.name(x) for x in objs.objects()}
        for res, kind, found in ((pg_res, EXPECT_PODGROUP, stored_pg), (cpg_res, COMPOSITE_KIND, stored_cpg),
                                 (wl_res, EXPECT_WORKLOAD, stored_wl)):
            for name, obj in found.items():
                if name not in keep and res is not None:
                    deleted += await self._delete(res, kind, obj)
        if objs is None:
            return "updated" if deleted else "unchanged"
        dropped: list[str] = []
        ops = [await self._apply_one(wl_res, EXPECT_WORKLOAD, objs.workload, notes, dropped,
                                     tolerate_invalid=True, stored=stored_wl.get(o.name(objs.workload)))]
        if objs.composite is not None:
            if cpg_res is None:
                raise UpstreamApiMissing(f"{COMPOSITE_KIND} is no longer served")
            ops.append(await self._apply_one(cpg_res, COMPOSITE_KIND, objs.composite, notes, dropped,
                                             stored=stored_cpg.get(o.name(objs.composite))))
        for pg in objs.pod_groups:
            ops.append(await self._apply_one(pg_res, EXPECT_PODGROUP, pg, notes, dropped,
                                             stored=stored_pg.get(o.name(pg))))
        if dropped:
            notes.append(f"Warning: the API server did not store {', '.join(dropped)} (a feature gate off on "
                         "kube-apiserver?); the scheduler does not see them")
        return "created" if "created" in ops else "updated" if "updated" in ops or deleted else "unchanged"

    async def _delete(self, res: Resource, kind: str, obj: Obj) -> int:
        if not self.can_write():
            raise NotLeader()
        ns, name, uid = o.namespace(obj), o.name(obj), o.uid(obj)
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        try:
            await self.client.request("DELETE", res.path(ns, name), body=body)
        except ApiError as e:
            if e.not_found or e.conflict:
                return 0
            raise
        self.expectations.deleted(kind, ns, name, uid)
        log.info("%s %s/%s deleted (its WorkloadGroup's members changed)", obj.get("kind") or kind, ns, name)
        return 1


def _shape(workload: Obj) -> list[tuple[str, Any, list[str]]]:
    """What of a group's Workload is fixed at creation: its composite templates and their children."""
    spec = workload.get("spec") or {}
    out = [(str(t.get("name")), (t.get("schedulingPolicy") or {}).get("gang"),
            [str(c.get("name")) for c in t.get("podGroupTemplates") or []])
           for t in spec.get("compositePodGroupTemplates") or []]
    out.extend((str(t.get("name")), "flat", []) for t in spec.get("podGroupTemplates") or [])
    return out


def upstream_desired(objs: UpstreamObjects) -> dict[str, Any]:
    """What the decision record shows as the desired state of the upstream backend."""
    return {"workload": objs.workload, "podGroups": objs.pod_groups}
