"""The outcome of grouping one pod, with the record that explains it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from grouper.model.podgroup import OwnerRef, PodGroupMetadata

Outcome = Literal["grouped", "skipped", "error"]


@dataclass
class Decision:
    pod_namespace: str
    pod_name: str
    pod_uid: str
    outcome: Outcome
    reason: str  # bounded token: "Grouped", a skip reason, or an error reason
    message: str = ""
    pod_group: PodGroupMetadata | None = None
    sub_group: str | None = None
    plugin: str | None = None
    definition: str | None = None
    definition_origin: str | None = None
    owner_chain: list[OwnerRef] = field(default_factory=list)  # direct owner first, top owner last
    top_owner: OwnerRef | None = None
    notes: list[str] = field(default_factory=list)
    retryable: bool = True  # for an error: whether retrying without any object changing can succeed

    @property
    def pod_key(self) -> str:
        return f"{self.pod_namespace}/{self.pod_name}"

    @property
    def provenance(self) -> dict[str, str]:
        return dict(self.pod_group.provenance) if self.pod_group else {}

    def to_record(self) -> dict[str, Any]:
        """JSON-able record for ``/podgroups``, ``grouper explain`` and logs."""
        return {
            "pod": {"namespace": self.pod_namespace, "name": self.pod_name, "uid": self.pod_uid},
            "outcome": self.outcome,
            "reason": self.reason,
            "message": self.message,
            "podGroup": self.pod_group.name if self.pod_group else None,
            "subGroup": self.sub_group,
            "plugin": self.plugin,
            "definition": (
                {"name": self.definition, "origin": self.definition_origin} if self.definition else None
            ),
            "topOwner": self.top_owner.to_dict() if self.top_owner else None,
            "ownerChain": [ref.to_dict() for ref in self.owner_chain],
            "provenance": self.provenance,
            "notes": list(self.notes),
        }
