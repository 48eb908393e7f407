"""Fixtures for tests against real workload operators: one control plane per module with the module's
operators running (its ``OPERATORS`` list, default the JobSet controller: ``LocalCluster(operators=
["jobset"])``, CRDs and webhooks from their Go modules), an
API-server audit log of every write to pods and PodGroups (the evidence the write counts use). Every test
using ``op_cluster`` is marked ``cluster`` and ``operators``; ``op_sched_cluster`` (the same with a real
kube-scheduler and kwok nodes) adds ``gang``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults.conftest import Audit
from kube import Kube, fresh_namespace

from devtools.cluster import LocalCluster
from devtools.cluster.audit import audit_args, write_audit_policy

REPO = Path(__file__).resolve().parents[2]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if {"op_cluster", "op_sched_cluster"} & names:
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.operators)
        if "op_sched_cluster" in names:
            item.add_marker(pytest.mark.gang)


def module_operators(request: pytest.FixtureRequest) -> list[str]:
    """The operators a test module runs: its ``OPERATORS`` list (default: the JobSet controller)."""
    return list(getattr(request.module, "OPERATORS", ["jobset"]))


@pytest.fixture(scope="module")
def op_cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    d = tmp_path_factory.mktemp("audit")
    log = d / "audit.log"
    args = audit_args(write_audit_policy(d / "policy.yaml"), log)
    # only the grouper's own CRDs: the operators' come from their modules, with the operators
    operators = module_operators(request)
    with LocalCluster(crds=[REPO / "deploy" / "crds"], operators=operators, apiserver_args=args) as c:
        c.audit_log = log  # type: ignore[attr-defined]
        print(f"\n[devcluster] operator cluster up in {c.started_in:.1f}s {c.timings}", file=sys.stderr)
        yield c


@pytest.fixture(scope="module")
def op_sched_cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """The module's operators with a real kube-scheduler (Workload API, gang scheduling) and kwok; each test
    adds its own nodes."""
    operators = module_operators(request)
    with LocalCluster(crds=[REPO / "deploy" / "crds"], operators=operators, scheduler=True) as c:
        print(f"\n[devcluster] operator+scheduler cluster up in {c.started_in:.1f}s {c.timings}", file=sys.stderr)
        yield c


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


def pytest_collection_finish(session: pytest.Session) -> None:
    # build the operators once here (not inside the first test) when a selected test runs them
    if session.config.option.collectonly:
        return
    if any({"op_cluster", "op_sched_cluster"} & set(getattr(item, "fixturenames", ())) for item in session.items):
        from devtools.cluster import build

        build.ensure_binaries(names=build.OPERATORS)
