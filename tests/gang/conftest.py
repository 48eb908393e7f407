"""Fixtures for tests against a real kube-scheduler and simulated (kwok) nodes.

One control plane per session with the Workload API and gang scheduling turned on (``sched_cluster``),
separate from the plain ``cluster`` fixture so the other tests keep their speed. Nodes accumulate over
the session: each test adds its own nodes with a pool label (``pool`` fixture) that its pods select, so
no test sees another's capacity. Every test using them is marked ``cluster`` and ``gang``.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.cluster import LocalCluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kube import Kube, fresh_namespace

REPO = Path(__file__).resolve().parents[2]
CRD_DIRS = (REPO / "deploy" / "crds", REPO / "tests" / "crds")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if {"sched_cluster", "skube"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.gang)


@pytest.fixture(scope="session")
def sched_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(crds=CRD_DIRS, scheduler=True) as c:
        print(f"\n[devcluster] scheduler cluster up in {c.started_in:.1f}s {c.timings}", file=sys.stderr)
        yield c


@pytest.fixture(scope="session")
def skube(sched_cluster: LocalCluster) -> Iterator[Kube]:
    with Kube.from_cluster(sched_cluster) as k:
        yield k


@pytest.fixture
def sns(skube: Kube) -> Iterator[str]:
    """A fresh namespace in the scheduler cluster."""
    with fresh_namespace(skube, "g") as name:
        yield name


@pytest.fixture
def pool() -> str:
    """A node-pool label value of this test's own nodes (``sched_cluster.add_nodes(labels=...)``)."""
    return f"p-{uuid.uuid4().hex[:8]}"
