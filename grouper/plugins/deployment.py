"""apps/v1 Deployment (KAI v0.18 ``plugins/deployment/deployment_grouper.go``).

Gang by default (``--deployment-gang-schedule``, KAI's ``gangScheduleDeployment``, default true): one
PodGroup ``pg-<deployment>-<uid>`` per Deployment, owned by it, minMember from the Deployment's
``kai.scheduler/batch-min-member`` (>= 1), else 1. Priority fallback ``inference``.

One PodGroup per pod (``pg-<pod>-<podUID>``, owned by the pod, minMember 1), as before v0.18, when:

- the flag is off, or
- the Deployment's pods already have per-pod PodGroups (KAI's ``hasPodGroupPerPod``, so running pods are
  not re-parented during an upgrade): among the Deployment's pods (its ``spec.selector``), two pods
  naming one PodGroup → gang; more than one distinct PodGroup → per pod; exactly one → that PodGroup's
  first owner decides (``Pod`` → per pod, the Deployment's kind → gang, anything else is an error;
  a PodGroup that no longer exists → gang); none → gang.

Lookups are kept narrow (the pod list is a scan of the namespace in the caches): two ``get`` calls
answer the steady state, and the Deployment's pods are listed only when neither does:

1. the gang PodGroup ``pg-<deployment>-<uid>`` exists, owned by the Deployment → gang;
2. the pod already names its own per-pod PodGroup ``pg-<pod>-<podUID>`` and that exists, owned by
   the pod → per pod;
3. otherwise (a new Deployment, a new pod of a Deployment still on per-pod PodGroups) KAI's rule over
   the pods its ``matchLabels`` select (``matchExpressions`` filter that list; a selector with neither
   lists nothing, as KAI).

Steps 1 and 2 differ from KAI only for a Deployment whose pods name PodGroups of both shapes (a mixed
history): KAI decides from all pods, here each existing PodGroup keeps its pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grouper.core.context import GroupingContext
from grouper.model.errors import GroupingError, InvalidWorkload, LookupForbidden
from grouper.model.objects import Obj, describe, dig, labels, namespace, with_pod_typemeta
from grouper.model.podgroup import (
    POD_GROUP_ANNOTATION,
    PODGROUP_API_VERSION,
    PODGROUP_KIND,
    OwnerRef,
    PodGroupMetadata,
)
from grouper.plugins.common import INFERENCE_PRIORITY, annotations_of, podgroup_name
from grouper.plugins.default import default_metadata


def per_pod(md: PodGroupMetadata, ctx: GroupingContext, why: str) -> PodGroupMetadata:
    """Turn ``md`` into the pod's own PodGroup (name ``pg-<pod>-<podUID>``, owner = the pod, minMember 1)."""
    pod = with_pod_typemeta(ctx.pod)
    md.name = podgroup_name(pod)
    md.owner = OwnerRef.of(pod)
    md.provenance["name"] = f"pg-<pod>-<podUID> of {describe(pod)} ({why})"
    md.min_member, md.min_sub_group = 1, None
    md.provenance["minMember"] = f"one PodGroup per pod: 1 ({why})"
    return md


class DeploymentGrouper:
    name = "Deployment Grouper"
    label_keys: frozenset[str] = frozenset()  # the pod labels it reads besides DefaultGrouper's

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata:
        dep = ctx.top_owner
        md = default_metadata(ctx, priority_fallback=INFERENCE_PRIORITY)
        if not ctx.config.deployment_gang_schedule:
            return per_pod(md, ctx, "--deployment-gang-schedule=false")
        if has_podgroup_per_pod(ctx, dep, md.name):
            return per_pod(md, ctx, "the Deployment's pods already have per-pod PodGroups")
        md.provenance["name"] = f"pg-<name>-<uid> of {describe(dep)} (one gang PodGroup per Deployment)"
        return md


def _get_podgroup(ctx: GroupingContext, ns: str, pg_name: str, dep: Obj) -> Obj | None:
    try:
        return ctx.lookups.get(PODGROUP_API_VERSION, PODGROUP_KIND, ns, pg_name)
    except LookupForbidden as err:
        raise GroupingError(f"cannot read PodGroup {ns}/{pg_name} to choose gang or per-pod grouping: {err}",
                            obj=describe(dep)) from err


def _first_owner_kind(pg: Obj) -> str:
    refs = dig(pg, "metadata", "ownerReferences")
    if isinstance(refs, list) and refs and isinstance(refs[0], Mapping):
        return str(refs[0].get("kind") or "")
    return ""


def has_podgroup_per_pod(ctx: GroupingContext, dep: Obj, gang_name: str) -> bool:
    """Whether the Deployment's pods are already spread over one PodGroup per pod (module docstring)."""
    ns = namespace(dep) or namespace(ctx.pod)
    gang = _get_podgroup(ctx, ns, gang_name, dep)
    if gang is not None and _first_owner_kind(gang) == dep.get("kind"):
        return False
    own = podgroup_name(with_pod_typemeta(ctx.pod))
    if annotations_of(ctx.pod).get(POD_GROUP_ANNOTATION) == own:
        mine = _get_podgroup(ctx, ns, own, dep)
        if mine is not None and _first_owner_kind(mine) == "Pod":
            return True
    return ctx.workload.from_pods("Deployment per pod", dep, lambda: _pods_per_pod(ctx, dep, ns, gang_name, gang))


def _pods_per_pod(ctx: GroupingContext, dep: Obj, ns: str, gang_name: str, gang: Obj | None) -> bool:
    """KAI's rule over the PodGroups the Deployment's pods name (step 3 of the module doc): the same for
    every pod of the pass, so derived once per pass (``WorkloadContext.from_pods``)."""
    seen: set[str] = set()
    for p in _deployment_pods(ctx, dep, ns):
        pg_name = annotations_of(p).get(POD_GROUP_ANNOTATION)
        if not pg_name:
            continue
        if pg_name in seen:  # two pods share a PodGroup: a gang
            return False
        seen.add(pg_name)
    if len(seen) > 1:
        return True
    if not seen:
        return False
    (only,) = seen
    pg = gang if only == gang_name else _get_podgroup(ctx, ns, only, dep)
    if pg is None:
        return False
    kind = _first_owner_kind(pg)
    if kind == dep.get("kind"):
        return False
    if kind == "Pod":
        return True
    raise InvalidWorkload(
        f"PodGroup {ns}/{only} named by its pods is owned by {kind or 'nothing'}, neither a Pod nor the Deployment: "
        "cannot tell gang from per-pod grouping",
        obj=describe(dep),
    )


def _deployment_pods(ctx: GroupingContext, dep: Obj, ns: str) -> list[Obj]:
    selector = dig(dep, "spec", "selector")
    if not isinstance(selector, Mapping):
        return []
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not isinstance(match_labels, Mapping) or not isinstance(expressions, list):
        raise InvalidWorkload("is not a label selector", obj=describe(dep), field="spec.selector")
    if not match_labels and not expressions:
        return []
    try:
        pods = ctx.lookups.list("v1", "Pod", ns, {str(k): str(v) for k, v in match_labels.items()})
    except LookupForbidden as err:
        raise GroupingError(f"cannot list the Deployment's pods: {err}", obj=describe(dep)) from err
    return [p for p in pods if all(_matches(labels(p), e, dep) for e in expressions)]


def _matches(have: Mapping[str, str], expr: Any, dep: Obj) -> bool:
    """One ``matchExpressions`` requirement (In, NotIn, Exists, DoesNotExist)."""
    if not isinstance(expr, Mapping):
        raise InvalidWorkload("is not a requirement", obj=describe(dep), field="spec.selector.matchExpressions")
    key, op, values = str(expr.get("key") or ""), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return key in have and have[key] in values
    if op == "NotIn":
        return key not in have or have[key] not in values
    if op == "Exists":
        return key in have
    if op == "DoesNotExist":
        return key not in have
    raise InvalidWorkload(f"unknown operator {op!r}", obj=describe(dep), field="spec.selector.matchExpressions")


__all__ = ["DeploymentGrouper", "has_podgroup_per_pod", "per_pod"]
