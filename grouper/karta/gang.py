"""Gang instructions → PodGroupMetadata (kai-podgrouper.md §2.4, karta.md §3.9).

Starts from the default grouper's answer (``base``) and changes only what the definition's
``gangScheduling`` decides: name, minMember / minSubGroup, sub-groups, topology. ``provenance``
records why each changed field has its value.

Alpha ``podGroups`` deviation (karta.md §7.6): upstream computes minMember per pod from the
pod's *effective member*, so pods of one PodGroup can disagree (PyTorchJob master 1, worker 3).
We compute it once per group key: the sum of the subtree scales of the distinct members of the
effective member's pod group whose ``groupByKeyPaths``, evaluated on the pod, give the same keys
(a member nested under another counted member is not counted twice). A member is scoped to the
pod's instance only when it is the pod's own component and one of the key values is that
instance id (compared case-insensitively) — i.e. when the keys split the group per instance
(JobSet, Dynamo). Results: PyTorchJob 4 for every pod, RayCluster 1 + 2 + 1 = 4, JobSet
leader 1 / worker 2 (as upstream), LWS unchanged (32: the upstream scale formula is kept).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from grouper.karta.errors import KartaEvalError
from grouper.karta.evaluate import Evaluator
from grouper.karta.model import AlphaPodGroup, Component, KartaDefinition, PodGroupMember, TopologySpec
from grouper.karta.values import INT32_MAX, go_quote, go_sprint
from grouper.model import objects as o
from grouper.model.podgroup import PodGroupMetadata, SubGroup, TopologyConstraint

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_RE = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*\Z")
DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def dns1123_subdomain_errors(value: str) -> list[str]:
    """Kubernetes ``IsDNS1123Subdomain`` messages (empty = valid)."""
    errs: list[str] = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not DNS1123_SUBDOMAIN_RE.match(value):
        errs.append(DNS1123_SUBDOMAIN_MSG)
    return errs


def _pod_ref(pod: dict[str, Any]) -> tuple[str, str]:
    return o.namespace(pod), o.name(pod)


def _set_min_member(out: PodGroupMetadata, min_member: int, why: str) -> None:
    """Make ``out`` a flat gang of ``min_member`` pods (no sub-groups); ``why`` is its provenance."""
    out.sub_groups = []
    out.min_sub_group = None
    out.min_member = min_member
    out.provenance["minMember"] = why
    out.provenance.pop("minSubGroup", None)


def apply_gang(
    defn: KartaDefinition,
    evaluator: Evaluator,
    top_owner: dict[str, Any],
    pod: dict[str, Any],
    base: PodGroupMetadata,
) -> PodGroupMetadata | None:
    """The PodGroup for ``pod`` per the definition's gang instructions, or None without any
    (the caller then keeps ``base``). Raises ``KartaEvalError`` (a ``KartaError``)."""
    gang = defn.gang
    if gang is None or not gang.has_instructions:
        return None
    out = base.edit_copy()
    if gang.pod_group is not None:
        _apply_v2(defn, evaluator, top_owner, pod, out)
    else:
        _apply_alpha(defn, evaluator, top_owner, pod, out)
    return out


def _err(defn: KartaDefinition, message: str, component: str | None = None) -> KartaEvalError:
    return KartaEvalError(message, definition=defn.name, component=component)


def _topology(defn: KartaDefinition, t: TopologySpec, component: str | None = None) -> TopologyConstraint:
    if not t.topology_name:
        raise _err(defn, "topology constraint must include topology name", component)
    if not t.preferred_level and not t.required_level:
        raise _err(defn, "topology constraint must include preferred or required topology level", component)
    return TopologyConstraint(
        topology=t.topology_name, required_level=t.required_level, preferred_level=t.preferred_level
    )


def pod_in_subtree(evaluator: Evaluator, pod: dict[str, Any], component: Component) -> bool:
    """KAI component_matching: the pod matches the component's componentTypeSelector or that of
    any descendant; components without a selector never match."""
    defn = evaluator.definition
    for c in (component, *defn.descendants(component.name)):
        if c.type_selector is not None and evaluator.matches_component_type(pod, c):
            return True
    return False


def _apply_v2(
    defn: KartaDefinition,
    ev: Evaluator,
    top_owner: dict[str, Any],
    pod: dict[str, Any],
    out: PodGroupMetadata,
) -> None:
    pg = defn.gang.pod_group if defn.gang else None
    assert pg is not None
    src = f"Karta {defn.name}"
    out.name = f"pg-{o.uid(top_owner)}-{pg.name}"
    out.provenance["name"] = f"{src}: gangScheduling.podGroup.name {pg.name}"
    if pg.topology is not None:
        out.topology = _topology(defn, pg.topology)
        out.provenance["topology"] = f"{src}: gangScheduling.podGroup.topology"
    _, pod_name = _pod_ref(pod)
    subs: list[SubGroup] = []
    for sg in pg.sub_groups:
        if not sg.component_name:
            raise _err(defn, "subgroup component name cannot be empty")
        comp = defn.component(sg.component_name)
        if comp is None:
            raise _err(defn, f"component {sg.component_name} not found", sg.component_name)
        size = ev.subtree_scale(top_owner, comp)
        if size == 0:
            raise _err(defn, _zero_scale(ev, top_owner, comp), comp.name)
        topo = _topology(defn, sg.topology, comp.name) if sg.topology is not None else None
        pods = [pod_name] if pod_name and pod_in_subtree(ev, pod, comp) else []
        subs.append(SubGroup(name=comp.name, min_member=size, topology=topo, pods=pods))
    if subs:
        out.sub_groups = subs
        out.min_sub_group = len(subs)
        out.min_member = None
        out.provenance["minSubGroup"] = f"{src}: number of sub-groups ({len(subs)})"
        out.provenance.pop("minMember", None)
        out.provenance["subGroups"] = f"{src}: " + ", ".join(
            f"{s.name} minMember = subtree scale of component {s.name}" for s in subs
        )
    else:
        _set_min_member(
            out,
            ev.subtree_scale(top_owner, defn.root),
            f"{src}: subtree scale of root component {defn.root.name}",
        )


def _zero_scale(ev: Evaluator, obj: dict[str, Any], comp: Component) -> str:
    """Why a sub-group's size came out 0, naming the scale values and their expressions."""
    defn = ev.definition
    if not defn.has_scale_definition:
        return f"component {comp.name} must expose a replica scale definition"
    found: list[str] = []
    for c in (comp, *defn.descendants(comp.name)):
        if c.scale is None:
            continue
        paths = c.scale.paths()
        for iid, sc in ev.scale(obj, c).items():
            for name, value in (("replicas", sc.replicas), ("minReplicas", sc.min_replicas)):
                if f"{name}" in paths:
                    shown = "null" if value is None else str(value)
                    where = f"component {c.name}" + (f" instance {iid}" if iid else "")
                    found.append(f"{where}: {name} {shown} (expression '{paths[name]}')")
    detail = "; ".join(found) if found else "no component in it has replicas or minReplicas"
    return (
        f"sub-group {comp.name} has no pods to wait for: its scale is 0 ({detail}); "
        "a gang needs replicas (or minReplicas) of at least 1"
    )


@dataclass(frozen=True)
class _Candidate:
    group: AlphaPodGroup
    member: PodGroupMember
    component: Component


def member_candidates(defn: KartaDefinition, component: Component) -> list[_Candidate]:
    """Upstream effectiveComponentCandidates: members naming the component first, then members
    naming an ancestor (nearest first); definition order within each class."""
    groups = defn.gang.pod_groups if defn.gang else ()
    out: list[_Candidate] = []
    for target in (component, *defn.ancestors(component.name)):
        for g in groups:
            for m in g.members:
                if m.component_name == target.name:
                    out.append(_Candidate(g, m, target))
    return out


def _apply_alpha(
    defn: KartaDefinition,
    ev: Evaluator,
    top_owner: dict[str, Any],
    pod: dict[str, Any],
    out: PodGroupMetadata,
) -> None:
    src = f"Karta {defn.name}"
    pod_comp = ev.infer_component(pod)
    effective: _Candidate | None = None
    for cand in member_candidates(defn, pod_comp):
        if not cand.member.filters or ev.passes_filters(pod, cand.member.filters, cand.component.name):
            effective = cand
            break
    if effective is None:
        ns, name = _pod_ref(pod)
        raise _err(
            defn, f"pod {ns}/{name} does not match any Karta pod group member definition", pod_comp.name
        )
    instance = ev.instance_of_pod(top_owner, pod, pod_comp) if effective.component is pod_comp else None
    keys = ev.group_keys(pod, effective.member.group_by_key_paths, effective.component.name)
    name = f"pg-{o.uid(top_owner)}" + "".join(f"-{k}" for k in keys)
    if keys:
        errs = dns1123_subdomain_errors(name)
        if errs:
            raise _err(
                defn,
                f"Karta grouping keys {go_sprint(keys)} produce invalid Kubernetes PodGroup name "
                f"{go_quote(name)}: {'; '.join(errs)}",
                effective.component.name,
            )
    out.name = name
    out.provenance["name"] = (
        f"{src}: podGroups[{effective.group.name}] member {effective.member.component_name}"
        + (f" keys {go_sprint(keys)}" if keys else "")
    )
    counted = _co_members(ev, pod, effective, keys)
    total = 0
    parts: list[str] = []
    lowered = {k.lower() for k in keys}
    for comp in counted:
        inst = instance if comp is pod_comp and instance is not None and instance.lower() in lowered else None
        total += ev.subtree_scale(top_owner, comp, inst)
        parts.append(comp.name + (f"[{inst}]" if inst is not None else ""))
    if total > INT32_MAX:
        raise _err(defn, f"minMember {total} is beyond the int32 range", effective.component.name)
    _set_min_member(
        out, total, f"{src}: sum of subtree scales of {', '.join(parts)} (podGroups[{effective.group.name}])"
    )


def _co_members(
    ev: Evaluator, pod: dict[str, Any], effective: _Candidate, keys: list[str]
) -> list[Component]:
    """Components of the effective member's pod group that map to the same group keys."""
    defn = ev.definition
    chosen: list[Component] = []
    for m in effective.group.members:
        comp = defn.component(m.component_name)
        if comp is None:
            continue
        if m is not effective.member:
            try:
                if ev.group_keys(pod, m.group_by_key_paths, comp.name) != keys:
                    continue
            except KartaEvalError:
                continue
        if comp not in chosen:
            chosen.append(comp)
    # a member nested under another chosen member is already part of that subtree
    names = {c.name for c in chosen}
    return [c for c in chosen if not any(a.name in names for a in defn.ancestors(c.name))]
