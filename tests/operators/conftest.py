"""Fixtures for tests against real workload operators: one control plane per module with the JobSet
controller running (``LocalCluster(operators=["jobset"])``: its CRD and webhooks from its Go module; a module
that runs other operators defines its own ``op_cluster`` / ``op_sched_cluster`` with ``cluster_fixture``), an
API-server audit log of every write to pods and PodGroups (the evidence the write counts use). Every test
using ``op_cluster`` is marked ``cluster`` and ``operators``; ``op_sched_cluster`` (the same with a real
kube-scheduler and kwok nodes) adds ``gang`` (tests/conftest.py, from the clusters' options)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from clusters import DEPLOY_CRDS, Audit, cluster_fixture
from kube import Kube, fresh_namespace

from devtools.cluster import LocalCluster

# only the grouper's own CRDs: JobSet's comes from its module, with the operator
op_cluster = cluster_fixture("op_cluster", shared=False, audit=True, crds=DEPLOY_CRDS, operators=["jobset"])
# the JobSet controller with a real kube-scheduler (Workload API, gang scheduling) and kwok; each test adds
# its own nodes
op_sched_cluster = cluster_fixture("op_sched_cluster", shared=False, crds=DEPLOY_CRDS, operators=["jobset"],
                                   scheduler=True)


@pytest.fixture(scope="module")
def okube(op_cluster: LocalCluster) -> Iterator[Kube]:
    with Kube.from_cluster(op_cluster) as k:
        yield k


@pytest.fixture(scope="module")
def audit(op_cluster: LocalCluster) -> Audit:
    return Audit(op_cluster.audit_log)  # type: ignore[attr-defined]


@pytest.fixture
def ons(okube: Kube) -> Iterator[str]:
    """A fresh namespace on the operator cluster."""
    with fresh_namespace(okube, "o") as name:
        yield name
