"""Write a PodGroup's status exactly as KAI's scheduler and podgroup-controller do, for the tests.

Shapes from KAI's API types (``pkg/apis/scheduling/v2alpha2/podgroup_types.go``) and the scheduler's status
updater (``pkg/scheduler/cache/status_updater``), see /work/shared/reference/kai-podgrouper.md §3.2 and
upstream-2026-12.md:

- ``status.schedulingConditions[]``: ``{type, nodePool, reason, message, reasons[], lastTransitionTime, status,
  transitionID}``. The scheduler marks a held gang with ``type: UnschedulableOnNodePool``, ``reason:
  Unschedulable`` (deprecated field), ``message`` = ``JobFitErrorsToMessage`` of its fit errors (deprecated
  field), ``status: "True"`` and ``reasons`` = one ``{reason, message, details?}`` per fit error (``message`` =
  the error's messages joined with ", "). ``transitionID`` = the last condition's + 1; the condition of the
  same node pool and type is replaced and the new one appended last with ``lastTransitionTime`` = now; an
  identical last condition is left alone. It does not touch the conditions while any pod of the gang is
  allocated.
- held pods: ``PodScheduled=False``, reason ``Unschedulable``, message = the same text.
- ``metadata.annotations["kai.scheduler/last-start-timestamp"]`` = the start time, RFC 3339 UTC (scheduler).
- ``status.resourcesStatus.{requested, allocated, allocatedNonPreemptible}`` (podgroup-controller).

The functions edit dicts (pure); :func:`write_status` / :func:`write_pod_condition` store them through the
API server's ``status`` subresource, the way the scheduler does.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

UNSCHEDULABLE_ON_NODE_POOL = "UnschedulableOnNodePool"
POD_GROUP_REASON_UNSCHEDULABLE = "Unschedulable"
DEFAULT_PODGROUP_ERROR = "Unable to schedule podgroup"
NOT_ENOUGH_RESOURCES = "Not enough resources for the workload"  # UnschedulableWorkloadReason
LAST_START_ANNOTATION = "kai.scheduler/last-start-timestamp"
DEFAULT_NODE_POOL = "default"


@dataclass(frozen=True)
class FitError:
    """One of KAI's ``JobFitError``s: a reason and its short messages (``details``: queue details, as
    ``NewJobFitErrorWithQueueContext`` attaches them)."""

    reason: str
    messages: Sequence[str]
    details: Mapping[str, Any] | None = field(default=None)

    def explanation(self) -> dict[str, Any]:
        out: dict[str, Any] = {"reason": self.reason, "message": ", ".join(self.messages)}
        if self.details is not None:
            out["details"] = dict(self.details)
        return out


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fit_errors_message(errors: Sequence[FitError]) -> str:
    """KAI's ``JobFitErrorsToMessage``: the reason (the default one for several errors), then the distinct
    messages sorted, a repeated one prefixed by its count, joined with ``". \\n"``."""
    histogram: dict[str, int] = {}
    for e in errors:
        for m in e.messages:
            histogram[m] = histogram.get(m, 0) + 1
    parts = sorted(f"{n} {m}" if n > 1 else m for m, n in histogram.items())
    reason = errors[0].reason if len(errors) == 1 else DEFAULT_PODGROUP_ERROR
    return reason + (": " + ". \n".join(parts) + "." if parts else "")


def node_pool(pod_group: Mapping[str, Any], label_key: str = "kai.scheduler/node-pool") -> str:
    """``GetNodePoolNameFromLabels``: the node-pool label's value, else ``default``."""
    labels = (pod_group.get("metadata") or {}).get("labels") or {}
    return str(labels.get(label_key) or DEFAULT_NODE_POOL)


def mark_unschedulable(
    pod_group: dict[str, Any], errors: Sequence[FitError], *, now: datetime, any_allocated: bool = False,
    node_pool_label_key: str = "kai.scheduler/node-pool",
) -> bool:
    """``markPodGroupUnschedulable``: set the ``UnschedulableOnNodePool`` scheduling condition in place.
    Returns whether the status changed (the scheduler writes only then)."""
    if any_allocated:  # "Don't update podgroup condition if there are any allocated pods"
        return False
    condition: dict[str, Any] = {
        "type": UNSCHEDULABLE_ON_NODE_POOL,
        "nodePool": node_pool(pod_group, node_pool_label_key),
        "reason": POD_GROUP_REASON_UNSCHEDULABLE,
        "message": fit_errors_message(errors) if errors else DEFAULT_PODGROUP_ERROR,
        "status": "True",
    }
    if errors:
        condition["reasons"] = [e.explanation() for e in errors]
    return set_scheduling_condition(pod_group, condition, now=now)


def set_scheduling_condition(pod_group: dict[str, Any], condition: dict[str, Any], *, now: datetime) -> bool:
    """``setPodGroupSchedulingCondition``: transition ID = the last one + 1; unchanged when the last condition
    equals this one (type, node pool, reason, message, status); else the same (node pool, type) is squashed
    and this one appended with ``lastTransitionTime`` now."""
    status = pod_group.setdefault("status", {})
    conditions: list[dict[str, Any]] = status.setdefault("schedulingConditions", [])
    last = conditions[-1] if conditions else None
    try:
        last_id = max(int(last["transitionID"]), 0) if last else 0
    except (KeyError, TypeError, ValueError):
        last_id = 0
    new = dict(condition, transitionID=str(last_id + 1))
    keys = ("type", "nodePool", "reason", "message", "status")
    if last is not None and all(last.get(k) == new.get(k) for k in keys):
        return False
    kept = [c for c in conditions if (c.get("nodePool"), c.get("type")) != (new["nodePool"], new["type"])]
    new["lastTransitionTime"] = rfc3339(now)
    status["schedulingConditions"] = [*kept, new]
    return True


def clear_scheduling_conditions(pod_group: dict[str, Any]) -> None:
    """The conditions gone once the gang is bound (as observed with KAI v0.17: cleared after binding)."""
    (pod_group.setdefault("status", {})).pop("schedulingConditions", None)


def set_last_start(pod_group: dict[str, Any], moment: datetime) -> None:
    """``setPodGroupLastStartTimeStamp``: the annotation, RFC 3339 in UTC."""
    meta = pod_group.setdefault("metadata", {})
    if not isinstance(meta.get("annotations"), dict):
        meta["annotations"] = {}
    meta["annotations"][LAST_START_ANNOTATION] = rfc3339(moment)


def set_resources_status(
    pod_group: dict[str, Any], *, requested: Mapping[str, str] | None = None,
    allocated: Mapping[str, str] | None = None, allocated_non_preemptible: Mapping[str, str] | None = None,
) -> None:
    """``status.resourcesStatus`` as the podgroup-controller writes it (ResourceLists; empty ones omitted)."""
    res: dict[str, Any] = {}
    for key, value in (("allocated", allocated), ("allocatedNonPreemptible", allocated_non_preemptible),
                       ("requested", requested)):
        if value:
            res[key] = dict(value)
    pod_group.setdefault("status", {})["resourcesStatus"] = res


def pod_unschedulable(pod: dict[str, Any], message: str, *, now: datetime) -> dict[str, Any]:
    """The ``PodScheduled=False`` condition KAI puts on a held pod (``recordUnschedulablePodsConditions``),
    set on a copy of ``pod`` (its status conditions) and returned."""
    out = copy.deepcopy(pod)
    conditions = [c for c in (out.setdefault("status", {}).get("conditions") or []) if c.get("type") != "PodScheduled"]
    conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                       "lastTransitionTime": rfc3339(now), "lastProbeTime": None})
    out["status"]["conditions"] = conditions
    return out


def write_status(kube: Any, path: str, pod_group: dict[str, Any]) -> dict[str, Any]:
    """Store ``pod_group``'s status through ``PUT .../status`` (the scheduler's UpdateStatus) and its
    annotations with a merge patch (the scheduler's annotation patch); returns the stored object."""
    stored = kube.get(path)
    annotations = (pod_group.get("metadata") or {}).get("annotations")
    if annotations and annotations != (stored.get("metadata") or {}).get("annotations"):
        stored = kube.patch(path, {"metadata": {"annotations": annotations}}, type="merge")
    stored["status"] = pod_group.get("status") or {}
    return dict(kube.replace(path + "/status", stored))


def write_pod_condition(kube: Any, pod_path: str, pod: dict[str, Any]) -> dict[str, Any]:
    """Store ``pod``'s ``PodScheduled`` condition through the pods/status subresource (a strategic merge
    patch keyed by ``type``, as the scheduler's ``updatePodCondition``)."""
    conditions = [c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"]
    return dict(kube.patch(pod_path + "/status", {"status": {"conditions": conditions}}, type="strategic"))
