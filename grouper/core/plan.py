"""Offline planning: run the core over a fixed set of objects, as ``grouper plan`` does.

Given workloads, their intermediate owners and pods (plus, optionally, Karta objects,
PriorityClasses and the defaults ConfigMap), decide every pod and merge the decisions into the
PodGroups that the controller would write. No cluster is involved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grouper.core.config import GroupingConfig
from grouper.core.decision import Decision
from grouper.core.grouping import Grouper
from grouper.core.lookups import InMemoryLookups
from grouper.core.merge import MergedPodGroup, merge_pod_groups
from grouper.core.satisfiable import plan_reasons
from grouper.model import objects as o
from grouper.model.objects import Obj


@dataclass
class PlanResult:
    pod_groups: list[MergedPodGroup] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)

    @property
    def errors(self) -> list[Decision]:
        return [d for d in self.decisions if d.outcome == "error"]

    @property
    def warnings(self) -> list[str]:
        """Why PodGroups of the plan can never be scheduled (``satisfiable.unsatisfiable_reasons``)."""
        return [w for pg in self.pod_groups for w in plan_reasons(pg)]

    def to_json(self) -> dict[str, Any]:
        return {
            "podGroups": [pg.metadata.to_object() for pg in self.pod_groups],
            "pods": [
                {
                    "namespace": d.pod_namespace,
                    "name": d.pod_name,
                    "podGroup": d.pod_group.name if d.pod_group else None,
                    "subGroup": d.sub_group,
                    "plugin": d.plugin,
                }
                for d in self.decisions
            ],
            "errors": [{"pod": d.pod_key, "error": d.message} for d in self.errors],
            "warnings": self.warnings,
        }


def plan(objects: list[Obj], grouper: Grouper, config: GroupingConfig | None = None) -> PlanResult:
    config = config or grouper.config
    cm = None
    if config.default_priorities_configmap_name and config.default_priorities_configmap_namespace:
        cm = (config.default_priorities_configmap_namespace, config.default_priorities_configmap_name)
    lookups = InMemoryLookups(objects, defaults_configmap=cm)
    pods = sorted(
        (obj for obj in objects if obj.get("kind") == "Pod" and obj.get("apiVersion") == "v1"),
        key=lambda p: (o.namespace(p), o.name(p)),
    )
    decisions = [grouper.decide(pod, lookups) for pod in pods]
    creation = {f"{o.namespace(p)}/{o.name(p)}": str(o.meta(p).get("creationTimestamp") or "") for p in pods}
    return PlanResult(merge_pod_groups(decisions, creation), decisions)
