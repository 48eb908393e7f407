"""What the controller decided and did, per pod, per PodGroup and per workload — for the HTTP API.

JSON-able dicts behind a small interface; bounded by the cluster: records are dropped when their pod or
workload disappears. Errors keep their time so ``/podgroups`` can say "failing since".

Built so that no read costs O(cluster) on the event loop and a cached pod costs little memory
(``benchmarks/bench_memory.py``):

- a pod's record is stored **compactly** (:class:`_PodRecord`, a few slots): only what differs per pod
  (outcome, reason, a message template, PodGroup, sub-group, times, the patch result); what the pods of
  a workload share — plugin, definition, top owner, owner chain, provenance, notes — is stored once per
  distinct value (:class:`_Shared`, reference-counted: the 1,000 pods of a JobSet hold its owner chain
  once per Job), with the texts every workload of a kind repeats stored once for all. Each read
  renders the dict ``Decision.to_record()`` gave, plus the controller's fields;
- PodGroup records keep their desired object as JSON bytes;
- records are **copy-on-write**: a write replaces a record, never changes one in place;
- indexes by namespace, by PodGroup (its pods) and of failing pods answer the API's questions directly.

Only the controller's event loop writes.
"""
from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import orjson

from grouper.core.decision import Decision
from grouper.kube.compact import Interner, Members, add_member, discard_member, members
from grouper.model.bounded import BoundedMemo
from grouper.model.podgroup import OwnerRef

_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


_RENDERED_TIMES: BoundedMemo[float, str] = BoundedMemo(4096)


def _render_time(t: float | None) -> str | None:
    """The timestamp as the API shows it; the pods of a reconcile share a time (:func:`_clock`), so the
    text is cached (bounded) and a listing of 100,000 records formats a few hundred times, not 100,000."""
    return None if t is None else _rendered(t)


def _rendered(t: float) -> str:
    text = _RENDERED_TIMES.get(t)
    if text is None:
        text = _RENDERED_TIMES.put(t, datetime.fromtimestamp(t, UTC).strftime(_FORMAT))
    return text


def _now() -> str:
    """Now, as the API shows times (rendered once per millisecond: a burst records a workload per pass)."""
    return _rendered(_clock())


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
PATCH_FAILED = "failed"  # a pod record's patch result when the API server refused the patch
POD_GROUP_NOT_WRITTEN = "PodGroupNotWritten"  # the reason of a grouped pod whose PodGroup write failed
POD_NOT_MARKED = "PodNotMarked"  # the reason of a grouped pod whose patch failed
Record = dict[str, Any]
_SharedKey = tuple[Any, ...]
_HOLE = "\x00"  # stands for the top owner's "Kind namespace/name" in shared provenance texts
_Ref = tuple[str, str, str, str]  # apiVersion, kind, name, uid
# texts the shared parts of every workload repeat once the workload's own name is taken out
_TEXTS = Interner(16_384)


def _ref(ref: OwnerRef) -> _Ref:
    return (ref.api_version, ref.kind, ref.name, ref.uid)


def _ref_dict(ref: _Ref) -> dict[str, str]:
    return {"apiVersion": ref[0], "kind": ref[1], "name": ref[2], "uid": ref[3]}


class _Shared:
    """What the pods of a workload share of ``Decision.to_record()`` — plugin, definition, top owner,
    owner chain, provenance, notes — compact: owner references as tuples, and the provenance and notes
    as texts with the top owner's description taken out (``label kai.scheduler/queue on \x00``): those
    are the same for every workload of a kind, so they (and the tuple of them) are stored once
    (:data:`_TEXTS`). ``key`` is the workload and all of it, so equal parts are found by hashing;
    ``refs`` counts the pod records that use it."""

    __slots__ = ("key", "refs")

    def __init__(self, key: _SharedKey) -> None:
        self.key, self.refs = key, 0

    def rendered(self, namespace: str) -> Record:
        """:meth:`fields`, from a small cache: a listing renders each workload's part once, not per pod
        (what it returns is read-only, like every record the store hands out)."""
        got = _RENDERED_SHARED.get(self)
        if got is not None and got[0] == namespace:
            return got[1]
        fields = self.fields(namespace)
        _RENDERED_SHARED.put(self, (namespace, fields))
        return fields

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
        chain = tuple(_ref(r) for r in d.owner_chain)
        top_ref = _ref(top) if top is not None else None
        if top_ref is not None and chain and chain[-1] == top_ref:
            top_ref = chain[-1]  # the same tuple object
        return (
            workload,
            d.plugin,
            _TEXTS((d.definition, d.definition_origin)) if d.definition else None,
            top_ref,
            chain,
            bool(desc),
            _TEXTS(tuple(x for k, v in prov.items() for x in (_TEXTS(k), hole(v)))),
            _TEXTS(tuple(hole(n) for n in d.notes)),
        )

    def fields(self, namespace: str) -> Record:
        _, plugin, definition, top, chain, holes, prov, notes = self.key
        desc = _describe(OwnerRef(*top), namespace) if holes and top is not None else ""

        def fill(t: str) -> str:
            return t.replace(_HOLE, desc) if desc else t

        return {
            "plugin": plugin,
            "definition": {"name": definition[0], "origin": definition[1]} if definition else None,
            "topOwner": _ref_dict(top) if top is not None else None,
            "ownerChain": [_ref_dict(r) for r in chain],
            "provenance": {prov[i]: fill(prov[i + 1]) for i in range(0, len(prov), 2)},
            "notes": [fill(n) for n in notes],
        }


_PG, _SG = "\x01", "\x02"  # stand for the pod's PodGroup and sub-group in a message template
_NAMES = Interner(65_536)  # workload keys, PodGroup and sub-group names: the pods of a workload repeat them


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


_RENDERED_SHARED: BoundedMemo[_Shared, tuple[str, Record]] = BoundedMemo(1024)


def _shared_inputs(d: Decision) -> tuple[Any, ...]:
    """Everything of a decision :meth:`_Shared.key_of` reads besides the workload, as copies: equal
    inputs (and workload) give an equal key."""
    prov = d.pod_group.provenance if d.pod_group else None
    return (
        d.pod_namespace,
        d.plugin,
        d.definition,
        d.definition_origin,
        d.top_owner,
        tuple(d.owner_chain),
        dict(prov) if prov else None,
        tuple(d.notes),
    )


def _describe(top: OwnerRef | None, namespace: str) -> str:
    """How the texts name the top owner (``describe``: ``Kind namespace/name``)."""
    return f"{top.kind} {namespace}/{top.name}" if top is not None and top.kind and top.name else ""


class _PodRecord:
    """A pod's record, compact; :meth:`render` gives the dict the API serves.

    ``shared`` is None for a pod that has no decision yet (only an error was recorded for it)."""

    __slots__ = (
        "decided_at",
        "error_at",
        "last_error",
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
        self.last_error: str | None = None
        self.error_at: float | None = None
        self.patched: str | None = None
        self.patched_at: float | None = None

    def copy(self) -> _PodRecord:
        new = _PodRecord()
        for slot in _PodRecord.__slots__:
            setattr(new, slot, getattr(self, slot))
        return new

    def render(self, namespace: str, name: str, failure: _PodGroupRecord | None = None) -> Record:
        """``failure``: the record of this pod's PodGroup when its last write failed: then the pod is not
        grouped, whatever was decided, and says so (``outcome: failed``, the API server's message)."""
        patched = None if self.patched is None else {"result": self.patched, "at": _render_time(self.patched_at)}
        if self.shared is None:  # an error recorded before any decision
            out: Record = {"pod": {"namespace": namespace, "name": name}}
            if self.error_at is not None:
                out["lastError"], out["lastErrorTime"] = self.last_error, _render_time(self.error_at)
            if self.patched is not None:
                out["patched"] = patched
            return out
        outcome, reason = self.outcome, self.reason
        message = _message(self.message, self.pod_group, self.sub_group)
        last_error, error_at = self.last_error, self.error_at
        if outcome == "grouped" and failure is not None and failure.last_error:
            outcome, reason, message = "failed", POD_GROUP_NOT_WRITTEN, failure.last_error
            if error_at is None or (failure.error_at or 0.0) >= error_at:  # the newer error is the last one
                last_error, error_at = failure.last_error, failure.error_at
        elif outcome == "grouped" and self.patched == PATCH_FAILED:
            outcome, reason, message = "failed", POD_NOT_MARKED, self.last_error or "patch failed"
        return {
            "pod": {"namespace": namespace, "name": name, "uid": self.uid},
            "outcome": outcome,
            "reason": reason,
            "message": message,
            "podGroup": self.pod_group,
            "subGroup": self.sub_group,
            **self.shared.rendered(namespace),
            "workload": self.shared.workload,
            "decidedAt": _render_time(self.decided_at),
            "lastError": last_error,
            "lastErrorTime": _render_time(error_at),
            "patched": patched,
        }


class _PodGroupRecord:
    """A PodGroup's record, compact: the desired object as JSON bytes (a third of its size as dicts)."""

    __slots__ = (
        "desired",
        "error_at",
        "last_error",
        "last_operation",
        "name",
        "namespace",
        "newest",
        "notes",
        "ok",
        "pods",
        "reconciled_at",
        "stored",
        "workload",
        "write_at",
    )

    def __init__(
        self, namespace: str, name: str, workload: str, desired: Any, pods: tuple[str, ...], notes: tuple[str, ...]
    ) -> None:
        self.namespace, self.name, self.workload = namespace, name, workload
        self.desired, self.pods, self.notes = desired, pods, notes
        self.last_operation: str | None = None
        self.write_at: float | None = None
        self.reconciled_at: float | None = None
        self.last_error: str | None = None
        self.error_at: float | None = None
        self.ok = True
        self.stored = True  # False: never written (its create was refused), so not in the cluster
        self.newest = ""  # the pod whose view of the PodGroup is the one written (workload_plan.merge)

    def render(self) -> Record:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "workload": self.workload,
            "desired": _unpack(self.desired),
            "pods": list(self.pods),
            "notes": list(self.notes),
            "lastOperation": self.last_operation,
            "lastWriteTime": _render_time(self.write_at),
            "reconciledAt": _render_time(self.reconciled_at),
            "lastError": self.last_error,
            "lastErrorTime": _render_time(self.error_at),
            "ok": self.ok,
            "stored": self.stored,
            "newestPod": self.newest or None,
        }


def _pack(obj: dict[str, Any] | None) -> Any:
    """A JSON-able object as orjson bytes; anything orjson cannot encode is kept as it is."""
    if obj is None:
        return None
    try:
        return orjson.dumps(obj)
    except TypeError:
        return obj


def _unpack(packed: Any) -> Any:
    return orjson.loads(packed) if isinstance(packed, bytes) else packed


class DecisionStore:
    def __init__(self) -> None:
        self._pods: dict[str, dict[str, _PodRecord]] = {}  # namespace -> pod name -> record
        self._pod_groups: dict[str, dict[str, _PodGroupRecord]] = {}  # namespace -> PodGroup name -> record
        self._group_pods: dict[PodKey, Members[str]] = {}  # (namespace, PodGroup) -> pod names deciding for it
        self._failing: dict[str, set[str]] = {}  # namespace -> pods whose latest decision failed
        self._workloads: dict[str, Record] = {}
        self._shared: dict[_SharedKey, _Shared] = {}  # (workload, …) -> shared part
        self._last_shared: tuple[str, tuple[Any, ...], _Shared] | None = None  # workload, inputs, part
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
        # The pods of a workload are recorded one after the other and most share everything that goes into
        # the key: comparing with the last decision's inputs is cheaper than building the key again
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

    def record_decision(self, d: Decision, workload: str) -> None:
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
            rec.last_error, rec.error_at = old.last_error, old.error_at
            rec.patched, rec.patched_at = old.patched, old.patched_at
        if d.outcome == "error":
            rec.last_error, rec.error_at = d.message, rec.decided_at
        self._put_pod(d.pod_namespace, d.pod_name, rec)

    def record_pod_error(self, namespace: str, name: str, message: str) -> None:
        old = self._pods.get(namespace, {}).get(name)
        rec = old.copy() if old is not None else _PodRecord()
        rec.last_error, rec.error_at = message, _clock()
        self._put_pod(namespace, name, rec)

    def record_pod_patch_failed(self, namespace: str, name: str, message: str) -> None:
        """The pod could not be marked: its record says ``failed`` with ``message`` until a patch succeeds."""
        old = self._pods.get(namespace, {}).get(name)
        rec = old.copy() if old is not None else _PodRecord()
        now = _clock()
        rec.last_error, rec.error_at = message, now
        rec.patched, rec.patched_at = PATCH_FAILED, now
        self._put_pod(namespace, name, rec)

    def record_pod_patched(self, namespace: str, name: str, result: str) -> None:
        old = self._pods.get(namespace, {}).get(name)
        if old is not None:
            rec = old.copy()
            rec.patched, rec.patched_at = result, _clock()
            self._put_pod(namespace, name, rec)

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
        rec = _PodGroupRecord(namespace, name, _NAMES(workload), _pack(desired), tuple(pods), tuple(notes))
        rec.last_operation = operation if operation else (old.last_operation if old else None)
        rec.write_at = now if operation in ("created", "updated") else (old.write_at if old else None)
        rec.reconciled_at = now
        rec.last_error = error if error else (old.last_error if old else None)
        rec.error_at = now if error else (old.error_at if old else None)
        rec.ok = error is None
        rec.stored = stored
        rec.newest = _NAMES(newest) if newest else ""
        self._pod_groups.setdefault(namespace, {})[name] = rec
        self.updated = time.monotonic()

    def record_workload(self, workload: str, **fields: Any) -> None:
        rec = {**self._workloads.get(workload, {"workload": workload}), **fields, "reconciledAt": _now()}
        if fields.get("error"):
            rec["lastError"], rec["lastErrorTime"] = fields["error"], rec["reconciledAt"]
        self._workloads[workload] = rec
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

    # ------------------------------------------------------------------ reads (API, tests): read-only records

    def unpatched_record(self, namespace: str, name: str) -> bool:
        """Whether the pod has a record without a patch result (cheap: nothing is rendered)."""
        rec = self._pods.get(namespace, {}).get(name)
        return rec is not None and rec.patched in (None, PATCH_FAILED)

    def _failure(self, namespace: str, rec: _PodRecord) -> _PodGroupRecord | None:
        """The record of the pod's PodGroup when its last write failed."""
        if rec.pod_group is None:
            return None
        pg = self._pod_groups.get(namespace, {}).get(rec.pod_group)
        return pg if pg is not None and not pg.ok else None

    def _render(self, namespace: str, name: str, rec: _PodRecord) -> Record:
        return rec.render(namespace, name, self._failure(namespace, rec))

    def pod(self, namespace: str, name: str) -> Record | None:
        rec = self._pods.get(namespace, {}).get(name)
        return self._render(namespace, name, rec) if rec is not None else None

    def namespaces(self) -> set[str]:
        """Namespaces holding a pod record or a PodGroup (what the API's namespace-narrowed lists review)."""
        return {ns for ns, pods in self._pods.items() if pods} | {ns for ns, pgs in self._pod_groups.items() if pgs}

    def pods(self, namespace: str | None = None) -> list[Record]:
        if namespace is not None:
            return [self._render(namespace, n, v) for n, v in sorted(self._pods.get(namespace, {}).items())]
        return [self._render(ns, n, v) for ns in sorted(self._pods) for n, v in sorted(self._pods[ns].items())]

    def pods_of_group(self, namespace: str, pod_group: str) -> list[Record]:
        """Pods whose latest decision names this PodGroup (its members now, never another group's)."""
        names = sorted(members(self._group_pods, (namespace, pod_group)))
        ns_pods = self._pods.get(namespace, {})
        return [self._render(namespace, n, ns_pods[n]) for n in names if n in ns_pods]

    def failing_pods(self, namespace: str | None = None) -> list[Record]:
        """Pods whose latest decision ended in an error."""
        spaces = [namespace] if namespace is not None else sorted(self._failing)
        out: list[Record] = []
        for ns in spaces:
            ns_pods = self._pods.get(ns, {})
            out.extend(self._render(ns, n, ns_pods[n]) for n in sorted(self._failing.get(ns, ())) if n in ns_pods)
        return out

    def pod_group(self, namespace: str, name: str) -> Record | None:
        rec = self._pod_groups.get(namespace, {}).get(name)
        return rec.render() if rec is not None else None

    def pod_groups(self, namespace: str | None = None) -> list[Record]:
        if namespace is not None:
            return [v.render() for _, v in sorted(self._pod_groups.get(namespace, {}).items())]
        return [v.render() for ns in sorted(self._pod_groups) for _, v in sorted(self._pod_groups[ns].items())]

    def workload(self, workload: str) -> Record | None:
        return self._workloads.get(workload)

    def workloads(self) -> list[Record]:
        return [v for _, v in sorted(self._workloads.items())]

    def sizes(self) -> dict[str, int]:
        return {
            "pods": sum(len(v) for v in self._pods.values()),
            "sharedParts": len(self._shared),
            "podGroups": sum(len(v) for v in self._pod_groups.values()),
            "workloads": len(self._workloads),
        }
