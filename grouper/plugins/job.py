"""batch/v1 Job (KAI ``plugins/job/job_grouper.go``): the default grouper plus a min-member override.

- minMember = Job annotation ``kai.scheduler/batch-min-member`` (an int32 >= 1, KAI v0.18's
  ``minmember.Parse``; 0, negatives and non-integers are errors naming the Job), else 1.
- Legacy name: with ``--search-legacy-pg`` (default on) a PodGroup named ``pg-<pod>-<jobUID>`` that
  already exists is reused so running pods are not re-parented during an upgrade from releases
  that grouped per pod; minMember is then 1 (and the annotation is not read, as in KAI).
"""

from __future__ import annotations

from grouper.core.context import GroupingContext
from grouper.model.errors import GroupingError, LookupForbidden
from grouper.model.objects import Obj, describe, name, namespace, uid
from grouper.model.podgroup import PODGROUP_API_VERSION, PodGroupMetadata
from grouper.plugins.common import (
    MIN_MEMBER_ANNOTATION,
    PODGROUP_NAME_PREFIX,
    min_member_annotation,
)
from grouper.plugins.default import default_metadata


def legacy_podgroup_exists(ctx: GroupingContext, pg_name: str) -> bool:
    """Whether PodGroup ``pg_name`` exists in the pod's namespace (a read error is an error, as KAI)."""
    ns = namespace(ctx.pod)
    try:
        return ctx.lookups.get(PODGROUP_API_VERSION, "PodGroup", ns, pg_name) is not None
    except LookupForbidden as err:
        raise GroupingError(f"cannot look for legacy PodGroup {ns}/{pg_name}: {err}") from err


def apply_min_member_override(md: PodGroupMetadata, job: Obj) -> None:
    """minMember from the Job's ``kai.scheduler/batch-min-member`` annotation, when present."""
    value = min_member_annotation(job)
    if value is not None:
        md.min_member = value
        md.provenance["minMember"] = f"annotation {MIN_MEMBER_ANNOTATION} on {describe(job)}"


class JobGrouper:
    """One PodGroup per Job; minMember from ``kai.scheduler/batch-min-member``."""

    name = "BatchJob Grouper"
    label_keys: frozenset[str] = frozenset()  # the pod labels it reads besides DefaultGrouper's

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata:
        job = ctx.top_owner
        md = default_metadata(ctx)
        legacy = f"{PODGROUP_NAME_PREFIX}-{name(ctx.pod)}-{uid(job)}"
        if ctx.config.search_legacy_pg and legacy != md.name and legacy_podgroup_exists(ctx, legacy):
            md.name = legacy
            md.provenance["name"] = "legacy PodGroup pg-<pod>-<jobUID> already exists (--search-legacy-pg)"
            md.min_member = 1
            md.provenance["minMember"] = "legacy PodGroup: 1"
            return md
        apply_min_member_override(md, job)
        return md


__all__ = ["JobGrouper", "apply_min_member_override", "legacy_podgroup_exists"]
