"""The hold rule: a definition change never silently weakens a running workload's gang.

A PodGroup a Karta definition produced records its source in two annotations (:func:`stamp`): the
definition (``<name>@<digest of its spec>``) and the top owner's ``metadata.generation`` when it was
decided. When the definition that made a stored PodGroup is deleted, changed, or no longer used (another
Karta, a native plugin or the default grouper now decides the kind), and the new decision would give the
workload's pods a **weaker gang** (:func:`weakenings`: a lower ``minMember`` or ``minSubGroup``, fewer
sub-groups, a lower minimum of a sub-group of the same name), the stored PodGroup is **held**: kept as it
is, its pods stay in it, and new pods of the workload join it, until the workload itself changes — its
top owner's ``metadata.generation`` differs from the recorded one (a spec change: scaling, a new
template) or it is re-created (a new uid: new PodGroup names, the old one is garbage-collected).

Level-triggered: the grouper keeps no state; everything :func:`hold_of` compares is in the cluster (the
stored PodGroup's annotations, the top owner, the loaded definitions), so a restarted grouper holds the
same PodGroups. A stronger or equal new gang is applied at once, as is any change of a PodGroup that
carries no source (one written before this rule, or by a native plugin or the default grouper).
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from grouper.core.decision import Decision
from grouper.model import objects as o
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import POD_GROUP_ANNOTATION, SUBGROUP_LABEL, PodGroupMetadata

if TYPE_CHECKING:
    from grouper.karta import KartaDefinition

PREFIX = "podgrouper.kai.scheduler/"
DEFINITION_ANNOTATION = PREFIX + "definition"  # "<Karta name>@<digest>": what produced the PodGroup
GENERATION_ANNOTATION = PREFIX + "workload-generation"  # the top owner's metadata.generation then
HELD_ANNOTATION = PREFIX + "held"  # why the PodGroup is held (set once per hold: one Event per transition)

_DIGESTS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def definition_digest(defn: KartaDefinition) -> str:
    """A short digest of the definition's spec (its labels, metadata and resourceVersion do not count: a
    re-applied identical Karta is the same definition). Cached per loaded definition."""
    digest = _DIGESTS.get(defn)
    if digest is None:
        spec = defn.raw.get("spec") if isinstance(defn.raw, dict) else None
        text = orjson.dumps(spec, option=orjson.OPT_SORT_KEYS, default=str)
        digest = _DIGESTS[defn] = hashlib.blake2b(text, digest_size=6).hexdigest()
    return digest


def source_of(defn: KartaDefinition) -> str:
    return f"{defn.name}@{definition_digest(defn)}"


def stamp(md: PodGroupMetadata, defn: KartaDefinition, top_owner: Obj) -> None:
    """Record on the PodGroup which definition decided it, for which generation of its workload."""
    md.annotations[DEFINITION_ANNOTATION] = source_of(defn)
    generation = o.meta(top_owner).get("generation")
    if generation is not None:
        md.annotations[GENERATION_ANNOTATION] = str(generation)


@dataclass(frozen=True)
class Gang:
    """The gang a PodGroup spec asks for: what the hold compares."""

    min_member: int = 0
    min_sub_group: int = 0
    sub_groups: Mapping[str, int] = field(default_factory=dict)  # name -> its minMember (or minSubGroup)

    @classmethod
    def of_spec(cls, spec: Any) -> Gang:
        spec = spec if isinstance(spec, dict) else {}
        subs: dict[str, int] = {}
        for sg in spec.get("subGroups") or []:
            if isinstance(sg, dict) and isinstance(sg.get("name"), str):
                subs[sg["name"]] = _int(sg.get("minSubGroup", sg.get("minMember")))
        return cls(_int(spec.get("minMember")), _int(spec.get("minSubGroup")), subs)

    @classmethod
    def of(cls, md: PodGroupMetadata) -> Gang:
        return cls.of_spec(md.spec())

    def describe(self) -> str:
        parts = []
        if self.min_sub_group:
            parts.append(f"minSubGroup {self.min_sub_group}")
        if self.min_member or not self.min_sub_group:
            parts.append(f"minMember {self.min_member}")
        if self.sub_groups:
            parts.append("sub-groups " + ", ".join(f"{k}={v}" for k, v in sorted(self.sub_groups.items())))
        else:
            parts.append("no sub-groups")
        return ", ".join(parts)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def weakenings(old: Gang, new: Gang) -> list[str]:
    """How ``new`` is a weaker gang than ``old`` (empty: as strong or stronger)."""
    out: list[str] = []
    if new.min_member < old.min_member:
        out.append(f"minMember {old.min_member} -> {new.min_member}")
    if new.min_sub_group < old.min_sub_group:
        out.append(f"minSubGroup {old.min_sub_group} -> {new.min_sub_group}")
    if len(new.sub_groups) < len(old.sub_groups):
        out.append(f"sub-groups {len(old.sub_groups)} -> {len(new.sub_groups)}")
    for name, minimum in sorted(old.sub_groups.items()):
        if name in new.sub_groups and new.sub_groups[name] < minimum:
            out.append(f"sub-group {name} minimum {minimum} -> {new.sub_groups[name]}")
    return out


@dataclass(frozen=True)
class Hold:
    pod_group: str  # the held PodGroup
    definition: str  # the name of the definition that produced it
    change: str  # "deleted", "changed" or "no longer used"
    old: Gang
    new: Gang
    weaker: tuple[str, ...]

    @property
    def message(self) -> str:
        return (
            f"held: definition {self.definition} {self.change} would weaken the gang of PodGroup "
            f"{self.pod_group} from {self.old.describe()} to {self.new.describe()} "
            f"({'; '.join(self.weaker)}); kept until the workload changes"
        )


def change_of(stored_source: str, current: Callable[[str], str | None]) -> tuple[str, str]:
    """(definition name, what happened to it): ``current(name)`` is the source of the usable definition
    of that name now loaded, None when there is none."""
    name = stored_source.rsplit("@", 1)[0]
    now = current(name)
    return name, "deleted" if now is None else "changed" if now != stored_source else "no longer used"


def hold_of(
    stored: Obj,
    replacements: Iterable[PodGroupMetadata],
    *,
    generation: str | None,
    current: Callable[[str], str | None],
) -> Hold | None:
    """Whether ``stored`` (a PodGroup as stored) is held, given the PodGroups its pods would move to now
    (``replacements``: those of the new decision holding any of its pods), the top owner's current
    ``metadata.generation`` and the loaded definitions (``current``, see :func:`change_of`)."""
    ann = o.annotations(stored)
    source = ann.get(DEFINITION_ANNOTATION)
    if not source:
        return None  # no record of a definition: nothing to protect
    if generation is None or ann.get(GENERATION_ANNOTATION) != generation:
        return None  # the workload changed since (or cannot tell): the new decision applies
    candidates = list(replacements)
    if not candidates or all(md.annotations.get(DEFINITION_ANNOTATION) == source for md in candidates):
        return None  # the same definition decides: its own answer, whatever it is
    old = Gang.of_spec(stored.get("spec"))
    for md in candidates:
        new = Gang.of(md)
        weaker = weakenings(old, new)
        if weaker:
            name, change = change_of(source, current)
            return Hold(o.name(stored), name, change, old, new, tuple(weaker))
    return None


def made_by_definition(pg: Obj) -> tuple[str, str] | None:
    """(group, kind) of the PodGroup's owner when the PodGroup records the definition that made it: a kind
    the owner walk must still follow once that definition is gone, so the rule finds the workload again."""
    if DEFINITION_ANNOTATION not in o.annotations(pg):
        return None
    refs = o.owner_references(pg)
    if not refs or not isinstance(refs[0], dict):
        return None
    gvk = GVK.from_api_version(str(refs[0].get("apiVersion") or ""), str(refs[0].get("kind") or ""))
    return (gvk.group, gvk.kind) if gvk.kind and gvk.kind != "Pod" else None


class PlannedGroup(Protocol):
    metadata: PodGroupMetadata
    pods: list[str]


@dataclass
class Held:
    """What a pass held: the held PodGroups' names and, per pod, the hold that placed it."""

    names: set[str] = field(default_factory=set)
    pods: dict[str, Hold] = field(default_factory=dict)


def unchanged_source(stored: Obj, planned: Mapping[str, PlannedGroup]) -> bool:
    """The steady state: ``stored`` is planned again, by the definition that made it, and not marked held."""
    ann = o.annotations(stored)
    g = planned.get(o.name(stored))
    return (
        g is not None
        and HELD_ANNOTATION not in ann
        and g.metadata.annotations.get(DEFINITION_ANNOTATION) == ann.get(DEFINITION_ANNOTATION)
    )


def replan(
    stored: Obj,
    hold: Hold,
    replacing: list[Any],
    groups: list[Any],
    placement: dict[str, tuple[str, str | None]],
    pod: Callable[[str], Obj | None],
    held: Held,
) -> None:
    """Put the held PodGroup back in the plan: ``groups`` lose those that replace it (``replacing``) and
    ``placement`` sends their pods to it — a pod already in it keeps its sub-group label; another gets the
    sub-group its new decision names if the held PodGroup has one of that name, else none. ``pod(name)``:
    the pod as it is now."""
    name = o.name(stored)
    subs = {sg.get("name") for sg in (stored.get("spec") or {}).get("subGroups") or [] if isinstance(sg, dict)}
    for g in replacing:
        if g in groups:
            groups.remove(g)
        for pod_name in g.pods:
            held.pods[pod_name] = hold
            if pod_name not in placement:
                continue  # not looked at in this pass: it is where the last pass put it
            _, sub = placement[pod_name]
            now = pod(pod_name)
            if now is not None and o.annotations(now).get(POD_GROUP_ANNOTATION) == name:
                sub = o.labels(now).get(SUBGROUP_LABEL)  # already in it: as it is
            elif sub not in subs:
                sub = None
            placement[pod_name] = (name, sub)


def say_held(d: Decision, hold: Hold, place: tuple[str, str | None] | None) -> None:
    """The decision's record tells where the pod is and why: its own PodGroup would be a weaker gang."""
    would_be = d.pod_group.name if d.pod_group is not None else None
    if place is not None and d.pod_group is not None:
        d.pod_group = d.pod_group.for_keeping()
        d.pod_group.name, d.sub_group = place
    d.reason = "Held"
    d.message = f"PodGroup {hold.pod_group} {hold.message}"
    d.notes.append(f"{hold.message}; the new decision would be PodGroup {would_be}")


__all__ = [
    "DEFINITION_ANNOTATION",
    "GENERATION_ANNOTATION",
    "HELD_ANNOTATION",
    "Gang",
    "Held",
    "Hold",
    "change_of",
    "definition_digest",
    "hold_of",
    "made_by_definition",
    "replan",
    "say_held",
    "source_of",
    "stamp",
    "unchanged_source",
    "weakenings",
]
