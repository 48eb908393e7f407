"""What a Karta workload's decisions read, taken on the event loop, for the worker thread that decides them.

A Karta's jq runs in the sandbox and may take up to its query timeout, so the reconciler decides a sandboxed
workload's pods in a worker thread (``Reconciler._decide``). The informer cache belongs to the event loop,
which keeps applying watch events while the thread decides: the thread must not read it. It reads a
:class:`LookupSnapshot` instead — the answer of every cache query the decisions make, each taken once, on
the loop, by a :class:`~grouper.kube.cache.CacheLookups` (so every answer, and what it records, is exactly the
cache's):

* before the thread starts, the pods' owner chains are walked on the loop (one walk per distinct owner
  reference: siblings share it) and the defaults ConfigMap is read;
* a query the decisions make beyond those (a PriorityClass, a PodGang, a listing of a native plugin's pods
  when a pod's chain led elsewhere) is asked of the loop from the thread, once per pass: the thread waits
  for that answer (a loop callback, never a cache read off the loop) and every later decision reuses it.
  The PriorityClasses earlier passes of the workload kind asked for are taken beforehand too
  (:class:`Hints`), so a pass of a kind seen before rarely waits for the loop at all.

Each answer holds what its query recorded (the uids read, the absent keys, the kinds not cached or not
allowed, whether pods were listed, the error raised); :class:`SnapshotLookups` replays it into its own
record, so a decision's reads — and so the workload's dependencies and retry keys — are exactly those
of the same decision made on the live cache. The objects handed out are the cache's own: the cache never
changes an object in place (a watch event replaces it, ``grouper.kube.informer``), so an answer stays
the object as it was when taken while the loop moves on. A change of it queues the workload again: through
its recorded reads (the handlers), and by :meth:`LookupSnapshot.moved` once the thread is done.
"""

from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from grouper.core.owner_chain import resolve_owners
from grouper.core.reads import STATUS_READING_GROUPS, pod_signature, same_reads
from grouper.kube.cache import CacheLookups, ClusterCache, Dependency
from grouper.model import objects as o
from grouper.model.errors import GroupingError
from grouper.model.objects import GVK, Obj

T = TypeVar("T")

LOOP_ANSWER_TIMEOUT = 60.0  # seconds a worker thread waits for the loop to answer a query (a loop gone)

Query = tuple[Any, ...]


class Answer(NamedTuple):
    """One query's answer as a :class:`CacheLookups` gave it on the loop, and what it recorded."""

    value: Any
    error: BaseException | None
    reads: frozenset[Dependency]
    misses: frozenset[GVK]
    refused: frozenset[GVK]
    listed_pods: bool


def _ask(lookups: CacheLookups, query: Query) -> Any:
    op, args = query[0], query[1:]
    if op == "get":
        return lookups.get(*args)
    if op == "list":
        api_version, kind, namespace, selector = args
        return tuple(lookups.list(api_version, kind, namespace, dict(selector) if selector is not None else None))
    if op == "pod_groups_named":
        return tuple(lookups.pod_groups_named(*args))
    if op == "priority_class_exists":
        return lookups.priority_class_exists(*args)
    assert op == "defaults_configmap", query
    return lookups.defaults_configmap()


class Hints:
    """The PriorityClass queries earlier passes of each workload kind asked of the loop from their thread
    (the names their pods' labels and the defaults name, and the fallback): taken beforehand by the next
    pass of the kind. Only which queries to take is learnt, never an answer; one a pass does not ask is
    never replayed, so a stale hint costs one cache read. Bounded: the newest ``per_kind`` per kind."""

    def __init__(self, per_kind: int = 8, kinds: int = 256) -> None:
        self.per_kind, self.kinds = per_kind, kinds
        self._of: dict[Any, dict[Query, None]] = {}

    def of(self, kind: Any) -> builtins.list[Query]:
        return builtins.list(self._of.get(kind, ()))

    def learn(self, kind: Any, asked: builtins.list[Query]) -> None:
        queries = [q for q in asked if q[0] == "priority_class_exists"]
        if not queries:
            return
        known = self._of.pop(kind, None) or {}
        for q in queries:
            known.pop(q, None)
            known[q] = None
        while len(known) > self.per_kind:
            del known[next(iter(known))]
        self._of[kind] = known  # (the newest kind last)
        while len(self._of) > self.kinds:
            del self._of[next(iter(self._of))]


def _same_object(now: Any, then: Any) -> bool:
    """The same cached object, or an update of it that changed nothing grouping reads (the event handlers'
    rule: a status write or a resourceVersion bump is no news)."""
    if now is then:
        return True
    if not isinstance(now, dict) or not isinstance(then, dict):
        return False
    if now.get("kind") == "Pod":
        return pod_signature(now) == pod_signature(then)
    return same_reads(then, now, keep_status=GVK.of(now).group in STATUS_READING_GROUPS)


def _same(now: Any, then: Any) -> bool:
    """The same answer: the same objects (see :func:`_same_object`) in the same order, the same flag."""
    if isinstance(now, tuple) and isinstance(then, tuple):
        return len(now) == len(then) and all(_same_object(x, y) for x, y in zip(now, then, strict=True))
    return _same_object(now, then)


class LookupSnapshot:
    """The answers of one pass's cache queries (see the module doc). Made on the event loop's thread."""

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._answers: dict[Query, Answer] = {}
        self.asked: builtins.list[Query] = []  # queries the thread had to ask of the loop (not taken beforehand)

    def answer(self, query: Query) -> Answer:
        hit = self._answers.get(query)
        if hit is not None:
            return hit
        if threading.get_ident() == self._loop_thread:
            return self._take(query)
        return self._ask_loop(query)

    def _take(self, query: Query) -> Answer:
        """Ask the cache (on the loop only) and keep the answer."""
        hit = self._answers.get(query)  # (asked twice before the loop answered the first)
        if hit is None:  # (an error the cache raised is kept too: replayed to every decision that asks)
            hit = self._answers[query] = self._take_fresh(query)
        return hit

    def _ask_loop(self, query: Query) -> Answer:
        done: concurrent.futures.Future[Answer] = concurrent.futures.Future()

        def take() -> None:
            try:
                done.set_result(self._take(query))
            except BaseException as exc:  # (never expected: _take keeps the cache's errors as answers)
                done.set_exception(exc)

        self.asked.append(query)
        self._loop.call_soon_threadsafe(take)
        return done.result(timeout=LOOP_ANSWER_TIMEOUT)

    def prefetch(self, pods: Sequence[Obj], hints: Sequence[Query] = ()) -> None:
        """Take, on the loop, what every Karta decision reads: the pods' owner chains (one walk per distinct
        first owner reference: siblings share it), the defaults ConfigMap and the ``hints`` (:class:`Hints`).
        Only what is taken early depends on this; a query it missed is asked of the loop from the thread."""
        assert threading.get_ident() == self._loop_thread
        for query in hints:
            self.answer(query)
        self.answer(("defaults_configmap",))
        lookups = self.lookups()
        walked: set[tuple[Any, ...]] = set()
        for pod in pods:
            refs = o.meta(pod).get("ownerReferences")
            first = refs[0] if isinstance(refs, list) and refs else None
            if not isinstance(first, dict):
                continue  # no owner: nothing to walk (or a malformed one: its decision says so)
            key = (o.namespace(pod), first.get("uid"), first.get("kind"), first.get("name"))
            if key in walked:
                continue
            walked.add(key)
            with contextlib.suppress(GroupingError):  # its decision meets the same error (the same answers)
                resolve_owners(pod, lookups)

    def moved(self) -> bool:
        """Whether the cache answers any query taken differently now (asked on the loop once the thread is
        done): the pass decided over a view the cluster has moved on from, so the reconciler queues the
        workload again — also on its first pass, before any dependency of it is known to the handlers."""
        assert threading.get_ident() == self._loop_thread
        for query, then in builtins.list(self._answers.items()):
            now = self._take_fresh(query)
            if type(now.error) is not type(then.error) or now.reads != then.reads or not _same(now.value, then.value):
                return True
        return False

    def _take_fresh(self, query: Query) -> Answer:
        lookups = self.cache.lookups()
        value, error = None, None
        try:
            value = _ask(lookups, query)
        except Exception as exc:
            error = exc
        return Answer(value, error, frozenset(lookups.reads), frozenset(lookups.misses), frozenset(lookups.refused),
                      lookups.listed_pods)

    def lookups(self) -> SnapshotLookups:
        return SnapshotLookups(self)


class SnapshotLookups(CacheLookups):
    """:class:`CacheLookups` answered from a :class:`LookupSnapshot`: the same answers and the same record
    (``reads``, ``misses``, ``refused``, ``listed_pods``), never a read of the live cache."""

    def __init__(self, snapshot: LookupSnapshot) -> None:
        super().__init__(snapshot.cache)
        self.snapshot = snapshot

    def _replay(self, query: Query) -> Any:
        a = self.snapshot.answer(query)
        if a.reads:
            self.reads |= a.reads
        if a.misses:
            self.misses |= a.misses
        if a.refused:
            self.refused |= a.refused
        if a.listed_pods:
            self.listed_pods = True
        if a.error is not None:
            raise a.error.with_traceback(None)  # (one object raised per decision: no traceback piles up)
        return a.value

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        value: Obj | None = self._replay(("get", api_version, kind, namespace, name))
        return value

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        label_selector: Mapping[str, str] | None = None,
    ) -> builtins.list[Obj]:
        selector = tuple(sorted(label_selector.items())) if label_selector else None
        return builtins.list(self._replay(("list", api_version, kind, namespace, selector)))

    def pod_groups_named(self, namespace: str, base: str) -> builtins.list[Obj]:
        return builtins.list(self._replay(("pod_groups_named", namespace, base)))

    def priority_class_exists(self, name: str) -> bool:
        return bool(self._replay(("priority_class_exists", name)))

    def defaults_configmap(self) -> Obj | None:
        value: Obj | None = self._replay(("defaults_configmap",))
        return value


async def decide_off_loop(
    cache: ClusterCache, hints: Hints, kind: tuple[str, str], pods: Sequence[Obj],
    decide: Callable[[LookupSnapshot], T],
) -> tuple[T, bool]:
    """Run ``decide`` in a worker thread over a snapshot of ``cache`` taken here, on the loop, for ``pods``
    of ``kind`` (their owner chains, and what ``hints`` says the kind's earlier passes asked); the loop
    runs on meanwhile (other workloads, watches, probes). Returns its answer and whether what it read
    changed in the cache since (the caller then looks again)."""
    snapshot = LookupSnapshot(cache)
    snapshot.prefetch(pods, hints.of(kind))
    answer = await asyncio.to_thread(decide, snapshot)
    hints.learn(kind, snapshot.asked)
    return answer, snapshot.moved()


__all__ = ["LOOP_ANSWER_TIMEOUT", "Answer", "Hints", "LookupSnapshot", "SnapshotLookups", "decide_off_loop"]
