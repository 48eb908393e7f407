"""The watch stream is split into events by newline whatever the chunk boundaries: many events in one
chunk (a burst), one large object over many chunks, blank lines between events, and a line that is not
JSON ends the stream as a broken one (the informer re-watches)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web

from grouper.kube import config as kubeconfig
from grouper.kube.transport import ApiError, KubeClient


def _event(i: int, pad: int = 0) -> bytes:
    obj = {"metadata": {"name": f"p{i}", "resourceVersion": str(i)}, "data": "x" * pad}
    return json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n"


async def _serve(chunks: list[bytes]) -> tuple[web.AppRunner, int]:
    async def watch(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for c in chunks:
            await resp.write(c)
            await asyncio.sleep(0)  # each write its own chunk on the wire
        return resp

    app = web.Application()
    app.router.add_get("/api/v1/pods", watch)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port


async def _read(chunks: list[bytes]) -> list[dict[str, Any]]:
    runner, port = await _serve(chunks)
    client = KubeClient(kubeconfig.explicit(f"http://127.0.0.1:{port}", token="t"), qps=0, burst=1)
    try:
        return [e async for e in client.watch("/api/v1/pods", {}, timeout=5)]
    finally:
        await client.close()
        await runner.cleanup()


async def test_many_events_in_one_chunk_and_one_event_over_many() -> None:
    burst = b"".join(_event(i) for i in range(200))
    big = _event(999, pad=300_000)
    pieces = [big[i:i + 7_000] for i in range(0, len(big), 7_000)]
    events = await _read([burst, b"\n\n", *pieces, _event(1000)[:10], _event(1000)[10:]])
    names = [e["object"]["metadata"]["name"] for e in events]
    assert names == [f"p{i}" for i in range(200)] + ["p999", "p1000"]
    assert len(events[200]["object"]["data"]) == 300_000


async def test_a_line_that_is_not_json_breaks_the_stream() -> None:
    with pytest.raises(ApiError) as e:
        await _read([_event(1), b"not json\n", _event(2)])
    assert e.value.reason == "BadWatchLine"
