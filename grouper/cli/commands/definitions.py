"""``grouper definitions validate|list``: check Karta definitions and show which ones are in effect."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grouper.cli.common import add_experimental_flag, catalog, default_definitions_dir, is_experimental
from grouper.cli.impact import register as register_impact

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
_SUFFIXES = (".yaml", ".yml", ".json")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "definitions",
        help="list, validate and weigh Karta definitions (built-in catalog, files, cluster)",
        description=(
            "Without a subcommand: list the definitions in effect, as 'definitions list' (kli's "
            "'definitions'). Subcommands validate definitions or show what changing one would do."
        ),
    )
    _list_flags(p, default=None)
    sub = p.add_subparsers(dest="definitions_command", metavar="SUBCOMMAND")
    p.set_defaults(func=run_list)

    v = sub.add_parser(
        "validate",
        help="validate Karta definition files or directories (default: the built-in catalog)",
        description=(
            "Load every Karta in the given files and directories (a directory means its *.yaml, *.yml "
            "and *.json files; - reads stdin) and run the validator on it: structure, references and jq "
            "expressions (jq is compiled in the sandbox). Prints OK:/INVALID: lines as kli does. Exit 0 "
            "when every definition is valid (warnings allowed), 1 when any is invalid or cannot be loaded, "
            "2 when a file or the cluster cannot be read."
        ),
    )
    v.add_argument("paths", nargs="*", metavar="PATH", help="Karta file or directory (repeatable; - for stdin)")
    v.add_argument("--cluster", action="store_true", help="also validate the cluster's Karta objects")
    _cluster_flags(v)
    v.add_argument("-o", "--output", choices=["text", "json"], default="text")
    v.set_defaults(func=run_validate)

    ls = sub.add_parser(
        "list",
        help="list built-in (and cluster) definitions with kind, origin and validity",
        description="List the Karta definitions in effect: the built-in catalog and, with --cluster, the cluster's.",
    )
    _list_flags(ls, default=argparse.SUPPRESS)
    ls.set_defaults(func=run_list)

    register_impact(sub)  # grouper definitions impact NAME (grouper/cli/impact.py)


def _list_flags(p: argparse.ArgumentParser, *, default: Any) -> None:
    """The listing flags, on ``definitions`` itself and on ``definitions list``. On ``list`` every default is
    ``SUPPRESS`` so that ``grouper definitions -o wide list`` keeps the parent's value (a subcommand's
    defaults would overwrite it); ``run_list`` reads them with their real defaults."""
    def d(value: Any) -> Any:
        return value if default is None else default

    p.add_argument("--definitions", type=Path, default=d(None), metavar="DIR",
                   help="built-in Karta catalog directory (default: the shipped definitions/)")
    p.add_argument("--cluster", action="store_true", default=d(False), help="include the cluster's Karta objects")
    p.add_argument("--kubeconfig", default=d(None), metavar="PATH", help="kubeconfig file (with --cluster)")
    p.add_argument("--context", default=d(None), help="kubeconfig context (with --cluster)")
    p.add_argument("-o", "--output", choices=["table", "wide", "json"], default=d("table"),
                   help="table, wide (adds COMPONENTS and WARNINGS) or json")
    p.add_argument("--no-headers", action="store_true", default=d(False),
                   help="table and wide: leave out the header line")
    add_experimental_flag(p, default=d(False))


def _cluster_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", default=None, metavar="PATH", help="kubeconfig file (with --cluster)")
    p.add_argument("--context", default=None, help="kubeconfig context (with --cluster)")


# ------------------------------------------------------------------------------------ validate


@dataclass
class _Checked:
    source: str
    name: str
    gvk: dict[str, str]
    errors: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    gang: bool = False  # has gang scheduling instructions (two for one kind: neither is used)

    @property
    def valid(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "name": self.name,
            "gvk": self.gvk,
            "valid": self.valid,
            "errors": self.errors,
            "warnings": self.warnings,
        }


def _issue(i: Any) -> dict[str, Any]:
    return {"field": i.field, "message": i.message, "expression": i.expression}


def _check(defn: Any, source: str) -> _Checked:
    from grouper.karta import validate

    report = validate(defn)
    return _Checked(
        source=source,
        name=defn.name,
        gvk={"group": defn.gvk.group, "version": defn.gvk.version, "kind": defn.gvk.kind},
        errors=[_issue(i) for i in report.errors],
        warnings=[_issue(i) for i in report.warnings],
        gang=defn.gang is not None and defn.gang.has_instructions and not defn.deleting,
    )


def _same_kind(checked: list[_Checked]) -> None:
    """What the registry does with two usable Kartas with gang instructions for one root kind (kai's
    "found multiple Kartas"): neither is used, every workload of the kind falls back to the default
    grouper. Among the definitions validated together, that is an error on each of them."""
    by_kind: dict[tuple[str, str, str], list[_Checked]] = {}
    for c in checked:
        if c.valid and c.gang:
            by_kind.setdefault((c.gvk["group"], c.gvk["version"], c.gvk["kind"]), []).append(c)
    for same in by_kind.values():
        if len(same) < 2:
            continue
        names = ", ".join(sorted(f"{c.name} ({c.source})" for c in same))
        for c in same:
            c.errors.append({
                "field": "spec.structureDefinition.rootComponent.kind",
                "message": f"found multiple Kartas with gang scheduling instructions for {_gvk_line(c.gvk)}: {names} "
                           "(neither is used: the grouper reports this for every workload of the kind)",
                "expression": None,
            })


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(f for f in path.iterdir() if f.is_file() and f.suffix in _SUFFIXES)
    return [path]


def _load_error(source: str, exc: Any) -> dict[str, Any]:
    return {"source": source, "field": getattr(exc, "field", None), "message": getattr(exc, "message", str(exc))}


def run_validate(args: argparse.Namespace) -> int:
    from grouper.karta import KartaLoadError, from_object, load_file
    from grouper.karta.loader import load_text

    checked: list[_Checked] = []
    load_errors: list[dict[str, Any]] = []
    io_errors: list[str] = []
    paths = list(args.paths)
    if not paths and not args.cluster:
        builtin = default_definitions_dir()
        if builtin is None:
            print("error: no PATH given and the built-in catalog was not found", file=sys.stderr)
            return EXIT_USAGE
        paths = [str(builtin)]
    for raw in paths:
        if raw == "-":
            try:
                text = sys.stdin.buffer.read()
                defs = load_text(text, "-")
            except KartaLoadError as e:
                load_errors.append(_load_error("-", e))
                continue
            except OSError as e:
                io_errors.append(f"-: cannot read: {e}")
                continue
            if not defs:
                load_errors.append({"source": "-", "field": None, "message": "no Karta definition in the input"})
            checked.extend(_check(d, "-") for d in defs)
            continue
        path = Path(raw)
        if not path.exists():
            io_errors.append(f"{path}: no such file or directory")
            continue
        try:
            files = _files(path)
        except OSError as e:
            io_errors.append(f"{path}: cannot read: {e.strerror or e}")
            continue
        for f in files:
            try:
                defs = load_file(f)
            except KartaLoadError as e:
                load_errors.append(_load_error(str(f), e))
                continue
            except (OSError, UnicodeDecodeError) as e:
                io_errors.append(f"{f}: cannot read: {e}")
                continue
            if not defs:
                load_errors.append({"source": str(f), "field": None, "message": "no Karta definition in file"})
            checked.extend(_check(d, str(f)) for d in defs)
    if args.cluster:
        objs = _cluster_kartas(args)
        if objs is None:
            return EXIT_USAGE
        for obj in objs:
            meta = obj.get("metadata")
            karta_name = meta.get("name") if isinstance(meta, dict) else None
            source = f"cluster:Karta/{karta_name or ''}"
            try:
                checked.append(_check(from_object(obj, source), source))
            except KartaLoadError as exc:
                load_errors.append(_load_error(source, exc))
    _same_kind(checked)
    ok = not load_errors and not io_errors and all(c.valid for c in checked)
    for problem in io_errors:
        print(f"error: {problem}", file=sys.stderr)
    if args.output == "json":
        print(json.dumps({"valid": ok, "definitions": [c.to_dict() for c in checked], "loadErrors": load_errors,
                          "ioErrors": io_errors}, indent=2))
    else:
        print(_validate_text(checked, load_errors, io_errors, ok), end="")
    if io_errors:
        return EXIT_USAGE
    return EXIT_OK if ok else EXIT_INVALID


def _cluster_kartas(args: argparse.Namespace) -> list[dict[str, Any]] | None:
    """The cluster's Karta objects (``--kubeconfig`` / ``--context``); None, said on stderr, when unreadable."""
    from grouper.cli.live_workload import list_kartas
    from grouper.kube.config import KubeConfigError
    from grouper.kube.sync import SyncKube
    from grouper.kube.transport import ApiError

    try:
        with SyncKube.connect(args.kubeconfig, args.context) as kube:
            return list_kartas(kube)
    except (KubeConfigError, ApiError) as e:
        print(f"error: cannot read Kartas from the cluster: {e}", file=sys.stderr)
        return None


def _issue_text(i: dict[str, Any]) -> str:
    text = f"{i['field']}: {i['message']}"
    if i.get("expression") is not None:
        text += f" (expression '{i['expression']}')"
    return text


def _gvk_line(gvk: dict[str, str]) -> str:
    group_version = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
    return f"{group_version}, Kind={gvk['kind']}"


def _validate_text(
    checked: list[_Checked], load_errors: list[dict[str, Any]], io_errors: list[str], ok: bool
) -> str:
    """kli's lines: ``OK: <name> ...`` per valid definition, ``INVALID: <name>: <reason>`` per
    problem (warnings indented below), then a summary."""
    lines: list[str] = []
    for e in load_errors:
        where = f"{e['source']}: field {e['field']}" if e.get("field") else e["source"]
        lines.append(f"INVALID: {where}: cannot load: {e['message']}")
    for c in checked:
        if c.valid:
            lines.append(f"OK: {c.name} ({c.source}) is a valid Karta definition (GVK: {_gvk_line(c.gvk)})")
        lines.extend(f"INVALID: {c.name} ({c.source}): {_issue_text(i)}" for i in c.errors)
        lines.extend(f"  warning: {c.name}: {_issue_text(i)}" for i in c.warnings)
    bad = sum(1 for c in checked if not c.valid)
    summary = f"{len(checked)} definition{'s' if len(checked) != 1 else ''} checked, {bad} invalid"
    if load_errors:
        summary += f", {len(load_errors)} could not be loaded"
    if io_errors:
        summary += f", {len(io_errors)} could not be read"
    lines.append(summary if not ok else summary + ": all valid")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------ list


def run_list(args: argparse.Namespace) -> int:
    from grouper.karta import DefinitionRegistry

    definitions_dir = getattr(args, "definitions", None) or default_definitions_dir()
    if definitions_dir is not None and not Path(definitions_dir).is_dir():
        print(f"error: {definitions_dir}: not a directory", file=sys.stderr)
        return EXIT_USAGE
    builtins, errors, hidden = catalog(definitions_dir,
                                       experimental=getattr(args, "catalog_experimental_definitions", False))
    registry = DefinitionRegistry(builtin=builtins)
    registry.load_errors[:0] = errors
    if getattr(args, "cluster", False):
        objs = _cluster_kartas(args)
        if objs is None:
            return EXIT_USAGE
        for obj in objs:
            registry.upsert_cluster_object(obj)
    items = [_list_item(x, registry) for x in registry.all()]
    load_errors = [_load_error(str(e.file or ""), e) for e in registry.load_errors]
    load_errors += [_load_error(f"cluster:Karta/{n}", e) for n, e in sorted(registry.cluster_errors().items())]
    output = getattr(args, "output", "table")
    if output == "json":
        print(json.dumps({"items": items, "loadErrors": load_errors, "hiddenExperimental": hidden}, indent=2))
    else:
        print(_list_table(items, load_errors, wide=output == "wide",
                          headers=not getattr(args, "no_headers", False)), end="")
    if hidden:
        print(f"{len(hidden)} experimental catalog definition{'s' if len(hidden) != 1 else ''} hidden "
              f"({', '.join(hidden)}); --catalog-experimental-definitions shows them", file=sys.stderr)
    return EXIT_OK


def _list_item(x: Any, registry: Any) -> dict[str, Any]:
    d = x.definition
    gang = None
    if d.gang is not None and d.gang.pod_group is not None:
        gang = "podGroup"
    elif d.gang is not None and d.gang.pod_groups:
        gang = "podGroups"
    in_effect = registry.resolve(d.gvk).definition is d
    return {
        "name": d.name,
        "group": d.gvk.group,
        "version": d.gvk.version,
        "kind": d.gvk.kind,
        "origin": x.origin,
        "source": x.source,
        "valid": x.report.ok,
        "errors": [_issue(i) for i in x.report.errors],
        "warnings": len(x.report.warnings),
        "gang": gang,
        "inEffect": in_effect,
        "components": [c.name for c in d.components()],
        "experimental": is_experimental(d),
    }


def _gvk_text(i: dict[str, Any]) -> str:
    return f"{i['kind']}.{i['version']}.{i['group']}" if i["group"] else f"{i['kind']}.{i['version']}"


def _list_table(items: list[dict[str, Any]], load_errors: list[dict[str, Any]], *, wide: bool = False,
                headers: bool = True) -> str:
    head = ["NAME", "KIND", "ORIGIN", "VALID", "GANG", "IN EFFECT"]
    if wide:  # kli's COMPONENTS column, and what the narrow table leaves out
        head += ["COMPONENTS", "WARNINGS"]
    rows = [head] if headers else []
    for i in items:
        valid = "yes" if i["valid"] else f"no ({len(i['errors'])} error{'s' if len(i['errors']) != 1 else ''})"
        origin = i["origin"] + (" (experimental)" if i["experimental"] else "")
        row = [i["name"], _gvk_text(i), origin, valid, i["gang"] or "-", "yes" if i["inEffect"] else "no"]
        if wide:
            row += [", ".join(i["components"]), str(i["warnings"])]
        rows.append(row)
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))] if rows else []
    lines = ["   ".join(cell.ljust(widths[c]) for c, cell in enumerate(r)).rstrip() for r in rows]
    for e in load_errors:
        lines.append(f"cannot load {e['source']}: {e['message']}")
    return "\n".join(lines) + "\n" if lines else ""
