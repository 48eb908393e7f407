"""Fixtures for tests against real workload operators: one control plane per module with the JobSet
controller running (``LocalCluster(operators=["jobset"])``: its CRD and webhooks from its Go module; a module
that runs other operators defines its own ``op_cluster`` / ``op_sched_cluster`` with ``cluster_fixture``), an
API-server audit log of every write to pods and PodGroups (the evidence the write counts use). Every test
using ``op_cluster`` is marked ``cluster`` and ``operators``; ``op_sched_cluster`` (the same with a real
kube-scheduler and kwok nodes) adds ``gang`` (tests/conftest.py, from the clusters' options)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from clusters import DEPLOY_CRDS, Audit, cluster_fixture
from kube import Kube, fresh_namespace, wait_until

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


@pytest.fixture
def skube(op_sched_cluster: LocalCluster) -> Iterator[Kube]:
    with Kube.from_cluster(op_sched_cluster) as k:
        yield k


@pytest.fixture
def upstream(op_sched_cluster: LocalCluster, skube: Kube, request: pytest.FixtureRequest) -> Iterator[tuple[str, Any]]:
    """A namespace of the module's own (``o-<operator>-gang``) with the grouper running in it: the upstream
    backend, its admission webhook, kube-scheduler's own scheduler name."""
    from controller.harness import label_namespace
    from gang.webhooks import grouper_with_webhook

    ns = f"o-{request.module.__name__.rsplit('.', 1)[-1].split('_')[1]}-gang"
    skube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    wait_until(lambda: skube.exists(f"/api/v1/namespaces/{ns}/serviceaccounts/default"), 30, what="ServiceAccount")
    label_namespace(skube, ns)
    with grouper_with_webhook(
        op_sched_cluster, skube, ns, backend="upstream", scheduler_name="default-scheduler"
    ) as g:
        yield ns, g


@pytest.fixture
def team_a(okube: Kube) -> str:
    """The examples' own namespace, ``team-a``: the labels some operators derive (LWS's group key, the Job
    controller's job key under Trainer's JobSet) hash it, so the fixture-truth tests run there."""
    if not okube.exists("/api/v1/namespaces/team-a"):
        okube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    wait_until(lambda: okube.exists("/api/v1/namespaces/team-a/serviceaccounts/default"), 30, what="ServiceAccount")
    return "team-a"
