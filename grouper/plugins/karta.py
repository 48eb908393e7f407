"""The Karta fallback plugin: a workload kind described by a Karta definition instead of code.

Starts from the default grouper's PodGroup (queue, priority, labels, ...) and lets the
definition's ``optimizationInstructions.gangScheduling`` set the name, minMember / minSubGroup,
sub-groups and topology (kai-podgrouper.md §2.4). Without gang instructions the default grouper's
answer stands.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from grouper.core.context import GroupingContext
from grouper.karta import Evaluator, KartaDefinition, apply_gang
from grouper.model.objects import Obj, describe, with_pod_typemeta
from grouper.model.podgroup import PodGroupMetadata
from grouper.plugins.default import default_metadata

log = logging.getLogger(__name__)


class KartaGrouper:
    name = "Karta Grouper"

    def __init__(self, definition: KartaDefinition, evaluator: Evaluator | None = None) -> None:
        self.definition = definition
        self.evaluator = evaluator or Evaluator(definition)

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata | None:
        ctx.prepared(self)
        base = default_metadata(ctx)
        result = apply_gang(self.definition, self.evaluator, ctx.top_owner, ctx.pod, base)
        return base if result is None else result

    @property
    def label_keys(self) -> frozenset[str]:
        """The pod labels its definition reads (:func:`definition_label_keys`)."""
        return definition_label_keys(self.definition)

    def prepare(self, top_owner: Obj, pods: Sequence[Obj]) -> None:
        """The per-workload part, once per planning pass: the definition's root expressions on ``top_owner``
        (the root object) and its pod expressions on the pass's ``pods``, in one sandbox run per chunk
        instead of a run per pod. Their outcomes go to the evaluator's outcome cache, where each pod's
        decision finds them. Best effort: what a run cannot answer is left to that pod's decision, which
        gives the same outcomes (and names a slow expression)."""
        try:
            self.evaluator.prefetch([with_pod_typemeta(p) for p in pods], root=top_owner)
        except Exception:
            log.debug("Karta %s: preparing for %s failed", self.definition.name, describe(top_owner), exc_info=True)


_LABEL_IN_JQ = re.compile(r"""labels\s*(?:\[\s*"([^"]+)"\s*\]|\.\s*"([^"]+)"|\.([A-Za-z_][A-Za-z0-9_]*))""")


def definition_label_keys(definition: KartaDefinition) -> frozenset[str]:
    """The pod labels a definition reads: its component selectors' ``matchLabels`` and the label keys its pod
    jq paths name literally (``.metadata.labels["k"]``, ``.metadata.labels.k``); a key a path computes is
    not derivable and not listed."""
    keys: set[str] = set()
    paths: list[str | None] = []
    for comp in definition.components():
        sel = comp.pod_selector
        if sel is None:
            continue
        if sel.component_type is not None:
            keys.update(sel.component_type.match_labels)
            paths.append(sel.component_type.key_path)
        paths += [sel.instance_id_path, sel.replica_key_path]
    for group in definition.gang.pod_groups if definition.gang else ():
        for member in group.members:
            paths += [*member.group_by_key_paths, *member.filters]
    for path in paths:
        keys.update(next(g for g in m.groups() if g) for m in _LABEL_IN_JQ.finditer(path or ""))
    return frozenset(keys)
