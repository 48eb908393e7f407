"""Merge the per-pod decisions of one workload into one desired state per PodGroup.

Plugins decide one pod at a time and list only that pod in its sub-group; the PodGroup to write
is the union. When pods of one PodGroup disagree on the spec (e.g. a LeaderWorkerSet leader
decided before it was bound), the newest pod's view wins, like KAI where the last reconciled pod
writes, but deterministically (creation time, then name) and noted in the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grouper.core.decision import Decision
from grouper.model.podgroup import PodGroupMetadata


@dataclass
class MergedPodGroup:
    metadata: PodGroupMetadata
    decisions: list[Decision] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def merge_pod_groups(decisions: list[Decision], creation: dict[str, str] | None = None) -> list[MergedPodGroup]:
    """One entry per (namespace, PodGroup name), in name order. ``creation`` maps pod key → creationTimestamp."""
    creation = creation or {}
    by_name: dict[tuple[str, str], list[Decision]] = {}
    for d in decisions:
        if d.outcome == "grouped" and d.pod_group is not None:
            by_name.setdefault((d.pod_group.namespace, d.pod_group.name), []).append(d)
    out: list[MergedPodGroup] = []
    for key in sorted(by_name):
        group = sorted(by_name[key], key=lambda d: (creation.get(d.pod_key, ""), d.pod_name))
        newest = group[-1]
        assert newest.pod_group is not None
        merged = newest.pod_group.copy_without_pods()
        by_sg = {sg.name: sg for sg in merged.sub_groups}
        notes: list[str] = []
        if any(d.pod_group is not None and not d.pod_group.same_spec(newest.pod_group) for d in group):
            notes.append(f"pods disagree on the spec; used the view of the newest pod {newest.pod_key}")
        for d in group:
            if d.sub_group and d.sub_group in by_sg:
                by_sg[d.sub_group].pods.append(d.pod_name)
        for sg in merged.sub_groups:
            sg.pods.sort()
        out.append(MergedPodGroup(merged, group, notes))
    return out
