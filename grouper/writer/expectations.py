"""The one place that remembers "what I wrote and have not seen in the cache yet".

kube-controller-manager's expectations, for single objects: after a successful create, update, patch or
delete the writer records the object as the API server answered it. Until the watch shows that version,
:meth:`current` answers with our own write instead of the (older) cached object, so two reconciles in a
row never send the same write twice. **Every watch event of the object clears its entry** — the echo of
our write, somebody else's edit, a DELETED event — so the cache is trusted again at once; and
:meth:`observe` tells the event handler whether the event was only the echo (nothing new to reconcile).

A hand-deleted or hand-edited PodGroup, a removed pod annotation: the event clears the entry, the
workload is reconciled from the cache, and the object is restored. (An event *older* than our write — the
watch still catching up — is ignored: clearing on it would answer from a cache older than our own write
and write again.) Entries also expire after ``ttl``
seconds (a lost echo can never freeze a decision), and a cached object with a resourceVersion at least as
new as ours supersedes the entry.

A pod patch answered 404 is recorded too (:meth:`gone`): the pod is deleted, and until the watch says so
the cache still holds it, so every pass meanwhile would patch it again and get 404 again (found in the
Kubeflow operator test: a PyTorchJob scaled down, the grouper's passes racing the operator's delete).

A write on its way (sent, not answered yet) is recorded too (:meth:`writing`, with what it sets): its echo
may arrive before its answer, when there is no version yet to recognise it by, so the event handler compares
the event with what the write sets (:meth:`in_flight`) instead of reconciling its own write again.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from grouper.kube.informer import strip_managed_fields
from grouper.model import objects as o
from grouper.model.objects import Obj

ObjKey = tuple[str, str, str]  # (kind, namespace, name)


@dataclass(frozen=True)
class _Expected:
    obj: Obj | None  # None: we deleted it, or a write found it gone
    uid: str
    rv: str
    at: float
    gone: bool = False  # the API server answered 404: no event of this uid but its DELETED is news


def _rv(obj: Obj | None) -> str:
    return str(o.meta(obj).get("resourceVersion") or "") if obj else ""


def _at_least(cached_rv: str, expected_rv: str) -> bool:
    """Whether the cached version is at least as new as ours. resourceVersions are opaque by contract;
    the API server's are etcd revisions, so when both parse as integers they are compared, else only
    equality counts."""
    if cached_rv == expected_rv:
        return True
    if cached_rv.isdigit() and expected_rv.isdigit():
        return int(cached_rv) >= int(expected_rv)
    return False


def _older(event_rv: str, expected_rv: str) -> bool:
    """Whether an event's resourceVersion is strictly older than ours (comparable only as integers)."""
    return event_rv.isdigit() and expected_rv.isdigit() and int(event_rv) < int(expected_rv)


class WriteExpectations:
    def __init__(self, *, ttl: float = 30.0, max_entries: int = 100_000) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: OrderedDict[ObjKey, _Expected] = OrderedDict()
        self._writing: dict[ObjKey, Any] = {}  # writes sent and not answered -> what each sets

    def __len__(self) -> int:
        return len(self._entries)

    def wrote(self, kind: str, obj: Obj) -> None:
        """Record the object our create/update/patch produced (as returned by the API server), without its
        managedFields: never read, and often the largest part of it (a burst of 10,000 PodGroup creates
        holds 10,000 entries until their echoes arrive)."""
        key = (kind, o.namespace(obj), o.name(obj))
        kept = strip_managed_fields({**obj}) if "managedFields" in o.meta(obj) else obj
        self._put(key, _Expected(kept, o.uid(obj), _rv(obj), time.monotonic()))

    def writing(self, kind: str, namespace: str, name: str, sets: Any) -> None:
        """Record a write on its way (``sets``: what it sets, for the event handler to compare with); call
        :meth:`answered` when its answer (or error) arrives."""
        self._writing[(kind, namespace, name)] = sets

    def answered(self, kind: str, namespace: str, name: str) -> None:
        self._writing.pop((kind, namespace, name), None)

    def in_flight(self, kind: str, namespace: str, name: str) -> Any:
        """What the object's write on its way sets; None when none is."""
        return self._writing.get((kind, namespace, name))

    def deleted(self, kind: str, namespace: str, name: str, uid: str = "") -> None:
        """Record that we deleted the object: :meth:`current` answers None until the watch agrees."""
        self._put((kind, namespace, name), _Expected(None, uid, "", time.monotonic()))

    def gone(self, kind: str, namespace: str, name: str, uid: str) -> None:
        """Record that a write found the object (``uid``) deleted: :meth:`current` answers None until the
        watch delivers its DELETED event. Unlike :meth:`deleted` (a delete we asked for, which finalizers may
        hold up), an update of that uid seen meanwhile is only the watch catching up: it keeps the entry."""
        self._put((kind, namespace, name), _Expected(None, uid, "", time.monotonic(), gone=True))

    def _put(self, key: ObjKey, exp: _Expected) -> None:
        self._entries.pop(key, None)
        self._entries[key] = exp
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def current(self, kind: str, namespace: str, name: str, cached: Obj | None) -> Obj | None:
        """What the object is now: our pending write when the cache has not caught up, else ``cached``."""
        key = (kind, namespace, name)
        exp = self._entries.get(key)
        if exp is None:
            return cached
        if time.monotonic() - exp.at > self.ttl:
            del self._entries[key]
            return cached
        if exp.obj is None:  # our delete
            if cached is None or (exp.uid and o.uid(cached) != exp.uid):
                del self._entries[key]
                return cached
            return None
        if cached is not None and _at_least(_rv(cached), exp.rv):
            del self._entries[key]
            return cached
        return exp.obj

    def observe(self, kind: str, event_type: str, obj: Obj) -> bool:
        """Clear the object's entry on any watch event of it; True when the event is just the echo of our
        write. An event older than our write (the watch still delivering what happened before it, e.g. the
        scheduler's binding) changes nothing: it neither clears the entry nor counts as news of our write."""
        key = (kind, o.namespace(obj), o.name(obj))
        exp = self._entries.get(key)
        if exp is None:
            return False
        if event_type != "DELETED" and exp.obj is not None and _older(_rv(obj), exp.rv):
            return False
        if event_type != "DELETED" and exp.gone and o.uid(obj) == exp.uid:
            return False  # an update from before the object's deletion
        del self._entries[key]
        if exp.obj is None:
            return event_type == "DELETED" and (not exp.uid or o.uid(obj) == exp.uid)
        return event_type != "DELETED" and bool(exp.rv) and _rv(obj) == exp.rv


__all__ = ["WriteExpectations"]
