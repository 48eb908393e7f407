"""The pods a workload's next pass must look at again (``WorkloadIndex.touch``) are recorded by the event
handlers and taken only by the workload's pass. A standby runs the handlers and no passes, for as long as
another replica leads: what it records must stay bounded by the pods it caches, not grow with every pod
ever created."""

from __future__ import annotations

from grouper.controller.workloads import WorkloadIndex, WorkloadKey

WL = WorkloadKey("ns", "apps", "Deployment", "web")


def _churn(idx: WorkloadIndex, n: int, prefix: str = "p") -> None:
    for i in range(n):  # a pod created and deleted (a Deployment's rollout, a CronJob...), no pass between
        idx.set_pod(("ns", f"{prefix}{i}"), WL)
        idx.remove_pod(("ns", f"{prefix}{i}"))


def test_a_workload_with_no_pods_left_keeps_no_touched_pods() -> None:
    idx = WorkloadIndex()
    _churn(idx, 1000)
    assert idx.sizes()["touched"] == 0
    idx.set_pod(("ns", "back"), WL)  # a pod arrives before the pass: the pods gone since are not listed...
    assert idx.take_touched(WL) is None  # ...so its next pass plans every pod (or forgets the workload)


def test_the_touched_pods_of_a_live_workload_stay_bounded_and_then_mean_every_pod() -> None:
    idx = WorkloadIndex()
    idx.set_pod(("ns", "stays"), WL)
    _churn(idx, 1000)
    assert idx.sizes()["touched"] <= 2 * len(idx.pods_of(WL)) + 64
    assert idx.take_touched(WL) is None  # too many to list: the next pass plans every pod (the simple path)
    idx.set_pod(("ns", "new"), WL)
    assert idx.take_touched(WL) == {("ns", "new")}  # recorded afresh after that pass
