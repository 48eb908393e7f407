"""The composition root: the one place that wires the native plugins and the Karta grouper into the core.

Everything that decides (``grouper run``, ``grouper plan``, ``grouper explain``, the tests) builds its
:class:`~grouper.core.grouping.Grouper` here, so what the tests prove is what runs; the core itself
imports nothing above it (``make lint`` checks the layers).
"""

from __future__ import annotations

from collections.abc import Mapping

from grouper.core.config import GroupingConfig
from grouper.core.context import Plugin
from grouper.core.grouping import Grouper
from grouper.core.hub import PluginHub
from grouper.karta import DefinitionRegistry
from grouper.plugins.default import DefaultGrouper
from grouper.plugins.karta import KartaGrouper
from grouper.plugins.registry import native_kinds, native_plugins


def build_hub(
    config: GroupingConfig,
    definitions: DefinitionRegistry | None = None,
    native: Mapping[tuple[str, str, str], Plugin] | None = None,
) -> PluginHub:
    """Native plugins (KAI's table unless ``native`` is given) → Karta definitions → default grouper."""
    return PluginHub(
        native_plugins() if native is None else native,
        DefaultGrouper(),
        definitions,
        karta_fallback=config.generic_karta_fallback,
        karta_plugin=KartaGrouper,
    )


def build_grouper(
    config: GroupingConfig | None = None,
    definitions: DefinitionRegistry | None = None,
    native: Mapping[tuple[str, str, str], Plugin] | None = None,
) -> Grouper:
    config = config or GroupingConfig()
    return Grouper(config, build_hub(config, definitions, native))


def cached_kinds(extra: frozenset[tuple[str, str]] = frozenset()) -> frozenset[tuple[str, str]]:
    """The owner kinds the controller may cache besides those of loaded Karta definitions."""
    return native_kinds(native_plugins()) | extra


__all__ = ["build_grouper", "build_hub", "cached_kinds"]
