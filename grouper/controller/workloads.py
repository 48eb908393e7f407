"""Work-queue keys and the indexes that map cluster objects to workloads.

A **workload** is a pod's top owner (or the pod itself when ownerless): the unit the queue carries,
so the N pods of one Job cost one reconcile. Indexes, all maintained by the controller's loop:

- pod → workload and workload → pods (from the owner walk on the cache, confirmed by each decision);
- object UID → workloads that read it while deciding (owners, RayClusters, Revisions, ...), so a
  change to any of them re-evaluates exactly the workloads it can affect;
- PodGroup → workload, so a PodGroup changed or deleted by someone else is put right.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from grouper.model import objects as o
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import OwnerRef

NsName = tuple[str, str]


@dataclass(frozen=True, order=True)
class WorkloadKey:
    namespace: str
    group: str
    kind: str
    name: str

    @classmethod
    def of_ref(cls, ref: OwnerRef, namespace: str) -> WorkloadKey:
        return cls(namespace, GVK.from_api_version(ref.api_version, ref.kind).group, ref.kind, ref.name)

    @classmethod
    def of_obj(cls, obj: Obj) -> WorkloadKey:
        return cls(o.namespace(obj), GVK.of(obj).group, str(obj.get("kind") or ""), o.name(obj))

    @classmethod
    def of_pod(cls, namespace: str, name: str) -> WorkloadKey:
        return cls(namespace, "", "Pod", name)

    def __str__(self) -> str:
        kind = f"{self.kind}.{self.group}" if self.group else self.kind
        return f"{kind} {self.namespace}/{self.name}"


class WorkloadIndex:
    def __init__(self) -> None:
        self._pod_wl: dict[NsName, WorkloadKey] = {}
        self._wl_pods: dict[WorkloadKey, set[NsName]] = {}
        self._uid_wls: dict[str, set[WorkloadKey]] = {}
        self._wl_uids: dict[WorkloadKey, set[str]] = {}
        self._pg_wl: dict[NsName, WorkloadKey] = {}
        self._wl_pgs: dict[WorkloadKey, set[NsName]] = {}

    # ------------------------------------------------------------------ pods

    def set_pod(self, pod: NsName, wl: WorkloadKey) -> WorkloadKey | None:
        """Map ``pod`` to ``wl``; returns the previous workload when it changed."""
        prev = self._pod_wl.get(pod)
        if prev == wl:
            return None
        if prev is not None:
            self._discard_pod(prev, pod)
        self._pod_wl[pod] = wl
        self._wl_pods.setdefault(wl, set()).add(pod)
        return prev

    def remove_pod(self, pod: NsName) -> WorkloadKey | None:
        wl = self._pod_wl.pop(pod, None)
        if wl is not None:
            self._discard_pod(wl, pod)
        return wl

    def _discard_pod(self, wl: WorkloadKey, pod: NsName) -> None:
        pods = self._wl_pods.get(wl)
        if pods is not None:
            pods.discard(pod)
            if not pods:
                del self._wl_pods[wl]

    def workload_of(self, pod: NsName) -> WorkloadKey | None:
        return self._pod_wl.get(pod)

    def pods_of(self, wl: WorkloadKey) -> set[NsName]:
        return set(self._wl_pods.get(wl, ()))

    def workloads(self) -> list[WorkloadKey]:
        return list(set(self._wl_pods) | set(self._wl_pgs))

    # ------------------------------------------------------------------ dependencies

    def set_dependencies(self, wl: WorkloadKey, uids: Iterable[str]) -> None:
        new = {u for u in uids if u}
        old = self._wl_uids.get(wl, set())
        for uid in old - new:
            wls = self._uid_wls.get(uid)
            if wls is not None:
                wls.discard(wl)
                if not wls:
                    del self._uid_wls[uid]
        for uid in new - old:
            self._uid_wls.setdefault(uid, set()).add(wl)
        if new:
            self._wl_uids[wl] = new
        else:
            self._wl_uids.pop(wl, None)

    def add_dependencies(self, wl: WorkloadKey, uids: Iterable[str]) -> None:
        """Add to what ``wl`` reads (a pass that decided only some pods; the next full pass prunes)."""
        have = self._wl_uids.setdefault(wl, set())
        for uid in uids:
            if uid and uid not in have:
                have.add(uid)
                self._uid_wls.setdefault(uid, set()).add(wl)

    def workloads_reading(self, uid: str) -> set[WorkloadKey]:
        return set(self._uid_wls.get(uid, ()))

    # ------------------------------------------------------------------ PodGroups

    def set_pod_groups(self, wl: WorkloadKey, pod_groups: Iterable[NsName]) -> set[NsName]:
        """Record the PodGroups ``wl`` wants; returns the ones it wanted before but no longer does."""
        new = set(pod_groups)
        old = self._wl_pgs.get(wl, set())
        for pg in old - new:
            if self._pg_wl.get(pg) == wl:
                del self._pg_wl[pg]
        for pg in new:
            self._pg_wl[pg] = wl
        if new:
            self._wl_pgs[wl] = new
        else:
            self._wl_pgs.pop(wl, None)
        return old - new

    def workload_of_pod_group(self, pg: NsName) -> WorkloadKey | None:
        return self._pg_wl.get(pg)

    def forget(self, wl: WorkloadKey) -> None:
        """Drop everything about a workload that has no pods left."""
        self.set_dependencies(wl, ())
        self.set_pod_groups(wl, ())
        for pod in self._wl_pods.pop(wl, set()):
            self._pod_wl.pop(pod, None)

    def sizes(self) -> dict[str, int]:
        return {
            "pods": len(self._pod_wl),
            "workloads": len(self.workloads()),
            "dependencies": len(self._uid_wls),
        }


class DeletedOwners:
    """Owners whose DELETED event arrived moments ago: their orphaned pods are about to be garbage
    collected, so a missing owner is "wait" (no Warning Event), not an error."""

    def __init__(self, memory: float = 120.0, max_entries: int = 4096) -> None:
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
