"""The controller's tuning knobs, in one place (:class:`Tuning`).

These are not flags: the defaults are what every deployment runs, and what the benchmarks measured. A test
or a benchmark that needs another value passes its own ``Tuning`` (``ControllerSettings(tuning=...)``, or
the piece's constructor) instead of patching module constants. What stays a module constant elsewhere is
protocol, not tuning (index names, the reasons an owner counts as gone, the kube package's own limits).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Tuning:
    # ------------------------------------------------------------------ kept plans (controller/plans.py)
    kept_idle_seconds: float = 120.0
    """A workload's kept decisions and last plan not used for this long are dropped: memory grows with the
    workloads being reconciled, not with the cluster (``benchmarks/bench_memory.py``)."""
    settle_min_pods: int = 32
    """Workloads of fewer live pods keep no plan to start from: a pass over all of them costs less than what
    the plan would keep meanwhile (~3 KB a workload, ~450 B a pod at 7 pods a workload)."""

    # ------------------------------------------------------------------ waiting instead of failing
    young_pod_seconds: float = 10.0
    """A pod this young whose owner is not in the cache yet waits for the owner's watch event (usually just
    behind the pod's: two streams) instead of reporting a missing owner."""
    await_cache_seconds: float = 1.0
    """How soon such a young pod's workload is looked at again."""
    await_gc_seconds: float = 5.0
    """How soon a workload is looked at again whose pods' owner was just deleted (the garbage collector
    removes them next: no Warning Event)."""
    deleted_owner_seconds: float = 120.0
    """How long an owner's DELETED event counts as "just deleted" (``workloads.DeletedOwners``)."""
    not_leader_retry_seconds: float = 1.0
    """A pass that found the lease lost is queued again after this long, for whoever leads then."""
    routing_retry_seconds: float = 0.5
    """A WorkloadGroup's pass while pods still wait to be routed (their owner's kind being watched) comes
    back after this long."""

    coalesce_seconds: float = 0.05
    """A pass of a workload whose pod patches fly waits for them at most this long (``Reconciler._coalesce``)."""

    # ------------------------------------------------------------------ back-off (controller-runtime's)
    retry_base_seconds: float = 1.0
    """First delay of a failed workload's back-off (doubling per failure), and of starting an informer."""
    retry_max_seconds: float = 60.0
    """Cap of those back-offs (1 s … 60 s like upstream's podgrouper)."""

    # ------------------------------------------------------------------ sharing the event loop
    decide_chunk: int = 64
    """Native decisions of one workload between two yields to the event loop; also the pods of a Karta
    workload whose jq goes to the sandbox in one run."""
    route_chunk: int = 500
    """Pods routed (parked for their owner's kind, re-routed by a resync) between two yields."""
    resync_chunk: int = 500
    """Workloads queued by a resync between two yields (and below this many, queued at once)."""
    warm_up_chunk: int = 16
    """Workloads a standby decides ahead of leading between two yields."""


DEFAULT_TUNING = Tuning()

__all__ = ["DEFAULT_TUNING", "Tuning"]
