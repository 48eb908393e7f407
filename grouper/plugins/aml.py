"""Azure ML AmlJob (KAI ``plugins/aml/aml_grouper.go``): minMember = the job's node count.

minMember = ``spec.job.options.envs.AZUREML_NODE_COUNT``; missing is an error. KAI only accepts an
integer there; we also accept a numeric string (environment values are strings in practice) and
reject negative counts.
"""

from __future__ import annotations

from grouper.core.context import GroupingContext
from grouper.model.objects import describe
from grouper.model.podgroup import PodGroupMetadata
from grouper.plugins.common import int_spec_field
from grouper.plugins.default import default_metadata

NODE_COUNT_PATH = ("spec", "job", "options", "envs", "AZUREML_NODE_COUNT")


class AmlGrouper:
    name = "AML Grouper"
    label_keys: frozenset[str] = frozenset()  # the pod labels it reads besides DefaultGrouper's

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata:
        md = default_metadata(ctx)
        count = int_spec_field(ctx.top_owner, *NODE_COUNT_PATH, minimum=0, required=True)
        assert count is not None  # required=True
        md.min_member = count
        md.provenance["minMember"] = f"{'.'.join(NODE_COUNT_PATH)} of {describe(ctx.top_owner)}"
        return md


__all__ = ["AmlGrouper"]
