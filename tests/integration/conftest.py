"""Fixtures shared by the integration tests that run a grouper in-process scoped to the test's namespace."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from controller.harness import GrouperThread, label_namespace
from kube import Kube


@pytest.fixture
def scoped(kube: Kube, namespace: str) -> str:
    """The test's namespace, labelled so that a grouper with ``--namespace-label-selector`` sees it."""
    label_namespace(kube, namespace)
    return namespace


@pytest.fixture
def grouper(cluster: Any, scoped: str) -> Iterator[GrouperThread]:
    """A grouper running in-process, grouping only the pods of the ``scoped`` namespace."""
    with GrouperThread(cluster, scoped) as g:
        yield g
