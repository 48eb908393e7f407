"""Real Prometheus and a real browser for the tests (installed by ``make tools``: Debian's ``prometheus`` and
``chromium``; Python's ``playwright`` from the test extra drives the system Chromium, never a browser of its
own).

Fixtures (import them into a folder's ``conftest.py``):

- ``prometheus``: a factory ``prometheus(scrape_configs, rule_files=())`` that starts a Prometheus server on a
  free loopback port with that configuration (scrape and rule evaluation every second, its data in a
  temporary directory) and returns a :class:`PrometheusServer` (``query``, ``wait_for``, ``alerts``,
  ``targets``); every server is stopped after the test.
- ``browser``: a Chromium browser (session-wide) launched by Playwright from ``/usr/bin/chromium``.
- ``artifacts``: the folder for a test's screenshots and other outputs, ``test-artifacts/`` (gitignored).

A test needing a tool that is not installed is skipped with the reason (``make tools`` installs it).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.tools.install import CHROMIUM, unavailable

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"
INTERVAL = "1s"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusServer:
    """One ``prometheus`` process; its HTTP API at :attr:`url`."""

    def __init__(self, workdir: Path, scrape_configs: Sequence[dict[str, Any]], rule_files: Sequence[Path]) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_path = workdir / "prometheus.yml"
        self.log_path = workdir / "prometheus.log"
        config = {
            "global": {"scrape_interval": INTERVAL, "scrape_timeout": INTERVAL, "evaluation_interval": INTERVAL},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": list(scrape_configs),
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> PrometheusServer:
        argv = ["prometheus", f"--config.file={self.config_path}", f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"prometheus did not become ready (exit {self.proc.returncode}):\n{self.log_tail()}")
            time.sleep(0.2)
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def api(self, path: str, **params: str) -> Any:
        """``GET /api/v1/<path>``'s ``data`` (raises with Prometheus' error text when the call fails)."""
        query = ("?" + urllib.parse.urlencode(params)) if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            raise AssertionError(f"prometheus /api/v1/{path} {params}: HTTP {e.code}: {e.read()[:500]!r}") from None
        if body.get("status") != "success":
            raise AssertionError(f"prometheus /api/v1/{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result (``[{"metric": {...}, "value": [t, "v"]}, ...]`` for a vector)."""
        data = self.api("query", query=expr)
        return list(data["result"]) if data["resultType"] == "vector" else [data]

    def wait_for(self, expr: str, timeout: float = 60.0,
                 check: Callable[[list[dict[str, Any]]], bool] = bool) -> list[dict[str, Any]]:
        """Query until ``check(result)`` holds (default: a non-empty result); the last result."""
        deadline = time.monotonic() + timeout
        result = self.query(expr)
        while not check(result):
            if time.monotonic() > deadline or (self.proc is not None and self.proc.poll() is not None):
                raise AssertionError(f"prometheus: {expr!r} gave {result} after {timeout}s; targets: "
                                     f"{self.targets()}\n{self.log_tail()}")
            time.sleep(0.5)
            result = self.query(expr)
        return result

    def targets(self) -> list[dict[str, Any]]:
        return [{k: t.get(k) for k in ("scrapeUrl", "health", "lastError")}
                for t in self.api("targets")["activeTargets"]]

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.api("alerts")["alerts"])

    def rule_groups(self) -> list[dict[str, Any]]:
        return list(self.api("rules")["groups"])

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """``promtool ARGS`` (e.g. ``check rules FILE``, ``test rules FILE``), output captured."""
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120)


def _skip_unless(package: str) -> None:
    why = unavailable(package)
    if why:
        pytest.skip(why)


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[..., PrometheusServer]]:
    _skip_unless("prometheus")
    servers: list[PrometheusServer] = []

    def start(scrape_configs: Sequence[dict[str, Any]], rule_files: Sequence[Path] = ()) -> PrometheusServer:
        workdir = tmp_path / f"prometheus-{len(servers)}"
        workdir.mkdir()
        server = PrometheusServer(workdir, scrape_configs, rule_files)
        servers.append(server)
        return server.start()

    yield start
    for s in servers:
        s.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Module-scoped: Playwright's synchronous API keeps an event loop running in the main thread while it
    is open, which the asyncio tests of any later module would trip over."""
    _skip_unless("chromium")
    if shutil.which("chromium") != CHROMIUM:
        pytest.skip(f"chromium is not at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        # the system Chromium (Debian's), never Playwright's download; as root it needs --no-sandbox
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def artifacts(request: pytest.FixtureRequest) -> Path:
    """``test-artifacts/<test file>/``: screenshots and other outputs kept after the run (gitignored)."""
    folder = ARTIFACTS / Path(str(request.node.path)).stem
    folder.mkdir(parents=True, exist_ok=True)
    return folder
