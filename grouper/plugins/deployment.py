"""apps/v1 Deployment (KAI ``plugins/deployment/deployment_grouper.go``): one PodGroup per pod.

Inference replicas are independent, so each pod gets ``pg-<pod>-<podUID>`` owned by the pod itself
(garbage-collected with it), minMember 1, priority fallback ``inference``. Labels, annotations and
queue still come from the Deployment (the top owner).
"""

from __future__ import annotations

from grouper.core.context import GroupingContext
from grouper.model.objects import describe, with_pod_typemeta
from grouper.model.podgroup import OwnerRef, PodGroupMetadata
from grouper.plugins.common import INFERENCE_PRIORITY, podgroup_name
from grouper.plugins.default import default_metadata


def per_pod(md: PodGroupMetadata, ctx: GroupingContext, why: str) -> PodGroupMetadata:
    """Turn ``md`` into the pod's own PodGroup (name ``pg-<pod>-<podUID>``, owner = the pod)."""
    pod = with_pod_typemeta(ctx.pod)
    md.name = podgroup_name(pod)
    md.owner = OwnerRef.of(pod)
    md.provenance["name"] = f"pg-<pod>-<podUID> of {describe(pod)} ({why})"
    return md


class DeploymentGrouper:
    name = "Deployment Grouper"

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata:
        md = default_metadata(ctx, priority_fallback=INFERENCE_PRIORITY)
        return per_pod(md, ctx, "one PodGroup per Deployment pod")


__all__ = ["DeploymentGrouper", "per_pod"]
