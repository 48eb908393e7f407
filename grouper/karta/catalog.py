"""Where the built-in Karta catalog (the repository's ``definitions/``) is found at run time.

The wheel ships the catalog as package data in ``grouper/definitions/`` (``pyproject.toml``,
``force-include``), so an installed ``grouper`` finds it without a source checkout; an editable install
or a plain checkout uses ``definitions/`` at the repository root. ``$GROUPER_DEFINITIONS`` is applied by
the callers (it is also a ``grouper run`` flag default), not here.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]  # .../grouper


def builtin_catalog_dir() -> Path | None:
    """The shipped catalog directory, or None when neither location exists."""
    for candidate in (_PACKAGE / "definitions", _PACKAGE.parent / "definitions"):
        if candidate.is_dir():
            return candidate
    return None
