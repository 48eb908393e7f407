"""The real-tool fixtures (tests/realtools.py) for this folder: Debian's Chromium driven by Playwright."""

from realtools import artifacts, browser  # noqa: F401  (pytest fixtures)
