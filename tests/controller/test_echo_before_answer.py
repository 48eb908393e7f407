"""The watch may show our own pod patch before the patch's HTTP answer arrives (the API server sends the
event and the answer on two connections). With no answer yet there is no version to know the echo by, so
it used to be taken for news: the pod's workload was queued and the pod looked at again, finding it done
(the extra look the incremental-reconcile test had to tolerate). The handler now knows the echo by what the
patch on its way sets; anything else changed in the same update is still news."""

from __future__ import annotations

import asyncio
import copy
from typing import Any, cast

from grouper.controller.handlers import EventHandlers
from grouper.controller.queue import WorkQueue
from grouper.controller.workloads import DeletedOwners, WorkloadIndex, WorkloadKey
from grouper.kube.informer import MODIFIED
from grouper.kube.transport import KubeClient
from grouper.model.objects import Obj
from grouper.model.podgroup import POD_GROUP_ANNOTATION, SUBGROUP_LABEL
from grouper.observability.metrics import Metrics
from grouper.records.decisions import DecisionStore
from grouper.writer.expectations import WriteExpectations
from grouper.writer.pods import PodPatcher
from tests.controller.test_route_sharing import Cache


def pod(rv: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": rv,
                         "labels": {"app": "a"}},
            "spec": {"schedulerName": "kai-scheduler"}}


def echo(rv: str) -> Obj:
    p = copy.deepcopy(pod(rv))
    p["metadata"]["annotations"] = {POD_GROUP_ANNOTATION: "pg"}
    p["metadata"]["labels"][SUBGROUP_LABEL] = "workers"
    return p


class SlowAnswer:
    """A client whose patch is answered only when the test says so (after it delivered the echo)."""

    def __init__(self) -> None:
        self.sent = asyncio.Event()
        self.answer = asyncio.Event()
        self.patches = 0

    async def merge_patch(self, path: str, patch: dict[str, Any], *, metadata_only: bool = False) -> Obj:
        self.patches += 1
        self.sent.set()
        await self.answer.wait()
        return echo("2")


def world() -> tuple[EventHandlers, WorkQueue[WorkloadKey], PodPatcher, SlowAnswer]:
    expectations = WriteExpectations()
    queue: WorkQueue[WorkloadKey] = WorkQueue()
    handlers = EventHandlers(cache=Cache([]), index=WorkloadIndex(), queue=queue, store=DecisionStore(),  # type: ignore[arg-type]
                             expectations=expectations, spawn=lambda c: c.close(), deleted=DeletedOwners(),
                             metrics=Metrics())
    client = SlowAnswer()
    patcher = PodPatcher(cast(KubeClient, client), expectations=expectations, cached=lambda ns, name: None)
    return handlers, queue, patcher, client


async def test_the_echo_of_a_patch_before_its_answer_queues_nothing() -> None:
    handlers, queue, patcher, client = world()
    patch = asyncio.create_task(patcher.ensure(pod("1"), "pg", "workers"))
    await client.sent.wait()
    handlers.on_pod(MODIFIED, echo("2"), pod("1"))  # the watch is first
    assert len(queue) == 0
    client.answer.set()
    assert await patch == "patched"
    assert not patcher.needed(echo("2"), "pg", "workers") and client.patches == 1


async def test_an_update_with_more_than_our_marks_is_still_news() -> None:
    handlers, queue, patcher, client = world()
    patch = asyncio.create_task(patcher.ensure(pod("1"), "pg", "workers"))
    await client.sent.wait()
    relabelled = echo("2")
    relabelled["metadata"]["labels"]["app"] = "b"  # someone else's edit in the same update
    handlers.on_pod(MODIFIED, relabelled, pod("1"))
    assert WorkloadKey.of_pod("ns", "p") in queue
    client.answer.set()
    await patch


async def test_once_answered_an_update_setting_the_marks_is_news_again() -> None:
    handlers, queue, patcher, client = world()
    client.answer.set()
    assert await patcher.ensure(pod("1"), "pg", "workers") == "patched"
    # not our patch's version (3, ours is 2): somebody else set the same marks on another copy
    handlers.on_pod(MODIFIED, echo("3"), pod("1"))
    assert WorkloadKey.of_pod("ns", "p") in queue
