"""Prometheus and Chromium from Debian's packages, for the tests that need the real programs.

- ``prometheus`` gives the server and ``promtool`` (alert rules are checked and evaluated by the real thing);
  installing it starts no daemon here (no init system), and the tests start their own on a free port.
- ``chromium`` is the browser Playwright drives (``executable_path=/usr/bin/chromium``): Playwright's own
  browser download is never used (it cannot be fetched here, and one browser from the distribution is
  enough).

Installed with ``apt-get`` only when a program is missing, as root (CI runs as root), the way
``devtools/image/build.py`` installs podman; without root the message says what to install.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

# Debian package -> the programs it must provide
PACKAGES: dict[str, tuple[str, ...]] = {
    "prometheus": ("prometheus", "promtool"),
    "chromium": ("chromium",),
}
CHROMIUM = "/usr/bin/chromium"


class ToolsError(RuntimeError):
    pass


def _log(msg: str) -> None:
    print(f"[tools] {msg}", file=sys.stderr, flush=True)


def missing_packages() -> list[str]:
    """The Debian packages whose programs are not on PATH."""
    return [pkg for pkg, exes in PACKAGES.items() if not all(shutil.which(e) for e in exes)]


def unavailable(package: str) -> str:
    """Why a tool cannot be used ("" when it can): the reason a test skip gives."""
    if package in missing_packages():
        return f"{package} is not installed (make tools installs it with apt-get, as root)"
    return ""


def ensure_tools() -> float:
    """Install the missing packages with apt-get (needs root); returns the seconds it took (0 when none)."""
    missing = missing_packages()
    if not missing:
        return 0.0
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise ToolsError(f"missing {', '.join(missing)}: install them (apt-get install {' '.join(missing)})")
    _log(f"installing {', '.join(missing)} with apt-get ...")
    start = time.monotonic()
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], check=True, env=env)
    still = missing_packages()
    if still:
        raise ToolsError(f"apt-get installed {', '.join(missing)} but {', '.join(still)} is still missing")
    took = time.monotonic() - start
    _log(f"installed in {took:.0f}s")
    return took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.tools",
                                 description="install Prometheus and Chromium (Debian packages) when missing")
    ap.parse_args(argv)
    try:
        ensure_tools()
    except (ToolsError, subprocess.CalledProcessError) as exc:
        _log(f"error: {exc}")
        return 1
    for pkg, exes in PACKAGES.items():
        _log(f"{pkg}: " + ", ".join(str(shutil.which(e)) for e in exes))
    return 0
