from __future__ import annotations

import pytest

from grouper.karta import KartaDefinition, load_file
from tests.karta.fixtures import DATA


@pytest.fixture(scope="session")
def catalog() -> dict[str, KartaDefinition]:
    """The catalog-shaped test definitions by file stem (jobset, pytorchjob, raycluster, ...)."""
    return {p.stem: load_file(p)[0] for p in sorted(DATA.glob("*.yaml"))}
