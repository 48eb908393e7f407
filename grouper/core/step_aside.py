"""Step aside for pods that something else already groups (pure: reads the pod, its owners, the lookups).

Kubernetes 1.37 controllers have started to write their own gang objects, and Grove writes KAI PodGroups
itself. A grouper that also groups their pods gives them a second group. The rules, in the order
:meth:`grouper.core.grouping.Grouper._decide` applies them:

1. **Skip markers — always step aside, both backends** (reason ``SkipAnnotation``, ``PodGangIgnored``):
   annotation ``kai.scheduler/skip-podgrouper: "true"`` on the pod or any owner (KAI's rule; Grove sets it
   on every pod it prepares), and annotation ``grove.io/ignore: "true"`` on the Grove PodGang the pod's
   label ``grove.io/podgang`` names (Grove's KAI backend sets it on PodGangs whose KAI PodGroup Grove
   writes itself; the PodGang is not an owner of the pod, so the owner walk alone would not see it).
2. **Upstream groups — step aside with the upstream backend, note with the KAI backend**
   (reason ``GroupedByController``):

   - an owner whose kind has a native ``spec.scheduling`` (table :data:`SCHEDULING_FIELDS`) with the
     field present — even ``{}``: JobSet and LWS default an empty block to a gang;
   - an owner of a KubeRay kind labelled ``ray.io/gang-scheduling-enabled: "true"``, read as KubeRay's
     ``KubernetesWAS`` gang: we cannot see the operator's feature gate and assume it is on (for pods of
     the default scheduler it is the only KubeRay integration that honours the label: KubeRay keeps it
     exclusive with its Volcano/YuniKorn/KAI/scheduler-plugins integrations, which use their own
     scheduler names). A RayCluster labelled so on an operator without the gate stays ungrouped;
   - a pod whose ``spec.schedulingGroup`` names an upstream PodGroup other than the one this grouper
     would give it (our own webhook sets it to our name; the field is immutable, so the pod can never
     join our group). Checked after the plugin named the pod's group (:func:`foreign_group`).

   With the upstream backend writing a Workload/PodGroup for such a pod would be a second gang object
   for the same pods. With the KAI backend the pod still needs a KAI PodGroup: KAI's scheduler does not
   read ``scheduling.k8s.io`` groups, and the grouper only handles pods of its own ``--scheduler-name``
   (kube-scheduler never sees them, so the upstream group is inert). The KAI backend therefore keeps
   grouping such pods and says so in the decision's notes; mark the pod or an owner
   ``kai.scheduler/skip-podgrouper: "true"`` to leave it alone.

Kubeflow Trainer (KEP-3015) keeps ``spec.scheduling`` on the TrainingRuntime / ClusterTrainingRuntime,
which is not in the pod's owner chain: its pods are recognised by the ``spec.schedulingGroup`` the
TrainJob controller sets on them at creation (rule 2, third case). Trainer v2.1.0 (the release the operator
tests run) has neither: its own gang is the runtime's ``podGroupPolicy`` — ``coscheduling`` (a
scheduler-plugins ``scheduling.x-k8s.io`` PodGroup and the pod label ``scheduling.x-k8s.io/pod-group``) or
``volcano`` (a Volcano PodGroup and the pod annotation ``scheduling.k8s.io/group-name``). Neither KAI's
scheduler nor kube-scheduler reads those, so no rule steps aside for them: the grouper's group is the only
one the pod's scheduler sees (tests/operators/test_trainer_operator*.py, both backends).
"""

from __future__ import annotations

from dataclasses import dataclass

from grouper.core.lookups import Lookups
from grouper.model import objects as o
from grouper.model.errors import LookupForbidden
from grouper.model.objects import GVK, Obj
from grouper.model.podgroup import OWN_SCHEDULING_GROUP_ANNOTATION

SKIP_ANNOTATION = "kai.scheduler/skip-podgrouper"
PODGANG_LABEL = "grove.io/podgang"  # as the Grove plugin reads it (grouper/plugins/grove.py)
PODGANG_API_VERSION = "scheduler.grove.io/v1alpha1"
GROVE_IGNORE_ANNOTATION = "grove.io/ignore"
RAY_GANG_LABEL = "ray.io/gang-scheduling-enabled"
RAY_KINDS = frozenset({("ray.io", "RayCluster"), ("ray.io", "RayJob"), ("ray.io", "RayService")})

# Owner kinds whose controller writes Workload/PodGroup objects from a native ``spec.scheduling`` (the
# field's presence is the switch), with where that is defined:
# - batch/v1 Job ``spec.scheduling`` (JobSchedulingConfiguration), gate WorkloadWithJob, alpha in 1.36:
#   k8s.io/api v0.37 batch/v1/types.go; the API server drops the field while its gate is off, so a stored
#   Job that has it was admitted with the gate on;
# - JobSet ``spec.scheduling`` (JobSetScheduling), JobSet gate JobSetWorkloadAwareSchedulingAPI,
#   kubernetes-sigs/jobset keps/969-WAS-integration (not in JobSet v0.11.0, whose CRD prunes it);
# - LeaderWorkerSet ``spec.scheduling``, LWS gate WorkloadAwareScheduling, kubernetes-sigs/lws
#   keps/666-gang-scheduling-in-lws (``{}`` selects one gang per replica).
SCHEDULING_FIELDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("batch", "Job"): ("spec", "scheduling"),
    ("jobset.x-k8s.io", "JobSet"): ("spec", "scheduling"),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): ("spec", "scheduling"),
}

SKIP_REASON = "SkipAnnotation"
PODGANG_REASON = "PodGangIgnored"
CONTROLLER_REASON = "GroupedByController"
# Every reason a decision steps aside with (the label values of podgrouper_pods_stepped_aside_total).
STEP_ASIDE_REASONS = frozenset({SKIP_REASON, PODGANG_REASON, CONTROLLER_REASON})


@dataclass(frozen=True)
class StepAside:
    """Why the grouper writes nothing for a pod: a bounded ``reason`` and a ``message`` naming the object
    and the field that made it step aside."""

    reason: str
    message: str


def marked(obj: Obj) -> bool:
    """``kai.scheduler/skip-podgrouper: "true"`` on ``obj`` (exactly "true", as KAI compares it)."""
    return o.annotations(obj).get(SKIP_ANNOTATION) == "true"


def owner_marker(owners: list[Obj]) -> StepAside | None:
    """Rule 1 (both backends), owner part: the first owner (direct owner first) with the skip annotation. The
    pod's own annotation is checked before its owners are resolved, the owners' part once per owner chain, and
    the pod's PodGang after it (:func:`podgang_marker`; see ``Grouper._decide``)."""
    for owner in owners:
        if marked(owner):
            return StepAside(SKIP_REASON, f"{o.describe(owner)} has annotation {SKIP_ANNOTATION}=true")
    return None


def podgang_marker(pod: Obj, lookups: Lookups) -> StepAside | None:
    """Rule 1, pod part: the pod's Grove PodGang, when it says Grove writes the KAI PodGroup."""
    gang_name = o.labels(pod).get(PODGANG_LABEL)
    if isinstance(gang_name, str) and gang_name:  # any other value: the Grove plugin names the bad label
        try:
            gang = lookups.get(PODGANG_API_VERSION, "PodGang", o.namespace(pod), gang_name)
        except LookupForbidden:
            gang = None  # the Grove plugin reads it too and reports the denial
        if gang is not None and o.annotations(gang).get(GROVE_IGNORE_ANNOTATION) == "true":
            return StepAside(
                PODGANG_REASON,
                f"PodGang {o.namespace(pod)}/{gang_name} (pod label {PODGANG_LABEL}) has annotation "
                f"{GROVE_IGNORE_ANNOTATION}=true: Grove writes its KAI PodGroup",
            )
    return None


def controller_groups(owners: list[Obj], *, ray_label: bool = True) -> StepAside | None:
    """Rule 2, owner part: the first owner (direct owner first) whose controller writes upstream groups.
    ``ray_label``: read KubeRay's gang label (the upstream backend only: with the KAI backend the label
    belongs to KubeRay's KAI integration or to none, and KubeRay's own upstream gang, if any, shows in the
    pods' ``spec.schedulingGroup``)."""
    for owner in owners:
        gvk = GVK.of(owner)
        path = SCHEDULING_FIELDS.get((gvk.group, gvk.kind))
        if path is not None and _present(owner, path):
            return StepAside(
                CONTROLLER_REASON,
                f"{o.describe(owner)} sets {'.'.join(path)}: its controller writes the scheduling.k8s.io "
                "Workload and PodGroups of its pods",
            )
        if ray_label and (gvk.group, gvk.kind) in RAY_KINDS and o.labels(owner).get(RAY_GANG_LABEL) == "true":
            return StepAside(
                CONTROLLER_REASON,
                f"{o.describe(owner)} has label {RAY_GANG_LABEL}=true: KubeRay (gate KubernetesWAS, assumed on) "
                "writes the scheduling.k8s.io Workload and PodGroup of its pods",
            )
    return None


def upstream_group(pod: Obj) -> str:
    """The upstream PodGroup ``spec.schedulingGroup.podGroupName`` names ("" when the pod has none)."""
    group = o.dig(pod, "spec", "schedulingGroup")
    if not isinstance(group, dict):
        return ""
    name = group.get("podGroupName")
    return name if isinstance(name, str) and name else "(unnamed)"


def foreign_group(pod: Obj, ours: str | None) -> StepAside | None:
    """Rule 2, pod part: the pod is already in an upstream group that is not ``ours`` (None: the grouper
    could not name one)."""
    theirs = upstream_group(pod)
    if not theirs or theirs == ours or o.annotations(pod).get(OWN_SCHEDULING_GROUP_ANNOTATION) == theirs:
        return None  # none, the one we would give, or one our webhook gave it (decided again: ours to change)
    return StepAside(
        CONTROLLER_REASON,
        f"pod {o.namespace(pod)}/{o.name(pod)} has spec.schedulingGroup.podGroupName={theirs} (set by its "
        "controller or at creation; immutable)" + (f", not this grouper's {ours}" if ours else ""),
    )


def kai_note(found: StepAside) -> str:
    """What the KAI backend says when it groups a pod the upstream backend would step aside for."""
    return (
        f"also in an upstream group: {found.message}. KAI's scheduler does not read scheduling.k8s.io groups, "
        f"so the pod is grouped for KAI as well; annotate the pod or an owner {SKIP_ANNOTATION}=true to leave it"
    )


def _present(obj: Obj, path: tuple[str, ...]) -> bool:
    cur: object = obj
    for step in path:
        if not isinstance(cur, dict) or cur.get(step) is None:
            return False
        cur = cur[step]
    return True
