"""Helpers shared by the grouping plugins: well-known keys, strict annotation parsing, topology
from annotations, Go durations, and reading related objects through ``ctx.lookups``.

Every error raised here is a ``GroupingError`` naming the object (``Kind ns/name``) and the field
(``metadata.annotations["key"]``), so a person can fix the workload from the message alone.
(Segment helpers for PyTorchJob / LeaderWorkerSet live in ``grouper.plugins.segments``.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from grouper.model.duration import format_go_duration as format_go_duration  # re-exported for the plugins
from grouper.model.duration import normalize_go_duration as normalize_go_duration
from grouper.model.duration import parse_go_duration as parse_go_duration
from grouper.model.errors import GroupingError, InvalidWorkload, LookupForbidden, OwnerNotFound, shown
from grouper.model.objects import GVK, Obj, describe, meta, name, uid, with_pod_typemeta
from grouper.model.podgroup import TOP_OWNER_METADATA_ANNOTATION as _TOP_OWNER_METADATA
from grouper.model.podgroup import TopologyConstraint

if TYPE_CHECKING:
    from grouper.core.context import GroupingContext

# ---------------------------------------------------------------- well-known names (KAI constants)

PODGROUP_NAME_PREFIX = "pg"
PROJECT_LABEL = "project"
PRIORITY_LABEL = "priorityClassName"
PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
USER_KEY = "user"
PREEMPTION_DELAY_ANNOTATION = "kai.scheduler/preemption-delay"
STALENESS_GRACE_PERIOD_ANNOTATION = "kai.scheduler/staleness-grace-period"
TOPOLOGY_ANNOTATION = "kai.scheduler/topology"
TOPOLOGY_REQUIRED_ANNOTATION = "kai.scheduler/topology-required-placement"
TOPOLOGY_PREFERRED_ANNOTATION = "kai.scheduler/topology-preferred-placement"
MIN_MEMBER_ANNOTATION = "kai.scheduler/batch-min-member"
STATEFULSET_MIN_MEMBER_ANNOTATION = "kai.scheduler/min-member"
TOP_OWNER_METADATA_ANNOTATION = _TOP_OWNER_METADATA  # the grouper's own annotation (never dropped for size)

BUILD_PRIORITY = "build"
TRAIN_PRIORITY = "train"
INFERENCE_PRIORITY = "inference"
DEFAULT_QUEUE = "default-queue"

PREEMPTIBLE = "preemptible"
NON_PREEMPTIBLE = "non-preemptible"
# KAI v0.18 (PodGroup API PR #1804): preemptible down to its gang minimum, the rest may be reclaimed.
SEMI_PREEMPTIBLE = "semi-preemptible"
PREEMPTIBILITY_VALUES = (PREEMPTIBLE, NON_PREEMPTIBLE, SEMI_PREEMPTIBLE)

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)


# ---------------------------------------------------------------- naming and describing


def podgroup_name(obj: Obj) -> str:
    """KAI's default name ``pg-<name>-<uid>`` (never truncated, as upstream)."""
    return f"{PODGROUP_NAME_PREFIX}-{name(obj)}-{uid(obj)}"


def describe_obj(obj: Obj) -> str:
    """``Kind ns/name``; pods read without TypeMeta still say ``Pod``."""
    if not obj.get("kind") and "spec" in obj and isinstance(obj.get("spec"), dict) and "containers" in obj["spec"]:
        obj = with_pod_typemeta(obj)
    return describe(obj)


def annotation_field(key: str) -> str:
    return f"metadata.annotations[{json.dumps(key)}]"


def label_field(key: str) -> str:
    return f"metadata.labels[{json.dumps(key)}]"


def spec_field(*path: str | int) -> str:
    """``spec.a.b[0]`` style field path for messages."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out


# ---------------------------------------------------------------- strict string maps


def string_map(obj: Obj, section: str) -> dict[str, str]:
    """``metadata.<section>`` (labels/annotations) as ``dict[str, str]``.

    Objects come from the API server (always strings) or from files for ``grouper plan`` (where YAML
    may turn ``"1"`` into ``1``); a non-string value is reported, not guessed at.
    """
    raw = meta(obj).get(section)
    if raw is None:
        return {}
    if type(raw) is dict:  # the common case, as decoded from the API server: exact strings, copied in C
        for key, value in raw.items():
            if type(key) is not str or type(value) is not str:
                break
        else:
            return raw.copy()
    if not isinstance(raw, Mapping):
        raise InvalidWorkload(f"expected a map of strings, got {type(raw).__name__}",
                              obj=describe_obj(obj), field=f"metadata.{section}")
    out: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidWorkload(f"{value!r} is not a string", obj=describe_obj(obj),
                                  field=f"metadata.{section}[{json.dumps(str(key))}]")
        out[key] = value
    return out


def labels_of(obj: Obj) -> dict[str, str]:
    return string_map(obj, "labels")


def annotations_of(obj: Obj) -> dict[str, str]:
    return string_map(obj, "annotations")


# ---------------------------------------------------------------- integers

_GO_INT_RE = re.compile(r"[+-]?[0-9]+")


def parse_go_int(text: str) -> int | None:
    """An integer as Go's ``strconv.ParseInt(s, 10, 64)`` / ``Atoi`` reads it (no spaces, no ``_``)."""
    if not _GO_INT_RE.fullmatch(text):
        return None
    return int(text)


def parse_int(
    value: object,
    *,
    obj: str,
    field: str,
    minimum: int | None = None,
    maximum: int | None = INT32_MAX,
) -> int:
    """``value`` (an int, or a string of one) as a bounded integer; anything else is an
    ``InvalidWorkload`` naming ``obj`` and ``field``.

    Default bounds are int32 because every count in the PodGroup API is an int32.
    """
    if isinstance(value, bool):
        parsed: int | None = None
    elif isinstance(value, int):
        parsed = value
    elif isinstance(value, float) and value.is_integer():
        parsed = int(value)
    elif isinstance(value, str):
        parsed = parse_go_int(value)
    else:
        parsed = None
    if parsed is None:
        text = json.dumps(value) if isinstance(value, str) else repr(value)
        raise InvalidWorkload(f"{shown(text)} is not an integer", obj=obj, field=field)
    if minimum is not None and parsed < minimum:
        raise InvalidWorkload(f"{shown(parsed)} is not valid: it must be >= {minimum}", obj=obj, field=field)
    lower = INT32_MIN if maximum == INT32_MAX else None
    if (maximum is not None and parsed > maximum) or (lower is not None and parsed < lower):
        raise InvalidWorkload(f"{shown(parsed)} is out of range (at most {maximum})", obj=obj, field=field)
    return parsed


def int_annotation(
    obj: Obj, key: str, *, minimum: int | None = None, maximum: int | None = INT32_MAX
) -> int | None:
    """The integer annotation ``key`` of ``obj``; None when absent; malformed → ``InvalidWorkload``."""
    raw = annotations_of(obj).get(key)
    if raw is None:
        return None
    return parse_int(raw, obj=describe_obj(obj), field=annotation_field(key), minimum=minimum, maximum=maximum)


def min_member_annotation(obj: Obj, key: str = MIN_MEMBER_ANNOTATION) -> int | None:
    """A min-member override (KAI v0.18 ``minmember.Parse``): an int32 >= 1, None when absent.

    Any other value is an ``InvalidWorkload`` naming the annotated object and the annotation.
    """
    raw = annotations_of(obj).get(key)
    if raw is None:
        return None
    return parse_int(raw, obj=describe_obj(obj), field=annotation_field(key), minimum=1)


def _at(obj: Obj, path: tuple[str | int, ...]) -> Any:
    cur: Any = obj
    for step in path:
        if isinstance(step, int):
            cur = cur[step] if isinstance(cur, list) and -len(cur) <= step < len(cur) else None
        else:
            cur = cur.get(step) if isinstance(cur, Mapping) else None
        if cur is None:
            return None
    return cur


def int_spec_field(
    obj: Obj, *path: str | int, minimum: int | None = None, required: bool = False
) -> int | None:
    """The integer at ``path`` in ``obj`` (int or numeric string); None when absent and not required."""
    cur = _at(obj, path)
    if cur is None:
        if required:
            raise InvalidWorkload("is missing", obj=describe_obj(obj), field=spec_field(*path))
        return None
    return parse_int(cur, obj=describe_obj(obj), field=spec_field(*path), minimum=minimum)


def str_spec_field(obj: Obj, *path: str | int) -> str | None:
    """The string at ``path`` in ``obj``; None when absent or null; another type is an error."""
    value = _at(obj, path)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidWorkload(f"expected a string, got {value!r}", obj=describe_obj(obj), field=spec_field(*path))
    return value


def list_spec_field(obj: Obj, *path: str | int) -> list[Any] | None:
    """The list at ``path`` in ``obj``; None when absent or null; another type is an error."""
    value = _at(obj, path)
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidWorkload(f"expected a list, got {type(value).__name__}", obj=describe_obj(obj),
                              field=spec_field(*path))
    return value


# ---------------------------------------------------------------- topology


def topology_from_annotations(annotations: Mapping[str, str]) -> TopologyConstraint:
    """The PodGroup-level constraint from ``kai.scheduler/topology`` and the two placement keys.

    Values are copied as they are (KAI does not validate them here either).
    """
    return TopologyConstraint(
        topology=annotations.get(TOPOLOGY_ANNOTATION, ""),
        required_level=annotations.get(TOPOLOGY_REQUIRED_ANNOTATION, ""),
        preferred_level=annotations.get(TOPOLOGY_PREFERRED_ANNOTATION, ""),
    )


# Go durations (parse_go_duration, format_go_duration, normalize_go_duration) live in
# grouper.model.duration, below the grouping core, which compares them too; imported above for the plugins.


# ---------------------------------------------------------------- related objects


def is_being_deleted(obj: Obj) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def fetch(
    ctx: GroupingContext, api_version: str, kind: str, namespace: str, obj_name: str, *, why: str
) -> Obj | None:
    """Read an object the plugin needs (a Job, a Revision, a PodGang, ...).

    Missing → ``OwnerNotFound`` naming the object and ``why`` it was looked up — except when the pod is
    being deleted, where None is returned and the plugin leaves the pod alone (see ``grouper.plugins``
    docstring, upstream bug 2). RBAC denial → ``GroupingError``: the grouping cannot be decided.
    """
    where = f"{kind} {namespace + '/' if namespace else ''}{obj_name}"
    try:
        obj = ctx.lookups.get(api_version, kind, namespace, obj_name)
    except LookupForbidden as err:
        raise GroupingError(f"cannot read {where} ({why}): {err}") from err
    if obj is None:
        if is_being_deleted(ctx.pod):
            return None
        raise OwnerNotFound(f"{where} ({api_version}) not found; {why}")
    if not obj.get("apiVersion") or not obj.get("kind"):
        obj = {**obj, "apiVersion": api_version, "kind": kind}
    return obj


def gvk_of(obj: Obj) -> GVK:
    return GVK.of(obj)

