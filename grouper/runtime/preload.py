"""Start-up work ``grouper run`` begins before it imports the service: the built-in Karta catalog.

Loading the catalog is mostly waiting: libjq compiles every expression of every definition in a sandbox
process (~0.4 s for the 24 built-ins) while this process is free. Started in a thread first thing, that
compile runs on another core while this process imports the HTTP API, the transport and the controller
(~0.5 s), instead of after them; the service awaits the same registry it would have built itself, at the
same point of its start (so a catalog error surfaces exactly as before). :class:`~grouper.karta.DefinitionRegistry`
imports only what the CLI has already imported, so the thread never races the main thread's imports.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future

from grouper.karta import DefinitionRegistry
from grouper.runtime.settings import RunSettings

log = logging.getLogger(__name__)


def load_definitions(s: RunSettings) -> DefinitionRegistry:
    """The Karta registry with the built-in catalog from ``--definitions``, also with the Karta step off
    (``--generic-karta-fallback=false``): the definitions then decide nothing (the hub skips them) but still
    name the owner kinds the walk follows, so it reaches the top owner as KAI's does, and the default
    grouper decides it. Off changes which grouper decides, not how far the owner walk goes."""
    started = time.monotonic()
    registry = DefinitionRegistry(s.definitions or None)
    loaded = registry.all()
    log.info("loaded %d built-in Karta definitions (%d invalid, %d files not loaded) from %s in %.2fs",
             len(loaded), sum(not x.report.ok for x in loaded), len(registry.load_errors),
             s.definitions or "nowhere", time.monotonic() - started)
    return registry


def preload_definitions(s: RunSettings) -> Future[DefinitionRegistry]:
    """``load_definitions(s)`` in a daemon thread, started now; the future holds the registry or the error."""
    future: Future[DefinitionRegistry] = Future()

    def load() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(load_definitions(s))
        except BaseException as e:  # handed to whoever awaits the registry, like a direct call would raise
            future.set_exception(e)

    threading.Thread(target=load, name="preload-definitions", daemon=True).start()
    return future


__all__ = ["load_definitions", "preload_definitions"]
