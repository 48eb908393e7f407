"""Offline planning: run the core over a fixed set of objects, as ``grouper plan`` does.

Given workloads, their intermediate owners and pods (plus, optionally, Karta objects,
PriorityClasses and the defaults ConfigMap), plan each namespace's pods on the controller's own path
(:func:`grouper.core.workload_plan.plan_workload`): every pod decided, the decisions merged into the
PodGroups the controller would write. No cluster is involved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grouper.core.config import GroupingConfig
from grouper.core.decision import Decision
from grouper.core.grouping import Grouper
from grouper.core.lookups import InMemoryLookups
from grouper.core.satisfiable import plan_reasons
from grouper.core.workload_plan import PlannedGroup, plan_workload
from grouper.model import objects as o
from grouper.model.objects import Obj


@dataclass
class PlanResult:
    pod_groups: list[PlannedGroup] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)

    @property
    def errors(self) -> list[Decision]:
        return [d for d in self.decisions if d.outcome == "error"]

    @property
    def warnings(self) -> list[str]:
        """Why PodGroups of the plan can never be scheduled (``satisfiable.unsatisfiable_reasons``)."""
        return [w for pg in self.pod_groups for w in plan_reasons(pg)]

    def plugin_of(self, group: PlannedGroup) -> str | None:
        """The plugin that decided the group's newest pod."""
        return next((d.plugin for d in self.decisions if d.pod_name == group.newest
                     and d.pod_namespace == group.metadata.namespace), None)

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
            # pods the grouper leaves alone, and why (a step aside, another scheduler, a finished pod, ...)
            "skipped": [
                {"pod": d.pod_key, "reason": d.reason, "message": d.message}
                for d in self.decisions
                if d.outcome == "skipped"
            ],
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
    by_ns: dict[str, list[Obj]] = {}
    for pod in pods:
        by_ns.setdefault(o.namespace(pod), []).append(pod)
    result = PlanResult()
    for ns in sorted(by_ns):  # PodGroup names are unique per namespace: one merge each
        planned = plan_workload(by_ns[ns], lambda pod: grouper.decide(pod, lookups), namespace=ns)
        result.pod_groups.extend(planned.groups)
        result.decisions.extend(d for _, d in planned.decided)
    return result

