"""LeaderWorkerSet (leaderworkerset.x-k8s.io/v1), after KAI's ``plugins/leaderworkerset/lws_grouper.go``.

One PodGroup per LWS group: ``pg-<lws>-<uid>-group-<n>`` with ``n`` from the pod label
``leaderworkerset.sigs.k8s.io/group-index`` (no suffix when the label is absent).

minMember (called *replicas* below): ``spec.leaderWorkerTemplate.size`` (> 0) for ``spec.startupPolicy``
``LeaderCreated`` (default); for ``LeaderReady`` 1 while the pod is the leader (worker index ``0``) and
unbound (no ``spec.nodeName``), else the size (or the pod annotation ``leaderworkerset.sigs.k8s.io/size``
when it is a positive integer). Other policies are errors, as is a negative or non-integer worker index
(label ``leaderworkerset.sigs.k8s.io/worker-index``).

Sub-groups are built for ``replicas`` pods:
- no segmentation: ``leader`` (1) and, if replicas > 1, ``workers`` (replicas - 1);
- segmentation, segment size S from ``spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize``, else the LWS
  annotation ``kai.scheduler/segment-size``, else the worker template annotation (S > 1, S <= replicas,
  at most 10000 segments). "Divisible" means (replicas - 1) % S == 0: then the leader is an extra pod of
  segment 0 and worker w >= 1 is in segment (w - 1) // S, otherwise worker w is in segment w // S.
  ``segment-<i>`` get minMember = their pod count. Policy ``subGroupPolicyType``:
  ``LeaderWorker`` (default): ``segment-0`` becomes a parent (``minSubGroup`` 2) with children ``leader`` (1)
  and ``workers`` (segment-0 count - 1). ``LeaderExcluded`` (requires divisibility): a top-level ``leader``
  (1) comes first and ``segment-<i>`` hold workers only.
  Segment topology (every ``segment-<i>``): name from pod → worker template → LWS annotation
  ``kai.scheduler/topology``; levels from the segment placement keys (pod → worker template).

Upstream bugs and choices:
- Reference §8 item 9: segments without a resolvable topology name or level are still created, without a
  constraint (KAI's code behaviour, same as PyTorchJob).
- Single-segment groups: KAI counts the leader into the last segment's size and then adds it again when
  divisible (size 3, S 2 → ``workers`` minMember 3 for 2 workers; LeaderExcluded ``segment-0`` 3 for 2
  workers), a gang that can never be satisfied. Here every segment's minMember is the number of its pods.
- ``LeaderReady`` with segmentation: while the unbound leader is alone (replicas = 1) KAI fails with
  "segmentSize is greater than replicasSize", so the leader is never grouped and its workers are never
  created. Here a 1-pod group skips segmentation (``leader`` only); the size is still validated.
- A worker whose index falls outside the group, an unknown ``subGroupPolicyType``, or a group-index label
  that is not a non-negative integer are errors (KAI: index panic, silently odd shape, no name suffix).
"""

from __future__ import annotations

from grouper.core.context import GroupingContext
from grouper.model.errors import InvalidWorkload
from grouper.model.objects import Obj, describe, dig, name
from grouper.model.podgroup import PodGroupMetadata, SubGroup
from grouper.plugins.common import annotation_field, annotations_of, labels_of, parse_go_int
from grouper.plugins.default import default_metadata
from grouper.plugins.segments import (
    SEGMENT_SIZE_KEY,
    annotations_at,
    check_segment_count,
    copy_topology,
    int_field,
    parse_index,
    parse_segment_size,
    pod_desc,
    pod_label_error,
    segment_topology,
    str_field,
    warn_semi_preemptible_segments,
)

LEADER_READY = "LeaderReady"
LEADER_CREATED = "LeaderCreated"
LEADER_WORKER = "LeaderWorker"
LEADER_EXCLUDED = "LeaderExcluded"
SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LEADER = "leader"
WORKERS = "workers"
TEMPLATE = ("spec", "leaderWorkerTemplate")
POLICY = (*TEMPLATE, "subGroupPolicy")
WORKER_TEMPLATE_ANNOTATIONS = (*TEMPLATE, "workerTemplate", "metadata", "annotations")


class LWSGrouper:
    """LeaderWorkerSet: one PodGroup per group, leader/workers or segment sub-groups."""

    name = "LWS Grouper"
    label_keys: frozenset[str] = frozenset({GROUP_INDEX_LABEL, WORKER_INDEX_LABEL})  # the pod labels it reads besides DefaultGrouper's

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata:
        lws, pod = ctx.top_owner, ctx.pod
        md = default_metadata(ctx)
        size = int_field(lws, *TEMPLATE, "size", default=0)
        if size <= 0:
            raise InvalidWorkload(f"must be > 0, got {dig(lws, *TEMPLATE, 'size')!r}", obj=describe(lws),
                                  field="spec.leaderWorkerTemplate.size")
        policy = str_field(lws, "spec", "startupPolicy", default=LEADER_CREATED)
        worker_index = parse_index(pod, WORKER_INDEX_LABEL)
        if policy == LEADER_READY:
            replicas, source = _leader_ready_min(pod, size, worker_index)
        elif policy == LEADER_CREATED:
            replicas, source = size, f"spec.leaderWorkerTemplate.size of {describe(lws)} (LeaderCreated)"
        else:
            raise InvalidWorkload(f"unknown startupPolicy {policy!r}", obj=describe(lws), field="spec.startupPolicy")
        md.min_member = replicas
        md.provenance["minMember"] = source
        md.sub_groups = _sub_groups(lws, pod, replicas, worker_index)
        warn_semi_preemptible_segments(md, any(sg.name.startswith("segment-") for sg in md.sub_groups), lws)
        md.provenance["subGroups"] = f"leader/workers/segments of {replicas} pods; pod routed by {WORKER_INDEX_LABEL}"

        if GROUP_INDEX_LABEL in labels_of(pod):
            md.name = f"{md.name}-group-{parse_index(pod, GROUP_INDEX_LABEL)}"
            md.provenance["name"] = f"pg-<name>-<uid> of {describe(lws)} + label {GROUP_INDEX_LABEL} of {pod_desc(pod)}"
        return md


def _leader_ready_min(pod: Obj, size: int, worker_index: int | None) -> tuple[int, str]:
    if worker_index == 0 and not dig(pod, "spec", "nodeName"):
        return 1, f"LeaderReady: {pod_desc(pod)} is the unbound leader"
    annotated = parse_go_int(annotations_of(pod).get(SIZE_ANNOTATION) or "")
    if annotated is not None and annotated > 0:
        return annotated, f"LeaderReady: annotation {SIZE_ANNOTATION} on {pod_desc(pod)}"
    return size, "LeaderReady: spec.leaderWorkerTemplate.size"


def _segment_size(lws: Obj) -> int | None:
    """subGroupPolicy.subGroupSize → LWS annotation → worker template annotation; must be > 1."""
    from_spec = int_field(lws, *POLICY, "subGroupSize", default=0)
    if dig(lws, *POLICY, "subGroupSize") is not None:
        if from_spec <= 1:
            raise InvalidWorkload(f"invalid segment size {from_spec}: it must be greater than 1", obj=describe(lws),
                                  field="spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize")
        return from_spec
    value = annotations_of(lws).get(SEGMENT_SIZE_KEY)
    if value:
        return parse_segment_size(value, obj=describe(lws), field=annotation_field(SEGMENT_SIZE_KEY), minimum=2)
    value = annotations_at(lws, *WORKER_TEMPLATE_ANNOTATIONS).get(SEGMENT_SIZE_KEY)
    if value:
        field = f"spec.leaderWorkerTemplate.workerTemplate.{annotation_field(SEGMENT_SIZE_KEY)}"
        return parse_segment_size(value, obj=describe(lws), field=field, minimum=2)
    return None


def _sub_groups(lws: Obj, pod: Obj, replicas: int, worker_index: int | None) -> list[SubGroup]:
    size = _segment_size(lws)
    if size is None or replicas <= 1:
        return _plain(pod, replicas, worker_index)
    if size > replicas:
        raise InvalidWorkload(f"invalid segment size {size}: it is greater than the group size {replicas}",
                              obj=describe(lws))
    divisible = (replicas - 1) % size == 0

    def segment_of(w: int) -> int:
        if w == 0:  # the leader is always in segment 0
            return 0
        return (w - 1) // size if divisible else w // size

    count = segment_of(replicas - 1) + 1
    check_segment_count(count, where=describe(lws))
    policy = str_field(lws, *POLICY, "subGroupPolicyType", default=LEADER_WORKER)
    if policy not in (LEADER_WORKER, LEADER_EXCLUDED):
        raise InvalidWorkload(f"unknown subGroupPolicyType {policy!r}", obj=describe(lws),
                              field="spec.leaderWorkerTemplate.subGroupPolicy.subGroupPolicyType")
    if policy == LEADER_EXCLUDED and not divisible:
        raise InvalidWorkload(
            f"group size {replicas} minus the leader is not divisible by segment size {size}; "
            f"the {LEADER_EXCLUDED} policy is only supported when it is",
            obj=describe(lws), field="spec.leaderWorkerTemplate.subGroupPolicy.subGroupPolicyType",
        )
    if worker_index is None:
        raise pod_label_error(pod, WORKER_INDEX_LABEL, "is missing on a pod of a segmented LeaderWorkerSet")
    pod_segment = segment_of(worker_index)
    if pod_segment >= count:
        raise pod_label_error(pod, WORKER_INDEX_LABEL, f"index {worker_index} is outside a group of {replicas} pods")

    # Pods per segment, the leader counted in segment 0.
    if divisible:
        members = [size + 1] + [size] * (count - 1)
    else:
        members = [size] * (count - 1) + [replicas - size * (count - 1)]
    topology = segment_topology(pod, annotations_at(lws, *WORKER_TEMPLATE_ANNOTATIONS), lws)
    segments = [SubGroup(f"segment-{i}", min_member=m, topology=copy_topology(topology)) for i, m in enumerate(members)]
    pod_name = name(pod)
    is_leader = worker_index == 0

    if policy == LEADER_EXCLUDED:
        segments[0].min_member = members[0] - 1
        leader = SubGroup(LEADER, min_member=1, pods=[pod_name] if is_leader else [])
        if not is_leader:
            segments[pod_segment].pods.append(pod_name)
        return [leader, *segments]

    first = segments[0]
    first.min_member, first.min_sub_group = None, 2
    leader = SubGroup(LEADER, min_member=1, parent=first.name, pods=[pod_name] if is_leader else [])
    workers = SubGroup(WORKERS, min_member=members[0] - 1, parent=first.name)
    if not is_leader:
        (workers if pod_segment == 0 else segments[pod_segment]).pods.append(pod_name)
    return [*segments, leader, workers]


def _plain(pod: Obj, replicas: int, worker_index: int | None) -> list[SubGroup]:
    is_leader = worker_index == 0
    pod_name = name(pod)
    out = [SubGroup(LEADER, min_member=1, pods=[pod_name] if is_leader else [])]
    if replicas > 1:
        out.append(SubGroup(WORKERS, min_member=replicas - 1, pods=[] if is_leader else [pod_name]))
    return out


__all__ = ["LWSGrouper"]
