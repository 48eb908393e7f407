"""Small read helpers over raw Kubernetes objects (plain dicts). Objects are never mutated here."""

# No ``from __future__ import annotations`` here: it would shadow the ``annotations`` helper below.
from typing import Any, NamedTuple

from grouper.model.bounded import BoundedMemo

Obj = dict[str, Any]


class GVK(NamedTuple):
    """A tuple, not a frozen dataclass: GVKs are dict keys on every cache read (a dataclass's hash and
    equality are Python functions, its construction three ``object.__setattr__`` calls)."""

    group: str
    version: str
    kind: str

    @classmethod
    def from_api_version(cls, api_version: str, kind: str) -> "GVK":
        # Every owner lookup of every decision and pod event parses its reference's apiVersion; the
        # distinct (apiVersion, kind) pairs are a handful, so the parsed tuple is kept (bounded: a
        # hostile stream of made-up kinds only restarts the table).
        gvk = _GVKS.get((api_version, kind))
        if gvk is None or cls is not GVK:
            group, _, version = api_version.rpartition("/")
            gvk = cls(group, version, kind)
            if cls is GVK:
                _GVKS.put((api_version, kind), gvk)
        return gvk

    @classmethod
    def of(cls, obj: Obj) -> "GVK":
        return cls.from_api_version(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def __str__(self) -> str:
        return f"{self.kind}.{self.version}.{self.group}" if self.group else f"{self.kind}.{self.version}"


_GVKS: BoundedMemo[tuple[str, str], GVK] = BoundedMemo(1024)


def meta(obj: Obj) -> dict[str, Any]:
    m = obj.get("metadata") if isinstance(obj, dict) else None
    return m if isinstance(m, dict) else {}


def name(obj: Obj) -> str:
    return str(meta(obj).get("name") or "")


def namespace(obj: Obj) -> str:
    return str(meta(obj).get("namespace") or "")


def uid(obj: Obj) -> str:
    return str(meta(obj).get("uid") or "")


def labels(obj: Obj) -> dict[str, str]:
    return meta(obj).get("labels") or {}


def annotations(obj: Obj) -> dict[str, str]:
    return meta(obj).get("annotations") or {}


def metadata_problem(obj: Obj) -> tuple[str, str] | None:
    """(field, problem) when ``metadata`` or its label/annotation maps are not mappings. The API server
    never serves such an object, but files do (``grouper plan``, ``describe -f``), and every reader
    above treats them as mappings; the grouping core checks each object it reads with this first."""
    m = obj.get("metadata") if isinstance(obj, dict) else None
    if m is None:
        return None
    if not isinstance(m, dict):
        return "metadata", f"expected an object, got {type(m).__name__}"
    for section in ("labels", "annotations"):
        v = m.get(section)
        if v is not None and not isinstance(v, dict):
            return f"metadata.{section}", f"expected a map of strings, got {type(v).__name__}"
    return None


def owner_references(obj: Obj) -> list[dict[str, Any]]:
    return meta(obj).get("ownerReferences") or []


def describe(obj: Obj) -> str:
    """``Kind ns/name`` for messages."""
    ns = namespace(obj)
    return f"{obj.get('kind') or 'object'} {ns + '/' if ns else ''}{name(obj)}"


def dig(obj: Any, *path: str | int, default: Any = None) -> Any:
    """Follow ``path`` through nested dicts/lists; ``default`` when any step is missing."""
    cur = obj
    for step in path:
        if isinstance(step, int):
            if not isinstance(cur, list) or not -len(cur) <= step < len(cur):
                return default
            cur = cur[step]
        else:
            if not isinstance(cur, dict) or step not in cur:
                return default
            cur = cur[step]
    return default if cur is None else cur


def with_pod_typemeta(pod: Obj) -> Obj:
    """Pods read from a typed list lack apiVersion/kind; plugins build owner refs from them."""
    if pod.get("apiVersion") and pod.get("kind"):
        return pod
    return {**pod, "apiVersion": "v1", "kind": "Pod"}
