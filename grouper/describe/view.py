"""The describe view: what ``grouper describe`` prints and the HTTP API serves (``to_dict()``).

JSON field names follow ``kli describe -o json`` (karta.md §5.2): the workload identity inline,
then ``fileMode``, ``resources``, ``components[]`` (``name``, ``kind``, ``replicas``,
``resources``, ``nodes``, ``pods[]``, ``children[]``). Additions: ``label``/``instance``/
``replicaKey``/``grouping`` on component nodes, ``resourceTable``, ``unassignedPods`` and
``warnings``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grouper.describe.resources import ZERO, Resources


@dataclass(frozen=True)
class Replicas:
    """``desired`` is None where the definition cannot say (rows of a leaf split by replica key)."""

    desired: int | None
    current: int
    ready: int

    def to_dict(self) -> dict[str, Any]:
        return {"desired": self.desired, "current": self.current, "ready": self.ready}


@dataclass(frozen=True)
class PodView:
    name: str
    phase: str
    ready: bool
    node: str | None
    reason: str | None
    resources: Resources
    component: str | None = None
    instance: str | None = None

    @property
    def healthy(self) -> bool:
        """Succeeded, or Running and Ready."""
        return self.phase == "Succeeded" or (self.phase == "Running" and self.ready)

    @property
    def active(self) -> bool:
        """Counts as a current replica: not finished."""
        return self.phase not in ("Succeeded", "Failed")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "phase": self.phase,
            "ready": self.ready,
            "node": self.node,
            "reason": self.reason,
            "resources": self.resources.to_dict(),
        }


@dataclass
class ComponentNode:
    """One row of the component tree: a component, one of its instances, or one replica."""

    name: str
    label: str
    kind: str = ""
    api_version: str = ""
    instance: str | None = None
    replica_key: str | None = None
    grouping: bool = False
    replicas: Replicas = field(default_factory=lambda: Replicas(0, 0, 0))
    resources: Resources = ZERO
    nodes: list[str] = field(default_factory=list)
    pods: list[PodView] = field(default_factory=list)
    children: list[ComponentNode] = field(default_factory=list)

    def walk(self) -> list[ComponentNode]:
        out = [self]
        for c in self.children:
            out.extend(c.walk())
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "kind": self.kind,
            "apiVersion": self.api_version,
            "instance": self.instance,
            "replicaKey": self.replica_key,
            "grouping": self.grouping,
            "replicas": self.replicas.to_dict(),
            "resources": self.resources.to_dict(),
            "nodes": list(self.nodes),
            "pods": [p.to_dict() for p in self.pods],
            "children": [c.to_dict() for c in self.children],
        }


@dataclass(frozen=True)
class ResourceRow:
    """One row of the Resources table: a pod-bearing component, summed over the tree."""

    component: str
    replicas: int
    resources: Resources

    def to_dict(self) -> dict[str, Any]:
        return {"component": self.component, "replicas": self.replicas, "resources": self.resources.to_dict()}


@dataclass
class DescribeView:
    name: str
    namespace: str
    kind: str
    api_version: str
    created_at: str | None
    definition: str
    origin: str
    phases: list[str]
    file_mode: bool
    resources: Resources = ZERO
    components: list[ComponentNode] = field(default_factory=list)
    resource_table: list[ResourceRow] = field(default_factory=list)
    unassigned_pods: list[PodView] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "kind": self.kind,
            "apiVersion": self.api_version,
            "createdAt": self.created_at,
            "definition": self.definition,
            "origin": self.origin,
            "phases": list(self.phases),
            "fileMode": self.file_mode,
            "resources": self.resources.to_dict(),
            "components": [c.to_dict() for c in self.components],
            "resourceTable": [r.to_dict() for r in self.resource_table],
            "unassignedPods": [p.to_dict() for p in self.unassigned_pods],
            "warnings": list(self.warnings),
        }
