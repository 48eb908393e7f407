"""The fault tests get a control plane of their own: they stop and restart its API server, and it writes
an audit log of every write to pods and PodGroups (who wrote, when), the server-side evidence the tests
count writes with."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube import Kube, fresh_namespace

from devtools.cluster import LocalCluster
from devtools.cluster.audit import audit_args, write_audit_policy

REPO = Path(__file__).resolve().parents[2]
CRD_DIRS = (REPO / "deploy" / "crds", REPO / "tests" / "crds")


class Audit:
    """Reads the API server's JSON audit log."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def writes(self, *, user_agent_contains: str = "kai-pod-grouper", namespace: str | None = None) -> list[dict[str, Any]]:
        out = []
        if not self.path.exists():
            return out
        for line in self.path.read_text().splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("stage") != "ResponseComplete" or user_agent_contains not in str(ev.get("userAgent", "")):
                continue
            ref = ev.get("objectRef") or {}
            if namespace is not None and ref.get("namespace") != namespace:
                continue
            out.append(ev)
        return out


@pytest.fixture(scope="module")
def fault_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    d = tmp_path_factory.mktemp("audit")
    log = d / "audit.log"
    args = audit_args(write_audit_policy(d / "policy.yaml"), log)
    with LocalCluster(crds=CRD_DIRS, apiserver_args=args) as c:
        c.audit_log = log  # type: ignore[attr-defined]
        print(f"\n[devcluster] fault cluster up in {c.started_in:.1f}s at {c.server}", file=sys.stderr)
        yield c


@pytest.fixture(scope="module")
def fkube(fault_cluster: LocalCluster) -> Iterator[Kube]:
    with Kube.from_cluster(fault_cluster) as k:
        k.apply_yaml(REPO / "deploy" / "rbac.yaml")
        yield k


@pytest.fixture(scope="module")
def audit(fault_cluster: LocalCluster) -> Audit:
    return Audit(fault_cluster.audit_log)  # type: ignore[attr-defined]


@pytest.fixture
def ns(fkube: Kube) -> Iterator[str]:
    """A fresh namespace on the fault cluster."""
    # after a test stopped the API server its watches come back on client-go\'s backoff (up to 30 s + a
    # re-list), so the first namespace after an outage may wait that long for its ServiceAccount
    with fresh_namespace(fkube, "f", ready_timeout=120) as name:
        yield name


@pytest.fixture
def token_file(fault_cluster: LocalCluster, fkube: Kube, tmp_path: Path) -> Path:
    f = tmp_path / "token"
    f.write_text(fault_cluster.create_token("kai-system", "kai-pod-grouper"))
    return f
