"""Mark a pod with its PodGroup: annotation ``pod-group-name`` and label ``kai.scheduler/subgroup-name``.

A JSON merge patch touching only those two keys (no resourceVersion: the keys are ours, so there is
nothing to conflict with). A stale sub-group label is removed (``null``) when the pod no longer maps to
a sub-group — upstream leaves it (kai-podgrouper.md §8 item 4). No request at all when already correct.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Literal

from grouper.kube.discovery import WELL_KNOWN
from grouper.kube.transport import ApiError, KubeClient
from grouper.model import objects as o
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import POD_GROUP_ANNOTATION, SUBGROUP_LABEL
from grouper.observability.metrics import Metrics
from grouper.writer.expectations import WriteExpectations
from grouper.writer.podgroups import NotLeader

log = logging.getLogger(__name__)

PatchResult = Literal["patched", "unchanged", "gone"]
# What a patch started with :meth:`PodPatcher.start` ends with: its result, or the ApiError / NotLeader it met
Landed = Callable[[Obj, "PatchResult | Exception"], Awaitable[None]]
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


def with_marks(pod: Obj, pod_group: str, sub_group: str | None) -> Obj:
    """``pod`` as :func:`pod_patch` leaves it (an emptied map is left out, as the API server does): what
    the echo of our patch shows when nobody else changed the pod meanwhile."""
    meta = dict(o.meta(pod))
    meta["annotations"] = {**_annotations(pod), POD_GROUP_ANNOTATION: pod_group}
    labels = {k: v for k, v in o.labels(pod).items() if k != SUBGROUP_LABEL}
    if sub_group:
        labels[SUBGROUP_LABEL] = sub_group
    if labels:
        meta["labels"] = labels
    else:
        meta.pop("labels", None)
    return {**pod, "metadata": meta}


def marked(pod: Obj, written: Obj) -> Obj:
    """What to expect until the echo of our patch arrives: the pod as we knew it with the two marks and
    the resourceVersion of the patch's answer (``written``: the pod's metadata as the API server returned
it, or the whole pod).
    Everything that reads an expected pod reads only the marks (and the version, to match the echo), so
    the answer is not slimmed into a second cached-like copy: that cost as much as caching the echo."""
    meta, answered = dict(o.meta(pod)), o.meta(written)
    for key, mark in (("annotations", POD_GROUP_ANNOTATION), ("labels", SUBGROUP_LABEL)):
        theirs = answered.get(key) or {}
        ours = meta.get(key) or {}
        if theirs.get(mark) != ours.get(mark):
            ours = {k: v for k, v in ours.items() if k != mark}
            if mark in theirs:
                ours[mark] = theirs[mark]
            meta[key] = ours
    meta["resourceVersion"] = answered.get("resourceVersion") or ""  # the version the echo will carry
    if answered.get("uid"):
        meta["uid"] = answered["uid"]
    return {"apiVersion": "v1", "kind": "Pod", **pod, "metadata": meta}


def _created_at(pod: Obj) -> float | None:
    ts = o.meta(pod).get("creationTimestamp")
    if not ts:
        return None
    try:
        return datetime.fromisoformat(str(ts).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class PodPatcher:
    """Marks pods. ``expectations`` (shared with the event handlers) holds our patches the cache has not
    shown yet (:func:`marked`).

    Fire and track: :meth:`start` sends a patch in the background (at most ``concurrency`` at once) and
    owns it until it lands, then hands its outcome to the caller's ``landed`` callback; the reconciler never
    waits for one (:meth:`heading` tells it a pod's patch is on its way; :meth:`settle` ends them on
    shutdown or when leadership ends)."""

    def __init__(
        self,
        client: KubeClient,
        *,
        expectations: WriteExpectations,
        can_write: Callable[[], bool] = lambda: True,
        metrics: Metrics | None = None,
        cached: Callable[[str, str], Obj | None] = lambda namespace, name: None,
        concurrency: int = 16,
    ) -> None:
        """``cached``: the pod as the cache holds it now (namespace, name)."""
        self.client = client
        self.expectations = expectations
        self.can_write = can_write
        self.metrics = metrics
        self.cached = cached
        self.concurrency = concurrency
        self._sem: asyncio.Semaphore | None = None  # made in the loop that runs the patches
        self._flights: dict[tuple[str, str], tuple[tuple[str, str | None], asyncio.Task[None]]] = {}

    # ------------------------------------------------------------------ fire and track

    def start(self, pod: Obj, pod_group: str, sub_group: str | None, landed: Landed) -> None:
        """Patch ``pod`` in the background; ``landed(pod, outcome)`` runs when it is done (not when it is
        cancelled). One patch per pod at a time: the caller asks :meth:`heading` first."""
        key = (o.namespace(pod), o.name(pod))
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.concurrency)
        task = asyncio.get_running_loop().create_task(self._fly(key, pod, pod_group, sub_group, landed))
        self._flights[key] = ((pod_group, sub_group), task)

    async def _fly(self, key: tuple[str, str], pod: Obj, pod_group: str, sub_group: str | None, landed: Landed) -> None:
        outcome: PatchResult | Exception
        try:
            assert self._sem is not None
            async with self._sem:
                try:
                    outcome = await self.ensure(pod, pod_group, sub_group)
                except (ApiError, NotLeader) as e:
                    outcome = e
        finally:
            flight = self._flights.get(key)
            if flight is not None and flight[1] is asyncio.current_task():
                del self._flights[key]
        await landed(pod, outcome)

    def heading(self, namespace: str, name: str) -> tuple[str, str | None] | None:
        """(PodGroup, sub-group) the pod's patch on its way sets; None when none is on its way."""
        flight = self._flights.get((namespace, name))
        return flight[0] if flight is not None else None

    @property
    def in_flight(self) -> int:
        return len(self._flights)

    async def settle(self, timeout: float = 0.0) -> None:
        """Let the patches on their way land (up to ``timeout`` seconds), then cancel the rest."""
        tasks = [t for _, t in self._flights.values()]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout) if timeout > 0 else (set(), set(tasks))
        for t in pending:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._flights.clear()

    def current(self, pod: Obj) -> Obj | None:
        """The pod as it is now: our own patch the cache has not shown yet, else the cache's object; None
        when a patch of it was answered 404 and the watch has not delivered its deletion yet.
        Never only the caller's copy: that one may be older than a reconcile's await, and once the echo
        of our patch has reached the cache (clearing the expectation), an old copy would be patched again."""
        ns, name = o.namespace(pod), o.name(pod)
        latest = self.cached(ns, name) or pod
        return self.expectations.current("Pod", ns, name, latest)

    def needed(self, pod: Obj, pod_group: str, sub_group: str | None) -> bool:
        """Whether :meth:`ensure` would write (counting our own patches the cache has not shown yet)."""
        current = self.current(pod)
        return current is not None and pod_patch(current, pod_group, sub_group) is not None

    async def ensure(self, pod: Obj, pod_group: str, sub_group: str | None) -> PatchResult:
        """Patch when needed. Raises ``ApiError`` (not 404) or ``NotLeader``."""
        current = self.current(pod)
        if current is None:
            self._count("gone")
            return "gone"
        patch = pod_patch(current, pod_group, sub_group)
        if patch is None:
            self._count("unchanged")
            return "unchanged"
        if not self.can_write():
            raise NotLeader()
        first_annotation = not _annotations(current).get(POD_GROUP_ANNOTATION)
        ns, name = o.namespace(pod), o.name(pod)
        # its echo may come before its answer: the event handler then knows it by what it sets
        self.expectations.writing("Pod", ns, name, (pod_group, sub_group))
        try:
            # only the answer's metadata is read (``marked``): the whole pod is most of a patch's CPU
            written = await self.client.merge_patch(POD_RESOURCE.path(ns, name), patch, metadata_only=True)
        except ApiError as e:
            if e.not_found:  # deleted: not patched again before the watch says so
                self.expectations.gone("Pod", ns, name, o.uid(current))
                self._count("gone")
                return "gone"
            self._count("error")
            raise
        finally:
            self.expectations.answered("Pod", ns, name)
        self._count("patched")
        if isinstance(written, dict):
            self.expectations.wrote("Pod", marked(current, written))
        if first_annotation and self.metrics is not None:
            created = _created_at(pod)
            if created is not None:
                self.metrics.pod_grouped_latency.observe(max(0.0, time.time() - created))
        return "patched"

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.child(self.metrics.pod_patches, result).inc()
