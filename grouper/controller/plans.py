"""The decisions each workload's last plan kept (:class:`grouper.core.workload_plan.Kept`), for its next.

Written by the reconciler (after each plan); dropped by :meth:`PlanCache.invalidate` when something the
decisions read other than the pods themselves changes (the event handlers, through the dependency index,
and the resyncer). A kept decision is only ever used for the very pod it was made for
(:func:`grouper.core.workload_plan.reusable`), so the cache can make a plan cheaper, never different — the
planning property test (``tests/controller/test_plan_property.py``) holds that in place.

Kept decisions pay while a workload's pods arrive (a burst, a scale-up); a settled workload's next change
is rare and costs one plan that decides every pod. So a workload's entry not used for ``idle_seconds`` is
dropped: memory grows with the workloads being reconciled, not with the cluster
(``benchmarks/bench_memory.py``). Time-based, not a size cap: a cap smaller than the pods of the workloads
active at once would drop entries still in use and re-decide whole workloads on every pass.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from grouper.controller.workloads import WorkloadKey
from grouper.core.workload_plan import Kept

IDLE_SECONDS = 120.0


class PlanCache:
    def __init__(self, idle_seconds: float = IDLE_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_seconds, self._clock = idle_seconds, clock
        # workload -> (its kept decisions by pod name, when last used), least recently used first
        self._kept: OrderedDict[WorkloadKey, tuple[dict[str, Kept], float]] = OrderedDict()

    def get(self, wl: WorkloadKey) -> dict[str, Kept] | None:
        entry = self._kept.get(wl)
        return entry[0] if entry is not None else None

    def put(self, wl: WorkloadKey, kept: dict[str, Kept]) -> None:
        if not kept:
            self._kept.pop(wl, None)
            return
        now = self._clock()
        self._kept[wl] = (kept, now)
        self._kept.move_to_end(wl)
        self.expire(now)

    def invalidate(self, wl: WorkloadKey) -> None:
        self._kept.pop(wl, None)

    def made(self, wl: WorkloadKey, pod_group: str, owners: set[str]) -> bool:
        """Whether ``pod_group``, owned by one of ``owners``, is one the kept decisions of ``wl`` made."""
        entry = self._kept.get(wl)
        if entry is None:
            return False
        return any(
            k.view is not None and k.view.name == pod_group and k.top_owner is not None and k.top_owner.uid in owners
            for k in entry[0].values()
        )

    def expire(self, now: float | None = None) -> int:
        """Drop the entries idle for ``idle_seconds`` (O(1) per dropped entry); how many were dropped."""
        cutoff = (self._clock() if now is None else now) - self.idle_seconds
        dropped = 0
        while self._kept:
            wl, (_, used) = next(iter(self._kept.items()))
            if used > cutoff:
                break
            del self._kept[wl]
            dropped += 1
        return dropped

    def __len__(self) -> int:
        return len(self._kept)


__all__ = ["IDLE_SECONDS", "PlanCache"]
