"""Settings that change grouping decisions (a subset of the command-line flags)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields


@dataclass(frozen=True)
class GroupingConfig:
    scheduler_name: str = "kai-scheduler"
    queue_label_key: str = "kai.scheduler/queue"
    nodepool_label_key: str = "kai.scheduler/node-pool"
    knative_gang_schedule: bool = True
    # KAI v0.18 ``--deployment-gang-schedule`` / Config ``gangScheduleDeployment``: one PodGroup per
    # Deployment (False: one per pod, the v0.17 behaviour).
    deployment_gang_schedule: bool = True
    generic_karta_fallback: bool = True
    # KAI's legacy-shape paths (pre-existing flat PodGroups) for batch Job, JobSet and Ray.
    search_legacy_pg: bool = True
    default_priorities_configmap_name: str = ""
    default_priorities_configmap_namespace: str = ""
    # What the grouper writes: "kai" (KAI PodGroups) or "upstream" (scheduling.k8s.io Workload + PodGroups).
    # It changes one rule: a pod already in an upstream group is stepped aside for only with the upstream
    # backend (core/step_aside.py).
    backend: str = "kai"
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_flags(cls, source: object) -> GroupingConfig:
        """The config from the same-named attributes of ``source`` (parsed flags, ``RunSettings``).

        ``extra`` is not a flag and stays empty.
        """
        return cls(**{f.name: getattr(source, f.name) for f in fields(cls) if f.name != "extra"})
