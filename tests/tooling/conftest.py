"""The real-tool fixtures (tests/realtools.py) for this folder."""

from realtools import artifacts, browser, prometheus  # noqa: F401  (pytest fixtures)
