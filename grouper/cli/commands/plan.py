"""``grouper plan``: what PodGroups would the grouper write for these manifests? No cluster needed."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Any

import yaml

from grouper.cli.common import add_grouping_flags, default_definitions_dir, grouping_config
from grouper.core.plan import PlanResult, plan
from grouper.core.upstream import UpstreamVersions, min_count, to_upstream
from grouper.core.workload_group import GroupRender as WorkloadGroupRender
from grouper.core.workload_group_upstream import COMPOSITE_VERSION, render_upstream
from grouper.manifests import ManifestError, load_manifests
from grouper.model.podgroup import PodGroupMetadata
from grouper.runtime.composition import build_grouper

EXIT_OK, EXIT_POD_ERRORS, EXIT_BAD_INPUT = 0, 1, 2


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "plan",
        help="offline: print the PodGroups the grouper would write for workload and pod manifests",
        description=(
            "Run the grouping core over manifests (workloads, intermediate owners, pods, and optionally "
            "Karta objects, PriorityClasses and the defaults ConfigMap) and print the resulting PodGroups. "
            "Workload groups (a WorkloadGroup and workloads annotated kai.scheduler/workload-group) are shown "
            "merged into one PodGroup. Exit 0 when every handled pod got a decision (warnings, e.g. a gang that "
            "can never be satisfied, do not change it), 1 when any pod has an error or a workload group is not "
            "rendered (incomplete or invalid), 2 for unreadable input."
        ),
    )
    p.add_argument("-f", "--filename", action="append", required=True, metavar="FILE",
                   help="manifest file or directory (repeatable; - for stdin)")
    p.add_argument("-o", "--output", choices=["json", "yaml", "table"], default="table")
    p.add_argument("-n", "--namespace", default="default",
                   help="namespace of namespaced objects that name none, as kubectl apply (default %(default)s)")
    p.add_argument("--karta-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="time limit of one Karta jq evaluation in the sandbox (default %(default)s)")
    p.add_argument("--composite", action=argparse.BooleanOptionalAction, default=True,
                   help="with --backend upstream: render workload groups as a CompositePodGroup "
                        "(scheduling.k8s.io/v1alpha3, gate CompositePodGroup); --no-composite: as one flattened "
                        "gang, as on a cluster that does not serve it (default: composite)")
    add_grouping_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from grouper.karta import DefinitionRegistry, KartaLoadError

    try:
        manifests = load_manifests(args.filename)
    except ManifestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    definitions_dir = args.definitions or default_definitions_dir()
    registry = DefinitionRegistry(definitions_dir, timeout_s=args.karta_timeout)
    for e in registry.load_errors:
        print(f"error: Karta catalog: {e}", file=sys.stderr)
    if registry.load_errors:
        return EXIT_BAD_INPUT
    if args.definitions is not None:  # the user's own catalog: an invalid entry is an input error
        invalid = [x for x in registry.all() if not x.report.ok]
        for x in invalid:
            print(f"error: {x.origin}: Karta {x.definition.name} is invalid:", file=sys.stderr)
            for issue in x.report.errors:
                print(f"  {issue}", file=sys.stderr)
        if invalid:
            print("error: not planning with an invalid Karta definition", file=sys.stderr)
            return EXIT_BAD_INPUT
    objects = []
    bad = False
    for m in manifests:
        if m.obj.get("kind") in {"Karta", "ResourceInterface"}:
            try:
                loaded = registry.upsert_cluster_object(m.obj)
            except KartaLoadError as exc:  # upsert keeps load errors; stay safe
                loaded, bad = None, True
                print(f"error: {m.source}: {exc}", file=sys.stderr)
            name = str(m.obj.get("metadata", {}).get("name"))
            if loaded is None:
                err = registry.cluster_errors().get(name)
                if err is not None:
                    print(f"error: {m.source}: Karta {name} cannot be loaded: {err}", file=sys.stderr)
                bad = True
            elif not loaded.report.ok:
                print(f"error: {m.source}: Karta {name} is invalid:", file=sys.stderr)
                for issue in loaded.report.errors:
                    print(f"  {issue}", file=sys.stderr)
                bad = True
        else:
            objects.append(_defaulted(m.obj, args.namespace))
    if bad:
        print("error: not planning with an invalid Karta (its kind would silently use another grouper)",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    config = grouping_config(args)
    result = plan(objects, build_grouper(config, registry))
    emit(result, args.output, backend=args.backend, composite=args.composite)
    failed = result.errors or result.groups_not_rendered or result.membership_errors
    return EXIT_POD_ERRORS if failed else EXIT_OK


# kinds that live outside namespaces (the rest get ``--namespace`` when they name none)
CLUSTER_SCOPED = frozenset(
    {"Namespace", "Node", "PriorityClass", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
     "PersistentVolume", "StorageClass", "Queue", "Topology", "Karta", "ResourceInterface"}
)


def _defaulted(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """What the API server would add: the namespace (as kubectl apply) and a uid (stable per
    object, so the PodGroup name is well-formed and the plan is reproducible)."""
    meta = dict(obj.get("metadata") or {})
    changed = False
    if not meta.get("namespace") and obj.get("kind") not in CLUSTER_SCOPED:
        meta["namespace"] = namespace
        changed = True
    if not meta.get("uid"):
        key = f"{obj.get('apiVersion')}/{obj.get('kind')}/{meta.get('namespace') or ''}/{meta.get('name')}"
        meta["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"grouper-plan:{key}"))
        changed = True
    return {**obj, "metadata": meta} if changed else obj


# offline there is no discovery: the version 1.37 serves (the running backend asks the API server)
OFFLINE_VERSIONS = UpstreamVersions("scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1beta1")


def emit(result: PlanResult, output: str, *, backend: str = "kai", composite: bool = True) -> None:
    data = result.to_json()
    rendered = {g.pod_group_name: g for g in result.workload_groups if g.pod_group is not None}
    upstream = [
        to_upstream(m.metadata, OFFLINE_VERSIONS) for m in result.pod_groups if m.metadata.name not in rendered
    ] if backend == "upstream" else []
    groups_upstream = [
        (g, render_upstream(g, OFFLINE_VERSIONS, COMPOSITE_VERSION if composite else None)) for g in rendered.values()
    ] if backend == "upstream" else []
    if upstream or groups_upstream:
        data["upstream"] = [
            {"workload": u.workload, "podGroups": u.pod_groups, "notes": u.notes} for u in upstream
        ] + [
            {"workloadGroup": g.key, "workload": u.workload, "compositePodGroup": u.composite,
             "podGroups": u.pod_groups, "pods": u.placement, "notes": u.notes}
            for g, u in groups_upstream
        ]
    if output == "json":
        print(json.dumps(data, indent=2))
    elif output == "yaml":
        print(yaml.safe_dump(data, sort_keys=False), end="")
    else:
        table = render_table(result, data)
        for u in upstream:
            (pg,) = u.pod_groups[:1] or [{}]
            count = ((pg.get("spec") or {}).get("schedulingPolicy") or {}).get("gang", {}).get("minCount")
            table += f"\nupstream Workload+PodGroup {u.workload['metadata']['name']}  gang minCount={count}"
            table += "".join(f"\n  note: {n}" for n in u.notes)
        for g, gu in groups_upstream:
            if gu.composite is not None:
                table += (f"\nupstream CompositePodGroup {gu.composite['metadata']['name']}  minGroupCount="
                          f"{gu.composite['spec']['schedulingPolicy']['gang']['minGroupCount']}  (WorkloadGroup {g.key})")
            for pg in gu.pod_groups:
                table += f"\n  upstream PodGroup {pg['metadata']['name']}  gang minCount={min_count(pg)}"
            table += "".join(f"\n  note: {n}" for n in gu.notes)
        print(table)


def render_table(result: PlanResult, data: dict[str, Any]) -> str:
    """One line per PodGroup, its sub-groups indented under their parents, pods under them."""
    lines: list[str] = []
    for merged in result.pod_groups:
        md = merged.metadata
        size = f"minSubGroup={md.min_sub_group}" if md.min_sub_group is not None else f"minMember={md.min_member}"
        plugin = result.plugin_of(merged) or "?"
        lines.append(
            f"PodGroup {md.namespace}/{md.name}  {size}  queue={md.queue or '-'}  "
            f"priority={md.priority_class_name or '-'}  owner={md.owner.kind}/{md.owner.name}  plugin={plugin}"
        )
        in_sub = {p for sg in md.sub_groups for p in sg.pods}
        _render_sub_groups(md, None, 1, lines)
        for name in merged.pods:
            if name not in in_sub:
                lines.append(f"  pod {name}")
    for g in result.workload_groups:
        lines.extend(_group_lines(g))
    lines.extend(f"ERROR {e}" for e in result.membership_errors)
    skipped = [d for d in result.decisions if d.outcome == "skipped"]
    for d in skipped:
        lines.append(f"skipped pod {d.pod_key}: {d.reason} ({d.message})")
    for d in result.errors:
        lines.append(f"ERROR pod {d.pod_key}: {d.message}")
    lines.extend(f"warning: {w}" for w in data.get("warnings") or ())
    if not lines:
        lines.append("no pods found in the input")
    return "\n".join(lines)


def _group_lines(g: WorkloadGroupRender) -> list[str]:
    expected = "?" if g.expected is None else str(g.expected)
    lines = [f"WorkloadGroup {g.key}  {g.state}  members={len(g.members)}/{expected}  podGroup={g.pod_group_name}"]
    lines.extend(f"  member {m.ref.kind}/{m.ref.name}  rootSubGroup={m.root_sub_group}  "
                 f"own PodGroups: {', '.join(m.pod_groups) or '-'}" for m in g.members)
    lines.extend(f"  ERROR {e}" for e in g.errors)
    lines.extend(f"  pending: {p}" for p in g.pending)
    if g.gate:
        lines.append(f"  gate: {g.gate}")
    lines.extend(f"  note: {n}" for n in g.notes)
    return lines


def _render_sub_groups(md: PodGroupMetadata, parent: str | None, depth: int, lines: list[str]) -> None:
    for sg in md.sub_groups:
        if sg.parent != parent:
            continue
        size = f"minSubGroup={sg.min_sub_group}" if sg.min_sub_group is not None else f"minMember={sg.min_member}"
        topo = f"  topology={sg.topology.topology}" if sg.topology and not sg.topology.is_empty() else ""
        lines.append(f"{'  ' * depth}sub-group {sg.name}  {size}{topo}")
        lines.extend(f"{'  ' * (depth + 1)}pod {pod}" for pod in sg.pods)
        _render_sub_groups(md, sg.name, depth + 1, lines)
