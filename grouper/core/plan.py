"""Offline planning: run the core over a fixed set of objects, as ``grouper plan`` does.

Given workloads, their intermediate owners and pods (plus, optionally, Karta objects,
PriorityClasses and the defaults ConfigMap), plan each namespace's pods on the controller's own path
(:func:`grouper.core.workload_plan.plan_workload`): every pod decided, the decisions merged into the
PodGroups the controller would write. No cluster is involved.

Workload groups (``WorkloadGroup`` objects and workloads annotated ``kai.scheduler/workload-group``) are
then composed from those plans (:mod:`grouper.core.workload_group`): a member's own PodGroups are replaced
by the group's rendered PodGroup (or, until the group is complete and valid, by nothing: its pods name the
unwritten PodGroup, the gate), and its pods' places follow.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from grouper.core.config import GroupingConfig
from grouper.core.decision import Decision
from grouper.core.grouping import Grouper
from grouper.core.lookups import InMemoryLookups
from grouper.core.satisfiable import plan_reasons
from grouper.core.workload_context import WorkloadContext
from grouper.core.workload_group import GroupRender, render_kai
from grouper.core.workload_group_members import GroupKey, collect
from grouper.core.workload_plan import PlannedGroup, plan_workload
from grouper.model import objects as o
from grouper.model import workload_group as wg
from grouper.model.objects import Obj


@dataclass
class PlanResult:
    pod_groups: list[PlannedGroup] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    workload_groups: list[GroupRender] = field(default_factory=list)
    # pod key -> (PodGroup, sub-group) for the pods of workload-group members (their decision's own
    # PodGroup is replaced by the group's)
    group_placement: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    membership_errors: list[str] = field(default_factory=list)  # annotations naming no valid group

    @property
    def errors(self) -> list[Decision]:
        return [d for d in self.decisions if d.outcome == "error"]

    @property
    def groups_not_rendered(self) -> list[GroupRender]:
        return [g for g in self.workload_groups if g.state != "Rendered"]

    def place_of(self, d: Decision) -> tuple[str | None, str | None]:
        """The pod's (PodGroup, sub-group) in this plan: its group's when it is a member's pod."""
        if d.pod_key in self.group_placement:
            return self.group_placement[d.pod_key]
        return (d.pod_group.name if d.pod_group else None, d.sub_group)

    @property
    def warnings(self) -> list[str]:
        """Why PodGroups of the plan can never be scheduled (``satisfiable.unsatisfiable_reasons``)."""
        return [w for pg in self.pod_groups for w in plan_reasons(pg)]

    def plugin_of(self, group: PlannedGroup) -> str | None:
        """The plugin that decided the group's newest pod (``workload-group`` for a rendered group)."""
        if group.metadata.owner.kind == wg.KIND and group.metadata.owner.api_version == wg.API_VERSION:
            return "workload-group"
        return next((d.plugin for d in self.decisions if d.pod_name == group.newest
                     and d.pod_namespace == group.metadata.namespace), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "podGroups": [pg.metadata.to_object() for pg in self.pod_groups],
            "pods": [
                {
                    "namespace": d.pod_namespace,
                    "name": d.pod_name,
                    "podGroup": self.place_of(d)[0],
                    "subGroup": self.place_of(d)[1],
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
            **({"workloadGroups": [g.to_json() for g in self.workload_groups]} if self.workload_groups else {}),
            **({"membershipErrors": list(self.membership_errors)} if self.membership_errors else {}),
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
        # one pass over the namespace's pods: owner chains, plugins' per-workload parts and PodGroup checks
        # shared (pods of several workloads: none given to prepare for together)
        planned = plan_workload(by_ns[ns], functools.partial(grouper.decide, lookups=lookups, workload=WorkloadContext()),
                                namespace=ns)
        result.pod_groups.extend(planned.groups)
        result.decisions.extend(d for _, d in planned.decided)
    compose_groups(result, objects, lookups)
    return result


def priority_values(objects: list[Obj]) -> dict[str, int]:
    """PriorityClass name -> value, from the objects given."""
    return {
        o.name(obj): obj["value"] for obj in objects
        if obj.get("kind") == "PriorityClass" and str(obj.get("apiVersion") or "").startswith("scheduling.k8s.io/")
        and isinstance(obj.get("value"), int) and not isinstance(obj.get("value"), bool)
    }


def compose_groups(result: PlanResult, objects: list[Obj], lookups: InMemoryLookups) -> None:
    """Render every workload group of ``objects`` into ``result`` (see the module doc)."""
    specs: dict[GroupKey, wg.WorkloadGroup | str] = {}
    for obj in objects:
        if wg.is_workload_group(obj):
            key = (o.namespace(obj), o.name(obj))
            try:
                specs[key] = wg.parse(obj)
            except wg.InvalidWorkloadGroup as exc:
                specs[key] = str(exc)
    annotated = [obj for obj in objects if obj.get("kind") != "Pod" and o.metadata_problem(obj) is None
                 and wg.WORKLOAD_GROUP_ANNOTATION in o.annotations(obj)]
    if not specs and not annotated:
        return
    by_key = {f"{o.namespace(p)}/{o.name(p)}": p for p in objects if p.get("kind") == "Pod"}
    found = collect(result.decisions, result.pod_groups, lookups, annotated, by_key)
    result.membership_errors = found.errors
    values = priority_values(objects)
    replaced: set[tuple[str, str]] = set()
    for ns, name in sorted(set(specs) | set(found.members)):
        spec = specs.get((ns, name))
        members = found.members.get((ns, name), [])
        render = render_kai(
            ns, name, spec if isinstance(spec, wg.WorkloadGroup) else None, members, values,
            spec_error=spec if isinstance(spec, str) else None,
        )
        result.workload_groups.append(render)
        for m in members:
            replaced.update((ns, g.metadata.name) for g in m.groups)
        result.group_placement.update({f"{ns}/{pod}": place for pod, place in render.placement.items()})
        if render.pod_group is not None:
            pods = sorted(render.placement)
            result.pod_groups.append(PlannedGroup(render.pod_group, pods, list(render.notes)))
    result.pod_groups = sorted(
        (g for g in result.pod_groups if (g.metadata.namespace, g.metadata.name) not in replaced),
        key=lambda g: (g.metadata.namespace, g.metadata.name),
    )

