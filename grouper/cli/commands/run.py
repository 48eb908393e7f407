"""``grouper run``: the controller and its HTTP server (health, metrics, API) in one process."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable
from typing import Any

from grouper.kube.config import KubeConfigError
from grouper.observability.logging import setup_logging
from grouper.runtime.settings import RunSettings, add_flags

EPILOG = """\
Every flag can also be set with an environment variable GROUPER_<FLAG_IN_UPPER_SNAKE>, e.g.
GROUPER_SCHEDULER_NAME=kai-scheduler or GROUPER_LEADER_ELECT=true; the command line wins.
Booleans accept --flag, --flag=true and --flag=false.
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "run",
        help="run the pod grouper controller against a cluster",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_flags(p)
    p.set_defaults(func=handle)


def loop_factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop ``grouper run`` uses: uvloop unless asked for asyncio's (or uvloop is missing)."""
    if kind == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if kind == "uvloop":
            raise SystemExit("grouper run: --event-loop=uvloop, but uvloop is not installed") from None
        return None
    return uvloop.new_event_loop


def handle(args: argparse.Namespace) -> int:
    settings = RunSettings.from_args(args)
    setup_logging(settings.log_level, settings.log_format)
    from grouper.runtime.preload import preload_definitions

    # the catalog loads (its jq compiles in the sandbox process) while the service below is imported
    definitions = preload_definitions(settings)
    from grouper.runtime.service import Service

    try:
        with asyncio.Runner(loop_factory=loop_factory(settings.event_loop)) as runner:
            return runner.run(Service(settings, definitions=definitions).run())
    except KubeConfigError as e:
        print(f"grouper run: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a start-up failure (cannot watch pods, bind error): say what and exit non-zero
        logging.getLogger("grouper.run").exception("fatal: %s", e)
        return 1
