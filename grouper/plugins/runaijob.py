"""run.ai RunaiJob (KAI ``plugins/runaijob/runaijob-grouper.go``): default grouper, legacy-aware name.

With ``--search-legacy-pg`` a PodGroup with the legacy name ``pg-<base>-<jobUID>`` is reused when it
exists (``<base>`` = the pod name when ``spec.parallelism`` > 1, else the job name). Otherwise the
name is ``pg-<pod name without its last "-suffix">-<jobUID>``, so the pods of one job share it.
"""

from __future__ import annotations

from grouper.core.context import GroupingContext
from grouper.model.objects import Obj, describe, dig, name, uid
from grouper.model.podgroup import PodGroupMetadata
from grouper.plugins.common import PODGROUP_NAME_PREFIX
from grouper.plugins.default import default_metadata
from grouper.plugins.job import legacy_podgroup_exists


def legacy_name(job: Obj, pod: Obj) -> str:
    parallelism = dig(job, "spec", "parallelism")
    wide = isinstance(parallelism, int) and not isinstance(parallelism, bool) and parallelism > 1
    base = name(pod) if wide else name(job)
    return f"{PODGROUP_NAME_PREFIX}-{base}-{uid(job)}"


class RunaiJobGrouper:
    name = "RunaiJob Grouper"
    label_keys: frozenset[str] = frozenset()  # the pod labels it reads besides DefaultGrouper's

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata:
        job = ctx.top_owner
        md = default_metadata(ctx)
        if ctx.config.search_legacy_pg:
            legacy = legacy_name(job, ctx.pod)
            if legacy_podgroup_exists(ctx, legacy):
                md.name = legacy
                md.provenance["name"] = f"legacy PodGroup {legacy} already exists (--search-legacy-pg)"
                return md
        base = name(ctx.pod).rpartition("-")[0] or name(ctx.pod)
        md.name = f"{PODGROUP_NAME_PREFIX}-{base}-{uid(job)}"
        md.provenance["name"] = f"pg-<pod name minus last -suffix>-<uid> of {describe(job)}"
        return md


__all__ = ["RunaiJobGrouper", "legacy_name"]
