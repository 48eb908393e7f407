"""Streaming lists against the real API server: the informers fill their caches from a watch with
``sendInitialEvents`` (served by the watch cache, or by etcd for a resource the cache does not keep) and
go on watching on the same stream; an API server with the WatchList feature off refuses it once and is
listed page by page; a streaming list from a resourceVersion etcd has compacted away gets the newest state
(``NotOlderThan``), and a watch that answers 410 Gone is followed by a streaming list from no version."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from clusters import cluster_fixture
from kube import Kube, compact_etcd

from devtools.cluster import LocalCluster
from grouper.kube import config as kubeconfig
from grouper.kube.discovery import WELL_KNOWN
from grouper.kube.informer import ADDED, DELETED, MODIFIED, Informer
from grouper.kube.transport import KubeClient
from grouper.model.objects import GVK
from grouper.observability.metrics import Metrics

CONFIGMAP = WELL_KNOWN[GVK("", "v1", "ConfigMap")]
DEFAULT_CMS = "/api/v1/namespaces/default/configmaps"


def requests(metrics: Metrics, verb: str, code: str = "200") -> float:
    return metrics.value("podgrouper_api_requests_total", {"verb": verb, "resource": "configmaps", "code": code})


@contextlib.asynccontextmanager
async def informers(cluster: Any, *each: dict[str, Any]) -> AsyncIterator[tuple[Metrics, KubeClient, list[Informer]]]:
    """Informers of ConfigMaps (``each``: their options) on one admin client, stopped at the end."""
    metrics = Metrics()
    cfg = kubeconfig.explicit(cluster.server, token=cluster.admin_token, ca_file=cluster.ca_file)
    client = KubeClient(cfg, qps=0, metrics=metrics)
    infs = [Informer(client, CONFIGMAP, metrics=metrics, **options) for options in each]
    try:
        yield metrics, client, infs
    finally:
        for inf in infs:
            await inf.stop()
        await client.close()


def events_of(inf: Informer) -> list[tuple[str, str]]:
    events: list[tuple[str, str]] = []
    inf.add_handler(lambda t, o, old: events.append((t, o["metadata"]["name"])))
    return events


async def eventually(cond: Callable[[], Any], timeout: float = 15.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


def with_admin(cluster: LocalCluster) -> Iterator[tuple[LocalCluster, Kube]]:
    with Kube.from_cluster(cluster) as kube:
        yield cluster, kube


def test_a_cache_is_filled_by_a_streaming_list_and_watched_on_the_same_stream(
    cluster: Any, kube: Kube, namespace: str
) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    names = [f"cm-{i:03d}" for i in range(150)]
    for name in names:
        kube.create(path, {"metadata": {"name": name, "labels": {"set": "a"}}, "data": {"v": "0"}})
    kube.create(path, {"metadata": {"name": "other", "labels": {"set": "b"}}})

    async def scenario() -> None:
        async with informers(cluster, {"namespace": namespace, "label_selector": "set=a"}) as (metrics, client, [inf]):
            events = events_of(inf)
            inf.start()
            assert await inf.wait_synced(30)
            assert sorted(o["metadata"]["name"] for o in inf.list()) == names, "the label selector applies"
            assert sorted(events) == [(ADDED, n) for n in names]
            assert requests(metrics, "list") == 0 and requests(metrics, "watch") == 1
            assert client.watch_list and inf.resource_version
            await asyncio.to_thread(kube.create, path, {"metadata": {"name": "late", "labels": {"set": "a"}}})
            await asyncio.to_thread(kube.patch, f"{path}/cm-007", {"data": {"v": "1"}})
            await asyncio.to_thread(kube.delete, f"{path}/cm-008")
            await eventually(lambda: (DELETED, "cm-008") in events)
            assert (ADDED, "late") in events and (MODIFIED, "cm-007") in events
            assert inf.get(namespace, "cm-007")["data"] == {"v": "1"}  # type: ignore[index]
            assert requests(metrics, "watch") == 1, "the events came on the stream of the list"
            assert inf.healthy()

    asyncio.run(scenario())


# an API server with the WatchList feature off (the default of Kubernetes 1.33): it refuses streaming lists
# with 422
no_watch_list_server = cluster_fixture("no_watch_list_server", shared=False, crds=(), controller_manager=False,
                                       apiserver_args=("--feature-gates=WatchList=false",), quiet=True)


@pytest.fixture(scope="module")
def no_watch_list_cluster(no_watch_list_server: LocalCluster) -> Iterator[tuple[LocalCluster, Kube]]:
    yield from with_admin(no_watch_list_server)


def test_a_server_that_refuses_streaming_lists_is_listed_page_by_page(
    no_watch_list_cluster: tuple[LocalCluster, Kube],
) -> None:
    cluster, kube = no_watch_list_cluster
    for i in range(7):
        kube.create(DEFAULT_CMS, {"metadata": {"name": f"r-{i}", "labels": {"set": "r"}}})
    each = ({"namespace": "default", "label_selector": "set=r", "page_size": 3}, {"namespace": "default", "page_size": 3})

    async def scenario() -> None:
        async with informers(cluster, *each) as (metrics, client, [first, second]):
            first.start()
            assert await first.wait_synced(30)
            assert not client.watch_list
            second.start()
            assert await second.wait_synced(30)
            assert len(first) == 7 and len(second) == 7
            assert requests(metrics, "watch", "422") == 1, "asked once for the client, not once per informer"
            assert requests(metrics, "list") == 6, "3 pages of 3 per informer"
            await asyncio.to_thread(kube.create, DEFAULT_CMS, {"metadata": {"name": "r-late", "labels": {"set": "r"}}})
            await eventually(lambda: first.get("default", "r-late") is not None)
            assert first.healthy() and second.healthy()

    asyncio.run(scenario())


# an API server whose ConfigMaps bypass the watch cache: their streaming lists and watches are served by
# etcd, and a resourceVersion older than etcd's compaction really answers 410 Gone
uncached_server = cluster_fixture("uncached_server", shared=False, crds=(), controller_manager=False,
                                  apiserver_args=("--watch-cache-sizes=configmaps#0",), quiet=True)


@pytest.fixture(scope="module")
def uncached_cluster(uncached_server: LocalCluster) -> Iterator[tuple[LocalCluster, Kube]]:
    yield from with_admin(uncached_server)


def test_a_restarted_informer_lists_again_from_a_compacted_resource_version(
    uncached_cluster: tuple[LocalCluster, Kube],
) -> None:
    cluster, kube = uncached_cluster
    for i in range(5):
        kube.create(DEFAULT_CMS, {"metadata": {"name": f"cm-{i}", "labels": {"set": "a"}}})

    async def scenario() -> None:
        async with informers(cluster, {"namespace": "default", "label_selector": "set=a"}) as (metrics, _, [inf]):
            events = events_of(inf)
            inf.start()
            assert await inf.wait_synced(30)
            assert requests(metrics, "list") == 0
            await inf.stop()  # disconnected; one object vanishes, one appears, etcd compacts past our version
            events.clear()
            await asyncio.to_thread(kube.delete, f"{DEFAULT_CMS}/cm-1")
            await asyncio.to_thread(kube.create, DEFAULT_CMS, {"metadata": {"name": "cm-new", "labels": {"set": "a"}}})
            await asyncio.to_thread(compact_etcd, cluster)
            inf.start()  # a restarted informer lists again, from the resourceVersion it had
            await eventually(lambda: (DELETED, "cm-1") in events and (ADDED, "cm-new") in events)
            assert sorted(o["metadata"]["name"] for o in inf.list()) == ["cm-0", "cm-2", "cm-3", "cm-4", "cm-new"]
            assert sorted(events) == [(ADDED, "cm-new"), (DELETED, "cm-1")], "unchanged objects: no event"
            assert requests(metrics, "list") == 0, "streaming lists only"
            await asyncio.to_thread(kube.create, DEFAULT_CMS, {"metadata": {"name": "cm-later", "labels": {"set": "a"}}})
            await eventually(lambda: (ADDED, "cm-later") in events)
            assert inf.healthy()

    asyncio.run(scenario())


def test_a_watch_answering_410_is_followed_by_a_streaming_list_from_the_newest_state(
    uncached_cluster: tuple[LocalCluster, Kube],
) -> None:
    cluster, kube = uncached_cluster
    for i in range(3):
        kube.create(DEFAULT_CMS, {"metadata": {"name": f"g-{i}", "labels": {"set": "g"}}})
    # watches end after a second, so the informer soon watches again from the version it last saw
    options = {"namespace": "default", "label_selector": "set=g", "watch_timeout": (1, 1)}

    async def scenario() -> None:
        async with informers(cluster, options) as (metrics, _, [inf]):
            inf.start()
            assert await inf.wait_synced(30)
            # etcd moves on with objects the informer does not see, and compacts past the informer's version
            # (two writes: a watch may start at the compaction revision itself)
            for name in ("unseen-1", "unseen-2"):
                await asyncio.to_thread(kube.create, DEFAULT_CMS, {"metadata": {"name": name, "labels": {"set": "x"}}})
            await asyncio.to_thread(compact_etcd, cluster)
            await eventually(lambda: metrics.value("podgrouper_relists_total", {"resource": "configmaps"}) == 1)
            assert requests(metrics, "list") == 0, "the re-list was a streaming list"
            assert sorted(o["metadata"]["name"] for o in inf.list()) == ["g-0", "g-1", "g-2"]
            await asyncio.to_thread(kube.create, DEFAULT_CMS, {"metadata": {"name": "g-late", "labels": {"set": "g"}}})
            await eventually(lambda: inf.get("default", "g-late") is not None)
            await eventually(inf.healthy)

    asyncio.run(scenario())
