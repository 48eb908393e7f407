"""Read-only access to cluster state that grouping needs, behind one small interface.

``InMemoryLookups`` serves ``grouper plan`` and the unit tests; the controller supplies a
cache-backed implementation with the same methods, so the decision code is identical in all three.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from typing import Protocol

from grouper.model import objects as o
from grouper.model.errors import LookupForbidden
from grouper.model.objects import GVK, Obj, labels
from grouper.model.podgroup import PODGROUP_API_VERSION, PODGROUP_KIND


class Lookups(Protocol):
    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        """The object, or None when it does not exist. Raises ``LookupForbidden`` on RBAC denial."""
        ...

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        label_selector: Mapping[str, str] | None = None,
    ) -> list[Obj]:
        """Objects of a kind (in a namespace, or all when None) whose labels match every pair."""
        ...

    def pod_groups_named(self, namespace: str, base: str) -> builtins.list[Obj]:
        """PodGroups in ``namespace`` named ``base`` or ``base-…``, sorted by name. ``base`` ends with a
        UID (``pg-<workload>-<uid>``), which lets the controller answer from an index instead of listing
        the namespace."""
        ...

    def priority_class_exists(self, name: str) -> bool: ...

    def defaults_configmap(self) -> Obj | None:
        """The defaults ConfigMap named by the flags, or None when unset or missing."""
        ...


def matches_labels(obj: Obj, selector: Mapping[str, str] | None) -> bool:
    """Whether the object's labels hold every ``key: value`` pair of ``selector`` (no selector: always)."""
    if not selector:
        return True
    have = labels(obj)
    if not isinstance(have, dict):  # a malformed file object (its own decision reports it) matches nothing
        return False
    return all(have.get(k) == v for k, v in selector.items())


def named_with_prefix(name: str, base: str) -> bool:
    """``name`` is ``base`` or ``base-…``: the PodGroups a workload's own name prefix covers."""
    return name == base or name.startswith(base + "-")


def by_namespace_and_name(objs: Iterable[Obj]) -> list[Obj]:
    """The objects sorted by ``(namespace, name)``: the order every ``Lookups.list`` returns."""
    return sorted(objs, key=lambda obj: (o.namespace(obj), o.name(obj)))


class InMemoryLookups:
    """Lookups over a fixed set of objects (files for ``grouper plan``, fixtures for tests).

    ``forbidden`` holds ``(group, kind)`` pairs whose reads raise ``LookupForbidden`` so tests can
    exercise the RBAC path of owner resolution.
    """

    def __init__(
        self,
        objects: Iterable[Obj] = (),
        *,
        defaults_configmap: tuple[str, str] | None = None,
        forbidden: Iterable[tuple[str, str]] = (),
    ) -> None:
        self._by_key: dict[tuple[str, str, str, str], Obj] = {}
        self._defaults_cm = defaults_configmap
        self._forbidden = set(forbidden)
        for obj in objects:
            self.add(obj)

    def add(self, obj: Obj) -> None:
        gvk = GVK.of(obj)
        self._by_key[(gvk.group, gvk.kind, o.namespace(obj), o.name(obj))] = obj

    def objects(self) -> list[Obj]:
        return list(self._by_key.values())

    def _check(self, api_version: str, kind: str, ns: str | None, nm: str) -> None:
        gvk = GVK.from_api_version(api_version, kind)
        if (gvk.group, kind) in self._forbidden:
            raise LookupForbidden(api_version, kind, ns, nm)

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        self._check(api_version, kind, namespace, name)
        gvk = GVK.from_api_version(api_version, kind)
        # Versions are ignored on purpose: the API server serves every version of one object.
        return self._by_key.get((gvk.group, kind, namespace or "", name))

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        label_selector: Mapping[str, str] | None = None,
    ) -> list[Obj]:
        self._check(api_version, kind, namespace, "")
        gvk = GVK.from_api_version(api_version, kind)
        return by_namespace_and_name(
            obj
            for (group, k, ns, _), obj in self._by_key.items()
            if group == gvk.group and k == kind and (namespace is None or ns == namespace)
            and matches_labels(obj, label_selector)
        )

    def pod_groups_named(self, namespace: str, base: str) -> builtins.list[Obj]:
        return [
            pg for pg in self.list(PODGROUP_API_VERSION, PODGROUP_KIND, namespace)
            if named_with_prefix(o.name(pg), base)
        ]

    def priority_class_exists(self, name: str) -> bool:
        return ("scheduling.k8s.io", "PriorityClass", "", name) in self._by_key

    def defaults_configmap(self) -> Obj | None:
        if not self._defaults_cm:
            return None
        ns, nm = self._defaults_cm
        return self._by_key.get(("", "ConfigMap", ns, nm))


__all__ = ["InMemoryLookups", "Lookups", "by_namespace_and_name", "matches_labels", "named_with_prefix"]
