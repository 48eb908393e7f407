"""The fault tests get a control plane of their own: they stop and restart its API server, and it writes
an audit log of every write to pods and PodGroups (who wrote, when), the server-side evidence the tests
count writes with."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from clusters import REPO, Audit, cluster_fixture
from kube import Kube, fresh_namespace

from devtools.cluster import LocalCluster

fault_cluster = cluster_fixture("fault_cluster", shared=False, audit=True)


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
