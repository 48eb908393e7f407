"""What a grouping plugin (native or Karta) decides a PodGroup must say.

Mirrors KAI's ``podgroup.Metadata`` but keeps ``min_member`` and ``min_sub_group`` explicit
(``None`` = unset) and carries ``provenance``: where each field's value came from, so the
decision can be explained by ``/podgroups`` and ``grouper explain``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from grouper.model.metadata_limits import Dropped, bound_metadata

# Kubernetes' scalability envelope is 150,000 pods per cluster (110 per node on 5,000 nodes): a gang that
# needs more than 100,000 pods at once cannot be placed on any cluster that exists (a warning, not an
# error: core.satisfiable in plans, karta.validate for literal replica counts).
MAX_GANG_PODS = 100_000

PODGROUP_API_VERSION = "scheduling.run.ai/v2alpha2"
PODGROUP_KIND = "PodGroup"
# What the grouper writes on each pod (KAI's names): the PodGroup annotation and the sub-group label.
POD_GROUP_ANNOTATION = "pod-group-name"
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
# Set by the admission webhook beside the spec.schedulingGroup it sets (upstream backend): the group is ours,
# so a reinvocation of the webhook (a later webhook, e.g. LWS's, added the labels the decision reads) may
# replace it, and the step-aside rule does not take it for a controller's own group.
OWN_SCHEDULING_GROUP_ANNOTATION = "podgrouper.kai.scheduler/scheduling-group"
# The grouper's own annotation on every PodGroup (KAI's): the top owner's name, uid, group, version, kind.
TOP_OWNER_METADATA_ANNOTATION = "kai.scheduler/top-owner-metadata"


class OwnerRef(NamedTuple):
    """An owner reference as written on the PodGroup (no controller / blockOwnerDeletion flags). A tuple,
    not a frozen dataclass: every decision builds a few (a dataclass's ``__init__`` is three
    ``object.__setattr__`` calls)."""

    api_version: str
    kind: str
    name: str
    uid: str

    def to_dict(self) -> dict[str, str]:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid}

    @classmethod
    def of(cls, obj: dict[str, Any]) -> OwnerRef:
        meta = obj.get("metadata") or {}
        return cls(
            str(obj.get("apiVersion") or ""),
            str(obj.get("kind") or ""),
            str(meta.get("name") or ""),
            str(meta.get("uid") or ""),
        )


@dataclass
class TopologyConstraint:
    topology: str = ""
    required_level: str = ""
    preferred_level: str = ""

    def is_empty(self) -> bool:
        return not (self.topology or self.required_level or self.preferred_level)

    def to_dict(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.preferred_level:
            out["preferredTopologyLevel"] = self.preferred_level
        if self.required_level:
            out["requiredTopologyLevel"] = self.required_level
        if self.topology:
            out["topology"] = self.topology
        return out


@dataclass
class SubGroup:
    """One sub-group. ``pods`` lists the names of pods (same namespace) known to belong to it.

    A plugin evaluates one pod at a time, so ``pods`` normally holds at most that pod; the
    planner and the controller merge memberships over all pods of a workload.
    """

    name: str
    min_member: int | None = None
    min_sub_group: int | None = None
    parent: str | None = None
    topology: TopologyConstraint | None = None
    pods: list[str] = field(default_factory=list)

    def with_pods(self, pods: list[str]) -> SubGroup:
        """``replace(self, pods=pods)`` at a fifth of its cost (merging copies every sub-group of a JobSet's
        PodGroup, 126 for 125 replicas, each pass); a test holds it to ``replace``."""
        return SubGroup(self.name, self.min_member, self.min_sub_group, self.parent, self.topology, pods)

    def same_spec(self, other: SubGroup) -> bool:
        """Equal but for the pods."""
        return self is other or (
            self.name == other.name and self.min_member == other.min_member and self.min_sub_group == other.min_sub_group
            and self.parent == other.parent and self.topology == other.topology
        )

    def to_spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.min_sub_group is not None:
            out["minSubGroup"] = self.min_sub_group
        elif self.min_member is not None:
            out["minMember"] = self.min_member
        if self.parent:
            out["parent"] = self.parent
        if self.topology is not None and not self.topology.is_empty():
            out["topologyConstraint"] = self.topology.to_dict()
        return out


@dataclass
class PodGroupMetadata:
    name: str
    namespace: str
    owner: OwnerRef
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    queue: str = ""
    priority_class_name: str = ""
    preemptibility: str = ""  # "", "preemptible" or "non-preemptible"
    preemption_delay: str | None = None  # a Kubernetes Duration string, e.g. "5m0s"
    staleness_grace_period: str | None = None
    min_member: int | None = 1
    min_sub_group: int | None = None
    sub_groups: list[SubGroup] = field(default_factory=list)
    topology: TopologyConstraint = field(default_factory=TopologyConstraint)
    # field name (e.g. "queue") -> human-readable source ("label kai.scheduler/queue on JobSet/js")
    provenance: dict[str, str] = field(default_factory=dict)
    # KAI v0.18 ``Metadata.Warnings``: the PodGroup is written, and each warning is reported as a
    # ``PodGrouperWarning`` Event on the pod (e.g. segmentation combined with semi-preemptible).
    warnings: list[str] = field(default_factory=list)

    def edit_copy(self) -> PodGroupMetadata:
        """A copy that can be edited without touching ``self``: every mutable part is new (the dicts,
        lists, sub-groups with their pod lists, the topology) — what ``copy.deepcopy`` gave, at a
        fraction of its cost (it was 15% of a Karta decision)."""
        return replace(
            self,
            labels=dict(self.labels),
            annotations=dict(self.annotations),
            sub_groups=[
                replace(sg, pods=list(sg.pods), topology=None if sg.topology is None else replace(sg.topology))
                for sg in self.sub_groups
            ],
            topology=replace(self.topology),
            provenance=dict(self.provenance),
            warnings=list(self.warnings),
        )

    def copy_without_pods(self, *, share: bool = False) -> PodGroupMetadata:
        """A copy to merge members into: new sub-group objects with empty pod lists; the rest is shared
        (a decision's metadata is not changed after it is made), so merging costs O(sub-groups).
        ``share``: the sub-groups themselves are this metadata's, in a new list, for a caller that
        replaces each one it gives pods to."""
        return self._replaced(
            sub_groups=list(self.sub_groups) if share else [sg.with_pods([]) for sg in self.sub_groups],
            labels=dict(self.labels),
            annotations=dict(self.annotations),
            provenance=dict(self.provenance),
            warnings=list(self.warnings),
        )

    def for_keeping(self) -> PodGroupMetadata:
        """The metadata without what only explains a decision (provenance: the decision's record has it)
        and without pod lists: what the controller keeps between reconciles to write the PodGroup again.
        Sub-groups without pods are kept as they are (shared, never changed), the rest copied."""
        return self._replaced(provenance={}, sub_groups=[sg.with_pods([]) if sg.pods else sg for sg in self.sub_groups])

    def _replaced(self, **changes: Any) -> PodGroupMetadata:
        """``dataclasses.replace(self, **changes)`` without its per-field introspection (the class has no
        ``__post_init__`` to run): a shallow copy with ``changes``. Every decision kept and every merge makes
        one (docs/performance.md)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new

    def bound_copied_metadata(self) -> Dropped:
        """Drop the labels and annotations the API server would refuse (:mod:`.metadata_limits`), in
        place; returns what was dropped. The grouper's own annotation is kept."""
        self.labels, self.annotations, dropped = bound_metadata(
            self.labels, self.annotations, keep=(TOP_OWNER_METADATA_ANNOTATION,)
        )
        return dropped

    def sub_group_of(self, pod_name: str) -> str | None:
        """The sub-group whose pod list holds ``pod_name`` (KAI's PodsReferences rule)."""
        for sg in self.sub_groups:
            if pod_name in sg.pods:
                return sg.name
        return None

    def spec(self) -> dict[str, Any]:
        """The PodGroup ``spec`` exactly as it should be stored (normalized: unset fields omitted)."""
        spec = self._spec_head()
        if self.sub_groups:
            spec["subGroups"] = [sg.to_spec() for sg in self.sub_groups]
        return spec

    def same_spec(self, other: PodGroupMetadata) -> bool:
        """``self.spec() == other.spec()``, without building the specs of sub-groups both share (the
        pods of a JobSet share all but one of its sub-groups: 126 for 125 replicas)."""
        if len(self.sub_groups) != len(other.sub_groups):
            return False
        for a, b in zip(self.sub_groups, other.sub_groups, strict=True):
            if a is not b and a.to_spec() != b.to_spec():
                return False
        return self._spec_head() == other._spec_head()

    def _spec_head(self) -> dict[str, Any]:
        spec: dict[str, Any] = {}
        if self.min_sub_group is not None:
            spec["minSubGroup"] = self.min_sub_group
        elif self.min_member is not None:
            spec["minMember"] = self.min_member
        if self.queue:
            spec["queue"] = self.queue
        if self.priority_class_name:
            spec["priorityClassName"] = self.priority_class_name
        if self.preemptibility:
            spec["preemptibility"] = self.preemptibility
        if self.preemption_delay:
            spec["preemptionDelay"] = self.preemption_delay
        if self.staleness_grace_period:
            spec["stalenessGracePeriod"] = self.staleness_grace_period
        # Always present, ``{}`` without a topology: KAI stores it so (a struct, not a pointer, in its
        # Go type), so a KAI podgrouper taking over our PodGroups finds nothing to rewrite. Readers that
        # compare (the writer) treat an absent constraint and ``{}`` as equal.
        spec["topologyConstraint"] = self.topology.to_dict()
        return spec

    def to_object(self) -> dict[str, Any]:
        """The full PodGroup object as it would be created."""
        meta: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "ownerReferences": [self.owner.to_dict()],
        }
        if self.labels:
            meta["labels"] = dict(self.labels)
        if self.annotations:
            meta["annotations"] = dict(self.annotations)
        return {
            "apiVersion": PODGROUP_API_VERSION,
            "kind": PODGROUP_KIND,
            "metadata": meta,
            "spec": self.spec(),
        }
