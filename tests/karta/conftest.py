from __future__ import annotations

from pathlib import Path

import pytest

from grouper.karta import KartaDefinition, load_file

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def catalog() -> dict[str, KartaDefinition]:
    """The catalog-shaped test definitions by file stem (jobset, pytorchjob, raycluster, ...)."""
    return {p.stem: load_file(p)[0] for p in sorted(DATA.glob("*.yaml"))}
