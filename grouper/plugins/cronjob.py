"""batch/v1 CronJob (KAI ``plugins/cronjobs/crobjob-grouper.go``): one PodGroup per Job run.

The pod's owner reference of kind ``Job`` names the Job; the Job is read and becomes the top owner
of the default grouper (name ``pg-<job>-<jobUID>``, owner = the Job), as KAI does:

- only the Job counts as owner for priority / preemptibility / preemption delay / staleness (KAI
  passes no owner list, so the CronJob's own labels and annotations are not read; set them in
  ``spec.jobTemplate.metadata``, which the CronJob controller copies onto every Job);
- minMember is the Job's ``kai.scheduler/batch-min-member`` (KAI v0.18's default grouper honours it
  on its top owner, here the Job), else 1.
"""

from __future__ import annotations

from grouper.core.context import GroupingContext
from grouper.model.errors import InvalidWorkload
from grouper.model.objects import describe, namespace, owner_references, with_pod_typemeta
from grouper.model.podgroup import PodGroupMetadata
from grouper.plugins.common import fetch
from grouper.plugins.default import default_metadata


class CronJobGrouper:
    name = "CronJob Grouper"
    label_keys: frozenset[str] = frozenset()  # the pod labels it reads besides DefaultGrouper's

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
        return default_metadata(ctx, top_owner=job, owners=[job])


__all__ = ["CronJobGrouper"]
