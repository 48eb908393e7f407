"""``grouper`` entry point: discovers the subcommands and dispatches to them."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence

from grouper import __version__
from grouper.cli import commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grouper",
        description="Gang-scheduling pod grouper: turns workloads into KAI Scheduler PodGroups.",
        epilog=(
            "Environment: KUBECONFIG (kubeconfig files), GROUPER_DEFINITIONS (the built-in Karta catalog), "
            "GROUPER_DEBUG (tracebacks of internal errors), GROUPER_<FLAG> (any 'grouper run' flag). "
            "Exit codes: 0 done, 1 error, 2 usage, 130 interrupted; describe adds 3 (no Karta definition) "
            "and 4 (workload not found), explain 3 (pod not found). Details: docs/cli.md."
        ),
    )
    parser.add_argument("--version", action="version", version=f"grouper {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except RecursionError:
        print(f"error: grouper {args.command}: the input nests too deeply to process", file=sys.stderr)
        return 2
    except MemoryError:
        print(f"error: grouper {args.command}: out of memory processing the input", file=sys.stderr)
        return 2
    except Exception as exc:  # the last line of defence: a message, never a traceback
        if os.environ.get("GROUPER_DEBUG"):
            raise
        print(
            f"error: grouper {args.command}: internal error {type(exc).__name__}: {exc} "
            "(please report it; GROUPER_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
