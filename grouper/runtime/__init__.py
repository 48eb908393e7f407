"""Wiring of the long-running service (``grouper run``): transport, controller, leader election, HTTP."""

from grouper.runtime.service import Service
from grouper.runtime.settings import RunSettings

__all__ = ["RunSettings", "Service"]
