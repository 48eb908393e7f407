"""``grouper run``: the controller and its HTTP server (health, metrics, API) in one process."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
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


def handle(args: argparse.Namespace) -> int:
    settings = RunSettings.from_args(args)
    setup_logging(settings.log_level, settings.log_format)
    from grouper.runtime.service import Service

    try:
        return asyncio.run(Service(settings).run())
    except KubeConfigError as e:
        print(f"grouper run: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a start-up failure (cannot watch pods, bind error): say what and exit non-zero
        logging.getLogger("grouper.run").exception("fatal: %s", e)
        return 1
