"""Decide an admitted pod from the running controller's caches (the reconciler's inputs)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from grouper.controller.controller import Controller
from grouper.core.decision import Decision
from grouper.core.owner_chain import OWNER_GONE_REASONS
from grouper.model import objects as o
from grouper.model.objects import Obj
from grouper.webhook.admission import Decide

# A pod is admitted moments after its owner was created (a Job's pods, a JobSet's Jobs): the owner's
# watch event may not be in the cache yet, or its kind not watched yet. Wait for it, inside the
# registration's timeoutSeconds (5 s in the chart; with less the API server gives up first and admits the pod
# unchanged).
OWNER_WAIT_SECONDS = 3.0


def controller_decider(controller: Controller, *, owner_wait: float = OWNER_WAIT_SECONDS) -> Decide:
    """Decide like the reconciler; None for a pod it would not handle or whose inputs are not cached."""

    async def decide(pod: Obj) -> Decision | None:
        scheduler = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
        if scheduler != controller.grouper.config.scheduler_name:
            return None
        if not controller.cache.namespace_allowed(o.namespace(pod)):
            return None
        deadline = time.monotonic() + owner_wait
        while True:
            lookups = controller.cache.lookups()
            decision = controller.grouper.decide(pod, lookups)
            remaining = deadline - time.monotonic()
            if lookups.misses:
                # an owner kind nobody asked for yet: start its informer (the reconciler would too), then
                # decide again; give up (admit unchanged) when it does not sync in time
                if remaining <= 0:
                    return None
                kinds = sorted(lookups.misses)
                try:
                    done = await asyncio.wait_for(
                        asyncio.gather(*(controller.cache.ensure(g, timeout=remaining) for g in kinds)),
                        remaining,
                    )
                except TimeoutError:
                    return None
                if any(r != "ready" for r in done):
                    return None
                continue
            if decision.outcome != "error" or decision.reason not in OWNER_GONE_REASONS or remaining <= 0:
                return await _in_group(controller, decision)
            await asyncio.sleep(0.05)

    return decide


async def _in_group(controller: Controller, decision: Decision) -> Decision:
    """Upstream backend: a pod of a WorkloadGroup's member joins the member's PodGroup of the group (its
    scheduling group is fixed at creation, so it is named here, before the group may be rendered)."""
    if controller.groups is None or decision.pod_group is None:
        return decision
    name = await controller.groups.member_pod_group(decision)
    if name is None:
        return decision
    return replace(decision, pod_group=replace(decision.pod_group, name=name))
