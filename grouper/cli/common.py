"""Pieces several subcommands share: grouping flags, target flags, where the built-in catalog lives, and the
prologue of the live workload commands (``describe``, ``why``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grouper.core.config import GroupingConfig
from grouper.runtime.settings import default_definitions_dir as settings_default_definitions_dir
from grouper.runtime.settings import parse_bool


def now() -> datetime:
    """The commands' clock (``why``, ``get workloads``): tests replace it (``common.now``) rather than wait."""
    return datetime.now(UTC)


def fail(code: int, message: str) -> int:
    """``error: message`` on stderr; returns the exit code."""
    print(f"error: {message}", file=sys.stderr)
    return code


def workload_target(parts: list[str], limit: int, limit_flag: str) -> tuple[str, str] | None:
    """What ``describe`` and ``why`` check first: ``limit_flag`` (how many things to show) is not negative, and
    the workload is ``KIND/NAME`` or ``KIND NAME`` (None when not given). A ValueError says what is wrong:
    a usage error."""
    if limit < 0:
        raise ValueError(f"{limit_flag} must not be negative")
    if not parts:
        return None
    if len(parts) == 1 and "/" in parts[0]:
        kind, _, name = parts[0].partition("/")
        if kind and name and "/" not in name:
            return kind, name
    elif len(parts) == 2 and "/" not in parts[0]:
        return parts[0], parts[1]
    raise ValueError(f"expected KIND/NAME or KIND NAME, got {' '.join(parts)!r}")


def with_cluster(args: argparse.Namespace, read: Callable[[Any], int]) -> int:
    """``read(kube)`` with a client of the cluster ``--kubeconfig``/``--context`` name (closed after): a
    kubeconfig that cannot be used, or an answer of the API server ``read`` does not handle, is
    ``error: …`` and exit code 1."""
    from grouper.kube.config import KubeConfigError
    from grouper.kube.sync import SyncKube
    from grouper.kube.transport import ApiError

    try:
        with SyncKube.connect(args.kubeconfig, args.context) as kube:
            return read(kube)
    except (KubeConfigError, ApiError) as e:
        return fail(1, str(e))


def default_definitions_dir() -> Path | None:
    """The built-in catalog: ``$GROUPER_DEFINITIONS``, else the shipped one (:mod:`grouper.karta.catalog`)."""
    import os

    chosen = os.environ.get("GROUPER_DEFINITIONS") or settings_default_definitions_dir()
    return Path(chosen) if chosen else None


def add_grouping_flags(parser: argparse.ArgumentParser) -> None:
    d = GroupingConfig()
    parser.add_argument("--scheduler-name", default=d.scheduler_name, help="pods to handle (default %(default)s)")
    parser.add_argument("--queue-label-key", default=d.queue_label_key)
    parser.add_argument("--nodepool-label-key", default=d.nodepool_label_key)
    parser.add_argument("--knative-gang-schedule", "--gang-schedule-knative", dest="knative_gang_schedule",
                        type=parse_bool, default=d.knative_gang_schedule, metavar="BOOL")
    parser.add_argument("--deployment-gang-schedule", "--gang-schedule-deployment", dest="deployment_gang_schedule",
                        type=parse_bool, default=d.deployment_gang_schedule, metavar="BOOL")
    parser.add_argument("--generic-karta-fallback", type=parse_bool, default=d.generic_karta_fallback, metavar="BOOL")
    parser.add_argument("--search-legacy-pg", type=parse_bool, default=d.search_legacy_pg, metavar="BOOL")
    parser.add_argument(
        "--backend", choices=["kai", "upstream"], default=d.backend,
        help="what the grouper writes (as `grouper run --backend`): it decides whether a pod already in an "
             "upstream group is stepped aside for; plan -o: upstream also shows the scheduling.k8s.io "
             "Workload/PodGroup and what they cannot carry (default %(default)s)",
    )
    parser.add_argument("--default-priorities-configmap-name", default="")
    parser.add_argument("--default-priorities-configmap-namespace", default="")
    parser.add_argument(
        "--definitions", type=Path, default=None, metavar="DIR",
        help="built-in Karta catalog directory (default: the shipped definitions/)",
    )


def add_target_flags(parser: argparse.ArgumentParser) -> None:
    """Where ``get`` / ``explain`` read from: a running grouper (``--server``) or the cluster (kubeconfig)."""
    parser.add_argument("--server", metavar="URL",
                        help="a running grouper's HTTP API (e.g. http://localhost:8080); default: read the cluster")
    parser.add_argument("--token-file", metavar="FILE",
                        help="bearer token for --server (when it runs with --http-auth-token-file)")
    parser.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
    parser.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")


def grouping_config(args: argparse.Namespace) -> GroupingConfig:
    """The config from the flags :func:`add_grouping_flags` added."""
    return GroupingConfig.from_flags(args)


# kli v0.3: catalog definitions marked ``spec.experimental: true`` are hidden unless asked for.
EXPERIMENTAL_FLAG = "--catalog-experimental-definitions"


def add_experimental_flag(parser: argparse.ArgumentParser, *, default: object = False) -> None:
    """``--catalog-experimental-definitions`` (``default``: ``argparse.SUPPRESS`` on a subcommand that repeats
    its parent's flag, so the parent's value is not overwritten)."""
    parser.add_argument(EXPERIMENTAL_FLAG, dest="catalog_experimental_definitions", action="store_true",
                        default=default,
                        help="also use the built-in catalog's definitions marked spec.experimental: true "
                             "(hidden by default, as kli)")


def is_experimental(defn: Any) -> bool:
    """A definition marked ``spec.experimental: true`` (exactly ``true``: a string is not a mark)."""
    spec = defn.raw.get("spec") if isinstance(defn.raw, dict) else None
    return isinstance(spec, dict) and spec.get("experimental") is True


def catalog(definitions_dir: Path | None, *, experimental: bool) -> tuple[list[Any], list[Any], list[str]]:
    """The built-in catalog for the inspection commands: (definitions, load errors, names of the experimental
    definitions left out; empty with ``experimental``)."""
    from grouper.karta import load_dir

    if definitions_dir is None:
        return [], [], []
    defs, errors = load_dir(definitions_dir)
    hidden = [] if experimental else sorted(d.name for d in defs if is_experimental(d))
    return [d for d in defs if experimental or not is_experimental(d)], list(errors), hidden
