"""MPIJob (kubeflow.org v1 and v2beta1), after KAI's ``plugins/kubeflow/mpi/mpi-grouper.go``.

minMember follows the Kubeflow distributed rule over ``spec.mpiReplicaSpecs`` with ``Launcher`` and
``Worker`` mandatory. With ``spec.launcherCreationPolicy: WaitForWorkersReady`` the MPI operator only
creates the launcher after the workers are ready, so while no non-terminating launcher pod exists
(pods labelled ``training.kubeflow.org/job-name=<job>``, ``training.kubeflow.org/job-role=launcher``
without a ``deletionTimestamp``) minMember excludes the Launcher replicas.

Choice: the reduced minMember is clamped at 0 (KAI could produce a negative value when
``minAvailable`` is smaller than the Launcher replicas).
"""

from __future__ import annotations

from grouper.core.context import GroupingContext
from grouper.model.errors import GroupingError, LookupForbidden
from grouper.model.objects import describe, name, namespace
from grouper.model.podgroup import PodGroupMetadata
from grouper.plugins.common import is_being_deleted
from grouper.plugins.default import default_metadata
from grouper.plugins.kubeflow import distributed_min_member, replicas_of
from grouper.plugins.segments import str_field

REPLICA_SPECS = "mpiReplicaSpecs"
LAUNCHER = "Launcher"
WORKER = "Worker"
DELAYED_LAUNCHER_POLICY = "WaitForWorkersReady"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
LAUNCHER_ROLE = "launcher"


class MPIGrouper:
    """MPIJob: distributed min-member, minus the launcher while a delayed launcher does not exist."""

    name = "MPI Grouper"
    label_keys: frozenset[str] = frozenset({JOB_NAME_LABEL, JOB_ROLE_LABEL})  # the pod labels it reads besides DefaultGrouper's

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata:
        job = ctx.top_owner
        md = default_metadata(ctx)
        min_member, source = distributed_min_member(job, REPLICA_SPECS, (LAUNCHER, WORKER))
        policy = str_field(job, "spec", "launcherCreationPolicy")
        if policy == DELAYED_LAUNCHER_POLICY and not self._launcher_exists(ctx):
            launchers = replicas_of(job, REPLICA_SPECS, LAUNCHER)
            min_member = max(0, min_member - launchers)
            source += f", minus {launchers} Launcher replicas (launcherCreationPolicy {policy}, no launcher pod yet)"
        md.min_member = min_member
        md.provenance["minMember"] = source
        return md

    @staticmethod
    def _launcher_exists(ctx: GroupingContext) -> bool:
        job = ctx.top_owner
        selector = {JOB_NAME_LABEL: name(job), JOB_ROLE_LABEL: LAUNCHER_ROLE}
        try:
            pods = ctx.lookups.list("v1", "Pod", namespace(job), selector)
        except LookupForbidden as err:
            raise GroupingError(f"cannot list launcher pods: {err}", obj=describe(job)) from err
        return any(not is_being_deleted(pod) for pod in pods)


__all__ = ["MPIGrouper"]
