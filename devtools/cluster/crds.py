"""Install CustomResourceDefinitions into a running API server and wait until they are Established.

Takes anything with :meth:`LocalCluster.request`'s shape (``request(method, path, body) -> (status,
body)``), so it does not depend on the cluster module, which calls it during startup.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import yaml

from .errors import ClusterError


class Requester(Protocol):
    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]: ...


CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def load_crds(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition document in the given files / directories (``*.yaml``, ``*.yml``)."""
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        files += sorted(p.glob("*.y*ml")) if p.is_dir() else [p]
    out = []
    for f in files:
        for doc in yaml.safe_load_all(f.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                out.append(doc)
    return out


def install_crds(cluster: Requester, paths: Iterable[Path], timeout: float = 60.0) -> list[str]:
    """Create (or replace) the CRDs and wait until all are Established; returns their names."""
    names = []
    for crd in load_crds(paths):
        name = crd["metadata"]["name"]
        status, body = cluster.request("POST", CRD_PATH, crd)
        if status == 409:
            _, cur = cluster.request("GET", f"{CRD_PATH}/{name}")
            crd = {
                **crd,
                "metadata": {**crd["metadata"], "resourceVersion": cur["metadata"]["resourceVersion"]},
            }
            status, body = cluster.request("PUT", f"{CRD_PATH}/{name}", crd)
        if status not in (200, 201):
            raise ClusterError(f"CRD {name} rejected: {status} {body}")
        names.append(name)
    wait_established(cluster, names, timeout)
    return names


def wait_established(cluster: Requester, names: Iterable[str], timeout: float = 60.0) -> None:
    pending = set(names)
    deadline = time.monotonic() + timeout
    while pending:
        for name in sorted(pending):
            status, obj = cluster.request("GET", f"{CRD_PATH}/{name}")
            conds = (
                {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or []}
                if status == 200
                else {}
            )
            if conds.get("Established", {}).get("status") == "True":
                pending.discard(name)
            elif conds.get("NamesAccepted", {}).get("status") == "False":
                raise ClusterError(f"CRD {name}: names not accepted: {conds['NamesAccepted'].get('message')}")
        if pending and time.monotonic() > deadline:
            raise ClusterError(f"CRDs not Established after {timeout:.0f}s: {sorted(pending)}")
        if pending:
            time.sleep(0.1)
