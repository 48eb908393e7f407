"""Streaming lists (a watch with ``sendInitialEvents``, KEP-3157) against the in-process fake API: the
cache is filled from the stream's first events and the same stream goes on as the watch; a server that
refuses them is asked once per client and gets paginated LISTs; a stream cut before its end bookmark
installs nothing; a 410 starts the next streaming list from no resourceVersion."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import pytest

from devtools.fakeapi import FakeApi, until
from grouper.kube.discovery import WELL_KNOWN
from grouper.kube.informer import ADDED, Informer
from grouper.kube.transport import KubeClient
from grouper.model.objects import GVK

POD = WELL_KNOWN[GVK("", "v1", "Pod")]



def queries(api: FakeApi) -> list[dict[str, str]]:
    """The query of every GET of the pods collection, in order."""
    out = []
    for method, url in api.requests:
        parts = urlsplit(url)
        if method == "GET" and parts.path == "/api/v1/pods":
            out.append({k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()})
    return out


@pytest.fixture
async def fake() -> AsyncIterator[FakeApi]:
    api = FakeApi()
    await api.start()
    yield api
    await api.down()


async def test_a_streaming_list_fills_the_cache_and_its_stream_goes_on_as_the_watch(fake: FakeApi) -> None:
    for name in ("a", "b", "c"):
        fake.add_pod(name)
    client = KubeClient(fake.config(), qps=0)
    inf = Informer(client, POD, field_selector="spec.schedulerName=kai-scheduler")
    events: list[tuple[str, str]] = []
    inf.add_handler(lambda t, o, old: events.append((t, o["metadata"]["name"])))
    inf.start()
    try:
        assert await inf.wait_synced(5)
        assert sorted(events) == [(ADDED, "a"), (ADDED, "b"), (ADDED, "c")]
        assert inf.resource_version == str(fake.rv)
        fake.add_pod("d")  # after the end bookmark: a watch event on the same stream
        await until(lambda: (ADDED, "d") in events)
        (q,) = queries(fake)  # one request: no LIST, no second watch
        assert q["watch"] == "true" and q["sendInitialEvents"] == "true"
        assert q["resourceVersionMatch"] == "NotOlderThan" and q["allowWatchBookmarks"] == "true"
        assert "resourceVersion" not in q, "the first streaming list asks for the newest state"
        assert q["fieldSelector"] == "spec.schedulerName=kai-scheduler"
        assert client.watch_list and inf.healthy() and len(inf) == 4
    finally:
        await inf.stop()
        await client.close()


async def test_a_refused_streaming_list_falls_back_to_lists_asked_once_per_client() -> None:
    api = FakeApi(watch_list=False)
    await api.start()
    api.add_pod("a", team="x")
    api.add_pod("b", team="y")
    client = KubeClient(api.config(), qps=0)
    first = Informer(client, POD, label_selector="team=x")
    second = Informer(client, POD, label_selector="team=y")
    try:
        first.start()
        assert await first.wait_synced(5)
        assert not client.watch_list, "the refusal turns streaming lists off for the client"
        second.start()
        assert await second.wait_synced(5)
        asked = [q for q in queries(api) if q.get("sendInitialEvents") == "true"]
        assert len(asked) == 1, "the second informer did not ask again"
        assert api.lists == 2
        await until(lambda: api.watch_opens == 2)
        api.add_pod("c")
        await until(lambda: first.get("ns", "c") is not None and second.get("ns", "c") is not None)
    finally:
        await first.stop()
        await second.stop()
        await client.close()
        await api.down()


async def test_a_stream_cut_before_its_end_bookmark_installs_nothing(fake: FakeApi) -> None:
    for i in range(10):
        fake.add_pod(f"p{i}")
    fake.cut_initial_after = 4
    client = KubeClient(fake.config(), qps=0)
    inf = Informer(client, POD)
    events: list[tuple[str, str]] = []
    inf.add_handler(lambda t, o, old: events.append((t, o["metadata"]["name"])))
    installed: list[int] = []  # objects each time a list's objects became the cache
    replace_with = inf._replace_with

    async def recorded(items: dict[tuple[str, str], dict[str, object]], rv: str) -> None:
        installed.append(len(items))
        await replace_with(items, rv)

    inf._replace_with = recorded  # type: ignore[method-assign]
    inf.start()
    try:
        assert await inf.wait_synced(10)
        assert installed == [10], "the objects of the cut stream were never installed"
        assert sorted(n for _, n in events) == [f"p{i}" for i in range(10)], "each object seen once"
        assert fake.lists == 2 and len(inf) == 10
    finally:
        await inf.stop()
        await client.close()


async def test_a_410_starts_the_next_streaming_list_from_no_resource_version(fake: FakeApi) -> None:
    fake.add_pod("a")
    client = KubeClient(fake.config(), qps=0)
    inf = Informer(client, POD)
    inf.start()
    try:
        assert await inf.wait_synced(5)
        await until(lambda: fake.watch_opens == 1)
        fake.remove_pod("a")  # gone while the watch cannot deliver it
        fake.add_pod("b")
        fake.expire()
        await until(lambda: fake.lists == 2 and inf.get("ns", "b") is not None and inf.get("ns", "a") is None)
        second = queries(fake)[1]
        assert second["sendInitialEvents"] == "true" and "resourceVersion" not in second
    finally:
        await inf.stop()
        await client.close()
