"""The Karta fallback plugin: a workload kind described by a Karta definition instead of code.

Starts from the default grouper's PodGroup (queue, priority, labels, ...) and lets the
definition's ``optimizationInstructions.gangScheduling`` set the name, minMember / minSubGroup,
sub-groups and topology (kai-podgrouper.md §2.4). Without gang instructions the default grouper's
answer stands.
"""

from __future__ import annotations

from collections.abc import Sequence

from grouper.core.context import GroupingContext
from grouper.karta import Evaluator, KartaDefinition, apply_gang
from grouper.model.objects import Obj
from grouper.model.podgroup import PodGroupMetadata
from grouper.plugins.default import default_metadata


class KartaGrouper:
    name = "Karta Grouper"

    def __init__(self, definition: KartaDefinition, evaluator: Evaluator | None = None) -> None:
        self.definition = definition
        self.evaluator = evaluator or Evaluator(definition)

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata | None:
        base = default_metadata(ctx)
        result = apply_gang(self.definition, self.evaluator, ctx.top_owner, ctx.pod, base)
        return base if result is None else result

    def prefetch(self, pods: Sequence[Obj], top_owner: Obj) -> None:
        """Evaluate the definition's pod expressions for all of ``pods`` in one sandbox run per chunk, the
        root expressions on ``top_owner`` (the root object) in the first of them."""
        self.evaluator.prefetch(pods, root=top_owner)
