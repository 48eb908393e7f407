"""The long fuzz run (``-m fuzz_long``) runs only when asked for by that marker expression, so the
everyday runs (``pytest``, ``-m 'not cluster'``) stay short."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    expr = str(config.getoption("markexpr") or "")
    if "fuzz_long" in expr and "not fuzz_long" not in expr:
        return
    skip = pytest.mark.skip(reason="long fuzz run: select it with -m fuzz_long")
    for item in items:
        if "fuzz_long" in item.keywords:
            item.add_marker(skip)
