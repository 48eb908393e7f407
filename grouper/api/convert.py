"""The decision store's typed records (:mod:`grouper.records.typed`) as the API's response models: one
converter per model, the only place a record's field becomes a JSON field. Pure; no cache reads."""

from __future__ import annotations

from collections.abc import Iterable

from grouper.api.models import (
    DecisionRecord,
    DefinitionRef,
    LastError,
    OwnerRefView,
    PatchState,
    PodDecision,
    PodInfo,
    PodRef,
    WorkloadGroupView,
)
from grouper.model.podgroup import OwnerRef
from grouper.records.typed import DefinitionUsed, Patch, PodRecord, WorkloadPart, timestamp


def owner_ref_view(ref: OwnerRef) -> OwnerRefView:
    return OwnerRefView(apiVersion=ref.api_version, kind=ref.kind, name=ref.name, uid=ref.uid)


def definition_ref(used: DefinitionUsed | None) -> DefinitionRef | None:
    return DefinitionRef(name=used.name, origin=used.origin) if used is not None and used.name else None


def patch_state(patch: Patch | None) -> PatchState | None:
    return PatchState(result=patch.result, at=timestamp(patch.at)) if patch is not None and patch.result else None


def pod_last_error(rec: PodRecord) -> LastError | None:
    """The pod's last error; its reason is the decision's when the decision itself failed."""
    if not rec.last_error:
        return None
    reason = (rec.reason or "PodError") if rec.outcome in ("error", "failed") else "PodError"
    return LastError(reason=reason, message=rec.last_error, time=timestamp(rec.last_error_at))


def decision_record(part: WorkloadPart | None, notes: Iterable[str], last_error: LastError | None) -> DecisionRecord:
    """A PodGroup's decision: its representative pod's shared part, with the PodGroup's notes and error."""
    return DecisionRecord(
        topOwner=owner_ref_view(part.top_owner) if part is not None and part.top_owner is not None else None,
        ownerChain=[owner_ref_view(r) for r in part.owner_chain] if part is not None else [],
        plugin=part.plugin if part is not None else None,
        definition=definition_ref(part.definition) if part is not None else None,
        provenance=dict(part.provenance) if part is not None else {},
        notes=list(notes),
        lastError=last_error,
    )


def pod_decision(rec: PodRecord, *, notes: list[str], pod_group: str | None, sub_group: str | None,
                 status: PodInfo, group: WorkloadGroupView | None) -> PodDecision:
    """``rec`` as ``/pods/{ns}/{name}`` shows it; ``pod_group`` / ``sub_group`` are where the pod is now
    (its WorkloadGroup's, when it is held for one), ``notes`` the record's plus the API's own."""
    part = rec.part
    return PodDecision(
        pod=PodRef(namespace=rec.namespace, name=rec.name, uid=rec.uid),
        outcome=rec.outcome,
        reason=rec.reason,
        message=rec.message,
        podGroup=pod_group,
        subGroup=sub_group,
        plugin=part.plugin if part is not None else None,
        definition=definition_ref(part.definition) if part is not None else None,
        topOwner=owner_ref_view(part.top_owner) if part is not None and part.top_owner is not None else None,
        ownerChain=[owner_ref_view(r) for r in part.owner_chain] if part is not None else [],
        provenance=dict(part.provenance) if part is not None else {},
        notes=notes,
        decidedAt=timestamp(rec.decided_at),
        lastError=pod_last_error(rec),
        patched=patch_state(rec.patched),
        status=status,
        workloadGroup=group,
    )


__all__ = ["decision_record", "definition_ref", "owner_ref_view", "patch_state", "pod_decision", "pod_last_error"]
