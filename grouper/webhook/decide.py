"""Decide an admitted pod from the running controller's caches (the reconciler's inputs)."""

from __future__ import annotations

from grouper.controller.controller import Controller
from grouper.core.decision import Decision
from grouper.model import objects as o
from grouper.model.objects import Obj
from grouper.webhook.admission import Decide


def controller_decider(controller: Controller) -> Decide:
    """Decide like the reconciler; None for a pod it would not handle or whose inputs are not cached."""

    def decide(pod: Obj) -> Decision | None:
        scheduler = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
        if scheduler != controller.grouper.config.scheduler_name:
            return None
        if not controller.cache.namespace_allowed(o.namespace(pod)):
            return None
        lookups = controller.cache.lookups()
        decision = controller.grouper.decide(pod, lookups)
        return None if lookups.misses else decision

    return decide
