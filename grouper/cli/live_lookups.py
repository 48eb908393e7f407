"""Read-through lookups over the live cluster (``grouper explain`` without ``--server``).

:class:`LiveLookups` implements ``grouper.core.lookups.Lookups`` over :class:`grouper.kube.sync.SyncKube`
(the controller's async client driven synchronously), read-through and memoized for one command, so
``Grouper.decide`` recomputes a pod's decision from what is in the cluster right now. Nothing here writes.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping

from grouper.core.config import GroupingConfig
from grouper.core.lookups import by_namespace_and_name, named_with_prefix
from grouper.kube.sync import SyncKube
from grouper.kube.transport import ApiError
from grouper.model.errors import GroupingError, LookupForbidden
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import PODGROUP_API_VERSION, PODGROUP_KIND


class ApiReadError(GroupingError):
    """Reading an owner from the API server failed (not 404 / 403); the decision reports it."""

    reason = "ApiReadError"


class LiveLookups:
    """``Lookups`` over the live cluster: read-through, each object read at most once per command."""

    def __init__(self, kube: SyncKube, config: GroupingConfig | None = None) -> None:
        self.kube = kube
        self.config = config or GroupingConfig()
        self._gets: dict[tuple[str, str, str, str], Obj | None] = {}

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        gvk = GVK.from_api_version(api_version, kind)
        key = (gvk.group, kind, namespace or "", name)
        if key in self._gets:
            return self._gets[key]
        try:
            res = self.kube.resolve(gvk)
            obj = self.kube.get_object(res.path(namespace, name)) if res else None
        except ApiError as e:
            if e.forbidden:
                raise LookupForbidden(api_version, kind, namespace, name) from e
            raise ApiReadError(str(e), obj=f"{kind} {namespace + '/' if namespace else ''}{name}") from e
        if isinstance(obj, dict):
            obj.setdefault("apiVersion", api_version)
            obj.setdefault("kind", kind)
        else:
            obj = None
        self._gets[key] = obj
        return obj

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        label_selector: Mapping[str, str] | None = None,
    ) -> list[Obj]:
        gvk = GVK.from_api_version(api_version, kind)
        try:
            res = self.kube.resolve(gvk)
            if res is None:
                return []
            selector = ",".join(f"{k}={v}" for k, v in sorted((label_selector or {}).items()))
            items = self.kube.list_items(res.path(namespace), {"labelSelector": selector})
        except ApiError as e:
            if e.forbidden:
                raise LookupForbidden(api_version, kind, namespace, "") from e
            raise ApiReadError(str(e), obj=f"{kind} list") from e
        return by_namespace_and_name(items)

    def pod_groups_named(self, namespace: str, base: str) -> builtins.list[Obj]:
        pgs = self.list(PODGROUP_API_VERSION, PODGROUP_KIND, namespace)
        return [pg for pg in pgs if named_with_prefix(str((pg.get("metadata") or {}).get("name") or ""), base)]

    def priority_class_exists(self, name: str) -> bool:
        if not name:
            return False
        try:
            return self.get("scheduling.k8s.io/v1", "PriorityClass", None, name) is not None
        except LookupForbidden:
            return False

    def defaults_configmap(self) -> Obj | None:
        ns = self.config.default_priorities_configmap_namespace
        name = self.config.default_priorities_configmap_name
        if not (ns and name):
            return None
        try:
            return self.get("v1", "ConfigMap", ns, name)
        except LookupForbidden:
            return None


__all__ = ["ApiReadError", "LiveLookups"]
