"""The node-pool label, copied from the pod onto every plugin's PodGroup (KAI ``addNodePoolLabel``)."""

from __future__ import annotations

from grouper.core.config import GroupingConfig
from grouper.model.objects import Obj, describe, labels, with_pod_typemeta
from grouper.model.podgroup import PodGroupMetadata


def apply_nodepool_label(md: PodGroupMetadata, pod: Obj, config: GroupingConfig) -> None:
    """Copy the pod's ``<nodepool-label-key>`` label onto the PodGroup when the plugin set none."""
    key = config.nodepool_label_key
    if not key or key in md.labels:
        return
    value = labels(pod).get(key)
    if value is not None:
        md.labels[key] = value
        md.provenance["nodePoolLabel"] = f"label {key} copied from {describe(with_pod_typemeta(pod))}"
