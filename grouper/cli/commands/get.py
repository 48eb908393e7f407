"""``grouper get podgroups``: the PodGroups a grouper manages.

With ``--server URL`` it asks a running grouper's HTTP API (``GET /podgroups``, all pages), which knows the
plugin, the Karta definition and the workload status. Without it, it reads the cluster through the
kubeconfig: the ``scheduling.run.ai/v2alpha2`` PodGroups and the pods that name them in their
``pod-group-name`` annotation.
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

from grouper.cli.common import add_target_flags
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
    p.add_argument("resource", choices=["podgroups", "podgroup", "pg"], help="what to list")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's, else default)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
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
