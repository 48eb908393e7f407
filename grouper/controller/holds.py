"""The controller's side of the hold rule (:mod:`grouper.core.hold`): before a reconcile writes, keep
the stored PodGroups that a definition change would turn into a weaker gang.

For each PodGroup of the workload that records the definition which produced it, the PodGroups its pods
would move to now are compared with it (:func:`~grouper.core.hold.hold_of`). A held PodGroup is not
written, not deleted, and the plan is changed to put every pod of the new PodGroups that replace it —
its own pods and new pods of the workload alike — back into it (a pod keeps its sub-group label; a new
pod gets the sub-group the new decision names if the held PodGroup has one of that name, else none).

One Warning Event (reason ``GangHeld``) on the workload and one on the Karta per transition, not per
resync: the held PodGroup is marked with the hold's message (``HELD_ANNOTATION``, one merge patch) and
the Events go out only when that mark changes — so a restarted grouper, finding the mark, writes nothing.
When the hold ends with the PodGroup still wanted (the definition came back), the mark is removed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from grouper.core.decision import Decision
from grouper.core.hold import (
    DEFINITION_ANNOTATION,
    HELD_ANNOTATION,
    Held,
    Hold,
    hold_of,
    replan,
    say_held,
    source_of,
    unchanged_source,
)
from grouper.kube.transport import ApiError
from grouper.model import objects as o
from grouper.model.objects import Obj
from grouper.model.podgroup import OwnerRef
from grouper.writer.events import EventRecorder, InvolvedObject
from grouper.writer.podgroups import PodGroupWriter

log = logging.getLogger(__name__)
GANG_HELD_REASON = "GangHeld"
KARTA_API_VERSION = "run.ai/v1alpha1"


class Holds:
    def __init__(
        self,
        *,
        stored_of: Callable[[str, str], list[Obj]],
        pods_naming: Callable[[str, str], list[Obj]],
        owner: Callable[[OwnerRef, str], Obj | None],
        definitions: Callable[[], Any],
        writer: PodGroupWriter,
        recorder: EventRecorder,
    ) -> None:
        """``stored_of(namespace, owner uid)``: the stored PodGroups the owner owns; ``pods_naming(namespace,
        PodGroup)``: the pods that name it; ``owner(ref, namespace)``: the top owner as cached;
        ``definitions()``: the loaded definition registry (or None)."""
        self.stored_of, self.pods_naming, self.owner = stored_of, pods_naming, owner
        self.definitions = definitions
        self.writer, self.recorder = writer, recorder

    def current_source(self, name: str) -> str | None:
        registry = self.definitions()
        loaded = registry.get(name) if registry is not None else None
        return source_of(loaded.definition) if loaded is not None and loaded.usable else None

    def to_check(self, namespace: str, workload: OwnerRef, groups: list[Any]) -> list[Obj]:
        """The stored PodGroups a definition produced that :meth:`apply` must judge against the plan's ``groups``:
        none (nothing held) when every one is decided again by the definition that made it, the steady state."""
        stored = [pg for pg in self.stored_of(namespace, workload.uid) if DEFINITION_ANNOTATION in o.annotations(pg)]
        planned = {g.metadata.name: g for g in groups} if stored else {}
        return [] if all(unchanged_source(pg, planned) for pg in stored) else stored

    async def apply(
        self,
        namespace: str,
        workload: OwnerRef,
        stored: list[Obj],
        groups: list[Any],
        placement: dict[str, tuple[str, str | None]],
        pod: Callable[[str], Obj | None],
        decided: Iterable[tuple[Obj, Decision]],
    ) -> Held:
        """Hold what must be held of ``stored`` (:meth:`to_check`'s): ``groups`` lose those that replace a held one
        and ``placement`` sends their pods to it, in place (:func:`~grouper.core.hold.replan`; ``pod(name)``: the
        pod as it is now); decisions of the pods placed so say it. Returns what was held."""
        held = Held()
        planned = {g.metadata.name: g for g in groups}
        top = self.owner(workload, namespace)
        generation = o.meta(top).get("generation") if top is not None else None
        gen = str(generation) if generation is not None else None
        for pg in sorted(stored, key=o.name):
            members = {o.name(p) for p in self.pods_naming(namespace, o.name(pg))}
            replacing = [g for g in groups if members & set(g.pods)]  # minus those an earlier hold took
            hold = hold_of(pg, [g.metadata for g in replacing], generation=gen, current=self.current_source)
            if hold is None:
                await self._release(pg, planned)
                continue
            held.names.add(o.name(pg))
            replan(pg, hold, replacing, groups, placement, pod, held)
            await self._mark(pg, hold, namespace, workload)
        if held.pods:
            for _, d in decided:
                hold_of_pod = held.pods.get(d.pod_name)
                if hold_of_pod is not None and d.outcome == "grouped":
                    say_held(d, hold_of_pod, placement.get(d.pod_name))
        return held

    async def _mark(self, pg: Obj, hold: Hold, namespace: str, workload: OwnerRef) -> None:
        """Mark the held PodGroup once per transition and say so in Events on the workload and the Karta."""
        message = hold.message
        if o.annotations(pg).get(HELD_ANNOTATION) == message:
            return  # marked (and reported) already: by this process or the one before a restart
        try:
            await self.writer.annotate(namespace, o.name(pg), o.uid(pg), {HELD_ANNOTATION: message})
        except ApiError as e:
            log.warning("cannot mark held PodGroup %s/%s: %s", namespace, o.name(pg), e)
            return  # held all the same; marked and reported by the next pass
        log.warning("PodGroup %s/%s %s", namespace, o.name(pg), message, extra={"podgroup": o.name(pg)})
        text = f"PodGroup {namespace}/{o.name(pg)} {message}"
        involved = InvolvedObject.of_owner(workload, namespace)
        await self.recorder.warn(involved, text, reason=GANG_HELD_REASON)
        registry = self.definitions()
        loaded = registry.get(hold.definition) if registry is not None else None
        if loaded is not None and loaded.source != "cluster":
            return  # a built-in definition has no Karta object to report on
        uid = o.uid(loaded.definition.raw) if loaded is not None else ""
        karta = InvolvedObject(KARTA_API_VERSION, "Karta", "", hold.definition, uid)
        await self.recorder.warn(karta, text, reason=GANG_HELD_REASON)

    async def _release(self, pg: Obj, planned: dict[str, Any]) -> None:
        """A PodGroup marked held that is wanted again as it is decided now: take the mark off."""
        if HELD_ANNOTATION not in o.annotations(pg) or o.name(pg) not in planned:
            return
        try:
            await self.writer.annotate(o.namespace(pg), o.name(pg), o.uid(pg), {HELD_ANNOTATION: None})
        except ApiError as e:
            log.warning("cannot unmark PodGroup %s/%s: %s", o.namespace(pg), o.name(pg), e)


__all__ = ["GANG_HELD_REASON", "Holds"]
