"""A pod patch answered 404 found the pod deleted; the cache holds it until the watch delivers the DELETED
event, and a pass in between (another watch's event, e.g. the owner's status) must not patch it again.
Found in the real Kubeflow operator test: a PyTorchJob scaled from 3 workers to 2; the grouper's pass for
the new replicas raced the operator's delete of worker-2 and patched it twice, both answered 404."""

from __future__ import annotations

from typing import Any, cast

import pytest

from grouper.kube.transport import ApiError, KubeClient
from grouper.model.podgroup import POD_GROUP_ANNOTATION, SUBGROUP_LABEL
from grouper.writer.expectations import WriteExpectations
from grouper.writer.pods import PodPatcher


class Deleted:
    """The API server after the pod's delete: every patch is answered 404."""

    def __init__(self) -> None:
        self.patches: list[str] = []

    async def merge_patch(self, path: str, patch: dict[str, Any], *, metadata_only: bool = False) -> dict[str, Any]:
        self.patches.append(path)
        raise ApiError(404, "NotFound", 'pods "p" not found', method="PATCH", path=path)


def pod(uid: str, rv: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": uid, "resourceVersion": rv,
                         "annotations": {POD_GROUP_ANNOTATION: "pg"}, "labels": {SUBGROUP_LABEL: "worker-1"}}}


@pytest.fixture
def world() -> tuple[dict[tuple[str, str], dict[str, Any]], WriteExpectations, Deleted, PodPatcher]:
    cache: dict[tuple[str, str], dict[str, Any]] = {("ns", "p"): pod("u", "5")}
    expectations = WriteExpectations()
    client = Deleted()
    patcher = PodPatcher(cast(KubeClient, client), expectations=expectations,
                         cached=lambda ns, name: cache.get((ns, name)))
    return cache, expectations, client, patcher


async def test_a_pod_found_deleted_is_not_patched_again_before_its_delete_event(world: Any) -> None:
    cache, expectations, client, patcher = world
    assert patcher.needed(cache[("ns", "p")], "pg", None)
    assert await patcher.ensure(cache[("ns", "p")], "pg", None) == "gone"
    # the cache still holds the pod: the next pass asks again
    assert not patcher.needed(cache[("ns", "p")], "pg", None)
    assert await patcher.ensure(cache[("ns", "p")], "pg", None) == "gone"
    assert len(client.patches) == 1
    # an update of the same pod from before its deletion (the watch catching up) changes nothing
    cache[("ns", "p")] = pod("u", "6")
    assert expectations.observe("Pod", "MODIFIED", cache[("ns", "p")]) is False
    assert not patcher.needed(cache[("ns", "p")], "pg", None)
    # the DELETED event ends it
    deleted = cache.pop(("ns", "p"))
    expectations.observe("Pod", "DELETED", deleted)
    assert len(expectations) == 0


async def test_a_pod_recreated_under_the_same_name_is_patched(world: Any) -> None:
    cache, expectations, _client, patcher = world
    assert await patcher.ensure(cache[("ns", "p")], "pg", None) == "gone"
    # the operator recreates the pod (a new uid); its ADDED event may come before the old one's DELETED
    cache[("ns", "p")] = pod("u2", "9")
    assert patcher.needed(cache[("ns", "p")], "pg", None)
    expectations.observe("Pod", "ADDED", cache[("ns", "p")])
    assert len(expectations) == 0
    assert patcher.needed(cache[("ns", "p")], "pg", None)


async def test_the_gone_mark_expires(world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lost DELETED event (a re-list that no longer lists the pod delivers one; this is the backstop)
    never freezes the pod: the mark expires after the expectations' ttl."""
    cache, expectations, _client, patcher = world
    now = [1000.0]
    monkeypatch.setattr("grouper.writer.expectations.time.monotonic", lambda: now[0])
    assert await patcher.ensure(cache[("ns", "p")], "pg", None) == "gone"
    now[0] += expectations.ttl - 1
    assert not patcher.needed(cache[("ns", "p")], "pg", None)
    now[0] += 2
    assert patcher.needed(cache[("ns", "p")], "pg", None)
