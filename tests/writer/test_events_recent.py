"""EventRecorder.recent: what the web view shows of a workload's Events — only those this recorder sent,
newest first, one per reason with its count; nothing for a standby or for an Event the API refused."""

from __future__ import annotations

import asyncio
from typing import Any

from grouper.kube.transport import ApiError
from grouper.writer.events import EventRecorder, InvolvedObject

JOB = InvolvedObject("batch/v1", "Job", "ml", "train", "u-train")
OTHER = InvolvedObject("batch/v1", "Job", "ml", "other", "u-other")


class Client:
    def __init__(self, refuse: bool = False) -> None:
        self.created: list[dict[str, Any]] = []
        self.refuse = refuse

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.refuse:
            raise ApiError(403, "Forbidden", "events is forbidden")
        self.created.append(body)
        return body

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return body


def test_recent_lists_the_events_sent_about_an_object_one_per_reason_with_counts() -> None:
    rec = EventRecorder(Client())  # type: ignore[arg-type]

    async def send() -> None:
        await rec.warn(JOB, "gang waiting", "GangDegraded")
        await rec.warn(JOB, "gang waiting", "GangDegraded")  # aggregated: count 2
        await rec.warn(JOB, "admitted in 12s", "GangAdmitted", event_type="Normal")
        await rec.warn(OTHER, "not mine", "GangAdmitted", event_type="Normal")

    asyncio.run(send())
    got = rec.recent(JOB.key)
    assert {(e.reason, e.type, e.message, e.count) for e in got} == {
        ("GangDegraded", "Warning", "gang waiting", 2), ("GangAdmitted", "Normal", "admitted in 12s", 1)}
    assert [e.last for e in got] == sorted((e.last for e in got), reverse=True), "newest first"
    assert rec.recent(JOB.key, limit=1) == got[:1]
    assert rec.recent("u-nobody") == []


def test_nothing_recent_when_the_event_was_refused_or_this_replica_is_a_standby() -> None:
    refused = EventRecorder(Client(refuse=True))  # type: ignore[arg-type]
    standby = EventRecorder(Client(), can_write=lambda: False)  # type: ignore[arg-type]

    async def send() -> None:
        await refused.warn(JOB, "gang waiting", "GangDegraded")
        await standby.warn(JOB, "gang waiting", "GangDegraded")

    asyncio.run(send())
    assert refused.recent(JOB.key) == [] and standby.recent(JOB.key) == []
