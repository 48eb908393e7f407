"""``grouper run`` as a separate process for the fault tests (:mod:`devtools.grouper_process`), with the
fault tests' defaults: the repository's ``definitions/`` and no client-side rate limit."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devtools.grouper_process import GrouperProcess as _GrouperProcess

REPO = Path(__file__).resolve().parents[2]
FAULT_ARGS = ("--definitions", str(REPO / "definitions"), "--qps", "0")


class GrouperProcess(_GrouperProcess):
    def __init__(self, cluster: Any, token_file: Path, log_dir: Path, *, args: Sequence[str] = (),
                 **kwargs: Any) -> None:
        super().__init__(cluster, token_file, log_dir, args=(*FAULT_ARGS, *args), **kwargs)
