"""Choose the grouping plugin for a top owner's GroupVersionKind.

Order (kai-podgrouper.md §2.1): native plugin by exact GVK → native plugin registered for any
version of the group/kind → Karta definition for that exact GVK (a cluster ``Karta`` overrides a
built-in catalog entry; two cluster Kartas for one GVK is an error for that workload) → default.
``generic_karta_fallback=False`` turns the Karta step off. "No Karta" is an explicit ``None``,
never a half-built plugin (KAI's typed-nil hazard, §8 item 1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grouper.core.context import Plugin
from grouper.model.errors import KartaError
from grouper.model.objects import GVK

if TYPE_CHECKING:
    from grouper.karta import DefinitionRegistry, KartaDefinition

WILDCARD = "*"

KartaPluginFactory = Callable[["KartaDefinition", Any], Plugin]
"""Builds the plugin for one Karta definition from it and its evaluator (the composition root passes
``grouper.plugins.karta.KartaGrouper``); the core never imports plugins."""


@dataclass
class Selection:
    plugin: Plugin
    definition: KartaDefinition | None = None


class PluginHub:
    def __init__(
        self,
        native: Mapping[tuple[str, str, str], Plugin],
        default: Plugin,
        definitions: DefinitionRegistry | None = None,
        karta_fallback: bool = True,
        karta_plugin: KartaPluginFactory | None = None,
    ) -> None:
        self._native = dict(native)
        self._default = default
        self.definitions = definitions
        self._karta_plugin_factory = karta_plugin
        self._karta_fallback = karta_fallback and definitions is not None and karta_plugin is not None
        self._karta_kinds: tuple[frozenset[tuple[str, str]], frozenset[tuple[str, str]]] | None = None

    def native_for(self, gvk: GVK) -> Plugin | None:
        """Exact-GVK native lookup only."""
        return self._native.get((gvk.group, gvk.version, gvk.kind))

    def karta_kinds(self) -> frozenset[tuple[str, str]]:
        """(group, kind) pairs whose workloads a Karta definition decides: described by a loaded
        definition (built-in or cluster) and claimed by no native plugin of any version. Their
        decisions wait on the jq sandbox, so the controller runs them off its event loop."""
        if not self._karta_fallback or self.definitions is None:
            return frozenset()
        kinds = self.definitions.kinds()
        cached = self._karta_kinds
        if cached is not None and cached[0] is kinds:
            return cached[1]
        native = {(group, kind) for group, _, kind in self._native}
        out = frozenset(k for k in kinds if k not in native)
        self._karta_kinds = (kinds, out)
        return out

    def plugin_for(self, gvk: GVK) -> Plugin:
        """The plugin the whole hub picks (exact, wildcard, Karta, default): what skip-top-owner
        delegation uses since KAI v0.18 (PR #2067)."""
        return self.select(gvk).plugin

    def select(self, gvk: GVK) -> Selection:
        plugin = self._native.get((gvk.group, gvk.version, gvk.kind)) or self._native.get(
            (gvk.group, WILDCARD, gvk.kind)
        )
        if plugin is not None:
            return Selection(plugin)
        if self._karta_fallback and self.definitions is not None:
            resolution = self.definitions.resolve(gvk)
            if resolution.error:
                raise KartaError(resolution.error, obj=f"kind {gvk}")
            if resolution.definition is not None:
                return Selection(self._karta_plugin(resolution.definition), resolution.definition)
        return Selection(self._default)

    def _karta_plugin(self, definition: KartaDefinition) -> Plugin:
        assert self.definitions is not None and self._karta_plugin_factory is not None
        # The registry caches one evaluator per definition version, sandboxed in a killable worker
        # process for definitions that come from the cluster (untrusted jq).
        return self._karta_plugin_factory(definition, self.definitions.evaluator(definition))
