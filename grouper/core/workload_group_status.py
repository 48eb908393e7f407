"""The ``status`` the controller writes on a WorkloadGroup. Pure: no I/O, the clock is an argument.

:meth:`grouper.core.workload_group.GroupRender.status` says what the render implies (``observedMembers``,
``renderedPodGroupRef``, the conditions ``InputsResolved`` and ``Rendered``); the controller adds
``Active`` — the rendered PodGroup is stored and every member pod names it with its leaf sub-group — and
the conditions' ``lastTransitionTime`` (kept from the stored status while a condition's status stands, as
Kubernetes' ``meta.SetStatusCondition`` does). A status equal to the stored one but for those times is not
written again (:func:`same_status`): a restart writes nothing.
"""

from __future__ import annotations

import copy
from typing import Any

ACTIVE = "Active"


def active_condition(rendered: bool, stored: bool, unplaced: int) -> dict[str, str]:
    """``Active``: True once the rendered PodGroup is stored and no member pod is left to place in it."""
    if not rendered:
        return {"type": ACTIVE, "status": "False", "reason": "NotRendered",
                "message": "no PodGroup is rendered: the member pods wait (see Rendered)"}
    if not stored:
        return {"type": ACTIVE, "status": "False", "reason": "PodGroupNotStored",
                "message": "the rendered PodGroup is not stored yet"}
    if unplaced:
        return {"type": ACTIVE, "status": "False", "reason": "PlacingPods",
                "message": f"{unplaced} member pod(s) do not name the rendered PodGroup yet"}
    return {"type": ACTIVE, "status": "True", "reason": "PodGroupActive",
            "message": "every member pod names the rendered PodGroup and its leaf sub-group"}


def with_times(desired: dict[str, Any], stored: dict[str, Any] | None, now: str) -> dict[str, Any]:
    """``desired`` with each condition's ``lastTransitionTime``: the stored one when the condition's status
    did not change, else ``now`` (RFC 3339)."""
    out = copy.deepcopy(desired)
    before = {c.get("type"): c for c in (stored or {}).get("conditions") or [] if isinstance(c, dict)}
    for c in out.get("conditions") or []:
        old = before.get(c["type"])
        if old is not None and old.get("status") == c["status"] and old.get("lastTransitionTime"):
            c["lastTransitionTime"] = old["lastTransitionTime"]
        else:
            c["lastTransitionTime"] = now
    return out


def status_patch(desired: dict[str, Any], stored: dict[str, Any] | None, now: str) -> dict[str, Any]:
    """The ``status`` of the merge patch that writes ``desired`` (:func:`with_times`) over ``stored``: a merge
    patch keeps what it does not name, so a field the status no longer has is nulled (a ``renderedPodGroupRef``
    of a group no longer rendered)."""
    written = with_times(desired, stored, now)
    for k in stored or {}:
        written.setdefault(k, None)
    return written


def _without_times(status: dict[str, Any] | None) -> dict[str, Any]:
    out = copy.deepcopy(status or {})
    for c in out.get("conditions") or []:
        if isinstance(c, dict):
            c.pop("lastTransitionTime", None)
    return out


def same_status(desired: dict[str, Any], stored: dict[str, Any] | None) -> bool:
    """Whether writing ``desired`` would change nothing but transition times."""
    return _without_times(desired) == _without_times(stored)


__all__ = ["ACTIVE", "active_condition", "same_status", "with_times"]
