"""Shared fixtures: a real local control plane (``cluster``), an admin client (``kube``), a fresh ``namespace``.

Every fixture that starts a control plane comes from one factory, ``clusters.cluster_fixture`` (shared
by options within a session, or a module's own). A test that uses one, directly or through other
fixtures, is marked ``cluster`` automatically (``gang`` / ``operators`` too when its cluster runs a
scheduler or operators); ``make unit`` deselects them with ``-m 'not cluster'``. The binaries the selected
tests need are built (or found up to date) once after collection, outside any test timeout.

Test folders have no ``__init__.py`` where they mirror a package (tests/controller/, tests/kube/,
tests/writer/): a directory without one never shadows tests/kube.py, so ``from kube import Kube`` stays.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # so tests can `from kube import Kube`

from clusters import cluster_fixture, specs_of
from kube import Kube, fresh_namespace

from devtools.cluster import LocalCluster, build


@pytest.hookimpl(tryfirst=True)  # before `-m` deselection sees the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for mark in sorted({m for spec in specs_of(item) for m in spec.marks}):
            item.add_marker(getattr(pytest.mark, mark))


def pytest_collection_finish(session: pytest.Session) -> None:
    # build once here (not inside the first test's timeout) what the selected tests' clusters run
    if session.config.option.collectonly:
        return
    specs = [spec for item in session.items for spec in specs_of(item)]
    if specs:
        operators = tuple(sorted({op for spec in specs for op in spec.operators}))
        build.ensure_binaries(names=build.BINARIES + operators)


cluster = cluster_fixture("cluster")  # every CRD of deploy/crds and tests/crds Established


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
