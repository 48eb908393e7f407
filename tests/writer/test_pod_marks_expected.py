"""What the grouper expects of a pod it just patched, until the patch's echo arrives: the pod as cached
with the two marks and the version of the patch's answer (``writer.pods.marked``), not a second slimmed
copy of the whole answer."""

from __future__ import annotations

from typing import Any, cast

from grouper.kube.transport import KubeClient
from grouper.model.podgroup import POD_GROUP_ANNOTATION, SUBGROUP_LABEL
from grouper.writer.expectations import WriteExpectations
from grouper.writer.pods import PodPatcher, marked


def cached_pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "5",
                         "labels": {"app": "a", SUBGROUP_LABEL: "old"}, "annotations": {"team": "t"}},
            "spec": {"schedulerName": "kai-scheduler"}, "status": {"phase": "Pending"}}


def answer(rv: str) -> dict[str, Any]:
    """The whole pod as the API server answers a patch: more than the cache keeps."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": rv,
                         "labels": {"app": "a"}, "annotations": {"team": "t", POD_GROUP_ANNOTATION: "pg"},
                         "managedFields": [{"manager": "grouper"}]},
            "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled"}]}}


class Client:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    async def merge_patch(self, path: str, patch: dict[str, Any], *, metadata_only: bool = False) -> dict[str, Any]:
        self.patches.append(patch)
        return answer("7")


def test_marked_takes_the_marks_and_version_of_the_answer_and_nothing_else() -> None:
    pod = cached_pod()
    got = marked(pod, answer("7"))
    meta = got["metadata"]
    assert meta["annotations"] == {"team": "t", POD_GROUP_ANNOTATION: "pg"}
    assert meta["labels"] == {"app": "a"}  # the stale sub-group label is gone, as in the answer
    assert meta["resourceVersion"] == "7"
    assert got["spec"] is pod["spec"] and got["status"] is pod["status"]  # shared, not the answer's
    assert "managedFields" not in meta
    assert pod["metadata"]["labels"][SUBGROUP_LABEL] == "old"  # the cached pod is left as it was


async def test_a_patched_pod_is_not_patched_again_before_or_after_its_echo() -> None:
    cache = {("ns", "p"): cached_pod()}
    expectations = WriteExpectations()
    client = Client()
    patcher = PodPatcher(cast(KubeClient, client), expectations=expectations,
                         cached=lambda ns, name: cache.get((ns, name)))
    assert await patcher.ensure(cache[("ns", "p")], "pg", None) == "patched"
    assert client.patches == [{"metadata": {"annotations": {POD_GROUP_ANNOTATION: "pg"},
                                            "labels": {SUBGROUP_LABEL: None}}}]
    assert not patcher.needed(cache[("ns", "p")], "pg", None)  # the cache is behind: the expectation answers
    assert patcher.needed(cache[("ns", "p")], "other", None)  # a different decision still writes
    echo = answer("7")
    assert expectations.observe("Pod", "MODIFIED", echo) is True  # the version matches: only our echo
    cache[("ns", "p")] = echo
    assert await patcher.ensure(cache[("ns", "p")], "pg", None) == "unchanged"
    assert len(client.patches) == 1
