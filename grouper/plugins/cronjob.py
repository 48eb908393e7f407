"""batch/v1 CronJob (KAI ``plugins/cronjobs/crobjob-grouper.go``): one PodGroup per Job run.

The pod's owner reference of kind ``Job`` names the Job; the Job is read and becomes the top owner
of the default grouper (name ``pg-<job>-<jobUID>``, owner = the Job). Choice: the Job's
``kai.scheduler/batch-min-member`` annotation (set through ``spec.jobTemplate.metadata``) is
honoured as for a plain Job; KAI ignores it here, which looks like an omission. The whole owner
chain (Job, CronJob) counts for priority/preemptibility/delays.
"""

from __future__ import annotations

from grouper.core.context import GroupingContext
from grouper.model.errors import InvalidWorkload
from grouper.model.objects import describe, namespace, owner_references, uid, with_pod_typemeta
from grouper.model.podgroup import PodGroupMetadata
from grouper.plugins.common import fetch
from grouper.plugins.default import default_metadata
from grouper.plugins.job import apply_min_member_override


class CronJobGrouper:
    name = "CronJob Grouper"

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata | None:
        pod = with_pod_typemeta(ctx.pod)
        ref = next((r for r in owner_references(pod) if r.get("kind") == "Job"), None)
        if ref is None or not ref.get("name"):
            raise InvalidWorkload("no owner reference of kind Job (a CronJob's pods are owned by its Jobs)",
                                  obj=describe(pod), field="metadata.ownerReferences")
        job = fetch(ctx, "batch/v1", "Job", namespace(pod), str(ref["name"]),
                    why=f"owner of {describe(pod)} under a CronJob")
        if job is None:
            return None
        chain = [job, *(o for o in ctx.owners if uid(o) != uid(job))]
        md = default_metadata(ctx, top_owner=job, owners=chain)
        apply_min_member_override(md, job)
        return md


__all__ = ["CronJobGrouper"]
