"""What people break, the grouper repairs — every time (each repair is repeated): a PodGroup deleted or
edited by hand, a pod's group annotation removed, its sub-group label changed. And another client
writing fields the grouper does not own is never overwritten (409s retried from fresh state)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube import Kube, wait_until

from faults.process import GrouperProcess
from faults.workloads import (
    ANNOTATION,
    PGS,
    PODS,
    SUBGROUP,
    create_jobs,
    create_pods,
    marks,
    pod_groups,
    pods,
    pods_of,
)

REPEAT = 5


@pytest.fixture
def grouper(fault_cluster: Any, token_file: Path, tmp_path: Path) -> Iterator[GrouperProcess]:
    with GrouperProcess(fault_cluster, token_file, tmp_path, identity="repairs") as g:
        g.wait_ready()
        yield g


def _grouped(kube: Kube, ns: str, count: int) -> list[dict[str, Any]] | None:
    ps = pods(kube, ns)
    return ps if len(ps) == count and all(marks(p)[0] for p in ps) else None


def test_every_hand_made_break_is_repaired_every_time(fkube: Kube, ns: str, grouper: GrouperProcess) -> None:
    job = create_jobs(fkube, ns, ["llm"], workers=3)[0]
    create_pods(fkube, ns, pods_of(job))
    ps = wait_until(lambda: _grouped(fkube, ns, 4), 30, what="pods grouped")
    pg_name = marks(ps[0])[0]
    assert pg_name is not None
    want = {p["metadata"]["name"]: marks(p) for p in ps}
    original = pod_groups(fkube, ns)[pg_name]
    took: dict[str, list[float]] = {"pg deleted": [], "pg edited": [], "annotation removed": [], "label changed": []}

    for _ in range(REPEAT):
        # a PodGroup deleted by hand ("reset a stuck gang") is re-created
        old_uid = pod_groups(fkube, ns)[pg_name]["metadata"]["uid"]
        t0 = time.monotonic()
        fkube.delete(f"{PGS.format(ns=ns)}/{pg_name}")
        wait_until(lambda old_uid=old_uid: (pg := pod_groups(fkube, ns).get(pg_name)) is not None
                   and pg["metadata"]["uid"] != old_uid, 15, what="the deleted PodGroup re-created")
        took["pg deleted"].append(time.monotonic() - t0)
        assert pod_groups(fkube, ns)[pg_name]["spec"] == original["spec"]

        # a PodGroup edited by hand (a field the grouper owns) is put back
        t0 = time.monotonic()
        fkube.patch(f"{PGS.format(ns=ns)}/{pg_name}", {"spec": {"minSubGroup": None, "minMember": 99}})
        wait_until(lambda: pod_groups(fkube, ns)[pg_name]["spec"] == original["spec"], 15,
                   what="the edited PodGroup restored")
        took["pg edited"].append(time.monotonic() - t0)

        # a pod's annotation removed, another pod's sub-group label changed
        victim, other = sorted(want)[0], sorted(want)[-1]
        t0 = time.monotonic()
        fkube.patch(f"{PODS.format(ns=ns)}/{victim}", {"metadata": {"annotations": {ANNOTATION: None}}})
        wait_until(lambda victim=victim: marks(fkube.get(f"{PODS.format(ns=ns)}/{victim}")) == want[victim], 15,
                   what="the removed annotation restored")
        took["annotation removed"].append(time.monotonic() - t0)
        t0 = time.monotonic()
        fkube.patch(f"{PODS.format(ns=ns)}/{other}", {"metadata": {"labels": {SUBGROUP: "bogus"}}})
        wait_until(lambda other=other: marks(fkube.get(f"{PODS.format(ns=ns)}/{other}")) == want[other], 15,
                   what="the changed sub-group label restored")
        took["label changed"].append(time.monotonic() - t0)

    assert {p["metadata"]["name"]: marks(p) for p in pods(fkube, ns)} == want
    assert list(pod_groups(fkube, ns)) == [pg_name], "never a second PodGroup"
    figures = ", ".join(f"{k} {max(v):.2f}s" for k, v in took.items())
    print(f"\n[measure] repair time, max of {REPEAT} each: {figures}")


def test_another_writer_keeps_its_fields_while_the_grouper_updates(
    fkube: Kube, ns: str, grouper: GrouperProcess
) -> None:
    """markUnschedulable belongs to the scheduler: the grouper's updates (here: the job is scaled) keep it."""
    job = create_jobs(fkube, ns, ["scaled"], workers=2)[0]
    create_pods(fkube, ns, pods_of(job))
    ps = wait_until(lambda: _grouped(fkube, ns, 3), 30, what="pods grouped")
    pg_name = marks(ps[0])[0]
    path = f"{PGS.format(ns=ns)}/{pg_name}"
    for n in range(3, 3 + REPEAT):
        # the other client writes first, then the workload changes so the grouper must update the PodGroup
        fkube.patch(path, {"spec": {"markUnschedulable": n % 2 == 0, "schedulingBackoff": n}})
        fkube.patch(f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs/scaled",
                    {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": n}}}})

        def converged(n: int = n) -> bool:
            spec = fkube.get(path)["spec"]
            workers = {s["name"]: s for s in spec.get("subGroups") or []}.get("worker", {})
            return workers.get("minMember") == n and spec.get("schedulingBackoff") == n

        wait_until(converged, 15, what=f"worker minMember {n} with the other client's fields kept")
        spec = fkube.get(path)["spec"]
        assert spec.get("markUnschedulable", False) == (n % 2 == 0)
