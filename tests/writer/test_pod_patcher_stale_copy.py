"""A reconcile holds the pods it read at its start across awaits (the PodGroup write, other patches).
If the echo of our patch reaches the cache meanwhile, the expectation is cleared; the patcher must then
read the cache, not the reconcile's older copy, or it patches the same pod again (found with the cluster
benchmark's audit log: 114 of 1,000 pods of one JobSet patched twice, identically)."""

from __future__ import annotations

from typing import Any, cast

from grouper.kube.transport import KubeClient
from grouper.model.podgroup import POD_GROUP_ANNOTATION, SUBGROUP_LABEL
from grouper.writer.expectations import WriteExpectations
from grouper.writer.pods import PodPatcher


class Recorder:
    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def merge_patch(self, path: str, patch: dict[str, Any], *, metadata_only: bool = False) -> dict[str, Any]:
        self.patches.append((path, patch))
        return annotated("2")


def pod(rv: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": rv, "labels": {}}}


def annotated(rv: str) -> dict[str, Any]:
    p = pod(rv)
    p["metadata"]["annotations"] = {POD_GROUP_ANNOTATION: "pg"}
    p["metadata"]["labels"] = {SUBGROUP_LABEL: "workers"}
    return p


async def test_a_pod_patched_and_echoed_is_not_patched_again_from_an_old_copy() -> None:
    cache: dict[tuple[str, str], dict[str, Any]] = {("ns", "p"): pod("1")}
    expectations = WriteExpectations()
    client = Recorder()
    patcher = PodPatcher(cast(KubeClient, client), expectations=expectations,
                         cached=lambda ns, name: cache.get((ns, name)))
    snapshot = cache[("ns", "p")]  # what the next reconcile read at its start

    assert await patcher.ensure(snapshot, "pg", "workers") == "patched"
    # the watch delivers the echo: the cache has it, the expectation is gone
    cache[("ns", "p")] = annotated("2")
    assert expectations.observe("Pod", "MODIFIED", cache[("ns", "p")]) is True

    assert not patcher.needed(snapshot, "pg", "workers")
    assert await patcher.ensure(snapshot, "pg", "workers") == "unchanged"
    assert len(client.patches) == 1
