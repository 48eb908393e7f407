"""Segments for PyTorchJob and LeaderWorkerSet, plus small strict field readers the
distributed-workload plugins share (the integer/label/annotation parsing lives in ``common``).

Segments are fixed-size blocks of worker pods, each with its own sub-group and, optionally, its own
topology constraint. Both plugins resolve:

- the segment size from ``kai.scheduler/segment-size`` (each plugin has its own source order);
- the segment topology name from ``kai.scheduler/topology`` (pod → worker template → top owner);
- the segment levels from ``kai.scheduler/segment-topology-{required,preferred}-placement``
  (pod → worker template).

A segment constraint needs a topology name and at least one level. Without them, segments are still
created without a constraint (KAI's code; its docs say "ignored" — reference §8 item 9; see the
``pytorch`` and ``lws`` module docstrings).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from grouper.model.errors import InvalidWorkload
from grouper.model.objects import Obj, describe, dig, with_pod_typemeta
from grouper.model.podgroup import PodGroupMetadata, TopologyConstraint
from grouper.plugins.common import (
    TOPOLOGY_ANNOTATION,
    annotations_of,
    int_spec_field,
    label_field,
    labels_of,
    parse_go_int,
    spec_field,
)

SEGMENT_SIZE_KEY = "kai.scheduler/segment-size"
SEGMENT_REQUIRED_KEY = "kai.scheduler/segment-topology-required-placement"
SEGMENT_PREFERRED_KEY = "kai.scheduler/segment-topology-preferred-placement"
MAX_SEGMENTS = 10000


def pod_desc(pod: Obj) -> str:
    """``Pod ns/name`` even for pods read from a typed list (no apiVersion/kind)."""
    return describe(with_pod_typemeta(pod))


# ---------------------------------------------------------------- strict field access on raw objects


def int_field(obj: Obj, *path: str | int, default: int, minimum: int | None = None) -> int:
    """``common.int_spec_field`` with a default for a missing value."""
    value = int_spec_field(obj, *path, minimum=minimum)
    return default if value is None else value


def str_field(obj: Obj, *path: str | int, default: str = "") -> str:
    """The string at ``path``; ``default`` when missing or null; another type is an error."""
    value = dig(obj, *path)
    if value is None:
        return default
    if not isinstance(value, str):
        raise InvalidWorkload(f"expected a string, got {value!r}", obj=describe(obj), field=spec_field(*path))
    return value


def bool_field(obj: Obj, *path: str | int, default: bool = False) -> bool:
    value = dig(obj, *path)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidWorkload(f"expected a boolean, got {value!r}", obj=describe(obj), field=spec_field(*path))
    return value


def map_field(obj: Obj, *path: str | int) -> dict[str, Any] | None:
    """The mapping at ``path``, or None when missing; another type is an error."""
    value = dig(obj, *path)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidWorkload(f"expected an object, got {type(value).__name__}", obj=describe(obj),
                              field=spec_field(*path))
    return value


def list_field(obj: Obj, *path: str | int) -> list[Any] | None:
    """The list at ``path``, or None when missing; another type is an error."""
    value = dig(obj, *path)
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidWorkload(f"expected a list, got {type(value).__name__}", obj=describe(obj),
                              field=spec_field(*path))
    return value


def annotations_at(obj: Obj, *path: str | int) -> dict[str, str]:
    """The string map at ``path`` (e.g. a pod template's ``metadata.annotations``); {} when missing."""
    value = map_field(obj, *path)
    if value is None:
        return {}
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(item, str):
            raise InvalidWorkload(f"{item!r} is not a string", obj=describe(obj), field=f"{spec_field(*path)}[{key!r}]")
        out[str(key)] = item
    return out


# ---------------------------------------------------------------- indexes, sizes, counts


def pod_label_error(pod: Obj, label: str, problem: str) -> InvalidWorkload:
    """``Pod ns/p: label "<label>" <problem>`` with ``field`` set to the label's path."""
    err = InvalidWorkload(f'label "{label}" {problem}', obj=pod_desc(pod))
    err.field = label_field(label)
    return err


def required_label(pod: Obj, label: str, why: str = "") -> str:
    """The non-empty value of pod label ``label``, else ``Pod ns/p: label "<label>" is missing``."""
    value = labels_of(pod).get(label)
    if not value:
        raise pod_label_error(pod, label, "is missing" + (f" ({why})" if why else ""))
    return value


def parse_index(pod: Obj, label: str) -> int | None:
    """The integer value of pod label ``label``; None when absent.

    Not an integer → ``InvalidWorkload``; negative → ``InvalidWorkload`` with KAI's phrase
    "is not valid. It must be bigger than 0".
    """
    raw = labels_of(pod).get(label)
    if raw is None:
        return None
    value = parse_go_int(raw)
    if value is None:
        raise pod_label_error(pod, label, f"has value {raw!r}, which is not an integer index")
    if value < 0:
        raise pod_label_error(pod, label, f"has index {raw}, which is not valid. It must be bigger than 0 "
                              "(or equal to 0)")
    return value


def parse_segment_size(raw: str, *, obj: str, field: str, minimum: int = 1) -> int:
    """A segment size; not an integer or below ``minimum`` → "invalid segment size"."""
    value = parse_go_int(raw)
    if value is None:
        raise InvalidWorkload(f"invalid segment size {raw!r}: not an integer", obj=obj, field=field)
    if value < minimum:
        raise InvalidWorkload(f"invalid segment size {value}: it must be >= {minimum}", obj=obj, field=field)
    return value


def check_segment_count(count: int, *, where: str, what: str = "segment sub-groups") -> None:
    """At most ``MAX_SEGMENTS`` segment sub-groups per PodGroup."""
    if count > MAX_SEGMENTS:
        raise InvalidWorkload(
            f"number of {what} {count} is greater than max allowed segmentation {MAX_SEGMENTS}", obj=where
        )


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def block_segment_sizes(total: int, size: int, mandatory: int) -> list[int]:
    """minMember of each block segment of ``size`` over ``total`` pods (PyTorch workers).

    Segments whose first pod index is below ``mandatory`` are required (``size``, or the remainder for a
    trailing partial segment); later ones are elastic (0).
    """
    count = ceil_div(total, size)
    required = ceil_div(max(0, mandatory), size)
    out: list[int] = []
    for i in range(count):
        if i >= required:
            out.append(0)
        elif i == count - 1 and total % size:
            out.append(total % size)
        else:
            out.append(size)
    return out


# ---------------------------------------------------------------- segment topology


def first_nonempty(key: str, *sources: Mapping[str, str]) -> str:
    for src in sources:
        value = src.get(key)
        if value:
            return value
    return ""


def segment_topology(
    pod: Obj, worker_template_annotations: Mapping[str, str], top_owner: Obj
) -> TopologyConstraint | None:
    """The constraint every segment sub-group gets, or None (no topology name, or no level).

    Topology name: pod → worker template → top-owner annotation ``kai.scheduler/topology``.
    Levels: pod → worker template annotations of the segment placement keys.
    """
    pod_ann = annotations_of(pod)
    topology = first_nonempty(TOPOLOGY_ANNOTATION, pod_ann, worker_template_annotations, annotations_of(top_owner))
    if not topology:
        return None
    required = first_nonempty(SEGMENT_REQUIRED_KEY, pod_ann, worker_template_annotations)
    preferred = first_nonempty(SEGMENT_PREFERRED_KEY, pod_ann, worker_template_annotations)
    if not required and not preferred:
        return None
    return TopologyConstraint(topology=topology, required_level=required, preferred_level=preferred)


def copy_topology(topology: TopologyConstraint | None) -> TopologyConstraint | None:
    """A copy of the segment constraint for one more sub-group (sub-groups never share one)."""
    return replace(topology) if topology else None


def warn_semi_preemptible_segments(md: PodGroupMetadata, segmented: bool, workload: Obj) -> None:
    """KAI v0.18: segments of a ``semi-preemptible`` PodGroup are not supported by the scheduler, which
    then treats the workload as non-preemptible; the PodGroup is still written, with a warning."""
    from grouper.plugins.common import SEMI_PREEMPTIBLE

    if segmented and md.preemptibility == SEMI_PREEMPTIBLE:
        md.warnings.append(
            f"{describe(workload)} is segmented and {SEMI_PREEMPTIBLE}: segmented workloads are not "
            f"semi-preemptible, the scheduler treats it as non-preemptible"
        )


__all__ = [
    "MAX_SEGMENTS",
    "SEGMENT_PREFERRED_KEY",
    "SEGMENT_REQUIRED_KEY",
    "SEGMENT_SIZE_KEY",
    "annotations_at",
    "block_segment_sizes",
    "bool_field",
    "ceil_div",
    "check_segment_count",
    "copy_topology",
    "first_nonempty",
    "int_field",
    "list_field",
    "map_field",
    "parse_index",
    "parse_segment_size",
    "pod_desc",
    "pod_label_error",
    "required_label",
    "segment_topology",
    "str_field",
    "warn_semi_preemptible_segments",
]
