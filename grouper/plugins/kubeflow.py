"""Kubeflow distributed training jobs: TFJob, XGBoostJob and JAXJob, plus the min-member rule
that MPIJob and PyTorchJob build on (KAI's ``plugins/kubeflow/distributed_common.go``).

minMember = ``spec.runPolicy.schedulingPolicy.minAvailable`` when present; otherwise the sum of
``replicas`` over every entry of ``spec.<replicaSpecs>``, where each entry must have ``replicas`` > 0
and the plugin's mandatory replica specs must exist. Everything else is the default grouper's.

Choices where KAI is loose:
- Like KAI, an explicit ``minAvailable`` skips the replica checks (PyTorch relies on this for a job
  with 0 workers); unlike KAI it must be an integer >= 0 (KAI copies any int, even negative).
- ``replicas`` must be an integer > 0 (KAI rejects 0 and missing, but lets negatives through as long
  as the total stays positive). Integers follow ``common.int_spec_field`` (an int or a numeric string,
  int32 range).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from grouper.core.context import GroupingContext
from grouper.model.errors import InvalidWorkload
from grouper.model.objects import Obj, describe
from grouper.model.podgroup import PodGroupMetadata
from grouper.plugins.common import int_spec_field, spec_field
from grouper.plugins.default import default_metadata
from grouper.plugins.segments import map_field

MIN_AVAILABLE_PATH = ("spec", "runPolicy", "schedulingPolicy", "minAvailable")


def min_available_override(top_owner: Obj) -> int | None:
    """``spec.runPolicy.schedulingPolicy.minAvailable`` (>= 0), or None when unset."""
    return int_spec_field(top_owner, *MIN_AVAILABLE_PATH, minimum=0)


def replica_specs(top_owner: Obj, field: str) -> dict[str, object]:
    """``spec.<field>``; missing is an error naming the field."""
    specs = map_field(top_owner, "spec", field)
    if specs is None:
        raise InvalidWorkload(
            f"the job has no {field} field; please fix the replica specs", obj=describe(top_owner),
            field=f"spec.{field}",
        )
    return specs


def replicas_of(top_owner: Obj, field: str, spec_name: str) -> int:
    """``spec.<field>.<spec_name>.replicas``, which must be an integer > 0."""
    value = int_spec_field(top_owner, "spec", field, spec_name, "replicas")
    if value is None or value <= 0:
        raise InvalidWorkload(
            f"replicas is {value if value is not None else 'missing'}; the job doesn't allow for 0 "
            f"{spec_name} pods, it must be > 0",
            obj=describe(top_owner),
            field=f"spec.{field}.{spec_name}.replicas",
        )
    return value


def sum_of_replicas(top_owner: Obj, field: str, mandatory: tuple[str, ...] = ()) -> int:
    """Total pods over all replica specs; every spec needs replicas > 0, mandatory specs must exist."""
    specs = replica_specs(top_owner, field)
    for spec_name in mandatory:
        if spec_name not in specs:
            raise InvalidWorkload(
                f"the job doesn't have a {spec_name} replica spec, which is required",
                obj=describe(top_owner), field=f"spec.{field}.{spec_name}",
            )
    return sum(replicas_of(top_owner, field, spec_name) for spec_name in specs)


def distributed_min_member(top_owner: Obj, field: str, mandatory: tuple[str, ...] = ()) -> tuple[int, str]:
    """(minMember, where it came from) per the Kubeflow distributed rule."""
    override = min_available_override(top_owner)
    if override is not None:
        return override, f"{spec_field(*MIN_AVAILABLE_PATH)} on {describe(top_owner)}"
    return sum_of_replicas(top_owner, field, mandatory), f"sum of spec.{field}[*].replicas on {describe(top_owner)}"


@dataclass
class KubeflowDistributedGrouper:
    """TFJob / XGBoostJob / JAXJob: default grouper plus the distributed min-member rule."""

    replica_specs_field: str
    mandatory: tuple[str, ...] = ()
    name: str = "Kubeflow Distributed Grouper"
    label_keys: ClassVar[frozenset[str]] = frozenset()  # the pod labels it reads besides DefaultGrouper's

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata:
        md = default_metadata(ctx)
        md.min_member, source = distributed_min_member(ctx.top_owner, self.replica_specs_field, self.mandatory)
        md.provenance["minMember"] = source
        return md


def tensorflow_grouper() -> KubeflowDistributedGrouper:
    return KubeflowDistributedGrouper("tfReplicaSpecs", (), "TensorFlow Grouper")


def xgboost_grouper() -> KubeflowDistributedGrouper:
    return KubeflowDistributedGrouper("xgbReplicaSpecs", ("Master", "Worker"), "XGBoost Grouper")


def jax_grouper() -> KubeflowDistributedGrouper:
    return KubeflowDistributedGrouper("jaxReplicaSpecs", ("Worker",), "JAX Grouper")


__all__ = [
    "KubeflowDistributedGrouper",
    "distributed_min_member",
    "jax_grouper",
    "min_available_override",
    "replica_specs",
    "replicas_of",
    "sum_of_replicas",
    "tensorflow_grouper",
    "xgboost_grouper",
]
