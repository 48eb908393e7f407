"""Skip the top owner (KAI ``plugins/skiptopowner/skiptopowner.go``) and group by the kind below it.

Used for wrappers whose children already have a plugin: Argo Workflow → its pods (PodJob grouper,
one PodGroup per pod), Kubeflow TrainJob → JobSet, DynamoGraphDeployment → PodCliqueSet (Grove),
run.ai workloads → their child kind.

The object just below the top owner (``owners[-2]``, or the pod itself when the pod is owned
directly by the skipped kind) becomes the top owner. Before delegating:

- missing ``priorityClassName`` / ``kai.scheduler/preemptibility`` labels on it are filled from the
  defaults-ConfigMap entry of the **skipped** kind (the priority only if that PriorityClass exists);
- the skipped owner's labels and annotations are copied onto it without overriding existing keys.

Then the plugin the hub picks for that object's GVK runs with the owner chain minus the skipped owner:
since KAI v0.18 (PR #2067) the whole hub (exact GVK, any-version entries, the Karta fallback, the
default grouper; ``ctx.plugin_for``), no longer an exact-GVK table.

Choices: the owner chain already holds full objects, so the lower owner is not re-read. The merged
object replaces its entry in the chain as well, so labels propagated from the skipped owner count for
priority/preemptibility whether or not there are intermediate owners (KAI applies them only to the
new top owner, which the default grouper ignores when the chain is not empty). A preemptibility
default from the ConfigMap is lower-cased, as the default grouper does for direct ConfigMap use.
"""

from __future__ import annotations

from grouper.core.context import GroupingContext
from grouper.model.objects import GVK, Obj, describe, meta, with_pod_typemeta
from grouper.model.podgroup import PodGroupMetadata
from grouper.plugins.common import PREEMPTIBILITY_LABEL, PRIORITY_LABEL, annotations_of, labels_of
from grouper.plugins.default import default_metadata, load_defaults, priority_class_exists
from grouper.plugins.defaults_configmap import defaults_for_kind


def _merged(ctx: GroupingContext, lower: Obj, skipped: Obj) -> Obj:
    """``lower`` with the skipped kind's defaults and the skipped owner's labels/annotations added."""
    labels = labels_of(lower)
    defaults, _ = load_defaults(ctx)
    entry = defaults_for_kind(defaults, GVK.of(skipped))
    if entry is not None:
        if PRIORITY_LABEL not in labels and priority_class_exists(ctx, entry.priority_name):
            labels[PRIORITY_LABEL] = entry.priority_name
        if PREEMPTIBILITY_LABEL not in labels and entry.preemptibility:
            labels[PREEMPTIBILITY_LABEL] = entry.preemptibility.lower()
    for key, value in labels_of(skipped).items():
        labels.setdefault(key, value)
    annotations = annotations_of(lower)
    for key, value in annotations_of(skipped).items():
        annotations.setdefault(key, value)
    return {**lower, "metadata": {**meta(lower), "labels": labels, "annotations": annotations}}


class SkipTopOwnerGrouper:
    name = "SkipTopOwner Grouper"
    label_keys: frozenset[str] = frozenset()  # the pod labels it reads besides DefaultGrouper's

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata | None:
        skipped = ctx.top_owner
        owners = list(ctx.owners)
        if len(owners) <= 1:
            lower = _merged(ctx, with_pod_typemeta(ctx.pod), skipped)
            chain: list[Obj] = []
        else:
            lower = _merged(ctx, owners[-2], skipped)
            chain = [*owners[:-2], lower]
        sub = ctx.replace(top_owner=lower, owners=chain)
        plugin = ctx.plugin_for(GVK.of(lower)) if ctx.plugin_for else None
        md = plugin.metadata(sub) if plugin is not None else default_metadata(sub)
        if md is not None:
            via = plugin.name if plugin is not None else "default"
            md.provenance["skippedTopOwner"] = f"{describe(skipped)} skipped; {describe(lower)} grouped by {via}"
        return md


__all__ = ["SkipTopOwnerGrouper"]
