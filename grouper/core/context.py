"""What a grouping plugin is given, and the interface every plugin implements."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from grouper.core.config import GroupingConfig
from grouper.core.lookups import Lookups
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import PodGroupMetadata


@dataclass
class GroupingContext:
    """One pod's grouping question.

    ``owners`` is the owner chain, direct owner first and top owner last (empty for a bare pod);
    ``top_owner`` is the full top-owner object (the pod itself for a bare pod).
    ``plugin_for`` picks a plugin for a GVK through the whole hub (exact, wildcard version, Karta,
    default); the skip-top-owner plugin uses it to delegate to the kind below the skipped owner.
    """

    pod: Obj
    top_owner: Obj
    owners: list[Obj]
    lookups: Lookups
    config: GroupingConfig = field(default_factory=GroupingConfig)
    plugin_for: Callable[[GVK], Plugin | None] | None = None

    def replace(self, **changes: object) -> GroupingContext:
        from dataclasses import replace

        return replace(self, **changes)  # type: ignore[arg-type]


class Plugin(Protocol):
    """A grouping plugin. ``metadata`` is pure: it reads only ``ctx`` (and ``ctx.lookups``).

    It returns the PodGroup the pod belongs to, with ``sub_groups[*].pods`` naming this pod where
    it belongs to a sub-group, or None when the pod must be left alone. Problems are raised as
    ``grouper.model.errors.GroupingError`` subclasses with the object and field in the message.
    """

    name: str

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata | None: ...


@runtime_checkable
class Prefetching(Protocol):
    """A plugin that can prepare, in one go, what deciding many pods of one workload will compute per
    pod (the Karta plugin: one sandbox run for a pass's pods). Optional; it changes no decision."""

    def prefetch(self, pods: Sequence[Obj], top_owner: Obj) -> None: ...
