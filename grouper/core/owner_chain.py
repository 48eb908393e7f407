"""Walk a pod's owner references up to its top owner.

Differences from KAI (kai-podgrouper.md §1.3, §8 items 5 and 6), chosen deliberately:

* We follow the *controlling* owner reference (``controller: true``), else the first one, at every
  level. KAI follows ``ownerReferences[0]`` and fails on an intermediate owner with several
  references; with a controller reference present that failure is spurious.
* When reading an owner is forbidden (RBAC), we stop there like KAI (the last readable object
  becomes the top owner, or the pod itself) so grouping still happens, but the chain is marked
  ``truncated`` with the reason, which the decision record, ``/podgroups`` and ``grouper explain``
  show. Grant get/list/watch on the kind to get the full chain.
* A missing owner, or one whose UID differs from the reference (deleted and re-created under the
  same name), is an error for that pod only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from grouper.core.lookups import Lookups
from grouper.model import objects as o
from grouper.model.errors import (
    GroupingError,
    InvalidWorkload,
    LookupForbidden,
    OwnerChainTooDeep,
    OwnerCycle,
    OwnerNotFound,
    OwnerUidMismatch,
)
from grouper.model.objects import Obj

MAX_DEPTH = 32  # guards against reference cycles, which the API server does not prevent


@dataclass
class OwnerChain:
    owners: list[Obj]  # direct owner first, top owner last; empty for an ownerless pod
    top_owner: Obj  # the pod itself when ownerless (or when its first owner is unreadable)
    truncated: str | None = None  # why the walk stopped early, if it did
    notes: list[str] = field(default_factory=list)


def checked_references(obj: Obj) -> list[dict]:
    """``metadata.ownerReferences`` as a list of objects; anything else is ``InvalidWorkload``
    naming the field (a hand-written manifest can hold any YAML there)."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    if refs is None:
        return []
    if not isinstance(refs, list):
        raise InvalidWorkload(
            f"must be a list of owner references, got {type(refs).__name__}",
            obj=o.describe(obj),
            field="metadata.ownerReferences",
        )
    for i, ref in enumerate(refs):
        if not isinstance(ref, dict):
            raise InvalidWorkload(
                f"must be an object, got {type(ref).__name__}", obj=o.describe(obj),
                field=f"metadata.ownerReferences[{i}]",
            )
        for key in ("apiVersion", "kind", "name"):
            if not isinstance(ref.get(key), str) or not ref.get(key):
                raise InvalidWorkload(
                    "must be a non-empty string", obj=o.describe(obj),
                    field=f"metadata.ownerReferences[{i}].{key}",
                )
    return refs


def controlling_reference(obj: Obj) -> dict | None:
    refs = checked_references(obj)
    if not refs:
        return None
    for ref in refs:
        if ref.get("controller") is True:
            return ref
    return refs[0]


def resolve_owners(pod: Obj, lookups: Lookups) -> OwnerChain:
    """The pod's owner chain. Raises ``OwnerNotFound`` / ``OwnerUidMismatch`` (GroupingErrors)."""
    pod = o.with_pod_typemeta(pod)
    ns = o.namespace(pod)
    owners: list[Obj] = []
    notes: list[str] = []
    current = pod
    # Identity for cycle detection: the uid, or kind/name where a hand-written manifest has no uid.
    seen = {_identity(pod)}
    for _ in range(MAX_DEPTH):
        ref = controlling_reference(current)
        if ref is None:
            break
        if len(checked_references(current)) > 1:
            notes.append(
                f"{o.describe(current)} has {len(checked_references(current))} owners; "
                f"followed {ref.get('kind')}/{ref.get('name')}"
                + (" (the controller reference)" if ref.get("controller") else " (the first)")
            )
        api_version, kind, name = str(ref.get("apiVersion", "")), str(ref.get("kind", "")), str(ref.get("name", ""))
        try:
            owner = lookups.get(api_version, kind, ns, name)
        except LookupForbidden as exc:
            top = owners[-1] if owners else pod
            return OwnerChain(
                owners, top, truncated=f"{exc}; {o.describe(top)} is used as the top owner", notes=notes
            )
        if owner is None:
            raise OwnerNotFound(
                f"owner {kind} {ns}/{name} (uid {ref.get('uid')}) not found",
                obj=o.describe(current),
                field="metadata.ownerReferences",
            )
        if ref.get("uid") and o.uid(owner) and o.uid(owner) != ref.get("uid"):
            raise OwnerUidMismatch(
                f"owner {kind} {ns}/{name} has uid {o.uid(owner)}, the reference names uid {ref.get('uid')} "
                "(deleted and re-created?)",
                obj=o.describe(current),
                field="metadata.ownerReferences",
            )
        if not owner.get("apiVersion") or not owner.get("kind"):
            owner = {**owner, "apiVersion": api_version, "kind": kind}
        if _identity(owner) in seen:
            raise OwnerCycle(
                f"owner reference cycle through {kind} {ns}/{name}", obj=o.describe(current),
                field="metadata.ownerReferences",
            )
        seen.add(_identity(owner))
        owners.append(owner)
        current = owner
    else:
        raise OwnerChainTooDeep(
            f"owner chain deeper than {MAX_DEPTH} levels", obj=o.describe(pod), field="metadata.ownerReferences"
        )
    return OwnerChain(owners, owners[-1] if owners else pod, notes=notes)


def owner_key(pod: Obj) -> tuple[str, str, str, str, str] | None:
    """What a pod's owner walk depends on besides the cache: its namespace and its controlling reference
    (uid, name, kind, apiVersion). None for a pod without one, with a malformed one or one without a uid,
    or owned by a pod (pods change in the same run). Pods with the same key have the same top owner."""
    try:
        ref = controlling_reference(pod)
    except GroupingError:
        return None
    if ref is None or ref.get("kind") == "Pod" or not ref.get("uid"):
        return None
    return (
        o.namespace(pod),
        str(ref.get("uid")),
        str(ref.get("name")),
        str(ref.get("kind")),
        str(ref.get("apiVersion")),
    )


def _identity(obj: Obj) -> str:
    return o.uid(obj) or f"{obj.get('kind')}/{o.namespace(obj)}/{o.name(obj)}"


# A decision that failed for one of these found a pod whose owner is not (or no longer) the one it names.
OWNER_GONE_REASONS = ("OwnerNotFound", "OwnerUidMismatch")


def deleted_on_chain(pod: Obj, lookups: Lookups, recently_deleted: Callable[[str], bool]) -> bool:
    """Whether an owner on the pod's chain (by uid) was deleted moments ago (``recently_deleted``: the
    controller's record of DELETED watch events); the walk follows the controlling references it finds."""
    cur: Obj | None = pod
    for _ in range(32):
        if cur is None:
            return False
        refs = o.owner_references(cur)
        if any(recently_deleted(str(r.get("uid") or "")) for r in refs):
            return True
        ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
        if ref is None:
            return False
        try:
            cur = lookups.get(str(ref.get("apiVersion")), str(ref.get("kind")), o.namespace(pod), str(ref.get("name")))
        except Exception:  # forbidden / not cached: nothing more to learn
            return False
    return False
