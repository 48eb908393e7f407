"""Decide a pod's group at admission and answer with the JSON patch that puts it there.

On pod CREATE the API server sends an AdmissionReview; the pod is decided from the controller's caches
exactly as the reconciler would (same grouper, same lookups), and the answer patches:

- KAI backend: the ``pod-group-name`` annotation and the sub-group label, so the reconciler's pod
  patch finds nothing to do (one write per pod saved);
- upstream backend: ``spec.schedulingGroup.podGroupName`` (settable only at creation) naming the one
  upstream PodGroup of the decision (:mod:`grouper.core.upstream`: it has the KAI PodGroup's name), and
  the annotation ``podgrouper.kai.scheduler/scheduling-group`` saying it is ours. The webhook asks to be
  called again when a later webhook changed the pod (``reinvocationPolicy: IfNeeded``): LeaderWorkerSet's
  own pod webhook, which runs after ours, adds the labels that name a pod's group, and a group we set
  before is then replaced (a controller's own group never is).

Anything else — a pod for another scheduler, a namespace out of scope, an owner not cached yet, a
decision that skips or fails — is allowed unchanged: the reconciler still groups the pod after creation
(KAI backend), and reports the error. The webhook never denies a pod.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from grouper.core.decision import Decision
from grouper.model import objects as o
from grouper.model.objects import Obj
from grouper.model.podgroup import OWN_SCHEDULING_GROUP_ANNOTATION, POD_GROUP_ANNOTATION, SUBGROUP_LABEL

log = logging.getLogger(__name__)

Decide = Callable[[Obj], Awaitable[Decision | None]]  # None: not this grouper's pod, or inputs not cached


def _escape(key: str) -> str:
    """A JSON pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _set_map_entries(pod: Obj, field: str, entries: dict[str, str]) -> list[dict[str, Any]]:
    current = o.meta(pod).get(field)
    if not isinstance(current, dict):
        return [{"op": "add", "path": f"/metadata/{field}", "value": dict(entries)}]
    return [
        {"op": "add", "path": f"/metadata/{field}/{_escape(k)}", "value": v}
        for k, v in entries.items()
        if current.get(k) != v
    ]


def mutation(pod: Obj, decision: Decision, backend: str) -> list[dict[str, Any]]:
    """The JSON patch that puts ``pod`` in the group ``decision`` chose ([] when nothing to do)."""
    if decision.outcome != "grouped" or decision.pod_group is None:
        return []
    name = decision.pod_group.name
    if backend == "upstream":
        group = (pod.get("spec") or {}).get("schedulingGroup")
        mine = {OWN_SCHEDULING_GROUP_ANNOTATION: name}
        if not group:
            return [{"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": name}},
                    *_set_map_entries(pod, "annotations", mine)]
        current = group.get("podGroupName") if isinstance(group, dict) else None
        if current == name or not current or o.annotations(pod).get(OWN_SCHEDULING_GROUP_ANNOTATION) != current:
            return []  # as decided, or its own controller placed it in a group: never overridden
        # ours, from an earlier call of this admission: decided again after a later webhook changed the pod
        return [{"op": "replace", "path": "/spec/schedulingGroup", "value": {"podGroupName": name}},
                *_set_map_entries(pod, "annotations", mine)]
    ops = _set_map_entries(pod, "annotations", {POD_GROUP_ANNOTATION: name})
    if decision.sub_group:
        ops += _set_map_entries(pod, "labels", {SUBGROUP_LABEL: decision.sub_group})
    return ops


@dataclass
class Admission:
    decide: Decide
    backend: str = "kai"
    admitted: int = 0  # pods answered (for tests and /metrics-free introspection)
    mutated: int = 0

    async def review(self, body: Any) -> dict[str, Any]:
        """An AdmissionReview (admission.k8s.io/v1) in, the AdmissionReview answer out."""
        request = body.get("request") if isinstance(body, dict) else None
        if not isinstance(request, dict) or not request.get("uid"):
            raise ValueError("not an AdmissionReview request: missing request.uid")
        response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
        pod = request.get("object")
        self.admitted += 1
        if request.get("operation") == "CREATE" and isinstance(pod, dict) and pod.get("kind", "Pod") == "Pod":
            pod = dict(pod)
            meta = dict(o.meta(pod))
            meta.setdefault("namespace", request.get("namespace") or "")
            pod["metadata"] = meta
            ops = await self._ops(pod)
            if ops:
                self.mutated += 1
                response["patchType"] = "JSONPatch"
                response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}

    async def _ops(self, pod: Obj) -> list[dict[str, Any]]:
        try:
            decision = await self.decide(pod)
        except Exception:  # never fail an admission: the reconciler groups the pod later
            log.exception("admission: deciding pod %s/%s failed", o.namespace(pod), o.name(pod))
            return []
        return mutation(pod, decision, self.backend) if decision is not None else []
