"""What a workload's last reconcile decided, kept so the next one decides only what changed.

A pod's decision is a pure function of the pod and of the objects the decision read. The event handlers
know when one of those objects changes (the dependency index) and then :meth:`DecisionMemo.invalidate`
the workload; as long as that has not happened, a pod whose grouping-relevant fields are unchanged keeps
its decision, and a new pod of the workload is decided alone and placed into the PodGroups already
decided (the merge rule of :mod:`grouper.core.merge`: the newest pod's view of a PodGroup wins). So a
1,000-pod workload whose pods arrive one by one costs 1,000 decisions, not 1,000²/2, and a burst costs
one decision per pod however many reconciles it takes.

What is kept is small on purpose: per pod a signature hash and the names of its PodGroup and sub-group
(shared strings); per PodGroup one metadata object (the newest pod's view). Decisions that failed are
not kept (they are made again on the next reconcile, as before), nor are workloads whose decisions read
other pods (Deployment, Knative, MPI: a sibling's annotation is an input there), nor bare pods.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from grouper.controller.workloads import WorkloadKey
from grouper.model import objects as o
from grouper.model.objects import Obj
from grouper.model.podgroup import POD_GROUP_ANNOTATION, SUBGROUP_LABEL, OwnerRef, PodGroupMetadata

# Our own marks on the pod are the output of its decision, not an input to it.
_OWN_KEYS = (POD_GROUP_ANNOTATION, SUBGROUP_LABEL)


def _without_own(d: Any) -> Any:
    """Labels / annotations minus our two keys; absent and empty are the same (a pod we marked gains a
    map it did not have)."""
    if isinstance(d, dict) and any(k in d for k in _OWN_KEYS):
        d = {k: v for k, v in d.items() if k not in _OWN_KEYS}
    return d or None


def decision_signature(pod: Obj) -> int:
    """A hash of everything a pod's decision can read of the pod itself, minus the grouper's own marks."""
    meta = o.meta(pod)
    key = (
        o.uid(pod),
        _without_own(meta.get("labels")),
        _without_own(meta.get("annotations")),
        meta.get("ownerReferences"),
        meta.get("creationTimestamp"),
        bool(meta.get("deletionTimestamp")),
        pod.get("spec"),
        pod.get("status"),
    )
    return hash(orjson.dumps(key, option=orjson.OPT_SORT_KEYS))


def creation_key(pod: Obj) -> tuple[str, str]:
    """The merge order of pods: creation time, then name (as ``merge_pod_groups``)."""
    return str(o.meta(pod).get("creationTimestamp") or ""), o.name(pod)


class Member(NamedTuple):
    """A pod's place: its signature and, when grouped, the names of its PodGroup and sub-group. A tuple of
    atomic values: ~64 bytes, and untracked by the cyclic garbage collector."""

    signature: int
    pod_group: str | None
    sub_group: str | None
    version: str = ""  # the pod's resourceVersion when the signature was taken: unchanged pod, no hashing


@dataclass(slots=True)
class Group:
    """One decided PodGroup: the newest pod's view (``metadata``), that pod, and whether pods disagreed."""

    metadata: PodGroupMetadata
    newest: tuple[str, str]
    disagree: bool = False
    # (resourceVersion, member pods) once this view was written (or found) as it is and recorded; None: not yet
    written: tuple[str, tuple[str, ...]] | None = None
    members: set[str] = field(default_factory=set)  # names of the pods placed in it

    def offer(self, md: PodGroupMetadata, key: tuple[str, str]) -> None:
        """Another pod's view of this PodGroup: the newer view wins; a different spec is noted."""
        if not md.same_spec(self.metadata):
            self.disagree = True
        if key > self.newest:
            self.metadata, self.newest = md.for_keeping(), key
            self.written = None


@dataclass(slots=True)  # one per workload: no instance dict (~100-300 B each, most workloads are small)
class WorkloadMemo:
    plugin: str
    workload_ref: OwnerRef | None
    members: dict[str, Member] = field(default_factory=dict)  # pod name -> its place
    groups: dict[str, Group] = field(default_factory=dict)  # PodGroup name -> its view
    # The pods to look at on the next pass: those with a watch event since this pass began, whose decision
    # failed, or whose mark is not confirmed yet. Every other pod is as the memo has it, so a pass costs
    # O(pods in here), not O(pods of the workload).
    dirty: set[str] = field(default_factory=set)
    terminal: set[str] = field(default_factory=set)  # its pods that finished (counted, not decided)
    # uids of pods whose pass skipped deleting replaced PodGroups (per-pod ones are owned by pods): the
    # next pass that does it looks at their PodGroups too
    cleanup_owed: set[str] = field(default_factory=set)

    def place(self, name: str, member: Member) -> None:
        """Put ``name`` at ``member``'s place (its PodGroup's member set follows)."""
        self.unplace(name)
        self.members[name] = member
        if member.pod_group is not None:
            group = self.groups.get(member.pod_group)
            if group is not None:
                group.members.add(name)

    def unplace(self, name: str) -> Member | None:
        old = self.members.pop(name, None)
        if old is not None and old.pod_group is not None:
            group = self.groups.get(old.pod_group)
            if group is not None:
                group.members.discard(name)
        return old


IDLE_SECONDS = 120.0


class DecisionMemo:
    """The memos of all workloads. Written by the reconciler; invalidated by the event handlers and the
    resyncer whenever something a workload's decisions read changes (or may have changed).

    A memo pays off while its workload's pods arrive (a burst, a scale-up); a settled workload's next
    change is rare and costs one full pass, after which it is kept again. So a memo not used for
    ``idle_seconds`` is dropped: memory grows with the workloads being reconciled, not with the cluster
    (~300 B per pod of a memo, ``benchmarks/bench_memory.py``). Time-based, not a size cap: a cap smaller
    than the pods of the workloads active at once would drop memos still in use and re-decide whole
    workloads on every pass."""

    def __init__(self, idle_seconds: float = IDLE_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_seconds, self._clock = idle_seconds, clock
        # workload -> (its memo, when it was last used), least recently used first
        self._memos: OrderedDict[WorkloadKey, tuple[WorkloadMemo, float]] = OrderedDict()

    def get(self, wl: WorkloadKey) -> WorkloadMemo | None:
        entry = self._memos.get(wl)
        if entry is None:
            return None
        self.put(wl, entry[0])
        return entry[0]

    def put(self, wl: WorkloadKey, memo: WorkloadMemo) -> None:
        now = self._clock()
        self._memos[wl] = (memo, now)
        self._memos.move_to_end(wl)
        self.expire(now)

    def touch(self, wl: WorkloadKey, pod: str) -> None:
        """A watch event of ``pod`` of ``wl``: its next pass looks at it (not counted as a use)."""
        entry = self._memos.get(wl)
        if entry is not None:
            entry[0].dirty.add(pod)

    def made(self, wl: WorkloadKey, pod_group: str, owners: set[str]) -> bool:
        """Whether ``pod_group``, owned by ``owners``, is one the kept decisions of ``wl`` made."""
        entry = self._memos.get(wl)
        if entry is None:
            return False
        memo = entry[0]
        return memo.workload_ref is not None and memo.workload_ref.uid in owners and pod_group in memo.groups

    def invalidate(self, wl: WorkloadKey) -> None:
        self._memos.pop(wl, None)

    def expire(self, now: float | None = None) -> int:
        """Drop the memos idle for ``idle_seconds`` (O(1) per dropped memo); how many were dropped."""
        cutoff = (self._clock() if now is None else now) - self.idle_seconds
        dropped = 0
        while self._memos:
            wl, (_, used) = next(iter(self._memos.items()))
            if used > cutoff:
                break
            del self._memos[wl]
            dropped += 1
        return dropped

    def __len__(self) -> int:
        return len(self._memos)


__all__ = ["IDLE_SECONDS", "DecisionMemo", "Group", "Member", "WorkloadMemo", "creation_key", "decision_signature"]
