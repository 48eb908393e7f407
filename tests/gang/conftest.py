"""Fixtures for tests against a real kube-scheduler and simulated (kwok) nodes.

One control plane per session with the Workload API and gang scheduling turned on (``sched_cluster``),
separate from the plain ``cluster`` fixture so the other tests keep their speed. Nodes accumulate over
the session: each test adds its own nodes with a pool label (``pool`` fixture) that its pods select, so
no test sees another's capacity. Every test using them is marked ``cluster`` and ``gang``
(tests/conftest.py, from the cluster's options).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from clusters import cluster_fixture
from kube import Kube, fresh_namespace

from devtools.cluster import LocalCluster

sched_cluster = cluster_fixture("sched_cluster", scheduler=True)


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
