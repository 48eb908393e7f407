"""A list-then-watch informer keeping an in-memory cache of one resource, like client-go's reflector.

- A *streaming list* first (a WATCH with ``sendInitialEvents=true``, KEP-3157, what client-go's
  informers do since Kubernetes 1.35): the API server sends every object as an ADDED event from its watch
  cache, then a bookmark annotated ``k8s.io/initial-events-end``, and the same stream goes on as the
  watch. A server that refuses it (the WatchList feature off, before 1.34 by default) gets a paginated
  LIST (``limit`` / ``continue``) and a WATCH from the list's resourceVersion instead, and is not asked
  again (``KubeClient.watch_list``). Either way ``allowWatchBookmarks=true``; the resourceVersion advances
  with every event and bookmark.
- 410 Gone (expired resourceVersion, on the watch or mid-pagination) → a fresh LIST, and the cache is
  reconciled with it: vanished objects produce synthesized DELETED events, changed ones MODIFIED.
- Other failures → exponential back-off (0.8 s doubling to 30 s, jittered; at most 2 s while the API
  server cannot be reached at all, so grouping resumes within seconds of its return) and a new watch; a
  first LIST that is forbidden (403) or not found (404: CRD gone) ends the informer with ``error`` set,
  because retrying cannot help until RBAC or the CRD changes.
- Health: the informer is *synced* after its first (streaming) list, and *healthy* only while its watch is open (or
  has been down for less than ``grace`` seconds, the normal gap of a watch re-opened after its timeout).
  After an outage longer than ``grace`` it re-lists before it counts as healthy again, so readiness comes
  back only with a cache known to be complete.
- Any exception other than the API's own errors (a bug, a handler that cannot be isolated) ends the run
  loop; under a :class:`~grouper.runtime.supervisor.Supervisor` it is logged, counted and restarted
  with a fresh LIST.
- ``transform`` trims every object before it is cached (``managedFields`` and, for pods, everything
  grouping does not read), which is what keeps memory per pod small.

Handlers are plain synchronous callables ``handler(event_type, obj, old)`` run in the loop; they must
be quick (the controller's handlers only compute keys and enqueue). The events of a (re-)LIST are emitted
in chunks of ``emit_chunk`` with a yield to the loop in between, so a LIST of 100,000 objects never
blocks the loop for the whole pass.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

from grouper.kube.compact import Members, add_member, discard_member, members
from grouper.kube.cooperative import Cooperative
from grouper.kube.discovery import Resource
from grouper.kube.transport import ApiError, KubeClient
from grouper.observability.metrics import Metrics

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Handler = Callable[[str, Obj, Obj | None], None]
Transform = Callable[[Obj], Obj]
IndexFunc = Callable[[Obj], list[str]]
Index = dict[str, Members[str | tuple[str, str]]]  # value -> the one object (its name or key), or a set of them

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
INITIAL_EVENTS_END = "k8s.io/initial-events-end"  # the bookmark that ends a streaming list's objects
CONNECTION_BACKOFF_CAP = 2.0  # seconds between attempts while the API server is unreachable
ERROR_BACKOFF_CAP = 30.0
ERROR_BACKOFF_FIRST = 0.8
CACHE_INIT_FIRST = 0.05  # first retry while the API server's watch cache of the resource fills


def cache_initializing(e: ApiError) -> bool:
    """The API server's watch cache of the resource is not filled yet (``429 storage is (re)initializing``,
    ResilientWatchCacheInitialization): a custom resource's cache is built at its first request after the
    API server starts, so the first list of every CRD on a fresh API server gets this, and the cache of an
    empty or small resource is ready milliseconds later. Not API Priority and Fairness's 429 (load shedding)."""
    return e.status == 429 and "initializing" in e.message


def retry_delay(e: ApiError, previous: float) -> float:
    """Seconds before the next attempt after ``e`` (``previous``: the last delay, 0 after a success), before
    jitter. Doubling from 0.8 s up to 2 s (no answer) or 30 s; while the watch cache fills, from 0.05 s up to
    the server's ``Retry-After`` (1 s): at most ~5 quick attempts in its first second, instead of a fixed
    wait of about a second per custom resource at every start on a fresh API server (benchmarks/bench_startup.py)."""
    if cache_initializing(e):
        details = e.body.get("details") if isinstance(e.body, dict) else None
        after = details.get("retryAfterSeconds") if isinstance(details, dict) else None
        cap = float(after) if isinstance(after, int | float) and after > 0 else 1.0
        return min(max(previous * 2, CACHE_INIT_FIRST), cap)
    cap = CONNECTION_BACKOFF_CAP if e.status == 0 else ERROR_BACKOFF_CAP
    return min(max(previous * 2, ERROR_BACKOFF_FIRST), cap)


class Spawner(Protocol):
    """Runs a named long-running coroutine (``grouper.runtime.supervisor.Supervisor.spawn``): the supervising
    task, which lives across restarts."""

    def spawn(self, name: str, factory: Callable[[], Awaitable[None]]) -> asyncio.Task[None]: ...


def strip_managed_fields(obj: Obj) -> Obj:
    """Drop ``metadata.managedFields``: often the largest part of an object, never read by grouping."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return obj


def _same_strings(obj: Obj, prev: Obj) -> None:
    """A new version of a cached object takes over the name, namespace and uid strings of the cached one.

    Everything keyed by them — the store, the indexes, the controller's maps and records — holds the
    cached version's strings; without this every update would leave one more copy of each per object.
    ``obj`` is freshly decoded (and transformed), so it is ours to change."""
    meta, old = obj.get("metadata"), prev.get("metadata")
    if isinstance(meta, dict) and isinstance(old, dict):
        for k in ("name", "namespace", "uid"):
            v = old.get(k)
            if v is not None and meta.get(k) == v:
                meta[k] = v


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _member(value: str, key: tuple[str, str]) -> str | tuple[str, str]:
    """How an index holds an object: by its name (the cached string) when the value starts with the
    object's namespace and a slash (the indexes of namespaced objects are keyed ``namespace/...``), else
    by its (namespace, name) key — a tuple per indexed pod was ~56 B of the cache's memory per pod."""
    ns = key[0]
    if ns and value.startswith(ns) and value[len(ns) : len(ns) + 1] == "/":
        return key[1]
    return key


def _flat(by_ns: dict[str, dict[str, Obj]]) -> Iterator[tuple[tuple[str, str], Obj]]:
    """((namespace, name), object) of a namespace -> name -> object map."""
    for ns, ns_items in by_ns.items():
        for name, obj in ns_items.items():
            yield (ns, name), obj


class Informer:
    """Cache of one resource (optionally one namespace / selectors). Start with :meth:`start`."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = strip_managed_fields,
        metrics: Metrics | None = None,
        page_size: int = 500,
        watch_timeout: tuple[int, int] = (300, 600),
        grace: float = 5.0,
        emit_chunk: int = 500,
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.transform = transform
        self.metrics = metrics
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.grace = grace
        self.emit_chunk = max(1, emit_chunk)
        self.handlers: list[Handler] = []
        self.synced = asyncio.Event()
        self.error: ApiError | None = None  # set when the informer gave up (403 on LIST)
        self.stopped = asyncio.Event()
        # namespace -> name -> object: the one map of the cache (a second map by (namespace, name) cost
        # ~70 B per cached pod, benchmarks/bench_memory.py)
        self._by_ns: dict[str, dict[str, Obj]] = {}
        self._size = 0
        self._index_funcs: dict[str, IndexFunc] = {}
        self._indexes: dict[str, Index] = {}
        self._rv = ""
        self._need_list = True
        self._lists = 0
        self._runs = 0
        self._watching = False
        self._down_since: float | None = None  # monotonic time the watch last broke (None: up)
        self._outage_relist = False  # re-listing after an outage: not healthy until it completes
        self._relist_requested = False
        self.last_failure: str | None = None
        self._task: asyncio.Task[None] | None = None
        self.name = str(resource) + (f"@{namespace}" if namespace else "")

    # ------------------------------------------------------------------ reading the cache

    def get(self, namespace: str | None, name: str) -> Obj | None:
        ns_items = self._by_ns.get(namespace or "")
        return ns_items.get(name) if ns_items is not None else None

    def list(self, namespace: str | None = None) -> list[Obj]:
        if namespace is None:
            return [obj for ns_items in self._by_ns.values() for obj in ns_items.values()]
        return list(self._by_ns.get(namespace, {}).values())

    def _items(self) -> Iterator[tuple[tuple[str, str], Obj]]:
        return _flat(self._by_ns)

    def keys(self) -> builtins.list[tuple[str, str]]:
        """(namespace, name) of every cached object."""
        return [key for key, _ in self._items()]

    def add_index(self, name: str, func: IndexFunc) -> None:
        """Maintain a secondary index (client-go's indexers): ``func(obj)`` → the values to find it by."""
        self._index_funcs[name] = func
        idx: Index = {}
        for key, obj in self._items():
            for v in func(obj):
                add_member(idx, v, _member(v, key))
        self._indexes[name] = idx

    def by_index(self, name: str, value: str) -> builtins.list[Obj]:
        ns = value.partition("/")[0]
        keys = [(ns, m) if isinstance(m, str) else m for m in members(self._indexes.get(name, {}), value)]
        found = (self.get(*k) for k in sorted(keys))
        return [obj for obj in found if obj is not None]

    def _index_remove(self, key: tuple[str, str], obj: Obj) -> None:
        for name, func in self._index_funcs.items():
            idx = self._indexes[name]
            for v in func(obj):
                discard_member(idx, v, _member(v, key))

    def _index_add(self, key: tuple[str, str], obj: Obj) -> None:
        for name, func in self._index_funcs.items():
            idx = self._indexes[name]
            for v in func(obj):
                add_member(idx, v, _member(v, key))

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Obj]:
        return iter(self.list())

    @property
    def resource_version(self) -> str:
        return self._rv

    # ------------------------------------------------------------------ lifecycle

    def add_handler(self, handler: Handler, *, replay: bool = True) -> None:
        """Register ``handler``; with ``replay`` it first sees every cached object as ADDED."""
        self.handlers.append(handler)
        if replay:
            for obj in self.list():
                self._call(handler, ADDED, obj, None)

    def start(self, supervisor: Spawner | None = None) -> asyncio.Task[None]:
        """Start the list/watch loop (under ``supervisor`` when given: crashes restart it with a re-list)."""
        if self._task is None or self._task.done():
            self.stopped.clear()
            name = f"informer:{self.name}"
            if supervisor is not None:
                self._task = supervisor.spawn(name, self._run)
            else:
                self._task = asyncio.create_task(self._run(), name=name)
        return self._task

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def wait_synced(self, timeout: float | None = None) -> bool:
        """True once the first LIST is in the cache; False when the informer gave up or on timeout."""
        waiters = [asyncio.ensure_future(self.synced.wait()), asyncio.ensure_future(self.stopped.wait())]
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
        return self.synced.is_set()

    def healthy(self, now: float | None = None) -> bool:
        """Synced, and the watch is open or was re-opening for less than ``grace`` seconds."""
        if not self.synced.is_set() or not self.running or self._outage_relist:
            return False
        if self._down_since is None:
            return True
        return (now if now is not None else time.monotonic()) - self._down_since < self.grace

    def health(self, now: float | None = None) -> tuple[bool, str]:
        """(healthy, why) in words for the readiness probe."""
        now = now if now is not None else time.monotonic()
        if self.error is not None:
            return False, f"gave up: {self.error}"
        if not self.running:
            return False, "not running"
        if not self.synced.is_set():
            return False, "initial list not complete" + (f" ({self.last_failure})" if self.last_failure else "")
        if self._outage_relist:
            return False, f"re-listing after an outage ({self.last_failure or 'watch lost'})"
        if self._down_since is not None:
            down = now - self._down_since
            ok = down < self.grace
            return ok, f"watch down for {down:.1f}s: {self.last_failure or 'reconnecting'}"
        return True, "watching"

    def request_relist(self) -> None:
        """Re-list at the next event or bookmark (e.g. the transform now keeps more fields)."""
        self._relist_requested = True

    def _mark_down(self, why: str) -> None:
        self._watching = False
        self.last_failure = why
        if self._down_since is None:
            self._down_since = time.monotonic()

    def _mark_open(self) -> None:
        self._watching = True
        self._down_since = None

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        self._runs += 1
        if self._runs > 1:  # restarted after a crash: nothing about the cache can be trusted
            self._need_list = True
        delay = 0.0
        try:
            while True:
                try:
                    if self._down_since is not None and time.monotonic() - self._down_since >= self.grace:
                        # an outage, not a watch re-opened on time: re-list before claiming health again
                        self._need_list = True
                        self._outage_relist = True
                    if not (self._need_list or not self._rv):
                        await self._watch()
                    elif self.client.watch_list:
                        await self._watch(initial=True)
                    else:
                        await self._list()
                        await self._watch()
                    delay = 0.0
                except ApiError as e:
                    self._mark_down(f"{e.status} {e.reason}: {e.message}"[:300] if e.status else e.message[:300])
                    if e.gone:
                        log.info("resourceVersion expired, re-listing", extra={"resource": self.name})
                        self._need_list = True
                        self._rv = ""  # a streaming list from it would be refused the same way
                        continue
                    if (e.forbidden or e.not_found) and not self.synced.is_set() and self._lists == 0:
                        # RBAC denies it / the resource is not served: retrying cannot help until that
                        # changes; the owner of the informer decides when to try again
                        self.error = e
                        log.warning(
                            "cannot list %s: %s",
                            self.name,
                            e.reason or e.status,
                            extra={"resource": self.name},
                        )
                        return
                    if e.forbidden:  # RBAC removed while running: keep the cache, keep trying slowly
                        self._need_list = True
                    delay = retry_delay(e, delay)
                    log_retry = log.info if cache_initializing(e) else log.warning  # expected on a fresh API server
                    log_retry(
                        "informer %s: %s; retrying in %.2fs",
                        self.name,
                        e,
                        delay,
                        extra={"resource": self.name},
                    )
                    await asyncio.sleep(delay * random.uniform(0.8, 1.2))
                else:
                    self._mark_down("watch closed")  # server-side timeout: re-opened at once
                if self.metrics is not None:
                    self.metrics.watch_restarts.labels(resource=self.resource.plural).inc()
        except BaseException as e:
            self._mark_down(f"informer loop ended: {type(e).__name__}: {e}")
            raise
        finally:
            self.stopped.set()

    def _params(self) -> dict[str, Any]:
        return {"labelSelector": self.label_selector, "fieldSelector": self.field_selector}

    async def _list(self) -> None:
        """Paginated LIST; replaces the cache and emits the differences as events."""
        items: dict[tuple[str, str], Obj] = {}
        path = self.resource.path(self.namespace)

        def fetch(cont: str) -> asyncio.Future[Any]:
            params = {**self._params(), "limit": self.page_size, "continue": cont}
            return asyncio.ensure_future(self.client.get(path, params))

        cont = ""
        pending = fetch(cont)
        try:
            while True:
                try:
                    page = await pending
                except ApiError as e:
                    if e.gone and cont:  # continue token expired: start over, unpaginated consistency is lost
                        items.clear()
                        cont = ""
                        pending = fetch(cont)
                        continue
                    raise
                meta = page.get("metadata") or {}
                cont = str(meta.get("continue") or "")
                if cont:  # the next page is served while this one is decoded into the cache
                    pending = fetch(cont)
                    await asyncio.sleep(0)  # let the request go out before the decoding holds the loop
                kind = str(page.get("kind") or "").removesuffix("List") or self.resource.kind
                api_version = str(page.get("apiVersion") or self.resource.api_version)
                for raw in page.get("items") or []:
                    raw.setdefault("apiVersion", api_version)
                    raw.setdefault("kind", kind)
                    obj = self.transform(raw) if self.transform else raw
                    key = _key(obj)
                    prev = self.get(*key)
                    if prev is not None:
                        _same_strings(obj, prev)
                        key = _key(obj)
                    items[key] = obj
                if not cont:
                    rv = str(meta.get("resourceVersion") or "")
                    break
        finally:
            if not pending.done():  # cancelled, or a page could not be processed: no request left behind
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)
        await self._replace_with(items, rv)

    async def _replace_with(self, items: dict[tuple[str, str], Obj], rv: str) -> None:
        """The end of a (streaming) list: ``items`` (transformed, keyed) become the cache as of ``rv``, and
        the handlers see what changed."""
        self._lists += 1
        if self._lists > 1 and self.metrics is not None:
            self.metrics.relists.labels(resource=self.resource.plural).inc()
        old = self._by_ns  # replaced, not changed, by _install: the handlers' view until the events are out
        by_ns, indexes = await self._build_views(items)  # readers keep the old, consistent cache meanwhile
        self._install(items, by_ns, indexes)
        self._rv, self._need_list = rv, False
        self._mark_open()
        self._outage_relist = False
        await self._emit_differences(old, items)
        self.synced.set()

    async def _build_views(
        self, items: dict[tuple[str, str], Obj]
    ) -> tuple[dict[str, dict[str, Obj]], dict[str, Index]]:
        """The per-namespace view and the secondary indexes of a LIST's objects, built aside with a yield
        to the loop every ``4 * emit_chunk`` objects (a re-list of 100,000 pods is O(n) dict work)."""
        by_ns: dict[str, dict[str, Obj]] = {}
        funcs = list(self._index_funcs.items())
        indexes: dict[str, Index] = {name: {} for name, _ in funcs}
        coop = Cooperative(4 * self.emit_chunk)
        for key, obj in items.items():
            by_ns.setdefault(key[0], {})[key[1]] = obj
            for name, func in funcs:
                idx = indexes[name]
                for v in func(obj):
                    add_member(idx, v, _member(v, key))
            await coop.tick()
        return by_ns, indexes

    def _install(
        self,
        items: dict[tuple[str, str], Obj],
        by_ns: dict[str, dict[str, Obj]],
        indexes: dict[str, Index],
    ) -> None:
        self._by_ns, self._size = by_ns, len(items)
        self._indexes.update(indexes)
        for name, func in list(self._index_funcs.items()):
            if name not in indexes:  # added while the views were being built
                self.add_index(name, func)

    def _replace_store(self, items: dict[tuple[str, str], Obj]) -> None:
        self._by_ns, self._size = {}, len(items)
        for (ns, name), obj in items.items():
            self._by_ns.setdefault(ns, {})[name] = obj
        for name, func in list(self._index_funcs.items()):
            self.add_index(name, func)

    async def _emit_differences(
        self, old: dict[str, dict[str, Obj]], new: dict[tuple[str, str], Obj]
    ) -> None:
        """Emit what a LIST changed, yielding to the loop every ``emit_chunk`` events: the first LIST of
        100,000 pods would otherwise run 100,000 handler calls (owner walks) in one go and stall probes,
        watches and Lease renewals for seconds. Interrupted (cancelled), the cache is rolled back to what
        the handlers have seen and a re-list is due, so the next LIST emits the rest."""
        pending: builtins.list[tuple[tuple[str, str], Obj | None, Obj | None]] = []
        coop = Cooperative(4 * self.emit_chunk)
        try:
            for key, obj in new.items():
                old_ns = old.get(key[0])
                prev = old_ns.get(key[1]) if old_ns is not None else None
                if prev is None or _rv(prev) != _rv(obj):
                    pending.append((key, obj, prev))
                await coop.tick()
        except BaseException:  # nothing emitted yet: the handlers have seen the old cache
            self._replace_store(dict(_flat(old)))
            self._need_list = True
            raise
        pending += [(key, None, prev) for key, prev in _flat(old) if key not in new]
        done = 0
        coop = Cooperative(self.emit_chunk)
        try:
            for _, new_obj, prev in pending:
                if new_obj is None:
                    assert prev is not None
                    self._emit(DELETED, prev, None)
                else:
                    self._emit(ADDED if prev is None else MODIFIED, new_obj, prev)
                done += 1
                await coop.tick()
        except BaseException:
            seen = dict(new)
            for key, _obj, prev in pending[done:]:
                if prev is None:
                    seen.pop(key, None)
                else:
                    seen[key] = prev
            self._replace_store(seen)
            self._need_list = True
            raise

    async def _watch(self, *, initial: bool = False) -> None:
        """Watch from the cache's resourceVersion; with ``initial``, a streaming list first: the objects as
        of a resourceVersion not older than ours (or the newest, without one) arrive as ADDED events and
        replace the cache at the ``k8s.io/initial-events-end`` bookmark, then the stream goes on as the
        watch. A server that refuses streaming lists (400 / 422) turns them off for the client, and this
        informer lists instead."""
        params: dict[str, Any] = {
            **self._params(),
            "resourceVersion": self._rv,
            "allowWatchBookmarks": True,
            "timeoutSeconds": random.randint(*self.watch_timeout),
        }
        if initial:
            params.update(sendInitialEvents=True, resourceVersionMatch="NotOlderThan")
        # the objects of a streaming list, until its bookmark (None: watching)
        items: dict[tuple[str, str], Obj] | None = {} if initial else None
        t0 = time.monotonic()
        opened = False

        def on_open() -> None:
            nonlocal opened
            opened = True
            if not initial:  # a streaming list counts as open once its objects are the cache (_replace_with)
                self._mark_open()

        try:
            # a silent connection longer than the server-side timeout + margin is dead
            async for event in self.client.watch(
                self.resource.path(self.namespace),
                params,
                timeout=params["timeoutSeconds"] + 30,
                on_open=on_open,
            ):
                if items is None:
                    if self._follow(event):
                        return
                elif await self._initial(event, items):
                    log.info(
                        "%s: %d objects by streaming list in %.2fs",
                        self.name,
                        len(items),
                        time.monotonic() - t0,
                        extra={"resource": self.name},
                    )
                    items = None
            return
        except ApiError as e:
            # refused as a request (the server does not serve streaming lists), not failed in flight
            if not (initial and not opened and e.status in (400, 422) and self.client.watch_list):
                raise
            self.client.watch_list = False
            log.info(
                "the API server does not serve streaming lists (%s): paginated LISTs from now on",
                e.message[:200] or e.reason,
                extra={"resource": self.name},
            )
        await self._list()
        await self._watch()

    async def _initial(self, event: dict[str, Any], items: dict[tuple[str, str], Obj]) -> bool:
        """One event of a streaming list's objects; True at its end, once the cache holds them."""
        etype = event.get("type")
        obj = event.get("object") or {}
        if etype == "ERROR":
            raise self._watch_error(obj)
        if etype == "BOOKMARK":
            meta = obj.get("metadata") or {}
            if (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
                await self._replace_with(items, _rv(obj))
                return True
            return False
        obj = self._received(obj)
        key = _key(obj)
        if etype == DELETED:  # the server sends ADDED events only; a later change is taken as it comes
            items.pop(key, None)
            return False
        prev = self.get(*key)
        if prev is not None:
            _same_strings(obj, prev)
            key = _key(obj)
        items[key] = obj
        return False

    def _received(self, obj: Obj) -> Obj:
        """An object of a watch event as the cache keeps it: with its type (watch events may leave it out)
        and transformed."""
        obj.setdefault("apiVersion", self.resource.api_version)
        obj.setdefault("kind", self.resource.kind)
        return self.transform(obj) if self.transform else obj

    def _watch_error(self, obj: Obj) -> ApiError:
        return ApiError(
            int(obj.get("code") or 0),
            str(obj.get("reason") or ""),
            str(obj.get("message") or ""),
            obj,
            method="WATCH",
            path=self.resource.path(self.namespace),
        )

    def _follow(self, event: dict[str, Any]) -> bool:
        """One watch event into the cache and to the handlers; True when a re-list is due instead."""
        etype = event.get("type")
        obj = event.get("object") or {}
        if etype == "ERROR":
            raise self._watch_error(obj)
        if self._relist_requested:
            self._relist_requested = False
            self._need_list = True
            return True
        rv = _rv(obj)
        if etype == "BOOKMARK":
            if rv:
                self._rv = rv
            return False
        obj = self._received(obj)
        key = _key(obj)
        prev = self.get(*key)
        if etype in (ADDED, MODIFIED):
            ns_items = self._by_ns.setdefault(key[0], {})
            if prev is not None:
                self._index_remove(key, prev)
                _same_strings(obj, prev)  # the map keeps its key string: the cached one, as the object's
                key = _key(obj)
            else:
                self._size += 1
            ns_items[key[1]] = obj
            self._index_add(key, obj)
            self._emit(ADDED if prev is None else MODIFIED, obj, prev)
        elif etype == DELETED:
            if prev is not None:
                self._index_remove(key, prev)
            in_ns = self._by_ns.get(key[0])
            if in_ns is not None and in_ns.pop(key[1], None) is not None:
                self._size -= 1
                if not in_ns:
                    del self._by_ns[key[0]]
            self._emit(DELETED, obj, prev)
        if rv:
            self._rv = rv
        return False

    def _emit(self, etype: str, obj: Obj, old: Obj | None) -> None:
        for h in list(self.handlers):
            self._call(h, etype, obj, old)

    def _call(self, handler: Handler, etype: str, obj: Obj, old: Obj | None) -> None:
        try:
            handler(etype, obj, old)
        except Exception:  # a handler bug must not kill the informer
            log.exception("event handler failed", extra={"resource": self.name})
