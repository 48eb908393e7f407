"""Informer caches for everything grouping reads, and the synchronous ``Lookups`` over them.

``ClusterCache`` owns one informer per GroupVersionKind, started on demand: the first time grouping
asks for a kind that is not watched, :class:`CacheLookups` raises :class:`NotCached` and records the
kind; the reconciler then calls :meth:`ClusterCache.ensure` (discovery → LIST → WATCH) and re-queues the
workload. Kinds the API server does not serve are remembered for a short while; kinds RBAC forbids are
answered with ``LookupForbidden`` and re-probed every ``forbidden_retry`` seconds.

Lookups never do I/O, so ``Grouper.decide`` stays synchronous and pure, exactly as in ``grouper plan``.

Two policies live here because they decide what is cached:

- **What a cached pod keeps** (:class:`PodShape`): the metadata grouping reads, a few spec fields, the
  phase, its ``nvidia.com/gpu`` request (:data:`GPUS_FIELD`) and, while it is unschedulable, its
  ``PodScheduled=False`` condition (what the gang state reports) — plus any ``spec``/``status`` field a loaded Karta pod selector reads (the shape widens when
  such a definition is loaded, and the pod informer re-lists to fill the field in).
- **Which kinds may be cached at all** (:class:`KindPolicy`): an owner reference is written by whoever
  creates the pod, so a tenant could otherwise make the grouper start a cluster-wide informer of any
  kind (ConfigMaps, Leases, ...). Only the kinds of the native plugins and the objects they read, the
  kinds of loaded Karta definitions and ``--extra-owner-kinds`` are cached; a reference to any other
  kind stops the owner walk there (:class:`KindNotAllowed`, recorded in the decision).
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import logging
import re
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from grouper.core.hold import DEFINITION_ANNOTATION
from grouper.core.lookups import by_namespace_and_name, matches_labels, named_with_prefix
from grouper.kube.compact import Interner
from grouper.kube.discovery import Discovery, Resource
from grouper.kube.informer import Informer, Spawner, strip_managed_fields
from grouper.kube.transport import ApiError, KubeClient
from grouper.model import objects as o
from grouper.model.bounded import BoundedMemo
from grouper.model.errors import GroupingError, LookupForbidden
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import POD_GROUP_ANNOTATION
from grouper.observability.metrics import Metrics

log = logging.getLogger(__name__)

POD = GVK("", "v1", "Pod")
NAMESPACE = GVK("", "v1", "Namespace")
CONFIGMAP = GVK("", "v1", "ConfigMap")
PRIORITY_CLASS = GVK("scheduling.k8s.io", "v1", "PriorityClass")
PODGROUP = GVK("scheduling.run.ai", "v2alpha2", "PodGroup")
KARTA = GVK("run.ai", "v1alpha1", "Karta")


# PodGroups by the ``<namespace>/<name up to a UID in it>`` prefixes of their names, so "PodGroups named
# pg-<workload>-<uid>[-…]" (the JobSet legacy-shape question) is one lookup, not a scan of the namespace.
PODGROUP_NAME_PREFIX_INDEX = "name-uid-prefix"
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# Pods by the value of one label (``<namespace>/<value>``), built on first use per label key: label
# selector lists (Deployment, Knative, MPI plugins) read one bucket instead of the namespace.
LABEL_INDEX_PREFIX = "label:"
MAX_LABEL_INDEXES = 32


def podgroup_name_prefixes(pg: Obj) -> list[str]:
    """Index values of a PodGroup: every ``<namespace>/<prefix>`` whose prefix ends with a UID at a
    name boundary (the whole name, or followed by ``-``)."""
    name, ns = o.name(pg), o.namespace(pg)
    return [
        f"{ns}/{name[: m.end()]}"
        for m in _UID.finditer(name)
        if m.end() == len(name) or name[m.end()] == "-"
    ]


PODGROUP_OWNER_INDEX = "owner-uid"  # PodGroups by their owners' uids (a workload's PodGroups)
POD_OWNED_INDEX = "pod-owned"  # PodGroups owned by a pod (a per-pod PodGroup), by namespace: few, if any
# PodGroups a Karta definition produced (they record it: core/hold.py), by their owners' uids: what each pass
# checks for holds, so a workload no definition groups costs a lookup, not a walk of its PodGroups
PODGROUP_DEFINED_INDEX = "defined-owner-uid"


def podgroup_owner_uids(pg: Obj) -> list[str]:
    return [str(r.get("uid")) for r in o.owner_references(pg) if r.get("uid")]


def defined_podgroup_owner_uids(pg: Obj) -> list[str]:
    return podgroup_owner_uids(pg) if DEFINITION_ANNOTATION in o.annotations(pg) else []


def pod_owned_namespaces(pg: Obj) -> list[str]:
    """Index values of a PodGroup: its namespace when a pod owns it."""
    return [o.namespace(pg)] if any(r.get("kind") == "Pod" for r in o.owner_references(pg)) else []


def _label_value(key: str) -> Callable[[Obj], list[str]]:
    def values(obj: Obj) -> list[str]:
        v = o.labels(obj).get(key)
        return [f"{o.namespace(obj)}/{v}"] if v is not None else []

    return values


class NotCached(GroupingError):
    """Grouping asked for a kind that is not watched yet. The reconciler starts its informer and retries.

    A ``GroupingError`` so that ``Grouper.decide`` turns it into an error decision quietly; the
    reconciler recognises the situation from :attr:`CacheLookups.misses`, not from the decision.
    """

    reason = "NotCached"

    def __init__(self, gvk: GVK) -> None:
        self.gvk = gvk
        super().__init__(f"{gvk} is not cached yet")


class KindNotAllowed(LookupForbidden):
    """An owner reference names a kind the grouper does not cache (see :class:`KindPolicy`)."""

    def __init__(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        super().__init__(api_version, kind, namespace, name)
        where = f"{namespace}/{name}" if namespace else name
        Exception.__init__(
            self,
            f"{kind} {where} ({api_version}) is not a kind the grouper reads (not a native plugin kind, "
            "not described by a loaded Karta definition, not in --extra-owner-kinds)",
        )


@dataclass
class KindPolicy:
    """Which (group, kind) pairs may be cached: fixed ones, plus those of the loaded Karta definitions."""

    fixed: frozenset[tuple[str, str]] = frozenset()
    karta: frozenset[tuple[str, str]] = frozenset()
    allow_all: bool = False  # tests and embedders that bring their own lookups

    def allowed(self, gvk: GVK) -> bool:
        key = (gvk.group, gvk.kind)
        return self.allow_all or key in self.fixed or key in self.karta


_POD_META = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "labels",
    "annotations",
    "ownerReferences",
    "generateName",
)
_POD_SPEC = ("schedulerName", "priorityClassName", "nodeName", "schedulingGroup")
# The pod's nvidia.com/gpu request, kept in the cached spec under a name no PodSpec field has (the
# containers are dropped; the gang state sums it). Absent when 0.
GPUS_FIELD = "podgrouper.gpus"
GPU_RESOURCE = "nvidia.com/gpu"
# The PodScheduled=False condition's fields a cached pod keeps (the scheduler's reason for holding it).
_POD_CONDITION = ("type", "status", "reason", "message", "lastTransitionTime")
# `.spec.foo`, `.status["foo"]`, `.spec?.foo` ...: the top-level field a jq path starts with
_POD_PATH = re.compile(r"""\.(spec|status)\??\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)|\[\s*"([^"]+)"\s*\])""")


class _Sharing:
    """Canonical copies of what cached pods repeat, so 100,000 pods do not hold 100,000 copies of it.

    - strings (namespaces, label and annotation keys and values, timestamps): one object
      per distinct value, from a bounded :class:`~grouper.kube.compact.Interner` (values that turn out
      unique only cost a slot until it starts over);
    - whole parts equal to the same part of the last pod cached with the same owner (its labels, its
      annotations, its ownerReferences list: the siblings of a Deployment share all three): that
      sibling's object itself (one entry per owner, bounded too); so is ``generateName``;
    - ``spec`` and ``status`` as kept (scheduler, node, phase: a handful of distinct values): one dict per
      distinct content.

    Sound because cached objects are read-only by contract: every reader copies before it changes
    anything (``labels_of`` / ``annotations_of`` return copies; ``tests/controller/test_slim_decisions.py``
    checks that deciding leaves pods and owners as they were).
    """

    def __init__(self, max_entries: int = 8192, max_owners: int = 1024) -> None:
        # 8,192 strings: what repeats (namespaces, label keys, node names) is met again soon after the table
        # starts over; a larger table only keeps more unique values (uids, names) alive, and under churn it
        # grows for long before its first restart (at 65,536: still filling 15 min into the soak at 20 pods/s;
        # every table here is sized to fill within minutes of churn, so a steady churn holds a steady heap)
        self.strings = Interner(max_entries)
        self.parts: Interner = Interner(4096)
        # owner uid -> metadata of the last pod cached with it. Small: a LIST returns an owner's pods
        # together (sorted by name) and a controller creates them together, and an entry outlives its
        # pod until the table starts over (at 4,096 owners it took the soak's churn 15 minutes to fill).
        self.siblings: BoundedMemo[str, dict[str, Any]] = BoundedMemo(max_owners)
        self.max_owners = max_owners

    def string(self, value: Any) -> Any:
        return self.strings(value) if type(value) is str and len(value) <= 256 else value

    def mapping(self, value: Any, sibling: Any) -> Any:
        """A labels / annotations map: the sibling's when equal, else a copy with shared strings."""
        if not isinstance(value, dict):
            return value
        if sibling is not None and sibling == value:
            return sibling
        s = self.string
        return {s(k): s(v) for k, v in value.items()}

    def part(self, value: dict[str, Any]) -> dict[str, Any]:
        """A small dict of plain values (``spec`` / ``status`` as kept): one object per distinct content."""
        try:
            key = tuple(value.items())
            hash(key)
        except TypeError:  # a widened field holding a list or a map: kept as it is
            return value
        return self.parts(_Part(key, value)).value

    def metadata(self, meta: dict[str, Any]) -> dict[str, Any]:
        refs = meta.get("ownerReferences")
        owner = refs[0].get("uid") if isinstance(refs, list) and refs and isinstance(refs[0], dict) else None
        sibling = self.siblings.get(owner) if isinstance(owner, str) else None
        out: dict[str, Any] = {}
        for k in _POD_META:
            if k not in meta:
                continue
            v = meta[k]
            if k in ("labels", "annotations"):
                v = self.mapping(v, sibling.get(k) if sibling is not None else None)
            elif k in ("ownerReferences", "generateName"):  # the same for the siblings at most
                if sibling is not None and sibling.get(k) == v:
                    v = sibling[k]
            elif k in _SHARED_META:
                v = self.string(v)
            out[k] = v
        if isinstance(owner, str):
            self.siblings.put(owner, out)
        return out


class _Part:
    """A dict keyed by its items, for :attr:`_Sharing.parts` (dicts themselves are not hashable)."""

    __slots__ = ("key", "value")

    def __init__(self, key: tuple[Any, ...], value: dict[str, Any]) -> None:
        self.key, self.value = key, value

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Part) and self.key == other.key


# metadata strings that repeat among pods (per namespace, per owner, per second of creation)
_SHARED_META = frozenset({"namespace", "creationTimestamp", "deletionTimestamp"})


@dataclass
class PodShape:
    """The fields a cached pod keeps. ``widen`` adds fields named by jq paths (Karta pod selectors)."""

    spec: set[str] = field(default_factory=lambda: set(_POD_SPEC))
    status: set[str] = field(default_factory=lambda: {"phase"})
    sharing: _Sharing = field(default_factory=_Sharing, repr=False, compare=False)
    # the kept field names, sorted once (slim runs for every pod event); widen sorts them again
    _keys: tuple[tuple[str, ...], tuple[str, ...]] = field(default=((), ()), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._keys = (tuple(sorted(self.spec)), tuple(sorted(self.status)))

    def widen(self, paths: Iterable[str]) -> bool:
        """Keep the spec/status fields these jq paths read; True when something was added."""
        added = False
        for path in paths:
            for m in _POD_PATH.finditer(path or ""):
                target = self.spec if m.group(1) == "spec" else self.status
                name = m.group(2) or m.group(3)
                if name and name not in target:
                    target.add(name)
                    added = True
        if added:
            self.__post_init__()
        return added

    def slim(self, pod: Obj) -> Obj:
        """A pod as cached: containers, volumes, conditions etc. are dropped (most of a pod's size), and
        what repeats among pods is shared (:class:`_Sharing`). Read-only, like every cached object.

        Kept for the gang state: the GPU request (:data:`GPUS_FIELD`, derived from the containers before
        they go) and, only while the pod is held, its ``PodScheduled=False`` condition (one shared dict per
        distinct reason, message and time: the held pods of a gang share it)."""
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        sharing = self.sharing
        spec_keys, status_keys = self._keys
        if isinstance(spec, dict):
            kept_spec = {k: sharing.string(spec[k]) for k in spec_keys if k in spec}
            gpus = pod_gpus(spec)
            if gpus:
                kept_spec[GPUS_FIELD] = gpus
        out: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": sharing.metadata(meta) if isinstance(meta, dict) else {},
            "spec": sharing.part(kept_spec) if isinstance(spec, dict) else {},
        }
        status = pod.get("status")
        if isinstance(status, dict):
            kept = {k: sharing.string(status[k]) for k in status_keys if k in status}
            # only an unbound pod can be held: a running pod's conditions are not looked through
            held = _held(status) if status.get("phase") in (None, "Pending") and "conditions" not in self.status else None
            if held is not None:
                cond = sharing.part({k: sharing.string(held[k]) for k in _POD_CONDITION if k in held})
                # one status per distinct (kept fields, shared condition): the held pods of a gang share it
                key = ("held", tuple(kept.items()), id(cond))
                status_kept = {**kept, "conditions": [cond]}
                try:
                    hash(key)
                    out["status"] = sharing.parts(_Part(key, status_kept)).value
                except TypeError:  # a widened status field holding a list or a map: kept as it is
                    out["status"] = status_kept
            elif kept:
                out["status"] = sharing.part(kept)
        return out


def _held(status: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's ``PodScheduled`` condition when it is ``False`` (the scheduler holds the pod), else None."""
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return None
    for c in conditions:
        if isinstance(c, dict) and c.get("type") == "PodScheduled":
            return c if c.get("status") == "False" else None
    return None


def _quantity(value: Any) -> float:
    """An extended resource's quantity (a whole number: ``"2"`` or ``2``); 0 when unreadable."""
    try:
        return float(value) if isinstance(value, int | float) else float(str(value))
    except ValueError:
        return 0.0


def _gpus_of(res: Any) -> float:
    """The ``nvidia.com/gpu`` of a ``resources`` block (an extended resource's request equals its limit)."""
    if not res:
        return 0.0
    for part in (res.get("limits"), res.get("requests")) if isinstance(res, dict) else ():
        if part and GPU_RESOURCE in part:
            return _quantity(part[GPU_RESOURCE])
    return 0.0


def pod_gpus(spec: dict[str, Any]) -> float:
    """The ``nvidia.com/gpu`` the scheduler reserves for a pod: its containers' sum, or the largest init
    container's when larger (the pod-level ``resources`` when set)."""
    pod_level = _gpus_of(spec.get("resources"))
    if pod_level:
        return pod_level
    total = 0.0
    for c in spec.get("containers") or ():
        if isinstance(c, dict):
            total += _gpus_of(c.get("resources"))
    for c in spec.get("initContainers") or ():
        if isinstance(c, dict):
            total = max(total, _gpus_of(c.get("resources")))
    return total


def slim_pod(pod: Obj) -> Obj:
    """A pod in the default shape (metadata grouping reads, three spec fields, the phase)."""
    return _DEFAULT_SHAPE.slim(pod)


_DEFAULT_SHAPE = PodShape()


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def slim_owner(obj: Obj) -> Obj:
    """Owners and other read objects as cached: no managedFields and no kubectl last-applied copy (a
    second copy of the whole object, never read by grouping — the default grouper does not copy it), and
    every pod template's ``spec`` equal to one already cached is that one (:class:`TemplateSharing`).

    Nothing else is dropped: the native plugins read owners' specs (replicas, templates' annotations,
    parallelism), RayJob/RayService status, and a Karta definition's jq may read any field of its kind
    (the built-in catalog describes Job, JobSet and Deployment too), so only what is provably unread goes.
    """
    obj = strip_managed_fields(obj)
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        ann = meta.get("annotations")
        if isinstance(ann, dict) and LAST_APPLIED in ann:
            obj["metadata"] = {**meta, "annotations": {k: v for k, v in ann.items() if k != LAST_APPLIED}}
    _TEMPLATES.share_in(obj)
    return obj


class TemplateSharing:
    """One copy of each distinct pod template ``spec`` among cached owners.

    The 125 Jobs of a JobSet, the Jobs of every JobSet submitted from one manifest, a Deployment and its
    ReplicaSets carry the same pod template spec (containers, volumes, tolerations: most of an owner's
    size). Each template spec found in an owner (any ``template.spec`` holding ``containers``, at any
    depth: Job, ReplicaSet, JobSet replicatedJobs, PyTorchJob replica specs, Ray groups ...) is looked up
    by a digest of its canonical JSON and, when an equal one is cached, replaced by it (equality is
    checked, not assumed from the digest). Bounded: the table starts over when full. Sound because
    cached objects are read-only (tests/controller/test_slim_decisions.py).
    """

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._table: BoundedMemo[bytes, Any] = BoundedMemo(max_entries)

    def share(self, value: Any) -> Any:
        try:
            key = hashlib.blake2b(orjson.dumps(value, option=orjson.OPT_SORT_KEYS), digest_size=16).digest()
        except (TypeError, orjson.JSONEncodeError):
            return value
        got = self._table.get(key)
        if got is not None and got == value:
            return got
        return self._table.put(key, value)

    def share_in(self, obj: Any, depth: int = 0) -> None:
        """Replace, in place, every pod template spec of ``obj`` (freshly decoded, not cached yet)."""
        if depth > 12:
            return
        if isinstance(obj, dict):
            for k, v in obj.items():
                if k == "template" and isinstance(v, dict) and isinstance(v.get("spec"), dict):
                    spec = v["spec"]
                    if "containers" in spec:
                        v["spec"] = self.share(spec)
                        continue
                if isinstance(v, dict | list):
                    self.share_in(v, depth + 1)
        elif isinstance(obj, list):
            for v in obj:
                if isinstance(v, dict | list):
                    self.share_in(v, depth + 1)


_TEMPLATES = TemplateSharing()


# PodGroup status as cached: only what the gang state reads (grouper.core.gang_state.gang_of).
_KAI_CONDITION = ("type", "status", "nodePool", "reason", "message", "lastTransitionTime")
_UPSTREAM_CONDITION = ("type", "status", "reason", "message", "lastTransitionTime")
_PODGROUP_STRINGS = Interner(4096)  # reasons and messages repeat among the gangs of a queue


def _shared(value: Any) -> Any:
    return _PODGROUP_STRINGS(value) if type(value) is str and len(value) <= 1024 else value


def _conditions(items: Any, keep: tuple[str, ...], with_reasons: bool) -> list[dict[str, Any]]:
    out = []
    for c in items if isinstance(items, list) else ():
        if not isinstance(c, dict):
            continue
        kept = {k: _shared(c[k]) for k in keep if k in c}
        if with_reasons and isinstance(c.get("reasons"), list):
            kept["reasons"] = [{k: _shared(r[k]) for k in ("reason", "message") if k in r}
                               for r in c["reasons"] if isinstance(r, dict)]
        out.append(kept)
    return out


def slim_status(status: Any) -> dict[str, Any] | None:
    """The scheduler's record of a PodGroup the gang state reads: KAI's ``schedulingConditions`` (type,
    node pool, reasons, time) and ``resourcesStatus``, upstream's ``conditions``. None when there is none."""
    if not isinstance(status, dict):
        return None
    out: dict[str, Any] = {}
    if status.get("schedulingConditions"):
        out["schedulingConditions"] = _conditions(status["schedulingConditions"], _KAI_CONDITION, True)
    if status.get("conditions"):
        out["conditions"] = _conditions(status["conditions"], _UPSTREAM_CONDITION, False)
    if isinstance(status.get("resourcesStatus"), dict) and status["resourcesStatus"]:
        out["resourcesStatus"] = status["resourcesStatus"]  # a few ResourceLists
    return out or None


def slim_podgroup(pg: Obj) -> Obj:
    """PodGroups as cached: no managedFields, and of ``status`` (written by the scheduler) only what the gang
    state reads (:func:`slim_status`); phase, counters and the rest are dropped."""
    pg = strip_managed_fields(pg)
    if "status" in pg:
        status = slim_status(pg["status"])
        pg = {k: v for k, v in pg.items() if k != "status"}
        if status is not None:
            pg["status"] = status
    return pg


@dataclass
class _KindState:
    informer: Informer | None = None
    forbidden_at: float | None = None  # monotonic time of the last 403
    absent_at: float | None = None  # monotonic time we learnt the kind is not served


class ClusterCache:
    """All informers of one controller. ``on_informer`` is called for every informer started on demand."""

    def __init__(
        self,
        client: KubeClient,
        discovery: Discovery,
        *,
        scheduler_name: str,
        pod_label_selector: str = "",
        namespace_label_selector: str = "",
        defaults_configmap: tuple[str, str] | None = None,
        metrics: Metrics | None = None,
        forbidden_retry: float = 300.0,
        absent_retry: float = 10.0,
        supervisor: Spawner | None = None,
        policy: KindPolicy | None = None,
        pod_shape: PodShape | None = None,
    ) -> None:
        self.client = client
        self.supervisor = supervisor
        self.policy = policy or KindPolicy(allow_all=True)
        self.pod_shape = pod_shape or PodShape()
        self.discovery = discovery
        self.metrics = metrics
        self.scheduler_name = scheduler_name
        self.pod_label_selector = pod_label_selector
        self.namespace_label_selector = namespace_label_selector
        self.defaults_configmap_ref = defaults_configmap
        self.forbidden_retry, self.absent_retry = forbidden_retry, absent_retry
        self.kinds: dict[GVK, _KindState] = {}
        self.defaults_cm_informer: Informer | None = None
        self.on_informer: list[Callable[[GVK, Informer], None]] = []
        self._locks: dict[GVK, asyncio.Lock] = {}
        self._label_indexes: weakref.WeakKeyDictionary[Informer, set[str]] = weakref.WeakKeyDictionary()

    # ------------------------------------------------------------------ informers

    def informer(self, gvk: GVK) -> Informer | None:
        st = self.kinds.get(gvk)
        return st.informer if st else None

    def get(self, gvk: GVK, namespace: str, name: str) -> Obj | None:
        """The cached object; None when absent or its kind is not cached."""
        inf = self.informer(gvk)
        return inf.get(namespace, name) if inf is not None else None

    def informers(self) -> list[Informer]:
        out = [st.informer for st in self.kinds.values() if st.informer is not None]
        if self.defaults_cm_informer is not None:
            out.append(self.defaults_cm_informer)
        return out

    def _new_informer(self, gvk: GVK, res: Resource) -> Informer:
        if gvk == POD:
            return Informer(
                self.client,
                res,
                field_selector=f"spec.schedulerName={self.scheduler_name}",
                label_selector=self.pod_label_selector or None,
                transform=self.pod_shape.slim,
                metrics=self.metrics,
            )
        if gvk == PODGROUP:
            inf = Informer(self.client, res, transform=slim_podgroup, metrics=self.metrics)
            inf.add_index(PODGROUP_NAME_PREFIX_INDEX, podgroup_name_prefixes)
            inf.add_index(PODGROUP_OWNER_INDEX, podgroup_owner_uids)
            inf.add_index(PODGROUP_DEFINED_INDEX, defined_podgroup_owner_uids)
            inf.add_index(POD_OWNED_INDEX, pod_owned_namespaces)
            return inf
        if gvk.kind == "PodGroup" and gvk.group == "scheduling.k8s.io":  # the upstream backend's (gang state)
            return Informer(self.client, res, transform=slim_podgroup, metrics=self.metrics)
        if gvk == NAMESPACE:  # only namespaces selected by --namespace-label-selector
            return Informer(
                self.client, res, label_selector=self.namespace_label_selector or None, metrics=self.metrics
            )
        return Informer(self.client, res, transform=slim_owner, metrics=self.metrics)

    async def ensure(self, gvk: GVK, *, timeout: float = 30.0) -> str:
        """Make ``gvk`` cached: ``"ready"``, ``"absent"`` (not served), ``"forbidden"`` or ``"error"``."""
        lock = self._locks.setdefault(gvk, asyncio.Lock())
        async with lock:
            st = self.kinds.setdefault(gvk, _KindState())
            if st.informer is not None and st.informer.synced.is_set():
                return "ready"
            try:
                res = await self.discovery.resolve(gvk)
            except ApiError as e:
                if e.forbidden:
                    st.forbidden_at = time.monotonic()
                    return "forbidden"
                log.warning("discovery of %s failed: %s", gvk, e)
                return "error"
            if res is None:
                st.absent_at = time.monotonic()
                return "absent"
            st.absent_at = None
            if st.informer is None or st.informer.error is not None:
                st.informer = self._new_informer(gvk, res)
                for cb in self.on_informer:
                    cb(gvk, st.informer)
                st.informer.start(self.supervisor)
            ok = await st.informer.wait_synced(timeout)
            if ok:
                st.forbidden_at = None
                return "ready"
            err = st.informer.error
            if err is not None and err.forbidden:
                st.forbidden_at = time.monotonic()
                st.informer = None
                return "forbidden"
            if err is not None and err.not_found:
                st.absent_at = time.monotonic()
                st.informer = None
                self.discovery.invalidate(gvk.group)
                return "absent"
            return "error"

    async def start_defaults_configmap(self) -> None:
        """Watch only the defaults ConfigMap (namespace + name field selector), when both flags are set."""
        if not self.defaults_configmap_ref:
            return
        ns, name = self.defaults_configmap_ref
        res = await self.discovery.resolve(CONFIGMAP)
        assert res is not None
        self.defaults_cm_informer = Informer(
            self.client, res, namespace=ns, field_selector=f"metadata.name={name}", metrics=self.metrics
        )
        for cb in self.on_informer:
            cb(CONFIGMAP, self.defaults_cm_informer)
        self.defaults_cm_informer.start(self.supervisor)
        if not await self.defaults_cm_informer.wait_synced(60):
            log.warning(
                "defaults ConfigMap %s/%s cannot be watched: %s", ns, name, self.defaults_cm_informer.error
            )

    async def stop(self) -> None:
        await asyncio.gather(*(inf.stop() for inf in self.informers()), return_exceptions=True)

    def namespace_allowed(self, namespace: str) -> bool:
        """With ``--namespace-label-selector`` only pods of selected namespaces are grouped."""
        if not self.namespace_label_selector:
            return True
        inf = self.informer(NAMESPACE)
        return inf is not None and inf.get(None, namespace) is not None

    def synced(self, *gvks: GVK) -> bool:
        for gvk in gvks:
            inf = self.informer(gvk)
            if inf is None or not inf.synced.is_set():
                return False
        return True

    # ------------------------------------------------------------------ state queries used by lookups

    def state(self, gvk: GVK) -> tuple[str, Informer | None]:
        """``("ready", inf)``, ``("forbidden", None)``, ``("absent", None)``, ``("refused", None)`` (not
        an allowed kind) or ``("missing", None)``."""
        st = self.kinds.get(gvk)
        if st is None:
            return ("missing", None) if self.policy.allowed(gvk) else ("refused", None)
        if st.informer is not None and st.informer.synced.is_set():
            return "ready", st.informer  # the path of nearly every read: no clock, no policy
        now = time.monotonic()
        if st.forbidden_at is not None and now - st.forbidden_at < self.forbidden_retry:
            return "forbidden", None
        if st.absent_at is not None and now - st.absent_at < self.absent_retry:
            return "absent", None
        return "missing", None

    def lookups(self) -> CacheLookups:
        return CacheLookups(self)

    def label_index(self, inf: Informer, key: str) -> str | None:
        """The name of ``inf``'s index by label ``key``, added on first use; None past the cap (scan)."""
        name = LABEL_INDEX_PREFIX + key
        keys = self._label_indexes.setdefault(inf, set())
        if key not in keys:
            if len(keys) >= MAX_LABEL_INDEXES:
                return None
            inf.add_index(name, _label_value(key))
            keys.add(key)
        return name


# ------------------------------------------------------------------ dependency keys
#
# What a decision read, as the workload index keys it (``WorkloadIndex.workloads_reading``): an object's
# uid (a plain ``str``: nearly every key, and the cached object's own string, so the index costs no copy),
# or one of the typed keys below for what a uid cannot name. This module owns the encoding; the handlers
# build the same keys from the objects they see, and nobody parses them. Tuples, so that hashing them is
# C work (a workload's dependencies are hashed on every pass); their lengths differ, so no two kinds of key
# are ever equal.


class Absent(NamedTuple):
    """An object that was looked up but does not exist (yet): its arrival re-evaluates the workloads that
    read its absence. ``retry``: the lookup was a decision's that failed for it (an owner whose watch event
    is still behind): its arrival only re-queues the workload (the other pods' decisions stand)."""

    group: str
    kind: str
    namespace: str
    name: str
    retry: bool = False

    @classmethod
    def of(cls, obj: Obj) -> Absent:
        gvk = GVK.of(obj)
        return cls(gvk.group, gvk.kind, o.namespace(obj), o.name(obj))

    def as_retry(self) -> Absent:
        return self._replace(retry=True)


class NamedPodGroups(NamedTuple):
    """"PodGroups named ``base``[-…]" in ``namespace``: a PodGroup with that prefix appearing (or changed by
    someone else) re-evaluates the workloads that asked (a JobSet reads the shape of the one named after it)."""

    namespace: str
    base: str


Dependency = str | Absent | NamedPodGroups  # str: an object's uid


def absent_key(gvk: GVK, namespace: str | None, name: str) -> Absent:
    """The key of an object looked up and not found (a cluster-scoped one has namespace "")."""
    return Absent(gvk.group, gvk.kind, namespace or "", name)


class CacheLookups:
    """``grouper.core.lookups.Lookups`` over a :class:`ClusterCache`, for one reconcile.

    ``misses`` collects the kinds that were asked for but are not cached (each also raised
    :class:`NotCached`); ``refused`` the kinds outside the :class:`KindPolicy`; ``reads`` the UIDs of
    every object handed out and the :func:`absent_key` of every object asked for but not found, so the
    controller knows which object changes (and arrivals) must re-evaluate this workload.
    """

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self.misses: set[GVK] = set()
        self.refused: set[GVK] = set()
        self.reads: set[Dependency] = set()
        self.listed_pods = False  # a decision read other pods: it depends on its siblings

    def _informer(self, api_version: str, kind: str, namespace: str | None, name: str) -> Informer | None:
        gvk = GVK.from_api_version(api_version, kind)
        state, inf = self.cache.state(gvk)
        if state == "ready":
            return inf
        if state == "forbidden":
            raise LookupForbidden(api_version, kind, namespace, name)
        if state == "refused":
            self.refused.add(gvk)
            raise KindNotAllowed(api_version, kind, namespace, name)
        if state == "absent":
            self.reads.add(absent_key(gvk, namespace, name))
            return None
        self.misses.add(gvk)
        raise NotCached(gvk)

    def _seen(self, obj: Obj) -> Obj:
        uid = o.uid(obj)
        if uid:
            self.reads.add(uid)
        return obj

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        inf = self._informer(api_version, kind, namespace, name)
        if inf is None:
            return None
        ns = namespace if inf.resource.namespaced else None
        obj = inf.get(ns, name)
        if obj is None:
            self.reads.add(absent_key(GVK.from_api_version(api_version, kind), ns, name))
            return None
        return self._seen(obj)

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        label_selector: Mapping[str, str] | None = None,
    ) -> list[Obj]:
        inf = self._informer(api_version, kind, namespace, "")
        if kind == "Pod":
            self.listed_pods = True
        if inf is None:
            return []
        ns = namespace if inf.resource.namespaced else None
        if ns is not None and label_selector:
            key = min(label_selector)
            index = self.cache.label_index(inf, key)
            if index is not None:  # one bucket, already in (namespace, name) order
                bucket = inf.by_index(index, f"{ns}/{label_selector[key]}")
                return [self._seen(obj) for obj in bucket if matches_labels(obj, label_selector)]
        items = inf.list(ns)
        return by_namespace_and_name(self._seen(obj) for obj in items if matches_labels(obj, label_selector))

    def pod_groups_named(self, namespace: str, base: str) -> builtins.list[Obj]:
        inf = self._informer(PODGROUP.api_version, PODGROUP.kind, namespace, base)
        self.reads.add(NamedPodGroups(namespace, base))
        if inf is None:
            return []
        found = inf.by_index(PODGROUP_NAME_PREFIX_INDEX, f"{namespace}/{base}")
        if not _UID.search(base):  # not a UID-bearing name: the index cannot answer, scan (never in practice)
            found = [pg for pg in inf.list(namespace) if named_with_prefix(o.name(pg), base)]
        return sorted((self._seen(pg) for pg in found), key=o.name)

    def priority_class_exists(self, name: str) -> bool:
        if not name:
            return False
        try:
            return self.get(PRIORITY_CLASS.api_version, PRIORITY_CLASS.kind, None, name) is not None
        except LookupForbidden:
            return False

    def defaults_configmap(self) -> Obj | None:
        ref = self.cache.defaults_configmap_ref
        inf = self.cache.defaults_cm_informer
        if not ref or inf is None:
            return None
        return inf.get(ref[0], ref[1])


POD_PODGROUP_INDEX = "pod-group"  # pods by "<namespace>/<the PodGroup they name>" (reconciler, gang tracking)


def pod_group_names(pod: Obj) -> list[str]:
    """Index values of a pod: ``<namespace>/<PodGroup it names>``."""
    name = o.annotations(pod).get(POD_GROUP_ANNOTATION)
    return [f"{o.namespace(pod)}/{name}"] if name else []
