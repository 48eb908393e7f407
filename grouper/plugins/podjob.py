"""Bare pods and Spark (KAI ``plugins/podjob/podjob.go``, ``plugins/spark/spark.go``).

The top owner is a Pod: a bare pod (its own top owner) or a Spark executor owned by its driver pod.
A pod with both ``spark-app-name`` and ``spark-app-selector`` labels joins the PodGroup named by
the ``spark-app-selector`` value (driver and executors share it); otherwise the default grouper
(``pg-<pod>-<podUID>``, owner = the pod). Choice: an empty ``spark-app-selector`` is an error
naming the label (KAI would try to create a PodGroup with an empty name).
"""

from __future__ import annotations

from grouper.core.context import GroupingContext
from grouper.model.errors import InvalidWorkload
from grouper.model.objects import Obj, describe, with_pod_typemeta
from grouper.model.podgroup import PodGroupMetadata
from grouper.plugins.common import label_field, labels_of
from grouper.plugins.default import default_metadata

SPARK_APP_NAME_LABEL = "spark-app-name"
SPARK_APP_SELECTOR_LABEL = "spark-app-selector"


def is_spark_pod(pod: Obj) -> bool:
    labels = labels_of(pod)
    return SPARK_APP_NAME_LABEL in labels and SPARK_APP_SELECTOR_LABEL in labels


class PodJobGrouper:
    name = "PodJob Grouper"
    label_keys: frozenset[str] = frozenset({SPARK_APP_NAME_LABEL, SPARK_APP_SELECTOR_LABEL})  # the pod labels it reads besides DefaultGrouper's

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata:
        md = default_metadata(ctx)
        pod = with_pod_typemeta(ctx.pod)
        if is_spark_pod(pod):
            app = labels_of(pod)[SPARK_APP_SELECTOR_LABEL]
            if not app:
                raise InvalidWorkload("is empty; a Spark pod's PodGroup is named after it",
                                      obj=describe(pod), field=label_field(SPARK_APP_SELECTOR_LABEL))
            md.name = app
            md.provenance["name"] = f"label {SPARK_APP_SELECTOR_LABEL} on {describe(pod)} (Spark application)"
        return md


__all__ = ["PodJobGrouper", "is_spark_pod"]
