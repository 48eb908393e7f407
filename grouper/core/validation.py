"""The PodGroup validating webhook's rules (kai-podgrouper.md §3.3), run before anything is written.

A decision that breaks them is reported as an error for its workload instead of being rejected by
the API server (or, worse, accepted by a cluster without the webhook and then mis-scheduled).
We apply the create-time rules, the stricter set: a mid-level sub-group with ``minMember`` is an error.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from grouper.core.naming import MAX_NAME_LENGTH, is_subdomain
from grouper.model.errors import shown
from grouper.model.podgroup import PodGroupMetadata

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE_MAX = 63  # sub-group names travel as the kai.scheduler/subgroup-name label value
INT32_MAX = 2**31 - 1  # minMember and minSubGroup are int32 in the API


def pod_group_key(md: PodGroupMetadata) -> tuple[Any, ...]:
    """What the rules read of a PodGroup: equal keys, equal answers (the workload context checks each distinct
    PodGroup of a pass once: every pod of a workload sees the same one). Raises TypeError for a field of an
    unhashable type when hashed."""
    return (
        md.namespace, md.name, md.queue, md.min_member, md.min_sub_group,
        tuple((sg.name, sg.parent, sg.min_member, sg.min_sub_group) for sg in md.sub_groups),
    )


def validate_pod_group(md: PodGroupMetadata) -> list[str]:
    """Errors (empty when valid). Messages name the PodGroup and the offending field."""
    errors: list[str] = []
    where = f"PodGroup {md.namespace}/{md.name}"
    if not is_subdomain(md.name):
        errors.append(
            f"{where}: metadata.name must be a lowercase RFC 1123 subdomain of at most {MAX_NAME_LENGTH} characters"
        )
    if md.queue and (len(md.queue) > LABEL_VALUE_MAX or not _LABEL_VALUE.match(md.queue)):
        errors.append(
            f"{where}: spec.queue {shown(repr(md.queue))} is not a valid label value (at most {LABEL_VALUE_MAX} "
            "characters: alphanumerics, '-', '_', '.', starting and ending with an alphanumeric)"
        )
    if md.min_member is not None and md.min_sub_group is not None:
        errors.append(f"{where}: spec.minMember and spec.minSubGroup are mutually exclusive")
    for fld, value in (("spec.minMember", md.min_member), ("spec.minSubGroup", md.min_sub_group)):
        errors.extend(_check_count(where, fld, value))
    names = [sg.name for sg in md.sub_groups]
    by_name = {sg.name: sg for sg in md.sub_groups}
    for dup in sorted(n for n, count in Counter(names).items() if count > 1):
        errors.append(f"{where}: spec.subGroups: duplicate sub-group name {dup!r}")
    children: dict[str, int] = {}
    for sg in md.sub_groups:
        if sg.parent:
            children[sg.parent] = children.get(sg.parent, 0) + 1
    for sg in sorted(md.sub_groups, key=lambda s: s.name):
        f = f"spec.subGroups[{sg.name}]"
        if not _DNS_LABEL.match(sg.name) or len(sg.name) > LABEL_VALUE_MAX:
            errors.append(f"{where}: {f}.name {sg.name!r} must be a DNS label of at most {LABEL_VALUE_MAX} characters")
        if sg.parent is not None and sg.parent not in by_name:
            errors.append(f"{where}: {f}.parent {sg.parent!r} names no sub-group")
        if sg.min_member is not None and sg.min_sub_group is not None:
            errors.append(f"{where}: {f} sets both minMember and minSubGroup")
        for fld, value in (("minMember", sg.min_member), ("minSubGroup", sg.min_sub_group)):
            errors.extend(_check_count(where, f"{f}.{fld}", value))
        if children.get(sg.name):
            if sg.min_member is not None:
                errors.append(f"{where}: {f} has child sub-groups and must not set minMember (use minSubGroup)")
        else:
            if sg.min_sub_group is not None:
                errors.append(f"{where}: {f} is a leaf sub-group and must not set minSubGroup")
            if sg.min_member is None:
                errors.append(f"{where}: {f} is a leaf sub-group and must set minMember")
    # Cycles in the parent graph.
    for sg in md.sub_groups:
        seen = {sg.name}
        cur = sg.parent
        while cur is not None and cur in by_name:
            if cur in seen:
                errors.append(f"{where}: spec.subGroups: parent cycle through {sg.name!r}")
                break
            seen.add(cur)
            cur = by_name[cur].parent
    return errors


def _check_count(where: str, field: str, value: int | None) -> list[str]:
    if value is None:
        return []
    if value < 0:
        return [f"{where}: {field} must be >= 0, got {shown(value)}"]
    if value > INT32_MAX:
        return [f"{where}: {field} must fit in int32 (<= {INT32_MAX}), got {shown(value)}"]
    return []
