"""Response models of the HTTP API (pydantic), so the OpenAPI schema describes every body exactly.

Field names are camelCase like the Kubernetes objects they describe. Nothing here carries a Secret, an
environment value or a pod spec: pods appear as name, phase, node and the labels grouping reads.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["leader", "standby", "single"]

ERRORS_LIMIT = 100  # entries of PodGroupList.errors
ERROR_PODS_LIMIT = 20  # pod names per WorkloadError


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ------------------------------------------------------------------------------------------ errors


class ErrorResponse(_Model):
    """Every 4xx body: a sentence saying what was wrong, and for 422 the offending parameters."""

    detail: str
    errors: list[dict[str, Any]] | None = None


# ------------------------------------------------------------------------------------------ health


class Check(_Model):
    name: str
    ok: bool
    message: str


class HealthResponse(_Model):
    """``/healthz`` and ``/readyz``: ``status`` is ``ok`` or ``failing``; ``checks`` says which check failed."""

    status: Literal["ok", "failing"]
    role: Role | None = None
    checks: list[Check]


# ------------------------------------------------------------------------------------------ gang state


GangStateName = Literal["Grouping", "Waiting", "Admitted", "Degraded", "Error"]


class GangReasonView(_Model):
    """One thing the scheduler said, verbatim (:class:`grouper.core.gang_state.SchedulerReason`)."""

    source: Literal["PodGroup", "Pod"]
    reason: str
    message: str
    type: str = Field("", description="Condition type, e.g. UnschedulableOnNodePool or PodScheduled")
    nodePool: str = ""
    pods: list[str] = Field(default_factory=list, description="Pods carrying this reason (source Pod)")
    since: str | None = Field(None, description="RFC 3339 lastTransitionTime of the condition")


class GangSubGroupView(_Model):
    name: str
    parent: str | None
    required: int
    present: int
    scheduled: int
    satisfied: bool


class GangView(_Model):
    """A PodGroup's gang state (:mod:`grouper.core.gang_state`), as the controller last derived it."""

    podGroup: str
    state: GangStateName
    since: str = Field(description="RFC 3339 time the current state began")
    secondsInState: float
    required: int = Field(description="Fewest scheduled pods that satisfy the gang's minimums")
    present: int = Field(description="Pods of the gang not being deleted")
    scheduled: int = Field(description="Pods of the gang bound to a node")
    queue: str
    requestedGPUs: float
    admittedAt: str | None = Field(None, description="RFC 3339 time of the first admission")
    timeToAdmissionSeconds: float | None = Field(None, description="First pod's creation to first admission")
    reasons: list[GangReasonView] = Field(default_factory=list)
    subGroups: list[GangSubGroupView] = Field(default_factory=list)
    error: str = ""


# ------------------------------------------------------------------------------------------ podgroups


class WorkloadRef(_Model):
    apiVersion: str
    kind: str
    name: str


class WorkloadGroupCondition(_Model):
    type: str = Field(description="InputsResolved, Rendered or Active")
    status: str
    reason: str
    message: str


class WorkloadGroupView(_Model):
    """The WorkloadGroup a workload is a member of (docs/workload-groups.md): its gang is the group's."""

    name: str
    expectedWorkloads: int | None = Field(description="spec.expectedWorkloads: the group is complete with these")
    members: list[WorkloadRef] = Field(description="status.observedMembers: the workloads the group found")
    state: Literal["Rendered", "Pending", "Invalid", "Unknown"] = Field(
        description="Rendered (complete and valid), Pending (workloads or their pods still missing), Invalid "
        "(an error: message), Unknown (no status written yet)")
    gangState: GangStateName | None = Field(
        description="The member's gang state: the worst of the rendered gang's, Error when the group is invalid, "
        "Grouping while it is not rendered")
    podGroup: str = Field(description="The group's rendered PodGroup (status.renderedPodGroupRef), or the name its "
                          "members' pods wait on until it is written (the gate)")
    rendered: bool
    message: str = Field("", description="Why it is not rendered: the InputsResolved condition's message")
    conditions: list[WorkloadGroupCondition] = Field(default_factory=list)


class DefinitionRef(_Model):
    name: str
    origin: str


class PodGroupSummary(_Model):
    name: str
    namespace: str
    workload: WorkloadRef
    plugin: str | None
    definition: DefinitionRef | None
    queue: str | None
    minMember: int | None = None
    minSubGroup: int | None = None
    podsAssigned: int
    workloadStatus: str | None = Field(
        None, description="Primary status of the workload as its Karta definition maps it (e.g. Running)"
    )
    gang: GangView | None = Field(default=None, description="The gang's state; absent until the controller derived it")


class WorkloadError(_Model):
    """A workload whose pods failed to group and that has no PodGroup among the listed items.

    One per workload (top owner); a pod whose owners cannot be resolved (e.g. ``OwnerNotFound``) is its own
    workload (``v1`` ``Pod``). ``reason`` and ``message`` are those of its newest failing pod decision.
    """

    workload: WorkloadRef
    namespace: str
    reason: str = Field(description="Bounded reason token of the decision error, e.g. InvalidWorkload")
    message: str = Field(description="The decision's message; it names the object and the field at fault")
    time: str | None = Field(None, description="RFC 3339 time the error was last seen")
    pods: list[str] = Field(description=f"Names of the failing pods, sorted, at most {ERROR_PODS_LIMIT}")
    podCount: int = Field(description="How many pods of the workload failed (may exceed len(pods))")


class PodGroupList(_Model):
    items: list[PodGroupSummary]
    errors: list[WorkloadError] = Field(
        default_factory=list,
        description="Workloads that failed to group and have no PodGroup among the items of this query (on any "
        "page), and workloads a PodGroup or pod write of which the API server refused (a PodGroup never written "
        "is not among the items). Only the namespace and kind filters apply to them (plugin, queue and labelSelector describe a "
        f"PodGroup they lack). Not paginated: the same on every page, sorted by namespace, kind and name, at most "
        f"{ERRORS_LIMIT} entries.",
    )
    continue_: str | None = Field(
        None, alias="continue", description="Opaque token for the next page; absent on the last page"
    )
    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)


class PodInfo(_Model):
    """What the API tells about a pod: never its spec, environment or annotations."""

    name: str
    phase: str | None
    node: str | None
    subGroup: str | None
    labels: dict[str, str] = Field(default_factory=dict, description="Only the labels grouping reads")


class SubGroupView(_Model):
    name: str
    parent: str | None
    minMember: int | None
    minSubGroup: int | None
    topologyConstraint: dict[str, str] | None
    required: int | None = Field(None, description="minMember for a leaf, minSubGroup for a mid-level group")
    present: int = Field(description="Pods assigned to this sub-group (leaf) or child groups present (mid-level)")
    pods: list[str]


class LastError(_Model):
    reason: str
    message: str
    time: str | None = Field(None, description="RFC 3339 time of the failure")


class OwnerRefView(_Model):
    apiVersion: str
    kind: str
    name: str
    uid: str


class DecisionRecord(_Model):
    """Why the PodGroup looks the way it does (the per-PodGroup view of ``Decision.to_record()``)."""

    topOwner: OwnerRefView | None
    ownerChain: list[OwnerRefView]
    plugin: str | None
    definition: DefinitionRef | None
    provenance: dict[str, str] = Field(description="field -> where its value came from")
    notes: list[str]
    lastError: LastError | None


class PodRef(_Model):
    namespace: str
    name: str
    uid: str | None = None


class PatchState(_Model):
    result: str
    at: str | None = None


class PodDecision(_Model):
    """One pod's decision record (``Decision.to_record()``) as the controller last made it."""

    pod: PodRef
    outcome: Literal["grouped", "skipped", "error", "failed"] | None = Field(
        description="failed: grouped as decided, but the API server refused the PodGroup write or the pod's "
        "patch (lastError has its message)"
    )
    reason: str
    message: str
    podGroup: str | None
    subGroup: str | None
    plugin: str | None
    definition: DefinitionRef | None
    topOwner: OwnerRefView | None
    ownerChain: list[OwnerRefView]
    provenance: dict[str, str]
    notes: list[str]
    decidedAt: str | None
    lastError: LastError | None
    patched: PatchState | None = Field(None, description="Last patch of the pod's annotation / sub-group label")
    status: PodInfo
    workloadGroup: WorkloadGroupView | None = Field(
        None, description="The WorkloadGroup its workload is a member of: the pod is held for the group's PodGroup")


class PodGroupDetail(_Model):
    name: str
    namespace: str
    workload: WorkloadRef
    workloadStatus: str | None
    podGroup: dict[str, Any] = Field(description="The PodGroup as decided (apiVersion, kind, metadata, spec)")
    storedResourceVersion: str | None = Field(None, description="resourceVersion of the stored PodGroup, if known")
    required: int | None = Field(description="spec.minMember (pods) or spec.minSubGroup (sub-groups)")
    requiredUnit: Literal["pods", "subGroups"]
    present: int
    subGroups: list[SubGroupView]
    pods: list[PodInfo]
    decision: DecisionRecord
    gang: GangView | None = Field(default=None, description="The gang's state; absent until the controller derived it")


# ------------------------------------------------------------------------------------------ workloads


class EventView(_Model):
    """An Event the grouper sent about the workload (``GangAdmitted``, ``GangDegraded``, a grouping failure)."""

    reason: str
    type: str = Field(description="Normal or Warning")
    message: str
    firstTime: str
    lastTime: str
    count: int


class WorkloadDescribe(_Model):
    workload: WorkloadRef
    namespace: str
    source: Literal["cache", "live"]
    definition: DefinitionRef | None
    status: str | None
    podGroups: list[str]
    describe: dict[str, Any] | None = Field(
        None, description="The describe tree (grouper.describe) when a Karta definition maps the kind"
    )
    describeError: str | None = None
    pods: list[PodInfo]
    workloadGroup: WorkloadGroupView | None = Field(
        None, description="The WorkloadGroup it is a member of (podGroups then names the group's rendered one)")
    events: list[EventView] = Field(
        default_factory=list,
        description="The newest Events this replica of the grouper sent about the workload, newest first (a "
        "standby sends none); the grouper holds no right to list the others' (kubectl events shows them)")


class WorkloadComponent(_Model):
    name: str = Field(description="A component instance of the describe view's Resources table (e.g. leader)")
    replicas: int = Field(description="Desired replicas (pods)")


class WorkloadSummaryView(_Model):
    namespace: str
    name: str
    kind: str
    apiVersion: str
    createdAt: str | None
    phases: list[str] = Field(description="Matched status phases (Karta definition); empty without one")
    components: list[WorkloadComponent]
    gpus: int = Field(description="Requested GPUs: desired replicas x pod template, else what the pods request")
    pods: int
    definition: str | None
    origin: str | None
    warnings: list[str]
    state: GangStateName | None = Field(
        None, description="The workload's gang state: the worst of its PodGroups' (Error, Degraded, Waiting, "
        "Grouping, Admitted)")
    gangs: list[GangView] = Field(default_factory=list, description="One per PodGroup of the workload (of its "
                                  "WorkloadGroup's rendered gang for a member)")
    workloadGroup: WorkloadGroupView | None = Field(
        None, description="The WorkloadGroup it is a member of: its gang is the group's (absent: in none)")


class WorkloadList(_Model):
    items: list[WorkloadSummaryView]
    count: int


# ------------------------------------------------------------------------------------------ definitions


class GVKView(_Model):
    group: str
    version: str
    kind: str


class DefinitionIssue(_Model):
    field: str
    message: str
    expression: str | None = None


class DefinitionView(_Model):
    name: str
    origin: str
    gvk: GVKView
    valid: bool
    active: bool = Field(
        description="The definition resolved for its kind: it groups that kind when no native plugin does, "
        "and it gives status and describe trees"
    )
    notUsedReason: str | None = Field(None, description="Why an inactive definition is not used")
    quarantine: str | None = Field(
        None, description="Why its jq is no longer run (it kept timing out in its sandbox) until the definition changes"
    )
    errors: list[DefinitionIssue]
    warnings: list[DefinitionIssue]
    resourceVersion: str | None = None


class DefinitionList(_Model):
    items: list[DefinitionView]
