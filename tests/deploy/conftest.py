"""Builds what tests/deploy needs once, after collection and outside any test timeout: ``helm`` (from its Go
module, cached in .cache/cluster/bin) and, for the ``image`` tests, the OCI image
(podman; layers cached).

A build failure is kept and reported by the tests that need it (fixtures ``helm_bin`` / ``image``); podman
that cannot run here skips the image tests with the reason.
"""

from __future__ import annotations

import time

import pytest

from devtools.cluster import BuildError
from devtools.image import DEFAULT_TAG, ImageError, build_image, ensure_local_base, podman_unavailable

_state: dict[str, str] = {}


def _selected(session: pytest.Session, marker: str | None = None) -> bool:
    return any(
        "tests/deploy/" in item.nodeid and (marker is None or item.get_closest_marker(marker) is not None)
        for item in session.items
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    if _selected(session):
        from devtools import chart

        try:
            _state["helm"] = chart.helm()  # the control plane: tests/conftest.py, for every cluster fixture
        except BuildError as e:
            _state["helm_error"] = str(e)
    if _selected(session, "image"):
        reason = podman_unavailable()
        if reason:
            _state["image_skip"] = reason
            return
        try:
            start = time.monotonic()
            base = ensure_local_base()
            secs = build_image(DEFAULT_TAG, base, quiet=True)
            _state["image"] = DEFAULT_TAG
            print(f"\n[image] {DEFAULT_TAG} built (from {base}) in {secs:.0f}s, {time.monotonic() - start:.0f}s "
                  "with the base", flush=True)
        except (ImageError, OSError) as e:
            _state["image_error"] = str(e)
        except Exception as e:  # a CalledProcessError from mmdebstrap / podman import
            _state["image_error"] = f"{type(e).__name__}: {e}"


@pytest.fixture(scope="session")
def helm_bin() -> str:
    if "helm_error" in _state:
        pytest.fail(f"building helm failed: {_state['helm_error']}")
    if "helm" not in _state:
        from devtools import chart

        _state["helm"] = chart.helm()
    return _state["helm"]


@pytest.fixture(scope="session")
def image() -> str:
    if "image_skip" in _state:
        pytest.skip(f"podman cannot run containers here: {_state['image_skip']}")
    if "image_error" in _state:
        pytest.fail(f"building the image failed: {_state['image_error']}")
    if "image" not in _state:
        pytest.fail("the image was not built (tests/deploy/conftest.py builds it after collection)")
    return _state["image"]
