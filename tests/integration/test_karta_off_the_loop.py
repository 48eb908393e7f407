"""A slow Karta definition from ``--definitions`` (the operator's own catalog, trusted but not vetted for
speed) is evaluated off the event loop: while its jq takes seconds in the sandbox, the loop keeps
answering (probes, watches, Lease renewals, other workloads). Before, only cluster Kartas were waited
for in a thread and a built-in one stalled the whole service for as long as its jq ran.

Against the real API server: the test plays the NIM operator (creates the NIMService and its pods)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from controller.harness import ANNOTATION, REPO, GrouperThread, label_namespace, owned_pod
from kube import Kube, wait_until

from grouper.karta import sandbox

NIMSERVICES = "/apis/apps.nvidia.com/v1alpha1/namespaces/{ns}/nimservices"
SLOW_KEY = '(("ab" * 8000) | [splits("a")] | length) as $_ | .metadata.labels["app.kubernetes.io/name"]'
PODS = 3


def slow_catalog(tmp_path: Path) -> Path:
    """The built-in NIMService definition with a group key that takes ~1 s of jq per pod on this box."""
    d = yaml.safe_load((REPO / "definitions" / "apps-nvidia-com-nimservice-v1alpha1.yaml").read_text())
    d["spec"]["optimizationInstructions"]["gangScheduling"]["podGroups"][0]["members"][0]["groupByKeyPaths"] = [SLOW_KEY]
    out = tmp_path / "catalog"
    out.mkdir()
    (out / "nimservice.yaml").write_text(yaml.safe_dump(d))
    return out


class JqWatch:
    """Wraps the sandbox's jq queries of the slow key: notes the thread each runs on and, before running
    it, waits until the grouper's loop has run a callback scheduled after the query began — which only
    happens if the loop is free while the query is in flight (event order, not a clock)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, loop_thread: int, real: Callable[..., Any]) -> None:
        self.loop, self.loop_thread, self.real = loop, loop_thread, real
        self.on_loop = 0  # slow-key queries run on the loop's thread
        self.loop_ran = 0  # slow-key queries during which the loop ran a callback
        self.queries = 0

    def query(self, worker: Any, request: dict[str, Any], timeout_s: float | None) -> dict[str, Any]:
        if 'splits("a")' in str(request.get("p", "")):
            self.queries += 1
            if threading.get_ident() == self.loop_thread:
                self.on_loop += 1  # waiting for the loop here would wait for ourselves
            else:
                ran = threading.Event()
                self.loop.call_soon_threadsafe(ran.set)
                if ran.wait(30):
                    self.loop_ran += 1
        return self.real(worker, request, timeout_s)


def test_a_slow_built_in_definition_does_not_stall_the_loop(
    cluster: Any, kube: Kube, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = namespace
    label_namespace(kube, ns)
    with GrouperThread(cluster, ns, definitions=str(slow_catalog(tmp_path))) as g:

        async def thread_id() -> int:
            return threading.get_ident()

        watch = JqWatch(g.loop, g.call(thread_id()), sandbox._Worker.query)
        monkeypatch.setattr(sandbox._Worker, "query", lambda worker, request, timeout_s: watch.query(
            worker, request, timeout_s))
        owner = kube.create(NIMSERVICES.format(ns=ns), {
            "apiVersion": "apps.nvidia.com/v1alpha1",
            "kind": "NIMService",
            "metadata": {"name": "llm"},
            "spec": {"replicas": PODS, "schedulerName": "kai-scheduler"},
        })
        for i in range(PODS):
            kube.create(f"/api/v1/namespaces/{ns}/pods", owned_pod(f"llm-{i}", {"app.kubernetes.io/name": "llm"}, owner))
        pods = wait_until(
            lambda: (ps := kube.list(f"/api/v1/namespaces/{ns}/pods")) and len(ps) == PODS
            and all((p["metadata"].get("annotations") or {}).get(ANNOTATION) for p in ps) and ps,
            90,
            what="the NIMService's pods grouped",
        )
    assert {p["metadata"]["annotations"][ANNOTATION] for p in pods} == {f"pg-{owner['metadata']['uid']}-llm"}
    assert watch.queries >= 1, "the slow key went through the sandbox"
    assert watch.on_loop == 0, f"{watch.on_loop} of {watch.queries} jq queries of the definition ran on the event loop"
    assert watch.loop_ran == watch.queries, "the loop ran on while each of the definition's jq queries was in flight"
