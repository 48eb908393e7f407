"""Grove PodCliqueSet / PodGangSet (KAI ``plugins/grove/grove_grouper.go``): one PodGroup per PodGang.

The pod's label ``grove.io/podgang`` names a ``scheduler.grove.io/v1alpha1`` PodGang, which Grove
fills with the gang structure; the default grouper runs with the PodGang as top owner
(``pg-<podgang>-<uid>``, owner = the PodGang). Then, as KAI:

- topology name: PodGang annotation ``grove.io/topology-name``, else ``kai.scheduler/topology``;
  PodGroup levels from ``spec.topologyConstraint.packConstraint.{required,preferred}`` (levels
  without a topology name are an error);
- priority from the PodGang's ``spec.priorityClassName``;
- the real top owner's (PodCliqueSet's) labels and annotations are merged in without overriding, so
  metadata set on a DynamoGraphDeployment / PodCliqueSet reaches the PodGroup; then the merged
  ``priorityClassName`` label (not checked for existence, as KAI), ``kai.scheduler/preemptibility``
  label (invalid → error), ``kai.scheduler/preemption-delay`` annotation and missing topology
  fields are applied;
- parents from ``spec.topologyConstraintGroupConfigs[]`` (``minSubGroup`` = number of
  ``podGroupNames``), leaves from ``spec.podgroups[]`` (minMember = ``minReplicas`` > 0, pods =
  ``podReferences``, same namespace only); PodGroup minMember = Σ ``minReplicas``.

Choice: an empty ``spec.priorityClassName`` on the PodGang is ignored (KAI would set "").
"""

from __future__ import annotations

from grouper.core.context import GroupingContext
from grouper.model.errors import InvalidWorkload
from grouper.model.objects import Obj, describe, namespace, uid, with_pod_typemeta
from grouper.model.podgroup import PodGroupMetadata, SubGroup, TopologyConstraint
from grouper.plugins.common import (
    PREEMPTIBILITY_LABEL,
    PREEMPTIBILITY_VALUES,
    PREEMPTION_DELAY_ANNOTATION,
    PRIORITY_LABEL,
    TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
    annotations_of,
    fetch,
    int_spec_field,
    label_field,
    labels_of,
    list_spec_field,
    normalize_go_duration,
    spec_field,
    str_spec_field,
)
from grouper.plugins.default import default_metadata

PODGANG_LABEL = "grove.io/podgang"
PODGANG_API_VERSION = "scheduler.grove.io/v1alpha1"
GROVE_TOPOLOGY_ANNOTATION = "grove.io/topology-name"
PACK = ("topologyConstraint", "packConstraint")


def gang_topology_name(gang: Obj) -> str:
    ann = annotations_of(gang)
    if GROVE_TOPOLOGY_ANNOTATION in ann:
        return ann[GROVE_TOPOLOGY_ANNOTATION]
    return ann.get(TOPOLOGY_ANNOTATION, "")


def pack_constraint(gang: Obj, path: tuple[str | int, ...], topology: str) -> TopologyConstraint | None:
    """The pack constraint at ``path`` (+ ``topologyConstraint.packConstraint``), or None when unset."""
    required = str_spec_field(gang, *path, *PACK, "required")
    preferred = str_spec_field(gang, *path, *PACK, "preferred")
    if required is None and preferred is None:
        return None
    if not topology:
        raise InvalidWorkload(
            f"topology levels are set but no topology name is (annotation {GROVE_TOPOLOGY_ANNOTATION} "
            f"or {TOPOLOGY_ANNOTATION})", obj=describe(gang), field=spec_field(*path, *PACK),
        )
    return TopologyConstraint(topology=topology, required_level=required or "", preferred_level=preferred or "")


def _parents(gang: Obj, topology: str) -> tuple[list[SubGroup], dict[str, str]]:
    parents: list[SubGroup] = []
    parent_of: dict[str, str] = {}
    for i, config in enumerate(list_spec_field(gang, "spec", "topologyConstraintGroupConfigs") or []):
        path: tuple[str | int, ...] = ("spec", "topologyConstraintGroupConfigs", i)
        if not isinstance(config, dict):
            raise InvalidWorkload("expected an object", obj=describe(gang), field=spec_field(*path))
        group_name = str_spec_field(gang, *path, "name")
        if group_name is None:
            raise InvalidWorkload("missing required field", obj=describe(gang), field=spec_field(*path, "name"))
        members = list_spec_field(gang, *path, "podGroupNames") or []
        if not all(isinstance(m, str) for m in members):
            raise InvalidWorkload("expected a list of strings", obj=describe(gang),
                                  field=spec_field(*path, "podGroupNames"))
        if not members:
            continue
        for member in members:
            parent_of[member] = group_name
        parents.append(SubGroup(name=group_name, min_sub_group=len(members),
                                topology=pack_constraint(gang, path, topology)))
    return parents, parent_of


def _leaves(gang: Obj, topology: str, parent_of: dict[str, str]) -> tuple[list[SubGroup], int]:
    gang_ns = namespace(gang)
    leaves: list[SubGroup] = []
    total = 0
    for i, spec in enumerate(list_spec_field(gang, "spec", "podgroups") or []):
        path: tuple[str | int, ...] = ("spec", "podgroups", i)
        if not isinstance(spec, dict):
            raise InvalidWorkload("expected an object", obj=describe(gang), field=spec_field(*path))
        leaf_name = str_spec_field(gang, *path, "name")
        if leaf_name is None:
            raise InvalidWorkload("missing required field", obj=describe(gang), field=spec_field(*path, "name"))
        min_replicas = int_spec_field(gang, *path, "minReplicas")
        if min_replicas is None:
            raise InvalidWorkload("missing required field", obj=describe(gang),
                                  field=spec_field(*path, "minReplicas"))
        if min_replicas <= 0:
            raise InvalidWorkload(f"{min_replicas} is not valid: it must be greater than 0", obj=describe(gang),
                                  field=spec_field(*path, "minReplicas"))
        refs = list_spec_field(gang, *path, "podReferences")
        if refs is None:
            raise InvalidWorkload("missing required field", obj=describe(gang),
                                  field=spec_field(*path, "podReferences"))
        pods: list[str] = []
        for j, _ in enumerate(refs):
            ref_path: tuple[str | int, ...] = (*path, "podReferences", j)
            ref_ns = str_spec_field(gang, *ref_path, "namespace")
            ref_name = str_spec_field(gang, *ref_path, "name")
            if ref_ns is None or ref_name is None:
                raise InvalidWorkload("needs namespace and name", obj=describe(gang), field=spec_field(*ref_path))
            if ref_ns != gang_ns:
                raise InvalidWorkload(
                    f"cross-namespace pod reference not allowed: pod {ref_ns}/{ref_name} cannot be referenced "
                    f"from a PodGang in namespace {gang_ns}", obj=describe(gang), field=spec_field(*ref_path),
                )
            pods.append(ref_name)
        leaves.append(SubGroup(name=leaf_name, min_member=min_replicas, parent=parent_of.get(leaf_name),
                               topology=pack_constraint(gang, path, topology), pods=pods))
        total += min_replicas
    return leaves, total


def _apply_top_owner_metadata(md: PodGroupMetadata, gang: Obj, top: Obj) -> None:
    """KAI ``parseMetadataFromTopOwner``: settings carried by the merged labels/annotations."""
    gang_labels = labels_of(gang)

    def source(key: str) -> str:
        return describe(gang) if key in gang_labels else describe(top)

    if PRIORITY_LABEL in md.labels:
        md.priority_class_name = md.labels[PRIORITY_LABEL]
        md.provenance["priorityClassName"] = f"label {PRIORITY_LABEL} on {source(PRIORITY_LABEL)}"
    if PREEMPTIBILITY_LABEL in md.labels:
        value = md.labels[PREEMPTIBILITY_LABEL]
        if value and value not in PREEMPTIBILITY_VALUES:
            holder = gang if PREEMPTIBILITY_LABEL in gang_labels else top
            raise InvalidWorkload(f"invalid preemptibility {value!r}: must be one of {', '.join(PREEMPTIBILITY_VALUES)}",
                                  obj=describe(holder), field=label_field(PREEMPTIBILITY_LABEL))
        md.preemptibility = value
        md.provenance["preemptibility"] = f"label {PREEMPTIBILITY_LABEL} on {source(PREEMPTIBILITY_LABEL)}"
    raw_delay = md.annotations.get(PREEMPTION_DELAY_ANNOTATION)
    if raw_delay is not None:
        try:
            md.preemption_delay = normalize_go_duration(raw_delay, allow_negative=False)
            md.provenance["preemptionDelay"] = f"annotation {PREEMPTION_DELAY_ANNOTATION} on the PodGang or {describe(top)}"
        except ValueError:
            pass  # KAI logs and keeps what the default grouper found
    tc = md.topology
    filled = TopologyConstraint(
        topology=tc.topology or md.annotations.get(TOPOLOGY_ANNOTATION, ""),
        required_level=tc.required_level or md.annotations.get(TOPOLOGY_REQUIRED_ANNOTATION, ""),
        preferred_level=tc.preferred_level or md.annotations.get(TOPOLOGY_PREFERRED_ANNOTATION, ""),
    )
    if filled != tc:
        md.topology = filled
        md.provenance["topology"] += f"; missing fields from annotations of the PodGang / {describe(top)}"


class GroveGrouper:
    name = "Grove Grouper"
    label_keys: frozenset[str] = frozenset({PODGANG_LABEL})  # the pod labels it reads besides DefaultGrouper's

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata | None:
        pod = with_pod_typemeta(ctx.pod)
        gang_name = labels_of(pod).get(PODGANG_LABEL)
        if not gang_name:
            raise InvalidWorkload("is missing; Grove pods name their PodGang", obj=describe(pod),
                                  field=label_field(PODGANG_LABEL))
        gang = fetch(ctx, PODGANG_API_VERSION, "PodGang", namespace(pod), gang_name,
                     why=f"named by label {PODGANG_LABEL} of {describe(pod)}")
        if gang is None:
            return None
        md = default_metadata(ctx, top_owner=gang, owners=[gang])
        topology = gang_topology_name(gang)
        pg_constraint = pack_constraint(gang, ("spec",), topology)
        if pg_constraint is not None:
            md.topology = pg_constraint
            md.provenance["topology"] = f"spec.topologyConstraint.packConstraint of {describe(gang)}"
        priority = str_spec_field(gang, "spec", "priorityClassName")
        if priority:
            md.priority_class_name = priority
            md.provenance["priorityClassName"] = f"spec.priorityClassName of {describe(gang)}"
        top = ctx.top_owner
        if top is not gang and uid(top) != uid(gang):
            for key, value in labels_of(top).items():
                md.labels.setdefault(key, value)
            for key, value in annotations_of(top).items():
                md.annotations.setdefault(key, value)
        _apply_top_owner_metadata(md, gang, top)
        parents, parent_of = _parents(gang, topology)
        leaves, total = _leaves(gang, topology, parent_of)
        md.sub_groups = parents + leaves
        md.min_member = total
        md.provenance["minMember"] = f"sum of spec.podgroups[*].minReplicas of {describe(gang)}"
        return md


__all__ = ["GroveGrouper", "gang_topology_name", "pack_constraint"]
