"""``grouper describe``: a workload's component tree, pods, resources and status from its Karta definition.

    grouper describe -f job.yaml [-f pods.yaml] [--definitions DIR] [-o table|json]    # offline
    grouper describe KIND/NAME -n NS [--kubeconfig PATH] [-o table|json]               # live
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from grouper.cli.common import (
    add_experimental_flag,
    catalog,
    default_definitions_dir,
    fail,
    with_cluster,
    workload_target,
)

EXIT_OK = 0
EXIT_ERROR = 1  # evaluation or cluster errors
EXIT_USAGE = 2  # bad flags or unreadable input
EXIT_NO_DEFINITION = 3  # no (single) Karta definition covers the kind
EXIT_WORKLOAD_NOT_FOUND = 4  # the workload does not exist, or its kind is not installed

KARTA_KINDS = {"Karta", "ResourceInterface"}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "describe",
        help="show a workload's components, pods, resources and status (from its Karta definition)",
        description=(
            "Describe one workload through its Karta definition: the component tree with desired/current/"
            "ready replicas, the pods (attributed by owner references) with phase and node, GPU/CPU/memory "
            "per component and the status phases. With -f the workload (and optionally its pods, their "
            "intermediate owners and extra Karta objects) is read from files; otherwise KIND/NAME is read "
            f"from the cluster. Exit codes: {EXIT_OK} ok, {EXIT_ERROR} error, {EXIT_USAGE} usage, "
            f"{EXIT_NO_DEFINITION} no Karta definition covers the kind, {EXIT_WORKLOAD_NOT_FOUND} workload "
            "not found or kind not installed."
        ),
    )
    p.add_argument("target", nargs="*", metavar="KIND/NAME",
                   help="KIND/NAME or KIND NAME (KIND: kind, plural or short name, optionally .group)")
    p.add_argument("-f", "--filename", action="append", default=[], metavar="FILE",
                   help="manifest file or directory holding the workload (repeatable; - for stdin)")
    p.add_argument("-n", "--namespace", default=None, help="namespace of the workload (live mode)")
    p.add_argument("--kubeconfig", default=None, metavar="PATH", help="kubeconfig file (live mode)")
    p.add_argument("--context", default=None, help="kubeconfig context (live mode)")
    p.add_argument("--definitions", type=Path, default=None, metavar="DIR",
                   help="built-in Karta catalog directory (default: the shipped definitions/)")
    add_experimental_flag(p)
    p.add_argument("--pod-limit", type=int, default=0, metavar="N",
                   help="show at most N pods per row, unhealthy first (0 = all)")
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        target = workload_target(args.target, args.pod_limit, "--pod-limit")
    except ValueError as e:
        return fail(EXIT_USAGE, str(e))
    definitions_dir = args.definitions or default_definitions_dir()
    if definitions_dir is not None and not Path(definitions_dir).is_dir():
        return fail(EXIT_USAGE, f"{definitions_dir}: not a directory")
    if args.filename:
        return _run_files(args, target, definitions_dir)
    if target is None:
        return fail(EXIT_USAGE, "give KIND/NAME (live) or -f FILE (offline)")
    return _run_live(args, target, definitions_dir)


def _emit(view: Any, args: argparse.Namespace) -> int:
    from grouper.describe import render_table

    if args.output == "json":
        print(json.dumps(view.to_dict(), indent=2))
    else:
        print(render_table(view, pod_limit=args.pod_limit), end="")
    return EXIT_OK


def _builtins(definitions_dir: Path | None, experimental: bool = False) -> list[Any]:
    """The built-in catalog, parsed but not validated (validation is paid only for the kind described);
    definitions marked ``spec.experimental: true`` only with ``experimental``."""
    return catalog(definitions_dir, experimental=experimental)[0]


def _registry(
    builtins: list[Any], gvks: set[Any], cluster_objects: list[dict[str, Any]], *, isolate: bool = True
) -> Any:
    """A registry holding the built-ins of the given kinds and every cluster/file Karta
    (``isolate``: evaluate the cluster ones in the jq sandbox worker)."""
    from grouper.karta import DefinitionRegistry

    registry = DefinitionRegistry(builtin=[d for d in builtins if d.gvk in gvks], isolate_cluster=isolate)
    for obj in cluster_objects:
        registry.upsert_cluster_object(obj)
    return registry


def _pick_definition(registry: Any, gvk: Any) -> tuple[Any, str | None]:
    """The definition for a kind: the one grouping would use, else any usable one (a definition
    without gang instructions still describes the workload). Returns (definition, error)."""
    res = registry.resolve(gvk)
    if res.error:
        return None, res.error
    if res.definition is not None:
        return res.definition, None
    usable = [c for c in res.candidates if c.usable]
    cluster = [c for c in usable if c.source == "cluster"]
    pool = cluster or usable
    if len(pool) == 1:
        return pool[0].definition, None
    if len(pool) > 1:
        return None, f"{len(pool)} Karta definitions claim {gvk}: " + ", ".join(c.definition.name for c in pool)
    if res.candidates:
        reasons = "; ".join(f"{n}: {why}" for n, why in res.skipped.items())
        return None, f"no usable Karta definition for {gvk} ({reasons})"
    return None, f"no Karta definition covers {gvk}"


def _run_files(args: argparse.Namespace, target: tuple[str, str] | None, definitions_dir: Path | None) -> int:
    from grouper.describe import build_describe
    from grouper.karta import KartaEvalError
    from grouper.manifests import ManifestError, load_manifests, schema_problem
    from grouper.model.objects import GVK, name, owner_references

    try:
        manifests = load_manifests(args.filename)
    except ManifestError as e:
        return fail(EXIT_USAGE, str(e))
    for m in manifests:
        problem = schema_problem(m.obj)
        if problem is not None:
            meta = m.obj["metadata"]
            return fail(EXIT_USAGE, f"{m.source}: {m.obj['kind']} {meta['name']}: field {problem[0]}: {problem[1]}")
    builtins = _builtins(definitions_dir, args.catalog_experimental_definitions)
    kartas: list[dict[str, Any]] = []
    objects: list[dict[str, Any]] = []
    for m in manifests:
        (kartas if m.obj.get("kind") in KARTA_KINDS else objects).append(m.obj)
    registry = _registry(builtins, {GVK.of(o) for o in objects}, kartas)
    bad = registry.cluster_errors()
    if bad:
        karta_name, err = next(iter(bad.items()))
        return fail(EXIT_USAGE, f"Karta {karta_name}: {err}")
    covered = {d.definition.gvk for d in registry.all()}
    if target is not None:
        kind, wanted = target
        token = kind.lower()
        candidates = [
            o for o in objects
            if name(o) == wanted and token in {str(o.get("kind", "")).lower(), str(GVK.of(o)).lower()}
        ]
        if not candidates:
            return fail(EXIT_WORKLOAD_NOT_FOUND, f"the files hold no {kind}/{wanted}")
    else:
        workloads = [o for o in objects if o.get("kind") != "Pod"]
        candidates = [o for o in workloads if GVK.of(o) in covered and not owner_references(o)]
        candidates = candidates or [o for o in workloads if GVK.of(o) in covered]
        if not candidates:
            if workloads:
                return fail(EXIT_NO_DEFINITION, f"no Karta definition covers {GVK.of(workloads[0])}")
            return fail(EXIT_WORKLOAD_NOT_FOUND, "the files hold no workload (only pods)")
    workload = candidates[0]
    defn, error = _pick_definition(registry, GVK.of(workload))
    if defn is None:
        return fail(EXIT_NO_DEFINITION, error or f"no Karta definition covers {GVK.of(workload)}")
    pods = [o for o in objects if o.get("kind") == "Pod" and o is not workload]
    others = [o for o in objects if o.get("kind") != "Pod" and o is not workload]
    try:
        view = build_describe(defn, registry.evaluator(defn), workload, pods, file_mode=True, objects=others)
    except KartaEvalError as e:
        return fail(EXIT_ERROR, str(e))
    return _emit(view, args)


def _run_live(args: argparse.Namespace, target: tuple[str, str], definitions_dir: Path | None) -> int:
    return with_cluster(args, lambda kube: _describe_live(kube, args, target, definitions_dir))


def _describe_live(kube: Any, args: argparse.Namespace, target: tuple[str, str], definitions_dir: Path | None) -> int:
    from grouper.cli.live_workload import KindNotResolved, describe_inputs, list_kartas, resolve_kind
    from grouper.describe import build_describe
    from grouper.karta import KartaEvalError
    from grouper.kube.transport import ApiError

    kind, wanted = target
    builtins = _builtins(definitions_dir, args.catalog_experimental_definitions)
    kartas: list[dict[str, Any]] = []
    notes: list[str] = []
    try:
        kartas = list_kartas(kube)
    except ApiError as e:
        if e.forbidden:
            notes.append("not allowed to list Kartas; using the built-in definitions only")
        elif not e.not_found:  # not found: the Karta CRD is not installed, built-in definitions only
            raise
    namespace = args.namespace or kube.namespace
    in_cluster = _registry([], set(), kartas)
    known = {d.gvk for d in builtins} | {x.definition.gvk for x in in_cluster.all()}
    try:
        res = resolve_kind(kube, kind, known)
    except KindNotResolved as e:
        return fail(EXIT_WORKLOAD_NOT_FOUND if e.not_installed else EXIT_NO_DEFINITION, str(e))
    registry = _registry(builtins, {res.gvk}, kartas, isolate=True)
    defn, error = _pick_definition(registry, res.gvk)
    if defn is None:
        return fail(EXIT_NO_DEFINITION, error or f"no Karta definition covers {res.gvk}")
    try:
        inputs = describe_inputs(kube, res, namespace, wanted)
    except ApiError as e:
        if not e.forbidden:
            raise
        return fail(EXIT_ERROR, f"not allowed to read {res.kind} {namespace}/{wanted}: {e}")
    if inputs is None:
        return fail(EXIT_WORKLOAD_NOT_FOUND, f"{res.kind} {namespace}/{wanted} not found")
    try:
        view = build_describe(
            defn, registry.evaluator(defn), inputs.workload, inputs.pods, file_mode=False, objects=inputs.objects
        )
    except KartaEvalError as e:
        return fail(EXIT_ERROR, str(e))
    view.warnings[:0] = notes + inputs.warnings
    return _emit(view, args)
