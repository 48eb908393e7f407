"""The plan of one workload: every live pod's decision merged into the PodGroups to write.

One path for everyone who plans: the controller (each reconcile, and a standby deciding ahead of leading),
``grouper plan`` (:mod:`grouper.core.plan`), the admission webhook and the tests. It is pure: it reads the
pods, the lookups and ``previous`` — the decisions kept from the last plan of the same workload — and
returns a :class:`WorkloadPlan`.

``previous`` is only a cache of per-pod decisions: a kept decision is used again for the very pod it was
made for (same uid, and the same resourceVersion, or a new one that changed nothing a decision reads of
the pod: only the grouper's own marks, :func:`decision_signature`). The caller drops the whole cache when
anything else a decision read changes (an owner, a PriorityClass, a definition: the controller's
dependency index), so a kept decision is always the decision a fresh one would be. The merge always runs
over every live pod's decision, kept or new: a 1,000-pod workload whose pods arrive one by one costs
1,000 decisions and 1,000 cheap merges of 1,000 slim entries, never 1,000²/2 decisions.

The merge rule (the only copy of it): per PodGroup, the view of the **newest** pod wins (creation time,
then name) — KAI's last reconciled pod writes, made deterministic — and pods that disagree on the spec
are noted. Failed decisions are never kept (they are made again next time), and a decision that read
other pods (``listed_pods``: a sibling's annotation is an input) is never kept either.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from grouper.core.decision import Decision
from grouper.core.workload_context import WorkloadContext
from grouper.model import objects as o
from grouper.model.objects import Obj
from grouper.model.podgroup import POD_GROUP_ANNOTATION, SUBGROUP_LABEL, OwnerRef, PodGroupMetadata

# Our own marks on the pod are the output of its decision, not an input to it.
_OWN_KEYS = (POD_GROUP_ANNOTATION, SUBGROUP_LABEL)


def _without_own(d: Any) -> Any:
    """Labels / annotations minus our two keys; absent and empty are the same (a pod we marked gains a
    map it did not have)."""
    if isinstance(d, dict) and any(k in d for k in _OWN_KEYS):
        d = {k: v for k, v in d.items() if k not in _OWN_KEYS}
    return d or None


def decision_signature(pod: Obj) -> int:
    """A hash of everything a pod's decision can read of the pod itself, minus the grouper's own marks."""
    meta = o.meta(pod)
    key = (
        o.uid(pod),
        _without_own(meta.get("labels")),
        _without_own(meta.get("annotations")),
        meta.get("ownerReferences"),
        meta.get("creationTimestamp"),
        bool(meta.get("deletionTimestamp")),
        pod.get("spec"),
        pod.get("status"),
    )
    try:
        return hash(orjson.dumps(key, option=orjson.OPT_SORT_KEYS))
    except TypeError:  # what orjson cannot encode (an integer beyond 64 bits in a hand-written manifest):
        return hash((o.uid(pod), str(meta.get("resourceVersion")), "version-only"))  # a new version is a change


def _version(pod: Obj) -> str:
    return str(o.meta(pod).get("resourceVersion") or "")


def _created(pod: Obj) -> str:
    return str(o.meta(pod).get("creationTimestamp") or "")


class Kept(NamedTuple):
    """One pod's decision as kept between plans: small (a tuple of shared values, ~100 bytes, untracked by
    the cyclic garbage collector) — the PodGroup view is shared by every pod that sees it alike."""

    uid: str
    version: str  # the pod's resourceVersion the decision was made (or confirmed) at
    signature: int  # decision_signature of the pod then
    created: str  # creationTimestamp: the merge order (then the name)
    view: PodGroupMetadata | None  # its PodGroup as this pod sees it, without pod lists; None: not grouped
    sub_group: str | None
    plugin: str | None
    top_owner: OwnerRef | None
    marked: bool = False  # the pod at ``version`` carries this decision's marks (the controller checked)


Previous = Mapping[str, Kept]  # pod name -> its kept decision


def reusable(kept: Kept | None, pod: Obj) -> Kept | None:
    """``kept`` when it is this pod's decision still (same uid; same version, or only our marks changed:
    then with the pod's new version), else None."""
    if kept is None:
        return None
    meta = o.meta(pod)
    if kept.uid != meta.get("uid"):
        return None
    version = str(meta.get("resourceVersion") or "")
    if kept.version == version and version:
        return kept
    if kept.signature == decision_signature(pod):
        return kept._replace(version=version, marked=False)  # the decision holds; its marks may not
    return None


def keep(pod: Obj, d: Decision, views: SharedViews) -> Kept | None:
    """The kept form of a fresh decision; None for one that failed (made again next time). ``views``:
    the views kept so far by PodGroup name, so equal views are one object."""
    if d.outcome == "error":
        return None
    view: PodGroupMetadata | None = None
    if d.outcome == "grouped" and d.pod_group is not None:
        view = views.share(d.pod_group.name, d.pod_group.for_keeping())
    sub = d.sub_group if view is not None else None
    return Kept(o.uid(pod), _version(pod), decision_signature(pod), _created(pod), view, sub, d.plugin, d.top_owner)


class SharedViews:
    """Equal PodGroup views kept as one object, by key (a PodGroup's name): :meth:`share` returns ``view``, or
    the equal one kept under ``key`` already; the last one seen under ``key`` is kept.

    A new view is compared with the last view found equal to the kept one, not with the kept one: the
    decisions of one pass share their plugin's per-workload part (a JobSet's 126 sub-groups are the same
    objects), so that comparison stops at the two pods' own sub-groups, where a view kept from an earlier
    pass (its sub-groups equal, not the same) was compared field by field, every sub-group, for every pod
    (docs/performance.md). Equality is transitive, so the answer is the same."""

    __slots__ = ("_by_key",)

    def __init__(self, views: Iterable[tuple[str, PodGroupMetadata]] = ()) -> None:
        self._by_key: dict[str, list[PodGroupMetadata]] = {key: [view, view] for key, view in views}  # [kept, last equal]

    def share(self, key: str, view: PodGroupMetadata) -> PodGroupMetadata:
        entry = self._by_key.get(key)
        if entry is not None and entry[1] == view:
            entry[1] = view
            return entry[0]
        self._by_key[key] = [view, view]
        return view


@dataclass
class PlannedGroup:
    """One PodGroup as it should be: its metadata (sub-groups list their pods), its pods, and notes."""

    metadata: PodGroupMetadata
    pods: list[str]  # member pod names, sorted
    notes: list[str] = field(default_factory=list)
    newest: str = ""  # the pod whose view won

    def members(self) -> dict[str | None, Sequence[str]]:
        """Pod names by sub-group (None: pods in no sub-group), read-only: the group's own lists. A pass
        asks it of every PodGroup that gained pods, so it costs O(sub-groups), not O(pods): a merge puts each
        pod in at most one sub-group of its own PodGroup, so the pods in no sub-group are looked for only when
        the sub-groups hold fewer pods than the group."""
        out: dict[str | None, Sequence[str]] = {}
        placed = 0
        for sg in self.metadata.sub_groups:
            if sg.pods:
                out[sg.name] = sg.pods
                placed += len(sg.pods)
        if placed < len(self.pods):
            if placed:
                in_sub = {p for sg in self.metadata.sub_groups for p in sg.pods}
                out[None] = [p for p in self.pods if p not in in_sub]
            else:
                out[None] = self.pods
        return out


@dataclass
class WorkloadPlan:
    """What one workload should look like: its PodGroups and every live pod's place."""

    namespace: str
    pods: dict[str, Obj]  # the live pods planned, by name
    kept: dict[str, Kept]  # every pod's decision to keep for the next plan (failed ones left out)
    decided: list[tuple[Obj, Decision]]  # the decisions made afresh by this plan (errors among them)
    groups: list[PlannedGroup]
    placement: dict[str, tuple[str, str | None]]  # pod name -> (PodGroup, sub-group), grouped pods only
    failed: set[str]  # pods whose decision failed
    plugin: str = "none"
    workload_ref: OwnerRef | None = None
    sources: tuple[str, str] = ("", "")  # the pods the plugin and the workload were taken from ("": none)
    # a plan updated from the last one (:func:`update`): the pods looked at again and the PodGroups merged
    # again — the rest stand as the last plan had them. None: all of them (a plan of every pod)
    looked_at: frozenset[str] | None = None
    merged: frozenset[str] | None = None
    # of those merged, the PodGroups whose object may differ from the last plan's; the others only gained
    # pods that see them as their newest pod does (:func:`_joined`): the very PodGroup the last plan wrote
    rewritten: frozenset[str] | None = None
    # the planning pass's workload context (its PodGroup rules' answers, by PodGroup), set by the planner that
    # has one: whoever writes the plan validates with it. None: validate afresh
    context: WorkloadContext | None = None

    @property
    def live(self) -> int:
        return len(self.pods)

    def place(self, name: str) -> Any:
        """The pod's place: (PodGroup, sub-group), "not grouped" or "failed"."""
        if name in self.failed:
            return "failed"
        return self.placement.get(name, "not grouped")


def to_decide(pods: Iterable[Obj], previous: Previous | None) -> tuple[list[Obj], dict[str, Kept]]:
    """Split ``pods`` into those that need a decision and the kept decisions that still hold (by name)."""
    if not previous:
        return list(pods), {}
    fresh: list[Obj] = []
    held: dict[str, Kept] = {}
    get = previous.get
    for pod in pods:
        name = o.name(pod)
        k = reusable(get(name), pod)
        if k is None:
            fresh.append(pod)
        else:
            held[name] = k
    return fresh, held


def assemble(
    namespace: str,
    pods: Iterable[Obj],
    held: Mapping[str, Kept],
    decided: list[tuple[Obj, Decision]],
    *,
    keep_decisions: bool = True,
) -> WorkloadPlan:
    """Merge the kept decisions ``held`` and the fresh ones ``decided`` of ``pods`` (in name order: every
    pod is in one of the two) into the plan. ``keep_decisions``: False when a decision read other pods
    (nothing of this plan may be kept)."""
    by_name = {o.name(p): p for p in pods}
    kept: dict[str, Kept] = dict(held)
    failed: set[str] = set()
    fresh_by_name: dict[str, Decision] = {}
    if decided:
        views = SharedViews((k.view.name, k.view) for k in held.values() if k.view is not None)
        fresh_by_name = _keep_fresh(decided, views, kept, failed)
    # in name order: the order of ``pods``, kept and fresh entries interleaved as they come
    entries = [(n, kept[n]) for n in by_name if n in kept]
    groups, placement = merge(namespace, entries)
    plugin, workload_ref, sources = _firsts(by_name, kept, fresh_by_name)
    return WorkloadPlan(
        namespace,
        {n: p for n, p in by_name.items() if n in kept or n in failed},
        kept if keep_decisions else {},
        decided,
        groups,
        placement,
        failed,
        plugin,
        workload_ref,
        sources,
    )


def _keep_fresh(
    decided: list[tuple[Obj, Decision]], views: SharedViews, kept: dict[str, Kept], failed: set[str]
) -> dict[str, Decision]:
    """Put the fresh decisions into ``kept`` (by pod name; ``views``: see :func:`keep`), those that failed into
    ``failed`` instead — a failed pod's earlier decision leaves ``kept`` (it is made again next time). The
    fresh decisions by pod name."""
    fresh_by_name: dict[str, Decision] = {}
    for pod, d in decided:
        name = o.name(pod)
        fresh_by_name[name] = d
        k = keep(pod, d, views)
        if k is None:
            failed.add(name)
            kept.pop(name, None)
        else:
            kept[name] = k
    return fresh_by_name


def _firsts(names: Iterable[str], kept: Mapping[str, Kept], fresh: Mapping[str, Decision]) -> tuple[str, OwnerRef | None, tuple[str, str]]:
    """The plugin and the workload of the plan: those of the first pod (in the order of ``names``: by name)
    that names them, kept or fresh; and the names of those pods."""
    plugin, workload_ref, sources = "none", None, ["", ""]
    for n in names:
        k = kept.get(n)
        d = fresh.get(n)
        if not sources[0]:
            p_ = k.plugin if k is not None else d.plugin if d is not None else None
            if p_:
                plugin, sources[0] = p_, n
        if not sources[1]:
            ref = k.top_owner if k is not None else d.top_owner if d is not None else None
            if ref is not None:
                workload_ref, sources[1] = ref, n
        if sources[0] and sources[1]:
            break
    return plugin, workload_ref, (sources[0], sources[1])


def update(
    last: WorkloadPlan,
    pods: Iterable[Obj],
    gone: Iterable[str],
    held: Mapping[str, Kept],
    decided: list[tuple[Obj, Decision]],
    *,
    keep_decisions: bool = True,
) -> WorkloadPlan:
    """``last`` with only some pods looked at again: ``pods`` (live, each with a kept decision in ``held``
    or a fresh one in ``decided``) and ``gone`` (names no longer live pods of the workload); every other
    pod stands as in ``last``. The result equals :func:`assemble` over all the live pods (the planning
    property test holds that in place): the PodGroups a looked-at pod leaves or joins (or whose view,
    sub-group or merge order it changes) are merged again with :func:`merge` — the same rule over the
    same entries — and the others are the last plan's. Its cost is the pods looked at plus the members of
    those PodGroups, not the workload."""
    namespace = last.namespace
    looked = {o.name(p): p for p in pods}
    looked_at = frozenset(looked).union(gone)
    kept = dict(last.kept)
    live = dict(last.pods)
    placement = dict(last.placement)
    failed = set(last.failed) - looked_at
    before: dict[str, Kept | None] = {}
    for name in looked_at:
        before[name] = kept.pop(name, None)
        live.pop(name, None)
        placement.pop(name, None)
    views = SharedViews(
        (g.metadata.name, k.view) for g in last.groups if (k := last.kept.get(g.newest)) is not None and k.view is not None
    )
    kept.update(held)
    fresh_by_name = _keep_fresh(decided, views, kept, failed)
    merged: set[str] = set()  # PodGroups a looked-at pod joins, leaves, or changes its entry in
    left: set[str] = set()  # those a looked-at pod leaves or changes its entry in
    joining: dict[str, list[str]] = {}  # PodGroup -> its looked-at pods
    joined: dict[str, list[str]] = {}  # PodGroup -> its looked-at pods that were not in it
    for name in looked_at:
        new = kept.get(name)
        if name in looked:
            live[name] = looked[name]
        old = before[name]
        if new is not None and new.view is not None:
            placement[name] = (new.view.name, new.sub_group)
            joining.setdefault(new.view.name, []).append(name)
            if old is None or old.view is None or old.view.name != new.view.name:
                joined.setdefault(new.view.name, []).append(name)
        if _merge_key(old) != _merge_key(new):
            if old is not None and old.view is not None:
                merged.add(old.view.name)
                left.add(old.view.name)
            if new is not None and new.view is not None:
                merged.add(new.view.name)
    by_group = {g.metadata.name: g for g in last.groups}
    rewritten = set(merged)
    for pg in merged:
        last_group = by_group.pop(pg, None)
        if last_group is not None and pg not in left:
            group = _joined(last_group, sorted(joined.get(pg, ())), kept)
            if group is not None:
                by_group[pg] = group
                rewritten.discard(pg)
                continue
        members = [n for n in last_group.pods if n not in looked_at] if last_group is not None else []
        members.extend(joining.get(pg, ()))
        members.sort()  # two sorted runs: linear
        for g in merge(namespace, [(n, kept[n]) for n in members])[0]:
            by_group[g.metadata.name] = g
    plugin, workload_ref, sources = last.plugin, last.workload_ref, last.sources
    if any(not s or s in looked_at for s in sources) or any(n < max(sources) for n in looked_at):
        plugin, workload_ref, sources = _firsts(sorted(live), kept, fresh_by_name)
    return WorkloadPlan(
        namespace,
        live,
        kept if keep_decisions else {},
        decided,
        [by_group[n] for n in sorted(by_group)],
        placement,
        failed,
        plugin,
        workload_ref,
        sources,
        looked_at,
        frozenset(merged),
        frozenset(rewritten),
    )


def _joined(group: PlannedGroup, joiners: list[str], kept: Mapping[str, Kept]) -> PlannedGroup | None:
    """What :func:`merge` makes of ``group``'s members and ``joiners`` (in name order; none of its members
    left or changed), without walking its members or its sub-groups — when it can be known so: the joiners
    see the PodGroup as its newest pod does (that very view) and its members agreed (no notes). Then the
    newest pod's view, whether it stays or a joiner is newer, is the same, and so is everything but the pod
    lists: ``group``'s sub-groups were made from that view, so each one no joiner enters is the last plan's,
    pods and all (a JobSet's PodGroup has a sub-group per replica: a pass costs the sub-groups joined, not
    all of them). None: the merge must run."""
    top = kept.get(group.newest)
    if group.notes or top is None or top.view is None:
        return None
    view = top.view
    entries = [(n, kept[n]) for n in joiners]
    if any(k.view is not view for _, k in entries) or len(group.metadata.sub_groups) != len(view.sub_groups):
        return None
    newest_name, _ = max([(group.newest, top), *entries], key=_merge_order)
    md = view.copy_without_pods(share=True)
    if md.sub_groups:
        into: dict[str, list[str]] = {}
        for n, k in entries:
            if k.sub_group:
                into.setdefault(k.sub_group, []).append(n)
        subs = list(group.metadata.sub_groups)
        if into:
            where = {sg.name: i for i, sg in enumerate(subs)}  # equal names: the last one, as merge fills
            for name, joining in into.items():
                i = where.get(name)
                if i is not None:  # (a sub-group the PodGroup lacks: the pod is in none, as merge leaves it)
                    subs[i] = subs[i].with_pods(_inserted(subs[i].pods, joining))
        md.sub_groups = subs
    return PlannedGroup(md, _inserted(group.pods, joiners), [], newest_name)


def _inserted(names: list[str], more: list[str]) -> list[str]:
    """A copy of the sorted ``names`` with ``more`` (sorted, none of them in ``names``) in their places."""
    out = list(names)
    for n in more:
        bisect.insort(out, n)
    return out


def _merge_key(k: Kept | None) -> tuple[Any, ...] | None:
    """What of a kept decision the merge of its PodGroup reads."""
    return None if k is None or k.view is None else (k.view, k.sub_group, k.created)


def merge(namespace: str, entries: Iterable[tuple[str, Kept]]) -> tuple[list[PlannedGroup], dict[str, tuple[str, str | None]]]:
    """The PodGroups of the grouped entries (pod name, kept decision; in name order), in name order, and
    each grouped pod's place. The newest pod's view of a PodGroup wins (creation time, then name)."""
    by_group: dict[str, list[tuple[str, Kept]]] = {}
    placement: dict[str, tuple[str, str | None]] = {}
    for name, k in entries:
        if k.view is not None:
            by_group.setdefault(k.view.name, []).append((name, k))
            placement[name] = (k.view.name, k.sub_group)
    groups: list[PlannedGroup] = []
    for pg in sorted(by_group):
        members = by_group[pg]  # in name order
        newest_name, newest = max(members, key=_merge_order)
        assert newest.view is not None
        md = newest.view.copy_without_pods()
        notes: list[str] = []
        view = newest.view
        if any(k.view is not view and k.view is not None and not k.view.same_spec(view) for _, k in members):
            notes.append(f"pods disagree on the spec; used the view of the newest pod {namespace}/{newest_name}")
        by_sg = {sg.name: sg.pods for sg in md.sub_groups}
        for name, k in members:  # appended in name order: each sub-group's list is sorted
            if k.sub_group:
                pods = by_sg.get(k.sub_group)
                if pods is not None:
                    pods.append(name)
        groups.append(PlannedGroup(md, [n for n, _ in members], notes, newest_name))
    return groups, placement


def _merge_order(entry: tuple[str, Kept]) -> tuple[str, str]:
    return entry[1].created, entry[0]


def merge_decisions(decisions: Iterable[Decision], created: Mapping[str, str] | None = None) -> list[PlannedGroup]:
    """:func:`merge` over decisions already made, of pods of any namespaces (``created``: pod key ->
    creationTimestamp, the merge order); the PodGroups by (namespace, name)."""
    created = created or {}
    views = SharedViews()
    by_ns: dict[str, list[tuple[str, Kept]]] = {}
    for d in decisions:
        if d.outcome != "grouped" or d.pod_group is None:
            continue
        view = views.share(f"{d.pod_namespace}/{d.pod_group.name}", d.pod_group.for_keeping())
        k = Kept(d.pod_uid, "", 0, created.get(d.pod_key, ""), view, d.sub_group, d.plugin, d.top_owner)
        by_ns.setdefault(d.pod_namespace, []).append((d.pod_name, k))
    out: list[PlannedGroup] = []
    for ns in sorted(by_ns):
        out.extend(merge(ns, sorted(by_ns[ns], key=lambda e: e[0]))[0])
    return out


def plan_workload(
    pods: Iterable[Obj],
    decide: Callable[[Obj], Decision],
    previous: Previous | None = None,
    *,
    namespace: str = "",
    keep_decisions: Callable[[], bool] = lambda: True,
) -> WorkloadPlan:
    """Plan ``pods`` (the live pods of one workload): decide those without a usable kept decision with
    ``decide`` (``Grouper.decide`` over the caller's lookups), keep the rest, merge all."""
    ordered = sorted(pods, key=o.name)
    fresh, held = to_decide(ordered, previous)
    decided = [(pod, decide(pod)) for pod in fresh]
    ns = namespace or (o.namespace(ordered[0]) if ordered else "")
    return assemble(ns, ordered, held, decided, keep_decisions=keep_decisions())


__all__ = [
    "Kept",
    "PlannedGroup",
    "Previous",
    "WorkloadPlan",
    "assemble",
    "decision_signature",
    "keep",
    "merge",
    "merge_decisions",
    "plan_workload",
    "reusable",
    "to_decide",
    "update",
]
