"""Requested resources of a pod (or pod template): GPUs, CPU millicores, memory bytes.

The rule follows the scheduler's pod request:

* a container's request for a resource falls back to its limit when only the limit is set;
* init containers run one at a time, restartable ("sidecar") init containers keep running: the pod
  needs max(each regular init container + the sidecars started before it, all containers + all
  sidecars) - with no regular init container after a sidecar this is max(largest init container,
  containers + sidecar inits);
* pod-level ``spec.resources`` (requests, else limits) replace the CPU/memory sum; a GPU count
  there (only templates assembled from a fragmented definition have one, where ``resourcesPath``
  stands for the workload's main container) replaces the GPU sum;
* ``spec.overhead`` is added.

GPU = ``nvidia.com/gpu``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grouper.describe.quantity import to_millis, to_units

GPU = "nvidia.com/gpu"


@dataclass(frozen=True)
class Resources:
    gpus: int = 0
    cpu_millis: int = 0
    memory_bytes: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.gpus + other.gpus,
            self.cpu_millis + other.cpu_millis,
            self.memory_bytes + other.memory_bytes,
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.gpus - other.gpus,
            self.cpu_millis - other.cpu_millis,
            self.memory_bytes - other.memory_bytes,
        )

    def times(self, n: int) -> Resources:
        return Resources(self.gpus * n, self.cpu_millis * n, self.memory_bytes * n)

    def max(self, other: Resources) -> Resources:
        return Resources(
            max(self.gpus, other.gpus),
            max(self.cpu_millis, other.cpu_millis),
            max(self.memory_bytes, other.memory_bytes),
        )

    def to_dict(self) -> dict[str, int]:
        return {"gpus": self.gpus, "cpuMillis": self.cpu_millis, "memoryBytes": self.memory_bytes}


ZERO = Resources()


def _value(res: Any, name: str, convert: Any) -> int | None:
    """``requests[name]``, else ``limits[name]``, converted; None when neither is a quantity."""
    if not isinstance(res, dict):
        return None
    for part in ("requests", "limits"):
        section = res.get(part)
        if isinstance(section, dict) and section.get(name) is not None:
            try:
                return int(convert(section[name]))
            except ValueError:
                return None
    return None


def container_request(container: Any) -> Resources:
    """One container's request (limits stand in for missing requests)."""
    res = container.get("resources") if isinstance(container, dict) else None
    return Resources(
        _value(res, GPU, to_units) or 0,
        _value(res, "cpu", to_millis) or 0,
        _value(res, "memory", to_units) or 0,
    )


def _list(spec: dict[str, Any], key: str) -> list[Any]:
    v = spec.get(key)
    return v if isinstance(v, list) else []


def pod_request(spec: Any) -> Resources:
    """The scheduler's request for a PodSpec (see the module docstring)."""
    if not isinstance(spec, dict):
        return ZERO
    containers = ZERO
    for c in _list(spec, "containers"):
        containers = containers + container_request(c)
    sidecars = ZERO
    init_peak = ZERO
    for c in _list(spec, "initContainers"):
        req = container_request(c)
        if isinstance(c, dict) and c.get("restartPolicy") == "Always":
            sidecars = sidecars + req
            init_peak = init_peak.max(sidecars)
        else:
            init_peak = init_peak.max(req + sidecars)
    total = init_peak.max(containers + sidecars)
    pod_level = spec.get("resources")
    cpu = _value(pod_level, "cpu", to_millis)
    mem = _value(pod_level, "memory", to_units)
    gpus = _value(pod_level, GPU, to_units)
    total = Resources(
        gpus if gpus is not None else total.gpus,
        cpu if cpu is not None else total.cpu_millis,
        mem if mem is not None else total.memory_bytes,
    )
    overhead = spec.get("overhead")
    if isinstance(overhead, dict):
        total = total + container_request({"resources": {"requests": overhead}})
    return total
