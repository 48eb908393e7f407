"""One workload's describe tree from the caches: shared by ``GET /workloads/{ns}/{kind}/{name}`` and the web
view's workload page (``/ui/fragments/workloads/...``), so both show exactly the same facts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grouper.api.models import DefinitionRef, EventView, WorkloadDescribe, WorkloadRef
from grouper.api.state import StateReader, safe_get
from grouper.api.views import Views, kind_matches, scrub
from grouper.model import objects as o
from grouper.model.objects import Obj
from grouper.model.podgroup import SUBGROUP_LABEL

if TYPE_CHECKING:
    from grouper.describe.view import DescribeView


@dataclass(frozen=True)
class Described:
    """The API's body and, when a Karta definition maps the kind, the view it was made from (the web view
    prints it the way ``grouper describe`` does)."""

    body: WorkloadDescribe
    view: DescribeView | None


def workload_kinds(views: Views, namespace: str, kind: str) -> list[tuple[str, str]]:
    """(apiVersion, kind) candidates for a ``Kind``, ``Kind.group`` or ``Kind.version.group`` in a namespace."""
    return [(av, k) for av, k in views.known_workload_kinds(namespace) if kind_matches(kind, av, k)]


def cached_workload(state: StateReader, candidates: list[tuple[str, str]], namespace: str, name: str) -> Obj | None:
    objects = state.object_source()
    for av, k in candidates:
        workload = safe_get(objects, av, k, namespace, name)
        if workload is not None:
            return workload
    return None


def describe(views: Views, state: StateReader, workload: Obj, source: str) -> Described:
    ns, name = o.namespace(workload), o.name(workload)
    av, kind = str(workload.get("apiVersion") or ""), str(workload.get("kind") or "")
    pod_recs = views.workload_pods(ns, av, kind, name, o.uid(workload))
    objects = state.object_source()
    defn = views.definition_for(av, kind)
    keys = views.grouping_label_keys(defn)
    pod_names = sorted({r.name for r in pod_recs})
    sub_of = {r.name: r.sub_group for r in pod_recs}
    pod_groups = sorted({r.pod_group for r in pod_recs if r.pod_group})
    member = views.member_group(ns, workload)
    if member is not None:  # its own PodGroups are not written while it is in a group: the group's is its gang
        group = member[0]
        pod_groups = [group.podGroup] if group.rendered else []
        cached = {p: safe_get(objects, "v1", "Pod", ns, p) for p in pod_names}
        sub_of = {p: o.labels(c).get(SUBGROUP_LABEL) if c is not None and group.rendered else None
                  for p, c in cached.items()}  # the leaf of the group's PodGroup the pod carries
    pods = [views.pod_info(objects, ns, p, sub_of.get(p), keys) for p in pod_names]
    tree: dict[str, Any] | None = None
    view: DescribeView | None = None
    error: str | None = None
    if defn is not None:
        pod_objs = [p for p in (safe_get(objects, "v1", "Pod", ns, n) for n in pod_names) if p is not None]
        try:
            from grouper.describe import build_describe

            # The pods come from decision records whose top owner is this workload: already attributed.
            view = build_describe(
                defn, views.evaluator(defn), workload, pod_objs, file_mode=False, pods_attributed=True
            )
            tree = scrub(view.to_dict())
        except Exception as e:  # a definition that cannot describe this object: say why, keep the rest
            view, error = None, f"Karta {defn.name}: {e}"
    body = WorkloadDescribe(
        workload=WorkloadRef(apiVersion=av, kind=kind, name=name),
        namespace=ns,
        source=source,  # type: ignore[arg-type]
        definition=DefinitionRef(name=defn.name, origin=defn.origin) if defn is not None else None,
        status=views.workload_status(workload),
        podGroups=pod_groups,
        describe=tree,
        describeError=error,
        pods=pods,
        workloadGroup=member[0] if member is not None else None,
        events=[EventView(reason=e.reason, type=e.type, message=e.message, firstTime=e.first, lastTime=e.last,
                          count=e.count) for e in state.recent_events(o.uid(workload))],
    )
    return Described(body, view)


__all__ = ["Described", "cached_workload", "describe", "workload_kinds"]
