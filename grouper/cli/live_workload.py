"""Reading a workload, its pods and their intermediate owners from a cluster (``grouper describe
KIND/NAME``), resolving the user's KIND among the Karta-covered kinds, and reading the cluster's Karta
objects (``grouper definitions --cluster``). Kept out of ``grouper.describe`` so that package stays pure;
everything it returns is plain dicts.

Reads go through :class:`grouper.kube.sync.SyncKube` (the controller's async client and discovery cache);
failures are :class:`grouper.kube.transport.ApiError`. Discovery is targeted: only the group-versions of
Karta definitions and of the owners actually met are asked for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from grouper.describe.ownership import MAX_DEPTH
from grouper.kube.discovery import WELL_KNOWN, Resource
from grouper.kube.sync import SyncKube
from grouper.kube.transport import ApiError
from grouper.model.objects import GVK, owner_references, uid

Obj = dict[str, Any]
PODS = WELL_KNOWN[GVK("", "v1", "Pod")]
PODGROUPS = WELL_KNOWN[GVK("scheduling.run.ai", "v2alpha2", "PodGroup")]
KARTAS = WELL_KNOWN[GVK("run.ai", "v1alpha1", "Karta")]


class KindNotResolved(Exception):
    """KIND names no Karta-covered kind, names several, or the kind is not served."""

    def __init__(self, message: str, *, not_installed: bool = False) -> None:
        self.not_installed = not_installed
        super().__init__(message)


@dataclass
class LiveWorkload:
    workload: Obj
    pods: list[Obj]
    objects: list[Obj]
    warnings: list[str] = field(default_factory=list)


def list_kartas(kube: SyncKube) -> list[Obj]:
    """The cluster's Karta objects; ApiError (404 when the Karta CRD is not installed)."""
    return kube.list_items(KARTAS.path())


def resolve_kind(kube: SyncKube, kind: str, gvks: Iterable[GVK]) -> Resource:
    """Resolve KIND (kind, plural, singular or short name, case-insensitive, optionally ``.group`` or
    ``.version.group`` qualified) to a served kind among ``gvks``; several served versions of one kind: the
    group's preferred one."""
    token, _, qualifier = kind.strip().partition(".")
    token, qualifier = token.lower(), qualifier.lower()
    matches: list[Resource] = []
    unserved: list[GVK] = []
    for gvk in sorted(set(gvks)):
        if qualifier and qualifier not in (gvk.group.lower(), f"{gvk.version}.{gvk.group}".lower()):
            continue
        res = next((r for r in kube.served(gvk.group, gvk.version) if r.kind == gvk.kind), None)
        if res is None:
            if token == gvk.kind.lower():
                unserved.append(gvk)
            continue
        if token in res.names():
            matches.append(res)
    if not matches:
        if unserved:
            raise KindNotResolved(f"{unserved[0].kind} is not installed in this cluster", not_installed=True)
        raise KindNotResolved(f"no Karta definition covers {kind!r}")
    if len(matches) > 1:
        if len({(m.group, m.kind) for m in matches}) == 1:
            preferred = kube.preferred_version(matches[0].group)
            for m in matches:
                if m.version == preferred:
                    return m
        options = ", ".join(f"{m.kind}.{m.version}.{m.group}" if m.group else f"{m.kind}.{m.version}" for m in matches)
        raise KindNotResolved(f"{kind!r} matches more than one Karta definition, retry with one of: {options}")
    return matches[0]


def describe_inputs(kube: SyncKube, res: Resource, namespace: str, name: str) -> LiveWorkload | None:
    """The workload (None when it does not exist), the namespace's pods and the owners on their chains
    (max depth 6). ApiError when the workload or the pods cannot be read."""
    found = kube.get_object(res.path(namespace, name))
    if found is None:
        return None
    workload = _typed(found, res.api_version, res.kind)
    pods = kube.list_items(PODS.path(namespace))
    out = LiveWorkload(workload, pods, [])
    known: dict[str, Obj] = {u: p for p in pods if (u := uid(p))}
    known[uid(workload)] = workload
    listed: set[tuple[str, str]] = set()
    frontier = [r for p in pods for r in owner_references(p) if isinstance(r, dict)]
    for _ in range(MAX_DEPTH):
        missing = [r for r in frontier if str(r.get("uid") or "") not in known]
        for ref in missing:
            api_version, kind = str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
            if (api_version, kind) in listed:
                continue
            listed.add((api_version, kind))
            _list_owners(kube, api_version, kind, namespace, known, out)
        frontier = [
            r for ref in frontier if (o := known.get(str(ref.get("uid") or ""))) is not None and o is not workload
            for r in owner_references(o) if isinstance(r, dict)
        ]
        if not frontier:
            break
    pod_uids = {uid(p) for p in pods}
    out.objects = [o for u, o in known.items() if u not in pod_uids and o is not workload]
    return out


def _list_owners(kube: SyncKube, api_version: str, kind: str, namespace: str, known: dict[str, Obj],
                 out: LiveWorkload) -> None:
    try:
        res = kube.resolve(GVK.from_api_version(api_version, kind))
    except ApiError as e:
        out.warnings.append(f"cannot discover {kind} ({api_version}): {e}")
        return
    if res is None or not res.namespaced:
        return
    try:
        for o in kube.list_items(res.path(namespace)):
            if u := uid(o):
                known.setdefault(u, _typed(o, api_version, kind))
    except ApiError as e:
        if e.forbidden:
            out.warnings.append(f"not allowed to list {kind} in namespace {namespace}; pods owned through it are not shown")
        else:
            out.warnings.append(f"cannot list {kind} in namespace {namespace}: {e}")


def _typed(obj: Obj, api_version: str, kind: str) -> Obj:
    """Put apiVersion/kind back where the server left them out."""
    if obj.get("apiVersion") and obj.get("kind"):
        return obj
    return {**obj, "apiVersion": api_version, "kind": kind}


def upstream_podgroups(kube: SyncKube) -> Resource | None:
    """The ``scheduling.k8s.io`` PodGroup resource the upstream backend writes: the newest version of
    :data:`grouper.core.upstream.WORKLOAD_VERSIONS` that serves it (None when none does)."""
    from grouper.core.upstream import GROUP, PODGROUP_KIND, WORKLOAD_VERSIONS

    for version in WORKLOAD_VERSIONS:
        res = next((r for r in kube.served(GROUP, version) if r.kind == PODGROUP_KIND), None)
        if res is not None:
            return res
    return None


def list_pod_groups(kube: SyncKube, namespace: str | None) -> tuple[list[Obj], list[str]]:
    """Every PodGroup in ``namespace`` (None: all) of both backends, KAI's ``scheduling.run.ai/v2alpha2`` and
    upstream ``scheduling.k8s.io``, whichever are served, with apiVersion and kind; and warnings (a kind
    not readable). ApiError for other failures."""
    out: list[Obj] = []
    warnings: list[str] = []
    resources = [PODGROUPS]
    upstream = upstream_podgroups(kube)
    if upstream is not None:
        resources.append(upstream)
    for res in resources:
        try:
            items = kube.list_items(res.path(namespace))
        except ApiError as e:
            if e.not_found:  # the KAI CRD is not installed
                continue
            if not e.forbidden:
                raise
            warnings.append(f"not allowed to list PodGroups ({res.api_version}); their gangs are not shown")
            continue
        out += [_typed(i, res.api_version, res.kind) for i in items]
    return out, warnings


def live_workload_group(kube: SyncKube, workload: Obj | None, namespace: str) -> tuple[Obj | None, list[str]]:
    """The WorkloadGroup a workload (its top owner) names with ``kai.scheduler/workload-group``, read from
    the cluster, and warnings: None without the annotation, when the group does not exist (the annotation
    is then not honoured: the workload is grouped alone, said in a warning) or cannot be read."""
    from grouper.api.workload_group import group_name
    from grouper.model import workload_group as wg

    name = group_name(workload)
    if name is None:
        return None, []
    path = f"/apis/{wg.API_VERSION}/namespaces/{namespace}/{wg.PLURAL}/{name}"
    try:
        group = kube.get_object(path)
    except ApiError as e:
        if e.not_found:  # the CRD is not served: groups are off
            return None, [f"it names WorkloadGroup {name}, but WorkloadGroups are not served: it is grouped alone"]
        if not e.forbidden:
            raise
        return None, [f"it names WorkloadGroup {name}, which this user may not read: its group is not shown"]
    if group is None or (group.get("metadata") or {}).get("deletionTimestamp"):
        return None, [f"it names WorkloadGroup {name}, which does not exist: it is grouped alone (create the "
                      "WorkloadGroup before its workloads)"]
    return group, []
