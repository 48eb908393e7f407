"""``grouper get podgroups`` / ``grouper get workloads``.

``podgroups``: the PodGroups a grouper manages. With ``--server URL`` it asks a running grouper's HTTP API
(``GET /podgroups``, all pages), which knows the plugin, the Karta definition and the workload status.
Without it, it reads the cluster through the kubeconfig: the ``scheduling.run.ai/v2alpha2`` PodGroups and
the pods that name them in their ``pod-group-name`` annotation.

``workloads``: one row per workload (NAMESPACE NAME KIND PHASE STATE COMPONENTS GPU AGE, components as
``leader(1), worker(2)``), the list the Workload Map article shows, with the gang STATE (the worst of its
PodGroups': Error, Degraded, Waiting, Grouping, Admitted; ``-`` without a PodGroup); ``-o wide`` adds QUEUE,
WAITING (time in the current state when not Admitted) and REASON (the scheduler's first reason, truncated;
``grouper why`` shows them all). With ``--server URL`` from the
grouper's ``GET /workloads`` (every workload it grouped, also kinds without a Karta definition); without
it live through the kubeconfig: every top-level object of a kind a Karta definition covers (built-in
catalog and cluster ``Karta`` objects), described with its pods, and its gangs derived from the PodGroups it
owns (both backends) and their pods.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from grouper.cli.common import add_experimental_flag, add_target_flags
from grouper.cli.live_workload import PODGROUPS, PODS
from grouper.kube.config import KubeConfigError
from grouper.kube.sync import SyncKube
from grouper.kube.transport import ApiError
from grouper.model import objects as o
from grouper.model.podgroup import POD_GROUP_ANNOTATION

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


class ServerError(RuntimeError):
    """The grouper's HTTP API could not be reached or answered with an error."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "get",
        help="list the PodGroups the grouper manages (from a running grouper or the cluster)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("resource", choices=["podgroups", "podgroup", "pg", "workloads", "workload", "wl"],
                   help="what to list")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's, else default)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    p.add_argument("-o", "--output", choices=["table", "wide", "json"], default="table",
                   help="wide: workloads with QUEUE, WAITING and REASON (podgroups: as table)")
    p.add_argument("--definitions", type=Path, default=None, metavar="DIR",
                   help="workloads, live: the built-in Karta catalog (default: the shipped definitions/)")
    add_experimental_flag(p)
    add_target_flags(p)
    p.set_defaults(func=run)


# ------------------------------------------------------------------------------------------ HTTP client


def server_get(server: str, path: str, params: dict[str, Any] | None = None, token_file: str | None = None,
               timeout: float = 30.0) -> Any:
    """GET ``path`` from a grouper's API; None on 404. Raises :class:`ServerError`."""
    query = urllib.parse.urlencode({k: v for k, v in (params or {}).items() if v is not None})
    url = server.rstrip("/") + path + (f"?{query}" if query else "")
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    if token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as e:
            raise ServerError(f"cannot read token file {token_file}: {e.strerror or e}") from e
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        try:
            detail = json.loads(e.read()).get("detail")
        except (ValueError, AttributeError):
            detail = e.reason
        raise ServerError(f"{server}: {e.code} {detail}") from e
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise ServerError(f"cannot reach {server}: {getattr(e, 'reason', e)}") from e


def podgroups_from_server(
    server: str, namespace: str | None, token_file: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The PodGroups, and the workloads the grouper failed to group (the same on every page)."""
    items: list[dict[str, Any]] = []
    params: dict[str, Any] = {"namespace": namespace, "limit": 1000}
    while True:
        body = server_get(server, "/podgroups", params, token_file) or {}
        items += body.get("items") or []
        token = body.get("continue")
        if not token:
            return items, list(body.get("errors") or [])
        params["continue"] = token


# ------------------------------------------------------------------------------------------ cluster


def podgroups_from_cluster(kube: SyncKube, namespace: str | None) -> list[dict[str, Any]]:
    """The cluster's PodGroups in the shape of the API's list items (plugin and status unknown)."""
    pgs = kube.list_items(PODGROUPS.path(namespace))
    pods = kube.list_items(PODS.path(namespace))
    assigned: dict[tuple[str, str], int] = {}
    for pod in pods:
        pg_name = o.annotations(pod).get(POD_GROUP_ANNOTATION)
        if pg_name:
            key = (o.namespace(pod), pg_name)
            assigned[key] = assigned.get(key, 0) + 1
    out = []
    for pg in sorted(pgs, key=lambda x: (o.namespace(x), o.name(x))):
        spec = pg.get("spec") or {}
        owner = (o.owner_references(pg) or [{}])[0]
        out.append({
            "name": o.name(pg),
            "namespace": o.namespace(pg),
            "workload": {"apiVersion": owner.get("apiVersion", ""), "kind": owner.get("kind", ""),
                         "name": owner.get("name", "")},
            "plugin": None,
            "definition": None,
            "queue": spec.get("queue"),
            "minMember": spec.get("minMember"),
            "minSubGroup": spec.get("minSubGroup"),
            "podsAssigned": assigned.get((o.namespace(pg), o.name(pg)), 0),
            "workloadStatus": None,
        })
    return out


# ------------------------------------------------------------------------------------------ output


def render_table(items: list[dict[str, Any]], all_namespaces: bool) -> str:
    header = (["NAMESPACE"] if all_namespaces else []) + ["NAME", "WORKLOAD", "PLUGIN", "QUEUE", "MIN", "PODS",
                                                          "STATUS"]
    rows = [header]
    for i in items:
        wl = i.get("workload") or {}
        if i.get("minSubGroup") is not None:
            size = f"{i['minSubGroup']} sub-groups"
        elif i.get("minMember") is not None:
            size = f"{i['minMember']} pod" + ("" if i["minMember"] == 1 else "s")
        else:
            size = "-"
        plugin = i.get("plugin") or "-"
        if i.get("definition"):
            plugin += f" ({i['definition']['name']})"
        row = [f"{wl.get('kind', '')}/{wl.get('name', '')}", plugin, i.get("queue") or "-", size,
               str(i.get("podsAssigned", 0)), i.get("workloadStatus") or "-"]
        rows.append(([i["namespace"]] if all_namespaces else []) + [i["name"], *row])
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def render_errors(errors: list[dict[str, Any]]) -> str:
    lines = []
    for e in errors:
        wl = e.get("workload") or {}
        lines.append(f"NOT GROUPED {e.get('namespace')}/{wl.get('kind')}/{wl.get('name')} "
                     f"({e.get('podCount', len(e.get('pods') or []))} pods): {e.get('reason')}: {e.get('message')}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.resource in ("workloads", "workload", "wl"):
        return run_workloads(args)
    errors: list[dict[str, Any]] = []  # only the grouper's API knows what failed
    try:
        if args.server:
            namespace = None if args.all_namespaces else (args.namespace or "default")
            items, errors = podgroups_from_server(args.server, namespace, args.token_file)
        else:
            with SyncKube.connect(args.kubeconfig, args.context) as kube:
                namespace = None if args.all_namespaces else (args.namespace or kube.namespace)
                items = podgroups_from_cluster(kube, namespace)
    except (ServerError, KubeConfigError, ApiError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    if args.output == "json":
        print(json.dumps({"items": items, "errors": errors}, indent=2))
        return EXIT_OK
    if not items:
        where = "any namespace" if namespace is None else f"namespace {namespace}"
        print(f"No PodGroups found in {where}.", file=sys.stderr)
    else:
        print(render_table(items, namespace is None))
    if errors:
        print(render_errors(errors), file=sys.stderr)
    return EXIT_OK


# ------------------------------------------------------------------------------------------ workloads


# one row of `get workloads`: the summary, the workload's gang state (None: unknown) and its GangView dicts
Row = tuple[Any, str | None, list[dict[str, Any]]]


def workloads_from_server(server: str, namespace: str | None, token_file: str | None) -> list[Row]:
    """The grouper's ``/workloads``; ``state`` and ``gangs`` as it sends them (a grouper that does not track
    gangs sends neither: the STATE column then says ``-``)."""
    from grouper.describe.workloads import WorkloadSummary

    body = server_get(server, "/workloads", {"namespace": namespace}, token_file) or {}
    out: list[Row] = []
    for i in body.get("items") or []:
        gangs = [g for g in i.get("gangs") or [] if isinstance(g, dict)]
        out.append((WorkloadSummary(
            namespace=str(i.get("namespace") or ""), name=str(i.get("name") or ""), kind=str(i.get("kind") or ""),
            api_version=str(i.get("apiVersion") or ""), created_at=i.get("createdAt"),
            phases=[str(x) for x in i.get("phases") or []],
            components=[(str(c.get("name")), int(c.get("replicas") or 0)) for c in i.get("components") or []],
            gpus=int(i.get("gpus") or 0), pods=int(i.get("pods") or 0), definition=i.get("definition"),
            origin=i.get("origin"), warnings=[str(w) for w in i.get("warnings") or []],
        ), str(i["state"]) if i.get("state") else None, gangs))
    return out


def _with_type(items: list[dict[str, Any]], api_version: str, kind: str) -> list[dict[str, Any]]:
    """List items come without apiVersion/kind; put them back."""
    return [i if i.get("kind") else {**i, "apiVersion": api_version, "kind": kind} for i in items]


def _workload_groups(cluster: SyncKube, namespace: str | None) -> dict[tuple[str, str], dict[str, Any]]:
    """The WorkloadGroups by (namespace, name); none where they are not served or not readable (then each
    workload shows its own gangs, as the controller groups it without the object)."""
    from grouper.model import workload_group as wg

    path = f"/apis/{wg.API_VERSION}" + (f"/namespaces/{namespace}" if namespace else "") + f"/{wg.PLURAL}"
    try:
        items = cluster.list_items(path)
    except ApiError as e:
        if e.not_found or e.forbidden:
            return {}
        raise
    return {(str(g["metadata"].get("namespace")), str(g["metadata"].get("name"))): g for g in items
            if not g["metadata"].get("deletionTimestamp")}


def workloads_from_cluster(args: argparse.Namespace, namespace: str | None) -> tuple[list[Row], list[str]]:
    """Every top-level object of a kind a Karta definition covers, summarized with its pods and its gangs."""
    from grouper.api.models import GangView
    from grouper.api.workload_group import group_name, group_view
    from grouper.cli import common
    from grouper.cli.commands.describe import _builtins, _pick_definition, _registry
    from grouper.cli.common import default_definitions_dir
    from grouper.cli.gang_report import gang_view, workload_gangs, worst
    from grouper.cli.live_workload import list_kartas, list_pod_groups
    from grouper.describe import MAX_DEPTH
    from grouper.describe.workloads import list_workloads
    from grouper.model.objects import GVK

    warnings: list[str] = []
    cluster = SyncKube.connect(args.kubeconfig, args.context)
    try:
        kartas: list[dict[str, Any]] = []
        try:
            kartas = list_kartas(cluster)
        except ApiError as e:
            if e.forbidden:
                warnings.append("not allowed to list Kartas; using the built-in definitions only")
            elif not e.not_found:  # 404: no Karta CRD, the built-in catalog only
                raise
        builtins = _builtins(args.definitions or default_definitions_dir(), args.catalog_experimental_definitions)
        registry = _registry(builtins, {d.gvk for d in builtins}, kartas, isolate=True)
        chosen: dict[GVK, Any] = {}

        def definitions(gvk: GVK) -> Any:
            if gvk not in chosen:
                defn, _ = _pick_definition(registry, gvk)
                chosen[gvk] = (defn, registry.evaluator(defn)) if defn is not None else None
            return chosen[gvk]

        def listed(api_version: str, kind: str) -> list[dict[str, Any]]:
            res = cluster.resolve(GVK.from_api_version(api_version, kind))
            if res is None or (namespace is not None and not res.namespaced):
                return []
            try:
                return _with_type(cluster.list_items(res.path(namespace)), api_version, kind)
            except ApiError as e:
                if not e.forbidden:
                    raise
                warnings.append(f"not allowed to list {kind} ({api_version}); its workloads are not shown")
                return []

        pods = listed("v1", "Pod")
        gvks = {ld.definition.gvk for ld in registry.all() if ld.definition.gvk.kind}
        # the preferred version first: an object served under two versions is listed once
        order = sorted(gvks, key=lambda g: (g.group, g.kind, g.version != cluster.preferred_version(g.group), g.version))
        candidates: list[dict[str, Any]] = []
        for gvk in order:
            candidates += pods if (gvk.group, gvk.kind) == ("", "Pod") else listed(gvk.api_version, gvk.kind)
        # intermediate owners (ReplicaSets, Jobs, StatefulSets, ...) on the pods' chains, one list per kind
        known = {str(o["metadata"].get("uid")): o for o in [*candidates, *pods] if (o.get("metadata") or {}).get("uid")}
        owners: list[dict[str, Any]] = []
        done: set[tuple[str, str]] = {(g.api_version, g.kind) for g in gvks} | {("v1", "Pod")}
        frontier = [*pods]
        for _ in range(MAX_DEPTH):
            missing = {(str(r.get("apiVersion")), str(r.get("kind"))) for o in frontier
                       for r in (o.get("metadata") or {}).get("ownerReferences") or []
                       if isinstance(r, dict) and str(r.get("uid")) not in known} - done
            if not missing:
                break
            frontier = []
            for api_version, kind in sorted(missing):
                done.add((api_version, kind))
                for o in listed(api_version, kind):
                    known.setdefault(str(o["metadata"].get("uid")), o)
                    owners.append(o)
                    frontier.append(o)
        # workloads of one kind are intermediate owners of another (a JobSet's Jobs)
        chain = [o for o in candidates if o.get("kind") != "Pod"] + owners
        summaries = list_workloads(candidates, pods, chain, definitions)
        pod_groups, pg_warnings = list_pod_groups(cluster, namespace)
        warnings += pg_warnings
        now = common.now()
        gangs = workload_gangs(pod_groups, pods, now)
        groups = _workload_groups(cluster, namespace)
        by_name: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}  # namespace -> (kind, name) -> object
        for o in candidates:
            meta = o.get("metadata") or {}
            by_name.setdefault(str(meta.get("namespace") or ""), {})[(str(o.get("kind")), str(meta.get("name")))] = o
        rows: list[Row] = []
        for s in summaries:
            mine = gangs.get((s.namespace, s.kind, s.name), [])
            views = [gang_view(g.name, g.state, now) for g in mine]
            state = worst(g.state.state.value for g in mine)
            group = groups.get((s.namespace, group_name(by_name.get(s.namespace, {}).get((s.kind, s.name))) or ""))
            if group is not None:  # a member: its gang is the group's (the PodGroups the WorkloadGroup owns)
                mine = gangs.get((s.namespace, "WorkloadGroup", str(group["metadata"].get("name"))), [])
                views = [gang_view(g.name, g.state, now) for g in mine]
                state = group_view(group, [GangView.model_validate(v) for v in views]).gangState
            rows.append((s, state, views))
        return rows, warnings
    finally:
        cluster.close()


def run_workloads(args: argparse.Namespace) -> int:
    from grouper.cli import common
    from grouper.cli.gang_report import render_workload_rows

    warnings: list[str] = []
    try:
        if args.server:
            namespace = None if args.all_namespaces else (args.namespace or "default")
            items = workloads_from_server(args.server, namespace, args.token_file)
        else:
            if args.definitions is not None and not Path(args.definitions).is_dir():
                print(f"error: {args.definitions}: not a directory", file=sys.stderr)
                return EXIT_USAGE
            namespace = None if args.all_namespaces else (args.namespace or _context_namespace(args))
            items, warnings = workloads_from_cluster(args, namespace)
    except (ServerError, ApiError, KubeConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    if args.output == "json":
        print(json.dumps({"items": [{**s.to_dict(), "state": state, "gangs": gangs} for s, state, gangs in items],
                          "count": len(items)}, indent=2))
    elif not items:
        where = "any namespace" if namespace is None else f"namespace {namespace}"
        print(f"No workloads found in {where}.", file=sys.stderr)
    else:
        print(render_workload_rows(items, wide=args.output == "wide", now=common.now(), live=not args.server))
    for w in warnings + [f"{i.namespace}/{i.kind}/{i.name}: {w}" for i, _, _ in items for w in i.warnings]:
        print(f"warning: {w}", file=sys.stderr)
    return EXIT_OK


def _context_namespace(args: argparse.Namespace) -> str:
    """The kubeconfig context's namespace, else ``default`` (as ``kubectl``)."""
    with SyncKube.connect(args.kubeconfig, args.context) as kube:
        return kube.namespace
