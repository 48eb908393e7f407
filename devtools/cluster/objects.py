"""Create plain manifests (the grouper's RBAC from ``deploy/rbac.yaml``, a demo workload) in a
:class:`~devtools.cluster.LocalCluster` with its admin token: no kubectl, no discovery, only the kinds
listed here."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import yaml

from .errors import ClusterError

_PLURALS = {
    "Namespace": "namespaces",
    "ServiceAccount": "serviceaccounts",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "JobSet": "jobsets",
    "Job": "jobs",
    "Pod": "pods",
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
}
_CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"}


class Requester(Protocol):
    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]: ...


def collection_path(obj: dict[str, Any], namespace: str) -> str:
    api_version, kind = obj["apiVersion"], obj["kind"]
    prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if kind not in _PLURALS:
        raise ClusterError(f"{kind} {obj['metadata'].get('name')}: kind not known to devtools.cluster.objects")
    plural = _PLURALS[kind]
    if kind in _CLUSTER_SCOPED:
        return f"{prefix}/{plural}"
    return f"{prefix}/namespaces/{obj['metadata'].get('namespace') or namespace}/{plural}"


def create_object(cluster: Requester, obj: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    """Create an object; an existing one is read back (so callers are re-runnable on one cluster)."""
    status, body = cluster.request("POST", collection_path(obj, namespace), obj)
    if status == 409:
        status, body = cluster.request("GET", f"{collection_path(obj, namespace)}/{obj['metadata']['name']}")
    if status not in (200, 201):
        raise ClusterError(f"creating {obj['kind']} {obj['metadata']['name']}: HTTP {status}: {body}")
    return dict(body)


def create_manifest(cluster: Requester, path: Path, namespace: str = "default") -> list[dict[str, Any]]:
    """Create every document of a YAML file (e.g. ``deploy/rbac.yaml``) in order."""
    return [create_object(cluster, doc, namespace) for doc in yaml.safe_load_all(path.read_text()) if doc]
