"""Playwright drives Debian's Chromium (``make tools``; never Playwright's own browser): a page from a loopback
server renders, its JavaScript runs, a screenshot is saved under test-artifacts/."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from devtools.tools.install import CHROMIUM

PAGE = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>grouper smoke</title>
<meta http-equiv="Content-Security-Policy" content="default-src 'self'; script-src 'self'">
<script src="/app.js" defer></script></head>
<body><h1>Gangs</h1><ul id="gangs"></ul></body></html>"""
SCRIPT = b"""for (const [name, state] of [["train", "Waiting"], ["serve", "Admitted"]]) {
  const li = document.createElement("li");
  li.textContent = name + ": " + state;
  li.dataset.state = state;
  document.getElementById("gangs").appendChild(li);
}"""


class _Handler(BaseHTTPRequestHandler):
    routes = {"/": (PAGE, "text/html; charset=utf-8"), "/app.js": (SCRIPT, "text/javascript")}

    def do_GET(self) -> None:
        body, ctype = self.routes.get(self.path, (b"not found", "text/plain"))
        self.send_response(200 if self.path in self.routes else 404)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_chromium_renders_a_page_runs_its_script_and_takes_a_screenshot(
    browser: Any, site: str, artifacts: Path
) -> None:
    system = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True).stdout
    assert browser.version and browser.version in system, (browser.version, system)  # Debian's, not a download
    page = browser.new_page(viewport={"width": 640, "height": 360})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(site + "/")
    page.wait_for_selector("#gangs li[data-state=Admitted]")
    assert page.title() == "grouper smoke"
    assert page.locator("#gangs li").all_inner_texts() == ["train: Waiting", "serve: Admitted"]
    assert not errors
    shot = artifacts / "browser-smoke.png"
    shot.unlink(missing_ok=True)
    page.screenshot(path=str(shot))
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    page.close()
