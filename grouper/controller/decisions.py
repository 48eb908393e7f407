"""What the controller decided and did, per pod, per PodGroup and per workload — for the HTTP API.

Plain dicts (JSON-able) behind a small interface; bounded by the cluster: records are dropped when
their pod or workload disappears. Errors keep their time so ``/podgroups`` can say "failing since".

Built so that no read costs O(cluster) on the event loop:

- records are **copy-on-write**: a write replaces a record, never mutates it, so readers get the stored
  dicts themselves (read-only by contract) instead of deep copies of the whole store;
- indexes by namespace, by PodGroup (its pods) and of failing pods answer the API's questions directly.

Only the controller's event loop writes.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from grouper.core.decision import Decision


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


PodKey = tuple[str, str]
Record = dict[str, Any]


class DecisionStore:
    def __init__(self) -> None:
        self._pods: dict[str, dict[str, Record]] = {}  # namespace -> pod name -> record
        self._pod_groups: dict[str, dict[str, Record]] = {}  # namespace -> PodGroup name -> record
        self._group_pods: dict[PodKey, set[str]] = {}  # (namespace, PodGroup) -> pod names deciding for it
        self._failing: dict[str, set[str]] = {}  # namespace -> pods whose latest decision failed
        self._workloads: dict[str, Record] = {}
        self.updated = time.monotonic()

    # ------------------------------------------------------------------ writes (controller)

    def _put_pod(self, namespace: str, name: str, rec: Record) -> None:
        old = self._pods.get(namespace, {}).get(name)
        if old is not None and old.get("podGroup"):
            self._unlink(namespace, str(old["podGroup"]), name)
        self._pods.setdefault(namespace, {})[name] = rec
        if rec.get("podGroup"):
            self._group_pods.setdefault((namespace, str(rec["podGroup"])), set()).add(name)
        failing = self._failing.setdefault(namespace, set())
        if rec.get("outcome") == "error":
            failing.add(name)
        else:
            failing.discard(name)
        self.updated = time.monotonic()

    def _unlink(self, namespace: str, pod_group: str, pod: str) -> None:
        names = self._group_pods.get((namespace, pod_group))
        if names is not None:
            names.discard(pod)
            if not names:
                del self._group_pods[(namespace, pod_group)]

    def record_decision(self, d: Decision, workload: str) -> None:
        rec = self._pods.get(d.pod_namespace, {}).get(d.pod_name, {})
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
        self._put_pod(d.pod_namespace, d.pod_name, new)

    def record_pod_error(self, namespace: str, name: str, message: str) -> None:
        rec = self._pods.get(namespace, {}).get(name) or {"pod": {"namespace": namespace, "name": name}}
        self._put_pod(namespace, name, {**rec, "lastError": message, "lastErrorTime": _now()})

    def record_pod_patched(self, namespace: str, name: str, result: str) -> None:
        rec = self._pods.get(namespace, {}).get(name)
        if rec is not None:
            self._put_pod(namespace, name, {**rec, "patched": {"result": result, "at": _now()}})

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
        rec = self._pod_groups.get(namespace, {}).get(name, {})
        now = _now()
        self._pod_groups.setdefault(namespace, {})[name] = {
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
        self.updated = time.monotonic()

    def record_workload(self, workload: str, **fields: Any) -> None:
        rec = {**self._workloads.get(workload, {"workload": workload}), **fields, "reconciledAt": _now()}
        if fields.get("error"):
            rec["lastError"], rec["lastErrorTime"] = fields["error"], rec["reconciledAt"]
        self._workloads[workload] = rec
        self.updated = time.monotonic()

    def forget_pod(self, namespace: str, name: str) -> None:
        pods = self._pods.get(namespace)
        rec = pods.pop(name, None) if pods is not None else None
        if rec is None:
            return
        if rec.get("podGroup"):
            self._unlink(namespace, str(rec["podGroup"]), name)
        self._failing.get(namespace, set()).discard(name)
        if not pods:
            del self._pods[namespace]
            self._failing.pop(namespace, None)

    def forget_pod_group(self, namespace: str, name: str) -> None:
        groups = self._pod_groups.get(namespace)
        if groups is not None and groups.pop(name, None) is not None and not groups:
            del self._pod_groups[namespace]

    def forget_workload(self, workload: str) -> None:
        self._workloads.pop(workload, None)
        for ns, groups in list(self._pod_groups.items()):
            for name in [n for n, v in groups.items() if v.get("workload") == workload]:
                self.forget_pod_group(ns, name)

    # ------------------------------------------------------------------ reads (API, tests): read-only records

    def pod(self, namespace: str, name: str) -> Record | None:
        return self._pods.get(namespace, {}).get(name)

    def pods(self, namespace: str | None = None) -> list[Record]:
        if namespace is not None:
            return [v for _, v in sorted(self._pods.get(namespace, {}).items())]
        return [v for ns in sorted(self._pods) for _, v in sorted(self._pods[ns].items())]

    def pods_of_group(self, namespace: str, pod_group: str) -> list[Record]:
        """Pods whose latest decision names this PodGroup (its members now, never another group's)."""
        names = sorted(self._group_pods.get((namespace, pod_group), ()))
        ns_pods = self._pods.get(namespace, {})
        return [ns_pods[n] for n in names if n in ns_pods]

    def failing_pods(self, namespace: str | None = None) -> list[Record]:
        """Pods whose latest decision ended in an error."""
        spaces = [namespace] if namespace is not None else sorted(self._failing)
        out: list[Record] = []
        for ns in spaces:
            ns_pods = self._pods.get(ns, {})
            out.extend(ns_pods[n] for n in sorted(self._failing.get(ns, ())) if n in ns_pods)
        return out

    def pod_group(self, namespace: str, name: str) -> Record | None:
        return self._pod_groups.get(namespace, {}).get(name)

    def pod_groups(self, namespace: str | None = None) -> list[Record]:
        if namespace is not None:
            return [v for _, v in sorted(self._pod_groups.get(namespace, {}).items())]
        return [v for ns in sorted(self._pod_groups) for _, v in sorted(self._pod_groups[ns].items())]

    def workload(self, workload: str) -> Record | None:
        return self._workloads.get(workload)

    def workloads(self) -> list[Record]:
        return [v for _, v in sorted(self._workloads.items())]

    def sizes(self) -> dict[str, int]:
        return {
            "pods": sum(len(v) for v in self._pods.values()),
            "podGroups": sum(len(v) for v in self._pod_groups.values()),
            "workloads": len(self._workloads),
        }
