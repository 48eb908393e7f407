"""``grouper run``'s HTTP front while the API loads (grouper/runtime/http_front.py): the probes answer at once
with exactly what the API's routes answer, any other request waits for the API and gets the API's answer,
and once the API is built every request is the API's."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from grouper.api.app import create_app
from grouper.api.state import AppState
from grouper.observability.health import HealthSnapshot
from grouper.runtime.http_front import App, StartupFront
from grouper.runtime.settings import RunSettings


async def call(app: App, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    """One request through an ASGI app, as uvicorn makes it."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"", "headers": [],
             "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8080)}
    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body


def ready_snapshot() -> HealthSnapshot:
    now = time.monotonic()
    return HealthSnapshot(role="standby", started=True, informers={"pods": True, "podgroups": True},
                          last_api_contact=now, now=now)


STATES = {
    "starting": lambda: AppState(settings=RunSettings(leader_elect=True, http_auth="none")),
    "ready": lambda: AppState(settings=RunSettings(leader_elect=True, http_auth="none"), health=ready_snapshot),
    "fatal": lambda: AppState(settings=RunSettings(http_auth="none"), fatal="the webhook server stopped"),
}


@pytest.mark.parametrize("which", list(STATES))
async def test_probes_answer_before_the_api_is_built_exactly_as_the_api_does(which: str) -> None:
    state = STATES[which]()
    release = threading.Event()
    built: list[App] = []

    def build() -> App:
        release.wait(30)
        built.append(create_app(state))
        return built[0]

    front = StartupFront(state, build)
    front.start_loading()
    try:
        early = {path: await call(front, path) for path in ("/healthz", "/readyz")}
        assert not front.app.done(), "answered without the API"
    finally:
        release.set()
    api = await asyncio.wrap_future(front.app)
    for path, (status, headers, body) in early.items():
        a_status, a_headers, a_body = await call(api, path)
        assert (status, body) == (a_status, a_body), path
        assert {k: headers[k] for k in ("content-type", "content-length")} == \
            {k: a_headers[k] for k in ("content-type", "content-length")}
    assert early["/readyz"][0] == (200 if which == "ready" else 503)
    assert early["/healthz"][0] == (503 if which == "fatal" else 200)


async def test_other_requests_wait_for_the_api_and_then_everything_is_the_apis() -> None:
    state = STATES["ready"]()
    release = threading.Event()
    calls: list[str] = []

    def build() -> App:
        release.wait(30)
        app = create_app(state)

        async def counted(scope: Any, receive: Any, send: Any) -> None:
            calls.append(scope["path"])
            await app(scope, receive, send)

        return counted

    front = StartupFront(state, build)
    front.start_loading()
    metrics = asyncio.create_task(call(front, "/metrics"))
    not_a_probe = asyncio.create_task(call(front, "/readyz", method="POST"))
    await asyncio.sleep(0.05)
    assert not metrics.done() and not not_a_probe.done(), "answered before the API was built"
    release.set()
    status, _headers, body = await metrics
    assert status == 200 and b"podgrouper_" in body
    assert (await not_a_probe)[0] == 405  # the API's answer to a method it does not serve
    assert (await call(front, "/readyz"))[0] == 200
    assert calls == ["/metrics", "/readyz", "/readyz"], "after the build, the probes too are the API's"


async def test_an_api_that_cannot_be_built_fails_the_requests_waiting_for_it() -> None:
    def build() -> App:
        raise RuntimeError("no FastAPI")

    front = StartupFront(STATES["starting"](), build)
    front.start_loading()
    with pytest.raises(RuntimeError, match="no FastAPI"):
        await asyncio.wrap_future(front.app)
    with pytest.raises(RuntimeError, match="no FastAPI"):
        await call(front, "/metrics")


async def test_the_api_loads_only_after_the_first_ready_answer_or_for_another_request() -> None:
    """Nothing starts building the API while the service starts (its CPU would slow the start-up): the first
    ``/readyz`` 200 starts it, or else the first request that is not a probe."""
    builds: list[str] = []
    snapshot: list[HealthSnapshot] = [HealthSnapshot(role="standby", started=False)]
    state = AppState(settings=RunSettings(leader_elect=True, http_auth="none"), health=lambda: snapshot[0])

    def build() -> App:
        builds.append("built")
        return create_app(state)

    front = StartupFront(state, build)
    assert [(await call(front, path))[0] for path in ("/healthz", "/readyz", "/readyz")] == [200, 503, 503]
    assert not front.app.running() and not front.app.done() and builds == []
    snapshot[0] = ready_snapshot()
    assert (await call(front, "/healthz"))[0] == 200
    assert not front.app.running() and not front.app.done(), "a liveness answer is not readiness"
    assert (await call(front, "/readyz"))[0] == 200
    assert front.app.running() or front.app.done(), "ready: the API is being built"
    await asyncio.wrap_future(front.app)
    assert builds == ["built"]
    assert (await call(front, "/readyz"))[0] == 200 and builds == ["built"], "built once"

    other = StartupFront(STATES["starting"](), lambda: create_app(STATES["starting"]()))
    metrics = asyncio.create_task(call(other, "/metrics"))  # never ready: the request itself loads the API
    await asyncio.sleep(0)  # one step of the request: up to its wait for the API
    assert other.app.running() or other.app.done(), "the request started the build"
    status, _headers, body = await metrics
    assert status == 200 and b"podgrouper_" in body
