"""The gang state of a real PodGroup and real pods on the local API server, with the status written through
the status subresources the way KAI's scheduler writes it (tests/kai_status.py), pods bound through the
binding subresource: Grouping -> Waiting (KAI's reasons verbatim) -> Admitted -> Degraded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kai_status import (
    NOT_ENOUGH_RESOURCES,
    FitError,
    clear_scheduling_conditions,
    fit_errors_message,
    mark_unschedulable,
    pod_unschedulable,
    set_last_start,
    set_resources_status,
    write_pod_condition,
    write_status,
)
from kube import Kube

from grouper.core.gang_state import State, gang_state, kai_gang, member
from grouper.describe.resources import pod_request
from grouper.model.podgroup import SUBGROUP_LABEL

T0 = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)
GPU_MESSAGE = "2 node(s) didn't have enough resources: GPUs"


def _pod(name: str, sub_group: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {SUBGROUP_LABEL: sub_group}},
            "spec": {"schedulerName": "kai-scheduler", "containers": [
                {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}


def test_kai_status_round_trip_through_the_api_server(kube: Kube, namespace: str) -> None:
    pg_path = f"/apis/scheduling.run.ai/v2alpha2/namespaces/{namespace}/podgroups/pg-train"
    kube.create(f"/apis/scheduling.run.ai/v2alpha2/namespaces/{namespace}/podgroups", {
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "pg-train"},
        "spec": {"minSubGroup": 2, "queue": "team-a", "subGroups": [
            {"name": "leader", "minMember": 1}, {"name": "worker", "minMember": 2}]}})
    pods_path = f"/api/v1/namespaces/{namespace}/pods"

    def state(prev: Any, minutes: float) -> Any:
        pods = kube.get(pods_path)["items"]
        members = [member(p, gpus=pod_request(p["spec"]).gpus) for p in pods]
        return gang_state(kai_gang(kube.get(pg_path)), members, prev, now=T0 + timedelta(minutes=minutes))

    kube.create(pods_path, _pod("leader-0", "leader"))
    kube.create(pods_path, _pod("worker-0", "worker"))
    s = state(None, 1)
    assert (s.state, s.counts.required, s.counts.present) == (State.GROUPING, 3, 2)

    kube.create(pods_path, _pod("worker-1", "worker"))
    pg = kube.get(pg_path)
    errors = [FitError(NOT_ENOUGH_RESOURCES, [GPU_MESSAGE])]
    assert mark_unschedulable(pg, errors, now=T0 + timedelta(minutes=2))
    set_resources_status(pg, requested={"nvidia.com/gpu": "6"})
    write_status(kube, pg_path, pg)
    message = fit_errors_message(errors)
    for p in kube.get(pods_path)["items"]:
        write_pod_condition(kube, f"{pods_path}/{p['metadata']['name']}",
                            pod_unschedulable(p, message, now=T0 + timedelta(minutes=2)))
    s = state(s, 2)
    assert (s.state, s.requested_gpus) == (State.WAITING, 6)
    assert [(r.source, r.reason, r.message) for r in s.reasons] == [
        ("PodGroup", NOT_ENOUGH_RESOURCES, GPU_MESSAGE),
        ("Pod", "Unschedulable", message)]
    assert s.reasons[1].pods == ("leader-0", "worker-0", "worker-1")
    stored = kube.get(pg_path)["status"]
    assert stored["schedulingConditions"][0]["transitionID"] == "1"
    assert stored["resourcesStatus"] == {"requested": {"nvidia.com/gpu": "6"}}

    for name in ("leader-0", "worker-0", "worker-1"):
        kube.create(f"{pods_path}/{name}/binding", {"apiVersion": "v1", "kind": "Binding",
                                                    "metadata": {"name": name},
                                                    "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}})
    pg = kube.get(pg_path)
    clear_scheduling_conditions(pg)
    set_last_start(pg, T0 + timedelta(minutes=3))
    write_status(kube, pg_path, pg)
    s = state(s, 3)
    assert (s.state, s.admitted_at, s.reasons) == (State.ADMITTED, T0 + timedelta(minutes=3), ())
    by = {sg.name: sg.counts for sg in s.sub_groups}
    assert (by["worker"].required, by["worker"].present, by["worker"].scheduled) == (2, 2, 2)

    kube.delete(f"{pods_path}/worker-1")  # no kubelet: the pod goes at once
    s = state(s, 4)
    assert (s.state, s.counts.scheduled) == (State.DEGRADED, 2)
    # after a restart (no previous state) the scheduler's annotation still says it was admitted
    assert state(None, 5).state is State.DEGRADED
