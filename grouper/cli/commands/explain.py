"""``grouper explain POD -n NS``: why a pod belongs to its PodGroup, in sentences.

With ``--server URL`` it prints the decision a running grouper made (``GET /pods/{ns}/{name}`` and the
PodGroup's ``GET /podgroups/{ns}/{name}``), including its last error. Without it, it reads the pod and its
owners from the cluster through the kubeconfig and recomputes the decision with the same core the controller
runs (``Grouper.decide`` over live read-through lookups, with the built-in Karta catalog and the cluster's
Karta objects), then compares it with what the pod carries. The grouping flags (``--scheduler-name``,
``--queue-label-key``, ...) must match the running grouper's for the recomputed decision to match.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from grouper.cli.commands.get import ServerError, server_get
from grouper.cli.common import add_grouping_flags, add_target_flags, default_definitions_dir, grouping_config
from grouper.cli.live_lookups import LiveLookups
from grouper.cli.live_workload import PODGROUPS, PODS, list_kartas
from grouper.core.satisfiable import unsatisfiable_reasons
from grouper.kube.config import KubeConfigError
from grouper.kube.sync import SyncKube
from grouper.kube.transport import ApiError
from grouper.model import objects as o
from grouper.model.podgroup import POD_GROUP_ANNOTATION, SUBGROUP_LABEL

EXIT_OK, EXIT_ERROR, EXIT_NOT_FOUND = 0, 1, 3

FIELD_WORDS = {
    "queue": ("queue", "queue"),
    "priorityClassName": ("priority class", "priorityClassName"),
    "preemptibility": ("preemptibility", "preemptibility"),
    "preemptionDelay": ("preemption delay", "preemptionDelay"),
    "stalenessGracePeriod": ("staleness grace period", "stalenessGracePeriod"),
    "topology": ("topology", "topologyConstraint"),
    "minMember": ("minMember", "minMember"),
    "minSubGroup": ("minSubGroup", "minSubGroup"),
    "subGroups": ("sub-groups", ""),
    "name": ("name", ""),
    "nodePoolLabel": ("node-pool label", ""),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "explain",
        help="explain, in words, which PodGroup a pod belongs to and why",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("pod", metavar="POD", help="pod name")
    p.add_argument("-n", "--namespace", help="the pod's namespace (default: the kubeconfig context's, else default)")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    add_target_flags(p)
    add_grouping_flags(p)
    p.set_defaults(func=run)


# ------------------------------------------------------------------------------------------ words


def _ref(r: dict[str, Any] | None, namespace: str) -> str:
    if not r:
        return "?"
    return f"{r.get('kind')} {namespace}/{r.get('name')}" if r.get("kind") != "Node" else str(r.get("name"))


def _size(spec: dict[str, Any]) -> str:
    if spec.get("minSubGroup") is not None:
        return f"{spec['minSubGroup']} of its sub-groups (minSubGroup)"
    if spec.get("minMember") is not None:
        return f"{spec['minMember']} pod{'s' if spec['minMember'] != 1 else ''} (minMember)"
    return "no minimum"


def explain_text(rec: dict[str, Any], pod_group: dict[str, Any] | None, actual: dict[str, str | None] | None,
                 source: str) -> str:
    """The decision record ``rec`` (``/pods`` shape), the PodGroup (``/podgroups/{ns}/{name}`` shape, may be
    None) and what the pod carries now (``podGroup``/``subGroup``, may be None), as sentences."""
    ns, name = rec["pod"]["namespace"], rec["pod"]["name"]
    lines: list[str] = []
    outcome = rec.get("outcome")
    pg, sg = rec.get("podGroup"), rec.get("subGroup")
    group = rec.get("workloadGroup")
    if outcome == "grouped" and group and not group.get("rendered"):
        lines.append(f"Pod {ns}/{name} is held for WorkloadGroup {group['name']}: it names PodGroup {pg}, which is "
                     "not written while the group is not complete and valid, so the scheduler does not schedule it "
                     "(the gate).")
    elif outcome == "grouped":
        lines.append(f"Pod {ns}/{name} belongs to PodGroup {pg}" + (f", sub-group {sg}." if sg else
                                                                      " (no sub-group)."))
    elif outcome == "failed":  # decided, but the API server refused the PodGroup or the pod's patch
        lines.append(f"Pod {ns}/{name} is NOT grouped: it was decided into PodGroup {pg}"
                     + (f", sub-group {sg}" if sg else "") + f", but the write failed ({rec.get('reason')}): "
                     f"{rec.get('message')}")
    elif outcome == "skipped":
        lines.append(f"Pod {ns}/{name} is not grouped ({rec.get('reason')}): {rec.get('message')}.")
    else:
        lines.append(f"Pod {ns}/{name} could not be grouped ({rec.get('reason')}): {rec.get('message')}")

    if group:
        lines += group_lines(group)
    top = rec.get("topOwner")
    chain = rec.get("ownerChain") or []
    plugin = rec.get("plugin")
    if plugin:
        if top and chain:
            path = " -> ".join([f"Pod {ns}/{name}", *(_ref(r, ns) for r in chain)])
            why = f"the top owner is {_ref(top, ns)} (owner chain: {path})"
        elif top:
            why = f"the pod has no owner, so it is its own top owner ({_ref(top, ns)})"
        else:
            why = "of the pod itself"
        lines.append(f"Plugin {plugin} chose it because {why}.")
    defn = rec.get("definition")
    if defn:
        lines.append(f"The Karta definition {defn['name']} ({defn['origin']}) describes that kind.")

    spec = ((pod_group or {}).get("podGroup") or {}).get("spec") or {}
    if outcome == "grouped" and pod_group:
        unit = "sub-groups" if pod_group.get("requiredUnit") == "subGroups" else "pods"
        lines.append(f"PodGroup {pg} needs {_size(spec)}; {pod_group.get('present', 0)} {unit} present.")
        for s in pod_group.get("subGroups") or []:
            if s["name"] == sg:
                need = f"{s['required']} pod{'s' if s['required'] != 1 else ''}" if s.get("required") is not None \
                    else "no minimum"
                lines.append(f"Sub-group {sg} needs {need} (minMember); {s.get('present', 0)} assigned: "
                             f"{', '.join(s.get('pods') or []) or 'none'}.")
                if s.get("parent"):
                    lines.append(f"It is a child of sub-group {s['parent']}.")

    warnings = (pod_group or {}).get("warnings") or []
    if warnings:
        lines.append("Warnings (the gang can never be satisfied as it stands):")
        lines += [f"  - {w}" for w in warnings]

    prov = rec.get("provenance") or {}
    if prov:
        lines.append("Where the values came from:")
        for key, source_text in prov.items():
            words, spec_key = FIELD_WORDS.get(key, (key, key))
            value = spec.get(spec_key) if spec_key else None
            if isinstance(value, dict):
                value = ", ".join(f"{k}={v}" for k, v in value.items())
            shown = f"{words} {value}" if value not in (None, "") else words
            if key == "name":
                lines.append(f"  the name follows {source_text}")
            elif source_text.startswith(("none", "not set")):
                lines.append(f"  {shown}: {source_text}")
            else:
                lines.append(f"  {shown} came from {source_text}")
    notes = rec.get("notes") or []
    if notes:
        lines.append("Notes:")
        lines += [f"  - {n}" for n in notes]
    err = rec.get("lastError")
    if err:
        when = f" at {err['time']}" if err.get("time") else ""
        lines.append(f"Last error{when}: {err['message']}")
    if actual is not None and outcome == "grouped":
        have_pg, have_sg = actual.get("podGroup"), actual.get("subGroup")
        if have_pg == pg and (have_sg or None) == (sg or None):
            lines.append(f"The pod carries {POD_GROUP_ANNOTATION}={have_pg}"
                         + (f" and {SUBGROUP_LABEL}={have_sg}" if have_sg else "") + ", as decided.")
        else:
            lines.append(f"The pod carries {POD_GROUP_ANNOTATION}={have_pg or '(none)'} and {SUBGROUP_LABEL}="
                         f"{have_sg or '(none)'}: not yet what was decided (the grouper patches it on its next "
                         "reconcile, or it is not running).")
    lines.append(f"(source: {source})")
    return "\n".join(lines)


def group_lines(group: dict[str, Any]) -> list[str]:
    """The WorkloadGroup a pod's workload is a member of (the API's ``WorkloadGroupView``), in words: which
    group, how complete, its rendered PodGroup or why there is none (its conditions that are not True)."""
    from grouper.api.models import WorkloadGroupView
    from grouper.api.workload_group import summary

    g = WorkloadGroupView.model_validate(group)
    lines = [f"It is held for WorkloadGroup {g.name}: its workload is a {summary(g)}."]
    lines += [f"  {c.type}={c.status} ({c.reason}): {c.message}" for c in g.conditions if c.status != "True"]
    return lines


# ------------------------------------------------------------------------------------------ from a grouper


def from_server(args: argparse.Namespace, namespace: str) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
    rec = server_get(args.server, f"/pods/{namespace}/{args.pod}", token_file=args.token_file)
    if rec is None:
        return None
    pg = None
    if rec.get("podGroup"):
        pg = server_get(args.server, f"/podgroups/{namespace}/{rec['podGroup']}", token_file=args.token_file)
    return rec, pg


# ------------------------------------------------------------------------------------------ from the cluster


def _registry(kube: SyncKube, args: argparse.Namespace) -> Any:
    from grouper.karta import DefinitionRegistry

    if not args.generic_karta_fallback:
        return None
    registry = DefinitionRegistry(args.definitions or default_definitions_dir())
    try:
        for karta in list_kartas(kube):
            registry.upsert_cluster_object(karta)
    except ApiError:
        pass  # Kartas not served or not readable: the built-in catalog only
    return registry


def from_cluster(args: argparse.Namespace, kube: SyncKube, namespace: str
                 ) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, str | None]] | None:
    from grouper.runtime.composition import build_grouper

    pod = kube.get_object(PODS.path(namespace, args.pod))
    if pod is None:
        return None
    config = grouping_config(args)
    decision = build_grouper(config, _registry(kube, args)).decide(pod, LiveLookups(kube, config))
    rec = decision.to_record()
    rec["lastError"] = None
    actual = {"podGroup": o.annotations(pod).get(POD_GROUP_ANNOTATION),
              "subGroup": o.labels(pod).get(SUBGROUP_LABEL)}
    pg_view = None
    md = decision.pod_group
    if md is not None:
        members: dict[str | None, list[str]] = {}
        for p in kube.list_items(PODS.path(namespace)):
            if o.annotations(p).get(POD_GROUP_ANNOTATION) == md.name or o.name(p) == args.pod:
                sub = decision.sub_group if o.name(p) == args.pod else o.labels(p).get(SUBGROUP_LABEL)
                members.setdefault(sub, []).append(o.name(p))
        children = {sg.parent for sg in md.sub_groups if sg.parent}
        subs = []
        for sg in md.sub_groups:
            pods = sorted(members.get(sg.name, []))
            subs.append({"name": sg.name, "parent": sg.parent, "pods": pods, "present": len(pods),
                         "required": sg.min_sub_group if sg.name in children else sg.min_member})
        stored = kube.get_object(PODGROUPS.path(namespace, md.name))
        if stored is None:
            rec["notes"] = [*rec.get("notes", []), f"PodGroup {md.name} does not exist in the cluster yet"]
        unit = "subGroups" if md.min_sub_group is not None else "pods"
        roots_present = sum(1 for s in subs if not s["parent"] and (s["pods"] or s["name"] in children))
        pg_view = {
            # the members are the pods annotated by a running grouper (and this one): complete only once
            # the grouper wrote the PodGroup
            "warnings": unsatisfiable_reasons(md, members, complete=stored is not None),
            "podGroup": md.to_object(),
            "requiredUnit": unit,
            "present": roots_present if unit == "subGroups" else sum(len(v) for v in members.values()),
            "subGroups": subs,
        }
    _note_held(kube, namespace, rec, actual.get("podGroup"), md.name if md is not None else None)
    if decision.top_owner is not None and decision.outcome == "grouped" and _note_group(
            kube, namespace, rec, actual, decision.top_owner, config):
        pg_view = None  # the view of the workload's own PodGroup does not apply
    return rec, pg_view, actual


def _note_group(kube: SyncKube, namespace: str, rec: dict[str, Any], actual: dict[str, str | None], top: Any,
                config: Any) -> bool:
    """The pod's workload is a member of a WorkloadGroup that exists: the pod is held for the group's
    PodGroup (rendered, or the gate's name), not the one its workload alone would have (``rec`` is changed
    to say so). Whether it is."""
    from grouper.api.workload_group import group_view
    from grouper.cli.live_workload import live_workload_group
    from grouper.core.upstream import scheduling_group

    try:
        owner = LiveLookups(kube, config).get(top.api_version, top.kind, namespace, top.name)
    except Exception:  # not readable: no membership to read (the decision above says what it could)
        return False
    group, warnings = live_workload_group(kube, owner, namespace)
    rec["notes"] = [*rec.get("notes", []), *warnings]
    if group is None:
        return False
    view = group_view(group)
    pod = kube.get_object(PODS.path(namespace, rec["pod"]["name"]))
    carried = (o.annotations(pod).get(POD_GROUP_ANNOTATION) or scheduling_group(pod)) if pod is not None else None
    if rec.get("podGroup"):
        own = rec["podGroup"]
        rec["notes"] = [*(n for n in rec["notes"] if not n.startswith(f"PodGroup {own} does not exist")),
                        f"its workload alone would be in PodGroup {own}; it is not written while the workload is a "
                        f"member of WorkloadGroup {view.name}"]
    rec["podGroup"] = carried if carried and carried.startswith(view.podGroup) else view.podGroup
    rec["subGroup"] = actual.get("subGroup") if view.rendered else None
    rec["workloadGroup"] = view.model_dump()
    return True


def _note_held(kube: SyncKube, namespace: str, rec: dict[str, Any], carried: str | None, decided: str | None) -> None:
    """The pod is in a PodGroup the grouper holds (grouper/core/hold.py): the held mark says why."""
    from grouper.core.hold import HELD_ANNOTATION

    if not carried or carried == decided:
        return
    stored = kube.get_object(PODGROUPS.path(namespace, carried))
    mark = o.annotations(stored).get(HELD_ANNOTATION) if stored is not None else None
    if mark:
        rec["notes"] = [*rec.get("notes", []), f"the pod stays in PodGroup {carried}, {mark}"]


def run(args: argparse.Namespace) -> int:
    actual: dict[str, str | None] | None = None
    try:
        if args.server:
            namespace = args.namespace or "default"
            found = from_server(args, namespace)
            if found is None:
                print(f"error: the grouper at {args.server} has no decision for pod {namespace}/{args.pod} "
                      "(no such pod, another scheduler, or not seen yet)", file=sys.stderr)
                return EXIT_NOT_FOUND
            rec, pg = found
            source = f"decision recorded by the grouper at {args.server}"
        else:
            with SyncKube.connect(args.kubeconfig, args.context) as kube:
                namespace = args.namespace or kube.namespace
                live = from_cluster(args, kube, namespace)
            if live is None:
                print(f"error: pod {namespace}/{args.pod} not found", file=sys.stderr)
                return EXIT_NOT_FOUND
            rec, pg, actual = live
            source = f"recomputed now from the cluster at {kube.server}"
    except (ServerError, KubeConfigError, ApiError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    if args.output == "json":
        print(json.dumps({"decision": rec, "podGroup": pg, "podCarries": actual, "source": source}, indent=2))
    else:
        print(explain_text(rec, pg, actual, source))
    return EXIT_OK
