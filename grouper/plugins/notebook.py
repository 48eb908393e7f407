"""Kubeflow Notebook (KAI ``plugins/kubeflow/notebook``): the default grouper, priority fallback ``build``."""

from __future__ import annotations

from grouper.plugins.common import BUILD_PRIORITY
from grouper.plugins.default import DefaultGrouper


class NotebookGrouper(DefaultGrouper):
    """Interactive notebooks default to the ``build`` priority class."""

    def __init__(self) -> None:
        super().__init__(priority_fallback=BUILD_PRIORITY, name="Kubeflow Notebook Grouper")


__all__ = ["NotebookGrouper"]
