"""Mark a pod with its PodGroup: annotation ``pod-group-name`` and label ``kai.scheduler/subgroup-name``.

A JSON merge patch touching only those two keys (no resourceVersion: the keys are ours, so there is
nothing to conflict with). A stale sub-group label is removed (``null``) when the pod no longer maps to
a sub-group — upstream leaves it (kai-podgrouper.md §8 item 4). No request at all when already correct.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal

from grouper.core.grouping import POD_GROUP_ANNOTATION, SUBGROUP_LABEL
from grouper.kube.discovery import WELL_KNOWN
from grouper.kube.transport import ApiError, KubeClient
from grouper.model import objects as o
from grouper.model.objects import GVK, Obj
from grouper.observability.metrics import Metrics
from grouper.writer.podgroups import NotLeader

log = logging.getLogger(__name__)

PatchResult = Literal["patched", "unchanged", "gone"]
POD_RESOURCE = WELL_KNOWN[GVK("", "v1", "Pod")]


def _annotations(pod: Obj) -> dict[str, str]:
    # (``objects.annotations`` is shadowed by ``from __future__ import annotations`` for mypy)
    return o.meta(pod).get("annotations") or {}


def pod_patch(pod: Obj, pod_group: str, sub_group: str | None) -> dict[str, Any] | None:
    """The merge patch that makes ``pod`` point at ``pod_group`` / ``sub_group``; None when already so."""
    meta: dict[str, Any] = {}
    if _annotations(pod).get(POD_GROUP_ANNOTATION) != pod_group:
        meta["annotations"] = {POD_GROUP_ANNOTATION: pod_group}
    current = o.labels(pod).get(SUBGROUP_LABEL)
    if sub_group:
        if current != sub_group:
            meta["labels"] = {SUBGROUP_LABEL: sub_group}
    elif current is not None:
        meta["labels"] = {SUBGROUP_LABEL: None}
    return {"metadata": meta} if meta else None


def _rv(obj: Obj) -> str:
    return str(o.meta(obj).get("resourceVersion") or "")


def _created_at(pod: Obj) -> float | None:
    ts = o.meta(pod).get("creationTimestamp")
    if not ts:
        return None
    try:
        return datetime.fromisoformat(str(ts).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class PodPatcher:
    def __init__(
        self,
        client: KubeClient,
        *,
        can_write: Callable[[], bool] = lambda: True,
        metrics: Metrics | None = None,
        on_written: Callable[[Obj], None] | None = None,
    ) -> None:
        self.client = client
        self.can_write = can_write
        self.metrics = metrics
        self.on_written = on_written
        # pods we patched whose new version the cache has not shown yet: key -> (rv we patched, pg, sub-group)
        self._recent: dict[tuple[str, str], tuple[str, str, str | None]] = {}

    async def ensure(self, pod: Obj, pod_group: str, sub_group: str | None) -> PatchResult:
        """Patch when needed. Raises ``ApiError`` (not 404) or ``NotLeader``."""
        key = (o.namespace(pod), o.name(pod))
        recent = self._recent.get(key)
        if recent is not None:
            if _rv(pod) == recent[0] and recent[1:] == (pod_group, sub_group):
                self._count("unchanged")  # our patch is done; the watch has not delivered it yet
                return "unchanged"
            if _rv(pod) != recent[0]:
                del self._recent[key]
        patch = pod_patch(pod, pod_group, sub_group)
        if patch is None:
            self._count("unchanged")
            return "unchanged"
        if not self.can_write():
            raise NotLeader()
        first_annotation = not _annotations(pod).get(POD_GROUP_ANNOTATION)
        try:
            written = await self.client.merge_patch(POD_RESOURCE.path(o.namespace(pod), o.name(pod)), patch)
        except ApiError as e:
            if e.not_found:
                self._count("gone")
                return "gone"
            self._count("error")
            raise
        self._count("patched")
        if len(self._recent) > 65536:
            self._recent.clear()
        self._recent[key] = (_rv(pod), pod_group, sub_group)
        if first_annotation and self.metrics is not None:
            created = _created_at(pod)
            if created is not None:
                self.metrics.pod_grouped_latency.observe(max(0.0, time.time() - created))
        if self.on_written is not None and isinstance(written, dict):
            self.on_written(written)
        return "patched"

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.pod_patches.labels(result=result).inc()
