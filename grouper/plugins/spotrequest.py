"""SPOTRequest (KAI ``plugins/spotrequest``): the default grouper, priority fallback ``inference``."""

from __future__ import annotations

from grouper.plugins.common import INFERENCE_PRIORITY
from grouper.plugins.default import DefaultGrouper


class SpotRequestGrouper(DefaultGrouper):
    """SPOT requests serve inference and default to the ``inference`` priority class."""

    def __init__(self) -> None:
        super().__init__(priority_fallback=INFERENCE_PRIORITY, name="SpotRequest Grouper")


__all__ = ["SpotRequestGrouper"]
