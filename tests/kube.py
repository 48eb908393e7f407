"""A small synchronous Kubernetes client for tests (httpx), working on raw REST paths and plain dicts.

    kube.create("/api/v1/namespaces/ns/pods", pod)
    kube.patch("/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups/pg", {"spec": {...}})
    for event_type, obj in kube.watch("/api/v1/namespaces/ns/pods", timeout_seconds=10): ...
    kube.apply_yaml(Path("deploy/rbac.yaml").read_text())    # server-side apply, paths via discovery

Non-2xx answers raise :class:`KubeError` (``.status``, ``.reason``, ``.message``, ``.body``).
Connection settings come from :mod:`grouper.kube.config` (the product's one kubeconfig loader), so a test
client authenticates and verifies TLS the way the grouper does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml

from grouper.kube import config as kubeconfig
from grouper.kube.config import ClusterConfig
from grouper.kube.transport import retry_delay

PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}
T = TypeVar("T")
RETRIES = 5  # asked again at most this often when the server says to (grouper.kube.transport.retry_delay)


class KubeError(Exception):
    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        self.reason = body.get("reason", "") if isinstance(body, dict) else ""
        self.message = body.get("message", "") if isinstance(body, dict) else str(body)
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}")


def api_prefix(api_version: str) -> str:
    """``v1`` -> ``/api/v1``; ``apps/v1`` -> ``/apis/apps/v1``."""
    return f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"


def wait_until(
    fn: Callable[[], T], timeout: float = 30.0, interval: float = 0.1, what: str = "condition"
) -> T:
    """Call ``fn`` until it returns something truthy; return that value, or raise TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class Kube:
    def __init__(self, config: ClusterConfig, timeout: float = 30.0) -> None:
        self.config = config
        headers = {"Accept": "application/json"}
        if token := config.bearer():
            headers["Authorization"] = f"Bearer {token}"
        self._client = httpx.Client(
            base_url=config.server, verify=config.ssl_context(), timeout=timeout, headers=headers
        )
        self._discovery: dict[str, dict[str, dict[str, Any]]] = {}  # apiVersion -> kind -> resource

    @classmethod
    def from_kubeconfig(cls, path: str, context: str | None = None) -> Kube:
        return cls(kubeconfig.load(path, context))

    @classmethod
    def from_cluster(cls, cluster: Any, token: str | None = None) -> Kube:
        """For a :class:`devtools.cluster.LocalCluster`: its admin kubeconfig, or ``token`` instead."""
        if token is None:
            return cls.from_kubeconfig(cluster.kubeconfig_path)
        return cls(kubeconfig.explicit(cluster.server, token=token, ca_file=cluster.ca_file))

    def with_token(self, token: str) -> Kube:
        """A new client for the same cluster authenticating with another bearer token."""
        c = self.config  # the same server and trust (a CA file, or CA data from a kubeconfig), another identity
        return Kube(dataclasses.replace(c, token=token, token_file=None, client_cert_file=None,
                                        client_key_file=None))

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Kube:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ raw

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The raw response (no status check)."""
        return self._client.request(method, path, **kwargs)

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The response, asked again while the server answers that it asks to be (as client-go and
        grouper.kube.transport do): e.g. ``429 storage is (re)initializing`` while a just-registered CRD's
        watch cache fills."""
        resp = self._client.request(method, path, **kwargs)
        for _ in range(RETRIES):
            delay = retry_delay(resp.status_code, resp.headers.get("retry-after"))
            if delay is None:
                break
            time.sleep(delay)
            resp = self._client.request(method, path, **kwargs)
        return resp

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        resp = self._send(method, path, **kwargs)
        body: Any
        try:
            body = resp.json() if resp.content else None
        except ValueError:
            body = resp.text
        if resp.status_code >= 300:
            raise KubeError(method, path, resp.status_code, body)
        return body

    # ------------------------------------------------------------------ verbs

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        return dict(self._call("GET", path, params=params or None))

    def exists(self, path: str) -> bool:
        status = self._send("GET", path).status_code
        if status == 404:
            return False
        if status >= 300:
            raise KubeError("GET", path, status, None)
        return True

    def list(
        self,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        **params: Any,
    ) -> list[dict[str, Any]]:
        """The ``items`` of a list (all pages)."""
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        items: list[dict[str, Any]] = []
        while True:
            body = self._call("GET", path, params=params)
            items += body.get("items") or []
            cont = (body.get("metadata") or {}).get("continue")
            if not cont:
                return items
            params["continue"] = cont

    def create(self, path: str, body: dict[str, Any], **params: Any) -> dict[str, Any]:
        return dict(self._call("POST", path, json=body, params=params or None))

    def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self._call("PUT", path, json=body))

    def patch(
        self,
        path: str,
        body: Any,
        *,
        type: str = "merge",
        field_manager: str | None = None,
        force: bool | None = None,
    ) -> dict[str, Any]:
        """``type``: ``merge`` (JSON merge patch), ``json`` (JSON patch list), ``strategic``, ``apply`` (SSA)."""
        params: dict[str, Any] = {}
        if field_manager or type == "apply":
            params["fieldManager"] = field_manager or "tests"
        if force is not None:
            params["force"] = str(force).lower()
        content = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return dict(
            self._call(
                "PATCH", path, content=content, params=params, headers={"Content-Type": PATCH_TYPES[type]}
            )
        )

    def delete(
        self, path: str, *, propagation: str | None = None, ignore_missing: bool = False
    ) -> dict[str, Any] | None:
        """``propagation``: ``Foreground`` / ``Background`` / ``Orphan`` (server default when None)."""
        body = (
            {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
            if propagation
            else None
        )
        try:
            return self._call("DELETE", path, json=body)  # type: ignore[no-any-return]
        except KubeError as e:
            if ignore_missing and e.status == 404:
                return None
            raise

    def watch(
        self,
        path: str,
        *,
        resource_version: str | None = None,
        timeout_seconds: int = 30,
        label_selector: str | None = None,
        field_selector: str | None = None,
        bookmarks: bool = False,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Stream ``(type, object)`` events (ADDED / MODIFIED / DELETED / BOOKMARK / ERROR) of a collection.

        Ends when the server closes the watch (``timeout_seconds``) or when the caller stops iterating.
        """
        params: dict[str, Any] = {"watch": "true", "timeoutSeconds": timeout_seconds}
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if bookmarks:
            params["allowWatchBookmarks"] = "true"
        timeout = httpx.Timeout(10.0, read=timeout_seconds + 10.0)
        with self._client.stream("GET", path, params=params, timeout=timeout) as resp:
            if resp.status_code >= 300:
                resp.read()
                raise KubeError("GET", path, resp.status_code, resp.json() if resp.content else None)
            for line in resp.iter_lines():
                if line.strip():
                    event = json.loads(line)
                    yield event["type"], event["object"]

    # ------------------------------------------------------------------ discovery and manifests

    def _resources(self, api_version: str, refresh: bool = False) -> dict[str, dict[str, Any]]:
        if refresh or api_version not in self._discovery:
            resp = self._send("GET", api_prefix(api_version))
            if resp.status_code == 404:
                self._discovery[api_version] = {}
            else:
                if resp.status_code >= 300:
                    raise KubeError("GET", api_prefix(api_version), resp.status_code, resp.text)
                self._discovery[api_version] = {
                    r["kind"]: r for r in resp.json()["resources"] if "/" not in r["name"]
                }
        return self._discovery[api_version]

    def resource_info(self, api_version: str, kind: str) -> dict[str, Any]:
        """The discovery entry (``name`` = plural, ``namespaced``, ``verbs``...) of a kind; refreshes once on a miss."""
        res = self._resources(api_version).get(kind) or self._resources(api_version, refresh=True).get(kind)
        if not res:
            raise LookupError(f"the server does not serve {kind} in {api_version}")
        return res

    def path_for(
        self, api_version: str, kind: str, namespace: str | None = None, name: str | None = None
    ) -> str:
        """REST path of a collection (``name`` None) or object; ``namespace`` ignored for cluster-scoped kinds."""
        res = self.resource_info(api_version, kind)
        path = api_prefix(api_version)
        if res["namespaced"]:
            path += f"/namespaces/{namespace or 'default'}"
        path += f"/{res['name']}"
        return f"{path}/{name}" if name else path

    def object_path(self, obj: dict[str, Any], namespace: str | None = None) -> str:
        meta = obj.get("metadata") or {}
        return self.path_for(obj["apiVersion"], obj["kind"], meta.get("namespace") or namespace, meta["name"])

    def apply_yaml(
        self,
        docs: str | Path | dict[str, Any] | Iterable[dict[str, Any]],
        namespace: str | None = None,
        field_manager: str = "tests",
    ) -> list[dict[str, Any]]:
        """Server-side apply every object (YAML text, a file, one dict or dicts); returns the applied objects.

        Namespaced objects without ``metadata.namespace`` go to ``namespace`` (default ``default``).
        """
        if isinstance(docs, Path):
            docs = docs.read_text()
        if isinstance(docs, str):
            objs = [d for d in yaml.safe_load_all(docs) if d]
        elif isinstance(docs, dict):
            objs = [docs]
        else:
            objs = list(docs)
        out = []
        for obj in objs:
            res = self.resource_info(obj["apiVersion"], obj["kind"])
            if res["namespaced"] and not obj.get("metadata", {}).get("namespace"):
                obj = {**obj, "metadata": {**obj.get("metadata", {}), "namespace": namespace or "default"}}
            out.append(
                self.patch(self.object_path(obj), obj, type="apply", field_manager=field_manager, force=True)
            )
        return out


def compact_etcd(cluster: Any) -> int:
    """Compact etcd at its current revision (what etcd does every 5 minutes in a real cluster); returns it."""
    base = f"http://127.0.0.1:{cluster.ports['etcd']}/v3/kv"

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            return dict(json.loads(resp.read()))

    rev = int(post("/range", {"key": "AA=="})["header"]["revision"])
    post("/compaction", {"revision": str(rev), "physical": True})
    return rev


@contextlib.contextmanager
def fresh_namespace(kube: Kube, prefix: str, ready_timeout: float = 30) -> Iterator[str]:
    """A new namespace named ``<prefix>-<random>``, once its `default` ServiceAccount exists (pod admission
    needs it; the controller manager creates it), deleted afterwards without waiting. One helper for every
    cluster fixture's namespace (the shared cluster's, the gang, fault and operator clusters')."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_until(lambda: kube.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"), ready_timeout,
               what=f"ServiceAccount {name}/default")
    try:
        yield name
    finally:
        with contextlib.suppress(KubeError):
            kube.delete(f"/api/v1/namespaces/{name}", ignore_missing=True)
