"""The decisions each workload's last plan kept (:class:`grouper.core.workload_plan.Kept`), for its next.

Written by the reconciler (after each plan); dropped by :meth:`PlanCache.invalidate` when something the
decisions read other than the pods themselves changes (the event handlers, through the dependency index,
and the resyncer). A kept decision is only ever used for the very pod it was made for
(:func:`grouper.core.workload_plan.reusable`), so the cache can make a plan cheaper, never different — the
planning property test (``tests/controller/test_plan_property.py``) holds that in place.

An entry also holds the last plan a pass carried out in full (no error, nothing held or waiting, at least
``Tuning.settle_min_pods`` pods: :meth:`PlanCache.settle`): the next pass starts from it and looks again only
at the pods whose events reached it (:func:`grouper.core.workload_plan.update`), so a pass costs what changed,
not the workload. A pass takes it (:meth:`PlanCache.take_last`), so a pass cut short leaves the next one to
plan every pod; so do a PodGroup changed by someone else, a resync's check (:meth:`PlanCache.unsettle`) and
anything that drops the decisions.

And it holds the workload context of the pass that kept them (:class:`grouper.core.workload_context.WorkloadContext`:
owner chains, each plugin's per-workload part, the PodGroup rules' answers), in which the next pass decides its
new pods: made from what those decisions read, it goes with them. While a large workload's pods arrive one or
two per pass, this keeps a pass from walking the chain, building a JobSet's sub-groups and running a Karta root
again for each pod (docs/performance.md: the burst into 1,000-pod workloads).

An entry not used for ``Tuning.kept_idle_seconds`` is dropped (kept decisions pay while a workload's pods
arrive; a settled workload's next change is rare and costs one plan of every pod): memory grows with the
workloads being reconciled, not with the cluster (``benchmarks/bench_memory.py``). Time-based, not a size cap:
a cap smaller than the pods of the workloads active at once would re-decide whole workloads on every pass.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace

from grouper.controller.tuning import DEFAULT_TUNING
from grouper.controller.workloads import WorkloadKey
from grouper.core.workload_context import WorkloadContext
from grouper.core.workload_plan import Kept, WorkloadPlan
from grouper.model.objects import Obj

UNSEEN: Obj = {}  # a pod of a settled plan: not looked at since (read it from the cache)


class _Entry:
    __slots__ = ("context", "kept", "last", "used")

    def __init__(self, kept: dict[str, Kept], used: float, context: WorkloadContext | None) -> None:
        self.kept, self.used, self.context = kept, used, context
        self.last: tuple[WorkloadPlan, frozenset[str]] | None = None  # the last plan carried out, its terminal pods


class PlanCache:
    def __init__(
        self, idle_seconds: float = DEFAULT_TUNING.kept_idle_seconds, clock: Callable[[], float] = time.monotonic,
        settle_min_pods: int = DEFAULT_TUNING.settle_min_pods,
    ) -> None:
        self.idle_seconds, self._clock, self.settle_min_pods = idle_seconds, clock, settle_min_pods
        # workload -> (its kept decisions by pod name, when last used), least recently used first
        self._kept: OrderedDict[WorkloadKey, _Entry] = OrderedDict()

    def get(self, wl: WorkloadKey) -> dict[str, Kept] | None:
        entry = self._kept.get(wl)
        return entry.kept if entry is not None else None

    def settle(self, wl: WorkloadKey, plan: WorkloadPlan, terminal: frozenset[str]) -> None:
        """``plan`` was carried out in full: the next pass may start from it (if its decisions are still
        the kept ones: nothing dropped them meanwhile) and it has ``settle_min_pods`` pods."""
        entry = self._kept.get(wl)
        if entry is not None and entry.kept is plan.kept and len(plan.pods) >= self.settle_min_pods:
            # the pods by name only (UNSEEN): a settled plan must not hold on to pod objects the cache replaced.
            # A plan updated from the last one holds only the pods it looked at (its own dict: the pass is over)
            pods = dict.fromkeys(plan.pods, UNSEEN) if plan.looked_at is None else plan.pods
            pods.update((n, UNSEEN) for n in plan.looked_at or () if n in pods)
            entry.last = (replace(plan, pods=pods, decided=[], looked_at=None, merged=None, rewritten=None, context=None), terminal)

    def take_last(self, wl: WorkloadKey) -> tuple[WorkloadPlan, frozenset[str]] | None:
        """The last plan carried out and its terminal pods, taken (the pass that takes it settles anew)."""
        entry = self._kept.get(wl)
        if entry is None:
            return None
        last, entry.last = entry.last, None
        return last

    def unsettle(self, wl: WorkloadKey) -> None:
        """The next pass plans every pod (with the kept decisions): the stored objects may differ from it."""
        entry = self._kept.get(wl)
        if entry is not None:
            entry.last = None

    def context(self, wl: WorkloadKey) -> WorkloadContext | None:
        """The workload context of the pass that kept the decisions (see the module doc), or None."""
        entry = self._kept.get(wl)
        return entry.context if entry is not None else None

    def put(self, wl: WorkloadKey, kept: dict[str, Kept], context: WorkloadContext | None = None) -> None:
        """Keep ``kept`` and the pass's ``context``, if it saw the cache as it is now (module doc)."""
        if not kept:
            self._kept.pop(wl, None)
            return
        now = self._clock()
        self._kept[wl] = _Entry(kept, now, context)
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
            for k in entry.kept.values()
        )

    def expire(self, now: float | None = None) -> int:
        """Drop the entries idle for ``idle_seconds`` (O(1) per dropped entry); how many were dropped."""
        cutoff = (self._clock() if now is None else now) - self.idle_seconds
        dropped = 0
        while self._kept:
            wl, entry = next(iter(self._kept.items()))
            if entry.used > cutoff:
                break
            del self._kept[wl]
            dropped += 1
        return dropped

    def __len__(self) -> int:
        return len(self._kept)


__all__ = ["UNSEEN", "PlanCache"]
