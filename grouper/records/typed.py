"""The records :class:`~grouper.records.decisions.DecisionStore` hands out: frozen, typed, read-only.

One per pod (:class:`PodRecord`), per PodGroup (:class:`PodGroupRecord`) and per workload
(:class:`WorkloadRecord`). Times are ``time.time()`` floats (:func:`timestamp` renders them as the API
shows them); owner references are :class:`~grouper.model.podgroup.OwnerRef` tuples. The HTTP API maps these
to its response models in one place (``grouper/api/convert.py``); nothing here knows the JSON shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

from grouper.model.bounded import BoundedMemo
from grouper.model.podgroup import OwnerRef

Outcome = Literal["grouped", "skipped", "error", "failed"]
PATCH_FAILED = "failed"  # a pod record's patch result when the API server refused the patch
POD_GROUP_NOT_WRITTEN = "PodGroupNotWritten"  # the reason of a grouped pod whose PodGroup write failed
POD_NOT_MARKED = "PodNotMarked"  # the reason of a grouped pod whose patch failed

_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
_RENDERED_TIMES: BoundedMemo[float, str] = BoundedMemo(4096)


def timestamp(t: float | None) -> str | None:
    """A record's time as the API shows it (RFC 3339, microseconds). The pods of a reconcile share a time
    (one float per millisecond, ``decisions._clock``), so the text is cached (bounded): a listing of
    100,000 records formats a few hundred times, not 100,000."""
    if t is None:
        return None
    text = _RENDERED_TIMES.get(t)
    if text is None:
        text = _RENDERED_TIMES.put(t, datetime.fromtimestamp(t, UTC).strftime(_FORMAT))
    return text


@dataclass(frozen=True, slots=True)
class DefinitionUsed:
    """The Karta definition that grouped the pod, and where it was loaded from."""

    name: str
    origin: str


@dataclass(frozen=True, slots=True)
class WorkloadPart:
    """What a pod's decision shares with the other pods of its workload (``Decision`` minus the pod's own
    outcome, PodGroup and sub-group)."""

    workload: str  # the controller's workload key
    plugin: str | None
    definition: DefinitionUsed | None
    top_owner: OwnerRef | None
    owner_chain: tuple[OwnerRef, ...]  # direct owner first, top owner last
    provenance: tuple[tuple[str, str], ...]  # (field, where its value came from), in the decision's order
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Patch:
    """The last patch of the pod's annotation / sub-group label: ``patched``, ``unchanged``, … or
    :data:`PATCH_FAILED`."""

    result: str
    at: float | None


@dataclass(frozen=True, slots=True)
class PodRecord:
    """A pod's decision as the controller last made it, with what happened since (its last error, its patch).

    ``part`` is None (and ``uid``, ``outcome`` too) for a pod that has no decision yet: only an error or a
    patch was recorded for it. ``outcome`` is ``failed`` when the pod was grouped as decided but the API
    server refused its PodGroup's write (reason :data:`POD_GROUP_NOT_WRITTEN`) or its patch
    (:data:`POD_NOT_MARKED`); ``message`` then is the API server's."""

    namespace: str
    name: str
    uid: str | None = None
    outcome: Outcome | None = None
    reason: str = ""
    message: str = ""
    pod_group: str | None = None
    sub_group: str | None = None
    part: WorkloadPart | None = None
    decided_at: float | None = None
    last_error: str | None = None
    last_error_at: float | None = None
    patched: Patch | None = None

    @property
    def workload(self) -> str | None:
        return self.part.workload if self.part is not None else None

    @property
    def top_owner(self) -> OwnerRef | None:
        return self.part.top_owner if self.part is not None else None


@dataclass(frozen=True, slots=True)
class PodGroupRecord:
    """A PodGroup as last decided and written. The store keeps this object itself (it is replaced, never
    changed), with the desired object as JSON bytes (a third of its size as dicts): :meth:`desired`
    decodes them."""

    namespace: str
    name: str
    workload: str
    packed: Any  # orjson bytes of the desired object (or the object, when orjson cannot encode it), or None
    pods: tuple[str, ...]  # the pods the write assigned to it
    notes: tuple[str, ...]
    last_operation: str | None = None  # created, updated, unchanged, …
    write_at: float | None = None
    reconciled_at: float | None = None
    last_error: str | None = None
    error_at: float | None = None
    ok: bool = True  # the last write succeeded
    stored: bool = True  # False: never written (its create was refused), so not in the cluster
    newest: str = ""  # the pod whose view of the PodGroup was written (``core/workload_plan.merge``)

    def desired(self) -> Any:
        """The decided object (a dict, or what was recorded when the decision failed), decoded anew."""
        return orjson.loads(self.packed) if isinstance(self.packed, bytes) else self.packed


@dataclass(frozen=True, slots=True)
class WorkloadRecord:
    """The controller's last pass over a workload."""

    workload: str
    reconciled_at: float
    pods: int | None = None
    terminal_pods: int | None = None
    pod_groups: tuple[str, ...] = ()
    plugin: str | None = None
    result: str | None = None  # ok, failed, error, …
    error: str | None = None  # the last pass's, None when it succeeded
    last_error: str | None = None  # the newest error of any pass
    last_error_at: float | None = None


def pack(obj: dict[str, Any] | None) -> Any:
    """A JSON-able object as orjson bytes; anything orjson cannot encode is kept as it is."""
    if obj is None:
        return None
    try:
        return orjson.dumps(obj)
    except TypeError:
        return obj


__all__ = [
    "PATCH_FAILED",
    "POD_GROUP_NOT_WRITTEN",
    "POD_NOT_MARKED",
    "DefinitionUsed",
    "Outcome",
    "Patch",
    "PodGroupRecord",
    "PodRecord",
    "WorkloadPart",
    "WorkloadRecord",
    "pack",
    "timestamp",
]
