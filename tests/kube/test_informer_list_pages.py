"""The informer's paginated LIST asks for the next page before it decodes the current one into the
cache (the API server serves it meanwhile), keeps every object exactly once, starts over when a
continue token expires (410), and leaves no request behind when it is cancelled."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from grouper.kube.discovery import WELL_KNOWN
from grouper.kube.informer import Informer
from grouper.kube.transport import ApiError, KubeClient
from grouper.model.objects import GVK

POD = WELL_KNOWN[GVK("", "v1", "Pod")]


class PagedClient:
    """Serves ``pods`` in pages of ``limit`` with continue tokens; records what happened, in order."""

    def __init__(self, pods: int, *, expire_once_at: int | None = None, hang_at: int | None = None) -> None:
        self.pods = [{"metadata": {"name": f"p{i:03d}", "namespace": "ns", "uid": f"u{i}", "resourceVersion": "7"}}
                     for i in range(pods)]
        self.log: list[str] = []
        self.expire_once_at, self.hang_at = expire_once_at, hang_at
        self.hung = asyncio.Event()

    async def get(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        start = int(params["continue"] or 0)
        self.log.append(f"request {start}")
        await asyncio.sleep(0.01)  # the server's time
        if start and start == self.expire_once_at:
            self.expire_once_at = None
            raise ApiError(410, "Expired", "continue token expired")
        if start and start == self.hang_at:
            self.hung.set()
            await asyncio.sleep(3600)
        end = start + int(params["limit"])
        meta = {"resourceVersion": "7", "continue": str(end) if end < len(self.pods) else ""}
        return {"kind": "PodList", "apiVersion": "v1", "metadata": meta,
                "items": [dict(p) for p in self.pods[start:end]]}


def informer(client: PagedClient) -> Informer:
    def transform(obj: dict[str, Any]) -> dict[str, Any]:
        client.log.append(f"decode {obj['metadata']['name']}")
        return obj

    return Informer(cast(KubeClient, client), POD, page_size=10, transform=transform)


async def test_next_page_is_requested_before_the_current_one_is_decoded() -> None:
    client = PagedClient(35)
    inf = informer(client)
    await inf._list()
    assert sorted(p["metadata"]["name"] for p in inf.list()) == [f"p{i:03d}" for i in range(35)]
    assert client.log.index("request 10") < client.log.index("decode p000")
    assert client.log.index("request 20") < client.log.index("decode p010")
    assert [e for e in client.log if e.startswith("request")] == ["request 0", "request 10", "request 20", "request 30"]


async def test_an_expired_continue_token_starts_the_list_over() -> None:
    client = PagedClient(35, expire_once_at=20)
    inf = informer(client)
    await inf._list()
    assert len(inf.list()) == 35
    requests = [e for e in client.log if e.startswith("request")]
    assert requests == ["request 0", "request 10", "request 20", "request 0", "request 10", "request 20", "request 30"]


async def test_a_cancelled_list_leaves_no_request_behind() -> None:
    client = PagedClient(35, hang_at=20)
    inf = informer(client)
    task = asyncio.ensure_future(inf._list())
    await asyncio.wait_for(client.hung.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert others == [], f"requests left running: {others}"
