"""Reading a workload, its pods and their intermediate owners from a cluster (``grouper describe
KIND/NAME``, ``grouper definitions --cluster``). Kept out of ``grouper.describe`` so that package
stays pure; everything it returns is plain dicts.

Uses the official ``kubernetes`` client for configuration and transport (kubeconfig, else the
in-cluster service account) and plain REST paths with JSON decoding, so any kind works without
generated models. Discovery is targeted: only the group/versions of Karta definitions and of the
owners actually met are asked for.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from grouper.describe.ownership import MAX_DEPTH
from grouper.model.objects import GVK, owner_references, uid

Obj = dict[str, Any]
KARTAS_PATH = "/apis/run.ai/v1alpha1/kartas"


class ClusterError(Exception):
    """A request failed (connection, authentication, unexpected status)."""

    def __init__(self, message: str, status: int = 0) -> None:
        self.status = status
        super().__init__(message)


class NotFound(ClusterError):
    """The object, or the API it lives in, does not exist."""


class Forbidden(ClusterError):
    """RBAC denies the request."""


class KindNotResolved(Exception):
    """KIND names no Karta-covered kind, names several, or the kind is not served."""

    def __init__(self, message: str, *, not_installed: bool = False) -> None:
        self.not_installed = not_installed
        super().__init__(message)


@dataclass(frozen=True)
class APIResource:
    group: str
    version: str
    kind: str
    plural: str
    singular: str = ""
    short_names: tuple[str, ...] = ()
    namespaced: bool = True

    @property
    def gvk(self) -> GVK:
        return GVK(self.group, self.version, self.kind)

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace)}"
        base += f"/{self.plural}"
        return base + (f"/{quote(name)}" if name else "")

    def names(self) -> set[str]:
        return {self.kind.lower(), self.plural.lower(), self.singular.lower(), *(s.lower() for s in self.short_names)} - {""}


@dataclass
class LiveWorkload:
    workload: Obj
    pods: list[Obj]
    objects: list[Obj]
    warnings: list[str] = field(default_factory=list)


def new_api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An ``ApiClient`` from the kubeconfig (``$KUBECONFIG`` / ``~/.kube/config`` when not given),
    else from the in-cluster service account."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    try:
        return config.new_client_from_config(config_file=kubeconfig, context=context, persist_config=False)
    except (ConfigException, OSError) as e:
        if kubeconfig or context:
            raise ClusterError(f"cannot load kubeconfig: {e}") from e
        try:
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
        except ConfigException as e2:
            raise ClusterError(f"no kubeconfig and not running in a cluster: {e}; {e2}") from e2
        return client.ApiClient(cfg)


class LiveCluster:
    """Small synchronous reader over an ``ApiClient``."""

    def __init__(self, api_client: Any, *, timeout_s: float = 30.0, page_size: int = 500) -> None:
        self.api = api_client
        self.timeout_s = timeout_s
        self.page_size = page_size
        self._resources: dict[tuple[str, str], list[APIResource]] = {}
        self._preferred: dict[str, str | None] = {}

    @classmethod
    def connect(cls, kubeconfig: str | None = None, context: str | None = None) -> LiveCluster:
        return cls(new_api_client(kubeconfig, context))

    def close(self) -> None:
        close = getattr(self.api, "close", None)
        if callable(close):
            close()

    # ------------------------------------------------------------------ transport

    def get_json(self, path: str, query: dict[str, str] | None = None) -> Any:
        """GET ``path`` and decode the JSON body; NotFound / Forbidden / ClusterError otherwise."""
        from kubernetes.client.exceptions import ApiException

        try:
            method, url, headers, _, _ = self.api.param_serialize(
                "GET",
                path,
                query_params=list((query or {}).items()),
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            resp = self.api.call_api(method, url, header_params=headers, _request_timeout=self.timeout_s)
            body = resp.read()
        except ApiException as e:
            raise ClusterError(f"GET {path}: {e.reason or e}", e.status or 0) from e
        except Exception as e:  # urllib3 connection errors and the like
            raise ClusterError(f"GET {path}: {e}") from e
        status = int(resp.status)
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        if 200 <= status < 300:
            return data
        message = data.get("message") if isinstance(data, dict) else (body or b"").decode(errors="replace")[:200]
        if status == 404:
            raise NotFound(f"GET {path}: not found: {message}", status)
        if status == 403:
            raise Forbidden(f"GET {path}: forbidden: {message}", status)
        raise ClusterError(f"GET {path}: HTTP {status}: {message}", status)

    def list_path(self, path: str) -> list[Obj]:
        """All items of a list path, following ``continue`` tokens."""
        items: list[Obj] = []
        token = ""
        while True:
            query = {"limit": str(self.page_size)}
            if token:
                query["continue"] = token
            data = self.get_json(path, query) or {}
            items.extend(i for i in data.get("items") or [] if isinstance(i, dict))
            token = (data.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    # ------------------------------------------------------------------ discovery

    def resources(self, group: str, version: str) -> list[APIResource]:
        """The top-level resources of one group/version; [] when it is not served."""
        key = (group, version)
        if key not in self._resources:
            path = f"/apis/{group}/{version}" if group else f"/api/{version}"
            try:
                data = self.get_json(path) or {}
            except NotFound:
                data = {}
            out = []
            for r in data.get("resources") or []:
                if not isinstance(r, dict) or "/" in str(r.get("name", "")):
                    continue
                out.append(
                    APIResource(
                        group=group,
                        version=version,
                        kind=str(r.get("kind") or ""),
                        plural=str(r.get("name") or ""),
                        singular=str(r.get("singularName") or ""),
                        short_names=tuple(str(s) for s in r.get("shortNames") or []),
                        namespaced=bool(r.get("namespaced", True)),
                    )
                )
            self._resources[key] = out
        return self._resources[key]

    def resource_for(self, api_version: str, kind: str) -> APIResource | None:
        gvk = GVK.from_api_version(api_version, kind)
        return next((r for r in self.resources(gvk.group, gvk.version) if r.kind == kind), None)

    def preferred_version(self, group: str) -> str | None:
        if group not in self._preferred:
            try:
                data = self.get_json(f"/apis/{group}") if group else None
            except NotFound:
                data = None
            pv = (data or {}).get("preferredVersion") or {}
            self._preferred[group] = pv.get("version") if isinstance(pv, dict) else None
        return self._preferred[group]

    def resolve_kind(self, kind: str, gvks: Iterable[GVK]) -> APIResource:
        """Resolve KIND (kind, plural, singular or short name, case-insensitive, optionally
        ``.group`` or ``.version.group`` qualified) to a served kind among ``gvks``."""
        token, _, qualifier = kind.strip().partition(".")
        token, qualifier = token.lower(), qualifier.lower()
        matches: list[APIResource] = []
        unserved: list[GVK] = []
        for gvk in sorted(set(gvks)):
            if qualifier and qualifier not in (gvk.group.lower(), f"{gvk.version}.{gvk.group}".lower()):
                continue
            res = next((r for r in self.resources(gvk.group, gvk.version) if r.kind == gvk.kind), None)
            if res is None:
                if token == gvk.kind.lower():
                    unserved.append(gvk)
                continue
            if token in res.names():
                matches.append(res)
        if not matches:
            if unserved:
                raise KindNotResolved(f"{unserved[0].kind} is not installed in this cluster", not_installed=True)
            raise KindNotResolved(f"no Karta definition covers {kind!r}")
        if len(matches) > 1:
            groups = {(m.group, m.kind) for m in matches}
            if len(groups) == 1:
                preferred = self.preferred_version(matches[0].group)
                for m in matches:
                    if m.version == preferred:
                        return m
            options = ", ".join(f"{m.kind}.{m.version}.{m.group}" if m.group else f"{m.kind}.{m.version}" for m in matches)
            raise KindNotResolved(f"{kind!r} matches more than one Karta definition, retry with one of: {options}")
        return matches[0]

    # ------------------------------------------------------------------ objects

    def get(self, res: APIResource, namespace: str | None, name: str) -> Obj:
        obj = self.get_json(res.path(namespace, name))
        if not isinstance(obj, dict):
            raise ClusterError(f"GET {res.path(namespace, name)}: not an object")
        return obj

    def list_kartas(self) -> list[Obj]:
        return [_typed(o, "run.ai/v1alpha1", "Karta") for o in self.list_path(KARTAS_PATH)]

    def describe_inputs(self, res: APIResource, namespace: str, name: str) -> LiveWorkload:
        """The workload, the namespace's pods and the owners on their chains (max depth 6)."""
        workload = _typed(self.get(res, namespace, name), res.gvk.api_version, res.kind)
        pods_res = APIResource("", "v1", "Pod", "pods")
        pods = [_typed(p, "v1", "Pod") for p in self.list_path(pods_res.path(namespace))]
        out = LiveWorkload(workload, pods, [])
        known: dict[str, Obj] = {u: p for p in pods if (u := uid(p))}
        known[uid(workload)] = workload
        listed: set[tuple[str, str]] = set()
        frontier = [r for p in pods for r in owner_references(p) if isinstance(r, dict)]
        for _ in range(MAX_DEPTH):
            missing = [r for r in frontier if str(r.get("uid") or "") not in known]
            for ref in missing:
                api_version, kind = str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
                if (api_version, kind) in listed:
                    continue
                listed.add((api_version, kind))
                self._list_owners(api_version, kind, namespace, known, out)
            frontier = [
                r for ref in frontier if (o := known.get(str(ref.get("uid") or ""))) is not None and o is not workload
                for r in owner_references(o) if isinstance(r, dict)
            ]
            if not frontier:
                break
        pod_uids = {uid(p) for p in pods}
        out.objects = [o for u, o in known.items() if u not in pod_uids and o is not workload]
        return out

    def _list_owners(self, api_version: str, kind: str, namespace: str, known: dict[str, Obj], out: LiveWorkload) -> None:
        try:
            res = self.resource_for(api_version, kind)
        except ClusterError as e:
            out.warnings.append(f"cannot discover {kind} ({api_version}): {e}")
            return
        if res is None or not res.namespaced:
            return
        try:
            for o in self.list_path(res.path(namespace)):
                if u := uid(o):
                    known.setdefault(u, _typed(o, api_version, kind))
        except Forbidden:
            out.warnings.append(f"not allowed to list {kind} in namespace {namespace}; pods owned through it are not shown")
        except ClusterError as e:
            out.warnings.append(f"cannot list {kind} in namespace {namespace}: {e}")


def _typed(obj: Obj, api_version: str, kind: str) -> Obj:
    """List items come without apiVersion/kind; put them back."""
    if obj.get("apiVersion") and obj.get("kind"):
        return obj
    return {**obj, "apiVersion": api_version, "kind": kind}
