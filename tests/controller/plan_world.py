"""An in-memory cluster for driving the real controller (handlers, indexes, plan cache, reconciler, writers)
without an API server, and a fresh grouper over the same cluster to compare it with.

- :class:`World` is the cluster's storage: objects by (apiVersion, kind, namespace, name), resource
  versions, uids, creation times; its watch events go to the running grouper's informers.
- :class:`FakeClient` is the writers' side of the API server: POST / PUT / DELETE of PodGroups and merge
  patches of pods are applied to the world (conflicts, preconditions and 404s as the API server answers)
  and recorded; Events are accepted and not recorded (they are not what the property is about).
- :func:`start_grouper` builds a :class:`~grouper.controller.controller.Controller` whose informers are
  filled from the world (a LIST) instead of started: every other part is the one ``grouper run`` uses.
  ``handlers=False``: a grouper that only plans (nothing routes its pods: the caller says which pods a
  workload has), the cheap fresh grouper the property compares every pass with.

Used by ``tests/controller/test_plan_property.py`` (and its long run in ``tests/fuzz``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from grouper.controller.controller import Controller, ControllerSettings
from grouper.controller.tuning import DEFAULT_TUNING, Tuning
from grouper.core.grouping import Grouper
from grouper.karta import DefinitionRegistry
from grouper.kube.cache import KARTA, POD, PODGROUP, PRIORITY_CLASS, _KindState
from grouper.kube.discovery import WELL_KNOWN, Resource
from grouper.kube.informer import ADDED, DELETED, MODIFIED
from grouper.kube.transport import ApiError
from grouper.model import objects as o
from grouper.model.objects import GVK, Obj
from grouper.observability.metrics import Metrics
from grouper.runtime.supervisor import Supervisor
from grouper.runtime.wiring import build_controller

NS = "ns"
JOB = GVK("batch", "v1", "Job")
JOBSET = GVK("jobset.x-k8s.io", "v1alpha2", "JobSet")
BATCHLING = GVK("example.com", "v1", "Batchling")
LWS = GVK("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet")
STATEFULSET = GVK("apps", "v1", "StatefulSet")
# Every kind the generated workloads' decisions read: an informer for each exists from the start (a kind
# asked for and not cached would need discovery, i.e. an API server)
KINDS: dict[GVK, Resource] = {
    gvk: WELL_KNOWN.get(gvk) or Resource(gvk.group, gvk.version, gvk.kind, plural, namespaced)
    for gvk, plural, namespaced in (
        (KARTA, "kartas", False),
        (PRIORITY_CLASS, "priorityclasses", False),
        (JOB, "jobs", True),
        (JOBSET, "jobsets", True),
        (BATCHLING, "batchlings", True),
        (LWS, "leaderworkersets", True),
        (STATEFULSET, "statefulsets", True),
        (PODGROUP, "podgroups", True),
        (POD, "pods", True),
    )
}
_PLURALS = {"pods": POD, "podgroups": PODGROUP}

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace, name
# uids and resourceVersions unique in the process, as in one cluster: what caches by (uid, resourceVersion)
# and outlives a world (the Karta evaluators' results) must never mistake one world's object for another's
_UIDS = itertools.count(1)
_VERSIONS = itertools.count(1000)


def key_of(obj: Obj) -> Key:
    return str(obj.get("apiVersion")), str(obj.get("kind")), o.namespace(obj), o.name(obj)


def canon(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def clone(obj: Any) -> Any:
    """A copy of a JSON object, as the API server hands out: decoded from its JSON, sharing nothing with
    ``obj`` (7x cheaper than ``copy.deepcopy``, most of a generated sequence's time before)."""
    return orjson.loads(orjson.dumps(obj))


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386 JSON merge patch, in place."""
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict):
            sub = target.get(k)
            if not isinstance(sub, dict):
                sub = target[k] = {}
            _merge(sub, v)
        else:
            target[k] = v


@dataclass
class Write:
    verb: str  # create | update | patch | delete
    kind: str  # PodGroup | Pod
    name: str
    body: bytes  # canonical JSON of what was sent (the object, the patch, the deleted object's uid)


@dataclass
class World:
    objects: dict[Key, Obj] = field(default_factory=dict)
    rv: int = 0
    writes: list[Write] = field(default_factory=list)
    grouper: Controller | None = None  # the running grouper: it sees every event
    # (apiVersion, kind) -> the objects of that kind, by key: ``of`` reads one kind, not the whole world
    kinds: dict[tuple[str, str], dict[Key, Obj]] = field(default_factory=dict)

    # ------------------------------------------------------------------ storage

    def uid(self) -> str:
        return f"00000000-0000-4000-8000-{next(_UIDS):012x}"

    def get(self, gvk: GVK, namespace: str, name: str) -> Obj | None:
        return self.objects.get((gvk.api_version, gvk.kind, namespace, name))

    def of(self, gvk: GVK) -> list[Obj]:
        of_kind = self.kinds.get((gvk.api_version, gvk.kind))
        return [of_kind[k] for k in sorted(of_kind)] if of_kind else []

    def names(self, gvk: GVK) -> set[tuple[str, str]]:
        """The (namespace, name) of every object of one kind."""
        return {k[2:] for k in self.kinds.get((gvk.api_version, gvk.kind), ())}

    def put(self, obj: Obj) -> Obj:
        """Create or replace ``obj`` (a new resourceVersion; a uid when it has none) and tell the grouper."""
        obj = clone(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("uid"):
            meta["uid"] = self.uid()
        self.rv = next(_VERSIONS)
        meta["resourceVersion"] = str(self.rv)
        key = key_of(obj)
        etype = MODIFIED if key in self.objects else ADDED
        self.objects[key] = obj
        self.kinds.setdefault(key[:2], {})[key] = obj
        self._tell(etype, obj)
        return obj

    def delete(self, key: Key) -> Obj | None:
        obj = self.objects.pop(key, None)
        if obj is not None:
            del self.kinds[key[:2]][key]
            self.rv = next(_VERSIONS)
            self._tell(DELETED, obj)
        return obj

    def _tell(self, etype: str, obj: Obj) -> None:
        if self.grouper is None:
            return
        inf = self.grouper.cache.informer(GVK.of(obj))
        assert inf is not None, f"no informer for {GVK.of(obj)}"
        inf._follow({"type": etype, "object": clone(obj)})

    def collect_garbage(self) -> int:
        """The garbage collector: delete every object all of whose owners are gone (background deletion)."""
        uids = {o.uid(obj) for obj in self.objects.values()}
        gone = [
            k for k, obj in self.objects.items()
            if o.owner_references(obj) and not any(r.get("uid") in uids for r in o.owner_references(obj))
        ]
        for k in sorted(gone):
            self.delete(k)
        return len(gone)


class FakeClient:
    """What the writers ask of ``KubeClient``, answered from the world."""

    watch_list = True
    last_success: float | None = None

    def __init__(self, world: World) -> None:
        self.world = world

    @staticmethod
    def _parse(path: str) -> tuple[str, GVK | None, str | None]:
        parts = path.strip("/").split("/")
        i = parts.index("namespaces")
        ns, plural = parts[i + 1], parts[i + 2]
        name = parts[i + 3] if len(parts) > i + 3 else None
        return ns, _PLURALS.get(plural), name

    async def create(self, path: str, obj: Obj) -> Any:
        ns, gvk, _ = self._parse(path)
        if gvk is None:
            return obj  # an Event
        assert gvk == PODGROUP, path
        if self.world.get(gvk, ns, o.name(obj)) is not None:
            raise ApiError(409, "AlreadyExists", f"podgroups {o.name(obj)} already exists", method="POST", path=path)
        self.world.writes.append(Write("create", gvk.kind, o.name(obj), canon(obj)))
        obj = clone(obj)
        obj["metadata"]["namespace"] = ns
        obj["metadata"]["creationTimestamp"] = "2026-12-01T00:00:00Z"
        return self.world.put(obj)

    async def replace(self, path: str, obj: Obj) -> Any:
        ns, gvk, name = self._parse(path)
        assert gvk == PODGROUP and name, path
        cur = self.world.get(gvk, ns, name)
        if cur is None:
            raise ApiError(404, "NotFound", f"podgroups {name} not found", method="PUT", path=path)
        if o.meta(obj).get("resourceVersion") != o.meta(cur).get("resourceVersion"):
            raise ApiError(409, "Conflict", "the object has been modified", method="PUT", path=path)
        self.world.writes.append(Write("update", gvk.kind, name, canon(obj)))
        return self.world.put(obj)

    async def merge_patch(self, path: str, patch: dict[str, Any], *, metadata_only: bool = False) -> Any:
        ns, gvk, name = self._parse(path)
        if gvk is None:
            return patch  # an Event series
        assert gvk == POD and name, path
        cur = self.world.get(gvk, ns, name)
        if cur is None:
            raise ApiError(404, "NotFound", f"pods {name} not found", method="PATCH", path=path)
        self.world.writes.append(Write("patch", gvk.kind, name, canon(patch)))
        new = clone(cur)
        _merge(new, patch)
        return self.world.put(new)

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        ns, gvk, name = self._parse(path)
        assert method == "DELETE" and gvk == PODGROUP and name, (method, path)
        cur = self.world.get(gvk, ns, name)
        if cur is None:
            raise ApiError(404, "NotFound", f"podgroups {name} not found", method=method, path=path)
        want = ((body or {}).get("preconditions") or {}).get("uid")
        if want and want != o.uid(cur):
            raise ApiError(409, "Conflict", "precondition failed: uid", method=method, path=path)
        self.world.writes.append(Write("delete", gvk.kind, name, canon(o.uid(cur))))
        self.world.delete(key_of(cur))
        return {"kind": "Status", "status": "Success"}

    async def get_object(self, path: str) -> Any:
        ns, gvk, name = self._parse(path)
        assert gvk is not None and name
        return clone(self.world.get(gvk, ns, name))


BY_HAND = replace(DEFAULT_TUNING, coalesce_seconds=0.0)  # passes run by hand: none put off while patches fly


def start_grouper(
    world: World,
    grouper: Grouper,
    *,
    definitions: DefinitionRegistry | None = None,
    metrics: Metrics | None = None,
    handlers: bool = True,
    tuning: Tuning = BY_HAND,
    max_concurrent_reconciles: int = ControllerSettings.max_concurrent_reconciles,
) -> Controller:
    """A grouper process over ``world``: the controller ``grouper run`` builds, its caches filled by one LIST
    of every kind (Kartas first, as ``Controller.start``), the handlers attached (they see every cached
    object as ADDED and route the pods). No workers: the caller runs the passes. ``definitions``: the
    cluster's Kartas are applied to it (``KartaSync``); without, the grouper's registry is used as it is.
    ``handlers=False``: no event handler is attached (the cache's indexes are), so no pod is routed and
    nothing queued: the caller puts the pods it wants planned in the workload index. ``tuning``: by default
    no pass is put off while patches fly (the caller runs each pass when it means to).
    ``max_concurrent_reconciles``: the flag's budgets (PodGroup writes, twice that pod patches in flight)."""
    ctl = build_controller(
        FakeClient(world),  # type: ignore[arg-type]
        ControllerSettings(resync_debounce=0.0, tuning=tuning, max_concurrent_reconciles=max_concurrent_reconciles),
        grouper=grouper,
        metrics=metrics or Metrics(),
        supervisor=Supervisor(),
        definitions=definitions,
    )
    if not handlers:
        ctl.handlers.attach = lambda gvk, informer: None  # type: ignore[method-assign]
    for gvk, res in KINDS.items():
        inf = ctl.cache._new_informer(gvk, res)
        for obj in world.of(gvk):
            inf._follow({"type": ADDED, "object": clone(obj)})
        inf.synced.set()
        ctl.cache.kinds[gvk] = _KindState(informer=inf)
        for cb in ctl.cache.on_informer:
            cb(gvk, inf)
    return ctl


__all__ = [
    "BATCHLING", "JOB", "JOBSET", "KINDS", "LWS", "NS", "STATEFULSET", "FakeClient", "World", "Write", "canon", "clone",
    "key_of", "start_grouper",
]
