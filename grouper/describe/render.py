"""Text rendering of a ``DescribeView`` in the ``kli describe`` table layout (karta.md §5.2).

    JobSet/trainer   namespace: ml-team   definition: jobset-... (builtin:...)   age: 5m

    `-- replicatedjob         5/5 ready   gpu: 4   node-a,node-b
        |-- leader            1/1 ready            node-a
        |   `-- trainer-...   Running              node-a
    ...
    Phase: Running

    Resources:
    COMPONENT       REPLICAS   GPU   CPU   MEMORY
    leader          1          0     4     16Gi
    worker          4          4     16    64Gi
    TOTAL           5          4     20    80Gi
"""

from __future__ import annotations

from datetime import UTC, datetime

from grouper.describe.quantity import format_cpu, format_memory
from grouper.describe.view import ComponentNode, DescribeView, PodView

SEP = "   "


def age(created_at: str | None, now: datetime | None = None) -> str | None:
    """kubectl-style age (``45s``, ``12m``, ``5h``, ``3d``); None when unknown."""
    if not created_at:
        return None
    try:
        created = datetime.fromisoformat(created_at.replace("Z", "+00:00"))
    except ValueError:
        return None
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    seconds = max(0, int(((now or datetime.now(UTC)) - created).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 48:
        return f"{hours}h"
    return f"{hours // 24}d"


def _gpu(n: int) -> str:
    return f"gpu: {n}" if n else ""


def _pod_cells(p: PodView) -> list[str]:
    status = f"{p.phase} ({p.reason})" if p.reason else p.phase
    return [status, _gpu(p.resources.gpus), p.node or "<none>"]


def _limit(pods: list[PodView], limit: int) -> tuple[list[PodView], str | None]:
    """Unhealthy pods first, at most ``limit`` (0 = all); the trailer line for the rest."""
    if limit <= 0 or len(pods) <= limit:
        return pods, None
    ordered = sorted(pods, key=lambda p: p.healthy)  # stable: unhealthy first, names kept in order
    shown = ordered[:limit]
    total_bad = sum(1 for p in pods if not p.healthy)
    shown_bad = sum(1 for p in shown if not p.healthy)
    hidden = len(pods) - len(shown)
    if shown_bad == total_bad:
        trailer = f"and {hidden} more ({shown_bad} unhealthy shown)"
    else:
        trailer = f"and {hidden} more ({shown_bad} of {total_bad} unhealthy shown)"
    return shown, trailer


def _tree_rows(nodes: list[ComponentNode], file_mode: bool, pod_limit: int) -> list[list[str]]:
    rows: list[list[str]] = []

    def status(n: ComponentNode) -> str:
        r = n.replicas
        if file_mode:
            return f"replicas: {r.desired}" if r.desired is not None else ""
        return f"{r.ready}/{r.desired if r.desired is not None else r.current} ready"

    def walk(items: list[ComponentNode | PodView | str], indent: str) -> None:
        for i, item in enumerate(items):
            last = i == len(items) - 1
            branch = "`-- " if last else "|-- "
            child_indent = indent + ("    " if last else "|   ")
            if isinstance(item, str):
                rows.append([indent + branch + "...", item, "", ""])  # kli: the note sits in the status cell
            elif isinstance(item, PodView):
                rows.append([indent + branch + item.name, *_pod_cells(item)])
            else:
                rows.append([indent + branch + item.label, status(item), _gpu(item.resources.gpus), ",".join(item.nodes)])
                # kli's order: the component's own pods (and the truncation note), then its child
                # components, so a pod never closes the branch its sibling components continue
                pods, trailer = _limit(item.pods, pod_limit)
                sub: list[ComponentNode | PodView | str] = [*pods, *([trailer] if trailer else []), *item.children]
                walk(sub, child_indent)

    walk(list(nodes), "")
    return rows


def _table(rows: list[list[str]]) -> list[str]:
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [SEP.join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in rows]


def render_table(view: DescribeView, *, now: datetime | None = None, pod_limit: int = 0) -> str:
    """The human-readable describe output (ends with a newline)."""
    header = [f"{view.kind}/{view.name}", f"namespace: {view.namespace or '<none>'}"]
    header.append(f"definition: {view.definition} ({view.origin})")
    a = None if view.file_mode else age(view.created_at, now)
    if a:
        header.append(f"age: {a}")
    lines = [SEP.join(header)]
    if view.file_mode:
        lines.append("(file mode: no live status)")
    lines.append("")
    nodes: list[ComponentNode] = list(view.components)
    if view.unassigned_pods:
        nodes.append(ComponentNode(name="", label="(pods matching no component)", pods=list(view.unassigned_pods)))
    tree = _tree_rows(nodes, view.file_mode, pod_limit)
    lines.extend(_table(tree) if tree else ["(no components)"])
    if not view.file_mode:
        lines.append("")
        lines.append("Phase: " + ",".join(view.phases))
    lines.append("")
    lines.append("Resources:")
    table = [["COMPONENT", "REPLICAS", "GPU", "CPU", "MEMORY"]]
    for r in view.resource_table:
        res = r.resources
        table.append([r.component, str(r.replicas), str(res.gpus), format_cpu(res.cpu_millis), format_memory(res.memory_bytes)])
    total = view.resources
    table.append(
        ["TOTAL", str(sum(r.replicas for r in view.resource_table)), str(total.gpus),
         format_cpu(total.cpu_millis), format_memory(total.memory_bytes)]
    )
    lines.extend(_table(table))
    if view.warnings:
        lines.append("")
        lines.append("Warnings:")
        lines.extend(f"  {w}" for w in view.warnings)
    return "\n".join(lines) + "\n"
