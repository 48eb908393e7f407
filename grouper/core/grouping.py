"""Decide, for one pod, which PodGroup it belongs to. Pure: reads only the pod and the lookups.

The same ``Grouper.decide`` runs in the controller (cache-backed lookups), in ``grouper plan``
(in-memory lookups over files) and in the tests. Bad input never raises: every problem becomes a
``Decision`` with ``outcome="error"`` and a message naming the object and the field.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from grouper.core.config import GroupingConfig
from grouper.core.context import GroupingContext
from grouper.core.decision import Decision
from grouper.core.hold import stamp
from grouper.core.hub import PluginHub
from grouper.core.lookups import Lookups
from grouper.core.naming import shorten_name
from grouper.core.nodepool import apply_nodepool_label
from grouper.core.step_aside import (
    SKIP_ANNOTATION,
    SKIP_REASON,
    StepAside,
    controller_groups,
    foreign_group,
    kai_note,
    marked,
    owner_marker,
    podgang_marker,
)
from grouper.core.workload_context import WorkloadContext
from grouper.model import objects as o
from grouper.model.errors import GroupingError, InvalidPodGroup, InvalidWorkload
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import POD_GROUP_ANNOTATION, SUBGROUP_LABEL, OwnerRef

if TYPE_CHECKING:
    from grouper.karta import DefinitionRegistry

log = logging.getLogger(__name__)

# Finished pods are not grouped: the controller skips them before deciding (it counts them), and every
# other caller of ``decide`` (plan, explain, the webhook) gets the same answer from here. KAI has no phase
# check (kai-podgrouper.md §1, "Terminal pods"): a deliberate deviation, README "terminal pods".
TERMINAL_PHASES = ("Succeeded", "Failed")


def is_terminal(pod: Obj) -> bool:
    status = pod.get("status")
    return isinstance(status, dict) and status.get("phase") in TERMINAL_PHASES
__all__ = ["POD_GROUP_ANNOTATION", "SKIP_ANNOTATION", "SUBGROUP_LABEL", "Grouper"]


def _check_metadata(obj: Obj) -> None:
    problem = o.metadata_problem(obj)  # first: every reader after this takes labels/annotations as maps
    if problem is not None:
        raise InvalidWorkload(problem[1], obj=o.describe(obj), field=problem[0])


def _skips(obj: Obj) -> bool:
    _check_metadata(obj)
    return marked(obj)


def _owner_rules(owners: list[Obj], upstream: bool) -> tuple[StepAside | None, StepAside | None]:
    """What the step-aside rules say of the owners alone: the first skip-annotated owner, and the first whose
    controller writes upstream groups. A malformed owner's metadata is reported before any rule reads it."""
    for owner in owners:
        _check_metadata(owner)
    return owner_marker(owners), controller_groups(owners, ray_label=upstream)


def _step_aside(d: Decision, found: StepAside) -> None:
    d.pod_group, d.plugin, d.definition, d.definition_origin = None, None, None, None
    d.outcome, d.reason, d.message = "skipped", found.reason, found.message


class Grouper:
    """The grouping decision for one pod. Its plugins come wired in ``hub`` (built by the composition
    root, ``grouper.runtime.composition``): the core knows the Plugin protocol, not the plugins."""

    def __init__(self, config: GroupingConfig, hub: PluginHub) -> None:
        self.config = config
        self.hub = hub

    @property
    def definitions(self) -> DefinitionRegistry | None:
        return self.hub.definitions

    def decide(self, pod: Obj, lookups: Lookups, workload: WorkloadContext | None = None) -> Decision:
        """``workload``: the context of the planning pass the pod is decided in (its owner chains, plugins'
        per-workload parts and PodGroup checks are shared with the pass's other pods); None: the pod is
        decided alone, in a context of its own."""
        pod = o.with_pod_typemeta(pod)
        decision = Decision(o.namespace(pod), o.name(pod), o.uid(pod), "skipped", "")
        try:
            self._decide(pod, lookups, decision, workload if workload is not None else WorkloadContext((pod,)))
        except GroupingError as exc:
            decision.outcome, decision.reason, decision.message = "error", exc.reason, str(exc)
            decision.retryable = exc.retryable
        except Exception as exc:  # a plugin bug must not take the service down; report it
            log.exception("unexpected error grouping pod %s", decision.pod_key)
            decision.outcome, decision.reason = "error", "InternalError"
            decision.message = f"Pod {decision.pod_key}: internal error in plugin {decision.plugin}: {exc!r}"
        return decision

    def _decide(self, pod: Obj, lookups: Lookups, d: Decision, workload: WorkloadContext) -> None:
        scheduler = o.dig(pod, "spec", "schedulerName") or "default-scheduler"
        if scheduler != self.config.scheduler_name:
            d.reason, d.message = "OtherScheduler", f"spec.schedulerName is {scheduler!r}"
            return
        if is_terminal(pod):
            d.reason, d.message = "PodTerminal", f"pod phase is {pod['status']['phase']}: finished pods are not grouped"
            return
        if _skips(pod):
            d.reason, d.message = SKIP_REASON, f"pod annotation {SKIP_ANNOTATION}=true"
            return
        # KAI leaves an ownerless pod that already names its PodGroup alone (grouped by someone else).
        # Our own earlier annotation must not count as that, or re-evaluating a bare pod would lose its
        # decision: the check is made below, once we know the name we would give it.
        external = "" if o.owner_references(pod) else o.annotations(pod).get(POD_GROUP_ANNOTATION, "")
        try:
            chain = workload.chain(pod, lookups)
        except GroupingError as exc:
            if o.meta(pod).get("deletionTimestamp"):
                # KAI returns success here but still emits a warning (§8 item 2); we skip quietly.
                d.reason, d.message = "PodDeleting", f"pod is being deleted and its owners are gone: {exc}"
                return
            raise
        d.owner_chain = [OwnerRef.of(owner) for owner in chain.owners]
        d.top_owner = OwnerRef.of(chain.top_owner)
        d.notes.extend(chain.notes)
        if chain.truncated:
            d.notes.append(f"owner chain truncated: {chain.truncated}")
        # Step aside where something else groups the pod (core/step_aside.py): skip markers always; an
        # upstream group only with the upstream backend (the KAI backend groups for KAI and says so). The
        # owners' part reads the owners alone: once per owner chain the pass shares.
        upstream = self.config.backend == "upstream"
        marked_owner, theirs = workload.of_chain(
            ("owner rules", upstream), chain, lambda: _owner_rules(chain.owners, upstream)
        ) if chain.owners else (None, None)
        marker = marked_owner or podgang_marker(pod, lookups)
        if marker is not None:
            _step_aside(d, marker)
            return
        if theirs is not None:
            if upstream:
                _step_aside(d, theirs)
                return
            d.notes.append(kai_note(theirs))

        selection = self.hub.select(GVK.of(chain.top_owner))
        d.plugin = selection.plugin.name
        if selection.definition is not None:
            d.definition, d.definition_origin = selection.definition.name, selection.definition.origin
        ctx = GroupingContext(
            pod=pod,
            top_owner=chain.top_owner,
            owners=chain.owners,
            lookups=lookups,
            config=self.config,
            plugin_for=self.hub.plugin_for,
            workload=workload,
        )
        try:
            md = selection.plugin.metadata(ctx)
        except GroupingError:
            found = foreign_group(pod, None) if upstream else None
            if found is None:
                raise
            _step_aside(d, found)  # in a group already: we could not have named it
            return
        if md is None:
            d.reason, d.message = "NotGrouped", f"plugin {d.plugin} left the pod alone"
            return
        apply_nodepool_label(md, pod, self.config)
        if selection.definition is not None:  # the hold rule's record of the source (core/hold.py)
            stamp(md, selection.definition, chain.top_owner)
        dropped = md.bound_copied_metadata()  # a valid workload always gives a PodGroup the API accepts
        if dropped:  # reported in the decision's notes, and logged and an Event when the PodGroup is written
            md.warnings.append(dropped.describe())
        full_name = md.name
        md.name = shorten_name(md.name)
        if md.name != full_name:
            d.notes.append(f"PodGroup name shortened from {len(full_name)} characters: {full_name}")
        if external and external != md.name:
            d.pod_group, d.plugin, d.definition, d.definition_origin = None, None, None, None
            d.reason = "ExternallyGrouped"
            d.message = f"ownerless pod already carries {POD_GROUP_ANNOTATION}={external}"
            return
        found = foreign_group(pod, md.name)
        if found is not None and theirs is None:  # (an owner's rule already said so)
            if upstream:
                _step_aside(d, found)
                return
            d.notes.append(kai_note(found))
        errors = workload.validate(md)
        if errors:
            raise InvalidPodGroup("; ".join(errors))
        d.pod_group = md
        d.notes.extend(f"warning: {w}" for w in md.warnings)
        d.sub_group = md.sub_group_of(o.name(pod))
        d.outcome, d.reason = "grouped", "Grouped"
        d.message = f"PodGroup {md.name}" + (f", sub-group {d.sub_group}" if d.sub_group else "")
