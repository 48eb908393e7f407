"""Workload Map v0.2.9 parity of the shipped catalog.

- A definition we ship must evaluate the same under KAI's pinned Karta library, which decodes every
  scale value into an int32 and rejects strings ("cannot unmarshal string into Go value of type int32"):
  every scale path yields numbers (or null) on every fixture, and on annotated variants.
- The batch Job entry carries upstream's SuccessCriteriaMet / FailureTarget / Degraded mappings.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jq
import pytest

from grouper.model.objects import GVK

from .workloads import FIXTURES, catalog, evaluator, fixture

FIXTURE_FILES = sorted(str(p.relative_to(FIXTURES)) for p in FIXTURES.glob("*/*.yaml"))


def _scale_outputs(workload: dict[str, Any]) -> list[tuple[str, str, Any]]:
    defn = catalog()[GVK.of(workload)]
    out = []
    for comp in defn.components():
        if comp.scale is None:
            continue
        for field, expr in comp.scale.paths().items():
            for value in jq.compile(expr).input_value(workload).all():
                out.append((comp.name, field, value))
    return out


@pytest.mark.parametrize("rel", FIXTURE_FILES)
def test_scale_paths_yield_numbers_not_strings(rel: str) -> None:
    fx = fixture(rel)
    for comp, field, value in _scale_outputs(fx.workload):
        assert value is None or (isinstance(value, int | float) and not isinstance(value, bool)), (
            f"{rel}: {comp}.{field} yields {value!r}; KAI's Karta library needs a number"
        )


@pytest.mark.parametrize(("rel", "annotations", "want"), [
    ("job/running.yaml", {"kai.scheduler/batch-min-member": "3"}, 3),
    ("job/running.yaml", {}, 1),
    ("deployment/running.yaml", {"kai.scheduler/batch-min-member": "2"}, 2),
    ("statefulset/running.yaml", {"kai.scheduler/batch-min-member": "2"}, 2),
])
def test_annotation_minimums_are_numbers(rel: str, annotations: dict[str, str], want: int) -> None:
    obj = copy.deepcopy(fixture(rel).workload)
    obj["metadata"]["annotations"] = annotations
    obj["metadata"]["resourceVersion"] = f"min-{want}-{len(annotations)}"
    mins = [v for comp, field, v in _scale_outputs(obj) if field == "minReplicas"]
    assert mins == [want] and isinstance(mins[0], int)


def test_statefulset_min_member_only_with_parallel() -> None:
    obj = copy.deepcopy(fixture("statefulset/running.yaml").workload)
    obj["metadata"]["annotations"] = {"kai.scheduler/min-member": "3", "kai.scheduler/batch-min-member": "2"}
    ordered = [v for _, f, v in _scale_outputs(obj) if f == "minReplicas"]
    obj["spec"]["podManagementPolicy"] = "Parallel"
    parallel = [v for _, f, v in _scale_outputs(obj) if f == "minReplicas"]
    assert (ordered, parallel) == ([2], [3])


def _job(conditions: list[dict[str, str]], **status: Any) -> dict[str, Any]:
    obj = copy.deepcopy(fixture("job/running.yaml").workload)
    obj["status"] = {"conditions": conditions, **status}
    # the evaluator caches per (uid, resourceVersion): every variant is a new version
    obj["metadata"]["resourceVersion"] = f"st-{conditions}-{sorted(status.items())}"
    return obj


JOB = GVK("batch", "v1", "Job")


@pytest.mark.parametrize(("conditions", "status", "primary"), [
    # Kubernetes >= 1.31 sets SuccessCriteriaMet / FailureTarget first, Complete / Failed once pods are gone
    ([{"type": "SuccessCriteriaMet", "status": "True"}], {"active": 1, "ready": 1}, "Completed"),
    ([{"type": "FailureTarget", "status": "True"}], {"active": 1, "ready": 1}, "Failed"),
    ([{"type": "Complete", "status": "True"}, {"type": "SuccessCriteriaMet", "status": "True"}], {}, "Completed"),
    ([{"type": "Failed", "status": "True"}, {"type": "FailureTarget", "status": "True"}], {"failed": 3}, "Failed"),
    ([], {"active": 2, "ready": 1, "succeeded": 1}, "Running"),
    ([], {}, "Initializing"),
])
def test_job_status_mappings(conditions: list[dict[str, str]], status: dict[str, Any], primary: str) -> None:
    result = evaluator(JOB).status(_job(conditions, **status))
    assert result.primary == primary


def test_job_degraded_when_parallel_pods_finish_unevenly() -> None:
    """Upstream's Degraded rule: parallelism > 1, fewer ready than parallelism, some pods already done."""
    result = evaluator(JOB).status(_job([], active=2, ready=2, succeeded=1))
    assert "Degraded" in result.matched and result.primary == "Running"


def test_definitions_dir_is_what_the_tests_load() -> None:
    assert Path(catalog()[JOB].origin.split(":", 1)[-1]).name == "batch-job-v1.yaml"


@pytest.mark.parametrize(("rel", "path"), [
    ("raycluster/running.yaml", ("spec",)),
    ("rayjob/running.yaml", ("spec", "rayClusterSpec")),
    ("rayservice/running.yaml", ("spec", "rayClusterConfig")),
])
def test_ray_without_worker_groups_groups_the_head_pod(rel: str, path: tuple[str, ...]) -> None:
    """As upstream: a Ray cluster with no worker groups is a gang of its head pod (no error)."""
    from grouper.karta import apply_gang
    from grouper.model.objects import name

    from .workloads import base_metadata, definition_for

    fx = fixture(rel)
    obj = copy.deepcopy(fx.workload)
    spec = obj
    for step in path:
        spec = spec[step]
    spec.pop("workerGroupSpecs", None)
    obj["metadata"]["resourceVersion"] = "no-workers"
    heads = [p for p in fx.pods if (p["metadata"].get("labels") or {}).get("ray.io/node-type") == "head"]
    assert heads
    for pod in heads:
        pg = apply_gang(definition_for(obj), evaluator(GVK.of(obj)), obj, pod, base_metadata(obj))
        assert pg is not None and pg.min_member == 1, name(pod)
