"""The workload list (``grouper get workloads``, ``GET /workloads``): one summary row per workload.

Columns as the Workload Map article shows them::

    NAMESPACE   NAME   KIND     PHASE     COMPONENTS              GPU   AGE
    default     demo   JobSet   Running   leader(1), worker(2)    12    5m

COMPONENTS are the describe view's Resources rows (one per component instance, e.g. a JobSet's
replicatedJobs) with their desired replicas; rows of the same name are added up (a LeaderWorkerSet's
groups give ``leader(2), worker(6)``). GPU is the workload's requested GPUs (desired replicas x pod
template), PHASE the matched status phases joined with ``,``. A workload whose kind has no Karta
definition (a native-only kind such as XGBoostJob) still gets a row: its GPUs are those its pods
request, PHASE and COMPONENTS are ``-``.

Pure: ``list_workloads`` takes the objects, pods and intermediate owners (read by the caller from the
cluster or a cache) and a lookup of the definition for a kind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from grouper.describe.build import build_describe
from grouper.describe.render import age
from grouper.describe.resources import ZERO, pod_request
from grouper.describe.view import DescribeView
from grouper.karta import Evaluator, KartaDefinition
from grouper.model.objects import GVK, Obj, meta, name, namespace, owner_references, uid

# The definition (and its evaluator) for a kind, or None when no Karta definition covers it.
Definitions = Callable[[GVK], tuple[KartaDefinition, Evaluator] | None]


@dataclass
class WorkloadSummary:
    namespace: str
    name: str
    kind: str
    api_version: str
    created_at: str | None
    phases: list[str] = field(default_factory=list)
    components: list[tuple[str, int]] = field(default_factory=list)
    gpus: int = 0
    pods: int = 0
    definition: str | None = None
    origin: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def phase(self) -> str:
        return ",".join(self.phases) if self.phases else "-"

    @property
    def components_text(self) -> str:
        """``leader(1), worker(2)`` (``-`` without a definition)."""
        return ", ".join(f"{n}({r})" for n, r in self.components) if self.components else "-"

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "kind": self.kind,
            "apiVersion": self.api_version,
            "createdAt": self.created_at,
            "phases": list(self.phases),
            "components": [{"name": n, "replicas": r} for n, r in self.components],
            "gpus": self.gpus,
            "pods": self.pods,
            "definition": self.definition,
            "origin": self.origin,
            "warnings": list(self.warnings),
        }


def _merged_components(view: DescribeView) -> list[tuple[str, int]]:
    totals: dict[str, int] = {}
    for row in view.resource_table:
        totals[row.component] = totals.get(row.component, 0) + row.replicas
    return list(totals.items())


def _pod_count(view: DescribeView) -> int:
    seen: set[str] = set()
    stack = list(view.components)
    while stack:
        n = stack.pop()
        seen.update(p.name for p in n.pods)
        stack.extend(n.children)
    return len(seen | {p.name for p in view.unassigned_pods})


def summarize(view: DescribeView) -> WorkloadSummary:
    """The list row of a describe view."""
    return WorkloadSummary(
        namespace=view.namespace,
        name=view.name,
        kind=view.kind,
        api_version=view.api_version,
        created_at=view.created_at,
        phases=list(view.phases),
        components=_merged_components(view),
        gpus=view.resources.gpus,
        pods=_pod_count(view),
        definition=view.definition,
        origin=view.origin,
        warnings=list(view.warnings),
    )


def summary_without_definition(workload: Obj, pods: Iterable[Obj], phase: str | None = None) -> WorkloadSummary:
    """A row for a kind no Karta definition covers: GPUs from the pods themselves."""
    mine = list(pods)
    total = ZERO
    for p in mine:
        total = total + pod_request(p.get("spec") or {})
    gvk = GVK.of(workload)
    return WorkloadSummary(
        namespace=namespace(workload),
        name=name(workload),
        kind=gvk.kind,
        api_version=gvk.api_version,
        created_at=meta(workload).get("creationTimestamp"),
        phases=[phase] if phase else [],
        gpus=total.gpus,
        pods=len(mine),
    )


def is_top_level(obj: Obj) -> bool:
    """Owned by nothing: the object the owner walk ends at (a JobSet's Jobs and a Deployment's pods are
    not workloads). The walk (``grouper.core.owner_chain``) follows the controlling reference, else the first
    one, so an object with only non-controller references (a pod adopted by a plain reference) is part of
    its owner's workload, never a workload row of its own."""
    return not any(isinstance(r, dict) for r in owner_references(obj))


def list_workloads(
    candidates: Iterable[Obj],
    pods: list[Obj],
    owners: list[Obj],
    definitions: Definitions,
) -> list[WorkloadSummary]:
    """One summary per top-level candidate whose kind has a definition, sorted by namespace, kind, name.

    ``pods`` and ``owners`` may span namespaces and workloads: each workload keeps the pods whose owner
    chain reaches it. The same object listed under two versions (a CRD served as v1alpha1 and v1alpha2)
    counts once, under the first version given.
    """
    by_ns_pods: dict[str, list[Obj]] = {}
    for p in pods:
        by_ns_pods.setdefault(namespace(p), []).append(p)
    by_ns_owners: dict[str, list[Obj]] = {}
    for o in owners:
        by_ns_owners.setdefault(namespace(o), []).append(o)
    seen: set[str] = set()
    out: list[WorkloadSummary] = []
    for w in candidates:
        key = uid(w) or f"{namespace(w)}/{GVK.of(w).kind}/{name(w)}"
        if key in seen or not is_top_level(w):
            continue
        found = definitions(GVK.of(w))
        if found is None:
            continue
        seen.add(key)
        defn, ev = found
        ns = namespace(w)
        try:
            view = build_describe(defn, ev, w, by_ns_pods.get(ns, []), file_mode=False,
                                  objects=by_ns_owners.get(ns, []))
        except Exception as e:  # one workload that cannot be described must not hide the others
            row = summary_without_definition(w, [])
            row.definition, row.origin = defn.name, defn.origin
            row.warnings.append(f"Karta {defn.name}: {e}")
            out.append(row)
            continue
        out.append(summarize(view))
    return sorted(out, key=lambda s: (s.namespace, s.kind, s.name))


def render_workloads(items: list[WorkloadSummary], *, now: datetime | None = None) -> str:
    """The table: NAMESPACE NAME KIND PHASE COMPONENTS GPU AGE (no trailing newline)."""
    rows = [["NAMESPACE", "NAME", "KIND", "PHASE", "COMPONENTS", "GPU", "AGE"]]
    for s in items:
        rows.append([s.namespace or "<none>", s.name, s.kind, s.phase, s.components_text, str(s.gpus),
                     age(s.created_at, now) or "<unknown>"])
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)


__all__ = [
    "WorkloadSummary",
    "is_top_level",
    "list_workloads",
    "render_workloads",
    "summarize",
    "summary_without_definition",
]
