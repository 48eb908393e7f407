"""Build the describe view of one workload from its Karta definition (``kli describe``, karta.md §5.2).

Pure: takes the definition, an evaluator, the workload, candidate pods and intermediate owners;
reads nothing else. The tree:

* the root component is dropped and its children are hoisted (a root that carries pods itself -
  Job, Deployment, NIMService - is shown as the one top-level row);
* a multi-instance component gets one child row per instance id (sorted); a component with a
  ``replicaSelector`` gets one row ``<component>[<key>]`` per replica key seen on its pods;
  child components are copied under every instance / replica row, their pods narrowed to that
  instance / replica where the pod says which one it belongs to;
* pods are attributed by owner chain (``ownership``), then to a component by the evaluator
  (componentTypeSelector; the only pod-bearing component takes every pod), then to an instance
  and replica key.

Rows with nothing desired and no pods (a TFJob without Chief, a transformer-less InferenceService,
a Milvus component that does not run) are left out.

Numbers per row: desired = the component's scale per instance (``replicas``, else
``minReplicas``, else 1), summed over instances and children for grouping rows; current = pods
not finished; ready = pods whose Ready condition is True. Resources of a pod-bearing row = pod
template request x desired (the actual pods' requests where no template can be derived); the
Resources table sums them per component over the whole tree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from grouper.describe.ownership import pods_of
from grouper.describe.resources import ZERO, Resources, pod_request
from grouper.describe.view import ComponentNode, DescribeView, PodView, Replicas, ResourceRow
from grouper.karta.errors import KartaEvalError
from grouper.karta.evaluate import Evaluator, Scale
from grouper.karta.model import Component, KartaDefinition
from grouper.model.objects import GVK, meta, name, namespace

Obj = dict[str, Any]


@dataclass
class _PodInfo:
    pod: Obj
    view: PodView
    component: str | None
    # component name -> instance id / replica key the pod declares for it
    instances: dict[str, str] = field(default_factory=dict)
    replica_keys: dict[str, str] = field(default_factory=dict)


def _natural(key: str) -> tuple[Any, ...]:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", key))


def _pod_reason(pod: Obj) -> str | None:
    """Why a pod is not ready, as ``kli describe`` says it (a ready pod has no reason): the scheduler's
    reason (PodScheduled=False, e.g. ``Unschedulable``), else ``status.reason`` (``Evicted``), else the
    Ready condition's reason (``ContainersNotReady`` for a running pod that is not ready,
    ``PodCompleted``). Where kli would print nothing we add the container's waiting / terminated reason
    (``ErrImagePull``, ``Error``) or ``Terminating``."""
    if _pod_ready(pod):
        return None
    status = pod.get("status") or {}
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    for cond in conditions:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("reason") or "Unschedulable")
    if status.get("reason"):
        return str(status["reason"])
    for cond in conditions:
        if cond.get("type") == "Ready" and cond.get("status") == "False" and cond.get("reason"):
            return str(cond["reason"])
    if meta(pod).get("deletionTimestamp"):
        return "Terminating"
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(key) or []:
            state = (cs.get("state") or {}) if isinstance(cs, dict) else {}
            for part in ("waiting", "terminated"):
                reason = (state.get(part) or {}).get("reason")
                if reason and reason != "Completed":
                    return str(reason)
    return None


def _pod_ready(pod: Obj) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def pod_view(pod: Obj, component: str | None = None, instance: str | None = None) -> PodView:
    """The row facts of one pod."""
    spec = pod.get("spec") or {}
    node = spec.get("nodeName") or None
    return PodView(
        name=name(pod),
        phase=str((pod.get("status") or {}).get("phase") or "Unknown"),
        ready=_pod_ready(pod),
        node=str(node) if node else None,
        reason=_pod_reason(pod),
        resources=pod_request(spec),
        component=component,
        instance=instance,
    )


def desired_of(scale: Scale | None) -> int:
    """kli's desired count: replicas, else minReplicas, else 1 (karta.md §5.2)."""
    if scale is None:
        return 1
    if scale.replicas is not None:
        return scale.replicas
    if scale.min_replicas is not None:
        return scale.min_replicas
    return 1


class _Builder:
    def __init__(self, defn: KartaDefinition, ev: Evaluator, workload: Obj) -> None:
        self.defn = defn
        self.ev = ev
        self.workload = workload
        self.warnings: list[str] = []
        self._ids: dict[str, list[str]] = {}
        self._scales: dict[str, dict[str, Scale]] = {}
        self._templates: dict[str, dict[str, Obj]] = {}
        self._subtree: dict[str, set[str]] = {}
        # component -> (desired, resources) summed over every row of it (the Resources table)

    def warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)

    # -------------------------------------------------------- definition facts (cached)

    def ids(self, c: Component) -> list[str]:
        if c.name not in self._ids:
            try:
                self._ids[c.name] = self.ev.instance_ids(self.workload, c)
            except KartaEvalError as e:
                self.warn(str(e))
                self._ids[c.name] = [""]
        return self._ids[c.name]

    def scales(self, c: Component) -> dict[str, Scale]:
        if c.name not in self._scales:
            try:
                self._scales[c.name] = self._non_negative(c, self.ev.scale(self.workload, c))
            except KartaEvalError as e:
                self.warn(str(e))
                self._scales[c.name] = {}
        return self._scales[c.name]

    def _non_negative(self, c: Component, scales: dict[str, Scale]) -> dict[str, Scale]:
        """A negative count is shown as 0 with a warning naming the value and its expression."""
        paths = c.scale.paths() if c.scale else {}
        out: dict[str, Scale] = {}
        for iid, sc in scales.items():
            fixed: dict[str, int | None] = {}
            values = {"replicas": sc.replicas, "minReplicas": sc.min_replicas, "maxReplicas": sc.max_replicas}
            for field_name, value in values.items():
                if value is not None and value < 0:
                    where = f"component {c.name}" + (f" instance {iid}" if iid else "")
                    self.warn(
                        f"Karta {self.defn.name}, {where}: {field_name} {value} is negative, shown as 0 "
                        f"(expression '{paths.get(field_name, '')}')"
                    )
                    value = 0
                fixed[field_name] = value
            out[iid] = Scale(fixed["replicas"], fixed["minReplicas"], fixed["maxReplicas"])
        return out

    def templates(self, c: Component) -> dict[str, Obj]:
        if c.name not in self._templates:
            try:
                self._templates[c.name] = self.ev.pod_templates(self.workload, c)
            except KartaEvalError as e:
                self.warn(str(e))
                self._templates[c.name] = {}
        return self._templates[c.name]

    def subtree(self, c: Component) -> set[str]:
        if c.name not in self._subtree:
            self._subtree[c.name] = {c.name, *(d.name for d in self.defn.descendants(c.name))}
        return self._subtree[c.name]

    # -------------------------------------------------------- pods

    def classify(self, pod: Obj) -> _PodInfo:
        comp: Component | None = None
        try:
            comp = self.ev.infer_component(pod)
        except KartaEvalError as e:
            self.warn(str(e))
        info = _PodInfo(pod, pod_view(pod), comp.name if comp else None)
        if comp is None:
            return info
        for c in (comp, *self.defn.ancestors(comp.name)):
            sel = c.pod_selector
            if sel is None:
                continue
            if c.instance_id_path and sel.instance_id_path:
                try:
                    if c is comp:
                        inst = self.ev.instance_of_pod(self.workload, pod, c)
                    else:
                        inst = self.ev.single_value(pod, sel.instance_id_path, c)
                    if inst is not None:
                        info.instances[c.name] = inst
                except KartaEvalError as e:
                    self.warn(str(e))
            if sel.replica_key_path:
                try:
                    key = self.ev.replica_key(pod, c)
                    if key is not None:
                        info.replica_keys[c.name] = key
                except KartaEvalError:
                    pass  # pods of a component without replicas (e.g. a single-node Dynamo service)
        info.view = pod_view(pod, comp.name, info.instances.get(comp.name))
        return info

    # -------------------------------------------------------- tree

    def node(self, c: Component, scope: list[_PodInfo]) -> ComponentNode:
        """The row for component ``c`` with the pods of its subtree in this context."""
        ids = self.ids(c)
        if ids != [""]:
            children: list[ComponentNode] = []
            claimed: set[int] = set()
            for iid in sorted(ids, key=_natural):
                mine = [p for p in scope if p.instances.get(c.name) == iid]
                claimed.update(id(p) for p in mine)
                children.append(self.split(c, iid, iid, mine))
            rest = [p for p in scope if id(p) not in claimed]
            return self.group_row(c, c.name, None, None, children, rest)
        return self.split(c, "", c.name, scope)

    def split(self, c: Component, iid: str, label: str, scope: list[_PodInfo]) -> ComponentNode:
        """Split by replica key when the pods carry one for ``c``; else the plain content row."""
        keys = sorted({p.replica_keys[c.name] for p in scope if c.name in p.replica_keys}, key=_natural)
        if not keys:
            return self.content(c, iid, label, scope)
        by_key = {k: [p for p in scope if p.replica_keys.get(c.name) == k] for k in keys}
        rest = [p for p in scope if c.name not in p.replica_keys]
        if not c.has_pod_definition:
            rows = [self.content(c, iid, f"{c.name}[{k}]", ps, k) for k, ps in by_key.items()]
            return self.group_row(c, label, iid or None, None, rows, rest)
        # A pod-bearing component whose replicas are told apart by key (e.g. a multi-node Dynamo
        # service): its scale covers the whole instance, the per-key rows only list pods.
        own = self.content(c, iid, label, rest)
        rows = []
        for k, ps in by_key.items():
            views = sorted((p.view for p in ps if p.component == c.name), key=lambda v: _natural(v.name))
            rows.append(
                ComponentNode(
                    name=c.name,
                    label=f"{c.name}[{k}]",
                    kind=own.kind,
                    api_version=own.api_version,
                    instance=iid or None,
                    replica_key=k,
                    replicas=_counts(None, views),
                    resources=_sum(v.resources for v in views),
                    nodes=sorted({v.node for v in views if v.node}),
                    pods=views,
                )
            )
        all_views = [v for r in rows for v in r.pods] + _all_pod_views(own)
        own.children = rows + own.children
        own.replicas = _counts(own.replicas.desired, all_views)
        own.nodes = sorted({v.node for v in all_views if v.node})
        return own

    def content(
        self,
        c: Component,
        iid: str,
        label: str,
        scope: list[_PodInfo],
        replica_key: str | None = None,
        *,
        with_children: bool = True,
    ) -> ComponentNode:
        """A row with the component's own pods and its child components (copied per context)."""
        own = sorted((p.view for p in scope if p.component == c.name), key=lambda v: _natural(v.name))
        kids = (
            [self.node(k, [p for p in scope if p.component in self.subtree(k)]) for k in self.defn.children_of(c.name)]
            if with_children
            else []
        )
        desired = 0
        resources = ZERO
        if c.has_pod_definition:
            desired = desired_of(self.scales(c).get(iid)) if c.scale is not None else 1
            spec = (self.templates(c).get(iid) or {}).get("spec") or {}
            resources = pod_request(spec).times(desired) if spec.get("containers") else _sum(v.resources for v in own)
        views = own + [v for k in kids for v in _all_pod_views(k)]
        return ComponentNode(
            name=c.name,
            label=label,
            kind=c.kind.kind if c.kind else "",
            api_version=c.kind.api_version if c.kind and c.kind.kind else "",
            instance=iid or None,
            replica_key=replica_key,
            grouping=not c.has_pod_definition,
            replicas=_counts(desired + sum(k.replicas.desired or 0 for k in kids), views),
            resources=resources + _sum(k.resources for k in kids),
            nodes=sorted({v.node for v in views if v.node}),
            pods=own,
            children=_present(kids),
        )

    def group_row(
        self,
        c: Component,
        label: str,
        iid: str | None,
        key: str | None,
        children: list[ComponentNode],
        rest: list[_PodInfo],
    ) -> ComponentNode:
        """A row whose content is its children (instances or replicas); pods that name none of them
        (no instance id / replica key for ``c``) are listed on the row itself."""
        own = sorted((p.view for p in rest), key=lambda v: _natural(v.name))
        views = [v for ch in children for v in _all_pod_views(ch)] + own
        return ComponentNode(
            name=c.name,
            label=label,
            kind=c.kind.kind if c.kind else "",
            api_version=c.kind.api_version if c.kind and c.kind.kind else "",
            instance=iid,
            replica_key=key,
            grouping=not c.has_pod_definition,
            replicas=_counts(sum(ch.replicas.desired or 0 for ch in children), views),
            resources=_sum(ch.resources for ch in children),
            nodes=sorted({v.node for v in views if v.node}),
            pods=own,
            children=_present(children),
        )


def _accounted(n: ComponentNode) -> list[ComponentNode]:
    """The children whose requests are part of ``n.resources`` (per-replica-key rows only list pods)."""
    return [ch for ch in n.children if not (ch.replica_key is not None and ch.replicas.desired is None)]


def _own_request(n: ComponentNode) -> Resources:
    total = n.resources
    for ch in _accounted(n):
        total = total - ch.resources
    return total


def _is_grouping(n: ComponentNode) -> bool:
    """kli's rule: a row that only repeats its children (no pods, nothing requested of its own, its
    replicas the sum of theirs) gets no Resources row."""
    kids = _accounted(n)
    if not kids or n.pods:
        return False
    return _own_request(n) == ZERO and (n.replicas.desired or 0) == sum(ch.replicas.desired or 0 for ch in kids)


def resource_rows(nodes: list[ComponentNode]) -> list[ResourceRow]:
    """The Resources table as ``kli describe`` prints it: one row per component *instance* of the tree
    (pre-order, e.g. ``leader 1``, ``worker 2`` for a JobSet), each charged only what it requests beyond
    its children, so the rows sum to the total."""
    rows: list[ResourceRow] = []
    for n in nodes:
        if n.replica_key is not None and n.replicas.desired is None:
            continue  # a pod list of one replica of a multi-node component: counted on its parent
        if not _is_grouping(n):
            rows.append(ResourceRow(n.label, n.replicas.desired or 0, _own_request(n)))
        rows.extend(resource_rows(n.children))
    return rows


def _present(nodes: list[ComponentNode]) -> list[ComponentNode]:
    """Drop rows with nothing desired and no pods anywhere below them."""
    return [n for n in nodes if n.replicas.desired or _all_pod_views(n)]


def _sum(items: Iterable[Resources]) -> Resources:
    total = ZERO
    for r in items:
        total = total + r
    return total


def _counts(desired: int | None, views: list[PodView]) -> Replicas:
    uniq = list({v.name: v for v in views}.values())
    return Replicas(desired, sum(1 for v in uniq if v.active), sum(1 for v in uniq if v.ready))


def _all_pod_views(n: ComponentNode) -> list[PodView]:
    out = list(n.pods)
    for c in n.children:
        out.extend(_all_pod_views(c))
    return out


def build_describe(
    defn: KartaDefinition,
    evaluator: Evaluator,
    workload: Obj,
    pods: list[Obj],
    *,
    file_mode: bool,
    objects: list[Obj] | None = None,
    origin: str | None = None,
    pods_attributed: bool = False,
) -> DescribeView:
    """The describe view of ``workload``. ``pods`` may include pods of other workloads (only those
    whose owner chain reaches the workload count); ``objects`` are candidate intermediate owners
    (ReplicaSets, Jobs, StatefulSets, ...). ``pods_attributed=True``: the caller already knows every
    pod belongs to the workload (e.g. from grouping decisions); the owner-chain check is skipped.
    Evaluation problems become ``warnings``."""
    b = _Builder(defn, evaluator, workload)
    if GVK.of(workload) == GVK("", "v1", "Pod"):
        mine = [workload]  # a bare pod is its own (only) pod
    else:
        mine = list(pods) if pods_attributed else pods_of(workload, pods, objects or [])
    infos = [b.classify(p) for p in mine]
    assigned = [p for p in infos if p.component is not None]
    unassigned = sorted((p.view for p in infos if p.component is None), key=lambda v: _natural(v.name))
    top: list[ComponentNode] = []
    root = defn.root
    if root.has_pod_definition:
        top.append(b.content(root, "", root.name, [p for p in assigned if p.component == root.name], with_children=False))
    for child in defn.children_of(root.name):
        top.append(b.node(child, [p for p in assigned if p.component in b.subtree(child)]))
    try:
        phases = evaluator.status(workload).matched
    except KartaEvalError as e:
        b.warn(str(e))
        phases = ["Undefined"]
    top = _present(top)
    table = resource_rows(top)
    gvk = GVK.of(workload)
    return DescribeView(
        name=name(workload),
        namespace=namespace(workload),
        kind=gvk.kind,
        api_version=gvk.api_version,
        created_at=meta(workload).get("creationTimestamp"),
        definition=defn.name,
        origin=origin or defn.origin,
        phases=phases,
        file_mode=file_mode,
        resources=_sum(r.resources for r in table),
        components=top,
        resource_table=table,
        unassigned_pods=unassigned,
        warnings=b.warnings,
    )
