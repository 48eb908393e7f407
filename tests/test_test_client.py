"""The tests' own Kubernetes client (tests/kube.py) comes back when the API server asks it to, as client-go
and the grouper's transport do: a just-registered CRD answers ``429 storage is (re)initializing`` with
``Retry-After`` until its watch cache fills, and a test listing it then must not fail (seen in CI)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kube import RETRIES, Kube, KubeError

from grouper.kube.config import explicit

INITIALIZING = {"kind": "Status", "status": "Failure", "reason": "TooManyRequests", "code": 429,
                "message": "storage is (re)initializing"}
PATH = "/apis/ray.io/v1/namespaces/ns/rayjobs"


@contextmanager
def server(answers: list[tuple[int, dict[str, str]]]) -> Iterator[tuple[Kube, list[str]]]:
    """A server answering each request with the next (status, headers) of ``answers``, then 200 with an empty
    list; yields a client of it and the paths it was asked for."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            status, headers = answers.pop(0) if answers else (200, {})
            body = json.dumps(INITIALIZING if status == 429 else {"kind": "RayJobList", "items": []}).encode()
            self.send_response(status)
            for k, v in {**headers, "Content-Type": "application/json"}.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    kube = Kube(explicit(f"http://127.0.0.1:{httpd.server_address[1]}"))
    try:
        yield kube, seen
    finally:
        kube.close()
        httpd.shutdown()
        httpd.server_close()


def test_a_429_with_retry_after_is_asked_again_until_answered() -> None:
    with server([(429, {"Retry-After": "0"})] * 2) as (kube, seen):
        assert kube.list(PATH) == []
    assert seen == [PATH] * 3


def test_exists_asks_again_too() -> None:
    with server([(429, {"Retry-After": "0"})]) as (kube, seen):
        assert kube.exists(PATH)
    assert seen == [PATH] * 2


def test_a_429_without_retry_after_is_the_callers_error_at_once() -> None:
    with server([(429, {})]) as (kube, seen), pytest.raises(KubeError) as err:
        kube.list(PATH)
    assert err.value.status == 429 and err.value.message == "storage is (re)initializing" and seen == [PATH]


def test_a_server_that_keeps_refusing_is_an_error_after_a_bounded_number_of_tries() -> None:
    with server([(429, {"Retry-After": "0"})] * (RETRIES + 1)) as (kube, seen), pytest.raises(KubeError) as err:
        kube.list(PATH)
    assert err.value.status == 429 and len(seen) == RETRIES + 1
