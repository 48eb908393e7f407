"""PyTorchJob (kubeflow.org/v1), after KAI's ``plugins/kubeflow/pytorch/pytorch_grouper.go``.

minMember: the Kubeflow distributed rule over ``spec.pytorchReplicaSpecs`` (nothing mandatory), then
``spec.elasticPolicy.minReplicas`` if set, then ``spec.runPolicy.schedulingPolicy.minAvailable`` if set
(minAvailable wins).

Sub-groups (flat, always built), membership by pod label ``training.kubeflow.org/replica-type``:
- ``master`` (minMember = Master replicas) when a Master spec with replicas > 0 exists;
- ``worker`` (minMember = max(0, minMember - Master replicas)) when a Worker spec exists
  (replicas default 1).

Segments (Worker only): size S from pod annotation ``kai.scheduler/segment-size``, else the Worker
template annotation. With W workers there are ceil(W/S) segments (at most 10000; 0 keeps ``worker`` a
leaf). ``worker`` then becomes a parent with ``minSubGroup`` = number of segments and children
``worker-<i>`` with minMember S, the trailing partial segment its remainder, and segments beyond the
worker minimum (elastic) 0. A worker pod goes to ``worker-<replica-index // S>`` (label
``training.kubeflow.org/replica-index``, required for worker pods, must be >= 0).

Upstream bugs (reference §8) and the choices made here:
- Item 8: KAI only checks that the *pod* annotation's segment size is an integer (0 divides by zero,
  negatives make nonsense); here a size <= 0 from either source is rejected with "invalid segment
  size".
- Item 9: KAI's docs say segment annotations are ignored when no topology can be resolved, its code
  still creates the segment sub-groups without a constraint. We keep the code's behaviour (segments
  without constraint): segments still spread the gang into blocks, and this matches existing clusters.
- A malformed integer field (e.g. ``minReplicas: "three"``) is an error naming the field; KAI silently
  ignores a malformed ``minReplicas``/``minAvailable``. Negative minimums and replicas are errors.
- A worker pod whose replica index lies beyond the last segment joins no segment (as KAI); a worker pod
  without the index label, under segmentation, is an error (as KAI).
"""

from __future__ import annotations

from grouper.core.context import GroupingContext
from grouper.model.objects import Obj, describe, name
from grouper.model.podgroup import PodGroupMetadata, SubGroup
from grouper.plugins.common import (
    annotation_field,
    annotations_of,
    int_spec_field,
    labels_of,
    spec_field,
)
from grouper.plugins.default import default_metadata
from grouper.plugins.kubeflow import distributed_min_member, min_available_override, replica_specs
from grouper.plugins.segments import (
    SEGMENT_SIZE_KEY,
    annotations_at,
    block_segment_sizes,
    ceil_div,
    check_segment_count,
    copy_topology,
    int_field,
    parse_index,
    parse_segment_size,
    pod_desc,
    pod_label_error,
    segment_topology,
    warn_semi_preemptible_segments,
)

REPLICA_SPECS = "pytorchReplicaSpecs"
MASTER = "Master"
WORKER = "Worker"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
MIN_REPLICAS_PATH = ("spec", "elasticPolicy", "minReplicas")
WORKER_TEMPLATE_ANNOTATIONS = ("spec", REPLICA_SPECS, WORKER, "template", "metadata", "annotations")


class PyTorchGrouper:
    """PyTorchJob: elastic min-member, master/worker sub-groups, optional worker segments."""

    name = "PyTorchJob Grouper"
    label_keys: frozenset[str] = frozenset({REPLICA_TYPE_LABEL, REPLICA_INDEX_LABEL})  # the pod labels it reads besides DefaultGrouper's

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata:
        job, pod = ctx.top_owner, ctx.pod
        md = default_metadata(ctx)
        min_member, source = distributed_min_member(job, REPLICA_SPECS)
        min_replicas = int_spec_field(job, *MIN_REPLICAS_PATH, minimum=0)
        if min_replicas is not None:
            min_member, source = min_replicas, f"{spec_field(*MIN_REPLICAS_PATH)} on {describe(job)}"
        min_available = min_available_override(job)
        if min_available is not None:
            min_member, source = min_available, f"spec.runPolicy.schedulingPolicy.minAvailable on {describe(job)}"
        md.min_member = min_member
        md.provenance["minMember"] = source
        md.sub_groups = _sub_groups(job, pod, min_member)
        warn_semi_preemptible_segments(md, any(sg.parent == WORKER.lower() for sg in md.sub_groups), job)
        md.provenance["subGroups"] = (
            f"master/worker from spec.{REPLICA_SPECS} of {describe(job)}; pod routed by label {REPLICA_TYPE_LABEL}"
        )
        return md


def _replicas(job: Obj, spec: str, default: int) -> int:
    return int_field(job, "spec", REPLICA_SPECS, spec, "replicas", default=default, minimum=0)


def _sub_groups(job: Obj, pod: Obj, total_min: int) -> list[SubGroup]:
    specs = replica_specs(job, REPLICA_SPECS)
    pod_type = labels_of(pod).get(REPLICA_TYPE_LABEL)
    out: list[SubGroup] = []
    master_replicas = _replicas(job, MASTER, 0) if MASTER in specs else 0
    if master_replicas > 0:
        out.append(SubGroup("master", min_member=master_replicas, pods=[name(pod)] if pod_type == "master" else []))
    if WORKER in specs:
        worker_min = max(0, total_min - master_replicas)
        out.extend(_worker_sub_groups(job, pod, pod_type == "worker", worker_min))
    return out


def _segment_size(job: Obj, pod: Obj) -> int | None:
    """Pod annotation, else Worker template annotation; <= 0 from either is rejected (§8 item 8)."""
    pod_value = annotations_of(pod).get(SEGMENT_SIZE_KEY)
    if pod_value:
        return parse_segment_size(pod_value, obj=pod_desc(pod), field=annotation_field(SEGMENT_SIZE_KEY))
    template_value = annotations_at(job, *WORKER_TEMPLATE_ANNOTATIONS).get(SEGMENT_SIZE_KEY)
    if template_value:
        return parse_segment_size(template_value, obj=describe(job),
                                  field=f"{spec_field(*WORKER_TEMPLATE_ANNOTATIONS)}[{SEGMENT_SIZE_KEY!r}]")
    return None


def _worker_sub_groups(job: Obj, pod: Obj, is_worker: bool, worker_min: int) -> list[SubGroup]:
    workers = _replicas(job, WORKER, 1)
    pods = [name(pod)] if is_worker else []
    size = _segment_size(job, pod)
    if size is None:
        return [SubGroup("worker", min_member=worker_min, pods=pods)]
    count = ceil_div(workers, size)
    check_segment_count(count, where=describe(job))
    if count == 0:  # no workers: keep a leaf, a parent without children breaks the webhook rules
        return [SubGroup("worker", min_member=worker_min, pods=pods)]

    segment_of_pod: int | None = None
    if is_worker:
        index = parse_index(pod, REPLICA_INDEX_LABEL)
        if index is None:
            raise pod_label_error(pod, REPLICA_INDEX_LABEL, "is missing on a worker pod of a segmented PyTorchJob")
        segment_of_pod = index // size
    topology = segment_topology(pod, annotations_at(job, *WORKER_TEMPLATE_ANNOTATIONS), job)
    out = [SubGroup("worker", min_member=None, min_sub_group=count)]
    for i, seg_min in enumerate(block_segment_sizes(workers, size, worker_min)):
        out.append(
            SubGroup(
                f"worker-{i}",
                min_member=seg_min,
                parent="worker",
                topology=copy_topology(topology),
                pods=list(pods) if i == segment_of_pod else [],
            )
        )
    return out


__all__ = ["PyTorchGrouper"]
