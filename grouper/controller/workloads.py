"""Work-queue keys and the indexes that map cluster objects to workloads.

A **workload** is a pod's top owner (or the pod itself when ownerless): the unit the queue carries,
so the N pods of one Job cost one reconcile. Indexes, all maintained by the controller's loop:

- pod → workload and workload → pods (from the owner walk on the cache, confirmed by each decision);
- dependency (:data:`grouper.kube.cache.Dependency`: an object's UID, or an object looked for and not
  found, or PodGroups asked for by name) → workloads that read it while deciding (owners, RayClusters,
  Revisions, ...), so a change to any of them re-evaluates exactly the workloads it can affect;
- PodGroup → workload, so a PodGroup changed or deleted by someone else is put right.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import NamedTuple

from grouper.controller.tuning import DEFAULT_TUNING
from grouper.kube.cache import Dependency
from grouper.kube.compact import Members, add_member, count, discard_member, has_member, members
from grouper.model.objects import GVK
from grouper.model.podgroup import OwnerRef

NsName = tuple[str, str]


class WorkloadKey(NamedTuple):
    """A tuple (hashed and compared in C: every pod event looks it up in several maps)."""

    namespace: str
    group: str
    kind: str
    name: str

    @classmethod
    def of_ref(cls, ref: OwnerRef, namespace: str) -> WorkloadKey:
        return cls(namespace, GVK.from_api_version(ref.api_version, ref.kind).group, ref.kind, ref.name)

    @classmethod
    def of_pod(cls, namespace: str, name: str) -> WorkloadKey:
        return cls(namespace, "", "Pod", name)

    def __str__(self) -> str:
        kind = f"{self.kind}.{self.group}" if self.group else self.kind
        return f"{kind} {self.namespace}/{self.name}"


class WorkloadIndex:
    """The maps above, compact: most entries have one member (a workload of one pod, a uid read by one
    workload), stored as the member itself (:mod:`grouper.kube.compact`); a workload's dependencies are
    a tuple. Pod keys and uids are the strings of the cached pods, not copies."""

    def __init__(self) -> None:
        self._pod_wl: dict[str, dict[str, WorkloadKey]] = {}  # namespace -> pod name -> workload
        # workload -> its pods: their names (the pod's namespace is the workload's), a key otherwise
        self._wl_pods: dict[WorkloadKey, Members[str | NsName]] = {}
        self._uid_wls: dict[Dependency, Members[WorkloadKey]] = {}
        self._wl_uids: dict[WorkloadKey, tuple[Dependency, ...]] = {}
        self._pg_wl: dict[NsName, WorkloadKey] = {}
        self._wl_pgs: dict[WorkloadKey, tuple[NsName, ...]] = {}
        # one key object per workload with pods (callers build a new equal one per event)
        self._keys: dict[WorkloadKey, WorkloadKey] = {}
        # workload -> pods routed to it, away from it or gone since its last pass took them (the pass looks
        # again at these only: :meth:`take_touched`); None: too many to list, the next pass looks at every pod
        self._touched: dict[WorkloadKey, set[NsName] | None] = {}

    # ------------------------------------------------------------------ pods

    @staticmethod
    def _member(pod: NsName, wl: WorkloadKey) -> str | NsName:
        return pod[1] if pod[0] == wl.namespace else pod

    def set_pod(self, pod: NsName, wl: WorkloadKey) -> WorkloadKey | None:
        """Map ``pod`` to ``wl``; returns the previous workload when it changed."""
        ns_pods = self._pod_wl.setdefault(pod[0], {})
        prev = ns_pods.get(pod[1])
        self.touch(wl, pod)
        if prev == wl:
            return None
        if prev is not None:
            self.touch(prev, pod)
            self._discard_pod(prev, pod)
        wl = self._keys.setdefault(wl, wl)
        ns_pods[pod[1]] = wl
        add_member(self._wl_pods, wl, self._member(pod, wl))
        return prev

    def remove_pod(self, pod: NsName) -> WorkloadKey | None:
        ns_pods = self._pod_wl.get(pod[0])
        wl = ns_pods.pop(pod[1], None) if ns_pods is not None else None
        if ns_pods is not None and not ns_pods:
            del self._pod_wl[pod[0]]
        if wl is not None:
            self.touch(wl, pod)
            self._discard_pod(wl, pod)
        return wl

    def touch(self, wl: WorkloadKey, pod: NsName) -> None:
        """The pod changed for ``wl`` (routed to it again, moved, gone, its decision owed a look).

        Bounded (a standby records and never takes them): past twice the workload's pods (+64), or once the
        workload has no pods left, the list becomes "every pod" (its next pass plans every pod, or forgets
        the workload)."""
        touched = self._touched.get(wl, ())
        if touched is None:
            return
        if not touched:
            touched = self._touched[wl] = set()
        touched.add(pod)
        if len(touched) > 2 * count(self._wl_pods, wl) + 64:
            self._touched[wl] = None

    def take_touched(self, wl: WorkloadKey) -> set[NsName] | None:
        """The pods touched for ``wl`` since the last call (for its pass); None: every pod."""
        return self._touched.pop(wl, set())

    def _discard_pod(self, wl: WorkloadKey, pod: NsName) -> None:
        discard_member(self._wl_pods, wl, self._member(pod, wl))
        if wl not in self._wl_pods:
            self._keys.pop(wl, None)
            self._touched[wl] = None  # no pods left: the pods gone are not listed, its next pass plans every pod

    def workload_of(self, pod: NsName) -> WorkloadKey | None:
        return self._pod_wl.get(pod[0], {}).get(pod[1])

    def pods_of(self, wl: WorkloadKey) -> set[NsName]:
        return {(wl.namespace, m) if isinstance(m, str) else m for m in members(self._wl_pods, wl)}

    def workloads(self) -> list[WorkloadKey]:
        return list(set(self._wl_pods) | set(self._wl_pgs))

    # ------------------------------------------------------------------ dependencies

    def set_dependencies(self, wl: WorkloadKey, uids: Iterable[Dependency]) -> None:
        new = {u for u in uids if u}
        old = set(self._wl_uids.get(wl, ()))
        if new == old:
            return
        for uid in old - new:
            discard_member(self._uid_wls, uid, wl)
        wl = self._keys.get(wl, wl)
        for uid in new - old:
            add_member(self._uid_wls, uid, wl)
        if new:
            self._wl_uids[wl] = tuple(new)
        else:
            self._wl_uids.pop(wl, None)

    def add_dependencies(self, wl: WorkloadKey, uids: Iterable[Dependency]) -> None:
        """Add to what ``wl`` reads (a pass that decided only some pods; the next full pass prunes). What it
        reads already is found in the reverse index (a pass costs its new reads, not all the workload's:
        a Job's pods each read a PodGroup name of their own)."""
        wl = self._keys.get(wl, wl)
        new = [u for u in dict.fromkeys(uids) if u and not has_member(self._uid_wls, u, wl)]
        if not new:
            return
        for uid in new:
            add_member(self._uid_wls, uid, wl)
        self._wl_uids[wl] = (*self._wl_uids.get(wl, ()), *new)

    def workloads_reading(self, uid: Dependency) -> set[WorkloadKey]:
        return set(members(self._uid_wls, uid))

    # ------------------------------------------------------------------ PodGroups

    def set_pod_groups(self, wl: WorkloadKey, pod_groups: Iterable[NsName]) -> set[NsName]:
        """Record the PodGroups ``wl`` wants; returns the ones it wanted before but no longer does."""
        new = set(pod_groups)
        old = set(self._wl_pgs.get(wl, ()))
        for pg in old - new:
            if self._pg_wl.get(pg) == wl:
                del self._pg_wl[pg]
        wl = self._keys.get(wl, wl)
        for pg in new:
            self._pg_wl[pg] = wl
        if new:
            self._wl_pgs[wl] = tuple(sorted(new))
        else:
            self._wl_pgs.pop(wl, None)
        return old - new

    def workload_of_pod_group(self, pg: NsName) -> WorkloadKey | None:
        return self._pg_wl.get(pg)

    def forget(self, wl: WorkloadKey) -> None:
        """Drop everything about a workload that has no pods left."""
        self.set_dependencies(wl, ())
        self.set_pod_groups(wl, ())
        for pod in self.pods_of(wl):
            ns_pods = self._pod_wl.get(pod[0])
            if ns_pods is not None and ns_pods.get(pod[1]) == wl:
                del ns_pods[pod[1]]
                if not ns_pods:
                    del self._pod_wl[pod[0]]
        self._wl_pods.pop(wl, None)
        self._keys.pop(wl, None)
        self._touched.pop(wl, None)

    def sizes(self) -> dict[str, int]:
        return {
            "pods": sum(len(v) for v in self._pod_wl.values()),
            "workloads": len(self.workloads()),
            "dependencies": len(self._uid_wls),
            "touched": sum(len(t) for t in self._touched.values() if t is not None),
        }


class DeletedOwners:
    """Owners whose DELETED event arrived moments ago: their orphaned pods are about to be garbage
    collected, so a missing owner is "wait" (no Warning Event), not an error."""

    def __init__(self, memory: float = DEFAULT_TUNING.deleted_owner_seconds, max_entries: int = 4096) -> None:
        self.memory, self.max_entries = memory, max_entries
        self._at: dict[str, float] = {}

    def note(self, uid: str) -> None:
        if not uid:
            return
        now = time.monotonic()
        if len(self._at) > self.max_entries:
            self._at = {u: t for u, t in self._at.items() if now - t < self.memory}
        self._at[uid] = now

    def recently(self, uid: str) -> bool:
        t = self._at.get(uid)
        return t is not None and time.monotonic() - t < self.memory
