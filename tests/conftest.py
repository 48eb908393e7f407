"""Shared fixtures: a real local control plane (``cluster``), an admin client (``kube``), a fresh ``namespace``.

Tests that use ``cluster`` (directly or through ``kube`` / ``namespace``) are marked ``cluster``
automatically; deselect them with ``-m 'not cluster'``. The binaries are built (or found up to date)
once after collection, outside any test timeout.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.cluster import LocalCluster, ensure_binaries

sys.path.insert(0, str(Path(__file__).resolve().parent))  # so tests can `from kube import Kube`

from kube import Kube, fresh_namespace

REPO = Path(__file__).resolve().parents[1]
CRD_DIRS = (REPO / "deploy" / "crds", REPO / "tests" / "crds")
CLUSTER_FIXTURES = {"cluster", "fault_cluster"}  # fixtures that start a control plane of their own


@pytest.hookimpl(tryfirst=True)  # before `-m` deselection sees the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.cluster)


def pytest_collection_finish(session: pytest.Session) -> None:
    # build once here (not inside the first test's timeout) if any selected test will need the cluster
    if session.config.option.collectonly:
        return
    if any(CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())) for item in session.items):
        ensure_binaries()


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    """A running control plane with every CRD of deploy/crds and tests/crds Established."""
    with LocalCluster(crds=CRD_DIRS) as c:
        print(f"\n[devcluster] up in {c.started_in:.1f}s {c.timings} at {c.server}", file=sys.stderr)
        yield c


@pytest.fixture(scope="session")
def kube(cluster: LocalCluster) -> Iterator[Kube]:
    """Admin client (system:masters)."""
    with Kube.from_cluster(cluster) as k:
        yield k


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    """A fresh namespace (with its `default` ServiceAccount); deleted afterwards without waiting."""
    with fresh_namespace(kube, "t") as name:
        yield name
