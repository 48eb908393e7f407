"""``grouper definitions impact NAME [-f NEW.yaml]``: what deleting (or replacing) a Karta would do to the
running workloads, before doing it. Live and read-only, like ``grouper explain``: it reads the cluster's
Kartas, the workloads of the kinds the old and new definition describe, their pods and PodGroups, decides
every pod with the definitions as they are and as they would be, and lists each workload whose PodGroups
would change: before and after (minMember / minSubGroup / sub-groups) and the effect — "weaker: would be
held" when the hold rule (grouper/core/hold.py) keeps the stored PodGroup until the workload changes.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grouper.cli.common import add_grouping_flags, grouping_config

EXIT_OK, EXIT_USAGE = 0, 2


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "impact",
        help="list the workloads whose PodGroups deleting (or replacing) a Karta would change",
        description=(
            "Read-only, against the cluster (kubeconfig): decide every pod of the kinds Karta NAME describes "
            "with the definitions as they are and with NAME deleted (or, with -f, replaced by the file's "
            "version), and list each workload whose PodGroups would change, with the gang before and after "
            "and the effect (a weaker gang of a running workload is held until the workload changes)."
        ),
    )
    p.add_argument("name", metavar="NAME", help="the cluster Karta's name")
    p.add_argument("-f", "--filename", type=Path, default=None, metavar="FILE",
                   help="the new version of the Karta (default: NAME deleted)")
    p.add_argument("--kubeconfig", default=None, metavar="PATH", help="kubeconfig file")
    p.add_argument("--context", default=None, help="kubeconfig context")
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
    add_grouping_flags(p)
    p.set_defaults(func=run_impact)


@dataclass
class Impact:
    namespace: str
    workload: str  # Kind/name
    pods: int
    before: list[dict[str, Any]] = field(default_factory=list)  # {"podGroup": name, "gang": text}
    after: list[dict[str, Any]] = field(default_factory=list)
    effect: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "workload": self.workload, "pods": self.pods,
                "before": self.before, "after": self.after, "effect": self.effect}


def run_impact(args: argparse.Namespace) -> int:
    import yaml

    from grouper.cli.common import default_definitions_dir
    from grouper.cli.live_workload import list_kartas
    from grouper.karta import DefinitionRegistry
    from grouper.kube.config import KubeConfigError
    from grouper.kube.sync import SyncKube
    from grouper.kube.transport import ApiError

    new_obj = None
    if args.filename is not None:
        try:
            docs = [d for d in yaml.safe_load_all(args.filename.read_text()) if d]
        except (OSError, yaml.YAMLError) as e:
            print(f"error: cannot read {args.filename}: {e}", file=sys.stderr)
            return EXIT_USAGE
        named = [d for d in docs if isinstance(d, dict) and d.get("kind") == "Karta"
                 and (d.get("metadata") or {}).get("name") == args.name]
        if len(named) != 1:
            print(f"error: {args.filename} must hold exactly one Karta named {args.name}", file=sys.stderr)
            return EXIT_USAGE
        new_obj = named[0]
    try:
        with SyncKube.connect(args.kubeconfig, args.context) as kube:
            kartas = list_kartas(kube)
            if not any((k.get("metadata") or {}).get("name") == args.name for k in kartas):
                print(f"error: the cluster has no Karta named {args.name}", file=sys.stderr)
                return EXIT_USAGE
            catalog = args.definitions or default_definitions_dir()
            before, after = DefinitionRegistry(catalog), DefinitionRegistry(catalog)
            for k in kartas:
                before.upsert_cluster_object(k)
                if (k.get("metadata") or {}).get("name") != args.name:
                    after.upsert_cluster_object(k)
            if new_obj is not None:
                after.upsert_cluster_object(new_obj)
            impacts, warnings = impact(kube, args, before, after)
    except (KubeConfigError, ApiError) as e:
        print(f"error: cannot read the cluster: {e}", file=sys.stderr)
        return EXIT_USAGE
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    change = "replacing" if new_obj is not None else "deleting"
    if args.output == "json":
        print(json.dumps({"karta": args.name, "change": change, "workloads": [i.to_dict() for i in impacts]}, indent=2))
    else:
        print(_table(args.name, change, impacts))
    return EXIT_OK


def impact(kube: Any, args: argparse.Namespace, before: Any, after: Any) -> tuple[list[Impact], list[str]]:
    """The workloads whose PodGroups ``after`` changes compared with ``before`` (both registries)."""
    from grouper.cli.live_lookups import LiveLookups
    from grouper.cli.live_workload import PODGROUPS, PODS
    from grouper.core.hold import Gang, hold_of, source_of, weakenings
    from grouper.core.workload_plan import plan_workload
    from grouper.kube.transport import ApiError
    from grouper.model import objects as o
    from grouper.model.objects import GVK
    from grouper.runtime.composition import build_grouper

    config = grouping_config(args)
    old_grouper, new_grouper = build_grouper(config, before), build_grouper(config, after)
    roots: set[GVK] = set()
    for registry in (before, after):
        loaded = registry.get(args.name)
        if loaded is not None:
            roots.add(loaded.definition.gvk)

    def current(name: str) -> str | None:
        loaded = after.get(name)
        return source_of(loaded.definition) if loaded is not None and loaded.usable else None

    warnings: list[str] = []
    out: list[Impact] = []
    pods_by_ns: dict[str, list[Any]] = {}
    for gvk in sorted(roots):
        try:
            res = kube.resolve(gvk)
            workloads = kube.list_items(res.path()) if res is not None else []
        except ApiError as e:
            warnings.append(f"cannot list {gvk.kind} ({gvk.group}/{gvk.version}): {e}")
            continue
        for wl in sorted(workloads, key=lambda w: (o.namespace(w), o.name(w))):
            ns, uid = o.namespace(wl), o.uid(wl)
            if ns not in pods_by_ns:
                pods_by_ns[ns] = kube.list_items(PODS.path(ns))
            lookups = LiveLookups(kube, config)
            olds: dict[str, Any] = {}
            for pod in pods_by_ns[ns]:
                if o.meta(pod).get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                d_old = old_grouper.decide(pod, lookups)
                if d_old.top_owner is not None and d_old.top_owner.uid == uid:
                    olds[o.name(pod)] = (pod, d_old)
            if not olds:
                continue
            mine = [pod for pod, _ in olds.values()]
            decided_old = {name: d for name, (_, d) in olds.items()}
            merged_old = plan_workload(mine, functools.partial(_decided, decided_old), namespace=ns).groups
            merged_new = plan_workload(mine, functools.partial(_decide, new_grouper, lookups), namespace=ns).groups
            spec_old = {m.metadata.name: m.metadata.spec() for m in merged_old}
            spec_new = {m.metadata.name: m.metadata.spec() for m in merged_new}
            if spec_old == spec_new:
                continue
            item = Impact(ns, f"{gvk.kind}/{o.name(wl)}", len(olds))
            item.before = [{"podGroup": m.metadata.name, "gang": Gang.of(m.metadata).describe()} for m in merged_old]
            item.after = [{"podGroup": m.metadata.name, "gang": Gang.of(m.metadata).describe()} for m in merged_new]
            effects: list[str] = []
            for m in merged_old:
                stored = kube.get_object(PODGROUPS.path(ns, m.metadata.name)) or m.metadata.to_object()
                members = set(m.pods)
                replacing = [n.metadata for n in merged_new if members & set(n.pods)]
                gen = o.meta(wl).get("generation")
                hold = hold_of(stored, replacing, generation=None if gen is None else str(gen), current=current)
                if hold is not None:
                    effects.append(f"weaker: would be held ({'; '.join(hold.weaker)})")
                    continue
                weaker = [w for r in replacing for w in weakenings(Gang.of_spec(stored.get("spec")), Gang.of(r))]
                effects.append(f"weaker: applied ({'; '.join(weaker)})" if weaker else "applied")
            item.effect = "; ".join(sorted(set(effects)))
            out.append(item)
    return out, warnings


def _decided(decisions: dict[str, Any], pod: Any) -> Any:
    from grouper.model import objects as o

    return decisions[o.name(pod)]


def _decide(grouper: Any, lookups: Any, pod: Any) -> Any:
    return grouper.decide(pod, lookups)


def _table(name: str, change: str, impacts: list[Impact]) -> str:
    if not impacts:
        return f"{change} Karta {name} changes no workload's PodGroups"
    lines = [f"{change} Karta {name} changes the PodGroups of {len(impacts)} workload(s):"]
    for i in impacts:
        lines.append(f"{i.namespace}/{i.workload} ({i.pods} pods): {i.effect}")
        for b in i.before:
            lines.append(f"  before: {b['podGroup']}: {b['gang']}")
        for a in i.after:
            lines.append(f"  after:  {a['podGroup']}: {a['gang']}")
    return "\n".join(lines)


__all__ = ["Impact", "impact", "register", "run_impact"]
