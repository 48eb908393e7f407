"""Typed, immutable view of a Karta definition (``run.ai/v1alpha1 Karta`` or the older
``optimization.nvidia.com/v1alpha1 ResourceInterface``; karta.md §1).

Every component remembers its JSON-ish location (``path``) so validation issues and evaluation
errors can name the exact field. The raw document is kept in ``KartaDefinition.raw``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from grouper.model.objects import GVK

KARTA_API_VERSION = "run.ai/v1alpha1"
KARTA_KIND = "Karta"
LEGACY_API_VERSION = "optimization.nvidia.com/v1alpha1"
LEGACY_KIND = "ResourceInterface"

# Upstream match order of statuses (newest API); the legacy API has a subset in the same order.
STATUS_ORDER: tuple[str, ...] = (
    "Resuming",
    "Suspending",
    "Suspended",
    "Running",
    "Failed",
    "Completed",
    "Initializing",
    "Degraded",
)
UNDEFINED_STATUS = "Undefined"
# statusMappings JSON key for each status.
STATUS_KEYS: dict[str, str] = {s: s.lower() for s in STATUS_ORDER}
LEGACY_STATUS_KEYS = ("running", "failed", "completed", "initializing", "degraded")

# fragmentedPodSpecDefinition fields in declaration order (JSON names).
FRAGMENT_FIELDS: tuple[str, ...] = (
    "schedulerNamePath",
    "labelsPath",
    "annotationsPath",
    "resourcesPath",
    "resourceClaimsPath",
    "podAffinityPath",
    "nodeAffinityPath",
    "containersPath",
    "containerPath",
    "priorityClassNamePath",
    "imagePath",
)


@dataclass(frozen=True)
class ComponentTypeSelector:
    """Decides whether a pod is of a component's type; all given conditions are ANDed."""

    key_path: str | None = None
    value: str | None = None
    match_labels: dict[str, str] = field(default_factory=dict)

    def signature(self) -> tuple[str | None, str | None, tuple[tuple[str, str], ...]]:
        """Comparable form, used to spot sibling components with identical selectors."""
        return (self.key_path, self.value, tuple(sorted(self.match_labels.items())))


@dataclass(frozen=True)
class PodSelector:
    component_type: ComponentTypeSelector | None = None
    # componentInstanceSelector.idPath; ``has_instance_selector`` distinguishes "absent" from "".
    instance_id_path: str | None = None
    has_instance_selector: bool = False
    # replicaSelector.keyPath
    replica_key_path: str | None = None
    has_replica_selector: bool = False


@dataclass(frozen=True)
class SpecDefinition:
    pod_template_spec_path: str | None = None
    pod_spec_path: str | None = None
    metadata_path: str | None = None
    # fragmentedPodSpecDefinition: JSON field name -> jq path (only the fields that are set);
    # ``None`` when the object itself is absent.
    fragmented: dict[str, str] | None = None

    def pod_definition_count(self) -> int:
        """How many of the three mutually exclusive pod definitions are set (metadataPath excluded)."""
        return sum(
            (
                bool(self.pod_template_spec_path),
                bool(self.pod_spec_path),
                self.fragmented is not None,
            )
        )


@dataclass(frozen=True)
class ScaleDefinition:
    replicas_path: str | None = None
    min_replicas_path: str | None = None
    max_replicas_path: str | None = None

    def paths(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.replicas_path:
            out["replicas"] = self.replicas_path
        if self.min_replicas_path:
            out["minReplicas"] = self.min_replicas_path
        if self.max_replicas_path:
            out["maxReplicas"] = self.max_replicas_path
        return out


@dataclass(frozen=True)
class ConditionMatcher:
    type: str
    status: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class ExpressionMatcher:
    expression: str
    expected_result: str


@dataclass(frozen=True)
class StatusMatcher:
    """All criteria present are ANDed; a matcher without criteria always matches (upstream)."""

    by_phase: str | None = None
    by_conditions: tuple[ConditionMatcher, ...] = ()
    by_expression: ExpressionMatcher | None = None


@dataclass(frozen=True)
class ConditionsDefinition:
    path: str
    type_field: str = "type"
    status_field: str = "status"
    message_field: str = "message"
    reason_field: str = "reason"


@dataclass(frozen=True)
class StatusDefinition:
    phase_path: str | None = None
    conditions: ConditionsDefinition | None = None
    # status name (e.g. "Running") -> matchers (ORed); only the statuses present in the document.
    mappings: dict[str, tuple[StatusMatcher, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class SuspendAction:
    path: str
    value: str  # JSON-encoded


@dataclass(frozen=True)
class SuspendDefinition:
    suspend_actions: tuple[SuspendAction, ...] = ()
    resume_actions: tuple[SuspendAction, ...] = ()


@dataclass(frozen=True)
class Component:
    name: str
    path: str  # e.g. "spec.structureDefinition.childComponents[0]"
    kind: GVK | None = None
    owner_ref: str | None = None
    spec: SpecDefinition | None = None
    scale: ScaleDefinition | None = None
    status: StatusDefinition | None = None
    suspend: SuspendDefinition | None = None
    instance_id_path: str | None = None
    pod_selector: PodSelector | None = None

    @property
    def has_pod_definition(self) -> bool:
        """A component with a pod definition is a *leaf* for gang purposes (karta.md §1.3)."""
        return self.spec is not None and self.spec.pod_definition_count() > 0

    @property
    def type_selector(self) -> ComponentTypeSelector | None:
        return self.pod_selector.component_type if self.pod_selector else None


@dataclass(frozen=True)
class TopologySpec:
    topology_name: str = ""
    preferred_level: str = ""
    required_level: str = ""


@dataclass(frozen=True)
class SubGroupMapping:
    component_name: str
    topology: TopologySpec | None = None


@dataclass(frozen=True)
class PodGroupMapping:
    """The v2 ``gangScheduling.podGroup`` instruction."""

    name: str
    topology: TopologySpec | None = None
    sub_groups: tuple[SubGroupMapping, ...] = ()


@dataclass(frozen=True)
class PodGroupMember:
    component_name: str
    group_by_key_paths: tuple[str, ...] = ()
    filters: tuple[str, ...] = ()


@dataclass(frozen=True)
class AlphaPodGroup:
    """One entry of the deprecated ``gangScheduling.podGroups`` list."""

    name: str
    members: tuple[PodGroupMember, ...] = ()


@dataclass(frozen=True)
class GangScheduling:
    pod_group: PodGroupMapping | None = None
    pod_groups: tuple[AlphaPodGroup, ...] = ()

    @property
    def has_instructions(self) -> bool:
        """KAI's rule: ``podGroup`` set or ``podGroups`` non-empty."""
        return self.pod_group is not None or bool(self.pod_groups)


@dataclass(frozen=True, eq=False)
class KartaDefinition:
    """One loaded definition. Identity-hashed so evaluators can cache per definition."""

    name: str
    gvk: GVK  # the root component's kind; GVK("", "", "") when the root has none
    origin: str
    api_version: str
    resource_version: str | None
    root: Component
    children: list[Component]
    gang: GangScheduling | None
    raw: dict[str, Any]
    additional_child_kinds: tuple[GVK, ...] = ()
    deleting: bool = False

    # ---- structure helpers (pure, no evaluation) ----

    def components(self) -> Iterator[Component]:
        """Root first, then children in definition order (upstream's leaf order)."""
        yield self.root
        yield from self.children

    def component(self, name: str) -> Component | None:
        # Children first, then root: on a duplicate name the root wins (upstream map order).
        found: Component | None = None
        for c in self.children:
            if c.name == name:
                found = c
        if self.root.name == name:
            found = self.root
        return found

    def children_of(self, name: str) -> list[Component]:
        return [c for c in self.children if c.owner_ref == name]

    def parent_of(self, name: str) -> Component | None:
        comp = self.component(name)
        if comp is None or comp is self.root or not comp.owner_ref:
            return None
        return self.component(comp.owner_ref)

    def ancestors(self, name: str) -> list[Component]:
        """Nearest first; stops on a cycle (the validator reports cycles)."""
        out: list[Component] = []
        seen = {name}
        cur = self.parent_of(name)
        while cur is not None and cur.name not in seen:
            out.append(cur)
            seen.add(cur.name)
            cur = self.parent_of(cur.name)
        return out

    def descendants(self, name: str) -> list[Component]:
        """Depth-first, definition order; cycle-safe."""
        out: list[Component] = []
        seen = {name}
        stack = list(reversed(self.children_of(name)))
        while stack:
            c = stack.pop()
            if c.name in seen:
                continue
            seen.add(c.name)
            out.append(c)
            stack.extend(reversed(self.children_of(c.name)))
        return out

    def leaves(self) -> list[Component]:
        """Components with a pod definition, root first then children order."""
        return [c for c in self.components() if c.has_pod_definition]

    def owner_kinds(self) -> set[tuple[str, str]]:
        """The (group, kind) of the root and the components: the owners its pods can have (what the
        controller's owner walk may follow and cache). ``additionalChildKinds`` (Services, routes, ...) own
        no pods and are not followed."""
        out = {(c.kind.group, c.kind.kind) for c in self.components() if c.kind is not None and c.kind.kind}
        if self.gvk.kind:
            out.add((self.gvk.group, self.gvk.kind))
        return out

    def pod_paths(self) -> list[str]:
        """The jq paths evaluated on pods (selectors and alpha grouping keys): the pod fields a cache must keep."""
        paths: list[str] = []
        for c in self.components():
            sel = c.pod_selector
            if sel is None:
                continue
            if sel.component_type is not None and sel.component_type.key_path:
                paths.append(sel.component_type.key_path)
            paths.extend(p for p in (sel.instance_id_path, sel.replica_key_path) if p)
        for group in self.gang.pod_groups if self.gang is not None else ():
            for member in group.members:
                paths.extend(member.group_by_key_paths)
                paths.extend(member.filters)
        return paths

    @property
    def has_scale_definition(self) -> bool:
        """Switches subtree scale between Mode A (scale) and Mode B (leaf count), karta.md §3.6."""
        return any(c.scale is not None for c in self.components())

    @property
    def is_empty(self) -> bool:
        """KAI skips Kartas whose root has no name and that have no children."""
        return not self.root.name and not self.children

    @property
    def display(self) -> str:
        return f"{self.name} ({self.origin})"
