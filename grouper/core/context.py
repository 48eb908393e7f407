"""What a grouping plugin is given, and the interface every plugin implements."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from grouper.core.config import GroupingConfig
from grouper.core.lookups import Lookups
from grouper.core.workload_context import Preparing, WorkloadContext
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import PodGroupMetadata


@dataclass
class GroupingContext:
    """One pod's grouping question.

    ``owners`` is the owner chain, direct owner first and top owner last (empty for a bare pod);
    ``top_owner`` is the full top-owner object (the pod itself for a bare pod).
    ``plugin_for`` picks a plugin for a GVK through the whole hub (exact, wildcard version, Karta,
    default); the skip-top-owner plugin uses it to delegate to the kind below the skipped owner.
    ``workload``: the pass's :class:`~grouper.core.workload_context.WorkloadContext` (one of its own when
    the pod is decided alone).
    """

    pod: Obj
    top_owner: Obj
    owners: list[Obj]
    lookups: Lookups
    config: GroupingConfig = field(default_factory=GroupingConfig)
    plugin_for: Callable[[GVK], Plugin | None] | None = None
    workload: WorkloadContext = field(default_factory=WorkloadContext)

    def replace(self, **changes: object) -> GroupingContext:
        from dataclasses import replace

        return replace(self, **changes)  # type: ignore[arg-type]

    def prepared(self, plugin: Preparing) -> Any:
        """``plugin``'s per-workload part for this pod's top owner, computed once per pass."""
        return self.workload.prepared(plugin, self.top_owner)


class Plugin(Protocol):
    """A grouping plugin. ``metadata`` is pure: it reads only ``ctx`` (and ``ctx.lookups``).

    It returns the PodGroup the pod belongs to, with ``sub_groups[*].pods`` naming this pod where
    it belongs to a sub-group, or None when the pod must be left alone. Problems are raised as
    ``grouper.model.errors.GroupingError`` subclasses with the object and field in the message.
    """

    name: str

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata | None: ...
