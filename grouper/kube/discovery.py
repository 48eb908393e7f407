"""API discovery: which REST resource (plural, namespaced or not) serves a GroupVersionKind.

Answers are cached per group-version. A kind that is not served is remembered for
``negative_ttl`` seconds only, so a CRD installed while the grouper runs is found shortly after.
The command line also asks for all resources of a group-version (to match a kind by its plural,
singular or short name, like kubectl) and for a group's preferred version.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from grouper.kube.transport import ApiError, KubeClient, object_path
from grouper.model.objects import GVK


@dataclass(frozen=True)
class Resource:
    """One REST resource: where objects of ``kind`` live."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    verbs: frozenset[str] = frozenset()
    singular: str = ""
    short_names: tuple[str, ...] = ()

    @property
    def gvk(self) -> GVK:
        return GVK(self.group, self.version, self.kind)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        return object_path(
            self.group, self.version, self.plural, namespace if self.namespaced else None, name, subresource
        )

    def names(self) -> set[str]:
        """What a user may call it, lower case: kind, plural, singular and short names."""
        return {self.kind.lower(), self.plural.lower(), self.singular.lower(), *map(str.lower, self.short_names)} - {""}

    def __str__(self) -> str:
        return f"{self.plural}.{self.version}.{self.group}" if self.group else f"{self.plural}.{self.version}"


# Built-in resources the controller always needs; no discovery round-trip for them.
WELL_KNOWN = {
    r.gvk: r
    for r in (
        Resource("", "v1", "Pod", "pods", True),
        Resource("", "v1", "Namespace", "namespaces", False),
        Resource("", "v1", "ConfigMap", "configmaps", True),
        Resource("", "v1", "Event", "events", True),
        Resource("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False),
        Resource("coordination.k8s.io", "v1", "Lease", "leases", True),
        Resource("scheduling.run.ai", "v2alpha2", "PodGroup", "podgroups", True),
        Resource("run.ai", "v1alpha1", "Karta", "kartas", False),
    )
}


class Discovery:
    def __init__(self, client: KubeClient, *, ttl: float = 600.0, negative_ttl: float = 10.0) -> None:
        self._client = client
        self._ttl, self._negative_ttl = ttl, negative_ttl
        self._groups: dict[
            str, tuple[float, dict[str, Resource] | None]
        ] = {}  # api_version -> (when, kind -> res)
        self._locks: dict[str, asyncio.Lock] = {}
        self._preferred: dict[str, str | None] = {}

    def cached(self, gvk: GVK) -> Resource | None:
        """The resource when already known (no I/O)."""
        if gvk in WELL_KNOWN:
            return WELL_KNOWN[gvk]
        entry = self._groups.get(gvk.api_version)
        return entry[1].get(gvk.kind) if entry and entry[1] else None

    async def resolve(self, gvk: GVK) -> Resource | None:
        """The resource serving ``gvk``, or None when the API server does not serve that kind/version."""
        if gvk in WELL_KNOWN:
            return WELL_KNOWN[gvk]
        kinds = await self._kinds(gvk.group, gvk.version, gvk.kind)
        return kinds.get(gvk.kind) if kinds else None

    async def served(self, group: str, version: str) -> list[Resource]:
        """Every top-level resource of one group-version; [] when it is not served."""
        return list((await self._kinds(group, version, None) or {}).values())

    async def preferred_version(self, group: str) -> str | None:
        """The version the API server prefers for ``group`` (``v1`` for the core group); None if not served."""
        if not group:
            return "v1"
        if group not in self._preferred:
            try:
                doc = await self._client.get(f"/apis/{group}")
            except ApiError as e:
                if not (e.not_found or e.status == 503):
                    raise
                doc = None
            self._preferred[group] = ((doc or {}).get("preferredVersion") or {}).get("version")
        return self._preferred[group]

    async def _kinds(self, group: str, version: str, wanted: str | None) -> dict[str, Resource] | None:
        """kind -> resource of one group-version, from the cache while fresh: ``ttl`` when ``wanted`` (None:
        any) is in it, ``negative_ttl`` otherwise."""
        gv = f"{group}/{version}" if group else version
        async with self._locks.setdefault(gv, asyncio.Lock()):
            entry = self._groups.get(gv)
            now = time.monotonic()
            if entry is not None:
                when, kinds = entry
                if kinds is not None and (wanted is None or wanted in kinds) and now - when < self._ttl:
                    return kinds
                if now - when < self._negative_ttl:
                    return kinds
            kinds = await self._fetch(group, version)
            self._groups[gv] = (now, kinds)
            return kinds

    async def _fetch(self, group: str, version: str) -> dict[str, Resource] | None:
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            doc = await self._client.get(path)
        except ApiError as e:
            if e.not_found or e.status == 503:  # not served (503: aggregated API down)
                return None
            raise
        kinds: dict[str, Resource] = {}
        for r in (doc or {}).get("resources") or []:
            name = str(r.get("name") or "")
            if not name or "/" in name:  # subresources (pods/status, ...)
                continue
            kinds[str(r.get("kind"))] = Resource(
                group,
                version,
                str(r.get("kind")),
                name,
                bool(r.get("namespaced")),
                frozenset(r.get("verbs") or ()),
                str(r.get("singularName") or ""),
                tuple(str(x) for x in r.get("shortNames") or ()),
            )
        return kinds

    def invalidate(self, group: str | None = None) -> None:
        for gv in list(self._groups):
            if group is None or gv.rpartition("/")[0] == group:
                del self._groups[gv]
