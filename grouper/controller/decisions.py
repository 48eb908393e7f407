"""What the controller decided and did, per pod, per PodGroup and per workload — for the HTTP API.

Plain dicts (JSON-able) behind a small interface; bounded by the cluster: records are dropped when
their pod or workload disappears. Errors keep their time so ``/podgroups`` can say "failing since".
Only the controller's event loop writes; readers (the API, tests in another thread) get copies.
"""

from __future__ import annotations

import copy
import time
from datetime import UTC, datetime
from typing import Any

from grouper.core.decision import Decision


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


PodKey = tuple[str, str]


class DecisionStore:
    def __init__(self) -> None:
        self._pods: dict[PodKey, dict[str, Any]] = {}
        self._pod_groups: dict[PodKey, dict[str, Any]] = {}
        self._workloads: dict[str, dict[str, Any]] = {}
        self.updated = time.monotonic()

    # ------------------------------------------------------------------ writes (controller)

    def record_decision(self, d: Decision, workload: str) -> None:
        key = (d.pod_namespace, d.pod_name)
        rec = self._pods.get(key, {})
        new = {
            **d.to_record(),
            "workload": workload,
            "decidedAt": _now(),
            "lastError": rec.get("lastError"),
            "lastErrorTime": rec.get("lastErrorTime"),
            "patched": rec.get("patched"),
        }
        if d.outcome == "error":
            new["lastError"], new["lastErrorTime"] = d.message, new["decidedAt"]
        self._pods[key] = new
        self.updated = time.monotonic()

    def record_pod_error(self, namespace: str, name: str, message: str) -> None:
        rec = self._pods.setdefault((namespace, name), {"pod": {"namespace": namespace, "name": name}})
        rec["lastError"], rec["lastErrorTime"] = message, _now()

    def record_pod_patched(self, namespace: str, name: str, result: str) -> None:
        rec = self._pods.get((namespace, name))
        if rec is not None:
            rec["patched"] = {"result": result, "at": _now()}

    def record_pod_group(
        self,
        namespace: str,
        name: str,
        *,
        workload: str,
        desired: dict[str, Any] | None,
        operation: str | None,
        pods: list[str],
        notes: list[str],
        error: str | None = None,
    ) -> None:
        key = (namespace, name)
        rec = self._pod_groups.get(key, {})
        now = _now()
        new = {
            "namespace": namespace,
            "name": name,
            "workload": workload,
            "desired": desired,
            "pods": pods,
            "notes": notes,
            "lastOperation": operation if operation else rec.get("lastOperation"),
            "lastWriteTime": now if operation in ("created", "updated") else rec.get("lastWriteTime"),
            "reconciledAt": now,
            "lastError": error if error else rec.get("lastError"),
            "lastErrorTime": now if error else rec.get("lastErrorTime"),
            "ok": error is None,
        }
        self._pod_groups[key] = new
        self.updated = time.monotonic()

    def record_workload(self, workload: str, **fields: Any) -> None:
        rec = self._workloads.setdefault(workload, {"workload": workload})
        rec.update(fields)
        rec["reconciledAt"] = _now()
        if fields.get("error"):
            rec["lastError"], rec["lastErrorTime"] = fields["error"], rec["reconciledAt"]
        self.updated = time.monotonic()

    def forget_pod(self, namespace: str, name: str) -> None:
        self._pods.pop((namespace, name), None)

    def forget_workload(self, workload: str) -> None:
        self._workloads.pop(workload, None)
        for key in [k for k, v in self._pod_groups.items() if v.get("workload") == workload]:
            del self._pod_groups[key]

    # ------------------------------------------------------------------ reads (API, tests)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        rec = self._pods.get((namespace, name))
        return copy.deepcopy(rec) if rec is not None else None

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return [copy.deepcopy(v) for (ns, _), v in sorted(self._pods.items()) if namespace in (None, ns)]

    def pod_group(self, namespace: str, name: str) -> dict[str, Any] | None:
        rec = self._pod_groups.get((namespace, name))
        return copy.deepcopy(rec) if rec is not None else None

    def pod_groups(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(v) for (ns, _), v in sorted(self._pod_groups.items()) if namespace in (None, ns)
        ]

    def workload(self, workload: str) -> dict[str, Any] | None:
        rec = self._workloads.get(workload)
        return copy.deepcopy(rec) if rec is not None else None

    def workloads(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(v) for _, v in sorted(self._workloads.items())]

    def expected_pod_group(self, namespace: str, name: str) -> str | None:
        rec = self._pods.get((namespace, name))
        return rec.get("podGroup") if rec else None
