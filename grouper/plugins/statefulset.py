"""apps/v1 StatefulSet (KAI v0.18 ``plugins/statefulset/statefulset_grouper.go``).

The default grouper (one PodGroup per StatefulSet; minMember from ``kai.scheduler/batch-min-member``,
else 1) plus KAI's StatefulSet annotation ``kai.scheduler/min-member``, which sets minMember but only
for ``spec.podManagementPolicy: Parallel``. With ``OrderedReady`` (also the Kubernetes default when
the field is absent) the StatefulSet controller creates pod N+1 only after pod N is Ready, so a gang of
more than one pod could never be admitted: the annotation is then an error for the StatefulSet's
pods (even ``"1"``, as KAI: the contract is "annotation present requires Parallel").
``kai.scheduler/min-member`` wins over ``kai.scheduler/batch-min-member`` when both are set.
"""

from __future__ import annotations

from grouper.core.context import GroupingContext
from grouper.model.errors import InvalidWorkload
from grouper.model.objects import describe, dig
from grouper.model.podgroup import PodGroupMetadata
from grouper.plugins.common import STATEFULSET_MIN_MEMBER_ANNOTATION, annotations_of, min_member_annotation
from grouper.plugins.default import default_metadata

PARALLEL = "Parallel"
ORDERED_READY = "OrderedReady"


class StatefulSetGrouper:
    name = "StatefulSet Grouper"
    label_keys: frozenset[str] = frozenset()  # the pod labels it reads besides DefaultGrouper's

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata:
        sts = ctx.top_owner
        md = default_metadata(ctx)
        if STATEFULSET_MIN_MEMBER_ANNOTATION not in annotations_of(sts):
            return md
        policy = dig(sts, "spec", "podManagementPolicy") or ""
        if policy != PARALLEL:
            shown = policy if policy else f"{ORDERED_READY} (default)"
            raise InvalidWorkload(
                f"annotation {STATEFULSET_MIN_MEMBER_ANNOTATION} requires spec.podManagementPolicy: {PARALLEL} "
                f"(current policy {shown!r} creates pods one by one, each after the previous one is Ready, "
                "which deadlocks gang scheduling)",
                obj=describe(sts),
                field="spec.podManagementPolicy",
            )
        value = min_member_annotation(sts, STATEFULSET_MIN_MEMBER_ANNOTATION)
        assert value is not None
        md.min_member = value
        md.provenance["minMember"] = (
            f"annotation {STATEFULSET_MIN_MEMBER_ANNOTATION} on {describe(sts)} (podManagementPolicy {PARALLEL})"
        )
        return md


__all__ = ["StatefulSetGrouper"]
