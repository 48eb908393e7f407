"""Wiring of the long-running service (``grouper run``): transport, controller, leader election, HTTP."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grouper.runtime.settings import RunSettings

if TYPE_CHECKING:
    from grouper.runtime.service import Service

__all__ = ["RunSettings", "Service"]


def __getattr__(name: str) -> Any:
    # the service (FastAPI, aiohttp, the controller) is imported when asked for, not by every CLI command
    # that only reads the flags' settings (grouper.cli.common imports grouper.runtime.settings)
    if name == "Service":
        from grouper.runtime.service import Service

        return Service
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
