"""Run a real grouper service (``grouper.runtime.Service``) in-process against the test cluster.

The service gets its own asyncio loop in a background thread, so tests stay synchronous (the ``kube``
client, ``wait_until``) while the controller runs concurrently exactly as in ``grouper run``. Every
grouper is scoped to the test's namespace with ``--namespace-label-selector`` so objects left behind by
other tests never reach it (and never count in its metrics).
"""

from __future__ import annotations

import asyncio
import copy
import socket
import sys
import threading
import time
import uuid
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

from grouper.kube import config as kubeconfig
from grouper.observability.metrics import Metrics
from grouper.runtime import RunSettings, Service

REPO = Path(__file__).resolve().parents[2]
GROUPER = Path(sys.executable).with_name("grouper")  # the console script of this venv


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

T = TypeVar("T")
WRITE_VERBS = ("create", "update", "patch", "delete")


def scope_label(namespace: str) -> str:
    return f"grouper-test={namespace}"


def label_namespace(kube: Any, namespace: str) -> None:
    """Put the label the scoped grouper selects on."""
    kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {"grouper-test": namespace}}})


class GrouperThread:
    def __init__(
        self,
        cluster: Any,
        namespace: str | None = None,
        *,
        token: str | None = None,
        identity: str | None = None,
        **settings: Any,
    ) -> None:
        base: dict[str, Any] = {
            "http_bind_address": "127.0.0.1:0",
            "http_auth": "none",  # these tests read the API on loopback; tests/integration/test_api_auth.py covers auth
            "definitions": str(REPO / "definitions"),
            "log_level": "info",
            "shutdown_drain_seconds": 5.0,
        }
        if namespace is not None:
            base["namespace_label_selector"] = scope_label(namespace)
        base.update(settings)
        self.settings = RunSettings(**base)
        self.metrics = Metrics()
        self.service = Service(
            self.settings,
            config=kubeconfig.explicit(
                cluster.server, token=token or cluster.admin_token, ca_file=cluster.ca_file
            ),
            metrics=self.metrics,
            identity=identity or f"test-{uuid.uuid4().hex[:8]}",
        )
        self.loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self.exit_code: int | None = None
        self.error: BaseException | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self, *, ready_timeout: float = 90.0) -> GrouperThread:
        started = threading.Event()

        def main() -> None:
            asyncio.set_event_loop(self.loop)
            self._stop = asyncio.Event()
            started.set()
            try:
                self.exit_code = self.loop.run_until_complete(self.service.run(self._stop))
            except BaseException as e:  # surfaced by wait_ready / stop
                self.error = e
            finally:
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
                self.loop.close()

        self._thread = threading.Thread(target=main, name="grouper", daemon=True)
        self._thread.start()
        started.wait(10)
        self.wait_ready(ready_timeout)
        return self

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.error is not None:
                raise RuntimeError(f"grouper failed to start: {self.error!r}") from self.error
            ctl = self.service.controller
            if (
                ctl is not None
                and self.service.status is not None and self.service.status.health_snapshot().synced
                and (self.service.leader is not None or ctl.workers.running)
            ):
                return
            if time.monotonic() > deadline:
                raise TimeoutError("grouper not ready")
            time.sleep(0.05)

    def stop(self, timeout: float = 30.0, *, release: bool = True) -> None:
        """Clean shutdown (SIGTERM path). ``release=False`` simulates a crash of the leader: no lease release."""
        if self._thread is None or not self._thread.is_alive():
            return
        if not release and self.service.leader is not None:
            leader = self.service.leader

            async def _no_release() -> None:
                return None

            leader.release = _no_release  # type: ignore[method-assign]
        self.begin_stop()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("grouper did not stop")
        if self.error is not None:
            raise RuntimeError(f"grouper crashed: {self.error!r}") from self.error

    def begin_stop(self) -> None:
        """What SIGTERM does, without waiting for the service to stop (:meth:`stop` waits)."""
        assert self._stop is not None
        self.loop.call_soon_threadsafe(self._stop.set)

    def __enter__(self) -> GrouperThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ inspection

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        """Run ``coro`` on the grouper's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    @property
    def controller(self) -> Any:
        return self.service.controller

    @property
    def store(self) -> Any:
        return self.service.store

    def writes(self, resources: tuple[str, ...] = ("podgroups", "pods")) -> float:
        """Write requests sent for these resources (any status code)."""
        total = 0.0
        for metric in self.metrics.registry.collect():
            if metric.name != "podgrouper_api_requests":
                continue
            for s in metric.samples:
                if (
                    s.name.endswith("_total")
                    and s.labels["verb"] in WRITE_VERBS
                    and s.labels["resource"] in resources
                ):
                    total += s.value
        return total

    def requests(self, verb: str, resource: str) -> float:
        total = 0.0
        for metric in self.metrics.registry.collect():
            if metric.name != "podgrouper_api_requests":
                continue
            for s in metric.samples:
                if (
                    s.name.endswith("_total")
                    and s.labels["verb"] == verb
                    and s.labels["resource"] == resource
                ):
                    total += s.value
        return total

    def wait_idle(self, timeout: float = 30.0, settle: float = 0.5) -> None:
        """Until the queue is empty and nothing is processed for ``settle`` seconds."""
        deadline = time.monotonic() + timeout
        quiet_since: float | None = None
        while True:
            ctl = self.controller
            busy = ctl is None or len(ctl.queue) > 0 or bool(ctl.queue.processing)
            now = time.monotonic()
            if busy:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            elif now - quiet_since >= settle:
                return
            if now > deadline:
                raise TimeoutError("grouper did not become idle")
            time.sleep(0.05)


# ---------------------------------------------------------------------- workloads and reads for the tests

ANNOTATION = "pod-group-name"
SUBGROUP = "kai.scheduler/subgroup-name"
PG_PATH = "/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups"


def container() -> list[dict[str, Any]]:
    return [{"name": "c", "image": "registry.example.com/train:1", "command": ["sleep", "1"]}]


def job_pod_spec() -> dict[str, Any]:
    """The pod spec of every test Job: scheduled by KAI, runs once."""
    return {"schedulerName": "kai-scheduler", "restartPolicy": "Never", "containers": container()}


def job(
    name: str,
    parallelism: int = 1,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {"spec": job_pod_spec()},
        },
    }


def deployment(name: str, replicas: int = 1) -> dict[str, Any]:
    """A Deployment of ``replicas`` pods labelled ``app=<name>``."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"schedulerName": "kai-scheduler", "containers": container()},
            },
        },
    }


def owned_pod(name: str, labels: dict[str, str], owner: dict[str, Any]) -> dict[str, Any]:
    """A pod of the test's workload ``owner`` (as created): the test plays the workload's operator."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": labels,
            "ownerReferences": [{
                "apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True,
            }],
        },
        "spec": job_pod_spec(),
    }


def pods(kube: Any, ns: str, selector: str | None = None) -> list[dict[str, Any]]:
    return kube.list(f"/api/v1/namespaces/{ns}/pods", label_selector=selector)


def pod_groups(kube: Any, ns: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in kube.list(PG_PATH.format(ns=ns))}


def annotated(kube: Any, ns: str, count: int, selector: str | None = None) -> list[dict[str, Any]] | None:
    ps = pods(kube, ns, selector)
    if len(ps) == count and all((p["metadata"].get("annotations") or {}).get(ANNOTATION) for p in ps):
        return ps
    return None


def jobset(name: str) -> dict[str, Any]:
    def rj(rj_name: str, replicas: int, parallelism: int) -> dict[str, Any]:
        return {
            "name": rj_name,
            "replicas": replicas,
            "template": {
                "spec": {
                    "parallelism": parallelism,
                    "completions": parallelism,
                    "template": {"spec": job_pod_spec()},
                }
            },
        }

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"replicatedJobs": [rj("leader", 1, 1), rj("workers", 2, 2)]},
    }


def child_jobs(js: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The Jobs the JobSet operator would create: owned by the JobSet, jobset labels on Job and pods."""
    name, uid = js["metadata"]["name"], js["metadata"]["uid"]
    for rj in js["spec"]["replicatedJobs"]:
        for idx in range(rj["replicas"]):
            labels = {
                "jobset.sigs.k8s.io/jobset-name": name,
                "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
                "jobset.sigs.k8s.io/job-index": str(idx),
            }
            spec = copy.deepcopy(rj["template"]["spec"])
            spec["template"].setdefault("metadata", {})["labels"] = dict(labels)
            yield {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": f"{name}-{rj['name']}-{idx}",
                    "labels": labels,
                    "ownerReferences": [
                        {
                            "apiVersion": "jobset.x-k8s.io/v1alpha2",
                            "kind": "JobSet",
                            "name": name,
                            "uid": uid,
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": spec,
            }

