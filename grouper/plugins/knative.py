"""Knative Service (KAI ``plugins/knative/knative.go``): a gang per Revision, or a PodGroup per pod.

The pod's label ``serving.knative.dev/revision`` names the ``serving.knative.dev/v1`` Revision.

- ``--knative-gang-schedule=false`` → one PodGroup per pod (``pg-<pod>-<podUID>``, owner = pod).
- Gang mode → ``pg-<revision>-<revisionUID>`` owned by the Revision, minMember = the Revision's
  ``autoscaling.knative.dev/min-scale`` (missing or not an integer → 1, as KAI; Knative's own
  webhook validates the annotation, so a negative value is also treated as 1).
- Backward compatibility: a Revision whose pods were already grouped per pod stays per pod. The
  pods with the revision label are listed: two pods sharing one ``pod-group-name`` → gang; more than
  one distinct name → per pod; exactly one name → the PodGroup's first owner kind decides
  (Revision → gang, Pod → per pod, anything else → error); none → gang.

Deliberate choice for reference §8 item 13: KAI builds Knative PodGroups literally, so they get no
preemptibility, preemption delay, staleness grace period or topology, and per-pod PodGroups get the
fixed priority ``inference`` ignoring labels. We compute every field with the default grouper, using
the Revision as top owner (its labels/annotations, which Knative copies from the Service and
Configuration) — so ``kai.scheduler/preemptibility``, ``priorityClassName``, delay and topology
settings work for Knative too. Priority fallback is ``inference`` in both modes.
"""

from __future__ import annotations

from grouper.core.context import GroupingContext
from grouper.model.errors import GroupingError, InvalidWorkload, LookupForbidden
from grouper.model.objects import Obj, describe, name, namespace, owner_references, with_pod_typemeta
from grouper.model.podgroup import POD_GROUP_ANNOTATION, PODGROUP_API_VERSION, PodGroupMetadata
from grouper.plugins.common import (
    INFERENCE_PRIORITY,
    annotations_of,
    fetch,
    label_field,
    labels_of,
    parse_go_int,
)
from grouper.plugins.default import default_metadata
from grouper.plugins.deployment import per_pod

REVISION_LABEL = "serving.knative.dev/revision"
MIN_SCALE_ANNOTATION = "autoscaling.knative.dev/min-scale"
REVISION_API_VERSION = "serving.knative.dev/v1"


def min_scale(revision: Obj) -> tuple[int, str]:
    """minMember from ``autoscaling.knative.dev/min-scale`` and where it came from."""
    raw = annotations_of(revision).get(MIN_SCALE_ANNOTATION)
    if raw is None:
        return 1, f"annotation {MIN_SCALE_ANNOTATION} absent on {describe(revision)}: 1"
    value = parse_go_int(raw)
    if value is None or value < 0 or value > 2**31 - 1:
        return 1, f"annotation {MIN_SCALE_ANNOTATION} on {describe(revision)} is {raw!r}, not a valid count: 1"
    return value, f"annotation {MIN_SCALE_ANNOTATION} on {describe(revision)}"


def _gang_decision(ctx: GroupingContext, revision: Obj) -> tuple[bool, str]:
    """(per_pod, why): whether this Revision's pods are already grouped per pod (KAI ``isBCRevision``)."""
    ns, rev = namespace(revision), name(revision)
    try:
        pods = ctx.lookups.list("v1", "Pod", ns, {REVISION_LABEL: rev})
    except LookupForbidden as err:
        raise GroupingError(f"cannot list the pods of {describe(revision)}: {err}") from err
    seen: set[str] = set()
    for other in pods:
        pg = annotations_of(with_pod_typemeta(other)).get(POD_GROUP_ANNOTATION)
        if pg is None:
            continue
        if pg in seen:
            return False, f"two pods of {describe(revision)} share PodGroup {pg}"
        seen.add(pg)
    if len(seen) > 1:
        return True, f"pods of {describe(revision)} already use {len(seen)} PodGroups (per-pod, kept)"
    if not seen:
        return False, f"no pod of {describe(revision)} is grouped yet"
    (pg_name,) = seen
    try:
        existing = ctx.lookups.get(PODGROUP_API_VERSION, "PodGroup", ns, pg_name)
    except LookupForbidden as err:
        raise GroupingError(f"cannot read PodGroup {ns}/{pg_name} of {describe(revision)}: {err}") from err
    if existing is None:
        return False, f"PodGroup {pg_name} named by a pod no longer exists"
    refs = owner_references(existing)
    where = f"PodGroup {ns}/{pg_name}"
    if not refs:
        raise GroupingError(
            f"cannot tell whether {describe(revision)} is gang-scheduled: {where} has no owner references"
        )
    kind = refs[0].get("kind")
    if kind == (revision.get("kind") or "Revision"):
        return False, f"existing {where} is owned by the Revision"
    if kind == "Pod":
        return True, f"existing {where} is owned by a pod (per-pod, kept)"
    raise GroupingError(
        f"cannot tell whether {describe(revision)} is gang-scheduled: {where} has unexpected owner kind {kind!r}"
    )


class KnativeGrouper:
    name = "KNative Grouper"
    label_keys: frozenset[str] = frozenset({REVISION_LABEL})  # the pod labels it reads besides DefaultGrouper's

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata | None:
        pod = with_pod_typemeta(ctx.pod)
        rev_name = labels_of(pod).get(REVISION_LABEL)
        if not rev_name:
            raise InvalidWorkload("is missing; a Knative Service pod must name its Revision",
                                  obj=describe(pod), field=label_field(REVISION_LABEL))
        revision = fetch(ctx, REVISION_API_VERSION, "Revision", namespace(pod), rev_name,
                         why=f"named by label {REVISION_LABEL} of {describe(pod)}")
        if revision is None:
            return None
        md = default_metadata(ctx, top_owner=revision, owners=[revision], priority_fallback=INFERENCE_PRIORITY)
        if not ctx.config.knative_gang_schedule:
            return per_pod(md, ctx, "--knative-gang-schedule=false")
        is_per_pod, why = ctx.workload.from_pods("Revision per pod", revision, lambda: _gang_decision(ctx, revision))
        if is_per_pod:
            return per_pod(md, ctx, why)
        md.min_member, md.provenance["minMember"] = min_scale(revision)
        md.provenance["name"] = f"pg-<revision>-<revisionUID> of {describe(revision)} (gang: {why})"
        return md


__all__ = ["KnativeGrouper", "min_scale"]
