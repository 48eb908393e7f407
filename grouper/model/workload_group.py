"""The ``WorkloadGroup`` object: several workloads admitted as one gang (a "gang of gangs").

Membership is declared on each workload's **top owner** with the annotation ``kai.scheduler/workload-group:
<name>`` (the name KAI's multi-workload gang design uses); the group object, in the same namespace, says
how many workloads make the group complete and optionally overrides the merged scheduling policy.

API group: ``grouper.kai-pod-grouper.io/v1alpha1``, this project's own domain (its webhooks already use
``*.kai-pod-grouper.io``). KAI's design proposes ``scheduling.run.ai/v1alpha1`` for its own, not yet
implemented, ``WorkloadGroup``: a CRD of the same name in KAI's group would be the *same* CRD
(``workloadgroups.scheduling.run.ai``), so installing KAI's later one would replace or fail on ours, and the
two schemas need not agree. docs/workload-groups.md describes moving from ours to KAI's.

Completeness counts **workloads** (``spec.expectedWorkloads``), not PodGroups as KAI's ``expectedPodGroups``
does: the annotation is on the workload and the user knows how many workloads they submit, while the number
of PodGroups a workload yields is the grouper's own decision and changes with scale (a LeaderWorkerSet has
one PodGroup per replica). Every workload's PodGroups are required (see grouper.core.workload_group).

Parsing is strict: every error names the object and the field (``WorkloadGroup ns/name: field
spec.expectedWorkloads: ...``); an unknown spec field is an error (a typo must not silently drop an override),
and KAI's ``expectedPodGroups`` gets a pointer to the field to use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from grouper.model.duration import normalize_go_duration
from grouper.model.errors import GroupingError, shown
from grouper.model.objects import Obj
from grouper.model.podgroup import TopologyConstraint

GROUP = "grouper.kai-pod-grouper.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "WorkloadGroup"
PLURAL = "workloadgroups"
# On a workload's top owner: the name of the WorkloadGroup (same namespace) it belongs to.
WORKLOAD_GROUP_ANNOTATION = "kai.scheduler/workload-group"
# KAI's proposed group for its own WorkloadGroup: recognised only to point at ours.
KAI_PROPOSED_API_VERSION = "scheduling.run.ai/v1alpha1"
# More workloads than this in one gang is a mistake rather than a plan (the rendered PodGroup holds at
# least two sub-groups per workload); the CRD schema has the same maximum.
MAX_EXPECTED_WORKLOADS = 1000
PREEMPTIBILITIES = ("preemptible", "semi-preemptible", "non-preemptible")  # least strict first
SPEC_FIELDS = (
    "expectedWorkloads", "priorityClassName", "preemptibility", "preemptionDelay", "stalenessGracePeriod",
    "topologyConstraint",
)
TOPOLOGY_FIELDS = {"topology": "topology", "requiredTopologyLevel": "required_level",
                   "preferredTopologyLevel": "preferred_level"}

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
NAME_MAX = 63  # the group name is a DNS label: it becomes part of the rendered PodGroup's name


class InvalidWorkloadGroup(GroupingError):
    """A WorkloadGroup (or a workload's membership annotation) is malformed: permanent until it changes."""

    reason = "InvalidWorkloadGroup"
    retryable = False


@dataclass(frozen=True)
class WorkloadGroup:
    """A parsed ``WorkloadGroup``. Overrides are None when not set (the merge rules decide)."""

    namespace: str
    name: str
    uid: str
    expected_workloads: int
    priority_class_name: str | None = None
    preemptibility: str | None = None
    preemption_delay: str | None = None  # normalized Go duration ("5m0s")
    staleness_grace_period: str | None = None  # normalized; negative disables stale eviction (KAI)
    topology: TopologyConstraint | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def is_workload_group(obj: Obj) -> bool:
    """Whether ``obj`` is a WorkloadGroup of ours, or one in KAI's proposed group (reported by parse)."""
    return obj.get("kind") == KIND and str(obj.get("apiVersion") or "").split("/")[0] in (
        GROUP, KAI_PROPOSED_API_VERSION.split("/")[0]
    )


def valid_group_name(value: str) -> bool:
    return len(value) <= NAME_MAX and bool(_DNS_LABEL.match(value))


def parse(obj: Obj) -> WorkloadGroup:
    """The WorkloadGroup of ``obj``; raises ``InvalidWorkloadGroup`` naming the object and the field."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    where = f"WorkloadGroup {ns}/{name}" if ns else f"WorkloadGroup {name or '(unnamed)'}"

    def fail(field: str, message: str) -> InvalidWorkloadGroup:
        return InvalidWorkloadGroup(message, obj=where, field=field)

    api_version = str(obj.get("apiVersion") or "")
    if api_version != API_VERSION:
        hint = (
            " (KAI's proposed group, not implemented by KAI; this grouper serves its own: see docs/workload-groups.md)"
            if api_version.split("/")[0] == KAI_PROPOSED_API_VERSION.split("/")[0] else ""
        )
        raise fail("apiVersion", f"{shown(repr(api_version))} is not {API_VERSION}{hint}")
    if not valid_group_name(name):
        raise fail("metadata.name", f"{shown(repr(name))} must be a DNS label of at most {NAME_MAX} characters")
    if not ns:
        raise fail("metadata.namespace", "is required: a WorkloadGroup and its workloads share one namespace")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise fail("spec", f"expected an object, got {type(spec).__name__}")
    unknown = sorted(str(k) for k in spec if k not in SPEC_FIELDS)
    if "expectedPodGroups" in unknown:
        raise fail("spec.expectedPodGroups", "not a field of this WorkloadGroup (KAI's design counts PodGroups): "
                   "use spec.expectedWorkloads, the number of workloads carrying the annotation")
    if unknown:
        raise fail(f"spec.{shown(unknown[0])}", f"unknown field (known: {', '.join(SPEC_FIELDS)})")

    expected = spec.get("expectedWorkloads")
    if expected is None:
        raise fail("spec.expectedWorkloads", "is required: the number of workloads that make the group complete")
    if isinstance(expected, bool) or not isinstance(expected, int):
        raise fail("spec.expectedWorkloads", f"expected an integer, got {shown(repr(expected))}")
    if not 1 <= expected <= MAX_EXPECTED_WORKLOADS:
        raise fail("spec.expectedWorkloads", f"must be between 1 and {MAX_EXPECTED_WORKLOADS}, got {shown(expected)}")

    priority = _optional_string(spec, "priorityClassName", fail)
    if priority is not None and not (len(priority) <= 253 and _SUBDOMAIN.match(priority)):
        raise fail("spec.priorityClassName", f"{shown(repr(priority))} is not a valid PriorityClass name")
    preemptibility = _optional_string(spec, "preemptibility", fail)
    if preemptibility is not None and preemptibility not in PREEMPTIBILITIES:
        raise fail("spec.preemptibility", f"{shown(repr(preemptibility))} is not one of {', '.join(PREEMPTIBILITIES)}")
    delay = _duration(spec, "preemptionDelay", fail, allow_negative=False)
    grace = _duration(spec, "stalenessGracePeriod", fail, allow_negative=True)
    return WorkloadGroup(
        namespace=ns,
        name=name,
        uid=str(meta.get("uid") or ""),
        expected_workloads=expected,
        priority_class_name=priority,
        preemptibility=preemptibility,
        preemption_delay=delay,
        staleness_grace_period=grace,
        topology=_topology(spec, fail),
    )


def _optional_string(spec: dict[str, Any], key: str, fail: Any) -> str | None:
    value = spec.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise fail(f"spec.{key}", f"expected a non-empty string, got {shown(repr(value))}")
    return value


def _duration(spec: dict[str, Any], key: str, fail: Any, *, allow_negative: bool) -> str | None:
    raw = _optional_string(spec, key, fail)
    if raw is None:
        return None
    try:
        return normalize_go_duration(raw, allow_negative=allow_negative)
    except ValueError as exc:
        raise fail(f"spec.{key}", f"{shown(repr(raw))} is not a valid duration: {exc}") from None


def _topology(spec: dict[str, Any], fail: Any) -> TopologyConstraint | None:
    raw = spec.get("topologyConstraint")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise fail("spec.topologyConstraint", f"expected an object, got {type(raw).__name__}")
    unknown = sorted(str(k) for k in raw if k not in TOPOLOGY_FIELDS)
    if unknown:
        raise fail(f"spec.topologyConstraint.{shown(unknown[0])}",
                   f"unknown field (known: {', '.join(TOPOLOGY_FIELDS)})")
    values: dict[str, str] = {}
    for key, attr in TOPOLOGY_FIELDS.items():
        value = raw.get(key)
        if value is not None and not isinstance(value, str):
            raise fail(f"spec.topologyConstraint.{key}", f"expected a string, got {shown(repr(value))}")
        values[attr] = value or ""
    constraint = TopologyConstraint(**values)
    if not constraint.topology:
        raise fail("spec.topologyConstraint.topology", "is required: the name of the KAI Topology to place in")
    if not (constraint.required_level or constraint.preferred_level):
        raise fail("spec.topologyConstraint", "names a topology but neither requiredTopologyLevel nor "
                   "preferredTopologyLevel")
    return constraint


def membership(obj: Obj) -> str | None:
    """The group a workload (its top owner) joins: the annotation's value, or None without one. Raises
    ``InvalidWorkloadGroup`` for a value that cannot name a WorkloadGroup."""
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict) or WORKLOAD_GROUP_ANNOTATION not in annotations:
        return None
    value = annotations[WORKLOAD_GROUP_ANNOTATION]
    if not isinstance(value, str) or not valid_group_name(value):
        ns, name = (str(meta.get(k) or "") for k in ("namespace", "name")) if isinstance(meta, dict) else ("", "")
        raise InvalidWorkloadGroup(
            f"{shown(repr(value))} must name a WorkloadGroup (a DNS label of at most {NAME_MAX} characters)",
            obj=f"{obj.get('kind') or 'object'} {ns}/{name}",
            field=f'metadata.annotations["{WORKLOAD_GROUP_ANNOTATION}"]',
        )
    return value


__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "WORKLOAD_GROUP_ANNOTATION",
    "InvalidWorkloadGroup",
    "WorkloadGroup",
    "is_workload_group",
    "membership",
    "parse",
]
