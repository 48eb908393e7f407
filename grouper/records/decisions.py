"""What the controller decided and did, per pod, per PodGroup and per workload — for the HTTP API.

Reads return the typed, frozen records of :mod:`grouper.records.typed`; bounded by the cluster: records
are dropped when their pod or workload disappears. Errors keep their time so ``/podgroups`` can say
"failing since".

Built so that no read costs O(cluster) on the event loop and a cached pod costs little memory
(``benchmarks/bench_memory.py``):

- a pod's record is stored **compactly** (:class:`_PodRecord`, a few slots): only what differs per pod
  (outcome, reason, a message template, PodGroup, sub-group, times, the patch result); what the pods of
  a workload share — plugin, definition, top owner, owner chain, provenance, notes — is stored once per
  distinct value (:class:`_Shared`, reference-counted: the 1,000 pods of a JobSet hold its owner chain
  once per Job), with the texts every workload of a kind repeats stored once for all. A read builds the
  :class:`~grouper.records.typed.PodRecord` (:meth:`DecisionStore._render`), the shared part once per
  read for all the pods that share it;
- a PodGroup's record is its :class:`~grouper.records.typed.PodGroupRecord` itself, the desired object
  as JSON bytes;
- records are **copy-on-write**: a write replaces a record, never changes one in place;
- indexes by namespace, by PodGroup (its pods) and of failing pods answer the API's questions directly,
  and :meth:`DecisionStore.pod_names_of_group` lets a listing page over names before it renders.

Only the controller's event loop writes.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from grouper.core.decision import Decision
from grouper.kube.compact import Interner, Members, add_member, discard_member, members
from grouper.model.podgroup import OwnerRef
from grouper.records.typed import (
    PATCH_FAILED,
    POD_GROUP_NOT_WRITTEN,
    POD_NOT_MARKED,
    DefinitionUsed,
    Patch,
    PodGroupRecord,
    PodRecord,
    WorkloadPart,
    WorkloadRecord,
    pack,
)

_last_clock = [0.0]


def _clock() -> float:
    """``time.time()`` at millisecond resolution, as one float object per millisecond: the records of a
    reconcile's pods, written in one pass, share it instead of holding a float (24 bytes) each."""
    now = time.time()
    last = _last_clock[0]
    if 0.0 <= now - last < 0.001:
        return last
    _last_clock[0] = now
    return now


PodKey = tuple[str, str]
_SharedKey = tuple[Any, ...]
_HOLE = "\x00"  # stands for the top owner's "Kind namespace/name" in shared provenance texts
# texts the shared parts of every workload repeat once the workload's own name is taken out: a few hundred
# distinct ones; the rest name something of one workload (a Job, a replica count) and only pass through
# (the soak meets 8 new ones a second: at 4,096 the table starts over every ~9 minutes, not every ~35)
_TEXTS = Interner(4096)
_KEEP: Any = object()  # record_workload: a field not given keeps its value


def _shared_inputs(d: Decision) -> tuple[Any, ...]:
    """Everything of a decision :meth:`_Shared.key_of` reads besides the workload, as copies (equal inputs
    and workload give an equal key)."""
    prov = d.pod_group.provenance if d.pod_group else None
    return (d.pod_namespace, d.plugin, d.definition, d.definition_origin, d.top_owner, tuple(d.owner_chain),
            dict(prov) if prov else None, tuple(d.notes))


class _Shared:
    """What the pods of a workload share of a ``Decision`` — plugin, definition, top owner, owner chain,
    provenance, notes — compact: the provenance and notes as texts with the top owner's description
    taken out (``label kai.scheduler/queue on \x00``): those are the same for every workload of a kind, so
    they (and the tuple of them) are stored once (:data:`_TEXTS`). ``key`` is the workload and all of it,
    so equal parts are found by hashing; ``refs`` counts the pod records that use it."""

    __slots__ = ("key", "refs")

    def __init__(self, key: _SharedKey) -> None:
        self.key, self.refs = key, 0

    @property
    def workload(self) -> str:
        return str(self.key[0])

    @staticmethod
    def key_of(d: Decision, workload: str) -> _SharedKey:
        top = d.top_owner
        desc = _describe(top, d.pod_namespace)
        prov = d.pod_group.provenance if d.pod_group else {}
        texts = [*prov.values(), *d.notes]
        if not desc or any(_HOLE in t for t in texts):
            desc = ""  # nothing to take out (or a text holds the placeholder itself): kept as they are
        hole = (lambda t: _TEXTS(t.replace(desc, _HOLE))) if desc else _TEXTS
        # plain tuples (the OwnerRefs of the part a read builds are made then)
        chain = tuple(tuple(r) for r in d.owner_chain)
        top_ref = tuple(top) if top is not None else None
        if top_ref is not None and chain and chain[-1] == top_ref:
            top_ref = chain[-1]  # the same tuple object
        return (
            workload,
            d.plugin,
            _TEXTS(DefinitionUsed(d.definition, d.definition_origin or "")) if d.definition else None,
            top_ref,
            chain,
            bool(desc),
            _TEXTS(tuple(x for k, v in prov.items() for x in (_TEXTS(k), hole(v)))),
            _TEXTS(tuple(hole(n) for n in d.notes)),
        )

    def part(self, namespace: str) -> WorkloadPart:
        workload, plugin, definition, top_ref, chain, holes, prov, notes = self.key
        top = OwnerRef(*top_ref) if top_ref is not None else None
        desc = _describe(top, namespace) if holes else ""

        def fill(t: str) -> str:
            return t.replace(_HOLE, desc) if desc else t

        return WorkloadPart(
            workload=workload,
            plugin=plugin,
            definition=definition,
            top_owner=top,
            owner_chain=tuple(OwnerRef(*r) for r in chain),
            provenance=tuple((prov[i], fill(prov[i + 1])) for i in range(0, len(prov), 2)),
            notes=tuple(fill(n) for n in notes),
        )


_PG, _SG = "\x01", "\x02"  # stand for the pod's PodGroup and sub-group in a message template
# workload keys, PodGroup and sub-group names: the pods of a workload repeat them, recorded close together.
# Small, so that under churn (new names every second) it is full and starting over within minutes, not
# growing for an hour (the soak's RSS slope, benchmarks/bench_soak.py)
_NAMES = Interner(8192)


def _message_template(message: str, pod_group: str | None, sub_group: str | None) -> str | tuple[str]:
    """``PodGroup pg-…, sub-group …`` with the pod's own PodGroup and sub-group taken out, as a 1-tuple
    from :data:`_TEXTS` (the same few texts for every workload), or the message itself when it names
    neither (or holds a placeholder character itself)."""
    if not message or any(c in message for c in (_PG, _SG)):
        return message
    names = [(n, ph) for n, ph in ((pod_group, _PG), (sub_group, _SG)) if n and _PG not in n and _SG not in n]
    text = message
    for name, ph in names:
        text = text.replace(name, ph)
    return _TEXTS((text,)) if text != message else message


def _message(stored: str | tuple[str], pod_group: str | None, sub_group: str | None) -> str:
    if isinstance(stored, str):
        return stored
    return stored[0].replace(_PG, pod_group or "").replace(_SG, sub_group or "")


def _describe(top: OwnerRef | None, namespace: str) -> str:
    """How the texts name the top owner (``describe``: ``Kind namespace/name``)."""
    return f"{top.kind} {namespace}/{top.name}" if top is not None and top.kind and top.name else ""


class _PodRecord:
    """A pod's record, compact; :meth:`DecisionStore._render` gives the :class:`PodRecord` reads return.

    ``shared`` is None for a pod that has no decision yet (only an error was recorded for it)."""

    __slots__ = (
        "decided_at",
        "error",
        "message",
        "outcome",
        "patched",
        "patched_at",
        "pod_group",
        "reason",
        "shared",
        "sub_group",
        "uid",
    )

    def __init__(self) -> None:
        self.uid = ""
        self.outcome: str | None = None
        self.reason = ""
        self.message: str | tuple[str] = ""  # a 1-tuple: a template of :func:`_message_template`
        self.pod_group: str | None = None
        self.sub_group: str | None = None
        self.shared: _Shared | None = None
        self.decided_at: float | None = None
        # the last error and its time together: most pods have none, so one slot (8 bytes a pod) not two
        self.error: tuple[str, float] | None = None
        self.patched: str | None = None
        self.patched_at: float | None = None

    def copy(self) -> _PodRecord:
        new = _PodRecord()
        for slot in _PodRecord.__slots__:
            setattr(new, slot, getattr(self, slot))
        return new


Parts = dict[_Shared, WorkloadPart]  # the shared parts one read built, so the pods that share one build it once


class DecisionStore:
    def __init__(self, pod_exists: Callable[[str, str], bool] | None = None) -> None:
        """``pod_exists(namespace, name)``: whether the pod is still cached (the composition root gives the pod
        informer's). A pass decides from the cache and records afterwards; a pod whose delete was seen in
        between (its record forgotten then) is not recorded again, or its record would outlive it for good."""
        self.pod_exists = pod_exists
        self._pods: dict[str, dict[str, _PodRecord]] = {}  # namespace -> pod name -> record
        self._pod_groups: dict[str, dict[str, PodGroupRecord]] = {}  # namespace -> PodGroup name -> record
        self._group_pods: dict[PodKey, Members[str]] = {}  # (namespace, PodGroup) -> pod names deciding for it
        self._failing: dict[str, set[str]] = {}  # namespace -> pods whose latest decision failed
        self._workloads: dict[str, WorkloadRecord] = {}
        self._shared: dict[_SharedKey, _Shared] = {}  # (workload, …) -> shared part
        self._last_shared: tuple[str, tuple[Any, ...], _Shared] | None = None  # workload, its inputs, the part
        self.updated = time.monotonic()

    # ------------------------------------------------------------------ writes (controller)

    def _put_pod(self, namespace: str, name: str, rec: _PodRecord) -> None:
        old = self._pods.get(namespace, {}).get(name)
        if rec.shared is not None:
            rec.shared.refs += 1  # before the old record lets go of it: they often share it
        if old is not None:
            if old.pod_group:
                self._unlink(namespace, old.pod_group, name)
            self._release(old.shared)
        self._pods.setdefault(namespace, {})[name] = rec
        if rec.pod_group:
            add_member(self._group_pods, (namespace, rec.pod_group), name)
        self._mark_failing(namespace, name, rec)

    def _mark_failing(self, namespace: str, name: str, rec: _PodRecord) -> None:
        """Keep the failing pods (a failed decision or a refused patch) in step with ``rec``, just stored."""
        failing = self._failing.setdefault(namespace, set())
        if rec.outcome == "error" or rec.patched == PATCH_FAILED:
            failing.add(name)
        else:
            failing.discard(name)
        self.updated = time.monotonic()

    def _release(self, shared: _Shared | None) -> None:
        if shared is None:
            return
        shared.refs -= 1
        if shared.refs <= 0 and self._shared.get(shared.key) is shared:
            del self._shared[shared.key]

    def _unlink(self, namespace: str, pod_group: str, pod: str) -> None:
        discard_member(self._group_pods, (namespace, pod_group), pod)

    def _share(self, workload: str, d: Decision) -> _Shared:
        # A workload's pods are recorded one after the other and most share every input of the key: comparing
        # them with the last decision's is cheaper than building the key (each provenance text with the top
        # owner taken out, interned): docs/performance.md, "decision records"
        inputs = _shared_inputs(d)
        last = self._last_shared
        if last is not None and last[0] is workload and last[1] == inputs:
            shared = last[2]
            if shared.refs <= 0:  # released since (its pods are gone): back into the table, or its equal
                shared = self._shared.setdefault(shared.key, shared)
        else:
            key = _Shared.key_of(d, workload)
            found = self._shared.get(key)
            shared = found if found is not None else self._shared.setdefault(key, _Shared(key))
        self._last_shared = (workload, inputs, shared)
        return shared

    def _gone(self, namespace: str, name: str) -> bool:
        return self.pod_exists is not None and not self.pod_exists(namespace, name)

    def record_decision(self, d: Decision, workload: str) -> None:
        if self._gone(d.pod_namespace, d.pod_name):
            return
        workload = _NAMES(workload)  # callers build the key's string anew for every pod
        old = self._pods.get(d.pod_namespace, {}).get(d.pod_name)
        rec = _PodRecord()
        rec.uid, rec.outcome, rec.reason = d.pod_uid, d.outcome, d.reason
        rec.pod_group = _NAMES(d.pod_group.name) if d.pod_group else None  # repeated by the workload's pods
        rec.sub_group = _NAMES(d.sub_group) if d.sub_group is not None else None
        rec.message = _message_template(d.message, rec.pod_group, rec.sub_group)
        rec.shared = self._share(workload, d)
        rec.decided_at = _clock()
        if old is not None:
            rec.error = old.error
            rec.patched, rec.patched_at = old.patched, old.patched_at
        if d.outcome == "error":
            rec.error = (d.message, rec.decided_at)
        self._put_pod(d.pod_namespace, d.pod_name, rec)

    def record_pod_error(self, namespace: str, name: str, message: str) -> None:
        if self._gone(namespace, name):
            return
        old = self._pods.get(namespace, {}).get(name)
        rec = old.copy() if old is not None else _PodRecord()
        rec.error = (message, _clock())
        self._put_pod(namespace, name, rec)

    def record_pod_patch_failed(self, namespace: str, name: str, message: str) -> None:
        """The pod could not be marked: its record says ``failed`` with ``message`` until a patch succeeds."""
        if self._gone(namespace, name):
            return
        old = self._pods.get(namespace, {}).get(name)
        rec = old.copy() if old is not None else _PodRecord()
        now = _clock()
        rec.error = (message, now)
        rec.patched, rec.patched_at = PATCH_FAILED, now
        self._put_pod(namespace, name, rec)

    def record_pod_patched(self, namespace: str, name: str, result: str) -> None:
        rec = self._pods.get(namespace, {}).get(name)
        if rec is None:
            return
        # Every pod's patch lands here once: only the patch fields change, so the record is updated in place
        # (its PodGroup link and shared part stay; :meth:`_put_pod` would unlink and link them again).
        rec.patched, rec.patched_at = result, _clock()
        self._mark_failing(namespace, name, rec)

    def record_pod_group_members(self, namespace: str, name: str, pods: list[str], newest: str) -> None:
        """A PodGroup that only gained pods since its last record (its object unchanged, not written again):
        its record lists them. Without a record (forgotten meanwhile) nothing is recorded: the next pass that
        writes it records it."""
        old = self._pod_groups.get(namespace, {}).get(name)
        if old is None:
            return
        self._pod_groups[namespace][name] = replace(
            old, pods=tuple(pods), newest=_NAMES(newest) if newest else "", reconciled_at=_clock()
        )
        self.updated = time.monotonic()

    def record_pod_group(
        self,
        namespace: str,
        name: str,
        *,
        workload: str,
        desired: dict[str, Any] | None,
        operation: str | None,
        pods: list[str],
        notes: list[str],
        error: str | None = None,
        stored: bool = True,
        newest: str = "",
    ) -> None:
        """``stored``: whether the PodGroup exists in the cluster (False: its create was refused); ``newest``:
        the pod whose view of it was written."""
        old = self._pod_groups.get(namespace, {}).get(name)
        now = _clock()
        self._pod_groups.setdefault(namespace, {})[name] = PodGroupRecord(
            namespace, name, _NAMES(workload), pack(desired), tuple(pods), tuple(notes),
            last_operation=operation if operation else (old.last_operation if old else None),
            write_at=now if operation in ("created", "updated") else (old.write_at if old else None),
            reconciled_at=now,
            last_error=error if error else (old.last_error if old else None),
            error_at=now if error else (old.error_at if old else None),
            ok=error is None,
            stored=stored,
            newest=_NAMES(newest) if newest else "",
        )
        self.updated = time.monotonic()

    def record_workload(
        self,
        workload: str,
        *,
        pods: int | None = _KEEP,
        terminalPods: int | None = _KEEP,  # camelCase: the controller's keywords (once JSON keys)
        podGroups: list[str] | None = _KEEP,
        plugin: str | None = _KEEP,
        result: str | None = _KEEP,
        error: str | None = _KEEP,
    ) -> None:
        """The workload's last pass; a field not given keeps what the previous pass recorded."""
        old = self._workloads.get(workload)
        now = _clock()

        def given(value: Any, previous: Any) -> Any:
            return previous if value is _KEEP else value

        self._workloads[workload] = WorkloadRecord(
            workload,
            now,
            pods=given(pods, old.pods if old else None),
            terminal_pods=given(terminalPods, old.terminal_pods if old else None),
            pod_groups=tuple(given(podGroups, old.pod_groups if old else ()) or ()),
            plugin=given(plugin, old.plugin if old else None),
            result=given(result, old.result if old else None),
            error=given(error, old.error if old else None),
            last_error=error if error is not _KEEP and error else (old.last_error if old else None),
            last_error_at=now if error is not _KEEP and error else (old.last_error_at if old else None),
        )
        self.updated = time.monotonic()

    def forget_pod(self, namespace: str, name: str) -> None:
        pods = self._pods.get(namespace)
        rec = pods.pop(name, None) if pods is not None else None
        if rec is None:
            return
        if rec.pod_group:
            self._unlink(namespace, rec.pod_group, name)
        self._release(rec.shared)
        self._failing.get(namespace, set()).discard(name)
        if not pods:
            del self._pods[namespace]
            self._failing.pop(namespace, None)

    def forget_pod_group(self, namespace: str, name: str) -> None:
        groups = self._pod_groups.get(namespace)
        if groups is not None and groups.pop(name, None) is not None and not groups:
            del self._pod_groups[namespace]

    def forget_workload(self, workload: str) -> None:
        self._workloads.pop(workload, None)
        for ns, groups in list(self._pod_groups.items()):
            for name in [n for n, v in groups.items() if v.workload == workload]:
                self.forget_pod_group(ns, name)

    # ------------------------------------------------------------------ reads (API, tests): frozen records

    def unpatched_record(self, namespace: str, name: str) -> bool:
        """Whether the pod has a record without a patch result (cheap: nothing is rendered)."""
        rec = self._pods.get(namespace, {}).get(name)
        return rec is not None and rec.patched in (None, PATCH_FAILED)

    def _render(self, namespace: str, name: str, rec: _PodRecord, parts: Parts | None = None) -> PodRecord:
        """The pod's :class:`PodRecord`. When its PodGroup's last write failed the pod is not grouped,
        whatever was decided, and says so (``outcome: failed``, the API server's message); likewise when
        its own patch failed. ``parts``: the shared parts this read already built."""
        patched = None if rec.patched is None else Patch(rec.patched, rec.patched_at)
        shared = rec.shared
        if shared is None:  # an error recorded before any decision
            return PodRecord(namespace, name, last_error=rec.error[0] if rec.error else None,
                             last_error_at=rec.error[1] if rec.error else None, patched=patched)
        part = parts.get(shared) if parts is not None else None
        if part is None:
            part = shared.part(namespace)
            if parts is not None:
                parts[shared] = part
        outcome, reason = rec.outcome, rec.reason
        message = _message(rec.message, rec.pod_group, rec.sub_group)
        last_error, error_at = rec.error if rec.error is not None else (None, None)
        failure = self._failure(namespace, rec)
        if outcome == "grouped" and failure is not None and failure.last_error:
            outcome, reason, message = "failed", POD_GROUP_NOT_WRITTEN, failure.last_error
            if error_at is None or (failure.error_at or 0.0) >= error_at:  # the newer error is the last one
                last_error, error_at = failure.last_error, failure.error_at
        elif outcome == "grouped" and rec.patched == PATCH_FAILED:
            outcome, reason, message = "failed", POD_NOT_MARKED, last_error or "patch failed"
        return PodRecord(
            namespace, name, rec.uid, outcome, reason, message,  # type: ignore[arg-type]
            rec.pod_group, rec.sub_group, part, rec.decided_at, last_error, error_at, patched,
        )

    def _failure(self, namespace: str, rec: _PodRecord) -> PodGroupRecord | None:
        """The record of the pod's PodGroup when its last write failed."""
        if rec.pod_group is None:
            return None
        pg = self._pod_groups.get(namespace, {}).get(rec.pod_group)
        return pg if pg is not None and not pg.ok else None

    def pod(self, namespace: str, name: str) -> PodRecord | None:
        rec = self._pods.get(namespace, {}).get(name)
        return self._render(namespace, name, rec) if rec is not None else None

    def namespaces(self) -> set[str]:
        """Namespaces holding a pod record or a PodGroup (what the API's namespace-narrowed lists review)."""
        return {ns for ns, pods in self._pods.items() if pods} | {ns for ns, pgs in self._pod_groups.items() if pgs}

    def pods(self, namespace: str | None = None) -> list[PodRecord]:
        """Every pod record (of ``namespace``), by namespace and name: renders them all."""
        parts: Parts = {}
        spaces = [namespace] if namespace is not None else sorted(self._pods)
        return [self._render(ns, n, v, parts) for ns in spaces for n, v in sorted(self._pods.get(ns, {}).items())]

    def pod_names_of_group(self, namespace: str, pod_group: str) -> list[str]:
        """The names of the pods :meth:`pods_of_group` renders, sorted (cheap: nothing is rendered)."""
        ns_pods = self._pods.get(namespace, {})
        return sorted(n for n in members(self._group_pods, (namespace, pod_group)) if n in ns_pods)

    def pods_of_group(self, namespace: str, pod_group: str) -> list[PodRecord]:
        """Pods whose latest decision names this PodGroup (its members now, never another group's)."""
        parts: Parts = {}
        ns_pods = self._pods.get(namespace, {})
        return [self._render(namespace, n, ns_pods[n], parts) for n in self.pod_names_of_group(namespace, pod_group)]

    def failing_pods(self, namespace: str | None = None) -> list[PodRecord]:
        """Pods whose latest decision ended in an error, or whose patch failed."""
        parts: Parts = {}
        spaces = [namespace] if namespace is not None else sorted(self._failing)
        out: list[PodRecord] = []
        for ns in spaces:
            ns_pods = self._pods.get(ns, {})
            out.extend(self._render(ns, n, ns_pods[n], parts) for n in sorted(self._failing.get(ns, ()))
                       if n in ns_pods)
        return out

    def pod_group(self, namespace: str, name: str) -> PodGroupRecord | None:
        return self._pod_groups.get(namespace, {}).get(name)

    def pod_groups(self, namespace: str | None = None) -> list[PodGroupRecord]:
        """Every PodGroup record (of ``namespace``), by namespace and name (cheap: the stored records)."""
        spaces = [namespace] if namespace is not None else sorted(self._pod_groups)
        return [v for ns in spaces for _, v in sorted(self._pod_groups.get(ns, {}).items())]

    def workload(self, workload: str) -> WorkloadRecord | None:
        return self._workloads.get(workload)

    def workloads(self) -> list[WorkloadRecord]:
        return [v for _, v in sorted(self._workloads.items())]

    def sizes(self) -> dict[str, int]:
        return {
            "pods": sum(len(v) for v in self._pods.values()),
            "sharedParts": len(self._shared),
            "podGroups": sum(len(v) for v in self._pod_groups.values()),
            "workloads": len(self._workloads),
        }
