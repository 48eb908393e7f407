"""Fixtures of the API unit tests: an in-memory world (real decisions in a real DecisionStore) and a client."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from grouper.api.app import create_app

from .fixtures import World, build_world


@pytest.fixture(scope="session")
def shared_world() -> World:
    """Read-only world shared by tests that do not change it."""
    return build_world()


@pytest.fixture
def world() -> World:
    """A fresh world a test may change (health, store)."""
    return build_world()


@pytest.fixture
def client(world: World) -> Iterator[TestClient]:
    with TestClient(create_app(world.state)) as c:
        yield c


@pytest.fixture(scope="session")
def shared_client(shared_world: World) -> Iterator[TestClient]:
    with TestClient(create_app(shared_world.state)) as c:
        yield c
