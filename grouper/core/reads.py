"""What grouping reads of the objects it watches, so an update that changes none of it is no news. Pure.

The event handlers drop such updates (a status write, a resourceVersion bump, our own patch's echo):
deciding again would find the same, and every pass costs the event loop.
"""

from __future__ import annotations

from typing import Any

from grouper.core.grouping import is_terminal
from grouper.model import objects as o
from grouper.model.objects import Obj

# API groups whose plugins read ``status`` (RayJob/RayService cluster names); other status-only updates are noise.
STATUS_READING_GROUPS = frozenset({"ray.io"})


def _strip(obj: Obj, keep_status: bool) -> Obj:
    """The object without what changes on every write and is never read (resourceVersion, managedFields,
    generation, and status unless ``keep_status``): equal results mean nothing grouping reads changed."""
    meta = {
        k: v
        for k, v in (obj.get("metadata") or {}).items()
        if k not in ("resourceVersion", "managedFields", "generation")
    }
    out = {k: v for k, v in obj.items() if k != "metadata" and (keep_status or k != "status")}
    out["metadata"] = meta
    return out


def same_reads(old: Obj, new: Obj, *, keep_status: bool = False) -> bool:
    """Whether an update of an object (an owner, a PodGroup, a WorkloadGroup) changed nothing grouping reads."""
    return _strip(old, keep_status) == _strip(new, keep_status)


def pod_signature(pod: Obj) -> tuple[Any, ...]:
    """What grouping reads of a pod: equal signatures, nothing to decide again."""
    m = o.meta(pod)
    return (
        m.get("labels"),
        m.get("annotations"),
        m.get("ownerReferences"),
        pod.get("spec"),
        bool(m.get("deletionTimestamp")),
        is_terminal(pod),
    )


__all__ = ["STATUS_READING_GROUPS", "pod_signature", "same_reads"]
