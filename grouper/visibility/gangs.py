"""The gang state of every PodGroup, kept live (issue 39): derived level-triggered from the caches.

Watch events only mark a PodGroup *dirty* (its own event, or an event of a pod that names it); the
tracker's task recomputes the dirty ones in the event loop, at most ``batch`` per turn with a yield in
between, each from cached objects only (the PodGroup, its pods by the ``pod-group`` index) with the pure
:func:`grouper.core.gang_state.gang_state`. No API calls, never a pass over all pods.

- A state computed for the first time is *rebuilt* (no transition, nothing sent) when the PodGroup existed
  before the tracker started (a restart: admission comes from the scheduler's own record); a PodGroup created
  since starts from ``Grouping``, so a gang the scheduler admits before its first recompute (within the
  coalescing second) still counts its admission, its time to admission and its Event.
- A change of state is a transition: ``podgrouper_gang_transitions_total{from,to}``; the first admission
  observes the time to admission; and an Event on the workload (the PodGroup's owner, the top owner the
  grouper wrote there): ``GangAdmitted`` (Normal, the time to admission), ``GangDegraded`` (Warning, which
  minimum is unmet), ``GangRecovered`` (Normal, admitted again). One per transition; only the leader
  writes Events (the recorder checks), every replica keeps the states (metrics, API). A "gang" of one pod
  (a per-pod PodGroup, required 1) sends no Event: its admission is its pod's scheduling, which the pod's
  own Events already tell (a Deployment of 100 replicas would otherwise send 100 per rollout).
- A PodGroup deleted: its state goes.

The per-state gauges are read from :meth:`GangTracker.gang_samples` at scrape time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from grouper.core.gang_state import (
    GangSpecError,
    GangState,
    MemberPod,
    State,
    gang_of,
    gang_state,
    member,
    parse_time,
    worst,
)
from grouper.core.upstream import scheduling_group
from grouper.kube.cache import GPUS_FIELD, POD, POD_PODGROUP_INDEX, PODGROUP, ClusterCache
from grouper.kube.compact import Members, add_member, discard_member, members
from grouper.kube.discovery import Discovery
from grouper.kube.informer import DELETED
from grouper.model import objects as o
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import POD_GROUP_ANNOTATION, SUBGROUP_LABEL
from grouper.observability.metrics import GangSample, Metrics, WorkloadSample
from grouper.writer.events import EventRecorder, InvolvedObject
from grouper.writer.upstream import resolve_resources

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, PodGroup name)
Clock = Callable[[], datetime]



def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Owner:
    """The workload a PodGroup belongs to (its controlling owner reference: the top owner)."""

    api_version: str
    kind: str
    name: str
    uid: str


@dataclass(slots=True)
class Tracked:
    state: GangState
    owner: Owner | None


def _owner(pg: Obj) -> Owner | None:
    refs = o.owner_references(pg)
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if ref is None:
        return None
    return Owner(str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""), str(ref.get("name") or ""),
                 str(ref.get("uid") or ""))


SCHEDULING_GROUP_INDEX = "scheduling-group"  # pods by "<ns>/<upstream PodGroup>" (the upstream backend)


def kai_group_of(pod: Obj) -> str | None:
    """The KAI PodGroup a pod names (the grouper's ``pod-group-name`` annotation)."""
    name = ((pod.get("metadata") or {}).get("annotations") or {}).get(POD_GROUP_ANNOTATION)
    return str(name) if name else None


def scheduling_group_names(pod: Obj) -> list[str]:
    """Index values of a pod: ``<namespace>/<upstream PodGroup it joined>``."""
    name = scheduling_group(pod)
    return [f"{o.namespace(pod)}/{name}"] if name else []


def _held_reason(pod: Obj) -> Any:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == "PodScheduled":
            return c.get("status"), c.get("reason"), c.get("message")
    return None


def member_signature(pod: Obj) -> tuple[Any, ...]:
    """What the gang state reads of a pod: a pod update that leaves it equal changes no gang."""
    m = o.meta(pod)
    spec = pod.get("spec") or {}
    return (
        o.annotations(pod).get(POD_GROUP_ANNOTATION),
        scheduling_group(pod),
        o.labels(pod).get(SUBGROUP_LABEL),
        spec.get("nodeName"),
        spec.get(GPUS_FIELD),
        bool(m.get("deletionTimestamp")),
        _held_reason(pod),
    )


def _same_member(old: Obj, pod: Obj, old_meta: dict[str, Any], meta: dict[str, Any]) -> bool:
    """Whether a pod update leaves what the gang state reads as it was. Cached pods share equal spec and
    status parts (grouper.kube.cache), so the usual answer is two identity checks."""
    if (old.get("spec") is pod.get("spec") and old.get("status") is pod.get("status")
            and bool(old_meta.get("deletionTimestamp")) == bool(meta.get("deletionTimestamp"))
            and (old_meta.get("labels") or {}).get(SUBGROUP_LABEL) == (meta.get("labels") or {}).get(SUBGROUP_LABEL)):
        return True
    return member_signature(old) == member_signature(pod)


class GangTracker:
    def __init__(
        self,
        cache: ClusterCache,
        *,
        metrics: Metrics,
        recorder: EventRecorder | None = None,
        clock: Clock = utc_now,
        batch: int = 256,
        delay: float = 1.0,
        per_member: float = 0.005,
    ) -> None:
        self.cache, self.metrics, self.recorder, self.clock = cache, metrics, recorder, clock
        # which PodGroups, and how a pod names its own: KAI's (the pod-group-name annotation) unless
        # use_upstream switched to scheduling.k8s.io's (spec.schedulingGroup.podGroupName)
        self.pod_group_gvk: GVK = PODGROUP
        self.pod_index = POD_PODGROUP_INDEX
        self.group_of: Callable[[Obj], str | None] = kai_group_of
        self.batch = batch
        self.delay = delay  # seconds a wake-up waits, so the events of a burst cost one recompute
        # A recompute costs ~1.3 µs per member: a gang of more than 1 s / per_member members (200) is
        # recomputed at most once per (members x per_member) seconds (1,000 members: 5 s), so a big gang
        # growing for a minute costs a dozen recomputes, not sixty (docs/performance.md: the tracking's cost)
        self.per_member = per_member
        self._due: dict[Key, datetime] = {}  # big gangs recomputed lately: not again before this time
        self._deferred: dict[Key, None] = {}  # marked while not due yet
        self._deferred_timer: asyncio.TimerHandle | None = None
        self.states: dict[Key, Tracked] = {}
        # (namespace, owner uid) -> PodGroup names (compact: most workloads have one)
        self.by_owner: dict[tuple[str, str], Members[str]] = {}
        self._dirty: dict[Key, None] = {}  # insertion-ordered set
        self._wake = asyncio.Event()
        self._events: list[tuple[InvolvedObject, str, str, str]] = []
        # members of recently recomputed gangs, by pod name: (the cached pod object, its MemberPod)
        self._memo: dict[Key, dict[str, tuple[Obj, MemberPod | None]]] = {}
        self._memo_used: dict[Key, float] = {}
        self.memo_idle = 10.0  # seconds a gang's memo outlives its last recompute
        self.computed = 0  # PodGroups recomputed (for tests and the benchmark)
        self.started = clock()  # PodGroups created after this are new: their first state is a transition

    # ------------------------------------------------------------------ watch events (cheap: mark only)

    def use_upstream(self, gvk: GVK) -> None:
        """Track the upstream backend's PodGroups (``gvk``: the served version), pods by their
        ``spec.schedulingGroup`` (the controller indexes them by :func:`scheduling_group_names`)."""
        self.pod_group_gvk, self.pod_index, self.group_of = gvk, SCHEDULING_GROUP_INDEX, scheduling_group

    async def track_upstream(self, discovery: Discovery, timeout: float) -> None:
        """Watch the upstream backend's PodGroups (the version it writes) for their gang state; without them
        (not served, not readable) no gang state is shown, and grouping goes on."""
        try:
            _, res = await resolve_resources(discovery)
        except Exception as e:
            log.warning("gang state of upstream PodGroups not tracked: %s", e)
            return
        self.use_upstream(res.gvk)
        got = await self.cache.ensure(res.gvk, timeout=timeout)
        if got != "ready":
            log.warning("gang state of upstream PodGroups not tracked: cannot watch %s (%s)", res.gvk, got)

    def on_pod(self, etype: str, pod: Obj, old: Obj | None) -> None:
        meta = pod.get("metadata") or {}
        name = self.group_of(pod)
        old_meta = (old.get("metadata") or {}) if old is not None else {}
        old_name = self.group_of(old) if old is not None else None
        if not name and not old_name:
            return
        if etype != DELETED and name == old_name and old is not None and _same_member(old, pod, old_meta, meta):
            return
        ns, pod_name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if old_name and old_name != name:
            self._forget((ns, str(old_name)), pod_name)
        if name:
            key = (ns, str(name))
            memo = self._memo.get(key)
            if etype == DELETED:
                self._forget(key, pod_name)
            elif memo is not None:
                memo[pod_name] = (pod, None)
            self.mark(key)

    def _forget(self, key: Key, pod_name: str) -> None:
        memo = self._memo.get(key)
        if memo is not None:
            memo.pop(pod_name, None)
        self.mark(key)

    def on_pod_group(self, etype: str, pg: Obj, old: Obj | None) -> None:
        key = (o.namespace(pg), o.name(pg))
        if etype == DELETED:
            self._due.pop(key, None)  # its state goes at once, however big the gang was
        self.mark(key)

    def mark(self, key: Key) -> None:
        self._dirty[key] = None
        self._wake.set()

    def pending(self) -> int:
        return len(self._dirty)

    # ------------------------------------------------------------------ computing

    async def run(self) -> None:
        """Recompute dirty PodGroups for as long as the controller runs: ``batch`` at a time, yielding to
        the loop between batches, sending the Events of each batch before the next."""
        while True:
            await self._wake.wait()
            if self.delay > 0:
                await asyncio.sleep(self.delay)
            self._wake.clear()
            while self._dirty:
                try:
                    self.flush()
                    await self.send_events()
                except Exception:  # a bug in one computation must not end the tracking
                    log.exception("gang state computation failed")
                await asyncio.sleep(0)
            self.expire_memos(self.memo_idle)
            self._schedule_deferred()

    def _schedule_deferred(self) -> None:
        wait = self.release_due()
        if wait is not None and self._deferred_timer is None:
            def fire() -> None:
                self._deferred_timer = None
                self._schedule_deferred()

            self._deferred_timer = asyncio.get_running_loop().call_later(wait, fire)

    def flush(self, limit: int | None = None) -> int:
        """Recompute up to ``limit`` (default ``batch``) dirty PodGroups; how many were recomputed. A big gang
        recomputed lately waits until it is due (:meth:`release_due` brings it back)."""
        n = 0
        limit = self.batch if limit is None else limit
        now = self.clock() if self._due else None
        while self._dirty and n < limit:
            key = next(iter(self._dirty))
            del self._dirty[key]
            due = self._due.get(key)
            if due is not None and now is not None and due > now:
                self._deferred[key] = None
                continue
            self._compute(key)
            n += 1
        return n

    def release_due(self) -> float | None:
        """Mark again the deferred gangs that are due; seconds until the next one is (None: none left)."""
        if not self._deferred:
            return None
        now = self.clock()
        waiting: list[float] = []
        for key in list(self._deferred):
            due = self._due.get(key)
            if due is None or due <= now:
                del self._deferred[key]
                self._dirty[key] = None
            else:
                waiting.append((due - now).total_seconds())
        if self._dirty:
            self._wake.set()
        return min(waiting) if waiting else None

    async def send_events(self) -> None:
        events, self._events = self._events, []
        if self.recorder is None:
            return
        for obj, reason, message, etype in events:
            await self.recorder.warn(obj, message, reason, event_type=etype)

    def _compute(self, key: Key) -> None:
        self.computed += 1
        pgs = self.cache.informer(self.pod_group_gvk)
        pg = pgs.get(*key) if pgs is not None else None
        prev = self.states.get(key)
        if pg is not None and not self.cache.namespace_allowed(key[0]):
            pg = None  # --namespace-label-selector: another grouper's namespace, not this one's gangs
        if pg is None:
            self._memo.pop(key, None)
            self._memo_used.pop(key, None)
            self._due.pop(key, None)
            if prev is not None:
                self._drop(key, prev)
            return
        members = self._members(key)
        error = ""
        gang = None
        try:
            gang = gang_of(pg)
        except GangSpecError as e:
            error = str(e)
        owner = _owner(pg)
        now = self.clock()
        state = gang_state(gang, members, prev.state if prev is not None else None, now=now, error=error)
        interval = len(members) * self.per_member
        if interval > 1.0:
            self._due[key] = now + timedelta(seconds=interval)
        else:
            self._due.pop(key, None)
        if prev is None:
            self._index(key, owner)
        elif prev.owner != owner:
            self._unindex(key, prev.owner)
            self._index(key, owner)
        self.states[key] = Tracked(state, owner)
        before = prev.state if prev is not None else self._new_gang(pg, state)
        if before is not None and before.state != state.state:
            self._transition(key, owner, before, state)

    def _new_gang(self, pg: Obj, state: GangState) -> GangState | None:
        """The state a PodGroup created since the tracker started had before its first recompute: Grouping
        (None for one that existed before: rebuilt, no transition)."""
        created = parse_time(o.meta(pg).get("creationTimestamp"))
        if created is None or created <= self.started:
            return None
        return GangState(State.GROUPING, created, state.counts, queue=state.queue)

    def _members(self, key: Key) -> list[MemberPod]:
        """The gang's members. A busy gang (recomputed in the last ``memo_idle`` seconds) keeps its pods by
        name, kept up to date by :meth:`on_pod`, each with its ``MemberPod`` once computed (cached objects
        are replaced, never changed): a gang growing pod by pod in a burst costs a lookup per pod and
        recompute, not an index query and a parse. A gang without one is read from the pods' index."""
        memo = self._memo.get(key)
        if memo is None:
            pods_inf = self.cache.informer(POD)
            pods = pods_inf.by_index(self.pod_index, f"{key[0]}/{key[1]}") if pods_inf is not None else []
            memo = self._memo[key] = {str(o.meta(p).get("name") or ""): (p, None) for p in pods}
        self._memo_used[key] = time.monotonic()
        out = []
        for name, (p, m) in memo.items():
            if m is None:
                m = member(p, gpus=float((p.get("spec") or {}).get(GPUS_FIELD) or 0))
                memo[name] = (p, m)
            out.append(m)
        return out

    def expire_memos(self, idle: float) -> None:
        """Forget the members of gangs not recomputed for ``idle`` seconds (steady gangs cost no memory)."""
        cutoff = time.monotonic() - idle
        for key in [k for k, t in self._memo_used.items() if t < cutoff]:
            del self._memo_used[key]
            self._memo.pop(key, None)

    def _transition(self, key: Key, owner: Owner | None, before: GangState, after: GangState) -> None:
        self.metrics.child(self.metrics.gang_transitions, before.state.value, after.state.value).inc()
        reason, etype, message = "", "Normal", ""
        if after.state == State.ADMITTED and not before.ever_admitted:
            tta = after.time_to_admission
            if tta is not None:
                self.metrics.child(self.metrics.gang_time_to_admission, after.queue).observe(tta)
            reason = "GangAdmitted"
            message = (f"PodGroup {key[1]}: gang admitted, {after.counts.scheduled} of {after.counts.present} pods "
                       f"scheduled (minimum {after.counts.required})"
                       + (f", {tta:.0f}s after its first pod was created" if tta is not None else ""))
        elif after.state == State.ADMITTED:
            reason = "GangRecovered"
            message = (f"PodGroup {key[1]}: gang admitted again, {after.counts.scheduled} of "
                       f"{after.counts.present} pods scheduled (minimum {after.counts.required})")
        elif after.state == State.DEGRADED and before.state != State.DEGRADED:
            reason, etype = "GangDegraded", "Warning"
            message = f"PodGroup {key[1]}: gang below its minimum: {unmet(after)}"
        if reason and owner is not None and after.counts.required > 1:
            self._events.append((InvolvedObject(owner.api_version, owner.kind, key[0], owner.name, owner.uid),
                                 reason, message, etype))

    def _drop(self, key: Key, prev: Tracked) -> None:
        del self.states[key]
        self._unindex(key, prev.owner)

    def _index(self, key: Key, owner: Owner | None) -> None:
        if owner is not None:
            add_member(self.by_owner, (key[0], owner.uid), key[1])

    def _unindex(self, key: Key, owner: Owner | None) -> None:
        if owner is not None:
            discard_member(self.by_owner, (key[0], owner.uid), key[1])

    # ------------------------------------------------------------------ reads (API, metrics)

    def get(self, namespace: str, name: str) -> GangState | None:
        t = self.states.get((namespace, name))
        return t.state if t is not None else None

    def of_workload(self, namespace: str, uid: str) -> list[tuple[str, GangState]]:
        """The gang states of a workload's PodGroups (by the owner uid), by PodGroup name."""
        names = sorted(members(self.by_owner, (namespace, uid)))
        return [(n, self.states[(namespace, n)].state) for n in names if (namespace, n) in self.states]

    def gang_samples(self) -> Iterator[GangSample]:
        now = self.clock()
        for t in self.states.values():
            s = t.state
            yield GangSample(s.state.value, s.queue, s.counts.present, s.requested_gpus, s.seconds_in_state(now))

    def workload_samples(self) -> Iterator[WorkloadSample]:
        for ns, uid in list(self.by_owner):
            tracked = [self.states[(ns, n)] for n in sorted(members(self.by_owner, (ns, uid))) if (ns, n) in self.states]
            if not tracked or tracked[0].owner is None:
                continue
            state = worst(t.state.state for t in tracked)
            owner = tracked[0].owner
            yield WorkloadSample(ns, owner.kind, owner.name, tracked[0].state.queue, state.value if state else "")


def unmet(state: GangState) -> str:
    """Which minimums scheduled pods do not meet, in words (for the GangDegraded Event)."""
    parts = []
    if state.counts.scheduled < state.counts.required:
        parts.append(f"{state.counts.scheduled} of the {state.counts.required} pods it needs are scheduled")
    for sg in state.sub_groups:
        if not sg.satisfied:
            parts.append(f"sub-group {sg.name}: {sg.counts.scheduled} of {sg.counts.required} scheduled")
    return "; ".join(parts) or f"{state.counts.scheduled} of {state.counts.required} pods scheduled"


__all__ = ["GangTracker", "Owner", "member_signature", "unmet", "utc_now"]
