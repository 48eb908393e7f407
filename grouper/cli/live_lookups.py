"""Read the live cluster from the command line (``grouper get`` / ``grouper explain`` without ``--server``).

:class:`KubeReader` is a small synchronous REST reader over the official ``kubernetes`` package (it handles
kubeconfig contexts, client certificates and exec plugins): raw JSON decoded with orjson, REST paths found by
API discovery (cached per group-version). :class:`LiveLookups` implements ``grouper.core.lookups.Lookups``
over it, read-through and memoized for one command, so ``Grouper.decide`` recomputes a pod's decision from
what is in the cluster right now. Nothing here writes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
import orjson
from kubernetes.config.config_exception import ConfigException

from grouper.core.config import GroupingConfig
from grouper.core.lookups import by_namespace_and_name
from grouper.model.errors import GroupingError, LookupForbidden
from grouper.model.objects import GVK, Obj

PODGROUP_PATH = "/apis/scheduling.run.ai/v2alpha2"


class KubeError(RuntimeError):
    """A request to the API server failed (``status`` 0 = no answer)."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


class ApiReadError(GroupingError):
    """Reading an owner from the API server failed (not 404 / 403); the decision reports it."""

    reason = "ApiReadError"


def _api_prefix(group: str, version: str) -> str:
    return f"/apis/{group}/{version}" if group else f"/api/{version}"


class KubeReader:
    """GET-only JSON access to one API server, configured like kubectl."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None, timeout: float = 30.0) -> None:
        cfg = kubernetes.client.Configuration()
        self.namespace = "default"
        try:
            if kubeconfig or os.environ.get("KUBECONFIG") or Path("~/.kube/config").expanduser().is_file():
                kubernetes.config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg,
                                                   persist_config=False)
                _, active = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)
                chosen = active
                if context:
                    contexts, _ = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)
                    chosen = next((c for c in contexts if c.get("name") == context), active)
                self.namespace = str(((chosen or {}).get("context") or {}).get("namespace") or "default")
            else:
                kubernetes.config.load_incluster_config(client_configuration=cfg)
        except (ConfigException, OSError, TypeError, ValueError) as e:
            raise KubeError(0, f"cannot load kubeconfig {kubeconfig or '(default)'}: {e}") from e
        self.server = str(cfg.host)
        self.api = kubernetes.client.ApiClient(cfg)
        self.timeout = timeout
        self._resources: dict[str, dict[str, dict[str, Any]] | None] = {}

    def close(self) -> None:
        self.api.close()

    def get_json(self, path: str, query: Mapping[str, str] | None = None) -> Any | None:
        """The decoded body; None on 404. Raises :class:`KubeError` (403 keeps ``status`` 403)."""
        params = [(k, v) for k, v in (query or {}).items() if v]
        method, url, headers, body, post = self.api.param_serialize(
            "GET", path, query_params=params, header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        try:
            resp = self.api.call_api(method, url, header_params=headers, body=body, post_params=post,
                                     _request_timeout=self.timeout)
            raw = resp.read()
        except Exception as e:  # urllib3 / TLS / connection errors
            raise KubeError(0, f"GET {path}: cannot reach {self.server}: {e}") from e
        if resp.status == 404:
            return None
        data: Any = orjson.loads(raw) if raw else None
        if resp.status >= 300:
            message = data.get("message") if isinstance(data, dict) else (raw or b"")[:300].decode(errors="replace")
            raise KubeError(resp.status, f"GET {path}: {resp.status} {message}")
        return data

    def list_items(self, path: str, query: Mapping[str, str] | None = None) -> list[Obj]:
        """Every item of a list, following ``continue``; kind/apiVersion filled in from the list."""
        items: list[Obj] = []
        q = dict(query or {})
        q.setdefault("limit", "500")
        while True:
            body = self.get_json(path, q)
            if not isinstance(body, dict):
                return items
            kind = str(body.get("kind") or "").removesuffix("List")
            for item in body.get("items") or []:
                item.setdefault("apiVersion", body.get("apiVersion"))
                item.setdefault("kind", kind)
                items.append(item)
            cont = (body.get("metadata") or {}).get("continue")
            if not cont:
                return items
            q["continue"] = cont

    def resource(self, gvk: GVK) -> dict[str, Any] | None:
        """The discovery entry (``name`` = plural, ``namespaced``) serving ``gvk``; None when not served."""
        gv = gvk.api_version
        if gv not in self._resources:
            doc = self.get_json(_api_prefix(gvk.group, gvk.version))
            self._resources[gv] = None if not isinstance(doc, dict) else {
                str(r.get("kind")): r for r in doc.get("resources") or [] if "/" not in str(r.get("name"))
            }
        kinds = self._resources[gv]
        return kinds.get(gvk.kind) if kinds else None

    def path(self, gvk: GVK, namespace: str | None, name: str | None = None) -> str | None:
        res = self.resource(gvk)
        if res is None:
            return None
        path = _api_prefix(gvk.group, gvk.version)
        if res.get("namespaced") and namespace:
            path += f"/namespaces/{namespace}"
        path += f"/{res['name']}"
        return f"{path}/{name}" if name else path


class LiveLookups:
    """``Lookups`` over the live cluster: read-through, each object read at most once per command."""

    def __init__(self, reader: KubeReader, config: GroupingConfig | None = None) -> None:
        self.reader = reader
        self.config = config or GroupingConfig()
        self._gets: dict[tuple[str, str, str, str], Obj | None] = {}

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        gvk = GVK.from_api_version(api_version, kind)
        key = (gvk.group, kind, namespace or "", name)
        if key in self._gets:
            return self._gets[key]
        try:
            path = self.reader.path(gvk, namespace, name)
            obj = self.reader.get_json(path) if path else None
        except KubeError as e:
            if e.status == 403:
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
            path = self.reader.path(gvk, namespace)
            if path is None:
                return []
            selector = ",".join(f"{k}={v}" for k, v in sorted((label_selector or {}).items()))
            items = self.reader.list_items(path, {"labelSelector": selector})
        except KubeError as e:
            if e.status == 403:
                raise LookupForbidden(api_version, kind, namespace, "") from e
            raise ApiReadError(str(e), obj=f"{kind} list") from e
        return by_namespace_and_name(items)

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


__all__ = ["PODGROUP_PATH", "ApiReadError", "KubeError", "KubeReader", "LiveLookups"]
