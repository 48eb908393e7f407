"""JobSet (jobset.x-k8s.io/v1alpha2), after KAI's ``plugins/jobset/jobset_grouper.go`` and
``legacy_grouper.go``.

One PodGroup ``pg-<jobset>-<uid>`` per JobSet with two levels of sub-groups:

- root ``minSubGroup``: JobSet annotation ``kai.scheduler/batch-min-member`` (>= 1, clamped to the number
  of replicatedJobs) → 1 for ``spec.startupPolicy.startupPolicyOrder: InOrder`` → number of
  replicatedJobs. ``minMember`` is not set.
- per replicatedJob a parent ``<rj>`` with ``minSubGroup`` = ``replicas`` (default 1), and per replica a
  leaf ``<rj>-replica-<i>`` whose minMember is the template annotation ``kai.scheduler/batch-min-member``
  (>= 1; above parallelism is accepted) else ``template.spec.parallelism`` (default 1). Leaves get a
  topology constraint from the template annotations ``kai.scheduler/topology`` +
  ``-required-placement`` / ``-preferred-placement`` (name and at least one level needed); the PodGroup
  keeps the JobSet-level topology from the default grouper.
- the pod goes to leaf ``<jobset.sigs.k8s.io/replicatedjob-name>-replica-<jobset.sigs.k8s.io/job-index>``;
  both labels are required.

Legacy shape (reference §8 item 12, kept as upstream): with ``config.search_legacy_pg``, if a PodGroup in
the namespace named ``pg-<jobset>-<uid>`` or ``pg-<jobset>-<uid>-…`` has no sub-groups, the old flat shape
is emitted so in-flight workloads keep their PodGroup: the same name (``pg-<jobset>-<uid>-<rj>`` for
InOrder), minMember = JobSet ``batch-min-member`` or 1, no sub-groups.

Choices where KAI is loose:
- A replicatedJob with ``replicas: 0`` becomes a leaf ``<rj>`` with minMember 0 (KAI emits a parent with
  ``minSubGroup: 0`` and no children, which the PodGroup webhook rejects). Negative replicas/parallelism
  are errors.
- The legacy ``batch-min-member`` must be >= 1 like the new shape's (KAI accepts any int there).
- Listing PodGroups being forbidden is an error (as KAI: a failed List fails the reconcile).
- At most 10000 replica leaves per JobSet ("greater than max allowed segmentation"), the same cap as
  segments; KAI has none (a larger PodGroup would not fit in etcd anyway).
- A pod whose labels name no leaf (unknown replicatedJob, index >= replicas) is an error, as in KAI.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from grouper.core.context import GroupingContext
from grouper.model.errors import GroupingError, InvalidWorkload, LookupForbidden
from grouper.model.objects import Obj, describe, dig, name, namespace, uid
from grouper.model.podgroup import (
    PodGroupMetadata,
    SubGroup,
    TopologyConstraint,
)
from grouper.plugins.common import (
    MIN_MEMBER_ANNOTATION,
    TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
    int_annotation,
    parse_int,
    spec_field,
)
from grouper.plugins.default import default_metadata
from grouper.plugins.segments import (
    annotations_at,
    check_segment_count,
    int_field,
    list_field,
    pod_desc,
    required_label,
    str_field,
)

REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
IN_ORDER = "InOrder"
ANY_ORDER = "AnyOrder"


class JobSetGrouper:
    """JobSet: one PodGroup, a parent sub-group per replicatedJob, a leaf per replica."""

    name = "JobSet Grouper"
    label_keys: frozenset[str] = frozenset({REPLICATED_JOB_LABEL, JOB_INDEX_LABEL})  # the pod labels it reads besides DefaultGrouper's

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata:
        js, pod = ctx.top_owner, ctx.pod
        if not name(js) or not uid(js):
            raise InvalidWorkload("the JobSet top owner is missing its name or uid", obj=describe(js))
        rjobs = _replicated_jobs(js)
        if not rjobs:
            raise InvalidWorkload("JobSet has no replicatedJobs", obj=describe(js), field="spec.replicatedJobs")
        base = f"pg-{name(js)}-{uid(js)}"

        if ctx.config.search_legacy_pg and _legacy_podgroup_exists(ctx, base):
            return _legacy_metadata(ctx, base)

        md = default_metadata(ctx)
        md.name = base
        md.min_member = None
        md.min_sub_group, md.provenance["minSubGroup"] = _root_min_sub_group(js, len(rjobs))
        md.provenance["minMember"] = "not set: the root uses minSubGroup"
        md.sub_groups = _route_pod(pod, *ctx.prepared(self))
        md.provenance["subGroups"] = (
            f"replicatedJobs of {describe(js)}; pod routed by labels {REPLICATED_JOB_LABEL} and {JOB_INDEX_LABEL}"
        )
        return md

    def prepare(self, top_owner: Obj, pods: Sequence[Obj]) -> tuple[tuple[SubGroup, ...], dict[str, int]]:
        """The JobSet's sub-groups (a function of its replicatedJobs alone: 126 of them for 125 replicas, the
        same for every pod), once per planning pass (``GroupingContext.prepared``), and each one's index by
        name. Every pod's metadata shares them except the sub-group it joins, a copy naming the pod (nothing
        changes a decision's sub-groups after it is made: merging copies them): never change them."""
        groups = tuple(_sub_groups(top_owner, _replicated_jobs(top_owner)))
        return groups, {sg.name: i for i, sg in reversed(list(enumerate(groups)))}


def _replicated_jobs(js: Obj) -> list[dict[str, Any]]:
    raw = list_field(js, "spec", "replicatedJobs") or []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise InvalidWorkload("replicatedJob is not an object", obj=describe(js), field=f"spec.replicatedJobs[{i}]")
    return raw


def _root_min_sub_group(js: Obj, count: int) -> tuple[int, str]:
    override = int_annotation(js, MIN_MEMBER_ANNOTATION, minimum=1)
    if override is not None:
        return min(override, count), (
            f"annotation {MIN_MEMBER_ANNOTATION} on {describe(js)} (clamped to {count} replicatedJobs)"
        )
    if _startup_order(js) == IN_ORDER:
        return 1, f"spec.startupPolicy.startupPolicyOrder {IN_ORDER} on {describe(js)}"
    return count, f"number of replicatedJobs of {describe(js)}"


def _startup_order(js: Obj) -> str:
    return str_field(js, "spec", "startupPolicy", "startupPolicyOrder", default=ANY_ORDER)


def _sub_groups(js: Obj, rjobs: list[dict[str, Any]]) -> list[SubGroup]:
    replicas = [int_field(js, "spec", "replicatedJobs", i, "replicas", default=1, minimum=0) for i in range(len(rjobs))]
    check_segment_count(sum(replicas), where=describe(js), what="replica sub-groups")
    out: list[SubGroup] = []
    for i, count in enumerate(replicas):
        rj_name = str_field(js, "spec", "replicatedJobs", i, "name")
        if not rj_name:
            raise InvalidWorkload("is missing", obj=describe(js), field=f"spec.replicatedJobs[{i}].name")
        if count == 0:  # a parent without children breaks the webhook rules; an empty leaf does not
            out.append(SubGroup(rj_name, min_member=0))
            continue
        leaf_min = _leaf_min_member(js, i)
        topology = _leaf_topology(js, i)
        out.append(SubGroup(rj_name, min_member=None, min_sub_group=count))
        out.extend(
            SubGroup(f"{rj_name}-replica-{idx}", min_member=leaf_min, parent=rj_name,
                     topology=replace(topology) if topology else None)
            for idx in range(count)
        )
    return out


def _template_annotations(js: Obj, i: int) -> dict[str, str]:
    return annotations_at(js, "spec", "replicatedJobs", i, "template", "metadata", "annotations")


def _leaf_min_member(js: Obj, i: int) -> int:
    parallelism = int_field(js, "spec", "replicatedJobs", i, "template", "spec", "parallelism", default=1, minimum=0)
    override = _template_annotations(js, i).get(MIN_MEMBER_ANNOTATION)
    if not override:
        return parallelism
    # Above parallelism is accepted on purpose (KAI logs it): the user asked for it.
    field = f"{spec_field('spec', 'replicatedJobs', i, 'template', 'metadata', 'annotations')}[{MIN_MEMBER_ANNOTATION!r}]"
    return parse_int(override, obj=describe(js), field=field, minimum=1)


def _leaf_topology(js: Obj, i: int) -> TopologyConstraint | None:
    ann = _template_annotations(js, i)
    topology = ann.get(TOPOLOGY_ANNOTATION, "")
    required = ann.get(TOPOLOGY_REQUIRED_ANNOTATION, "")
    preferred = ann.get(TOPOLOGY_PREFERRED_ANNOTATION, "")
    if not topology or not (required or preferred):
        return None
    return TopologyConstraint(topology=topology, required_level=required, preferred_level=preferred)


def _route_pod(pod: Obj, sub_groups: tuple[SubGroup, ...], index: dict[str, int]) -> list[SubGroup]:
    """The sub-groups with the pod's leaf replaced by a copy that lists the pod."""
    rj = required_label(pod, REPLICATED_JOB_LABEL)
    idx = required_label(pod, JOB_INDEX_LABEL)
    leaf = f"{rj}-replica-{idx}"
    if len(index) == len(sub_groups):  # unique names: the first match in order is one of two
        hits = [index[n] for n in (leaf, rj) if n in index]
    else:  # duplicates (the PodGroup rules reject them next): route as by a scan
        hits = list(range(len(sub_groups)))
    for i in sorted(hits):
        sg = sub_groups[i]
        if sg.name == leaf or (sg.name == rj and sg.min_sub_group is None and sg.parent is None):
            out = list(sub_groups)
            out[i] = replace(sg, pods=[name(pod)])
            return out
    raise InvalidWorkload(
        f'no sub-group "{leaf}" for labels {REPLICATED_JOB_LABEL}={rj!r}, {JOB_INDEX_LABEL}={idx!r}: '
        "the replicatedJob or the index is not in the JobSet",
        obj=pod_desc(pod),
    )


# ---------------------------------------------------------------- legacy (flat) shape


def _legacy_podgroup_exists(ctx: GroupingContext, base: str) -> bool:
    """A PodGroup of this JobSet (exact name or ``<base>-…``) exists and has no sub-groups."""
    js = ctx.top_owner
    try:
        pgs = ctx.lookups.pod_groups_named(namespace(js), base)
    except LookupForbidden as err:
        raise GroupingError(f"cannot list PodGroups to detect the legacy shape: {err}", obj=describe(js)) from err
    return any(not dig(pg, "spec", "subGroups") for pg in pgs)


def _legacy_metadata(ctx: GroupingContext, base: str) -> PodGroupMetadata:
    js, pod = ctx.top_owner, ctx.pod
    md = default_metadata(ctx)
    rj = required_label(pod, REPLICATED_JOB_LABEL)
    md.name = f"{base}-{rj}" if _startup_order(js) == IN_ORDER else base
    override = int_annotation(js, MIN_MEMBER_ANNOTATION, minimum=1)
    md.min_member = 1 if override is None else override
    md.provenance["minMember"] = (
        "legacy flat JobSet shape: 1" if override is None
        else f"annotation {MIN_MEMBER_ANNOTATION} on {describe(js)} (legacy flat JobSet shape)"
    )
    md.min_sub_group = None
    md.sub_groups = []
    md.provenance["name"] = f"legacy flat JobSet shape: a PodGroup {base}[-...] without sub-groups exists"
    return md


__all__ = ["JobSetGrouper"]
