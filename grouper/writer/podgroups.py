"""Create a PodGroup when missing; update it only when the normalized desired state differs.

Write strategy: **create (POST), else full update (PUT) carrying the read ``resourceVersion``.** The
update starts from the stored object, so fields we do not manage (finalizers, foreign labels,
annotations, status — ignored on the main resource anyway) survive, and a concurrent writer makes the
PUT fail with 409 instead of being overwritten; we then re-read the object from the API server (not the
cache, which may lag) and try again, a bounded number of times, without raising a warning Event.

What counts as different (kai-podgrouper.md §1.5, with upstream's nil-vs-empty ``subGroups`` bug fixed):
normalized spec, ownerReferences, and the desired labels/annotations as a *subset* of the stored ones.
Fields other writers own are taken from the stored object before comparing: ``spec.queue`` (fixed at
creation), ``spec.markUnschedulable``, ``spec.schedulingBackoff``, the node-pool label (only ever set at
creation) and the queue label, and the stored ``spec.topologyConstraint`` when the new one names no topology.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable
from typing import Any, Literal

from grouper.kube.discovery import WELL_KNOWN
from grouper.kube.transport import ApiError, KubeClient
from grouper.model.metadata_limits import TOTAL_ANNOTATION_SIZE_LIMIT, annotations_size, bound_metadata
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import PODGROUP_API_VERSION, PODGROUP_KIND, PodGroupMetadata
from grouper.observability.metrics import Metrics
from grouper.writer.expectations import WriteExpectations

log = logging.getLogger(__name__)

Operation = Literal["created", "updated", "unchanged"]
PODGROUP_RESOURCE = WELL_KNOWN[GVK.from_api_version(PODGROUP_API_VERSION, PODGROUP_KIND)]
FOREIGN_SPEC_FIELDS = ("markUnschedulable", "schedulingBackoff")
OWNER_REF_FIELDS = ("apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion")


class NotLeader(Exception):
    """This instance is not (or no longer) the leader: nothing may be written."""


def _clean(value: Any) -> Any:
    """Normalize for comparison: drop None and empty strings/lists/dicts at every level (absent == empty)."""
    if isinstance(value, dict):
        out = {k: _clean(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, "", [], {})}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def normalize_spec(spec: dict[str, Any] | None) -> dict[str, Any]:
    """A spec in canonical form: no empty values (``subGroups: []`` == no ``subGroups``)."""
    out: dict[str, Any] = _clean(spec or {})
    return out


def normalize_owner_refs(refs: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [{k: r[k] for k in OWNER_REF_FIELDS if r.get(k) not in (None, "")} for r in refs or []]


def preserve_foreign_fields(
    desired: Obj, existing: Obj, *, nodepool_label_key: str, queue_label_key: str
) -> Obj:
    """``desired`` with the fields other writers own taken from ``existing``: a new object, sharing the
    values it does not change with both (neither is changed). Only the top level, ``spec`` and ``metadata``
    are edited, so only they are copied (a deep copy of a JobSet's PodGroup and its 126 sub-groups was
    most of the cost of finding it unchanged after a restart)."""
    out = {**desired, "spec": dict(desired.get("spec") or {}), "metadata": dict(desired.get("metadata") or {})}
    spec = out["spec"]
    old_spec = existing.get("spec") or {}
    for f in FOREIGN_SPEC_FIELDS:
        spec.pop(f, None)
        if f in old_spec:
            spec[f] = old_spec[f]
    spec.pop("queue", None)
    if old_spec.get("queue"):
        spec["queue"] = old_spec["queue"]
    new_topology = spec.get("topologyConstraint") or {}
    if not new_topology.get("topology") and old_spec.get("topologyConstraint"):
        spec["topologyConstraint"] = old_spec["topologyConstraint"]
    meta = out["metadata"]
    labels = dict(meta.get("labels") or {})
    old_labels = (existing.get("metadata") or {}).get("labels") or {}
    for key in (nodepool_label_key, queue_label_key):
        if not key:
            continue
        if key in old_labels:
            labels[key] = old_labels[key]
        elif key == nodepool_label_key:
            labels.pop(key, None)  # the node-pool label is only ever set at creation
    meta["labels"] = labels
    return out


def _subset(want: dict[str, str] | None, have: dict[str, str] | None) -> bool:
    have = have or {}
    return all(have.get(k) == v for k, v in (want or {}).items())


def differences(desired: Obj, existing: Obj) -> list[str]:
    """Which parts of ``existing`` must change to satisfy ``desired`` (empty: no write needed)."""
    diffs = []
    if normalize_spec(desired.get("spec")) != normalize_spec(existing.get("spec")):
        diffs.append("spec")
    dm, em = desired.get("metadata") or {}, existing.get("metadata") or {}
    if normalize_owner_refs(dm.get("ownerReferences")) != normalize_owner_refs(em.get("ownerReferences")):
        diffs.append("ownerReferences")
    if not _subset(dm.get("labels"), em.get("labels")):
        diffs.append("labels")
    if not _subset(dm.get("annotations"), em.get("annotations")):
        diffs.append("annotations")
    return diffs


def updated_object(desired: Obj, existing: Obj) -> Obj:
    """The object to PUT: ``existing`` with spec and ownerReferences replaced, labels/annotations merged."""
    out = copy.deepcopy(existing)
    out["apiVersion"], out["kind"] = PODGROUP_API_VERSION, PODGROUP_KIND
    out["spec"] = copy.deepcopy(desired.get("spec") or {})
    meta = out.setdefault("metadata", {})
    dm = desired.get("metadata") or {}
    meta["ownerReferences"] = copy.deepcopy(dm.get("ownerReferences") or [])
    for f in ("labels", "annotations"):
        merged = {**(meta.get(f) or {}), **(dm.get(f) or {})}
        if f == "annotations" and annotations_size(merged) > TOTAL_ANNOTATION_SIZE_LIMIT:
            # the stored keys we no longer want and the new ones do not fit together (a workload that
            # replaced a large annotation): the stored ones not desired give way, largest first
            _, merged, dropped = bound_metadata({}, merged, keep=tuple(dm.get(f) or {}))
            log.warning(
                "PodGroup %s/%s: stored annotations %s",
                meta.get("namespace"),
                meta.get("name"),
                dropped.describe().replace("not copied from the workload", "removed"),
            )
        if merged:
            meta[f] = merged
    meta.pop("managedFields", None)  # the server keeps the stored ones when the request has none
    out.pop("status", None)  # status is a subresource; the main resource ignores it
    return out


class PodGroupWriter:
    """Applies desired PodGroups. ``existing`` reads the informer cache; ``can_write`` is the leader gate;
    ``expectations`` (shared with the event handlers) holds our writes the cache has not shown yet."""

    def __init__(
        self,
        client: KubeClient,
        *,
        existing: Callable[[str, str], Obj | None],
        expectations: WriteExpectations,
        can_write: Callable[[], bool] = lambda: True,
        nodepool_label_key: str = "kai.scheduler/node-pool",
        queue_label_key: str = "kai.scheduler/queue",
        metrics: Metrics | None = None,
        max_conflicts: int = 5,
    ) -> None:
        self.client = client
        self.existing = existing
        self.expectations = expectations
        self.can_write = can_write
        self.nodepool_label_key, self.queue_label_key = nodepool_label_key, queue_label_key
        self.metrics = metrics
        self.max_conflicts = max_conflicts

    def current(self, namespace: str, name: str) -> Obj | None:
        """The PodGroup as it is now: the cache, or our own newer write the watch has not delivered yet."""
        return self.expectations.current(PODGROUP_KIND, namespace, name, self.existing(namespace, name))

    def plan(self, md: PodGroupMetadata, existing: Obj | None) -> tuple[Operation, Obj]:
        """Pure: what would be written for ``md`` given the stored object (``unchanged`` → nothing)."""
        desired = md.to_object()
        if existing is None:
            return "created", desired
        desired = preserve_foreign_fields(
            desired,
            existing,
            nodepool_label_key=self.nodepool_label_key,
            queue_label_key=self.queue_label_key,
        )
        if not differences(desired, existing):
            return "unchanged", existing
        return "updated", updated_object(desired, existing)

    async def apply(self, md: PodGroupMetadata) -> Operation:
        """Converge the stored PodGroup to ``md``. Raises ``ApiError`` (after conflict retries) or ``NotLeader``."""
        existing = self.current(md.namespace, md.name)
        for attempt in range(self.max_conflicts + 1):
            op, obj = self.plan(md, existing)
            if op == "unchanged":
                self._count(op)
                return op
            if not self.can_write():
                raise NotLeader()
            try:
                if op == "created":
                    written = await self.client.create(PODGROUP_RESOURCE.path(md.namespace), obj)
                else:
                    written = await self.client.replace(PODGROUP_RESOURCE.path(md.namespace, md.name), obj)
            except ApiError as e:
                if not e.conflict or attempt == self.max_conflicts:
                    raise
                # AlreadyExists (cache lagging behind) or a stale resourceVersion: re-read and recompute
                log.debug(
                    "conflict writing PodGroup %s/%s (%s), retrying from fresh state",
                    md.namespace,
                    md.name,
                    e.reason,
                )
                existing = await self._read(md.namespace, md.name)
                if attempt:
                    await asyncio.sleep(0.05 * attempt)
                continue
            if isinstance(written, dict):
                self.expectations.wrote(PODGROUP_KIND, written)
            self._count(op)
            return op
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def annotate(self, namespace: str, name: str, uid: str, annotations: dict[str, str | None]) -> None:
        """Set (or, with None, remove) annotations of the stored PodGroup ``uid``, nothing else: an update
        (PUT, the verb the grouper has) of the object as cached, carrying its resourceVersion, so a newer
        version or another object under the name makes it fail (409) rather than be overwritten. What the
        hold rule marks a held PodGroup with. Raises ``ApiError`` or ``NotLeader``."""
        if not self.can_write():
            raise NotLeader()
        existing = self.current(namespace, name)
        if existing is None or (existing.get("metadata") or {}).get("uid") != uid:
            return  # gone or replaced meanwhile: its next reconcile decides again
        obj = copy.deepcopy(existing)
        meta = obj.setdefault("metadata", {})
        merged = {**(meta.get("annotations") or {}), **annotations}
        meta["annotations"] = {k: v for k, v in merged.items() if v is not None}
        meta.pop("managedFields", None)
        obj.pop("status", None)
        obj["apiVersion"], obj["kind"] = PODGROUP_API_VERSION, PODGROUP_KIND
        written = await self.client.replace(PODGROUP_RESOURCE.path(namespace, name), obj)
        if isinstance(written, dict):
            self.expectations.wrote(PODGROUP_KIND, written)
        self._count("updated")

    async def delete(self, namespace: str, name: str, uid: str) -> bool:
        """Delete a PodGroup we created, only if it is still that object (``preconditions.uid``).

        True when deleted or already gone; False when the name now holds another object (409)."""
        if not self.can_write():
            raise NotLeader()
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        try:
            await self.client.request("DELETE", PODGROUP_RESOURCE.path(namespace, name), body=body)
        except ApiError as e:
            if e.not_found:
                return True
            if e.conflict:
                return False
            raise
        self.expectations.deleted(PODGROUP_KIND, namespace, name, uid)
        if self.metrics is not None:
            self.metrics.podgroups_deleted.inc()
        return True

    async def _read(self, namespace: str, name: str) -> Obj | None:
        return await self.client.get_object(PODGROUP_RESOURCE.path(namespace, name))

    def _count(self, op: Operation) -> None:
        if self.metrics is not None:
            self.metrics.child(self.metrics.podgroups_written, op).inc()
